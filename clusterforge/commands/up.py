"""``clusterforge up BLUEPRINT`` / ``clusterforge down BLUEPRINT``: deploy and destroy.

AWS blueprints go through the Pulumi Automation API against the project in this repository
(``Pulumi.yaml``, program ``stacks/``), stack = blueprint name, with a **local file state
backend** under ``.clusterforge/state`` (``--state-dir`` overrides; ``PULUMI_BACKEND_URL`` in the
environment wins over both). Pulumi's own progress is streamed as it runs.

Secrets (the EKS kubeconfig) are encrypted in that state with a passphrase: set
``PULUMI_CONFIG_PASSPHRASE`` (or ``PULUMI_CONFIG_PASSPHRASE_FILE``) before ``up``, and keep it —
``down`` and every later ``up`` need the same one. It is passed to Pulumi through the
environment only, never written or logged.

On-prem blueprints: ``up`` runs the Ansible site playbook through ansible-runner
(:func:`clusterforge.ansible.runner.run_site`); ``down`` has nothing to destroy on bare metal.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import typer

from blueprints import LoadedBlueprint

from ..blueprint_io import load_checked
from ..console import ok
from ..errors import ProvisionError, ToolMissingError, UsageError

DEFAULT_STATE_DIR = Path(".clusterforge/state")
DEFAULT_ANSIBLE_DIR = Path(".clusterforge/ansible")
INSTALL_HINT = ("the Pulumi CLI is not installed: install it with `curl -fsSL https://get.pulumi.com | sh` "
                "(https://www.pulumi.com/docs/iac/download-install/) and put `pulumi` on PATH "
                "— `clusterforge plan` works without it")


def pulumi_cli() -> str:
    """Path of the ``pulumi`` executable (PATH, then ``~/.pulumi/bin``); raises :class:`ToolMissingError`."""
    found = shutil.which("pulumi")
    if found:
        return found
    home = Path.home() / ".pulumi" / "bin" / "pulumi"
    if home.is_file() and os.access(home, os.X_OK):
        return str(home)
    raise ToolMissingError(INSTALL_HINT)


def _echo(line: str) -> None:
    """Stream one line of Pulumi's own output as it comes (ANSI colours kept on a terminal)."""
    print(line, flush=True)


def _stack(loaded: LoadedBlueprint, state_dir: Path) -> Any:
    """Create or select the Automation API stack for ``loaded`` (CLI checked, passphrase set)."""
    cli = pulumi_cli()
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ and "PULUMI_CONFIG_PASSPHRASE_FILE" not in os.environ:
        raise UsageError(
            "set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): it encrypts the stack's secrets "
            f"(the EKS kubeconfig) in the local state under {state_dir}; keep it, `down` needs the same one"
        )
    from pulumi import automation as auto

    from stacks.config import CONFIG_NAMESPACE, PROJECT_ROOT

    if not (PROJECT_ROOT / "Pulumi.yaml").is_file():
        raise UsageError(f"no Pulumi.yaml in {PROJECT_ROOT}: `clusterforge up` runs the Pulumi project of a "
                         "clusterforge checkout — install it with `pip install -e .` from the repository")
    backend = os.environ.get("PULUMI_BACKEND_URL")
    if not backend:
        state_dir = state_dir.expanduser().resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        backend = f"file://{state_dir}"
    env = {"PULUMI_BACKEND_URL": backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    command = auto.PulumiCommand(root=str(Path(cli).resolve().parent.parent))
    opts = auto.LocalWorkspaceOptions(work_dir=str(PROJECT_ROOT), env_vars=env, secrets_provider="passphrase",
                                      pulumi_command=command)
    try:
        stack = auto.create_or_select_stack(stack_name=loaded.blueprint.name, work_dir=str(PROJECT_ROOT), opts=opts)
        stack.set_config(f"{CONFIG_NAMESPACE}:blueprint", auto.ConfigValue(str(Path(loaded.file).resolve())))
    except auto.CommandError as e:
        raise ProvisionError(f"pulumi could not open stack `{loaded.blueprint.name}` ({backend}): "
                             f"{_first_line(str(e))}") from None
    return stack


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("code:", "stdout:", "stderr:")):
            return line
    return text.strip()[:300]


def _run(what: str, fn: Any, **kw: Any) -> Any:
    from pulumi import automation as auto

    try:
        return fn(on_output=_echo, on_error=_echo, color="always" if sys.stdout.isatty() else "never", **kw)
    except auto.CommandError:
        raise ProvisionError(f"pulumi {what} failed; Pulumi's messages are above") from None


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
        loaded = load_checked(blueprint)
        bp = loaded.blueprint
        if not bp.is_aws:
            local_hosts = [h.name for g in bp.node_groups for h in g.hosts if h.connection == "local"]
            if local_hosts and not check and not yes:
                # the roles change kernel parameters, limits and packages: never do that to the
                # control machine without an explicit yes
                if not sys.stdin.isatty():
                    raise UsageError(f"{blueprint}: host {local_hosts[0]} is this machine (connection: local); "
                                     "rerun with --yes to configure it, or --check to see what would change")
                if not typer.confirm(f"{local_hosts[0]} is this machine: configure it as root (kernel cmdline, "
                                     "limits, packages)?", default=False):
                    raise UsageError("not confirmed; nothing was changed (use --check to see what would change)")
            try:
                from clusterforge.ansible.runner import run_site  # the on-prem path; imported lazily
            except ModuleNotFoundError as e:
                if not (e.name or "").startswith("clusterforge.ansible"):
                    raise
                raise ToolMissingError(f"on-prem deploys need the clusterforge.ansible package ({e.name} is "
                                       "missing from this installation)") from None

            out = output or DEFAULT_ANSIBLE_DIR / bp.name
            rc = run_site(loaded, out, check=check,
                          tags=[t.strip() for t in tags.split(",") if t.strip()] if tags else None, limit=limit)
            if rc != 0:
                raise ProvisionError(f"ansible run for `{bp.name}` failed (exit {rc}); the failed tasks are above")
            ok(f"{bp.name}: {'checked' if check else 'provisioned'} ({out})")
            return
        if check or tags or limit or output:
            raise UsageError("--check, --tags, --limit and -o apply to on-prem blueprints; "
                             f"`{bp.name}` targets aws (use --preview)")
        stack = _stack(loaded, state_dir)
        if preview:
            _run("preview", stack.preview, diff=False)
            return
        result = _run("up", stack.up)
        ok(f"{bp.name}: deployed ({result.summary.result}); outputs: {', '.join(sorted(result.outputs))}")

    @app.command("down")
    def down_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        state_dir: Path = typer.Option(DEFAULT_STATE_DIR, "--state-dir",
                                       help="Local Pulumi state backend directory (AWS)."),
    ) -> None:
        """Destroy everything `up` created for an AWS blueprint."""
        loaded = load_checked(blueprint, show_warnings=False)
        bp = loaded.blueprint
        if not bp.is_aws:
            raise UsageError(f"`{bp.name}` is an on-prem blueprint: there is nothing to destroy on bare metal "
                             "(clusterforge does not uninstall what the Ansible roles configured)")
        stack = _stack(loaded, state_dir)
        _run("destroy", stack.destroy)
        ok(f"{bp.name}: destroyed")
