"""Workload sizing arithmetic: model states, activations, logits, KV cache, per-step traffic.

Pure functions over numbers; :mod:`blueprints.rules.workload` applies them to a blueprint. Bytes
throughout (GB = 1e9 bytes), bandwidths in GB/s (1e9 bytes/s), times in seconds. Every formula
names its source:

* Model states per parameter, mixed-precision Adam: 2 (16-bit weights) + 2 (16-bit gradients) +
  K = 12 (fp32 master weights, momentum, variance) = 16 bytes; ZeRO stage 1 / 2 / 3 partition the
  K, the gradients and the weights over the N_d data-parallel ranks: 4 + K/N_d, 2 + (2 + K)/N_d,
  (4 + K)/N_d. Rajbhandari et al. 2019, section 3.1 and 5, https://arxiv.org/abs/1910.02054.
* Activations per transformer layer with 16-bit activations (Korthikanti et al. 2022, section 4,
  Table 2, https://arxiv.org/abs/2205.05198): s*b*h*(34 + 5*a*s/h) without parallelism,
  divided by t with tensor + sequence parallelism, s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor
  parallelism alone; selective recomputation drops the 5*a*s/h term (34*s*b*h/t); full
  recomputation keeps the layer input, 2*s*b*h. With pipeline parallelism (1F1B) the first stage
  holds L layers' worth whatever p is (section 4.2.3). The fp32 logits of the cross-entropy loss take
  4*s*b*v/t (section 4.3).
* Training FLOPs per token: 6*N + 12*L*H*Q*T (Chowdhery et al. 2022, PaLM, appendix B,
  https://arxiv.org/abs/2204.02311).
* KV cache per token: 2 (K and V) * layers * kv_heads * head_dim * bytes (grouped-query attention,
  Ainslie et al. 2023, https://arxiv.org/abs/2305.13245); multi-head latent attention caches the
  compressed latent and the decoupled RoPE key: (kv_lora_rank + rope_head_dim) * layers * bytes
  (DeepSeek-V2, section 2.1, https://arxiv.org/abs/2405.04434).
* LoRA adds r*(d_in + d_out) parameters per adapted d_in x d_out matrix (Hu et al. 2021,
  https://arxiv.org/abs/2106.09685); QLoRA stores the frozen weights in 4-bit NormalFloat with
  double-quantized constants, 4 + 0.127 bits per parameter (Dettmers et al. 2023, section 3,
  https://arxiv.org/abs/2305.14314), and adapts every linear layer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

from .models import Workload

__all__ = [
    "KORTHIKANTI",
    "KV_GQA",
    "LORA",
    "MLA",
    "PALM",
    "QLORA",
    "VLLM_UTILIZATION",
    "ZERO",
    "Parallel",
    "Shape",
    "Spec",
    "activation_bytes_per_layer",
    "adapter_parameters",
    "flops_per_token",
    "kv_bytes_per_token",
    "logits_bytes",
    "model_shapes",
    "model_state_bytes_per_param",
    "spec",
    "training_bytes_per_gpu",
]

ZERO = "https://arxiv.org/abs/1910.02054"
KORTHIKANTI = "https://arxiv.org/abs/2205.05198"
PALM = "https://arxiv.org/abs/2204.02311"
KV_GQA = "https://arxiv.org/abs/2305.13245"
MLA = "https://arxiv.org/abs/2405.04434"
LORA = "https://arxiv.org/abs/2106.09685"
QLORA = "https://arxiv.org/abs/2305.14314"
VLLM_UTILIZATION = "https://docs.vllm.ai/en/latest/configuration/engine_args.html"
"""vLLM's ``--gpu-memory-utilization`` (default 0.9): the share of GPU memory the engine plans with."""

MASTER_AND_OPTIMIZER_BYTES = {"adam": 12, "sgd": 8}
"""ZeRO's K: fp32 master weights (4) + Adam's momentum and variance (4 + 4), or SGD's momentum (4)."""

QLORA_BITS_PER_PARAM = 4 + 0.127
"""NF4 weight (4 bits) + double-quantized block constants (8/64 + 32/(64*256) = 0.127 bits), QLoRA section 3."""

WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "int8": 1.0, "int4": 0.5}
"""Bytes per weight by element type (int4/int8: weight-only quantization, scales not counted)."""


