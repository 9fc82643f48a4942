"""Judge raw validation outputs against what the declared hardware should deliver.

Entry points: :func:`judge_file` and :func:`judge_text` (a file may hold several nccl-tests runs,
several fio jobs, several AMP results: one :class:`JudgeResult` each) and :func:`worst`.

Verdicts: ``pass``; ``warn`` (works, degraded or anomalous); ``fail``
(wrong data, far below expectation, crashed); ``invalid`` (the test cannot say anything: one
rank, duplicated rank 0, no result table, unknown content). Every non-pass reason names what
was measured, what was expected and why, and the likely cause and fix when one is known.

NCCL, in order: duplicated rank 0 -> invalid; the log's GPU (device lines, JSON ``devices``) is not
the declared one -> invalid ("not this hardware"); no table (crash lines -> fail quoting the error,
else invalid); one rank -> invalid; ``#wrong`` > 0 or "Out of bounds ... FAILED" -> fail; error
lines -> fail. Every crash or error is diagnosed from the whole log through the signature table
(:mod:`validate.signatures`: NCCL WARN and INFO lines, CUDA errors, not only the last line; a
single-node run never gets a network cause). The NCCL INFO channel lines (``NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,NET``) say which transport and NIC every channel used: TCP sockets on an
RDMA fabric -> fail; fewer NICs than declared, GPUDirect RDMA missing on a node, GPU peer-to-peer
through host memory -> warn. Bandwidth: above the physical upper bound of the declared hardware
(:data:`validate.expectations.BUSBW_BOUND_MARGIN`) -> invalid; a multi-node run without a declared
NIC rate, or with an unknown node count -> warn, no bandwidth verdict; peak busbw / expected
(:func:`validate.expectations.expected_busbw`, ring or tree as NCCL would pick) below
``fail_ratio`` -> fail (at socket speed on an RDMA fabric: the fallback is named), below
``warn_ratio`` -> warn, with the causes the NCCL INFO lines single out, or every cause the numbers
allow when the log has none; the size curve: a cliff (busbw collapsing at larger sizes and not
recovering) -> warn (fail when it halves) naming the size where it starts, a recovered mid-size
cliff -> warn, an isolated one-size dip -> note. CPU (gloo) runs have no GPU or fabric
expectation: they pass with a note unless the data is wrong or the run crashed.

fio: job error -> fail; verify failure -> fail; buffered I/O (no ``direct=1``, or ``buffered=1``)
against a device or file-system expectation -> invalid (the page cache was measured); above the
storage's physical upper bound (:data:`validate.expectations.FIO_BOUND_MARGIN`) -> invalid;
bandwidth (sequential, >= 128 KiB blocks) or 4 KiB IOPS (random) against the target's expectation
-> pass/warn/fail by ratio. A job without ``rw``/``bs`` is judged with fio's defaults (read, 4 KiB).

AMP: another GPU than the declared one -> invalid; error -> fail; non-finite or rising loss -> fail (flat -> warn); MFU below the GPU's floor
-> warn (below half of it -> fail); AMP slower than fp32 -> fail, less than the required
speed-up -> warn (GPU only; on CPU these are notes).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blueprints.catalog import UnknownHardwareError, catalog
from blueprints.errors import UsageError

from .expectations import (
    BUSBW_BOUND_MARGIN,
    FIO_BOUND_MARGIN,
    RDMA_FABRICS,
    JudgeContext,
    StorageExpectation,
    expected_busbw,
    mfu_floor,
)
from .parsers.amp import AmpRun, parse_amp
from .parsers.detect import KINDS, NotText, detect_kind, read_text
from .parsers.fio import FioJob, FioReport, VerifyFailure, parse_fio
from .parsers.nccl import NcclRun, NetUsage, iter_curve, net_usage, parse_nccl
from .signatures import by_id, diagnose, doc_ref

__all__ = [
    "VERDICTS",
    "JudgeResult",
    "UnreadableInput",
    "exit_code_for",
    "fmt_bytes",
    "judge_amp_run",
    "judge_file",
    "judge_fio_job",
    "judge_fio_report",
    "judge_nccl_run",
    "judge_text",
    "worst",
]

VERDICTS = ("pass", "warn", "invalid", "fail")
"""Verdicts from best to worst (``fail`` outranks ``invalid``: exit 1 beats exit 3)."""

_RANK = {v: i for i, v in enumerate(VERDICTS)}

DIP = 0.05
"""A size whose busbw is more than 5% below the best smaller size is a dip (ignored below 10% of
the peak, where latency dominates and noise is large)."""
CLIFF = 0.25
"""A dip spanning two or more sizes that recovers is a mid-size cliff (warn) when deeper than 25%."""
COLLAPSE = 0.15
"""busbw that stays more than 15% below its best up to the last size (two or more sizes) is a
sustained collapse (warn); 50% or more is a fail."""
ABOVE = 1.15
"""Peak busbw above 115% of the ring-model expectation gets a note (NVLS/SHARP/tree). Above the physical
upper bound (:data:`~validate.expectations.BUSBW_BOUND_MARGIN`) the result is ``invalid``."""
SOCKET = 0.25
"""On an RDMA fabric, multi-node busbw below 25% of the inter-node expectation is the socket-fallback
signature (single-digit Gbit/s per NIC instead of hundreds; docs/troubleshooting.md#socket-on-rdma)."""

_FABRIC_NAME = {"efa": "EFA", "infiniband": "InfiniBand", "roce": "RoCE", "ethernet": "Ethernet"}


def worst(verdicts: Iterable[str]) -> str:
    """The worst of ``verdicts`` (``fail`` > ``invalid`` > ``warn`` > ``pass``); ``invalid`` for none."""
    vs = list(verdicts)
    if not vs:
        return "invalid"
    return max(vs, key=lambda v: _RANK.get(v, _RANK["invalid"]))


def exit_code_for(verdicts: Iterable[str]) -> int:
    """0 when every verdict is pass or warn, 1 when any is fail, else 3 (invalid or nothing to say)."""
    return {"pass": 0, "warn": 0, "fail": 1}.get(worst(verdicts), 3)


class UnreadableInput(UsageError):
    """A path the judge cannot read as a benchmark output (missing, a directory, binary, unknown kind)."""


def fmt_bytes(n: float | None) -> str:
    """``2147483648`` -> ``"2 GiB"``, ``1536`` -> ``"1.5 KiB"``, ``8`` -> ``"8 B"``."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.3g} {unit}" if unit != "B" else f"{int(v)} B"
        v /= 1024
    return f"{v:g} TiB"  # pragma: no cover


def _pct(x: float) -> str:
    """``0.8532`` -> ``"85%"``; small ratios keep two significant digits (``0.0036`` -> ``"0.36%"``)."""
    return f"{x * 100:.2g}%" if abs(x) < 0.1 else f"{x * 100:.0f}%"


# ---------------------------------------------------------------------------------------------
# result
# ---------------------------------------------------------------------------------------------


@dataclass
class JudgeResult:
    """One judged result.

    ``source``: the raw output's path (or name); ``kind``: ``nccl``, ``fio``, ``amp`` (``unknown``
    only for an output nothing recognised); ``verdict``: ``pass``/``warn``/``fail``/``invalid``;
    ``reasons``: why the verdict is not ``pass`` (each with cause and fix when known; empty for
    pass); ``metrics``: measured figures (nccl: ``collective``, ``ranks``, ``nodes``,
    ``peak_busbw_gbps``, ``size_at_peak_bytes``, ``avg_busbw_gbps``, ``wrong`` (``None`` =
    unchecked) ...; fio: ``read_bw_bytes_per_s``, ``write_bw_bytes_per_s``, ``read_iops``,
    ``write_iops`` ...; amp: ``tokens_per_s``, ``mfu`` ...); ``expected``: what they were compared
    with (figures, ``derivation``, ``source``); ``notes``: observations that do not change the
    verdict; ``label``: a short name for reports; ``series``: plot data (nccl: ``size``,
    ``busbw_oop``, ``busbw_ip`` lists; amp: ``losses``).
    """

    source: str
    kind: str
    verdict: str = "pass"
    reasons: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    label: str | None = None
    series: dict[str, Any] = field(default_factory=dict)

    def degrade(self, verdict: str, reason: str) -> None:
        """Record ``reason`` and lower the verdict to ``verdict`` if that is worse."""
        if reason not in self.reasons:
            self.reasons.append(reason)
        self.verdict = worst([self.verdict, verdict])

    def note(self, text: str) -> None:
        """Add an observation that does not change the verdict."""
        if text not in self.notes:
            self.notes.append(text)

    @property
    def title(self) -> str:
        """``label`` or the source's file name."""
        return self.label or Path(self.source).name

    @property
    def compared(self) -> bool:
        """True when the result was held against an expectation (a ratio to a derived or declared figure).

        A ``pass`` that was not compared only says the test ran correctly (no wrong data, finite
        falling loss); :meth:`summary` and the reports say so.
        """
        if self.kind == "node":  # node checks compare every measurement with the blueprint
            return True
        return any(self.expected.get(k) is not None for k in ("ratio", "busbw_gbps"))

    def summary(self) -> str:
        """One line for the console: the key figure and its ratio to the expectation."""
        s = self._summary()
        if self.verdict == "pass" and not self.compared and s:
            s += " [not compared with an expectation: correctness only]"
        return s

    def _summary(self) -> str:
        m, e = self.metrics, self.expected
        if self.kind == "nccl" and m.get("peak_busbw_gbps") is not None:
            s = (f"{m.get('collective') or 'collective'}, {m.get('ranks') or '?'} ranks / {m.get('nodes') or '?'} node(s):"
                 f" peak busbw {m['peak_busbw_gbps']:.4g} GB/s at {fmt_bytes(m.get('size_at_peak_bytes'))}")
            if e.get("busbw_gbps"):
                s += f" = {_pct(m['peak_busbw_gbps'] / e['busbw_gbps'])} of expected {e['busbw_gbps']:.4g} GB/s"
            return s
        if self.kind == "fio" and (m.get("read_bw_bytes_per_s") or m.get("write_bw_bytes_per_s")):
            parts = []
            for d in ("read", "write"):
                bw = m.get(f"{d}_bw_bytes_per_s")
                if bw:
                    parts.append(f"{d} {bw / 1e6:.5g} MB/s, {m.get(f'{d}_iops', 0):.4g} IOPS")
            s = f"{m.get('rw') or 'job'} bs={fmt_bytes(m.get('block_size_bytes'))}: " + ("; ".join(parts) or "no I/O")
            if e.get("ratio") is not None:
                s += f" = {_pct(e['ratio'])} of expected"
            return s
        if self.kind == "node" and m.get("summary"):
            return str(m["summary"])
        if self.kind == "amp" and m.get("tokens_per_s") is not None:
            s = f"{m.get('precision') or '?'} on {m.get('gpu_name') or m.get('device') or '?'}: {m['tokens_per_s']:.4g} tokens/s"
            if m.get("mfu") is not None:
                s += f", MFU {_pct(m['mfu'])}"
            if m.get("speedup_vs_fp32") is not None:
                s += f", {m['speedup_vs_fp32']:.2f}x fp32"
            return s
        return self.reasons[0] if self.reasons else (self.notes[0] if self.notes else "")

    def to_json(self) -> dict[str, Any]:
        """``{"source", "kind", "label", "verdict", "reasons", "metrics", "expected", "notes", "series"}``
        (JSON-able; non-finite floats become ``None``)."""
        return _clean({
            "source": self.source, "kind": self.kind, "label": self.label, "verdict": self.verdict,
            "reasons": list(self.reasons), "metrics": dict(self.metrics), "expected": dict(self.expected),
            "notes": list(self.notes), "series": dict(self.series),
        })

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JudgeResult:
        """Inverse of :meth:`to_json`. Raises ``ValueError`` when ``d`` lacks source/kind/verdict
        or has an unknown verdict."""
        if not isinstance(d, dict) or not all(k in d for k in ("source", "kind", "verdict")):
            raise ValueError("not a judge result: needs source, kind and verdict")
        if d["verdict"] not in VERDICTS:
            raise ValueError(f"unknown verdict {d['verdict']!r}; expected one of {', '.join(VERDICTS)}")
        return cls(
            source=str(d["source"]), kind=str(d["kind"]), verdict=str(d["verdict"]),
            reasons=[str(x) for x in d.get("reasons") or []], metrics=dict(d.get("metrics") or {}),
            expected=dict(d.get("expected") or {}), notes=[str(x) for x in d.get("notes") or []],
            label=d.get("label"), series=dict(d.get("series") or {}),
        )


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------


