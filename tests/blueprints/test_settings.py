"""The shared node settings model: what cloud-init and the Ansible roles both apply."""

from __future__ import annotations

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
    assert s.gpudirect_rdma == "nvidia-peermem"
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
    assert kata.kernel_cmdline == ["amd_iommu=on", "iommu=pt"] and not kata.install_gpu_driver
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
