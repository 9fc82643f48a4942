"""Fabric rules: InfiniBand subnet manager and IPoIB, RoCE flow control and QoS consistency, NIC
declarations, GPUDirect RDMA peer-memory path, NCCL environment, socket-only multi-node training."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

from ..catalog import catalog
from ..models import EfaNetwork, EthernetNetwork, InfinibandNetwork, LustreStorage, Network, Nic, RoceNetwork
from ..resolved import smallest_ipoib_prefix
from ..settings import generated_nccl_env
from ..vendor import bare_metal
from ._facts import GroupHardware, fld, training_groups, version, vstr
from .registry import Hit, RuleContext, rule

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NVIDIA_QOS = "https://docs.nvidia.com/networking/display/mlnxenv23106161lts/quality-of-service-(qos)"
_NCCL_GDR = catalog().extras["nccl_gpudirect"]  # the minimum NCCL per GPUDirect RDMA method, with sources
OFI_ENV = "https://github.com/aws/aws-ofi-nccl/blob/2daf7d303aa139a03140aa530957d10521e4478d/doc/efa-env-var.md"


def _ib(ctx: RuleContext) -> InfinibandNetwork | None:
    return ctx.bp.network if isinstance(ctx.bp.network, InfinibandNetwork) else None


def _roce(ctx: RuleContext) -> RoceNetwork | None:
    return ctx.bp.network if isinstance(ctx.bp.network, RoceNetwork) else None


@rule(
    id="ib-subnet-manager",
    severity="error",
    summary="An InfiniBand fabric needs exactly one active subnet manager; without one, ports stay in INIT and no "
            "traffic flows.",
    fix="declare `network.infiniband.subnet_manager.kind`: `opensm` (with `host`), `ufm` or `switch`",
    source="https://chrispaquin.com/2026/03/22/project-nvidia-hpc-infiniband-homelab-gpu-cluster-part-3-rdma-performance-testing/",
)
def ib_subnet_manager(ctx: RuleContext) -> Iterator[Hit]:
    net = _ib(ctx)
    if net is not None and net.infiniband.subnet_manager.kind is None:
        yield Hit(("network", "infiniband", "subnet_manager"),
                  "`network.infiniband.subnet_manager.kind` is not declared for `fabric: infiniband`")


@rule(
    id="ib-opensm-host",
    severity="error",
    summary="`subnet_manager.kind: opensm` needs `host`, the name of a host in the blueprint that runs opensm.",
    fix="set `subnet_manager.host` to one of the blueprint's hosts (a management or compute node)",
    source="https://github.com/NVIDIA/deepops/blob/master/docs/k8s-cluster/roce-perf-k8s.md",
)
def ib_opensm_host(ctx: RuleContext) -> Iterator[Hit]:
    net = _ib(ctx)
    if net is None:
        return
    sm = net.infiniband.subnet_manager
    p = ("network", "infiniband", "subnet_manager")
    if sm.kind == "opensm" and not sm.host:
        yield Hit(p + ("kind",), "`network.infiniband.subnet_manager.kind` is `opensm` but no `host` runs it")
    elif sm.kind == "opensm" and sm.host:
        names = [h.name for g in ctx.bp.node_groups for h in g.hosts]
        if sm.host not in names:
            yield Hit(p + ("host",), f"`network.infiniband.subnet_manager.host` `{sm.host}` is not a host of this blueprint",
                      f"use one of {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    elif sm.kind in ("ufm", "switch") and sm.host:
        yield Hit(p + ("host",), f"`network.infiniband.subnet_manager.host` is set but the subnet manager runs on "
                  f"the {sm.kind}", "remove `host` (only `kind: opensm` runs on a host)")


@rule(
    id="ib-generation-nic-speed",
    severity="warning",
    summary="NIC `speed_gbps` should match the 4x port rate of `network.infiniband.generation` (EDR 100, HDR 200, "
            "NDR 400, XDR 800 Gbit/s); expectations are derived from it.",
    fix="make `hardware.nics[].speed_gbps` and `network.infiniband.generation` agree",
    source="https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md",
)
def ib_generation_nic_speed(ctx: RuleContext) -> Iterator[Hit]:
    net = _ib(ctx)
    if net is None or net.infiniband.generation is None:
        return
    port = ctx.catalog.infiniband_port_gbps(net.infiniband.generation)
    for i, g in enumerate(ctx.bp.node_groups):
        for j, nic in enumerate(g.hardware.nics if g.hardware else []):
            if nic.link_layer == "infiniband" and nic.speed_gbps > port:
                yield Hit(("node_groups", i, "hardware", "nics", j, "speed_gbps"),
                          f"`node_groups.{i}.hardware.nics.{j}.speed_gbps` {nic.speed_gbps:g} is faster than an "
                          f"{net.infiniband.generation} port ({port:g} Gbit/s)")
            elif nic.link_layer == "infiniband" and nic.speed_gbps < port / 2:
                yield Hit(("node_groups", i, "hardware", "nics", j, "speed_gbps"),
                          f"`node_groups.{i}.hardware.nics.{j}.speed_gbps` {nic.speed_gbps:g} is below an "
                          f"{net.infiniband.generation} port ({port:g} Gbit/s): an older generation or a split port?")


@rule(
    id="nic-link-layer",
    severity="error",
    summary="InfiniBand fabrics need NICs with `link_layer: infiniband`; RoCE runs over `link_layer: ethernet` ports.",
    fix="set each fabric NIC's `link_layer` to match `network.fabric` (ConnectX ports are switched with mlxconfig)",
    source="https://github.com/NVIDIA/deepops/blob/master/docs/k8s-cluster/roce-perf-k8s.md",
)
def nic_link_layer(ctx: RuleContext) -> Iterator[Hit]:
    fabric = ctx.bp.network.fabric
    want = {"infiniband": "infiniband", "roce": "ethernet"}.get(fabric)
    if want is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        for j, nic in enumerate(g.hardware.nics if g.hardware else []):
            if nic.link_layer != want:
                yield Hit(("node_groups", i, "hardware", "nics", j),
                          f"`node_groups.{i}.hardware.nics.{j}` (`{nic.device}`) has link layer `{nic.link_layer}` on the "
                          f"`{fabric}` fabric", f"set `link_layer: {want}`")


@rule(
    id="rdma-nics-declared",
    severity="warning",
    summary="GPU nodes on InfiniBand/RoCE should list their fabric NICs (`hardware.nics`): `NCCL_IB_HCA`, RoCE QoS and "
            "bandwidth expectations are rendered from them.",
    fix="list the RDMA NICs under `hardware.nics` (device, speed, NUMA node)",
    source=NCCL_ENV,
)
def rdma_nics_declared(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.network.fabric not in ("infiniband", "roce"):
        return
    for i, g, _ in training_groups(ctx.bp, ctx.catalog):
        if g.hardware is not None and not g.hardware.nics:
            yield Hit(("node_groups", i, "hardware"), f"GPU group `{g.name}` declares no `hardware.nics` on the "
                      f"`{ctx.bp.network.fabric}` fabric")


@rule(
    id="ipoib-netdev-declared",
    severity="warning",
    summary="IPoIB addresses and Lustre LNet (`o2ib`) bind to the first InfiniBand port's `netdev`; without one the "
            "host gets no IPoIB address and LNet no `o2ib` interface (no name such as `ib0` is guessed: hosts with "
            "predictable interface names call the port e.g. `ibp12s0`).",
    fix="add `netdev:` (the name `ip link` shows, e.g. `ibp24s0`) to the InfiniBand NICs in `hardware.nics`",
    source="https://wiki.lustre.org/Mounting_a_Lustre_File_System_on_Client_Nodes",
)
def ipoib_netdev_declared(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, InfinibandNetwork):
        return
    lustre = any(s.kind == "lustre" for s in ctx.bp.storage)
    if not (net.infiniband.ipoib.enabled or lustre):
        return
    needs = " and ".join(x for x, on in (("IPoIB", net.infiniband.ipoib.enabled), ("Lustre LNet", lustre)) if on)
    for i, g in enumerate(ctx.bp.node_groups):
        ib = [n for n in (g.hardware.nics if g.hardware else []) if n.link_layer == "infiniband"]
        if ib and not any(n.netdev for n in ib):
            yield Hit(("node_groups", i, "hardware", "nics", 0), f"group `{g.name}`: no InfiniBand NIC declares its "
                      f"`netdev`, so {needs} get{'s' if ' and ' not in needs else ''} no interface on these hosts "
                      f"(no interface name is guessed)")


@rule(
    id="roce-netdev-declared",
    severity="error",
    summary="RoCE QoS (trust, PFC, DSCP, ECN) is set per network interface: every RoCE NIC needs its `netdev`.",
    fix="add `netdev:` (e.g. `ens1f0np0`) to each NIC in `hardware.nics`",
    source=NVIDIA_QOS,
)
def roce_netdev_declared(ctx: RuleContext) -> Iterator[Hit]:
    if _roce(ctx) is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        for j, nic in enumerate(g.hardware.nics if g.hardware else []):
            if not nic.netdev:
                yield Hit(("node_groups", i, "hardware", "nics", j), f"RoCE NIC `{nic.device}` "
                          f"(`node_groups.{i}.hardware.nics.{j}`) has no `netdev` to apply QoS to")


@rule(
    id="roce-flow-control",
    severity="error",
    summary="A RoCE fabric must declare its flow control (`pfc` recommended); a lossy fabric without it collapses "
            "NCCL bandwidth.",
    fix="set `network.roce.flow_control: pfc` (matching the switches), or `none` for a deliberately lossy fabric",
    source="https://github.com/NVIDIA/nccl/issues/378",
)
def roce_flow_control(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is not None and net.roce.flow_control is None:
        yield Hit(("network", "roce"), "`network.roce.flow_control` is not declared")


@rule(
    id="roce-lossy-no-ecn",
    severity="warning",
    summary="RoCE with `flow_control: none` and ECN off has no congestion control at all: drops and retransmits "
            "under load.",
    fix="turn on `network.roce.ecn` (DCQCN), or use `flow_control: pfc`",
    source="https://github.com/NVIDIA/nccl/issues/378",
)
def roce_lossy_no_ecn(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is not None and net.roce.flow_control == "none" and not net.roce.ecn:
        yield Hit(("network", "roce", "ecn"), "`network.roce.flow_control` is `none` and `network.roce.ecn` is false")


@rule(
    id="roce-traffic-class",
    severity="error",
    summary="`NCCL_IB_TC` carries the DSCP in its upper six bits: `roce.traffic_class >> 2` must equal `roce.dscp`, "
            "or RoCE traffic lands in the wrong switch queue.",
    fix="remove `traffic_class` (it defaults to DSCP x 4) or set it to `dscp * 4` (+2 for ECT)",
    source="https://github.com/ROCm/TransferBench/pull/316",
)
def roce_traffic_class(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is None or net.roce.traffic_class is None:
        return
    r = net.roce
    if r.traffic_class >> 2 != r.dscp:  # type: ignore[operator]
        yield Hit(("network", "roce", "traffic_class"),
                  f"`network.roce.traffic_class` {r.traffic_class} carries DSCP {r.traffic_class >> 2} but "  # type: ignore[operator]
                  f"`network.roce.dscp` is {r.dscp}", f"set `traffic_class: {r.dscp * 4}` or remove it")


@rule(
    id="roce-dscp-priority",
    severity="warning",
    summary="With DSCP trust, the default DSCP-to-priority map is DSCP >> 3: `roce.dscp` should map onto "
            "`roce.pfc_priority` (26 -> 3), or PFC protects a queue RoCE does not use.",
    fix="use `dscp: 26` with `pfc_priority: 3`, or a DSCP in 8*P..8*P+7 for priority P",
    source=NVIDIA_QOS,
)
def roce_dscp_priority(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is None or net.roce.trust != "dscp" or net.roce.flow_control != "pfc":
        return
    r = net.roce
    if r.dscp >> 3 != r.pfc_priority:
        yield Hit(("network", "roce", "dscp"), f"`network.roce.dscp` {r.dscp} maps to priority {r.dscp >> 3} but PFC is "
                  f"on `network.roce.pfc_priority` {r.pfc_priority}")


@rule(
    id="ipoib-cidr",
    severity="error",
    summary="`network.infiniband.ipoib.cidr` must be an IPv4/IPv6 network with a free address for every IPoIB host "
            "(hosts of the groups with an InfiniBand `netdev`), besides the addresses the blueprint already uses "
            "in it (host addresses, Lustre MGS NIDs).",
    fix="use a subnet such as `192.168.100.0/24` that holds all hosts",
    source="https://www.kernel.org/doc/html/latest/networking/ipoib.html",
)
def ipoib_cidr(ctx: RuleContext) -> Iterator[Hit]:
    net = _ib(ctx)
    if net is None or not net.infiniband.ipoib.enabled or not net.infiniband.ipoib.cidr:
        return
    p = ("network", "infiniband", "ipoib", "cidr")
    try:
        ipaddress.ip_network(net.infiniband.ipoib.cidr, strict=False)
    except ValueError:
        yield Hit(p, f"`network.infiniband.ipoib.cidr` `{net.infiniband.ipoib.cidr}` is not a network")
        return
    a = ctx.cluster.ipoib  # the assignment the renderers write: the same arithmetic
    if not a.unassigned:
        return
    taken = f" ({len(a.taken)} of its addresses already used: {', '.join(a.taken[:3])}{' ...' if len(a.taken) > 3 else ''})"
    prefix = smallest_ipoib_prefix(ctx.bp, len(a.wanted))
    yield Hit(p, f"`network.infiniband.ipoib.cidr` `{a.cidr}` has {len(a.wanted) - len(a.unassigned)} free addresses "
              f"for {len(a.wanted)} IPoIB hosts{taken if a.taken else ''}; no address for "
              f"{', '.join(a.unassigned[:3])}{' ...' if len(a.unassigned) > 3 else ''}",
              f"use a larger subnet (at least /{prefix})" if prefix else None)


def _gdr_used(ctx: RuleContext) -> bool:
    """GPUDirect RDMA is on for at least one GPU node group (written, or by the group's default)."""
    gdr = ctx.bp.network.gpudirect_rdma
    return any(gdr.on_for(r.group.sandbox.passthrough) for r in ctx.cluster.gpu_groups)


@rule(
    id="gpudirect-dmabuf-open-modules",
    severity="error",
    summary="GPUDirect RDMA over DMA-BUF needs the open GPU kernel modules (`software.driver_open_kernel_modules`).",
    fix="set `software.driver_open_kernel_modules: true`, or `gpudirect_rdma.method: nvidia-peermem`",
    source="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
)
def gpudirect_dmabuf_open_modules(ctx: RuleContext) -> Iterator[Hit]:
    gdr = ctx.bp.network.gpudirect_rdma
    if _gdr_used(ctx) and gdr.method == "dmabuf" and not ctx.bp.software.driver_open_kernel_modules:
        yield Hit(("network", "gpudirect_rdma", "method"), "`network.gpudirect_rdma.method` is `dmabuf` but "
                  "`software.driver_open_kernel_modules` is false")


@rule(
    id="gpudirect-peermem-driver",
    severity="error",
    summary="`nvidia-peermem` ships with the NVIDIA driver from R470 on (it replaced `nv_peer_mem`).",
    fix="use `software.driver_branch` 470 or newer",
    source="https://docs.nvidia.com/networking/display/GPUDirectRDMAv18/Installing+GPUDirect+RDMA",
)
def gpudirect_peermem_driver(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, (InfinibandNetwork, RoceNetwork)) or not _gdr_used(ctx):
        return
    if net.gpudirect_rdma.effective_method(ctx.bp.software.driver_open_kernel_modules) != "nvidia-peermem":
        return
    branch = version(ctx.bp.software.driver_branch)
    if branch and branch[0] < 470:
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {ctx.bp.software.driver_branch} has no "
                  f"`nvidia-peermem` for `network.gpudirect_rdma`")


