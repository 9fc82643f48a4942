"""``clusterforge:aws:EksCluster``: the EKS control plane, its IAM role, and a kubeconfig.

* control plane in the compute subnet plus one control-plane subnet in a second AZ (EKS needs two);
* API authentication mode ``API`` with admin access for the identity that creates the cluster;
* Kubernetes secrets envelope-encrypted with a KMS key of the stack (key rotation on);
* API server, audit and authenticator logs to CloudWatch;
* the private endpoint on; the public endpoint only when ``orchestrator.api_access_cidrs`` lists
  CIDRs, and then only for them (never the SSH list; with an empty list EKS would open it to
  0.0.0.0/0: the ``public_access_cidrs`` default in pulumi_aws ``ClusterVpcConfigArgs``). Private
  by default: Pulumi, which installs the Kubernetes add-ons, then runs inside the VPC
  (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html).

The VPC CNI's network-interface permissions (``AmazonEKS_CNI_Policy``) are not on the node role, where every
pod that reaches the node's credentials would hold them, but on a role of their own that only the CNI's service
account (``kube-system/aws-node``) gets, through EKS Pod Identity: the ``eks-pod-identity-agent`` add-on and a
pod identity association (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html,
https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html, EKS best practices:
https://docs.aws.amazon.com/eks/latest/best-practices/identity-and-access-management.html). The cluster name the
node groups join by (``cluster_name``) resolves only once both exist, so no ``aws-node`` pod is created before the
association that gives it the role.

The kubeconfig authenticates with ``aws eks get-token`` (no static credential is written) and is
exported as a secret. Managed node groups are created by :mod:`.nodes` (one launch template
each). Sources: https://docs.aws.amazon.com/eks/latest/userguide/create-cluster.html ,
https://docs.aws.amazon.com/eks/latest/userguide/create-kubeconfig.html .
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.naming import Naming

from .iam import assume_role_policy

__all__ = ["CLUSTER_POLICY", "CNI_POLICY", "CNI_SERVICE_ACCOUNT", "POD_IDENTITY_AGENT", "EksCluster", "EksClusterArgs",
           "kubeconfig_json", "pod_identity_trust_policy"]

CLUSTER_POLICY = "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
"""The VPC CNI's permissions for an IPv4 cluster (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html)."""
CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
"""Namespace and service account the VPC CNI runs as (same page)."""
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
"""The EKS add-on that hands pods their pod identity credentials
(https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html)."""


def pod_identity_trust_policy() -> str:
    """Trust policy JSON of a role for EKS Pod Identity: the ``pods.eks.amazonaws.com`` service principal may
    assume it and tag the session (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                       "Action": ["sts:AssumeRole", "sts:TagSession"]}],
    })


def kubeconfig_json(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig (JSON text) for ``cluster_name`` that gets tokens from ``aws eks get-token``."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
            "interactiveMode": "Never",
        }}}],
    }, indent=2)


@dataclass(frozen=True)
class EksClusterArgs:
    """Inputs of :class:`EksCluster`: Kubernetes ``version`` (``1.31``), control-plane
    ``subnet_ids`` (two AZs), ``region``, ``public_access_cidrs`` (empty = no public endpoint)."""

    naming: Naming
    version: str
    subnet_ids: Sequence[pulumi.Input[str]]
    region: str
    public_access_cidrs: Sequence[str] = ()


class EksCluster(pulumi.ComponentResource):
    """The EKS cluster. Outputs: ``cluster_name`` (resolves once the VPC CNI's pod identity exists),
    ``endpoint``, ``cluster_security_group_id``, ``kubeconfig`` (secret JSON text)."""

    cluster_name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:EksCluster", name, None, opts)
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        tags = n.tags(role="control-plane", name=n.name("eks"))
        role = aws.iam.Role(f"{name}-role", assume_role_policy=assume_role_policy("eks.amazonaws.com"),
                            description=f"clusterforge {n.blueprint}: EKS control plane", tags=tags, opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-cluster-policy", role=role.name, policy_arn=CLUSTER_POLICY,
                                              opts=child)
        key = aws.kms.Key(f"{name}-secrets-key", description=f"clusterforge {n.blueprint}: EKS secrets encryption",
                          enable_key_rotation=True, deletion_window_in_days=7, tags=tags, opts=child)
        cluster = aws.eks.Cluster(
            f"{name}-cluster",
            name=n.blueprint,
            role_arn=role.arn,
            version=args.version,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                endpoint_private_access=True,
                endpoint_public_access=bool(args.public_access_cidrs),
                public_access_cidrs=list(args.public_access_cidrs) or None,
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(authentication_mode="API",
                                                          bootstrap_cluster_creator_admin_permissions=True),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn)),
            enabled_cluster_log_types=["api", "audit", "authenticator"],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach]),
        )
        # the VPC CNI's permissions: a role only its service account gets (EKS Pod Identity), not the node role
        agent = aws.eks.Addon(f"{name}-pod-identity-agent", cluster_name=cluster.name, addon_name=POD_IDENTITY_AGENT,
                              tags=tags, opts=child)
        cni_role = aws.iam.Role(f"{name}-vpc-cni-role", assume_role_policy=pod_identity_trust_policy(),
                                description=f"clusterforge {n.blueprint}: VPC CNI (kube-system/aws-node)", tags=tags,
                                opts=child)
        cni_policy = aws.iam.RolePolicyAttachment(f"{name}-vpc-cni-policy", role=cni_role.name, policy_arn=CNI_POLICY,
                                                  opts=child)
        namespace, account = CNI_SERVICE_ACCOUNT
        cni = aws.eks.PodIdentityAssociation(f"{name}-vpc-cni", cluster_name=cluster.name, namespace=namespace,
                                             service_account=account, role_arn=cni_role.arn, tags=tags,
                                             opts=pulumi.ResourceOptions(parent=self, depends_on=[cni_policy]))
        # node groups join by this name: it resolves once the CNI's identity is in place
        self.cluster_name = pulumi.Output.all(cluster.name, cni.id, agent.id).apply(lambda xs: str(xs[0]))
        self.endpoint = cluster.endpoint
        self.cluster_security_group_id = cluster.vpc_config.apply(lambda v: str(v.cluster_security_group_id))
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            cluster.name, cluster.endpoint, cluster.certificate_authority.apply(lambda c: str(c.data)),
        ).apply(lambda xs: kubeconfig_json(str(xs[0]), str(xs[1]), str(xs[2]), args.region)))
        self.register_outputs({"clusterName": self.cluster_name, "endpoint": self.endpoint,
                               "kubeconfig": self.kubeconfig})
