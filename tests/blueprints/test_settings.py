"""The shared node settings model: what cloud-init and the Ansible roles both apply."""

from __future__ import annotations

import pytest

from blueprints import load_blueprint
from blueprints.settings import cluster_settings, node_settings

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
from blueprints.vendor import bare_metal, container_toolkit_packages, driver_packages, kata_tarball

_OSES = ["debian-12", "ubuntu-22.04", "ubuntu-24.04"]


@pytest.mark.parametrize("os_name", _OSES)
@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "h100-sxm", "h200-sxm", "b200", "gb200-per-gpu", "l40s"])
@pytest.mark.parametrize("branch,version", [("580", "580.105.08"), ("570", "570.195.03"), ("535", "535.274.02")])
def test_driver_packages_pin_every_nvidia_package_to_the_driver_version(os_name, gpu, branch, version):
    spec = catalog().gpu(gpu)
    nvswitch = bool(spec.nvlink_gen) and gpu != "l40s"
    p = driver_packages(os=os_name, branch=branch, version=version, open_modules=True, nvlink_gen=spec.nvlink_gen,
                        fabric_manager=nvswitch, dcgm=True, cuda="12.4")
    specs = dict(x.split("=", 1) if "=" in x else (x, "") for x in p.packages)
    suffix = "" if int(branch) >= 580 else f"-{branch}"
    assert specs["nvidia-open"] == f"{version}-1"
    if nvswitch:
        # Fabric Manager and NSCQ at exactly the driver version, held with it
        assert specs[f"nvidia-fabricmanager{suffix}"] == specs[f"libnvidia-nscq{suffix}"] == f"{version}-1"
        assert {"nvidia-open", f"nvidia-fabricmanager{suffix}", f"libnvidia-nscq{suffix}"} <= set(p.hold)
        assert "nvidia-fabricmanager" in p.services
        nvlink5 = spec.nvlink_gen >= 5
        assert ("nvlsm" in specs) == nvlink5 and (f"libnvsdm{suffix}" in specs) == nvlink5
        if nvlink5:
            assert specs[f"libnvsdm{suffix}"] == f"{version}-1" and "nvlsm" in p.services
    else:
        assert not [n for n in specs if "fabricmanager" in n or "nscq" in n or n == "nvlsm"]
    assert "datacenter-gpu-manager-4-core" in specs and "datacenter-gpu-manager-4-cuda12" in specs
    assert "datacenter-gpu-manager" not in specs  # DCGM 3
    assert p.repo_dist == bare_metal()["nvidia_driver"]["cuda_repo"]["dists"][os_name]
    if os_name.startswith("ubuntu"):
        sb = dict(x.split("=", 1) for x in p.secure_boot_packages if "=" in x)
        assert sb[f"linux-modules-nvidia-{branch}-server-open-generic"] == f"{version}-*"
        assert not any(n.endswith("-dkms") for n in sb)  # signed precompiled modules, nothing built by DKMS
        if nvswitch:
            assert sb[f"nvidia-fabricmanager-{branch}"] == sb[f"libnvidia-nscq-{branch}"] == f"{version}-*"
    else:
        assert p.secure_boot_packages == []


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
    assert {p.split("=")[1] for p in pkgs} == {f"{version}-1"}


@pytest.mark.parametrize("version,ext", [("3.19.1", "xz"), ("3.20.0", "xz"), ("3.21.0", "zst"), ("3.23.0", "zst"),
                                         ("4.0.0", "zst")])
def test_kata_tarball_name_follows_the_version(version, ext):
    assert kata_tarball(version) == f"kata-static-{version}-amd64.tar.{ext}"
