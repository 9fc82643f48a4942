"""DCGM on a host that ran DCGM 3, installed as NVIDIA's procedure says (issue 28 kind 8), run for real.

NVIDIA's DCGM installation procedure (https://docs.nvidia.com/datacenter/dcgm/latest/installation.html) purges the
DCGM 3 packages (``datacenter-gpu-manager``, ``datacenter-gpu-manager-config``), then installs
``datacenter-gpu-manager-4-cuda<major>`` for the CUDA major the driver reports, with its recommends. The DGX example on
Debian 12 starts from a root that has DCGM 3 installed from the same CUDA repository (the stand-in of the debian12
directory carries the recorded ``datacenter-gpu-manager 1:3.3.0`` stanza, ``tests/fixtures/cuda-repos``); the
``nvidia_driver`` role runs with ``run_site``; dpkg's database then says what the host has.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked

from .conftest import copy_rootfs, dgx_variant, dpkg_packages, shape_as, vendor_mirror

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

HOST = "dgx-01"
OS = "debian-12"
DIST = "debian12"


def _chroot(root: Path, *cmd: str) -> None:
    subprocess.run(["chroot", str(root), *cmd], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcgm")
    loaded = load_checked(dgx_variant(tmp, "dgx-dcgm3", OS))
    root = copy_rootfs(tmp / "root")
    shape_as(root, OS)
    mirror = vendor_mirror()
    try:
        # the host ran DCGM 3 from NVIDIA's CUDA repository, as vendor images shipped it
        (root / "etc/apt/keyrings").mkdir(parents=True, exist_ok=True)
        (root / "etc/apt/keyrings/dcgm3.asc").write_text((mirror.root / "cuda" / DIST / "x86_64" / "3bf863cc.pub").read_text())
        (root / "etc/apt/sources.list.d/dcgm3.sources").write_text(
            f"Types: deb\nURIs: {mirror.base_url}/cuda/{DIST}/x86_64/\nSuites: /\nSigned-By: /etc/apt/keyrings/dcgm3.asc\n")
        _chroot(root, "apt-get", "update", "-q")
        _chroot(root, "apt-get", "install", "-y", "-q", "--no-install-recommends", "datacenter-gpu-manager")
        before = dpkg_packages(root)
        for rel in ("etc/apt/sources.list.d/dcgm3.sources", "etc/apt/keyrings/dcgm3.asc"):
            (root / rel).unlink()
        out = tmp / "ansible"
        run = {"tags": ["nvidia_driver"], "extravars": mirror.extravars(),
               "connection_override": chroot_connection({HOST: root})}
        rc = run_site(loaded, out, **run)
        first = load_summary(out)
        run_site(loaded, out, **run)
        second = load_summary(out)
    finally:
        mirror.stop()
    return {"before": before, "rc": rc, "first": first, "rerun": second, "after": dpkg_packages(root)}


def test_dcgm_3_is_purged_and_dcgm_4_installed_for_the_drivers_cuda_with_its_recommends(converged):
    before, after = converged["before"], converged["after"]
    assert before["datacenter-gpu-manager"][2] == "installed", "the host ran DCGM 3 before the converge"
    assert converged["rc"] == 0, converged["first"]["failures"]
    # purged: dpkg does not know it any more (not even its configuration files)
    assert "datacenter-gpu-manager" not in after, after.get("datacenter-gpu-manager")
    # DCGM 4 for the CUDA major R580 reports (13: CUDA 13.0 needs R580), at the catalogued release
    for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"):
        assert after[name][0] == "1:4.5.2-1" and after[name][2] == "installed", (name, after.get(name))
    # with its recommends (NVIDIA/DCGM cmake/packaging.cmake: the cuda13 package recommends libnuma1), which a
    # --no-install-recommends install leaves out
    assert after["libnuma1"][2] == "installed"
    purge = [r for r in converged["first"]["results"] if r["task"] == "Purge the DCGM 3 packages before DCGM 4 is installed."]
    assert [r["status"] for r in purge] == ["changed"], purge


def test_a_rerun_changes_nothing(converged):
    changed = [r["task"] for r in converged["rerun"]["results"] if r["status"] == "changed"]
    assert converged["rerun"]["hosts"][HOST]["failed"] == 0 and changed == [], changed