def judge_file(path: Path, ctx: JudgeContext, *, kind: str | None = None, label: str | None = None) -> list[JudgeResult]:
    """Judge the raw output at ``path``: one :class:`JudgeResult` per run / job / AMP result.

    ``kind`` (``nccl``/``fio``/``amp``) skips detection: content that does not parse as that kind
    gives one ``invalid`` result. Without ``kind``, undetectable content raises. ``label``
    prefixes each result's label. Raises :class:`UnreadableInput` (a usage error, exit 2) for a
    missing path, a directory, binary data, or (without ``kind``) content of unknown kind.
    """
    p = Path(path)
    if not p.exists():
        raise UnreadableInput(f"{p}: no such file")
    if p.is_dir():
        raise UnreadableInput(f"{p}: is a directory; pass the output files (e.g. {p}/*.txt)")
    try:
        text = read_text(p)
    except NotText as e:
        raise UnreadableInput(str(e)) from None
    except OSError as e:
        raise UnreadableInput(f"{p}: cannot read: {e.strerror or e}") from None
    if kind is None:
        if not text.strip():
            raise UnreadableInput(f"{p}: empty file; nothing to judge (pass --kind to judge it as a run that printed nothing)")
        kind = detect_kind(text, p.name)
        if kind is None:
            raise UnreadableInput(
                f"{p}: not a nccl-tests, fio or AMP benchmark output (no table, job or result found); "
                "pass --kind nccl|fio|amp to judge it anyway")
    return judge_text(text, ctx, source=str(p), kind=kind, label=label)


def judge_text(text: str, ctx: JudgeContext, *, source: str, kind: str | None = None,
               label: str | None = None) -> list[JudgeResult]:
    """Judge raw output ``text`` (named ``source`` in the results). ``kind`` as in :func:`judge_file`;
    without it the kind is detected, and undetectable text gives one ``invalid`` result of kind
    ``unknown``. Never raises for bad content."""
    name = Path(source).name
    if kind is None:
        kind = detect_kind(text, name)
    if kind is None:
        r = JudgeResult(source=source, kind="unknown", label=label or name)
        r.degrade("invalid", "no recognisable benchmark output (nccl-tests table, fio job or AMP result)")
        return [r]
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind == "nccl":
        return _judge_nccl_text(text, ctx, source, label)
    if kind == "fio":
        return _judge_fio_text(text, ctx, source, label)
    return _judge_amp_text(text, ctx, source, label)


_PAYLOAD_DIED = re.compile(r"the payload exited (-?\d+) without output")


def _payload_crash(text: str) -> str | None:
    """The runner's stub for a payload that died silently: ``"exited 1: <last log line>"`` or ``None``."""
    m = _PAYLOAD_DIED.search(text)
    if not m:
        return None
    tail = [ln.strip() for ln in text[m.end():].splitlines() if ln.strip() and not ln.strip().startswith("#")]
    last = next((ln for ln in reversed(tail) if re.search(r"error|exception|fail|killed|denied|not found", ln, re.IGNORECASE)),
                tail[-1] if tail else "")
    return f"the payload exited {m.group(1)} without output" + (f"; its log ends with {last[:300]!r}" if last else "")


