"""Reports of judged results: JSON, Markdown, JUnit XML and an HTML page with plots.

:func:`write_reports` writes ``report.json``, ``report.md``, ``junit.xml`` and ``report.html``
into a folder; :func:`load_results` reads a results folder back (``results.jsonl``, one
:class:`~validate.judge.JudgeResult` JSON per line as the runner appends them while tests
finish, or a ``report.json``).

What a result's key figure, expectation, plot and section look like is its suite's business
(:data:`validate.suites.REGISTRY`: :meth:`~validate.suites.Suite.summary`,
:meth:`~validate.suites.Suite.expected_text`, :meth:`~validate.suites.Suite.result_plot`,
:meth:`~validate.suites.Suite.markdown_section`, :meth:`~validate.suites.Suite.html_section`);
this module lays them out. The HTML page is self-contained: matplotlib plots (busbw against
message size with the expected line, fio rates against their expectation, AMP throughput AMP vs
fp32 and the loss curve) are embedded as base64 PNGs; every text is HTML-escaped (jinja2
autoescape). matplotlib is imported only when the HTML is written.

Results files and raw outputs are untrusted (:mod:`validate.untrusted`): they are read within the
bounds of :mod:`validate.parsers.bounds` (size, JSON nesting); in ``report.md`` every value they
carry is Markdown-escaped; a link is made only to an ``http(s)`` URL or to a file inside the results
folder, anything else is shown as text; and every report file is written atomically, replacing (never
following) a symbolic link, in a folder that must resolve inside the output folder.

Size: a report of up to :data:`FULL_REPORT_MAX` results shows every result in full. A bigger one (a
validation of thousands of nodes) stays readable and its pages small: ``report.md`` and ``report.html``
then summarise the results per suite, per test and per node (counts by verdict, the worst groups first,
the tail folded into one line), list the results that are not ``pass`` worst first (at most
:data:`LISTED_MAX`, the first :data:`DETAILED_MAX` with their details) and count the passes; the
suites' sections are drawn from the listed results and the first :data:`PASS_EXAMPLES` passes of each
suite. ``report.json`` and ``junit.xml`` always hold every result (they are read by programs).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from html import unescape as _html_unescape
from pathlib import Path
from typing import Any

from blueprints.errors import UsageError

from .parsers.bounds import MAX_INPUT_CHARS, JsonLimitError
from .parsers.bounds import loads as bounded_loads
from .results import VERDICT_ICONS, VERDICTS, JudgeResult, Verdict, worst
from .rundir import Damaged, read_results
from .suites import REGISTRY, find_suite, summary
from .untrusted import md_code, md_text, safe_href, write_atomic

__all__ = [
    "DETAILED_MAX",
    "FULL_REPORT_MAX",
    "GROUPS_MAX",
    "LISTED_MAX",
    "PASS_EXAMPLES",
    "Group",
    "NoResults",
    "build_report",
    "group_summaries",
    "load_results",
    "load_results_damaged",
    "write_reports",
]

FULL_REPORT_MAX = 200
"""Most results ``report.md`` and ``report.html`` show one by one, each in full; a bigger report is summarised."""

LISTED_MAX = 1000
"""Most results that are not ``pass`` a summarised report lists, one line each, worst first (the rest are counted)."""

DETAILED_MAX = 100
"""Most of the listed results whose details (reasons, notes, metrics, plot, raw output) a summarised report shows."""

GROUPS_MAX = 50
"""Most groups (tests, nodes) one summary table of a summarised report shows, worst first; the others are
folded into one line with their counts."""

PASS_EXAMPLES = 20
"""Passing results of each suite a summarised report hands the suites' sections, beside the listed ones."""

_DAMAGED_SHOWN = 20

_ICON = VERDICT_ICONS


