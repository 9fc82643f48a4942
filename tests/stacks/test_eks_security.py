"""Secure EKS defaults, read from the plan (mock engine): the API endpoint is private unless the
blueprint lists CIDRs for it (never the SSH list), pods cannot reach the node role's
credentials through the instance metadata service, and the VPC CNI's permissions are not on the node role."""

from __future__ import annotations

import json

import pytest

from tests.stacks.conftest import LT, plan_example

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

CLUSTER = "aws:eks/cluster:Cluster"


def test_api_endpoint_is_private_by_default() -> None:
    (cluster,) = plan_example("aws-eks-p4d").of_type(CLUSTER)
    vpc = cluster.inputs["vpcConfig"]
    # With public access on and no CIDRs EKS opens the endpoint to 0.0.0.0/0
    # (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html): it must be off.
    assert vpc["endpointPublicAccess"] is False and vpc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in vpc


def test_declared_api_cidrs_are_the_only_public_access_and_not_the_ssh_list(plan_variant) -> None:
    plan = plan_variant("aws-eks-p4d", {"target": {"ssh_ingress_cidrs": ["192.0.2.0/24"]},
                                        "orchestrator": {"api_access_cidrs": ["198.51.100.0/24"]}})
    (cluster,) = plan.of_type(CLUSTER)
    vpc = cluster.inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True
    assert vpc["publicAccessCidrs"] == ["198.51.100.0/24"]


def test_pods_cannot_reach_node_credentials_through_imds() -> None:
    # EKS best practices: hop limit 1 on nodes from launch templates, so a pod (one more hop) gets no
    # answer from IMDS (https://docs.aws.amazon.com/eks/latest/best-practices/identity-and-access-management.html)
    eks_lts = plan_example("aws-eks-p4d").of_type(LT)
    assert eks_lts and {lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] for lt in eks_lts} == {1}
    assert {lt.inputs["metadataOptions"]["httpTokens"] for lt in eks_lts} == {"required"}
    # EC2 nodes keep 2: a container on a bridge network is one hop away
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html)
    ec2_lts = plan_example("aws-p5-efa-lustre").of_type(LT)
    assert {lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] for lt in ec2_lts} == {2}


def test_control_plane_subnet_is_never_in_a_local_zone() -> None:
    """With Local Zones enabled, the zone list includes them (pulumi_aws get_availability_zones docstring) and
    a name such as us-east-1-bos-1a sorts before us-east-1b; the EKS control plane cannot run there
    (https://docs.aws.amazon.com/eks/latest/userguide/local-zones.html). The mock engine answers like an
    account with one Local Zone enabled."""
    plan = plan_example("aws-eks-p4d")
    zones_calls = [a for t, a in plan.invokes if t == "aws:index/getAvailabilityZones:getAvailabilityZones"]
    assert zones_calls and all({"name": "opt-in-status", "values": ["opt-in-not-required"]} in a["filters"]
                               for a in zones_calls)
    (cluster,) = plan.of_type(CLUSTER)
    subnets = {r.id: r for r in plan.of_type("aws:ec2/subnet:Subnet")}
    azs = sorted(subnets[s].inputs["availabilityZone"] for s in cluster.inputs["vpcConfig"]["subnetIds"])
    assert azs == ["us-west-2a", "us-west-2b"]  # the example is in us-west-2a; never us-west-2-bos-1a


ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"


def test_the_vpc_cni_permissions_are_on_its_own_service_account_not_the_node_role() -> None:
    """AWS recommends the VPC CNI's AmazonEKS_CNI_Policy on a role of the aws-node service account rather than the node
    role (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html; the plugin supports EKS Pod Identity,
    https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html): the node role keeps only what the node
    itself uses (kubelet, image pulls, the SSM agent on the host); a pod identity role, trusted by
    pods.eks.amazonaws.com, holds the CNI policy and is associated with kube-system/aws-node."""
    plan = plan_example("aws-eks-p4d")
    roles = {r.name: r for r in plan.of_type("aws:iam/role:Role")}
    by_role: dict[str, set[str]] = {}
    ids = {r.id: r.name for r in plan.resources if r.id}
    for a in plan.of_type(ATTACH):
        by_role.setdefault(ids.get(a.inputs["role"], a.inputs["role"]), set()).add(a.inputs["policyArn"])
    node_policies = next(p for r, p in by_role.items() if r.endswith("node-iam-role"))
    assert node_policies == {"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
                             "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                             "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"}
    cni_roles = [r for r, p in by_role.items() if CNI_POLICY in p]
    assert len(cni_roles) == 1 and cni_roles[0].endswith("vpc-cni-role")
    trust = json.loads(roles[cni_roles[0]].inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                                   "Action": ["sts:AssumeRole", "sts:TagSession"]}]
    (assoc,) = plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("kube-system", "aws-node")
    role_arn = next(r for r in plan.of_type("aws:iam/role:Role") if r.name == cni_roles[0])
    assert assoc.inputs["roleArn"] == f"arn:aws:iam::123456789012:role/{role_arn.name}"
    (agent,) = plan.of_type("aws:eks/addon:Addon")
    assert agent.inputs["addonName"] == "eks-pod-identity-agent"
    # no aws-node pod may start before the association gives it the role: every node group depends on it
    for ng in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        assert assoc.urn in ng.depends_on and agent.urn in ng.depends_on, ng.name