def _nothing(r: JudgeResult, text: str, what: str) -> JudgeResult:
    """Verdict for output with nothing recognisable: fail when the payload crashed, else invalid."""
    crash = _payload_crash(text)
    if crash:
        r.degrade("fail", crash + ". Likely cause: see the log next to the raw output; rerun the payload by hand")
    else:
        r.degrade("invalid", what + (" (the file is empty)" if not text.strip() else ""))
    return r


def _label(base: str | None, name: str, part: str | None, many: bool) -> str:
    head = base or name
    return f"{head}: {part}" if part and (many or base is None) else head


# ---------------------------------------------------------------------------------------------
# NCCL
# ---------------------------------------------------------------------------------------------

def _first_errors(errors: list[str], limit: int = 2) -> list[str]:
    """Distinct error messages with the host/pid prefix removed (``node-1: X`` and ``node-2: X`` are one)."""
    out: list[str] = []
    for e in errors:
        core = re.sub(r"^\.\.\s*\S+ pid \d+:\s*", "", e)
        core = re.sub(r"^[\w.\-]+:\s+(?=Test )", "", core)
        if core not in out:
            out.append(core)
    return out[:limit]


def _hosts_in(errors: list[str]) -> list[str]:
    hosts: list[str] = []
    for e in errors:
        m = re.match(r"^(?:\.\.\s*)?([\w.\-]+)(?::| pid )", e)
        if m and m.group(1) not in hosts and not m.group(1).startswith("Test"):
            hosts.append(m.group(1))
    return hosts


def _diagnosis(run: NcclRun, multi: bool | None, fabric: str | None) -> str | None:
    """``"Likely cause: ... Fix: ... (docs/...)"`` from the first log signature in the run's whole output
    (errors, NCCL WARN/INFO lines, anything else it printed), plus the other signatures seen; ``None``
    when no signature matches."""
    found = diagnose([*run.errors, *run.warnings, *run.log_lines], multi=multi, fabric=fabric)
    if not found:
        return None
    sig, line = found[0]
    text = sig.text()
    if line and line not in " ".join(run.errors[:2]):
        text += f" [log: {line[:200]!r}]"
    others = [s.title for s, _ in found[1:3]]
    if others:
        text += f". Also in the log: {'; '.join(others)}"
    return text


def _judge_nccl_text(text: str, ctx: JudgeContext, source: str, label: str | None) -> list[JudgeResult]:
    name = Path(source).name
    runs = parse_nccl(text, name)
    if not runs:
        r = JudgeResult(source=source, kind="nccl", label=label or name)
        return [_nothing(r, text, "no nccl-tests output: no header, result table or error line found")]
    many = len(runs) > 1
    out = []
    for run in runs:
        part = run.label + (f" #{run.index + 1}" if many else "")
        out.append(judge_nccl_run(run, ctx, source=source, label=_label(label, name, part, many)))
    return out


def _resolve_gpu(name: str | None) -> str | None:
    return catalog().resolve_gpu_key(name) if name else None


def _gpu_mismatch(name: str, log_key: str | None, declared: str) -> bool:
    """True when the GPU the log names is not the declared one: a different catalog key, or a name the
    catalog does not know that lacks the declared model's family (``h100`` of ``h100-sxm``)."""
    if log_key is not None:
        return log_key != declared
    family = declared.split("-")[0].lower()
    return family not in name.lower().replace(" ", "")