@rule(
    id="gpudirect-efa-unsupported",
    severity="warning",
    summary="Some EFA instance types have no EFA RDMA (e.g. g5): GPUDirect RDMA is unavailable and NCCL stages "
            "through host memory.",
    fix="use an instance type with EFA RDMA (p4d, p5, p5e, p5en, p6) for multi-node training, or accept the lower busbw",
    source=OFI_ENV,
)
def gpudirect_efa_unsupported(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, EfaNetwork):
        return
    for i, g, hw in training_groups(ctx.bp, ctx.catalog):
        if not net.gpudirect_rdma.on_for(g.sandbox.passthrough):
            continue
        if hw.instance is not None and hw.instance.gpudirect_rdma is False:
            yield Hit(("node_groups", i, "instance_type"), f"`{hw.instance.name}` (`node_groups.{i}.instance_type`) has "
                      f"no GPUDirect RDMA over EFA")


# --- the NCCL environment against the declared hardware -------------------------------------------

@dataclass(frozen=True)
class _Declared:
    """What one node group declares that NCCL fast paths depend on."""

    index: int
    name: str
    hw: GroupHardware
    nics: list[Nic]

    def has(self, need: str, net: Network, mnnvl_gpus: tuple[str, ...] = ()) -> bool:
        """Whether this group declares what a fast-path table row ``needs`` (see the catalog's
        ``nccl_env_fast_paths`` comment); ``mnnvl_gpus`` are the multi-node NVLink GPU keys."""
        # training groups never pass their GPUs into sandboxes: GPUDirect RDMA is on unless written off
        gdr = net.gpudirect_rdma.on_for(False) and net.fabric in ("efa", "infiniband", "roce")
        if net.fabric == "efa" and self.hw.instance is not None and self.hw.instance.gpudirect_rdma is False:
            gdr = False
        rdma_read = bool(self.hw.instance is not None and self.hw.instance.efa_rdma_read)
        return {
            "multi-gpu": self.hw.gpus >= 2,
            "mnnvl": self.hw.gpu_key in mnnvl_gpus,
            "roce": net.fabric == "roce",
            "efa-rdma-read": net.fabric == "efa" and gdr and rdma_read,
            "nvlink": self.hw.gpu is not None and self.hw.gpu.has_nvlink and self.hw.gpus >= 2,
            "nvls": self.hw.nvswitch and self.hw.gpu is not None and (self.hw.gpu.nvlink_gen or 0) >= 4,
            "rdma": net.fabric in ("infiniband", "roce"),
            "efa": net.fabric == "efa",
            "net": net.fabric in ("efa", "infiniband", "roce"),
            "gdr": gdr,
            "dmabuf": gdr and net.fabric != "efa" and net.gpudirect_rdma.method == "dmabuf",
            "rdma-not-rail": isinstance(net, InfinibandNetwork) and not net.infiniband.rail_optimized,
        }.get(need, False)

    def describe(self) -> str:
        gpu = f"{self.hw.gpus} x {self.hw.gpu_key}" if self.hw.gpus else "no GPUs"
        where = self.hw.instance.name + ": " if self.hw.instance is not None else ""
        return f"node group `{self.name}` ({where}{gpu}{' on NVSwitch' if self.hw.nvswitch else ''})"


