"""``clusterforge up BLUEPRINT`` / ``clusterforge down BLUEPRINT``: deploy and destroy.

The blueprint's target (:mod:`clusterforge.targets`, looked up by ``target.provider``) does the work:
AWS through the Pulumi Automation API with a local file state backend under ``.clusterforge/state``
(:mod:`clusterforge.targets.aws`: ``PULUMI_CONFIG_PASSPHRASE`` encrypts the stack's secrets), on-prem
through the Ansible site playbook (:mod:`clusterforge.targets.onprem`); ``down`` has nothing to
destroy on bare metal.
"""

from __future__ import annotations

from pathlib import Path

import typer

DEFAULT_STATE_DIR = Path(".clusterforge/state")
"""Local Pulumi state backend directory unless ``--state-dir`` (or ``PULUMI_BACKEND_URL``)."""


def register(app: typer.Typer) -> None:
    """Add the ``up`` and ``down`` verbs to ``app``."""

    @app.command("up")
    def up_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        state_dir: Path = typer.Option(DEFAULT_STATE_DIR, "--state-dir",
                                       help="Local Pulumi state backend directory (AWS)."),
        preview: bool = typer.Option(False, "--preview", help="AWS: only show what would change (pulumi preview)."),
        output: Path = typer.Option(None, "-o", "--output",
                                    help="On-prem: where the Ansible inventory/vars are written "
                                         "(default .clusterforge/ansible/<name>)."),
        check: bool = typer.Option(False, "--check", help="On-prem: Ansible check mode (no changes)."),
        tags: str = typer.Option(None, "--tags", help="On-prem: only these Ansible tags (comma-separated)."),
        limit: str = typer.Option(None, "--limit", help="On-prem: only these hosts/groups (Ansible --limit)."),
        yes: bool = typer.Option(False, "--yes", "-y",
                                 help="On-prem: do not ask before configuring this machine (hosts with connection: local)."),
    ) -> None:
        """Deploy: AWS with Pulumi (local state), on-prem with Ansible."""
        from ..blueprint_io import load_checked
        from ..targets import DeployOptions, checked_target

        loaded = load_checked(blueprint)
        target = checked_target(loaded)
        options = DeployOptions(state_dir=state_dir, preview=preview, output=output, check=check,
                                tags=tuple(t.strip() for t in (tags or "").split(",") if t.strip()), limit=limit,
                                yes=yes)
        target.up(loaded, options)

    @app.command("down")
    def down_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        state_dir: Path = typer.Option(DEFAULT_STATE_DIR, "--state-dir",
                                       help="Local Pulumi state backend directory (AWS)."),
    ) -> None:
        """Destroy everything `up` created for an AWS blueprint."""
        from ..blueprint_io import load_checked
        from ..targets import DeployOptions, target_for

        loaded = load_checked(blueprint, show_warnings=False)
        target_for(loaded.blueprint.target.provider).down(loaded, DeployOptions(state_dir=state_dir))
