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

from blueprints.resolved import resolve
from blueprints.role_vars import node_role_vars
from blueprints.vendor import bare_metal
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked
from tests.ansible_vars import load_vars

from .conftest import (
    copy_rootfs,
    dgx_variant,
    installed_packages,
    role_run,
    shape_as,
    use_standin_archive,
    vendor_mirror,
)
from .role_eval import role_value
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
    repo = f"{base_url}/doca/{DOCA_RELEASE}/{doca['dists'][OS]}/{doca['arch']['x86_64']}/"
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
    # DOCA's DKMS build needs kernel headers: they are installed before OFED's kernel package (whose configure step
    # fails without them, as DOCA's does)
    headers = [i for i, n in enumerate(names) if n.startswith("linux-headers-")]
    assert headers and min(headers) < ofed, names
    nvidia_kernel = [i for i, n in enumerate(names) if n.startswith(("nvidia-kernel", "linux-modules-nvidia"))]
    assert nvidia_kernel, "an NVIDIA kernel-module package was installed"
    assert ofed < min(nvidia_kernel), "OFED's kernel drivers are installed before the NVIDIA modules are built"
    modules = (root / "etc/modules-load.d/clusterforge-rdma.conf").read_text().split()
    assert "nvidia-peermem" in modules
    rendered = load_vars(root.parent / "ansible" / "group_vars" / "dgx.yml")
    assert rendered["rdma_gpudirect"] == "nvidia-peermem" and rendered["rdma_doca_ofed_version"] == DOCA_RELEASE


# --- what the rendered role variables make of a host (issue 28 kind 7) ----------------------------------------------

def _doca_vars(tmp, os_name: str = OS, **software) -> dict:
    """The rdma role's variables for the DGX example's GPU group with DOCA-OFED, as `clusterforge render` writes them."""
    path = dgx_variant(tmp, "dgx-doca-vars", os_name, gpudirect_rdma="nvidia-peermem", doca_ofed=DOCA_RELEASE, **software)
    s = next(r.settings for r in resolve(load_checked(path).blueprint).groups if r.settings.group == "dgx")
    return node_role_vars(s, "rdma")


@pytest.mark.parametrize(("arch", "directory"), [("x86_64", "x86_64"), ("aarch64", "arm64-sbsa")])
def test_doca_repository_directory_follows_the_host_architecture(tmp_path, arch, directory):
    """A Grace host (GB200, GH200: aarch64) takes DOCA's arm64-sbsa directory, an x86 host x86_64; the key comes from
    the repository root, where NVIDIA's instructions fetch it."""
    v = _doca_vars(tmp_path)
    facts = {"distribution": "Ubuntu", "os_family": "Debian", "architecture": arch, "kernel": "5.15.0-140-generic"}
    doca = bare_metal()["doca_ofed"]
    base = doca["repo_base_url"]
    assert role_value("rdma", "__rdma_doca_repo", v, facts) == f"{base}/{DOCA_RELEASE}/{doca['dists'][OS]}/{directory}"
    assert role_value("rdma", "__rdma_doca_key_url", v, facts) == f"{base}/{doca['key_file']}"


def test_doca_dkms_build_gets_the_running_kernels_headers(tmp_path):
    v = _doca_vars(tmp_path)
    assert v["rdma_doca_dkms"] is True  # DOCA 3.2.0 on builds the OFED drivers by DKMS
    facts = {"distribution": "Ubuntu", "os_family": "Debian", "architecture": "x86_64", "kernel": "5.15.0-140-generic"}
    got = role_value("rdma", "__rdma_headers", v, facts, __rdma_image_mode=False)
    assert list(got) == ["linux-headers-5.15.0-140-generic", "linux-headers-generic"]


# --- refusals and the rebuild after OFED changed, the role run on a root ---------------------------------------------

def _rdma_run(tmp, files: dict[str, str], **extra) -> tuple[list[str], object]:
    root = copy_rootfs(tmp / "root")
    shape_as(root, OS)
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(0o755)
    mirror = vendor_mirror()
    try:
        use_standin_archive(root, mirror, "ubuntu-base", OS)
        failures, _ = role_run(root, tmp / "run", "rdma", "rdma_preflight,rdma_install",
                               {**_doca_vars(tmp), **mirror.extravars(), **extra})
    finally:
        mirror.stop()
    return failures, root


def test_an_older_ofed_is_refused_before_anything_is_installed(tmp_path):
    """MLNX_OFED (its ofed_info, no DOCA profile package) on the host: NVIDIA requires a full uninstall before
    DOCA-Host is installed; the run stops, says how, and installs nothing."""
    marker = bare_metal()["doca_ofed"]["previous_ofed"]
    failures, root = _rdma_run(tmp_path, {marker["marker"]: "#!/bin/sh\necho MLNX_OFED_LINUX-24.10-1.1.4.0:\n"})
    msg = " ".join(failures)
    assert len(failures) == 1 and marker["uninstall"] in msg and "uninstall" in msg, failures
    assert not [n for n in installed_packages(root) if n.startswith(("doca", "mlnx-ofed"))]


@pytest.mark.parametrize("mok", [False, True])
def test_secure_boot_needs_a_mok_for_dkms_built_ofed(tmp_path, mok):
    root = copy_rootfs(tmp_path / "root")
    shape_as(root, OS)
    failures, _ = role_run(root, tmp_path / "run", "rdma", "rdma_preflight",
                           {**_doca_vars(tmp_path), "rdma_secure_boot": "true", "rdma_doca_mok_signing": mok})
    if mok:
        assert failures == []
    else:
        assert len(failures) == 1 and "Secure Boot" in failures[0] and "unsigned" in failures[0], failures


def test_adding_ofed_rebuilds_the_nvidia_dkms_modules(tmp_path):
    """A host whose NVIDIA driver was built by DKMS before DOCA-OFED is added: its modules (nvidia-peermem among them)
    carry the inbox ib_core's symbols, so installing OFED rebuilds them for every kernel they are installed for
    (`dkms` here is a stand-in that records its calls and lists one installed build)."""
    dkms = ('#!/bin/sh\necho "$*" >> /run/dkms-calls.log\n'
            'case "$1" in status) echo "nvidia/580.126.20, 6.8.0-60-generic, x86_64: installed";; esac\n')
    failures, root = _rdma_run(tmp_path, {"/usr/sbin/dkms": dkms})
    assert failures == []
    calls = (root / "run/dkms-calls.log").read_text().splitlines()
    assert "install --force nvidia/580.126.20 -k 6.8.0-60-generic" in calls, calls
