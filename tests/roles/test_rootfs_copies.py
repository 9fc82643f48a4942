"""The role tests' root filesystem copies do not pile up: a run's disk use is what the CI machine can hold.

A root filesystem copy is 0.3 GB before the roles install anything and up to 1.5 GB after; stop 40's CI run failed
with ENOSPC ("No space left on device") after 50 minutes when copies and old pytest folders filled the disk. Copies
are removed when the module that made them ends, converge copies when the run ends, and a copy that has no room
fails at once with one line instead of a cascade of OSErrors.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.roles import conftest as roles


def test_module_copies_are_removed_newest_first_down_to_the_mark(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERFORGE_KEEP_ROOTS", raising=False)
    monkeypatch.setattr(roles, "COPIES", [])
    earlier, mine = tmp_path / "earlier", [tmp_path / "a", tmp_path / "b"]
    for d in (earlier, *mine):
        (d / "etc").mkdir(parents=True)
        roles.COPIES.append(d)
    roles.remove_copies(1)
    assert earlier.is_dir() and roles.COPIES == [earlier]
    assert not any(d.exists() for d in mine)


def test_keep_roots_keeps_them_to_look_into(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERFORGE_KEEP_ROOTS", "1")
    monkeypatch.setattr(roles, "COPIES", [tmp_path])
    roles.remove_copies(0)
    roles.remove_run("no-such-run")
    assert tmp_path.is_dir() and roles.COPIES == [tmp_path]


def test_a_finished_runs_converges_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERFORGE_KEEP_ROOTS", raising=False)
    monkeypatch.setattr(roles, "RUNS", tmp_path)
    for uid in ("this-run", "another-run"):
        (tmp_path / uid / "dgx-h100" / "root-dgx-01" / "etc").mkdir(parents=True)
    roles.remove_run("this-run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["another-run"]


def test_no_room_is_one_line_naming_the_place_and_the_fix(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free / 1e9
    with pytest.raises(pytest.fail.Exception) as e:
        roles.check_room(tmp_path / "not-yet" / "root", need_gb=free + 1000)
    text = str(e.value)
    assert "\n" not in text
    assert f"no room for a root filesystem copy at {tmp_path / 'not-yet' / 'root'}: " in text
    assert "GB free" in text and "/tmp/pytest-of-*" in text and "TMPDIR" in text
    roles.check_room(tmp_path, need_gb=0.001)  # room: no failure


def test_the_controller_names_the_run_before_the_workers_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/conftest.py's pytest_configure sets the identifier in the controlling process only (xdist's workers
    # inherit it with the environment); a worker never makes its own
    from types import SimpleNamespace

    from tests.conftest import pytest_configure

    monkeypatch.delenv("CLUSTERFORGE_TEST_RUN_UID", raising=False)
    pytest_configure(SimpleNamespace(workerinput={"workerid": "gw0"}))  # type: ignore[arg-type]
    assert "CLUSTERFORGE_TEST_RUN_UID" not in os.environ
    pytest_configure(SimpleNamespace())  # type: ignore[arg-type]
    uid = os.environ["CLUSTERFORGE_TEST_RUN_UID"]
    assert len(uid) == 32 and roles._run_uid() == uid
    pytest_configure(SimpleNamespace())  # type: ignore[arg-type]
    assert os.environ["CLUSTERFORGE_TEST_RUN_UID"] == uid  # an identifier already set (a rerun's) is kept
