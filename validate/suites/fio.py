"""The fio suite: storage benchmarks on the NVMe scratch and the shared file systems.

Plan: one test per target (``fio-[group-]<label>``): every ``local_nvme`` mount and storage mount of
the group, or ``validation.fio.targets``; a local run tests those present and writable here, else the
temporary directory (with a note, and an ``invalid`` result when declared targets are missing).
Payload: ``fio_bench.py`` (fio profiles: 1 MiB sequential read/write, 4 KiB random read) writing one
fio JSON document (``raw/<id>.json``). On Kubernetes the target is mounted at the same path.

Judge: job error -> fail; verify failure -> fail; buffered I/O (no ``direct=1``, or ``buffered=1``)
against a device or file-system expectation -> invalid (the page cache was measured); above the
storage's physical upper bound (:data:`FIO_BOUND_MARGIN`) -> invalid;
bandwidth (sequential, >= 128 KiB blocks) or 4 KiB IOPS (random) against the target's expectation
(:class:`StorageExpectation`, from the blueprint's storage and the catalog) -> pass/warn/fail by the ratios of
``validation.fio.thresholds``. A job without ``rw``/``bs`` is judged with fio's defaults (read, 4 KiB).

Metrics (:class:`FioMetrics`): ``read_bw_bytes_per_s``/``write_bw_bytes_per_s`` (bytes/s; reports show
MB/s = 1e6 bytes/s), ``read_iops``/``write_iops``, ``rw``, ``block_size_bytes``, ``verify_failures`` ...;
expected (:class:`FioExpected`): ``read_mb_s`` or ``read_iops`` ..., ``ratio``, ``derivation``, ``source``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

from blueprints.catalog import InstanceTypeSpec, catalog
from blueprints.models import Blueprint, FioThresholds, LustreStorage, NfsStorage, NodeGroup
from blueprints.resolved import ResolvedGroup
from blueprints.settings import on_mount

from ..expectations import ContextError, JudgeContext
from ..parsers.bounds import loads as bounded_loads
from ..parsers.fio import FioJob, FioReport, VerifyFailure, parse_fio, parse_size
from ..plan import PlannedTest, TestParams
from ..results import Expected, JudgeResult, Metrics, Verdict, fmt_bytes, pct
from ..signatures import by_id, doc_ref
from .base import MISMATCH, GroupPlan, HtmlSection, Suite, nothing, part_label, png

__all__ = [
    "FIO_BOUND_MARGIN",
    "FioExpectations",
    "FioExpected",
    "FioMetrics",
    "FioParams",
    "FioSuite",
    "StorageExpectation",
    "fio_expectations",
    "fio_expected",
    "fio_metrics",
    "fsx_client_mb_s",
    "judge_fio_job",
    "judge_fio_report",
]

MAX_BARS = 40
"""At most this many fio bars in the report's plot."""


@dataclass(frozen=True)
class FioParams(TestParams):
    """What one fio test runs (``fio_bench.py``).

    ``target``: the directory tested; ``target_kind``: ``nvme``, ``lustre``, ``nfs`` or ``dir``;
    ``size``: file size per job (fio size, e.g. ``4G``); ``runtime_s``: seconds per profile;
    ``numjobs``: parallel jobs per profile; ``iodepth``: queue depth.
    """

    target: str
    target_kind: str
    size: str
    runtime_s: int
    numjobs: int
    iodepth: int


class FioMetrics(Metrics, total=False):
    """What a fio result measured (``JudgeResult.metrics`` of kind ``fio``): ``job`` (fio job name), ``rw``
    (fio's ``rw`` as run, fio's default ``read`` when unset), ``block_size_bytes`` (bytes), ``numjobs``,
    ``iodepth``, ``direct`` / ``buffered`` (fio's I/O mode), ``paths`` (files or devices the job used),
    ``read_bw_bytes_per_s`` / ``write_bw_bytes_per_s`` (bytes/s), ``read_iops`` / ``write_iops``,
    ``read_mb_s`` / ``write_mb_s`` (MB/s = 1e6 bytes/s), ``read_p99_latency_us`` /
    ``write_p99_latency_us`` (99th percentile completion latency, microseconds), ``error`` (fio's errno,
    0: none), ``verify_failures`` (blocks whose data did not verify)."""

    job: str
    rw: str
    block_size_bytes: int
    numjobs: int
    iodepth: int | None
    direct: bool | None
    buffered: bool | None
    paths: list[str]
    read_bw_bytes_per_s: float | None
    write_bw_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    read_mb_s: float
    write_mb_s: float
    read_p99_latency_us: float | None
    write_p99_latency_us: float | None
    error: int
    verify_failures: int


class FioExpected(Expected, total=False):
    """What a fio result was compared with (``JudgeResult.expected`` of kind ``fio``, from the target's
    :class:`StorageExpectation`): ``target`` (mount, ``None`` for an unmounted local NVMe), ``target_kind``,
    ``target_name``, ``warn_ratio`` / ``fail_ratio`` (``validation.fio.thresholds``), the expected
    ``read_mb_s`` / ``write_mb_s`` (MB/s = 1e6 bytes/s) or ``read_iops`` / ``write_iops`` (4 KiB random),
    the physical bounds ``upper_read_mb_s`` ... ``upper_write_iops`` a result exceeded, and the common
    ``ratio``, ``derivation``, ``source``."""

    target: str | None
    target_kind: str
    target_name: str
    warn_ratio: float
    fail_ratio: float
    read_mb_s: float
    write_mb_s: float
    read_iops: float
    write_iops: float
    upper_read_mb_s: float
    upper_write_mb_s: float
    upper_read_iops: float
    upper_write_iops: float


