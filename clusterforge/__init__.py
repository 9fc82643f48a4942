"""clusterforge: declarative infrastructure-as-code for AI clusters (CLI and glue)."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # the version is read from the package metadata on first use (importlib.metadata is not free),
    # so `import clusterforge.cli` stays cheap (PEP 562)
    if name == "__version__":
        from blueprints.version import __version__

        return __version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