def _declared(ctx: RuleContext) -> list[_Declared]:
    return [_Declared(i, g.name, hw, list(g.hardware.nics) if g.hardware else [])
            for i, g, hw in training_groups(ctx.bp, ctx.catalog)]


def _match_list(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """NCCL's list syntax (``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``): ``(exclude, exact, [(name, port)])``
    for ``^`` (exclude the listed), ``=`` (exact names instead of prefixes) and ``name[:port]`` items."""
    v = value.strip()
    exclude = v.startswith("^")
    v = v.lstrip("^")
    exact = v.startswith("=")
    v = v.lstrip("=")
    items: list[tuple[str, int | None]] = []
    for part in filter(None, (p.strip() for p in v.split(","))):
        name, _, port = part.partition(":")
        items.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, items


def _selected(value: str, name: str, port: int | None = None) -> bool:
    """Whether NCCL's list ``value`` selects interface/device ``name`` (and ``port``)."""
    exclude, exact, items = _match_list(value)
    hit = any((name == n if exact else name.startswith(n)) and (p is None or port is None or p == port) for n, p in items)
    return hit != exclude


def _row_matches(row: dict[str, object], value: str) -> bool:
    """Whether ``value`` (a user's variable value) is one the fast-path table ``row`` flags."""
    val = value.strip().lower()
    values = [str(x).lower() for x in row["values"]]  # type: ignore[attr-defined]
    if "*" in values:
        return val not in [str(x).lower() for x in row["except"]]  # type: ignore[attr-defined]
    return val in values


def _fast_path_hits(ctx: RuleContext, effect: str) -> Iterator[Hit]:
    net = ctx.bp.network
    groups = _declared(ctx)
    mnnvl = tuple(ctx.catalog.mnnvl_gpus)
    table_source = ctx.catalog.extras["nccl_env_fast_paths"]["source"]
    for k, v in net.nccl.env.items():
        for row in ctx.catalog.nccl_env_fast_paths:
            if row["name"] != k or row["effect"] != effect or not _row_matches(row, v):
                continue
            hit = [d for d in groups if d.has(str(row["needs"]), net, mnnvl)]
            if hit:
                src = f" (source: {row['source']})" if row["source"] != table_source else ""
                yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.{k}={v}` switches off {row['switches_off']} "
                          f"on {hit[0].describe()}{src}", f"remove `{k}` from `network.nccl.env`")
                break


@rule(
    id="nccl-env-disables-fabric",
    severity="error",
    summary="`network.nccl.env` must not switch off a fast path the blueprint declares: peer-to-peer and shared "
            "memory between GPUs, NVLink SHARP, multi-node NVLink, GPUDirect RDMA (also the EFA device's RDMA), the "
            "RDMA transport, libfabric provider or network plugin, RoCE v2 GIDs, a declared NIC left out of "
            "`NCCL_IB_HCA`; and NCCL's socket interface must exist with an address: on Ethernet it carries the "
            "data and must include the declared NICs, on RDMA fabrics it only carries bootstrap traffic and must "
            "not name an InfiniBand port that gets no IPoIB address.",
    fix="remove the variable from `network.nccl.env`",
    source=NCCL_ENV,
)
def nccl_env_disables_fabric(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    yield from _fast_path_hits(ctx, "disables")
    hca = net.nccl.env.get("NCCL_IB_HCA")
    if hca is not None and net.fabric in ("infiniband", "roce"):
        for d in _declared(ctx):
            if not d.nics:
                continue
            left = [f"{n.device}:{n.port}" for n in d.nics if not _selected(hca, n.device, n.port)]
            if left:
                gen = generated_nccl_env(ctx.bp, ctx.bp.node_groups[d.index]).get("NCCL_IB_HCA", "")
                yield Hit(("network", "nccl", "env", "NCCL_IB_HCA"),
                          f"`network.nccl.env.NCCL_IB_HCA={hca}` leaves out {len(left)} of the {len(d.nics)} NICs that "
                          f"{d.describe()} declares ({', '.join(left)}): NCCL uses "
                          f"{len(d.nics) - len(left)} of {len(d.nics)} rails; the generated value is `{gen}`",
                          "remove `NCCL_IB_HCA` from `network.nccl.env` (clusterforge lists every declared NIC)")
                break
    for path, value in _socket_values(ctx):
        yield from _socket_hits(ctx, path, value, "disables")


def _socket_values(ctx: RuleContext) -> list[tuple[tuple[object, ...], str]]:
    """``(path, value)`` of each NCCL socket interface selection the blueprint writes."""
    net = ctx.bp.network
    out: list[tuple[tuple[object, ...], str]] = []
    for path, value in ((("network", "nccl", "socket_ifname"), net.nccl.socket_ifname),
                        (("network", "nccl", "env", "NCCL_SOCKET_IFNAME"), net.nccl.env.get("NCCL_SOCKET_IFNAME"))):
        if value and value.strip():
            out.append((path, value))
    return out


def _ipoib_addressed(ctx: RuleContext, d: _Declared) -> set[str]:
    """The InfiniBand netdevs of group ``d`` that get an IPoIB address from the blueprint: the first
    InfiniBand port's netdev when `network.infiniband.ipoib` is enabled with a `cidr`."""
    net = ctx.bp.network
    if not isinstance(net, InfinibandNetwork) or not net.infiniband.ipoib.enabled or not net.infiniband.ipoib.cidr:
        return set()
    first = next((n.netdev for n in d.nics if n.netdev and n.link_layer == "infiniband"), None)
    return {first} if first else set()


def _socket_hits(ctx: RuleContext, path: tuple[object, ...], value: str, effect: str) -> Iterator[Hit]:
    """NCCL_SOCKET_IFNAME against the declared interfaces (NCCL env reference, NCCL_SOCKET_IFNAME).

    On an RDMA fabric (InfiniBand, RoCE, EFA) the sockets carry only NCCL's bootstrap and
    out-of-band traffic: any interface with an address will do (a management NIC is right), but an
    InfiniBand port without an IPoIB address gives NCCL no socket interface (``disables``). On
    plain Ethernet the sockets carry the data: a value that selects none of the declared data NICs
    moves the traffic elsewhere (``disables``), one that leaves some out narrows it (``narrows``)."""
    net = ctx.bp.network
    exclude, exact, items = _match_list(value)
    for d in _declared(ctx):
        if net.fabric == "ethernet":
            data = [n.netdev for n in d.nics if n.netdev and n.link_layer == "ethernet"]
            if not data:
                continue
            left = [nd for nd in data if not _selected(value, nd)]
            if effect == "disables" and len(left) == len(data):
                yield Hit(path, f"`{fld(path)}` `{value}` selects none of the Ethernet NICs {d.describe()} declares "
                          f"({', '.join(data)}): on `fabric: ethernet` NCCL's socket transport carries the data, so it "
                          f"would run over another interface",
                          f"name the declared data NICs (e.g. `={','.join(data)}`) or remove it")
                return
            if effect == "narrows" and 0 < len(left) < len(data):
                yield Hit(path, f"`{fld(path)}` `{value}` leaves out {len(left)} of the {len(data)} Ethernet NICs "
                          f"{d.describe()} declares ({', '.join(left)}): NCCL's socket transport uses "
                          f"{len(data) - len(left)} of them",
                          f"include every declared data NIC (e.g. `={','.join(data)}`) or remove it")
                return
            continue
        if effect != "disables" or exclude or not items or net.fabric not in ("infiniband", "roce", "efa"):
            continue
        ib = [n.netdev for n in d.nics if n.netdev and n.link_layer == "infiniband"]
        if not ib:
            continue
        addressed = _ipoib_addressed(ctx, d)
        declared = [n.netdev for n in d.nics if n.netdev]

        def picks(item: tuple[str, int | None], nd: str) -> bool:
            return nd == item[0] if exact else nd.startswith(item[0])

        # every listed name picks only InfiniBand ports without an address (and some such port)
        bare = [nd for nd in ib if nd not in addressed]
        if all(any(picks(it, nd) for nd in bare) and not any(picks(it, nd) for nd in declared if nd not in bare)
               for it in items):
            named = sorted({nd for it in items for nd in bare if picks(it, nd)})
            why = ("`network.infiniband.ipoib.cidr` is unset" if not addressed
                   else f"only `{next(iter(addressed))}` gets the IPoIB address")
            yield Hit(path, f"`{fld(path)}` `{value}` names only InfiniBand ports of {d.describe()} that get no IPoIB "
                      f"address ({', '.join(named)}; {why}): NCCL's bootstrap finds no socket interface with an "
                      f"address. On an RDMA fabric the socket interface carries only bootstrap traffic",
                      "name the management interface the hosts' addresses are on (e.g. `=eno1`), or remove it"
                      + (f" or use `={next(iter(addressed))}`" if addressed else
                         " (or set `network.infiniband.ipoib.cidr` and name the first InfiniBand port)"))
            return


@rule(
    id="nccl-env-narrows-fabric",
    severity="warning",
    summary="`network.nccl.env` narrows what NCCL may use on the declared hardware (forced algorithms or protocols, "
            "GPUDirect read off, fewer channels, CollNet off, cross-NIC off on a non-rail fabric, a socket interface "
            "that leaves out declared Ethernet data NICs): debugging settings that cost bandwidth when left in a "
            "cluster-wide environment.",
    fix="remove the variable from `network.nccl.env` unless a measured regression needs it",
    source=NCCL_ENV,
)
def nccl_env_narrows_fabric(ctx: RuleContext) -> Iterator[Hit]:
    yield from _fast_path_hits(ctx, "narrows")
    for path, value in _socket_values(ctx):
        yield from _socket_hits(ctx, path, value, "narrows")


@rule(
    id="nccl-env-overrides-generated",
    severity="warning",
    summary="A value in `network.nccl.env` replaces one clusterforge generates from the declared hardware "
            "(`NCCL_IB_HCA` from the NICs, `NCCL_IB_GID_INDEX` from the RoCE GID table or per-node discovery, "
            "`NCCL_IB_TC` from the DSCP, the EFA plugin path and libfabric settings from the instance type) or from "
            "another blueprint field; the finding shows both values.",
    fix="remove the variable from `network.nccl.env` and declare the hardware instead",
    source=NCCL_ENV,
)
def nccl_env_overrides_generated(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    switched_off = {h.path[-1] for h in _fast_path_hits(ctx, "disables")}  # reported as errors already
    for k, v in net.nccl.env.items():
        if k in switched_off:
            continue
        for i, g, _ in training_groups(ctx.bp, ctx.catalog):
            gen = generated_nccl_env(ctx.bp, g)
            if k == "NCCL_IB_HCA" and g.hardware and any(not _selected(v, n.device, n.port) for n in g.hardware.nics):
                break  # leaves out declared NICs: nccl-env-disables-fabric reports it with both values
            if k == "NCCL_IB_GID_INDEX" and isinstance(net, RoceNetwork) and net.roce.gid_index == "discover":
                yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.{k}={v}` replaces the GID index each node "
                          f"discovers (the RoCE v2 GID of its data-plane address; `network.roce.gid_index: discover`)",
                          f"remove `{k}`; to pin an index set `network.roce.gid_index: {v.strip()}`")
                break
            if k in gen and gen[k] != v.strip():
                yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.{k}={v}` replaces `{k}={gen[k]}` that "
                          f"clusterforge writes for node group `{g.name}`")
                break


@rule(
    id="nccl-env-legacy",
    severity="warning",
    summary="Legacy EFA tuning variables hurt modern aws-ofi-nccl: `RDMAV_FORK_SAFE`, `FI_EFA_FORK_SAFE`, "
            "`NCCL_BUFFSIZE` and socket threads must not be set.",
    fix="remove the variable from `network.nccl.env`",
    source=OFI_ENV,
)
def nccl_env_legacy(ctx: RuleContext) -> Iterator[Hit]:
    if not isinstance(ctx.bp.network, EfaNetwork):
        return
    bad = {
        "RDMAV_FORK_SAFE": "must not be used with the EFA provider",
        "NCCL_BUFFSIZE": "should stay at its default on EFA",
        "NCCL_SOCKET_NTHREADS": "does not apply to EFA",
        "NCCL_NSOCKS_PERTHREAD": "does not apply to EFA",
        "FI_EFA_FORK_SAFE": "is not needed with current libfabric",
    }
    for k in ctx.bp.network.nccl.env:
        if k in bad:
            yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.{k}` {bad[k]}")


