"""From the resolved cluster to the plain values the AWS components take.

The components in :mod:`stacks.components` know nothing of the blueprint models: each takes a
frozen ``…Args`` dataclass of plain values (strings, numbers, ``NodeSettings``, catalog entries,
Pulumi outputs of other components). This module is the one place that reads the blueprint and
its resolved cluster (:class:`blueprints.resolved.ResolvedCluster`) for them; the program
(``stacks/__main__.py``) only wires the components' outputs together. Defaults come from the
blueprint models: an ``…Args`` field has no default of its own where the blueprint has a setting.

Every function is pure (no Pulumi resource is created here) and raises :class:`NotAwsBlueprint`
for a blueprint of another ``target.provider``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from blueprints.aws import capacity_for, reserved_groups
from blueprints.models import (
    AwsTarget,
    Blueprint,
    Capacity,
    EfaNetwork,
    KubernetesOrchestrator,
    LustreStorage,
    ReservationCapacity,
    SpotCapacity,
)
from blueprints.naming import Naming
from blueprints.resolved import ResolvedCluster, ResolvedGroup, resolve
from blueprints.slurm import SlurmSettings, aws_dns_zone

from .components import (
    AddonsArgs,
    EksAttachment,
    FsxVolume,
    LustreFileSystemArgs,
    NetworkArgs,
    NodeGroupArgs,
    PlacementDecision,
    SandboxClass,
    decide_placement,
)
from .components.lustre import FsxS3Link
from .components.nodes import Purchase, SlurmGroupArgs
from .components.slurm import SlurmClusterArgs
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


class NotAwsBlueprint(ValueError):
    """The blueprint's ``target.provider`` is not ``aws``: the Pulumi program cannot deploy it."""


def aws_target(bp: Blueprint) -> AwsTarget:
    """``bp.target`` as the AWS target settings; raises :class:`NotAwsBlueprint` for another provider."""
    target = bp.target
    if not isinstance(target, AwsTarget):
        raise NotAwsBlueprint(f"blueprint `{bp.name}` targets `{target.provider}`; Pulumi deploys AWS blueprints "
                              "only — run `clusterforge up` (Ansible) for on-prem hosts")
    return target


def kubernetes(bp: Blueprint) -> KubernetesOrchestrator | None:
    """The EKS orchestrator settings, or ``None`` for EC2 instances."""
    return bp.orchestrator if isinstance(bp.orchestrator, KubernetesOrchestrator) else None


def fsx_storage(bp: Blueprint) -> list[LustreStorage]:
    """The Lustre storage entries the stack creates as FSx for Lustre file systems (``fsx`` set), in blueprint order."""
    return [s for s in bp.storage if isinstance(s, LustreStorage) and s.fsx is not None]


def network_args(bp: Blueprint, naming: Naming) -> NetworkArgs:
    """:class:`NetworkArgs` from ``target.vpc``, ``target.ssh_ingress_cidrs``, the node groups'
    ``public_ip``, the FSx storage and the orchestrator."""
    target = aws_target(bp)
    vpc = target.vpc
    return NetworkArgs(
        naming=naming, availability_zone=target.availability_zone, cidr_block=vpc.cidr_block,
        subnet_cidr_block=vpc.subnet_cidr_block, public_subnet_cidr_block=vpc.public_subnet_cidr_block,
        control_plane_subnet_cidr_block=vpc.control_plane_subnet_cidr_block, vpc_id=vpc.vpc_id,
        subnet_id=vpc.subnet_id, control_plane_subnet_ids=tuple(vpc.control_plane_subnet_ids),
        nat_gateway=vpc.nat_gateway, public_subnet_for_nodes=any(g.public_ip for g in bp.node_groups),
        ssh_ingress_cidrs=tuple(target.ssh_ingress_cidrs), lustre=bool(fsx_storage(bp)),
        eks=kubernetes(bp) is not None,
    )


def placement_decision(bp: Blueprint) -> PlacementDecision:
    """:func:`decide_placement` of ``network.placement`` and ``target.capacity``."""
    cap = aws_target(bp).capacity
    existing = cap.placement_group if isinstance(cap, ReservationCapacity) else None
    return decide_placement(bp.network.placement, cap.type, existing)


def reserved_group_names(bp: Blueprint) -> frozenset[str]:
    """Names of the node groups a targeted reservation or Capacity Block is for (:func:`blueprints.aws.reserved_groups`)."""
    return frozenset(g.name for g in reserved_groups(bp))


def purchase(capacity: Capacity) -> Purchase:
    """The plain :class:`Purchase` of a blueprint capacity model."""
    return Purchase(type=capacity.type,
                    max_price=capacity.max_price if isinstance(capacity, SpotCapacity) else None,
                    reservation_id=getattr(capacity, "reservation_id", None))


