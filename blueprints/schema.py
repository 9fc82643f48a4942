"""JSON Schema of the blueprint (``blueprints/schema/blueprint.schema.json``, for editors)."""

from __future__ import annotations

import json
from pathlib import Path

from .models import Blueprint

SCHEMA_PATH = Path(__file__).parent / "schema" / "blueprint.schema.json"
"""Where the committed schema lives; a test fails when it is stale."""


def schema_dict() -> dict:
    """The blueprint's JSON Schema (draft 2020-12) as a dict, with ``$schema`` and ``$id``."""
    s = Blueprint.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://clusterforge.dev/schema/blueprint.schema.json", **s}


def schema_json() -> str:
    """The schema as indented JSON text ending in a newline (the committed file's exact text)."""
    return json.dumps(schema_dict(), indent=2, sort_keys=False) + "\n"
