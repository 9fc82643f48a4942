"""The role tests' root filesystem copies: overlay mounts of the cached Debian root that keep every write to themselves,
snapshots of a converged copy, and removal that unmounts first (a killed run's copies are swept at the next start)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import (
    build_rootfs,
    copy_rootfs,
    layers_of,
    remove_stale_overlays,
    remove_tree,
    root_overlays,
    snapshot_root,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting overlays needs root (CI runs as root)")


def test_a_copy_keeps_its_writes_and_a_snapshot_keeps_its_own(tmp_path: Path) -> None:
    base = build_rootfs()
    copy = copy_rootfs(tmp_path / "root", module_owned=False)
    try:
        assert root_overlays(tmp_path) == [copy]
        assert (copy / "usr/bin/python3").exists() and (copy / "etc/dpkg/dpkg.cfg.d/unsafe-io").is_file()
        (copy / "etc/converged").write_text("yes\n")
        (copy / "etc/hostname").unlink()  # a deletion is a whiteout in the copy's layer, the cached root keeps it
        assert not (base / "etc/converged").exists() and (base / "etc/hostname").exists()
        # the shared .deb cache is linked into the copy's own layer, where apt finds it
        debs = sorted(p.name for p in (copy / "var/cache/apt/archives").glob("*.deb"))
        assert debs and (layers_of(copy) / "upper/var/cache/apt/archives" / debs[0]).stat().st_nlink >= 2

        snap = snapshot_root(copy, tmp_path / "snap")
        assert snap in root_overlays(tmp_path)
        assert (snap / "etc/converged").read_text() == "yes\n" and not (snap / "etc/hostname").exists()
        (snap / "etc/converged").write_text("altered\n")
        assert (copy / "etc/converged").read_text() == "yes\n"
        remove_tree(snap)
        assert not snap.exists() and not layers_of(snap).exists() and root_overlays(tmp_path) == [copy]
        assert (copy / "etc/converged").read_text() == "yes\n"
    finally:
        remove_tree(copy)
    assert root_overlays(tmp_path) == [] and not copy.exists() and not layers_of(copy).exists()
    assert (base / "etc/hostname").exists()


def test_a_killed_runs_copies_are_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    gone = copy_rootfs(tmp_path / "gone", module_owned=False)
    alive = copy_rootfs(tmp_path / "alive", module_owned=False)
    try:
        (layers_of(gone) / "owner").write_text(f"{dead}\n")  # the process that mounted it has exited
        remove_stale_overlays()
        assert root_overlays(tmp_path) == [alive] and not gone.exists()
        assert (alive / "etc/os-release").exists()
    finally:
        remove_tree(alive)
        remove_tree(gone)
