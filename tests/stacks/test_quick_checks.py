"""The health check without a scheduler: ``clusterforge-slurm-health --no-scheduler``, as every EC2 node runs it at the
end of its first boot (step ``checks``, :func:`stacks.node_status.quick_checks`).

The program (``roles/slurm_node/files/clusterforge-slurm-health``, the one slurmd runs on Slurm compute nodes) runs
for real with a stand-in ``nvidia-smi`` printing a recorded ``nvidia-smi -q -x`` of a DGX H100, GPU device files made
with mknod (NVIDIA's major number 195), a mount table, and a recording ``scontrol`` that must never be called: the
verdict is the exit status and the ``FAIL`` lines, the last of which the boot step runner reports. The contract is
read the way an EC2 node reads it: the ``health`` object of its ``node-settings.json``
(:attr:`blueprints.settings.NodeSettings.health`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from blueprints.settings import node_settings
from tests.conftest import EXAMPLES, REPO

HEALTH = REPO / "roles" / "slurm_node" / "files" / "clusterforge-slurm-health"
DGX_SMI = REPO / "tests" / "fixtures" / "node" / "dgx-h100" / "dgx-01" / "nvidia-smi-q-x.xml"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the GPU device files are made with mknod (CI runs as root)")


class Node:
    """A p5 node's settings (the example's GPU group) in a temporary folder, with stand-in hardware that passes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
        self.settings: dict[str, Any] = json.loads(s.model_dump_json(exclude_none=True))
        self.devices = []
        for i in range(s.health.gpu_count):
            dev = tmp / f"nvidia{i}"
            os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(195, i))
            self.devices.append(str(dev))
        self.settings["health"]["gpu_devices"] = self.devices
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.xml = DGX_SMI.read_text().replace("<driver_version>550.90.07</driver_version>",
                                               f"<driver_version>{s.health.driver_branch}.82.07</driver_version>")
        (self.bin / "nvidia-smi").write_text(f"#!/bin/sh\ncat {tmp / 'smi.xml'}\n")
        (self.bin / "scontrol").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp / 'scontrol.log'}\n")
        for tool in ("nvidia-smi", "scontrol"):
            (self.bin / tool).chmod(0o755)
        self.mounts = list(s.health.mounts)

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        (self.tmp / "smi.xml").write_text(self.xml)
        config = self.tmp / "node-settings.json"
        config.write_text(json.dumps(self.settings))
        (self.tmp / "mountinfo").write_text("".join(f"{40 + i} 22 0:{50 + i} / {m} rw shared:{i} - xfs /dev/md127 rw\n"
                                                    for i, m in enumerate(self.mounts)))
        argv = ["--config", str(config), "--section", "health", "--mountinfo", str(self.tmp / "mountinfo")]
        return subprocess.run([sys.executable, str(HEALTH), *argv, *(extra or ("--no-scheduler",))],
                              capture_output=True, text=True, env={"PATH": f"{self.bin}:/usr/bin:/bin"}, timeout=70,
                              check=False)

    def scontrol(self) -> str:
        log = self.tmp / "scontrol.log"
        return log.read_text() if log.exists() else ""


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def _fails(r: subprocess.CompletedProcess[str]) -> list[str]:
    return [x.removeprefix("clusterforge-slurm-health: ") for x in (r.stdout + r.stderr).splitlines() if "FAIL" in x]


def test_a_healthy_node_passes_silently_and_slurm_is_never_asked(node: Node) -> None:
    r = node.run()
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("", "") and node.scontrol() == ""


