"""Reports of judged results: JSON, Markdown, JUnit XML and an HTML page with plots.

:func:`write_reports` writes ``report.json``, ``report.md``, ``junit.xml`` and ``report.html``
into a folder; :func:`load_results` reads a results folder back (``results.jsonl``, one
:class:`~validate.judge.JudgeResult` JSON per line as the runner appends them while tests
finish, or a ``report.json``).

The HTML page is self-contained: matplotlib plots (busbw against message size with the
expected line, fio rates against their expectation, AMP throughput AMP vs fp32 and the loss
curve) are embedded as base64 PNGs; every text is HTML-escaped (jinja2 autoescape).
matplotlib is imported only when the HTML is written.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from blueprints.errors import UsageError

from .judge import VERDICTS, JudgeResult, fmt_bytes, worst

__all__ = ["NoResults", "build_report", "load_results", "write_reports"]

MAX_NCCL_PLOTS = 60
"""At most this many busbw plots in one HTML page (the rest are listed without a plot)."""
MAX_BARS = 40
"""At most this many fio/AMP bars per plot."""

_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "invalid": "⛔"}


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
        raise NoResults(f"{p}: no such file or directory")
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

    counts = Counter(r.verdict for r in results)
    return {
        "title": title,
        "blueprint": blueprint,
        "generated_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "clusterforge_version": __version__,
        "verdict": worst(r.verdict for r in results),
        "counts": {v: counts.get(v, 0) for v in VERDICTS},
        "results": [r.to_json() for r in results],
    }


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _expected_text(r: JudgeResult) -> str:
    e = r.expected
    if e.get("busbw_gbps"):
        return f"busbw {e['busbw_gbps']:.4g} GB/s"
    for d in ("read", "write"):
        if e.get(f"{d}_mb_s"):
            return f"{d} {e[f'{d}_mb_s']:.5g} MB/s"
        if e.get(f"{d}_iops"):
            return f"{d} {e[f'{d}_iops']:.5g} IOPS"
    if e.get("mfu_floor") is not None:
        return f"MFU ≥ {e['mfu_floor'] * 100:.0f}%"
    return "–"


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
        lines.append(f"| {_ICON.get(r.verdict, '')} {r.verdict} | {_md(r.title)} | {r.kind} | {_md(r.summary())} | "
                     f"{_md(_expected_text(r))} |")
    lines += _node_table_md(results)
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


def _node_table_md(results: list[JudgeResult]) -> list[str]:
    """The "Node checks" section: a node x check table, then every failing cell explained."""
    from .node_checks import node_table

    t = node_table(results)
    if t is None:
        return []
    out = ["", "## Node checks", ""]
    if t.columns:
        out += ["| node | " + " | ".join(t.columns) + " |", "|---|" + "---|" * len(t.columns)]
        for name, cells in t.rows:
            out.append(f"| {_md(name)} | " + " | ".join(
                f"{_ICON.get(cells[c]['verdict'], '')} {cells[c]['verdict']}" if c in cells else "–"
                for c in t.columns) + " |")
    if t.not_applicable:
        out += ["", "Not applicable on every node: " + ", ".join(t.not_applicable)]
    if t.failing:
        out += ["", "Failing cells:", ""]
        for name, c in t.failing:
            s = f"- **{_md(name)} / {c['id']}** ({c['verdict']}{', blocking' if c.get('blocking') else ''}): " \
                f"measured {_md(c['measured'])}; expected {_md(c['expected'])}"
            if c.get("cause"):
                s += f". Cause: {_md(c['cause'])}"
            if c.get("fix"):
                s += f". Fix: {_md(c['fix'])}"
            out.append(s + (f" ([source]({c['source']}))" if c.get("source") else ""))
    explained = [r for r in results if r.metrics.get("explained_by")]
    if explained:
        out += ["", "Results explained by a failed blocking node check:", ""]
        out += [f"- {_md(r.title)}: {', '.join(r.metrics['explained_by'])}" for r in explained]
    return out


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
                                 + [r.summary()] + r.notes)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


# ---------------------------------------------------------------------------------------------
# HTML and plots
# ---------------------------------------------------------------------------------------------


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _nccl_plot(r: JudgeResult) -> str | None:
    s = r.series
    sizes = s.get("size") or []
    if len(sizes) < 2:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for key, name, style in (("busbw_oop", "out-of-place", "-o"), ("busbw_ip", "in-place", "-s")):
        pts = [(x, y) for x, y in zip(sizes, s.get(key) or []) if y is not None and x > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, markersize=3, linewidth=1.2, label=f"busbw {name}")
    e = r.expected
    if e.get("busbw_gbps"):
        ax.axhline(e["busbw_gbps"], color="tab:green", linestyle="--", linewidth=1,
                   label=f"expected {e['busbw_gbps']:.4g} GB/s ({e.get('basis', '')})")
        if e.get("warn_ratio"):
            ax.axhline(e["busbw_gbps"] * e["warn_ratio"], color="tab:orange", linestyle=":", linewidth=1,
                       label=f"warn below {e['warn_ratio']:g}x")
        if e.get("fail_ratio"):
            ax.axhline(e["busbw_gbps"] * e["fail_ratio"], color="tab:red", linestyle=":", linewidth=1,
                       label=f"fail below {e['fail_ratio']:g}x")
    ax.set_xscale("log", base=2)
    ticks = [x for x in sizes if x > 0]
    if ticks:
        step = max(1, len(ticks) // 10)
        ax.set_xticks(ticks[::step])
        ax.set_xticklabels([fmt_bytes(t) for t in ticks[::step]], rotation=45, fontsize=7)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{r.title} [{r.verdict}]", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def _fio_plot(rs: list[JudgeResult]) -> str | None:
    rows = []
    for r in rs:
        for d in ("read", "write"):
            bw = r.metrics.get(f"{d}_bw_bytes_per_s")
            if bw:
                rows.append((f"{r.title} ({d})", bw / 1e6, r.expected.get(f"{d}_mb_s"), r.verdict))
    if not rows:
        return None
    rows = rows[:MAX_BARS]
    import matplotlib.pyplot as plt

    colors = {"pass": "tab:green", "warn": "tab:orange", "fail": "tab:red", "invalid": "tab:gray"}
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.2))
    ys = list(range(len(rows)))
    ax.barh(ys, [x[1] for x in rows], color=[colors.get(x[3], "tab:blue") for x in rows], label="measured MB/s")
    exp = [(y, x[2]) for y, x in zip(ys, rows) if x[2]]
    if exp:
        ax.scatter([e[1] for e in exp], [e[0] for e in exp], marker="|", s=400, color="black", label="expected MB/s",
                   zorder=3)
    vals = [x[1] for x in rows] + [e[1] for e in exp]
    if max(vals) / max(min(v for v in vals if v > 0), 1e-9) > 50:
        ax.set_xscale("log")
    ax.set_yticks(ys)
    ax.set_yticklabels([x[0] for x in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MB/s (1e6 bytes/s)")
    ax.set_title("fio throughput vs expectation", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def _amp_plot(rs: list[JudgeResult]) -> str | None:
    rows = [(r.title, r.metrics.get("tokens_per_s"), r.metrics.get("fp32_tokens_per_s"), r.metrics.get("precision"))
            for r in rs if r.metrics.get("tokens_per_s")][:MAX_BARS]
    losses = [(r.title, r.series.get("losses") or []) for r in rs if r.series.get("losses")]
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
    for name, ls in losses[:8]:
        ax2.plot(range(len(ls)), ls, "-o", markersize=2, label=name)
    ax2.set_xlabel("step")
    ax2.set_ylabel("loss")
    ax2.set_title("training loss", fontsize=9)
    ax2.grid(True, alpha=0.3)
    if losses:
        ax2.legend(fontsize=6)
    fig.tight_layout()
    return _png(fig)


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
    nccl_plots: dict[int, str] = {}
    n = 0
    for i, r in enumerate(results):
        if r.kind == "nccl" and n < MAX_NCCL_PLOTS:
            png = _nccl_plot(r)
            if png:
                nccl_plots[i] = png
                n += 1
    fio_png = _fio_plot([r for r in results if r.kind == "fio"])
    amp_png = _amp_plot([r for r in results if r.kind == "amp"])
    items = [{
        "r": r, "icon": _ICON.get(r.verdict, ""), "summary": r.summary(), "expected_text": _expected_text(r),
        "plot": nccl_plots.get(i), "raw": _raw_link(r, out_dir, raw_dir), "anchor": f"r{i}",
        "metrics": {k: v for k, v in r.metrics.items() if not isinstance(v, (dict,))},
        "expected": r.expected,
    } for i, r in enumerate(results)]
    from .node_checks import node_table

    tpl = env.get_template("report.html.j2")
    return tpl.render(doc=doc, items=items, node_table=node_table(results), icons=_ICON, fio_png=fio_png, amp_png=amp_png, verdicts=VERDICTS,
                      nccl_count=sum(r.kind == "nccl" for r in results), nccl_plotted=n)


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
