"""NVMe scratch drive discovery (never by a fixed device name).

The nvme_scratch preflight runs for real (in a Debian 12 root filesystem, through the chroot
connection); drive selection is the ``clusterforge-nvme-scratch`` script's, the one cloud nodes run,
which reads sysfs, ``/dev/disk/by-id``, ``/dev/disk/by-uuid`` and the mount table. Inside the root
filesystem those are plain directories and files (the chroot connection mounts neither ``/sys`` nor
``/proc``), shaped here like an 8+1-drive server: the OS drive (partitioned), drives that hold a
filesystem, belong to another md array or are mounted, an EC2 instance-store drive, blank data drives
and a multipath path node. Only the blank NVMe namespaces are selected.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from clusterforge.ansible.render import ROLES_DIR
from clusterforge.ansible.runner import ansible_path

from .conftest import copy_rootfs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

SAMSUNG = "SAMSUNG MZWLO3T8HCLS-00A07"
EC2 = "Amazon EC2 NVMe Instance Storage"

# name: (model, partitions, holders, filesystem UUID, mounted on)
DRIVES: dict[str, tuple[str, list[str], list[str], str | None, str | None]] = {
    "nvme0n1": ("SAMSUNG MZ1L2960HCJR-00A07", ["nvme0n1p1", "nvme0n1p2"], [], None, None),  # OS drive
    "nvme1n1": (SAMSUNG, [], [], None, None),
    "nvme2n1": (SAMSUNG, [], [], None, None),
    "nvme3n1": (SAMSUNG, [], ["md127"], None, None),                                   # in another array
    "nvme4n1": (SAMSUNG, [], [], "3f1c0a5e-8d7b-4a55-9d4e-1b2f0c7a9e10", None),        # holds a filesystem
    "nvme5n1": (EC2, [], [], None, None),
    "nvme10n1": (SAMSUNG, [], [], None, "/data"),                                      # mounted
    "nvme1c1n1": (SAMSUNG, [], [], None, None),                                        # a multipath path node
}


def shape(root: Path, drives: dict[str, tuple[str, list[str], list[str], str | None, str | None]]) -> None:
    """Write the sysfs, by-id, by-uuid and mount-table view of ``drives`` into the root filesystem ``root``."""
    for d in ("sys/block", "dev/disk/by-id", "dev/disk/by-uuid"):
        shutil.rmtree(root / d, ignore_errors=True)
        (root / d).mkdir(parents=True)
    mounts = ["/dev/nvme0n1p2 / ext4 rw 0 0"]
    for name, (model, parts, holders, fs_uuid, mounted) in drives.items():
        block = root / "sys/block" / name
        (block / "device").mkdir(parents=True)
        (block / "device/model").write_text(model + "\n")
        (block / "holders").mkdir()
        for h in holders:
            (block / "holders" / h).mkdir()
        for p in parts:
            (block / p).mkdir()
        (root / "dev/disk/by-id" / f"nvme-{model.replace(' ', '_')}_{name}").symlink_to(f"../../{name}")
        if fs_uuid:
            (root / "dev/disk/by-uuid" / fs_uuid).symlink_to(f"../../{name}")
        if mounted:
            mounts.append(f"/dev/{name} {mounted} xfs rw 0 0")
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/mounts").write_text("\n".join(mounts) + "\n")


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> Path:
    root = copy_rootfs(tmp_path_factory.mktemp("nvme") / "root")
    shape(root, DRIVES)
    return root


def _preflight(root: Path, tmp: Path, **overrides: Any) -> tuple[list[str], list[str]]:
    """Run the nvme_scratch preflight; returns (debug messages, failure messages)."""
    play = [{"name": "Discover the NVMe data drives.", "hosts": "target", "gather_facts": True,
             "roles": [{"role": "nvme_scratch"}]}]
    r = ansible_runner.run(
        private_data_dir=str(tmp), playbook=play, extravars=overrides, tags="nvme_scratch_preflight", quiet=True,
        inventory={"all": {"hosts": {"target": {"ansible_connection": "community.general.chroot",
                                                "ansible_host": str(root), "ansible_python_interpreter": "/usr/bin/python3"}}}},
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES_DIR), "ANSIBLE_NOCOLOR": "1", "PATH": ansible_path()},
        suppress_env_files=True,
    )
    notes, failures = [], []
    for e in r.events:
        data = e.get("event_data") or {}
        res = data.get("res") or {}
        if e["event"] == "runner_on_ok" and data.get("task_action", "").endswith("debug"):
            notes.append(" ".join(str(res.get("msg", "")).split()))
        if e["event"] == "runner_on_failed":
            failures.append(" ".join(str(res.get("msg", "")).split()))
    assert r.rc is not None and any(e["event"] == "playbook_on_stats" for e in r.events), "the playbook ran"
    return notes, failures


def test_only_blank_unmounted_nvme_namespaces_are_selected(rootfs, tmp_path):
    notes, failures = _preflight(rootfs, tmp_path, nvme_scratch_expected_drives=3)
    assert failures == []
    assert any(n.startswith("NVMe data drives: /dev/nvme1n1, /dev/nvme2n1, /dev/nvme5n1;") for n in notes), notes
    assert any("image mode: no array is built" in n for n in notes)


def test_a_drive_count_different_from_the_blueprint_stops_the_run(rootfs, tmp_path):
    _, failures = _preflight(rootfs, tmp_path, nvme_scratch_expected_drives=8)
    assert len(failures) == 1
    assert "found 3 NVMe data drive(s) (/dev/nvme1n1, /dev/nvme2n1, /dev/nvme5n1) but the blueprint declares 8" in failures[0]
    assert "by-id" in failures[0]


def test_instance_store_discovery_selects_only_instance_storage(rootfs, tmp_path):
    notes, failures = _preflight(rootfs, tmp_path, nvme_scratch_discovery="instance-store")
    assert failures == []
    assert any(n.startswith("NVMe data drives: /dev/nvme5n1;") for n in notes), notes


def test_kernel_device_names_are_refused(rootfs, tmp_path):
    _, failures = _preflight(rootfs, tmp_path, nvme_scratch_devices=["/dev/nvme1n1"])
    assert len(failures) == 1 and "must be /dev/disk/by-id/..." in failures[0] and "/dev/nvme1n1" in failures[0]


def test_no_drives_is_a_clear_skip(tmp_path_factory, tmp_path):
    root = copy_rootfs(tmp_path_factory.mktemp("nvme-none") / "root")
    shape(root, {"nvme0n1": DRIVES["nvme0n1"]})
    notes, failures = _preflight(root, tmp_path, nvme_scratch_expected_drives=8)
    assert failures == []
    assert any(n.startswith("skipped: no NVMe data drives detected") for n in notes), notes
