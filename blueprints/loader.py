"""Load a blueprint YAML file into a :class:`~blueprints.models.Blueprint`, keeping positions.

Every problem becomes a :class:`~blueprints.findings.Finding` with the file, line and column
of the offending key or value, so the CLI prints ``FILE:LINE:COL: rule-id: message — fix``
and never a traceback. Aliases are allowed, but the expanded document is capped in size
(a "billion laughs" document is an error, not a hang).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from .findings import BlueprintInvalid, Finding
from .models import API_VERSION, Blueprint

__all__ = ["LoadedBlueprint", "MAX_NODES", "load_blueprint", "parse_blueprint"]

MAX_NODES = 200_000
"""Most YAML nodes the expanded document may hold (anchor bombs stop here)."""

MAX_BYTES = 16 * 1024 * 1024
"""Largest blueprint file read (16 MiB)."""

Path_ = tuple[Any, ...]


@dataclass(frozen=True)
class LoadedBlueprint:
    """A validated blueprint with the positions of its keys.

    ``positions`` maps a document path (tuple of keys / indexes) to its 1-based ``(line, col)``.
    """

    blueprint: Blueprint
    file: str
    positions: dict[Path_, tuple[int, int]] = field(repr=False)
    data: dict[str, Any] = field(repr=False, default_factory=dict)

    def locate(self, path: Path_) -> tuple[int, int]:
        """Position of ``path``, or of its longest existing prefix; ``(1, 1)`` if none."""
        return _locate(self.positions, path)

    def finding(self, rule_id: str, severity: str, message: str, fix: str, source: str, path: Path_) -> Finding:
        """Build a :class:`Finding` located at ``path`` in this file."""
        line, col = self.locate(path)
        return Finding(rule_id, severity, message, fix, source, self.file, line, col, tuple(path))  # type: ignore[arg-type]


def _locate(positions: dict[Path_, tuple[int, int]], path: Path_) -> tuple[int, int]:
    p = tuple(path)
    while p:
        if p in positions:
            return positions[p]
        p = p[:-1]
    return positions.get((), (1, 1))


class _AliasBomb(Exception):
    pass


def _to_plain(node: Any, path: Path_, positions: dict[Path_, tuple[int, int]], budget: list[int]) -> Any:
    """Convert ruamel round-trip nodes to plain Python, recording key positions, with a node budget."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _AliasBomb()
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for k, v in node.items():
            try:
                line, col = node.lc.key(k)
                positions.setdefault(path + (k,), (line + 1, col + 1))
            except (KeyError, TypeError, AttributeError):
                pass
            key = k if isinstance(k, (str, int, float, bool)) or k is None else str(k)
            out[key] = _to_plain(v, path + (k,), positions, budget)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, v in enumerate(node):
            try:
                line, col = node.lc.item(i)
                positions.setdefault(path + (i,), (line + 1, col + 1))
            except (KeyError, TypeError, AttributeError, IndexError):
                pass
            items.append(_to_plain(v, path + (i,), positions, budget))
        return items
    if isinstance(node, str):
        return str(node)
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if node is None:
        return None
    return str(node)  # timestamps and other scalars: as text; the model decides


def _err(file: str, rule_id: str, message: str, fix: str, line: int = 1, col: int = 1, path: Path_ = ()) -> Finding:
    return Finding(rule_id, "error", message, fix, "", file, line, col, path)


def _strip_union_tags(loc: tuple[Any, ...], data: Any) -> Path_:
    """Turn a pydantic error ``loc`` into a document path: drop union tags and validator names."""
    out: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and part.replace("_", "") and part not in node:
            # a union tag ('aws'), a function-validator label, or a missing/unknown key: keep only
            # the last missing key so the message can name it
            if part in ("aws", "onprem", "efa", "infiniband", "roce", "ethernet", "lustre", "nfs", "none",
                        "kubernetes", "slurm", "on-demand", "spot", "capacity-block", "reservation") or "[" in part:
                continue
            out.append(part)
            node = None
        else:
            out.append(part)
            node = None
    return tuple(out)


_FIELD_NAMES_CACHE: dict[type, list[str]] = {}


