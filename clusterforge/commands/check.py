"""``clusterforge check BLUEPRINT [--json] [--strict]``."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``check`` verb to ``app``."""

    @app.command("check")
    def check_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print findings as JSON."),
        strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    ) -> None:
        """Load a blueprint and run every pre-deploy rule. Exit 0 ok (warnings allowed), 1 invalid, 2 no readable file at that path.

        Findings and the summary go to stdout (`check FILE | less` shows them, like other
        linters); only errors of the tool itself go to stderr.
        """
        from blueprints.findings import names_no_readable_file

        from ..blueprint_io import findings_document, findings_for
        from ..console import line, marked, ok

        loaded, findings = findings_for(blueprint)
        n_err = sum(1 for f in findings if f.severity == "error")
        n_warn = len(findings) - n_err
        failed = bool(n_err or (strict and n_warn))
        # a path that names no readable file is a usage error (2), as for every verb; an invalid blueprint is 1
        code = 2 if loaded is None and names_no_readable_file(findings) else 1 if failed else 0
        if as_json:
            print(json.dumps(findings_document(blueprint, not failed, findings), indent=2))
            raise typer.Exit(code)
        for f in findings:
            bad = f.severity == "error" or strict
            marked("✗ " if bad else "! ", "red" if bad else "yellow", f.format())
        warnings = f"{n_warn} warning{'s' if n_warn != 1 else ''}"
        if not failed:
            bp = loaded.blueprint if loaded else None
            what = f"{bp.name}: {len(bp.node_groups)} node group(s), {sum(g.size for g in bp.node_groups)} node(s), fabric {bp.network.fabric}" if bp else ""
            ok(f"{blueprint}: ok ({what}{', ' if what else ''}{warnings})")
            slurm = loaded.cluster.slurm if loaded else None
            if slurm is not None:
                from blueprints.slurm import describe

                marked("✓ ", "green", describe(slurm))  # literal: `gpu:h100-sxm:8` is not an emoji code
        else:
            parts = [f"{n_err} error{'s' if n_err != 1 else ''}"] if n_err else []
            if n_warn:
                parts.append(f"{warnings} treated as errors (--strict)" if strict else warnings)
            line(f"{blueprint}: {', '.join(parts)}", "red")
        raise typer.Exit(code)
