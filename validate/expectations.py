"""What the declared hardware should deliver: :class:`JudgeContext` and the expectation formulas.

A :class:`JudgeContext` describes the cluster a raw output came from (nodes, GPUs, fabric,
NICs, NVLink, storage, thresholds). Build it from a blueprint (:func:`context_from_blueprint`)
and/or from command-line flags (:func:`context_from_flags`). Precedence when the judge reads a
value: **flags (``explicit``) > what the log says > the blueprint**.

Expectations (every number from the catalog in ``blueprints/data``, which carries its source):

* NCCL within a node: NVLink per-GPU unidirectional GB/s (PCIe x16 rate for PCIe parts) x the
  catalog's achievable fraction (0.8).
* NCCL across ``k`` nodes, ``n`` ranks, ``g`` GPUs per node, per-GPU NIC rate ``B`` GB/s (NICs x
  Gbit/s / 8 / GPUs): what NCCL's algorithms deliver (:func:`expected_busbw`): all_reduce on two
  nodes the tree, ``0.65 x 2(n-1)/n x g x B`` (measured fraction, catalog
  ``nccl_algorithms``), on more nodes the ring, ``0.8 x g x B``; all_gather, reduce_scatter,
  broadcast, reduce the ring; alltoall ``B x 0.8 x (n-1)/(n-g)``; sendrecv ``B x 0.8``. The
  expectation is the smaller of the intra- and inter-node figures. A multi-node run without a NIC
  rate has no inter-node figure (the judge then gives no bandwidth verdict). Each figure comes
  with the physical upper bound at line rate (``upper_gbps``).
* fio: NVMe RAID0 = drives x per-drive MB/s (catalog ``storage_devices`` or the blueprint's
  ``seq_read_mb_s``/``seq_write_mb_s``); AWS instance store: 4 KiB random IOPS totals from the
  instance type; FSx for Lustre = capacity (TiB) x MB/s per TiB, but at most one client's share
  (its network, AWS's per-client limit: :func:`fsx_client_mb_s`), since fio runs on one node.
  Upper bounds: the drives' rated maxima; FSx burst network throughput and the client's network.
* AMP: GPU dense peak TFLOP/s for the precision; MFU floor (see :func:`mfu_floor`).
* Blueprint ``validation.*.thresholds`` override any of these; the judge context holds those
  blueprint model objects by suite name (:attr:`JudgeContext.thresholds`, from
  :func:`suite_thresholds`), whose defaults (warn and fail ratios, the AMP speed-up) are the only
  ones; each suite reads its own (:meth:`JudgeContext.thresholds_for`).

Units: GB/s = 1e9 bytes/s, Gbit/s = 1e9 bits/s, MB/s = 1e6 bytes/s, TiB = 2**40 bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from blueprints.catalog import GpuSpec, UnknownHardwareError, catalog
from blueprints.errors import UsageError
from blueprints.models import (
    FABRICS,
    NETWORK_MODELS,
    Blueprint,
    EfaNetwork,
    EthernetNetwork,
    InfinibandNetwork,
    LustreStorage,
    NfsStorage,
    Validation,
    fabric_tag,
)
from blueprints.resolved import ResolvedGroup, resolve

__all__ = [
    "BUSBW_BOUND_MARGIN",
    "FABRICS",
    "FABRIC_NAMES",
    "FIO_BOUND_MARGIN",
    "IB_VERBS_FABRICS",
    "RDMA_FABRICS",
    "BusbwExpectation",
    "ContextError",
    "JudgeContext",
    "StorageExpectation",
    "apply_overrides",
    "context_from_blueprint",
    "context_from_flags",
    "expected_busbw",
    "fsx_client_mb_s",
    "mfu_floor",
    "suite_thresholds",
    "tree_two_node_fraction",
]

RDMA_FABRICS: tuple[str, ...] = tuple(fabric_tag(m) for m in NETWORK_MODELS if m.rdma)
"""Fabrics on which NCCL should use RDMA (a net plugin or IB verbs), never TCP sockets (the network
models' ``rdma``: ``efa``, ``infiniband``, ``roce``)."""

IB_VERBS_FABRICS: tuple[str, ...] = tuple(fabric_tag(m) for m in NETWORK_MODELS if m.ib_verbs)
"""Fabrics NCCL reaches through IB verbs (the network models' ``ib_verbs``: ``infiniband``, ``roce``)."""

FABRIC_NAMES: dict[str, str] = {fabric_tag(m): m.display_name for m in NETWORK_MODELS}
"""Fabric tag -> its name in prose (``infiniband`` -> ``InfiniBand``)."""

ML_NETWORK = "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md"
"""Source of the multi-node formula and the 0.8 achievable fraction."""

TORCHTITAN_H100 = "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md"
"""Source of the 33-39% MFU reference (Llama 3.1 8B, bf16 FSDP, 8-128 H100)."""

MFU_FLOOR_HOPPER = 0.30
"""Default MFU floor (warn below, fail below `validation.amp.thresholds.mfu_fail_fraction` of it) for an H100-class GPU running the bf16 GPT
step: just under torchtitan's 33-39% MFU on H100 (:data:`TORCHTITAN_H100`); the project's own
measurements of this step on one H200 (torch 2.11, CUDA 13) reach 31.8% (GPT-124M, eager) to 59%
(GPT-1.3B+, compiled). Scaled for other GPUs by their measured matmul efficiency (MAMF)."""

_MAMF_KEYS = {
    "a100-40gb-sxm": "a100-sxm", "a100-80gb-sxm": "a100-sxm", "h100-sxm": "h100-sxm", "h200-sxm": "h100-sxm",
    "b200": "b200", "gb200-per-gpu": "gb200", "mi300x": "mi300x",
}
"""Catalog GPU key -> key of ``reference_benchmarks.max_achievable_matmul_tflops.bf16`` (H200 uses
H100's: same GH100 compute die, only memory differs)."""


class ContextError(UsageError):
    """A flag or blueprint value the judge cannot use (unknown GPU, instance type, node group)."""


# ---------------------------------------------------------------------------------------------
# thresholds and storage expectations
# ---------------------------------------------------------------------------------------------


FIO_BOUND_MARGIN = 1.25
"""A fio result more than 25% above the storage's physical upper bound is ``invalid``: drive vendors'
sequential and IOPS figures are maxima measured at high queue depth, and a RAID0 adds nothing beyond
the sum of its members; fio on a healthy drive lands within a few percent of the rating, and burst
or SLC-cache effects stay well inside 25%. More than that was served by RAM (page cache) or by other
storage than the declared one."""


@dataclass(frozen=True)
class StorageExpectation:
    """What one storage target should deliver to fio.

    ``mount`` is the mount point (``None``: the local NVMe scratch wherever it is mounted);
    ``kind`` one of ``nvme-raid0``, ``nvme``, ``instance-store``, ``fsx-lustre``, ``lustre``, ``nfs``;
    ``read_mb_s``/``write_mb_s`` sequential MB/s (1e6 bytes/s); ``read_iops_4k``/``write_iops_4k``
    4 KiB random IOPS; ``None`` where no source gives a number. ``derivation`` says how the
    numbers were computed, ``source`` where the per-unit figures come from. ``upper_*`` are the
    physical upper bounds (the drives' rated maxima; for FSx the smaller of the file system's
    burst network throughput and the client's network), with ``upper_derivation``; a result above
    them by more than :data:`validate.expectations.FIO_BOUND_MARGIN` cannot come from this storage.
    """

    mount: str | None
    kind: str
    name: str
    read_mb_s: float | None = None
    write_mb_s: float | None = None
    read_iops_4k: float | None = None
    write_iops_4k: float | None = None
    drives: int | None = None
    derivation: str = ""
    source: str = ""
    upper_read_mb_s: float | None = None
    upper_write_mb_s: float | None = None
    upper_read_iops_4k: float | None = None
    upper_write_iops_4k: float | None = None
    upper_derivation: str = ""

    @property
    def is_device(self) -> bool:
        """True for block devices (local NVMe, instance store), False for file systems over the network."""
        return self.kind in ("nvme-raid0", "nvme", "instance-store")

    @property
    def has_numbers(self) -> bool:
        """True when at least one expected figure is known."""
        return any(v is not None for v in (self.read_mb_s, self.write_mb_s, self.read_iops_4k, self.write_iops_4k))


# ---------------------------------------------------------------------------------------------
# the context
# ---------------------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def suite_thresholds(v: Validation) -> dict[str, BaseModel]:
    """``{suite name: thresholds model}`` of a blueprint's ``validation`` section: every member of the
    :class:`~blueprints.models.Validation` model that has a ``thresholds`` field (``nccl``, ``fio``,
    ``amp``, and any suite added there), in the model's field order."""
    out: dict[str, BaseModel] = {}
    for name in type(v).model_fields:
        th = getattr(getattr(v, name), "thresholds", None)
        if isinstance(th, BaseModel):
            out[name] = th
    return out



@dataclass(frozen=True)
class JudgeContext:
    """The cluster a raw output is judged against. Every field may be ``None`` (unknown).

    Fields: ``nodes`` and ``gpus_per_node``; ``gpu_model`` (catalog key); ``fabric`` (``efa``,
    ``infiniband``, ``roce``, ``ethernet``); ``instance_type`` (AWS); ``nic_gbps`` (line rate of one
    fabric NIC, Gbit/s) and ``nics_per_node``; ``nvlink_gbytes_s`` (NVLink per GPU per direction,
    GB/s, ``None`` for PCIe parts); ``storage`` (one :class:`StorageExpectation` per mount);
    ``fio_target`` (the mount fio jobs are judged against when their paths do not say);
    ``thresholds``: suite name -> the blueprint's ``validation.<suite>.thresholds`` model (see
    :func:`suite_thresholds`; a bare context holds the models' defaults), which a suite reads with
    :meth:`thresholds_for`;
    ``blueprint``/``group`` names for the report;
    ``explicit``: the fields given as flags/overrides (they win over what a log says);
    ``provenance``: ``(field, where it came from)`` pairs.
    """

    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    fabric: str | None = None
    instance_type: str | None = None
    nic_gbps: float | None = None
    nics_per_node: int | None = None
    nvlink_gbytes_s: float | None = None
    storage: tuple[StorageExpectation, ...] = ()
    fio_target: str | None = None
    thresholds: dict[str, BaseModel] = field(default_factory=lambda: suite_thresholds(Validation()))
    blueprint: str | None = None
    group: str | None = None
    explicit: frozenset[str] = frozenset()
    provenance: tuple[tuple[str, str], ...] = ()

    @property
    def gpu(self) -> GpuSpec | None:
        """The catalog :class:`GpuSpec` of ``gpu_model`` (``None`` when unknown)."""
        if not self.gpu_model:
            return None
        try:
            return catalog().gpu(self.gpu_model)
        except UnknownHardwareError:
            return None

    @property
    def node_network_gbps(self) -> float | None:
        """Fabric line rate per node in Gbit/s (NICs x rate), ``None`` when the rate is unknown."""
        if self.nic_gbps is None:
            return None
        nics = self.nics_per_node if self.nics_per_node is not None else (self.gpus_per_node or 1)
        return self.nic_gbps * nics

    def thresholds_for(self, suite: str, model: type[M]) -> M:
        """Suite ``suite``'s thresholds: the ``model`` object in :attr:`thresholds`, else ``model()`` (its
        defaults). Raises ``TypeError`` when the context holds another type for ``suite``."""
        got = self.thresholds.get(suite)
        if got is None:
            return model()
        if not isinstance(got, model):
            raise TypeError(f"thresholds of suite {suite!r} are {type(got).__name__}, not {model.__name__}")
        return got

    def is_explicit(self, name: str) -> bool:
        """True when ``name`` was given as a flag/override (it wins over the log)."""
        return name in self.explicit

    def describe(self) -> str:
        """One line for humans: ``2 node(s) x 8 h100-sxm, efa 32 x 100 Gbit/s per node (p5.48xlarge)``."""
        parts = []
        if self.nodes or self.gpus_per_node or self.gpu_model:
            parts.append(f"{self.nodes or '?'} node(s) x {self.gpus_per_node or '?'} {self.gpu_model or 'GPU'}")
        if self.fabric:
            net = self.fabric
            if self.nic_gbps:
                net += f" {self.nics_per_node or '?'} x {self.nic_gbps:g} Gbit/s per node"
            parts.append(net)
        text = ", ".join(parts)
        if self.instance_type:
            text += f" ({self.instance_type})"
        if self.blueprint:
            text += f" [blueprint {self.blueprint}{'/' + self.group if self.group else ''}]"
        return text.strip() or "no context (pass --blueprint or hardware flags)"

    def to_json(self) -> dict[str, Any]:
        """The context as a JSON-able dict (for report headers)."""
        full = dataclasses.asdict(self)
        d: dict[str, Any] = {}
        for k, v in full.items():
            if k == "thresholds":  # one key per suite: its thresholds model as a dict
                d.update({name: th.model_dump() for name, th in self.thresholds.items()})
            else:
                d[k] = v
        d["explicit"] = sorted(self.explicit)
        d["provenance"] = [list(p) for p in self.provenance]
        return d


# ---------------------------------------------------------------------------------------------
# building contexts
# ---------------------------------------------------------------------------------------------


def _pick_group(bp: Blueprint, group: str | None) -> ResolvedGroup:
    cluster = resolve(bp)
    if group:
        try:
            return cluster.group(group)
        except KeyError:
            names = ", ".join(g.name for g in bp.node_groups)
            raise ContextError(f"blueprint {bp.name} has no node group {group!r}; groups: {names}") from None
    return cluster.primary_group


def _nvme_expectations(bp: Blueprint, r: ResolvedGroup) -> list[StorageExpectation]:
    g, ns = r.group, r.settings
    if ns.scratch is None:
        return []
    sc = ns.scratch
    if sc.discovery == "instance-store" and ns.instance_type:  # the scratch array is the EC2 instance store
        it = r.hardware.instance
        store, src = (it.instance_store, it.source) if it else (None, "")
        if store is None:
            return []
        return [StorageExpectation(
            mount=sc.mount, kind="instance-store", name=f"{g.name} NVMe instance store {sc.mount}",
            read_iops_4k=store.random_read_iops_4k, write_iops_4k=store.write_iops_4k, drives=store.count,
            upper_read_iops_4k=store.random_read_iops_4k, upper_write_iops_4k=store.write_iops_4k,
            upper_derivation="AWS's published IOPS (at queue-depth saturation, all volumes)",
            derivation=(f"{g.instance_type} instance store, {store.count} drives: AWS's 4 KiB random IOPS for all "
                        "volumes together (AWS publishes no per-drive MB/s, so sequential rates are not judged)"),
            source=src,
        )]
    hw = g.hardware.nvme if g.hardware else None
    if hw is None:
        return [StorageExpectation(mount=sc.mount, kind="nvme", name=f"{g.name} NVMe scratch {sc.mount}",
                                   derivation="no `hardware.nvme` declared: no expectation")]
    drive: dict[str, Any] = {}
    src = ""
    if hw.model:
        drive = catalog().storage_devices.get(hw.model) or {}
        src = str(drive.get("source", ""))
    rd = hw.seq_read_mb_s or drive.get("seq_read_mb_s")
    wr = hw.seq_write_mb_s or drive.get("seq_write_mb_s") or drive.get("seq_write_mb_s_max")
    rio = drive.get("rand_read_4k_iops")
    wio = drive.get("rand_write_4k_iops")
    n = hw.count if sc.raid == "raid0" else 1
    what = hw.model or "drive"
    from_bp = "blueprint" if (hw.seq_read_mb_s or hw.seq_write_mb_s) else (f"catalog {hw.model}" if hw.model else "")
    kind = "nvme-raid0" if sc.raid == "raid0" and hw.count > 1 else "nvme"

    def times(v: Any) -> float | None:
        return float(v) * n if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    deriv = (f"{n} x {what} ({from_bp or 'no per-drive rate known'}: read {rd or '?'} MB/s, write {wr or '?'} MB/s per drive)"
             + (" in RAID0" if kind == "nvme-raid0" else "")
             + " = N x per-drive rate (upper bound; the host PCIe/controller limit may be lower)")
    return [StorageExpectation(
        mount=sc.mount, kind=kind, name=f"{g.name} NVMe {'RAID0 ' if kind == 'nvme-raid0' else ''}scratch {sc.mount}",
        read_mb_s=times(rd), write_mb_s=times(wr), read_iops_4k=times(rio), write_iops_4k=times(wio),
        drives=hw.count, derivation=deriv, source=src or "blueprint hardware.nvme",
        upper_read_mb_s=times(rd), upper_write_mb_s=times(wr), upper_read_iops_4k=times(rio),
        upper_write_iops_4k=times(wio), upper_derivation=f"{n} x the drive's rated maximum",
    )]


def fsx_client_mb_s(instance_gbps: float | None, efa_enabled: bool) -> tuple[float, str]:
    """What one FSx for Lustre client can drive, MB/s: the smaller of AWS's per-client limit (without EFA,
    or with EFA when the file system has it) and the client instance's network bandwidth (Gbit/s x 125).

    Returns ``(MB/s, derivation)``. Source: catalog ``fsx_lustre_client`` (AWS "Throughput to individual
    client instances")."""
    limits = catalog().extras["fsx_lustre_client"]["max_gbps"]
    cap = float(limits["efa" if efa_enabled else "ena"])
    what = "with EFA" if efa_enabled else "without EFA"
    if instance_gbps is not None and instance_gbps < cap:
        return instance_gbps * 125.0, f"the client instance's {instance_gbps:g} Gbit/s"
    return cap * 125.0, f"AWS's per-client limit {what}, {cap:g} Gbit/s"


def _shared_expectations(bp: Blueprint, client_gbps: float | None = None) -> list[StorageExpectation]:
    """Expectations of the shared file systems as seen from one client of ``client_gbps`` (Gbit/s, ``None``: unknown).

    FSx for Lustre: the file system's throughput (capacity x MB/s per TiB) is a total over all
    clients and OSTs; one client (fio runs on one node) gets at most its own share
    (:func:`fsx_client_mb_s`), so the expectation is the smaller of the two."""
    out: list[StorageExpectation] = []
    cat = catalog()
    for s in bp.storage:
        if isinstance(s, LustreStorage) and s.fsx is not None:
            fx = s.fsx
            tib = fx.storage_capacity_gib / 1024.0
            perf = cat.fsx.get("performance_ssd", {})
            src = str(perf.get("source", cat.fsx.get("per_unit_storage_throughput_mb_s_per_tib", {}).get("source", "")))
            rd = wr = None
            deriv = ""
            if fx.deployment_type.startswith("PERSISTENT") and fx.throughput_per_tib_mbps:
                rd = wr = tib * fx.throughput_per_tib_mbps
                deriv = (f"FSx {fx.deployment_type}: {fx.storage_capacity_gib} GiB = {tib:.3g} TiB x "
                         f"{fx.throughput_per_tib_mbps} MB/s/TiB = {rd:.0f} MB/s (file-system total, baseline)")
                src = str(cat.fsx["per_unit_storage_throughput_mb_s_per_tib"].get("source", src))
            elif fx.deployment_type == "SCRATCH_2":
                row = perf.get("SCRATCH_2", {})
                if row.get("disk_read_mb_s_per_tib"):
                    rd = tib * float(row["disk_read_mb_s_per_tib"])
                if row.get("disk_write_mb_s_per_tib"):
                    wr = tib * float(row["disk_write_mb_s_per_tib"])
                deriv = (f"FSx SCRATCH_2: {tib:.3g} TiB x {row.get('disk_read_mb_s_per_tib')} MB/s/TiB read, "
                         f"{row.get('disk_write_mb_s_per_tib')} MB/s/TiB write (disk baseline)")
            else:
                deriv = f"FSx {fx.deployment_type}: no per-unit throughput in the catalog"
            client, client_text = fsx_client_mb_s(client_gbps, bool(getattr(fx, "efa_enabled", False)))
            csrc = str(cat.extras["fsx_lustre_client"]["source"])
            if rd is not None and client < rd:
                deriv += f"; one client gets at most {client:.0f} MB/s ({client_text}): that share is expected"
                rd = client
            if wr is not None and client < wr:
                wr = client
            # upper bound: the burst network throughput of the whole file system, and the client's network
            key = f"PERSISTENT-{fx.throughput_per_tib_mbps}" if fx.deployment_type.startswith("PERSISTENT") else fx.deployment_type
            row = perf.get(key, {}) if isinstance(perf.get(key), dict) else {}
            burst = row.get("network_burst_mb_s_per_tib") or row.get("network_baseline_mb_s_per_tib")
            up = None
            up_text = ""
            if burst:
                up = min(tib * float(burst), client)
                up_text = (f"min(file system network {'burst' if row.get('network_burst_mb_s_per_tib') else 'baseline'} "
                           f"{tib:.3g} TiB x {burst} MB/s/TiB, one client {client:.0f} MB/s) = {up:.0f} MB/s")
            out.append(StorageExpectation(mount=s.mount, kind="fsx-lustre", name=f"FSx for Lustre {s.name} {s.mount}",
                                          read_mb_s=rd, write_mb_s=wr, derivation=deriv, source=f"{src}; {csrc}",
                                          upper_read_mb_s=up, upper_write_mb_s=up, upper_derivation=up_text))
        elif isinstance(s, LustreStorage) and s.server is not None and s.server.throughput_mb_s:
            mb_s = float(s.server.throughput_mb_s)
            out.append(StorageExpectation(mount=s.mount, kind="lustre", name=f"lustre {s.name} {s.mount}",
                                          read_mb_s=mb_s, write_mb_s=mb_s,
                                          derivation=f"declared server throughput {mb_s:.0f} MB/s (storage.server."
                                                     f"throughput_mb_s, file-system total)",
                                          source="blueprint storage.server.throughput_mb_s"))
        elif isinstance(s, NfsStorage) and s.throughput_mb_s:
            mb_s = float(s.throughput_mb_s)
            out.append(StorageExpectation(mount=s.mount, kind="nfs", name=f"nfs {s.name} {s.mount}",
                                          read_mb_s=mb_s, write_mb_s=mb_s,
                                          derivation=f"declared NFS server throughput {mb_s:.0f} MB/s to one client "
                                                     f"(storage.throughput_mb_s)",
                                          source="blueprint storage.throughput_mb_s"))
        else:
            kind = "lustre" if isinstance(s, LustreStorage) else "nfs"
            out.append(StorageExpectation(mount=s.mount, kind=kind, name=f"{kind} {s.name} {s.mount}",
                                          derivation=f"{kind} server throughput is not declared: no expectation"))
    return out


def context_from_blueprint(bp: Blueprint, group: str | None = None, **overrides: Any) -> JudgeContext:
    """The :class:`JudgeContext` of node group ``group`` of ``bp`` (default: the first compute
    group with GPUs), then ``overrides`` applied as explicit values (see :func:`apply_overrides`).

    Raises :class:`ContextError` for an unknown group or override.
    """
    r = _pick_group(bp, group)
    g, ns = r.group, r.settings
    cat = catalog()
    prov: list[tuple[str, str]] = []
    where = f"blueprint {bp.name}, node group {g.name}"
    nic_gbps: float | None = None
    nics: int | None = None
    net = bp.network
    if ns.instance_type:  # an EC2 instance type: the catalog knows its NICs
        it = r.hardware.instance
        if it is not None:
            nic_gbps, nics = it.per_nic_gbps, it.network_cards
            if isinstance(net, EfaNetwork) and isinstance(net.efa.interfaces, int):
                nics = min(net.efa.interfaces, it.network_cards)
            prov.append(("nic_gbps", f"instance type {it.name}: {it.network_gbps:g} Gbit/s over {it.network_cards} network cards"))
    elif g.hardware and g.hardware.nics:
        speeds = [n.speed_gbps for n in g.hardware.nics]
        nic_gbps, nics = sum(speeds) / len(speeds), len(speeds)
        prov.append(("nic_gbps", f"{where}: hardware.nics"))
    elif isinstance(net, InfinibandNetwork) and net.infiniband.generation:
        nic_gbps = cat.infiniband_port_gbps(net.infiniband.generation)
        prov.append(("nic_gbps", f"InfiniBand {net.infiniband.generation} port rate (NIC count not declared)"))
    elif isinstance(net, EthernetNetwork) and net.speed_gbps:
        nic_gbps, nics = net.speed_gbps, 1
        prov.append(("nic_gbps", f"{where}: network.speed_gbps"))
    spec = None
    if ns.gpu_model:
        try:
            spec = cat.gpu(ns.gpu_model)
        except UnknownHardwareError:
            spec = None
    client_gbps = None
    if ns.instance_type:
        it_c = r.hardware.instance
        client_gbps = it_c.network_gbps if it_c else None
    storage = _nvme_expectations(bp, r) + _shared_expectations(bp, client_gbps)
    v = bp.validation
    ctx = JudgeContext(
        nodes=g.size or None,
        gpus_per_node=ns.gpu_count or None,
        gpu_model=spec.key if spec else ns.gpu_model,
        fabric=net.fabric,
        instance_type=ns.instance_type,
        nic_gbps=nic_gbps,
        nics_per_node=nics,
        nvlink_gbytes_s=spec.nvlink_unidir_gbytes_s if spec and spec.has_nvlink else None,
        storage=tuple(storage),
        thresholds=suite_thresholds(v),
        blueprint=bp.name,
        group=g.name,
        provenance=tuple([("nodes", where), ("gpu_model", where), ("fabric", f"blueprint {bp.name}")] + prov),
    )
    return apply_overrides(ctx, **overrides) if overrides else ctx


_FIELDS = {f.name for f in dataclasses.fields(JudgeContext)} - {"explicit", "provenance"}
_ALIASES = {"gpu": "gpu_model", "target": "fio_target", "nvlink": "nvlink_gbytes_s"}


def apply_overrides(ctx: JudgeContext, **overrides: Any) -> JudgeContext:
    """``ctx`` with ``overrides`` set and marked explicit (they win over what a log says).

    ``instance_type`` also fills gpu_model, gpus_per_node, nic_gbps, nics_per_node, fabric,
    nvlink and the instance-store expectation unless those are given too; ``gpu`` (alias of
    ``gpu_model``: a key, short name or nvidia-smi name) is resolved to its catalog key and
    fills ``nvlink_gbytes_s``. ``None`` values are ignored. Raises :class:`ContextError` for an
    unknown field, GPU, instance type or fabric.
    """
    ov = {_ALIASES.get(k, k): v for k, v in overrides.items() if v is not None}
    unknown = set(ov) - _FIELDS
    if unknown:
        raise ContextError(f"unknown judge context field(s): {', '.join(sorted(unknown))}")
    cat = catalog()
    changes: dict[str, Any] = dict(ov)
    prov = list(ctx.provenance)
    if "fabric" in ov and ov["fabric"] not in FABRICS:
        raise ContextError(f"unknown fabric {ov['fabric']!r}; known: {', '.join(FABRICS)}")
    if "instance_type" in ov:
        try:
            it = cat.instance_type(str(ov["instance_type"]))
        except UnknownHardwareError as e:
            raise ContextError(str(e)) from None
        derived: dict[str, Any] = {"nic_gbps": it.per_nic_gbps, "nics_per_node": it.network_cards,
                                   "fabric": "efa" if it.efa_supported else "ethernet"}
        if it.gpu_count and it.gpu_key not in ("trainium", "trainium2"):
            derived.update(gpus_per_node=it.gpu_count, gpu_model=cat.resolve_gpu_key(it.gpu_key) or it.gpu_key)
        for k, v in derived.items():
            if k not in ov:
                changes[k] = v
                prov.append((k, f"instance type {it.name} (catalog)"))
        if it.instance_store and not any(s.kind in ("instance-store", "nvme", "nvme-raid0") for s in ctx.storage):
            st = it.instance_store
            changes["storage"] = ctx.storage + (StorageExpectation(
                mount=None, kind="instance-store", name=f"{it.name} NVMe instance store",
                read_iops_4k=st.random_read_iops_4k, write_iops_4k=st.write_iops_4k, drives=st.count,
                derivation=(f"{it.name} instance store, {st.count} drives: AWS's 4 KiB random IOPS for all volumes "
                            "together (no per-drive MB/s is published)"),
                source=it.source, upper_read_iops_4k=st.random_read_iops_4k, upper_write_iops_4k=st.write_iops_4k,
                upper_derivation="AWS's published IOPS (at queue-depth saturation, all volumes)"),)
    if "gpu_model" in changes:
        key = cat.resolve_gpu_key(str(changes["gpu_model"]))
        if key is None:
            raise ContextError(f"unknown GPU model {changes['gpu_model']!r}; known: {', '.join(sorted(cat.gpu_keys))}")
        changes["gpu_model"] = key
        if "nvlink_gbytes_s" not in ov:
            spec = cat.gpu(key)
            changes["nvlink_gbytes_s"] = spec.nvlink_unidir_gbytes_s if spec.has_nvlink else None
    for k in ("nodes", "gpus_per_node", "nics_per_node"):
        if k in ov and (not isinstance(ov[k], int) or ov[k] < 1):
            raise ContextError(f"{k.replace('_', '-')} must be a positive integer, got {ov[k]!r}")
    if "nic_gbps" in ov and (not isinstance(ov["nic_gbps"], (int, float)) or ov["nic_gbps"] <= 0):
        raise ContextError(f"nic-gbps must be a positive number (Gbit/s), got {ov['nic_gbps']!r}")
    for k in ov:
        prov.append((k, "flag"))
    return dataclasses.replace(ctx, **changes, explicit=ctx.explicit | frozenset(ov), provenance=tuple(prov))


def context_from_flags(
    blueprint: Blueprint | None = None,
    group: str | None = None,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    gpu: str | None = None,
    instance_type: str | None = None,
    fabric: str | None = None,
    nic_gbps: float | None = None,
    nics_per_node: int | None = None,
    target: str | None = None,
) -> JudgeContext:
    """The context of the ``judge`` command: the blueprint's (if any), then each flag that is not
    ``None`` applied as an explicit override. Raises :class:`ContextError` (a usage error, exit 2)
    for an unknown GPU, instance type, fabric or node group."""
    base = context_from_blueprint(blueprint, group) if blueprint is not None else JudgeContext()
    if blueprint is None and group:
        raise ContextError("--group needs --blueprint")
    ctx = apply_overrides(base, nodes=nodes, gpus_per_node=gpus_per_node, gpu_model=gpu, instance_type=instance_type,
                          fabric=fabric, nic_gbps=nic_gbps, nics_per_node=nics_per_node, fio_target=target)
    if target is not None:
        ctx = _resolve_target(ctx, target)
    return ctx


def _resolve_target(ctx: JudgeContext, target: str) -> JudgeContext:
    """Check that ``--target`` names a declared storage mount; a local NVMe known only from
    ``--instance-type`` (no mount) takes the target as its mount. Raises :class:`ContextError`."""
    want = target.rstrip("/") or "/"
    mounts = [s.mount for s in ctx.storage if s.mount]
    if any((m.rstrip("/") or "/") == want for m in mounts):
        return ctx
    unmounted = [s for s in ctx.storage if s.mount is None]
    if unmounted and not mounts:
        storage = tuple(dataclasses.replace(s, mount=want) if s.mount is None else s for s in ctx.storage)
        return dataclasses.replace(ctx, storage=storage)
    if not ctx.storage:
        raise ContextError(f"--target {target}: no storage is declared to judge it against; pass --blueprint (or "
                           "--instance-type for its local NVMe)")
    raise ContextError(f"--target {target} is not a storage mount the blueprint declares; declared: "
                       f"{', '.join(mounts) or 'none'}")


# ---------------------------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------------------------


BUSBW_BOUND_MARGIN = 1.10
"""A peak busbw more than 10% above the physical upper bound (:attr:`BusbwExpectation.upper_gbps`)
cannot come from the declared hardware: nccl-tests prints busbw with 2 decimals and times with CUDA
events averaged over its iterations (well under 1% error), and vendors' link rates are exact products
of lane rates (NVLink 4: 18 links x 25 GB/s); 10% leaves room for clock and rounding effects only."""

NCCL_TREE_BLOG = "https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/"
NCCL_PERFORMANCE = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"


@dataclass(frozen=True)
class BusbwExpectation:
    """Expected peak busbw (GB/s) of one collective run, with how it was derived.

    ``basis``: ``threshold`` (blueprint/flag), ``nvlink``, ``pcie`` or ``network`` (whichever
    bound is lower); ``algorithm``: the NCCL algorithm the figure assumes (``ring``, ``tree``,
    ``alltoall``, ``p2p``); ``intra_gbps``/``inter_gbps`` the two bounds (``None`` when not
    applicable or unknown: ``inter_gbps`` is ``None`` for a multi-node run without a NIC rate);
    ``upper_gbps`` the physical upper bound at line rate (no efficiency factor; ``None`` when no
    bound is known) with ``upper_derivation``; ``derivation`` a sentence with the arithmetic;
    ``source`` the URL of the formula.
    """

    busbw_gbps: float
    basis: str
    derivation: str
    source: str
    intra_gbps: float | None = None
    inter_gbps: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    algorithm: str = "ring"
    upper_gbps: float | None = None
    upper_derivation: str = ""


def intra_node_gbytes_s(gpu_key: str | None) -> tuple[float, str, str] | None:
    """Per-GPU unidirectional GB/s inside a node: NVLink when the part has it, else the PCIe x16
    rate of its generation. Returns ``(GB/s, "nvlink"|"pcie", source)`` or ``None``."""
    if not gpu_key:
        return None
    cat = catalog()
    try:
        spec = cat.gpu(gpu_key)
    except UnknownHardwareError:
        return None
    if spec.has_nvlink:
        return float(spec.nvlink_unidir_gbytes_s or 0), "nvlink", spec.raw.get("field_sources", {}).get("nvlink_gen", spec.source)
    pcie = str(spec.raw.get("pcie") or "")
    gen = pcie.split("_")[0] if pcie else ""
    rates = cat.fabrics.get("pcie_x16_unidir_gbytes_s", {})
    if gen in rates:
        return float(rates[gen]), "pcie", str(cat.fabrics.get("pcie_source", ""))
    return None


def _nvls(gpu_key: str | None) -> bool:
    """True for NVSwitch parts with NVLink SHARP (NVLink 4+: H100/H200/B200/GB200), which reduce in the switch."""
    if not gpu_key:
        return False
    try:
        return int(catalog().gpu(gpu_key).nvlink_gen or 0) >= 4
    except UnknownHardwareError:
        return False


def tree_two_node_fraction() -> float:
    """Measured fraction of the tree algorithm's line-rate busbw that healthy 2-node all_reduce runs reach
    (catalog ``nccl_algorithms.tree_two_node_fraction``, with the measurements it comes from)."""
    return float(catalog().extras["nccl_algorithms"]["tree_two_node_fraction"])


def expected_busbw(
    ctx: JudgeContext,
    *,
    collective: str | None,
    ranks: int,
    nodes: int,
    gpu_key: str | None,
    candidates: tuple[str, ...] = (),
    min_busbw_gbps: float | None = None,
) -> BusbwExpectation | None:
    """Expected peak busbw for ``collective`` over ``ranks`` ranks on ``nodes`` nodes of ``gpu_key``.

    Notation: ``n`` ranks, ``k`` nodes, ``g = n / k`` GPUs per node, ``L`` the per-GPU link rate
    inside the node (NVLink unidirectional, else PCIe x16; GB/s), ``B`` the per-GPU share of the
    node's NICs (NICs x Gbit/s / 8 / GPUs per node; GB/s), ``f`` the catalog's achievable fraction
    (0.8), ``t`` the measured tree fraction (:func:`tree_two_node_fraction`, 0.65).

    Expected figure (what a healthy cluster delivers; NCCL picks the faster algorithm):

    * one node: ``f x L`` (ring; NVLS may exceed it, which is noted, not judged);
    * all_reduce across nodes: ring ``f x g x B`` (every channel's ring leaves each node once, so
      busbw is the node's NIC rate over its GPUs' rings); on exactly two nodes the double binary
      tree sends each byte across the network once per direction instead of twice, so busbw
      reaches ``t x 2(n-1)/n x g x B`` (NCCL 2.4 trees: :data:`NCCL_TREE_BLOG`; on more nodes
      the tree's interior nodes carry twice the traffic and it is no faster than the ring);
      published measurements agree: 2 x p5 487 GB/s (tree), 4 x p6-b200 382 and 4 x p5en 365
      GB/s (ring, 95% and 91% of ``g x B`` = 400);
    * all_gather, reduce_scatter, broadcast, reduce (rings only): ``f x g x B``;
    * alltoall: ``f x B x (n-1)/(n-g)`` (only the off-node share crosses the NICs);
    * sendrecv: ``f x B``;
    * each capped by the intra-node figure ``f x L`` (``f x L x 2(n-1)/n`` for the tree on NVLS
      parts, where the NVSwitch reduces so each GPU sends and receives the data once).

    Physical upper bound (``upper_gbps``, line rate, no efficiency; a result above it with
    :data:`BUSBW_BOUND_MARGIN` cannot come from this hardware): inside a node ``L`` (every
    all_reduce without in-switch reduction sends ``2(n-1)/n`` of the data per GPU: Patarasuk and
    Yuan's bandwidth-optimal bound), ``2(n-1)/n x L`` for all_reduce on NVLS parts; across nodes
    all_reduce/all_gather/reduce_scatter ``B x (n-1)/(k-1)`` (the same bound per node; on
    InfiniBand, where SHARP can reduce in the switch, ``2(n-1)/n x g x B``), broadcast, reduce and
    sendrecv ``g x B``, alltoall ``B x (n-1)/(n-g)``.

    ``min_busbw_gbps`` (GB/s; ``validation.nccl.thresholds.min_busbw_gbps``) replaces the derived
    figure when set. ``collective`` ``None`` with ``candidates`` uses the lowest candidate expectation. Returns
    ``None`` when neither an intra-node nor an inter-node figure can be computed and no threshold
    is set. For a multi-node run without a NIC rate the intra-node figure is returned with
    ``inter_gbps`` ``None``: the judge then gives no bandwidth verdict.
    """
    cat = catalog()
    frac = cat.achievable_fraction
    tfrac = tree_two_node_fraction()
    ranks = max(ranks, 1)
    nodes = max(min(nodes, ranks), 1)
    g = max(ranks // nodes, 1)
    n, k = ranks, nodes
    colls = [collective] if collective else (list(candidates) or ["all_reduce"])
    link = None
    link_kind = ""
    intra_src = ""
    if g >= 2 or k >= 2:
        got = intra_node_gbytes_s(gpu_key)
        if got is not None:
            link, link_kind, intra_src = got
    nvls = _nvls(gpu_key) and link_kind == "nvlink"
    ar = 2.0 * (n - 1) / n
    notes: list[str] = []
    b = node_gbps = None
    gpus = max(ctx.gpus_per_node or g, g)
    if k >= 2 and ctx.nic_gbps is not None:
        nics = ctx.nics_per_node
        if nics is None:
            nics = g
            notes.append(f"NIC count unknown: assumed one {ctx.nic_gbps:g} Gbit/s NIC per GPU (pass --nics-per-node)")
        node_gbps = ctx.nic_gbps * nics
        b = node_gbps / 8.0 / gpus  # per-GPU NIC rate, GB/s (the node's NICs are shared by all its GPUs)
    best: tuple[float, str, str, str, float | None, float | None, float | None, str] | None = None
    for c in colls:
        intra_exp = intra_up = None
        algo = "ring"
        inter = inter_up = None
        inter_text = up_text = ""
        if b is not None:
            if c == "all_reduce":
                ring = frac * g * b
                tree = tfrac * ar * g * b if k == 2 else 0.0
                if tree > ring:
                    algo, inter = "tree", tree
                    inter_text = (f"network {node_gbps:g} Gbit/s per node / 8 / {gpus} GPUs = {b:.3g} GB/s per GPU; "
                                  f"2 nodes: tree {tfrac:g} x 2(n-1)/n x g x B = {tfrac:g} x {ar:.4g} x {g} x {b:.3g} "
                                  f"= {tree:.1f} GB/s")
                else:
                    inter = ring
                    inter_text = (f"network {node_gbps:g} Gbit/s per node / 8 / {gpus} GPUs = {b:.3g} GB/s per GPU; "
                                  f"{k} nodes: ring {frac:g} x g x B = {frac:g} x {g} x {b:.3g} = {ring:.1f} GB/s")
                if ctx.fabric == "infiniband":
                    inter_up, up_text = ar * g * b, f"network {ar:.4g} x g x B = {ar * g * b:.1f} GB/s (SHARP)"
                else:
                    inter_up = b * (n - 1) / (k - 1)
                    up_text = f"network B x (n-1)/(k-1) = {b:.3g} x {n - 1}/{k - 1} = {inter_up:.1f} GB/s"
            elif c == "alltoall":
                inter = frac * b * (n - 1) / max(n - g, 1)
                inter_up = b * (n - 1) / max(n - g, 1)
                algo = "alltoall"
                inter_text = (f"network {b:.3g} GB/s per GPU x {frac:g} x (n-1)/(n-g) = {n - 1}/{n - g} = {inter:.1f} GB/s "
                              "(alltoall: the off-node share crosses the NICs)")
                up_text = f"network B x (n-1)/(n-g) = {inter_up:.1f} GB/s"
            elif c == "sendrecv":
                inter, inter_up, algo = frac * b, g * b, "p2p"
                inter_text = f"network {b:.3g} GB/s per GPU x {frac:g} = {inter:.1f} GB/s"
                up_text = f"network g x B = {inter_up:.1f} GB/s"
            else:
                inter = frac * g * b
                inter_text = (f"network {b:.3g} GB/s per GPU x {g} GPUs per node (ring: the node's NICs carry every "
                              f"ring once) x {frac:g} = {inter:.1f} GB/s")
                if c in ("all_gather", "reduce_scatter", "gather", "scatter"):
                    inter_up = b * (n - 1) / (k - 1)
                    up_text = f"network B x (n-1)/(k-1) = {inter_up:.1f} GB/s"
                else:
                    inter_up = g * b
                    up_text = f"network g x B = {inter_up:.1f} GB/s"
        if link is not None:
            # NVLS reduces in the NVSwitch: each GPU sends and receives the data once (algbw <= L);
            # without it every GPU sends 2(n-1)/n of the data (busbw <= L), whatever the algorithm
            chain = ar if (algo == "tree" and nvls) else 1.0
            intra_exp = frac * link * chain
            intra_up = link * (ar if (c == "all_reduce" and nvls) else 1.0)
        cand_exp = min(x for x in (inter, intra_exp) if x is not None) if (inter is not None or intra_exp is not None) else None
        if cand_exp is None:
            continue
        ups = [x for x in (inter_up, intra_up) if x is not None]
        up = min(ups) if ups else None
        if up is not None:
            parts = [t for t in (up_text,) if t and inter_up == up]
            if intra_up == up:
                parts.append(f"{link_kind} {link:g} GB/s per GPU" + (f" x 2(n-1)/n = {intra_up:.1f} GB/s"
                                                                     if intra_up != link else ""))
            up_deriv = " and ".join(parts)
        else:
            up_deriv = ""
        if best is None or cand_exp < best[0]:
            intra_text = ""
            if intra_exp is not None:
                intra_text = (f"{link_kind} {link:g} GB/s per GPU x {frac:g}" + (" x 2(n-1)/n (NVLS)" if chain != 1.0 else "")
                              + f" = {intra_exp:.1f} GB/s")
            if inter is not None and (intra_exp is None or inter < intra_exp):
                basis, text = "network", inter_text
            else:
                basis, text = (link_kind or "nvlink"), intra_text
            best = (cand_exp, basis, text, algo, intra_exp, inter, up, up_deriv)
    th = min_busbw_gbps
    if best is None:
        if th is None:
            return None
        return BusbwExpectation(th, "threshold", f"validation.nccl.thresholds.min_busbw_gbps = {th:g} GB/s", "blueprint")
    val, basis, text, algo, intra_exp, inter, up, up_deriv = best
    src = ML_NETWORK if basis == "network" else (intra_src or ML_NETWORK)
    if algo == "tree":
        src = f"{NCCL_TREE_BLOG}; {ML_NETWORK}"
    if th is not None:
        return BusbwExpectation(th, "threshold", f"validation.nccl.thresholds.min_busbw_gbps = {th:g} GB/s", "blueprint",
                                intra_exp, inter, tuple(notes), algo, up, up_deriv)
    return BusbwExpectation(val, basis, text, src, intra_exp, inter, tuple(notes), algo, up, up_deriv)


def mfu_floor(gpu_key: str | None) -> tuple[float, str, str]:
    """The MFU floor of a GPU: ``(floor 0-1, derivation, source)``.

    :data:`MFU_FLOOR_HOPPER` scaled by the GPU's measured bf16 matmul efficiency (MAMF / peak,
    catalog ``reference_benchmarks.max_achievable_matmul_tflops``) relative to H100's; GPUs without
    a MAMF figure get the Hopper floor.
    """
    cat = catalog()
    table = cat.reference_benchmarks.get("max_achievable_matmul_tflops", {})
    bf16 = table.get("bf16", {})
    src = str(table.get("source", ""))
    ref = bf16.get("h100-sxm", {}).get("efficiency")
    key = _MAMF_KEYS.get(gpu_key or "")
    eff = bf16.get(key, {}).get("efficiency") if key else None
    if eff and ref:
        floor = MFU_FLOOR_HOPPER * float(eff) / float(ref)
        deriv = (f"{MFU_FLOOR_HOPPER:.0%} (H100-class floor) x matmul efficiency {float(eff):.3f} / "
                 f"{float(ref):.3f} (H100) = {floor:.1%}")
        return floor, deriv, f"{TORCHTITAN_H100}; {src}"
    return MFU_FLOOR_HOPPER, f"{MFU_FLOOR_HOPPER:.0%} (H100-class floor; no matmul efficiency known for this GPU)", TORCHTITAN_H100