class NoResults(UsageError):
    """The path holds no results (``results.jsonl`` / ``report.json``) or they cannot be read."""


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def _read_bounded(path: Path) -> str:
    """The text of a results file; :class:`NoResults` when it is over ``MAX_INPUT_CHARS`` bytes."""
    with open(path, "rb") as f:
        data = f.read(MAX_INPUT_CHARS + 1)
    if len(data) > MAX_INPUT_CHARS:
        raise NoResults(f"{path}: over {MAX_INPUT_CHARS // (1024 * 1024)} MiB, more than a results file holds; "
                        "not read")
    return data.decode("utf-8", errors="replace")


def valid_result(d: Any) -> str | None:
    """Why ``d`` (a decoded results line) is not a judge result, else ``None``."""
    try:
        JudgeResult.from_json(d)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        return f"not a judge result ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
    return None


def _read_jsonl(path: Path) -> tuple[list[JudgeResult], list[Damaged]]:
    """The results of a ``results.jsonl`` and its damaged lines (:func:`validate.rundir.read_results`):
    those are skipped and named, never a reason to stop; :class:`NoResults` when no line is a result."""
    built: dict[int, tuple[Any, JudgeResult]] = {}  # id of a line's object -> (it, its result): each built once

    def valid(d: Any) -> str | None:
        try:
            built[id(d)] = (d, JudgeResult.from_json(d))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return f"not a judge result ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})"
        return None

    try:
        lines, damaged = read_results(path, valid=valid)
    except OSError as e:
        raise NoResults(f"{path}: cannot be read ({e.strerror or e})") from None
    out = [b[1] if (b := built.get(id(d))) is not None and b[0] is d else JudgeResult.from_json(d) for d in lines]
    built.clear()
    if not out and damaged:
        raise NoResults(f"{path}: no intact result; " + "; ".join(d.describe() for d in damaged[:5])
                        + (f" (and {len(damaged) - 5} more)" if len(damaged) > 5 else ""))
    return out, damaged


