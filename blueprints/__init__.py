"""clusterforge blueprints: typed models, YAML loader with positions, hardware catalog, rules.

Typical use::

    from blueprints import load_blueprint, check
    loaded = load_blueprint("blueprints/examples/aws-p5-efa-lustre.yaml")   # BlueprintInvalid on errors
    findings = check(loaded)                                               # pre-deploy rules
"""

from .catalog import Catalog, catalog
from .findings import BlueprintInvalid, Finding
from .loader import LoadedBlueprint, load_blueprint, parse_blueprint
from .models import Blueprint
from .rules import all_rules, check

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
