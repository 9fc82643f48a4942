"""The AMP suite: a synthetic GPT training step under mixed precision (bf16 / fp16 autocast).

Plan: one test per node group (``amp[-group]``) on one GPU (a CPU-only local run: the CPU, with
:data:`TINY_GPT` when the blueprint's model is larger than :data:`CPU_AMP_MAX_PARAMS`); the peak
TFLOP/s of the GPU for the precision comes from the hardware catalog. Payload: ``amp_bench.py``
writing one JSON document (``raw/<id>.json``).

Judge: another GPU than the declared one -> invalid; error -> fail; non-finite or rising loss ->
fail (flat -> warn); MFU below the GPU's floor (:func:`mfu_floor`, or
``validation.amp.thresholds.min_mfu``) -> warn (below `mfu_fail_fraction` of it, default half -> fail); AMP slower than fp32 ->
fail, less than ``validation.amp.thresholds.min_speedup_vs_fp32`` -> warn (GPU only; on CPU these
are notes).

Metrics (:class:`AmpMetrics`): ``tokens_per_s``, ``step_time_s`` (s), ``model_tflops``/``peak_tflops``
(TFLOP/s = 1e12 FLOP/s), ``mfu`` (0-1), ``speedup_vs_fp32``, ``fp32_tokens_per_s``,
``loss_start``/``loss_end``, ``peak_memory_bytes``; expected (:class:`AmpExpected`) ``mfu_floor``,
``ratio`` ...; series (:class:`AmpSeries`) ``losses`` (plotted as :func:`loss_curve`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from blueprints.catalog import UnknownHardwareError, catalog
from blueprints.models import AmpThresholds, Blueprint
from blueprints.resolved import ResolvedGroup

from ..expectations import JudgeContext, apply_overrides
from ..parsers.amp import AmpRun, parse_amp
from ..plan import PlannedTest, TestParams
from ..results import Curve, Expected, JudgeResult, Metrics, Series, Verdict, pct
from ..signatures import by_id
from ..stack import StackExpectations, compare_versions, declared_python, declared_stack
from .base import GroupPlan, HtmlSection, Suite, gpu_mismatch, nothing, part_label, png, resolve_gpu

__all__ = [
    "CPU_AMP_MAX_PARAMS",
    "MFU_FLOOR_HOPPER",
    "TINY_GPT",
    "AmpExpected",
    "AmpMetrics",
    "AmpParams",
    "AmpSeries",
    "AmpSuite",
    "amp_expected",
    "amp_metrics",
    "judge_amp_run",
    "loss_curve",
    "mfu_floor",
]

CPU_AMP_MAX_PARAMS = 20_000_000
"""On a CPU-only run, an AMP model larger than this (parameters) is replaced by :data:`TINY_GPT`."""

TINY_GPT = {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 64, "vocab": 512}
"""The GPT used for CPU-only AMP runs when the blueprint's model is too large for a CPU."""

MAX_BARS = 40
"""At most this many AMP bars in the report's plot."""


@dataclass(frozen=True)
class AmpParams(TestParams):
    """What one AMP test runs (``amp_bench.py``).

    Model shape: ``layers``, ``hidden`` (d_model), ``heads``, ``seq_len`` (tokens), ``vocab``;
    ``batch_size``: micro-batch per GPU (sequences); ``steps``/``warmup_steps``: timed and warm-up
    steps; ``precision``: ``auto``, ``bf16`` or ``fp16``; ``compile``: ``torch.compile``;
    ``fp32_baseline``: also time fp32 for the speed-up; ``peak_tflops``: the GPU's dense peak for the
    precision (TFLOP/s = 1e12 FLOP/s, catalog; ``None`` on CPU); ``gpu_model``: catalog key of the
    GPU the test runs on (``None`` on CPU).
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    batch_size: int
    steps: int
    warmup_steps: int
    precision: str
    compile: bool
    fp32_baseline: bool
    peak_tflops: float | None
    gpu_model: str | None
    python: str | None = None
    """The declared training environment's interpreter on the nodes (:func:`validate.stack.declared_python`)."""


def _estimate_params(layers: int, hidden: int, vocab: int) -> int:
    return vocab * hidden + layers * 12 * hidden * hidden


