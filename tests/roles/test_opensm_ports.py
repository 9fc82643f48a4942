"""opensm never becomes a second subnet manager on an NVSwitch management port.

On NVLink 5 baseboards (HGX/DGX B200) the CX7 bridge exposes NVSwitch management ports as InfiniBand ports (their
VPD carries SMDL=SW_MNG, NVIDIA Fabric Manager user guide), and Fabric Manager's unit runs NVLSM on one of them. The
distribution's opensm.service (Debian and Ubuntu ship the same packaging) starts ``opensm@<GUID>`` on every port
``ibstat -p`` lists when /etc/default/opensm says ``PORTS=ALL``, its default: on a B200 that is also the InfiniBand
subnet-manager host that would put opensm on NVLSM's port.

The rdma role runs for real in a Debian root as the DGX example's subnet-manager host is rendered (with the real
opensm package from Debian's archive); then the effective ``opensm.service`` (the package's unit and the drop-ins, as
systemd merges them) is started the way systemd would, on a sysfs holding one data-fabric port and one management
port, with ``systemctl`` recording what it is asked to start and ``ibstat -p`` listing every port as the real one does.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.resolved import resolve
from blueprints.role_vars import node_role_vars
from tests.conftest import EXAMPLES

from .conftest import copy_rootfs, role_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

DATA, MGMT = ("mlx5_0", "0x0c42a103001a2b3c"), ("mlx5_8", "0xcc40f3030027f630")
"""A data-fabric ConnectX port and a CX7 bridge NVSwitch management port (GUIDs as `ibstat -p` prints them)."""


def _gid(guid: str) -> str:
    h = guid[2:]
    return "fe80:0000:0000:0000:" + ":".join(h[i:i + 4] for i in range(0, 16, 4))


def _effective_execstart(root: Path) -> str:
    """The ExecStart systemd runs for opensm.service: the package's unit, then drop-ins in name order (an empty
    ``ExecStart=`` clears the list)."""
    files = [root / "lib/systemd/system/opensm.service", *sorted((root / "etc/systemd/system/opensm.service.d").glob("*.conf"))]
    cmd: list[str] = []
    for f in files:
        for line in f.read_text().splitlines():
            if line.startswith("ExecStart="):
                value = line.split("=", 1)[1]
                cmd = [value] if value else []
    assert len(cmd) == 1, cmd
    return cmd[0]


def _start(root: Path) -> list[str]:
    sysfs = root / "run/standin-sysfs/class/infiniband"
    for (dev, guid), vpd in ((DATA, "PN=MCX75310AAS-NEAT\n"), (MGMT, "PN=CX7-BRIDGE\nSMDL=SW_MNG\n")):
        port = sysfs / dev / "ports/1"
        (port / "gids").mkdir(parents=True, exist_ok=True)
        (port / "gids/0").write_text(_gid(guid) + "\n")
        (port / "link_layer").write_text("InfiniBand\n")
        (sysfs / dev / "device").mkdir(parents=True, exist_ok=True)
        (sysfs / dev / "device/vpd").write_text(vpd)
    bin_dir = root / "run/standin-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "systemctl").write_text('#!/bin/sh\necho "$*" >> /run/standin-systemctl.log\n')
    (bin_dir / "systemctl").chmod(0o755)
    # the real ibstat -p lists the port GUID of every InfiniBand port of every device
    (root / "usr/sbin/ibstat").write_text(f"#!/bin/sh\necho {DATA[1]}\necho {MGMT[1]}\n")
    (root / "usr/sbin/ibstat").chmod(0o755)
    log = root / "run/standin-systemctl.log"
    log.unlink(missing_ok=True)
    argv = shlex.split(_effective_execstart(root).replace("\\\\", "\\"))  # systemd unescapes \\ in unit values
    env = ["env", "SYSFS=/run/standin-sysfs", "PORTS=ALL", "PATH=/run/standin-bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    r = subprocess.run(["chroot", str(root), *env, *argv], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return log.read_text().split() if log.exists() else []


def test_opensm_starts_on_the_data_port_and_never_on_the_nvswitch_management_port(tmp_path):
    bp = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint
    sm = next(r.settings for r in resolve(bp).groups if r.settings.opensm)  # the subnet-manager host's group
    rendered = node_role_vars(sm, "rdma") | {"rdma_devices": [f"{DATA[0]}:1"]}
    root = copy_rootfs(tmp_path / "root")
    failures, _ = role_run(root, tmp_path / "run", "rdma", "rdma_preflight,rdma_install,rdma_configure", rendered)
    assert failures == []
    assert (root / "lib/systemd/system/opensm.service").exists()  # Debian's own unit, from its archive
    started = _start(root)
    assert f"opensm@{DATA[1]}.service" in started, started
    assert not [s for s in started if MGMT[1] in s], started
