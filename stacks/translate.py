"""From the resolved cluster and the stack's inventory to the ``…Args`` the AWS components take.

The components in :mod:`stacks.components` know nothing of the blueprint models: each takes a
frozen ``…Args`` dataclass of plain values (strings, numbers, ``NodeSettings``, catalog entries,
the inventory's specs, Pulumi outputs of other components). What the stack creates is decided once, in
:mod:`stacks.inventory` (the same inventory ``clusterforge cost`` prices); this module adds what the
components need beyond it (settings, catalog entries, the target's AMI and key pair) and wires other
components' outputs in; the program (``stacks/__main__.py``) only wires the components' outputs together.
Defaults come from the blueprint models: an ``…Args`` field has no default of its own where the blueprint has
a setting.

Every function is pure (no Pulumi resource is created here) and raises :class:`NotAwsBlueprint`
for a blueprint of another ``target.provider``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from blueprints.models import Blueprint
from blueprints.naming import Naming
from blueprints.resolved import ResolvedCluster, ResolvedGroup, resolve
from blueprints.slurm import SlurmSettings, aws_dns_zone

from .components import (
    AddonsArgs,
    EksAttachment,
    FsxVolume,
    LustreFileSystemArgs,
    NodeGroupArgs,
    SandboxClass,
)
from .components.nodes import SlurmGroupArgs
from .components.slurm import SlurmClusterArgs
from .inventory import (
    FileSystemSpec,
    NodeGroupSpec,
    NotAwsBlueprint,
    aws_target,
    fsx_storage,
    kubernetes,
    network_args,
    placement_decision,
    purchase,
    reserved_group_names,
    sandbox_classes,
)
from .slurm_boot import slurm_bundle

__all__ = [
    "NotAwsBlueprint",
    "addons_args",
    "aws_target",
    "fsx_storage",
    "kubernetes",
    "lustre_args",
    "network_args",
    "node_group_args",
    "placement_decision",
    "purchase",
    "reserved_group_names",
    "slurm",
    "slurm_cluster_args",
    "slurm_group_args",
]


def lustre_args(spec: FileSystemSpec, naming: Naming, *, subnet_id: pulumi.Input[str],
                security_group_id: pulumi.Input[str], depends_on: Sequence[pulumi.Resource]) -> LustreFileSystemArgs:
    """:class:`LustreFileSystemArgs` of one file system of the inventory, wired to the subnet, its security group
    and the rules it must wait for."""
    return LustreFileSystemArgs(naming=naming, spec=spec, subnet_id=subnet_id, security_group_id=security_group_id,
                                depends_on=depends_on)


def node_group_args(bp: Blueprint, r: ResolvedGroup, spec: NodeGroupSpec, naming: Naming, *,
                    subnet_id: pulumi.Input[str], security_group_ids: Sequence[pulumi.Input[str]],
                    placement_group: pulumi.Input[str] | None, instance_profile_name: pulumi.Input[str],
                    node_role_arn: pulumi.Input[str],
                    lustre: Mapping[str, tuple[pulumi.Output[str], pulumi.Output[str]]],
                    eks: EksAttachment | None, slurm: SlurmGroupArgs | None = None,
                    recorded_image: str | None = None, status_path: str | None = None) -> NodeGroupArgs:
    """:class:`NodeGroupArgs` of resolved group ``r`` and its inventory ``spec`` (instance type, count, purchase,
    root volume, NIC layout): its node group's labels and public IP, resolved settings and catalog entry, the
    target's AMI and key pair; the keyword arguments are other components' outputs (``slurm``:
    :func:`slurm_group_args`; ``status_path``: where EC2 nodes write their status records). The AMI:
    ``target.ami_id``, else ``recorded_image`` (the one the group was deployed with), else ``None`` (the stack reads
    the SSM parameter)."""
    target = aws_target(bp)
    g = r.group
    return NodeGroupArgs(
        naming=naming, spec=spec, public_ip=g.public_ip, labels=dict(g.labels), settings=r.settings,
        instance=r.hardware.instance, availability_zone=target.availability_zone, subnet_id=subnet_id,
        security_group_ids=security_group_ids, placement_group=placement_group,
        instance_profile_name=instance_profile_name, node_role_arn=node_role_arn,
        ami_id=target.ami_id or recorded_image, key_name=target.key_name, lustre=lustre, eks=eks, slurm=slurm,
        status_path=status_path,
    )


def slurm(bp: Blueprint) -> SlurmSettings | None:
    """The cluster's Slurm settings (the resolved cluster's, :attr:`blueprints.resolved.ResolvedCluster.slurm`), ``None``
    without ``orchestrator: slurm``."""
    aws_target(bp)
    return resolve(bp).slurm


def slurm_cluster_args(bp: Blueprint, cluster: ResolvedCluster, naming: Naming, *,
                       vpc_id: pulumi.Input[str]) -> SlurmClusterArgs:
    """:class:`SlurmClusterArgs` of a Slurm blueprint: the private zone's name, the nodes' availability zone and
    region, each Slurm node group's file bundle and the controller group. Raises ``ValueError`` for a blueprint
    without Slurm or without a controller group (``check`` reports both first)."""
    s = slurm(bp)
    if s is None or s.controller_group is None:
        raise ValueError(f"blueprint `{bp.name}` has no Slurm controller group")
    target = aws_target(bp)
    bundles = {r.name: text for r in cluster.groups if (text := slurm_bundle(r.settings)) is not None}
    return SlurmClusterArgs(naming=naming, zone_name=aws_dns_zone(bp.name), vpc_id=vpc_id,
                            availability_zone=target.availability_zone, region=target.region, bundles=bundles,
                            controller_group=s.controller_group)


def slurm_group_args(bp: Blueprint, r: ResolvedGroup, *, zone_id: pulumi.Input[str],
                     munge_secret_arn: pulumi.Input[str], bundle_urls: Mapping[str, pulumi.Input[str]],
                     bundles: Mapping[str, pulumi.Resource],
                     state_volume_id: pulumi.Input[str]) -> SlurmGroupArgs | None:
    """:class:`SlurmGroupArgs` of resolved group ``r``, ``None`` for a group without a part in the Slurm cluster.
    Node names: a compute group's are slurm.conf's ``NodeName`` lines (:func:`blueprints.slurm.slurm_settings`); the
    controller group's first host is ``SlurmctldHost`` (``<group>-0``), login hosts are ``<group>-<i>`` the same way.
    The keyword arguments are :class:`stacks.components.slurm.SlurmCluster`'s outputs."""
    s = slurm(bp)
    if s is None or r.settings.slurm is None:
        return None
    count = int(r.group.count or 0)
    names = [n.name for n in s.group_nodes(r.name)] if r.group.compute else [f"{r.name}-{i}" for i in range(count)]
    return SlurmGroupArgs(node_names=tuple(names), zone_id=zone_id, zone_name=aws_dns_zone(bp.name),
                          munge_secret_arn=munge_secret_arn, bundle_url=bundle_urls[r.name], bundle=bundles[r.name],
                          state_volume_id=state_volume_id if r.name == s.controller_group else None)


