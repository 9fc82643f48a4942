"""The NVIDIA driver's other install paths, run for real: NVLink 5 (NVLSM/NVSDM) and Ubuntu under Secure Boot.

As a user meets them: the DGX example is rewritten into a variant (HGX B200, or a Secure Boot host), goes through
``check`` and ``render``, and the ``nvidia_driver`` role runs with ``run_site`` on a root filesystem shaped as
Ubuntu, against the stand-in CUDA repository and a stand-in of the Ubuntu archive (``tests/roles/vendor_repo.py``:
the archive's real names, ``-0ubuntu0.<release>.<n>`` versions and dependency relations). The tests then read
dpkg's database: what was installed, at which version, what is held, and what apt and unattended-upgrades were
told. The Secure Boot host is said to be one through ``nvidia_driver_secure_boot`` (a root filesystem has no EFI
variables).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from blueprints.resolved import resolve
from blueprints.vendor import DriverPackages, bare_metal
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked
from tests.ansible_vars import load_vars

from .conftest import copy_rootfs, dgx_variant, installed_packages, shape_as, vendor_mirror
from .cuda_repos import revision
from .vendor_repo import NVLSM_NEWER, UBUNTU_HWE_KERNELS, UBUNTU_KERNELS, UBUNTU_MOVED_ON, VendorMirror

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

HOST = "dgx-01"


def _packages(loaded: Any) -> DriverPackages:
    p = next(r.settings.gpu_packages for r in resolve(loaded.blueprint).groups if r.settings.gpu_packages)
    assert p is not None
    return p


def _use_ubuntu_archive(root: Path, mirror: VendorMirror, os_name: str, tree: str = "ubuntu") -> None:
    """Point the root's apt at the stand-in Ubuntu archive (what a Ubuntu host has configured already)."""
    (root / "etc/apt/keyrings").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/keyrings/ubuntu-archive-standin.asc").write_text(
        (mirror.root / tree / os_name / "archive.asc").read_text())
    (root / "etc/apt/sources.list.d/ubuntu-archive-standin.sources").write_text(
        f"Types: deb\nURIs: {mirror.base_url}/{tree}/{os_name}/\nSuites: /\n"
        "Signed-By: /etc/apt/keyrings/ubuntu-archive-standin.asc\n")


def _run(tmp: Path, os_name: str, gpu: str, *, tags: list[str], extravars: dict[str, Any] | None = None,
         archive: str | None = None, rerun: bool = False, kernel: str | None = None,
         files: dict[str, str] | None = None, hardware: dict[str, Any] | None = None) -> dict[str, Any]:
    """``kernel``: a kernel image meta-package installed from the stand-in archive first (the host's kernel);
    ``files``: files already on the host before the run (path in the root -> text); ``hardware``: keys of the ``dgx``
    group's ``hardware`` to set (``None`` removes one)."""
    path = dgx_variant(tmp, f"dgx-{gpu.split(':')[0]}-{os_name}", os_name, gpu=gpu)
    if hardware:
        doc = yaml.safe_load(path.read_text())
        hw = next(g for g in doc["node_groups"] if g["name"] == "dgx")["hardware"]
        hw.update(hardware)
        doc["node_groups"] = [{**g, "hardware": {k: v for k, v in g["hardware"].items() if v is not None}}
                              if g["name"] == "dgx" else g for g in doc["node_groups"]]
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    loaded = load_checked(path)  # the variant passes check
    root = copy_rootfs(tmp / "root")
    shape_as(root, os_name)
    for rel, text in (files or {}).items():
        (root / rel.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / rel.lstrip("/")).write_text(text)
    mirror = vendor_mirror()
    try:
        if archive:
            _use_ubuntu_archive(root, mirror, os_name, archive)
        if kernel:
            for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", kernel]):
                subprocess.run(["chroot", str(root), *cmd], check=True, capture_output=True, text=True)
        out = tmp / "ansible"
        run = {"tags": tags, "extravars": {**mirror.extravars(), **(extravars or {})},
               "connection_override": chroot_connection({HOST: root})}
        rc = run_site(loaded, out, **run)
        first = load_summary(out)
        second = None
        if rerun and rc == 0:
            run_site(loaded, out, **run)
            second = load_summary(out)
    finally:
        mirror.stop()
    return {"root": root, "rc": rc, "first": first, "rerun": second, "packages": _packages(loaded), "out": out,
            "loaded": loaded}


