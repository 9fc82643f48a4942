"""Every string a blueprint holds has an allow-list (issue #33): a kind of ``blueprints.values`` or a pattern of its
own. A new field added as a bare ``str`` would let any characters through to the files it reaches."""

from __future__ import annotations

from typing import Any

from blueprints.models import Blueprint
from blueprints.values import KINDS


def _strings(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    defs = schema.get("$defs", {})
    out: list[tuple[str, dict[str, Any]]] = []

    def walk(s: dict[str, Any], where: str, seen: frozenset[str]) -> None:
        ref = s.get("$ref")
        if ref:
            name = ref.split("/")[-1]
            if name not in seen:
                walk(defs[name], where, seen | {name})
            return
        for k in ("anyOf", "oneOf", "allOf"):
            for sub in s.get(k, []):
                walk(sub, where, seen)
        if s.get("type") == "string" and "enum" not in s and "const" not in s:
            out.append((where, s))
        for name, sub in s.get("properties", {}).items():
            walk(sub, f"{where}.{name}", seen)
        for key, sub in s.get("patternProperties", {}).items():
            out.append((f"{where}.<key>", {"pattern": key}))
            walk(sub, f"{where}.*", seen)
        if isinstance(s.get("additionalProperties"), dict):
            names = s.get("propertyNames", {})
            if "enum" not in names:  # keys that are one of a list are allowed by that list
                out.append((f"{where}.<key>", names))
            walk(s["additionalProperties"], f"{where}.*", seen)
        if isinstance(s.get("items"), dict):
            walk(s["items"], f"{where}[]", seen)

    walk(schema, "", frozenset())
    return out


def test_no_blueprint_string_is_left_without_an_allow_list() -> None:
    strings = _strings(Blueprint.model_json_schema())
    assert len(strings) >= 80  # every field, list item, mapping key and value that holds a string
    bare = [where for where, s in strings if not s.get("pattern")]
    assert bare == [], f"strings without a kind or pattern: {bare}"


def test_every_pattern_in_the_schema_is_anchored() -> None:
    """JSON Schema patterns match anywhere unless anchored: an editor would accept `eth0; reboot` for `eth0`."""
    for where, s in _strings(Blueprint.model_json_schema()):
        pattern = s["pattern"]
        assert pattern.startswith("^") and pattern.endswith("$"), (where, pattern)


def test_every_kind_names_its_source_and_fix() -> None:
    for kind in KINDS.values():
        assert kind.source and kind.fix and kind.what, kind.name
        assert kind.max_length >= 1, kind.name
