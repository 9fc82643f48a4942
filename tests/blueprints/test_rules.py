"""Pre-deploy rules: for every registered rule, one blueprint that trips it and one that does not.

Each case starts from an example blueprint, mutates it as plain data, writes it back as YAML
(``rule_cases.emit``, which records the line of every key) and runs the loader and all rules.
A failing case asserts the rule id, the line of the reported position, the severity and the
exact fix text; a passing case (usually a near miss) asserts the rule stays silent.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from blueprints import BlueprintInvalid, all_rules, check, load_blueprint, parse_blueprint
from blueprints.catalog import Catalog, catalog
from clusterforge.cli import main

from .rule_cases.emit import emit

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"
BASES = {
    "p5": "aws-p5-efa-lustre",
    "cb": "aws-p5-capacity-block",
    "eks": "aws-eks-p4d",
    "ws": "local-workstation",
    "dgx": "onprem-dgx-h100-ib",
    "roce": "onprem-l40s-roce",
    "kata": "onprem-sandbox-kata",
    "p5s": "aws-p5-slurm",
}


@pytest.fixture(scope="module")
def base_docs() -> dict[str, dict[str, Any]]:
    return {k: load_blueprint(EXAMPLES / f"{v}.yaml").data for k, v in BASES.items()}


# --- mutation helpers ----------------------------------------------------------------------------

Op = Callable[[dict[str, Any]], None]


def _path(dotted: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in dotted.split(".")]


def _walk(doc: Any, parts: list[Any]) -> Any:
    for p in parts:
        if isinstance(doc, dict) and p not in doc:
            doc[p] = {}
        doc = doc[p]
    return doc


def S(dotted: str, value: Any) -> Op:
    """Set the value at a dotted path (intermediate mappings are created)."""
    parts = _path(dotted)

    def op(doc: dict[str, Any]) -> None:
        _walk(doc, parts[:-1])[parts[-1]] = copy.deepcopy(value)

    return op


def D(dotted: str) -> Op:
    """Delete the key (or list item) at a dotted path."""
    parts = _path(dotted)

    def op(doc: dict[str, Any]) -> None:
        del _walk(doc, parts[:-1])[parts[-1]]

    return op


def A(dotted: str, value: Any) -> Op:
    """Append to the list at a dotted path."""
    parts = _path(dotted)

    def op(doc: dict[str, Any]) -> None:
        _walk(doc, parts).append(copy.deepcopy(value))

    return op


def _catalog_with_instance(name: str, **changes: Any) -> Callable[[], Catalog]:
    """A catalog with one extra instance type: a copy of g6e.48xlarge with ``changes``."""

    def make() -> Catalog:
        c = catalog()
        data = copy.deepcopy(c.data)
        entry = copy.deepcopy(data["aws_instance_types"]["g6e.48xlarge"])
        entry.update(changes)
        data["aws_instance_types"][name] = entry
        return Catalog(data, c.extras)

    return make


def _catalog_without_slurm_os(os_name: str) -> Catalog:
    """The catalog with no Slurm package listed for ``os_name``."""
    c = catalog()
    extras = copy.deepcopy(c.extras)
    del extras["slurm"]["distributions"][os_name]
    return Catalog(c.data, extras)


def _catalog_with_gpu_image(os_name: str) -> Callable[[], Catalog]:
    """A catalog whose GPU EC2 image runs ``os_name`` while CPU-only instances (a Slurm controller) keep theirs."""

    def make() -> Catalog:
        c = catalog()
        aws = copy.deepcopy(c.aws)
        aws["node_images"]["ec2_gpu"]["os"] = os_name
        return Catalog(c.data, c.extras, aws)

    return make


def _catalog_with_plugin_api(release: str, api: list[int]) -> Callable[[], Catalog]:
    """The catalog with aws-ofi-nccl ``release`` exporting net-plugin API versions ``api`` (lowest, highest)."""

    def make() -> Catalog:
        c = catalog()
        sw = copy.deepcopy(c.software)
        sw["aws_ofi_nccl"]["releases"][release]["net_plugin_api"] = api
        return Catalog(c.data, c.extras, c.aws, sw)

    return make


def _in_extended_support() -> str:
    """The newest catalogued EKS version in extended support today (past its end of standard support, not past its
    end of extended support); the newest catalogued one when none is (the case then fails, saying so)."""
    ev = catalog().aws["eks_versions"]
    today = datetime.date.today()
    vers = sorted(ev["end_of_standard_support"], key=lambda v: tuple(map(int, v.split("."))))
    inside = [v for v in vers if ev["end_of_standard_support"][v] < today <= ev["end_of_extended_support"][v]]
    return (inside or vers)[-1]


def _newest_eks_fix(c: Catalog) -> str:
    newest = max(c.aws["eks_versions"]["end_of_standard_support"], key=lambda v: tuple(map(int, v.split("."))))
    return f'set `orchestrator.version: "{newest}"`'


@dataclass
class Case:
    """``bad`` ops on ``base`` trip ``rule`` at the key ``at`` with fix ``fix``; ``good`` ops
    (on ``good_base``, default ``base``) keep it silent. ``patch`` swaps in another catalog."""

    rule: str
    base: str
    bad: list[Op]
    at: str
    fix: str | Callable[[Catalog], str] | None = None
    good: list[Op] = field(default_factory=list)
    good_base: str | None = None
    patch: Callable[[], Catalog] | None = None

    def __str__(self) -> str:
        return self.rule


FSX = "storage.0.fsx"
MOE = {"parameters_b": 47, "architecture": "moe", "experts": 8, "active_parameters_b": 13}
MIXTRAL_EP = {"model": "mixtral-8x7b", "architecture": "moe"}
LONG_SERVE = {"purpose": "inference", "model": "llama-3.1-70b", "sequence_length": 131072}
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----"
DGX_NICS = [{"device": f"mlx5_{k}", "netdev": f"ib{k}", "speed_gbps": 400, "numa_node": k // 4} for k in range(4)]

CASES: list[Case] = [
    Case("accelerator-not-nvidia", "dgx", [S("node_groups.1.hardware.gpu", "mi300x:8")], "node_groups.1.hardware.gpu"),
    Case("amp-model-shape", "p5", [S("validation.amp", {"model": {"hidden": 1000, "heads": 16}})],
         "validation.amp.model.heads", good=[S("validation.amp", {"model": {"hidden": 1024, "heads": 16}})]),
    Case("aws-az-in-region", "p5", [S("target.availability_zone", "us-west-2a")], "target.availability_zone",
         "use a zone of us-east-1, e.g. `us-east-1a`", good=[S("target.availability_zone", "us-east-1f")]),
    Case("aws-node-group-fields", "p5", [D("node_groups.0.instance_type")], "node_groups.0.name",
         "add `instance_type:` (e.g. `p5.48xlarge`)"),
    Case("aws-tags", "p5", [S("target.tags", {"aws:owner": "me"})], "target.tags.aws:owner",
         good=[S("target.tags", {"owner": "me", "project": "llm"})]),
    Case("capacity-block-instance-type", "cb", [S("node_groups.0.instance_type", "g6e.48xlarge")],
         "node_groups.0.instance_type", good=[S("node_groups.0.instance_type", "p5e.48xlarge")]),
    Case("capacity-block-placement-group", "cb", [S("network.placement", "cluster")], "network.placement",
         good=[D("network.placement")]),
    Case("capacity-node-groups", "cb", [A("node_groups", {"name": "login", "role": "login", "count": 1,
                                                          "instance_type": "p5.48xlarge"})],
         "node_groups.1.instance_type",
         good=[A("node_groups", {"name": "login", "role": "login", "count": 1, "instance_type": "p5.48xlarge"}),
               S("target.capacity.node_groups", ["gpu"])]),
    Case("ami-architecture", "eks", [D("orchestrator"), S("target.ami_id", "ami-0123456789abcdef0"),
                                     S("node_groups.0.instance_type", "m7g.xlarge")], "target.ami_id",
         good=[D("orchestrator"), S("target.ami_id", "ami-0123456789abcdef0"), S("node_groups.0.instance_type", "m7i.xlarge")]),
    # EKS node group `gpu` (2 nodes) in a Capacity Block: check says how the stack sizes it by the block's window
    Case("eks-capacity-block-window", "eks", [S("target.capacity", {"type": "capacity-block",
                                                                    "reservation_id": "cr-0123456789abcdef0",
                                                                    "node_groups": ["gpu"]}),
                                              S("network.placement", "none")], "node_groups.1.name",
         good=[S("target.capacity", {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0",
                                     "node_groups": ["gpu"]}), S("network.placement", "none"), D("orchestrator")]),
    Case("eks-version-support", "eks", [S("orchestrator.version", _in_extended_support())], "orchestrator.version",
         _newest_eks_fix, good=[S("orchestrator.version", "1.35")]),
    Case("eks-version-ended", "eks", [S("orchestrator.version", "1.29")], "orchestrator.version",
         _newest_eks_fix, good=[S("orchestrator.version", _in_extended_support())]),
    # NVIDIA's platform-support page: GPU Operator 24.9 lists Amazon EKS 1.25-1.28, 26.3 lists 1.32-1.36 and 26.7
    # (newest patch v26.7.0, the supported release) 1.33-1.36; the example runs Kubernetes 1.35
    Case("gpu-operator-kubernetes", "eks", [S("orchestrator.gpu_operator_version", "v24.9.0")],
         "orchestrator.gpu_operator_version", "set `orchestrator.gpu_operator_version: v26.7.0` or unset it",
         good=[S("orchestrator.gpu_operator_version", "v26.3.3")]),
    # 25.10 lists EKS 1.30-1.35 but is past NVIDIA's end of support; 26.3 is deprecated (critical fixes only)
    Case("gpu-operator-support", "eks", [S("orchestrator.gpu_operator_version", "v25.10.1")],
         "orchestrator.gpu_operator_version", "set `orchestrator.gpu_operator_version: v26.7.0`",
         good=[S("orchestrator.gpu_operator_version", "v26.3.3")]),
    Case("fsx-backup-s3", "p5", [S(f"{FSX}.s3", {"data_repository_path": "s3://bucket/data"}),
                                 S(f"{FSX}.automatic_backup_retention_days", 7)], f"{FSX}.automatic_backup_retention_days",
         good=[S(f"{FSX}.automatic_backup_retention_days", 7)]),
    # the AWS stacks mount FSx only: an NFS export would be missing on every node (issue 27, the quick checks)
    Case("nfs-on-aws", "p5", [A("storage", {"kind": "nfs", "name": "home", "mount": "/home2", "server": "10.0.0.9",
                                            "export": "/export/home"})], "storage.1.kind",
         good=[A("storage", {"kind": "lustre", "name": "home", "mount": "/home2",
                             "fsx": {"storage_capacity_gib": 1200, "deployment_type": "SCRATCH_2"}})]),
    Case("fsx-efa-client", "p5", [S(f"{FSX}.efa_enabled", True)], f"{FSX}.efa_enabled", good=[S(f"{FSX}.efa_enabled", False)]),
    Case("gpudirect-rdma-unavailable", "p5", [S("node_groups.0.instance_type", "g5.48xlarge"),
                                              S("network.gpudirect_rdma", {"enabled": True})], "network.gpudirect_rdma.enabled",
         good=[S("node_groups.0.instance_type", "g5.48xlarge")]),
    Case("instance-type-accelerator-not-nvidia", "eks", [S("node_groups.0.instance_type", "inf2.48xlarge")],
         "node_groups.0.instance_type", good=[S("node_groups.0.instance_type", "c7i.8xlarge")]),
    Case("instance-type-exists", "eks", [S("node_groups.0.instance_type", "m6i.3xlarge")], "node_groups.0.instance_type",
         good=[S("node_groups.0.instance_type", "m6i.2xlarge")]),
    Case("kata-needs-kvm", "eks", [S("node_groups.0.sandbox", "kata")], "node_groups.0.sandbox",
         good=[S("node_groups.0.instance_type", "m7i.metal-24xl"), S("node_groups.0.sandbox", "kata")]),
    Case("mount-over-image-dir", "p5", [S("storage.0.mount", "/opt/amazon")], "storage.0.mount",
         good=[S("node_groups.0.local_nvme.mount", "/opt/dlami/nvme")]),
    Case("placement-group-mixed-types", "p5",
         [S("node_groups.0.count", 1), A("node_groups", {"name": "gpu2", "count": 1, "instance_type": "p5e.48xlarge"})],
         "node_groups.1.instance_type",
         good=[S("node_groups.0.count", 1), A("node_groups", {"name": "gpu2", "count": 1, "instance_type": "p5.48xlarge"})]),
    Case("capacity-block-size", "cb", [S("target.capacity.instance_count", 1)], "target.capacity.instance_count",
         "lower the compute `count` to 1 or buy a larger block"),
    Case("capacity-block-unused", "cb", [S("target.capacity.instance_count", 4)], "target.capacity.instance_count"),
    Case("capacity-single-instance-type", "cb",
         [A("node_groups", {"name": "gpu2", "count": 1, "instance_type": "p5e.48xlarge"})], "node_groups.1.instance_type",
         good=[S("node_groups.0.count", 1), A("node_groups", {"name": "gpu2", "count": 1, "instance_type": "p5.48xlarge"})]),
    Case("cost-node-group-unknown", "dgx", [S("cost", {"server_price_usd": {"dgx-typo": 250000}})],
         "cost.server_price_usd.dgx-typo", good=[S("cost", {"server_price_usd": {"dgx": 250000}})]),
    Case("driver-branch-gpu", "dgx", [S("software", {"driver_branch": "470", "cuda": "11.4", "kernel_updates": "hold"})],
         "software.driver_branch", "set `software.driver_branch` within R520 or newer",
         good=[S("software", {"driver_branch": "525", "cuda": "12.0", "kernel_updates": "hold"})]),
    Case("driver-version-branch", "dgx", [S("software.driver_version", "570.195.03")], "software.driver_version",
         'set `software.driver_branch: "570"` or a 580.x release', good=[S("software.driver_version", "580.95.05")]),
    Case("cuda-driver-compat", "p5", [S("software", {"driver_branch": "470", "cuda": "12.4"})], "software.driver_branch",
         'set `software.driver_branch: "525"` or newer', good=[S("software", {"driver_branch": "525", "cuda": "12.0"})]),
    Case("cuda-driver-minor", "p5", [S("software", {"driver_branch": "535", "cuda": "12.4"})], "software.driver_branch",
         'set `software.driver_branch: "550"`', good=[S("software", {"driver_branch": "560", "cuda": "12.4"})]),
    Case("efa-capable-not-used", "p5", [S("network", {"fabric": "ethernet", "placement": "cluster"})], "network.fabric",
         "set `network.fabric: efa`", good=[S("node_groups.0.count", 1), S("network", {"fabric": "ethernet"})]),
    Case("efa-device-plugin-version", "eks",
         [S("node_groups.1.instance_type", "p6-b200.48xlarge"), S("orchestrator.efa_device_plugin_version", "v0.4.4")],
         "orchestrator.efa_device_plugin_version", "set `efa_device_plugin_version: v0.5.6`",
         good=[S("node_groups.1.instance_type", "p6-b200.48xlarge"), S("orchestrator.efa_device_plugin_version", "v0.5.6")]),
    Case("efa-layout-unknown", "p5", [S("node_groups.0.instance_type", "p6e-gb200.36xlarge")],
         "node_groups.0.instance_type", good=[S("node_groups.0.instance_type", "p5en.48xlarge")]),
    Case("efa-instance-support", "p5", [S("node_groups.0.instance_type", "g6.12xlarge")], "node_groups.0.instance_type",
         patch=_catalog_with_instance("g6.12xlarge", max_efa_interfaces=0, network_cards=1)),
    Case("efa-interfaces-below-max", "p5", [S("network.efa.interfaces", 16)], "network.efa.interfaces",
         good=[S("network.efa.interfaces", 32)]),
    Case("efa-interfaces-max", "p5", [S("network.efa.interfaces", 64)], "network.efa.interfaces",
         "use `interfaces: max` (32 on p5.48xlarge)", good=[S("network.efa.interfaces", 32)]),
    Case("efa-placement-decision", "p5", [D("network.placement")], "network.fabric",
         good=[D("network.placement")], good_base="cb"),
    Case("efa-placement-none", "p5", [S("network.placement", "none")], "network.placement", good_base="cb"),
    Case("efa-placement-strategy", "p5", [S("network.placement", "spread")], "network.placement"),
    Case("efa-software-versions", "p5", [S("software", {"nccl": "2.17.1"})], "software.nccl",
         "set `software.nccl` to 2.18.0 or newer", good=[S("software", {"nccl": "2.18.0"})]),
    Case("eks-system-node-group", "eks", [D("node_groups.0")], "orchestrator.kind"),
    Case("eks-ami-id", "eks", [S("target.ami_id", "ami-0123456789abcdef0")], "target.ami_id",
         "unset `target.ami_id` (EKS picks its NVIDIA AMI for the Kubernetes version)",
         good=[S("target.ami_id", "ami-0123456789abcdef0"), D("orchestrator"), D("node_groups.0")]),
    Case("eks-api-open", "eks", [S("orchestrator.api_access_cidrs", ["0.0.0.0/0"])], "orchestrator.api_access_cidrs.0",
         good=[S("orchestrator.api_access_cidrs", ["198.51.100.0/24"])]),
    Case("eks-control-plane-subnets", "eks", [S("target.vpc", {"subnet_id": "subnet-0123456789abcdef0"})],
         "target.vpc.subnet_id",
         good=[S("target.vpc", {"subnet_id": "subnet-0123456789abcdef0",
                                "control_plane_subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"]})]),
    Case("ethernet-multi-node-training", "roce", [S("network", {"fabric": "ethernet", "speed_gbps": 100})], "network.fabric",
         good=[D("node_groups.0.hosts.1"), S("network", {"fabric": "ethernet"})]),
    Case("fabric-provider", "p5", [S("network", {"fabric": "infiniband"})], "network.fabric",
         "use `fabric: efa` (EFA-capable instance types) or `fabric: ethernet`"),
    Case("fio-expectation-missing", "roce", [D("node_groups.0.hardware.nvme.model")], "node_groups.0.hardware.nvme",
         lambda c: f"set `node_groups.0.hardware.nvme.model` (one of "
                   f"{', '.join(k for k, v in c.storage_devices.items() if isinstance(v, dict))}) or `seq_read_mb_s`/`seq_write_mb_s`",
         good=[S("storage.0.throughput_mb_s", 2500)]),  # the example's NFS export declares no server figure
    Case("fio-targets-mounted", "p5", [S("validation.fio", {"targets": ["/data"]})], "validation.fio.targets.0",
         good=[S("validation.fio", {"targets": ["/fsx/bench", "/scratch"]})]),
    Case("fsx-availability-zone", "p5", [S(f"{FSX}.availability_zone", "us-east-1b")], f"{FSX}.availability_zone",
         good=[S(f"{FSX}.availability_zone", "us-east-1a")]),
    # SCRATCH_1 has no data repository associations
    # (https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateDataRepositoryAssociation.html)
    Case("fsx-deployment-feature", "p5",
         [S(FSX, {"deployment_type": "SCRATCH_1", "storage_capacity_gib": 1200,
                  "s3": {"data_repository_path": "s3://bucket/train"}})], f"{FSX}.s3",
         good=[S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 1200,
                       "s3": {"data_repository_path": "s3://bucket/train"}})]),
    Case("fsx-backup-scratch", "p5",
         [S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400, "automatic_backup_retention_days": 7})],
         f"{FSX}.automatic_backup_retention_days",
         good=[S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400, "automatic_backup_retention_days": 0})]),
    Case("fsx-drive-cache", "p5", [S(f"{FSX}.drive_cache_type", "READ")], f"{FSX}.drive_cache_type",
         "remove `drive_cache_type`"),
    Case("fsx-efa-clients", "p5", [S("network", {"fabric": "ethernet", "placement": "cluster"}), S(f"{FSX}.efa_enabled", True)],
         f"{FSX}.efa_enabled", good=[S(f"{FSX}.efa_enabled", True)]),
    Case("fsx-efa-requirements", "p5", [D(f"{FSX}.metadata"), S(f"{FSX}.efa_enabled", True)], f"{FSX}.efa_enabled",
         "add `metadata: {mode: AUTOMATIC}`", good=[S(f"{FSX}.efa_enabled", True)]),
    Case("fsx-hdd-persistent1", "p5", [S(f"{FSX}.storage_type", "HDD")], f"{FSX}.storage_type",
         good=[S(FSX, {"deployment_type": "PERSISTENT_1", "storage_type": "HDD", "storage_capacity_gib": 6000,
                       "throughput_per_tib_mbps": 12, "drive_cache_type": "READ"})]),
    Case("fsx-kms-persistent", "p5",
         [S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400, "kms_key_id": "alias/fsx"})],
         f"{FSX}.kms_key_id", good=[S(f"{FSX}.kms_key_id", "alias/fsx")]),
    Case("fsx-lustre-version", "p5", [S(f"{FSX}.file_system_type_version", "2.12")], f"{FSX}.file_system_type_version",
         good=[D(f"{FSX}.metadata"), S(f"{FSX}.file_system_type_version", "2.12")]),
    Case("fsx-metadata-iops", "p5", [S(f"{FSX}.metadata", {"mode": "USER_PROVISIONED", "iops": 5000})],
         f"{FSX}.metadata.iops", "use 1500, 3000, 6000 or a multiple of 12000 up to 192000",
         good=[S(f"{FSX}.metadata", {"mode": "USER_PROVISIONED", "iops": 24000})]),
    Case("fsx-metadata-persistent2", "p5",
         [S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400, "metadata": {"mode": "AUTOMATIC"}})],
         f"{FSX}.metadata"),
    Case("fsx-only-on-aws", "dgx", [A("storage", {"kind": "lustre", "name": "fsx", "mount": "/fsx",
                                                  "fsx": {"storage_capacity_gib": 1200, "throughput_per_tib_mbps": 125}})],
         "storage.1.fsx"),
    Case("fsx-storage-capacity-step", "p5", [S(f"{FSX}.storage_capacity_gib", 3000)], f"{FSX}.storage_capacity_gib",
         "use 2400 or 4800 GiB", good=[S(f"{FSX}.storage_capacity_gib", 4800)]),
    Case("fsx-throughput-required", "p5", [D(f"{FSX}.throughput_per_tib_mbps")], f"{FSX}.deployment_type",
         "add `throughput_per_tib_mbps:` (125, 250, 500, 1000)"),
    Case("fsx-throughput-scratch", "p5",
         [S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400, "throughput_per_tib_mbps": 200})],
         f"{FSX}.throughput_per_tib_mbps", good=[S(FSX, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 2400})]),
    Case("fsx-throughput-value", "p5", [S(f"{FSX}.throughput_per_tib_mbps", 200)], f"{FSX}.throughput_per_tib_mbps",
         "use one of 125, 250, 500, 1000", good=[S(f"{FSX}.throughput_per_tib_mbps", 1000)]),
    Case("gpu-short-name-ambiguous", "dgx", [S("node_groups.1.hardware.gpu", "h100:8")], "node_groups.1.hardware.gpu",
         "name the part: `h100-pcie` or `h100-sxm`", good=[S("node_groups.1.hardware.gpu", "h200:8")]),
    Case("gpu-model-known", "dgx", [S("node_groups.1.hardware.gpu", "h100-sxn:8")], "node_groups.1.hardware.gpu",
         lambda c: f"use one of {', '.join(c.provisioned_gpu_keys)}",
         good=[S("node_groups.1.hardware.gpu", {"model": "NVIDIA H100 80GB HBM3", "count": 8})]),
    Case("driver-branch-supported", "dgx", [S("software.driver_branch", "550")], "software.driver_branch",
         'set `software.driver_branch: "580"` (Long Term Support)',
         good=[S("software.driver_branch", "595")]),
    # 1.19.0 is released but older than 1.19.1, which fixes CVE-2026-24260 (NVIDIA bulletin, June 2026:
    # https://nvidia.custhelp.com/app/answers/detail/a_id/5850)
    Case("container-toolkit-cve", "dgx", [S("software.container_toolkit", "1.19.0")], "software.container_toolkit",
         good=[S("software.container_toolkit", "1.19.1")]),
    Case("gpudirect-dmabuf-open-modules", "roce", [S("software.driver_open_kernel_modules", False)],
         "network.gpudirect_rdma.method"),
    Case("gpudirect-peermem-needs-ofed", "dgx", [S("network.gpudirect_rdma.method", "nvidia-peermem")],
         "network.gpudirect_rdma.method",
         good=[S("network.gpudirect_rdma.method", "nvidia-peermem"), S("software.doca_ofed", "2.9.1")]),
    Case("doca-ofed-os", "dgx", [S("software.doca_ofed", "3.2.1"), S("target.os", "debian-12")], "software.doca_ofed",
         good=[S("software.doca_ofed", "3.2.1")]),
    Case("gpudirect-efa-unsupported", "p5", [S("node_groups.0.instance_type", "g5.48xlarge")],
         "node_groups.0.instance_type", good=[S("node_groups.0.instance_type", "p4d.24xlarge")]),
    Case("gpudirect-peermem-driver", "dgx",
         [S("software", {"driver_branch": "460", "cuda": "11.0"}), S("network.gpudirect_rdma.method", "nvidia-peermem")],
         "software.driver_branch",
         good=[S("software", {"driver_branch": "470", "cuda": "11.4"}), S("network.gpudirect_rdma.method", "nvidia-peermem")]),
    Case("gvisor-gpu-support", "roce", [S("node_groups.0.sandbox", "gvisor")], "node_groups.0.sandbox",
         good_base="dgx", good=[S("node_groups.1.sandbox", "gvisor")]),
    Case("gvisor-rdma", "dgx", [S("node_groups.1.sandbox", "gvisor")], "node_groups.1.sandbox",
         good_base="kata", good=[S("node_groups.0.sandbox", "gvisor")]),
    Case("hardware-system-mismatch", "dgx", [S("node_groups.1.hardware.gpu", "h100-sxm:4")], "node_groups.1.hardware.system",
         "set `gpu: h100-sxm:8` or drop `system`"),
    Case("host-address-valid", "dgx", [S("node_groups.1.hosts.0.address", "10.0.0.300")], "node_groups.1.hosts.0.address",
         good=[S("node_groups.1.hosts.0.address", "dgx-01.example.com")]),
    Case("host-unique", "dgx", [S("node_groups.1.hosts.1.name", "dgx-01")], "node_groups.1.hosts.1.name",
         "list each server in one node group only"),
    Case("ib-generation-nic-speed", "dgx", [S("network.infiniband.generation", "HDR")],
         "node_groups.1.hardware.nics.0.speed_gbps", good=[S("network.infiniband.generation", "NDR")]),
    Case("ib-opensm-host", "dgx", [S("network.infiniband.subnet_manager.host", "mgmt-02")],
         "network.infiniband.subnet_manager.host", "use one of mgmt-01, dgx-01, dgx-02, dgx-03, dgx-04"),
    Case("ib-subnet-manager", "dgx", [S("network.infiniband.subnet_manager", {})], "network.infiniband.subnet_manager",
         good=[S("network.infiniband.subnet_manager", {"kind": "switch"})]),
    Case("inference-memory-fit", "roce", [S("workload", {"purpose": "inference", "parameters_b": 405})], "workload.parameters_b",
         good=[S("workload", {"purpose": "inference", "parameters_b": 405, "quantization": "int4"})]),
    Case("inference-kv-concurrency", "p5", [S("workload", LONG_SERVE | {"concurrency": 32})], "workload.concurrency",
         good=[S("workload", LONG_SERVE | {"concurrency": 22})]),
    Case("inference-memory-per-node", "roce", [S("workload", {"purpose": "inference", "parameters_b": 120})],
         "workload.parameters_b", good=[S("workload", {"purpose": "inference", "parameters_b": 70})]),
    Case("instance-type-format", "p5", [S("node_groups.0.instance_type", "p5-48xlarge")], "node_groups.0.instance_type"),
    Case("instance-type-not-in-catalog", "eks", [S("node_groups.0.instance_type", "g6.xlarge")], "node_groups.0.instance_type",
         good=[S("node_groups.0.instance_type", "m7i.2xlarge")]),
    Case("instance-type-unknown", "p5", [S("node_groups.0.instance_type", "p5.24xlarge")], "node_groups.0.instance_type",
         lambda c: f"use one of {', '.join(c.instance_type_names)}"),
    Case("inventory-group-name", "dgx", [S("node_groups.0.name", "with-rdma")], "node_groups.0.name",
         "rename the node group (e.g. `with-rdma-nodes`)", good=[S("node_groups.0.name", "with-rdma-nodes")]),
    Case("ipoib-cidr", "dgx", [S("network.infiniband.ipoib.cidr", "192.168.100.0/30")], "network.infiniband.ipoib.cidr",
         "use a larger subnet (at least /29)", good=[S("network.infiniband.ipoib.cidr", "192.168.100.0/29")]),
    Case("kernel-drift", "roce", [D("software.kernel_updates")], "software",
         good=[S("software.kernel_updates", "hold")]),
    Case("kata-version-gpu-passthrough", "kata", [S("software", {"kata": "3.10.0"})], "software.kata",
         good=[S("software", {"kata": "3.23.0"})]),
    Case("imex-domain", "dgx", [S("node_groups.1.hardware.gpu", "gb200:4"), S("node_groups.1.hosts.2.address", "dgx-03.lab")],
         "node_groups.1.hosts.2.address", "set `address` to `dgx-03`'s IP address",
         good=[S("node_groups.1.hardware.gpu", "gb200:4")]),
    Case("nvlsm-release", "dgx", [S("node_groups.1.hardware.gpu", "b200:8"), S("software.driver_branch", "590")],
         "software.driver_branch", "set `software.driver_branch` to one of '570', '580'",
         good=[S("node_groups.1.hardware.gpu", "b200:8"), S("software.driver_branch", "580")]),
    Case("local-connection-single", "ws",
         [A("node_groups.0.hosts", {"name": "other", "address": "127.0.0.2", "connection": "local"})],
         "node_groups.0.hosts.1.connection"),
    Case("local-nvme-drives", "dgx", [D("node_groups.1.hardware.nvme")], "node_groups.1.local_nvme",
         "declare the drives (`hardware: {nvme: {count: N}}`) or remove `local_nvme`"),
    Case("local-nvme-raid-single", "p5", [S("node_groups.0.local_nvme.raid", "none")], "node_groups.0.local_nvme.raid"),
    Case("lustre-nid-network", "p5",
         [A("storage", {"kind": "lustre", "name": "ext", "mount": "/ext", "server": {"mgs_nids": ["10.0.0.5@o2ib"], "fsname": "ext"}})],
         "storage.1.server.mgs_nids",
         good=[A("storage", {"kind": "lustre", "name": "ext", "mount": "/ext", "server": {"mgs_nids": ["10.0.0.5@tcp"], "fsname": "ext"}})]),
    Case("lustre-client-source", "dgx", [S("target.os", "ubuntu-24.04")], "software.lustre_client_repos",
         "add `software.lustre_client_repos.ubuntu-24.04: {url: ..., key_url: ...}` (a signed apt repository with the "
         "client built for ubuntu-24.04)",
         good=[S("target.os", "ubuntu-24.04"), S("software.lustre_client_repos", {"ubuntu-24.04": {
             "url": "https://repo.example.com/lustre/ubuntu2404/", "key_url": "https://repo.example.com/lustre/k.asc"}})]),
    Case("lustre-o2ib-ipoib", "dgx", [S("network.infiniband.ipoib.enabled", False)], "network.infiniband.ipoib.enabled"),
    Case("lustre-stripe-path", "dgx", [S("storage.0.stripes.0.path", "/lustre/checkpoints")], "storage.0.stripes.0.path",
         "use a relative path such as `checkpoints`", good=[S("storage.0.stripes.0.path", "runs/checkpoints")]),
    Case("moe-alltoall", "p5", [S("workload", MOE), S("validation.nccl.collectives", ["all_reduce"])],
         "validation.nccl.collectives", good=[S("workload", MOE), S("validation.nccl.collectives", ["all_reduce", "alltoall"])]),
    Case("moe-fabric-bandwidth", "eks", [S("workload", MIXTRAL_EP | {"expert_parallel": 16})], "workload.expert_parallel",
         good=[S("workload", MIXTRAL_EP | {"expert_parallel": 8})]),
    Case("parallel-fabric-demand", "eks", [S("workload", {"model": "llama-3.1-70b", "tensor_parallel": 16})],
         "workload.tensor_parallel", good=[S("workload", {"model": "llama-3.1-70b", "tensor_parallel": 8})]),
    Case("mount-dir-duplicate", "p5", [S("node_groups.0.local_nvme.mount", "/fsx")], "storage.0.mount",
         "give each file system its own mount point"),
    Case("mount-dir-overlap", "p5", [S("node_groups.0.local_nvme.mount", "/fsx/scratch")], "node_groups.0.local_nvme.mount",
         good=[S("node_groups.0.local_nvme.mount", "/fsx-scratch")]),
    Case("mount-dir-reserved", "p5", [S("storage.0.mount", "/home")], "storage.0.mount",
         good=[S("storage.0.mount", "/home/shared")]),
    Case("nccl-bytes-range", "ws", [S("validation.nccl.max_bytes", 512)], "validation.nccl.max_bytes",
         good=[S("validation.nccl.max_bytes", 1024)]),
    Case("nccl-check-off", "ws", [S("validation.nccl.check", False)], "validation.nccl.check",
         "set `validation.nccl.check: true`"),
    Case("nccl-env-disables-fabric", "dgx", [S("network.nccl", {"env": {"NCCL_IB_DISABLE": "1"}})],
         "network.nccl.env.NCCL_IB_DISABLE", "remove `NCCL_IB_DISABLE` from `network.nccl.env`",
         good=[S("network.nccl", {"env": {"NCCL_IB_TIMEOUT": "22"}})]),
    Case("nccl-env-legacy", "p5", [S("network.nccl", {"env": {"RDMAV_FORK_SAFE": "1"}})], "network.nccl.env.RDMAV_FORK_SAFE",
         good=[S("network.nccl", {"env": {"FI_EFA_USE_DEVICE_RDMA": "1"}})]),
    Case("nccl-env-narrows-fabric", "dgx", [S("network.nccl", {"env": {"NCCL_ALGO": "Ring"}})], "network.nccl.env.NCCL_ALGO",
         "remove `NCCL_ALGO` from `network.nccl.env`", good=[S("network.nccl", {"env": {"NCCL_IB_TIMEOUT": "22"}})]),
    Case("nccl-env-overrides-generated", "roce", [S("network.nccl", {"env": {"NCCL_IB_TC": "96"}})],
         "network.nccl.env.NCCL_IB_TC", good=[S("network.nccl", {"env": {"NCCL_IB_TC": "104"}})]),
    Case("nccl-gpudirect-method", "dgx", [S("software.nccl", "2.21.5"), S("network.gpudirect_rdma.method", "nvidia-peermem")],
         "software.nccl", "set `software.nccl` to 2.23.4 or newer, or `network.gpudirect_rdma.method: dmabuf`",
         good=[S("software.nccl", "2.23.4"), S("network.gpudirect_rdma.method", "nvidia-peermem")]),
    Case("netdev-required", "dgx", [D("node_groups.0.hardware")], "node_groups.0.name",
         "declare the InfiniBand port (IPoIB) under `node_groups.0.hardware.nics` with its `netdev`"),
    Case("nvswitch-passthrough-plan", "kata", [D("node_groups.0.sandbox.nvswitch")], "node_groups.0.sandbox",
         good=[S("node_groups.0.sandbox.nvswitch", {"mode": "shared-nvswitch", "gpus_per_guest": 4})]),
    Case("nccl-suite-single-gpu", "ws", [S("node_groups.0.hardware", {"gpu": "l4:1"})], "validation.suites",
         good=[S("node_groups.0.hardware", {"gpu": "l4:2"})]),
    Case("nic-link-layer", "roce", [S("node_groups.0.hardware.nics.0.link_layer", "infiniband")],
         "node_groups.0.hardware.nics.0", "set `link_layer: ethernet`"),
    Case("node-group-names-unique", "kata", [S("node_groups.1.name", "kata")], "node_groups.1.name", "rename one of the node groups"),
    Case("nvme-by-id-paths", "roce", [S("node_groups.0.hardware.nvme.by_id", ["/dev/disk/by-id/nvme-MTFDKCC3T8TFS_1", "/dev/nvme1n1"])],
         "node_groups.0.hardware.nvme.by_id.1",
         good=[S("node_groups.0.hardware.nvme.by_id", ["/dev/disk/by-id/nvme-MTFDKCC3T8TFS_1", "/dev/disk/by-id/nvme-MTFDKCC3T8TFS_2"])]),
    Case("nvswitch-needs-sxm", "roce", [S("node_groups.0.hardware.gpu", {"model": "l40s", "count": 4, "nvswitch": True})],
         "node_groups.0.hardware.gpu", good=[S("node_groups.0.hardware.gpu", {"model": "l40s", "count": 4, "nvswitch": False})]),
    Case("onprem-node-group-fields", "dgx", [S("node_groups.0.instance_type", "m6i.xlarge")], "node_groups.0.instance_type",
         "remove `instance_type` and describe `hardware` (gpu, nics, nvme)"),
    Case("ipoib-netdev-declared", "dgx", [D(f"node_groups.1.hardware.nics.{j}.netdev") for j in range(8)],
         "node_groups.1.hardware.nics.0",
         good=[D(f"node_groups.1.hardware.nics.{j}.netdev") for j in range(1, 8)]),
    Case("onprem-network-placement", "kata", [S("network.placement", "spread")], "network.placement"),
    Case("open-kernel-modules-required", "dgx",
         [S("node_groups.1.hardware.gpu", "b200:8"), S("software", {"driver_open_kernel_modules": False})],
         "software.driver_open_kernel_modules", good=[S("node_groups.1.hardware.gpu", "b200:8")]),
    Case("passthrough-gpudirect-rdma", "dgx", [S("node_groups.1.sandbox", "kata")], "node_groups.1.sandbox", good_base="kata"),
    Case("passthrough-needs-gpu", "dgx", [S("node_groups.0.sandbox", {"runtime": "kata", "gpu_passthrough": True})],
         "node_groups.0.sandbox.gpu_passthrough", good=[S("node_groups.0.sandbox", "kata")]),
    Case("passthrough-on-aws", "p5", [S("node_groups.0.sandbox", "kata")], "node_groups.0.sandbox",
         good=[S("node_groups.0.sandbox", {"runtime": "kata", "gpu_passthrough": False})]),
    Case("passthrough-runtime", "kata", [S("node_groups.0.sandbox", {"runtime": "container", "gpu_passthrough": True})],
         "node_groups.0.sandbox.gpu_passthrough"),
    Case("placement-spread-limit", "eks", [S("network.placement", "spread"), S("node_groups.1.count", 8)], "network.placement",
         good=[S("network.placement", "spread"), S("node_groups.1.count", 5)]),
    Case("public-ip-multi-card", "p5", [S("node_groups.0.public_ip", True)], "node_groups.0.public_ip",
         good=[S("node_groups.0.instance_type", "g5.48xlarge"), S("node_groups.0.public_ip", True)]),
    Case("rail-nic-count", "dgx", [S("node_groups.1.hardware.nics", DGX_NICS)], "node_groups.1.hardware.nics",
         good=[S("network.infiniband.rail_optimized", False), S("node_groups.1.hardware.nics", DGX_NICS)]),
    Case("rdma-nics-declared", "dgx", [D("node_groups.1.hardware.nics")], "node_groups.1.hardware"),
    Case("reservation-count", "p5", [S("target.capacity", {"type": "reservation", "reservation_id": "cr-0abc",
                                                           "instance_count": 1, "placement_group": "pg-train"})],
         "target.capacity.instance_count",
         good=[S("target.capacity", {"type": "reservation", "reservation_id": "cr-0abc", "instance_count": 2,
                                     "placement_group": "pg-train"})]),
    Case("reservation-vs-placement-group", "p5",
         [S("target.capacity", {"type": "reservation", "reservation_id": "cr-0abc", "instance_count": 2})], "network.placement",
         good=[S("target.capacity", {"type": "reservation", "reservation_id": "cr-0abc", "placement_group": "pg-train"})]),
    Case("roce-dscp-priority", "roce", [S("network.roce.dscp", 46)], "network.roce.dscp", good=[S("network.roce.dscp", 24)]),
    Case("roce-flow-control", "roce", [D("network.roce.flow_control")], "network.roce"),
    Case("roce-ecn-needs-ofed", "roce", [S("network.roce.ecn", True)], "network.roce.ecn",
         good=[S("network.roce.ecn", True), S("software.doca_ofed", "2.9.1")]),
    Case("roce-gid-index", "roce", [S("network.roce.gid_index", 2)], "network.roce.gid_index",
         good=[S("network.roce.gid_index", 3)]),
    Case("roce-lossy-no-ecn", "roce", [S("network.roce.flow_control", "none"), S("network.roce.ecn", False)], "network.roce.ecn",
         good=[S("network.roce.flow_control", "none"), S("network.roce.ecn", True)]),
    Case("roce-netdev-declared", "roce", [D("node_groups.0.hardware.nics.0.netdev")], "node_groups.0.hardware.nics.0"),
    Case("roce-traffic-class", "roce", [S("network.roce.traffic_class", 96)], "network.roce.traffic_class",
         "set `traffic_class: 104` or remove it", good=[S("network.roce.traffic_class", 106)]),
    Case("sandbox-driver-allow-list", "kata", [S("software.driver_version", "595.44.02")], "software.driver_version",
         "set `software.driver_version` to one of 595.58.03", good=[S("software.driver_version", "595.58.03")]),
    Case("sandbox-runtime-floating", "dgx", [S("node_groups.1.sandbox", "gvisor"), S("software.gvisor", "latest")],
         "software.gvisor", lambda c: f'set `software.gvisor: "{c.runtime_releases("gvisor")[-1].release}"`',
         good=[S("node_groups.1.sandbox", "gvisor"), S("software.gvisor", "20260504.0")]),
    Case("secret-in-blueprint", "p5", [S("description", "key AKIAABCDEFGHIJKLMNOP for the bucket")], "description"),
    Case("shared-mount-netdev", "roce", [S("storage.0.mount_options", ["nconnect=8"])], "storage.0.mount_options",
         good=[S("storage.0.mount_options", ["_netdev", "nconnect=16"])]),
    Case("slurm-controller", "dgx", [S("node_groups.0.role", "login")], "orchestrator.kind"),
    Case("slurm-controller-count", "p5s", [S("node_groups.0.count", 2)], "node_groups.0.count"),
    Case("slurm-os-version", "dgx", [], "target", patch=lambda: _catalog_without_slurm_os("ubuntu-22.04"),
         good_base="roce"),
    Case("slurm-host-name", "dgx", [S("node_groups.1.hosts.0.name", "dgx-01.example.com")], "node_groups.1.hosts.0.name",
         "set `name: dgx-01` (the node's `hostname -s`)"),
    Case("slurm-node-resources", "roce", [D("node_groups.0.hardware.cpu")], "node_groups.0"),
    Case("slurm-real-memory", "dgx", [S("node_groups.1.hardware.memory_gib", 4096)], "node_groups.1.hardware.memory_gib",
         good=[S("node_groups.1.hardware.memory_gib", 2048)]),
    Case("slurm-gres-count", "dgx", [S("node_groups.1.hardware.gpu", "h100-sxm:4")], "node_groups.1.hardware.gpu",
         "set `hardware.gpu: h100-sxm:8`"),
    Case("slurm-version-feature", "dgx", [S("orchestrator.topology", "block")], "orchestrator.topology",
         good=[S("orchestrator.topology", "tree")]),
    Case("slurm-version-order", "p5", [S("orchestrator", {"kind": "slurm"}),
                                       A("node_groups", {"name": "ctl", "role": "controller",
                                                         "instance_type": "m7i.xlarge", "count": 1})],
         "node_groups.0", patch=_catalog_with_gpu_image("ubuntu-24.04"),
         good=[S("orchestrator", {"kind": "slurm"}),
               A("node_groups", {"name": "ctl", "role": "controller", "instance_type": "g6e.48xlarge", "count": 1})]),
    Case("slurm-extra-key", "dgx", [S("orchestrator.extra", {"PrologSlurmctld": "/tmp/run-me"})],
         "orchestrator.extra.PrologSlurmctld", good=[S("orchestrator.extra", {"MaxJobCount": "20000"})]),
    Case("slurm-memlock-rdma", "dgx", [S("orchestrator.extra", {"PropagateResourceLimits": "ALL"})],
         "orchestrator.extra.PropagateResourceLimits",
         good=[S("orchestrator.extra", {"PropagateResourceLimitsExcept": "MEMLOCK,STACK"})]),
    Case("slurm-accounting-database", "dgx", [S("orchestrator.accounting", {"database_host": "db.example.com"})],
         "orchestrator.accounting.database_host",
         good=[S("orchestrator.accounting", {"database_host": "db.example.com", "password_file": "/etc/slurm/db.pass"})]),
    Case("slurm-partition-groups", "dgx", [S("orchestrator.partitions", [{"name": "gpu", "groups": ["mgmt"]}])],
         "orchestrator.partitions.0.groups.0", good=[S("orchestrator.partitions", [{"name": "gpu", "groups": ["dgx"]}])]),
    Case("slurm-container-pins", "dgx", [S("orchestrator.pyxis", True)], "orchestrator.pyxis",
         good=[S("orchestrator.pyxis", True), S("orchestrator.container_pins", {
             "enroot_4.1.2-1_amd64.deb": "1" * 64, "enroot+caps_4.1.2-1_amd64.deb": "2" * 64,
             "pyxis-0.24.0.tar.gz": "3" * 64})]),
    Case("slurm-aws-tag-keys", "p5s", [S("target.tags", {"team/owner": "ml"})], "target.tags.team/owner",
         good=[S("target.tags", {"team-owner": "ml"})]),
    Case("slurm-partition-name", "dgx", [S("orchestrator.partition", "gpu,debug")], "orchestrator.partition",
         good=[S("orchestrator.partition", "gpu-h100")]),
    Case("spot-multi-node", "p5", [S("target.capacity", "spot")], "target.capacity",
         good=[S("target.capacity", "spot"), S("node_groups.0.count", 1)]),
    Case("spot-supported", "p5", [S("node_groups.0.instance_type", "p6e-gb200.36xlarge"), S("target.capacity", "spot")],
         "node_groups.0.instance_type", good=[S("target.capacity", "spot")]),
    Case("ssh-ingress-open", "p5", [S("target.ssh_ingress_cidrs", ["10.1.0.0/16", "0.0.0.0/0"])], "target.ssh_ingress_cidrs.1",
         good=[S("target.ssh_ingress_cidrs", ["203.0.113.0/24"])]),
    Case("ssh-key-material", "dgx", [S("target.ssh.private_key_file", KEY)], "target.ssh.private_key_file",
         "store the key in a file (mode 0600) and set `private_key_file: ~/.ssh/id_ed25519`"),
    Case("subnet-ip-capacity", "p5", [S("node_groups.0.count", 300), S("target.vpc", {"subnet_cidr_block": "10.0.0.0/24"})],
         "target.vpc.subnet_cidr_block",
         good=[S("node_groups.0.count", 200), S("target.vpc", {"subnet_cidr_block": "10.0.0.0/24"})]),
    # p5: 16 GPUs of 80 GiB (85.9 GB, AWS); ZeRO-3 Adam states are 16 bytes x parameters / 16 GPUs per GPU
    Case("training-memory-fit", "p5", [S("workload", {"parameters_b": 86})], "workload.parameters_b",
         "no layout with tensor parallelism up to 8 (one node), context parallelism and full recompute fits 16 GPUs: "
         "add GPUs, use GPUs with more memory, or shorten `sequence_length`",
         good=[S("workload", {"parameters_b": 85})]),
    Case("training-memory-headroom", "p5", [S("workload", {"parameters_b": 78})], "workload.parameters_b",
         "no layout with tensor parallelism up to 8 (one node), context parallelism and full recompute fits 16 GPUs: "
         "add GPUs, use GPUs with more memory, or shorten `sequence_length`",
         good=[S("workload", {"parameters_b": 77})]),
    Case("vm-gpus-idle", "kata", [S("node_groups.1.sandbox.vm.gpus_per_vm", 3)], "node_groups.1.sandbox.vm.gpus_per_vm",
         good=[S("node_groups.1.sandbox.vm.gpus_per_vm", 4)]),
    Case("vm-gpus-per-vm", "kata", [S("node_groups.1.sandbox.vm.gpus_per_vm", 8)], "node_groups.1.sandbox.vm.gpus_per_vm",
         "use `gpus_per_vm: 4` or fewer", good=[S("node_groups.1.sandbox.vm.gpus_per_vm", 4)]),
    Case("vm-settings-runtime", "kata", [S("node_groups.0.sandbox.vm", {"vcpus": 8})], "node_groups.0.sandbox.vm"),
    Case("vpc-cidr-layout", "p5", [S("target.vpc", {"cidr_block": "10.0.0.0/16", "subnet_cidr_block": "10.1.0.0/20"})],
         "target.vpc.subnet_cidr_block", good=[S("target.vpc", {"subnet_cidr_block": "10.0.32.0/20"})]),
    Case("vpc-no-egress", "p5", [S("target.vpc", {"nat_gateway": False})], "target.vpc.nat_gateway",
         good=[S("target.vpc", {"nat_gateway": False, "vpc_id": "vpc-0123456789abcdef0"})]),
    Case("workload-fp8-support", "eks", [S("workload", {"parameters_b": 1, "precision": "fp8"})], "workload.precision",
         good_base="p5", good=[S("workload", {"parameters_b": 1, "precision": "fp8"})]),
    Case("workload-model-known", "p5", [S("workload", {"model": "llama-9-1t"})], "workload.model",
         good=[S("workload", {"model": "meta-llama/Llama-3.1-8B"})]),
    Case("workload-parallel-layout", "p5", [S("workload", {"model": "llama-3.1-8b", "tensor_parallel": 8, "context_parallel": 4})],
         "workload.tensor_parallel", good=[S("workload", {"model": "llama-3.1-8b", "tensor_parallel": 8, "context_parallel": 2})]),
    Case("workload-shape", "p5", [S("workload", {"parameters_b": 7})], "workload.parameters_b",
         good=[S("workload", {"parameters_b": 7, "shape": {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000}})]),
    Case("workload-moe-fields", "p5", [S("workload", {"parameters_b": 47, "architecture": "moe", "experts": 8})],
         "workload.architecture", "add `active_parameters_b:` (parameters used per token, billions)", good=[S("workload", MOE)]),
    # --- software stack (blueprints/rules/stack.py): each figure is the vendor's, typed here with its source ---
    # Blackwell's first CUDA is 12.8 (https://docs.nvidia.com/cuda/blackwell-compatibility-guide)
    Case("cuda-gpu-architecture", "p5", [S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.cuda", "12.6")],
         "software.cuda", 'set `software.cuda: "12.8"` or newer',
         good=[S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.cuda", "12.8")]),
    # cuda-compat for CUDA 12.x runs on base branches R470/R525/R535/R550 only
    # (https://docs.nvidia.com/deeplearning/frameworks/sglang-release-notes/rel-25-10.html); CUDA 13 lists none
    Case("cuda-forward-compat", "dgx", [S("software.driver_branch", "550"), S("software.cuda", "13.0"),
                                        S("software.cuda_compat", True)], "software.cuda_compat",
         good=[S("software.driver_branch", "470"), S("software.cuda", "12.8"), S("software.cuda_compat", True)]),
    # NCCL 2.26.5 ships CUDA 12 builds only; 2.27.7 adds CUDA 13 (https://developer.download.nvidia.com/compute/redist/nccl/)
    Case("nccl-cuda-build", "dgx", [S("software.cuda", "13.0"), S("software.nccl", "2.26.5")], "software.nccl",
         "set `software.nccl` to a release built for CUDA 13 (e.g. 2.30.7)",
         good=[S("software.cuda", "13.0"), S("software.nccl", "2.27.7")]),
    # NVIDIA's package of a release is <nccl>-1+cuda<X.Y> (https://developer.download.nvidia.com/compute/redist/nccl/):
    # 2.26.2 is a real release the catalog has no row for (no CUDA build to pin); 2.26.5 has one
    Case("nccl-release-known", "dgx", [S("software.cuda", "12.8"), S("software.nccl", "2.26.2")], "software.nccl",
         good=[S("software.cuda", "12.8"), S("software.nccl", "2.26.5")]),
    # Blackwell support arrived in NCCL 2.25.1 (https://github.com/NVIDIA/nccl/releases/tag/v2.25.1-1)
    Case("nccl-gpu-support", "p5", [S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.cuda", "12.8"),
                                    S("software.nccl", "2.23.4")], "software.nccl", "set `software.nccl` to 2.25.1 or newer",
         good=[S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.cuda", "12.8"), S("software.nccl", "2.25.1")]),
    # NVLS (NVLink SHARP) is in NCCL from 2.17.1 (https://github.com/NVIDIA/nccl/releases/tag/v2.17.1-1)
    Case("nccl-nvls", "dgx", [S("software.cuda", "12.0"), S("software.nccl", "2.16.5")], "software.nccl",
         "set `software.nccl` to 2.17.1 or newer", good=[S("software.cuda", "12.0"), S("software.nccl", "2.17.1")]),
    # aws-ofi-nccl added P6-B200 in 1.15.0 (https://github.com/aws/aws-ofi-nccl/blob/v1.21.1/RELEASENOTES.md)
    Case("aws-ofi-nccl-instance-type", "p5", [S("node_groups.0.instance_type", "p6-b200.48xlarge"),
                                              S("software.aws_ofi_nccl", "1.14.0")], "software.aws_ofi_nccl",
         "set `software.aws_ofi_nccl` to 1.15.0 or newer",
         good=[S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.aws_ofi_nccl", "1.15.0")]),
    # aws-ofi-nccl 1.21.1 supports NCCL 2.17.1 and later (same release notes)
    Case("aws-ofi-nccl-nccl", "eks", [S("software", {"cuda": "12.0", "nccl": "2.16.5"})], "software.nccl",
         "set `software.nccl` to 2.17.1 or newer", good=[S("software", {"cuda": "12.0", "nccl": "2.17.1"})]),
    # aws-ofi-nccl 1.15.0 exports ncclNetPlugin_v2..v10 (https://github.com/aws/aws-ofi-nccl/blob/v1.15.0/src/nccl_ofi_interface_nvidia.cpp),
    # NCCL 2.28.9 loads v6..v11 (https://github.com/NVIDIA/nccl/tree/v2.28.9-1/src/plugin/net); 1.17.3 exports v11
    Case("nccl-net-plugin-api-older", "p5", [S("software", {"nccl": "2.28.9", "aws_ofi_nccl": "1.15.0"})],
         "software.aws_ofi_nccl", "set `software.aws_ofi_nccl` to 1.17.3 or newer",
         good=[S("software", {"nccl": "2.28.9", "aws_ofi_nccl": "1.17.3"})]),
    # no catalogued pair lacks a common net API version: the trip uses a catalog whose plugin 1.7.2 exports v2..v5 only
    # (aws-ofi-nccl releases before 1.6 built one API version, the NCCL header's)
    Case("nccl-net-plugin-api", "p5", [S("software", {"nccl": "2.26.5", "cuda": "12.9", "aws_ofi_nccl": "1.7.2"})],
         "software.aws_ofi_nccl", patch=_catalog_with_plugin_api("1.7.2", [2, 5]),
         good=[S("software", {"nccl": "2.26.5", "cuda": "12.9", "aws_ofi_nccl": "1.15.0"})]),
    # g5.48xlarge's EFA has no RDMA read, p5.48xlarge's has (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types)
    Case("efa-env-capability", "p5", [S("node_groups.0.instance_type", "g5.48xlarge"),
                                      S("network.nccl", {"env": {"FI_EFA_USE_DEVICE_RDMA": "1"}})],
         "network.nccl.env.FI_EFA_USE_DEVICE_RDMA", good=[S("network.nccl", {"env": {"FI_EFA_USE_DEVICE_RDMA": "1"}})]),
    # the NVIDIA Container Toolkit needs driver >= 418.81.07
    # (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html)
    Case("container-toolkit-driver", "dgx", [S("software.driver_branch", "410")], "software.driver_branch",
         "set `software.driver_branch` to 418 or newer", good=[S("software.driver_branch", "418")]),
    # PyTorch 2.12 publishes cu126, cu130 and cu132 wheels, no cu128
    # (https://dev-discuss.pytorch.org/t/introducing-cuda-13-2-and-deprecating-cuda-12-8-release-2-12/3337)
    Case("pytorch-cuda-tag", "dgx", [S("software.pytorch", "2.12.0"), S("software.pytorch_cuda", "cu128")],
         "software.pytorch_cuda", "set `software.pytorch_cuda` to one of cu126, cu130, cu132",
         good=[S("software.pytorch", "2.12.0"), S("software.pytorch_cuda", "cu130")]),
    # CUDA 13.x needs driver R580 (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html); 12.x runs on R525+
    Case("pytorch-cuda-driver", "dgx", [S("software.driver_branch", "535"), S("software.pytorch_cuda", "cu130")],
         "software.pytorch_cuda", good=[S("software.driver_branch", "535"), S("software.pytorch_cuda", "cu126")]),
    # cu126 wheels stop at Hopper (9.0); Blackwell (10.0) needs CUDA 12.8+ (https://github.com/pytorch/pytorch/pull/164471);
    # PyTorch 2.12 (the default) publishes cu126, cu130, cu132
    Case("pytorch-gpu-architecture", "p5", [S("node_groups.0.instance_type", "p6-b200.48xlarge"),
                                            S("software.pytorch_cuda", "cu126")], "software.pytorch_cuda",
         "set `software.pytorch_cuda` to one of cu130, cu132",
         good=[S("node_groups.0.instance_type", "p6-b200.48xlarge"), S("software.pytorch_cuda", "cu130")]),
    # NGC 26.03 is built on CUDA 13.2 (https://docs.nvidia.com/deeplearning/frameworks/cuda-dl-release-notes/rel-26-03.html):
    # R580 runs it (minor-version compatibility), R550 cannot
    Case("container-image-driver", "dgx", [S("software.driver_branch", "550"),
                                           S("software.container_image", "nvcr.io/nvidia/pytorch:26.03-py3")],
         "software.container_image", good=[S("software.container_image", "nvcr.io/nvidia/pytorch:26.03-py3")]),
]

RULES = {r.id: r for r in all_rules()}


def _build(base_docs: dict[str, dict[str, Any]], base: str, ops: list[Op]) -> tuple[str, dict[tuple[Any, ...], int]]:
    doc = copy.deepcopy(base_docs[base])
    for op in ops:
        op(doc)
    return emit(doc)


def _check(text: str, case: Case, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    if case.patch is not None:
        patched = case.patch()
        monkeypatch.setattr("blueprints.rules.registry.catalog", lambda: patched)
    try:
        loaded = parse_blueprint(text, "case.yaml")
    except BlueprintInvalid as e:  # the case itself must be a valid blueprint
        pytest.fail(f"{case.rule}: mutated blueprint does not load:\n{e}\n{text}")
    findings = check(loaded)
    internal = [f.format() for f in findings if f.rule_id == "internal-rule-error"]
    assert not internal, internal
    return findings


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_fires(case: Case, base_docs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    text, lines = _build(base_docs, case.base, case.bad)
    findings = [f for f in _check(text, case, monkeypatch) if f.rule_id == case.rule]
    assert findings, f"{case.rule} did not fire on:\n{text}"
    rule = RULES[case.rule]
    at = tuple(int(p) if p.isdigit() else p for p in case.at.split("."))
    want_line = lines[at]
    here = [f for f in findings if f.line == want_line]
    assert here, f"{case.rule} reported lines {[f.line for f in findings]}, expected {want_line} (`{case.at}`)"
    f = here[0]
    assert f.severity == rule.severity
    assert f.file == "case.yaml" and f.col >= 1
    expected_fix = case.fix(catalog()) if callable(case.fix) else case.fix or rule.fix
    assert f.fix == expected_fix
    assert "`" in f.message, "messages name the fields in backticks"
    assert f.format() == f"case.yaml:{f.line}:{f.col}: {'warning: ' if f.severity == 'warning' else ''}{case.rule}: {f.message} — {f.fix}"
    assert "\n" not in f.format()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_passes(case: Case, base_docs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    text, _ = _build(base_docs, case.good_base or case.base, case.good)
    hits = [f.format() for f in _check(text, case, monkeypatch) if f.rule_id == case.rule]
    assert not hits, f"{case.rule} fired on its passing blueprint: {hits}\n{text}"


def test_every_rule_has_a_case() -> None:
    covered = {c.rule for c in CASES}
    assert len(covered) == len(CASES), "one case per rule (duplicates hide a missing one)"
    assert covered == set(RULES), f"rules without a case: {sorted(set(RULES) - covered)}; unknown: {sorted(covered - set(RULES))}"


def test_rule_metadata() -> None:
    assert len(RULES) >= 40
    for r in RULES.values():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", r.id), r.id
        assert r.severity in ("error", "warning")
        assert r.source.startswith("https://"), r.id
        assert r.fix and "\n" not in r.fix and r.summary and "\n" not in r.summary, r.id


@pytest.mark.parametrize("name", sorted(BASES.values()))
def test_examples_pass_check(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES / f"{name}.yaml")]) == 0
    out = capsys.readouterr()
    assert "ok (" in out.out


def test_rules_json_lists_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["rules"]
    assert len(listed) >= 40
    assert {r["id"] for r in listed} == set(RULES)
    assert all(set(r) == {"id", "severity", "summary", "fix", "source"} for r in listed)


def test_check_cli_error_warning_and_strict(tmp_path: Path, base_docs: dict[str, dict[str, Any]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad, lines = _build(base_docs, "p5", [S("storage.0.fsx.storage_capacity_gib", 3000)])
    f = tmp_path / "bad.yaml"
    f.write_text(bad)
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().out
    line = lines[("storage", 0, "fsx", "storage_capacity_gib")]
    assert re.search(rf"{re.escape(str(f))}:{line}:\d+: fsx-storage-capacity-step: .* — use 2400 or 4800 GiB", err), err

    assert main(["check", "--json", str(f)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    hit = next(x for x in doc["findings"] if x["rule_id"] == "fsx-storage-capacity-step")
    assert hit["line"] == line and hit["severity"] == "error" and hit["source"].startswith("https://")
    assert hit["path"] == "storage.0.fsx.storage_capacity_gib"

    warn, _ = _build(base_docs, "p5", [S("network.placement", "none")])
    w = tmp_path / "warn.yaml"
    w.write_text(warn)
    assert main(["check", str(w)]) == 0
    assert "warning: efa-placement-none" in capsys.readouterr().out
    assert main(["check", "--strict", str(w)]) == 1


def test_every_rule_module_is_loaded() -> None:
    """Importing the package registers the rules of every rule module in the folder (none silently dropped)."""
    import blueprints.rules as pkg

    folder = Path(pkg.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_") and p.stem != "registry"}
    registered = {r.check.__module__.rpartition(".")[2] for r in pkg.all_rules()}
    assert modules <= registered, modules - registered


def test_local_nvme_without_instance_store(base_docs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The AWS branch of `local-nvme-drives`: an EBS-only instance type has no drives for the scratch RAID."""
    case = Case("local-nvme-drives", "p5", [S("node_groups.0.instance_type", "g6.12xlarge")], "node_groups.0.local_nvme",
                patch=_catalog_with_instance("g6.12xlarge", instance_store=None))
    text, lines = _build(base_docs, case.base, case.bad)
    hits = [f for f in _check(text, case, monkeypatch) if f.rule_id == "local-nvme-drives"]
    assert [(f.line, f.fix) for f in hits] == [(lines[("node_groups", 0, "local_nvme")], RULES["local-nvme-drives"].fix)]


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0", "0.0.0.0/0 "])
def test_ssh_open_to_the_world_in_any_spelling(cidr: str, base_docs: dict[str, dict[str, Any]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = Case("ssh-ingress-open", "p5", [S("target.ssh_ingress_cidrs", [cidr])], "target.ssh_ingress_cidrs.0")
    text, _ = _build(base_docs, case.base, case.bad)
    assert [f.rule_id for f in _check(text, case, monkeypatch) if f.rule_id == "ssh-ingress-open"] == ["ssh-ingress-open"]


def test_a_crashing_rule_becomes_a_finding(base_docs: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside one rule is reported as `internal-rule-error`; the other rules still report."""
    from blueprints.rules import registry

    def broken(ctx: Any) -> Any:
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(registry._RULES, "zz-broken", registry.Rule("zz-broken", "warning", "s", "f", "https://x", broken))
    text, _ = _build(base_docs, "p5", [S("network.placement", "none")])
    findings = check(parse_blueprint(text, "c.yaml"))
    assert {f.rule_id for f in findings} >= {"internal-rule-error", "efa-placement-none"}
    crash = next(f for f in findings if f.rule_id == "internal-rule-error")
    assert crash.severity == "error" and "zz-broken failed: ZeroDivisionError: boom" in crash.message
