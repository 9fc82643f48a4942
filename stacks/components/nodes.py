"""``clusterforge:aws:NodeGroup``: launch template, EFA layout and the instances of one node group.

One launch template per node group carries everything about a node:

* **network interfaces** — the multi-card layout AWS documents today
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html,
  catalog ``efa.interfaces``), pinned by :func:`efa_layout`: the primary interface is an ENA
  (``interface``) at network card 0 / device 0; card 0 also gets an ``efa-only`` interface at
  device 1; every further card ``k`` gets one ``efa-only`` interface at device 0 — so the node has
  exactly the catalog's maximum of EFA interfaces, one per network card, on distinct
  ``network_card_index`` values. Only the ENA interface takes an IP address;
* **nested virtualization** for Kata / VM sandboxes on the families that offer it (catalog ``kvm``);
* **IMDSv2 required** (``http_tokens: required``); hop limit 1 on EKS nodes (pods cannot reach the
  node role's credentials), 2 on EC2 nodes (catalog ``imds``);
* an **encrypted gp3 root volume**;
* **market options**: spot (``max_price``), ``capacity-block`` with the reservation id, or a
  targeted capacity reservation (no ``capacity_reservation_preference`` when a target is set:
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateCapacityReservationSpecificationRequest.html).
  ``capacity`` is the group's own (:func:`blueprints.aws.capacity_for`): a reservation or
  Capacity Block only reaches the groups it is for, the others launch on demand;
* the placement group from :mod:`.placement`;
* **user data** from :mod:`stacks.cloud_init`, rendered from the group's ``NodeSettings``.

EC2 node groups then launch ``count`` ``aws.ec2.Instance`` resources from the template (their
private IPs feed the Ansible inventory). EKS node groups hand the template to an
``aws.eks.NodeGroup`` (managed node group; the template then carries neither subnet, instance
profile nor spot request, which EKS forbids:
https://docs.aws.amazon.com/eks/latest/APIReference/API_LaunchTemplateSpecification.html). With a
Capacity Block the instance type moves from the node group's ``instance_types`` into the launch
template, as EKS requires (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html), and the
group's size follows the block's window (:mod:`.capacity_block`: 0 nodes and a scheduled scale-up at the block's
start when created before it, ``count`` during it, 0 after it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from blueprints.aws import instance_arch, kvm_source
from blueprints.catalog import InstanceTypeSpec, catalog
from blueprints.naming import LABEL_EFA, LABEL_NODE_GROUP, LABEL_SANDBOX, Naming
from blueprints.settings import NodeSettings

from .. import cloud_init
from ..inventory import ROOT_VOLUME_TYPE, NicSlot, NodeGroupSpec, Purchase, efa_layout
from ..slurm_boot import NODE_NAME_TAG, STATE_DEVICE, SlurmBoot
from .capacity_block import block_window, eks_block_scaling, schedule_block_start

__all__ = [
    "DLAMI_SSM_PARAMETER",
    "UBUNTU_SSM_PARAMETER",
    "EksAttachment",
    "NicSlot",
    "NodeGroupArgs",
    "NodeGroupComponent",
    "Purchase",
    "SlurmGroupArgs",
    "ami_parameter",
    "efa_layout",
]

DLAMI_SSM_PARAMETER: str = catalog().aws["node_images"]["ec2_gpu"]["ssm_parameter"]
"""SSM parameter of the latest AWS Deep Learning Base OSS NVIDIA Driver GPU AMI: driver, CUDA, EFA
and aws-ofi-nccl preinstalled (catalog ``node_images.ec2_gpu``, with its source)."""

UBUNTU_SSM_PARAMETER: str = catalog().aws["node_images"]["ec2_cpu"]["ssm_parameter"]
"""SSM parameter of Canonical's Ubuntu AMI, for node groups without GPUs (catalog ``node_images.ec2_cpu``)."""

