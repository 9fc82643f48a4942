"""The tests mirror the packages, and the golden files live in one tree.

* Every directory of ``tests/`` that holds test modules is ``tests/<path>`` for a ``<path>`` of the
  repository: a package (``tests/clusterforge/ansible`` tests ``clusterforge/ansible``) or the
  Ansible ``roles/`` directory (the roles' converge tests). ``tests/architecture`` is the one
  exception: its tests read the whole repository.
* Golden files are under ``tests/golden/<area>/`` only (:data:`tests.golden_files.AREAS`); no other
  directory of ``tests/`` is called ``golden`` or ``expected``.
"""

from __future__ import annotations

from pathlib import Path

from tests.golden_files import AREAS, GOLDEN

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
WHOLE_REPO = {"architecture", "security"}
"""Test directories whose tests are about the whole repository, not one package."""
NOT_PYTHON = {"roles", "tools"}
"""Top-level directories that are tested but are not Python packages: Ansible content (``roles``) and the
repository's scripts that ``make`` runs (``tools``: system packages, mutation testing)."""


def _test_dirs() -> list[Path]:
    return sorted({p.parent for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts})


def test_no_test_module_sits_at_the_top_of_tests() -> None:
    assert not sorted(p.name for p in TESTS.glob("test_*.py"))


def _without_package(dirs: list[Path]) -> list[str]:
    """The test directories of ``dirs`` that have no counterpart in the repository."""
    missing = []
    for d in dirs:
        rel = d.relative_to(TESTS)
        if rel.parts[0] in WHOLE_REPO:
            continue
        counterpart = REPO / rel
        is_package = (counterpart / "__init__.py").is_file()
        if not (counterpart.is_dir() and (is_package or rel.parts[0] in NOT_PYTHON)):
            missing.append(f"tests/{rel.as_posix()} -> {rel.as_posix()}/ is not a package of the repository")
    return missing


def test_every_test_directory_has_its_package() -> None:
    missing = _without_package(_test_dirs())
    assert not missing, "\n".join(missing)


def test_golden_files_live_in_one_tree() -> None:
    stray = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*")
                   if p.is_dir() and p.name in ("golden", "expected") and p != GOLDEN
                   and "__pycache__" not in p.parts and "fixtures" not in p.relative_to(TESTS).parts)
    assert not stray, f"golden folders outside tests/golden: {stray}"
    areas = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
    assert areas == sorted(AREAS), "tests/golden/<area> folders and tests.golden_files.AREAS differ"
    for area in areas:
        assert any(p.is_file() for p in (GOLDEN / area).rglob("*")), f"tests/golden/{area} holds no file"
    assert not [p.name for p in GOLDEN.iterdir() if p.is_file()], "files directly in tests/golden (use an area)"
    assert not list(GOLDEN.rglob("*.py")), "tests/golden holds data only"


def test_the_layout_check_finds_a_test_directory_without_its_package() -> None:
    """Not vacuous: the CLI tests' old home (``tests/cli``: no ``cli`` package), a made-up package and a
    data directory of a package are found; the Ansible glue's and the roles' test directories are not."""
    dirs = [TESTS / "cli", TESTS / "nonexistent_pkg" / "sub", TESTS / "blueprints" / "rule_cases",
            TESTS / "clusterforge" / "ansible", TESTS / "roles", TESTS / "architecture"]
    assert _without_package(dirs) == [
        "tests/cli -> cli/ is not a package of the repository",
        "tests/nonexistent_pkg/sub -> nonexistent_pkg/sub/ is not a package of the repository",
        "tests/blueprints/rule_cases -> blueprints/rule_cases/ is not a package of the repository",
    ]