def _read_report(path: Path) -> list[JudgeResult]:
    try:
        doc = bounded_loads(_read_bounded(path))
    except JsonLimitError as e:
        raise NoResults(f"{path}: {e.reason}") from None
    except json.JSONDecodeError as e:
        raise NoResults(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise NoResults(f"{path}: not a clusterforge report (no \"results\" list)")
    try:
        return [JudgeResult.from_json(r) for r in doc["results"]]
    except ValueError as e:
        raise NoResults(f"{path}: {e}") from None


def load_results(path: Path) -> list[JudgeResult]:
    """Results from a results folder (``results.jsonl``, else ``report.json``) or from one of those files.

    Damaged lines of ``results.jsonl`` (a cut-off last line, an undecodable or deep line, a line that is
    not a result) are skipped: :func:`load_results_damaged` names them. Raises :class:`NoResults` when no
    line is a result."""
    return load_results_damaged(path)[0]


def load_results_damaged(path: Path) -> tuple[list[JudgeResult], list[Damaged]]:
    """:func:`load_results` and the damaged ``results.jsonl`` lines it skipped (:class:`validate.rundir.Damaged`).

    Raises :class:`NoResults` (a usage error, one line) when there is nothing to read, for a
    file over ``MAX_INPUT_CHARS`` bytes and for JSON nested deeper than ``MAX_JSON_DEPTH``
    (:mod:`validate.parsers.bounds`).
    """
    p = Path(path)
    if not p.exists():
        raise NoResults(f"{p}: no such file or directory — pass the results folder `clusterforge validate -o` wrote "
                        "(it holds results.jsonl), or a results.jsonl / report.json file")
    if p.is_dir():
        jl, rj = p / "results.jsonl", p / "report.json"
        if jl.is_file():
            return _read_jsonl(jl)
        if rj.is_file():
            return _read_report(rj), []
        raise NoResults(f"{p}: no results.jsonl or report.json in this folder (run `clusterforge validate -o {p}` "
                        f"or `clusterforge judge ... -o {p}` first)")
    if p.stat().st_size == 0:
        raise NoResults(f"{p}: empty file; expected a results folder, results.jsonl or report.json")
    head = p.read_bytes()[:4096]
    if b"\x00" in head:
        raise NoResults(f"{p}: binary data; expected a results folder, results.jsonl or report.json")
    if p.suffix == ".jsonl":
        return _read_jsonl(p)
    if p.suffix == ".json":
        return _read_report(p), []
    raise NoResults(f"{p}: not a results folder, results.jsonl or report.json")


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


def build_report(results: list[JudgeResult], *, title: str, blueprint: Any,
                 damaged: list[Damaged] | None = None, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``report.json`` document: ``{"title", "blueprint", "generated_at", "verdict", "counts", "results"}``.

    ``blueprint`` is the blueprint's name (a :class:`~blueprints.models.Blueprint` is accepted: its name is used).
    ``cost``: the cluster's cost basis (:func:`clusterforge.cost.cost_basis`: node $/h per group, with the
    prices' date); when given the document gains ``cost`` and ``work_costs`` (:func:`validate.costs.work_costs`:
    dollars per million training tokens of each AMP result, per TB read of each fio result).
    """
    from blueprints.version import __version__

    if blueprint is not None and not isinstance(blueprint, str):
        blueprint = getattr(blueprint, "name", str(blueprint))

    counts = Counter(r.verdict.value for r in results)
    extra: dict[str, Any] = {}
    if cost:
        from .costs import work_costs

        extra["cost"] = cost
        extra["work_costs"] = work_costs(results, cost)
    if damaged:  # lines of results.jsonl that were skipped (named; the results they held are not here)
        extra["damaged_lines"] = [{k: v for k, v in d.to_json().items() if k != "text"} | {"describe": d.describe()}
                                  for d in damaged]
    return {
        "title": title,
        "blueprint": blueprint,
        "generated_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "clusterforge_version": __version__,
        "verdict": worst(r.verdict for r in results).value,
        "counts": {v: counts.get(v, 0) for v in VERDICTS},
        **extra,
        "results": [r.to_json() for r in results],
    }


def _report_json(doc: dict[str, Any]) -> str:
    """``report.json``'s text: the document indented, each result on one line (``json.dumps`` with an indent
    encodes in Python, some 10x slower than the C encoder that writes one line)."""
    head = json.dumps({k: v for k, v in doc.items() if k != "results"}, indent=2)
    results = ",\n    ".join(json.dumps(r) for r in doc["results"])
    body = f'  "results": [\n    {results}\n  ]' if doc["results"] else '  "results": []'
    return (head[:-2] + ",\n" if head != "{}" else "{\n") + body + "\n}\n"


# ---------------------------------------------------------------------------------------------
# summaries of a big report
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Group:
    """One row of a summary table: the results whose key is ``name`` (a suite, a test id, a node), their
    ``counts`` by verdict (every verdict of :data:`VERDICTS`, zeros included) and their ``worst`` verdict.
    ``folded``: the row stands for that many groups of the table's tail (``name`` then says so)."""

    name: str
    counts: dict[str, int]
    worst: str
    folded: int = 0

    @property
    def total(self) -> int:
        """Results in the group."""
        return sum(self.counts.values())


def _test_of(r: JudgeResult) -> str:
    """The test a result belongs to: its label up to the first ``": "`` (the runner's labels start with the
    test id; a judged file's with its name)."""
    return r.title.split(": ", 1)[0]


def _node_of(r: JudgeResult) -> str | None:
    host = r.metrics.get("host")  # type: ignore[typeddict-item]  # the node suite's key (NodeMetrics)
    return str(host) if isinstance(host, str) and host else None


_GROUP_KEYS = {"suite": lambda r: r.kind, "test": _test_of, "node": _node_of}


