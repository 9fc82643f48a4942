"""The resolved cluster: a blueprint with everything derived from it computed once.

:func:`resolve` turns a :class:`~blueprints.models.Blueprint` into a :class:`ResolvedCluster`
holding, per node group (:class:`ResolvedGroup`, in document order), the group's hardware
(:func:`blueprints.hardware.group_hardware`), its complete node settings
(:func:`blueprints.settings.node_settings`) and the predicates that decide which groups count for
what (compute, GPU, training, EFA), plus the cluster-wide IPoIB address assignment. Every consumer
(the rules through ``RuleContext.cluster``, the Pulumi program and its renderer, the Ansible
renderer, the validation planner, judge context and node checks) reads these instead of deriving
them again, so they cannot disagree about a group.

Each predicate is defined once, here:

========================  ===============================================================
``ResolvedGroup.compute``   ``role: compute`` (the nodes that run jobs)
``ResolvedGroup.has_gpus``  at least one accelerator per node, any vendor
``ResolvedGroup.training``  compute, with accelerators, not passed into sandboxes
``ResolvedGroup.efa``       the nodes get EFA interfaces (:func:`blueprints.aws.efa_group`)
========================  ===============================================================

``resolve`` never raises for a blueprint the models accepted (unknown hardware resolves to
``None`` / 0; an IPoIB subnet that runs out leaves hosts unassigned, which the ``ipoib-cidr``
rule reports with a position). It is cached per blueprint object: calling it again with the
same blueprint returns the same object, so the CLI builds it once after ``check`` and every
consumer gets that one.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .aws import efa_group
from .catalog import Catalog, catalog
from .hardware import GroupHardware, group_hardware
from .models import Blueprint, InfinibandNetwork, NodeGroup
from .settings import NodeSettings, node_settings
from .slurm import SlurmSettings, slurm_settings
from .software_stack import SoftwareStack, software_stack

__all__ = ["IpoibAssignment", "ResolvedCluster", "ResolvedGroup", "assign_ipoib", "resolve", "smallest_ipoib_prefix"]


@dataclass(frozen=True)
class ResolvedGroup:
    """One node group, resolved.

    ``index``: the group's position in ``node_groups`` (its document path is
    ``("node_groups", index)``); ``group``: the blueprint's node group; ``hardware``: what one node
    has (GPU model and count per node, GPU memory in bytes, NVSwitch, NVMe data drives, the AWS
    instance type entry); ``settings``: everything a node of the group is configured with;
    ``efa``: whether the nodes get EFA interfaces.
    """

    index: int
    group: NodeGroup
    hardware: GroupHardware
    settings: NodeSettings
    efa: bool

    @property
    def name(self) -> str:
        """The node group's name."""
        return self.group.name

    @property
    def path(self) -> tuple[str, int]:
        """Document path of the group, ``("node_groups", index)``, for rule positions."""
        return ("node_groups", self.index)

    @property
    def nodes(self) -> int:
        """Nodes in the group: ``count`` on AWS, the number of ``hosts`` on-prem."""
        return self.group.size

    @property
    def compute(self) -> bool:
        """A compute group: ``role: compute`` (the nodes that run jobs and are validated)."""
        return self.group.compute

    @property
    def gpus(self) -> int:
        """Accelerators per node, any vendor (0 for CPU-only or unknown instance types)."""
        return self.hardware.gpus

    @property
    def nvidia_gpus(self) -> int:
        """GPUs per node that take the NVIDIA stack (driver, container toolkit, NCCL); the node
        settings' ``gpu_count``."""
        return self.settings.gpu_count

    @property
    def has_gpus(self) -> bool:
        """A GPU group: at least one accelerator per node, any vendor."""
        return self.hardware.gpus > 0

    @property
    def training(self) -> bool:
        """A training group: a compute group with accelerators that run jobs on the host (not
        passed into sandboxes: ``sandbox.passthrough`` is off). The node settings'
        ``training_node`` is this predicate for the NVIDIA stack."""
        return self.compute and self.has_gpus and not self.group.sandbox.passthrough


