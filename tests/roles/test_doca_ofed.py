"""DOCA-OFED installs for real from a stand-in of NVIDIA's DOCA repository, before the NVIDIA driver.

The DGX example with ``software.doca_ofed`` and ``nvidia-peermem`` (the combination that needs OFED's
peer-memory API) goes through ``check`` and ``render``, then the ``rdma`` and ``nvidia_driver`` roles run
with ``run_site`` on a root filesystem shaped as Ubuntu 22.04, against stand-in repositories on 127.0.0.1
(``tests/roles/vendor_repo.py``: DOCA's per-release, per-distribution layout; NVIDIA's CUDA repository).
The run is repeated and must change nothing.
"""

from __future__ import annotations

import os

import pytest

from blueprints.vendor import bare_metal
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked
from tests.ansible_vars import load_vars

from .conftest import copy_rootfs, dgx_variant, installed_packages, shape_as, vendor_mirror
from .vendor_repo import DOCA_OFED_VERSION, DOCA_RELEASE

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

HOST = "dgx-01"
OS = "ubuntu-22.04"


@pytest.fixture(scope="module")
def doca_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doca")
    loaded = load_checked(dgx_variant(tmp, "dgx-doca", OS, gpudirect_rdma="nvidia-peermem", doca_ofed=DOCA_RELEASE))  # the blueprint passes check (peermem with DOCA-OFED is allowed)
    root = copy_rootfs(tmp / "root")
    shape_as(root, OS)
    mirror = vendor_mirror()
    try:
        out = tmp / "ansible"
        run = {"tags": ["rdma", "nvidia_driver"], "extravars": mirror.extravars(),
                   "connection_override": chroot_connection({HOST: root})}
        rc = run_site(loaded, out, **run)
        first = load_summary(out)
        rerun_rc = run_site(loaded, out, **run)
        rerun = load_summary(out)
    finally:
        mirror.stop()
    return root, mirror.base_url, rc, first, rerun_rc, rerun


def test_doca_ofed_comes_from_its_release_repository_and_reruns_unchanged(doca_run):
    root, base_url, rc, first, rerun_rc, rerun = doca_run
    assert rc == 0, first["failures"]
    assert rerun_rc == 0, rerun["failures"]
    changed = [f"{r['role']} : {r['task']}" for r in rerun["results"] if r["status"] == "changed"]
    assert changed == [], f"the second run changed tasks: {changed}"
    doca = bare_metal()["doca_ofed"]
    repo = f"{base_url}/doca/{DOCA_RELEASE}/{doca['dists'][OS]}/{doca['arch']}/"
    sources = (root / "etc/apt/sources.list.d/nvidia-doca.sources").read_text()
    assert f"URIs: {repo}\n" in sources and "Signed-By: /etc/apt/keyrings/nvidia-doca.asc" in sources
    assert "BEGIN PGP PUBLIC KEY BLOCK" in (root / "etc/apt/keyrings/nvidia-doca.asc").read_text()
    pkgs = {name: version for name, (version, _) in installed_packages(root).items()}
    for meta in doca["packages"]:
        assert pkgs.get(meta) == f"{DOCA_RELEASE}-1", meta
    assert pkgs.get("mlnx-ofed-kernel-dkms") == DOCA_OFED_VERSION and pkgs.get("mlnx-tools") == DOCA_OFED_VERSION
    assert os.access(root / "usr/bin/mlnx_qos", os.X_OK), "the OFED tools (mlnx_qos) are installed"


def test_the_driver_is_installed_after_ofed_and_peermem_loads_at_boot(doca_run):
    root, _, rc, first, _, _ = doca_run
    assert rc == 0, first["failures"]
    order = [line.split()[4] for line in (root / "var/log/dpkg.log").read_text().splitlines()
             if " status installed " in line]
    names = [p.split(":")[0] for p in order]
    ofed = names.index("mlnx-ofed-kernel-dkms")
    nvidia_kernel = [i for i, n in enumerate(names) if n.startswith(("nvidia-kernel", "linux-modules-nvidia"))]
    assert nvidia_kernel, "an NVIDIA kernel-module package was installed"
    assert ofed < min(nvidia_kernel), "OFED's kernel drivers are installed before the NVIDIA modules are built"
    modules = (root / "etc/modules-load.d/clusterforge-rdma.conf").read_text().split()
    assert "nvidia-peermem" in modules
    rendered = load_vars(root.parent / "ansible" / "group_vars" / "dgx.yml")
    assert rendered["rdma_gpudirect"] == "nvidia-peermem" and rendered["rdma_doca_ofed_version"] == DOCA_RELEASE
