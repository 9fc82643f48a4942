"""A tiny block-style YAML emitter that records the 1-based line of every key and list item.

The rule tests mutate example blueprints as plain data, write them with :func:`emit` and then
assert that a finding points at ``lines[path]``; the expected line therefore comes from this
emitter, independently of the loader under test. Strings are written JSON-quoted (valid YAML
double-quoted scalars), so any unicode or control character survives the round trip.
"""

from __future__ import annotations

import json
import math
from typing import Any

Path = tuple[Any, ...]


def scalar(v: Any) -> str:
    """YAML text of a scalar: ``null``, ``true``/``false``, numbers, or a JSON-quoted string."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    return json.dumps(str(v))


def emit(doc: Any) -> tuple[str, dict[Path, int]]:
    """``(yaml_text, lines)`` for ``doc`` (dicts, lists, scalars); ``lines[path]`` is 1-based."""
    out: list[str] = []
    lines: dict[Path, int] = {(): 1}

    def block(node: Any, indent: int, path: Path) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                lines[path + (k,)] = len(out) + 1
                entry(" " * indent + f"{scalar(k)}:", v, indent, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                lines[path + (i,)] = len(out) + 1
                if isinstance(v, dict) and v:
                    first = True
                    for k, vv in v.items():
                        lines[path + (i, k)] = len(out) + 1
                        prefix = " " * indent + ("- " if first else "  ")
                        entry(prefix + f"{scalar(k)}:", vv, indent + 2, path + (i, k))
                        first = False
                elif isinstance(v, list) and v:
                    out.append(" " * indent + "-")
                    block(v, indent + 2, path + (i,))
                else:
                    out.append(" " * indent + "- " + inline(v))

    def entry(head: str, v: Any, indent: int, path: Path) -> None:
        if isinstance(v, (dict, list)) and v:
            out.append(head)
            block(v, indent + 2, path)
        else:
            out.append(head + " " + inline(v))

    def inline(v: Any) -> str:
        if isinstance(v, dict):
            return "{}"
        if isinstance(v, list):
            return "[]"
        return scalar(v)

    if isinstance(doc, (dict, list)) and doc:
        block(doc, 0, ())
    else:
        out.append(inline(doc))
    return "\n".join(out) + "\n", lines