def group_summaries(results: list[JudgeResult], by: str, *, limit: int | None = GROUPS_MAX) -> list[Group]:
    """The results grouped ``by`` ``suite`` (their kind), ``test`` (:func:`_test_of`) or ``node`` (the
    node suite's ``host``; results without one are left out): one :class:`Group` each, the worst verdict
    first, then the most results, then by name. With ``limit``, groups past it are folded into one last
    :class:`Group` (``folded``: how many; its counts are their sums). Time linear in ``results``. Raises
    ``KeyError`` for another ``by``."""
    key = _GROUP_KEYS[by]
    index = {v: i for i, v in enumerate(VERDICTS)}  # best to worst
    counts: dict[str, list[int]] = {}
    for r in results:
        k = key(r)
        if k is not None:
            c = counts.get(k)
            if c is None:
                c = counts[k] = [0] * len(VERDICTS)
            c[index[r.verdict.value]] += 1
    groups = []
    for k, c in counts.items():
        w = max(i for i, n in enumerate(c) if n)
        groups.append((-w, -sum(c), k, Group(k, dict(zip(VERDICTS, c)), VERDICTS[w])))
    groups.sort(key=lambda t: t[:3])
    out = [t[3] for t in groups]
    if limit is not None and len(out) > limit:
        tail = out[limit:]
        sums = {v: sum(g.counts[v] for g in tail) for v in VERDICTS}
        out = out[:limit] + [Group(f"{len(tail)} more", sums, worst(g.worst for g in tail).value, len(tail))]
    return out


def _worst_first(results: list[JudgeResult]) -> list[JudgeResult]:
    """The results that are not ``pass``, the worst verdict first (in their order within a verdict)."""
    return sorted((r for r in results if r.verdict != Verdict.PASS), key=lambda r: -r.verdict.rank)


def _section_results(results: list[JudgeResult], listed: list[JudgeResult]) -> list[JudgeResult]:
    """What a summarised report hands the suites' sections: the ``listed`` results and the first
    :data:`PASS_EXAMPLES` passes of each suite, in report order."""
    keep = {id(r) for r in listed}
    seen: Counter[str] = Counter()
    for r in results:
        if r.verdict == Verdict.PASS and seen[r.kind] < PASS_EXAMPLES:
            seen[r.kind] += 1
            keep.add(id(r))
    return [r for r in results if id(r) in keep]


@dataclasses.dataclass
class _Layout:
    """What ``report.md`` and ``report.html`` show: every result (``summarised`` false), or the groups,
    the ``listed`` results (``more``: those not listed), the ``detailed`` ones and the ``sectioned`` ones."""

    summarised: bool
    tables: list[tuple[str, str, list[Group]]]  # (heading, key column, groups)
    listed: list[JudgeResult]
    more: int
    detailed: list[JudgeResult]
    sectioned: list[JudgeResult]


def _layout(results: list[JudgeResult]) -> _Layout:
    if len(results) <= FULL_REPORT_MAX:
        return _Layout(False, [], list(results), 0, list(results), list(results))
    tables = [("Summary by suite", "suite", group_summaries(results, "suite", limit=None)),
              ("Summary by test", "test", group_summaries(results, "test"))]
    nodes = group_summaries(results, "node")
    if nodes:
        tables.append(("Summary by node", "node", nodes))
    bad = _worst_first(results)
    listed = bad[:LISTED_MAX]
    return _Layout(True, tables, listed, len(bad) - len(listed), listed[:DETAILED_MAX], _section_results(results, listed))


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _md(text: Any) -> str:
    """A value from a results file or a benchmark output as Markdown text (:func:`~validate.untrusted.md_text`)."""
    return md_text(text)


def _expected_text(r: JudgeResult) -> str:
    suite = find_suite(r.kind)
    return (suite.expected_text(r) if suite is not None else None) or "–"


def _raw_link(r: JudgeResult, out_dir: Path, raw_dir: Path | None, inside: tuple[Path, ...]) -> str | None:
    """The href (relative to ``out_dir``, percent-encoded, ``./`` or ``../`` first) of the raw output of
    ``r`` when it is a file inside one of the ``inside`` folders (the results folder), else ``None``
    (:func:`~validate.untrusted.safe_href`)."""
    src = Path(r.source)
    cands = []
    # this folder's own copy first: a moved or copied results folder links its own raw files, not the
    # original run's (whose absolute path the result recorded)
    if raw_dir is not None:
        cands += [raw_dir / src.name] + ([] if src.is_absolute() else [raw_dir / src])
    cands += [out_dir / "raw" / src.name, src]
    for c in cands:
        try:
            found = c.is_file()
        except (OSError, ValueError):
            found = False
        if found and (href := safe_href(c, base=out_dir, inside=inside)):
            return href
    return None