@pytest.mark.parametrize(("fault", "line"), [
    ("gpu", ("FAIL gpu.count: 7 of 8 GPUs visible: check `dmesg` for XID errors and `lspci | grep -i nvidia`; reseat "
             "or replace the GPU")),
    ("model", ("FAIL gpu.count: GPU model NVIDIA A100-SXM4-80GB, declared h100-sxm: fix hardware.gpu in the blueprint "
               "or move the node")),
    ("driver", ("FAIL gpu.driver: driver 535.183.01, declared branch {branch}: install the {branch} branch (apt-mark "
                "hold it) or change software.driver_branch")),
    ("ecc", ("FAIL gpu.ecc: uncorrectable ECC errors or row-remap failure on 00000000:18:00.0: reset the GPU "
             "(nvidia-smi -r) or replace it; run `dcgmi diag -r 3`")),
    ("mig", "FAIL gpu.mig: MIG enabled on 1 GPU(s): nvidia-smi -mig 0 on every GPU, then reset the GPUs"),
    ("mount", ("FAIL storage.mounts: /fsx not mounted: mount it (`mount -a`, check `journalctl -b` for the mount unit) "
               "or fix the storage section of the blueprint")),
])
def test_each_failed_check_is_one_fail_line_and_exit_1_without_a_drain(node: Node, fault: str, line: str) -> None:
    if fault == "gpu":
        node.xml = re.sub(r"\s*<gpu id=\"[^\"]+\">.*?</gpu>", "", node.xml, count=1, flags=re.DOTALL)
    elif fault == "model":
        node.xml = node.xml.replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
    elif fault == "driver":
        node.xml = re.sub(r"<driver_version>[^<]*</driver_version>", "<driver_version>535.183.01</driver_version>",
                          node.xml)
    elif fault == "ecc":
        node.xml = node.xml.replace("<dram_uncorrectable>0</dram_uncorrectable>",
                                    "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    elif fault == "mig":
        node.xml = node.xml.replace("<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>", 1)
    elif fault == "mount":
        node.mounts.remove("/fsx")
    r = node.run()
    assert r.returncode == 1
    assert _fails(r) == [line.format(branch=node.settings["health"]["driver_branch"])]
    assert node.scontrol() == "", "no drain: there is no scheduler to ask"


def test_several_failures_end_with_the_first_and_how_many_more(node: Node) -> None:
    """The runner reports the last FAIL line: the first failure, as a drain reason would name it."""
    os.unlink(node.devices[3])
    node.mounts = ["/scratch"]
    r = node.run()
    assert r.returncode == 1
    fails = _fails(r)
    assert fails[:2] == [(f"FAIL gpu.devices: {node.devices[3]} missing: load the NVIDIA driver (nvidia-modprobe / "
                          "nvidia-persistenced) or check `dmesg | grep -i nvrm`, then resume the node"),
                         ("FAIL storage.mounts: /fsx not mounted: mount it (`mount -a`, check `journalctl -b` for the "
                          "mount unit) or fix the storage section of the blueprint")]
    assert fails[-1] == fails[0] + " (+1 more)" and len(fails) == 3


def test_a_node_without_gpus_checks_its_mounts_only(node: Node) -> None:
    node.settings["health"] = {"gpu_count": 0, "gpu_names": [], "gpu_devices": [], "driver_branch": "",
                               "training_node": False, "mounts": ["/fsx"]}
    (node.bin / "nvidia-smi").unlink()
    node.mounts = ["/fsx"]
    assert node.run().returncode == 0
    node.mounts = []
    r = node.run()
    assert r.returncode == 1 and _fails(r)[-1].startswith("FAIL storage.mounts: /fsx not mounted")


@pytest.mark.parametrize(("settings", "says"), [
    ({"group": "gpu"}, "node-settings.json has no `health` object: rerun `clusterforge up` to rewrite it"),
    ({"health": {"gpu_count": "8"}}, "gpu_count must be int, not '8'"),
    ({"health": {"mounts": [3]}}, "each mount is a path or"),
])
def test_an_unusable_contract_is_one_fail_line_and_exit_2(node: Node, settings: dict[str, Any], says: str) -> None:
    node.settings = settings
    r = node.run()
    assert r.returncode == 2 and node.scontrol() == ""
    (line,) = (r.stdout + r.stderr).splitlines()
    assert line.startswith("clusterforge-slurm-health: FAIL config: ") and says in line


def test_no_scheduler_and_dry_run_exclude_each_other(node: Node) -> None:
    r = node.run("--no-scheduler", "--dry-run")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr and node.scontrol() == ""
