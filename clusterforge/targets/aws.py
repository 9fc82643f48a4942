"""The AWS target: a Pulumi program (``stacks/``) deployed through the Automation API.

``plan`` runs that program in-process against a mock engine (:func:`clusterforge.plan.plan_aws`: no
credentials, no network, no Pulumi CLI) and shows every resource under its component.
``render`` writes a Pulumi project directory that runs on its own (:func:`stacks.render.render_stack_config`).
``up`` / ``down`` drive the Pulumi CLI through the Automation API against the project in this
repository (``Pulumi.yaml``, program ``stacks/``), stack ``<name>-<region>`` owned by one blueprint
file, with a **local file state backend** in the user's state directory (:mod:`clusterforge.state`:
``--state-dir``; ``PULUMI_BACKEND_URL`` in the environment wins). ``up`` on a deployed stack prints
the changes with their update policy and asks before replacing or deleting (:mod:`clusterforge.updates`);
``down`` destroys what the record names without loading the blueprint. Pulumi's own progress is
streamed as it runs.

Secrets (the EKS kubeconfig) are encrypted in that state with a passphrase: set
``PULUMI_CONFIG_PASSPHRASE`` (or ``PULUMI_CONFIG_PASSPHRASE_FILE``) before ``up``, and keep it —
``down`` and every later ``up`` need the same one. It is passed to Pulumi through the
environment only, never written or logged.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from blueprints.errors import ClusterforgeError, ProvisionError, ToolMissingError, UsageError

from ..state import Deployment, StateDir, stack_name
from .base import DeployOptions, Plan, Target

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

    from blueprints import LoadedBlueprint
    from blueprints.findings import Finding
    from stacks.inventory import Inventory

    from ..cost import CostReport
    from ..plan import PlannedResource, PlanResult

__all__ = ["INSTALL_HINT", "AwsPlan", "AwsTarget", "inventory", "pulumi_cli", "render_tree", "short_type"]

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


def _stack(stack_name: str, state: StateDir, *, config: dict[str, str] | None = None, create: bool = True) -> Any:
    """Create (``create``) or select the Automation API stack ``stack_name`` in ``state``'s backend
    (CLI checked, passphrase set) and set ``config`` (``clusterforge:*`` keys) on it."""
    cli = pulumi_cli()
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ and "PULUMI_CONFIG_PASSPHRASE_FILE" not in os.environ:
        raise UsageError(
            "set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): it encrypts the stack's secrets "
            f"(the EKS kubeconfig) in the local state under {state.root}; keep it, `down` needs the same one"
        )
    from pulumi import automation as auto

    from stacks.config import PROJECT_ROOT

    if not (PROJECT_ROOT / "Pulumi.yaml").is_file():
        raise UsageError(f"no Pulumi.yaml in {PROJECT_ROOT}: `clusterforge up` runs the Pulumi project of a "
                         "clusterforge checkout — install it with `pip install -e .` from the repository")
    backend = state.backend_url
    if backend.startswith("file://"):
        Path(backend[len("file://"):]).mkdir(parents=True, exist_ok=True)
    env = {"PULUMI_BACKEND_URL": backend, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    command = auto.PulumiCommand(root=str(Path(cli).resolve().parent.parent))
    opts = auto.LocalWorkspaceOptions(work_dir=str(PROJECT_ROOT), env_vars=env, secrets_provider="passphrase",
                                      pulumi_command=command)
    try:
        if create:
            stack = auto.create_or_select_stack(stack_name=stack_name, work_dir=str(PROJECT_ROOT), opts=opts)
        else:
            stack = auto.select_stack(stack_name=stack_name, work_dir=str(PROJECT_ROOT), opts=opts)
        for key, value in (config or {}).items():
            stack.set_config(key, auto.ConfigValue(value))
    except auto.CommandError as e:
        raise ProvisionError(f"pulumi could not open stack `{stack_name}` ({backend}): "
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


def inventory(loaded: LoadedBlueprint) -> Inventory:
    """What the stack creates for ``loaded`` (:func:`stacks.inventory.inventory`: the resources and the
    decisions the Pulumi components take), without running the program; a blueprint the stack cannot create is
    one :class:`ClusterforgeError` line, as the plan gives it."""
    from stacks.inventory import InventoryError, NotAwsBlueprint
    from stacks.inventory import inventory as stack_inventory

    try:
        return stack_inventory(loaded.blueprint, loaded.cluster)
    except (InventoryError, NotAwsBlueprint) as e:
        raise ClusterforgeError(f"{loaded.file}: {e}") from None


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
        EC2's 16 KB limit (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html), less, on
        EKS, the room EKS's own merged bootstrap part takes (catalog ``eks_user_data``);
        the finding sits at the node group."""
        from blueprints.models import KubernetesOrchestrator
        from stacks.cloud_init import (
            EKS_USER_DATA_BUDGET_BYTES,
            USER_DATA_LIMIT_BYTES,
            render_user_data,
            sizing_endpoints,
            user_data_payload,
        )
        from stacks.node_status import status_path

        eks = isinstance(loaded.blueprint.orchestrator, KubernetesOrchestrator)
        region = str(getattr(loaded.blueprint.target, "region", "us-east-1"))
        # EKS merges its own bootstrap part into the launch template's user data: leave it room
        reserve = USER_DATA_LIMIT_BYTES - EKS_USER_DATA_BUDGET_BYTES if eks else 0
        path = status_path(stack_name(loaded.blueprint.name, region))  # the status records' path `up` deploys
        out: list[Finding] = []
        for r in loaded.cluster.groups:
            text = render_user_data(r.settings, sizing_endpoints(r.settings, region), eks=eks, status_path=path)
            size = len(user_data_payload(text))
            if size > USER_DATA_LIMIT_BYTES - reserve:
                how = "as MIME text (EKS merges it uncompressed)" if eks else "gzip-compressed"
                room = f", of which EKS's own bootstrap part needs about {reserve}" if reserve else ""
                out.append(loaded.finding(
                    "user-data-size", "error",
                    f"node group `{r.name}`: its user data is {size} bytes {how}; EC2 allows "
                    f"{USER_DATA_LIMIT_BYTES}{room} (the NCCL environment, Lustre mounts and stripe settings and the "
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

    def cost(self, loaded: LoadedBlueprint, plan: Plan | None = None, *, utilization: float = 1.0,
             prices: dict[str, Any] | None = None) -> CostReport:
        """Every resource the stack creates priced (:func:`clusterforge.cost.price_plan` of the stack's inventory,
        :func:`inventory`: the same resources as the plan, without running the program; ``plan`` is not needed).
        ``utilization`` does not change what the cloud bills for running resources."""
        from ..cost import price_plan

        return price_plan(inventory(loaded).resources, loaded, prices)

    def refresh_prices(self, loaded: LoadedBlueprint) -> tuple[list[str], list[str], Path]:
        """The instance types and gp3 storage of the stack's inventory from the AWS Price List Query API
        (:func:`clusterforge.pricelist.refresh_for_plan`; AWS credentials needed)."""
        from ..pricelist import refresh_for_plan

        return refresh_for_plan(loaded, inventory(loaded).resources)

    def render(self, loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
        """``Pulumi.yaml``, the program, the blueprint copy, the stack settings and each node group's cloud-init."""
        from stacks.render import render_stack_config

        return render_stack_config(loaded, out_dir)

    def up(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        """``pulumi up`` (``options.preview``: ``pulumi preview``) of the blueprint's stack
        (:func:`clusterforge.state.stack_name`), after the update check: a stack recorded for another
        blueprint file is refused (:class:`clusterforge.state.StackTakenError`, unless ``adopt``); on a
        deployed stack the changes are printed with their update policy and confirmed
        (:func:`clusterforge.updates.confirm`). The node images recorded at the last ``up`` are reused
        unless ``refresh_ami``. Afterwards the record is written (:class:`clusterforge.state.Deployment`) and,
        unless ``options.wait`` is off, ``up`` waits until every node reports configured or one failed
        (:func:`clusterforge.readiness.wait_for_nodes`, at most ``options.wait_timeout_s``; a failed or late node is
        :class:`clusterforge.readiness.NodesNotReady`, exit 1).
        The Ansible options (``check``, ``tags``, ``limit``, ``output``) are refused with :class:`UsageError`."""
        from stacks.config import CONFIG_NAMESPACE

        from ..console import ok, warn
        from ..readiness import Expected, wait_for_nodes

        bp = loaded.blueprint
        if options.check or options.tags or options.limit or options.output:
            raise UsageError("--check, --tags, --limit and -o apply to on-prem blueprints; "
                             f"`{bp.name}` targets aws (use --preview)")
        state = StateDir.of(options.state_dir)
        region = str(getattr(bp.target, "region", ""))
        name = stack_name(bp.name, region)
        rec = state.owner_check(name, Path(loaded.file), adopt=options.adopt)
        images = {} if rec is None or options.refresh_ami else dict(rec.images)
        if rec is not None:
            found = self.update_changes(loaded, rec, refresh_ami=options.refresh_ami)
            _show_changes(loaded, rec, found)
            if not options.preview:
                from ..updates import confirm

                confirm(found, yes=options.yes)
        config = {f"{CONFIG_NAMESPACE}:blueprint": str(Path(loaded.file).resolve()),
                  f"{CONFIG_NAMESPACE}:images": json.dumps(images, sort_keys=True)}
        stack = _stack(name, state, config=config)
        if options.preview:
            _run("preview", stack.preview, diff=False)
            return
        if rec is None:  # claim the stack before Pulumi creates anything: a failed first `up` can still be torn
            # down, and no other file with the same name can take it meanwhile
            state.save(Deployment(stack=name, blueprint_file=str(Path(loaded.file).resolve()), name=bp.name,
                                  region=region, blueprint=blueprint_data(loaded)))
        result = _run("up", stack.up)
        outputs = {k: getattr(v, "value", v) for k, v in result.outputs.items()}
        recorded = outputs.get("nodeImages") or {}
        changes = getattr(result.summary, "resource_changes", None) or {}
        expected = Expected.from_output(outputs.get("nodeReadiness"))
        state.save(Deployment(
            stack=name, blueprint_file=str(Path(loaded.file).resolve()), name=bp.name, region=region,
            blueprint=blueprint_data(loaded), images={str(k): str(v) for k, v in dict(recorded).items()},
            resources=int(sum(v for k, v in changes.items() if k != "delete")) if changes else 0,
            node_status_path=expected.path if expected is not None and expected.ec2 else ""))
        ok(f"{bp.name}: deployed ({result.summary.result}) as stack {name}; outputs: {', '.join(sorted(outputs))}")
        if not options.wait:
            return
        if expected is None:  # a stack program without readiness (a clusterforge before it): nothing to wait on
            warn(f"{name} exports no node readiness: `up` does not wait for the nodes (run `clusterforge validate`)")
            return
        wait_for_nodes(expected, region=region, timeout_s=options.wait_timeout_s)

    def changes_report(self, loaded: LoadedBlueprint, state_dir: Path | None) -> list[str]:
        """``plan``'s offline view of what ``up`` would do to the deployed stack of ``loaded``: the lines
        :func:`clusterforge.updates.show` prints, a line saying another file owns the stack, or none when
        nothing is deployed (the plan itself is then what ``up`` creates)."""
        import io

        found = self._deployed_changes(loaded, state_dir)
        if found is None:  # not deployed: the plan above is what `up` creates
            return []
        name, rec, changes = found
        if changes is None:
            return [_owner_refusal(name, rec)]
        buf = io.StringIO()
        _show_changes(loaded, rec, changes, out=buf)
        return buf.getvalue().splitlines()

    def changes_json(self, loaded: LoadedBlueprint, state_dir: Path | None) -> dict[str, Any] | None:
        """:meth:`changes_report` as data (``plan --json``'s ``changes``): :func:`clusterforge.updates.report`
        of the changes against the record; ``{"stack", "owner", "refused"}`` when another file owns the stack;
        ``None`` when nothing is deployed."""
        from ..updates import report

        found = self._deployed_changes(loaded, state_dir)
        if found is None:
            return None
        name, rec, changes = found
        if changes is None:
            return {"stack": name, "owner": rec.blueprint_file, "refused": _owner_refusal(name, rec)}
        counts, reserved = _group_counts_and_reserved(rec)
        return report(changes, stack=rec.stack, deployed_from=rec.blueprint_file, deployed_at=rec.deployed_at,
                      group_counts=counts, reserved=reserved)

    def _deployed_changes(self, loaded: LoadedBlueprint,
                          state_dir: Path | None) -> tuple[str, Deployment, list[Any] | None] | None:
        """``(stack, record, classified changes)`` of ``loaded``'s deployed stack; the changes are ``None`` when
        the record belongs to another file; ``None`` when nothing is recorded."""
        state = StateDir.of(state_dir)
        name = stack_name(loaded.blueprint.name, str(getattr(loaded.blueprint.target, "region", "")))
        rec = state.load(name)
        if rec is None:
            return None
        if rec.blueprint_file != str(Path(loaded.file).resolve()):
            return name, rec, None
        return name, rec, self.update_changes(loaded, rec)

    def update_changes(self, loaded: LoadedBlueprint, rec: Deployment, *, refresh_ami: bool = False) -> list[Any]:
        """The classified changes from the deployment ``rec`` to ``loaded`` (:func:`clusterforge.updates.changes`)."""
        from blueprints.models import KubernetesOrchestrator

        from ..updates import changes

        eks = isinstance(loaded.blueprint.orchestrator, KubernetesOrchestrator)
        found = changes(rec.blueprint, blueprint_data(loaded), old_images=rec.images, refresh_ami=refresh_ami,
                        image_groups=[] if eks else [g.name for g in loaded.blueprint.node_groups])
        return _capacity_block_eks(found, rec) if eks else found

    def down(self, what: str, options: DeployOptions) -> None:
        """``pulumi destroy`` of the stack recorded for ``what`` (blueprint path, stack or blueprint name),
        read from the record alone (the blueprint is not loaded); prints what goes, asks unless
        ``options.yes``, then forgets the record. Nothing recorded: :class:`UsageError`, exit 1."""
        from ..console import ok
        from ..updates import ask

        state = StateDir.of(options.state_dir)
        rec = state.find(what)
        _show_teardown(rec, state)
        ask(f"Destroy stack {rec.stack}?", yes=options.yes,
            no_terminal=f"`down` destroys stack {rec.stack} and there is no terminal to ask on: rerun with --yes",
            declined="not confirmed; nothing was destroyed")
        stack = _stack(rec.stack, state, create=False)
        _run("destroy", stack.destroy)
        state.remove(rec.stack)
        ok(f"{rec.name}: destroyed stack {rec.stack}")
        if rec.node_status_path:
            _forget_node_status(rec)


def _forget_node_status(rec: Deployment) -> None:
    """Delete the nodes' status records of a destroyed stack (the nodes wrote them, the stack does not own them); a
    record that cannot be deleted is a warning naming the path, never a failed ``down``."""
    from ..console import ok, warn
    from ..readiness import delete_records

    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        n = delete_records(boto3.client("ssm", region_name=rec.region), rec.node_status_path)
    except ImportError:
        warn(f"the node status records under {rec.node_status_path} stay (no boto3 to delete them)")
        return
    except (BotoCoreError, ClientError) as e:
        warn(f"the node status records under {rec.node_status_path} stay ({e}): delete them with `aws ssm "
             f"delete-parameters` (the deploying identity needs ssm:DeleteParameters)")
        return
    ok(f"deleted {n} node status record(s) under {rec.node_status_path}")


def blueprint_data(loaded: LoadedBlueprint) -> dict[str, Any]:
    """The blueprint as the record keeps it: canonical JSON data, field names (not aliases)."""
    return loaded.blueprint.model_dump(mode="json")


def _capacity_block_eks(found: list[Any], rec: Deployment) -> list[Any]:
    """``found`` with every ``replace-nodes`` change that reaches a running EKS node group in a Capacity
    Block made ``refused``: EKS replaces managed nodes surge-first, and a block has no spare slot, so
    the update stalls; AWS's way is to scale the group to 0 first
    (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)."""
    from dataclasses import replace

    counts = {str(g["name"]): int(g.get("count") or 0) for g in rec.blueprint.get("node_groups", [])}
    blocked = [g for g in _reserved_groups(rec.blueprint, kinds=("capacity-block",)) if counts.get(g, 0) > 0]
    out = []
    for c in found:
        hit = [g for g in ([c.group] if c.group else blocked) if g in blocked]
        if c.policy == "replace-nodes" and hit:
            c = replace(c, policy="refused", why=(
                f"EKS replaces the nodes of {', '.join(hit)} surge-first and its Capacity Block has no spare slot — "
                f"set `count: 0` for {', '.join(hit)} and `up` first, then make this change with the count back"))
        out.append(c)
    return out


def _reserved_groups(data: dict[str, Any], kinds: tuple[str, ...] = ("capacity-block", "reservation")) -> list[str]:
    """Groups of a recorded blueprint whose capacity type is one of ``kinds`` (Capacity Block, reservation)."""
    from blueprints.aws import capacity_for
    from blueprints.models import Blueprint

    try:
        bp = Blueprint.model_validate(data)
    except ValueError:
        return []
    return [g.name for g in bp.node_groups if getattr(capacity_for(bp, g), "type", "") in kinds]


def _owner_refusal(name: str, rec: Deployment) -> str:
    return (f"{name}: belongs to {rec.blueprint_file}: `up` of this file is refused (rename `name:` or "
            "`up --adopt`)")


def _group_counts_and_reserved(rec: Deployment) -> tuple[dict[str, int], list[str]]:
    """The recorded node groups' counts, and the groups whose nodes a replacement stops first (in a Capacity Block or
    reservation; none on EKS, which cannot replace delete-first)."""
    counts = {str(g["name"]): int(g.get("count") or 0) for g in rec.blueprint.get("node_groups", [])}
    eks = (rec.blueprint.get("orchestrator") or {}).get("kind") == "kubernetes"
    return counts, [] if eks else _reserved_groups(rec.blueprint)


def _show_changes(loaded: LoadedBlueprint, rec: Deployment, found: list[Any], out: Any = None) -> None:
    from ..updates import show

    counts, reserved = _group_counts_and_reserved(rec)
    show(found, stack=rec.stack, deployed_from=rec.blueprint_file, deployed_at=rec.deployed_at,
         group_counts=counts, reserved=reserved, out=out)


def _show_teardown(rec: Deployment, state: StateDir) -> None:
    """What ``down`` destroys, from the record: the stack, its owner file, node groups and file systems
    with their final-backup setting."""
    print(f"down: stack {rec.stack} (state {state.root}), deployed {rec.deployed_at} from {rec.blueprint_file}, "
          f"{rec.resources} resources")
    for g in rec.blueprint.get("node_groups", []):
        print(f"  node group {g.get('name')}: {g.get('count')} × {g.get('instance_type')} — destroyed")
    for s in rec.blueprint.get("storage", []):
        fsx = s.get("fsx")
        if not fsx:
            continue
        persistent = str(fsx.get("deployment_type", "")).startswith("PERSISTENT")
        backups = persistent and (not fsx.get("s3") or bool(_catalog_fsx()["backups_with_s3_repository"]))
        if backups and fsx.get("final_backup", True):
            what = "deleted after a final backup (kept until you delete it)"
        elif backups:
            what = "deleted WITHOUT a final backup (fsx.final_backup: false)"
        else:
            what = f"deleted, no backup ({fsx.get('deployment_type')}{' with S3 link' if fsx.get('s3') else ''} " \
                   "has none)"
        print(f"  file system {s.get('name')} ({fsx.get('deployment_type')}, "
              f"{fsx.get('storage_capacity_gib')} GiB): {what}")


def _catalog_fsx() -> dict[str, Any]:
    from blueprints.catalog import catalog

    return dict(catalog().aws["fsx"])
