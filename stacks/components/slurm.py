"""``clusterforge:aws:SlurmCluster``: what a Slurm cluster on EC2 shares beyond the network.

* a **Route 53 private hosted zone** for the cluster's VPC, named at render time
  (:func:`blueprints.slurm.aws_dns_zone`); each node group adds one A record per instance from its private IP
  (:mod:`.nodes`). slurm.conf names hosts ``NodeAddr=<name>.<zone>`` and ``SlurmctldHost=<ctl>(<ctl>.<zone>)``, so no
  user data depends on another instance's IP (no cycle between instances);
* the **munge key secret** (Secrets Manager, encrypted with the account's AWS managed key ``aws/secretsmanager``):
  the stack creates it *without a value*; the controller generates the key at first boot and stores it
  (``PutSecretValue``), the other nodes read it. The key is never in Pulumi state, user data, tags or logs;
* **IAM policies**, the put/get split: the controller's may ``GetSecretValue`` and ``PutSecretValue`` on that one
  secret, the other nodes' only ``GetSecretValue``; both may read the node file bundles (``s3:GetObject`` under
  ``slurm/`` of the cluster's bucket), nothing else;
* the **node file bundles** (:func:`stacks.slurm_boot.slurm_bundle`): one object per Slurm node group in a private
  bucket (public access blocked, SSE-S3 encryption, owner-enforced objects), because the Slurm files do not fit
  EC2's 16 KB of user data next to the rest; the user data pins each bundle's SHA-256;
* the controller's **state volume**: an encrypted gp3 EBS volume in the nodes' availability zone, its own resource
  (replacing the controller instance keeps it; a final snapshot is taken if the stack is destroyed), mounted on
  ``/var/spool/slurmctld`` and MariaDB's data directory, so a new controller finds the jobs and the accounting.

Sources: private hosted zones https://docs.aws.amazon.com/Route53/latest/DeveloperGuide/hosted-zones-private.html ;
Secrets Manager permissions https://docs.aws.amazon.com/secretsmanager/latest/userguide/auth-and-access_iam-policies.html ;
S3 public access block https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-control-block-public-access.html .
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.naming import Naming

from ..inventory import STATE_VOLUME_GIB
from ..slurm_boot import bundle_key

__all__ = ["STATE_VOLUME_GIB", "SlurmCluster", "SlurmClusterArgs", "controller_policy", "node_policy"]

@dataclass(frozen=True)
class SlurmClusterArgs:
    """Inputs of :class:`SlurmCluster`: ``zone_name`` (:func:`blueprints.slurm.aws_dns_zone`), the ``vpc_id`` the zone
    serves, the ``availability_zone`` of the nodes (the state volume's), ``bundles``: node group -> bundle text
    (:func:`stacks.slurm_boot.slurm_bundle`), ``controller_group``."""

    naming: Naming
    zone_name: str
    vpc_id: pulumi.Input[str]
    availability_zone: str
    region: str
    bundles: Mapping[str, str]
    controller_group: str


def _secret_statement(secret_arn: str, actions: list[str]) -> dict[str, object]:
    return {"Sid": "MungeKey", "Effect": "Allow", "Action": actions, "Resource": secret_arn}


def _bundle_statement(bucket_arn: str) -> dict[str, object]:
    return {"Sid": "NodeFiles", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": f"{bucket_arn}/slurm/*"}


def controller_policy(secret_arn: str, bucket_arn: str) -> str:
    """The controller's policy document: get and put the munge key secret, read the bundles."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        _secret_statement(secret_arn, ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"]),
        _bundle_statement(bucket_arn)]})