IMDS: dict[str, Any] = catalog().aws["imds"]
"""Instance metadata hop limits (catalog ``imds``): 1 on EKS nodes, so pods cannot reach the node role's
credentials; 2 on EC2 nodes, whose containers on a bridge network need the extra hop."""

EKS_ROOT_DEVICE: str = catalog().aws["node_images"]["eks"]["root_device"]
"""Root device name of the EKS-optimized Amazon Linux 2023 AMIs (catalog ``node_images.eks``)."""

def ami_parameter(instance_type: str, spec: InstanceTypeSpec | None) -> str:
    """SSM parameter naming the default AMI for ``instance_type``: the DLAMI for GPU types, else Ubuntu."""
    arch = instance_arch(instance_type)
    if spec is not None and spec.gpu_count > 0:
        return DLAMI_SSM_PARAMETER.format(arch=arch)
    return UBUNTU_SSM_PARAMETER.format(arch="arm64" if arch == "arm64" else "amd64")


@dataclass(frozen=True)
class EksAttachment:
    """Where an EKS managed node group joins: ``cluster_name`` and the Kubernetes ``version``.
    (The cluster security group goes into ``NodeGroupArgs.security_group_ids``: with interfaces
    in the launch template EKS does not add it by itself.)"""

    cluster_name: pulumi.Input[str]
    version: str


IMDS_TAG_KEY = re.compile(r"[A-Za-z0-9+\-=.,_:@]+")
"""Instance tag keys IMDS can serve: with tags in instance metadata on, an instance whose tag key has other characters
(a space, ``/``) fails to launch (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/work-with-tags-in-IMDS.html)."""


@dataclass(frozen=True)
class SlurmGroupArgs:
    """A node group's part in a Slurm cluster (:class:`.slurm.SlurmCluster`'s outputs and the Slurm names).

    ``node_names``: the Slurm ``NodeName`` of each instance in order (:func:`blueprints.slurm.slurm_settings`; the
    controller's is its first host), put in the instance tag :data:`stacks.slurm_boot.NODE_NAME_TAG`;
    ``zone_id`` / ``zone_name``: the private zone that gets an A record ``<name>.<zone>`` per instance;
    ``munge_secret_arn``; ``bundle_url`` and ``bundle``: the group's file bundle object (instances wait for it);
    ``state_volume_id``: the controller's state volume, attached to its instance (``None`` for other groups).
    """

    node_names: tuple[str, ...]
    zone_id: pulumi.Input[str]
    zone_name: str
    munge_secret_arn: pulumi.Input[str]
    bundle_url: pulumi.Input[str]
    bundle: pulumi.Resource | None = None
    state_volume_id: pulumi.Input[str] | None = None


@dataclass(frozen=True)
class NodeGroupArgs:
    """Inputs of :class:`NodeGroupComponent` (:func:`stacks.translate.node_group_args` fills them).

    ``spec``: what the group creates, from the stack's inventory (:class:`stacks.inventory.NodeGroupSpec`:
    instance type, count and names, purchase, root volume, NIC layout, Slurm records); ``public_ip`` /
    ``labels``: the node group's; ``settings``: its resolved ``NodeSettings``; ``instance``: its catalog entry
    (``None`` for types the catalog lacks); ``availability_zone``; ``subnet_id``: the subnet every interface
    goes in; ``security_group_ids``: node SGs; ``placement_group``: group name or ``None``;
    ``instance_profile_name`` / ``node_role_arn``: from :class:`.iam.NodeIam`; ``ami_id`` (``None`` = SSM
    lookup); ``key_name`` (``None``: no key pair); ``lustre``: FSx storage name -> (DNS name, mount name)
    outputs; ``eks``: set for EKS managed node groups; ``slurm``: set for the node groups of a Slurm cluster
    (:class:`SlurmGroupArgs`). ``eks`` and ``slurm`` are set exactly when ``spec`` says so. ``status_path``: where the
    EC2 nodes write their status records (:func:`stacks.node_status.status_path` of the stack; ``None`` for EKS).
    """

    naming: Naming
    spec: NodeGroupSpec
    public_ip: bool
    labels: Mapping[str, str]
    settings: NodeSettings
    instance: InstanceTypeSpec | None
    availability_zone: str
    subnet_id: pulumi.Input[str]
    security_group_ids: Sequence[pulumi.Input[str]]
    placement_group: pulumi.Input[str] | None
    instance_profile_name: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    ami_id: str | None
    key_name: str | None
    lustre: Mapping[str, tuple[pulumi.Output[str], pulumi.Output[str]]] = field(default_factory=dict)
    eks: EksAttachment | None = None
    slurm: SlurmGroupArgs | None = None
    status_path: str | None = None


