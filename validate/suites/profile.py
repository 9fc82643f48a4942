"""The profile suite: where the AMP training step's time goes on every rank, and what bounds it.

Plan: one test per node group (``profile[-group]``) on one node, ``ranks_per_node`` ranks (the node's
GPUs; on a CPU-only machine gloo processes), the AMP suite's model, batch size and precision
(``validation.amp``; on a CPU the AMP suite's tiny GPT when the model is too large, in fp32) and the
profiler schedule of ``validation.profile``. Payload: ``profile_bench.py`` (with ``amp_bench.py``
and ``trace_breakdown.py`` beside it), one JSON document (``raw/<id>.json``) and one Chrome trace per
rank (``raw/<id>.traces/rank<N>.json``).

Breakdown (``trace_breakdown.py``, after Holistic Trace Analysis; definitions and sources in its
docstring and ``docs/profile.md``): each rank's profiled step time split into ``compute``,
``comm_overlapped``, ``comm_exposed``, ``memory``, ``data_loading``, ``host_launch`` and ``idle``,
fractions summing to 1.

Judge (:func:`judge_profile`): an error -> fail; no rank -> invalid. The bound (:func:`bound_of`): the
non-compute category whose share most exceeds its threshold (``validation.profile.thresholds``), else
``compute``. Compute-bound -> pass (the AMP suite's MFU then says how well); another bound -> warn,
fail when its share reaches ``fail_share``. A straggler rank (:func:`straggler`) is named.

Metrics (:class:`ProfileMetrics`): ``breakdown`` (fractions, all ranks together), ``bound``, ``trace``
(rank 0's trace, relative to the output directory), ``traces``, ``ranks`` (each rank's breakdown,
bound, step time, top operators), ``straggler``, ``top_ops``, ``step_time_s``, ``hta``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from blueprints.models import ProfileThresholds

from ..expectations import JudgeContext
from ..payloads.trace_breakdown import CATEGORIES
from ..plan import PlannedTest, TestParams
from ..results import JudgeResult, Metrics, Verdict, pct
from ..untrusted import md_code, md_text
from .amp import CPU_AMP_MAX_PARAMS, TINY_GPT, _estimate_params
from .base import GroupPlan, HtmlSection, Suite, nothing, part_label, png
from .fio import FioSuite
from .nccl import NcclSuite

__all__ = [
    "BOUNDS",
    "ProfileMetrics",
    "ProfileParams",
    "ProfileSuite",
    "bound_of",
    "judge_profile",
    "profile_metrics",
    "straggler",
]

HTA = "https://github.com/facebookresearch/HolisticTraceAnalysis"
"""Holistic Trace Analysis, whose categories the breakdown follows (read at commit f4d0062)."""

BOUNDS: dict[str, tuple[str, str, str]] = {
    "data_loading": ("input", "max_data_loading",
                     ("the step waits on its input: raise DataLoader num_workers (validation.profile.num_workers), "
                     "use pin_memory and prefetch_factor, move decoding / augmentation off the training process, "
                     "and check the storage the dataset is read from (this run's fio results)")),
    "host_launch": ("host", "max_host_launch",
                    ("the device waits on the host to launch work (many small operators): torch.compile, CUDA graphs, "
                    "larger kernels (a larger micro-batch, fused optimizers), less Python per step")),
    "comm_exposed": ("communication", "max_comm_exposed",
                     ("communication is not hidden behind compute: tune DDP/FSDP bucket sizes (bucket_cap_mb) and "
                     "overlap, check the fabric and NCCL settings (this run's nccl results show what the network "
                     "delivers), or find the straggler the other ranks wait for")),
    "memory": ("memory", "max_memory",
               ("memcpy / memset take the device: pageable host copies (use pinned memory), copies that could be "
               "avoided, or CPU offload")),
    "idle": ("idle", "max_idle",
             ("the device sits idle with its next kernel already launched: synchronisations (.item(), "
             "torch.cuda.synchronize, blocking copies) or waits between streams")),
}
"""Non-compute category -> (bound name, threshold field of :class:`~blueprints.models.ProfileThresholds`, fix)."""

_TRACE_PATH = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")
MAX_BARS = 32
"""At most this many rank bars in the report's plot."""
TOP_OPS = 10
"""Rows of the top-operators table."""
_COLORS = {"compute": "tab:green", "comm_overlapped": "tab:olive", "comm_exposed": "tab:red", "memory": "tab:purple",
           "data_loading": "tab:orange", "host_launch": "tab:blue", "idle": "tab:gray"}