def lustre_args(storage: LustreStorage, naming: Naming, *, subnet_id: pulumi.Input[str],
                security_group_id: pulumi.Input[str], depends_on: Sequence[pulumi.Resource]) -> LustreFileSystemArgs:
    """:class:`LustreFileSystemArgs` of one FSx storage entry (``storage.fsx`` must be set: :func:`fsx_storage`)."""
    f = storage.fsx
    if f is None:
        raise ValueError(f"storage `{storage.name}` has no `fsx` settings: the stack creates no file system for it")
    s3 = f.s3
    return LustreFileSystemArgs(
        naming=naming, storage_name=storage.name, deployment_type=f.deployment_type,
        storage_capacity_gib=f.storage_capacity_gib, storage_type=f.storage_type,
        throughput_per_tib_mbps=f.throughput_per_tib_mbps, drive_cache_type=f.drive_cache_type,
        data_compression_type=f.data_compression_type, file_system_type_version=f.file_system_type_version,
        metadata_mode=f.metadata.mode if f.metadata is not None else None,
        metadata_iops=f.metadata.iops if f.metadata is not None else None,
        efa_enabled=f.efa_enabled, kms_key_id=f.kms_key_id,
        automatic_backup_retention_days=f.backup_retention_days, final_backup=f.final_backup,
        s3=FsxS3Link(data_repository_path=s3.data_repository_path, file_system_path=s3.file_system_path,
                     auto_import=s3.auto_import, auto_export=s3.auto_export) if s3 is not None else None,
        subnet_id=subnet_id, security_group_id=security_group_id, depends_on=depends_on,
    )


def node_group_args(bp: Blueprint, r: ResolvedGroup, naming: Naming, *, subnet_id: pulumi.Input[str],
                    security_group_ids: Sequence[pulumi.Input[str]], placement_group: pulumi.Input[str] | None,
                    instance_profile_name: pulumi.Input[str], node_role_arn: pulumi.Input[str],
                    lustre: Mapping[str, tuple[pulumi.Output[str], pulumi.Output[str]]],
                    eks: EksAttachment | None, slurm: SlurmGroupArgs | None = None,
                    recorded_image: str | None = None) -> NodeGroupArgs:
    """:class:`NodeGroupArgs` of resolved group ``r``: its node group's values, resolved settings and
    catalog entry, the group's own purchase (:func:`blueprints.aws.capacity_for`), ``network.efa.interfaces``
    and the target's AMI, root volume and key pair; the keyword arguments are other components' outputs
    (``slurm``: :func:`slurm_group_args`). The AMI: ``target.ami_id``, else ``recorded_image`` (the one
    the group was deployed with), else ``None`` (the stack reads the SSM parameter)."""
    target = aws_target(bp)
    g = r.group
    if g.instance_type is None:
        raise ValueError(f"node group `{g.name}` has no instance_type (an AWS node group needs one)")
    efa = bp.network if isinstance(bp.network, EfaNetwork) else None
    return NodeGroupArgs(
        naming=naming, group_name=g.name, role=g.role, instance_type=g.instance_type, count=int(g.count or 0),
        public_ip=g.public_ip, labels=dict(g.labels), settings=r.settings, instance=r.hardware.instance,
        efa_interfaces=efa.efa.interfaces if efa else 0, purchase=purchase(capacity_for(bp, g)),
        availability_zone=target.availability_zone, subnet_id=subnet_id, security_group_ids=security_group_ids,
        placement_group=placement_group, instance_profile_name=instance_profile_name, node_role_arn=node_role_arn,
        ami_id=target.ami_id or recorded_image, root_volume_gib=target.root_volume_gib, key_name=target.key_name, lustre=lustre, eks=eks,
        slurm=slurm,
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
    sandboxes = {
        (s.runtime_class or "", s.runtime): s for s in (ns.sandbox for ns in settings.values())
        if s.runtime in ("kata", "gvisor") and s.runtime_class
    }
    return AddonsArgs(
        naming=naming, namespace=k8s.namespace, gpu_operator_version=k8s.gpu_operator_version,
        efa_device_plugin_version=k8s.efa_device_plugin_version, mpi_operator_version=k8s.mpi_operator_version,
        gpu=any(s.gpu_count for s in settings.values()),
        efa_instance_types=list(efa_instance_types),
        sandbox_workloads=any(s.passthrough_host for s in settings.values()),
        # the handler is the containerd runtime the nodes' user data registers (kata / gvisor: never None)
        sandboxes=[SandboxClass(name=name, handler=sandboxes[name, rt].runtime_handler or name, runtime=rt)
                   for (name, rt) in sorted(sandboxes)],
        fsx=list(fsx),
        depends_on=list(depends_on),
    )
