"""``clusterforge check BLUEPRINT [--json] [--strict]``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..blueprint_io import findings_for
from ..console import console, fail, ok, warn


def register(app: typer.Typer) -> None:
    """Add the ``check`` verb to ``app``."""

    @app.command("check")
    def check_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print findings as JSON."),
        strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    ) -> None:
        """Load a blueprint and run every pre-deploy rule. Exit 0 ok (warnings allowed), 1 invalid."""
        loaded, findings = findings_for(blueprint)
        errors = [f for f in findings if f.severity == "error" or strict]
        if as_json:
            print(json.dumps({"file": str(blueprint), "ok": not errors,
                              "findings": [f.to_json() for f in findings]}, indent=2))
        else:
            for f in findings:
                (fail if f.severity == "error" or strict else warn)(f.format())
            if not errors:
                n = len(findings)
                bp = loaded.blueprint if loaded else None
                what = f"{bp.name}: {len(bp.node_groups)} node group(s), {sum(g.size for g in bp.node_groups)} node(s), fabric {bp.network.fabric}" if bp else ""
                ok(f"{blueprint}: ok ({what}{', ' if what else ''}{n} warning{'s' if n != 1 else ''})")
            else:
                console.print(f"{blueprint}: {len(errors)} error(s)", style="red")
        raise typer.Exit(1 if errors else 0)
