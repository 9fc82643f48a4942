"""The one golden-file mechanism of the test suite (plan JSON, inventory, group_vars, manifests,
batch scripts, reports): compare rendered text with committed files, or rewrite them with
``CLUSTERFORGE_UPDATE_GOLDEN=1`` (then review the diff).

Every golden file lives in one tree, ``tests/golden/<area>/`` (:data:`AREAS`); a test finds its
folder with :func:`golden_dir`. ``tests/architecture/test_test_layout.py`` fails on a golden folder anywhere else.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

UPDATE = os.environ.get("CLUSTERFORGE_UPDATE_GOLDEN", "") not in ("", "0")

GOLDEN = Path(__file__).resolve().parent / "golden"
"""The one tree of golden files."""

AREAS = {
    "stacks": "planned cloud resources of every AWS example (tests/stacks/test_golden.py)",
    "ansible": "Ansible inventory and group_vars of every on-prem example (tests/clusterforge/ansible/test_render.py)",
    "slurm": "Slurm configuration files of every Slurm example (tests/blueprints/test_slurm.py)",
    "validation": "Slurm batch scripts and Kubernetes manifests of the suites (tests/validate/test_validation_artifacts.py)",
    "reports": "Markdown and JUnit reports (tests/validate/test_validation_artifacts.py)",
    "judged": "every recorded output of tests/fixtures as `clusterforge judge --json` judges it (tests/validate/test_judged_fixtures.py)",
    "parsed": "every recorded output of tests/fixtures, parsed (tests/validate/test_parsed_fixtures.py)",
    "rules": "each pre-deploy rule's findings on its firing case, as `check` prints them (tests/blueprints/test_rule_messages.py)",
}
"""Sub-folder of :data:`GOLDEN` -> what its files are and which test compares them."""


def golden_dir(area: str) -> Path:
    """``tests/golden/<area>``; raises ``ValueError`` for an area not in :data:`AREAS`."""
    if area not in AREAS:
        raise ValueError(f"golden area {area!r}: use one of {', '.join(AREAS)} (or add it to AREAS)")
    return GOLDEN / area


def assert_golden(actual: dict[str, str], folder: Path, *, complete: bool = True) -> None:
    """Compare ``actual`` (relative file name -> text) with the files under ``folder``.

    ``complete``: the folder must hold exactly these files (stale ones fail, and are removed on
    update); otherwise only the named files are compared. Fails with a unified diff per file.
    """
    if UPDATE:
        if complete and folder.exists():
            for old in folder.rglob("*"):
                if old.is_file() and str(old.relative_to(folder)) not in actual:
                    old.unlink()
        for rel, text in actual.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        return
    if complete:
        expected = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
        assert sorted(actual) == expected, f"files differ from {folder} (CLUSTERFORGE_UPDATE_GOLDEN=1 to accept)"
    for rel, text in actual.items():
        path = folder / rel
        if not path.is_file():
            pytest.fail(f"{path} missing (CLUSTERFORGE_UPDATE_GOLDEN=1 to create it)")
        want = path.read_text()
        if text != want:
            diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "rendered", n=2))
            pytest.fail(f"{path} differs (CLUSTERFORGE_UPDATE_GOLDEN=1 to accept):\n{diff[:6000]}")