# --- NVLink 5 (HGX B200): NVLSM pinned to its own release, NVSDM to the driver's, both held -----------------

LEGACY_NVLSM_UNIT = "/usr/lib/systemd/system/nvlsm.service"
"""A unit that starts NVLSM on its own, as older installers and some packagings left one on NVLink 5 hosts: a second
subnet manager on the NVSwitch management port Fabric Manager's start script already starts NVLSM on."""


@pytest.fixture(scope="module")
def b200(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("b200"), "ubuntu-24.04", "b200:8", tags=["nvidia_driver"], rerun=True,
                files={LEGACY_NVLSM_UNIT: "[Unit]\nDescription=NVLink Subnet Manager\n\n[Service]\n"
                                          "ExecStart=/opt/nvidia/nvlsm/sbin/nvlsm\n\n[Install]\nWantedBy=multi-user.target\n"})


def _boot_modules(root: Path) -> set[str]:
    """The modules systemd-modules-load loads at boot from the root's modules-load.d directories."""
    out: set[str] = set()
    for d in ("etc/modules-load.d", "usr/lib/modules-load.d", "lib/modules-load.d"):
        for f in sorted((root / d).glob("*.conf")) if (root / d).is_dir() else []:
            if f.is_symlink():  # Debian's modules.conf -> ../modules: resolved inside the root
                t = os.readlink(f)
                f = root / t.lstrip("/") if t.startswith("/") else f.parent / t
            if f.is_file():
                out |= {ln.split("#")[0].strip() for ln in f.read_text().splitlines()} - {""}
    return out


def _fm_precheck(root: Path, modules: set[str]) -> subprocess.CompletedProcess[str]:
    """Run Fabric Manager's unit ExecStartPre (as the installed unit file names it) the way systemd would at boot on an
    HGX B200: a sysfs with the CX7 bridge's NVSwitch management port (its VPD carries SMDL=SW_MNG, Fabric Manager
    user guide) beside a data-fabric port, and ``modules`` loaded."""
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    unit = (root / f"usr/lib/systemd/system/{sw['services']['fabricmanager']}.service").read_text()
    pre = next(ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith("ExecStartPre="))
    sysfs = root / "run/standin-sysfs"
    shutil.rmtree(sysfs, ignore_errors=True)
    for dev, vpd in (("mlx5_0", "PN=MCX75310AAS\n"), ("mlx5_8", "PN=CX7-BRIDGE\nSMDL=SW_MNG\n")):
        (sysfs / "class/infiniband" / dev / "device").mkdir(parents=True)
        (sysfs / "class/infiniband" / dev / "device/vpd").write_text(vpd)
    for m in modules:
        (sysfs / "module" / m).mkdir(parents=True)
    return subprocess.run(["chroot", str(root), "env", "CLUSTERFORGE_STANDIN_SYSFS=/run/standin-sysfs", *pre.split()],
                          check=False, capture_output=True, text=True)


def test_b200_fabric_manager_passes_its_start_check_after_a_reboot(b200):
    """HGX B200 declared with the role run alone (no InfiniBand data fabric to load ib_umad for it): what the role
    persisted for boot satisfies Fabric Manager's own start check, which refuses to start without ib_umad on a system
    with an NVSwitch management port (the stand-in enforces it: the same check fails with nothing loaded)."""
    assert b200["rc"] == 0, b200["first"]["failures"]
    root = b200["root"]
    nvl5 = bare_metal()["nvidia_driver"]["nvswitch"]["nvlink5_fabricmanager"]
    failed = _fm_precheck(root, set())
    assert failed.returncode != 0 and '"ib_umad" has not been loaded' in failed.stderr, failed
    boot = _boot_modules(root)
    ok = _fm_precheck(root, boot)
    assert ok.returncode == 0 and "Detected NVL5+ system" in ok.stdout, (boot, ok.stderr)
    assert {"ib_umad", "mlx5_core"} <= boot
    dpkg = installed_packages(root)
    assert set(nvl5["packages"]) <= set(dpkg)  # infiniband-diags, which NVIDIA installs with NVLSM
    assert os.access(root / nvl5["nvlsm_binary"].lstrip("/"), os.X_OK)