@dataclass(frozen=True)
class ProfileParams(TestParams):
    """What one profile test runs (``profile_bench.py``).

    Model shape as :class:`~validate.suites.amp.AmpParams` (``layers``, ``hidden``, ``heads``,
    ``seq_len`` tokens, ``vocab``); ``batch_size``: sequences per rank per step; ``precision``:
    ``auto``, ``bf16``, ``fp16`` or ``fp32``; ``ranks``: processes started on the node (GPUs, or gloo
    processes); ``wait`` / ``warmup`` / ``active``: the profiler schedule (steps); ``num_workers``:
    DataLoader worker processes.
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    batch_size: int
    precision: str
    ranks: int
    wait: int
    warmup: int
    active: int
    num_workers: int


class ProfileMetrics(Metrics, total=False):
    """What a profile result measured (``JudgeResult.metrics`` of kind ``profile``): ``device``,
    ``gpu_name``, ``world_size`` (ranks), ``precision``, ``step_time_s`` (mean active step of the slowest
    rank, s), ``breakdown`` ({category: fraction of the profiled step time, 0-1}, all ranks together,
    summing to 1), ``bound`` (``compute``, ``input``, ``host``, ``communication``, ``memory`` or
    ``idle``), ``bound_share`` (its category's fraction), ``trace`` (rank 0's Chrome trace, relative to
    the output directory: ``raw/<id>.traces/rank0.json``; ``None`` when the file is not beside the result, e.g. left
    on a remote node), ``traces`` (every rank's that is), ``ranks`` (per
    rank: ``rank``, ``host``, ``path`` gpu/cpu, ``step_time_s`` s, ``busy_s`` s per step outside exposed
    communication, ``breakdown``, ``bound``, ``trace``, ``trace_bytes`` bytes, ``top_ops``),
    ``straggler`` (rank number or ``None``), ``top_ops`` ([{``name``, ``total_us`` us, ``count``}], rank
    0's), ``hta`` (rank 0's HTA temporal breakdown on a GPU: ``idle``/``compute``/``non_compute`` 0-1 of the kernel time,
    ``comm_overlap`` 0-1 of the communication time)."""

    device: str | None
    gpu_name: str | None
    world_size: int | None
    precision: str | None
    step_time_s: float | None
    breakdown: dict[str, float]
    bound: str | None
    bound_share: float | None
    trace: str | None
    traces: list[str]
    ranks: list[dict[str, Any]]
    straggler: int | None
    top_ops: list[dict[str, Any]]
    hta: dict[str, float | None] | None


def profile_metrics(r: JudgeResult) -> ProfileMetrics:
    """``r.metrics`` as the profile suite's keys (the same dictionary)."""
    return cast(ProfileMetrics, r.metrics)


def _thresholds(ctx: JudgeContext) -> ProfileThresholds:
    return ctx.thresholds_for(ProfileSuite.name, ProfileThresholds)


