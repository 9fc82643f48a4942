"""``clusterforge report DIR [-o report.html] [--title T]``.

Reads a results folder (``results.jsonl`` as ``validate`` appends it, or ``report.json``) and
writes ``report.json``, ``report.md``, ``junit.xml`` and the HTML page (default
``DIR/report.html``). Raw outputs under ``DIR/raw`` (when present, and inside DIR) are linked. Exit 0; 2 when
DIR holds no results, or results nested or sized over the bounds of :mod:`validate.parsers.bounds`.
Every file is written atomically: a symbolic link in a report's place is replaced, never written through.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``report`` verb to ``app``."""

    @app.command("report")
    def report_cmd(
        results_dir: Path = typer.Argument(..., metavar="DIR", help="Results folder (results.jsonl or report.json)."),
        output: Path | None = typer.Option(None, "--output", "-o", help="HTML file to write (default DIR/report.html)."),
        title: str | None = typer.Option(None, "--title", help="Report title (default: from report.json or the folder name)."),
    ) -> None:
        """Write HTML + Markdown + JUnit XML (and report.json) from a results folder."""
        from rich.markup import escape

        from validate.judge import worst
        from validate.parsers.bounds import loads as bounded_loads
        from validate.report import load_results_damaged, write_reports

        from ..console import console, ok, warn
        from ..errors import UsageError

        results, damaged = load_results_damaged(results_dir)
        if not results:
            raise UsageError(f"{results_dir}: the results file holds no complete result (a run stopped before its first "
                             "result, or a damaged file: an unreadable last line is taken for an interrupted write)")
        for d in damaged:  # skipped and named; `validate --resume` moves them aside and reruns their tests
            warn(f"{escape(d.describe())}; skipped (`clusterforge validate --resume` moves it to results.quarantine.jsonl "
                 "and runs its test again)")
        folder = results_dir if results_dir.is_dir() else results_dir.parent
        blueprint = None
        cost = None
        old = folder / "report.json"
        if old.is_file():
            try:
                doc = bounded_loads(old.read_text(encoding="utf-8", errors="replace"))
                blueprint = doc.get("blueprint")
                title = title or doc.get("title")
                cost = doc.get("cost") if isinstance(doc.get("cost"), dict) else None  # kept from validate
            except (OSError, ValueError, AttributeError):
                pass
        raw = folder / "raw"
        if raw.is_dir() and folder.resolve() not in raw.resolve().parents:  # a link out of the results folder
            raw = folder
        try:
            paths = write_reports(results, folder, title=title or f"clusterforge validation: {folder.resolve().name}",
                                  blueprint=blueprint, raw_dir=raw if raw.is_dir() else folder, html_path=output,
                                  damaged=damaged, cost=cost)
        except OSError as e:
            raise UsageError(f"cannot write the report: {e.filename or ''}: {e.strerror or e}") from None
        verdict = worst(r.verdict for r in results)
        ok(f"{len(results)} result(s), verdict {verdict}: {paths['html']}")
        for key in ("markdown", "junit", "json"):
            console.print(f"  {paths[key]}", style="dim")
