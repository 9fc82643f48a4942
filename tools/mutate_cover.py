"""Which tests execute which lines of one module, and running only those tests against a mutant (tools/mutate.py).

A mutant on a line that a test never executes cannot change that test's outcome, so each mutant needs only the
tests that run its line(s). :class:`LineTracer` is a pytest plugin that records, for every test, the lines of the
target module run during its setup, call and teardown, plus the lines run by the fixtures it uses (a module-scoped
fixture runs once but serves every test that requests it). Lines run outside any test (imports, decorators,
default values) select every test. :func:`select` keeps the covering tests and orders them fastest first, so a
killed mutant stops early under ``-x``.

The selection can miss a kill, never invent one: a test that reaches a line only through a subprocess or through a
cache filled by an earlier test is not counted as covering it. ``--select all`` in tools/mutate.py judges the
survivors again with every test.

Python switches a trace function off for good when it raises, and a test that recurses to the interpreter's limit
makes it raise (RecursionError inside the tracer): the tracer is armed again before every test and fixture, and a
test that lost it is marked ``lost`` and selected for every mutant (its lines are not all known). Before this, one such
test (a JSON nested past the recursion limit) left the 565 parser tests after it with no lines at all.
"""

from __future__ import annotations

import difflib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

OUTSIDE = "<outside tests>"


class LineTracer:
    """pytest plugin: per test, the lines it ran of each target module, and its duration.

    ``target``: one module's path, or several (one traced run maps a whole area: :meth:`result` answers per module).
    """

    def __init__(self, target: Path | Sequence[Path]) -> None:
        paths = [target] if isinstance(target, Path) else list(target)
        self.targets = [str(p.resolve()) for p in paths]
        self._wanted = frozenset(self.targets)
        self.current = OUTSIDE
        self.lines: dict[str, dict[str, set[int]]] = {}
        """``lines[test or fixture or OUTSIDE][file]``: the lines of target ``file`` run there."""
        self.fixture_lines: dict[int, dict[str, set[int]]] = {}
        self.seconds: dict[str, float] = {}
        self.lost: set[str] = set()
        """Tests (or fixtures, by id) during which tracing was switched off: their lines are incomplete."""
        self._items: list[Any] = []

    def _global(self, frame: FrameType, event: str, arg: object) -> Any:
        return self._local if frame.f_code.co_filename in self._wanted else None

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.lines.setdefault(self.current, {}).setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return self._local

    def _arm(self) -> None:
        sys.settrace(self._global)
        threading.settrace(self._global)

    def _still_armed(self, who: str) -> None:
        """Note ``who`` as lost when tracing was switched off while it ran, and arm it again."""
        if sys.gettrace() != self._global:  # a bound method: a new object at each access, equal to the last
            self.lost.add(who)
            self._arm()

    def pytest_configure(self, config: Any) -> None:
        self._arm()

    def pytest_unconfigure(self, config: Any) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[None]:
        outer, self.current = self.current, f"fixture:{id(fixturedef)}"
        self._arm()
        yield
        self._still_armed(self.current)
        into = self.fixture_lines.setdefault(id(fixturedef), {})
        for f, lines in self.lines.pop(self.current, {}).items():
            into.setdefault(f, set()).update(lines)
        self.current = outer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Iterator[None]:
        self.current = item.nodeid
        self.lines.setdefault(item.nodeid, {})
        self._items.append(item)
        self._arm()
        t0 = time.perf_counter()
        yield
        self.seconds[item.nodeid] = time.perf_counter() - t0
        self._still_armed(item.nodeid)
        self.current = OUTSIDE

    def result(self, target: Path | None = None) -> dict[str, Any]:
        """``{"tests": {nodeid: {"lines": [...], "seconds": s}}, "outside": [...]}`` (JSON-ready) for ``target``
        (one of the traced modules; default the first)."""
        f = str(target.resolve()) if target is not None else self.targets[0]
        tests = {}
        for item in self._items:
            lines = set(self.lines.get(item.nodeid, {}).get(f, set()))
            lost = item.nodeid in self.lost
            info = getattr(item, "_fixtureinfo", None)
            for defs in (info.name2fixturedefs.values() if info else []):
                for d in defs:
                    lines |= self.fixture_lines.get(id(d), {}).get(f, set())
                    lost = lost or f"fixture:{id(d)}" in self.lost
            tests[item.nodeid] = {"lines": sorted(lines), "seconds": round(self.seconds.get(item.nodeid, 0.0), 4),
                                  **({"lost": True} if lost else {})}
        return {"tests": tests, "outside": sorted(self.lines.get(OUTSIDE, {}).get(f, set()))}


def changed_lines(original: str, mutated: str) -> set[int]:
    """The 1-based lines of ``original`` that differ in ``mutated`` (an insertion counts the line it precedes)."""
    out: set[int] = set()
    sm = difflib.SequenceMatcher(a=original.splitlines(), b=mutated.splitlines(), autojunk=False)
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag != "equal":
            out.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return out


def select(cover: dict[str, Any], changed: set[int]) -> list[str] | None:
    """The node ids of the tests that run a changed line, fastest first; ``None`` means every test (a changed line
    runs outside tests, or no test runs it in this process: it may still run through a subprocess)."""
    if not changed or changed & set(cover["outside"]):
        return None
    hit = [(t["seconds"], n) for n, t in cover["tests"].items() if t.get("lost") or changed & set(t["lines"])]
    return [n for _, n in sorted(hit)] or None


class Only:
    """pytest plugin: keep only the tests named (in the order given)."""

    def __init__(self, nodeids: list[str]) -> None:
        self.order = {n: i for i, n in enumerate(nodeids)}

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        keep = [i for i in items if i.nodeid in self.order]
        keep.sort(key=lambda i: self.order[i.nodeid])
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in self.order])
        items[:] = keep