class ProfileSuite(Suite):
    """The profile suite (see the module docstring)."""

    name = "profile"
    title = "Profile (step time breakdown)"
    payloads = ("profile_bench.py", "amp_bench.py", "trace_breakdown.py")
    params_type = ProfileParams
    thresholds_type = ProfileThresholds
    shm = True

    def default_timeout_s(self, test: PlannedTest) -> float:
        """The base bound plus 20 minutes: a few profiled training steps and the trace export on a slow node."""
        return super().default_timeout_s(test) + 1200

    def gpus(self, test: PlannedTest) -> int:
        """Every rank's GPU on a GPU run (the payload starts one process per GPU), else 0."""
        return test.ranks_per_node if test.device == "cuda" else 0

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """One test on one node of the group, one rank per GPU (gloo processes on a CPU)."""
        a, p = gp.bp.validation.amp, gp.bp.validation.profile
        model = {"layers": a.model.layers, "hidden": a.model.hidden, "heads": a.model.heads,
                 "seq_len": a.model.seq_len, "vocab": a.model.vocab}
        notes: list[str] = [gp.mismatch] if gp.mismatch else []
        precision: str = a.precision
        if gp.device == "cpu":
            precision = "fp32"
            if _estimate_params(model["layers"], model["hidden"], model["vocab"]) > CPU_AMP_MAX_PARAMS:
                notes.append(f"CPU-only run: the blueprint's {a.model.layers}-layer d={a.model.hidden} GPT is too large "
                             f"for a CPU; a {TINY_GPT['layers']}-layer d={TINY_GPT['hidden']} GPT ran instead")
                model = dict(TINY_GPT)
            notes.append("CPU-only run: fp32 (bf16 autocast is slower than fp32 on most CPUs)")
        ranks = max(1, gp.ranks)
        test = PlannedTest(
            id=gp.test_id(self.name), kind=self.name, group=gp.group.name, nodes=1, ranks_per_node=ranks,
            device=gp.device,
            params=ProfileParams(**model, batch_size=a.batch_size, precision=precision, ranks=ranks, wait=p.wait,
                                 warmup=p.warmup, active=p.active, num_workers=p.num_workers),
            description=(f"GPT {model['layers']}x{model['hidden']} seq {model['seq_len']} batch {a.batch_size} under "
                         f"torch.profiler on {ranks} {'GPU' if gp.device == 'cuda' else 'CPU process'}"
                         f"{('s' if gp.device == 'cuda' else 'es') if ranks > 1 else ''} "
                         f"(wait {p.wait}, warmup {p.warmup}, active {p.active})"),
            notes=tuple(notes))
        return [test], []

    def payload_args(self, test: PlannedTest) -> list[str]:
        """Flags of ``profile_bench.py``."""
        p = test.params_as(ProfileParams)
        return ["--ranks", str(p.ranks), "--layers", str(p.layers), "--hidden", str(p.hidden), "--heads", str(p.heads),
                "--seq-len", str(p.seq_len), "--vocab", str(p.vocab), "--batch-size", str(p.batch_size),
                "--precision", p.precision, "--wait", str(p.wait), "--warmup", str(p.warmup), "--active", str(p.active),
                "--num-workers", str(p.num_workers), "--device", test.device]

    def recognises(self, window: str) -> bool:
        """A PyTorch profiler (Kineto) Chrome trace: a ``traceEvents`` list and Kineto's ``schemaVersion``
        (``clusterforge judge rank0.pt.trace.json`` breaks a trace a user brings down as one rank)."""
        return bool(_TRACE_EVENTS.search(window) and _KINETO_KEY.search(window))

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """One result per profile document in ``text``; a PyTorch profiler trace (:meth:`recognises`) is judged as
        one rank's profile."""
        name = Path(source).name
        docs = _documents(text)
        if not docs:
            doc = _trace_as_document(text, name)
            if doc is not None:
                return [judge_profile(doc, ctx, source=source, label=label or name)]
            r = JudgeResult(source=source, kind=self.name, label=label or name)
            return [nothing(r, text, 'no profile result ({"kind": "profile", ...}) or PyTorch profiler trace found')]
        many = len(docs) > 1
        return [judge_profile(d, ctx, source=source, label=part_label(label, name, f"#{i + 1}" if many else None, many))
                for i, d in enumerate(docs)]

    # -- reporting ------------------------------------------------------------------------------

    def summary(self, r: JudgeResult) -> str | None:
        """``communication-bound (comm_exposed 41%) on 2 ranks, step 83 ms; straggler rank 1``."""
        m = profile_metrics(r)
        bound = m.get("bound")
        if not bound:
            return None
        share = m.get("bound_share")
        cat = next((c for c, (b, _, _) in BOUNDS.items() if b == bound), "compute")
        s = f"{bound}-bound ({cat} {pct(share)})" if share is not None else f"{bound}-bound"
        s += f" on {m.get('world_size') or '?'} rank(s)"
        step = m.get("step_time_s")
        if step:
            s += f", step {step * 1e3:.3g} ms"
        if m.get("straggler") is not None:
            s += f"; straggler rank {m['straggler']}"
        return s

    def compared(self, r: JudgeResult) -> bool:
        """Whether the breakdown was held against the thresholds (a bound was named)."""
        return profile_metrics(r).get("bound") is not None

    def markdown_section(self, results: list[JudgeResult]) -> list[str]:
        """Per result: the breakdown per rank, the bound's evidence and fix, the related fio / nccl results, the
        top operators and the trace files."""
        mine = [r for r in results if r.kind == self.name and profile_metrics(r).get("ranks")]
        if not mine:
            return []
        out = ["", "## Profile: where the step time goes", "",
               "Categories as in docs/profile.md (after Holistic Trace Analysis); fractions of the profiled step time."]
        for r in mine:
            m = profile_metrics(r)
            out += ["", f"### {md_text(r.title)}: {md_text(m.get('bound') or '?')}-bound", "",
                    "| rank | " + " | ".join(CATEGORIES) + " | bound | step | trace |",
                    "|---|" + "---|" * (len(CATEGORIES) + 3)]
            for row in m.get("ranks") or []:
                bd = row.get("breakdown") or {}
                trace = _safe_trace(row.get("trace"))
                link = f"[{md_text(Path(trace).name)}]({trace})" if trace else "–"
                out.append(f"| {md_text(row.get('rank'))} | " + " | ".join(pct(float(bd.get(c) or 0.0)) for c in CATEGORIES)
                           + f" | {md_text(row.get('bound'))} | {_ms(row.get('step_time_s'))} | {link} |")
            for line in _related(r, results):
                out += ["", line]
            tops = m.get("top_ops") or []
            if tops:
                out += ["", "Top operators / kernels (rank 0):", "", "| name | total | count |", "|---|---|---|"]
                out += [f"| {md_code(str(t.get('name'))[:120])} | {float(t.get('total_us') or 0) / 1e3:.3g} ms | "
                        f"{md_text(t.get('count'))} |" for t in tops[:TOP_OPS]]
        return out

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """A stacked bar per rank (the categories' fractions), the top operators and the trace files."""
        mine = [r for r in results if r.kind == self.name and profile_metrics(r).get("ranks")]
        if not mine:
            return None
        bars: list[tuple[str, dict[str, float]]] = []
        for r in mine:
            for row in profile_metrics(r).get("ranks") or []:
                bars.append((f"{r.title}: rank {row.get('rank')}", row.get("breakdown") or {}))
        bars = bars[:MAX_BARS]
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 1.6 + 0.4 * len(bars)))
        left = [0.0] * len(bars)
        ys = list(range(len(bars)))
        for c in CATEGORIES:
            w = [float(bd.get(c) or 0.0) for _, bd in bars]
            ax.barh(ys, w, height=0.6, left=left, color=_COLORS[c], label=c)
            left = [a + b for a, b in zip(left, w, strict=True)]
        ax.set_yticks(ys)
        ax.set_yticklabels([b[0] for b in bars], fontsize=7)
        ax.set_ylim(len(bars) - 0.5, -0.5)  # first rank on top
        ax.set_xlim(0, 1)
        ax.set_xlabel("fraction of the profiled step time", fontsize=8)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        ax.set_title("where the step time goes, per rank", fontsize=9)
        fig.tight_layout()
        from jinja2 import Environment

        rows = []
        for r in mine:
            m = profile_metrics(r)
            rows.append({"title": r.title, "bound": m.get("bound"), "related": _related(r, results),
                         "traces": [t for t in (_safe_trace(x.get("trace")) for x in m.get("ranks") or []) if t],
                         "tops": [{"name": str(t.get("name"))[:120], "ms": f"{float(t.get('total_us') or 0) / 1e3:.3g}",
                                   "count": t.get("count")} for t in (m.get("top_ops") or [])[:TOP_OPS]]})
        html = Environment(autoescape=True).from_string(_HTML).render(rows=rows)
        return HtmlSection(heading="Profile: where the step time goes", png=png(fig),
                           alt="stacked bar per rank of the profiled step time by category", html=html)


