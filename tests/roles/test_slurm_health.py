"""The Slurm health check (``roles/slurm_node/files/clusterforge-slurm-health``) run for real, as slurmd runs it.

Each test runs the program as a process with a stand-in ``nvidia-smi`` that prints a recorded ``nvidia-smi -q -x``
(``tests/fixtures/node/*/nvidia-smi-q-x.xml``, broken the way each fault shows) and a recording ``scontrol`` on PATH
that keeps the node's state and reason the way slurmctld does (``update state=drain reason=...`` sets DRAIN and the
reason, ``state=resume`` clears both), so drain and resume are seen from Slurm's side. GPU device files are real
character devices with the NVIDIA major number (195) made with mknod in a temporary folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from blueprints.catalog import catalog
from tests.conftest import REPO
from validate.parsers.node import parse_nvidia_smi_xml

HEALTH = REPO / "roles/slurm_node/files/clusterforge-slurm-health"
FIXTURES = REPO / "tests/fixtures/node"
DGX = FIXTURES / "dgx-h100/dgx-01/nvidia-smi-q-x.xml"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the GPU device files are made with mknod (CI runs as root)")

SCONTROL = r'''#!{python}
"""Recording scontrol: `show node N` prints the node from the state file, `update` changes it as slurmctld does."""
import json, os, sys
state_file = os.environ["SCONTROL_STATE"]
st = json.load(open(state_file))
with open(os.environ["SCONTROL_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1:3] == ["show", "node"]:
    if sys.argv[3] != st["name"]:
        print(f"Node {{sys.argv[3]}} not found", file=sys.stderr); sys.exit(1)
    print(f"NodeName={{st['name']}} Arch=x86_64 CoresPerSocket=2\n   State={{st['state']}} ThreadsPerCore=1")
    if st["reason"]:
        print(f"   Reason={{st['reason']}} [root@2026-12-02T13:00:00]")
    sys.exit(0)
args = dict(a.split("=", 1) for a in sys.argv[2:])
if sys.argv[1] != "update" or args.get("nodename") != st["name"]:
    sys.exit(1)
if args.get("state") == "drain":
    st["state"] = "IDLE+DRAIN"; st["reason"] = args["reason"]
elif args.get("state") == "resume":
    st["state"] = "IDLE"; st["reason"] = ""
json.dump(st, open(state_file, "w"))
'''


def _names(key: str) -> list[str]:
    """The ``nvidia-smi`` names the catalog maps to GPU ``key`` (what the renderer puts in ``gpu_names``)."""
    return [n for n, k in catalog().extras["gpu_aliases"]["names"].items() if k == key]


class Node:
    """A temporary node: stand-in tools on PATH, device files, a mount table, the contract and Slurm's view."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.smi_xml = tmp / "smi.xml"
        self.smi_xml.write_text(DGX.read_text())
        self.smi_rc = 0
        self.smi_sleep = 0
        self.smi_present = True
        (self.bin / "scontrol").write_text(SCONTROL.format(python=sys.executable))
        (self.bin / "scontrol").chmod(0o755)
        self.state = tmp / "state.json"
        self.log = tmp / "scontrol.log"
        self.set_slurm("IDLE", "")
        self.devices = []
        for i in range(8):
            dev = tmp / f"nvidia{i}"
            os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))
            self.devices.append(str(dev))
        self.mountinfo = tmp / "mountinfo"
        self.mountinfo.write_text(
            "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
            "40 22 9:127 / /scratch rw,noatime shared:20 - xfs /dev/md127 rw,attr2\n"
            "41 22 0:50 / /lustre rw,relatime shared:21 - lustre 10.0.0.1@o2ib:/fs rw\n"
            "42 22 0:51 / /mnt/with\\040space rw shared:22 - nfs4 srv:/x rw\n")
        self.contract: dict[str, Any] = {
            "gpu_count": 8, "gpu_model": "h100-sxm", "gpu_names": _names("h100-sxm"), "gpu_devices": self.devices,
            "mounts": ["/scratch", {"target": "/lustre", "fstype": "lustre"}, "/mnt/with space"],
            "driver_branch": "550", "training_node": True, "timeout_s": 50, "reason_prefix": "cf-health"}
        self.config = tmp / "slurm-health.json"

    def set_slurm(self, state: str, reason: str) -> None:
        self.state.write_text(json.dumps({"name": "gpu-01", "state": state, "reason": reason}))

    def slurm(self) -> dict[str, str]:
        return dict(json.loads(self.state.read_text()))

    def updates(self) -> list[list[str]]:
        """The ``scontrol update`` calls the program made."""
        if not self.log.exists():
            return []
        return [c for c in map(json.loads, self.log.read_text().splitlines()) if c[0] == "update"]

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        if not self.config.exists() or extra != ("--keep-config",):
            self.config.write_text(json.dumps(self.contract))
        smi = self.bin / "nvidia-smi"
        smi.unlink(missing_ok=True)
        if self.smi_present:
            smi.write_text(f"#!/bin/sh\n[ {self.smi_sleep} = 0 ] || exec sleep {self.smi_sleep}\n"
                           f"cat {shlex.quote(str(self.smi_xml))}\nexit {self.smi_rc}\n")
            smi.chmod(0o755)
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-01", "SCONTROL_STATE": str(self.state),
               "SCONTROL_LOG": str(self.log)}
        args = [a for a in extra if a != "--keep-config"]
        return subprocess.run([str(HEALTH), "--config", str(self.config), "--mountinfo", str(self.mountinfo), *args],
                              capture_output=True, text=True, env=env, timeout=70, check=False)

    def break_smi(self, pattern: str, repl: str, count: int = 1) -> None:
        text, n = re.subn(pattern, repl, self.smi_xml.read_text(), count=count, flags=re.DOTALL)
        assert n == count, f"the recording has {pattern!r}"
        self.smi_xml.write_text(text)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_healthy_node_stays_up(node: Node) -> None:
    r = node.run()
    assert r.returncode == 0, r.stderr
    assert node.updates() == []
    assert node.slurm() == {"name": "gpu-01", "state": "IDLE", "reason": ""}


