"""AWS rules: EFA, placement groups, Capacity Blocks and reservations, VPC layout, tags, EKS add-ons."""

from __future__ import annotations

import datetime
import difflib
import ipaddress
from collections.abc import Iterator
from typing import Any

from ..aws import accelerator_family, instance_arch, kvm_source, reserved_groups
from ..catalog import ec2_instance_type_names
from ..models import (
    AwsTarget,
    CapacityBlockCapacity,
    EfaNetwork,
    KubernetesOrchestrator,
    LustreStorage,
    NodeGroup,
    ReservationCapacity,
    SpotCapacity,
)
from ..vendor import gpu_operator_for_kubernetes, gpu_operator_release, gpu_operator_supports
from ._facts import compute_groups, fld, instance_spec, mounts, version, vstr
from .registry import Hit, RuleContext, rule

EFA_DOC = "https://github.com/awsdocs/amazon-ec2-user-guide/blob/e3707c431483ec0ffffcabebd36cf799ba682cd0/doc_source/efa.md"
EFA_START = "https://github.com/awsdocs/amazon-ec2-user-guide/blob/e3707c431483ec0ffffcabebd36cf799ba682cd0/doc_source/efa-start.md"
EFA_CARDS = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"
CB_USING = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html"
CB_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html"
PLACEMENT = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html"
PC_CAPACITY = "https://github.com/aws/aws-parallelcluster/blob/451cc53/cli/src/pcluster/validators/ec2_validators.py"


def _aws(ctx: RuleContext) -> AwsTarget | None:
    return ctx.bp.target if isinstance(ctx.bp.target, AwsTarget) else None


def _efa(ctx: RuleContext) -> EfaNetwork | None:
    return ctx.bp.network if isinstance(ctx.bp.network, EfaNetwork) else None


def _compute_nodes(ctx: RuleContext) -> int:
    return sum(g.count or 0 for _, g in compute_groups(ctx.bp))


def _reserved(ctx: RuleContext) -> list[tuple[int, NodeGroup]]:
    """``(index, group)`` of the groups the reservation / Capacity Block is for."""
    names = {g.name for g in reserved_groups(ctx.bp)}
    return [(i, g) for i, g in enumerate(ctx.bp.node_groups) if g.name in names]


def _reserved_nodes(ctx: RuleContext) -> int:
    return sum(g.count or 0 for _, g in _reserved(ctx))