_HTML = """{% for r in rows %}<h4>{{ r.title }}: {{ r.bound }}-bound</h4>
{% for line in r.related %}<p>{{ line }}</p>{% endfor %}
<p>Traces (open in https://ui.perfetto.dev): {% for t in r.traces %}<code>{{ t }}</code> {% endfor %}</p>
{% if r.tops %}<table><tr><th>operator / kernel (rank 0)</th><th>total</th><th>count</th></tr>
{% for t in r.tops %}<tr><td><code>{{ t.name }}</code></td><td>{{ t.ms }} ms</td><td>{{ t.count }}</td></tr>{% endfor %}
</table>{% endif %}{% endfor %}"""


def _ms(v: Any) -> str:
    return f"{float(v) * 1e3:.3g} ms" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def _safe_trace(v: Any) -> str | None:
    """A trace path from a result when it is a plain relative path (no ``..``, no scheme), else ``None``."""
    if not isinstance(v, str) or not _TRACE_PATH.fullmatch(v) or ".." in v.split("/"):
        return None
    return v


def _related(r: JudgeResult, results: list[JudgeResult]) -> list[str]:
    """Lines cross-linking the results of this run that bear on ``r``'s bound: fio for input, nccl for communication."""
    kind = {"input": "fio", "communication": "nccl"}.get(str(profile_metrics(r).get("bound")))
    if kind is None:
        return []
    others = [o for o in results if o.kind == kind]
    if not others:
        return [f"No {kind} result in this run to compare with: run `clusterforge validate --suites {kind}`."]
    suite = _RELATED_SUITES[kind]()  # the sibling suite's own one-line summary (the package's registry imports this module)
    return [f"Related {kind} result {o.title} ({o.verdict}): "
            f"{suite.summary(o) or (o.reasons[0] if o.reasons else '')}" for o in others[:6]]


