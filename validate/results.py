"""The judged result: :class:`Verdict` and :class:`JudgeResult`, shared by every suite.

A :class:`JudgeResult` is what a suite's judge makes of one raw output (one nccl-tests run, one fio
job, one AMP result, one node's checks); the runner appends it to ``results.jsonl`` and the reports
read it back (:meth:`JudgeResult.to_json` / :meth:`JudgeResult.from_json`). What a result's key
figure and expectation look like on one line is its suite's business
(:func:`validate.suites.summary`); this module knows no suite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict, cast

__all__ = [
    "VERDICTS",
    "VERDICT_ICONS",
    "Curve",
    "Expected",
    "JudgeResult",
    "Metrics",
    "Series",
    "Verdict",
    "exit_code_for",
    "fmt_bytes",
    "pct",
    "worst",
]


class Verdict(StrEnum):
    """What a result says about the declared cluster, from best to worst.

    ``pass``: as expected; ``warn``: works, degraded or anomalous; ``invalid``: the test cannot say
    anything (one rank, another GPU than the declared one, no output); ``fail``: wrong data, far below
    the expectation, crashed. ``fail`` outranks ``invalid`` (exit 1 beats exit 3). The values are the
    strings written to ``results.jsonl``, ``report.json``, JUnit XML and the Markdown report.
    """

    PASS = "pass"
    WARN = "warn"
    INVALID = "invalid"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        """0 (``pass``) to 3 (``fail``): the order :func:`worst` uses."""
        return _RANK[self]

    @property
    def exit_code(self) -> int:
        """Process exit status of a run whose worst verdict is this one: 0 pass/warn, 1 fail, 3 invalid."""
        return {Verdict.PASS: 0, Verdict.WARN: 0, Verdict.FAIL: 1}.get(self, 3)


VERDICT_ICONS: dict[str, str] = {Verdict.PASS: "✅", Verdict.WARN: "⚠️", Verdict.FAIL: "❌", Verdict.INVALID: "⛔"}
"""The mark each verdict gets in the Markdown and HTML reports."""

VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)
"""Verdict strings from best to worst (``pass``, ``warn``, ``invalid``, ``fail``)."""

_RANK = {v: i for i, v in enumerate(Verdict)}


def _as_verdict(v: str) -> Verdict:
    """``v`` as a :class:`Verdict`; an unknown string ranks as ``invalid``."""
    try:
        return Verdict(v)
    except ValueError:
        return Verdict.INVALID


def worst(verdicts: Iterable[str]) -> Verdict:
    """The worst of ``verdicts`` (``fail`` > ``invalid`` > ``warn`` > ``pass``); ``invalid`` for none.

    Plain strings are accepted (``results.jsonl`` lines); an unknown one counts as ``invalid``."""
    vs = [_as_verdict(v) for v in verdicts]
    return max(vs, key=_RANK.__getitem__) if vs else Verdict.INVALID


def exit_code_for(verdicts: Iterable[str]) -> int:
    """0 when every verdict is pass or warn, 1 when any is fail, else 3 (invalid or nothing to say)."""
    return worst(verdicts).exit_code


def fmt_bytes(n: float | None) -> str:
    """``2147483648`` -> ``"2 GiB"``, ``1536`` -> ``"1.5 KiB"``, ``8`` -> ``"8 B"`` (binary units, 1 KiB = 1024 bytes)."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.3g} {unit}" if unit != "B" else f"{int(v)} B"
        v /= 1024
    return f"{v:g} TiB"  # pragma: no cover


def pct(x: float) -> str:
    """``0.8532`` -> ``"85%"``; small ratios keep two significant digits (``0.0036`` -> ``"0.36%"``)."""
    return f"{x * 100:.2g}%" if abs(x) < 0.1 else f"{x * 100:.0f}%"


class Metrics(TypedDict, total=False):
    """The measured figures of a result (``JudgeResult.metrics``), as written to ``results.jsonl``.

    Each suite's module defines its own keys by extending this (``NcclMetrics``, ``FioMetrics``,
    ``AmpMetrics``; the node checks' ``NodeMetrics``), every key named with its unit. The keys here
    are the runner's, on a result of any suite: ``explained_by`` (``host: check-id`` of the failed
    blocking node checks that explain it), ``test_wall_time_s`` (seconds the test's launch took,
    shared among its results), ``missing_tool`` (the executable a payload needed and did not find),
    ``software`` (the versions the run itself reported using, ``{"nccl": "2.28.9", "torch": "2.12.0+cu130", ...}``:
    :func:`validate.stack.compare_versions`).
    At run time a ``Metrics`` is a plain ``dict``: what is written is exactly the keys that were set,
    in the order they were set.
    """

    explained_by: list[str]
    test_wall_time_s: float
    missing_tool: str
    software: dict[str, str]


