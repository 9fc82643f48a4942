"""The shared node settings model: what cloud-init and the Ansible roles both apply."""

from __future__ import annotations

import re

import pytest

from blueprints import load_blueprint
from blueprints.settings import cluster_settings, node_settings
from blueprints.vendor import kernel_spec

from ..conftest import EXAMPLES


def _settings(example: str, group: str):
    return node_settings(load_blueprint(EXAMPLES / example).blueprint, group)


def test_dgx_ib_training_node():
    s = _settings("onprem-dgx-h100-ib.yaml", "dgx")
    assert s.gpu_model == "h100-sxm" and s.gpu_count == 8 and s.nvswitch and s.fabric_manager
    assert s.training_node and s.disable_acs and s.kernel_cmdline == ["iommu=pt"]
    assert s.nccl_env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert s.gpudirect_rdma == "dmabuf"  # the default with open kernel modules; nvidia-peermem needs DOCA-OFED
    assert s.scratch is not None and s.scratch.expected_drives == 8 and s.scratch.mount == "/raid"
    assert s.ipoib_netdev == "ibp24s0"  # the first declared InfiniBand port
    assert s.lustre[0].source == "192.168.100.2@o2ib:/lustre1" and s.lustre[0].lnet_networks == "o2ib0(ibp24s0)"
    assert _settings("onprem-dgx-h100-ib.yaml", "mgmt").opensm


def test_roce_traffic_class_and_pfc_vector():
    s = _settings("onprem-l40s-roce.yaml", "l40s")
    assert s.nccl_env["NCCL_IB_TC"] == "104"  # DSCP 26 << 2
    # `gid_index: discover`: no fixed NCCL_IB_GID_INDEX; the node looks the RoCE v2 GID up
    assert "NCCL_IB_GID_INDEX" not in s.nccl_env and s.roce is not None and s.roce.gid_index == "discover"
    assert s.roce.pfc_vector == "0,0,0,1,0,0,0,0" and s.roce.trust == "dscp"
    assert s.gpudirect_rdma == "dmabuf" and not s.nvswitch


def test_passthrough_hosts_get_iommu_on_and_no_driver():
    kata = _settings("onprem-sandbox-kata.yaml", "kata")
    assert kata.passthrough_host and not kata.training_node and not kata.disable_acs
    # the AMD IOMMU is on by default; `amd_iommu=on` is not a valid value of that parameter
    assert kata.kernel_cmdline == ["iommu=pt"] and not kata.install_gpu_driver
    vms = _settings("onprem-sandbox-kata.yaml", "vms")
    assert vms.kernel_cmdline == ["intel_iommu=on", "iommu=pt"] and vms.sandbox.vm_gpus_per_vm == 2


def test_aws_efa_env_puts_ofi_plugin_on_library_path():
    s = _settings("aws-p5-efa-lustre.yaml", "gpu")
    assert "/opt/amazon/ofi-nccl/lib" in s.nccl_env["LD_LIBRARY_PATH"]
    assert s.scratch.discovery == "instance-store" and s.scratch.expected_drives == 8
    assert s.lustre[0].fsx and s.lustre[0].source is None


def test_every_example_group_has_settings():
    for path in EXAMPLES.glob("*.yaml"):
        bp = load_blueprint(path).blueprint
        assert set(cluster_settings(bp)) == {g.name for g in bp.node_groups}


def test_on_mount_is_path_containment_not_string_prefix():
    from blueprints.settings import on_mount

    assert on_mount("/fsx", "/fsx") and on_mount("/fsx/ckpt", "/fsx") and on_mount("/fsx/ckpt", "/fsx/")
    assert not on_mount("/fsxb", "/fsx") and not on_mount("/", "/fsx")


# --- vendor packages: one exact version per node group, per NVLink generation and OS (generated variants) ---

from blueprints.catalog import catalog
from blueprints.vendor import (
    AptPin,
    bare_metal,
    container_toolkit_packages,
    driver_packages,
    kata_tarball,
    nvlsm_version,
)