_RELATED_SUITES: dict[str, type[Suite]] = {"fio": FioSuite, "nccl": NcclSuite}


_TRACE_EVENTS = re.compile(r'"traceEvents"\s*:\s*\[')
_KINETO_KEY = re.compile(r'"schemaVersion"\s*:')


def _trace_as_document(text: str, name: str) -> dict[str, Any] | None:
    """A profile document of one rank from the PyTorch profiler trace ``text`` (file ``name``, which the document
    names as its trace), or ``None`` when ``text`` is not one."""
    from ..payloads.trace_breakdown import analyze

    try:
        trace = json.loads(text)
    except ValueError:
        return None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return None
    try:
        row = analyze(trace)
    except ValueError:
        return None
    rank = row.get("rank") if isinstance(row.get("rank"), int) else 0
    return {"kind": "profile", "device": "cuda" if row["path"] == "gpu" else "cpu", "world_size": 1,
            "schedule": {"active": max(1, int(row["steps"]))}, "ranks": [{**row, "rank": rank, "trace": name}]}


def _documents(text: str) -> list[dict[str, Any]]:
    """The ``{"kind": "profile"}`` JSON documents in ``text`` (one document, or one per line)."""
    try:
        d = json.loads(text)
        cands = d if isinstance(d, list) else [d]
    except ValueError:
        cands = []
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    cands.append(json.loads(line))
                except ValueError:
                    continue
    return [c for c in cands if isinstance(c, dict) and c.get("kind") == "profile"]


