"""Parse the AMP training benchmark's JSON (:mod:`validate.payloads.amp_bench`).

Schema (version 1)::

    {"kind": "amp", "version": 1, "device": "cpu"|"cuda", "gpu_name": str|null, "gpu_count": int,
     "precision": "bf16"|"fp16"|"fp32", "compile": bool,
     "model": {"layers", "hidden", "heads", "seq_len", "vocab", "parameters"},
     "batch_size": int, "steps": int, "tokens_per_s": float, "step_time_s": float,
     "model_tflops": float, "peak_tflops": float|null, "mfu": float|null,
     "peak_memory_bytes": int, "loss_start": float, "loss_end": float, "losses": [float],
     "fp32_baseline": {"tokens_per_s", "step_time_s", "loss_start", "loss_end"}|null,
     "error": str|null}

``model_tflops`` is achieved TFLOP/s per device; MFU counts 6N + 12·L·d·T FLOPs per token
(N parameters, L layers, d hidden, T sequence length: karpathy/nanoGPT ``estimate_mfu``,
pytorch/torchtitan) against the GPU's dense peak for the precision. Non-finite numbers may be
written as ``NaN``/``Infinity`` literals or as strings; they are kept as ``float('nan')``/``inf``
so the judge can see them. A file may hold one document, a list, or one document per line
(one per node or rank), with other text (warnings) around them.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .bounds import ScanBudget, clip_input, decode_at

__all__ = ["AmpBaseline", "AmpModel", "AmpRun", "parse_amp"]


def _f(v: Any) -> float | None:
    """A JSON number or numeric string as float (NaN/inf kept); ``None`` for null/absent/garbage."""
    if v is None or isinstance(v, bool):
        return None
    try:
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            return float(v.strip())
    except (ValueError, OverflowError):
        return None
    return None


def _i(v: Any) -> int | None:
    f = _f(v)
    return int(f) if f is not None and math.isfinite(f) else None


@dataclass
class AmpModel:
    """GPT shape: layers L, hidden d, heads, seq_len T, vocab, parameters N."""

    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    seq_len: int | None = None
    vocab: int | None = None
    parameters: int | None = None

    @property
    def flops_per_token(self) -> float | None:
        """Training FLOPs per token, 6N + 12·L·d·T; ``None`` when a term is missing."""
        if None in (self.parameters, self.layers, self.hidden, self.seq_len):
            return None
        return 6.0 * self.parameters + 12.0 * self.layers * self.hidden * self.seq_len  # type: ignore[operator]


@dataclass
class AmpBaseline:
    """The fp32 baseline run: tokens/s, step time (s) and its losses."""

    tokens_per_s: float | None = None
    step_time_s: float | None = None
    loss_start: float | None = None
    loss_end: float | None = None


@dataclass
class AmpRun:
    """One AMP benchmark result (see the module docstring for units)."""

    device: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    precision: str | None = None
    compile: bool | None = None
    model: AmpModel = field(default_factory=AmpModel)
    batch_size: int | None = None
    steps: int | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    model_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    loss_start: float | None = None
    loss_end: float | None = None
    losses: list[float] = field(default_factory=list)
    fp32_baseline: AmpBaseline | None = None
    error: str | None = None
    version: int | None = None
    host: str | None = None
    software: dict[str, str] = field(default_factory=dict)
    """What the run used: ``torch``, ``cuda`` (the wheel's), ``nccl`` (the wheel's), ``python`` (keys it reported)."""

    @property
    def speedup_vs_fp32(self) -> float | None:
        """AMP tokens/s over fp32 tokens/s (``None`` without a baseline)."""
        b = self.fp32_baseline
        if b is None or not b.tokens_per_s or self.tokens_per_s is None:
            return None
        if not (math.isfinite(b.tokens_per_s) and math.isfinite(self.tokens_per_s)):
            return None
        return self.tokens_per_s / b.tokens_per_s


def _run(d: dict[str, Any]) -> AmpRun:
    mm = d.get("model")
    m: dict[str, Any] = mm if isinstance(mm, dict) else {}
    b = d.get("fp32_baseline")
    raw_losses = d.get("losses")
    losses = [x for x in (_f(v) for v in raw_losses) if x is not None] if isinstance(raw_losses, list) else []
    comp = d.get("compile")
    return AmpRun(
        device=str(d["device"]) if d.get("device") is not None else None,
        gpu_name=str(d["gpu_name"]).strip() if d.get("gpu_name") else None,
        gpu_count=_i(d.get("gpu_count")),
        precision=str(d["precision"]).lower() if d.get("precision") else None,
        compile=bool(comp) if isinstance(comp, bool) else None,
        model=AmpModel(**{k: _i(m.get(k)) for k in ("layers", "hidden", "heads", "seq_len", "vocab", "parameters")}),
        batch_size=_i(d.get("batch_size")),
        steps=_i(d.get("steps")),
        tokens_per_s=_f(d.get("tokens_per_s")),
        step_time_s=_f(d.get("step_time_s")),
        model_tflops=_f(d.get("model_tflops")),
        peak_tflops=_f(d.get("peak_tflops")),
        mfu=_f(d.get("mfu")),
        peak_memory_bytes=_i(d.get("peak_memory_bytes")),
        loss_start=_f(d.get("loss_start")),
        loss_end=_f(d.get("loss_end")),
        losses=losses,
        fp32_baseline=AmpBaseline(
            tokens_per_s=_f(b.get("tokens_per_s")), step_time_s=_f(b.get("step_time_s")),
            loss_start=_f(b.get("loss_start")), loss_end=_f(b.get("loss_end")),
        ) if isinstance(b, dict) else None,
        error=str(d["error"]) if d.get("error") else None,
        version=_i(d.get("version")),
        host=str(d["host"]) if d.get("host") else None,
        software={str(k): str(v) for k, v in sw.items() if v is not None and not isinstance(v, (dict, list))}
        if isinstance(sw := d.get("software"), dict) else {},
    )


_DOC_START = re.compile(r"(?m)^[^\S\n]*+[\[{]")
"""A ``[`` or ``{`` that only whitespace precedes on its line; linear (never scans across lines)."""


def _docs(text: str) -> list[Any]:
    """The JSON documents that start a line of ``text``, in order, within the bounds of
    :mod:`~validate.parsers.bounds` (deeper documents are skipped with a note)."""
    dec = json.JSONDecoder()
    budget = ScanBudget(text)
    out: list[Any] = []
    pos = 0
    for m in _DOC_START.finditer(text):
        start = m.end() - 1
        if start < pos:
            continue
        if budget.exhausted:
            break
        got = decode_at(dec, text, start, budget, what="AMP JSON")
        if got is None:
            continue
        doc, pos = got
        out.append(doc)
    return out


def parse_amp(text: str) -> list[AmpRun]:
    """Every AMP result document in ``text`` (``{"kind": "amp", ...}``), in order.

    Raises ``ValueError`` when the text holds no such document. Reads the first ``MAX_INPUT_CHARS``
    characters; documents nested deeper than ``MAX_JSON_DEPTH`` are not read
    (:mod:`~validate.parsers.bounds`).
    """
    runs: list[AmpRun] = []
    for doc in _docs(clip_input(text)):
        items = doc if isinstance(doc, list) else [doc]
        for d in items:
            if isinstance(d, dict) and d.get("kind") == "amp":
                runs.append(_run(d))
    if not runs:
        raise ValueError('no AMP benchmark JSON ({"kind": "amp", ...}) found')
    return runs