def _md_groups(heading: str, column: str, groups: list[Group]) -> list[str]:
    head = " | ".join(f"{_ICON.get(v, '')} {v}" for v in VERDICTS)
    out = ["", f"## {heading}", "", f"| {column} | results | {head} | worst |", "|---|---:|" + "---:|" * len(VERDICTS) + "---|"]
    for g in groups:
        name = f"*{_md(g.name)} {column}s*" if g.folded else _md(g.name)
        out.append(f"| {name} | {g.total} | " + " | ".join(str(g.counts[v]) for v in VERDICTS)
                   + f" | {_ICON.get(g.worst, '')} {g.worst} |")
    return out


def _markdown(doc: dict[str, Any], results: list[JudgeResult], out_dir: Path, raw_dir: Path | None,
              inside: tuple[Path, ...], layout: _Layout | None = None) -> str:
    """``report.md``: every value from the results or their outputs escaped (:func:`_md`, :func:`md_code`);
    a big report summarised (:func:`_layout`)."""
    lay = layout or _layout(results)
    c = doc["counts"]
    lines = [f"# {_md(doc['title'])}", ""]
    meta = [f"Overall verdict: **{_md(doc['verdict'].upper())}** ("
            + ", ".join(f"{c[v]} {v}" for v in VERDICTS if c[v]) + ")"]
    if doc.get("blueprint"):
        meta.append(f"Blueprint: {md_code(doc['blueprint'])}")
    meta.append(f"Generated: {_md(doc['generated_at'])} by clusterforge {_md(doc['clusterforge_version'])}")
    lines += [" · ".join(meta), ""]
    if doc.get("damaged_lines"):
        lines += [(f"**{len(doc['damaged_lines'])} damaged results line(s) skipped** (their results are not in this "
                  "report; `clusterforge validate --resume` moves them to results.quarantine.jsonl and runs their "
                  "tests again):"), ""]
        lines += [f"- {_md(d['describe'])}" for d in doc["damaged_lines"][:_DAMAGED_SHOWN]]
        if len(doc["damaged_lines"]) > _DAMAGED_SHOWN:
            lines.append(f"- ... and {len(doc['damaged_lines']) - _DAMAGED_SHOWN} more (report.json names them all)")
        lines.append("")
    if lay.summarised:
        bad = len(lay.listed) + lay.more
        lines.append(f"{len(results)} results, summarised: counts per suite, test and node below; the {bad} result(s) "
                     f"that are not pass are listed worst first{f' (the first {len(lay.listed)})' if lay.more else ''}"
                     f", the first {len(lay.detailed)} with their details. report.json and junit.xml hold every result.")
        for heading, column, groups in lay.tables:
            lines += _md_groups(heading, column, groups)
        lines += ["", f"## Results that are not pass ({bad})", ""]
    if lay.listed:
        lines += ["| verdict | test | kind | measured | expected |", "|---|---|---|---|---|"]
    for r in lay.listed:
        lines.append(f"| {_ICON.get(r.verdict, '')} {r.verdict} | {_md(r.title)} | {_md(r.kind)} | {_md(summary(r))} | "
                     f"{_md(_expected_text(r))} |")
    if lay.more:
        lines += ["", f"... and {lay.more} more result(s) that are not pass, not listed: report.json and junit.xml hold them."]
    if lay.summarised and not lay.listed:
        lines.append("Every result passed.")
    if lay.summarised:
        lines += ["", (f"Suite sections below are drawn from the {len(lay.listed)} listed result(s) and the first "
                  f"{PASS_EXAMPLES} passing result(s) of each suite.")]
    for suite in REGISTRY.values():
        lines += suite.markdown_section(lay.sectioned)
    if doc.get("work_costs"):
        lines += ["", "## Cost of measured work", "",
                  f"At catalog prices ({_md(doc['cost'].get('source', ''))}, oldest price {_md(doc['cost'].get('as_of', ''))}):",
                  "", "| test | group | cost | measured | node $/h |", "|---|---|---|---|---|"]
        lines += [f"| {_md(c['test'])} | {_md(c['group'])} | ${c['value']:,.4g} {_md(c['unit'][4:])} | "
                  f"{_md(c['measured'])} | ${c['node_per_hour_usd']:,.2f} |" for c in doc["work_costs"]]
    lines += ["", "## Details", ""]
    for r in lay.detailed:
        lines.append(f"### {_ICON.get(r.verdict, '')} {_md(r.title)}: {r.verdict}")
        lines.append("")
        for reason in r.reasons:
            lines.append(f"- **{r.verdict}**: {_md(reason)}")
        for note in r.notes:
            lines.append(f"- {_md(note)}")
        link = _raw_link(r, out_dir, raw_dir, inside)
        lines.append(f"- raw output: [{_md(Path(r.source).name)}]({link})" if link
                     else f"- raw output: {md_code(r.source)}")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# JUnit XML