def _model_at(path: Path_, data: Any) -> list[str]:
    """Field names allowed at a document path (for 'did you mean'); empty if unknown.

    Discriminated unions are resolved with the document's own tag value (``provider: onprem``
    selects ``OnpremTarget``), so the hint names the keys of the member the user chose.
    """
    model: Any = Blueprint
    node: Any = data
    for part in path[:-1]:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        field_info = getattr(model, "model_fields", {}).get(part)
        if field_info is None:
            return []
        node = node.get(part) if isinstance(node, dict) else None
        model = _pick_model(field_info.annotation, node)
        if model is None:
            return []
    return [f.alias or n for n, f in model.model_fields.items()]


def _candidate_models(annotation: Any, out: list[Any]) -> list[Any]:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        out.append(annotation)
    for arg in typing.get_args(annotation):
        _candidate_models(arg, out)
    return out


def _pick_model(annotation: Any, node: Any) -> Any:
    """The model class for ``node`` inside ``annotation`` (list[X], X | None, tagged unions)."""
    import typing

    models = _candidate_models(annotation, [])
    if len(models) <= 1:
        return models[0] if models else None
    if isinstance(node, list):
        node = node[0] if node else None
    if isinstance(node, dict):
        for m in models:
            for name, f in m.model_fields.items():
                if typing.get_origin(f.annotation) is typing.Literal and name in node:
                    if node[name] in typing.get_args(f.annotation):
                        return m
    return None


def _schema_findings(err: ValidationError, data: dict[str, Any], file: str, positions: dict[Path_, tuple[int, int]]) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[tuple[Path_, str]] = set()
    for e in err.errors(include_url=False):
        path = _strip_union_tags(tuple(e["loc"]), data)
        etype = e["type"]
        dotted = ".".join(str(p) for p in path) or "(document)"
        if etype == "extra_forbidden":
            key = path[-1] if path else "?"
            allowed = _model_at(path, data)
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"allowed keys: {', '.join(allowed)}" if allowed else "see `clusterforge schema`"
            rule_id, msg, fix = "schema-unknown-key", f"unknown key `{dotted}`", f"remove it or fix the spelling ({hint})"
        elif etype == "missing":
            rule_id, msg, fix = "schema-missing-key", f"`{dotted}` is required", f"add `{path[-1] if path else dotted}:` here"
        elif etype in ("literal_error", "enum", "union_tag_invalid", "union_tag_not_found"):
            ctx = e.get("ctx") or {}
            expected = ctx.get("expected") or ctx.get("expected_tags") or ""
            got = e.get("input")
            rule_id = "schema-invalid-value"
            msg = f"`{dotted}` is {got!r}, not one of the allowed values"
            fix = f"use one of {expected}" if expected else "see `clusterforge schema`"
            if etype == "union_tag_not_found":
                msg = f"`{dotted}` needs its `{ctx.get('discriminator', 'kind')}` key"
                fix = f"add `{str(ctx.get('discriminator', 'kind')).strip(chr(39))}:` with one of the allowed values"
        elif etype in ("model_type", "dict_type", "list_type", "model_attributes_type"):
            rule_id = "schema-wrong-type"
            want = "a mapping" if etype != "list_type" else "a list"
            msg = f"`{dotted}` must be {want}, got {type(e.get('input')).__name__}"
            fix = f"write `{dotted}` as {want}"
        elif etype.endswith("_type") or etype.endswith("_parsing"):
            rule_id = "schema-wrong-type"
            msg = f"`{dotted}`: {e['msg'].lower()} (got {e.get('input')!r})"
            fix = "change the value to the expected type"
        else:
            rule_id = "schema-invalid-value"
            text = e["msg"]
            if text.startswith("Value error, "):
                text = text[len("Value error, "):]
            msg = f"`{dotted}`: {text}"
            fix = "correct the value (see `clusterforge schema` for the allowed form)"
            if e["type"] == "string_pattern_mismatch" and path and path[-1] == "name":
                fix = "use lower-case letters, digits and `-`, starting with a letter"
        if (path, rule_id) in seen:
            continue
        seen.add((path, rule_id))
        line, col = _locate(positions, path)
        findings.append(Finding(rule_id, "error", msg, fix, "", file, line, col, path))
    findings.sort(key=lambda f: (f.line, f.col))
    return findings