@dataclass(frozen=True)
class IpoibAssignment:
    """IPoIB addresses of the InfiniBand hosts.

    ``cidr``: the subnet (``network.infiniband.ipoib.cidr``), ``None`` when there is none, IPoIB
    is off or the fabric is not InfiniBand; ``addresses``: ``{host: [{"netdev": ..., "address":
    "IP/prefix"}]}`` for each host that got one; ``wanted``: hosts that need an address (hosts of
    the groups with an IPoIB netdev), in blueprint order; ``unassigned``: those of them the subnet
    had no free address left for; ``taken``: addresses inside the subnet the blueprint already
    uses (host addresses, Lustre MGS NIDs), which are skipped.
    """

    cidr: str | None = None
    addresses: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    wanted: tuple[str, ...] = ()
    unassigned: tuple[str, ...] = ()
    taken: tuple[str, ...] = ()


def _host_count(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    """Addresses of ``net`` that :meth:`hosts` yields (IPv4 drops network and broadcast below /31,
    IPv6 drops the Subnet-Router anycast address below /127)."""
    if net.version == 4:
        return net.num_addresses - (2 if net.prefixlen < 31 else 0)
    return net.num_addresses - (1 if net.prefixlen < 127 else 0)


def _is_host(net: ipaddress.IPv4Network | ipaddress.IPv6Network, a: Any) -> bool:
    if a not in net:
        return False
    if net.version == 4 and net.prefixlen < 31:
        return a not in (net.network_address, net.broadcast_address)
    if net.version == 6 and net.prefixlen < 127:
        return a != net.network_address
    return True


def _taken(bp: Blueprint) -> list[Any]:
    """Addresses the blueprint already uses: host addresses and Lustre MGS NIDs (DNS names skipped)."""
    out = []
    texts = [h.address for g in bp.node_groups for h in g.hosts]
    for s in bp.storage:
        server = getattr(s, "server", None)
        texts += [nid.split("@", 1)[0] for nid in getattr(server, "mgs_nids", []) or []]
    for t in texts:
        try:
            out.append(ipaddress.ip_address(t))
        except ValueError:
            continue
    return out


def smallest_ipoib_prefix(bp: Blueprint, needed: int) -> int | None:
    """The longest prefix length of a subnet around the network address of
    ``network.infiniband.ipoib.cidr`` with ``needed`` free host addresses besides those the
    blueprint already uses (host addresses, Lustre MGS NIDs); ``None`` when there is no IPoIB CIDR,
    it is not a network, or no prefix suffices."""
    net = bp.network
    if not isinstance(net, InfinibandNetwork) or not net.infiniband.ipoib.cidr:
        return None
    try:
        base = ipaddress.ip_network(net.infiniband.ipoib.cidr, strict=False)
    except ValueError:
        return None
    taken = {a for a in _taken(bp) if a.version == base.version}
    for prefix in range(base.max_prefixlen, -1, -1):
        sup = ipaddress.ip_network(f"{base.network_address}/{prefix}", strict=False)
        if _host_count(sup) - sum(1 for a in taken if _is_host(sup, a)) >= needed:
            return prefix
    return None


def assign_ipoib(bp: Blueprint, netdevs: Sequence[str | None]) -> IpoibAssignment:
    """Assign the IPoIB addresses: hosts of the groups whose IPoIB netdev is set (``netdevs``: one
    per node group, in ``node_groups`` order, the node settings' ``ipoib_netdev``) get the
    first usable addresses of ``network.infiniband.ipoib.cidr`` in blueprint order (node groups,
    then hosts), skipping the addresses the blueprint already uses. Never raises: a CIDR that is
    not a network assigns nothing, a subnet that runs out leaves the rest ``unassigned``.
    """
    net = bp.network
    if not isinstance(net, InfinibandNetwork) or not net.infiniband.ipoib.enabled or not net.infiniband.ipoib.cidr:
        return IpoibAssignment()
    try:
        subnet = ipaddress.ip_network(net.infiniband.ipoib.cidr, strict=False)
    except ValueError:
        return IpoibAssignment()
    taken = [a for a in _taken(bp) if a.version == subnet.version and _is_host(subnet, a)]
    taken_set = set(taken)
    wanted = [(h.name, netdev) for g, netdev in zip(bp.node_groups, netdevs, strict=True) if netdev for h in g.hosts]
    free = (a for a in subnet.hosts() if a not in taken_set)
    out: dict[str, list[dict[str, str]]] = {}
    unassigned: list[str] = []
    for host, netdev in wanted:
        addr = next(free, None)
        if addr is None:
            unassigned.append(host)
            continue
        out[host] = [{"netdev": netdev, "address": f"{addr}/{subnet.prefixlen}"}]
    return IpoibAssignment(cidr=str(subnet), addresses=out, wanted=tuple(h for h, _ in wanted),
                           unassigned=tuple(unassigned), taken=tuple(str(a) for a in dict.fromkeys(taken)))


@dataclass(frozen=True)
class ResolvedCluster:
    """A blueprint with its node groups resolved (see the module docstring).

    ``blueprint``: the validated blueprint; ``catalog``: the hardware catalog it was resolved
    against; ``groups``: every node group in document order; ``ipoib``: the IPoIB addresses.
    Selections (``compute_groups``, ``gpu_groups``, ``training_groups``, ``efa_groups``) are
    tuples of :class:`ResolvedGroup` in document order.
    """

    blueprint: Blueprint
    catalog: Catalog
    groups: tuple[ResolvedGroup, ...]
    ipoib: IpoibAssignment
    slurm: SlurmSettings | None = None
    """The Slurm cluster's settings (:func:`blueprints.slurm.slurm_settings`); ``None`` without ``orchestrator: slurm``."""

    def __iter__(self) -> Any:
        return iter(self.groups)

    @property
    def software(self) -> SoftwareStack:
        """The cluster's software stack: ``software`` as stated, the rest resolved from the catalog's
        compatibility model for the declared hardware (:func:`blueprints.software_stack.software_stack`)."""
        return software_stack(self.blueprint, self.catalog)

    def group(self, which: str | NodeGroup) -> ResolvedGroup:
        """The resolved group for a node group (the object itself, or its name: the first group of
        that name). Raises ``KeyError`` when there is none."""
        for r in self.groups:
            if r.group is which:
                return r
        name = which if isinstance(which, str) else which.name
        for r in self.groups:
            if r.name == name:
                return r
        raise KeyError(name)

    def settings(self, which: str | NodeGroup) -> NodeSettings:
        """The node settings of a group (see :meth:`group`)."""
        return self.group(which).settings

    @property
    def node_settings(self) -> dict[str, NodeSettings]:
        """``{group name: NodeSettings}`` for every node group."""
        return {r.name: r.settings for r in self.groups}

    @property
    def compute_groups(self) -> tuple[ResolvedGroup, ...]:
        """The compute groups (:attr:`ResolvedGroup.compute`)."""
        return tuple(r for r in self.groups if r.compute)

    @property
    def gpu_groups(self) -> tuple[ResolvedGroup, ...]:
        """The groups with accelerators, any role (:attr:`ResolvedGroup.has_gpus`)."""
        return tuple(r for r in self.groups if r.has_gpus)

    @property
    def training_groups(self) -> tuple[ResolvedGroup, ...]:
        """The training groups (:attr:`ResolvedGroup.training`)."""
        return tuple(r for r in self.groups if r.training)

    @property
    def efa_groups(self) -> tuple[ResolvedGroup, ...]:
        """The groups whose nodes get EFA interfaces (:attr:`ResolvedGroup.efa`)."""
        return tuple(r for r in self.groups if r.efa)

    @property
    def primary_group(self) -> ResolvedGroup:
        """The group results are judged against by default: the first compute group with NVIDIA
        GPUs, else the first compute group, else the first group."""
        compute = self.compute_groups
        return next((r for r in compute if r.nvidia_gpus), compute[0] if compute else self.groups[0])


_CACHE: OrderedDict[tuple[int, int], ResolvedCluster] = OrderedDict()
_CACHE_SIZE = 32
"""Resolved clusters kept (the newest); each holds its blueprint, so an ``id`` is never reused
while its entry is cached."""


def resolve(bp: Blueprint, cat: Catalog | None = None) -> ResolvedCluster:
    """The :class:`ResolvedCluster` of ``bp`` against ``cat`` (default: the shipped catalog).

    Cached per blueprint object and catalog: the same arguments return the same object. Never
    raises for a blueprint the models accepted.
    """
    cat = cat or catalog()
    key = (id(bp), id(cat))
    hit = _CACHE.get(key)
    if hit is not None and hit.blueprint is bp and hit.catalog is cat:
        _CACHE.move_to_end(key)
        return hit
    groups = []
    for i, g in enumerate(bp.node_groups):
        groups.append(ResolvedGroup(index=i, group=g, hardware=group_hardware(bp, g, cat),
                                    settings=node_settings(bp, g), efa=efa_group(bp, g, cat)))
    ipoib = assign_ipoib(bp, [r.settings.ipoib_netdev for r in groups])
    out = ResolvedCluster(blueprint=bp, catalog=cat, groups=tuple(groups), ipoib=ipoib, slurm=slurm_settings(bp, cat))
    _CACHE[key] = out
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out
