"""``clusterforge up BLUEPRINT`` / ``clusterforge down BLUEPRINT|NAME``: deploy and destroy.

The blueprint's target (:mod:`clusterforge.targets`, looked up by ``target.provider``) does the work:
AWS through the Pulumi Automation API with a local file state backend in the user's state directory
(:mod:`clusterforge.state`: ``$CLUSTERFORGE_STATE_DIR``, else ``$XDG_STATE_HOME/clusterforge``, else
``~/.local/state/clusterforge``; ``PULUMI_CONFIG_PASSPHRASE`` encrypts the stack's secrets), on-prem
through the Ansible site playbook (:mod:`clusterforge.targets.onprem`).

``down`` works from what ``up`` recorded: it never loads or checks the blueprint, so a cluster whose
blueprint no longer passes ``check`` (a newer clusterforge, an edit) can still be torn down. It takes
a blueprint path, a stack name or a blueprint name, prints what goes, and asks unless ``--yes``.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``up`` and ``down`` verbs to ``app``."""

    @app.command("up")
    def up_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        state_dir: Path = typer.Option(None, "--state-dir",
                                       help="AWS: state directory (default $CLUSTERFORGE_STATE_DIR, else "
                                            "$XDG_STATE_HOME/clusterforge, else ~/.local/state/clusterforge)."),
        preview: bool = typer.Option(False, "--preview", help="AWS: only show what would change (pulumi preview)."),
        refresh_ami: bool = typer.Option(False, "--refresh-ami",
                                         help="AWS: look the node images up again (the recorded ones are kept "
                                              "otherwise); replaces the EC2 nodes."),
        adopt: bool = typer.Option(False, "--adopt", help="AWS: move the stack recorded for another blueprint file "
                                                          "with the same name and region to this file."),
        output: Path = typer.Option(None, "-o", "--output",
                                    help="On-prem: where the Ansible inventory/vars are written "
                                         "(default .clusterforge/ansible/<name>)."),
        check: bool = typer.Option(False, "--check", help="On-prem: Ansible check mode (no changes)."),
        tags: str = typer.Option(None, "--tags", help="On-prem: only these Ansible tags (comma-separated)."),
        limit: str = typer.Option(None, "--limit", help="On-prem: only these hosts/groups (Ansible --limit)."),
        yes: bool = typer.Option(False, "--yes", "-y",
                                 help="Do not ask: AWS: replace or delete what the changes need; on-prem: "
                                      "configure this machine (hosts with connection: local)."),
        wait_timeout: str = typer.Option("60m", "--wait-timeout",
                                         help="AWS: how long to wait for every node to report configured (90s, "
                                              "45m, 2h; a bare number is minutes). Default 60m: a p5 node's first "
                                              "boot builds MPI and nccl-tests."),
        no_wait: bool = typer.Option(False, "--no-wait", help="AWS: return once Pulumi is done; do not wait for the "
                                                              "nodes to configure themselves."),
    ) -> None:
        """Deploy: AWS with Pulumi (asks before replacing or deleting), then wait for the nodes; on-prem with Ansible."""
        from ..blueprint_io import load_checked
        from ..readiness import parse_duration
        from ..targets import DeployOptions, checked_target

        timeout_s = parse_duration(wait_timeout)  # a bad duration stops before anything runs
        loaded = load_checked(blueprint)
        target = checked_target(loaded)
        options = DeployOptions(state_dir=state_dir, preview=preview, output=output, check=check,
                                tags=tuple(t.strip() for t in (tags or "").split(",") if t.strip()), limit=limit,
                                yes=yes, refresh_ami=refresh_ami, adopt=adopt, wait=not no_wait,
                                wait_timeout_s=timeout_s)
        target.up(loaded, options)

    @app.command("down")
    def down_cmd(
        what: str = typer.Argument(..., help="Blueprint YAML file, stack name or blueprint name of a deployment."),
        state_dir: Path = typer.Option(None, "--state-dir", help="AWS: state directory (default as for `up`)."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before destroying."),
    ) -> None:
        """Destroy everything `up` created, from its record (the blueprint is not loaded or checked)."""
        from ..targets import DeployOptions, target_for

        target_for(_provider(what, state_dir)).down(what, DeployOptions(state_dir=state_dir, yes=yes))


def _provider(what: str, state_dir: Path | None) -> str:
    """The target of ``what`` for ``down``: a recorded deployment's (AWS), else the ``target.provider``
    written in the YAML file (read as plain data, never checked), else ``aws`` (whose ``down`` then says
    nothing is recorded)."""
    from ..state import StateDir

    path = Path(what).expanduser()
    here = str(path.resolve()) if path.exists() else None
    for rec in StateDir.of(state_dir).records():
        if here == rec.blueprint_file or what in (rec.stack, rec.name):
            return "aws"
    if path.is_file():
        from ruamel.yaml import YAML, YAMLError

        try:
            data = YAML(typ="safe", pure=True).load(path.read_text())
        except (YAMLError, OSError, UnicodeDecodeError):
            return "aws"
        target = data.get("target") if isinstance(data, dict) else None
        provider = target.get("provider") if isinstance(target, dict) else None
        if isinstance(provider, str) and provider:
            return provider
    return "aws"
