"""The Lustre client never gets a mount that cannot mount: without a package source for the host's OS (neither
Debian nor Ubuntu ships a client) the run stops in preflight with the reason, and no fstab entry is written.
The role runs for real in a Debian root filesystem (and one shaped as each claimed Ubuntu release)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .conftest import UBUNTU, copy_rootfs, role_failures, shape_as

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

MOUNT = {"name": "lustre", "mount": "/lustre", "source": "192.168.100.2@o2ib:/lustre1", "options": ["flock", "_netdev"],
         "stripes": []}


def _play(root: Path, tmp: Path, **extravars: Any) -> list[str]:
    return role_failures(root, tmp, "lustre_client", "lustre_client_preflight,lustre_client_configure",
                         {"lustre_client_mounts": [MOUNT], "lustre_client_lnet_networks": "o2ib0(ibp24s0)", **extravars})


@pytest.mark.parametrize("os_name", ["debian-12", *UBUNTU])
def test_no_client_source_stops_before_any_fstab_entry(tmp_path, os_name):
    root = copy_rootfs(tmp_path / "root")
    shape_as(root, os_name)
    before = (root / "etc/fstab").read_text() if (root / "etc/fstab").exists() else ""
    failures = _play(root, tmp_path / "run")
    assert len(failures) == 1 and failures[0].startswith("no Lustre client package source for"), failures
    assert ("Ubuntu" if os_name.startswith("ubuntu") else "Debian") in failures[0]
    after = (root / "etc/fstab").read_text() if (root / "etc/fstab").exists() else ""
    assert after == before and "/lustre" not in after
    assert not (root / "etc/modprobe.d/lustre.conf").exists()
    # an image that carries the client out of band: the entry is written
    assert _play(root, tmp_path / "run2", lustre_client_install_packages=False) == []
    assert "192.168.100.2@o2ib:/lustre1 /lustre lustre" in (root / "etc/fstab").read_text()