def _list(v: Any) -> list[Any]:
    """``v`` when it is a list, else empty (a document's fields are untrusted)."""
    return v if isinstance(v, list) else []


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def bound_of(breakdown: dict[str, float], th: ProfileThresholds) -> tuple[str, str, float]:
    """``(bound, category, share)`` of a breakdown: the non-compute category (of :data:`BOUNDS`) whose share
    exceeds its threshold by the largest factor, else ``("compute", "compute", compute share)``."""
    over = []
    for cat, (bound, field, _) in BOUNDS.items():
        share, limit = float(breakdown.get(cat) or 0.0), float(getattr(th, field))
        if share >= limit:
            over.append((share / limit, cat, bound, share))
    if not over:
        return "compute", "compute", float(breakdown.get("compute") or 0.0) + float(breakdown.get("comm_overlapped") or 0.0)
    _, cat, bound, share = max(over)
    return bound, cat, share


def straggler(ranks: list[dict[str, Any]], ratio: float) -> tuple[int, float, float] | None:
    """``(rank, its busy seconds per step, the other ranks' median)`` of the rank that works longest per step
    outside exposed communication (``busy_s``) when that is more than ``ratio`` above the others' median;
    ``None`` with fewer than two ranks. In synchronous training every rank's step lasts as long; the others
    spend the difference waiting for it in exposed communication."""
    busy = [(row["busy_s"], row["rank"]) for row in ranks if _num(row.get("busy_s")) is not None]
    if len(busy) < 2:
        return None
    top, rank = max(busy)
    rest = [b for b, r in busy if r != rank]
    med = statistics.median(rest)
    if med > 0 and top > med * (1 + ratio):
        return rank, top, med
    return None


def _rank_row(d: dict[str, Any], th: ProfileThresholds) -> dict[str, Any] | None:
    bd = d.get("breakdown")
    if not isinstance(bd, dict) or not isinstance(d.get("rank"), int):
        return None
    frac = {c: max(0.0, _num(bd.get(c)) or 0.0) for c in CATEGORIES}
    total = sum(frac.values())
    if total <= 0:
        return None
    frac = {c: v / total for c, v in frac.items()}  # renormalised: the document's fractions are rounded
    steps = [x for x in _list(d.get("step_us")) if _num(x) is not None]
    window = _num(d.get("window_us")) or 0.0
    per_step = window / len(steps) / 1e6 if steps else None
    bound, _, _ = bound_of(frac, th)
    return {"rank": d["rank"], "host": str(d.get("host") or "")[:120], "path": d.get("path"),
            "step_time_s": per_step, "busy_s": per_step * (1 - frac["comm_exposed"]) if per_step else None,
            "breakdown": {c: round(v, 6) for c, v in frac.items()}, "bound": bound,
            "trace": d.get("trace") if isinstance(d.get("trace"), str) else None,
            "trace_bytes": d.get("trace_bytes") if isinstance(d.get("trace_bytes"), int) else None,
            "window_us": window, "top_ops": [t for t in _list(d.get("top_ops")) if isinstance(t, dict)][:TOP_OPS],
            "hta": d.get("hta") if isinstance(d.get("hta"), dict) else None}