# ---------------------------------------------------------------------------------------------


def _junit(doc: dict[str, Any], results: list[JudgeResult]) -> bytes:
    """JUnit XML: one testsuite per kind, one testcase per result; fail -> <failure>, invalid -> <error>,
    warn -> a passing testcase whose <system-out> starts with ``WARN``."""
    def secs(rs: list[JudgeResult]) -> str:
        # seconds the tests took (recorded by `clusterforge validate`; 0 for outputs judged afterwards)
        return f"{sum(float(r.metrics.get('test_wall_time_s') or 0) for r in rs):.3f}"

    root = ET.Element("testsuites", name=doc["title"], tests=str(len(results)),
                      failures=str(doc["counts"]["fail"]), errors=str(doc["counts"]["invalid"]), time=secs(results))
    by_kind: dict[str, list[JudgeResult]] = {}
    for r in results:
        by_kind.setdefault(r.kind, []).append(r)
    for kind, rs in by_kind.items():
        suite = ET.SubElement(root, "testsuite", name=f"clusterforge.validate.{kind}", tests=str(len(rs)),
                              failures=str(sum(r.verdict == "fail" for r in rs)),
                              errors=str(sum(r.verdict == "invalid" for r in rs)), skipped="0", time=secs(rs),
                              timestamp=doc["generated_at"])
        if doc.get("blueprint"):
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="blueprint", value=str(doc["blueprint"]))
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"clusterforge.validate.{kind}", name=r.title,
                                 file=r.source, time=secs([r]))
            body = "\n".join(r.reasons + r.notes)
            if r.verdict == "fail":
                el = ET.SubElement(case, "failure", message=(r.reasons[0] if r.reasons else "fail")[:500], type="fail")
                el.text = body
            elif r.verdict == "invalid":
                el = ET.SubElement(case, "error", message=(r.reasons[0] if r.reasons else "invalid")[:500], type="invalid")
                el.text = body
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(([f"WARN: {x}" for x in r.reasons] if r.verdict == "warn" else [])
                                 + [summary(r)] + r.notes)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


# ---------------------------------------------------------------------------------------------
# HTML and plots
# ---------------------------------------------------------------------------------------------


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return ", ".join(_fmt_value(x) for x in v[:8]) + (" ..." if len(v) > 8 else "")
    return "–" if v is None else str(v)


_HREF = re.compile(r'\shref="([^"]*)"')


def _safe_section_html(html: str) -> str:
    """A suite's rendered section with every ``href`` that is not an ``http(s)`` URL removed (the link's
    text stays): a suite renders values from results files into it."""
    def keep(m: re.Match[str]) -> str:
        return m.group(0) if safe_href(_html_unescape(m.group(1))) else ""
    return _HREF.sub(keep, html)