def addons_args(bp: Blueprint, cluster: ResolvedCluster, naming: Naming, *, efa_instance_types: Sequence[str],
                fsx: Sequence[FsxVolume], depends_on: Sequence[pulumi.Resource]) -> AddonsArgs:
    """:class:`AddonsArgs` for an EKS blueprint: operator versions from the orchestrator, whether any
    node has GPUs or is a passthrough host, and one RuntimeClass per (``runtime_class``, runtime)
    of the Kata / gVisor sandboxes, whose handler is the containerd runtime the nodes' user data
    registers. ``efa_instance_types``: instance types of the node groups with EFA interfaces;
    ``fsx``: the FSx volumes. Raises ``ValueError`` for a blueprint without Kubernetes."""
    k8s = kubernetes(bp)
    if k8s is None:
        raise ValueError(f"blueprint `{bp.name}` has no Kubernetes orchestrator: no add-ons to install")
    settings = cluster.node_settings
    return AddonsArgs(
        naming=naming, namespace=k8s.namespace, gpu_operator_version=k8s.gpu_operator_version,
        efa_device_plugin_version=k8s.efa_device_plugin_version, mpi_operator_version=k8s.mpi_operator_version,
        gpu=any(s.gpu_count for s in settings.values()),
        efa_instance_types=list(efa_instance_types),
        sandbox_workloads=any(s.passthrough_host for s in settings.values()),
        sandboxes=[SandboxClass(name, handler, runtime) for name, handler, runtime in sandbox_classes(cluster)],
        fsx=list(fsx),
        depends_on=list(depends_on),
    )
