"""``clusterforge:aws:NodeIam``: the node IAM role and instance profile.

Every node can be reached with SSM Session Manager (``AmazonSSMManagedInstanceCore``), so no
SSH ingress is needed; the SSM agent runs on the host, not in a pod, so that policy stays on the node role (on
EKS nodes pods cannot reach the node's credentials: IMDS hop limit 1, catalog ``imds``). EKS node roles add the
policies the node itself needs (https://docs.aws.amazon.com/eks/latest/userguide/create-node-role.html): the
kubelet's ``AmazonEKSWorkerNodePolicy`` and the image pulls' ``AmazonEC2ContainerRegistryReadOnly``; the VPC CNI's
``AmazonEKS_CNI_Policy`` goes to its own service account's role instead (EKS Pod Identity, :mod:`.eks`), as AWS
recommends (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html). Policies are attached as separate
``RolePolicyAttachment`` resources, never inline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.naming import Naming

from ..inventory import EKS_NODE_POLICIES

__all__ = ["EKS_NODE_POLICIES", "SSM_POLICY", "NodeIam", "NodeIamArgs"]

SSM_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
"""Managed policy for SSM Session Manager (https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-instance-permissions.html)."""


def assume_role_policy(service: str) -> str:
    """Trust policy JSON letting ``service`` (e.g. ``ec2.amazonaws.com``) assume the role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })


@dataclass(frozen=True)
class NodeIamArgs:
    """Inputs of :class:`NodeIam`: ``eks`` adds the EKS node policies; ``policy_arns``: further customer-managed
    policies to attach (the Slurm munge key's get / put split, :mod:`.slurm`); ``purpose``: who the role is for
    (its description); ``role_tag``: its ``Name`` tag after the blueprint."""

    naming: Naming
    eks: bool = False
    policy_arns: tuple[pulumi.Input[str], ...] = ()
    purpose: str = "GPU nodes"
    role_tag: str = "node-role"


class NodeIam(pulumi.ComponentResource):
    """Node role and instance profile. Outputs: ``role_name``, ``role_arn``, ``instance_profile_name``."""

    role_name: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    instance_profile_name: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIamArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:NodeIam", name, None, opts)
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        tags = n.tags(role="iam", name=n.name(args.role_tag))
        role = aws.iam.Role(f"{name}-role", assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
                            description=f"clusterforge {n.blueprint}: {args.purpose}", tags=tags, opts=child)
        attachments = [aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=SSM_POLICY, opts=child)]
        if args.eks:
            for arn in EKS_NODE_POLICIES:
                attachments.append(aws.iam.RolePolicyAttachment(
                    f"{name}-{arn.rsplit('/', 1)[1].lower().replace('_', '-')}", role=role.name, policy_arn=arn,
                    opts=child))
        for i, extra in enumerate(args.policy_arns):
            attachments.append(aws.iam.RolePolicyAttachment(f"{name}-policy-{i}", role=role.name, policy_arn=extra,
                                                            opts=child))
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=tags,
                                          opts=pulumi.ResourceOptions(parent=self, depends_on=attachments))
        self.role_name = role.name
        # Node groups must not start before the policies are attached (EKS joins fail otherwise).
        self.role_arn = pulumi.Output.all(role.arn, *[a.id for a in attachments]).apply(lambda xs: str(xs[0]))
        self.instance_profile_name = profile.name
        self.register_outputs({"roleArn": self.role_arn, "instanceProfileName": self.instance_profile_name})