def fio_metrics(r: JudgeResult) -> FioMetrics:
    """``r.metrics`` as the fio suite's keys (``r`` a result of kind ``fio``; the same dictionary)."""
    return cast(FioMetrics, r.metrics)


def fio_expected(r: JudgeResult) -> FioExpected:
    """``r.expected`` as the fio suite's keys (the same dictionary)."""
    return cast(FioExpected, r.expected)


def _directions(m: FioMetrics) -> list[tuple[str, float | None, float | None]]:
    """``[(direction, bytes/s, IOPS)]`` for read and write."""
    return [("read", m.get("read_bw_bytes_per_s"), m.get("read_iops")),
            ("write", m.get("write_bw_bytes_per_s"), m.get("write_iops"))]


def _expected_rate(e: FioExpected, d: str, unit: str, value: float, *, upper: bool = False) -> None:
    """Record in ``e`` the expected (or, ``upper``, the physical upper bound of the) ``unit`` (``mb_s``:
    MB/s; ``iops``: 4 KiB IOPS) of direction ``d`` (``read``/``write``)."""
    read = d == "read"
    if unit == "mb_s" and upper:
        e["upper_read_mb_s" if read else "upper_write_mb_s"] = value
    elif unit == "mb_s":
        e["read_mb_s" if read else "write_mb_s"] = value
    elif upper:
        e["upper_read_iops" if read else "upper_write_iops"] = value
    else:
        e["read_iops" if read else "write_iops"] = value


def _thresholds(ctx: JudgeContext) -> FioThresholds:
    """The fio thresholds of ``ctx`` (``validation.fio.thresholds``, else the model's defaults)."""
    return ctx.thresholds_for(FioSuite.name, FioThresholds)


# ---------------------------------------------------------------------------------------------
# expectations
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
    them by more than :data:`FIO_BOUND_MARGIN` cannot come from this storage.
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


def _resolve_target(exp: FioExpectations, target: str) -> FioExpectations:
    """``exp`` judged against ``target`` (the judge's ``--target``): it must name a declared storage
    mount; a local NVMe known only from ``--instance-type`` (no mount) takes the target as its mount.
    Raises :class:`~validate.expectations.ContextError`."""
    want = target.rstrip("/") or "/"
    mounts = [s.mount for s in exp.storage if s.mount]
    if any((m.rstrip("/") or "/") == want for m in mounts):
        return dataclasses.replace(exp, target=target)
    unmounted = [s for s in exp.storage if s.mount is None]
    if unmounted and not mounts:
        storage = tuple(dataclasses.replace(s, mount=want) if s.mount is None else s for s in exp.storage)
        return dataclasses.replace(exp, storage=storage, target=target)
    if not exp.storage:
        raise ContextError(f"--target {target}: no storage is declared to judge it against; pass --blueprint (or "
                           "--instance-type for its local NVMe)")
    raise ContextError(f"--target {target} is not a storage mount the blueprint declares; declared: "
                       f"{', '.join(mounts) or 'none'}")


def _instance_store(it: InstanceTypeSpec) -> StorageExpectation | None:
    """The NVMe instance store of EC2 instance type ``it`` (catalog ``instance_store``: AWS's 4 KiB random
    IOPS for all volumes together, with the instance type's source URL), mounted nobody knows where;
    ``None`` for a type without one."""
    st = it.instance_store
    if st is None:
        return None
    return StorageExpectation(
        mount=None, kind="instance-store", name=f"{it.name} NVMe instance store",
        read_iops_4k=st.random_read_iops_4k, write_iops_4k=st.write_iops_4k, drives=st.count,
        derivation=(f"{it.name} instance store, {st.count} drives: AWS's 4 KiB random IOPS for all volumes "
                    "together (no per-drive MB/s is published)"),
        source=it.source, upper_read_iops_4k=st.random_read_iops_4k, upper_write_iops_4k=st.write_iops_4k,
        upper_derivation="AWS's published IOPS (at queue-depth saturation, all volumes)")


@dataclass(frozen=True)
class FioExpectations:
    """What the fio suite expects of a node group, held in the judge context under ``fio``
    (:meth:`~validate.expectations.JudgeContext.expectations_for`).

    ``storage``: one :class:`StorageExpectation` per storage target (the group's NVMe scratch, the
    shared file systems; an ``--instance-type``'s instance store); ``target``: the mount fio jobs are
    judged against when their paths do not say (the judge's ``--target``, or the tested directory of a
    planned test), ``None`` when not given. In the context's JSON: ``storage`` and ``fio_target``.
    """

    storage: tuple[StorageExpectation, ...] = ()
    target: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"storage": [...], "fio_target": ...}``."""
        return {"storage": [dataclasses.asdict(s) for s in self.storage], "fio_target": self.target}


def fio_expectations(ctx: JudgeContext) -> FioExpectations:
    """The fio suite's expectations in ``ctx`` (none when the context holds none)."""
    return ctx.expectations_for(FioSuite.name, FioExpectations)


