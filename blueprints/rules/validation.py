"""Rules about the validation suites and the orchestrator they are launched by."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from ..models import LustreStorage, NfsStorage
from ..settings import on_mount
from ._facts import mounts
from .registry import Hit, RuleContext, rule

NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests/blob/master/README.md"


@rule(
    id="nccl-suite-single-gpu",
    severity="warning",
    summary="The NCCL suite on a cluster with one GPU measures nothing: with one rank busbw is 0 by definition.",
    fix="remove `nccl` from `validation.suites`, or add GPUs/nodes",
    source="https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",
)
def nccl_suite_single_gpu(ctx: RuleContext) -> Iterator[Hit]:
    if "nccl" not in ctx.bp.validation.suites:
        return
    gpus = sum(r.gpus * r.nodes for r in ctx.cluster.compute_groups)
    if gpus == 1:
        yield Hit(("validation", "suites"), "`validation.suites` runs `nccl` on a cluster with a single GPU")


@rule(
    id="nccl-bytes-range",
    severity="error",
    summary="`validation.nccl.min_bytes` must not exceed `max_bytes` (nccl-tests `-b`/`-e`).",
    fix="swap or correct `min_bytes` and `max_bytes`",
    source=NCCL_TESTS,
)
def nccl_bytes_range(ctx: RuleContext) -> Iterator[Hit]:
    n = ctx.bp.validation.nccl
    if n.min_bytes > n.max_bytes:
        yield Hit(("validation", "nccl", "max_bytes"), f"`validation.nccl.max_bytes` {n.max_bytes} is below "
                  f"`validation.nccl.min_bytes` {n.min_bytes}")


@rule(
    id="nccl-check-off",
    severity="warning",
    summary="With `validation.nccl.check: false` (`-c 0`) nccl-tests does not verify results: silent data corruption "
            "(`#wrong`) goes unnoticed.",
    fix="set `validation.nccl.check: true`",
    source=NCCL_TESTS,
)
def nccl_check_off(ctx: RuleContext) -> Iterator[Hit]:
    if "nccl" in ctx.bp.validation.suites and not ctx.bp.validation.nccl.check:
        yield Hit(("validation", "nccl", "check"), "`validation.nccl.check` is false")


@rule(
    id="fio-targets-mounted",
    severity="error",
    summary="`validation.fio.targets` are directories on a declared mount (a `local_nvme` or `storage` mount point); "
            "elsewhere fio would measure the root disk.",
    fix="use directories under the `local_nvme.mount` / `storage[].mount` points, or leave `targets` empty",
    source="https://fio.readthedocs.io/en/latest/fio_doc.html#cmdoption-arg-directory",
)
def fio_targets_mounted(ctx: RuleContext) -> Iterator[Hit]:
    v = ctx.bp.validation
    if "fio" not in v.suites:
        return
    points = [m.mount for m in mounts(ctx.bp)]
    for i, t in enumerate(v.fio.targets):
        norm = posixpath.normpath(t) if t.startswith("/") else None
        if norm is None or not any(on_mount(norm, p) for p in points):
            yield Hit(("validation", "fio", "targets", i), f"`validation.fio.targets.{i}` `{t}` is not on a declared "
                      f"mount ({', '.join(points) or 'none declared'})")


@rule(
    id="amp-model-shape",
    severity="error",
    summary="The AMP benchmark model needs `hidden` divisible by `heads` (each head gets hidden/heads dimensions).",
    fix="choose `validation.amp.model.heads` that divides `hidden` (e.g. 2048/16)",
    source="https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html",
)
def amp_model_shape(ctx: RuleContext) -> Iterator[Hit]:
    m = ctx.bp.validation.amp.model
    if "amp" in ctx.bp.validation.suites and m.hidden % m.heads:
        yield Hit(("validation", "amp", "model", "heads"), f"`validation.amp.model.hidden` {m.hidden} is not divisible "
                  f"by `validation.amp.model.heads` {m.heads}")


_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@rule(
    id="slurm-partition-name",
    severity="error",
    summary="`orchestrator.partition` is one Slurm partition name (letters, digits, `_`, `-`, `.`); a comma would "
            "make sbatch pick among several partitions.",
    fix="use the name of the GPU partition exactly as `sinfo` shows it",
    source="https://slurm.schedmd.com/slurm.conf.html#OPT_PartitionName",
)
def slurm_partition_name(ctx: RuleContext) -> Iterator[Hit]:
    o = ctx.bp.orchestrator
    if o.kind == "slurm" and not _PARTITION.match(o.partition):  # type: ignore[union-attr]
        yield Hit(("orchestrator", "partition"), f"`orchestrator.partition` `{o.partition}` is not a single partition name")  # type: ignore[union-attr]


@rule(
    id="fio-expectation-missing",
    severity="warning",
    summary="fio results are judged against the throughput the blueprint implies: NVMe drives without a catalog "
            "`model` (or per-drive MB/s) and a Lustre server or NFS export without `throughput_mb_s` leave no "
            "expectation, so "
            "those mounts are judged for correctness only.",
    fix="set the field the message names",
    source="https://github.com/axboe/fio/blob/master/HOWTO.rst",
)
def fio_expectation_missing(ctx: RuleContext) -> Iterator[Hit]:
    v = ctx.bp.validation
    if "fio" not in v.suites or (v.fio.thresholds.min_read_mb_s and v.fio.thresholds.min_write_mb_s):
        return
    targets = list(v.fio.targets)

    def tested(mount: str) -> bool:
        return not targets or any(on_mount(t, mount) for t in targets)

    known = ctx.catalog.storage_devices
    for i, g in enumerate(ctx.bp.node_groups):
        nvme = g.hardware.nvme if g.hardware else None
        if g.local_nvme is None or nvme is None or not tested(g.local_nvme.mount):
            continue
        if nvme.seq_read_mb_s and nvme.seq_write_mb_s:
            continue
        if nvme.model is None:
            yield Hit(("node_groups", i, "hardware", "nvme"), f"`node_groups.{i}.hardware.nvme` has no `model`: fio on "
                      f"`{g.local_nvme.mount}` has no throughput to be judged against",
                      f"set `node_groups.{i}.hardware.nvme.model` (one of {', '.join(k for k in known if isinstance(known[k], dict))}) "
                      f"or `seq_read_mb_s`/`seq_write_mb_s`")
        elif not isinstance(known.get(nvme.model), dict):
            yield Hit(("node_groups", i, "hardware", "nvme", "model"), f"NVMe model `{nvme.model}` "
                      f"(`node_groups.{i}.hardware.nvme.model`) is not in the catalog: fio on `{g.local_nvme.mount}` "
                      f"has no throughput to be judged against",
                      f"use a catalog model ({', '.join(k for k in known if isinstance(known[k], dict))}) or set "
                      f"`seq_read_mb_s`/`seq_write_mb_s`")
    for i, s in enumerate(ctx.bp.storage):
        if isinstance(s, LustreStorage) and s.server is not None and s.server.throughput_mb_s is None and tested(s.mount):
            yield Hit(("storage", i, "server"), f"Lustre `{s.name}` (`storage.{i}.server`) declares no "
                      f"`throughput_mb_s`: fio on `{s.mount}` has no throughput to be judged against",
                      f"set `storage.{i}.server.throughput_mb_s` to the servers' throughput in MB/s")
        elif isinstance(s, NfsStorage) and s.throughput_mb_s is None and tested(s.mount):
            yield Hit(("storage", i), f"NFS `{s.name}` (`storage.{i}`) declares no `throughput_mb_s`: fio on "
                      f"`{s.mount}` has no throughput to be judged against",
                      f"set `storage.{i}.throughput_mb_s` to what the NFS server delivers to one client, in MB/s")
