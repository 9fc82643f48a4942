"""The host tuning's boot-time units follow the blueprint both ways: declared, they are written and enabled (and a
rerun changes nothing); no longer declared, an earlier run's unit is disabled and its unit file and script are
removed, while a unit that was never written is left alone. Run with the role on a root filesystem through the
chroot connection; which units are on disk and enabled comes from the role's one file probe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import copy_rootfs, role_failures

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

UNITS = ("clusterforge-cpu-governor", "clusterforge-acs-disable")


def _state(root: Path, unit: str) -> tuple[bool, bool, bool]:
    """(unit file, script, enabled) of ``unit`` in ``root``."""
    return ((root / f"etc/systemd/system/{unit}.service").is_file(), (root / f"usr/local/sbin/{unit}").is_file(),
            (root / f"etc/systemd/system/multi-user.target.wants/{unit}.service").is_symlink())


def test_units_follow_the_declaration_and_stale_ones_are_removed(tmp_path):
    root = copy_rootfs(tmp_path / "root")
    both = {"host_tuning_cpu_governor": "performance", "host_tuning_disable_acs": True, "host_tuning_irqbalance": False}
    assert role_failures(root, tmp_path / "declared", "host_tuning", "all", both) == []
    assert {u: _state(root, u) for u in UNITS} == {u: (True, True, True) for u in UNITS}
    # the governor is no longer declared: only its unit goes; ACS stays as it was
    acs_only = {**both, "host_tuning_cpu_governor": ""}
    assert role_failures(root, tmp_path / "acs-only", "host_tuning", "all", acs_only) == []
    assert _state(root, "clusterforge-cpu-governor") == (False, False, False)
    assert _state(root, "clusterforge-acs-disable") == (True, True, True)
    # nothing declared: the remaining unit goes too (the governor's, already gone, is left alone)
    none = {**acs_only, "host_tuning_disable_acs": False}
    assert role_failures(root, tmp_path / "none", "host_tuning", "all", none) == []
    assert {u: _state(root, u) for u in UNITS} == {u: (False, False, False) for u in UNITS}
