"""JSON Schema of the blueprint (``blueprints/schema/blueprint.schema.json``, for editors)."""

from __future__ import annotations

import json
from pathlib import Path

from .models import Blueprint

SCHEMA_PATH = Path(__file__).parent / "schema" / "blueprint.schema.json"
"""Where the committed schema lives; a test fails when it is stale."""


SHORTHANDS: list[tuple[str | None, str, dict]] = [
    ("Hardware", "gpu", {"type": "string", "pattern": r"^[^:]+(:\d+)?$",
                         "description": "Shorthand `MODEL:COUNT`, e.g. `h100-sxm:8`."}),
    ("AwsTarget", "capacity", {"type": "string", "enum": ["on-demand", "spot"],
                               "description": "Shorthand for `{type: on-demand}` or `{type: spot}`."}),
    ("NodeGroup", "sandbox", {"type": "string", "enum": ["container", "kata", "gvisor", "vm"],
                              "description": "Shorthand for `{runtime: ...}`."}),
    ("Sandbox", "nvswitch", {"type": "string", "enum": ["full-passthrough", "shared-nvswitch"],
                             "description": "Shorthand for `{mode: ...}`."}),
    (None, "network", {"type": "string", "enum": ["efa", "infiniband", "roce", "ethernet"],
                       "description": "Shorthand for `{fabric: ...}`."}),
    (None, "orchestrator", {"type": "string", "enum": ["none", "kubernetes", "slurm"],
                            "description": "Shorthand for `{kind: ...}`."}),
]
"""(model in $defs or None for the root, property, string schema): shorthand forms the loader accepts,
added to the schema so editors accept them too."""


def _allow_string(prop: dict, string_schema: dict) -> dict:
    keep = {k: prop[k] for k in ("description", "default", "title") if k in prop}
    body = {k: v for k, v in prop.items() if k not in keep}
    return {**keep, "anyOf": [body, string_schema]}


def schema_dict() -> dict:
    """The blueprint's JSON Schema (draft 2020-12) as a dict, with ``$schema`` and ``$id``.

    Shorthand string forms (:data:`SHORTHANDS`) are added next to the structured form.
    """
    s = Blueprint.model_json_schema(by_alias=True)
    for model, prop, string_schema in SHORTHANDS:
        props = s["properties"] if model is None else s["$defs"][model]["properties"]
        props[prop] = _allow_string(props[prop], string_schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://clusterforge.dev/schema/blueprint.schema.json", **s}


def schema_json() -> str:
    """The schema as indented JSON text ending in a newline (the committed file's exact text)."""
    return json.dumps(schema_dict(), indent=2, sort_keys=False) + "\n"