def test_b200_never_enables_a_subnet_manager_unit_beside_fabric_manager(b200):
    """NVLSM is started by Fabric Manager's unit on the NVSwitch management port; a unit of its own (here one a former
    installer left) would be a second subnet manager on that port: the role enables Fabric Manager and never it."""
    assert b200["rc"] == 0, b200["first"]["failures"]
    root = b200["root"]
    gv = load_vars(b200["out"] / "group_vars" / "dgx.yml")
    fm = bare_metal()["nvidia_driver"]["nvswitch"]["services"]["fabricmanager"]
    assert fm in gv["nvidia_driver_services"] and "nvlsm" not in gv["nvidia_driver_services"]
    wants = {p.name for p in (root / "etc/systemd/system").glob("*.wants/*")}
    assert f"{fm}.service" in wants and "nvlsm.service" not in wants, wants


def test_b200_installs_nvlsm_and_nvsdm_pinned_and_held(b200):
    assert b200["rc"] == 0, b200["first"]["failures"]
    p, root = b200["packages"], b200["root"]
    nd = bare_metal()["nvidia_driver"]
    sw = nd["nvswitch"]
    lsm = sw["nvlsm_versions"][p.branch]
    # the rendered role variables carry the pin (what `clusterforge render` wrote for the group)
    gv = load_vars(b200["out"] / "group_vars" / "dgx.yml")
    assert f"{sw['nvlsm']}={lsm}" in gv["nvidia_driver_packages"] and sw["nvlsm"] in gv["nvidia_driver_hold"]
    assert {"packages": [sw["nvlsm"]], "version": lsm} in gv["nvidia_driver_apt_pins"]
    dpkg = installed_packages(root)
    # NVLSM at the catalogued release, not the newer one the repository also carries; NVSDM at the driver version
    assert dpkg[sw["nvlsm"]] == (lsm, "hold") and lsm != NVLSM_NEWER
    # the ubuntu2404 directory's revision of the release (tests/fixtures/cuda-repos: -1ubuntu1 from 580.126.09)
    v = f"{p.version}-{revision('ubuntu2404', p.version)}"
    assert dpkg[sw["nvsdm"]] == (v, "hold")
    for name in ("fabricmanager", "nscq"):
        assert dpkg[sw[name]] == (v, "hold"), name
    pref = (root / "etc/apt/preferences.d/clusterforge-nvidia-driver.pref").read_text()
    assert f"Package: {sw['nvlsm']}\nPin: version {lsm}\nPin-Priority: 1000" in pref
    assert f"Pin: version {p.version}-*" in pref
    # an `apt-get upgrade` would leave NVLSM where it is (held and pinned) although a newer release is there
    sim = subprocess.run(["chroot", str(root), "apt-get", "-s", "upgrade"], capture_output=True, text=True,
                         check=True).stdout
    assert not re.search(rf"^Inst {re.escape(sw['nvlsm'])} ", sim, re.MULTILINE), sim
    candidates = subprocess.run(["chroot", str(root), "apt-cache", "madison", sw["nvlsm"]], capture_output=True,
                                text=True, check=True).stdout
    assert NVLSM_NEWER in candidates  # the stand-in really offers the newer release
    blacklist = (root / "etc/apt/apt.conf.d/51clusterforge-nvidia").read_text()
    assert f'"^{sw["nvlsm"]}$";' in blacklist and f'"^{sw["nvsdm"]}$";' in blacklist


def test_b200_rerun_changes_nothing(b200):
    assert b200["rc"] == 0 and b200["rerun"] is not None
    changed = [r["task"] for r in b200["rerun"]["results"] if r["status"] == "changed"]
    assert changed == [] and not b200["rerun"]["failures"], changed


# --- Multi-node NVLink (GB200 NVL72 trays): IMEX installed, its node list the NVLink domain's nodes -----------