class Expected(TypedDict, total=False):
    """What a result was compared with (``JudgeResult.expected``); each suite extends it with its
    figures (``NcclExpected``: busbw in GB/s; ``FioExpected``: MB/s and IOPS; ``AmpExpected``: the
    MFU floor). Keys of every suite: ``ratio`` (measured / expected, ``None`` when no figure
    applies: what :meth:`validate.suites.base.Suite.compared` looks for), ``derivation`` (the
    arithmetic, one sentence), ``source`` (URL(s) of the per-unit figures, or ``blueprint``).
    """

    ratio: float | None
    derivation: str
    source: str


class Series(TypedDict, total=False):
    """Plot data of a result (``JudgeResult.series``): lists of equal length, one value per point; each
    suite extends it (``NcclSeries``: message sizes in bytes and busbw in GB/s; ``AmpSeries``: the loss
    per step) and turns it into :class:`Curve` objects for its plots."""


@dataclass(frozen=True)
class Curve:
    """One line of a plot: ``label``, the ``points`` ``(x, y)`` with ``x_unit`` / ``y_unit`` (``bytes``,
    ``GB/s`` = 1e9 bytes/s, ``step``, ``loss`` ...). Points whose y was not measured are left out."""

    label: str
    x_unit: str
    y_unit: str
    points: tuple[tuple[float, float], ...]

    @property
    def xs(self) -> list[float]:
        """The x values, in order."""
        return [p[0] for p in self.points]

    @property
    def ys(self) -> list[float]:
        """The y values, in order."""
        return [p[1] for p in self.points]


@dataclass
class JudgeResult:
    """One judged result.

    ``source``: the raw output's path (or name); ``kind``: the suite that judged it (a name in
    :data:`validate.suites.REGISTRY`: ``node``, ``nccl``, ``fio``, ``amp``; ``unknown`` only for an
    output nothing recognised); ``verdict``: a :class:`Verdict` (a plain string is converted);
    ``reasons``: why the verdict is not ``pass`` (each with cause and fix when known; empty for
    pass); ``metrics``: measured figures (:class:`Metrics`, extended by each suite's module with its
    keys and units: ``NcclMetrics`` ``peak_busbw_gbps`` in GB/s = 1e9 bytes/s, ``size_at_peak_bytes``
    ...; ``FioMetrics`` ``read_bw_bytes_per_s``, ``read_iops`` ...; ``AmpMetrics`` ``tokens_per_s``,
    ``mfu`` (0-1) ...); ``expected``: what they were compared with (:class:`Expected`: figures,
    ``ratio``, ``derivation``, ``source``); ``notes``: observations that do not change the verdict;
    ``label``: a short name for reports; ``series``: plot data (:class:`Series`: ``NcclSeries``
    ``size``, ``busbw_oop``, ``busbw_ip``; ``AmpSeries`` ``losses``).

    A suite builds its typed dictionaries and hands them in (``JudgeResult(..., metrics=m)`` with
    ``m = NcclMetrics()``), writing through its own reference, and reads a result back with its
    module's accessor (``nccl_metrics(r)``); the generic code (runner, reports) reads the
    :class:`Metrics` keys only.
    """

    source: str
    kind: str
    verdict: Verdict = Verdict.PASS
    reasons: list[str] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    expected: Expected = field(default_factory=Expected)
    notes: list[str] = field(default_factory=list)
    label: str | None = None
    series: Series = field(default_factory=Series)

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict):
            self.verdict = Verdict(self.verdict)

    def degrade(self, verdict: Verdict | str, reason: str) -> None:
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

    def to_json(self) -> dict[str, Any]:
        """``{"source", "kind", "label", "verdict", "reasons", "metrics", "expected", "notes", "series"}``
        (JSON-able; ``verdict`` its string value; non-finite floats become ``None``)."""
        return _clean({
            "source": self.source, "kind": self.kind, "label": self.label, "verdict": self.verdict.value,
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
            source=str(d["source"]), kind=str(d["kind"]), verdict=Verdict(d["verdict"]),
            reasons=[str(x) for x in d.get("reasons") or []], metrics=cast(Metrics, dict(d.get("metrics") or {})),
            expected=cast(Expected, dict(d.get("expected") or {})), notes=[str(x) for x in d.get("notes") or []],
            label=d.get("label"), series=cast(Series, dict(d.get("series") or {})),
        )


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v