def parse_blueprint(text: str, file: str = "<string>") -> LoadedBlueprint:
    """Parse and validate blueprint YAML ``text``; ``file`` is used in positions.

    Returns a :class:`LoadedBlueprint`. Raises :class:`~blueprints.findings.BlueprintInvalid`
    with one finding per problem (YAML syntax, duplicate keys, non-mapping document, alias bomb,
    wrong kind, unknown keys, wrong types, missing keys). Pre-deploy rules are not run here; see
    :func:`blueprints.rules.check`.
    """
    if not text.strip():
        raise BlueprintInvalid([_err(file, "blueprint-empty", "the file is empty",
                                     "write a blueprint (see blueprints/examples/ or `clusterforge schema`)")])
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        doc = yaml.load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = (e.problem or str(e)).strip().splitlines()[0]
        if "duplicate key" in str(e).lower() or type(e).__name__ == "DuplicateKeyError":
            return_err = _err(file, "yaml-duplicate-key", f"duplicate key: {problem}",
                              "remove one of the two entries", line, col)
        else:
            ctx = f" ({e.context})" if e.context else ""
            return_err = _err(file, "yaml-syntax", f"{problem}{ctx}", "fix the YAML syntax at this position", line, col)
        raise BlueprintInvalid([return_err]) from None
    except (YAMLError, ValueError, RecursionError) as e:
        raise BlueprintInvalid([_err(file, "yaml-syntax", str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                                     "fix the YAML syntax")]) from None
    positions: dict[Path_, tuple[int, int]] = {(): (1, 1)}
    try:
        data = _to_plain(doc, (), positions, [MAX_NODES])
    except _AliasBomb:
        raise BlueprintInvalid([_err(file, "yaml-too-large",
                                     f"the document expands to more than {MAX_NODES} nodes (aliases that multiply?)",
                                     "remove the nested anchors/aliases")]) from None
    except RecursionError:
        raise BlueprintInvalid([_err(file, "yaml-too-large", "the document nests too deeply (recursive alias?)",
                                     "remove the recursive anchor/alias")]) from None
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else "empty" if data is None else f"a {type(data).__name__}"
        raise BlueprintInvalid([_err(file, "yaml-not-mapping", f"the document is {kind}, not a mapping",
                                     "a blueprint is a mapping that starts with `apiVersion: clusterforge/v1`")])
    api, kind = data.get("apiVersion"), data.get("kind")
    if api is not None and api != API_VERSION or kind is not None and kind != "Blueprint":
        what = ("apiVersion", api) if api != API_VERSION else ("kind", kind)
        line, col = _locate(positions, (what[0],))
        raise BlueprintInvalid([_err(file, "blueprint-wrong-kind",
                                     f"this is not a clusterforge blueprint (`{what[0]}: {what[1]}`)",
                                     f"set `apiVersion: {API_VERSION}` and `kind: Blueprint`", line, col, (what[0],))])
    try:
        bp = Blueprint.model_validate(data)
    except ValidationError as e:
        raise BlueprintInvalid(_schema_findings(e, data, file, positions)) from None
    return LoadedBlueprint(blueprint=bp, file=file, positions=positions, data=data)


def load_blueprint(path: str | os.PathLike[str]) -> LoadedBlueprint:
    """Read and validate the blueprint at ``path``.

    Raises :class:`~blueprints.findings.BlueprintInvalid` for a missing file, a directory, a
    file that is not UTF-8 text (binary data), one larger than 16 MiB, and every error
    :func:`parse_blueprint` reports.
    """
    p = Path(path)
    file = str(path)
    if not p.exists():
        raise BlueprintInvalid([_err(file, "file-not-found", "no such file", "check the path")])
    if p.is_dir():
        raise BlueprintInvalid([_err(file, "file-is-directory", "this is a directory, not a blueprint file",
                                     "pass a .yaml file, e.g. blueprints/examples/local-workstation.yaml")])
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BlueprintInvalid([_err(file, "file-unreadable", e.strerror or str(e), "check the file's permissions")]) from None
    if len(raw) > MAX_BYTES:
        raise BlueprintInvalid([_err(file, "file-too-large", f"{len(raw)} bytes is larger than {MAX_BYTES}",
                                     "a blueprint is a small YAML file")])
    if b"\0" in raw:
        raise BlueprintInvalid([_err(file, "file-not-text", "the file holds binary data", "pass a YAML text file")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BlueprintInvalid([_err(file, "file-not-text", f"not UTF-8 text (byte {e.start})",
                                     "save the blueprint as UTF-8")]) from None
    return parse_blueprint(text, file)