@pytest.fixture(scope="module")
def gb200(tmp_path_factory):
    # a GB200 NVL72 compute tray: two Grace CPUs (72 Arm cores each), not the example's DGX H100 system
    return _run(tmp_path_factory.mktemp("gb200"), "ubuntu-24.04", "gb200:4", tags=["nvidia_driver"], rerun=True,
                hardware={"system": None, "cpu_vendor": "arm", "memory_gib": 960,
                          "cpu": {"sockets": 2, "cores_per_socket": 72, "threads_per_core": 1}})


def _imex_start(root: Path, local_ips: str) -> subprocess.CompletedProcess[str]:
    """Start IMEX the way its unit does (the installed unit's ExecStart) on a node whose addresses are ``local_ips``."""
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    unit = (root / f"usr/lib/systemd/system/{sw['services']['imex']}.service").read_text()
    start = next(ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith("ExecStart="))
    return subprocess.run(["chroot", str(root), "env", f"CLUSTERFORGE_STANDIN_IPS={local_ips}", *start.split()],
                          check=False, capture_output=True, text=True)


def test_gb200_trays_get_imex_with_the_nvlink_domain_as_its_node_list(gb200):
    """A GB200 NVL72 group (4 GPUs per compute tray, no NVSwitch on the tray, so no Fabric Manager): IMEX at the driver
    release, held, its service enabled, and the node list the group's hosts' addresses (one NVLink domain), which
    IMEX's configuration points at; IMEX then starts on any of those hosts and refuses a host that is not listed."""
    assert gb200["rc"] == 0, gb200["first"]["failures"]
    root, p = gb200["root"], gb200["packages"]
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    im = sw["imex_service"]
    hosts = [h.address for h in gb200["loaded"].blueprint.group("dgx").hosts]
    dpkg = installed_packages(root)
    version, selection = dpkg[sw["imex"]]
    assert version.startswith(f"{p.version}-") and selection == "hold"
    assert sw["fabricmanager"] not in dpkg  # a compute tray has no NVSwitch of its own
    listed = [ln for ln in (root / im["nodes_config"].lstrip("/")).read_text().splitlines() if not ln.startswith("#")]
    assert listed == hosts and len(hosts) == 4
    assert f"{im['node_config_key']}={im['nodes_config']}" in (root / im["config"].lstrip("/")).read_text().splitlines()
    wants = {q.name for q in (root / "etc/systemd/system").glob("*.wants/*")}
    assert f"{sw['services']['imex']}.service" in wants
    ok = _imex_start(root, f"127.0.0.1 {hosts[2]}")
    assert ok.returncode == 0 and f"bound to {hosts[2]}" in ok.stdout, ok.stderr
    assert _imex_start(root, "127.0.0.1 10.9.9.9").returncode != 0  # a node outside the domain is refused


def test_gb200_rerun_changes_nothing(gb200):
    assert gb200["rc"] == 0 and gb200["rerun"] is not None
    changed = [r["task"] for r in gb200["rerun"]["results"] if r["status"] == "changed"]
    assert changed == [] and not gb200["rerun"]["failures"], changed


# --- Ubuntu under Secure Boot: everything from the Ubuntu archive at its own build ---------------------------

@pytest.fixture(scope="module")
def secure_boot(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("sb"), "ubuntu-22.04", "h100-sxm:8", tags=["nvidia_driver"],
                extravars=_secure_boot_host(UBUNTU_KERNELS["ubuntu-22.04"][0]), archive="ubuntu", rerun=True)


def _secure_boot_host(abi: str) -> dict[str, str]:
    """A Secure Boot host running the stand-in archive's ``<abi>-generic`` kernel (a root filesystem runs this
    machine's kernel and has no EFI variables: both are told)."""
    return {"nvidia_driver_secure_boot": "true", "nvidia_driver_kernel_release": f"{abi}-generic"}