@rule(
    id="ethernet-multi-node-training",
    severity="warning",
    summary="Multi-node GPU training over plain Ethernet runs NCCL on TCP sockets: expect a small fraction of an "
            "RDMA fabric's busbw and ~10x the latency.",
    fix="use an RDMA fabric (`infiniband`, `roce`, or `efa` on AWS); at least declare `network.speed_gbps`",
    source="https://github.com/vllm-project/vllm/pull/42075",
)
def ethernet_multi_node_training(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, EthernetNetwork):
        return
    groups = training_groups(ctx.bp, ctx.catalog)
    nodes = sum(g.size for _, g, _ in groups)
    if nodes < 2:
        return
    if ctx.bp.is_aws and any(hw.instance and hw.instance.efa_supported for _, _, hw in groups):
        return  # efa-capable-not-used says it better
    speed = f" at {net.speed_gbps:g} Gbit/s" if net.speed_gbps else ""
    yield Hit(("network", "fabric"), f"{nodes} GPU nodes train over `network.fabric: ethernet`{speed}")



@rule(
    id="gpudirect-peermem-needs-ofed",
    severity="error",
    summary="`nvidia-peermem` needs the peer-memory API that only MLNX_OFED / DOCA-OFED kernels provide; on a "
            "distribution kernel (inbox rdma-core) its init fails and the module never loads. DMA-BUF works without it.",
    fix="use DMA-BUF (`network.gpudirect_rdma.method: dmabuf`, open kernel modules), or set `software.doca_ofed`",
    source="https://docs.nvidia.com/cuda/gpudirect-rdma/index.html",
)
def gpudirect_peermem_needs_ofed(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, (InfinibandNetwork, RoceNetwork)) or not net.gpudirect_rdma.enabled:
        return
    method = net.gpudirect_rdma.effective_method(ctx.bp.software.driver_open_kernel_modules)
    if method == "nvidia-peermem" and not ctx.bp.software.doca_ofed:
        where = ("network", "gpudirect_rdma", "method") if net.gpudirect_rdma.method else ("software", "driver_open_kernel_modules")
        yield Hit(where, "`network.gpudirect_rdma` uses `nvidia-peermem` but `software.doca_ofed` is unset (inbox "
                  "rdma-core has no peer-memory API)")


