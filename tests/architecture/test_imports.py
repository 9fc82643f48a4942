"""The packages sit on floors: ``blueprints`` is the ground, ``stacks`` and ``validate`` stand on it
side by side, ``clusterforge`` (CLI and glue) is the top. An import never runs up a floor or
sideways between ``stacks`` and ``validate``, and no module imports itself back through others.

Every ``import`` statement counts, including the ones inside functions: a deferred import is how
an upward dependency or a circle usually hides. So do the imports Python cannot see statically:
``import_module`` / ``__import__`` calls (a literal name, or an f-string: every module under its
constant prefix, ``{__name__}`` standing for the importing package), and a string that names a
project submodule exactly (a registry such as ``TARGETS`` maps names to modules it imports later;
a bare package name is more often a distribution or resource name).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("blueprints", "stacks", "validate", "clusterforge")
# What each package may import of the others (docs/architecture.md "Floors").
ALLOWED = {
    "blueprints": set(),
    "stacks": {"blueprints"},
    "validate": {"blueprints"},
    "clusterforge": {"blueprints", "stacks", "validate"},
}
# validate/payloads run on cluster nodes as single files: standard library (and torch) only.
PAYLOADS = "validate.payloads"


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            out[_module_name(path)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Project modules that ``name`` imports (relative imports resolved, ``from x import sub`` as x.sub)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    package = ".".join(base)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            # `from pkg import sub` imports the submodule; `from mod import name` imports mod; a mixed
            # `from pkg import sub, name` both.
            targets = [t for t in subs if t in known]
            if len(targets) < len(subs):
                targets.append(mod)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node) and node.args:
            targets = _dynamic_targets(node.args[0], name, package, known)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in known:
            targets = [node.value]  # a module named in a registry, imported by name later
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _is_dynamic_import(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id in ("import_module", "__import__")) or (
        isinstance(f, ast.Attribute) and f.attr == "import_module")


def _dynamic_targets(arg: ast.expr, name: str, package: str, known: dict[str, Path]) -> list[str]:
    """Modules an ``import_module(arg)`` call in module ``name`` (of ``package``) may import: the
    literal name, or every known module under an f-string's constant prefix."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        target = arg.value
        return [f"{package}{target}" if target.startswith(".") else target]
    if not isinstance(arg, ast.JoinedStr):
        return []
    prefix = ""
    for part in arg.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            prefix += part.value
        elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
              and part.value.id == "__name__" and not prefix):
            prefix = name
        else:
            break
    if prefix.startswith("."):
        prefix = package + prefix
    if not prefix.rstrip("."):
        return []
    return [m for m in known if m.startswith(prefix) and m != name]


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The import graph of every project module, parsed once for the checks below (read-only)."""
    return _graph()


def test_no_import_runs_up_a_floor_or_sideways(graph: dict[str, set[str]]) -> None:
    bad = []
    for mod, deps in graph.items():
        pkg = mod.split(".")[0]
        for dep in deps:
            dep_pkg = dep.split(".")[0]
            if dep_pkg != pkg and dep_pkg not in ALLOWED[pkg]:
                bad.append(f"{mod} imports {dep}")
    assert not bad, "imports that run up a floor or sideways:\n" + "\n".join(sorted(bad))


def test_payloads_import_no_project_module(graph: dict[str, set[str]]) -> None:
    bad = [f"{mod} imports {dep}" for mod, deps in graph.items() if mod.startswith(PAYLOADS)
           for dep in deps if not dep.startswith(PAYLOADS)]
    assert not bad, "node payloads must stay standalone:\n" + "\n".join(bad)


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    """Tarjan's strongly connected components over module imports; a package importing its own
    submodules is not a circle, a submodule importing back into a module that imports it is."""
    # A submodule implicitly imports its parent package; that edge is Python's, not the code's.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)
