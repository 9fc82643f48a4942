"""The AWS target: a Pulumi program (``stacks/``) deployed through the Automation API.

``plan`` runs that program in-process against a mock engine (:func:`clusterforge.plan.plan_aws`: no
credentials, no network, no Pulumi CLI) and shows every resource under its component.
``render`` writes a Pulumi project directory that runs on its own (:func:`stacks.render.render_stack_config`).
``up`` / ``down`` drive the Pulumi CLI through the Automation API against the project in this
repository (``Pulumi.yaml``, program ``stacks/``), stack = blueprint name, with a **local file state
backend** (``--state-dir``; ``PULUMI_BACKEND_URL`` in the environment wins). Pulumi's own progress is
streamed as it runs.

Secrets (the EKS kubeconfig) are encrypted in that state with a passphrase: set
``PULUMI_CONFIG_PASSPHRASE`` (or ``PULUMI_CONFIG_PASSPHRASE_FILE``) before ``up``, and keep it —
``down`` and every later ``up`` need the same one. It is passed to Pulumi through the
environment only, never written or logged.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from blueprints.errors import ClusterforgeError, ProvisionError, ToolMissingError, UsageError

from .base import DeployOptions, Plan, Target

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

    from blueprints import LoadedBlueprint
    from blueprints.findings import Finding

    from ..cost import CostReport
    from ..plan import PlannedResource, PlanResult

__all__ = ["INSTALL_HINT", "AwsPlan", "AwsTarget", "pulumi_cli", "render_tree", "short_type"]

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


COLLAPSE_AFTER = 6
"""Show at most this many siblings of one type under a parent (``--all`` shows every one)."""


def short_type(token: str) -> str:
    """``aws:ec2/launchTemplate:LaunchTemplate`` -> ``aws:ec2:LaunchTemplate`` (as the Pulumi CLI shows it)."""
    parts = token.split(":")
    if len(parts) == 3:
        return f"{parts[0]}:{parts[1].split('/')[0]}:{parts[2]}"
    return token


def _label(r: PlannedResource, n_desc: int) -> str:
    extra = f" [dim]({n_desc} resource{'s' if n_desc != 1 else ''})[/dim]" if n_desc else ""
    kind = "[bold cyan]" if not r.custom and r.type.startswith("clusterforge:") else "[green]"
    return f"{kind}{short_type(r.type)}[/] {r.name}{extra}"


def render_tree(result: PlanResult, title: str, show_all: bool = False) -> Tree:
    """A rich tree of the planned resources: components with their children, long runs of one type collapsed."""
    from rich.tree import Tree

    from ..plan import natural_key  # pulumi is heavy: imported only when there is a plan to show

    by_parent: dict[str | None, list[PlannedResource]] = defaultdict(list)
    for r in sorted(result.resources, key=lambda r: (r.custom, r.type, natural_key(r.name))):
        by_parent[r.parent_urn].append(r)

    def descendants(urn: str) -> int:
        return sum(1 + descendants(c.urn) for c in by_parent.get(urn, []))

    def add(node: Tree, parent: str | None) -> None:
        seen: Counter[str] = Counter()
        totals = Counter(c.type for c in by_parent.get(parent, []))
        for c in by_parent.get(parent, []):
            seen[c.type] += 1
            if not show_all and seen[c.type] > COLLAPSE_AFTER:
                if seen[c.type] == COLLAPSE_AFTER + 1:
                    node.add(f"[dim]… {totals[c.type] - COLLAPSE_AFTER} more {short_type(c.type)} (--all shows them)[/dim]")
                continue
            child = node.add(_label(c, descendants(c.urn)))
            add(child, c.urn)

    tree = Tree(title)
    add(tree, None)
    return tree


def _counts_table(result: PlanResult) -> Table:
    from rich.table import Table

    table = Table(title="resources by type", show_lines=False)
    table.add_column("type")
    table.add_column("count", justify="right")
    for typ, n in sorted(result.counts().items()):
        table.add_row(short_type(typ), str(n))
    return table



@dataclass
class AwsPlan(Plan):
    """The cloud resources ``up`` would create: ``result`` holds every registration of the program
    under the mock engine; ``where`` is ``aws REGION AZ``."""

    blueprint: str
    result: PlanResult
    where: str
    provider: str = "aws"

    def to_json(self) -> dict[str, Any]:
        """``{"resources": [{"type", "name", "parent", "inputs"}]}`` with engine (camelCase) property names."""
        return self.result.to_json()

    def show(self, console: Console, *, show_all: bool = False) -> None:
        """The resource tree (runs of one type collapsed unless ``show_all``), counts by type and the
        stack outputs' names. Lines are never cropped: a terminal wraps them."""
        from rich.console import Console as RichConsole

        result = self.result
        custom = sum(1 for r in result.resources if r.custom)
        title = (f"[bold]plan[/bold] {self.blueprint} ({self.where}): {custom} cloud resources in "
                 f"{len(result.resources) - custom} components/providers — offline, mock engine, {result.seconds:.2f} s")
        out = RichConsole(file=console.file, highlight=False, width=10_000, force_terminal=console.is_terminal,
                          soft_wrap=True)
        out.print(render_tree(result, title, show_all=show_all))
        out.print(_counts_table(result))
        if result.outputs:
            out.print("[bold]stack outputs:[/bold] " + ", ".join(sorted(result.outputs)))