def _html(doc: dict[str, Any], results: list[JudgeResult], out_dir: Path, raw_dir: Path | None,
          inside: tuple[Path, ...], layout: _Layout | None = None) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("validate", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["value"] = _fmt_value
    lay = layout or _layout(results)
    detailed = lay.detailed
    plots: dict[int, str] = {}
    plotted: dict[str, int] = {}
    for i, r in enumerate(detailed):
        suite = find_suite(r.kind)
        if suite is None or plotted.get(r.kind, 0) >= suite.max_result_plots:
            continue
        img = suite.result_plot(r)
        if img:
            plots[i] = img
            plotted[r.kind] = plotted.get(r.kind, 0) + 1
    sections = [sec for name, suite in REGISTRY.items()
                if (sec := suite.html_section(lay.sectioned, plotted.get(name, 0))) is not None]
    sections = [dataclasses.replace(sec, html=_safe_section_html(sec.html)) if sec.html else sec for sec in sections]
    items = [{
        "r": r, "icon": _ICON.get(r.verdict, ""), "summary": summary(r), "expected_text": _expected_text(r),
        "plot": plots.get(i), "raw": _raw_link(r, out_dir, raw_dir, inside), "anchor": f"r{i}",
        "metrics": {k: v for k, v in r.metrics.items() if not isinstance(v, (dict,))},
        "expected": r.expected,
    } for i, r in enumerate(detailed)]
    anchors = {id(it["r"]): it["anchor"] for it in items}
    listed = [{"r": r, "summary": summary(r), "expected_text": _expected_text(r), "anchor": anchors.get(id(r))}
              for r in lay.listed]
    tpl = env.get_template("report.html.j2")
    return tpl.render(doc=doc, items=items, listed=listed, more=lay.more, summarised=lay.summarised,
                      tables=lay.tables, total=len(results), pass_examples=PASS_EXAMPLES, sections=sections,
                      icons=_ICON, verdicts=VERDICTS, damaged_shown=_DAMAGED_SHOWN)


def write_reports(results: list[JudgeResult], out_dir: Path, *, title: str, blueprint: Any,
                  raw_dir: Path | None, html_path: Path | None = None,
                  damaged: list[Damaged] | None = None, cost: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``report.json``, ``report.md``, ``junit.xml`` and ``report.html`` into ``out_dir``.

    ``blueprint`` is the blueprint's name (or the Blueprint itself) shown in the reports, ``None`` if none.

    ``raw_dir`` (optional) is where the raw outputs live: reports link to the raw outputs that are files
    inside ``out_dir`` or ``raw_dir`` (the results folder), relative to the report; others are named as
    text. ``html_path`` overrides where the HTML goes. Returns ``{"json", "markdown", "junit", "html"}``
    -> path. Creates ``out_dir`` if needed. ``damaged``: results lines that were skipped
    (:func:`load_results_damaged`), named at the top of each report. ``cost``: the cost basis
    (:func:`build_report`): the reports then show the cost of measured work ($ per 1M training tokens, $ per TB read).

    More than :data:`FULL_REPORT_MAX` results are summarised in ``report.md`` and ``report.html`` (see the
    module docstring); ``report.json`` and ``junit.xml`` hold every result.

    Every file is written atomically (:func:`~validate.untrusted.write_atomic`): a symbolic link at one
    of these paths is replaced, never followed. Raises ``OSError`` when a file cannot be written
    (:class:`~validate.untrusted.UnsafeOutputPath` when its folder resolves outside ``out_dir``, or,
    for ``html_path``, outside its own folder).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_report(results, title=title, blueprint=blueprint, damaged=damaged, cost=cost)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "junit": out / "junit.xml",
             "html": Path(html_path) if html_path else out / "report.html"}
    inside = (out,) + ((Path(raw_dir),) if raw_dir is not None else ())
    write_atomic(paths["json"], _report_json(doc), root=out)
    layout = _layout(results)
    write_atomic(paths["markdown"], _markdown(doc, results, out, raw_dir, inside, layout) + "\n", root=out)
    write_atomic(paths["junit"], _junit(doc, results), root=out)
    html_dir = paths["html"].parent
    html_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(paths["html"], _html(doc, results, html_dir, raw_dir, inside, layout),
                 root=out if html_path is None else html_dir)
    return paths
