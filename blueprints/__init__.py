"""clusterforge blueprints: typed models, YAML loader with positions, hardware catalog, rules.

Typical use::

    from blueprints import load_blueprint, check
    loaded = load_blueprint("blueprints/examples/aws-p5-efa-lustre.yaml")   # BlueprintInvalid on errors
    findings = check(loaded)                                               # pre-deploy rules
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# `catalog` is also the name of a submodule: the first `import blueprints.catalog` (from any
# module) would set the package attribute to the module and shadow a lazily exported function.
# catalog.py imports only yaml, so it is imported eagerly.
from .catalog import Catalog, catalog

if TYPE_CHECKING:
    from .findings import BlueprintInvalid, Finding
    from .loader import LoadedBlueprint, load_blueprint, parse_blueprint
    from .models import Blueprint
    from .rules import all_rules, check

# Names are imported on first use (PEP 562), so `import blueprints.errors` or `clusterforge --help`
# does not pay for building the pydantic models and registering the rules.
_LAZY = {
    "Blueprint": "models",
    "BlueprintInvalid": "findings",
    "Finding": "findings",
    "LoadedBlueprint": "loader",
    "all_rules": "rules",
    "check": "rules",
    "load_blueprint": "loader",
    "parse_blueprint": "loader",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Blueprint",
    "BlueprintInvalid",
    "Catalog",
    "Finding",
    "LoadedBlueprint",
    "all_rules",
    "catalog",
    "check",
    "load_blueprint",
    "parse_blueprint",
]
