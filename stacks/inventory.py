"""What the AWS stack creates, as plain data: the one inventory the Pulumi components and ``clusterforge cost`` share.

:func:`inventory` reads a blueprint and its resolved cluster once and decides everything that sets *what* the
stack registers and what each of those resources costs: the network's optional parts (a new VPC or an existing
subnet, the public subnet, the NAT gateway, the EKS control-plane subnet), the placement group, every node
group's instance type, instance count, purchase option, root volume, NIC layout and instance names, every FSx
for Lustre file system's deployment type, storage, throughput tier, backups and metadata configuration, the
Slurm cluster's shared resources and the Kubernetes add-ons. The components (:mod:`stacks.components`) take
those decisions from the specs here (:class:`NetworkArgs`, :class:`NodeGroupSpec`, :class:`FileSystemSpec`,
:class:`PlacementDecision`) instead of deriving them again, and :attr:`Inventory.resources` lists every
registration the program makes (type token, logical name, parent component) with the engine inputs the cost reads,
so ``clusterforge cost`` prices a 4,096-instance blueprint without running the program under Pulumi's mock engine
(about 6 ms a resource: 25 s for 4,137 resources, ``bench/bench_cost.py``).

The two cannot drift apart unnoticed: ``tests/stacks/test_inventory.py`` plans every AWS example and variant under
the mock engine and requires the registrations to equal :attr:`Inventory.resources` (type, name, parent, kind) and
each inventory input to equal the registered one, and the price of both to be the same.

This module imports no Pulumi package (importing ``pulumi_aws`` alone takes about 1.4 s) and creates nothing; it
is the one place of the stack that narrows a blueprint's target to the AWS settings (:func:`aws_target`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from blueprints.aws import capacity_for, reserved_groups
from blueprints.catalog import InstanceTypeSpec, catalog
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
from blueprints.naming import TAG_NODE_GROUP, Naming
from blueprints.resolved import ResolvedCluster, ResolvedGroup

from .node_status import PROGRAMS

__all__ = [
    "EKS_NODE_POLICIES",
    "LUSTRE_PORTS",
    "STATE_VOLUME_GIB",
    "FileSystemSpec",
    "FsxS3Link",
    "Inventory",
    "InventoryError",
    "NetworkArgs",
    "NicSlot",
    "NodeGroupSpec",
    "NotAwsBlueprint",
    "PlacementDecision",
    "Purchase",
    "Resource",
    "aws_target",
    "decide_placement",
    "efa_layout",
    "fsx_storage",
    "inventory",
    "kubernetes",
    "placement_decision",
    "purchase",
    "reserved_group_names",
    "sandbox_classes",
]

LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))
"""TCP port ranges Lustre (LNET) uses between FSx servers and clients."""

EKS_NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
"""The managed policies a managed node group's role needs for the node itself
(https://docs.aws.amazon.com/eks/latest/userguide/create-node-role.html); the VPC CNI's ``AmazonEKS_CNI_Policy`` is on
its own service account's role (EKS Pod Identity, stacks/components/eks.py)."""

STATE_VOLUME_GIB = 64
"""Size of the Slurm controller's state volume: slurmctld's state files are megabytes; the accounting database grows by
about a kilobyte per job step, so 64 GiB holds tens of millions of steps (gp3's baseline 3000 IOPS apply at any
size, https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type)."""

ROOT_VOLUME_TYPE = "gp3"
"""EBS type of every node's root volume (the launch template's block device mapping)."""


class NotAwsBlueprint(ValueError):
    """The blueprint's ``target.provider`` is not ``aws``: the Pulumi program cannot deploy it."""


class InventoryError(ValueError):
    """The blueprint asks for something the stack cannot create (one line naming the setting to change)."""


# ---------------------------------------------------------------------------------------------
# the blueprint's AWS settings
# ---------------------------------------------------------------------------------------------

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


def reserved_group_names(bp: Blueprint) -> frozenset[str]:
    """Names of the node groups a targeted reservation or Capacity Block is for (:func:`blueprints.aws.reserved_groups`)."""
    return frozenset(g.name for g in reserved_groups(bp))


# ---------------------------------------------------------------------------------------------
# plain values the components take
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Purchase:
    """How one node group buys its instances (:func:`purchase` fills it from :func:`blueprints.aws.capacity_for`):
    ``type`` ``on-demand``, ``spot``, ``capacity-block`` or ``reservation``; ``max_price`` (spot: USD per hour,
    ``None`` = the on-demand price); ``reservation_id`` (``cr-...``: capacity block or reservation, else ``None``)."""

    type: Literal["on-demand", "spot", "capacity-block", "reservation"]
    max_price: float | None = None
    reservation_id: str | None = None


def purchase(capacity: Capacity) -> Purchase:
    """The plain :class:`Purchase` of a blueprint capacity model."""
    return Purchase(type=capacity.type,
                    max_price=capacity.max_price if isinstance(capacity, SpotCapacity) else None,
                    reservation_id=getattr(capacity, "reservation_id", None))


@dataclass(frozen=True)
class NicSlot:
    """One launch-template network interface: ``network_card_index``, ``device_index`` and the
    EC2 ``interface_type`` (``interface`` = ENA, ``efa`` = EFA with ENA, ``efa-only``)."""

    network_card_index: int
    device_index: int
    interface_type: Literal["interface", "efa", "efa-only"]


def efa_layout(instance: InstanceTypeSpec | None, requested: int | Literal["max"], efa_fabric: bool) -> list[NicSlot]:
    """The pinned NIC layout for an instance type.

    Without EFA (another fabric, a type without EFA or unknown to the catalog, or 0 requested)
    a single ENA primary interface. With ``n`` EFA interfaces (``max`` = the catalog's
    ``max_efa_interfaces``): ENA at card 0 / device 0, ``efa-only`` at card 0 / device 1 and at
    device 0 of cards 1..n-1 (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html).
    Raises ``ValueError`` when ``n`` exceeds the type's maximum or its network cards.
    """
    primary = NicSlot(0, 0, "interface")
    if not efa_fabric or instance is None or not instance.efa_supported:
        return [primary]
    maximum = int(instance.max_efa_interfaces or 0)
    n = maximum if requested == "max" else int(requested)
    if n <= 0:
        return [primary]
    if n > maximum or n > max(instance.network_cards, 1):
        raise ValueError(f"{instance.name} supports at most {maximum} EFA interfaces on "
                         f"{instance.network_cards} network cards; {n} requested")
    return [primary, NicSlot(0, 1, "efa-only")] + [NicSlot(k, 0, "efa-only") for k in range(1, n)]


@dataclass(frozen=True)
class PlacementDecision:
    """What the nodes do: ``create`` a group of ``strategy``, ``use_existing`` (a group name), or
    nothing; ``reason`` says why in one line (shown by ``clusterforge plan``)."""

    create: bool
    strategy: str | None
    use_existing: str | None
    reason: str


def decide_placement(strategy: str | None, capacity_type: str,
                     reservation_placement_group: str | None) -> PlacementDecision:
    """The placement decision (pure function; no cloud calls).

    ``strategy``: ``network.placement`` (``cluster`` / ``partition`` / ``spread``, ``none`` or
    ``None``); ``capacity_type``: how the target buys instances (``on-demand``, ``spot``,
    ``capacity-block``, ``reservation``); ``reservation_placement_group``: the placement group a
    capacity reservation was created in (``None``: none, or not a reservation). Rules:
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html and
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html (a Capacity Block's
    instances are already placed; a placement-group constraint makes launches fail).
    """
    if capacity_type == "capacity-block":
        return PlacementDecision(False, None, None,
                                 "capacity block: instances are already placed in an UltraCluster; no placement group")
    if capacity_type == "reservation":
        if reservation_placement_group:
            return PlacementDecision(False, None, reservation_placement_group,
                                     f"capacity reservation created in placement group {reservation_placement_group}: "
                                     "use it")
        return PlacementDecision(False, None, None,
                                 "capacity reservation without a placement group: a new group would block it")
    if strategy in (None, "none"):
        return PlacementDecision(False, None, None, "network.placement is none")
    return PlacementDecision(True, strategy, None, f"network.placement is {strategy}")


def placement_decision(bp: Blueprint) -> PlacementDecision:
    """:func:`decide_placement` of ``network.placement`` and ``target.capacity``."""
    cap = aws_target(bp).capacity
    existing = cap.placement_group if isinstance(cap, ReservationCapacity) else None
    return decide_placement(bp.network.placement, cap.type, existing)


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`stacks.components.Network`.

    ``availability_zone``: the AZ of every node and file system; ``cidr_block`` /
    ``subnet_cidr_block`` / ``public_subnet_cidr_block`` / ``control_plane_subnet_cidr_block``:
    CIDRs of a new VPC; ``vpc_id`` / ``subnet_id``: use existing ones instead;
    ``control_plane_subnet_ids``: existing subnets for the EKS control plane;
    ``nat_gateway``: create internet + NAT gateways; ``public_subnet_for_nodes``: some node group
    wants public IPs; ``ssh_ingress_cidrs``: who may reach port 22; ``lustre``: create the FSx
    SG (EFA-enabled file systems are refused by ``check`` until their client side is configured,
    so no all-traffic EFA rules are needed); ``eks``: create /
    require the control-plane subnets. No defaults: they live in the blueprint models
    (:func:`network_args` fills every field). The properties say which optional parts are created.
    """

    naming: Naming
    availability_zone: str
    cidr_block: str
    subnet_cidr_block: str
    public_subnet_cidr_block: str
    control_plane_subnet_cidr_block: str
    vpc_id: str | None
    subnet_id: str | None
    control_plane_subnet_ids: tuple[str, ...]
    nat_gateway: bool
    public_subnet_for_nodes: bool
    ssh_ingress_cidrs: tuple[str, ...]
    lustre: bool
    eks: bool

    @property
    def creates_vpc(self) -> bool:
        """A new VPC with its compute subnet and private route table (no existing ``subnet_id``)."""
        return not self.subnet_id

    @property
    def public(self) -> bool:
        """The internet gateway, public subnet and public route table (a new VPC with a NAT gateway or a node
        group with public IPs)."""
        return self.creates_vpc and (self.nat_gateway or self.public_subnet_for_nodes)

    @property
    def nat(self) -> bool:
        """The NAT gateway and its Elastic IP (a new VPC with ``vpc.nat_gateway``)."""
        return self.public and self.nat_gateway

    @property
    def control_plane_subnet(self) -> bool:
        """The EKS control-plane subnet in a second AZ (a new VPC for EKS)."""
        return self.creates_vpc and self.eks


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


@dataclass(frozen=True)
class NodeGroupSpec:
    """What one node group creates: ``component`` (its component's logical name), ``group`` / ``role`` /
    ``instance_type``; ``count`` instances bought as ``purchase``; ``eks``: an EKS managed node group (else EC2
    instances named ``hosts``, in order); ``root_volume_gib`` (GiB, :data:`ROOT_VOLUME_TYPE`); ``nic_layout``
    (:func:`efa_layout`); ``slurm``: a Slurm group (one Route 53 A record per instance); ``state_volume``: the
    Slurm controller group (its first instance gets the state volume attached). No defaults: every field comes
    from the blueprint (:func:`inventory`)."""

    component: str
    group: str
    role: str
    instance_type: str
    count: int
    purchase: Purchase
    eks: bool
    root_volume_gib: int
    nic_layout: tuple[NicSlot, ...]
    slurm: bool
    state_volume: bool
    hosts: tuple[str, ...]

    @property
    def launch_template(self) -> str:
        """Logical name of the group's launch template."""
        return f"{self.component}-lt"

    @property
    def lt_instance_type(self) -> str | None:
        """The instance type the launch template names: always for EC2; for EKS only with a Capacity Block, which
        needs it there instead of in the node group (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)."""
        return self.instance_type if not self.eks or self.purchase.type == "capacity-block" else None

    @property
    def market_type(self) -> str | None:
        """The launch template's market: ``spot`` (EC2 only: EKS asks for Spot through the node group's
        capacity type and forbids it in the template), ``capacity-block``, else ``None``."""
        if self.purchase.type == "spot" and not self.eks:
            return "spot"
        return "capacity-block" if self.purchase.type == "capacity-block" else None

    @property
    def reservation_id(self) -> str | None:
        """The capacity reservation the template targets (a Capacity Block or an On-Demand Capacity Reservation)."""
        return self.purchase.reservation_id if self.purchase.type in ("capacity-block", "reservation") else None

    @property
    def eks_capacity_type(self) -> str:
        """The EKS node group's ``capacityType`` (a reservation launches ``ON_DEMAND`` into it)."""
        return {"on-demand": "ON_DEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK",
                "reservation": "ON_DEMAND"}[self.purchase.type]


@dataclass(frozen=True)
class FsxS3Link:
    """An S3 data repository association: ``data_repository_path`` (``s3://bucket/prefix``),
    ``file_system_path`` (absolute path inside the file system), ``auto_import`` / ``auto_export``
    (new, changed and deleted objects / files)."""

    data_repository_path: str
    file_system_path: str
    auto_import: bool
    auto_export: bool


@dataclass(frozen=True)
class FileSystemSpec:
    """One FSx for Lustre file system, each field the FSx argument of the same meaning: ``component`` (its
    component's logical name), ``storage_name`` (the blueprint storage entry), ``deployment_type``
    (``PERSISTENT_2`` ...), ``storage_capacity_gib`` (GiB), ``storage_type`` (``SSD`` / ``HDD``),
    ``throughput_per_tib_mbps`` (MB/s per TiB), ``drive_cache_type`` (HDD), ``data_compression_type``,
    ``file_system_type_version`` (Lustre ``2.15``), ``metadata_mode`` / ``metadata_iops``, ``efa_enabled``,
    ``kms_key_id`` (``None``: the AWS managed key), ``automatic_backup_retention_days`` (days), ``final_backup``,
    ``s3`` (the data repository association or ``None``) and ``backups``: FSx takes backups of this file system
    (catalog ``fsx.features`` of the deployment type and ``backups_with_s3_repository``,
    https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html). The properties give what is sent
    for the deployment type. No defaults: they live in the blueprint models."""

    component: str
    storage_name: str
    deployment_type: str
    storage_capacity_gib: int
    storage_type: str
    throughput_per_tib_mbps: int | None
    drive_cache_type: str | None
    data_compression_type: str
    file_system_type_version: str
    metadata_mode: str | None
    metadata_iops: int | None
    efa_enabled: bool
    kms_key_id: str | None
    automatic_backup_retention_days: int
    final_backup: bool
    s3: FsxS3Link | None
    backups: bool

    @property
    def persistent(self) -> bool:
        """A PERSISTENT_* deployment (throughput tier and KMS key apply)."""
        return self.deployment_type.startswith("PERSISTENT")

    @property
    def per_unit_storage_throughput(self) -> int | None:
        """MB/s per TiB sent to FSx: PERSISTENT_* only."""
        return self.throughput_per_tib_mbps if self.persistent else None

    @property
    def backup_retention_days(self) -> int | None:
        """Days of automatic backups sent to FSx: only where it takes backups."""
        return self.automatic_backup_retention_days if self.backups else None

    @property
    def metadata(self) -> tuple[str, int | None] | None:
        """``(mode, iops)`` of the metadata configuration (PERSISTENT_2 with a mode; iops only when
        ``USER_PROVISIONED``), else ``None``."""
        if self.deployment_type != "PERSISTENT_2" or self.metadata_mode is None:
            return None
        return self.metadata_mode, self.metadata_iops if self.metadata_mode == "USER_PROVISIONED" else None


def file_system_spec(storage: LustreStorage, naming: Naming) -> FileSystemSpec:
    """The :class:`FileSystemSpec` of one FSx storage entry (``storage.fsx`` must be set: :func:`fsx_storage`)."""
    f = storage.fsx
    if f is None:
        raise ValueError(f"storage `{storage.name}` has no `fsx` settings: the stack creates no file system for it")
    s3 = f.s3
    facts = catalog().aws["fsx"]
    return FileSystemSpec(
        component=naming.name("fsx", storage.name), storage_name=storage.name, deployment_type=f.deployment_type,
        storage_capacity_gib=f.storage_capacity_gib, storage_type=f.storage_type,
        throughput_per_tib_mbps=f.throughput_per_tib_mbps, drive_cache_type=f.drive_cache_type,
        data_compression_type=f.data_compression_type, file_system_type_version=f.file_system_type_version,
        metadata_mode=f.metadata.mode if f.metadata is not None else None,
        metadata_iops=f.metadata.iops if f.metadata is not None else None,
        efa_enabled=f.efa_enabled, kms_key_id=f.kms_key_id,
        automatic_backup_retention_days=f.backup_retention_days, final_backup=f.final_backup,
        s3=FsxS3Link(data_repository_path=s3.data_repository_path, file_system_path=s3.file_system_path,
                     auto_import=s3.auto_import, auto_export=s3.auto_export) if s3 is not None else None,
        backups=bool(facts["features"][f.deployment_type]["backups"]) and (
            s3 is None or bool(facts["backups_with_s3_repository"])),
    )


def sandbox_classes(cluster: ResolvedCluster) -> list[tuple[str, str, str]]:
    """``(name, handler, runtime)`` of each RuntimeClass the add-ons create, sorted: one per (``runtime_class``,
    runtime) of the Kata / gVisor sandboxes, whose handler is the containerd runtime the nodes' user data
    registers."""
    sandboxes = {
        (s.runtime_class or "", s.runtime): s for s in (ns.sandbox for ns in cluster.node_settings.values())
        if s.runtime in ("kata", "gvisor") and s.runtime_class
    }
    # the handler is the containerd runtime the nodes' user data registers (kata / gvisor: never None)
    return [(name, sandboxes[name, rt].runtime_handler or name, rt) for (name, rt) in sorted(sandboxes)]


# ---------------------------------------------------------------------------------------------
# the inventory
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resource:
    """One registration of the program: Pulumi ``type`` token, logical ``name``, ``parent`` (the logical name of
    the component it sits under; ``None`` under the stack), ``custom`` (a provider's resource, ``False`` for a
    component) and ``inputs``: the engine (camelCase) inputs the cost reads, a subset of what the program
    registers (an instance's ``launchTemplate.id`` names its template: :attr:`id` is the logical name)."""

    type: str
    name: str
    parent: str | None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    custom: bool = True

    @property
    def id(self) -> str:
        """The key other resources link to this one by (its logical name)."""
        return self.name


@dataclass(frozen=True)
class Inventory:
    """Everything the AWS stack of one blueprint creates: ``naming``; ``network``; ``placement``;
    ``node_groups`` and ``file_systems`` (in the order the program creates them); ``slurm_bundles``: the node
    groups with a file bundle in the Slurm bucket (none without Slurm); ``eks``: an EKS cluster; ``resources``:
    every registration (:class:`Resource`), components and providers included."""

    naming: Naming
    network: NetworkArgs
    placement: PlacementDecision
    node_groups: tuple[NodeGroupSpec, ...]
    file_systems: tuple[FileSystemSpec, ...]
    slurm_bundles: tuple[str, ...]
    eks: bool
    resources: tuple[Resource, ...]

    def node_group(self, name: str) -> NodeGroupSpec:
        """The spec of node group ``name``; ``KeyError`` for a group the blueprint does not have."""
        for g in self.node_groups:
            if g.group == name:
                return g
        raise KeyError(name)


def _node_group_spec(bp: Blueprint, r: ResolvedGroup, naming: Naming, eks: bool, slurm_controller: str | None,
                     slurm: bool) -> NodeGroupSpec:
    target = aws_target(bp)
    g = r.group
    if g.instance_type is None:
        raise InventoryError(f"node group `{g.name}` has no instance_type (an AWS node group needs one)")
    efa = bp.network if isinstance(bp.network, EfaNetwork) else None
    try:
        layout = efa_layout(r.hardware.instance, efa.efa.interfaces if efa else 0, r.settings.fabric == "efa")
    except ValueError as e:
        raise InventoryError(f"node group `{g.name}`: {e} — lower `network.efa.interfaces`") from None
    count = int(g.count or 0)
    component = naming.name(g.name)
    return NodeGroupSpec(
        component=component, group=g.name, role=g.role, instance_type=g.instance_type, count=count,
        purchase=purchase(capacity_for(bp, g)), eks=eks, root_volume_gib=target.root_volume_gib,
        nic_layout=tuple(layout), slurm=slurm and r.settings.slurm is not None,
        state_volume=slurm and r.name == slurm_controller,
        hosts=() if eks else tuple(naming.name(g.name, str(i)) for i in range(count)),
    )


def inventory(bp: Blueprint, cluster: ResolvedCluster) -> Inventory:
    """The :class:`Inventory` of an AWS blueprint and its resolved cluster (``loaded.blueprint``,
    ``loaded.cluster``). Raises :class:`NotAwsBlueprint` for another provider and :class:`InventoryError` for a
    node group the stack cannot create (no instance type; more EFA interfaces than the type has)."""
    target = aws_target(bp)
    naming = Naming(bp.name, target.tags)
    k8s = kubernetes(bp)
    eks = k8s is not None
    net = network_args(bp, naming)
    placement = placement_decision(bp)
    sl = cluster.slurm
    slurm = sl is not None
    controller = sl.controller_group if sl is not None else None
    groups = tuple(_node_group_spec(bp, r, naming, eks, controller, slurm) for r in cluster.groups)
    filesystems = tuple(file_system_spec(s, naming) for s in fsx_storage(bp)) if net.lustre else ()
    bundles = tuple(sorted(r.name for r in cluster.groups if r.settings.slurm is not None)) if slurm else ()

    out: list[Resource] = []

    def add(typ: str, name: str, parent: str | None, inputs: Mapping[str, Any] | None = None,
            custom: bool = True) -> None:
        out.append(Resource(typ, name, parent, dict(inputs or {}), custom))

    def component(typ: str, name: str) -> str:
        add(typ, name, None, custom=False)
        return name

    add("pulumi:providers:aws", naming.name("aws"), None)
    _network(add, component("clusterforge:aws:Network", naming.name("network")), net)
    pl = component("clusterforge:aws:Placement", naming.name("placement"))
    if placement.create and placement.strategy:
        add("aws:ec2/placementGroup:PlacementGroup", f"{pl}-pg", pl)
    if slurm:
        _slurm(add, component("clusterforge:aws:SlurmCluster", naming.name("slurm")), bundles)
    status = not eks  # EC2 nodes report their boot steps (stacks.node_status); their roles may write the records
    if status:
        st = component("clusterforge:aws:NodeStatus", naming.name("node-status"))
        from .cloud_init import node_programs

        # the programs the nodes fetch (every node's, then each group's own), one parameter per 4 KB part
        for prog in PROGRAMS + tuple(p for r in cluster.groups for p in node_programs(r.settings)):
            for i in range(len(prog.values())):
                add("aws:ssm/parameter:Parameter", f"{st}-{prog.name.replace('/', '-')}-{i}", st)
        add("aws:iam/policy:Policy", f"{st}-policy", st)
    _iam(add, component("clusterforge:aws:NodeIam", naming.name("node-iam")), eks, int(slurm) + int(status))
    if slurm:
        _iam(add, component("clusterforge:aws:NodeIam", naming.name("controller-iam")), False, 1 + int(status))
    for fs in filesystems:
        _file_system(add, component("clusterforge:aws:LustreFileSystem", fs.component), fs)
    if eks:
        c = component("clusterforge:aws:EksCluster", naming.name("eks"))
        add("aws:iam/role:Role", f"{c}-role", c)
        add("aws:iam/rolePolicyAttachment:RolePolicyAttachment", f"{c}-cluster-policy", c)
        add("aws:kms/key:Key", f"{c}-secrets-key", c)
        add("aws:eks/cluster:Cluster", f"{c}-cluster", c)
        add("aws:eks/addon:Addon", f"{c}-pod-identity-agent", c)
        add("aws:iam/role:Role", f"{c}-vpc-cni-role", c)
        add("aws:iam/rolePolicyAttachment:RolePolicyAttachment", f"{c}-vpc-cni-policy", c)
        add("aws:eks/podIdentityAssociation:PodIdentityAssociation", f"{c}-vpc-cni", c)
    for spec in groups:
        _node_group(add, component("clusterforge:aws:NodeGroup", spec.component), spec)
    if eks:
        add("pulumi:providers:kubernetes", naming.name("k8s"), None)
        a = component("clusterforge:k8s:Addons", naming.name("addons"))
        add("kubernetes:core/v1:Namespace", f"{a}-namespace", a)
        if any(s.gpu_count for s in cluster.node_settings.values()):
            add("kubernetes:helm.sh/v3:Release", f"{a}-gpu-operator", a)
        if any(len(g.nic_layout) > 1 for g in groups):
            add("kubernetes:helm.sh/v3:Release", f"{a}-efa-device-plugin", a)
        if filesystems:
            add("kubernetes:helm.sh/v3:Release", f"{a}-fsx-csi-driver", a)
            for fs in filesystems:
                add("kubernetes:core/v1:PersistentVolume", f"{a}-{fs.storage_name}-pv", a)
                add("kubernetes:core/v1:PersistentVolumeClaim", f"{a}-{fs.storage_name}-pvc", a)
        for name, _handler, _runtime in sandbox_classes(cluster):
            add("kubernetes:node.k8s.io/v1:RuntimeClass", f"{a}-runtimeclass-{name}", a)
        add("kubernetes:yaml/v2:ConfigFile", f"{a}-mpi-operator", a, custom=False)
    return Inventory(naming=naming, network=net, placement=placement, node_groups=groups, file_systems=filesystems,
                     slurm_bundles=bundles, eks=eks, resources=tuple(out))


def _network(add: Any, c: str, net: NetworkArgs) -> None:
    if net.creates_vpc:
        add("aws:ec2/vpc:Vpc", f"{c}-vpc", c)
        add("aws:ec2/subnet:Subnet", f"{c}-compute", c)
        add("aws:ec2/routeTable:RouteTable", f"{c}-private-rt", c)
        add("aws:ec2/routeTableAssociation:RouteTableAssociation", f"{c}-compute-rta", c)
    if net.public:
        add("aws:ec2/internetGateway:InternetGateway", f"{c}-igw", c)
        add("aws:ec2/subnet:Subnet", f"{c}-public", c)
        add("aws:ec2/routeTable:RouteTable", f"{c}-public-rt", c)
        add("aws:ec2/route:Route", f"{c}-public-default", c)
        add("aws:ec2/routeTableAssociation:RouteTableAssociation", f"{c}-public-rta", c)
    if net.nat:
        add("aws:ec2/eip:Eip", f"{c}-nat-eip", c)
        add("aws:ec2/natGateway:NatGateway", f"{c}-nat", c)
        add("aws:ec2/route:Route", f"{c}-private-default", c)
    if net.control_plane_subnet:
        add("aws:ec2/subnet:Subnet", f"{c}-control-plane", c)
        add("aws:ec2/routeTableAssociation:RouteTableAssociation", f"{c}-control-plane-rta", c)
    ingress = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
    egress = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
    add("aws:ec2/securityGroup:SecurityGroup", f"{c}-nodes", c)
    add(ingress, f"{c}-nodes-self-ingress", c)
    add(egress, f"{c}-nodes-self-egress", c)
    add(egress, f"{c}-nodes-internet-egress", c)
    for i in range(len(net.ssh_ingress_cidrs)):
        add(ingress, f"{c}-nodes-ssh-{i}", c)
    if not net.lustre:
        return
    add("aws:ec2/securityGroup:SecurityGroup", f"{c}-fsx", c)
    for lo, hi in LUSTRE_PORTS:
        ports = f"{lo}" if lo == hi else f"{lo}-{hi}"
        for kind, rule in ((ingress, "fsx-lustre-{}-from-nodes"), (ingress, "fsx-lustre-{}-from-self"),
                           (egress, "fsx-lustre-{}-to-self"), (egress, "fsx-lustre-{}-to-nodes"),
                           (egress, "nodes-lustre-{}-to-fsx"), (ingress, "nodes-lustre-{}-from-fsx")):
            add(kind, f"{c}-{rule.format(ports)}", c)


def _slurm(add: Any, c: str, bundles: tuple[str, ...]) -> None:
    add("aws:route53/zone:Zone", f"{c}-zone", c)
    add("aws:secretsmanager/secret:Secret", f"{c}-munge-key", c)
    add("aws:s3/bucket:Bucket", f"{c}-files", c)
    add("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", f"{c}-files-private", c)
    add("aws:s3/bucketOwnershipControls:BucketOwnershipControls", f"{c}-files-owner", c)
    add("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        f"{c}-files-encryption", c)
    for group in bundles:
        add("aws:s3/bucketObjectv2:BucketObjectv2", f"{c}-files-{group}", c)
    add("aws:iam/policy:Policy", f"{c}-controller-policy", c)
    add("aws:iam/policy:Policy", f"{c}-node-policy", c)
    add("aws:ebs/volume:Volume", f"{c}-controller-state", c, {"type": "gp3", "size": STATE_VOLUME_GIB})


def _iam(add: Any, c: str, eks: bool, extra_policies: int) -> None:
    attach = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    add("aws:iam/role:Role", f"{c}-role", c)
    add(attach, f"{c}-ssm", c)
    if eks:
        for arn in EKS_NODE_POLICIES:
            add(attach, f"{c}-{arn.rsplit('/', 1)[1].lower().replace('_', '-')}", c)
    for i in range(extra_policies):
        add(attach, f"{c}-policy-{i}", c)
    add("aws:iam/instanceProfile:InstanceProfile", f"{c}-profile", c)


def _file_system(add: Any, c: str, fs: FileSystemSpec) -> None:
    inputs: dict[str, Any] = {"deploymentType": fs.deployment_type, "storageCapacity": fs.storage_capacity_gib,
                              "storageType": fs.storage_type}
    if fs.per_unit_storage_throughput is not None:
        inputs["perUnitStorageThroughput"] = fs.per_unit_storage_throughput
    if fs.backup_retention_days is not None:
        inputs["automaticBackupRetentionDays"] = fs.backup_retention_days
    if fs.metadata is not None:
        mode, iops = fs.metadata
        inputs["metadataConfiguration"] = {"mode": mode, **({"iops": iops} if iops is not None else {})}
    add("aws:fsx/lustreFileSystem:LustreFileSystem", f"{c}-fs", c, inputs)
    if fs.s3 is not None:
        add("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", f"{c}-s3", c)


def _node_group(add: Any, c: str, spec: NodeGroupSpec) -> None:
    lt: dict[str, Any] = {"blockDeviceMappings": [{"ebs": {"volumeType": ROOT_VOLUME_TYPE,
                                                           "volumeSize": spec.root_volume_gib}}]}
    if spec.lt_instance_type is not None:
        lt["instanceType"] = spec.lt_instance_type
    if spec.market_type is not None:
        lt["instanceMarketOptions"] = {"marketType": spec.market_type}
    if spec.reservation_id is not None:
        lt["capacityReservationSpecification"] = {"capacityReservationTarget": {
            "capacityReservationId": spec.reservation_id}}
    add("aws:ec2/launchTemplate:LaunchTemplate", spec.launch_template, c, lt)
    tags = {TAG_NODE_GROUP: spec.group}
    if spec.eks:
        ng: dict[str, Any] = {"capacityType": spec.eks_capacity_type, "scalingConfig": {"desiredSize": spec.count},
                              "launchTemplate": {"id": spec.launch_template}, "tags": tags}
        if spec.lt_instance_type is None:
            ng["instanceTypes"] = [spec.instance_type]
        add("aws:eks/nodeGroup:NodeGroup", f"{c}-mng", c, ng)
        return
    for i, host in enumerate(spec.hosts):
        add("aws:ec2/instance:Instance", host, c, {"launchTemplate": {"id": spec.launch_template}, "tags": tags})
        if spec.slurm:
            add("aws:route53/record:Record", f"{host}-dns", c)
        if spec.state_volume and i == 0:
            add("aws:ec2/volumeAttachment:VolumeAttachment", f"{host}-state", c)