@rule(
    id="doca-ofed-os",
    severity="error",
    summary="DOCA-OFED installs from NVIDIA's per-distribution DOCA repository; a bare-metal operating system "
            "without one would stop the play before the RDMA stack is installed.",
    fix="run the RDMA hosts on an operating system DOCA-OFED is published for, or unset `software.doca_ofed` "
        "(inbox rdma-core)",
    source="https://docs.nvidia.com/doca/sdk/doca-host+installation+and+upgrade/index.html",
)
def doca_ofed_os(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    if not sw.doca_ofed or ctx.bp.target.provider != "onprem":
        return
    dists = bare_metal()["doca_ofed"]["dists"]
    if ctx.bp.target.os not in dists:
        yield Hit(("software", "doca_ofed"), f"`software.doca_ofed` {sw.doca_ofed} has no DOCA repository for "
                  f"`target.os` {ctx.bp.target.os} (published for: {', '.join(sorted(dists))})")


@rule(
    id="roce-ecn-needs-ofed",
    severity="error",
    summary="Per-priority ECN (DCQCN) switches exist only in the MLNX_OFED / DOCA-OFED sysfs tree; with the inbox "
            "driver ECN cannot be applied, so every converge stops at the QoS unit and the unit fails at every boot.",
    fix="set `software.doca_ofed`, or accept the firmware's ECN default and set `network.roce.ecn: false`",
    source=NVIDIA_QOS,
)
def roce_ecn_needs_ofed(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is not None and net.roce.ecn and not ctx.bp.software.doca_ofed and ctx.bp.target.provider == "onprem":
        yield Hit(("network", "roce", "ecn"), "`network.roce.ecn` is true but `software.doca_ofed` is unset (inbox "
                  "mlx5 has no per-priority ECN switch)")


@rule(
    id="nccl-gpudirect-method",
    severity="error",
    summary="The NCCL release must recognise the declared GPUDirect RDMA method: NCCL before "
            f"{_NCCL_GDR['nvidia-peermem']['min_nccl']} does not detect the driver-bundled `nvidia-peermem` module and "
            f"silently turns GPUDirect RDMA off; DMA-BUF needs NCCL {_NCCL_GDR['dmabuf']['min_nccl']} or newer.",
    fix="raise `software.nccl`, or use `network.gpudirect_rdma.method: dmabuf` (open kernel modules)",
    source="https://github.com/NVIDIA/nccl/issues/1676",
)
def nccl_gpudirect_method(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if not isinstance(net, (InfinibandNetwork, RoceNetwork)) or not _gdr_used(ctx):
        return
    if not training_groups(ctx.bp, ctx.catalog):
        return
    method = net.gpudirect_rdma.effective_method(ctx.bp.software.driver_open_kernel_modules)
    fact = ctx.catalog.extras["nccl_gpudirect"].get(method)
    nccl = ctx.cluster.software.nccl
    need, have = version(fact["min_nccl"]) if fact else None, version(nccl)
    if need is None or have is None or have >= need:
        return
    yield Hit(("software", "nccl"), f"`software.nccl` {nccl} with GPUDirect RDMA method `{method}` "
              f"(`network.gpudirect_rdma.method`): {fact['why']}", f"set `software.nccl` to {vstr(need)} or newer"
              + (", or `network.gpudirect_rdma.method: dmabuf`" if method == "nvidia-peermem" else ""))


def _gid_unsafe(index: int, table: dict[str, object]) -> str | None:
    if index in table["link_local_indices"]:  # type: ignore[operator]
        kind = "RoCE v1" if index % 2 == 0 else "RoCE v2"
        return f"the IPv6 link-local {kind} entry, which does not reach other hosts"
    if index % 2 == 0:
        return "a RoCE v1 entry (not routable; NCCL needs RoCE v2)"
    return None


@rule(
    id="roce-gid-index",
    severity="error",
    summary="A fixed RoCE GID index that the standard GID table layout (per address: a RoCE v1 and a RoCE v2 entry, "
            "the IPv6 link-local pair first) puts on a RoCE v1 or link-local entry gives QP connection timeouts "
            "between hosts.",
    fix="set `network.roce.gid_index: discover` (each node finds the RoCE v2 GID of its data-plane address)",
    source="https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-infiniband",
)
def roce_gid_index(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    table = ctx.catalog.extras["roce_gid_table"]
    paths: list[tuple[tuple[object, ...], int]] = []
    if net is not None and isinstance(net.roce.gid_index, int):
        paths.append((("network", "roce", "gid_index"), net.roce.gid_index))
    if net is not None:
        v = net.nccl.env.get("NCCL_IB_GID_INDEX", "").strip()
        if v.isdigit():
            paths.append((("network", "nccl", "env", "NCCL_IB_GID_INDEX"), int(v)))
    for path, index in paths:
        why = _gid_unsafe(index, table)
        if why:
            yield Hit(path, f"`{fld(path)}` {index} is {why} in the standard RoCE GID table (index "
                      f"{table['first_ipv4_v2_index']} is RoCE v2 of the first IPv4 address)")


@rule(
    id="netdev-required",
    severity="error",
    summary="Interfaces in rendered configuration come from declared netdevs or from discovery on the node, never a "
            "guessed `ib0`/`eth0`: a host that mounts Lustre over `o2ib` needs an IPoIB (InfiniBand) or RoCE port "
            "with a `netdev` and an address, IPoIB addresses need the port's `netdev`.",
    fix="declare the port under `hardware.nics` with its `netdev` (see `ip -br link`)",
    source="https://wiki.lustre.org/Mounting_a_Lustre_File_System_on_Client_Nodes",
)
def netdev_required(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if ctx.bp.is_aws:
        return
    o2ib = [(i, s) for i, s in enumerate(ctx.bp.storage)
            if isinstance(s, LustreStorage) and s.server is not None
            and any(n.split("@", 1)[1].startswith("o2ib") for n in s.server.mgs_nids)]
    ib = net if isinstance(net, InfinibandNetwork) else None
    for gi, g in enumerate(ctx.bp.node_groups):
        nics = g.hardware.nics if g.hardware else []
        want = "infiniband" if ib is not None else "ethernet"
        ports = [n for n in nics if n.link_layer == want]
        named = [n for n in ports if n.netdev]
        if o2ib and net.fabric in ("infiniband", "roce") and not named:
            si, s = o2ib[0]
            port = "InfiniBand port (IPoIB)" if ib is not None else "RoCE port"
            if ports:
                path: tuple[object, ...] = ("node_groups", gi, "hardware", "nics", nics.index(ports[0]))
            else:
                path = ("node_groups", gi, "hardware") if g.hardware else ("node_groups", gi, "name")
            yield Hit(path, f"node group `{g.name}` mounts `storage.{si}` (`{s.name}`) over `o2ib` but declares no "
                      f"{port} with a `netdev` in `node_groups.{gi}.hardware.nics`: LNet has no interface for its NID",
                      f"declare the {port} under `node_groups.{gi}.hardware.nics` with its `netdev`")
        elif ib is not None and ib.infiniband.ipoib.enabled and ib.infiniband.ipoib.cidr and ports and not named:
            j = nics.index(ports[0])
            yield Hit(("node_groups", gi, "hardware", "nics", j), f"`node_groups.{gi}.hardware.nics.{j}` (`{ports[0].device}`) "
                      f"has no `netdev` for its IPoIB address (`network.infiniband.ipoib.cidr`)",
                      f"add `netdev:` (the port's interface as `ip -br link` lists it) to `node_groups.{gi}.hardware.nics.{j}`")
    if ib is not None and o2ib and ib.infiniband.ipoib.enabled and not ib.infiniband.ipoib.cidr:
        si, s = o2ib[0]
        yield Hit(("network", "infiniband", "ipoib"), f"`storage.{si}` (`{s.name}`) is mounted over `o2ib` but "
                  f"`network.infiniband.ipoib.cidr` is unset: the hosts get no IPoIB address, so LNet has no NID",
                  "set `network.infiniband.ipoib.cidr` to the IPoIB subnet of the Lustre servers")
