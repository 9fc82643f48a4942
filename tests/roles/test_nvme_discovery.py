"""NVMe scratch drive discovery (never by a fixed device name).

The nvme_scratch preflight runs for real (in a Debian 12 root filesystem, through the chroot
connection) on device and mount facts shaped like Ansible's ``setup`` output of an 8+1-drive server:
the OS drive (partitioned), drives that hold a filesystem or belong to another md array, and
blank data drives. Only the blank NVMe namespaces are selected.
"""

from __future__ import annotations

import os
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


def _dev(model: str, partitions: dict | None = None, holders: list[str] | None = None,
         uuids: list[str] | None = None) -> dict[str, Any]:
    return {"model": model, "partitions": partitions or {}, "holders": holders or [], "size": "3.49 TB",
            "links": {"ids": [f"nvme-{model.replace(' ', '_')}"], "uuids": uuids or [], "labels": [], "masters": []}}


DEVICES = {
    "nvme0n1": _dev("SAMSUNG MZ1L2960HCJR-00A07", partitions={"nvme0n1p1": {}, "nvme0n1p2": {}}),  # OS drive
    "nvme1n1": _dev(SAMSUNG),
    "nvme2n1": _dev(SAMSUNG),
    "nvme3n1": _dev(SAMSUNG, holders=["md127"]),                                  # in another array
    "nvme4n1": _dev(SAMSUNG, uuids=["3f1c0a5e-8d7b-4a55-9d4e-1b2f0c7a9e10"]),      # holds a filesystem
    "nvme5n1": _dev("Amazon EC2 NVMe Instance Storage"),
    "nvme10n1": _dev(SAMSUNG),
    "sda": _dev("VIRTUAL-DISK"),
    "md127": {"model": None, "partitions": {}, "holders": [], "links": {"ids": [], "uuids": ["x"], "labels": [],
                                                                        "masters": []}},
}
MOUNTS = [{"device": "/dev/nvme0n1p2", "mount": "/"}, {"device": "/dev/nvme10n1", "mount": "/data"}]


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory) -> Path:
    return copy_rootfs(tmp_path_factory.mktemp("nvme") / "root")


def _preflight(root: Path, tmp: Path, **overrides: Any) -> tuple[list[str], list[str]]:
    """Run the nvme_scratch preflight with recorded facts; returns (debug messages, failure messages)."""
    extravars = {"__nvme_scratch_device_facts": DEVICES, "__nvme_scratch_mount_facts": MOUNTS, **overrides}
    play = [{"name": "Discover the NVMe data drives.", "hosts": "target", "gather_facts": True,
             "roles": [{"role": "nvme_scratch"}]}]
    r = ansible_runner.run(
        private_data_dir=str(tmp), playbook=play, extravars=extravars, tags="nvme_scratch_preflight", quiet=True,
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


def test_no_drives_is_a_clear_skip(rootfs, tmp_path):
    notes, failures = _preflight(rootfs, tmp_path, __nvme_scratch_device_facts={}, nvme_scratch_expected_drives=8)
    assert failures == []
    assert any(n.startswith("skipped: no NVMe data drives detected") for n in notes), notes