def test_a_node_without_gpus_checks_its_mounts_only(node: Node) -> None:
    """The renderer's contract for a group without GPUs (blueprints.slurm.health_expectations): no model (null)."""
    node.contract.update(gpu_count=0, gpu_model=None, gpu_devices=[], gpu_names=None, driver_branch=None)
    node.smi_present = False
    assert node.run().returncode == 0
    node.mountinfo.write_text("22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n")
    assert node.run().returncode == 1
    assert node.slurm()["reason"].startswith("cf-health: storage.mounts: /scratch not mounted; /lustre not mounted")


def test_missing_gpu_drains_once_then_resumes_when_fixed(node: Node) -> None:
    node.break_smi(r"\s*<gpu id=\"[^\"]+\">.*?</gpu>", "")  # the first GPU fell off the bus
    r = node.run()
    assert r.returncode == 1
    s = node.slurm()
    assert s["state"] == "IDLE+DRAIN"
    assert s["reason"].startswith("cf-health: gpu.count: 7 of 8 GPUs visible: check `dmesg` for XID errors")
    assert "\n" not in s["reason"] and "Traceback" not in r.stderr
    node.run()  # still broken: the same reason is not written again
    assert len(node.updates()) == 1
    node.smi_xml.write_text(DGX.read_text())
    assert node.run().returncode == 0
    assert node.updates()[-1] == ["update", "nodename=gpu-01", "state=resume"]
    assert node.slurm() == {"name": "gpu-01", "state": "IDLE", "reason": ""}


def test_an_operators_drain_is_never_undone_nor_overwritten(node: Node) -> None:
    node.set_slurm("IDLE+DRAIN", "maintenance: swap PSU (ticket 42)")
    assert node.run().returncode == 0
    node.break_smi(r"<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>")
    assert node.run().returncode == 1
    assert node.updates() == []
    assert node.slurm()["reason"] == "maintenance: swap PSU (ticket 42)"


