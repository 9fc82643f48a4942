"""Load a blueprint YAML file into a :class:`~blueprints.models.Blueprint`, keeping positions.

Every problem becomes a :class:`~blueprints.findings.Finding` with the file, line and column
of the offending key or value, so the CLI prints ``FILE:LINE:COL: rule-id: message — fix``
and never a traceback. Aliases and ``<<`` merge keys are allowed, but the expanded document is
capped in size (a "billion laughs" document is an error, not a hang) and recursive aliases are
rejected.

Parsing uses PyYAML's composer on libyaml (C) when available: it yields the node graph with
the start mark of every node, without constructing any object from tags. Scalars are then
resolved with YAML 1.2 core-schema rules (``yes``/``on`` stay strings, as in editors and the
JSON Schema). This is about 25x faster than a pure-Python round-trip parser: a 4096-host
blueprint loads in about 0.1 s (``bench/bench_check.py``).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from .findings import BlueprintInvalid, Finding
from .models import API_VERSION, Blueprint
from .values import templated_strings

if TYPE_CHECKING:
    from .resolved import ResolvedCluster

__all__ = ["LOADER_FINDINGS", "MAX_NODES", "LoadedBlueprint", "load_blueprint", "parse_blueprint"]

MAX_NODES = 200_000
"""Most YAML nodes the expanded document may hold (anchor bombs stop here)."""

MAX_BYTES = 16 * 1024 * 1024
"""Largest blueprint file read (16 MiB)."""

LOADER_FINDINGS: dict[str, str] = {
    "file-not-found": "the path names no file",
    "file-is-directory": "the path is a directory",
    "file-not-regular": "the path is a device, socket or pipe",
    "file-unreadable": "the file cannot be read (permissions)",
    "file-too-large": f"the file is larger than {MAX_BYTES} bytes",
    "file-not-text": "the file holds binary data, bytes that are not UTF-8, or a control character",
    "yaml-syntax": "the file is not valid YAML (the position of the first error)",
    "yaml-duplicate-key": "a mapping names the same key twice",
    "yaml-multiple-documents": "the file holds more than one YAML document",
    "yaml-recursive-alias": "an alias refers to itself",
    "yaml-too-large": f"anchors and aliases expand the document past {MAX_NODES} nodes",
    "yaml-not-mapping": "the document is not a mapping",
    "blueprint-empty": "the file holds no document",
    "blueprint-wrong-kind": "the document is not a clusterforge blueprint (apiVersion, kind)",
    "value-template-syntax": "a key or value holds template delimiters (`{{`, `{%`, `{#` ...): blueprint values are "
                             "data, never templates",
    "schema-unknown-key": "a key the blueprint schema does not have (with the closest known key)",
    "schema-missing-key": "a required key is missing",
    "schema-wrong-type": "a value of the wrong type (a list where a mapping is expected ...)",
    "schema-invalid-value": "a value the schema does not allow (out of range, not one of the choices ...)",
}
"""Every finding id the loader reports while reading a file, before any rule runs, with what it means (``clusterforge
rules`` lists them; each finding's own line says what to change). All are errors."""

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

    @property
    def cluster(self) -> ResolvedCluster:
        """The resolved cluster of this blueprint (:func:`blueprints.resolved.resolve`: node groups
        with their hardware, node settings and predicates), built on first use and cached."""
        from .resolved import resolve

        return resolve(self.blueprint)

    def locate(self, path: Path_) -> tuple[int, int]:
        """Position of ``path``, or of its longest existing prefix; ``(1, 1)`` if none."""
        return _locate(self.positions, path)

    def finding(self, rule_id: str, severity: str, message: str, fix: str, source: str, path: Path_) -> Finding:
        """Build a :class:`Finding` located at ``path`` in this file."""
        line, col = self.locate(path)
        return Finding(rule_id, severity, one_line(message), one_line(fix), source, self.file, line, col,  # type: ignore[arg-type]
                       tuple(path))


def one_line(text: str) -> str:
    """``text`` with every non-printable character (newlines, tabs, bidi overrides) escaped, so a
    finding stays one line on the terminal whatever the user wrote."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _locate(positions: dict[Path_, tuple[int, int]], path: Path_) -> tuple[int, int]:
    p = tuple(path)
    while p:
        if p in positions:
            return positions[p]
        p = p[:-1]
    return positions.get((), (1, 1))


class _AliasBomb(Exception):
    pass


class _RecursiveAlias(Exception):
    def __init__(self, line: int, col: int):
        self.line, self.col = line, col


_NULL = re.compile(r"~|null|Null|NULL|")
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT10 = re.compile(r"[-+]?[0-9]+")
_INT8 = re.compile(r"0o[0-7]+")
_INT16 = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _scalar(node: yaml.ScalarNode) -> Any:
    """YAML 1.2 core-schema value of a scalar node (quoted and block scalars are strings).

    PyYAML resolves plain scalars with YAML 1.1 rules (``yes``/``on`` are booleans, ``1:20``
    is an integer, dates are timestamps); blueprints follow YAML 1.2, as editors do.
    """
    v = node.value
    if node.style is not None and node.style != "":
        return v
    if node.tag == "tag:yaml.org,2002:str":
        return v
    if _NULL.fullmatch(v):
        return None
    if v in _BOOL:
        return _BOOL[v]
    if _INT10.fullmatch(v):
        return int(v)
    if _INT8.fullmatch(v) or _INT16.fullmatch(v):
        return int(v, 0)
    if _FLOAT.fullmatch(v):
        return float(v)
    if _INF.fullmatch(v):
        return float("-inf") if v.startswith("-") else float("inf")
    if _NAN.fullmatch(v):
        return float("nan")
    return v


class _Converter:
    """Turns a composed YAML node graph into plain Python data, recording the 1-based position of
    every mapping key and sequence item, rejecting duplicate keys, expanding merge keys (``<<``)
    and stopping alias bombs (node budget) and recursive aliases."""

    def __init__(self, budget: int):
        self.budget = budget
        self.positions: dict[Path_, tuple[int, int]] = {(): (1, 1)}
        self.duplicates: list[tuple[Any, int, int, int]] = []
        self._active: set[int] = set()

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _AliasBomb()
        if isinstance(node, yaml.ScalarNode):
            return _scalar(node)
        nid = id(node)
        if nid in self._active:
            raise _RecursiveAlias(node.start_mark.line + 1, node.start_mark.column + 1)
        self._active.add(nid)
        try:
            if isinstance(node, yaml.SequenceNode):
                items = []
                for i, item in enumerate(node.value):
                    self.positions.setdefault(path + (i,), (item.start_mark.line + 1, item.start_mark.column + 1))
                    items.append(self.convert(item, path + (i,)))
                return items
            return self._mapping(node, path)
        finally:
            self._active.discard(nid)

    def _key(self, knode: yaml.Node, path: Path_) -> Any:
        if isinstance(knode, yaml.ScalarNode):
            k = _scalar(knode)
            return k if isinstance(k, (str, int, float, bool)) or k is None else str(k)
        return str(self.convert(knode, path + ("<key>",)))

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG and isinstance(knode, yaml.ScalarNode):
                sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
                for src in sources:
                    value = self.convert(src, path)
                    if isinstance(value, dict):
                        for mk, mv in value.items():
                            merged.setdefault(mk, mv)
                continue
            k = self._key(knode, path)
            line, col = knode.start_mark.line + 1, knode.start_mark.column + 1
            if k in first_line:
                self.duplicates.append((k, line, col, first_line[k]))
                continue
            first_line[k] = line
            self.positions[path + (k,)] = (line, col)
            out[k] = self.convert(vnode, path + (k,))
        for mk, mv in merged.items():
            out.setdefault(mk, mv)
        return out


def _err(file: str, rule_id: str, message: str, fix: str, line: int = 1, col: int = 1, path: Path_ = ()) -> Finding:
    return Finding(rule_id, "error", one_line(message), one_line(fix), "", file, line, col, path)


_DISCRIMINATORS = ("provider", "fabric", "kind", "type")
"""Discriminator keys of the blueprint's unions (target, network, storage/orchestrator, capacity)."""


def _strip_union_tags(loc: tuple[Any, ...], data: Any) -> Path_:
    """Turn a pydantic error ``loc`` into a document path.

    Pydantic puts the tag of a discriminated union (``aws``, ``lustre``, ``capacity-block``) and
    the names of function validators (``function-after[...]``) into ``loc``; they are not keys of
    the document. A tag is recognised as the value of the node's own discriminator key (or the
    shorthand string itself, e.g. ``capacity: spot``).
    """
    out: list[Any] = []
    node = data
    tag_skipped = False
    for part in loc:
        if (isinstance(node, dict) and not tag_skipped and isinstance(part, str)
                and any(node.get(d) == part for d in _DISCRIMINATORS)):
            tag_skipped = True  # pydantic's union tag comes right after the union field
            continue
        if isinstance(part, str) and ("[" in part or (isinstance(node, str) and part == node)):
            continue  # a validator label, or the tag of a shorthand (`capacity: spot`)
        if isinstance(node, dict) and part in node or isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        else:
            # a missing or unknown key: keep it (the message names it); nothing below exists
            out.append(part)
            node = None
        tag_skipped = False
    return tuple(out)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every model class in an annotation (``list[X]``, ``X | None``, ``Annotated[Union[...]]``)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        for m in _models_in(arg):
            if m not in out:
                out.append(m)
    return out


def _pick_model(models: list[type[BaseModel]], node: Any) -> type[BaseModel] | None:
    """The member of a union whose ``Literal`` tag matches the document node (or the only one)."""
    import typing

    if len(models) == 1:
        return models[0]
    if not isinstance(node, dict):
        return None
    for m in models:
        for name, f in m.model_fields.items():
            args = typing.get_args(f.annotation)
            if typing.get_origin(f.annotation) is typing.Literal and len(args) == 1 and node.get(f.alias or name) == args[0]:
                return m
    return None


def _model_at(path: Path_, data: Any = None) -> list[str]:
    """Keys allowed in the mapping that holds the last element of ``path`` (for 'did you mean').

    Follows the document ``data`` through discriminated unions (``target`` with ``provider: onprem``
    gives the on-prem keys). Empty when the model cannot be determined.
    """
    model: Any = Blueprint
    node: Any = data
    parts = path[:-1]
    for i, part in enumerate(parts):
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            continue
        fields = getattr(model, "model_fields", {})
        field_info = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field_info is None:
            return []
        node = node.get(part) if isinstance(node, dict) else None
        inner = node
        if isinstance(node, list):  # the model of a list field is decided by the indexed item
            nxt = parts[i + 1] if i + 1 < len(parts) else None
            inner = node[nxt] if isinstance(nxt, int) and 0 <= nxt < len(node) else None
        model = _pick_model(_models_in(field_info.annotation), inner)
        if model is None:
            return []
    return [f.alias or n for n, f in model.model_fields.items()]


_TYPE_LABELS = {"int", "str", "float", "bool", "bytes", "none", "list", "dict", "nullable"}
"""Union-member labels pydantic puts into ``loc`` for plain (non-discriminated) unions."""

_WANT = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "a string", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "list_type": "a list",
}


