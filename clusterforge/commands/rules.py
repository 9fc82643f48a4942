"""``clusterforge rules [--json]``: list the pre-deploy rules, the loader's findings and the targets' preflight checks."""

from __future__ import annotations

import json

import typer


def register(app: typer.Typer) -> None:
    """Add the ``rules`` verb to ``app``."""

    @app.command("rules")
    def rules_cmd(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
        """List every pre-deploy rule with its id, severity, fix and source; then the findings of reading the file
        (before any rule) and those each target checks at plan, render and up."""
        from blueprints import all_rules
        from blueprints.loader import LOADER_FINDINGS

        from ..targets import TARGETS

        rules = all_rules()
        preflight = [(t.provider, rid, what) for t in TARGETS.values() for rid, what in t.preflight_checks.items()]
        if as_json:
            print(json.dumps({"rules": [r.to_json() for r in rules],
                              "loader": [{"id": rid, "severity": "error", "summary": what}
                                         for rid, what in LOADER_FINDINGS.items()],
                              "preflight": [{"id": rid, "severity": "error", "provider": provider, "summary": what}
                                            for provider, rid, what in preflight]}, indent=2))
            return
        # plain text, never truncated: ids and URLs must stay copyable at any terminal width
        for r in rules:
            print(f"{r.id}  [{r.severity}]")
            print(f"    {r.summary}")
            print(f"    fix: {r.fix}")
            print(f"    source: {r.source}")
        errors = sum(r.severity == "error" for r in rules)
        print(f"{len(rules)} rules ({errors} errors, {len(rules) - errors} warnings)")
        print("\nfound while reading the file, before any rule (errors; each line says what to change):")
        for rid, what in LOADER_FINDINGS.items():
            print(f"{rid}  [error]\n    {what}")
        print("\nfound by the target at plan, render and up (errors):")
        for provider, rid, what in preflight:
            print(f"{rid}  [error, target.provider {provider}]\n    {what}")