class NodeGroupComponent(pulumi.ComponentResource):
    """One node group. Outputs: ``launch_template_id``, ``private_ips`` (EC2 node groups; empty for
    EKS), ``instance_names`` and ``instance_ids`` (EC2, in the same order: what ``up`` waits for),
    ``eks_node_group_name`` (EKS), ``nic_layout`` and ``image_id`` (EC2: the AMI the launch template names;
    ``None`` for EKS).

    EC2 instances in a Capacity Block or capacity reservation are replaced delete-first
    (``delete_before_replace``): a block or reservation sized to the group has no slot for the new
    instance while the old one runs, so create-first (Pulumi's default) would fail with
    InsufficientInstanceCapacity (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html)."""

    launch_template_id: pulumi.Output[str]
    image_id: pulumi.Output[str] | None
    private_ips: pulumi.Output[list[str]]
    instance_names: list[str]
    instance_ids: pulumi.Output[list[str]]
    eks_node_group_name: pulumi.Output[str] | None
    nic_layout: list[NicSlot]

    def __init__(self, name: str, args: NodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:NodeGroup", name, None, opts)
        g = args.spec
        n = args.naming
        eks = args.eks
        sl = args.slurm
        if (eks is not None) != g.eks or (sl is not None) != g.slurm:
            raise pulumi.RunError(f"node group `{g.group}`: its EKS / Slurm wiring does not match the stack's "
                                  "inventory (a clusterforge bug)")
        self.nic_layout = list(g.nic_layout)
        tags = n.tags(role=g.role, group=g.group, name=n.name(g.group))

        # ---- AMI and root device -------------------------------------------------------------
        image_id: pulumi.Input[str] | None
        root_device: pulumi.Input[str]
        self.image_id = None
        if eks is not None:  # EKS launches its own AMI (rule `eks-ami-id` refuses `target.ami_id` here)
            image_id, root_device = None, EKS_ROOT_DEVICE
        else:
            if args.ami_id:
                image_id = args.ami_id
            else:
                param = aws.ssm.get_parameter_output(name=ami_parameter(g.instance_type, args.instance),
                                                     opts=pulumi.InvokeOutputOptions(parent=self))
                image_id = param.value
            filters = pulumi.Output.from_input(image_id).apply(
                lambda ami_id: [aws.ec2.GetAmiFilterArgs(name="image-id", values=[ami_id])])
            ami = aws.ec2.get_ami_output(filters=filters, most_recent=True,
                                         opts=pulumi.InvokeOutputOptions(parent=self))
            root_device = ami.root_device_name
            self.image_id = pulumi.Output.from_input(image_id)

        # ---- interfaces ----------------------------------------------------------------------
        single = len(self.nic_layout) == 1
        interfaces = [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=s.network_card_index,
                device_index=s.device_index,
                interface_type=s.interface_type,
                subnet_id=None if eks is not None else args.subnet_id,
                security_groups=list(args.security_group_ids),
                delete_on_termination="true",
                associate_public_ip_address=(("true" if args.public_ip and single else "false")
                                             if s.device_index == 0 and s.network_card_index == 0 else None),
            )
            for s in self.nic_layout
        ]

        # ---- market options / reservations ---------------------------------------------------
        cap = g.purchase
        market = None
        reservation = None
        if g.market_type == "spot":
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                    max_price=str(cap.max_price) if cap.max_price else None,
                    spot_instance_type="one-time", instance_interruption_behavior="terminate"))
        elif g.market_type is not None:
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type=g.market_type)
        if g.reservation_id is not None:
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=g.reservation_id))

        # ---- user data -----------------------------------------------------------------------
        names = sorted(args.lustre)
        endpoint_outputs: list[pulumi.Output[str]] = []
        for k in names:
            endpoint_outputs += [args.lustre[k][0], args.lustre[k][1]]
        settings = args.settings
        if sl is not None:
            if len(sl.node_names) != g.count:
                raise pulumi.RunError(f"node group `{g.group}`: {g.count} instances but {len(sl.node_names)} "
                                      "Slurm node names")
            bad = sorted(k for k in tags if not IMDS_TAG_KEY.fullmatch(k))
            if bad:
                raise pulumi.RunError(f"node group `{g.group}`: tag key(s) {', '.join(map(repr, bad))} cannot be "
                                      "served by the instance metadata that Slurm nodes read their name from — use "
                                      "only letters, digits and + - = . , _ : @ in `target.tags` keys")
            endpoint_outputs += [pulumi.Output.from_input(sl.munge_secret_arn), pulumi.Output.from_input(sl.bundle_url),
                                 pulumi.Output.from_input(sl.state_volume_id or "")]

        def render(values: list[str]) -> str:
            endpoints = {k: cloud_init.LustreEndpoint(values[2 * i], values[2 * i + 1]) for i, k in enumerate(names)}
            boot = None
            if sl is not None:
                arn, url, vol = values[2 * len(names):]
                boot = SlurmBoot(arn, url, vol or None)
            text = cloud_init.render_user_data(settings, endpoints, eks=eks is not None, slurm=boot,
                                               status_path=args.status_path)
            return cloud_init.encode_user_data(text)

        user_data = pulumi.Output.all(*endpoint_outputs).apply(lambda xs: render([str(x) for x in xs]))

        # EKS + Capacity Block: the instance type must sit in the launch template, not in the node
        # group's instance_types (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)
        lt_instance_type = g.lt_instance_type
        spec_tags = [aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=rt, tags=tags)
                     for rt in ("instance", "volume", "network-interface")]
        lt = aws.ec2.LaunchTemplate(
            g.launch_template,
            description=f"clusterforge {n.blueprint}: node group {g.group} ({g.instance_type})",
            image_id=image_id,
            instance_type=lt_instance_type,
            key_name=args.key_name,
            iam_instance_profile=None if eks is not None else aws.ec2.LaunchTemplateIamInstanceProfileArgs(
                name=args.instance_profile_name),
            network_interfaces=interfaces,
            placement=aws.ec2.LaunchTemplatePlacementArgs(
                group_name=args.placement_group,
                availability_zone=None if eks is not None else args.availability_zone)
            if (args.placement_group is not None or eks is None) else None,
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            # Kata / VM sandboxes on a nested-virtualization family: KVM must be switched on
            cpu_options=aws.ec2.LaunchTemplateCpuOptionsArgs(nested_virtualization="enabled")
            if settings.sandbox.runtime in ("kata", "vm") and kvm_source(g.instance_type, eks is not None) == "nested"
            else None,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required",
                http_put_response_hop_limit=int(IMDS["hop_limit_eks" if eks is not None else "hop_limit_ec2"]),
                # Slurm nodes read their NodeName from their instance tag (no secret is ever in a tag)
                instance_metadata_tags="enabled" if sl is not None else "disabled"),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=root_device,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_type=ROOT_VOLUME_TYPE, volume_size=g.root_volume_gib, encrypted="true",
                    delete_on_termination="true"))],
            ebs_optimized="true",
            update_default_version=True,
            user_data=user_data,
            tag_specifications=spec_tags,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.launch_template_id = lt.id
        self.instance_names = []
        self.eks_node_group_name = None
        count = g.count
        self.instance_ids = pulumi.Output.from_input([])
        if eks is None:
            ips: list[pulumi.Output[str]] = []
            ids: list[pulumi.Output[str]] = []
            for i, host in enumerate(g.hosts):
                inst_tags = {**tags, "Name": host}
                if sl is not None:
                    inst_tags[NODE_NAME_TAG] = sl.node_names[i]
                inst = aws.ec2.Instance(
                    host,
                    launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=lt.id, version=lt.latest_version.apply(str)),
                    tags=inst_tags,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[sl.bundle] if sl and sl.bundle else None,
                                                delete_before_replace=cap.type in ("capacity-block", "reservation")),
                )
                self.instance_names.append(host)
                ips.append(inst.private_ip)
                ids.append(inst.id)
                if sl is not None:
                    aws.route53.Record(f"{host}-dns", zone_id=sl.zone_id, name=f"{sl.node_names[i]}.{sl.zone_name}",
                                       type="A", ttl=60, records=[inst.private_ip],
                                       opts=pulumi.ResourceOptions(parent=self))
                if sl is not None and g.state_volume and i == 0:
                    if sl.state_volume_id is None:
                        raise pulumi.RunError(f"node group `{g.group}`: the Slurm controller's state volume is missing "
                                              "(a clusterforge bug)")
                    # replacing the controller: stop the old one (clean unmount), detach, attach to the new one
                    aws.ec2.VolumeAttachment(f"{host}-state", device_name=STATE_DEVICE, instance_id=inst.id,
                                             volume_id=sl.state_volume_id, stop_instance_before_detaching=True,
                                             opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            self.private_ips = pulumi.Output.all(*ips).apply(lambda xs: [str(x) for x in xs])
            self.instance_ids = pulumi.Output.all(*ids).apply(lambda xs: [str(x) for x in xs])
        else:
            labels = {**args.labels, LABEL_NODE_GROUP: g.group, LABEL_SANDBOX: settings.sandbox.runtime}
            if len(self.nic_layout) > 1:
                labels[LABEL_EFA] = "true"
            arch = "ARM_64" if instance_arch(g.instance_type) == "arm64" else "x86_64"
            # in a Capacity Block the size follows the block's window, read at deploy time (.capacity_block)
            block = None
            if cap.type == "capacity-block" and cap.reservation_id:
                block = eks_block_scaling(block_window(cap.reservation_id, parent=self), count)
                if block.phase == "ended":
                    pulumi.log.warn(f"Capacity Block {cap.reservation_id} ended at {block.window.end.isoformat()}: "
                                    "its EKS node group is sized 0 (buy a new block and set its id)", resource=self)
            scaling_config = (
                aws.eks.NodeGroupScalingConfigArgs(desired_size=block.desired, min_size=block.min_size,
                                                   max_size=block.max_size) if block is not None
                else aws.eks.NodeGroupScalingConfigArgs(desired_size=count, min_size=count, max_size=max(count, 1)))
            ng = aws.eks.NodeGroup(
                f"{name}-mng",
                cluster_name=eks.cluster_name,
                node_role_arn=args.node_role_arn,
                subnet_ids=[args.subnet_id],
                instance_types=None if lt_instance_type is not None else [g.instance_type],
                ami_type=f"AL2023_{arch}_NVIDIA" if settings.gpu_count else f"AL2023_{arch}_STANDARD",
                capacity_type=g.eks_capacity_type,
                version=eks.version,
                launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=lt.id, version=lt.latest_version.apply(str)),
                scaling_config=scaling_config,
                update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
                labels=labels,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
            if block is not None:  # created before the block starts: scaled up at its start
                schedule_block_start(name, ng, block, count, parent=self)
            self.eks_node_group_name = ng.node_group_name
            self.private_ips = pulumi.Output.from_input([])
        self.register_outputs({
            "launchTemplateId": lt.id,
            "privateIps": self.private_ips,
            "nicLayout": [[s.network_card_index, s.device_index, s.interface_type] for s in self.nic_layout],
        })
