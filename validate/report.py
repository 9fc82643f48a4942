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
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from blueprints.errors import UsageError

from .results import VERDICT_ICONS, VERDICTS, JudgeResult, worst
from .suites import REGISTRY, find_suite, summary

__all__ = ["NoResults", "build_report", "load_results", "write_reports"]

_ICON = VERDICT_ICONS


class NoResults(UsageError):
    """The path holds no results (``results.jsonl`` / ``report.json``) or they cannot be read."""


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[JudgeResult]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    out: list[JudgeResult] = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(JudgeResult.from_json(json.loads(line)))
        except (json.JSONDecodeError, ValueError) as e:
            if i == last:
                continue  # the runner was interrupted while appending: keep what was complete
            raise NoResults(f"{path}:{i + 1}: not a judge result ({e}); fix or remove the line") from None
    return out


def _read_report(path: Path) -> list[JudgeResult]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
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

    A malformed *last* line of ``results.jsonl`` is skipped (an interrupted run); any other bad
    line raises. Raises :class:`NoResults` (a usage error) when there is nothing to read.
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
            return _read_report(rj)
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
        return _read_report(p)
    raise NoResults(f"{p}: not a results folder, results.jsonl or report.json")


# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


def build_report(results: list[JudgeResult], *, title: str, blueprint: Any) -> dict[str, Any]:
    """The ``report.json`` document: ``{"title", "blueprint", "generated_at", "verdict", "counts", "results"}``.

    ``blueprint`` is the blueprint's name (a :class:`~blueprints.models.Blueprint` is accepted: its name is used).
    """
    from blueprints.version import __version__

    if blueprint is not None and not isinstance(blueprint, str):
        blueprint = getattr(blueprint, "name", str(blueprint))

    counts = Counter(r.verdict.value for r in results)
    return {
        "title": title,
        "blueprint": blueprint,
        "generated_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "clusterforge_version": __version__,
        "verdict": worst(r.verdict for r in results).value,
        "counts": {v: counts.get(v, 0) for v in VERDICTS},
        "results": [r.to_json() for r in results],
    }


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _expected_text(r: JudgeResult) -> str:
    suite = find_suite(r.kind)
    return (suite.expected_text(r) if suite is not None else None) or "–"


def _raw_link(r: JudgeResult, out_dir: Path, raw_dir: Path | None) -> str | None:
    src = Path(r.source)
    cands = []
    if raw_dir is not None:
        cands += [src if src.is_absolute() else raw_dir / src, raw_dir / src.name]
    cands.append(src)
    for c in cands:
        if c.is_file():
            return os.path.relpath(c.resolve(), out_dir.resolve())
    return None


def _markdown(doc: dict[str, Any], results: list[JudgeResult], out_dir: Path, raw_dir: Path | None) -> str:
    c = doc["counts"]
    lines = [f"# {_md(doc['title'])}", ""]
    meta = [f"Overall verdict: **{doc['verdict'].upper()}** ("
            + ", ".join(f"{c[v]} {v}" for v in VERDICTS if c[v]) + ")"]
    if doc.get("blueprint"):
        meta.append(f"Blueprint: `{doc['blueprint']}`")
    meta.append(f"Generated: {doc['generated_at']} by clusterforge {doc['clusterforge_version']}")
    lines += [" · ".join(meta), "", "| verdict | test | kind | measured | expected |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {_ICON.get(r.verdict, '')} {r.verdict} | {_md(r.title)} | {r.kind} | {_md(summary(r))} | "
                     f"{_md(_expected_text(r))} |")
    for suite in REGISTRY.values():
        lines += suite.markdown_section(results)
    lines += ["", "## Details", ""]
    for r in results:
        lines.append(f"### {_ICON.get(r.verdict, '')} {_md(r.title)}: {r.verdict}")
        lines.append("")
        for reason in r.reasons:
            lines.append(f"- **{r.verdict}**: {reason}")
        for note in r.notes:
            lines.append(f"- {note}")
        link = _raw_link(r, out_dir, raw_dir)
        lines.append(f"- raw output: [{Path(r.source).name}]({link})" if link else f"- raw output: `{r.source}`")
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


def _html(doc: dict[str, Any], results: list[JudgeResult], out_dir: Path, raw_dir: Path | None) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("validate", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["value"] = _fmt_value
    plots: dict[int, str] = {}
    plotted: dict[str, int] = {}
    for i, r in enumerate(results):
        suite = find_suite(r.kind)
        if suite is None or plotted.get(r.kind, 0) >= suite.max_result_plots:
            continue
        img = suite.result_plot(r)
        if img:
            plots[i] = img
            plotted[r.kind] = plotted.get(r.kind, 0) + 1
    sections = [sec for name, suite in REGISTRY.items()
                if (sec := suite.html_section(results, plotted.get(name, 0))) is not None]
    items = [{
        "r": r, "icon": _ICON.get(r.verdict, ""), "summary": summary(r), "expected_text": _expected_text(r),
        "plot": plots.get(i), "raw": _raw_link(r, out_dir, raw_dir), "anchor": f"r{i}",
        "metrics": {k: v for k, v in r.metrics.items() if not isinstance(v, (dict,))},
        "expected": r.expected,
    } for i, r in enumerate(results)]
    tpl = env.get_template("report.html.j2")
    return tpl.render(doc=doc, items=items, sections=sections, icons=_ICON, verdicts=VERDICTS)


def write_reports(results: list[JudgeResult], out_dir: Path, *, title: str, blueprint: Any,
                  raw_dir: Path | None, html_path: Path | None = None) -> dict[str, Path]:
    """Write ``report.json``, ``report.md``, ``junit.xml`` and ``report.html`` into ``out_dir``.

    ``blueprint`` is the blueprint's name (or the Blueprint itself) shown in the reports, ``None`` if none.

    ``raw_dir`` (optional) is where the raw outputs live: reports link to them relative to
    ``out_dir``. ``html_path`` overrides where the HTML goes. Returns ``{"json", "markdown",
    "junit", "html"}`` -> path. Creates ``out_dir`` if needed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_report(results, title=title, blueprint=blueprint)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "junit": out / "junit.xml",
             "html": Path(html_path) if html_path else out / "report.html"}
    paths["json"].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(_markdown(doc, results, out, raw_dir) + "\n", encoding="utf-8")
    paths["junit"].write_bytes(_junit(doc, results))
    paths["html"].parent.mkdir(parents=True, exist_ok=True)
    paths["html"].write_text(_html(doc, results, paths["html"].parent, raw_dir), encoding="utf-8")
    return paths
