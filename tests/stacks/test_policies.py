"""Policy tests: the Pulumi program runs under ``pulumi.runtime.set_mocks`` for every AWS example
and each assertion names the resource it is about."""

from __future__ import annotations

import base64
import importlib
import inspect
import re
import warnings

import pytest

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.naming import TAG_BLUEPRINT, TAG_NODE_GROUP, TAG_ROLE
from stacks.components.network import LUSTRE_PORTS
from tests.conftest import EXAMPLES

from .conftest import (
    AWS_EXAMPLES,
    EGRESS,
    FSX,
    INGRESS,
    INSTANCE,
    LT,
    NODEGROUP,
    PG,
    SUBNET,
    by_id,
    plan_example,
    rules_of,
    sg_named,
    user_data,
)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def bp(example: str):
    return load_blueprint(EXAMPLES / f"{example}.yaml").blueprint


def group_of(lt_name: str, example: str) -> str:
    b = bp(example)
    for g in b.node_groups:
        if lt_name == f"{b.name}-{g.name}-lt":
            return g.name
    raise AssertionError(f"{lt_name}: no node group")


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_efa_interfaces_one_per_network_card_up_to_catalog_maximum(example: str) -> None:
    plan = plan_example(example)
    b = bp(example)
    for lt in plan.of_type(LT):
        g = b.group(group_of(lt.name, example))
        nics = lt.inputs["networkInterfaces"]
        try:
            spec = catalog().instance_type(g.instance_type or "")
        except KeyError:
            spec = None
        if spec is None or not spec.efa_supported:
            assert [n["interfaceType"] for n in nics] == ["interface"], f"{lt.urn}: non-EFA type gets one ENA"
            continue
        efas = [n for n in nics if n["interfaceType"] in ("efa", "efa-only")]
        assert len(efas) == spec.max_efa_interfaces, (
            f"{lt.urn}: {len(efas)} EFA interfaces, catalog maximum for {spec.name} is {spec.max_efa_interfaces}")
        cards = [n["networkCardIndex"] for n in efas]
        assert len(set(cards)) == len(cards), f"{lt.urn}: EFA interfaces share a network card: {cards}"
        assert set(cards) == set(range(spec.max_efa_interfaces or 0)), f"{lt.urn}: cards {sorted(cards)}"
        # the pinned layout (AWS efa-acc-inst-types today): ENA primary at 0/0, efa-only at 0/1, k/0
        layout = sorted((n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics)
        expected = sorted([(0, 0, "interface"), (0, 1, "efa-only")]
                          + [(k, 0, "efa-only") for k in range(1, spec.max_efa_interfaces or 0)])
        assert layout == expected, f"{lt.urn}: NIC layout differs from the pinned one"
        primary = next(n for n in nics if (n["networkCardIndex"], n["deviceIndex"]) == (0, 0))
        assert primary["associatePublicIpAddress"] == "false", f"{lt.urn}: multi-NIC node asks for a public IP"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_node_security_group_references_itself_both_ways_on_every_interface(example: str) -> None:
    plan = plan_example(example)
    nodes = sg_named(plan, "-nodes")
    ingress = rules_of(plan, nodes, INGRESS)
    egress = rules_of(plan, nodes, EGRESS)
    assert any(r.inputs.get("referencedSecurityGroupId") == nodes.id and r.inputs["ipProtocol"] == "-1"
               for r in ingress), f"{nodes.urn}: no all-traffic ingress from itself (EFA)"
    assert any(r.inputs.get("referencedSecurityGroupId") == nodes.id and r.inputs["ipProtocol"] == "-1"
               for r in egress), f"{nodes.urn}: no all-traffic egress to itself (EFA)"
    for lt in plan.of_type(LT):
        for nic in lt.inputs["networkInterfaces"]:
            assert nodes.id in nic["securityGroups"], f"{lt.urn}: interface {nic} lacks the node SG"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_lustre_ports_open_between_nodes_and_file_system_before_it_exists(example: str) -> None:
    plan = plan_example(example)
    if not plan.of_type(FSX):
        pytest.skip("no FSx in this example")
    nodes, fsx_sg = sg_named(plan, "-nodes"), sg_named(plan, "-fsx")
    ingress = rules_of(plan, fsx_sg, INGRESS)
    for lo, hi in LUSTRE_PORTS:
        match = [r for r in ingress if r.inputs["ipProtocol"] == "tcp" and r.inputs["fromPort"] == lo
                 and r.inputs["toPort"] == hi and r.inputs.get("referencedSecurityGroupId") == nodes.id]
        assert match, f"{fsx_sg.urn}: no TCP {lo}-{hi} ingress from the node SG"
        out = [r for r in rules_of(plan, nodes, EGRESS) if r.inputs.get("fromPort") == lo
               and r.inputs.get("referencedSecurityGroupId") == fsx_sg.id]
        assert out, f"{nodes.urn}: no TCP {lo}-{hi} egress to the FSx SG"
    for fs in plan.of_type(FSX):
        assert fs.inputs["securityGroupIds"] == [fsx_sg.id], f"{fs.urn}: not in the FSx SG"
        lustre_rules = {r.urn for r in ingress if r.inputs["ipProtocol"] == "tcp"}
        assert lustre_rules <= set(fs.depends_on), f"{fs.urn}: created before its Lustre SG rules"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_no_ingress_from_anywhere(example: str) -> None:
    plan = plan_example(example)
    for r in plan.of_type(INGRESS):
        cidr = r.inputs.get("cidrIpv4") or r.inputs.get("cidrIpv6")
        if cidr in ("0.0.0.0/0", "::/0"):
            lo, hi = r.inputs.get("fromPort", 0), r.inputs.get("toPort", 65535)
            assert r.inputs["ipProtocol"] != "-1" and not lo <= 22 <= hi, f"{r.urn}: port 22 open to {cidr}"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_launch_templates_require_imdsv2_and_encrypted_gp3_root(example: str) -> None:
    plan = plan_example(example)
    lts = plan.of_type(LT)
    assert lts, f"{example}: no launch template"
    for lt in lts:
        md = lt.inputs["metadataOptions"]
        assert md["httpTokens"] == "required", f"{lt.urn}: IMDSv1 allowed"
        assert md["httpEndpoint"] == "enabled"
        (root,) = lt.inputs["blockDeviceMappings"]
        assert root["ebs"]["volumeType"] == "gp3", f"{lt.urn}: root volume is not gp3"
        assert root["ebs"]["encrypted"] == "true", f"{lt.urn}: root volume not encrypted"
        assert root["ebs"]["volumeSize"] == bp(example).target.root_volume_gib


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_fsx_encrypted_in_the_nodes_subnet(example: str) -> None:
    plan = plan_example(example)
    b = bp(example)
    ids = by_id(plan)
    compute = [s for s in plan.of_type(SUBNET) if s.name.endswith("-compute")]
    assert len(compute) == 1
    assert compute[0].inputs["availabilityZone"] == b.target.availability_zone
    for fs in plan.of_type(FSX):
        assert isinstance(fs.inputs["subnetIds"], str), f"{fs.urn}: subnetIds must be ONE id"
        assert fs.inputs["subnetIds"] == compute[0].id, f"{fs.urn}: not in the compute subnet"
        assert ids[fs.inputs["subnetIds"]].inputs["availabilityZone"] == b.target.availability_zone
        # FSx encrypts every file system at rest; PERSISTENT_* use KMS (aws/fsx unless kms_key_id)
        assert fs.inputs["deploymentType"].startswith("PERSISTENT"), f"{fs.urn}: scratch file system"
    for lt in plan.of_type(LT):
        for nic in lt.inputs["networkInterfaces"]:
            assert nic.get("subnetId", compute[0].id) == compute[0].id, f"{lt.urn}: interface in another subnet"
    for ng in plan.of_type(NODEGROUP):
        assert ng.inputs["subnetIds"] == [compute[0].id], f"{ng.urn}: node group outside the compute subnet"


def test_capacity_block_market_type_reservation_and_no_placement_group() -> None:
    plan = plan_example("aws-p5-capacity-block")
    b = bp("aws-p5-capacity-block")
    assert not plan.of_type(PG), "a capacity block must not get a placement group"
    for lt in plan.of_type(LT):
        assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}, lt.urn
        target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target == {"capacityReservationId": b.target.capacity.reservation_id}, lt.urn
        assert "capacityReservationPreference" not in lt.inputs["capacityReservationSpecification"], lt.urn
        assert "groupName" not in lt.inputs.get("placement", {}), f"{lt.urn}: placement group on a capacity block"