_OSES = ["debian-12", "ubuntu-22.04", "ubuntu-24.04"]

# NVIDIA's compute-only ("headless") driver sets, as the driver installation guide names them: Debian
# `nvidia-driver-cuda nvidia-kernel-open-dkms` (proprietary: `nvidia-kernel-dkms`), Ubuntu `libnvidia-compute-<branch>
# nvidia-dkms-<branch>-open` (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/compute-only-and-desktop-installation.html,
# .../ubuntu.html), with the persistence daemon's package and, on Ubuntu, nvidia-smi's (`nvidia-utils-<branch>`).
_COMPUTE_ONLY = {
    ("debian", True): {"nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"},
    ("debian", False): {"nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced"},
    ("ubuntu", True): {"libnvidia-compute-{b}", "nvidia-dkms-{b}-open", "nvidia-utils-{b}", "nvidia-persistenced"},
    ("ubuntu", False): {"libnvidia-compute-{b}", "nvidia-dkms-{b}", "nvidia-utils-{b}", "nvidia-persistenced"},
}
# The CUDA major each driver branch reports (CUDA 13.0 needs R580, 12.8 R570, 12.2 R535: CUDA toolkit release notes,
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html): DCGM 4 is installed for it.
_DRIVER_CUDA = {"580": "13", "570": "12", "535": "12"}


@pytest.mark.parametrize("os_name", _OSES)
@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "h100-sxm", "h200-sxm", "b200", "gb200-per-gpu", "l40s"])
@pytest.mark.parametrize("branch,version", [("580", "580.105.08"), ("570", "570.195.03"), ("535", "535.274.02")])
@pytest.mark.parametrize("open_modules", [True, False])
def test_driver_packages_pin_and_hold_every_nvidia_package(os_name, gpu, branch, version, open_modules):
    spec = catalog().gpu(gpu)
    nvswitch = bool(spec.nvlink_gen) and gpu != "l40s"
    p = driver_packages(os=os_name, branch=branch, version=version, open_modules=open_modules,
                        nvlink_gen=spec.nvlink_gen, fabric_manager=nvswitch, dcgm=True, cuda="12.4")
    specs = dict(x.split("=", 1) if "=" in x else (x, "") for x in p.packages)
    suffix = "" if int(branch) >= 580 else f"-{branch}"
    # NVIDIA's compute-only set, never the desktop-and-compute meta-packages; every version a pattern (each CUDA
    # repository directory revisions a release its own way: debian12 -1, ubuntu2204 -1ubuntu1)
    compute = {n.format(b=branch) for n in _COMPUTE_ONLY[(os_name.split("-")[0], open_modules)]}
    assert compute <= set(specs) and not {"nvidia-open", "cuda-drivers"} & set(specs), sorted(specs)
    assert {specs[n] for n in compute} == {f"{version}-*"}
    nvlink5 = nvswitch and spec.nvlink_gen >= 5
    lsm = nvlsm_version(branch)
    if nvswitch:
        # Fabric Manager and NSCQ at exactly the driver version, held with it
        assert specs[f"nvidia-fabricmanager{suffix}"] == specs[f"libnvidia-nscq{suffix}"] == f"{version}-*"
        assert compute | {f"nvidia-fabricmanager{suffix}", f"libnvidia-nscq{suffix}"} <= set(p.hold)
        assert "nvidia-fabricmanager" in p.services and p.fabricmanager_service == "nvidia-fabricmanager"
        assert ("nvlsm" in specs) == nvlink5 and (f"libnvsdm{suffix}" in specs) == nvlink5
        if nvlink5:
            assert specs[f"libnvsdm{suffix}"] == f"{version}-*"
            # NVLSM has no unit: Fabric Manager's start script starts it, and its start check needs ib_umad whatever
            # the data fabric (NVIDIA's container waits for mlx5_core and ib_umad); infiniband-diags from the archive
            assert "nvlsm" not in p.services and {"ib_umad", "mlx5_core"} <= set(p.fabricmanager_modules)
            assert specs["infiniband-diags"] == "" and "infiniband-diags" not in p.hold
            # NVLSM: its own catalogued release, pinned, held (hence kept out of unattended-upgrades)
            assert "nvlsm" in p.hold and p.nvlsm_version == lsm
            if lsm:
                assert specs["nvlsm"] == lsm and AptPin(packages=["nvlsm"], version=lsm) in p.apt_pins
    else:
        assert not [n for n in specs if "fabricmanager" in n or "nscq" in n or n == "nvlsm"]
        assert p.fabricmanager_service is None
    if not nvlink5:
        assert p.fabricmanager_modules == [] and "infiniband-diags" not in specs
    # every package but DCGM and the archive's infiniband-diags is held; every NVIDIA-versioned one is pinned to the
    # driver version
    assert set(p.hold) == {n for n in specs if not n.startswith("datacenter-gpu-manager") and n != "infiniband-diags"}
    assert p.apt_pins[0].version == f"{version}-*"
    assert p.persistenced_service == bare_metal()["nvidia_driver"]["packages"]["persistenced_service"] in p.services
    dcgm = f"datacenter-gpu-manager-4-cuda{_DRIVER_CUDA[branch]}"  # the driver's CUDA major, not the stack's 12.4
    assert "datacenter-gpu-manager-4-core" in specs and dcgm in specs, sorted(specs)
    assert p.dcgm_packages == [f"datacenter-gpu-manager-4-core={specs['datacenter-gpu-manager-4-core']}",
                               f"{dcgm}={specs[dcgm]}"] and specs[dcgm] == "1:4.5.2-*"
    assert p.dcgm_legacy == ["datacenter-gpu-manager", "datacenter-gpu-manager-config"]  # NVIDIA's DCGM procedure
    assert "datacenter-gpu-manager" not in specs  # DCGM 3
    assert p.repo_dist == bare_metal()["nvidia_driver"]["cuda_repo"]["dists"][os_name]
    _check_secure_boot_set(p, os_name, branch, open_modules, nvswitch, nvlink5)


