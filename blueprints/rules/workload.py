"""Workload sizing rules: does the model fit the cluster's GPU memory, does an MoE workload get the
all-to-all test and a fabric that carries it, does the GPU support the precision.

Memory is counted in bytes (GB = 1e9 bytes in messages). Training keeps, per parameter, bf16/fp16
weights (2) + gradients (2) + fp32 master weights and two Adam moments (12) = 16 bytes (ZeRO
paper, mixed-precision Adam), or 12 bytes with SGD + momentum; activations come on top.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..models import Workload
from ._facts import GroupHardware, compute_groups
from .registry import Hit, RuleContext, rule

ZERO = "https://arxiv.org/abs/1910.02054"
ML_NETWORK = "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md"

TRAINING_BYTES_PER_PARAM = {"adam": 16, "sgd": 12}
"""Bytes of model state per parameter in training (weights + gradients + optimizer states)."""

WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}
QUANT_BYTES = {"int8": 1.0, "int4": 0.5, "fp8": 1.0}

HEADROOM = 0.8
"""Model states above this fraction of HBM leave too little for activations (warning)."""


def _gpu_groups(ctx: RuleContext) -> list[tuple[int, GroupHardware, int]]:
    """``(index, hardware, nodes)`` of the compute groups with GPUs and known memory."""
    return [(r.index, r.hardware, r.nodes) for r in ctx.cluster.compute_groups
            if r.has_gpus and r.hardware.gpu_memory_bytes]


def _hbm(ctx: RuleContext) -> tuple[float, float, int]:
    """(total GPU memory of the compute groups, largest per-node GPU memory, GPUs) in bytes."""
    groups = _gpu_groups(ctx)
    total = sum(float(hw.gpu_memory_bytes or 0) * hw.gpus * n for _, hw, n in groups)
    per_node = max((float(hw.gpu_memory_bytes or 0) * hw.gpus for _, hw, _ in groups), default=0.0)
    return total, per_node, sum(hw.gpus * n for _, hw, n in groups)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.0f} GB"


def _wl(ctx: RuleContext) -> Workload | None:
    return ctx.bp.workload


@rule(
    id="workload-moe-fields",
    severity="error",
    summary="An MoE workload states `experts` and `active_parameters_b` (at most `parameters_b`); dense workloads "
            "have neither.",
    fix="for `architecture: moe` set `experts` and `active_parameters_b`; for dense remove them",
    source="https://arxiv.org/abs/2101.03961",
)
def workload_moe_fields(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None:
        return
    if w.architecture == "moe":
        if w.experts is None:
            yield Hit(("workload", "architecture"), "`workload.architecture` is `moe` without `workload.experts`",
                      "add `experts:` (number of experts per MoE layer)")
        if w.active_parameters_b is None:
            yield Hit(("workload", "architecture"), "`workload.architecture` is `moe` without "
                      "`workload.active_parameters_b`", "add `active_parameters_b:` (parameters used per token, billions)")
        elif w.active_parameters_b > w.parameters_b:
            yield Hit(("workload", "active_parameters_b"), f"`workload.active_parameters_b` {w.active_parameters_b:g} is "
                      f"more than `workload.parameters_b` {w.parameters_b:g}", "active parameters are a subset of all parameters")
    else:
        for key in ("experts", "active_parameters_b"):
            if getattr(w, key) is not None:
                yield Hit(("workload", key), f"`workload.{key}` is set on a dense workload",
                          f"remove `{key}` or set `architecture: moe`")


@rule(
    id="training-memory-fit",
    severity="error",
    summary="Training needs parameters x 16 bytes (Adam: bf16 weights and gradients, fp32 master weights and two "
            "moments; 12 with SGD) across the cluster's GPU memory, before activations.",
    fix="add GPU nodes, use GPUs with more memory, or train a smaller model",
    source=ZERO,
)
def training_memory_fit(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.purpose != "training":
        return
    total, _, gpus = _hbm(ctx)
    if not gpus:
        return
    need = w.parameters_b * 1e9 * TRAINING_BYTES_PER_PARAM[w.optimizer]
    if need > total:
        nodes_more = need / total
        yield Hit(("workload", "parameters_b"),
                  f"`workload.parameters_b` {w.parameters_b:g}B trained with `{w.optimizer}` needs {_gb(need)} of model state but the "
                  f"{gpus} GPUs hold {_gb(total)}",
                  f"use at least {nodes_more:.1f}x the GPU memory (more nodes or larger GPUs), or a smaller model")


@rule(
    id="training-memory-headroom",
    severity="warning",
    summary="Model states above 80% of the cluster's GPU memory leave little room for activations: expect OOM or "
            "heavy activation recomputation.",
    fix="add GPU memory (nodes) or plan activation checkpointing and offload",
    source=ZERO,
)
def training_memory_headroom(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.purpose != "training":
        return
    total, _, gpus = _hbm(ctx)
    if not gpus:
        return
    need = w.parameters_b * 1e9 * TRAINING_BYTES_PER_PARAM[w.optimizer]
    if HEADROOM * total < need <= total:
        yield Hit(("workload", "parameters_b"), f"`workload.parameters_b` {w.parameters_b:g}B: model states of {_gb(need)} fill {need / total:.0%} of the cluster's "
                  f"{_gb(total)} GPU memory")


def _weight_bytes(w: Workload) -> float:
    per = QUANT_BYTES.get(w.quantization, WEIGHT_BYTES[w.precision])
    return w.parameters_b * 1e9 * per


@rule(
    id="inference-memory-fit",
    severity="error",
    summary="Inference needs the weights (parameters x bytes per weight after quantization) in GPU memory, plus the "
            "KV cache.",
    fix="quantize (`workload.quantization: int8`/`fp8`/`int4`), add GPUs, or serve a smaller model",
    source="https://huggingface.co/docs/transformers/main/en/quantization/overview",
)
def inference_memory_fit(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.purpose != "inference":
        return
    total, _, gpus = _hbm(ctx)
    need = _weight_bytes(w)
    if gpus and need > total:
        yield Hit(("workload", "parameters_b"), f"`workload.parameters_b` {w.parameters_b:g}B at "
                  f"{'`' + w.quantization + '`' if w.quantization != 'none' else w.precision} need {_gb(need)} of weights "
                  f"but the {gpus} GPUs hold {_gb(total)}")


@rule(
    id="inference-memory-per-node",
    severity="warning",
    summary="Weights larger than one node's GPU memory force tensor/pipeline parallelism across nodes: every token "
            "crosses the network.",
    fix="quantize the weights or use nodes with more GPU memory so one replica fits a node",
    source=ML_NETWORK,
)
def inference_memory_per_node(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.purpose != "inference":
        return
    total, per_node, gpus = _hbm(ctx)
    need = _weight_bytes(w)
    if gpus and per_node and per_node < need <= total:
        yield Hit(("workload", "parameters_b"), f"`workload.parameters_b` {w.parameters_b:g}B: {_gb(need)} of weights exceed one node's "
                  f"{_gb(per_node)} of GPU memory")


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


MOE_MIN_GBPS_PER_GPU = 100.0
"""Inter-node Gbit/s per GPU below which expert all-to-all dominates step time (p4d: 50, p5: 400)."""


@rule(
    id="moe-fabric-bandwidth",
    severity="warning",
    summary="Multi-node MoE needs a fast fabric: all-to-all over TCP Ethernet or under ~100 Gbit/s per GPU makes "
            "expert communication dominate.",
    fix="use an RDMA fabric with >= 100 Gbit/s per GPU (p5/p5en/p6, NDR/XDR rails) or keep experts within a node",
    source=ML_NETWORK,
)
def moe_fabric_bandwidth(ctx: RuleContext) -> Iterator[Hit]:
    w = _wl(ctx)
    if w is None or w.architecture != "moe":
        return
    c = ctx.cluster
    groups = [(r.index, r.group, r.hardware) for r in
              (c.training_groups or tuple(r for r in c.compute_groups if r.has_gpus))]
    if sum(g.size for _, g, _ in groups) < 2:
        return
    net = ctx.bp.network
    if net.fabric == "ethernet":
        yield Hit(("network", "fabric"), "MoE workload across nodes on `network.fabric: ethernet` (NCCL over TCP)")
        return
    for i, g, hw in groups:
        if hw.instance is not None:
            gbps = hw.instance.network_gbps
        elif g.hardware and g.hardware.nics:
            gbps = sum(n.speed_gbps for n in g.hardware.nics)
        else:
            continue
        per_gpu = gbps / max(hw.gpus, 1)
        if per_gpu < MOE_MIN_GBPS_PER_GPU:
            yield Hit(("node_groups", i), f"MoE all-to-all over {per_gpu:g} Gbit/s per GPU in group `{g.name}` "
                      f"({gbps:g} Gbit/s for {hw.gpus} GPUs)")
            return


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