class AmpMetrics(Metrics, total=False):
    """What an AMP result measured (``JudgeResult.metrics`` of kind ``amp``): ``device`` (``cuda``/``cpu``),
    ``gpu_name`` (as the payload saw it), ``gpu_model`` (catalog key judged against), ``gpu_count``,
    ``precision`` (``bf16``/``fp16``/``fp32``), ``compile`` (torch.compile used), ``parameters`` (model
    parameters), ``batch_size`` (sequences per step), ``seq_len`` (tokens per sequence), ``steps``,
    ``tokens_per_s`` (training throughput, tokens/s), ``step_time_s`` (s), ``model_tflops`` (achieved
    model TFLOP/s = 1e12 FLOP/s per GPU), ``peak_tflops`` (the GPU's dense peak for the precision,
    TFLOP/s), ``mfu`` (model FLOPs utilisation, 0-1), ``speedup_vs_fp32`` (tokens/s over the fp32
    baseline's), ``fp32_tokens_per_s`` (tokens/s), ``loss_start`` / ``loss_end``, ``peak_memory_bytes``
    (bytes)."""

    device: str | None
    gpu_name: str | None
    gpu_model: str | None
    gpu_count: int | None
    precision: str | None
    compile: bool | None
    parameters: int | None
    batch_size: int | None
    seq_len: int | None
    steps: int | None
    tokens_per_s: float | None
    step_time_s: float | None
    model_tflops: float | None
    peak_tflops: float | None
    mfu: float | None
    speedup_vs_fp32: float | None
    fp32_tokens_per_s: float | None
    loss_start: float | None
    loss_end: float | None
    peak_memory_bytes: int | None


class AmpExpected(Expected, total=False):
    """What an AMP result was compared with (``JudgeResult.expected`` of kind ``amp``): ``mfu_floor`` (0-1,
    :func:`mfu_floor` or ``validation.amp.thresholds.min_mfu``), ``peak_tflops`` (TFLOP/s the MFU is
    relative to), ``precision``, ``min_speedup_vs_fp32`` (``validation.amp.thresholds``), and the common
    ``ratio`` (MFU / floor), ``derivation``, ``source``."""

    mfu_floor: float
    peak_tflops: float | None
    precision: str
    min_speedup_vs_fp32: float


class AmpSeries(Series, total=False):
    """The training curve of an AMP result (``JudgeResult.series`` of kind ``amp``): ``losses``, the loss
    after each timed step (cross-entropy, nats per token; read back from JSON, a non-finite loss is
    ``null``)."""

    losses: list[float]


def amp_metrics(r: JudgeResult) -> AmpMetrics:
    """``r.metrics`` as the AMP suite's keys (``r`` a result of kind ``amp``; the same dictionary)."""
    return cast(AmpMetrics, r.metrics)


def amp_expected(r: JudgeResult) -> AmpExpected:
    """``r.expected`` as the AMP suite's keys (the same dictionary)."""
    return cast(AmpExpected, r.expected)


def loss_curve(r: JudgeResult) -> Curve | None:
    """The loss per step of an AMP result (``None`` without losses). A loss read back from JSON as ``null``
    (it was not finite) is left out of the points."""
    losses = cast(AmpSeries, r.series).get("losses") or []
    if not losses:
        return None
    pts = tuple((float(i), float(x)) for i, x in enumerate(losses) if isinstance(x, (int, float)))
    return Curve(label=r.title, x_unit="step", y_unit="loss", points=pts)


def _thresholds(ctx: JudgeContext) -> AmpThresholds:
    """The AMP thresholds of ``ctx`` (``validation.amp.thresholds``, else the model's defaults)."""
    return ctx.thresholds_for(AmpSuite.name, AmpThresholds)


