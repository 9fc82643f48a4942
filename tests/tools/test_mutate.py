"""``make mutate`` (tools/mutate.py): every area names modules and tests that exist, and bad arguments are usage
errors (exit 2) before anything is copied or mutated. The mutation run itself is slow and lives outside ``make test``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cf_mutate_tool", ROOT / "tools" / "mutate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_issue_areas_with_existing_modules_and_tests():
    areas = _tool().AREAS
    assert {m for a in areas.values() for m in a.modules} == {
        "blueprints/rules", "validate/suites", "validate/parsers", "validate/node_checks.py"}
    for a in areas.values():
        for p in (*a.modules, *a.tests):
            assert (ROOT / p).exists(), p


@pytest.mark.parametrize("module", ["nope.py", "README.md", "validate/judge.py"])
def test_a_module_outside_the_areas_is_a_usage_error(module, capsys):
    assert _tool().main(["--module", module]) == 2
    assert "mutate: " in capsys.readouterr().err


def test_annotation_spans_cover_annotations_only():
    # mutants inside annotations are never run (never evaluated under `from __future__ import annotations`), so the
    # spans must cover the annotation and nothing of the code around it
    src = "from __future__ import annotations\ndef f(a: int | None, b=1 | 2) -> str | None:\n    x: list[int | None] = []\n    return 'é' if a | b else None\n"
    spans = _tool().annotation_spans(src)
    assert sorted(spans) == [((2, 9), (2, 19)), ((2, 33), (2, 43)), ((3, 7), (3, 23))]
    lines = src.splitlines()
    assert [lines[a[0] - 1][a[1]:b[1]] for a, b in sorted(spans)] == ["int | None", "str | None", "list[int | None]"]


def test_annotation_columns_are_characters_not_bytes():
    # 'é' is two UTF-8 bytes: ast's byte offsets would put the span one character too far right
    src = "def f(s='é', a: int | None = None): ...\n"
    assert _tool().annotation_spans(src) == [((1, 16), (1, 26))]
    assert src[16:26] == "int | None"


@pytest.mark.parametrize("argv", [["--module", "validate/parsers/nccl.py", "--sample", "0"],
                                  ["--module", "validate/parsers/nccl.py", "--tests", "tests/validate/nope.py"]])
def test_bad_sample_or_tests_are_usage_errors(argv, capsys):
    assert _tool().main(argv) == 2
    assert capsys.readouterr().err.startswith("mutate: ")


def _cover_tool() -> ModuleType:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mutate_cover
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return mutate_cover

def _trace(tmp_path: Path, modules: dict[str, str], tests: str) -> Any:
    """Write ``modules`` ({name: source}) and ``tests`` (one test file) under ``tmp_path``, run that file once under a
    LineTracer of every module (pytest in this process, as tools/mutate.py does) and return the tracer."""
    import pytest as _pytest

    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
    (tmp_path / "test_t.py").write_text(tests)
    tracer = _cover_tool().LineTracer([tmp_path / f"{name}.py" for name in modules])
    sys.path.insert(0, str(tmp_path))
    try:
        assert _pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path / "test_t.py")],
                            plugins=[tracer]) == 0
    finally:
        sys.path.remove(str(tmp_path))
        for name in [*modules, "test_t"]:  # the next call's modules and test file go by the same names
            sys.modules.pop(name, None)
    return tracer



def test_changed_lines_are_the_original_lines_the_mutant_touches():
    cover = _cover_tool()
    src = "a = 1\nif a < 2:\n    b = 3\nc = 4\n"
    assert cover.changed_lines(src, src) == set()
    assert cover.changed_lines(src, src.replace("a < 2", "a <= 2")) == {2}
    assert cover.changed_lines(src, src.replace("b = 3", "b = 4").replace("c = 4", "c = 5")) == {3, 4}


def test_select_keeps_covering_tests_fastest_first_and_falls_back_to_all():
    cover = {"outside": [1, 2], "tests": {
        "t.py::slow": {"lines": [5, 6], "seconds": 2.0},
        "t.py::fast": {"lines": [6], "seconds": 0.1},
        "t.py::other": {"lines": [9], "seconds": 0.01}}}
    select = _cover_tool().select
    assert select(cover, {6}) == ["t.py::fast", "t.py::slow"]
    assert select(cover, {5}) == ["t.py::slow"]
    assert select(cover, {2}) is None      # runs at import: every test
    assert select(cover, {7}) is None      # no test runs it in-process (a subprocess may): every test
    assert select(cover, set()) is None


def test_the_tracer_maps_tests_and_the_fixtures_they_share(tmp_path):
    # a module-scoped fixture runs the code once, for the first test; the second test that uses it must still be
    # mapped to those lines, or a mutant there would be judged without the test that checks the fixture's value
    tracer = _trace(tmp_path, {"target_mod": "def f(x):\n    return x + 1\n\ndef g(x):\n    return x * 2\n"},
                    "import pytest\nimport target_mod\n\n@pytest.fixture(scope='module')\ndef one():\n"
                    "    return target_mod.f(1)\n\n"
                    "def test_a(one):\n    assert one == 2\n\ndef test_b(one):\n    assert one > 0\n\n"
                    "def test_c():\n    assert target_mod.g(2) == 4\n")
    got = {n.split("::")[1]: t["lines"] for n, t in tracer.result()["tests"].items()}
    assert got == {"test_a": [2], "test_b": [2], "test_c": [5]}
    assert tracer.result()["outside"] == [1, 4]


def test_stable_keys_do_not_move_when_other_lines_change():
    # an earlier session's results are matched to a new one by operator, the mutated line's text and its rank among
    # identical lines: inserting a line above changes cosmic-ray's positions, not these keys
    keys = _tool().stable_keys
    before = "a = 1\nif a < 2:\n    b = a < 3\nif a < 2:\n"
    after = "import os\n" + before
    specs = [("Lt_Gt", 2), ("Lt_Gt", 3), ("Lt_Gt", 4)]
    assert keys(specs, before) == [("Lt_Gt", "if a < 2:", 0), ("Lt_Gt", "b = a < 3", 0), ("Lt_Gt", "if a < 2:", 1)]
    assert keys([(op, row + 1) for op, row in specs], after) == keys(specs, before)


def test_one_traced_run_maps_every_module_of_an_area(tmp_path):
    # make mutate maps an area's modules in one run of its tests: each module's map holds only its own lines
    tracer = _trace(tmp_path, {"mod_a": "def f(x):\n    return x + 1\n", "mod_b": "X = 3\n\ndef g(x):\n    return x * X\n"},
                    "import mod_a\nimport mod_b\n\ndef test_f():\n    assert mod_a.f(1) == 2\n\n"
                    "def test_g():\n    assert mod_b.g(2) == 6\n")
    a, b = tracer.result(tmp_path / "mod_a.py"), tracer.result(tmp_path / "mod_b.py")
    assert {n.split("::")[1]: t["lines"] for n, t in a["tests"].items()} == {"test_f": [2], "test_g": []}
    assert {n.split("::")[1]: t["lines"] for n, t in b["tests"].items()} == {"test_f": [], "test_g": [4]}
    assert (a["outside"], b["outside"]) == ([1], [1, 3])
    assert tracer.result() == a  # the first target without an argument, as for one module


def test_a_test_that_switches_tracing_off_does_not_blind_the_tests_after_it(tmp_path):
    # Python drops a trace function that raises; recursing to the interpreter's limit makes the tracer raise
    # RecursionError. The tests after it must still be mapped (they were not, and every mutant their lines held was
    # judged without them), and the test that lost the tracer is selected for every mutant
    cover_tool = _cover_tool()
    tracer = _trace(tmp_path, {"deep_mod": "def rec(n):\n    return rec(n + 1)\n\ndef g(x):\n    return x * 2\n"},
                    "import pytest\nimport deep_mod\n\n"
                    "def test_deep():\n    with pytest.raises(RecursionError):\n        deep_mod.rec(0)\n\n"
                    "def test_after():\n    assert deep_mod.g(2) == 4\n")
    tests = {n.split("::")[1]: t for n, t in tracer.result()["tests"].items()}
    assert tests["test_after"] == {"lines": [5], "seconds": tests["test_after"]["seconds"]}
    assert tests["test_deep"]["lost"] is True and tests["test_deep"]["lines"] == [2]
    cover = tracer.result()
    assert [n.split("::")[1] for n in cover_tool.select(cover, {5})] == sorted(
        ["test_after", "test_deep"], key=lambda n: tests[n]["seconds"])
