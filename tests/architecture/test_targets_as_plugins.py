"""Targets are plug-ins: the provider is decided once, by the registry (``clusterforge.targets``),
and by the rules that check a blueprint against its target; the code a target drives neither tests the
provider again nor reads the blueprint models inside the Pulumi components.

* no ``is_aws`` / ``provider ==`` test in the CLI verbs and glue, the stack program and its
  renderers, the Ansible glue, or the resolved settings (``blueprints/settings.py``,
  ``blueprints/resolved.py``, ``blueprints/role_vars.py``): a value that differs per target is a
  field of the target's model (``scratch_discovery``) or is computed by the target's own module;
* ``stacks/components/`` take plain values: no component module imports the blueprint models, the
  loader or the resolved cluster (``stacks/inventory.py``, which decides what the stack creates, and
  ``stacks/translate.py``, which adds the rest of each component's inputs, read them for the components).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BRANCH = re.compile(r"\bis_aws\b|\.provider\s*[!=]=|\.provider\s+(not\s+)?in\b|isinstance\([^)]*\b(Aws|Onprem)Target\b")
"""A test of the provider: ``bp.is_aws``, ``target.provider == "aws"``, ``isinstance(t, AwsTarget)``."""

NO_PROVIDER_TESTS = [
    "clusterforge/cli.py", "clusterforge/blueprint_io.py", "clusterforge/commands", "clusterforge/ansible/runner.py", "clusterforge/ansible/__init__.py",
    "clusterforge/plan.py", "stacks/__main__.py", "stacks/components", "stacks/cloud_init.py",
    "stacks/config.py", "stacks/render.py", "stacks/outputs.py",
    "blueprints/settings.py", "blueprints/resolved.py", "blueprints/role_vars.py",
]
"""Files (or directories of files) that never test the provider."""

NARROWING = {"stacks/inventory.py": 1, "stacks/translate.py": 0, "clusterforge/ansible/render.py": 1}
"""The one place each target's own code narrows the blueprint's target to the settings it reads
(:func:`stacks.inventory.aws_target`, :func:`clusterforge.ansible.render.onprem_target`): a blueprint
of another provider is refused there in one line."""


def _files(entry: str) -> list[Path]:
    path = REPO / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the lines of ``path`` that hold code (docstrings and comments left out)."""
    text = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [(n, line.split("#", 1)[0]) for n, line in enumerate(text.splitlines(), 1) if n not in doc_lines]


def test_the_deploy_code_never_tests_the_provider() -> None:
    bad = [f"{f.relative_to(REPO)}:{n}: {line.strip()}" for entry in NO_PROVIDER_TESTS for f in _files(entry)
           for n, line in _code_lines(f) if BRANCH.search(line)]
    assert not bad, "provider tests outside the registry and the rules:\n" + "\n".join(bad)


def test_the_stack_program_narrows_the_target_in_one_place() -> None:
    for rel, expected in NARROWING.items():
        hits = [line for _, line in _code_lines(REPO / rel) if BRANCH.search(line)]
        assert len(hits) == expected, hits


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_the_components_take_plain_values() -> None:
    """A component's ``…Args`` holds strings, numbers, ``NodeSettings``, catalog entries and other
    components' outputs, never a blueprint model: the components import no model, loader or
    resolved-cluster module."""
    forbidden = ("blueprints.models", "blueprints.loader", "blueprints.resolved", "blueprints.Blueprint",
                 "blueprints.LoadedBlueprint")
    bad = {f.name: sorted(m for m in _imports(f) if m.startswith(forbidden))
           for f in sorted((REPO / "stacks" / "components").glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


def test_the_component_args_have_no_defaults_the_models_already_give() -> None:
    """``defaults only in the models``: a field of an ``…Args`` dataclass that the translation fills
    from a blueprint setting has no default of its own (a second default could drift from the model's)."""
    import dataclasses

    from stacks.components import LustreFileSystemArgs, NetworkArgs, NodeGroupArgs
    from stacks.inventory import FileSystemSpec, NodeGroupSpec

    wiring = {"depends_on", "lustre", "eks", "slurm", "status_path"}  # other components' outputs, not blueprint settings
    for cls in (NetworkArgs, NodeGroupArgs, LustreFileSystemArgs, NodeGroupSpec, FileSystemSpec):
        with_default = [f.name for f in dataclasses.fields(cls)
                        if f.name not in wiring and (f.default is not dataclasses.MISSING
                                                     or f.default_factory is not dataclasses.MISSING)]
        assert not with_default, f"{cls.__name__}: {with_default}"