def test_secure_boot_installs_the_ubuntu_archive_set_at_one_driver_release(secure_boot):
    assert secure_boot["rc"] == 0, secure_boot["first"]["failures"]
    p, root = secure_boot["packages"], secure_boot["root"]
    signed = bare_metal()["nvidia_driver"]["ubuntu_signed_precompiled"]
    row = signed["archive"][p.branch]["ubuntu-22.04"]
    up = row["driver"].rsplit("-", 1)[0]
    dpkg = installed_packages(root)
    b = p.branch
    # driver userspace, Fabric Manager and NSCQ: the archive's build, one upstream release, held
    assert dpkg[f"nvidia-headless-no-dkms-{b}-server-open"] == (row["driver"], "hold")
    assert dpkg[f"nvidia-utils-{b}-server"] == (row["driver"], "hold")
    assert dpkg[f"nvidia-fabricmanager-{b}"] == (row["fabricmanager"], "hold")
    assert dpkg[f"libnvidia-nscq-{b}"] == (row["nscq"], "hold")
    nvidia = {n: v for n, (v, _) in dpkg.items() if "nvidia" in n and not n.startswith("linux-")}
    assert {v.rsplit("-", 1)[0] for v in nvidia.values()} == {up}, nvidia
    # the signed modules: the running kernel's flavour's meta-package (versioned like the kernel) and its per-ABI
    # package; no HWE kernel image meta-package installed: the GA flavour, not the HWE one
    meta = signed["modules"].format(branch=b, open="-open", flavour="generic")
    hwe = signed["modules"].format(branch=b, open="-open", flavour="generic-hwe-22.04")
    assert hwe not in dpkg
    kver, sel = dpkg[meta]
    assert sel == "hold" and not kver.startswith(up)
    assert any(n.startswith(f"linux-modules-nvidia-{b}-server-open-") and n.endswith("-generic") and v == kver
               for n, (v, _) in dpkg.items() if n != meta)
    # nothing from the DKMS path: no CUDA-repository driver, no DKMS package, no kernel headers
    assert not [n for n in dpkg if n.endswith("-dkms") or n in ("nvidia-open", "cuda-drivers", "linux-headers-generic")]
    assert any(n.startswith("datacenter-gpu-manager-4-") for n in dpkg)  # DCGM 4 still from the CUDA repository
    held = {n for n, (_, s) in dpkg.items() if s == "hold"}
    assert {n.replace("{flavour}", "generic") for n in p.secure_boot_hold} <= held
    pref = (root / "etc/apt/preferences.d/clusterforge-nvidia-driver.pref").read_text()
    # the archive's upstream release (the CUDA repository's default release is the same one: issue 28 kind 8)
    assert f"Pin: version {up}-*" in pref and (p.version == up or p.version not in pref)
    blacklist = (root / "etc/apt/apt.conf.d/51clusterforge-nvidia").read_text()
    assert all(f'"^{re.escape(n.replace("{flavour}", "generic"))}$";' in blacklist for n in p.secure_boot_hold)
    assert row["driver"] in (root / "run/reboot-required").read_text()


def test_secure_boot_rerun_changes_nothing(secure_boot):
    assert secure_boot["rc"] == 0 and secure_boot["rerun"] is not None
    changed = [r["task"] for r in secure_boot["rerun"]["results"] if r["status"] == "changed"]
    assert changed == [] and not secure_boot["rerun"]["failures"], changed


@pytest.mark.parametrize("os_name", ["ubuntu-22.04", "ubuntu-24.04"])
def test_secure_boot_on_an_hwe_kernel_installs_the_hwe_flavour_modules(tmp_path, os_name):
    """A host that tracks the HWE kernel (``linux-image-generic-hwe-<release>`` installed) gets Canonical's signed
    modules for that flavour (``linux-modules-nvidia-<branch>-server-open-generic-hwe-<release>``, built for the
    HWE kernel's ABI), held; the GA flavour's are not installed; a rerun changes nothing."""
    release = os_name.split("-", 1)[1]
    kernel = bare_metal()["kernel"]
    hwe_flavour = kernel["hwe_flavour"][os_name].format(flavour="generic")
    r = _run(tmp_path, os_name, "h100-sxm:8", tags=["nvidia_driver"],
             extravars=_secure_boot_host(UBUNTU_HWE_KERNELS[os_name][0]),
             archive="ubuntu", rerun=True, kernel=kernel["image_meta"].format(flavour=hwe_flavour))
    assert r["rc"] == 0, r["first"]["failures"]
    p, dpkg = r["packages"], installed_packages(r["root"])
    hwe = {"meta": f"linux-image-{hwe_flavour}", "modules": f"linux-modules-nvidia-{p.branch}-server-open-{hwe_flavour}"}
    ga = {"modules": f"linux-modules-nvidia-{p.branch}-server-open-generic"}
    kver, sel = dpkg[hwe["modules"]]
    assert sel == "hold" and "~" + release in kver  # versioned like the HWE kernel
    assert ga["modules"] not in dpkg
    assert dpkg[hwe["meta"]][0] == kver  # the HWE kernel's meta-package, at the same kernel version
    # the per-ABI package of the HWE kernel's ABI came with it
    assert [n for n, (v, _) in dpkg.items() if n.startswith(f"linux-modules-nvidia-{p.branch}-server-open-")
            and n.endswith("-generic") and n != hwe["modules"] and v == kver]
    blacklist = (r["root"] / "etc/apt/apt.conf.d/51clusterforge-nvidia").read_text()
    assert f'"^{re.escape(hwe["modules"])}$";' in blacklist
    changed = [x["task"] for x in r["rerun"]["results"] if x["status"] == "changed"]
    assert changed == [] and not r["rerun"]["failures"], changed


