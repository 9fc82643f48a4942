"""AWS facts derived from a blueprint that the rules and the Pulumi program share: which node
groups a reservation or Capacity Block is for, and whether a group's nodes get EFA.

Pure functions of the blueprint and the hardware catalog; nothing raises for a blueprint the
models accepted.
"""

from __future__ import annotations

import re

from .catalog import Catalog, catalog
from .hardware import instance_spec
from .models import (
    AwsTarget,
    Blueprint,
    Capacity,
    CapacityBlockCapacity,
    EfaNetwork,
    NodeGroup,
    OnDemandCapacity,
    ReservationCapacity,
)

__all__ = ["accelerator_family", "capacity_for", "efa_group", "instance_arch", "kvm_source", "reserved_groups"]


def reserved_groups(bp: Blueprint) -> list[NodeGroup]:
    """The node groups a targeted reservation or Capacity Block is for: ``target.capacity.node_groups``
    when set (unknown names are skipped; a rule reports them), else the ``compute`` groups. Empty
    for on-demand and spot capacity and for on-prem blueprints."""
    t = bp.target
    if not isinstance(t, AwsTarget) or not isinstance(t.capacity, (CapacityBlockCapacity, ReservationCapacity)):
        return []
    names = t.capacity.node_groups
    if names is None:
        return [g for g in bp.node_groups if g.compute]
    return [g for g in bp.node_groups if g.name in names]


def capacity_for(bp: Blueprint, g: NodeGroup) -> Capacity:
    """How group ``g`` buys its instances: the target's reservation / Capacity Block only for the
    groups it is for (:func:`reserved_groups`), on demand for the others (a login or controller
    type cannot launch into a block of GPU instances); spot and on-demand apply to every group.

    Source: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html
    """
    t = bp.target
    assert isinstance(t, AwsTarget)
    cap = t.capacity
    if isinstance(cap, (CapacityBlockCapacity, ReservationCapacity)) and g.name not in {r.name for r in reserved_groups(bp)}:
        return OnDemandCapacity(type="on-demand")
    return cap


def efa_group(bp: Blueprint, g: NodeGroup, cat: Catalog | None = None) -> bool:
    """True when the group's nodes get EFA interfaces: ``network.fabric: efa``, an instance type
    the catalog lists with EFA, and ``network.efa.interfaces`` not 0. Only these nodes get the
    EFA software, libfabric and OFI environment."""
    net = bp.network
    if not isinstance(net, EfaNetwork) or not bp.is_aws:
        return False
    it = instance_spec(g, cat)
    return it is not None and it.efa_supported and net.efa.interfaces != 0


_ARM_FAMILY = re.compile(r"^[a-z]+\d+g[a-z]*\.")
"""Graviton families carry a ``g`` after the generation digit (``m7g``, ``c8gd``, ``g5g``):
https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html"""


def instance_arch(instance_type: str, cat: Catalog | None = None) -> str:
    """``arm64`` or ``x86_64`` for an EC2 instance type: the catalog's ``architecture`` / CPU when it
    lists the type (Grace, Graviton), else the Graviton family naming rule."""
    try:
        raw = (cat or catalog()).instance_type(instance_type).raw
    except KeyError:
        raw = {}
    cpu = f"{raw.get('architecture', '')} {raw.get('cpu', '')}"
    if "arm64" in cpu or "Grace" in cpu or "Graviton" in cpu or _ARM_FAMILY.match(instance_type):
        return "arm64"
    return "x86_64"


def accelerator_family(instance_type: str, cat: Catalog | None = None) -> str | None:
    """The non-NVIDIA accelerator an instance type's family carries (catalog
    ``non_nvidia_accelerators``, e.g. ``inf2.48xlarge`` -> ``AWS Inferentia (Neuron SDK)``), or ``None``."""
    table = (cat or catalog()).aws["non_nvidia_accelerators"]
    family = instance_type.split(".")[0].lower()
    for prefix, what in sorted(table.items(), key=lambda kv: -len(kv[0])):
        if prefix == "source":
            continue
        if family == prefix or re.fullmatch(rf"{re.escape(prefix)}\d+[a-z]*", family):
            return str(what)
    return None


def kvm_source(instance_type: str, eks: bool, cat: Catalog | None = None) -> str | None:
    """Where a node of ``instance_type`` gets KVM from: ``metal`` (bare-metal types), ``nested``
    (a family of the catalog's ``kvm.nested_virtualization_families`` on EC2, with nested
    virtualization enabled in the launch template; EKS managed node groups ignore it), or ``None``."""
    t = instance_type.lower()
    if t.endswith(".metal") or ".metal-" in t:
        return "metal"
    kvm = (cat or catalog()).aws["kvm"]
    if t.split(".")[0] in kvm["nested_virtualization_families"] and (not eks or kvm["eks_managed_node_groups_nested"]):
        return "nested"
    return None
