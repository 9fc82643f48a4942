"""``make mutate`` (tools/mutate.py): every area names modules and tests that exist, and bad arguments are usage
errors (exit 2) before anything is copied or mutated. The mutation run itself is slow and lives outside ``make test``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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