_KIND = {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
         type(None): "nothing (null)"}

_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le")}


def _short(value: Any, limit: int = 60) -> str:
    """``repr`` of a user value, cut to ``limit`` characters (one line: control characters escaped)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dotted(path: Path_) -> str:
    """``node_groups.0.name``; keys with spaces, dots or control characters are quoted with repr."""
    parts = []
    for p in path:
        t = str(p)
        parts.append(t if t.isprintable() and not any(c in t for c in " .`") and t else repr(t))
    return ".".join(parts) or "(document)"


def _describe_alternative(e: dict[str, Any]) -> str:
    if e["type"] == "literal_error":
        return str((e.get("ctx") or {}).get("expected", "")).replace(" or ", ", ")
    return _WANT.get(e["type"], e["msg"].lower())


def _schema_findings(err: ValidationError, data: dict[str, Any], file: str, positions: dict[Path_, tuple[int, int]]) -> list[Finding]:
    """One finding per distinct problem in a pydantic ``ValidationError``, located in the file."""
    findings: list[Finding] = []
    seen: set[tuple[Path_, str]] = set()
    alternatives: dict[Path_, list[Any]] = {}
    plain: list[tuple[Path_, Any]] = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        labels = [p for p in loc if isinstance(p, str) and (p in _TYPE_LABELS or p.startswith(("literal[", "nullable[")))]
        cleaned = tuple(p for p in loc if p not in labels)
        path = _strip_union_tags(cleaned, data)
        if labels and e["type"] not in ("extra_forbidden", "missing"):
            alternatives.setdefault(path, []).append(e)
        else:
            plain.append((path, e))
    for path, errs in alternatives.items():
        if len(errs) == 1:
            plain.append((path, errs[0]))
            continue
        wants = list(dict.fromkeys(_describe_alternative(x) for x in errs))
        dotted = _dotted(path)
        line, col = _locate(positions, path)
        findings.append(_err(file, "schema-wrong-type",
                             f"`{dotted}` is {_short(errs[0].get('input'))}: expected {' or '.join(wants)}",
                             f"write `{path[-1] if path else dotted}` as {' or '.join(wants)}", line, col, path))
        seen.add((path, "schema-wrong-type"))
    for path, e in plain:
        etype = e["type"]
        ctx = e.get("ctx") or {}
        dotted = _dotted(path)
        if etype == "extra_forbidden":
            key = path[-1] if path else "?"
            allowed = _model_at(path, data)
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"allowed keys: {', '.join(allowed)}" if allowed else "see `clusterforge schema`"
            rule_id, msg, fix = "schema-unknown-key", f"unknown key `{dotted}`", f"remove it or fix the spelling ({hint})"
        elif etype == "missing":
            rule_id, msg, fix = "schema-missing-key", f"`{dotted}` is required", f"add `{path[-1] if path else dotted}:` here"
        elif ctx.get("fix"):  # a validator that knows the fix in the user's terms (shorthands)
            rule_id, msg, fix = "schema-invalid-value", f"`{dotted}`: {e['msg']}", str(ctx["fix"])
        elif etype == "union_tag_not_found":
            disc = str(ctx.get("discriminator", "kind")).strip("'")
            rule_id = "schema-missing-key"
            msg = f"`{dotted}` needs its `{disc}` key"
            fix = f"add `{disc}:` with one of the allowed values (see `clusterforge schema`)"
        elif etype == "union_tag_invalid":
            disc = str(ctx.get("discriminator", "kind")).strip("'")
            path = path + (disc,)
            dotted = _dotted(path)
            rule_id = "schema-invalid-value"
            msg = f"`{dotted}` is {_short(ctx.get('tag'))}, not one of the allowed values"
            fix = f"use one of {ctx.get('expected_tags', '')}"
        elif etype in ("literal_error", "enum"):
            expected = ctx.get("expected") or ""
            rule_id = "schema-invalid-value"
            msg = f"`{dotted}` is {_short(e.get('input'))}, not one of the allowed values"
            fix = f"use one of {expected}" if expected else "see `clusterforge schema`"
        elif etype in ("model_type", "dict_type", "list_type", "model_attributes_type"):
            rule_id = "schema-wrong-type"
            want = "a mapping" if etype != "list_type" else "a list"
            msg = f"`{dotted}` must be {want}, got {_KIND.get(type(e.get('input')), type(e.get('input')).__name__)}"
            fix = f"write `{dotted}` as {want}"
        elif etype.endswith(("_type", "_parsing")) or etype == "int_from_float":
            rule_id = "schema-wrong-type"
            msg = f"`{dotted}`: {e['msg'].lower()} (got {_short(e.get('input'))})"
            fix = f"write {_WANT.get(etype, 'a value of the expected type')} here"
        elif etype == "too_short":
            rule_id = "schema-invalid-value"
            n = ctx.get("min_length", 1)
            msg = f"`{dotted}` needs at least {n} item{'s' if n != 1 else ''} (got {ctx.get('actual_length', 0)})"
            fix = f"add {'a' if n == 1 else n} `{path[-1] if path else dotted}` entr{'y' if n == 1 else 'ies'}"
        elif etype in _BOUNDS:
            rule_id = "schema-invalid-value"
            op, key = _BOUNDS[etype]
            msg = f"`{dotted}` is {_short(e.get('input'))}, must be {op} {ctx.get(key)}"
            fix = f"use a value {op} {ctx.get(key)}"
        else:
            rule_id = "schema-invalid-value"
            text = e["msg"]
            text = text.removeprefix("Value error, ")
            msg = f"`{dotted}`: {text}"
            if "input" in e and not isinstance(e["input"], (dict, list)) and etype != "value_error":
                msg += f" (got {_short(e['input'])})"
            fix = "correct the value (see `clusterforge schema` for the allowed form)"
            if etype == "string_pattern_mismatch" and path and path[-1] == "name":
                fix = "use lower-case letters, digits and `-`, starting with a letter"
        if (path, rule_id) in seen:
            continue
        seen.add((path, rule_id))
        line, col = _locate(positions, path)
        findings.append(_err(file, rule_id, msg, fix, line, col, path))
    findings.sort(key=lambda f: (f.line, f.col, f.rule_id))
    return findings


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's C parser when PyYAML was built with it (about 25x faster), else the pure-Python one."""


