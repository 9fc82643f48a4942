"""``clusterforge rules [--json]``: list the pre-deploy rules."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Add the ``rules`` verb to ``app``."""

    @app.command("rules")
    def rules_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
        """List every pre-deploy rule with its id, severity, fix and source."""
        from blueprints import all_rules

        rules = all_rules()
        if as_json:
            print(json.dumps({"rules": [r.to_json() for r in rules]}, indent=2))
            return
        # plain text, never truncated: ids and URLs must stay copyable at any terminal width
        for r in rules:
            print(f"{r.id}  [{r.severity}]")
            print(f"    {r.summary}")
            print(f"    fix: {r.fix}")
            print(f"    source: {r.source}")
        errors = sum(r.severity == "error" for r in rules)
        print(f"{len(rules)} rules ({errors} errors, {len(rules) - errors} warnings)")
