"""Policy suite: AWS's documented facts asserted on every resource of the plan of every AWS
example and of a generated matrix of variants — capacity kinds x node-group roles x EKS or EC2
x instance families with and without EFA RDMA read and NVMe instance store (and Ethernet
instead of EFA). A new combination cannot bring back a fault of any of these kinds:

* a reservation / Capacity Block reaches only the groups it is for; the others launch on demand
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html);
* EKS with a Capacity Block: instance type in the launch template, none in the node group
  (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html);
* EFA software and NCCL / libfabric variables only where the hardware has EFA, RDMA read and GPUs
  (aws-ofi-nccl's guide, catalog ``efa_software.env``);
* FSx for Lustre ports both ways between file system and clients; no half-provisioned
  StorageClass; scratch works with the Deep Learning AMI's own volume.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pulumi
import pytest

from blueprints import check, load_blueprint
from blueprints.aws import efa_group, kvm_source, reserved_groups
from blueprints.catalog import catalog, ec2_instance_type_names
from blueprints.models import Blueprint, CapacityBlockCapacity, SpotCapacity
from blueprints.naming import TAG_NODE_GROUP
from blueprints.settings import node_settings
from clusterforge.plan import PlanResult, plan_aws
from stacks.components.network import LUSTRE_PORTS
from tests.conftest import EXAMPLES

from .conftest import (
    AWS_EXAMPLES,
    EGRESS,
    FSX,
    INGRESS,
    LT,
    NODEGROUP,
    PG,
    by_id,
    plan_example,
    rules_of,
    sg_named,
    user_data,
    variant_yaml,
    with_programs,
)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

SW = catalog().aws["efa_software"]

CAPACITY: dict[str, dict[str, Any]] = {
    "on-demand": {"type": "on-demand"},
    "spot": {"type": "spot"},
    "capacity-block": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0", "instance_count": 2},
    "reservation": {"type": "reservation", "reservation_id": "cr-0abc", "instance_count": 2, "placement_group": "odcr-pg"},
}
COMPUTE_TYPES = {
    "p5.48xlarge": "EFA, RDMA read, NVMe",
    "p4d.24xlarge": "EFA, RDMA read (EFA v1), NVMe",
    "g5.48xlarge": "EFA without RDMA read, NVMe",
    "g6e.48xlarge": "EFA with RDMA read, NVMe",
}
OTHER_GROUPS = [
    {"name": "login", "role": "login", "count": 1, "instance_type": "m6i.2xlarge"},
    {"name": "ctl", "role": "controller", "count": 1, "instance_type": "m6i.xlarge"},
]


def _variant(capacity: str, eks: bool, itype: str, fabric: str) -> dict[str, Any]:
    compute: dict[str, Any] = {"name": "gpu", "role": "compute", "count": 2, "instance_type": itype,
                               "local_nvme": {"mount": "/scratch"}}
    placement = "none" if capacity == "capacity-block" else "cluster"
    patch: dict[str, Any] = {
        "target": {"capacity": CAPACITY[capacity]},
        "node_groups": [compute, *OTHER_GROUPS],
        "network": {"fabric": fabric, "placement": placement, "efa": None if fabric != "efa" else {"interfaces": "max"}},
    }
    if eks:
        patch["orchestrator"] = {"kind": "kubernetes", "version": "1.35"}
    return patch


MATRIX = [
    (cap, eks, itype, "efa") for cap, eks, itype in itertools.product(CAPACITY, (False, True), COMPUTE_TYPES)
] + [(cap, eks, "g6e.48xlarge", "ethernet") for cap, eks in itertools.product(("on-demand", "reservation"), (False, True))]


def _ids(v: tuple[str, bool, str, str]) -> str:
    return f"{v[0]}-{'eks' if v[1] else 'ec2'}-{v[2]}-{v[3]}"


# --- the facts ---------------------------------------------------------------------------------

def assert_aws_facts(bp: Blueprint, plan: PlanResult) -> None:
    """Every AWS fact of this suite, for every resource of ``plan`` (``bp`` is its blueprint)."""
    cap = bp.target.capacity  # type: ignore[union-attr]
    reserved = {g.name for g in reserved_groups(bp)}
    ids = by_id(plan)
    ngs = {ng.inputs["tags"][TAG_NODE_GROUP]: ng for ng in plan.of_type(NODEGROUP)}
    eks = bool(ngs)
    if isinstance(cap, CapacityBlockCapacity):
        assert not plan.of_type(PG), "a Capacity Block gets no placement group"
    for lt in plan.of_type(LT):
        g = bp.group(lt.inputs["tags"][TAG_NODE_GROUP])
        where = f"{lt.urn} ({g.role} {g.instance_type}, capacity {cap.type})"
        market = lt.inputs.get("instanceMarketOptions", {})
        crs = lt.inputs.get("capacityReservationSpecification")
        # 1. capacity per node group
        if g.name in reserved:
            assert crs == {"capacityReservationTarget": {"capacityReservationId": cap.reservation_id}}, where
            assert (market.get("marketType") == "capacity-block") == isinstance(cap, CapacityBlockCapacity), where
        else:
            assert crs is None, f"{where}: a group the reservation is not for must not target it"
            assert market.get("marketType") != "capacity-block", f"{where}: capacity-block on a group outside the block"
            if isinstance(cap, SpotCapacity) and not eks:
                assert market.get("marketType") == "spot", where
        # 2. instance type placement (EC2 / EKS / EKS + Capacity Block)
        if not eks:
            assert lt.inputs["instanceType"] == g.instance_type, where
        else:
            ng = ngs[g.name]
            assert ids[ng.inputs["launchTemplate"]["id"]] is lt
            cb = isinstance(cap, CapacityBlockCapacity) and g.name in reserved
            if cb:
                assert lt.inputs.get("instanceType") == g.instance_type, f"{where}: EKS needs it in the launch template"
                assert "instanceTypes" not in ng.inputs, f"{ng.urn}: instance type both in node group and template"
                assert ng.inputs["capacityType"] == "CAPACITY_BLOCK", ng.urn
            else:
                assert "instanceType" not in lt.inputs and ng.inputs["instanceTypes"] == [g.instance_type], where
                want = "SPOT" if isinstance(cap, SpotCapacity) else "ON_DEMAND"
                assert ng.inputs["capacityType"] == want, ng.urn
        # every launched instance type exists in EC2; KVM sandboxes only on bare metal
        assert g.instance_type in ec2_instance_type_names(), where
        kvm = kvm_source(g.instance_type, eks)
        if g.sandbox.runtime in ("kata", "vm"):
            assert kvm is not None, f"{where}: KVM sandbox without KVM"
        nested = lt.inputs.get("cpuOptions", {}).get("nestedVirtualization")
        assert (nested == "enabled") == (g.sandbox.runtime in ("kata", "vm") and kvm == "nested"), where
        # 3. the group's hardware decides its EFA software and environment
        text = with_programs(user_data(lt), node_settings(bp, g))  # and the programs its runner fetches
        spec = catalog().instance_type(g.instance_type) if g.instance_type in catalog().instance_type_names else None
        has_efa = efa_group(bp, g)
        efas = [n for n in lt.inputs["networkInterfaces"] if n["interfaceType"] in ("efa", "efa-only")]
        assert bool(efas) == has_efa, f"{where}: EFA interfaces {len(efas)} but efa_group is {has_efa}"
        if not has_efa:
            for needle in ("FI_PROVIDER", "FI_EFA_", "clusterforge-efa.sh", "NCCL_NET_PLUGIN", "ofi-nccl"):
                assert needle not in text, f"{where}: `{needle}` on a group without EFA"
        else:
            assert spec is not None
            if not spec.efa_rdma_read:
                assert "FI_EFA_USE_DEVICE_RDMA=1" not in text, f"{where}: device RDMA on an EFA without RDMA read"
            if spec.gpu_count:
                for d in SW["ofi_nccl_plugin_dirs"]:
                    assert d in text, f"{where}: OFI plugin layout {d} not covered"
            efa_script = text.split("clusterforge: EFA software", 1)[1].split("\n    - path:", 1)[0]
            assert "fi_info" not in efa_script, f"{where}: fi_info is absent on minimal EFA installs"
            assert ("--minimal" in efa_script) == eks, f"{where}: EFA install mode must follow the platform"
            assert "is not installed over it" in efa_script, f"{where}: installed EFA must be kept"
        # 4. scratch: the AMI's own volume first, a loud error when nothing is there
        if g.local_nvme is not None:
            assert f"AMI_VOLUME=${{AMI_VOLUME:-{catalog().aws['dlami']['nvme_location']}}}" in text, where
            assert "ERROR: no free $([ \"$DISCOVERY\" = instance-store ] && echo instance-store NVMe" in text, where
            assert "DISCOVERY=instance-store;" in text and "exec \"$SCRIPT\" --require" in text, where
    # 5. FSx for Lustre: Lustre ports both ways on both groups
    if plan.of_type(FSX):
        nodes, fsx = sg_named(plan, "-nodes"), sg_named(plan, "-fsx")
        for lo, hi in LUSTRE_PORTS:
            for sg, other, kind in ((fsx, nodes, INGRESS), (fsx, nodes, EGRESS), (nodes, fsx, INGRESS),
                                    (nodes, fsx, EGRESS), (fsx, fsx, INGRESS), (fsx, fsx, EGRESS)):
                found = [r for r in rules_of(plan, sg, kind) if r.inputs.get("referencedSecurityGroupId") == other.id
                         and r.inputs["ipProtocol"] in ("tcp", "-1") and r.inputs.get("fromPort", lo) <= lo
                         and r.inputs.get("toPort", hi) >= hi]
                assert found, f"{sg.urn}: no {kind.rsplit(':', 1)[1]} TCP {lo}-{hi} with {other.urn}"
    # 6. no StorageClass that would leave claims Pending
    assert not plan.of_type("kubernetes:storage.k8s.io/v1:StorageClass"), "dynamic FSx StorageClass without IAM"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_examples_keep_the_aws_facts(example: str) -> None:
    assert_aws_facts(load_blueprint(EXAMPLES / f"{example}.yaml").blueprint, plan_example(example))


@pytest.mark.parametrize("variant", MATRIX, ids=_ids)
def test_variant_keeps_the_aws_facts(variant: tuple[str, bool, str, str], tmp_path: Path) -> None:
    cap, eks, itype, fabric = variant
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", _variant(cap, eks, itype, fabric)))
    loaded = load_blueprint(path)
    errors = [f for f in check(loaded) if f.severity == "error"]
    if errors:
        # the combination is refused before deploy; the Pulumi program refuses it the same way
        assert cap == "capacity-block" and catalog().instance_type(itype).capacity_blocks_supported is False, errors
        with pytest.raises(pulumi.RunError, match="capacity-block-instance-type"):
            plan_aws(loaded)
        return
    assert_aws_facts(loaded.blueprint, plan_aws(loaded))


def test_the_matrix_covers_every_kind() -> None:
    """Every capacity kind, both platforms, every node-group role and instance families with and
    without EFA RDMA read are in the matrix (and each of those types has NVMe instance store)."""
    assert {v[0] for v in MATRIX} == set(CAPACITY)
    assert {v[1] for v in MATRIX} == {False, True}
    rdma = {catalog().instance_type(t).efa_rdma_read for t in COMPUTE_TYPES}
    assert rdma == {True, False}
    assert all(catalog().instance_type(t).instance_store for t in COMPUTE_TYPES)
    assert {g["role"] for g in OTHER_GROUPS} | {"compute"} == {"compute", "login", "controller"}


@pytest.mark.parametrize(("itype", "eks", "ok"), [
    ("m7i.metal-24xl", False, True), ("c6i.metal", True, True), ("m6i.2xlarge", False, False),
    ("m8i.2xlarge", False, True), ("c8i.4xlarge", False, True), ("m8i.2xlarge", True, False)])
def test_kata_group_needs_kvm(itype: str, eks: bool, ok: bool, tmp_path: Path) -> None:
    """Bare metal anywhere; nested-virtualization families on EC2 only (enabled in the launch
    template); everything else is refused before deploy."""
    patch = _variant("on-demand", eks, "p5.48xlarge", "efa")
    patch["node_groups"][1] = {**OTHER_GROUPS[0], "instance_type": itype, "sandbox": "kata"}
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", patch))
    loaded = load_blueprint(path)
    if ok:
        assert_aws_facts(loaded.blueprint, plan_aws(loaded))
    else:
        with pytest.raises(pulumi.RunError, match="kata-needs-kvm"):
            plan_aws(loaded)


def test_explicit_node_groups_take_the_reservation(tmp_path: Path) -> None:
    """`target.capacity.node_groups` names the groups in the block; a compute group not named
    launches on demand, a named login group of the same type launches into the block."""
    patch = _variant("capacity-block", False, "p5.48xlarge", "efa")
    patch["target"]["capacity"] = {**CAPACITY["capacity-block"], "node_groups": ["gpu", "login"], "instance_count": 3}
    patch["node_groups"] = [patch["node_groups"][0], {**OTHER_GROUPS[0], "instance_type": "p5.48xlarge"},
                            {"name": "gpu-od", "count": 1, "instance_type": "p5.48xlarge"}]
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", patch))
    loaded = load_blueprint(path)
    plan = plan_aws(loaded)
    assert_aws_facts(loaded.blueprint, plan)
    lts = {lt.inputs["tags"][TAG_NODE_GROUP]: lt for lt in plan.of_type(LT)}
    assert lts["login"].inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert "capacityReservationSpecification" not in lts["gpu-od"].inputs


def test_only_the_reserved_groups_join_the_reservations_placement_group(tmp_path: Path) -> None:
    patch = _variant("reservation", False, "p5.48xlarge", "efa")
    patch["target"]["capacity"] = {**CAPACITY["reservation"], "node_groups": ["gpu"]}
    patch["node_groups"] = [patch["node_groups"][0], {"name": "gpu-od", "count": 1, "instance_type": "p5e.48xlarge"}]
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", patch))
    loaded = load_blueprint(path)
    plan = plan_aws(loaded)
    assert_aws_facts(loaded.blueprint, plan)
    lts = {lt.inputs["tags"][TAG_NODE_GROUP]: lt for lt in plan.of_type(LT)}
    assert lts["gpu"].inputs["placement"]["groupName"] == "odcr-pg"
    assert "groupName" not in lts["gpu-od"].inputs.get("placement", {}), "an on-demand group in the ODCR's group"