class AwsTarget(Target):
    """``target.provider: aws``: EC2 instances or EKS node groups from the Pulumi program in ``stacks/``."""

    provider = "aws"
    render_dir = "pulumi"
    preflight_checks: ClassVar[dict[str, str]] = {
        "user-data-size": "a node group's user data exceeds EC2's 16 KB limit "
                          "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html)",
    }

    def preflight(self, loaded: LoadedBlueprint) -> list[Finding]:
        """``user-data-size``: each node group's user data, rendered as the stack renders it
        (FSx endpoints of the real length, :func:`stacks.cloud_init.sizing_endpoints`) and
        compressed where EC2 allows, must fit
        EC2's 16 KB limit (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html);
        the finding sits at the node group."""
        from blueprints.models import KubernetesOrchestrator
        from stacks.cloud_init import (
            USER_DATA_LIMIT_BYTES,
            render_user_data,
            sizing_endpoints,
            user_data_payload,
        )

        eks = isinstance(loaded.blueprint.orchestrator, KubernetesOrchestrator)
        region = str(getattr(loaded.blueprint.target, "region", "us-east-1"))
        out: list[Finding] = []
        for r in loaded.cluster.groups:
            text = render_user_data(r.settings, sizing_endpoints(r.settings, region), eks=eks)
            size = len(user_data_payload(text))
            if size > USER_DATA_LIMIT_BYTES:
                how = "as MIME text (EKS merges it uncompressed)" if eks else "gzip-compressed"
                out.append(loaded.finding(
                    "user-data-size", "error",
                    f"node group `{r.name}`: its user data is {size} bytes {how}; EC2 allows "
                    f"{USER_DATA_LIMIT_BYTES} (the NCCL environment, Lustre mounts and stripe settings and the "
                    "sandbox setup of the group all travel in it)",
                    "set fewer `network.nccl.env` variables or Lustre stripe settings, or move the extra "
                    "settings into the container image",
                    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html", r.path))
        return out

    def plan(self, loaded: LoadedBlueprint) -> AwsPlan:
        """Run the stack program against the mock engine; a refusal of the program
        (:class:`pulumi.RunError`) becomes one :class:`ClusterforgeError` line."""
        import pulumi

        from ..plan import plan_aws

        try:
            result = plan_aws(loaded)
        except pulumi.RunError as e:
            raise ClusterforgeError(f"{loaded.file}: {e}") from None
        target = loaded.blueprint.target
        where = f"aws {getattr(target, 'region', '')} {getattr(target, 'availability_zone', '')}".strip()
        return AwsPlan(blueprint=loaded.blueprint.name, result=result, where=where)

    def cost(self, loaded: LoadedBlueprint, plan: Plan, *, utilization: float = 1.0,
             prices: dict[str, Any] | None = None) -> CostReport:
        """Every resource of the plan priced (:func:`clusterforge.cost.price_plan`); ``utilization`` does not
        change what the cloud bills for running resources."""
        from ..cost import price_plan

        assert isinstance(plan, AwsPlan)
        return price_plan(plan.result, loaded, prices)

    def refresh_prices(self, loaded: LoadedBlueprint, plan: Plan) -> tuple[list[str], list[str], Path]:
        """The plan's instance types and gp3 storage from the AWS Price List Query API
        (:func:`clusterforge.pricelist.refresh_for_plan`; AWS credentials needed)."""
        from ..pricelist import refresh_for_plan

        assert isinstance(plan, AwsPlan)
        return refresh_for_plan(loaded, plan.result)

    def render(self, loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
        """``Pulumi.yaml``, the program, the blueprint copy, the stack settings and each node group's cloud-init."""
        from stacks.render import render_stack_config

        return render_stack_config(loaded, out_dir)

    def up(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        """``pulumi up`` (``options.preview``: ``pulumi preview``); the Ansible options (``check``,
        ``tags``, ``limit``, ``output``) are refused with :class:`UsageError`."""
        from ..console import ok

        bp = loaded.blueprint
        if options.check or options.tags or options.limit or options.output:
            raise UsageError("--check, --tags, --limit and -o apply to on-prem blueprints; "
                             f"`{bp.name}` targets aws (use --preview)")
        stack = _stack(loaded, options.state_dir)
        if options.preview:
            _run("preview", stack.preview, diff=False)
            return
        result = _run("up", stack.up)
        ok(f"{bp.name}: deployed ({result.summary.result}); outputs: {', '.join(sorted(result.outputs))}")

    def down(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        """``pulumi destroy`` of the blueprint's stack."""
        from ..console import ok

        stack = _stack(loaded, options.state_dir)
        _run("destroy", stack.destroy)
        ok(f"{loaded.blueprint.name}: destroyed")

