"""``clusterforge plan BLUEPRINT [--json] [--all]``: what ``up`` would create, offline.

The blueprint's target (:mod:`clusterforge.targets`, looked up by ``target.provider``) makes the
plan. AWS: the Pulumi program runs in-process against a mock engine (:mod:`clusterforge.plan`) — no
credentials, no network, no Pulumi CLI; the tree shows every resource under its component with
counts; ``--json`` prints ``{"resources": [{"type", "name", "parent", "inputs"}]}`` with engine
(camelCase) property names, and ``"changes"`` when the stack is deployed: each changed field with its ``resource``,
``type``, ``action``, update ``policy`` and ``why`` (:func:`clusterforge.updates.report`); for a blueprint that does
not pass ``check`` it prints ``check --json``'s
``{"file", "ok": false, "findings"}`` (exit 1, or 2 when the path names no readable file). On-prem: every host, role and variable of the Ansible run; the hosts of
a node group that differ only in some values (address ...) are shown once with those values per
host, and lines longer than the terminal are cut with a marker (``--all``: every host in full,
nothing cut). After an AWS plan, the changes against the deployed stack's record (``--state-dir``), each
with its update policy, as ``up`` would print them before asking (:mod:`clusterforge.updates`). The cost
line gives the priced lines' total per hour and month and how many lines are unpriced (:mod:`clusterforge.cost`,
from this same plan).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``plan`` verb to ``app``."""

    @app.command("plan")
    def plan_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print the planned resources as JSON."),
        show_all: bool = typer.Option(False, "--all", help="List every resource and every on-prem host in full "
                                      "(no collapsing, no cut values)."),
        state_dir: Path = typer.Option(None, "--state-dir", help="AWS: state directory whose deployment record "
                                       "the changes are shown against (default as for `up`)."),
    ) -> None:
        """Show every resource `up` would create (AWS: Pulumi program against a mock engine; on-prem: the Ansible run)."""
        from blueprints.findings import BlueprintInvalid

        from ..blueprint_io import findings_document, load_checked
        from ..console import console
        from ..targets import plan, target_for

        try:
            loaded = load_checked(blueprint, show_warnings=not as_json)
        except BlueprintInvalid as e:
            if as_json:  # a tool reading stdout gets the findings in check --json's shape; stderr has the lines
                print(json.dumps(findings_document(blueprint, False, e.findings), indent=2))
            raise
        result = plan(loaded)
        target = target_for(loaded.blueprint.target.provider)
        if as_json:
            doc = result.to_json()
            changes = target.changes_json(loaded, state_dir)
            if changes is not None:
                doc["changes"] = changes
            print(json.dumps(doc, indent=2))
            return
        report = target.changes_report(loaded, state_dir)
        result.show(console, show_all=show_all)
        from .cost import compute

        cost = compute(loaded, plan=result)
        if cost is not None:  # a target without prices has no cost line
            console.print(f"cost: {cost.summary()} (catalog prices{', some stale' if cost.stale else ''}; "
                          "`clusterforge cost` lists every line with its source)", markup=False, highlight=False)
        for line in report:
            print(line)
