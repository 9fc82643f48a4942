"""``clusterforge rules [--json]``: list the pre-deploy rules."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from blueprints import all_rules

from ..console import console


def register(app: typer.Typer) -> None:
    """Add the ``rules`` verb to ``app``."""

    @app.command("rules")
    def rules_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
        """List every pre-deploy rule with its id, severity, fix and source."""
        rules = all_rules()
        if as_json:
            print(json.dumps({"rules": [r.to_json() for r in rules]}, indent=2))
            return
        table = Table("id", "severity", "summary", "fix", "source", show_lines=False)
        for r in rules:
            table.add_row(r.id, r.severity, r.summary, r.fix, r.source)
        console.print(table)
        console.print(f"{len(rules)} rules")