def judge_profile(doc: dict[str, Any], ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one profile document: the breakdown of all ranks together, the bound with its evidence and fix, the
    straggler."""
    m = ProfileMetrics()
    r = JudgeResult(source=source, kind=ProfileSuite.name, label=label, metrics=m)
    th = _thresholds(ctx)
    m.update({"device": doc.get("device"), "gpu_name": doc.get("gpu_name"), "world_size": doc.get("world_size"),
              "precision": doc.get("precision"), "step_time_s": _num(doc.get("step_time_s"))})
    if doc.get("error"):
        r.degrade(Verdict.FAIL, f"the profiled training step failed: {str(doc['error']).splitlines()[0][:300]!r}. "
                                "Rerun the payload by hand on the node for the full traceback")
        return r
    sched = doc.get("schedule")
    active = int(_num(sched.get("active")) or 1) if isinstance(sched, dict) else 1
    rows = [row for row in (_rank_row(d, th) for d in _list(doc.get("ranks")) if isinstance(d, dict)) if row]
    if not rows:
        r.degrade(Verdict.INVALID, "the profile result holds no rank with a breakdown: the profiler recorded no step")
        return r
    rows.sort(key=lambda x: x["rank"])
    # the trace paths, relative to the output directory (the folder holding raw/), when the file is there
    folder = Path(source).parent
    prefix = "raw/" if folder.name == "raw" else ""
    away = []
    for row in rows:
        t = _safe_trace(row["trace"])
        here = t is not None and (folder / t).is_file()
        if t is not None and not here:
            away.append(f"rank {row['rank']}{' on ' + row['host'] if row['host'] else ''}: {t}")
        row["trace"] = prefix + t if t and here else None
    total = sum(row["window_us"] for row in rows)
    us = {c: sum(row["breakdown"][c] * row["window_us"] for row in rows) for c in CATEGORIES}
    bd = {c: round(us[c] / total, 6) if total else 0.0 for c in CATEGORIES}
    bound, cat, share = bound_of(bd, th)
    m.update({"breakdown": bd, "bound": bound, "bound_share": round(share, 6),
              "trace": rows[0]["trace"], "traces": [row["trace"] for row in rows if row["trace"]],
              "ranks": [{k: v for k, v in row.items() if k not in ("window_us", "hta")} for row in rows],
              "top_ops": rows[0]["top_ops"], "hta": rows[0]["hta"]})
    shares = ", ".join(f"{c} {pct(bd[c])}" for c in CATEGORIES if bd[c] >= 0.005)
    evidence = f"{len(rows)} rank(s), {active} profiled step(s): {shares}"
    if bound == "compute":
        r.note(f"compute-bound: {evidence}. No other category reaches its threshold; the AMP suite's MFU says how "
               "well the compute runs")
    else:
        limit = float(getattr(th, BOUNDS[cat][1]))
        text = (f"{bound}-bound: {cat} takes {pct(share)} of the profiled step time (threshold {pct(limit)}, "
                f"validation.profile.thresholds.{BOUNDS[cat][1]}); {evidence}. Fix: {BOUNDS[cat][2]}")
        r.degrade(Verdict.FAIL if share >= th.fail_share else Verdict.WARN, text)
    s = straggler(rows, th.straggler_ratio)
    m["straggler"] = s[0] if s else None
    if s:
        row = next(x for x in rows if x["rank"] == s[0])
        r.degrade(Verdict.WARN, f"straggler: rank {s[0]}{' on ' + row['host'] if row['host'] else ''} works "
                                f"{s[1] * 1e3:.3g} ms per step outside exposed communication against a median of "
                                f"{s[2] * 1e3:.3g} ms on the other ranks, which wait for it; it is {row['bound']}-bound "
                                f"({', '.join(f'{c} {pct(v)}' for c, v in row['breakdown'].items() if v >= 0.05)})")
    if any(row["path"] == "cpu" for row in rows):
        r.note("CPU run: the breakdown is of the CPU step (host operators, gloo communication); GPU kernel categories "
               "(memory, idle) are not measured")
    if m["trace"]:
        r.note(f"trace of rank {rows[0]['rank']}: {m['trace']} (open in https://ui.perfetto.dev)")
    if away:
        r.note("trace files not beside the result (they stay in the run folder on the node, or went with the pod): "
               + "; ".join(away[:8]))
    return r