def judge_nccl_run(run: NcclRun, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one parsed nccl-tests (or torch benchmark) run; see the module docstring for the order."""
    r = JudgeResult(source=source, kind="nccl", label=label)
    m = r.metrics
    coll = run.collective
    m["collective"] = coll or (" or ".join(run.candidates) if run.candidates else None)
    m["tool"] = run.tool
    if run.backend:
        m["backend"] = run.backend
    m["device_name"] = run.device_name
    # ---- who ran: flags > log > blueprint ----------------------------------------------------
    log_nodes = run.nodes
    nodes = ctx.nodes if ctx.is_explicit("nodes") and ctx.nodes else (log_nodes or ctx.nodes)
    ranks = run.ranks or run.inferred_ranks()
    if ranks is not None and not run.ranks:
        r.note(f"no 'Using devices' lines: {ranks} ranks follow from the table (busbw / algbw or size / count)")
    if ranks is None and nodes and ctx.gpus_per_node:
        ranks = nodes * ctx.gpus_per_node
        r.note(f"ranks not in the log: assumed {nodes} node(s) x {ctx.gpus_per_node} GPUs = {ranks}")
    if not run.devices and not ctx.is_explicit("nodes") and ranks and ctx.gpus_per_node and ranks > ctx.gpus_per_node:
        nodes = max(nodes or 1, -(-ranks // ctx.gpus_per_node))
    log_gpu = _resolve_gpu(run.device_name)
    declared = ctx.gpu_model
    mismatch = bool(run.device_name and declared and not run.is_cpu
                    and _gpu_mismatch(run.device_name, log_gpu, declared))
    gpu_key = declared if (ctx.is_explicit("gpu_model") or mismatch) else (log_gpu or declared)
    if run.device_name and not log_gpu and not run.is_cpu and not mismatch:
        r.note(f"GPU {run.device_name!r} is not in the hardware catalog"
               + (f"; using the declared {declared}" if declared else "; no NVLink expectation (pass --gpu)"))
    if ctx.is_explicit("nodes") and log_nodes and ctx.nodes != log_nodes:
        r.note(f"--nodes {ctx.nodes} overrides the {log_nodes} host(s) named in the log")
    multi: bool | None = bool(nodes and nodes > 1) if nodes else None
    m["ranks"] = ranks
    m["nodes"] = nodes
    m["gpu_model"] = gpu_key
    m["rows"] = len(run.rows)
    m["avg_busbw_gbps"] = run.avg_busbw_gbps
    m["wrong"] = run.wrong_total
    m["out_of_bounds"] = run.out_of_bounds
    if run.rows:
        m["min_size_bytes"] = run.rows[0].size_bytes
        m["max_size_bytes"] = run.rows[-1].size_bytes
        small = run.rows[0].out_of_place or run.rows[0].in_place
        m["small_message_time_us"] = small.time_us if small else None
    if run.networks:
        m["networks"] = list(run.networks)
    if run.net_provider:
        m["net_provider"] = run.net_provider
    usage = net_usage(run.log_lines)
    if usage.channel_lines:
        m["transports"] = dict(usage.transports)
        m["nics_used"] = {h: sorted(v) for h, v in usage.nics_used.items()}
    for note in run.format_notes:
        r.note(f"format: {note}")
    r.series = {
        "size": [row.size_bytes for row in run.rows],
        "busbw_oop": [row.out_of_place.busbw_gbps if row.out_of_place else None for row in run.rows],
        "busbw_ip": [row.in_place.busbw_gbps if row.in_place else None for row in run.rows],
    }
    # ---- runs that cannot say anything ------------------------------------------------------
    if run.duplicated_rank0:
        k = run.duplicate_streams or 2
        r.degrade("invalid", f"duplicated rank 0: {k} processes each printed their own 'Rank 0' and ran alone, so no "
                             "collective crossed GPUs. Likely cause: nccl-tests built without MPI but launched with "
                             "mpirun/srun; fix: rebuild with `make MPI=1 MPI_HOME=...` (or run one process with -g N)")
        return r
    if mismatch:
        assert declared is not None and run.device_name is not None
        if ctx.is_explicit("gpu_model"):
            by = "--gpu"
        elif ctx.is_explicit("instance_type"):
            by = f"--instance-type {ctx.instance_type}"
        else:
            by = f"blueprint {ctx.blueprint}" if ctx.blueprint else "the context"
        r.degrade("invalid", f"not this hardware: the log's GPUs are {run.device_name!r}"
                             + (f" ({log_gpu})" if log_gpu else "") + f" but {by} declares {declared}; its figures say "
                             "nothing about the declared cluster. " + by_id("not-this-hardware").hint())
        # a crash or wrong data is still a failure on whatever hardware: those checks run, the bandwidth ones do not
    if not run.rows:
        if run.errors:
            errs = _first_errors(run.errors)
            hosts = _hosts_in(run.errors)
            msg = f"crashed before printing a result: {errs[0]!r}"
            if len(errs) > 1:
                msg += f" (also {errs[1]!r})"
            if hosts:
                msg += f" on {', '.join(hosts)}"
            cause = _diagnosis(run, multi, ctx.fabric)
            r.degrade("fail", msg + (f". {cause}" if cause else ". Rerun with NCCL_DEBUG=INFO to see why"))
        else:
            cause = _diagnosis(run, multi, ctx.fabric)
            r.degrade("invalid", "no result table: the run printed a header but no sizes (interrupted before the "
                                 "first size, or output cut); rerun and keep the whole output" + (f". {cause}" if cause else ""))
        return r
    if ranks == 1 and not mismatch:
        r.degrade("invalid", "one rank: busbw is 0 by definition (bus factor (n-1)/n = 0), so this run says nothing "
                             "about NVLink or the network. Fix: launch one process per GPU (mpirun -np N / srun -n N) "
                             "or use -g N")
        return r
    peak = run.peak()
    if peak is None or peak[0] <= 0:
        if not mismatch:
            r.degrade("invalid", "every busbw is 0: the run moved no data between ranks (one rank per communicator?)")
        return r
    peak_bw, peak_size, peak_where = peak
    m["peak_busbw_gbps"] = peak_bw
    m["size_at_peak_bytes"] = peak_size
    m["peak_placement"] = peak_where
    algbws = [p.algbw_gbps for row in run.rows for _, p in row.placements if p.algbw_gbps is not None]
    m["peak_algbw_gbps"] = max(algbws) if algbws else None
    # ---- correctness -------------------------------------------------------------------------
    bad = [(row.size_bytes, name, p.wrong) for row in run.rows for name, p in row.placements if p.wrong]
    if bad or (run.out_of_bounds or 0) > 0 or run.out_of_bounds_ok is False:
        where = ", ".join(f"{fmt_bytes(s)} {n} ({w:g})" for s, n, w in bad[:4]) + (" ..." if len(bad) > 4 else "")
        total = sum(w for _, _, w in bad)
        msg = (f"wrong results: #wrong = {total:g} element(s)" + (f" at {where}" if bad else "")
               + (f"; Out of bounds values: {run.out_of_bounds} FAILED" if run.out_of_bounds else ""))
        r.degrade("fail", msg + ". The collective returned corrupted data. Likely cause: a GPU, NVLink or NIC "
                               "hardware fault or a NCCL/driver bug; check `nvidia-smi -q -d ECC` and dmesg for Xid "
                               "errors on every node, then rerun pinning NCCL_ALGO/NCCL_PROTO to isolate the path")
    elif run.checked is False:
        r.note("correctness not checked (#wrong printed N/A: run with -c 1 to count wrong elements)")
    if run.errors:
        errs = _first_errors(run.errors)
        hosts = _hosts_in(run.errors)
        cause = _diagnosis(run, multi, ctx.fabric)
        text = f"the run reported {errs[0]!r}" + (f" on {', '.join(hosts)}" if hosts else "")
        if r.verdict == "fail":
            r.note(text + " (nccl-tests exits non-zero after wrong results)")
        else:
            r.degrade("fail", text + (f". {cause}" if cause else ""))
    for w in run.warnings[:3]:
        r.note(f"NCCL WARN {w}")
    if run.avg_busbw_check == "FAILED":
        r.degrade("warn", f"nccl-tests' own NCCL_TESTS_MIN_BW check FAILED (Avg bus bandwidth {run.avg_busbw_gbps:g} GB/s)")
    maxb = run.config.get("maxBytes")
    if maxb and run.rows[-1].size_bytes < maxb and run.out_of_bounds is None and not run.concluded:
        r.degrade("warn", f"the run stopped at {fmt_bytes(run.rows[-1].size_bytes)} of {fmt_bytes(maxb)} without its "
                          "footer: interrupted, hung or killed (use nccl-tests -T to time out hangs)")
        # the peak is reached at the largest sizes, which are missing: comparing the partial curve with
        # the expectation would blame the fabric for a truncated log
        r.note(f"bandwidth not judged against the expectation: the sizes above {fmt_bytes(run.rows[-1].size_bytes)}, "
               f"where busbw peaks, are missing; peak so far {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)}")
        return r
    if mismatch:
        return r
    # ---- CPU runs ----------------------------------------------------------------------------
    if run.is_cpu:
        r.note(f"CPU measurement ({run.backend or 'gloo'} over shared memory / TCP sockets): no GPU or fabric "
               f"expectation applies; peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded")
        _curve(run, r, peak_bw, cpu=True)
        return r
    # ---- transport and NICs (NCCL INFO lines) ------------------------------------------------
    fabric = ctx.fabric
    _transport(run, usage, ctx, r, bool(multi), gpu_key)
    # ---- expectation -------------------------------------------------------------------------
    if ranks is None:
        r.note("number of ranks unknown (no 'Using devices' lines and the table does not pin it down): pass --nodes "
               "and --gpus-per-node to judge the bandwidth")
        _curve(run, r, peak_bw)
        return r
    nodes_eff = nodes or 1
    exp = expected_busbw(ctx, collective=coll, ranks=ranks, nodes=nodes_eff, gpu_key=gpu_key,
                         candidates=tuple(run.candidates))
    if multi:
        factor = (nodes_eff - 1) / (ranks - 1) if ranks > 1 else 0
        m["per_gpu_network_gbytes_s"] = round(peak_bw * factor, 4)
    if exp is not None and exp.upper_gbps and peak_bw > exp.upper_gbps * BUSBW_BOUND_MARGIN:
        r.expected.update({"upper_gbps": round(exp.upper_gbps, 3), "upper_derivation": exp.upper_derivation})
        r.degrade("invalid", f"not this hardware: peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} is above the "
                             f"physical upper bound of the declared hardware, {exp.upper_gbps:.4g} GB/s "
                             f"({exp.upper_derivation}; more than {BUSBW_BOUND_MARGIN - 1:.0%} over it): the log was not "
                             "produced by the hardware it is judged against. " + by_id("not-this-hardware").hint())
        return r
    if nodes is None and ranks > 1 and ctx.nccl.min_busbw_gbps is None:
        r.degrade("warn", f"no bandwidth verdict: the log does not say how many nodes its {ranks} ranks ran on (no "
                          f"'Using devices' lines), so NVLink and the network cannot be told apart (peak busbw "
                          f"{peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded). Fix: pass --nodes and --gpus-per-node "
                          f"(or --blueprint) ({doc_ref('network-unknown')})")
        _curve(run, r, peak_bw)
        return r
    if multi and ctx.nic_gbps is None and ctx.nccl.min_busbw_gbps is None:
        r.degrade("warn", f"no bandwidth verdict: a run across {nodes_eff} nodes is limited by the network, and no NIC "
                          f"rate is declared (peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded; the "
                          "NVLink figure alone would pass a broken network). " + by_id("network-unknown").hint())
        if exp is not None and exp.upper_gbps:
            r.expected.update({"upper_gbps": round(exp.upper_gbps, 3), "upper_derivation": exp.upper_derivation})
        _check_ranks(run, ctx, r, ranks)
        _curve(run, r, peak_bw)
        return r
    if exp is None:
        missing = []
        if not gpu_key:
            missing.append("the GPU model (--gpu)")
        if multi and ctx.nic_gbps is None:
            missing.append("the NIC rate (--nic-gbps, --nics-per-node)")
        r.note("no expectation: " + (" and ".join(missing) or "not enough hardware facts") + " unknown; "
               f"peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded")
        _curve(run, r, peak_bw)
        return r
    ratio = peak_bw / exp.busbw_gbps
    th = ctx.nccl
    r.expected.update({
        "busbw_gbps": round(exp.busbw_gbps, 3), "basis": exp.basis, "algorithm": exp.algorithm,
        "derivation": exp.derivation, "source": exp.source,
        "intra_node_gbps": round(exp.intra_gbps, 3) if exp.intra_gbps else None,
        "inter_node_gbps": round(exp.inter_gbps, 3) if exp.inter_gbps else None,
        "upper_gbps": round(exp.upper_gbps, 3) if exp.upper_gbps else None,
        "warn_ratio": th.warn_ratio, "fail_ratio": th.fail_ratio, "ratio": round(ratio, 4),
    })
    for n in exp.notes:
        r.note(n)
    fig = (f"peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} ({peak_where}) = {_pct(ratio)} of the expected "
           f"{exp.busbw_gbps:.4g} GB/s ({exp.derivation})")
    inter = exp.inter_gbps
    explained = any("NET/Socket" in x or "TCP sockets" in x for x in r.reasons)
    if ratio < th.fail_ratio:
        if fabric in RDMA_FABRICS and multi and inter and peak_bw < SOCKET * inter:
            assert fabric is not None
            r.degrade("fail", fig + f": socket speed on an RDMA fabric ({_pct(peak_bw / inter)} of the "
                                    f"inter-node rate {inter:.4g} GB/s). {_socket_cause(fabric)}")
        else:
            r.degrade("fail", fig + f", below the fail ratio {th.fail_ratio:g}. "
                      + _low_cause(exp.basis, fabric, bool(multi), usage, explained))
    elif ratio < th.warn_ratio:
        r.degrade("warn", fig + f", below the warn ratio {th.warn_ratio:g}. "
                  + _low_cause(exp.basis, fabric, bool(multi), usage, explained))
    else:
        r.note(fig)
        if ratio > ABOVE and exp.basis != "threshold":
            nvls = _nvlink_gen(gpu_key) >= 4
            r.note("above the ring-model expectation: "
                   + ("NVLS (NVSwitch SHARP) or tree algorithms move" if nvls else "tree algorithms move")
                   + " less data than busbw's point-to-point ring formula assumes (nccl-tests issue #153)")
    _check_ranks(run, ctx, r, ranks)
    _curve(run, r, peak_bw)
    return r


def _transport(run: NcclRun, u: NetUsage, ctx: JudgeContext, r: JudgeResult, multi: bool, gpu_key: str | None) -> None:
    """Judge what the NCCL INFO lines say: socket transport on an RDMA fabric (fail), fewer NICs used than
    declared, GPUDirect RDMA missing on some node, GPU peer-to-peer through host memory (warn); log
    signatures that explain a run that finished (GPUDirect RDMA disabled) likewise."""
    fabric = ctx.fabric
    if fabric in RDMA_FABRICS and multi:
        fname = _FABRIC_NAME[fabric]
        via_socket = u.transports.get("NET/Socket", 0)
        socket = bool(via_socket) or "Socket" in run.networks or (run.net_provider in ("tcp", "sockets"))
        if run.net_plugin_missing and fabric == "efa" and not any(t != "NET/Socket" for t in u.net_transports):
            socket = True
        if socket:
            if via_socket:
                how = f"{via_socket} channel(s) 'via NET/Socket'"
            elif run.net_plugin_missing and fabric == "efa":
                how = "'NET/Plugin' found no plugin"
            else:
                how = "network 'Socket' in the NCCL INFO lines"
            r.degrade("fail", f"NCCL used TCP sockets on an {fname} cluster ({how}). {_socket_cause(fabric)}")
        declared = ctx.nics_per_node
        if u.nics_used and declared:
            used = {h: len(v) for h, v in u.nics_used.items()}
            fewest_host = min(used, key=used.__getitem__)
            fewest = used[fewest_host]
            pool = u.nics_listed if (u.nics_listed and fabric != "efa") else None
            avail = min(declared, pool) if pool else (declared if fabric != "efa" else None)
            if pool and pool < declared:
                names = ", ".join(u.nic_names.get(i, str(i)) for i in sorted(u.nic_names))
                r.degrade("warn", f"NCCL saw {pool} of the {declared} declared NICs ({names}), so inter-node bandwidth "
                                  f"is capped at {pool}/{declared} of the NIC rate. {by_id('nics-unused').text()}")
            elif avail and fewest < avail:
                names = ", ".join(u.nic_names.get(i, f"#{i}") for i in sorted(u.nics_used[fewest_host]))
                r.degrade("warn", f"{fewest} of {avail} NICs used on {fewest_host} (inter-node channels via {names}). "
                                  + by_id("nics-unused").text())
        if fabric == "efa" and u.nics_found is not None and declared and u.nics_found < declared:
            r.degrade("warn", f"the OFI plugin found {u.nics_found} of the {declared} declared EFA interfaces. "
                              + by_id("nics-unused").text())
        if fabric in ("infiniband", "roce") and u.gdr:
            without = [h for h, (w, wo) in u.gdr.items() if w == 0 and wo > 0]
            with_gdr = [h for h, (w, _) in u.gdr.items() if w > 0]
            if without and (with_gdr or "GPU Direct RDMA Disabled" in " ".join(run.log_lines)):
                r.degrade("warn", f"GPUDirect RDMA not used on {', '.join(sorted(without))} (its inter-node channels "
                                  "lack /GDRDMA). " + by_id("gdr-disabled").text())
        for sig, line in diagnose(run.log_lines, multi=True, fabric=fabric):
            if sig.id == "gdr-disabled" and not any("GPUDirect RDMA" in x for x in r.reasons):
                r.degrade("warn", f"the log says {line[line.find('GPU Direct'):][:80]!r}. " + sig.text())
    shm = u.transports.get("SHM", 0)
    if shm and not u.transports.get("P2P") and (_nvlink_gen(gpu_key) or multi is False):
        r.degrade("warn", f"{shm} intra-node channel(s) 'via SHM': GPUs of one node exchanged data through host "
                          "memory. " + by_id("p2p-through-host").text())


def _nvlink_gen(gpu_key: str | None) -> int:
    """NVLink generation of a catalog GPU (0 when unknown or PCIe-only); NVLS needs generation 4+."""
    if not gpu_key:
        return 0
    try:
        return int(catalog().gpu(gpu_key).nvlink_gen or 0)
    except KeyError:
        return 0


def _socket_cause(fabric: str) -> str:
    if fabric == "efa":
        return ("Likely cause: NCCL is not using the EFA provider: check the OFI plugin path (the aws-ofi-nccl "
                "directory, /opt/amazon/ofi-nccl/lib, and libfabric, /opt/amazon/efa/lib, must be on LD_LIBRARY_PATH "
                "inside the job); with NCCL_DEBUG=INFO the log must say 'Selected Provider is efa' "
                f"({doc_ref('socket-on-rdma')})")
    return ("Likely cause: NCCL fell back to TCP sockets instead of IB verbs: the job cannot open the HCAs. Pass the "
            "RDMA devices (/dev/infiniband), IPC_LOCK and memlock unlimited into the container, check NCCL_IB_HCA"
            + (" and NCCL_IB_GID_INDEX (RoCEv2)" if fabric == "roce" else "") + f" ({doc_ref('socket-on-rdma')})")


def _network_cause(fabric: str | None) -> str:
    extra = {
        "efa": "every EFA interface attached and up (`fi_info -p efa`), all nodes in one cluster placement group",
        "infiniband": "every HCA listed in NCCL_IB_HCA and at full link rate (`ibstat`), the subnet manager healthy",
        "roce": "every NIC in NCCL_IB_HCA at full rate, PFC/ECN on the RoCE priority (drops collapse RoCE)",
    }.get(fabric or "", "the NICs' link rate")
    return ("inter-node traffic below the NIC rate: check GPUDirect RDMA on every node (nvidia-peermem or DMA-BUF) "
            f"and {extra}")


def _low_cause(basis: str, fabric: str | None, multi: bool, usage: NetUsage | None = None,
               explained: bool = False) -> str:
    """The likely causes of low busbw. A single-node run gets only node-local causes; a multi-node run
    without NCCL INFO channel lines gets every cause the numbers allow, and the advice to rerun with them."""
    if basis == "threshold":
        return "Below the blueprint's validation.nccl.thresholds.min_busbw_gbps"
    local = by_id("nvlink-below-rate")
    if basis == "pcie":
        local_text = ("PCIe peer-to-peer goes through the CPU: check PCIe ACS and IOMMU translation on bare metal "
                      f"(iommu=pt) and `nvidia-smi topo -m` ({doc_ref(local.id)})")
    else:
        local_text = f"{local.cause}; {local.fix} ({doc_ref(local.id)})"
    if not multi:
        return f"Likely cause: {local_text}"
    net = by_id("network-below-rate")
    if explained:
        return "Likely cause: the transport named above"
    if usage is not None and usage.channel_lines:
        return (f"Likely cause: {_network_cause(fabric)} ({doc_ref(net.id)}); the NCCL INFO lines show "
                f"{', '.join(f'{k} x{v}' for k, v in usage.transports.items())}; if one node alone is slow too, "
                f"{local_text}")
    return (f"Possible causes (the log has no NCCL INFO channel lines to tell them apart): {net.cause}; or, if one "
            f"node alone is slow too, {local_text}. Fix: {net.fix} ({doc_ref(net.id)})")


def _check_ranks(run: NcclRun, ctx: JudgeContext, r: JudgeResult, ranks: int) -> None:
    if not run.devices or not ctx.gpus_per_node:
        return
    per_host: dict[str, int] = {}
    for d in run.devices:
        per_host[d.host] = per_host.get(d.host, 0) + 1
    most = max(per_host.values())
    if most > ctx.gpus_per_node:
        r.degrade("warn", f"{most} ranks on one node but the nodes have {ctx.gpus_per_node} GPUs: ranks share GPUs "
                          "(check the launcher's processes per node)")
    elif most < ctx.gpus_per_node:
        r.note(f"the run used {most} of {ctx.gpus_per_node} GPUs per node")
    if ctx.nodes and len(per_host) < ctx.nodes and not ctx.is_explicit("nodes"):
        r.note(f"the run used {len(per_host)} of the blueprint's {ctx.nodes} nodes")


def _curve(run: NcclRun, r: JudgeResult, peak: float, cpu: bool = False) -> None:
    """Shape of the size curve per placement: isolated dips (note), cliffs (warn), collapse (warn/fail).

    For CPU (gloo) runs the anomalies are counted into one note: processes sharing a few cores
    make those curves irregular, and the GPU/fabric causes do not apply.
    """
    if cpu:
        probe = JudgeResult(source=r.source, kind=r.kind)
        _curve(run, probe, peak)
        n = len(probe.reasons) + sum("dips" in x for x in probe.notes)
        if n:
            r.note(f"the CPU curve is irregular ({n} dip(s) or drop(s) between sizes): expected for gloo processes "
                   "sharing a machine's cores; not judged")
        return
    floor = 0.10 * peak
    for placement in ("out-of-place", "in-place"):
        pts = list(iter_curve(run, placement))
        if len(pts) < 3:
            continue
        best = 0.0
        best_at = 0
        low: list[tuple[int, float, float, int]] = []  # (index, depth, best before, size of best)
        for i, (size, bw) in enumerate(pts):
            if best >= floor and best > 0 and bw < best * (1 - DIP):
                low.append((i, 1 - bw / best, best, best_at))
            if bw > best:
                best, best_at = bw, size
        segs: list[list[tuple[int, float, float, int]]] = []
        for item in low:
            if segs and segs[-1][-1][0] == item[0] - 1:
                segs[-1].append(item)
            else:
                segs.append([item])
        for seg in segs:
            first, last = seg[0][0], seg[-1][0]
            depth = max(x[1] for x in seg)
            ref_bw, ref_size = seg[0][2], seg[0][3]
            lo_size = pts[first][0]
            end_size, end_bw = pts[last]
            recovered = last < len(pts) - 1
            if not recovered and ((len(seg) >= 2 and depth >= COLLAPSE) or depth >= 0.5):
                cliff = by_id("busbw-cliff")
                msg = (f"{placement} busbw cliff from {fmt_bytes(lo_size)}: busbw collapses from {ref_bw:.4g} GB/s at "
                       f"{fmt_bytes(ref_size)} to {end_bw:.4g} GB/s at {fmt_bytes(end_size)} (-{_pct(depth)}) and does "
                       f"not recover. {cliff.text()}")
                r.metrics.setdefault("cliff_start_bytes", lo_size)
                r.degrade("fail" if depth >= 0.5 and len(seg) >= 2 else "warn", msg)
            elif recovered and len(seg) >= 2 and depth >= CLIFF:
                msg = (f"{placement} mid-size cliff: busbw drops from {ref_bw:.4g} GB/s ({fmt_bytes(ref_size)}) to "
                       f"{min(pts[i][1] for i, *_ in seg):.4g} GB/s between {fmt_bytes(lo_size)} and {fmt_bytes(end_size)} "
                       f"(-{_pct(depth)}) and recovers at {fmt_bytes(pts[last + 1][0])}. Likely cause: a poor "
                       "algorithm/protocol switch point (try NCCL_ALGO/NCCL_PROTO) or contention during the run")
                r.degrade("warn", msg)
            else:
                where = (f"at {fmt_bytes(lo_size)}" if first == last else f"from {fmt_bytes(lo_size)} to {fmt_bytes(end_size)}")
                tail = f", recovers at {fmt_bytes(pts[last + 1][0])}" if recovered else " (last size)"
                r.note(f"{placement} busbw dips {where}: {min(pts[i][1] for i, *_ in seg):.4g} GB/s vs {ref_bw:.4g} GB/s at "
                       f"{fmt_bytes(ref_size)} (-{depth * 100:.1f}%){tail}; isolated, noted only")


# ---------------------------------------------------------------------------------------------
# fio
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
            r.metrics["missing_tool"] = missing_tool
            r.degrade("invalid", f"the fio suite could not run: {payload_error}. A tool that is not installed says "
                                 "nothing about the hardware")
            return [r]
        if payload_error:
            r.degrade("fail", f"fio did not run: {payload_error}. Likely cause: fio is not installed on the node or the "
                              "target directory is missing or not writable; fix: install fio (validation_tools role) and "
                              "check the mount")
            return [r]
        return [_nothing(r, text, "no fio job, result or verify line found")]
    return judge_fio_report(report, ctx, source=source, label=label)


def _fio_payload_error(text: str) -> tuple[str | None, str | None]:
    """``(error, missing_tool)`` that validate's fio payload records in ``clusterforge`` when fio could
    not run (``missing_tool``: the executable that is not installed), else ``(None, None)``."""
    start = text.find("{")
    if start < 0:
        return None, None
    try:
        doc = json.loads(text[start:])
    except ValueError:
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
        r = judge_fio_job(job, ctx, source=source, label=_label(label, name, job.name, many))
        mine = [i for i, v in enumerate(report.verify_failures)
                if v.file and (v.file in job.paths or Path(v.file).name.startswith(job.name + "."))]
        if mine:
            claimed.update(mine)
            r.metrics["verify_failures"] = len(mine)
            r.degrade("fail", _verify_reason([report.verify_failures[i] for i in mine]))
        results.append(r)
    rest = [v for i, v in enumerate(report.verify_failures) if i not in claimed]
    if rest or (report.errors and not report.jobs):
        r = JudgeResult(source=source, kind="fio", label=_label(label, name, "verify" if rest else "errors", bool(results)))
        r.metrics.update({"read_bw_bytes_per_s": None, "write_bw_bytes_per_s": None, "read_iops": None,
                          "write_iops": None, "verify_failures": len(rest)})
        if rest:
            r.degrade("fail", _verify_reason(rest))
        for e in report.errors[:3]:
            r.degrade("fail", f"fio reported {e}")
        results.append(r)
    elif report.errors:
        # the jobs finished (their own error field decides fail); an error line next to them is a warning
        for r in results:
            for e in report.errors[:3]:
                r.degrade("warn", f"fio printed {e!r} alongside the results: check the full output")
    return results


def _target(job: FioJob, ctx: JudgeContext, r: JudgeResult) -> StorageExpectation | None:
    if not ctx.storage:
        return None
    best: StorageExpectation | None = None
    for p in job.paths:
        for s in ctx.storage:
            if s.mount and (p == s.mount or p.startswith(s.mount.rstrip("/") + "/")):
                if best is None or len(s.mount or "") > len(best.mount or ""):
                    best = s
            elif s.kind in ("instance-store", "nvme", "nvme-raid0") and re.match(r"^/dev/(nvme\d|md)", p):
                best = best or s
    if best is not None:
        return best
    if ctx.fio_target:
        for s in ctx.storage:
            if s.mount and s.mount.rstrip("/") == ctx.fio_target.rstrip("/"):
                r.note(f"judged against {s.name} (--target)")
                return s
        r.note(f"fio target {ctx.fio_target} is not a storage target declared in the blueprint: figures recorded only")
        return None
    if len(ctx.storage) == 1:
        s = ctx.storage[0]
        r.note(f"the job's paths ({', '.join(job.paths) or 'none given'}) name no known mount: judged against the only "
               f"storage target, {s.name}")
        return s
    r.note("the job's paths name no known mount and the cluster has several storage targets: pass --target MOUNT")
    return None


def judge_fio_job(job: FioJob, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one fio job (group) against the storage target its paths (or ``ctx.fio_target``) name.

    Order: job error -> fail; no I/O -> invalid; no target -> figures only; buffered I/O (no
    ``direct=1``, or ``buffered=1``) against a device or file-system expectation -> invalid (it
    measured the page cache); above the target's physical upper bound by more than
    :data:`~validate.expectations.FIO_BOUND_MARGIN` -> invalid; sequential (>= 128 KiB blocks)
    bandwidth or 4 KiB random IOPS against the expectation -> pass/warn/fail by ratio. A missing
    ``rw`` or ``bs`` is judged with fio's defaults (``read``, 4 KiB).
    """
    r = JudgeResult(source=source, kind="fio", label=label)
    m = r.metrics
    m.update({
        "job": job.name, "rw": job.rw_effective, "block_size_bytes": job.block_size_effective,
        "numjobs": int(job.option("numjobs") or 0) or job.clones, "iodepth": int(job.option("iodepth") or 0) or None,
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
        r.degrade("fail", f"fio job {job.name!r} ended with error {job.error} ({os.strerror(job.error)}): the I/O "
                          "failed; check the target is mounted and writable and dmesg for device errors")
    active = [d for d in ("read", "write") if getattr(job, d).active]
    if not active and not job.error:
        r.degrade("invalid", f"fio job {job.name!r} did no I/O (0 bytes read and written)")
        return r
    tgt = _target(job, ctx, r)
    if tgt is None:
        if not ctx.storage:
            r.note("no storage expectation (no blueprint or instance type with local NVMe / FSx): figures recorded only")
        return r
    r.expected.update({"target": tgt.mount, "target_kind": tgt.kind, "target_name": tgt.name,
                       "derivation": tgt.derivation, "source": tgt.source,
                       "warn_ratio": ctx.fio.warn_ratio, "fail_ratio": ctx.fio.fail_ratio})
    if job.buffered and tgt.has_numbers:
        how = "buffered=1" if (job.option("buffered") or "0").strip() not in ("0", "false") else (
            "direct=0" if job.direct is False else "no direct=1 (fio's default is buffered I/O)")
        got = "; ".join(f"{d} {getattr(job, d).bw_bytes_per_s / 1e6:.5g} MB/s" for d in active)
        r.degrade("invalid", f"fio job {job.name!r} ran with {how}: it measured the page cache in RAM, not "
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
            r.expected[f"{d}_mb_s"] = round(exp, 3)
            fig = (f"sequential {d} {got:.5g} MB/s with {fmt_bytes(bs)} blocks = {_pct(ratio)} of the expected "
                   f"{exp:.5g} MB/s for {tgt.name} ({tgt.derivation})")
        else:
            r.note(f"no sequential {d} expectation for {tgt.name}: {tgt.derivation}")
    elif job.random_effective and bs == RAND_BS:
        exp = getattr(tgt, f"{d}_iops_4k")
        if exp:
            ratio = io.iops / exp
            r.expected[f"{d}_iops"] = round(exp, 1)
            fig = (f"random {d} {io.iops:.5g} IOPS with 4 KiB blocks = {_pct(ratio)} of the expected {exp:.5g} IOPS "
                   f"for {tgt.name} ({tgt.derivation})")
        else:
            r.note(f"no 4 KiB random {d} IOPS expectation for {tgt.name}")
    else:
        r.note(f"{job.rw_effective} with {fmt_bytes(bs)} blocks: only sequential >= {fmt_bytes(SEQ_MIN_BS)} "
               "and 4 KiB random jobs are judged")
    if ratio is None:
        return r
    r.expected["ratio"] = round(ratio, 4)
    cause = _fio_cause(tgt, job)
    if ratio < ctx.fio.fail_ratio:
        r.degrade("fail", f"{fig}, below the fail ratio {ctx.fio.fail_ratio:g}. {cause}")
    elif ratio < ctx.fio.warn_ratio:
        r.degrade("warn", f"{fig}, below the warn ratio {ctx.fio.warn_ratio:g}. {cause}")
    else:
        r.note(fig)
    return r


def _fio_bound(job: FioJob, tgt: StorageExpectation, r: JudgeResult, active: list[str]) -> bool:
    """Degrade ``r`` to invalid when a direction's throughput (or 4 KiB IOPS) exceeds the target's physical
    upper bound by more than FIO_BOUND_MARGIN; True when it did."""
    hit = False
    for d in active:
        io = getattr(job, d)
        up_mb = getattr(tgt, f"upper_{d}_mb_s")
        if up_mb and io.bw_bytes_per_s / 1e6 > up_mb * FIO_BOUND_MARGIN:
            r.expected[f"upper_{d}_mb_s"] = round(up_mb, 3)
            r.degrade("invalid", f"{d} {io.bw_bytes_per_s / 1e6:.5g} MB/s is above what {tgt.name} can physically deliver "
                                 f"({up_mb:.5g} MB/s: {tgt.upper_derivation}; more than {FIO_BOUND_MARGIN - 1:.0%} over it): "
                                 "the I/O was served by RAM or by other storage. " + by_id("not-this-hardware").hint())
            hit = True
            continue
        up_io = getattr(tgt, f"upper_{d}_iops_4k")
        if up_io and job.block_size_effective <= RAND_BS and io.iops > up_io * FIO_BOUND_MARGIN:
            r.expected[f"upper_{d}_iops"] = round(up_io, 1)
            r.degrade("invalid", f"{d} {io.iops:.5g} IOPS is above what {tgt.name} can physically deliver ({up_io:.5g} "
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


# ---------------------------------------------------------------------------------------------
# AMP
# ---------------------------------------------------------------------------------------------


def _judge_amp_text(text: str, ctx: JudgeContext, source: str, label: str | None) -> list[JudgeResult]:
    name = Path(source).name
    try:
        runs = parse_amp(text)
    except ValueError:
        r = JudgeResult(source=source, kind="amp", label=label or name)
        return [_nothing(r, text, 'no AMP benchmark result ({"kind": "amp", ...}) found')]
    many = len(runs) > 1
    return [judge_amp_run(run, ctx, source=source,
                          label=_label(label, name, run.host or (f"#{i + 1}" if many else None), many))
            for i, run in enumerate(runs)]


def _finite(*vals: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in vals)


def judge_amp_run(run: AmpRun, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one AMP benchmark result: error, loss, MFU against the GPU's floor, speed-up over fp32."""
    r = JudgeResult(source=source, kind="amp", label=label)
    m = r.metrics
    gpu = run.device == "cuda" or (run.device is None and bool(run.gpu_name))
    log_gpu = _resolve_gpu(run.gpu_name)
    mismatch = bool(gpu and run.gpu_name and ctx.gpu_model and _gpu_mismatch(run.gpu_name, log_gpu, ctx.gpu_model))
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
    r.series = {"losses": list(run.losses)}
    if mismatch:
        r.degrade("invalid", f"not this hardware: the AMP result ran on {run.gpu_name!r}"
                             + (f" ({log_gpu})" if log_gpu else "") + f" but {ctx.gpu_model} is declared; its MFU says "
                             "nothing about the declared GPUs. " + by_id("not-this-hardware").hint())
        return r
    if run.error:
        low = run.error.lower()
        cause = ("GPU memory exhausted: lower validation.amp.batch_size or the model size" if "out of memory" in low
                 else "see the error; rerun the payload by hand on the node to get the full traceback")
        r.degrade("fail", f"the AMP benchmark failed: {run.error.splitlines()[0][:300]!r}. Likely cause: {cause}")
        return r
    if run.tokens_per_s is None and not run.losses:
        r.degrade("invalid", "the AMP result holds no throughput and no loss: the benchmark did not run")
        return r
    # ---- loss --------------------------------------------------------------------------------
    losses = run.losses or [x for x in (run.loss_start, run.loss_end) if x is not None]
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad or (run.loss_start is not None and not math.isfinite(run.loss_start)) or (
            run.loss_end is not None and not math.isfinite(run.loss_end)):
        at = f" at step {bad[0]}" if bad else ""
        r.degrade("fail", f"the loss is not finite{at} (NaN/inf). Likely cause: fp16 overflow without loss scaling "
                          "(use bf16 or GradScaler), a learning rate too high, or a faulty GPU (run `dcgmi diag -r 3`)")
    else:
        start = run.loss_start if run.loss_start is not None else (losses[0] if losses else None)
        end = run.loss_end if run.loss_end is not None else (losses[-1] if losses else None)
        if _finite(start, end):
            assert start is not None and end is not None
            if end > start * (1 + 1e-3):
                r.degrade("fail", f"the loss rose from {start:.4g} to {end:.4g} over {run.steps or len(losses)} steps: "
                                  "training diverged. Likely cause: gradients corrupted (GPU memory errors: `nvidia-smi "
                                  "-q -d ECC`), or precision problems (fp16 without GradScaler)")
            elif end >= start * (1 - 1e-3):
                r.degrade("warn", f"the loss did not fall ({start:.4g} -> {end:.4g}) over {run.steps or len(losses)} "
                                  "steps: the optimizer made no progress; run more steps or check the learning rate")
            else:
                r.note(f"loss fell from {start:.4g} to {end:.4g}")
    if run.tokens_per_s is not None and not math.isfinite(run.tokens_per_s):
        r.degrade("fail", "throughput is not finite: the timer or the step failed")
    if not gpu:
        r.note("CPU run: MFU and the AMP speed-up are not judged (no GPU peak applies; bf16 on CPU is often no "
               "faster than fp32)")
        if run.speedup_vs_fp32 is not None:
            r.note(f"AMP vs fp32 on CPU: {run.speedup_vs_fp32:.2f}x")
        return r
    # ---- MFU ---------------------------------------------------------------------------------
    prec = run.precision or "bf16"
    peak = run.peak_tflops
    if gpu_key and (ctx.is_explicit("gpu_model") or not peak):
        try:
            cat_peak = catalog().gpu(gpu_key).peak_tflops(prec)
        except UnknownHardwareError:
            cat_peak = None
        if cat_peak:
            peak = cat_peak
    mfu = run.mfu
    if run.model_tflops is not None and peak and (mfu is None or ctx.is_explicit("gpu_model")):
        mfu = run.model_tflops / peak
    m["peak_tflops"], m["mfu"] = peak, mfu
    if mfu is None:
        r.note(f"MFU unknown: {'GPU ' + repr(run.gpu_name) + ' not in the catalog' if run.gpu_name else 'no GPU name'}"
               " (pass --gpu)")
    else:
        if ctx.amp.min_mfu is not None:
            floor, deriv, src = ctx.amp.min_mfu, "validation.amp.thresholds.min_mfu", "blueprint"
        else:
            floor, deriv, src = mfu_floor(gpu_key)
        r.expected.update({"mfu_floor": round(floor, 4), "derivation": deriv, "source": src, "peak_tflops": peak,
                           "precision": prec, "ratio": round(mfu / floor, 4) if floor else None})
        fig = (f"MFU {_pct(mfu)} ({run.model_tflops or 0:.4g} of {peak:g} TFLOP/s {prec} per GPU) vs the floor "
               f"{_pct(floor)} ({deriv})")
        cause = ("Likely cause: the step is not compute-bound (small model or batch, eager mode: enable compile and use "
                 "the default 1.3B model), or the GPU runs below its clocks (power/thermal throttling: `nvidia-smi -q -d "
                 "PERFORMANCE`)")
        if mfu > 1.0:
            r.degrade("warn", f"MFU {_pct(mfu)} is above 100%: the peak ({peak:g} TFLOP/s) or the FLOP count is wrong")
        elif mfu < floor / 2:
            r.degrade("fail", fig + f", below half the floor. {cause}")
        elif mfu < floor:
            r.degrade("warn", fig + f". {cause}")
        else:
            r.note(fig)
    # ---- AMP vs fp32 -------------------------------------------------------------------------
    sp = run.speedup_vs_fp32
    need = ctx.amp.min_speedup_vs_fp32
    r.expected["min_speedup_vs_fp32"] = need
    if sp is None:
        r.note("no fp32 baseline: the AMP speed-up is not judged")
    elif prec == "fp32":
        r.note("the run itself is fp32: no AMP speed-up to judge")
    else:
        text = f"{prec} autocast runs at {sp:.2f}x the fp32 baseline's tokens/s (required {need:g}x)"
        cause = ("Likely cause: tensor cores idle (autocast not applied to the matmuls), a step bound by data loading "
                 "or kernel launches (model too small: enable compile, raise batch size), or TF32 making fp32 fast")
        if sp < 1.0:
            r.degrade("fail", f"AMP is slower than fp32: {text}. {cause}")
        elif sp < need:
            r.degrade("warn", f"AMP is barely faster than fp32: {text}. {cause}")
        else:
            r.note(text)
    return r
