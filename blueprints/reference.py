"""Blueprint reference documentation generated from the models (``docs/blueprint-reference.md``).

Every model reachable from :class:`~blueprints.models.Blueprint` gets a table of key, type,
default and description, read from the field metadata, so the docs cannot drift from the code.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .models import Blueprint

REFERENCE_PATH = Path(__file__).resolve().parent.parent / "docs" / "blueprint-reference.md"


def _type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"map[{_type_name(args[0])}, {_type_name(args[1])}]"
    if isinstance(ann, type):
        if issubclass(ann, BaseModel):
            return f"[{ann.__name__}](#{ann.__name__.lower()})"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "NoneType": "null"}.get(ann.__name__, ann.__name__)
    return str(ann)


def _models(ann: Any, out: list[type[BaseModel]]) -> None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        if ann not in out:
            out.append(ann)
            for f in ann.model_fields.values():
                _models(f.annotation, out)
        return
    for a in typing.get_args(ann):
        _models(a, out)


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    d = field.default
    if d is PydanticUndefined and field.default_factory is not None:
        d = field.default_factory()  # catalog-backed defaults (e.g. the driver's Long Term Support branch)
    if d is PydanticUndefined:
        return ""
    if isinstance(d, BaseModel):
        return "see type"
    return f"`{json.dumps(d)}`"


def _summary(model: type[BaseModel]) -> str:
    """The first paragraph of ``model``'s docstring on one line (a sentence is never cut at a line break)."""
    doc = (model.__doc__ or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


def reference_markdown() -> str:
    """The reference as Markdown text (one section per model, root first)."""
    models: list[type[BaseModel]] = []
    _models(Blueprint, models)
    lines = [
        "# Blueprint reference (`clusterforge/v1`)",
        "",
        "Generated from `blueprints/models.py` by `python -m blueprints.reference`; do not edit by hand.",
        "Shorthands: `gpu: h100-sxm:8`, `capacity: spot`, `sandbox: kata`, `network: efa`, `orchestrator: slurm`.",
        "",
        ("`clusterforge validate` runs the suites listed in `validation.suites` on the nodes: `nccl` (nccl-tests when "
        "installed, else a built-in torch.distributed benchmark), `fio` (needs the `fio` program on every node it "
        "tests: `apt-get install fio`, `dnf install fio`, or the `validation_tools` role; without it the fio results "
        "are `invalid` and say so) and `amp` (needs torch)."),
        "",
    ]
    for m in models:
        lines += [f"## {m.__name__}", "", _summary(m), ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, f in m.model_fields.items():
            key = f.alias or name
            desc = (f.description or "").replace("|", "\\|")
            lines.append(f"| `{key}` | {_type_name(f.annotation)} | {_default(f)} | {desc} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m blueprints.reference [--check] [-o FILE]``: write the reference, or with
    ``--check`` exit 1 when the committed file is stale."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m blueprints.reference", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, default=REFERENCE_PATH, help="file to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="only check that the file is current; exit 1 if not")
    args = ap.parse_args(argv)
    text = reference_markdown()
    if args.check:
        current = args.output.is_file() and args.output.read_text(encoding="utf-8") == text
        print(f"{args.output}: {'current' if current else 'stale: run python -m blueprints.reference'}")
        return 0 if current else 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