def test_secure_boot_refuses_when_the_archive_moved_on(tmp_path):
    """The archive no longer carries the catalogued build: the run stops before apt, says what it found, and
    installs no NVIDIA package."""
    r = _run(tmp_path, "ubuntu-22.04", "h100-sxm:8", tags=["nvidia_driver"],
             extravars=_secure_boot_host(UBUNTU_KERNELS["ubuntu-22.04"][0]), archive="ubuntu-moved")
    assert r["rc"] != 0
    msg = " ".join(str(f) for f in r["first"]["failures"])
    assert "no longer carries" in msg and UBUNTU_MOVED_ON in msg and r["packages"].secure_boot_version in msg
    assert not [n for n in installed_packages(r["root"]) if "nvidia" in n]


def test_secure_boot_on_a_flavour_the_archive_signs_nothing_for_stops_before_apt(tmp_path):
    """The host runs the NVIDIA-optimised kernel (``6.8.0-1028-nvidia``) and the archive (this stand-in) has no signed
    modules for that flavour: the run stops before apt and names the package, instead of installing the generic
    flavour's modules and with them the generic kernel. No NVIDIA package and no kernel image are installed."""
    r = _run(tmp_path, "ubuntu-22.04", "h100-sxm:8", tags=["nvidia_driver"], archive="ubuntu",
             extravars={"nvidia_driver_secure_boot": "true", "nvidia_driver_kernel_release": "6.8.0-1028-nvidia"})
    assert r["rc"] != 0
    msg = " ".join(" ".join(str(f) for f in r["first"]["failures"]).split())
    assert f"linux-modules-nvidia-{r['packages'].branch}-server-open-nvidia (not in the archive" in msg, msg
    assert not [n for n in installed_packages(r["root"]) if "nvidia" in n or n.startswith("linux-image-")]


def test_secure_boot_on_nvlink5_passes_the_preflight_with_nvsdm_at_the_archive_release(tmp_path):
    """HGX B200 under Secure Boot on Ubuntu 24.04: NVSDM is not in the Ubuntu archive, so the set takes it from the
    CUDA repository at the archive driver's upstream release (catalog ``archive.580.ubuntu-24.04.driver``
    580.173.02-0ubuntu0.24.04.1, which ``driver_releases`` lists since the default moved to 580.173.02): the preflight
    passes and nothing says the set is unavailable. (When the archive row's release is not a catalogued CUDA release
    the set is empty with the reason: tests/blueprints/test_settings.py.)"""
    r = _run(tmp_path, "ubuntu-24.04", "b200:8", tags=["nvidia_driver_preflight"],
             extravars=_secure_boot_host(UBUNTU_KERNELS["ubuntu-24.04"][0]))  # an archive kernel: the flavour check passes
    assert r["rc"] == 0, r["first"]["failures"]
    p = r["packages"]
    upstream = bare_metal()["nvidia_driver"]["ubuntu_signed_precompiled"]["archive"]["580"]["ubuntu-24.04"]["driver"]
    upstream = upstream.rsplit("-", 1)[0]
    assert p.secure_boot_unavailable is None
    nvsdm = [x for x in p.secure_boot_packages if x.startswith("libnvsdm")]
    assert nvsdm and all(x.split("=", 1)[1].startswith(upstream) for x in nvsdm), (nvsdm, upstream)