class AmpSuite(Suite):
    """The AMP suite (see the module docstring)."""

    def context_expectations(self, bp: Blueprint | None, group: ResolvedGroup | None) -> StackExpectations:
        """The stack node ``group`` declares: the PyTorch environment the judge compares a run's with
        (:func:`validate.stack.declared_stack`)."""
        return declared_stack(bp, group)

    def environment_python(self, test: PlannedTest) -> str | None:
        """The declared venv's interpreter (:attr:`AmpParams.python`)."""
        return test.params_as(AmpParams).python

    name = "amp"
    title = "Training (AMP)"
    payloads = ("amp_bench.py",)
    params_type = AmpParams
    thresholds_type = AmpThresholds
    shm = True

    # -- planning -------------------------------------------------------------------------------

    def default_timeout_s(self, test: PlannedTest) -> float:
        """The base bound plus 30 minutes: a training run (compile, AMP and the fp32 baseline) on a slow node."""
        return super().default_timeout_s(test) + 1800

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """One test on one GPU (or the CPU) of the group."""
        a = gp.bp.validation.amp
        device = gp.device
        model = {"layers": a.model.layers, "hidden": a.model.hidden, "heads": a.model.heads,
                 "seq_len": a.model.seq_len, "vocab": a.model.vocab}
        anotes: list[str] = [gp.mismatch] if gp.mismatch else []
        if device == "cpu" and _estimate_params(model["layers"], model["hidden"], model["vocab"]) > CPU_AMP_MAX_PARAMS:
            anotes.append(f"CPU-only run: the blueprint's {a.model.layers}-layer d={a.model.hidden} GPT is too "
                          f"large for a CPU; a {TINY_GPT['layers']}-layer d={TINY_GPT['hidden']} GPT ran instead")
            model = dict(TINY_GPT)
        peak = None
        if device == "cuda" and gp.gpu_key:
            try:
                spec = catalog().gpu(gp.gpu_key)
                bf16 = a.precision in ("auto", "bf16") and spec.supports_bf16
                peak = spec.peak_tflops("bf16" if bf16 else "fp16")
            except UnknownHardwareError:
                peak = None
        test = PlannedTest(
            id=gp.test_id(self.name), kind=self.name, group=gp.group.name, nodes=1, ranks_per_node=1, device=device,
            params=AmpParams(**model, batch_size=a.batch_size, steps=a.steps, warmup_steps=3 if a.compile else 2,
                             precision=a.precision, compile=a.compile, fp32_baseline=a.fp32_baseline,
                             peak_tflops=peak, gpu_model=gp.gpu_key, python=declared_python(gp)),
            description=(f"GPT {model['layers']}x{model['hidden']} seq {model['seq_len']} batch {a.batch_size} "
                         f"on one {'GPU' if device == 'cuda' else 'CPU'}"),
            notes=tuple(anotes))
        return [test], []

    # -- payload --------------------------------------------------------------------------------

    def payload_args(self, test: PlannedTest) -> list[str]:
        """Flags of ``amp_bench.py``."""
        p = test.params_as(AmpParams)
        args = ["--layers", str(p.layers), "--hidden", str(p.hidden), "--heads", str(p.heads),
                "--seq-len", str(p.seq_len), "--vocab", str(p.vocab), "--batch-size", str(p.batch_size),
                "--steps", str(p.steps), "--warmup-steps", str(p.warmup_steps),
                "--precision", p.precision, "--device", test.device]
        if p.compile:
            args.append("--compile")
        if p.fp32_baseline:
            args.append("--fp32-baseline")
        if p.peak_tflops:
            args += ["--peak-tflops", f"{p.peak_tflops:g}"]
        return args

    # -- judging --------------------------------------------------------------------------------

    def adjust_context(self, ctx: JudgeContext, test: PlannedTest, local: bool) -> JudgeContext:
        """A local GPU run is judged against the GPU detected here (planned as ``gpu_model``)."""
        detected = test.params_as(AmpParams).gpu_model
        if local and test.device == "cuda" and detected and detected != ctx.gpu_model:
            return apply_overrides(ctx, gpu_model=detected)
        return ctx

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """One result per AMP document in ``text``."""
        return _judge_amp_text(text, ctx, source, label)

    # -- reporting ------------------------------------------------------------------------------

    def summary(self, r: JudgeResult) -> str | None:
        """``bf16 on NVIDIA H100: 52000 tokens/s, MFU 41%, 2.80x fp32``."""
        m = amp_metrics(r)
        tokens, mfu, speedup = m.get("tokens_per_s"), m.get("mfu"), m.get("speedup_vs_fp32")
        if tokens is None:
            return None
        s = f"{m.get('precision') or '?'} on {m.get('gpu_name') or m.get('device') or '?'}: {tokens:.4g} tokens/s"
        if mfu is not None:
            s += f", MFU {pct(mfu)}"
        if speedup is not None:
            s += f", {speedup:.2f}x fp32"
        return s

    def expected_text(self, r: JudgeResult) -> str | None:
        """``MFU ≥ 30%``."""
        floor = amp_expected(r).get("mfu_floor")
        return f"MFU ≥ {floor * 100:.0f}%" if floor is not None else None

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """Throughput AMP vs fp32 (tokens/s) and the training loss curves."""
        mine = [r for r in results if r.kind == self.name]
        rows = [(r.title, m.get("tokens_per_s") or 0.0, m.get("fp32_tokens_per_s"), m.get("precision"))
                for r, m in ((r, amp_metrics(r)) for r in mine) if m.get("tokens_per_s")][:MAX_BARS]
        losses = [c for c in (loss_curve(r) for r in mine) if c is not None]
        if not rows and not losses:
            return None
        import matplotlib.pyplot as plt

        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
        if rows:
            xs = list(range(len(rows)))
            w = 0.38
            ax.bar([x - w / 2 for x in xs], [r[1] for r in rows], w, label="AMP", color="tab:blue")
            ax.bar([x + w / 2 for x in xs], [r[2] or 0 for r in rows], w, label="fp32 baseline", color="tab:gray")
            ax.set_xticks(xs)
            ax.set_xticklabels([f"{r[0]}\n({r[3] or '?'})" for r in rows], fontsize=7)
            ax.set_ylabel("tokens/s")
            ax.set_title("AMP throughput vs fp32", fontsize=9)
            ax.legend(fontsize=7)
            ax.grid(True, axis="y", alpha=0.3)
        for curve in losses[:8]:
            ax2.plot([int(x) for x in curve.xs], curve.ys, "-o", markersize=2, label=curve.label)
        ax2.set_xlabel("step")
        ax2.set_ylabel("loss")
        ax2.set_title("training loss", fontsize=9)
        ax2.grid(True, alpha=0.3)
        if losses:
            ax2.legend(fontsize=6)
        fig.tight_layout()
        return HtmlSection(heading="Training (AMP)", png=png(fig), alt="AMP throughput against fp32 and training loss")