def _compose(text: str) -> yaml.Node | None:
    """The node graph of the single YAML document in ``text`` (``None`` for an empty document).

    Only composes (no object construction), so no tag can run code or build objects.
    """
    loader = _YamlLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _offset(text: str, line: int, col: int) -> int | None:
    """Character offset of 1-based ``(line, col)`` in ``text``, or ``None`` past the end."""
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    return start + col - 1


def _line_col(data: str | bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``data``: characters for text, bytes for raw data."""
    nl: Any = "\n" if isinstance(data, str) else b"\n"
    offset = max(0, min(offset, len(data)))
    return data.count(nl, 0, offset) + 1, offset - (data.rfind(nl, 0, offset) + 1) + 1


def _yaml_syntax(text: str, file: str, e: yaml.MarkedYAMLError) -> BlueprintInvalid:
    """The ``yaml-syntax`` finding for a YAML parse error, located at its mark."""
    mark = e.problem_mark or e.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = (e.problem or str(e)).strip().splitlines()[0]
    if e.context and problem.startswith("but "):
        message = f"{e.context}, {problem}"
    else:
        message = problem + (f" ({e.context})" if e.context else "")
    fix = "fix the YAML syntax at this position"
    offset = _offset(text, line, col)
    if offset is not None and offset < len(text) and text[offset] == "\t":
        message, fix = "a tab character where YAML expects indentation or a value", "indent with spaces, not tabs"
    return BlueprintInvalid([_err(file, "yaml-syntax", message, fix, line, col)])


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
    try:
        root = _compose(text)
    except yaml.composer.ComposerError as e:
        if e.context == "expected a single document in the stream" and e.problem_mark is not None:
            raise BlueprintInvalid([_err(
                file, "yaml-multiple-documents",
                "a second YAML document starts here: a blueprint file holds exactly one blueprint",
                "put each blueprint in its own file, or remove this `---` and what follows it",
                e.problem_mark.line + 1, e.problem_mark.column + 1)]) from None
        raise _yaml_syntax(text, file, e) from None
    except yaml.MarkedYAMLError as e:
        raise _yaml_syntax(text, file, e) from None
    except yaml.reader.ReaderError as e:
        line, col = _line_col(text, e.position)
        code = ord(e.character) if isinstance(e.character, str) else int(e.character)
        raise BlueprintInvalid([_err(file, "file-not-text", f"control character U+{code:04X} is not allowed in YAML",
                                     "remove control characters; save the blueprint as UTF-8 text", line, col)]) from None
    except (yaml.YAMLError, ValueError, RecursionError, MemoryError) as e:
        raise BlueprintInvalid([_err(file, "yaml-syntax", str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                                     "fix the YAML syntax")]) from None
    conv = _Converter(MAX_NODES)
    try:
        data = conv.convert(root, ()) if root is not None else None
    except _AliasBomb:
        raise BlueprintInvalid([_err(file, "yaml-too-large",
                                     f"the document expands to more than {MAX_NODES} nodes (aliases that multiply?)",
                                     "remove the nested anchors/aliases")]) from None
    except _RecursiveAlias as e:
        raise BlueprintInvalid([_err(file, "yaml-recursive-alias", "an alias refers to the node that contains it",
                                     "remove the recursive anchor/alias", e.line, e.col)]) from None
    except RecursionError:
        raise BlueprintInvalid([_err(file, "yaml-too-large", "the document nests too deeply",
                                     "flatten the document")]) from None
    if conv.duplicates:
        raise BlueprintInvalid([
            _err(file, "yaml-duplicate-key", f"duplicate key `{k}` (first defined on line {first})",
                 "remove one of the two entries", line, col)
            for k, line, col, first in conv.duplicates
        ])
    positions = conv.positions
    if data is None:
        raise BlueprintInvalid([_err(file, "blueprint-empty", "the file has no YAML content (only comments or `---`)",
                                     "write a blueprint (see blueprints/examples/ or `clusterforge schema`)")])
    if not isinstance(data, dict):
        shape = _KIND.get(type(data), f"a {type(data).__name__}")
        raise BlueprintInvalid([_err(file, "yaml-not-mapping", f"the document is {shape}, not a mapping",
                                     "a blueprint is a mapping that starts with `apiVersion: clusterforge/v1`")])
    api, kind = data.get("apiVersion"), data.get("kind")
    if api is not None and api != API_VERSION or kind is not None and kind != "Blueprint":
        what = ("apiVersion", api) if api != API_VERSION else ("kind", kind)
        line, col = _locate(positions, (what[0],))
        raise BlueprintInvalid([_err(file, "blueprint-wrong-kind",
                                     f"this is not a clusterforge blueprint (`{what[0]}: {what[1]}`)",
                                     f"set `apiVersion: {API_VERSION}` and `kind: Blueprint`", line, col, (what[0],))])
    templated = [
        _err(file, "value-template-syntax",
             f"`{_dotted(path)}`: the {what} holds the template delimiter `{delim}`; blueprint values are data, and "
             "nothing evaluates them",
             f"remove `{delim}`: write the literal value the node should get (a value cannot refer to another)",
             *_locate(positions, path), path)
        for path, what, delim in templated_strings(data)
    ]
    if templated:
        raise BlueprintInvalid(templated)
    try:
        bp = Blueprint.model_validate(data)
    except ValidationError as e:
        raise BlueprintInvalid(_schema_findings(e, data, file, positions)) from None
    return LoadedBlueprint(blueprint=bp, file=file, positions=positions, data=data)


def load_blueprint(path: str | os.PathLike[str]) -> LoadedBlueprint:
    """Read and validate the blueprint at ``path``.

    Raises :class:`~blueprints.findings.BlueprintInvalid` for a missing file, a directory or
    other non-regular file, a file that is not UTF-8 text (binary data), one larger than 16 MiB
    (only that much is read), and every error
    :func:`parse_blueprint` reports.
    """
    p = Path(path)
    file = str(path)
    if not p.exists():
        raise BlueprintInvalid([_err(file, "file-not-found", "no such file", "check the path")])
    if p.is_dir():
        raise BlueprintInvalid([_err(file, "file-is-directory", "this is a directory, not a blueprint file",
                                     "pass a .yaml file, e.g. blueprints/examples/local-workstation.yaml")])
    if not p.is_file():
        raise BlueprintInvalid([_err(file, "file-not-regular", "this is not a regular file (a device, socket or pipe?)",
                                     "pass a .yaml file")])
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise BlueprintInvalid([_err(file, "file-unreadable", e.strerror or str(e), "check the file's permissions")]) from None
    if len(raw) > MAX_BYTES:
        raise BlueprintInvalid([_err(file, "file-too-large", f"the file is larger than {MAX_BYTES} bytes",
                                     "a blueprint is a small YAML file")])
    if b"\0" in raw:
        line, col = _line_col(raw, raw.index(b"\0"))
        raise BlueprintInvalid([_err(file, "file-not-text", "the file holds binary data (a NUL byte)",
                                     "pass a YAML text file", line, col)])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line, col = _line_col(raw, e.start)
        raise BlueprintInvalid([_err(file, "file-not-text", f"byte 0x{raw[e.start]:02x} is not UTF-8 text",
                                     "save the blueprint as UTF-8", line, col)]) from None
    return parse_blueprint(text, file)
