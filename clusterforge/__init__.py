"""clusterforge: declarative infrastructure-as-code for AI clusters (CLI and glue)."""

from blueprints.version import __version__

__all__ = ["__version__"]