def test_cluster_placement_group_for_on_demand_efa() -> None:
    plan = plan_example("aws-p5-efa-lustre")
    (pg,) = plan.of_type(PG)
    assert pg.inputs["strategy"] == "cluster", pg.urn
    for lt in plan.of_type(LT):
        # auto-named: the mock engine, like Pulumi, names it after the logical name
        assert lt.inputs["placement"]["groupName"] == pg.name, f"{lt.urn}: not in {pg.urn}"
        assert "instanceMarketOptions" not in lt.inputs, f"{lt.urn}: on-demand got market options"


def test_eks_node_groups_use_their_launch_template() -> None:
    plan = plan_example("aws-eks-p4d")
    b = bp("aws-eks-p4d")
    ngs = plan.of_type(NODEGROUP)
    assert len(ngs) == len(b.node_groups)
    ids = by_id(plan)
    for ng in ngs:
        lt = ids[ng.inputs["launchTemplate"]["id"]]
        assert lt.type == LT and lt.parent == ng.parent, f"{ng.urn}: launch template of another group"
        assert ng.inputs["launchTemplate"]["version"] == "1", f"{ng.urn}: launch template version not pinned"
        for forbidden in ("iamInstanceProfile", "instanceType"):  # EKS rejects / takes them from the node group
            assert forbidden not in lt.inputs, f"{lt.urn}: {forbidden} in an EKS launch template"
        assert all("subnetId" not in n for n in lt.inputs["networkInterfaces"]), f"{lt.urn}: subnet in EKS LT"
        group = ng.inputs["tags"][TAG_NODE_GROUP]
        assert ng.inputs["instanceTypes"] == [b.group(group).instance_type]
        assert ng.inputs["scalingConfig"]["desiredSize"] == b.group(group).count
    gpu = next(ng for ng in ngs if ng.inputs["tags"][TAG_NODE_GROUP] == "gpu")
    assert gpu.inputs["labels"]["clusterforge.io/efa"] == "true", "EFA group must carry the device-plugin label"
    assert gpu.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    system = next(ng for ng in ngs if ng.inputs["tags"][TAG_NODE_GROUP] == "system")
    assert "clusterforge.io/efa" not in system.inputs["labels"], "non-EFA group must not get the EFA label"
    system_lt = ids[system.inputs["launchTemplate"]["id"]]
    assert "groupName" not in system_lt.inputs.get("placement", {}), "controller group must stay out of the PG"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_user_data_builds_raid_mounts_lustre_and_writes_nccl_env(example: str) -> None:
    plan = plan_example(example)
    b = bp(example)
    fsx = {fs.inputs["tags"]["Name"]: fs for fs in plan.of_type(FSX)}
    for lt in plan.of_type(LT):
        g = b.group(group_of(lt.name, example))
        text = user_data(lt)
        sent = base64.b64decode(lt.inputs["userData"])  # what EC2 counts: the data before base64 (gzip'd if needed)
        assert len(sent) <= 16 * 1024, f"{lt.urn}: user data over the 16 KB EC2 limit"
        assert "#cloud-config" in text
        if g.local_nvme is not None:
            assert "mdadm --create \"$MD\"" in text and "--level=0" in text, f"{lt.urn}: no RAID0"
            assert "BYID=${BYID:-/dev/disk/by-id}" in text and '"$BYID"/nvme-"${INSTANCE_STORE_MODEL// /_}"_*' in text and (
                "DISCOVERY=instance-store;" in text and "INSTANCE_STORE_MODEL='Amazon EC2 NVMe Instance Storage'" in text), (
                f"{lt.urn}: instance-store drives not discovered by model")
            assert f"MOUNT={g.local_nvme.mount}" in text
        assert not re.search(r"/dev/nvme\d", text), f"{lt.urn}: fixed NVMe device name"
        for s in b.storage:
            fs = fsx[f"{b.name}-{s.name}"]
            # the mock engine's DNS and mount names of that very file system
            mock = plan.outputs["fsx"][s.name]
            assert f"lustre_mount {s.mount} {mock['dnsName']}@tcp:/{mock['mountName']} " in text, (
                f"{lt.urn}: no Lustre mount of {fs.urn}")
        if g.role == "compute":
            assert "/etc/nccl.conf" in text and "NCCL_NET_PLUGIN=ofi" in text, f"{lt.urn}: NCCL settings missing"
            assert "/opt/amazon/ofi-nccl/lib" in text, f"{lt.urn}: OFI plugin not on the linker path"
            assert re.search(r"^ *\*\s+hard\s+memlock\s+unlimited$", text, re.MULTILINE), f"{lt.urn}: memlock not unlimited"


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_every_taggable_resource_is_tagged(example: str) -> None:
    plan = plan_example(example)
    b = bp(example)
    checked = 0
    for r in plan.resources:
        if not r.custom or not r.type.startswith("aws:"):
            continue
        _, mod, cls = r.type.split(":")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            klass = getattr(importlib.import_module(f"pulumi_aws.{mod.split('/')[0]}"), cls)
        if "tags" not in inspect.signature(klass._internal_init).parameters:
            continue
        tags = r.inputs.get("tags") or {}
        assert tags.get(TAG_BLUEPRINT) == b.name, f"{r.urn}: missing {TAG_BLUEPRINT}"
        assert TAG_ROLE in tags and TAG_NODE_GROUP in tags, f"{r.urn}: missing role / node group tags"
        checked += 1
    for res in plan.of_type(LT) + plan.of_type(INSTANCE) + plan.of_type(NODEGROUP):
        group = res.inputs["tags"][TAG_NODE_GROUP]
        assert res.inputs["tags"][TAG_ROLE] == b.group(group).role, f"{res.urn}: wrong role tag"
    for lt in plan.of_type(LT):
        kinds = {t["resourceType"] for t in lt.inputs["tagSpecifications"]}
        assert kinds == {"instance", "volume", "network-interface"}, f"{lt.urn}: launched resources untagged"
    assert checked > 10