@functools.cache
def model_shapes() -> dict[str, dict[str, Any]]:
    """The shape catalog (``blueprints/data/model-shapes.yaml``): ``{name: entry}`` with every key, alias and
    Hugging Face id in lower case; each entry has its catalog ``key``."""
    from .catalog import _load_yaml

    out: dict[str, dict[str, Any]] = {}
    for key, entry in _load_yaml("model-shapes.yaml")["models"].items():
        e = {**entry, "key": key}
        for name in (key, *entry.get("aliases", []), *([entry["hf"]] if entry.get("hf") else [])):
            out[name.lower()] = e
    return out


def model_entry(name: str | None) -> dict[str, Any] | None:
    """The shape catalog entry of ``name`` (a key, an alias or a Hugging Face id, any case), or ``None``."""
    return model_shapes().get(name.lower()) if name else None


@dataclass(frozen=True)
class Shape:
    """A transformer's shape: ``layers`` L, ``hidden`` h, ``heads`` a, ``kv_heads``, ``head_dim``,
    ``ffn_hidden``, ``vocab`` v; MoE ``experts_per_token`` (top-k) and ``expert_ffn_hidden``; MLA
    ``kv_lora_rank`` and ``rope_head_dim`` (both ``None`` for standard attention)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    experts_per_token: int | None = None
    expert_ffn_hidden: int | None = None
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None


@dataclass(frozen=True)
class Spec:
    """A workload's effective model: declared fields over the catalog entry of ``workload.model``.

    ``parameters`` and ``active`` are counts (not billions); ``shape`` is ``None`` when neither the
    catalog nor the blueprint gives one; ``sources`` the URLs of the catalog entry.
    """

    parameters: float
    active: float
    moe: bool
    experts: int | None
    shape: Shape | None
    model: str | None = None
    sources: tuple[str, ...] = field(default=())


def spec(w: Workload) -> Spec | None:
    """The effective model of ``w``; ``None`` when ``workload.model`` is not in the catalog and no
    ``parameters_b`` is declared (a rule reports the unknown model)."""
    entry = model_entry(w.model)
    if w.parameters_b is None and entry is None:
        return None
    e = entry or {}
    params = (w.parameters_b if w.parameters_b is not None else float(e["parameters_b"])) * 1e9
    experts = w.experts if w.experts is not None else e.get("experts")
    moe = w.architecture == "moe" or experts is not None
    active_b = w.active_parameters_b if w.active_parameters_b is not None else e.get("active_parameters_b")
    active = float(active_b) * 1e9 if active_b is not None and moe else params
    shape: Shape | None = None
    src: dict[str, Any] = {k: e[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
                                             "experts_per_token", "expert_ffn_hidden", "kv_lora_rank", "rope_head_dim")
                           if k in e}
    if w.shape is not None:
        src.update({k: v for k, v in w.shape.model_dump().items() if v is not None})
    if {"layers", "hidden", "heads", "vocab"} <= set(src):
        heads, hidden = int(src["heads"]), int(src["hidden"])
        shape = Shape(layers=int(src["layers"]), hidden=hidden, heads=heads, kv_heads=int(src.get("kv_heads", heads)),
                      head_dim=int(src.get("head_dim", hidden // heads)), ffn_hidden=int(src.get("ffn_hidden", 4 * hidden)),
                      vocab=int(src["vocab"]), experts_per_token=src.get("experts_per_token"),
                      expert_ffn_hidden=src.get("expert_ffn_hidden", src.get("ffn_hidden")),
                      kv_lora_rank=src.get("kv_lora_rank"), rope_head_dim=src.get("rope_head_dim"))
    return Spec(params, active, moe, experts, shape, e.get("key"), tuple(e.get("sources", ())))


# ---- formulas --------------------------------------------------------------------------------------


def model_state_bytes_per_param(optimizer: str = "adam", zero_stage: int = 0, dp: int = 1, *,
                                weight_bytes: float = 2.0) -> float:
    """Bytes of model state per parameter on one GPU (ZeRO, section 5.1 / Figure 1).

    ``weight_bytes`` is the width of the working weights and gradients (2 for bf16/fp16/fp8 mixed
    precision, 4 for fp32, which then needs no separate master copy); ``dp`` is N_d. Stage 0: 2Ψ+2Ψ+KΨ;
    1: + K/N_d; 2: gradients too; 3: weights too. Raises ``ValueError`` for a stage outside 0-3.
    """
    k = float(MASTER_AND_OPTIMIZER_BYTES[optimizer])
    if weight_bytes >= 4:
        k -= 4  # fp32 training keeps no separate master copy
    w = g = weight_bytes
    if zero_stage == 0:
        return w + g + k
    if zero_stage == 1:
        return w + g + k / dp
    if zero_stage == 2:
        return w + (g + k) / dp
    if zero_stage == 3:
        return (w + g + k) / dp
    raise ValueError(f"ZeRO stage {zero_stage} is not 0-3")


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, *, t: int = 1, sequence_parallel: bool = True,
                               recompute: str = "none") -> float:
    """Activation bytes one transformer layer stores for the backward pass (Korthikanti et al. 2022,
    Table 2): ``s`` tokens of a sequence on this GPU, micro-batch ``b``, hidden ``h``, ``a`` heads,
    tensor parallelism ``t``. ``recompute`` is ``none``, ``selective`` or ``full``."""
    sp = sequence_parallel or t == 1
    if recompute == "full":
        return 2.0 * s * b * h
    attn = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sp:
        return s * b * h * (34.0 + attn) / t
    return s * b * h * (10.0 + 24.0 / t + attn / t)


def logits_bytes(s: int, b: int, v: int, t: int = 1) -> float:
    """fp32 logits kept for the cross-entropy loss: 4*s*b*v/t bytes (Korthikanti et al. 2022, section 4.3)."""
    return 4.0 * s * b * v / t


def flops_per_token(n_params: float, layers: int, heads: int, head_dim: int, seq: int) -> float:
    """Training FLOPs per token, forward and backward: 6N + 12*L*H*Q*T (PaLM, appendix B)."""
    return 6.0 * n_params + 12.0 * layers * heads * head_dim * seq


def kv_bytes_per_token(shape: Shape, element_bytes: float = 2.0) -> float:
    """KV cache bytes per token: 2*L*kv_heads*head_dim*bytes, or (kv_lora_rank + rope_head_dim)*L*bytes
    with multi-head latent attention."""
    if shape.kv_lora_rank:
        return float(shape.kv_lora_rank + (shape.rope_head_dim or 0)) * shape.layers * element_bytes
    return 2.0 * shape.layers * shape.kv_heads * shape.head_dim * element_bytes


def adapter_parameters(shape: Shape, rank: int, experts: int | None = None,
                       targets: tuple[str, ...] = ("q", "k", "v", "o", "mlp")) -> float:
    """LoRA parameters: r*(d_in + d_out) per adapted matrix, per layer, for the ``targets`` among q, k, v,
    o and ``mlp`` (the three SwiGLU matrices, each expert's for MoE). The default adapts every linear
    layer, QLoRA's setting."""
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    sizes = {"q": h + q, "k": h + kv, "v": h + kv, "o": q + h}
    per_layer = float(sum(sizes[t] for t in targets if t in sizes))
    if "mlp" in targets:
        ffn = (shape.expert_ffn_hidden or shape.ffn_hidden) if experts else shape.ffn_hidden
        per_layer += 3 * (h + ffn) * (experts or 1)
    return float(rank) * shape.layers * per_layer


# ---- training memory ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parallel:
    """A parallel layout: tensor ``tp``, sequence parallel ``sp``, context ``cp``, pipeline ``pp``,
    ZeRO stage ``zero``, activation ``recompute``."""

    tp: int = 1
    sp: bool = True
    cp: int = 1
    pp: int = 1
    zero: int = 3
    recompute: str = "selective"

    def describe(self) -> str:
        """``tensor parallelism 8, context parallelism 4, full recompute``: the non-trivial parts."""
        parts = []
        if self.tp > 1:
            parts.append(f"tensor parallelism {self.tp}")
        if self.cp > 1:
            parts.append(f"context parallelism {self.cp}")
        if self.pp > 1:
            parts.append(f"pipeline parallelism {self.pp}")
        parts.append(f"{self.recompute} recompute" if self.recompute != "none" else "no recompute")
        return ", ".join(parts)


@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU training memory in bytes: ``states`` (weights, gradients, optimizer), ``activations``,
    ``logits``; ``total`` their sum. ``activations`` and ``logits`` are ``None`` without a shape."""

    states: float
    activations: float | None
    logits: float | None

    @property
    def total(self) -> float:
        """States + activations + logits (what is known)."""
        return self.states + (self.activations or 0.0) + (self.logits or 0.0)


def training_bytes_per_gpu(sp_: Spec, w: Workload, gpus: int, par: Parallel) -> TrainingMemory:
    """Per-GPU training memory of ``sp_`` on ``gpus`` GPUs laid out as ``par``.

    Model states: full fine-tuning per :func:`model_state_bytes_per_param` over the tp*pp model
    shards with N_d = gpus/(tp*pp); LoRA keeps frozen 16-bit weights (QLoRA: 4.127 bits) sharded the
    same way and trains only the adapters. Activations: L * :func:`activation_bytes_per_layer` with
    s/cp tokens per GPU, plus :func:`logits_bytes`.
    """
    model_shards = par.tp * par.pp
    dp = max(gpus // (model_shards), 1)
    wbytes = 4.0 if w.precision == "fp32" else 2.0
    if w.finetuning == "full":
        states = sp_.parameters / model_shards * model_state_bytes_per_param(w.optimizer, par.zero, dp, weight_bytes=wbytes)
    else:
        frozen = QLORA_BITS_PER_PARAM / 8 if w.finetuning == "qlora" else wbytes
        frozen_shards = model_shards * (dp if par.zero == 3 else 1)
        adapters = adapter_parameters(sp_.shape, w.lora_rank, sp_.experts) if sp_.shape else 0.0
        states = (sp_.parameters * frozen / frozen_shards
                  + adapters / model_shards * model_state_bytes_per_param(w.optimizer, par.zero, dp, weight_bytes=wbytes))
    if sp_.shape is None:
        return TrainingMemory(states, None, None)
    sh = sp_.shape
    s_local = max(w.sequence_length // par.cp, 1)
    per_layer = activation_bytes_per_layer(s_local, w.micro_batch_size, sh.hidden, sh.heads, t=par.tp,
                                           sequence_parallel=par.sp, recompute=par.recompute)
    if par.recompute == "full":
        # the layer being recomputed holds its full (selective) activations during its backward pass
        per_layer_live = activation_bytes_per_layer(s_local, w.micro_batch_size, sh.hidden, sh.heads, t=par.tp,
                                                    sequence_parallel=par.sp, recompute="selective")
        acts = per_layer * sh.layers + per_layer_live
    else:
        acts = per_layer * sh.layers
    return TrainingMemory(states, acts, logits_bytes(s_local, w.micro_batch_size, sh.vocab, par.tp))


def declared_parallel(w: Workload) -> Parallel:
    """The layout ``w`` declares."""
    return Parallel(w.tensor_parallel, w.sequence_parallel, w.context_parallel, w.pipeline_parallel,
                    w.zero_stage, w.recompute)


def layouts_to_try(base: Parallel, gpus: int, gpus_per_node: int) -> list[Parallel]:
    """Layouts that use at least the declared parallelism, cheapest first: without full recomputation
    (it repeats the forward pass, about a third more compute; Korthikanti et al. 2022, section 5) before
    with it, and within each the fewest GPUs per model replica, tensor before context parallelism (it
    splits the sequence, for long context); tensor parallelism stays within a node
    (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, section 3.3), context parallelism in
    powers of two."""
    out = []
    recomputes = ["none", "selective", "full"]
    rec = recomputes[recomputes.index(base.recompute):]
    tps = sorted({base.tp} | {t for t in (2, 4, 8, 16, 32) if base.tp < t <= gpus_per_node})
    cps = [base.cp * 2**k for k in range(12) if base.cp * 2**k <= gpus]
    for tp in tps:
        for cp in cps:
            if tp * cp * base.pp > gpus:
                continue
            for r in rec:
                out.append(replace(base, tp=tp, cp=cp, sp=True if tp > 1 else base.sp, zero=3, recompute=r))
    out.sort(key=lambda p: (p.recompute == "full", p.tp * p.cp, p.cp, recomputes.index(p.recompute)))
    return out