def node_policy(secret_arn: str, bucket_arn: str) -> str:
    """Every other node's policy document: get the munge key secret, read the bundles."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        _secret_statement(secret_arn, ["secretsmanager:GetSecretValue"]), _bundle_statement(bucket_arn)]})


class SlurmCluster(pulumi.ComponentResource):
    """The shared Slurm resources (module docstring). Outputs: ``zone_id``, ``zone_name``, ``munge_secret_arn``,
    ``controller_policy_arn``, ``node_policy_arn``, ``state_volume_id``, ``bundle_urls`` (group -> URL) and
    ``bundle_objects`` (group -> the object resource, for instances to depend on)."""

    zone_id: pulumi.Output[str]
    zone_name: str
    munge_secret_arn: pulumi.Output[str]
    controller_policy_arn: pulumi.Output[str]
    node_policy_arn: pulumi.Output[str]
    state_volume_id: pulumi.Output[str]
    bundle_urls: dict[str, pulumi.Output[str]]
    bundle_objects: dict[str, pulumi.Resource]

    def __init__(self, name: str, args: SlurmClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:SlurmCluster", name, None, opts)
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        tags = n.tags(role="slurm", name=n.name("slurm"))
        zone = aws.route53.Zone(
            f"{name}-zone", name=args.zone_name, comment=f"clusterforge {n.blueprint}: Slurm node names",
            vpcs=[aws.route53.ZoneVpcArgs(vpc_id=args.vpc_id)], force_destroy=True, tags=tags, opts=child)
        self.zone_id = zone.id  # the zone's id is its Route 53 hosted zone id
        self.zone_name = args.zone_name
        # No SecretVersion: the value is made and stored on the controller, never by the stack.
        secret = aws.secretsmanager.Secret(
            f"{name}-munge-key", description=f"clusterforge {n.blueprint}: the Slurm cluster's munge key (set by the "
            "controller at its first boot)", recovery_window_in_days=7, tags=tags, opts=child)
        self.munge_secret_arn = secret.arn

        bucket = aws.s3.Bucket(f"{name}-files", force_destroy=True, tags=tags, opts=child)
        block = aws.s3.BucketPublicAccessBlock(
            f"{name}-files-private", bucket=bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        aws.s3.BucketOwnershipControls(
            f"{name}-files-owner", bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-files-encryption", bucket=bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"))], opts=child)
        self.bundle_urls = {}
        self.bundle_objects = {}
        for group, text in sorted(args.bundles.items()):
            key = bundle_key(group)
            obj = aws.s3.BucketObjectv2(
                f"{name}-files-{group}", bucket=bucket.id, key=key, content=text, content_type="application/json",
                server_side_encryption="AES256", tags=n.tags(role="slurm", group=group, name=n.name("slurm", group)),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[block]))
            self.bundle_objects[group] = obj
            # a bucket's id is its name
            self.bundle_urls[group] = pulumi.Output.concat("https://", bucket.id, f".s3.{args.region}.amazonaws.com/{key}")

        both = pulumi.Output.all(secret.arn, bucket.arn)
        ctl_policy = aws.iam.Policy(
            f"{name}-controller-policy", description=f"clusterforge {n.blueprint}: Slurm controller (munge key "
            "get and put, node files)", policy=both.apply(lambda xs: controller_policy(xs[0], xs[1])), tags=tags,
            opts=child)
        node_pol = aws.iam.Policy(
            f"{name}-node-policy", description=f"clusterforge {n.blueprint}: Slurm nodes (munge key get, node files)",
            policy=both.apply(lambda xs: node_policy(xs[0], xs[1])), tags=tags, opts=child)
        self.controller_policy_arn = ctl_policy.arn
        self.node_policy_arn = node_pol.arn

        volume = aws.ebs.Volume(
            f"{name}-controller-state", availability_zone=args.availability_zone, size=STATE_VOLUME_GIB, type="gp3",
            encrypted=True, final_snapshot=True,
            tags=n.tags(role="controller", group=args.controller_group, name=n.name(args.controller_group, "state")),
            opts=child)
        self.state_volume_id = volume.id
        self.register_outputs({"zoneId": zone.id, "mungeSecretArn": secret.arn, "stateVolumeId": volume.id})