@pytest.mark.parametrize("example", ["aws-p5-efa-lustre", "aws-p5-capacity-block"])
def test_ami_from_ssm_and_instances_from_the_launch_template(example: str) -> None:
    plan = plan_example(example)
    b = bp(example)
    ssm = [args for token, args in plan.invokes if token == "aws:ssm/getParameter:getParameter"]
    assert ssm == [{"name": "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"}]
    ids = by_id(plan)
    for g in b.node_groups:
        instances = [i for i in plan.of_type(INSTANCE) if i.inputs["tags"][TAG_NODE_GROUP] == g.name]
        assert len(instances) == g.count
        for i in instances:
            lt = ids[i.inputs["launchTemplate"]["id"]]
            assert lt.inputs["imageId"].startswith("ami-"), f"{lt.urn}: no AMI"
            assert lt.inputs["instanceType"] == g.instance_type
            assert lt.inputs["iamInstanceProfile"]["name"].endswith("-node-iam-profile"), f"{lt.urn}: no SSM profile"
    inventory = plan.outputs["ansibleInventory"]["all"]["children"]
    assert {g.name for g in b.node_groups} == set(inventory)
    assert sorted(plan.outputs["nodePrivateIps"]["gpu"]) == sorted(
        h["ansible_host"] for h in inventory["gpu"]["hosts"].values())


def test_node_role_has_ssm_and_eks_policies() -> None:
    plan = plan_example("aws-eks-p4d")
    arns = {r.inputs["policyArn"] for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    # AmazonEKS_CNI_Policy too, on the VPC CNI's own pod identity role (test_eks_security)
    assert {"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
            "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
            "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
            "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"} <= arns
    (cluster,) = plan.of_type("aws:eks/cluster:Cluster")
    assert cluster.inputs["encryptionConfig"]["resources"] == ["secrets"], cluster.urn
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    subnets = by_id(plan)
    azs = {subnets[s].inputs["availabilityZone"] for s in cluster.inputs["vpcConfig"]["subnetIds"]}
    assert len(azs) == 2, f"{cluster.urn}: EKS needs subnets in two AZs, got {azs}"
    assert plan.outputs["kubeconfig"] == "[secret]", "kubeconfig must be exported as a secret"