class FioSuite(Suite):
    """The fio suite (see the module docstring)."""

    name = "fio"
    title = "Storage (fio)"
    payloads = ("fio_bench.py",)
    params_type = FioParams
    thresholds_type = FioThresholds
    markers = (
        (re.compile(r"\(groupid=\d+, jobs=\d+\): err="), 5),
        (re.compile(r"\(g=\d+\): rw=\w+"), 5),
        (re.compile(r"Run status group \d+"), 5),
        (re.compile(r"\b(?:read|write)\s*:\s*IOPS="), 4),
        (re.compile(r"verify failed at file"), 5),
        (re.compile(r"(?m)^fio-\d"), 4),
        (re.compile(r"fio: pid=\d+, err=\d+"), 5),
        (re.compile(r"verify: bad magic header"), 5),
    )
    """fio's normal text output: job, IO, status-group and verify lines."""
    name_hints = ("fio",)
    container_setup = ("command -v fio >/dev/null || { (apt-get update -qq && apt-get install -y -qq fio) >/dev/null 2>&1 "
                       "|| dnf install -y -q fio >/dev/null 2>&1; }")

    # -- recognising its outputs ------------------------------------------------------------------

    def recognises(self, window: str) -> bool:
        """fio JSON (``--output-format=json``/``json+``): a ``"fio version"`` key, or ``"jobs"`` with ``"jobname"``."""
        return bool(re.search(r'"fio version"\s*:', window) or (re.search(r'"jobs"\s*:', window) and '"jobname"' in window))

    # -- planning -------------------------------------------------------------------------------

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """One test per target of the group (see the module docstring)."""
        targets = fio_targets(gp.bp, gp.group)
        notes: list[str] = []
        fio_mismatch: str | None = None
        if gp.local:
            usable = [t for t in targets if _usable_here(t[1])]
            missing = [t[1] for t in targets if t not in usable]
            if missing:
                notes.append(f"fio targets not present or not writable on this machine: {', '.join(missing)}")
            if not usable:
                tmp = tempfile.gettempdir()
                why = "none of the declared fio targets exists here" if targets else "no fio target is declared"
                usable = [("tmp", tmp, "dir")]
                notes.append(f"fio: {why}; testing the temporary directory {tmp} instead")
                if targets:
                    fio_mismatch = (f"{MISMATCH} the declared fio targets ({', '.join(t[1] for t in targets)}) do not "
                                    f"exist on this machine; a run here measures the temporary directory {tmp} instead")
            targets = usable
        f = gp.bp.validation.fio
        tests = []
        for label, path, kind in targets:
            tnotes: tuple[str, ...] = ("temporary directory: no expectation, figures are informative",) if label == "tmp" else ()
            if gp.local and fio_mismatch:
                tnotes += (fio_mismatch,)
            tests.append(PlannedTest(
                id=gp.test_id(self.name, label), kind=self.name, group=gp.group.name, nodes=1, ranks_per_node=1,
                device="cpu",
                params=FioParams(target=path, target_kind=kind, size=f.size, runtime_s=f.runtime_s,
                                 numjobs=f.numjobs, iodepth=f.iodepth),
                description=f"fio on {path} ({kind})", notes=tnotes))
        return tests, notes

    # -- payload --------------------------------------------------------------------------------

    def payload_args(self, test: PlannedTest) -> list[str]:
        """Flags of ``fio_bench.py``."""
        p = test.params_as(FioParams)
        return ["--target", p.target, "--kind", p.target_kind, "--size", str(p.size),
                "--runtime", str(p.runtime_s), "--numjobs", str(p.numjobs), "--iodepth", str(p.iodepth)]

    def gpus(self, test: PlannedTest) -> int:
        """fio needs no GPU."""
        return 0

    def mounts(self, test: PlannedTest) -> tuple[str, ...]:
        """The target directory."""
        return (test.params_as(FioParams).target,)

    # -- judging --------------------------------------------------------------------------------

    override_names: ClassVar[Mapping[str, str]] = {"target": "fio_target", "fio_target": "fio_target"}
    """The judge's ``--target`` (the mount fio jobs tested), recorded as ``fio_target``."""

    def context_expectations(self, bp: Blueprint | None, group: ResolvedGroup | None) -> FioExpectations:
        """The storage targets of node ``group``: its NVMe scratch (RAID0 of the declared drives, or the
        EC2 instance store) and the blueprint's shared file systems as one client of the group sees them
        (:func:`_nvme_expectations`, :func:`_shared_expectations`); none without a blueprint."""
        if bp is None or group is None:
            return FioExpectations()
        it = group.hardware.instance if group.settings.instance_type else None
        client_gbps = it.network_gbps if it is not None else None
        return FioExpectations(storage=tuple(_nvme_expectations(bp, group) + _shared_expectations(bp, client_gbps)))

    def override_expectations(self, current: object, ctx: JudgeContext,
                              overrides: Mapping[str, Any]) -> FioExpectations:
        """An ``instance_type`` override adds its instance store when no local NVMe is expected yet; a
        ``fio_target`` must name a declared mount (:func:`_resolve_target`; raises
        :class:`~validate.expectations.ContextError`)."""
        exp = current if isinstance(current, FioExpectations) else FioExpectations()
        if "instance_type" in overrides and ctx.instance_type and not any(s.is_device for s in exp.storage):
            store = _instance_store(catalog().instance_type(ctx.instance_type))
            if store is not None:
                exp = dataclasses.replace(exp, storage=exp.storage + (store,))
        if overrides.get("fio_target") is not None:
            exp = _resolve_target(exp, str(overrides["fio_target"]))
        return exp

    def adjust_context(self, ctx: JudgeContext, test: PlannedTest, local: bool) -> JudgeContext:
        """Jobs are judged against the tested directory's storage."""
        target = test.params_as(FioParams).target
        ctx = ctx.with_expectations(self.name, dataclasses.replace(fio_expectations(ctx), target=target))
        return dataclasses.replace(ctx, provenance=ctx.provenance + (("fio_target", f"test {test.id}: the tested directory"),))

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """One result per fio job (plus one for verify failures or errors no job owns)."""
        return _judge_fio_text(text, ctx, source, label)

    # -- reporting ------------------------------------------------------------------------------

    def summary(self, r: JudgeResult) -> str | None:
        """``read bs=1 MiB: read 6500 MB/s, 6200 IOPS = 95% of expected``."""
        m, e = fio_metrics(r), fio_expected(r)
        if not (m.get("read_bw_bytes_per_s") or m.get("write_bw_bytes_per_s")):
            return None
        parts = []
        for d, bw, iops in _directions(m):
            if bw:
                parts.append(f"{d} {bw / 1e6:.5g} MB/s, {iops if iops is not None else 0:.4g} IOPS")
        s = f"{m.get('rw') or 'job'} bs={fmt_bytes(m.get('block_size_bytes'))}: " + ("; ".join(parts) or "no I/O")
        ratio = e.get("ratio")
        if ratio is not None:
            s += f" = {pct(ratio)} of expected"
        return s

    def expected_text(self, r: JudgeResult) -> str | None:
        """``read 6500 MB/s`` or ``read 800000 IOPS``."""
        e = fio_expected(r)
        for d, mb_s, iops in (("read", e.get("read_mb_s"), e.get("read_iops")),
                              ("write", e.get("write_mb_s"), e.get("write_iops"))):
            if mb_s:
                return f"{d} {mb_s:.5g} MB/s"
            if iops:
                return f"{d} {iops:.5g} IOPS"
        return None

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """Throughput (MB/s = 1e6 bytes/s) of every job against its expectation, one bar per direction."""
        rows = []
        for r in (x for x in results if x.kind == self.name):
            m, e = fio_metrics(r), fio_expected(r)
            for d, bw, exp_mb_s in (("read", m.get("read_bw_bytes_per_s"), e.get("read_mb_s")),
                                    ("write", m.get("write_bw_bytes_per_s"), e.get("write_mb_s"))):
                if bw:
                    rows.append((f"{r.title} ({d})", bw / 1e6, exp_mb_s, r.verdict))
        if not rows:
            return None
        rows = rows[:MAX_BARS]
        import matplotlib.pyplot as plt

        colors = {"pass": "tab:green", "warn": "tab:orange", "fail": "tab:red", "invalid": "tab:gray"}
        fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.2))
        ys = list(range(len(rows)))
        ax.barh(ys, [x[1] for x in rows], color=[colors.get(x[3], "tab:blue") for x in rows], label="measured MB/s")
        exp = [(y, x[2]) for y, x in zip(ys, rows) if x[2]]
        if exp:
            ax.scatter([e[1] for e in exp], [e[0] for e in exp], marker="|", s=400, color="black", label="expected MB/s",
                       zorder=3)
        vals = [x[1] for x in rows] + [e[1] for e in exp]
        if max(vals) / max(min(v for v in vals if v > 0), 1e-9) > 50:
            ax.set_xscale("log")
        ax.set_yticks(ys)
        ax.set_yticklabels([x[0] for x in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("MB/s (1e6 bytes/s)")
        ax.set_title("fio throughput vs expectation", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7)
        return HtmlSection(heading="Storage (fio)", png=png(fig), alt="fio throughput against expectation")



def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "root"


def fio_targets(bp: Blueprint, g: NodeGroup) -> list[tuple[str, str, str]]:
    """``[(label, directory, kind)]`` fio should test for group ``g`` (kind: nvme, lustre, nfs, dir)."""
    declared: list[tuple[str, str, str]] = []
    if g.local_nvme is not None:
        declared.append(("scratch", g.local_nvme.mount, "nvme"))
    for s in bp.storage:
        declared.append((s.name, s.mount, "lustre" if isinstance(s, LustreStorage) else "nfs"))
    if not bp.validation.fio.targets:
        return declared
    out = []
    for t in bp.validation.fio.targets:
        match = next((d for d in declared if on_mount(t, d[1])), None)
        out.append((match[0] if match and match[1] == t else _slug(t), t, match[2] if match else "dir"))
    return out


def _usable_here(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


# ---------------------------------------------------------------------------------------------
# judging
# ---------------------------------------------------------------------------------------------


SEQ_MIN_BS = 128 * 1024
"""Sequential jobs with blocks of at least 128 KiB are judged on bandwidth."""
RAND_BS = 4096
"""Random jobs with 4 KiB blocks are judged on IOPS (the unit AWS and drive vendors publish)."""


def _judge_fio_text(text: str, ctx: JudgeContext, source: str, label: str | None) -> list[JudgeResult]:
    name = Path(source).name
    try:
        report = parse_fio(text)
    except Exception:  # noqa: BLE001 - parse_fio is total; belt and braces for odd input
        report = FioReport(fmt="text")
    if report.empty:
        r = JudgeResult(source=source, kind="fio", label=label or name)
        payload_error, missing_tool = _fio_payload_error(text)
        if missing_tool:
            fio_metrics(r)["missing_tool"] = missing_tool
            r.degrade(Verdict.INVALID, f"the fio suite could not run: {payload_error}. A tool that is not installed says "
                                 "nothing about the hardware")
            return [r]
        if payload_error:
            r.degrade(Verdict.FAIL, f"fio did not run to the end: {payload_error}. {_diagnose_fio(text, payload_error)}")
            return [r]
        return [nothing(r, text, "no fio job, result or verify line found")]
    return judge_fio_report(report, ctx, source=source, label=label)


def _diagnose_fio(text: str, error: str) -> str:
    """Likely cause and fix of a fio run that failed, from fio's own exit status and stderr (recorded by the
    payload as ``fio_returncode`` / ``fio_stderr``) rather than a guess: a signal, a full target, a target
    that cannot be written, an interrupted payload."""
    import signal as _signal

    meta: dict[str, Any] = {}
    start = text.find("{")
    if start >= 0:
        try:
            doc = bounded_loads(text[start:])
            meta = doc.get("clusterforge") or {} if isinstance(doc, dict) else {}
        except ValueError:
            meta = {}
    rc = meta.get("fio_returncode") if isinstance(meta, dict) else None
    m = re.search(r"fio exited (-?\d+)", error)
    if not isinstance(rc, int) and m:
        rc = int(m.group(1))
    said = f"{error}\n{meta.get('fio_stderr') or ''}" if isinstance(meta, dict) else error
    if isinstance(rc, int) and rc < 0:
        try:
            name = _signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return (f"Likely cause: fio was killed by {name} (the OOM killer, a timeout or an operator); fix: check "
                "`dmesg` for an out-of-memory kill on the node and rerun")
    if re.search(r"No space left on device|ENOSPC|error=28\b|MiB free: fio needs", said):
        return ("Likely cause: the target file system is full (ENOSPC); fix: free space on the target or lower "
                "validation.fio size, and rerun")
    if re.search(r"Permission denied|Read-only file system|EACCES|EROFS|error=13\b|error=30\b", said):
        return "Likely cause: the target cannot be written (permissions or a read-only mount); fix: check the mount"
    if "interrupted by" in error:
        return "Likely cause: the run was interrupted (a signal to the payload); fix: rerun with --resume"
    return ("Likely cause: fio reported an error (quoted above) on the target; fix: check the target directory exists, "
            "is writable and is the mount the blueprint declares")


def _fio_payload_error(text: str) -> tuple[str | None, str | None]:
    """``(error, missing_tool)`` that validate's fio payload records in ``clusterforge`` when fio could
    not run (``missing_tool``: the executable that is not installed), else ``(None, None)``."""
    start = text.find("{")
    if start < 0:
        return None, None
    try:
        doc = bounded_loads(text[start:])
    except ValueError:  # not JSON, or over the bounds of validate.parsers.bounds
        return None, None
    meta = doc.get("clusterforge") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return None, None
    err, tool = meta.get("error"), meta.get("missing_tool")
    return (str(err) if err else None), (str(tool) if tool else None)


def _verify_reason(fails: list[VerifyFailure]) -> str:
    f = fails[0]
    first = (f"{f.kind} mismatch in {f.file} at offset {f.offset}, length {f.length}" if f.file else f.text)
    return (f"data verification failed ({len(fails)} block(s); first: {first}): the storage returned different data "
            "than fio wrote. Likely cause: a failing drive, controller or RAID member, or file-system corruption; "
            "check dmesg for I/O errors and `nvme smart-log` on each drive, then rerun fio per drive to find it")


def judge_fio_report(report: FioReport, ctx: JudgeContext, *, source: str, label: str | None = None) -> list[JudgeResult]:
    """Judge every job of a parsed fio output (plus a result for verify failures/errors no job owns)."""
    name = Path(source).name
    results: list[JudgeResult] = []
    claimed: set[int] = set()
    many = len(report.jobs) > 1
    for job in report.jobs:
        r = judge_fio_job(job, ctx, source=source, label=part_label(label, name, job.name, many))
        mine = [i for i, v in enumerate(report.verify_failures)
                if v.file and (v.file in job.paths or Path(v.file).name.startswith(job.name + "."))]
        if mine:
            claimed.update(mine)
            fio_metrics(r)["verify_failures"] = len(mine)
            r.degrade(Verdict.FAIL, _verify_reason([report.verify_failures[i] for i in mine]))
        results.append(r)
    rest = [v for i, v in enumerate(report.verify_failures) if i not in claimed]
    if rest or (report.errors and not report.jobs):
        r = JudgeResult(source=source, kind="fio", label=part_label(label, name, "verify" if rest else "errors", bool(results)))
        fio_metrics(r).update({"read_bw_bytes_per_s": None, "write_bw_bytes_per_s": None, "read_iops": None,
                               "write_iops": None, "verify_failures": len(rest)})
        if rest:
            r.degrade(Verdict.FAIL, _verify_reason(rest))
        for e in report.errors[:3]:
            r.degrade(Verdict.FAIL, f"fio reported {e}")
        results.append(r)
    elif report.errors:
        # the jobs finished (their own error field decides fail); an error line next to them is a warning
        for r in results:
            for e in report.errors[:3]:
                r.degrade(Verdict.WARN, f"fio printed {e!r} alongside the results: check the full output")
    return results


def _with_thresholds(s: StorageExpectation, th: FioThresholds) -> StorageExpectation:
    """``s`` with the blueprint's ``validation.fio.thresholds.min_read_mb_s`` / ``min_write_mb_s`` (MB/s)
    as its expected sequential rates, when set (the derivation says so)."""
    if th.min_read_mb_s is None and th.min_write_mb_s is None:
        return s
    return dataclasses.replace(s, read_mb_s=th.min_read_mb_s if th.min_read_mb_s is not None else s.read_mb_s,
                               write_mb_s=th.min_write_mb_s if th.min_write_mb_s is not None else s.write_mb_s,
                               derivation=s.derivation + "; blueprint validation.fio.thresholds override the MB/s")


def _target(job: FioJob, ctx: JudgeContext, r: JudgeResult) -> StorageExpectation | None:
    exp = fio_expectations(ctx)
    if not exp.storage:
        return None
    best: StorageExpectation | None = None
    for p in job.paths:
        for s in exp.storage:
            if s.mount and (p == s.mount or p.startswith(s.mount.rstrip("/") + "/")):
                if best is None or len(s.mount or "") > len(best.mount or ""):
                    best = s
            elif s.kind in ("instance-store", "nvme", "nvme-raid0") and re.match(r"^/dev/(nvme\d|md)", p):
                best = best or s
    if best is not None:
        return best
    if exp.target:
        for s in exp.storage:
            if s.mount and s.mount.rstrip("/") == exp.target.rstrip("/"):
                r.note(f"judged against {s.name} (--target)")
                return s
        r.note(f"fio target {exp.target} is not a storage target declared in the blueprint: figures recorded only")
        return None
    if len(exp.storage) == 1:
        s = exp.storage[0]
        r.note(f"the job's paths ({', '.join(job.paths) or 'none given'}) name no known mount: judged against the only "
               f"storage target, {s.name}")
        return s
    r.note("the job's paths name no known mount and the cluster has several storage targets: pass --target MOUNT")
    return None


def judge_fio_job(job: FioJob, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one fio job (group) against the storage target its paths (or the context's fio ``target``) name.

    Order: job error -> fail; no I/O -> invalid; no target -> figures only; buffered I/O (no
    ``direct=1``, or ``buffered=1``) against a device or file-system expectation -> invalid (it
    measured the page cache); above the target's physical upper bound by more than
    :data:`FIO_BOUND_MARGIN` -> invalid; sequential (>= 128 KiB blocks)
    bandwidth or 4 KiB random IOPS against the expectation -> pass/warn/fail by ratio. A missing
    ``rw`` or ``bs`` is judged with fio's defaults (``read``, 4 KiB).
    """
    m = FioMetrics()
    e = FioExpected()
    r = JudgeResult(source=source, kind="fio", label=label, metrics=m, expected=e)
    m.update({
        "job": job.name, "rw": job.rw_effective, "block_size_bytes": job.block_size_effective,
        "numjobs": job.int_option("numjobs") or job.clones, "iodepth": job.int_option("iodepth") or None,
        "direct": job.direct, "buffered": job.buffered, "paths": job.paths,
        "read_bw_bytes_per_s": job.read.bw_bytes_per_s, "write_bw_bytes_per_s": job.write.bw_bytes_per_s,
        "read_iops": job.read.iops, "write_iops": job.write.iops,
        "read_mb_s": round(job.read.bw_bytes_per_s / 1e6, 3), "write_mb_s": round(job.write.bw_bytes_per_s / 1e6, 3),
        "read_p99_latency_us": round(job.read.p99_ns / 1e3, 3) if job.read.p99_ns else None,
        "write_p99_latency_us": round(job.write.p99_ns / 1e3, 3) if job.write.p99_ns else None,
        "error": job.error,
    })
    defaults = [f"{k}={v}" for k, v, given in (("rw", job.rw_effective, job.rw), ("bs", job.block_size_effective,
                                                                                  job.block_size)) if given is None]
    if defaults:
        r.note(f"the job does not set {' and '.join(d.split('=')[0] for d in defaults)}: judged with fio's defaults "
               f"({', '.join(defaults)})")
    if job.error:
        r.degrade(Verdict.FAIL, f"fio job {job.name!r} ended with error {job.error} ({os.strerror(job.error)}): the I/O "
                          "failed; check the target is mounted and writable and dmesg for device errors")
    active = [d for d in ("read", "write") if getattr(job, d).active]
    if not active:  # no I/O: a failed job's error is its verdict (there are no rates to judge), else invalid
        if not job.error:
            r.degrade(Verdict.INVALID, f"fio job {job.name!r} did no I/O (0 bytes read and written)")
        return r
    if _inconsistent(job, ctx, r, active):
        return r
    tgt = _target(job, ctx, r)
    if tgt is not None:
        tgt = _with_thresholds(tgt, _thresholds(ctx))
    if tgt is None:
        if not fio_expectations(ctx).storage:
            r.note("no storage expectation (no blueprint or instance type with local NVMe / FSx): figures recorded only")
        return r
    e.update({"target": tgt.mount, "target_kind": tgt.kind, "target_name": tgt.name,
              "derivation": tgt.derivation, "source": tgt.source,
              "warn_ratio": _thresholds(ctx).warn_ratio, "fail_ratio": _thresholds(ctx).fail_ratio})
    if job.buffered and tgt.has_numbers:
        how = "buffered=1" if (job.option("buffered") or "0").strip() not in ("0", "false") else (
            "direct=0" if job.direct is False else "no direct=1 (fio's default is buffered I/O)")
        got = "; ".join(f"{d} {getattr(job, d).bw_bytes_per_s / 1e6:.5g} MB/s" for d in active)
        r.degrade(Verdict.INVALID, f"fio job {job.name!r} ran with {how}: it measured the page cache in RAM, not "
                             f"{tgt.name} ({got}), so it says nothing about the {'device' if tgt.is_device else 'file system'}. "
                             + by_id("fio-page-cache").hint())
        _fio_bound(job, tgt, r, active)
        return r
    if _fio_bound(job, tgt, r, active):
        return r
    bs = job.block_size_effective
    mixed = len(active) > 1 or job.rw_effective in ("rw", "readwrite", "randrw")
    if mixed:
        r.note("mixed read/write job: rates recorded, not judged (expectations are for pure reads or writes)")
        return r
    d = active[0]
    io = getattr(job, d)
    ratio = None
    if not job.random_effective and bs >= SEQ_MIN_BS:
        exp = getattr(tgt, f"{d}_mb_s")
        if exp:
            got = io.bw_bytes_per_s / 1e6
            ratio = got / exp
            _expected_rate(e, d, "mb_s", round(exp, 3))
            fig = (f"sequential {d} {got:.5g} MB/s with {fmt_bytes(bs)} blocks = {pct(ratio)} of the expected "
                   f"{exp:.5g} MB/s for {tgt.name} ({tgt.derivation})")
        else:
            r.note(f"no sequential {d} expectation for {tgt.name}: {tgt.derivation}")
    elif job.random_effective and bs == RAND_BS:
        exp = getattr(tgt, f"{d}_iops_4k")
        if exp:
            ratio = io.iops / exp
            _expected_rate(e, d, "iops", round(exp, 1))
            fig = (f"random {d} {io.iops:.5g} IOPS with 4 KiB blocks = {pct(ratio)} of the expected {exp:.5g} IOPS "
                   f"for {tgt.name} ({tgt.derivation})")
        else:
            r.note(f"no 4 KiB random {d} IOPS expectation for {tgt.name}")
    else:
        r.note(f"{job.rw_effective} with {fmt_bytes(bs)} blocks: only sequential >= {fmt_bytes(SEQ_MIN_BS)} "
               "and 4 KiB random jobs are judged")
    if ratio is None:
        return r
    e["ratio"] = round(ratio, 4)
    cause = _fio_cause(tgt, job)
    if ratio < _thresholds(ctx).fail_ratio:
        r.degrade(Verdict.FAIL, f"{fig}, below the fail ratio {_thresholds(ctx).fail_ratio:g}. {cause}")
    elif ratio < _thresholds(ctx).warn_ratio:
        r.degrade(Verdict.WARN, f"{fig}, below the warn ratio {_thresholds(ctx).warn_ratio:g}. {cause}")
    else:
        r.note(fig)
    return r


FIO_DOC = "https://fio.readthedocs.io/en/latest/fio_doc.html"
SYNC_ENGINES = ("sync", "psync", "vsync", "pvsync", "pvsync2")
"""fio's synchronous I/O engines: fio(1) ``iodepth``: "increasing iodepth beyond 1 will not affect synchronous
ioengines" (:data:`FIO_DOC`, #cmdoption-arg-iodepth)."""
CONSISTENCY_TOLERANCE = 0.05
"""How far bytes per I/O may stray from the block size, and IOPS x block size from the bandwidth, before a result is
inconsistent: fio derives both rates from the same byte and I/O counts over the same runtime, so they agree exactly
but for rounding (the text output prints 3-4 significant figures: under 1%) and a short last I/O of a sequential job."""
MIN_RUNTIME_MS = 1000
"""A direction that ran under a second measured a burst: fio prints runtime in whole milliseconds and drives and
file systems start in burst states (an SSD's write cache, FSx burst credits, a cold RAID); the figures say nothing
about sustained rates."""


def _fixed_block_size(job: FioJob) -> int | None:
    """The job's one block size in bytes, ``None`` when it varies (``bsrange``, ``bssplit``, a ``4k-64k`` range,
    different read and write sizes ``4k,64k``) or is not known."""
    if job.option("bsrange") or job.option("bssplit") or job.option("blocksize_range"):
        return None
    raw = job.option("bs") or job.option("blocksize")
    if raw is None:
        return job.block_size_effective if job.options_complete else None
    sizes = {parse_size(x) for x in re.split(r"[,]", raw) if x.strip()}
    if "-" in raw or len(sizes) != 1:
        return None
    return sizes.pop()


def _nvme_namespace_bound() -> tuple[float, str]:
    """The most one NVMe namespace can move, MB/s: a PCIe x4 link of the newest generation the catalog knows (x16 rate
    / 4), with its derivation."""
    cat = catalog()
    rates = cat.fabrics.get("pcie_x16_unidir_gbytes_s", {})
    gen, x16 = max(rates.items(), key=lambda kv: float(kv[1]))
    return float(x16) / 4 * 1000, f"PCIe {gen} x4 = {float(x16):g} GB/s x16 / 4 ({cat.fabrics.get('pcie_source', '')})"


def _inconsistent(job: FioJob, ctx: JudgeContext, r: JudgeResult, active: list[str]) -> bool:
    """Self-consistency of one job's result, with or without a blueprint: bytes per I/O against the block size, IOPS x
    block size against the bandwidth, a runtime too short to mean anything (:data:`MIN_RUNTIME_MS`), a synchronous
    engine given ``iodepth`` > 1, buffered reads of a file smaller than the host's memory (``ctx.memory_gib``: the
    blueprint's, the instance type's or ``--memory-gib``, when known), and bandwidth beyond what the device class can move (one NVMe namespace: a PCIe x4 link). Each makes the
    result ``invalid`` with its reason; returns True when one did."""
    bad: list[str] = []
    bs = _fixed_block_size(job)
    for d in active:
        io = getattr(job, d)
        if bs and io.total_ios > 0 and io.io_bytes > 0:
            per_io = io.io_bytes / io.total_ios
            if abs(per_io - bs) > CONSISTENCY_TOLERANCE * bs:
                bad.append(f"{d}: {io.io_bytes:,} bytes in {io.total_ios:,} I/Os is {per_io:,.0f} bytes per I/O, not the "
                           f"job's block size {fmt_bytes(bs)} ({bs:,} bytes)")
        if bs and io.iops > 0 and io.bw_bytes_per_s > 0:
            implied = io.iops * bs
            if abs(implied - io.bw_bytes_per_s) > CONSISTENCY_TOLERANCE * io.bw_bytes_per_s:
                bad.append(f"{d}: {io.iops:,.6g} IOPS x {fmt_bytes(bs)} = {implied / 1e6:,.5g} MB/s, but the bandwidth is "
                           f"{io.bw_bytes_per_s / 1e6:,.5g} MB/s")
        if 0 < io.runtime_ms < MIN_RUNTIME_MS:
            bad.append(f"{d} ran {io.runtime_ms:g} ms, under {MIN_RUNTIME_MS / 1000:g} s: a burst, not a sustained rate "
                       "(set runtime=, time_based=1 and a size the device cannot absorb in its caches)")
    engine = (job.option("ioengine") or "").strip()
    depth = job.int_option("iodepth") or 1  # fio's default; a value recorded as no number is not guessed at
    if engine in SYNC_ENGINES and depth > 1:
        bad.append(f"ioengine={engine} is synchronous: fio ignores iodepth={depth} and kept one I/O in flight per job, so "
                   f"the result is not the queue depth it claims (fio(1) iodepth, {FIO_DOC}#cmdoption-arg-iodepth); use "
                   "ioengine=libaio or io_uring with direct=1")
    size = parse_size(job.option("size"))
    mem = ctx.memory_gib
    if job.buffered and "read" in active and size and mem:
        files = max(job.int_option("numjobs") or 1, 1) if not job.option("filename") else 1
        if size * files < mem * 2**30:
            host = (f"a {ctx.instance_type}" if ctx.instance_type and not ctx.is_explicit("memory_gib")
                    else "the host")
            bad.append(f"buffered read of {fmt_bytes(size * files)}, less than the {mem:g} GiB of memory of {host}: "
                       "the file was read from the page cache")
    for d in active:
        io = getattr(job, d)
        paths = job.paths
        if paths and all(re.fullmatch(r"/dev/nvme\d+n\d+", p) for p in paths) and len(paths) == 1:
            bound, how = _nvme_namespace_bound()
            if io.bw_bytes_per_s / 1e6 > bound * FIO_BOUND_MARGIN:
                bad.append(f"{d} {io.bw_bytes_per_s / 1e6:,.5g} MB/s from one NVMe namespace ({paths[0]}) is beyond what "
                           f"any NVMe drive's link can move ({bound:,.5g} MB/s: {how})")
    if not bad:
        return False
    for b in bad:
        r.degrade(Verdict.INVALID, f"fio job {job.name!r} is not self-consistent: {b}")
    return True


def _fio_bound(job: FioJob, tgt: StorageExpectation, r: JudgeResult, active: list[str]) -> bool:
    """Degrade ``r`` to invalid when a direction's throughput (or 4 KiB IOPS) exceeds the target's physical
    upper bound by more than FIO_BOUND_MARGIN; True when it did."""
    hit = False
    for d in active:
        io = getattr(job, d)
        up_mb = getattr(tgt, f"upper_{d}_mb_s")
        if up_mb and io.bw_bytes_per_s / 1e6 > up_mb * FIO_BOUND_MARGIN:
            _expected_rate(fio_expected(r), d, "mb_s", round(up_mb, 3), upper=True)
            r.degrade(Verdict.INVALID, f"{d} {io.bw_bytes_per_s / 1e6:.5g} MB/s is above what {tgt.name} can physically deliver "
                                 f"({up_mb:.5g} MB/s: {tgt.upper_derivation}; more than {FIO_BOUND_MARGIN - 1:.0%} over it): "
                                 "the I/O was served by RAM or by other storage. " + by_id("not-this-hardware").hint())
            hit = True
            continue
        up_io = getattr(tgt, f"upper_{d}_iops_4k")
        if up_io and job.block_size_effective <= RAND_BS and io.iops > up_io * FIO_BOUND_MARGIN:
            _expected_rate(fio_expected(r), d, "iops", round(up_io, 1), upper=True)
            r.degrade(Verdict.INVALID, f"{d} {io.iops:.5g} IOPS is above what {tgt.name} can physically deliver ({up_io:.5g} "
                                 f"IOPS: {tgt.upper_derivation}; more than {FIO_BOUND_MARGIN - 1:.0%} over it): the I/O "
                                 "was served by RAM or by other storage. " + by_id("not-this-hardware").hint())
            hit = True
    return hit


def _fio_cause(tgt: StorageExpectation, job: FioJob) -> str:
    depth = f" (this job: numjobs={job.option('numjobs') or job.clones}, iodepth={job.option('iodepth') or '?'}, direct={job.option('direct') or '?'})"
    ref = f" ({doc_ref('fio-below-device')})"
    if tgt.kind in ("nvme-raid0", "nvme", "instance-store"):
        return ("Likely cause: the RAID0 does not span every drive (`cat /proc/mdstat`, expect "
                f"{tgt.drives or 'all'} members), too little parallelism{depth}, a drive at a degraded PCIe link "
                "(`lspci -vv` LnkSta) or thermal throttling (`nvme smart-log`)" + ref)
    if tgt.kind == "fsx-lustre":
        return ("Likely cause: the expectation is this one client's share of the file system (its network and AWS's "
                "per-client limit, at most the file system's total); below it: too few jobs, files striped over too few "
                f"OSTs (`lfs setstripe -c -1`) or exhausted burst credits (CloudWatch){depth}" + ref)
    return f"Likely cause: too little parallelism{depth} or a slow server/network path" + ref