# ---------------------------------------------------------------------------------------------
# expectations: the MFU floor
# ---------------------------------------------------------------------------------------------


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



# ---------------------------------------------------------------------------------------------
# judging
# ---------------------------------------------------------------------------------------------



def _judge_amp_text(text: str, ctx: JudgeContext, source: str, label: str | None) -> list[JudgeResult]:
    name = Path(source).name
    try:
        runs = parse_amp(text)
    except ValueError:
        r = JudgeResult(source=source, kind="amp", label=label or name)
        return [nothing(r, text, 'no AMP benchmark result ({"kind": "amp", ...}) found')]
    many = len(runs) > 1
    return [judge_amp_run(run, ctx, source=source,
                          label=part_label(label, name, run.host or (f"#{i + 1}" if many else None), many))
            for i, run in enumerate(runs)]


def _finite(*vals: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in vals)


def judge_amp_run(run: AmpRun, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one AMP benchmark result: error, loss, MFU against the GPU's floor, speed-up over fp32."""
    m = AmpMetrics()
    e = AmpExpected()
    r = JudgeResult(source=source, kind="amp", label=label, metrics=m, expected=e)
    gpu = run.device == "cuda" or (run.device is None and bool(run.gpu_name))
    log_gpu = resolve_gpu(run.gpu_name)
    mismatch = bool(gpu and run.gpu_name and ctx.gpu_model and gpu_mismatch(run.gpu_name, log_gpu, ctx.gpu_model))
    gpu_key = ctx.gpu_model if (ctx.is_explicit("gpu_model") or mismatch) else (log_gpu or ctx.gpu_model if gpu else None)
    m.update({
        "device": run.device, "gpu_name": run.gpu_name, "gpu_model": gpu_key, "gpu_count": run.gpu_count,
        "precision": run.precision, "compile": run.compile, "parameters": run.model.parameters,
        "batch_size": run.batch_size, "seq_len": run.model.seq_len, "steps": run.steps,
        "tokens_per_s": run.tokens_per_s, "step_time_s": run.step_time_s, "model_tflops": run.model_tflops,
        "peak_tflops": run.peak_tflops, "mfu": run.mfu, "speedup_vs_fp32": run.speedup_vs_fp32,
        "fp32_tokens_per_s": run.fp32_baseline.tokens_per_s if run.fp32_baseline else None,
        "loss_start": run.loss_start, "loss_end": run.loss_end, "peak_memory_bytes": run.peak_memory_bytes,
    })
    r.series = AmpSeries(losses=list(run.losses))
    if run.software:  # what the payload ran (torch, its CUDA and NCCL) against the declared environment
        sw = run.software
        compare_versions(r, ctx.expectations_for(AmpSuite.name, StackExpectations),
                         {"torch": sw.get("torch"), **({"torch_cuda": sw["cuda"]} if sw.get("cuda") else {}),
                          "torch_nccl": sw.get("nccl"), **({"python": sw["python"]} if sw.get("python") else {})},
                         "the AMP payload")
        if sw.get("torch") and not sw.get("cuda"):
            r.note(f"PyTorch {sw['torch']} is a CPU build (torch.version.cuda is None)")
    if mismatch:
        r.degrade(Verdict.INVALID, f"not this hardware: the AMP result ran on {run.gpu_name!r}"
                             + (f" ({log_gpu})" if log_gpu else "") + f" but {ctx.gpu_model} is declared; its MFU says "
                             "nothing about the declared GPUs. " + by_id("not-this-hardware").hint())
        return r
    if run.error:
        low = run.error.lower()
        cause = ("GPU memory exhausted: lower validation.amp.batch_size or the model size" if "out of memory" in low
                 else "see the error; rerun the payload by hand on the node to get the full traceback")
        r.degrade(Verdict.FAIL, f"the AMP benchmark failed: {run.error.splitlines()[0][:300]!r}. Likely cause: {cause}")
        return r
    if run.tokens_per_s is None and not run.losses:
        r.degrade(Verdict.INVALID, "the AMP result holds no throughput and no loss: the benchmark did not run")
        return r
    # ---- loss --------------------------------------------------------------------------------
    losses = run.losses or [x for x in (run.loss_start, run.loss_end) if x is not None]
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad or (run.loss_start is not None and not math.isfinite(run.loss_start)) or (
            run.loss_end is not None and not math.isfinite(run.loss_end)):
        at = f" at step {bad[0]}" if bad else ""
        r.degrade(Verdict.FAIL, f"the loss is not finite{at} (NaN/inf). Likely cause: fp16 overflow without loss scaling "
                          "(use bf16 or GradScaler), a learning rate too high, or a faulty GPU (run `dcgmi diag -r 3`)")
    else:
        start = run.loss_start if run.loss_start is not None else (losses[0] if losses else None)
        end = run.loss_end if run.loss_end is not None else (losses[-1] if losses else None)
        if _finite(start, end):
            assert start is not None and end is not None
            if end > start * (1 + 1e-3):
                r.degrade(Verdict.FAIL, f"the loss rose from {start:.4g} to {end:.4g} over {run.steps or len(losses)} steps: "
                                  "training diverged. Likely cause: gradients corrupted (GPU memory errors: `nvidia-smi "
                                  "-q -d ECC`), or precision problems (fp16 without GradScaler)")
            elif end >= start * (1 - 1e-3):
                r.degrade(Verdict.WARN, f"the loss did not fall ({start:.4g} -> {end:.4g}) over {run.steps or len(losses)} "
                                  "steps: the optimizer made no progress; run more steps or check the learning rate")
            else:
                r.note(f"loss fell from {start:.4g} to {end:.4g}")
    if run.tokens_per_s is not None and not math.isfinite(run.tokens_per_s):
        r.degrade(Verdict.FAIL, "throughput is not finite: the timer or the step failed")
    if not gpu and ctx.gpu_model and ctx.is_explicit("gpu_model"):
        # the user asked for a GPU's judgement (--gpu / --instance-type): a CPU result is a small fraction of any
        # GPU's expectation, and a pass "not judged" would read as a healthy GPU (issue 29 kind 6)
        r.degrade(Verdict.INVALID, f"not this hardware: the AMP result ran on the CPU but {ctx.gpu_model} was given; "
                                   "its throughput says nothing about the GPU. Likely cause: a CPU build of PyTorch "
                                   "(torch.version.cuda is None) or no visible GPU (CUDA_VISIBLE_DEVICES, the driver); "
                                   "rerun the payload with --device cuda, which fails where torch sees no GPU")
        return r
    if not gpu:
        r.note("CPU run: MFU and the AMP speed-up are not judged (no GPU peak applies; bf16 on CPU is often no "
               "faster than fp32)")
        if run.speedup_vs_fp32 is not None:
            r.note(f"AMP vs fp32 on CPU: {run.speedup_vs_fp32:.2f}x")
        return r
    # ---- MFU ---------------------------------------------------------------------------------
    prec = run.precision or "bf16"
    peak = run.peak_tflops
    known = None  # the GPU's catalog key when the catalog knows it
    if gpu_key and (ctx.is_explicit("gpu_model") or not peak):
        try:
            spec = catalog().gpu(gpu_key)
            known, cat_peak = spec.key, spec.peak_tflops(prec)
        except UnknownHardwareError:
            cat_peak = None
        if cat_peak:
            peak = cat_peak
    mfu = run.mfu
    if run.model_tflops is not None and peak and (mfu is None or ctx.is_explicit("gpu_model")):
        mfu = run.model_tflops / peak
    m["peak_tflops"], m["mfu"] = peak, mfu
    if mfu is None and peak and run.model_tflops is None:
        r.note("MFU unknown: the result carries no model TFLOP/s (an older payload)")
    elif mfu is None and known:
        r.note(f"MFU unknown: the catalog has no {prec} peak for {known} (the GPU has no {prec} tensor cores or "
               "their figure is not catalogued)")
    elif mfu is None:
        r.note(f"MFU unknown: {'GPU ' + repr(run.gpu_name) + ' not in the catalog' if run.gpu_name else 'no GPU name'}"
               " (pass --gpu)")
    else:
        th = _thresholds(ctx)
        if th.min_mfu is not None:
            floor, deriv, src = th.min_mfu, "validation.amp.thresholds.min_mfu", "blueprint"
        else:
            floor, deriv, src = mfu_floor(gpu_key)
        e.update({"mfu_floor": round(floor, 4), "derivation": deriv, "source": src, "peak_tflops": peak,
                           "precision": prec, "ratio": round(mfu / floor, 4) if floor else None})
        fig = (f"MFU {pct(mfu)} ({run.model_tflops or 0:.4g} of {peak:g} TFLOP/s {prec} per GPU) vs the floor "
               f"{pct(floor)} ({deriv})")
        cause = ("Likely cause: the step is not compute-bound (small model or batch, eager mode: enable compile and use "
                 "the default 1.3B model), or the GPU runs below its clocks (power/thermal throttling: `nvidia-smi -q -d "
                 "PERFORMANCE`)")
        if mfu > 1.0:
            r.degrade(Verdict.WARN, f"MFU {pct(mfu)} is above 100%: the peak ({peak:g} TFLOP/s) or the FLOP count is wrong")
        elif mfu < floor * th.mfu_fail_fraction:
            r.degrade(Verdict.FAIL, fig + f", below {th.mfu_fail_fraction:g} of the floor "
                      f"(validation.amp.thresholds.mfu_fail_fraction). {cause}")
        elif mfu < floor:
            r.degrade(Verdict.WARN, fig + f". {cause}")
        else:
            r.note(fig)
    # ---- AMP vs fp32 -------------------------------------------------------------------------
    sp = run.speedup_vs_fp32
    need = _thresholds(ctx).min_speedup_vs_fp32
    e["min_speedup_vs_fp32"] = need
    if sp is None:
        r.note("no fp32 baseline: the AMP speed-up is not judged")
    elif prec == "fp32":
        r.note("the run itself is fp32: no AMP speed-up to judge")
    else:
        text = f"{prec} autocast runs at {sp:.2f}x the fp32 baseline's tokens/s (required {need:g}x)"
        cause = ("Likely cause: tensor cores idle (autocast not applied to the matmuls), a step bound by data loading "
                 "or kernel launches (model too small: enable compile, raise batch size), or TF32 making fp32 fast")
        if sp < 1.0:
            r.degrade(Verdict.FAIL, f"AMP is slower than fp32: {text}. {cause}")
        elif sp < need:
            r.degrade(Verdict.WARN, f"AMP is barely faster than fp32: {text}. {cause}")
        else:
            r.note(text)
    return r