@pytest.mark.parametrize(("fault", "check"), [
    ("ecc", "gpu.ecc: uncorrectable ECC errors or row-remap failure on 00000000:18:00.0"),
    ("remap", "gpu.ecc: uncorrectable ECC errors or row-remap failure on 00000000:18:00.0"),
    ("mig", "gpu.mig: MIG enabled on 1 GPU(s)"),
    ("driver", "gpu.driver: driver 535.183.01, declared branch 550"),
    ("model", "gpu.count: GPU model NVIDIA H100 80GB HBM3, declared l40s"),
    ("device", "gpu.devices: {dev} missing"),
    ("not-nvidia", "gpu.devices: {dev} not an NVIDIA character device"),
    ("mount", "storage.mounts: /scratch not mounted"),
    ("fstype", "storage.mounts: /lustre is nfs4"),
    ("smi-missing", "gpu.count: nvidia-smi not found"),
    ("smi-fails", "gpu.count: nvidia-smi failed (exit 9)"),
])
def test_each_fault_drains_with_its_check_and_fix(node: Node, fault: str, check: str) -> None:
    dev = node.devices[3]
    if fault == "ecc":
        node.break_smi(r"<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>")
    elif fault == "remap":
        node.break_smi(r"<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>Yes</remapped_row_failure>")
    elif fault == "mig":
        node.break_smi(r"<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>")
    elif fault == "driver":
        node.break_smi(r"<driver_version>550.90.07</driver_version>", "<driver_version>535.183.01</driver_version>")
    elif fault == "model":
        node.contract.update(gpu_model="l40s", gpu_names=_names("l40s"))
    elif fault == "device":
        os.unlink(dev)
    elif fault == "not-nvidia":
        os.unlink(dev)
        os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers
    elif fault == "mount":
        node.mountinfo.write_text("\n".join(x for x in node.mountinfo.read_text().splitlines() if " /scratch " not in x))
    elif fault == "fstype":
        node.mountinfo.write_text(node.mountinfo.read_text().replace("- lustre 10.0.0.1@o2ib:/fs", "- nfs4 srv:/fs"))
    elif fault == "smi-missing":
        node.smi_present = False
    elif fault == "smi-fails":
        node.smi_xml.write_text("")
        node.smi_rc = 9
    r = node.run()
    assert r.returncode == 1, r.stderr
    reason = node.slurm()["reason"]
    assert reason.startswith("cf-health: " + check.format(dev=dev)), reason
    assert node.slurm()["state"] == "IDLE+DRAIN"


def test_a_hung_nvidia_smi_is_cut_at_the_budget_and_drains(node: Node) -> None:
    node.contract["timeout_s"] = 12
    node.smi_sleep = 300
    t0 = time.monotonic()
    r = node.run()
    took = time.monotonic() - t0
    assert took < 12, f"the run took {took:.1f} s, over its 12 s budget"
    assert r.returncode == 1
    assert node.slurm()["reason"].startswith("cf-health: gpu.count: nvidia-smi failed (nvidia-smi did not answer")


def test_several_failures_name_the_first_and_count_the_rest(node: Node) -> None:
    os.unlink(node.devices[0])
    node.break_smi(r"<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>")
    assert node.run().returncode == 1
    reason = node.slurm()["reason"]
    assert reason.startswith("cf-health: gpu.devices: ") and reason.endswith(" (+1 more)")


@pytest.mark.parametrize(("text", "says"), [
    (None, "slurm-health.json is missing: rerun `clusterforge up`"),
    ("{not json", "slurm-health.json is unreadable"),
    ('{"gpu_count": "8"}', "gpu_count must be int, not '8'"),
    ('{"timeout_s": 60}', "timeout_s 60 must be at least 1 and below 60"),
    ('{"mounts": [3]}', "each mount is a path or"),
])
def test_a_broken_contract_is_one_line_and_drains(node: Node, text: str | None, says: str) -> None:
    if text is None:
        node.config.unlink(missing_ok=True)
    else:
        node.config.write_text(text)
    r = node.run("--keep-config") if text is not None else _run_without_config(node)
    assert r.returncode == 2
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert node.slurm()["reason"].startswith("cf-health: config: ")


def _run_without_config(node: Node) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{node.bin}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-01", "SCONTROL_STATE": str(node.state),
           "SCONTROL_LOG": str(node.log)}
    return subprocess.run([str(HEALTH), "--config", str(node.config)], capture_output=True, text=True,
                          env=env, timeout=70, check=False)


def test_dry_run_prints_the_drain_and_changes_nothing(node: Node) -> None:
    os.unlink(node.devices[0])
    r = node.run("--dry-run")
    assert r.returncode == 1
    assert r.stdout.startswith("scontrol update nodename=gpu-01 state=drain reason=cf-health: gpu.devices: ")
    assert node.updates() == []


def _load() -> ModuleType:
    loader = SourceFileLoader("clusterforge_slurm_health", str(HEALTH))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("xml", sorted(FIXTURES.glob("*/*/nvidia-smi-q-x.xml")), ids=lambda p: p.parent.name)
def test_reads_nvidia_smi_as_the_node_suite_does(xml: Path) -> None:
    """The program's parser gives the node suite's values (validate.parsers.node) for every field it judges."""
    mine = _load().parse_smi(xml.read_text())
    suite = parse_nvidia_smi_xml(xml.read_text())
    assert mine is not None and suite is not None
    assert mine["driver_version"] == suite["driver_version"]
    keys = ("bus_id", "name", "mig_current", "ecc_uncorrectable_volatile", "remap_failure")
    assert [{k: g[k] for k in keys} for g in mine["gpus"]] == [{k: g[k] for k in keys} for g in suite["gpus"]]
    assert len(mine["gpus"]) > 0
