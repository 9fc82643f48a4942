"""Fabric rules: InfiniBand subnet manager and IPoIB, RoCE flow control and QoS consistency, NIC
declarations, GPUDirect RDMA peer-memory path, NCCL environment, socket-only multi-node training."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from ..models import EfaNetwork, EthernetNetwork, InfinibandNetwork, RoceNetwork
from ._facts import training_groups, version
from .registry import Hit, RuleContext, rule

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NVIDIA_QOS = "https://docs.nvidia.com/networking/display/mlnxenv23106161lts/quality-of-service-(qos)"
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
    for k, v in net.nccl.env.items():
        if k == "NCCL_IB_TC" and v.strip().isdigit() and int(v) != r.effective_traffic_class:
            yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.NCCL_IB_TC` {v} disagrees with the RoCE "
                      f"traffic class {r.effective_traffic_class}", "remove it from `nccl.env`")


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
    summary="`network.infiniband.ipoib.cidr` must be an IPv4/IPv6 network with an address for every host.",
    fix="use a subnet such as `192.168.100.0/24` that holds all hosts",
    source="https://www.kernel.org/doc/html/latest/networking/ipoib.html",
)
def ipoib_cidr(ctx: RuleContext) -> Iterator[Hit]:
    net = _ib(ctx)
    if net is None or not net.infiniband.ipoib.enabled or not net.infiniband.ipoib.cidr:
        return
    p = ("network", "infiniband", "ipoib", "cidr")
    try:
        cidr = ipaddress.ip_network(net.infiniband.ipoib.cidr, strict=False)
    except ValueError:
        yield Hit(p, f"`network.infiniband.ipoib.cidr` `{net.infiniband.ipoib.cidr}` is not a network")
        return
    hosts = sum(len(g.hosts) for g in ctx.bp.node_groups)
    usable = cidr.num_addresses - (2 if cidr.version == 4 and cidr.prefixlen < 31 else 0)
    if hosts > usable:
        yield Hit(p, f"`network.infiniband.ipoib.cidr` `{cidr}` has {usable} addresses for {hosts} hosts",
                  f"use a larger subnet (at least /{max(1, 32 - (hosts + 2 - 1).bit_length())})")


@rule(
    id="gpudirect-dmabuf-open-modules",
    severity="error",
    summary="GPUDirect RDMA over DMA-BUF needs the open GPU kernel modules (`software.driver_open_kernel_modules`).",
    fix="set `software.driver_open_kernel_modules: true`, or `gpudirect_rdma.method: nvidia-peermem`",
    source="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
)
def gpudirect_dmabuf_open_modules(ctx: RuleContext) -> Iterator[Hit]:
    gdr = ctx.bp.network.gpudirect_rdma
    if gdr.enabled and gdr.method == "dmabuf" and not ctx.bp.software.driver_open_kernel_modules:
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
    if not isinstance(net, (InfinibandNetwork, RoceNetwork)) or not net.gpudirect_rdma.enabled:
        return
    if (net.gpudirect_rdma.method or "nvidia-peermem") != "nvidia-peermem":
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
    if not isinstance(net, EfaNetwork) or not net.gpudirect_rdma.enabled:
        return
    for i, g, hw in training_groups(ctx.bp, ctx.catalog):
        if hw.instance is not None and hw.instance.gpudirect_rdma is False:
            yield Hit(("node_groups", i, "instance_type"), f"`{hw.instance.name}` (`node_groups.{i}.instance_type`) has "
                      f"no GPUDirect RDMA over EFA")


_FORCES_SOCKETS = {
    ("NCCL_IB_DISABLE", "1"): "disables the InfiniBand/RoCE transport",
    ("NCCL_NET", "socket"): "forces the socket transport",
}


@rule(
    id="nccl-env-disables-fabric",
    severity="error",
    summary="`network.nccl.env` must not switch NCCL to TCP sockets on an RDMA fabric (`NCCL_IB_DISABLE=1`, "
            "`NCCL_NET=Socket`): multi-node busbw drops to a fraction.",
    fix="remove the variable from `network.nccl.env`",
    source=NCCL_ENV,
)
def nccl_env_disables_fabric(ctx: RuleContext) -> Iterator[Hit]:
    fabric = ctx.bp.network.fabric
    if fabric == "ethernet":
        return
    for k, v in ctx.bp.network.nccl.env.items():
        what = _FORCES_SOCKETS.get((k, v.strip().lower()))
        if what and not (k == "NCCL_IB_DISABLE" and fabric == "efa"):
            yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.{k}={v}` {what} on the `{fabric}` fabric")
        if fabric == "efa" and k == "FI_PROVIDER" and v.strip().lower() not in ("efa", ""):
            yield Hit(("network", "nccl", "env", k), f"`network.nccl.env.FI_PROVIDER={v}` replaces the libfabric "
                      f"`efa` provider on an EFA fabric", "remove it (clusterforge sets `FI_PROVIDER=efa`)")


@rule(
    id="nccl-env-legacy",
    severity="warning",
    summary="Legacy EFA tuning variables hurt modern aws-ofi-nccl: `NCCL_PROTO=simple` disables the low-latency "
            "protocols, `RDMAV_FORK_SAFE`/`NCCL_BUFFSIZE`/socket threads must not be set.",
    fix="remove the variable from `network.nccl.env`",
    source=OFI_ENV,
)
def nccl_env_legacy(ctx: RuleContext) -> Iterator[Hit]:
    if not isinstance(ctx.bp.network, EfaNetwork):
        return
    bad = {
        "NCCL_PROTO": "disables NCCL's LL/LL128 protocols (needed only by aws-ofi-nccl <= 1.5)",
        "RDMAV_FORK_SAFE": "must not be used with the EFA provider",
        "NCCL_BUFFSIZE": "should stay at its default on EFA",
        "NCCL_SOCKET_NTHREADS": "does not apply to EFA",
        "NCCL_NSOCKS_PERTHREAD": "does not apply to EFA",
        "FI_EFA_FORK_SAFE": "is not needed with current libfabric",
    }
    for k, v in ctx.bp.network.nccl.env.items():
        if k in bad and not (k == "NCCL_PROTO" and v.strip().lower() != "simple"):
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
    method = net.gpudirect_rdma.method or ("dmabuf" if ctx.bp.software.driver_open_kernel_modules else "nvidia-peermem")
    if method == "nvidia-peermem" and not ctx.bp.software.doca_ofed:
        where = ("network", "gpudirect_rdma", "method") if net.gpudirect_rdma.method else ("software", "driver_open_kernel_modules")
        yield Hit(where, "`network.gpudirect_rdma` uses `nvidia-peermem` but `software.doca_ofed` is unset (inbox "
                  "rdma-core has no peer-memory API)")


@rule(
    id="roce-ecn-needs-ofed",
    severity="warning",
    summary="Per-priority ECN (DCQCN) switches exist only in the MLNX_OFED / DOCA-OFED sysfs tree; with the inbox "
            "driver the firmware default stays and the QoS unit reports ECN as not applied (the play stops).",
    fix="set `software.doca_ofed`, or accept the firmware's ECN default and set `network.roce.ecn: false`",
    source=NVIDIA_QOS,
)
def roce_ecn_needs_ofed(ctx: RuleContext) -> Iterator[Hit]:
    net = _roce(ctx)
    if net is not None and net.roce.ecn and not ctx.bp.software.doca_ofed and ctx.bp.target.provider == "onprem":
        yield Hit(("network", "roce", "ecn"), "`network.roce.ecn` is true but `software.doca_ofed` is unset (inbox "
                  "mlx5 has no per-priority ECN switch)")