def _check_secure_boot_set(p, os_name, branch, open_modules, nvswitch, nvlink5):
    """The Ubuntu Secure Boot set: Ubuntu-archive packages at the archive's own build, or a stated refusal."""
    signed = bare_metal()["nvidia_driver"]["ubuntu_signed_precompiled"]
    row = signed.get("archive", {}).get(branch, {}).get(os_name)
    if not os_name.startswith("ubuntu"):
        assert p.secure_boot_packages == p.secure_boot_hold == [] and p.secure_boot_unavailable is None
        return
    if row is None or (nvlink5 and row["driver"].rsplit("-", 1)[0] not in catalog().driver_releases(branch)):
        # no consistent set can be pinned: empty, with the reason the role's preflight gives a Secure Boot host
        assert p.secure_boot_packages == p.secure_boot_hold == [] and p.secure_boot_apt_pins == []
        assert p.secure_boot_unavailable and (branch in p.secure_boot_unavailable)
        return
    assert p.secure_boot_unavailable is None
    o = "-open" if open_modules else ""
    sb = dict(x.split("=", 1) if "=" in x else (x, "") for x in p.secure_boot_packages)
    modules = f"linux-modules-nvidia-{branch}-server{o}-{{flavour}}"
    # the module meta-package is versioned by the kernel (linux-restricted-modules): never pinned to a driver
    # version, held so apt does not move it; its flavour is the node's running kernel's (the role reads it from the
    # kernel release, <upstream>-<ABI>-<flavour>; its HWE series' meta-package linux-image-<flavour>-hwe-<release>)
    assert sb[modules] == "" and modules in p.secure_boot_hold
    release = os_name.split("-", 1)[1]
    k = kernel_spec(os_name)
    assert k["hwe_flavour"] == f"{{flavour}}-hwe-{release}" and k["image_meta"] == "linux-image-{flavour}"
    assert re.fullmatch(k["release_pattern"], "6.8.0-1028-nvidia").group(1) == "nvidia"  # type: ignore[union-attr]
    assert not any(n.endswith("-dkms") or "dkms-" in n.replace("no-dkms", "") for n in sb)
    ubuntu = {n: v for n, v in sb.items() if n != modules and not n.startswith("datacenter-gpu-manager")}
    assert ubuntu[f"nvidia-headless-no-dkms-{branch}-server{o}"] == ubuntu[f"nvidia-utils-{branch}-server"] \
        == row["driver"] == p.secure_boot_version
    assert p.version not in p.secure_boot_version  # the archive's build, not the CUDA repository's release
    upstream = row["driver"].rsplit("-", 1)[0]
    if nvswitch:  # Fabric Manager and NSCQ from the Ubuntu archive at exactly the driver's upstream release
        assert ubuntu[f"nvidia-fabricmanager-{branch}"] == row["fabricmanager"]
        assert ubuntu[f"libnvidia-nscq-{branch}"] == row["nscq"]
        # (unversioned: what the distribution's archive carries, infiniband-diags on NVLink 5)
        assert {v.rsplit("-", 1)[0] for n, v in ubuntu.items() if n != "nvlsm" and v} == {upstream}
    assert set(p.secure_boot_hold) == {n for n in sb if not n.startswith("datacenter-gpu-manager") and n != "infiniband-diags"}
    assert p.secure_boot_apt_pins[0].version == f"{upstream}-*"
    assert not any(pin.startswith("linux-modules") for pin in p.secure_boot_apt_pins[0].packages)


