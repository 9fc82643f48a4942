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