@rule(
    id="aws-az-in-region",
    severity="error",
    summary="`target.availability_zone` (and an FSx `availability_zone`) must be a zone of `target.region`.",
    fix="use a zone of the region, e.g. `us-east-1a` for `us-east-1`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html",
)
def aws_az_in_region(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None:
        return
    if not t.availability_zone.startswith(t.region) or len(t.availability_zone) != len(t.region) + 1:
        yield Hit(("target", "availability_zone"),
                  f"`target.availability_zone` `{t.availability_zone}` is not in `target.region` `{t.region}`",
                  f"use a zone of {t.region}, e.g. `{t.region}a`")
    for i, s in enumerate(ctx.bp.storage):
        az = getattr(getattr(s, "fsx", None), "availability_zone", None)
        if az and (not az.startswith(t.region) or len(az) != len(t.region) + 1):
            yield Hit(("storage", i, "fsx", "availability_zone"),
                      f"`storage.{i}.fsx.availability_zone` `{az}` is not in `target.region` `{t.region}`",
                      "remove it (the file system goes into the compute zone)")


@rule(
    id="efa-instance-support",
    severity="error",
    summary="`network.fabric: efa` needs compute instance types that support EFA.",
    fix="pick an EFA-capable type (p4d, p5, p5e, p5en, p6, g6e.48xlarge ...) or use `fabric: ethernet`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types",
)
def efa_instance_support(ctx: RuleContext) -> Iterator[Hit]:
    if _efa(ctx) is None:
        return
    for i, g in compute_groups(ctx.bp):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.max_efa_interfaces == 0:
            yield Hit(("node_groups", i, "instance_type"), f"`{it.name}` (`node_groups.{i}.instance_type`) does not support EFA")


@rule(
    id="efa-layout-unknown",
    severity="error",
    summary="`network.fabric: efa` on an instance type whose EFA interfaces the catalog does not know "
            "(`max_efa_interfaces: null` with an `efa_generation`): some types lay out their network cards unlike their family "
            "(p6e-gb200 pairs `efa` and `efa-only` interfaces across its cards), and without the count the stack "
            "would launch the node with one ENA interface and no EFA at all.",
    fix="use `network.fabric: ethernet` for this type, or another EFA type, until the catalog records its layout",
    source="https://github.com/aws/aws-parallelcluster/pull/6930",
)
def efa_layout_unknown(ctx: RuleContext) -> Iterator[Hit]:
    if _efa(ctx) is None:
        return
    for i, g in compute_groups(ctx.bp):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.max_efa_interfaces is None and it.raw.get("efa_generation"):
            yield Hit(("node_groups", i, "instance_type"),
                      f"`{it.name}` (`node_groups.{i}.instance_type`) supports EFA but the catalog does not know its "
                      "EFA interfaces: it would launch without EFA")


@rule(
    id="efa-capable-not-used",
    severity="warning",
    summary="Several EFA-capable instances on `fabric: ethernet`: NCCL runs over TCP sockets at a fraction of the "
            "EFA bandwidth.",
    fix="set `network.fabric: efa`",
    source="https://github.com/aws/aws-parallelcluster/blob/451cc53/cli/src/pcluster/validators/ec2_validators.py",
)
def efa_capable_not_used(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None or ctx.bp.network.fabric != "ethernet" or _compute_nodes(ctx) < 2:
        return
    for i, g in compute_groups(ctx.bp):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.efa_supported and it.gpu_count:
            yield Hit(("network", "fabric"), f"`network.fabric` is `ethernet` but `{it.name}` "
                      f"(`node_groups.{i}`) has {it.max_efa_interfaces} EFA interface(s)")
            return


@rule(
    id="efa-interfaces-max",
    severity="error",
    summary="`network.efa.interfaces` cannot exceed the instance type's maximum EFA interfaces or its network cards "
            "(one EFA per card), on every node group that gets EFA (any role).",
    fix="use `interfaces: max`",
    source=EFA_CARDS,
)
def efa_interfaces_max(ctx: RuleContext) -> Iterator[Hit]:
    net = _efa(ctx)
    if net is None:
        return
    for r in ctx.cluster.efa_groups:
        it = r.hardware.instance
        if it is None:
            continue
        maximum = int(it.max_efa_interfaces or 0)
        n = maximum if net.efa.interfaces == "max" else int(net.efa.interfaces)
        cards = max(it.network_cards, 1)
        if n > maximum or n > cards:
            limit = min(maximum, cards)
            yield Hit(("network", "efa", "interfaces"),
                      f"`network.efa.interfaces` is {net.efa.interfaces}{f' ({n})' if net.efa.interfaces == 'max' else ''} but `{it.name}` (`node_groups.{r.index}`, "
                      f"group `{r.name}`) supports at most {maximum} EFA interface(s) on {it.network_cards} network "
                      "card(s)", f"set `interfaces: {limit}`" if net.efa.interfaces == "max" else
                      f"use `interfaces: max` ({limit} on {it.name})" if limit == maximum else f"set `interfaces: {limit}`")


@rule(
    id="efa-interfaces-below-max",
    severity="warning",
    summary="Fewer EFA interfaces than network cards leaves part of the instance's EFA bandwidth unused.",
    fix="use `interfaces: max` (one EFA per network card)",
    source=EFA_CARDS,
)
def efa_interfaces_below_max(ctx: RuleContext) -> Iterator[Hit]:
    net = _efa(ctx)
    if net is None or net.efa.interfaces == "max":
        return
    for i, g in compute_groups(ctx.bp):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.max_efa_interfaces and net.efa.interfaces < it.max_efa_interfaces:
            share = net.efa.interfaces / it.max_efa_interfaces
            yield Hit(("network", "efa", "interfaces"),
                      f"`network.efa.interfaces` is {net.efa.interfaces} of {it.max_efa_interfaces} on `{it.name}` "
                      f"(`node_groups.{i}`): about {share:.0%} of {it.network_gbps:g} Gbit/s")
            return


@rule(
    id="efa-placement-decision",
    severity="error",
    summary="A multi-node on-demand or spot EFA cluster needs an explicit placement decision "
            "(`network.placement: cluster` or `none`); with a Capacity Block or reservation unset means none.",
    fix="set `network.placement: cluster`",
    source=EFA_START,
)
def efa_placement_decision(ctx: RuleContext) -> Iterator[Hit]:
    net = _efa(ctx)
    if net is None or net.placement is not None or _compute_nodes(ctx) < 2:
        return
    if isinstance(ctx.bp.target.capacity, (CapacityBlockCapacity, ReservationCapacity)):  # type: ignore[union-attr]
        return  # unset means none: the block is placed in an UltraCluster, a reservation names its own group
    yield Hit(("network", "fabric"), f"`network.placement` is not set for {_compute_nodes(ctx)} EFA nodes")


@rule(
    id="efa-placement-none",
    severity="warning",
    summary="EFA nodes without a placement group may land far apart in the AZ (higher latency, lower busbw); only "
            "Capacity Blocks are placed for you.",
    fix="set `network.placement: cluster`",
    source=EFA_START,
)
def efa_placement_none(ctx: RuleContext) -> Iterator[Hit]:
    net = _efa(ctx)
    if net is None or net.placement != "none" or _compute_nodes(ctx) < 2:
        return
    if isinstance(ctx.bp.target.capacity, CapacityBlockCapacity):  # type: ignore[union-attr]
        return
    yield Hit(("network", "placement"), "`network.placement` is `none` for a multi-node EFA cluster that is not a "
              "Capacity Block")


@rule(
    id="efa-placement-strategy",
    severity="warning",
    summary="`spread` and `partition` placement groups put EFA nodes on distinct racks: collectives get slower than "
            "in a `cluster` group.",
    fix="use `network.placement: cluster` for training nodes",
    source=PLACEMENT,
)
def efa_placement_strategy(ctx: RuleContext) -> Iterator[Hit]:
    net = _efa(ctx)
    if net is not None and net.placement in ("spread", "partition") and _compute_nodes(ctx) > 1:
        yield Hit(("network", "placement"), f"`network.placement` is `{net.placement}` for EFA training nodes")


@rule(
    id="placement-spread-limit",
    severity="error",
    summary="A rack spread placement group holds at most 7 running instances per AZ.",
    fix="use `placement: cluster` (or `partition`) for more than 7 nodes",
    source="https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_ec2.PlacementGroupSpreadLevel.html",
)
def placement_spread_limit(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None or ctx.bp.network.placement != "spread":
        return
    total = sum(g.count or 0 for g in ctx.bp.node_groups)
    if total > 7:
        yield Hit(("network", "placement"), f"`network.placement` is `spread` but the cluster has {total} instances (max 7)")


@rule(
    id="public-ip-multi-card",
    severity="error",
    summary="EC2 cannot auto-assign a public IPv4 address to an instance with more than one network interface "
            "(multi-card EFA types).",
    fix="set `public_ip: false`; nodes reach the internet through the NAT gateway (`target.vpc.nat_gateway`)",
    source="https://github.com/aws/aws-parallelcluster/pull/7457",
)
def public_ip_multi_card(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    efa = _efa(ctx)
    for i, g in enumerate(ctx.bp.node_groups):
        if not g.public_ip:
            continue
        it = instance_spec(g, ctx.catalog)
        if it is None:
            continue
        has_efa = efa is not None and ctx.cluster.group(g).efa  # the stack's own test for EFA interfaces
        nics = it.network_cards if has_efa else 1
        if efa is not None and has_efa and efa.efa.interfaces != "max":
            nics = max(1, min(int(efa.efa.interfaces), it.network_cards))
        if nics > 1:
            yield Hit(("node_groups", i, "public_ip"),
                      f"`node_groups.{i}.public_ip` is true but `{it.name}` gets {nics} network interfaces (EFA per card)")


@rule(
    id="capacity-block-placement-group",
    severity="warning",
    summary="Capacity Block instances are already placed in an UltraCluster: the stack ignores `network.placement` "
            "and creates no placement group (one would make the launch miss the block).",
    fix="set `network.placement: none` (or leave it unset)",
    source=CB_USING,
)
def capacity_block_placement_group(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, CapacityBlockCapacity):
        return
    if ctx.bp.network.placement in ("cluster", "partition", "spread"):
        yield Hit(("network", "placement"), f"`network.placement` `{ctx.bp.network.placement}` is ignored with a "
                  f"Capacity Block (`target.capacity.reservation_id` {t.capacity.reservation_id}): no placement group "
                  f"is created")


@rule(
    id="capacity-block-size",
    severity="error",
    summary="A Capacity Block holds at most 64 instances, and the compute groups cannot launch more instances than "
            "the block reserved.",
    fix="make the compute `count` total at most `target.capacity.instance_count` (64 per block)",
    source=CB_DOC,
)
def capacity_block_size(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, CapacityBlockCapacity):
        return
    limit = int(ctx.catalog.capacity_blocks["max_instances_per_block"])
    n = t.capacity.instance_count
    if n is not None and n > limit:
        yield Hit(("target", "capacity", "instance_count"),
                  f"`target.capacity.instance_count` is {n}; a Capacity Block has at most {limit} instances")
    nodes = _reserved_nodes(ctx)
    if n is not None and nodes > n:
        yield Hit(("target", "capacity", "instance_count"),
                  f"the groups in the block ask for {nodes} instances but `target.capacity.instance_count` is {n}",
                  f"lower the compute `count` to {n} or buy a larger block")
    elif n is None and nodes > limit:
        i, _ = _reserved(ctx)[0]
        yield Hit(("node_groups", i, "count"), f"the compute `count` total {nodes} exceeds the {limit} instances of one Capacity Block")


@rule(
    id="capacity-block-unused",
    severity="warning",
    summary="Fewer compute instances than the Capacity Block reserved: the whole block is billed.",
    fix="set the compute `count` to `target.capacity.instance_count`",
    source=CB_USING,
)
def capacity_block_unused(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, CapacityBlockCapacity) or t.capacity.instance_count is None:
        return
    nodes = _reserved_nodes(ctx)
    if nodes < t.capacity.instance_count:
        yield Hit(("target", "capacity", "instance_count"),
                  f"`target.capacity.instance_count` is {t.capacity.instance_count} but the groups in the block launch {nodes} "
                  f"(sum of their `count`)")


@rule(
    id="capacity-block-instance-type",
    severity="error",
    summary="Capacity Blocks exist only for some accelerated instance types (catalog: `capacity_blocks.supported`).",
    fix="use an instance type offered as Capacity Blocks (p5, p5e, p5en, p4d, trn1, trn2 ...) or `capacity: on-demand`",
    source=CB_DOC,
)
def capacity_block_instance_type(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, CapacityBlockCapacity):
        return
    for i, g in _reserved(ctx):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.capacity_blocks_supported is False:
            yield Hit(("node_groups", i, "instance_type"), f"`{it.name}` (`node_groups.{i}.instance_type`) is not "
                      f"offered as a Capacity Block")


@rule(
    id="capacity-single-instance-type",
    severity="error",
    summary="A Capacity Block or capacity reservation covers one instance type; all the groups it is for must use it.",
    fix="use one instance type for every compute group, or split the cluster into one blueprint per reservation",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-using.html",
)
def capacity_single_instance_type(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, (CapacityBlockCapacity, ReservationCapacity)):
        return
    first: tuple[int, str] | None = None
    for i, g in _reserved(ctx):
        if not g.instance_type:
            continue
        if first is None:
            first = (i, g.instance_type)
        elif g.instance_type != first[1]:
            yield Hit(("node_groups", i, "instance_type"),
                      f"`node_groups.{i}.instance_type` `{g.instance_type}` differs from `node_groups.{first[0]}` "
                      f"(`{first[1]}`); `{t.capacity.reservation_id}` reserves one instance type")


@rule(
    id="reservation-vs-placement-group",
    severity="warning",
    summary="The stack ignores `network.placement` with a capacity reservation: it creates no new placement group (one "
            "would miss the reservation) and launches into the group the reservation was created in, if any.",
    fix="set `target.capacity.placement_group` to the reservation's placement group and `network.placement: cluster`, "
        "or `network.placement: none` for a reservation without one",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html",
)
def reservation_vs_placement_group(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, ReservationCapacity):
        return
    placement = ctx.bp.network.placement
    pg = t.capacity.placement_group
    if placement in ("cluster", "partition", "spread") and pg is None:
        yield Hit(("network", "placement"),
                  f"`network.placement` `{placement}` is ignored: reservation `{t.capacity.reservation_id}` names no "
                  f"placement group (`target.capacity.placement_group`), so no new one is created")
    elif placement == "none" and pg is not None:
        yield Hit(("target", "capacity", "placement_group"),
                  f"`network.placement: none` is ignored: the nodes launch into `{pg}`, the placement group of "
                  f"reservation `{t.capacity.reservation_id}`", "set `network.placement: cluster`")
    elif placement in ("partition", "spread") and pg is not None:
        yield Hit(("network", "placement"), f"`network.placement` `{placement}` is ignored: the nodes launch into the "
                  f"reservation's cluster placement group `{pg}`", "set `network.placement: cluster`")


@rule(
    id="reservation-count",
    severity="error",
    summary="The compute groups cannot launch more instances than the capacity reservation holds.",
    fix="lower the compute `count` or grow the reservation",
    source=PC_CAPACITY,
)
def reservation_count(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, ReservationCapacity) or t.capacity.instance_count is None:
        return
    nodes = _reserved_nodes(ctx)
    if nodes > t.capacity.instance_count:
        yield Hit(("target", "capacity", "instance_count"),
                  f"the groups in the reservation launch {nodes} instances but reservation `{t.capacity.reservation_id}` holds "
                  f"{t.capacity.instance_count}")


@rule(
    id="spot-supported",
    severity="error",
    summary="`capacity: spot` needs instance types sold as Spot (catalog `spot`).",
    fix="use `capacity: on-demand`, a Capacity Block or a reservation for this instance type",
    source="https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html",
)
def spot_supported(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, SpotCapacity):
        return
    for i, g in enumerate(ctx.bp.node_groups):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.spot is False:
            yield Hit(("node_groups", i, "instance_type"), f"`{it.name}` (`node_groups.{i}.instance_type`) is not "
                      f"offered as Spot")


@rule(
    id="spot-multi-node",
    severity="warning",
    summary="A multi-node EFA job on Spot stops when any one instance is reclaimed (two-minute notice).",
    fix="use on-demand capacity, a Capacity Block or a reservation for multi-node training; checkpoint often",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-interruptions.html",
)
def spot_multi_node(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is not None and isinstance(t.capacity, SpotCapacity) and _efa(ctx) is not None and _compute_nodes(ctx) > 1:
        yield Hit(("target", "capacity"), f"`target.capacity` is `spot` for {_compute_nodes(ctx)} EFA training nodes")


@rule(
    id="vpc-cidr-layout",
    severity="error",
    summary="The new VPC's subnets (compute, public NAT, EKS control plane) must lie inside `vpc.cidr_block` and must "
            "not overlap each other.",
    fix="choose the subnet CIDRs as disjoint parts of `target.vpc.cidr_block`",
    source="https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html",
)
def vpc_cidr_layout(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or t.vpc.vpc_id:
        return
    vpc = ipaddress.ip_network(t.vpc.cidr_block)
    if vpc.version != 4 or vpc.prefixlen < 16 or vpc.prefixlen > 28:
        yield Hit(("target", "vpc", "cidr_block"), f"`target.vpc.cidr_block` `{vpc}` must be an IPv4 /16 to /28",
                  "use an IPv4 block from /16 to /28, e.g. `10.0.0.0/16`")
    used = ["subnet_cidr_block"]
    if t.vpc.nat_gateway:
        used.append("public_subnet_cidr_block")
    if ctx.bp.orchestrator.kind == "kubernetes" and getattr(t.vpc, "control_plane_subnet_cidr_block", None):
        used.append("control_plane_subnet_cidr_block")  # EKS needs a second-AZ subnet
    nets = {name: ipaddress.ip_network(getattr(t.vpc, name)) for name in used}
    for j, (name, net) in enumerate(nets.items()):
        if net.version != vpc.version or not net.subnet_of(vpc):  # type: ignore[arg-type]
            yield Hit(("target", "vpc", name), f"`target.vpc.{name}` `{net}` is not inside `target.vpc.cidr_block` `{vpc}`")
            continue
        for other, onet in list(nets.items())[:j]:
            if onet.version == net.version and net.overlaps(onet):  # type: ignore[arg-type]
                yield Hit(("target", "vpc", name), f"`target.vpc.{name}` `{net}` overlaps `target.vpc.{other}` `{onet}`")


@rule(
    id="subnet-ip-capacity",
    severity="error",
    summary="The compute subnet must have an address for every instance (AWS keeps 5 addresses of each subnet).",
    fix="use a larger `target.vpc.subnet_cidr_block` (a /20 holds 4091 instances)",
    source="https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html",
)
def subnet_ip_capacity(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or t.vpc.subnet_id:
        return
    sub = ipaddress.ip_network(t.vpc.subnet_cidr_block)
    usable = sub.num_addresses - 5
    need = sum(g.count or 0 for g in ctx.bp.node_groups) + sum(1 for s in ctx.bp.storage if getattr(s, "fsx", None))
    if need > usable:
        yield Hit(("target", "vpc", "subnet_cidr_block"),
                  f"`target.vpc.subnet_cidr_block` `{sub}` has {usable} usable addresses but the cluster needs at least {need}")


@rule(
    id="vpc-no-egress",
    severity="warning",
    summary="A new VPC without NAT gateway and nodes without public IPs cannot reach the internet: driver, EFA "
            "installer and container image downloads fail at boot.",
    fix="set `target.vpc.nat_gateway: true`, or provide VPC endpoints / a mirror and an AMI with everything installed",
    source="https://docs.aws.amazon.com/vpc/latest/userguide/vpc-nat-gateway.html",
)
def vpc_no_egress(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or t.vpc.vpc_id or t.vpc.nat_gateway:
        return
    if not any(g.public_ip for g in ctx.bp.node_groups):
        yield Hit(("target", "vpc", "nat_gateway"), "`target.vpc.nat_gateway` is false and no node group has `public_ip`")


OWN_TAGS = ("Name", "clusterforge:blueprint", "clusterforge:node-group", "clusterforge:role", "managed-by")
"""Tags the stack puts on every AWS resource (``stacks/naming.py``)."""


@rule(
    id="aws-tags",
    severity="error",
    summary="AWS allows 50 user tags per resource (clusterforge sets 5), keys up to 128 and values up to 256 "
            "characters, and reserves the `aws:` prefix; clusterforge's own tag keys cannot be reused.",
    fix="shorten or drop tags; do not start keys with `aws:`",
    source="https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html",
)
def aws_tags(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None:
        return
    reserved = len(OWN_TAGS)
    if len(t.tags) + reserved > 50:
        yield Hit(("target", "tags"), f"`target.tags` has {len(t.tags)} tags; with clusterforge's {reserved} that is "
                  f"more than 50 per resource")
    for k, v in t.tags.items():
        if k.lower().startswith("aws:"):
            yield Hit(("target", "tags", k), f"tag key `{k}` uses the reserved `aws:` prefix")
        elif k in OWN_TAGS or k.startswith("clusterforge:"):
            yield Hit(("target", "tags", k), f"tag key `{k}` in `target.tags` is set by clusterforge on every resource "
                      f"and would be overwritten", "rename the tag")
        elif len(k) > 128 or len(v) > 256:
            yield Hit(("target", "tags", k), f"tag `{k[:40]}` is too long (key {len(k)}/128, value {len(v)}/256 characters)")


def _min_versions(ctx: RuleContext) -> dict[str, str]:
    return dict(ctx.catalog.efa["software"]["p5_min_versions"])


@rule(
    id="efa-software-versions",
    severity="error",
    summary="EFA on p5-class instances needs CUDA >= 12.0, NCCL >= 2.18.0, aws-ofi-nccl >= 1.7.2 and EFA installer "
            ">= 1.29.0.",
    fix="raise `software.cuda`, `software.nccl`, `software.aws_ofi_nccl` and `software.efa_installer` to at least "
        "those versions",
    source="https://github.com/aws/aws-ofi-nccl/blob/2daf7d303aa139a03140aa530957d10521e4478d/doc/efa-env-var.md",
)
def efa_software_versions(ctx: RuleContext) -> Iterator[Hit]:
    if _efa(ctx) is None:
        return
    families = [g.instance_type for _, g in compute_groups(ctx.bp) if g.instance_type and g.instance_type.startswith(("p5", "p6"))]
    if not families:
        return
    st = ctx.cluster.software
    have = {"cuda": st.cuda, "nccl": st.nccl, "aws_ofi_nccl": st.aws_ofi_nccl, "efa_installer": st.efa_installer}
    for key, spec in _min_versions(ctx).items():
        need = version(str(spec).lstrip(">= "))
        got = version(have.get(key))
        if need and got and got < need:
            yield Hit(("software", key), f"`software.{key}` {have[key]} is older than {vstr(need)}, the minimum for EFA "
                      f"on `{families[0]}`", f"set `software.{key}` to {vstr(need)} or newer")


@rule(
    id="efa-device-plugin-version",
    severity="error",
    summary="The aws-efa-k8s-device-plugin must be new enough to recognise the EFA devices of every instance family "
            "(e.g. p6-b200 needs 0.5.6).",
    fix="raise `orchestrator.efa_device_plugin_version`",
    source="https://github.com/aws-ia/terraform-aws-eks-data-addons/issues/53",
)
def efa_device_plugin_version(ctx: RuleContext) -> Iterator[Hit]:
    orch = ctx.bp.orchestrator
    if _efa(ctx) is None or orch.kind != "kubernetes":
        return
    have = version(orch.efa_device_plugin_version)  # type: ignore[union-attr]
    minimums = ctx.catalog.extras["efa_k8s_device_plugin_minimums"]["families"]
    for _, g in compute_groups(ctx.bp):
        family = (g.instance_type or "").split(".")[0]
        need = version(minimums.get(family))
        if need and (have is None or have < need):
            yield Hit(("orchestrator", "efa_device_plugin_version"),
                      f"`orchestrator.efa_device_plugin_version` {orch.efa_device_plugin_version} does not support "  # type: ignore[union-attr]
                      f"`{g.instance_type}` (needs {vstr(need)})", f"set `efa_device_plugin_version: v{vstr(need)}`")
            return


@rule(
    id="eks-system-node-group",
    severity="warning",
    summary="An EKS cluster needs a non-GPU node group for CoreDNS, operators and controllers; GPU/EFA nodes are "
            "tainted for GPU workloads.",
    fix="add a small `role: controller` group (e.g. 2 x m6i.xlarge)",
    source="https://github.com/pulumi/pulumi-eks/blob/7bf0c1b/examples/efa/index.ts",
)
def eks_system_node_group(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None or ctx.bp.orchestrator.kind != "kubernetes":
        return
    if all(r.has_gpus for r in ctx.cluster.groups):
        yield Hit(("orchestrator", "kind"), "`orchestrator.kind` is `kubernetes` (EKS) but every node group has GPUs; "
                  "cluster add-ons would land on (or be kept off) the GPU nodes")


# --- which groups a reservation or Capacity Block is for ---------------------------------------

@rule(
    id="capacity-node-groups",
    severity="error",
    summary="A reservation or Capacity Block serves one instance type: the groups it is for must be clear. They are "
            "`target.capacity.node_groups`, or else the `compute` groups; the others launch on demand.",
    fix="list the groups that launch into the reservation in `target.capacity.node_groups`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html",
)
def capacity_node_groups(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, (CapacityBlockCapacity, ReservationCapacity)):
        return
    names = t.capacity.node_groups
    known = [g.name for g in ctx.bp.node_groups]
    if names is not None:
        for j, name in enumerate(names):
            if name not in known:
                m = difflib.get_close_matches(name, known, n=1)
                yield Hit(("target", "capacity", "node_groups", j),
                          f"`target.capacity.node_groups.{j}` `{name}` is not a node group"
                          f"{f' (did you mean `{m[0]}`?)' if m else ''}", f"use one of {', '.join(known)}")
        if not names:
            yield Hit(("target", "capacity", "node_groups"), "`target.capacity.node_groups` is empty: no group would "
                      f"use reservation `{t.capacity.reservation_id}`")
        return
    reserved = _reserved(ctx)
    if not reserved:
        yield Hit(("target", "capacity"), f"no `compute` group would use reservation `{t.capacity.reservation_id}`")
        return
    types = {g.instance_type for _, g in reserved}
    for i, g in enumerate(ctx.bp.node_groups):
        if not g.compute and g.instance_type in types:
            yield Hit(("node_groups", i, "instance_type"),
                      f"{g.role} group `{g.name}` has the reserved type `{g.instance_type}`: is it in reservation "
                      f"`{t.capacity.reservation_id}` or on demand?")


# --- instance types ----------------------------------------------------------------------------

def _suggest(name: str, known: frozenset[str]) -> str:
    low = {k.lower(): k for k in known}
    if name.lower() in low:
        return f" (did you mean `{low[name.lower()]}`?)"
    m = difflib.get_close_matches(name.lower(), list(low), n=1, cutoff=0.7)
    return f" (did you mean `{low[m[0]]}`?)" if m else ""


@rule(
    id="instance-type-exists",
    severity="error",
    summary="Login, controller and storage groups may use any EC2 instance type, but it must exist (the names "
            "pulumi_aws ships from the EC2 API model); compute groups use the hardware catalog.",
    fix="write the instance type as EC2 names it (`aws ec2 describe-instance-types`), in lower case",
    source="https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html",
)
def instance_type_exists(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    names = ec2_instance_type_names()
    for i, g in enumerate(ctx.bp.node_groups):
        t = g.instance_type
        if g.compute or not t or t in names or instance_spec(g, ctx.catalog) is not None:
            continue
        if accelerator_family(t, ctx.catalog):
            continue  # instance-type-accelerator-not-nvidia names the accelerator
        yield Hit(("node_groups", i, "instance_type"),
                  f"{g.role} group `{g.name}`: `{t}` is not an EC2 instance type{_suggest(t, names)}")


@rule(
    id="instance-type-accelerator-not-nvidia",
    severity="error",
    summary="Inferentia, Trainium, Gaudi, Qualcomm AI 100, FPGA and AMD GPU families carry accelerators that the "
            "NVIDIA stack (driver, CUDA, NCCL, GPU Operator) does not drive.",
    fix="use an NVIDIA GPU type (p4d, p5, p5e, p5en, p6, g5, g6e ...) or a general-purpose type for this group",
    source="https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html",
)
def instance_type_accelerator_not_nvidia(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        what = accelerator_family(g.instance_type or "", ctx.catalog)
        if what and instance_spec(g, ctx.catalog) is None:
            yield Hit(("node_groups", i, "instance_type"),
                      f"group `{g.name}`: `{g.instance_type}` carries {what}, not NVIDIA GPUs")


@rule(
    id="ami-architecture",
    severity="error",
    summary="`target.ami_id` is one AMI for every node group, so all groups must share its CPU architecture "
            "(x86_64 or arm64).",
    fix="unset `target.ami_id` (each group gets the right AMI from SSM) or use one architecture for every group",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ComponentsAMIs.html",
)
def ami_architecture(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not t.ami_id:
        return
    archs = {(instance_arch(g.instance_type, ctx.catalog), i) for i, g in enumerate(ctx.bp.node_groups) if g.instance_type}
    if len({a for a, _ in archs}) > 1:
        first = min(archs, key=lambda x: x[1])
        for arch, i in sorted(archs, key=lambda x: x[1]):
            if arch != first[0]:
                g = ctx.bp.node_groups[i]
                yield Hit(("target", "ami_id"), f"`target.ami_id` {t.ami_id} serves `{g.instance_type}` ({arch}, "
                          f"`node_groups.{i}`) and `{ctx.bp.node_groups[first[1]].instance_type}` ({first[0]}) alike")
                return


@rule(
    id="kata-needs-kvm",
    severity="error",
    summary="Kata Containers and VM sandboxes need KVM: bare-metal (`.metal`) instance types, or on plain EC2 the "
            "families with nested virtualization (catalog `kvm`, enabled by the stack); EKS managed node groups do "
            "not enable nested virtualization.",
    fix="use a `.metal` instance type for this group, or `sandbox: gvisor` / `container`",
    source="https://github.com/kata-containers/kata-containers/blob/main/docs/install/aws-installation-guide.md",
)
def kata_needs_kvm(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    eks = isinstance(ctx.bp.orchestrator, KubernetesOrchestrator)
    for i, g in enumerate(ctx.bp.node_groups):
        t = g.instance_type or ""
        if g.sandbox.runtime in ("kata", "vm") and t and kvm_source(t, eks, ctx.catalog) is None:
            nested = " (EKS managed node groups do not enable its nested virtualization)" if kvm_source(
                t, False, ctx.catalog) else ""
            yield Hit(("node_groups", i, "sandbox"), f"`node_groups.{i}.sandbox` `{g.sandbox.runtime}` needs KVM but "
                      f"`{t}` is a virtual machine without it{nested}")


# --- fabric ------------------------------------------------------------------------------------

@rule(
    id="gpudirect-rdma-unavailable",
    severity="error",
    summary="`network.gpudirect_rdma.enabled: true` asks for GPUDirect RDMA, which needs an RDMA fabric: EFA with "
            "RDMA read on the compute instance type (not g5, for instance), InfiniBand or RoCE; Ethernet has none.",
    fix="remove `network.gpudirect_rdma.enabled` (or set it to false), or use an instance type whose EFA has RDMA read",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types",
)
def gpudirect_rdma_unavailable(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if "enabled" not in net.gpudirect_rdma.model_fields_set or not net.gpudirect_rdma.enabled:
        return
    if net.fabric == "ethernet":
        yield Hit(("network", "gpudirect_rdma", "enabled"), "GPUDirect RDMA is requested on an Ethernet fabric",
                  "remove `network.gpudirect_rdma.enabled` (or set it to false): GPUDirect RDMA needs an EFA, "
                  "InfiniBand or RoCE `network.fabric`")
        return
    if net.fabric != "efa":
        return
    for i, g in compute_groups(ctx.bp):
        it = instance_spec(g, ctx.catalog)
        if it is not None and it.gpu_count and it.efa_rdma_read is False:
            yield Hit(("network", "gpudirect_rdma", "enabled"), f"GPUDirect RDMA is requested but the EFA of "
                      f"`{it.name}` (`node_groups.{i}`) has no RDMA read")


@rule(
    id="placement-group-mixed-types",
    severity="warning",
    summary="One cluster placement group for several instance types raises the risk of InsufficientInstanceCapacity: "
            "AWS recommends a single instance type per cluster placement group.",
    fix="use one instance type for the compute groups, or launch them in separate blueprints",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html",
)
def placement_group_mixed_types(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or ctx.bp.network.placement != "cluster" or isinstance(t.capacity, CapacityBlockCapacity):
        return
    if isinstance(t.capacity, ReservationCapacity) and t.capacity.placement_group is None:
        return  # no placement group at all
    seen: dict[str, int] = {}
    for i, g in compute_groups(ctx.bp):
        if g.instance_type and g.instance_type not in seen:
            seen[g.instance_type] = i
    if len(seen) > 1:
        i = max(seen.values())
        yield Hit(("node_groups", i, "instance_type"), f"the cluster placement group holds {len(seen)} instance types: "
                  f"{', '.join(f'`{k}`' for k in seen)}")


# --- storage -----------------------------------------------------------------------------------

@rule(
    id="fsx-efa-client",
    severity="error",
    summary="An EFA-enabled FSx for Lustre file system needs clients set up for EFA (Lustre client with the EFA LNet "
            "network); clusterforge mounts FSx over TCP only, so the EFA capacity would go unused.",
    fix="remove `efa_enabled` (the file system is reached over TCP)",
    source="https://docs.aws.amazon.com/fsx/latest/LustreGuide/efa-file-systems.html",
)
def fsx_efa_client(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    for i, s in enumerate(ctx.bp.storage):
        if isinstance(s, LustreStorage) and s.fsx is not None and s.fsx.efa_enabled:
            yield Hit(("storage", i, "fsx", "efa_enabled"), f"`storage.{i}.fsx.efa_enabled` is true but the nodes "
                      "would mount it over TCP")


@rule(
    id="fsx-backup-s3",
    severity="error",
    summary="FSx for Lustre cannot back up a file system linked to an S3 data repository.",
    fix="set `automatic_backup_retention_days: 0` (S3 holds the data), or remove `s3`",
    source="https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateBackup.html",
)
def fsx_backup_s3(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.catalog.aws["fsx"]["backups_with_s3_repository"]:
        return
    for i, s in enumerate(ctx.bp.storage):
        f = s.fsx if isinstance(s, LustreStorage) else None
        if f is not None and f.s3 is not None and (f.automatic_backup_retention_days or 0) > 0:
            yield Hit(("storage", i, "fsx", "automatic_backup_retention_days"),
                      f"`storage.{i}.fsx.automatic_backup_retention_days` is {f.automatic_backup_retention_days} on a "
                      f"file system linked to `{f.s3.data_repository_path}`")


@rule(
    id="mount-over-image-dir",
    severity="error",
    summary="A mount must not cover `/opt` or the directories AWS images keep there: EFA (`/opt/amazon`), the OFI "
            "plugin and the Deep Learning AMI's instance-store volume (`/opt/dlami`).",
    fix="mount under a directory of its own, e.g. `/fsx`, `/lustre`, `/scratch`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html",
)
def mount_over_image_dir(ctx: RuleContext) -> Iterator[Hit]:
    if _aws(ctx) is None:
        return
    dirs = [d.rstrip("/") for d in ctx.catalog.aws["image_dirs"]["dirs"]]
    ami_volume = str(ctx.catalog.aws["dlami"]["nvme_location"]).rstrip("/")
    for m in mounts(ctx.bp):
        if m.path[0] == "node_groups" and m.mount == ami_volume:
            continue  # scratch on the DLAMI's own volume
        hit = next((d for d in dirs if m.mount == d or d.startswith(m.mount + "/") or
                    (d != "/opt" and m.mount.startswith(d + "/"))), None)
        if hit:
            yield Hit(m.path, f"`{fld(m.path)}` `{m.mount}` ({m.what}) would cover `{hit}`")


# --- EKS ---------------------------------------------------------------------------------------

def _today() -> datetime.date:
    return datetime.date.today()


EKS_VERSIONS = "https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html"


def _eks_version_dates(ctx: RuleContext) -> tuple[str, datetime.date | None, datetime.date | None, list[str]] | None:
    """``(version, end of standard support, end of extended support, versions in standard support today)`` of an EKS
    blueprint (catalog ``eks_versions``), or ``None`` for other blueprints."""
    orch = ctx.bp.orchestrator
    if _aws(ctx) is None or not isinstance(orch, KubernetesOrchestrator):
        return None
    ev = ctx.catalog.aws["eks_versions"]
    today = _today()
    current = sorted((v for v, d in ev["end_of_standard_support"].items() if d >= today), key=lambda v: version(v) or ())
    return (orch.version, ev["end_of_standard_support"].get(orch.version),
            ev.get("end_of_extended_support", {}).get(orch.version), current)


def _older_than_catalog(ctx: RuleContext, ver: str) -> tuple[str, datetime.date | None] | None:
    """``(oldest catalogued EKS version, its end of extended support)`` when ``ver`` is older than every version of the
    catalog's ``eks_versions``, else ``None``. EKS versions reach their ends in release order (each has 14 months of
    standard and 12 of extended support: https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html), so
    a version older than one whose extended support ended has ended too."""
    ev = ctx.catalog.aws["eks_versions"]
    oldest = min(ev["end_of_standard_support"], key=lambda v: version(v) or ())
    if (version(ver) or ()) >= (version(oldest) or ()):
        return None
    return oldest, ev.get("end_of_extended_support", {}).get(oldest)


def _newest_fix(current: list[str]) -> str | None:
    return f'set `orchestrator.version: "{current[-1]}"`' if current else None


@rule(
    id="eks-version-support",
    severity="warning",
    summary="The EKS Kubernetes version is past its end of standard support (catalog `eks_versions`): the cluster "
            "runs on extended support, billed extra per cluster hour, and is upgraded automatically after it.",
    fix="set `orchestrator.version` to a version in standard support",
    source=EKS_VERSIONS,
)
def eks_version_support(ctx: RuleContext) -> Iterator[Hit]:
    found = _eks_version_dates(ctx)
    if found is None:
        return
    ver, end, extended_end, current = found
    today = _today()
    if end is None:
        older = _older_than_catalog(ctx, ver)
        if older is not None and (older[1] is None or older[1] >= today):  # an ended one is eks-version-ended's
            yield Hit(("orchestrator", "version"), f"`orchestrator.version` {ver} is older than every EKS version in the catalog",
                      _newest_fix(current))
        return
    if end < today and (extended_end is None or extended_end >= today):
        until = f" until {extended_end.isoformat()}" if extended_end is not None else ""
        yield Hit(("orchestrator", "version"), f"`orchestrator.version` {ver}: EKS standard support ended on "
                  f"{end.isoformat()}; the cluster runs on extended support{until}, billed extra per cluster hour",
                  _newest_fix(current))


@rule(
    id="eks-version-ended",
    severity="error",
    summary="The EKS Kubernetes version is past its end of extended support (catalog `eks_versions`): EKS creates no "
            "new cluster on it, and upgrades existing control planes automatically.",
    fix="set `orchestrator.version` to a version in standard support",
    source=EKS_VERSIONS,
)
def eks_version_ended(ctx: RuleContext) -> Iterator[Hit]:
    found = _eks_version_dates(ctx)
    if found is None:
        return
    ver, end, extended_end, current = found
    older = _older_than_catalog(ctx, ver) if end is None else None
    if older is not None and older[1] is not None and older[1] < _today():
        yield Hit(("orchestrator", "version"), f"`orchestrator.version` {ver} is older than {older[0]}, whose EKS "
                  f"extended support ended on {older[1].isoformat()}; EKS no longer creates clusters on it",
                  _newest_fix(current))
    elif extended_end is not None and extended_end < _today():
        yield Hit(("orchestrator", "version"), f"`orchestrator.version` {ver}: EKS extended support ended on "
                  f"{extended_end.isoformat()}; EKS no longer creates clusters on it", _newest_fix(current))


GPU_OPERATOR_SUPPORT = "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html"


def _gpu_operator(ctx: RuleContext) -> tuple[KubernetesOrchestrator, dict[str, Any]] | None:
    """The orchestrator and the catalog's GPU Operator rows of an EKS blueprint that installs the operator (some node
    group has GPUs), else ``None``."""
    orch = ctx.bp.orchestrator
    if _aws(ctx) is None or not isinstance(orch, KubernetesOrchestrator) or not any(r.has_gpus for r in ctx.cluster.groups):
        return None
    return orch, ctx.catalog.extras["kubernetes_addons"]["gpu_operator"]["releases"]


@rule(
    id="gpu-operator-kubernetes",
    severity="error",
    summary="The NVIDIA GPU Operator release must be one NVIDIA's platform-support matrix lists for the cluster's "
            "Kubernetes version on Amazon EKS (catalog `kubernetes_addons.gpu_operator`); an unlisted pairing is "
            "untested, and an old operator on a newer Kubernetes can use APIs that Kubernetes has removed.",
    fix="unset `orchestrator.gpu_operator_version` (the newest release listed for the version is chosen)",
    source=GPU_OPERATOR_SUPPORT,
)
def gpu_operator_kubernetes(ctx: RuleContext) -> Iterator[Hit]:
    found = _gpu_operator(ctx)
    if found is None:
        return
    orch, rows = found
    ver = orch.version
    chosen = gpu_operator_for_kubernetes(ver, rows)
    fix = (f"set `orchestrator.gpu_operator_version: {chosen}` or unset it" if chosen
           else f"set `orchestrator.version` to one a GPU Operator release lists ({_listed_versions(rows)})")
    if orch.gpu_operator_version is None:
        yield Hit(("orchestrator", "version"), f"`orchestrator.version` {ver}: no GPU Operator release in the catalog "
                  f"lists Kubernetes {ver} on Amazon EKS", fix)
        return
    release = gpu_operator_release(orch.gpu_operator_version, rows)
    if release is None:
        yield Hit(("orchestrator", "gpu_operator_version"), f"`orchestrator.gpu_operator_version` "
                  f"{orch.gpu_operator_version}: the catalog has no platform-support row for its release "
                  f"(listed: {', '.join(sorted(rows, key=lambda m: version(m) or ()))})", fix)
        return
    major, row = release
    if not gpu_operator_supports(row, ver):
        lo, hi = row["eks_kubernetes"]
        yield Hit(("orchestrator", "gpu_operator_version"), f"`orchestrator.gpu_operator_version` "
                  f"{orch.gpu_operator_version}: NVIDIA lists GPU Operator {major} for Kubernetes {lo}–{hi} on Amazon "
                  f"EKS, not {ver} (`orchestrator.version`)", fix)


def _listed_versions(rows: dict[str, Any]) -> str:
    """The Kubernetes span the supported and deprecated GPU Operator releases list on EKS (``1.32–1.36``)."""
    spans = [r["eks_kubernetes"] for r in rows.values() if r["status"] != "end-of-support"]
    if not spans:
        return "none"
    return f"{min((s[0] for s in spans), key=lambda v: version(v) or ())}–{max((s[1] for s in spans), key=lambda v: version(v) or ())}"


@rule(
    id="gpu-operator-support",
    severity="warning",
    summary="The pinned NVIDIA GPU Operator release is past NVIDIA's end of support (catalog "
            "`kubernetes_addons.gpu_operator`): it gets no bug or CVE fixes, and neither do the device plugin and DCGM "
            "exporter it deploys.",
    fix="raise `orchestrator.gpu_operator_version` to a supported release (NVIDIA supports upgrades to the next major "
        "release only)",
    source="https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html#operator-life-cycle-policy",
)
def gpu_operator_support(ctx: RuleContext) -> Iterator[Hit]:
    found = _gpu_operator(ctx)
    if found is None or found[0].gpu_operator_version is None:
        return
    orch, rows = found
    release = gpu_operator_release(str(orch.gpu_operator_version), rows)
    if release is not None and release[1]["status"] == "end-of-support":
        chosen = gpu_operator_for_kubernetes(orch.version, rows)
        yield Hit(("orchestrator", "gpu_operator_version"), f"`orchestrator.gpu_operator_version` "
                  f"{orch.gpu_operator_version}: GPU Operator {release[0]} is past NVIDIA's end of support",
                  f"set `orchestrator.gpu_operator_version: {chosen}`" if chosen else None)


EKS_CAPACITY_BLOCKS = "https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html"


@rule(
    id="eks-capacity-block-window",
    severity="warning",
    summary="An EKS managed node group in a Capacity Block follows the block's window: `up` reads the block's start "
            "and end; before the start the group is created with 0 nodes and an Auto Scaling scheduled action scales "
            "it to `count` at the start; EKS scales it to 0 forty minutes before the end; a change that replaces its "
            "nodes needs `count: 0` first (EKS replaces nodes surge-first and the block has no spare slot).",
    fix="nothing to change if that is intended: run `up` before the block starts (the nodes come at its start) or "
        "during it, and set `count: 0` before changes that replace these nodes",
    source=EKS_CAPACITY_BLOCKS,
)
def eks_capacity_block_window(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not isinstance(t.capacity, CapacityBlockCapacity) or not isinstance(ctx.bp.orchestrator,
                                                                                         KubernetesOrchestrator):
        return
    for i, g in _reserved(ctx):
        yield Hit(("node_groups", i, "name"), f"`node_groups.{i}` (`{g.name}`, {g.count} nodes) is an EKS managed node "
                  f"group in Capacity Block `{t.capacity.reservation_id}`: created before the block with 0 nodes and "
                  f"scaled to {g.count} at its start, to 0 forty minutes before its end; node-replacing changes need "
                  "`count: 0` first")


EKS_LAUNCH_TEMPLATES = "https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html"


@rule(
    id="eks-ami-id",
    severity="error",
    summary="`target.ami_id` does not apply to EKS managed node groups: clusterforge launches them with EKS's own "
            "accelerated Amazon Linux 2023 AMI, whose bootstrap merges the node group's user data.",
    fix="unset `target.ami_id` (EKS picks its NVIDIA AMI for the Kubernetes version)",
    source=EKS_LAUNCH_TEMPLATES,
)
def eks_ami_id(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not t.ami_id or not isinstance(ctx.bp.orchestrator, KubernetesOrchestrator):
        return
    yield Hit(("target", "ami_id"), f"`target.ami_id` {t.ami_id} is set but `orchestrator.kind` is `kubernetes`: "
              "EKS managed node groups launch EKS's own AMI")


@rule(
    id="eks-control-plane-subnets",
    severity="error",
    summary="An EKS cluster in an existing subnet (`target.vpc.subnet_id`) needs `target.vpc.control_plane_subnet_ids`: "
            "the control plane wants subnets in at least two availability zones, and clusterforge creates none in a "
            "VPC it does not own.",
    fix="list two existing subnets in different availability zones under `target.vpc.control_plane_subnet_ids`",
    source="https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html",
)
def eks_control_plane_subnets(ctx: RuleContext) -> Iterator[Hit]:
    t = _aws(ctx)
    if t is None or not t.vpc.subnet_id or not isinstance(ctx.bp.orchestrator, KubernetesOrchestrator):
        return
    if not t.vpc.control_plane_subnet_ids:
        yield Hit(("target", "vpc", "subnet_id"), f"`target.vpc.subnet_id` {t.vpc.subnet_id} is an existing subnet and "
                  "`orchestrator.kind` is `kubernetes`, but `target.vpc.control_plane_subnet_ids` is empty")


@rule(
    id="eks-api-open",
    severity="warning",
    summary="`orchestrator.api_access_cidrs` opens the EKS API endpoint to the whole internet; list the networks "
            "that deploy and operate the cluster instead (the endpoint is private when the list is empty).",
    fix="replace 0.0.0.0/0 (or ::/0) in `orchestrator.api_access_cidrs` with your deploy machine's or office's CIDR",
    source="https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html",
)
def eks_api_open(ctx: RuleContext) -> Iterator[Hit]:
    orch = ctx.bp.orchestrator
    if _aws(ctx) is None or not isinstance(orch, KubernetesOrchestrator):
        return
    for i, cidr in enumerate(orch.api_access_cidrs):
        if ipaddress.ip_network(cidr, strict=False).prefixlen == 0:
            yield Hit(("orchestrator", "api_access_cidrs", i),
                      f"`orchestrator.api_access_cidrs` has {cidr}: anyone can reach the Kubernetes API endpoint")