def test_secure_boot_set_follows_the_catalog_row_not_the_cuda_release():
    """Two blueprints pinning different CUDA-repository releases of a branch get the same Ubuntu-archive set."""
    a, b = (driver_packages(os="ubuntu-22.04", branch="580", version=v, open_modules=True, nvlink_gen=4,
                            fabric_manager=True, dcgm=False, cuda="12.4") for v in ("580.105.08", "580.126.20"))
    assert a.secure_boot_packages == b.secure_boot_packages and a.packages != b.packages


def test_gpu_packages_only_on_onprem_driver_hosts():
    assert _settings("onprem-dgx-h100-ib.yaml", "dgx").gpu_packages is not None
    assert _settings("onprem-dgx-h100-ib.yaml", "mgmt").gpu_packages is None  # no GPUs
    assert _settings("onprem-sandbox-kata.yaml", "kata").gpu_packages is None  # GPUs passed through
    assert _settings("aws-p5-efa-lustre.yaml", "gpu").gpu_packages is None  # the AMI carries the driver


@pytest.mark.parametrize("version", ["1.17.8", "1.17.9", "1.18.0"])
def test_container_toolkit_packages_are_the_four_at_one_version(version):
    pkgs = container_toolkit_packages(version)
    assert sorted(p.split("=")[0] for p in pkgs) == sorted(
        ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"])
    # a version pattern, as every NVIDIA package is pinned (the toolkit repository's own revision is -1)
    assert {p.split("=")[1] for p in pkgs} == {f"{version}-*"}


@pytest.mark.parametrize("version,ext", [("3.19.1", "xz"), ("3.20.0", "xz"), ("3.21.0", "zst"), ("3.23.0", "zst"),
                                         ("4.0.0", "zst")])
def test_kata_tarball_name_follows_the_version(version, ext):
    assert kata_tarball(version) == f"kata-static-{version}-amd64.tar.{ext}"


# ---- what renderers and validators read instead of asking for the provider ------------------


def _with(bp, **update):
    return bp.model_copy(update=update)


@pytest.mark.parametrize("interfaces", [0, 1, 2, 7, 16, 31, 32, "max"])
def test_efa_interfaces_are_what_each_node_gets(interfaces):
    """`efa_interfaces` is `network.efa.interfaces` (`max`: the instance type's catalog maximum) on EFA
    groups, 0 on groups without EFA; `instance_type` is the EC2 type on AWS and `None` on premises."""
    from blueprints.catalog import catalog

    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint
    net = bp.network
    bp = _with(bp, network=net.model_copy(update={"efa": net.efa.model_copy(update={"interfaces": interfaces})}))
    for g in bp.node_groups:
        s = node_settings(bp, g)
        assert s.instance_type == g.instance_type
        it = catalog().instance_type(g.instance_type)
        if not it.efa_supported or interfaces == 0:
            assert s.efa_interfaces == 0
        else:
            assert s.efa_interfaces == (it.max_efa_interfaces if interfaces == "max" else interfaces)
    for path in EXAMPLES.glob("onprem-*.yaml"):
        for s in cluster_settings(load_blueprint(path).blueprint).values():
            assert s.instance_type is None and s.efa_interfaces == 0


@pytest.mark.parametrize("example,group", [("aws-p5-efa-lustre.yaml", "gpu"), ("onprem-l40s-roce.yaml", "l40s")])
@pytest.mark.parametrize("runtime", ["container", "kata", "gvisor", "vm"])
@pytest.mark.parametrize("runtime_class", [None, "kata-qemu-nvidia-gpu", "secure"])
def test_sandbox_runtime_handler_is_what_the_node_registers(example, group, runtime, runtime_class):
    """The containerd handler of Kata / gVisor pods: on AWS the one the cloud user data registers
    (which the stack's RuntimeClass names): `runsc` for gVisor, the RuntimeClass name for Kata; on
    premises the RuntimeClass name the roles register it under; none for plain containers and VMs."""
    bp = load_blueprint(EXAMPLES / example).blueprint
    groups = []
    for g in bp.node_groups:
        if g.name == group:
            g = g.model_copy(update={"sandbox": g.sandbox.model_copy(update={"runtime": runtime,
                                                                              "runtime_class": runtime_class})})
        groups.append(g)
    bp = _with(bp, node_groups=groups)
    sb = node_settings(bp, group).sandbox
    if runtime in ("container", "vm"):
        assert sb.runtime_handler is None
    elif bp.target.provider == "aws":
        assert sb.runtime_handler == ("runsc" if runtime == "gvisor" else bp.group(group).sandbox.runtime_class_name)
    else:
        assert sb.runtime_handler == bp.group(group).sandbox.runtime_class_name


def test_every_group_has_the_quick_checks_expectations_and_slurm_reads_the_same():
    """``NodeSettings.health``: GPUs the host uses (model, the names nvidia-smi prints, device files, driver branch),
    the mounts in order; a Slurm compute node's health check reads the very same with its time limit and prefix."""
    s = _settings("onprem-dgx-h100-ib.yaml", "dgx")
    h = s.health
    assert (h.gpu_count, h.gpu_model, h.driver_branch, h.training_node) == (8, "h100-sxm", "580", True)
    assert h.gpu_devices == [f"/dev/nvidia{i}" for i in range(8)] and "NVIDIA H100 80GB HBM3" in h.gpu_names
    assert h.mounts == ["/raid", "/lustre"] and h.checks_anything
    assert s.slurm is not None and s.slurm.health == {**h.model_dump(), "timeout_s": 50, "reason_prefix": "cf-health"}
    mgmt = _settings("onprem-dgx-h100-ib.yaml", "mgmt").health
    assert (mgmt.gpu_count, mgmt.gpu_model, mgmt.gpu_devices, mgmt.driver_branch) == (0, None, [], "")
    # a host whose GPUs go to its guests (vfio-pci owns them) checks its mounts only
    kata = cluster_settings(load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").blueprint)
    hosts = [g for g in kata.values() if g.passthrough_host]
    assert hosts and all(g.health.gpu_count == 0 and g.health.gpu_devices == [] for g in hosts)
