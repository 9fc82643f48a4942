"""Workload sizing rules: does the model train or serve in the cluster's GPU memory at the declared
sequence length and parallelism, what does it ask of the fabric, does the GPU support the precision.

The arithmetic, each formula with its source, is :mod:`blueprints.sizing`; docs/workload-sizing.md
explains it with a worked example. Memory in bytes (GB = 1e9 bytes in messages). A GPU's usable
memory is its memory less ``workload.reserve_fraction`` (default 0.1, vLLM's default
``gpu_memory_utilization`` of 0.9) kept for the CUDA context, NCCL buffers and allocator
fragmentation: a workload that needs more than the whole memory is an error, one that fits only in
the reserve a warning that says how much the runtime may then take.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..models import Workload
from ..sizing import (
    KORTHIKANTI,
    KV_GQA,
    VLLM_UTILIZATION,
    WEIGHT_BYTES,
    ZERO,
    Parallel,
    Spec,
    declared_parallel,
    flops_per_token,
    kv_bytes_per_token,
    layouts_to_try,
    model_entry,
    model_shapes,
    spec,
    training_bytes_per_gpu,
)
from ._facts import GroupHardware, compute_groups
from .registry import Hit, RuleContext, rule

ML_NETWORK = "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md"


@dataclass(frozen=True)
class Gpus:
    """The GPUs a workload runs on: ``count`` in all, ``per_node`` (the smallest group's), ``memory``
    of one GPU in bytes (the smallest), ``hardware`` of the first GPU group, ``nodes``."""

    count: int
    per_node: int
    memory: float
    nodes: int
    hardware: GroupHardware
    groups: tuple[Any, ...]


def _gpus(ctx: RuleContext) -> Gpus | None:
    """The compute groups with GPUs of known memory, or ``None``."""
    groups = tuple(r for r in ctx.cluster.compute_groups if r.has_gpus and r.hardware.gpu_memory_bytes)
    if not groups:
        return None
    return Gpus(sum(r.hardware.gpus * r.nodes for r in groups), min(r.hardware.gpus for r in groups),
                min(float(r.hardware.gpu_memory_bytes or 0) for r in groups), sum(r.nodes for r in groups),
                groups[0].hardware, groups)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB" if x < 10e9 else f"{x / 1e9:,.0f} GB"


def _wl(ctx: RuleContext) -> Workload | None:
    return ctx.bp.workload


def _at(w: Workload) -> tuple[str, str]:
    """Where a finding about the model's size points: ``parameters_b`` if declared, else ``model``."""
    return ("workload", "parameters_b") if w.parameters_b is not None else ("workload", "model")


def _name(w: Workload, s: Spec) -> str:
    return f"`{w.model}`" if w.model else f"`workload.parameters_b` {s.parameters / 1e9:g}B"


@rule(
    id="workload-model-known",
    severity="error",
    summary="`workload.model` names a model of the shape catalog, or the workload declares `parameters_b` (and "
            "`shape`) itself.",
    fix="use a model the message lists, or declare `parameters_b:` and `shape:`",
    source="https://arxiv.org/abs/2407.21783",
)
def workload_model_known(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.model is None or model_entry(w.model) is not None or w.parameters_b is not None:
        return
    known = ", ".join(sorted({e["key"] for e in model_shapes().values()}))
    yield Hit(("workload", "model"), f"`workload.model` `{w.model}` is not in the shape catalog ({known})")


@rule(
    id="workload-moe-fields",
    severity="error",
    summary="An MoE workload is `architecture: moe` with `experts` and `active_parameters_b` (at most "
            "`parameters_b`), declared or from its catalog model; dense workloads have neither.",
    fix="for `architecture: moe` set `experts` and `active_parameters_b`; for dense remove them",
    source="https://arxiv.org/abs/2101.03961",
)
def workload_moe_fields(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None:
        return
    entry = model_entry(w.model) or {}
    if w.architecture != "moe" and entry.get("experts"):
        yield Hit(("workload", "model"), f"`workload.model` `{w.model}` is a mixture-of-experts model but "
                  "`workload.architecture` is `dense`", "add `architecture: moe`")
        return
    if w.architecture == "moe":
        experts = w.experts if w.experts is not None else entry.get("experts")
        active = w.active_parameters_b if w.active_parameters_b is not None else entry.get("active_parameters_b")
        total = w.parameters_b if w.parameters_b is not None else entry.get("parameters_b")
        if experts is None:
            yield Hit(("workload", "architecture"), "`workload.architecture` is `moe` without `workload.experts`",
                      "add `experts:` (number of experts per MoE layer)")
        if active is None:
            yield Hit(("workload", "architecture"), "`workload.architecture` is `moe` without "
                      "`workload.active_parameters_b`", "add `active_parameters_b:` (parameters used per token, billions)")
        elif total is not None and active > total:
            yield Hit(("workload", "active_parameters_b"), f"`workload.active_parameters_b` {active:g} is "
                      f"more than `workload.parameters_b` {total:g}", "active parameters are a subset of all parameters")
    else:
        for key in ("experts", "active_parameters_b"):
            if getattr(w, key) is not None:
                yield Hit(("workload", key), f"`workload.{key}` is set on a dense workload",
                          f"remove `{key}` or set `architecture: moe`")


@rule(
    id="workload-shape",
    severity="warning",
    summary="Without the model's shape (a catalog `model` or `shape`), only weights and optimizer states are "
            "counted: activations, logits and the KV cache at `sequence_length` are not.",
    fix="name a catalog model (`workload.model: llama-3.1-70b`) or declare `workload.shape` (layers, hidden, heads, "
        "kv_heads, vocab)",
    source=KORTHIKANTI,
)
def workload_shape(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    s = spec(w) if w is not None else None
    if w is None or s is None or s.shape is not None:
        return
    what = "activations and logits" if w.purpose == "training" else "the KV cache"
    yield Hit(_at(w), f"{_name(w, s)} has no shape: {what} at `workload.sequence_length` {w.sequence_length} "
              "cannot be sized, only the weights" + (" and optimizer states" if w.purpose == "training" else ""))


@rule(
    id="workload-parallel-layout",
    severity="error",
    summary="The declared parallelism fits the cluster: tensor x context x pipeline parallelism at most the GPUs, "
            "tensor parallelism dividing the attention heads, expert parallelism at most the experts.",
    fix="choose parallel degrees whose product divides the GPUs and whose tensor parallelism divides the heads",
    source="https://arxiv.org/abs/2104.04473",
)
def workload_parallel_layout(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    s = spec(w) if w is not None else None
    g = _gpus(ctx)
    if w is None or s is None or g is None:
        return
    product = w.tensor_parallel * w.context_parallel * w.pipeline_parallel
    if product > g.count:
        yield Hit(("workload", "tensor_parallel"), f"`workload.tensor_parallel` x `context_parallel` x `pipeline_parallel` "
                  f"= {product} GPUs per model replica but the cluster has {g.count}")
    if s.shape is not None and s.shape.heads % w.tensor_parallel:
        yield Hit(("workload", "tensor_parallel"), f"`workload.tensor_parallel` {w.tensor_parallel} does not divide the "
                  f"model's {s.shape.heads} attention heads", f"use a divisor of {s.shape.heads}")
    if w.expert_parallel is not None and s.experts is not None and w.expert_parallel > s.experts:
        yield Hit(("workload", "expert_parallel"), f"`workload.expert_parallel` {w.expert_parallel} is more than the "
                  f"model's {s.experts} experts", f"use at most {s.experts}")


# ---- training ------------------------------------------------------------------------------------------


def _training(ctx: RuleContext) -> tuple[Workload, Spec, Gpus, Parallel, float] | None:
    w = _wl(ctx)
    if w is None or w.purpose != "training":
        return None
    s, g = spec(w), _gpus(ctx)
    if s is None or g is None:
        return None
    par = declared_parallel(w)
    return w, s, g, par, training_bytes_per_gpu(s, w, g.count, par).total


def _breakdown(s: Spec, w: Workload, g: Gpus, par: Parallel) -> str:
    m = training_bytes_per_gpu(s, w, g.count, par)
    parts = [f"{_gb(m.states)} model states"]
    if m.activations is not None:
        parts.append(f"{_gb(m.activations)} activations")
    if m.logits is not None:
        parts.append(f"{_gb(m.logits)} logits")
    return " + ".join(parts)


def _suggest(s: Spec, w: Workload, g: Gpus, par: Parallel) -> str:
    usable = g.memory * (1 - w.reserve_fraction)
    for p in layouts_to_try(par, g.count, g.per_node):
        if p != par and training_bytes_per_gpu(s, w, g.count, p).total <= usable:
            return (f"use {p.describe()}" + (" with ZeRO-3 sharding" if par.zero != 3 else "")
                    + f" ({_gb(training_bytes_per_gpu(s, w, g.count, p).total)} per GPU)")
    return (f"no layout with tensor parallelism up to {g.per_node} (one node), context parallelism and full recompute "
            f"fits {g.count} GPUs: add GPUs, use GPUs with more memory, or shorten `sequence_length`")


@rule(
    id="training-memory-fit",
    severity="error",
    summary="Per GPU, training needs model states (16 bytes per parameter with mixed-precision Adam, sharded by ZeRO "
            "stage, tensor and pipeline parallelism) + activations (Korthikanti et al. 2022) at the declared sequence "
            "length, micro-batch, recompute and parallelism + fp32 logits: more than the GPU's memory cannot run.",
    fix="add GPUs or use the parallel layout the message names",
    source=ZERO,
)
def training_memory_fit(ctx: RuleContext) -> Iterator[Hit]:
    t = _training(ctx)
    if t is None:
        return
    w, s, g, par, need = t
    if need > g.memory:
        yield Hit(_at(w), f"{_name(w, s)} training at `sequence_length` {w.sequence_length} with {par.describe()} needs "
                  f"{_gb(need)} per GPU ({_breakdown(s, w, g, par)}) but a GPU has {_gb(g.memory)}",
                  _suggest(s, w, g, par))


@rule(
    id="training-memory-headroom",
    severity="warning",
    summary="Training that fits a GPU only by using the runtime reserve (`workload.reserve_fraction` of its memory, "
            "default 10 %: CUDA context, NCCL buffers, allocator fragmentation) runs only if the runtime takes less.",
    fix="add GPUs, raise recompute or parallelism, or lower `reserve_fraction` if you measured the runtime's share",
    source=VLLM_UTILIZATION,
)
def training_memory_headroom(ctx: RuleContext) -> Iterator[Hit]:
    t = _training(ctx)
    if t is None:
        return
    w, s, g, par, need = t
    if g.memory * (1 - w.reserve_fraction) < need <= g.memory:
        yield Hit(_at(w), f"{_name(w, s)} training needs {_gb(need)} of a GPU's {_gb(g.memory)} "
                  f"({_breakdown(s, w, g, par)}): it runs only if the CUDA context, NCCL buffers and fragmentation "
                  f"take less than {_gb(g.memory - need)}", _suggest(s, w, g, par))


# ---- inference -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    """One serving layout: ``replica_gpus`` per model copy, ``replicas``, ``weights`` bytes,
    ``kv_token`` KV bytes per token (``None`` without a shape), ``fit`` full-context requests that fit
    in the cluster (``None`` without a shape)."""

    replica_gpus: int
    replicas: int
    weights: float
    kv_token: float | None
    fit: int | None


def _serving(w: Workload, s: Spec, g: Gpus) -> Serving:
    wbytes = WEIGHT_BYTES[w.quantization] if w.quantization != "none" else WEIGHT_BYTES[w.precision]
    weights = s.parameters * wbytes
    usable = g.memory * (1 - w.reserve_fraction)
    declared = w.tensor_parallel * w.pipeline_parallel
    if declared > 1:
        replica = declared
    elif weights <= usable * g.per_node:
        replica = g.per_node
    else:
        replica = g.count
    replicas = max(g.count // replica, 1)
    if s.shape is None:
        return Serving(replica, replicas, weights, None, None)
    kv_bytes = {"auto": 4.0 if w.precision == "fp32" else 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}[w.kv_cache_precision]
    kv = kv_bytes_per_token(s.shape, kv_bytes)
    free = usable * replica - weights
    per_replica = int(free // (kv * w.sequence_length)) if free > 0 else 0
    return Serving(replica, replicas, weights, kv, per_replica * replicas)


def _inference(ctx: RuleContext) -> tuple[Workload, Spec, Gpus, Serving] | None:
    w = _wl(ctx)
    if w is None or w.purpose != "inference":
        return None
    s, g = spec(w), _gpus(ctx)
    if s is None or g is None:
        return None
    return w, s, g, _serving(w, s, g)


def _precision(w: Workload) -> str:
    return f"`{w.quantization}`" if w.quantization != "none" else w.precision


@rule(
    id="inference-memory-fit",
    severity="error",
    summary="Serving needs the weights at the serving precision plus the KV cache of at least one request at "
            "`sequence_length` (2 x layers x kv_heads x head_dim x bytes per token) in the GPU memory left by the "
            "runtime reserve.",
    fix="quantize (`workload.quantization: fp8`/`int8`/`int4`), use an fp8 KV cache, add GPUs, or shorten "
        "`sequence_length`",
    source=KV_GQA,
)
def inference_memory_fit(ctx: RuleContext) -> Iterator[Hit]:
    t = _inference(ctx)
    if t is None:
        return
    w, s, g, sv = t
    usable = g.memory * (1 - w.reserve_fraction) * sv.replica_gpus
    if sv.weights > usable:
        yield Hit(_at(w), f"{_name(w, s)} at {_precision(w)} needs {_gb(sv.weights)} of weights but "
                  f"{sv.replica_gpus} GPUs hold {_gb(usable)} after the runtime reserve")
    elif sv.fit == 0 and sv.kv_token is not None:
        yield Hit(("workload", "sequence_length"), f"{_name(w, s)}: one request of {w.sequence_length} tokens needs "
                  f"{_gb(sv.kv_token * w.sequence_length)} of KV cache ({sv.kv_token / 1e6:.3f} MB per token) but "
                  f"{_gb(usable - sv.weights)} is left per {sv.replica_gpus}-GPU replica after {_gb(sv.weights)} of weights")


@rule(
    id="inference-kv-concurrency",
    severity="warning",
    summary="The KV cache of `concurrency` requests at full `sequence_length` does not fit: the declared load is "
            "served only if requests are on average shorter (the message names the length).",
    fix="add GPUs, use an fp8 KV cache (`kv_cache_precision: fp8`), quantize the weights or lower `concurrency`",
    source=VLLM_UTILIZATION,
)
def inference_kv_concurrency(ctx: RuleContext) -> Iterator[Hit]:
    t = _inference(ctx)
    if t is None:
        return
    w, s, g, sv = t
    if sv.fit is None or sv.kv_token is None or sv.fit == 0 or sv.fit >= w.concurrency:
        return
    usable = g.memory * (1 - w.reserve_fraction) * sv.replica_gpus
    kv_total = (usable - sv.weights) * sv.replicas
    avg = int(kv_total / sv.kv_token / w.concurrency)
    yield Hit(("workload", "concurrency"), f"{_name(w, s)}: {sv.fit} full-context requests of {w.sequence_length} "
              f"tokens fit ({sv.replicas} replica(s) of {sv.replica_gpus} GPUs, {sv.kv_token / 1e6:.3f} MB of KV cache per "
              f"token); `workload.concurrency` {w.concurrency} fits only if requests average at most {avg} tokens")


@rule(
    id="inference-memory-per-node",
    severity="warning",
    summary="Weights larger than one node's GPU memory force tensor/pipeline parallelism across nodes: every token "
            "crosses the network.",
    fix="quantize the weights or use nodes with more GPU memory so one replica fits a node",
    source=ML_NETWORK,
)
def inference_memory_per_node(ctx: RuleContext) -> Iterator[Hit]:
    t = _inference(ctx)
    if t is None:
        return
    w, s, g, sv = t
    per_node = g.memory * g.per_node
    if per_node < sv.weights <= g.memory * g.count:
        yield Hit(_at(w), f"{_name(w, s)}: {_gb(sv.weights)} of weights exceed one node's {_gb(per_node)} of GPU memory")


@rule(
    id="moe-alltoall",
    severity="error",
    summary="MoE training and serving are bound by all-to-all (expert dispatch): the NCCL suite must measure "
            "`alltoall`.",
    fix="add `alltoall` to `validation.nccl.collectives` (and `nccl` to `validation.suites`)",
    source=ML_NETWORK,
)
def moe_alltoall(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.architecture != "moe":
        return
    v = ctx.bp.validation
    if "nccl" not in v.suites:
        yield Hit(("validation", "suites"), "`workload.architecture` is `moe` but `validation.suites` has no `nccl`",
                  "add `nccl` to `validation.suites` with `alltoall` in `validation.nccl.collectives`")
    elif "alltoall" not in v.nccl.collectives:
        yield Hit(("validation", "nccl", "collectives"), "`workload.architecture` is `moe` but "
                  "`validation.nccl.collectives` has no `alltoall`")


# ---- fabric demand -------------------------------------------------------------------------------------


def _bandwidths(ctx: RuleContext, g: Gpus) -> tuple[float | None, float | None]:
    """(intra-node GB/s per GPU per direction (NVLink), inter-node GB/s per GPU) of the first GPU group."""
    r = g.groups[0]
    hw = r.hardware
    intra = hw.gpu.nvlink_unidir_gbytes_s if hw.gpu is not None else None
    if hw.instance is not None:
        gbps: float | None = hw.instance.network_gbps
    elif r.group.hardware and r.group.hardware.nics:
        gbps = sum(n.speed_gbps for n in r.group.hardware.nics)
    else:
        gbps = getattr(ctx.bp.network, "speed_gbps", None)
    inter = gbps / 8 / max(hw.gpus, 1) if gbps else None
    return intra, inter


def _step_compute_s(w: Workload, s: Spec, g: Gpus, par: Parallel) -> float | None:
    """Seconds of one micro-batch's forward + backward on one GPU at the GPU's dense peak (PaLM FLOPs)."""
    if s.shape is None or g.hardware.gpu is None:
        return None
    peak = g.hardware.gpu.peak_tflops("fp8" if w.precision == "fp8" else "bf16" if w.precision == "bf16" else
                                      "fp16" if w.precision == "fp16" else "fp32")
    if not peak:
        return None
    sh = s.shape
    tokens = w.sequence_length * w.micro_batch_size
    flops = tokens * flops_per_token(s.active, sh.layers, sh.heads, sh.head_dim, w.sequence_length)
    return flops / (par.tp * par.cp * par.pp) / (peak * 1e12)


def _expert_parallel(w: Workload, s: Spec, g: Gpus) -> int:
    if w.expert_parallel is not None:
        return w.expert_parallel
    return max(1, min(s.experts or 1, g.per_node // w.tensor_parallel))


@rule(
    id="moe-fabric-bandwidth",
    severity="warning",
    summary="Expert all-to-all per training step (4 x tokens x top-k x hidden x 2 bytes per MoE layer: dispatch and "
            "combine, forward and backward) that takes longer on the declared links than the step's compute at the GPU's "
            "peak cannot be hidden; MoE across nodes over TCP Ethernet always warns.",
    fix="keep expert parallelism within a node (`expert_parallel` <= GPUs per node / `tensor_parallel`), or use a faster "
        "inter-node fabric",
    source="https://arxiv.org/abs/2006.16668",
)
def moe_fabric_bandwidth(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.architecture != "moe":
        return
    c = ctx.cluster
    groups = [(r.index, r.group, r.hardware) for r in
              (c.training_groups or tuple(r for r in c.compute_groups if r.has_gpus))]
    if sum(gr.size for _, gr, _ in groups) >= 2 and ctx.bp.network.fabric == "ethernet":
        yield Hit(("network", "fabric"), "MoE workload across nodes on `network.fabric: ethernet` (NCCL over TCP)")
        return
    s, g = spec(w), _gpus(ctx)
    if s is None or g is None or s.shape is None or w.purpose != "training":
        return
    par = declared_parallel(w)
    ep = _expert_parallel(w, s, g)
    if ep <= 1:
        return
    compute = _step_compute_s(w, s, g, par)
    intra, inter = _bandwidths(ctx, g)
    crosses = w.tensor_parallel * ep > g.per_node
    bw = inter if crosses else intra
    if compute is None or not bw:
        return
    k = s.shape.experts_per_token or 2
    tokens = w.sequence_length * w.micro_batch_size / (par.cp * par.tp)
    layers = s.shape.layers / par.pp
    volume = 4 * tokens * k * s.shape.hidden * 2 * (ep - 1) / ep * layers
    seconds = volume / (bw * 1e9)
    if seconds > compute:
        link = (f"the inter-node fabric ({bw:g} GB/s per GPU)" if crosses else f"NVLink ({bw:g} GB/s per GPU)")
        yield Hit(("workload", "expert_parallel") if w.expert_parallel else ("workload", "architecture"),
                  f"expert parallelism (`workload.expert_parallel`) {ep} {'across nodes ' if crosses else ''}moves {_gb(volume)} per GPU per micro-batch "
                  f"in all-to-all: {seconds * 1e3:,.0f} ms over {link} vs {compute * 1e3:,.0f} ms of compute at peak")


@rule(
    id="parallel-fabric-demand",
    severity="warning",
    summary="Tensor parallelism (4 all-reduces of s x b x h x 2 bytes per layer, Megatron) and context parallelism "
            "(ring passes of each rank's keys and values) per micro-batch that take longer on the link they use "
            "(NVLink within a node, the fabric across nodes) than the compute at the GPU's peak cannot be hidden.",
    fix="keep tensor x context parallelism within a node (NVLink), or use a faster inter-node fabric",
    source="https://arxiv.org/abs/2104.04473",
)
def parallel_fabric_demand(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.purpose != "training" or (w.tensor_parallel == 1 and w.context_parallel == 1):
        return
    s, g = spec(w), _gpus(ctx)
    if s is None or g is None or s.shape is None:
        return
    par = declared_parallel(w)
    compute = _step_compute_s(w, s, g, par)
    intra, inter = _bandwidths(ctx, g)
    if compute is None:
        return
    sh = s.shape
    layers = sh.layers / par.pp
    tokens = w.sequence_length * w.micro_batch_size / par.cp
    items = []
    if par.tp > 1:
        tp_bytes = 4 * 2 * (par.tp - 1) / par.tp * tokens * sh.hidden * 2 * layers
        items.append(("`workload.tensor_parallel`", par.tp, par.tp > g.per_node, tp_bytes, ("workload", "tensor_parallel")))
    if par.cp > 1:
        kv_chunk = 2 * tokens * sh.kv_heads * sh.head_dim * 2 / par.tp
        cp_bytes = 3 * (par.cp - 1) * kv_chunk * layers
        items.append(("`workload.context_parallel`", par.cp, par.tp * par.cp > g.per_node, cp_bytes, ("workload", "context_parallel")))
    for what, n, crosses, volume, path in items:
        bw = inter if crosses else intra
        if not bw:
            continue
        seconds = volume / (bw * 1e9)
        if seconds > compute:
            link = f"the inter-node fabric ({bw:g} GB/s per GPU)" if crosses else f"NVLink ({bw:g} GB/s per GPU)"
            yield Hit(path, f"{what} {n}{' across nodes' if crosses else ''} moves {_gb(volume)} per GPU per micro-batch: "
                      f"{seconds * 1e3:,.0f} ms over {link} vs {compute * 1e3:,.0f} ms of compute at peak")


@rule(
    id="workload-fp8-support",
    severity="error",
    summary="FP8 compute needs Hopper, Ada or Blackwell GPUs (catalog `fp8_dense_tflops`); A100 and A10G have none.",
    fix="use `workload.precision: bf16`, or H100/H200/B200/L40S nodes",
    source="https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/README.md",
)
def workload_fp8_support(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or (w.precision != "fp8" and w.quantization != "fp8"):
        return
    key = "precision" if w.precision == "fp8" else "quantization"
    for i, g in compute_groups(ctx.bp):
        hw = ctx.cluster.group(g).hardware
        if hw.gpu is not None and hw.gpu.vendor == "nvidia" and hw.gpu.fp8_dense_tflops is None:
            yield Hit(("workload", key), f"`workload.{key}` is fp8 but group `{g.name}` has `{hw.gpu.key}` "
                      f"({hw.gpu.architecture}) without FP8 tensor cores")
            return
