"""``clusterforge plan BLUEPRINT [--json] [--all]``: what ``up`` would create, offline.

AWS blueprints: the Pulumi program runs in-process against a mock engine
(:mod:`clusterforge.plan`) — no credentials, no network, no Pulumi CLI. The tree shows every
resource under its component with counts; ``--json`` prints
``{"resources": [{"type", "name", "parent", "inputs"}]}`` with engine (camelCase) property names.
On-prem blueprints: every host, role and variable of the Ansible run.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from ..blueprint_io import load_checked
from ..console import console
from ..errors import ClusterforgeError, ToolMissingError

if TYPE_CHECKING:
    from ..plan import PlannedResource, PlanResult

COLLAPSE_AFTER = 6
"""Show at most this many siblings of one type under a parent (``--all`` shows every one)."""


def short_type(token: str) -> str:
    """``aws:ec2/launchTemplate:LaunchTemplate`` -> ``aws:ec2:LaunchTemplate`` (as the Pulumi CLI shows it)."""
    parts = token.split(":")
    if len(parts) == 3:
        return f"{parts[0]}:{parts[1].split('/')[0]}:{parts[2]}"
    return token


def _label(r: PlannedResource, n_desc: int) -> str:
    extra = f" [dim]({n_desc} resources)[/dim]" if n_desc else ""
    kind = "[bold cyan]" if not r.custom and r.type.startswith("clusterforge:") else "[green]"
    return f"{kind}{short_type(r.type)}[/] {r.name}{extra}"


def render_tree(result: PlanResult, title: str, show_all: bool = False) -> Tree:
    """A rich tree of the planned resources: components with their children, long runs of one type collapsed."""
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
    table = Table(title="resources by type", show_lines=False)
    table.add_column("type")
    table.add_column("count", justify="right")
    for typ, n in sorted(result.counts().items()):
        table.add_row(short_type(typ), str(n))
    return table


def _dict_tree(node: Tree, value: Any, depth: int = 0) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                _dict_tree(node.add(f"[bold]{k}[/bold]"), v, depth + 1)
            else:
                node.add(f"[bold]{k}[/bold]: {json.dumps(v)}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, dict) and isinstance(v.get("name"), str):  # hosts, roles: label by name
                _dict_tree(node.add(f"[bold]{v['name']}[/bold]"), {k: x for k, x in v.items() if k != "name"},
                           depth + 1)
            elif isinstance(v, (dict, list)):
                _dict_tree(node.add(f"[dim]{i}[/dim]"), v, depth + 1)
            else:
                node.add(json.dumps(v) if not isinstance(v, str) else v)
    else:
        node.add(json.dumps(value))


def register(app: typer.Typer) -> None:
    """Add the ``plan`` verb to ``app``."""

    @app.command("plan")
    def plan_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print the planned resources as JSON."),
        show_all: bool = typer.Option(False, "--all", help="List every resource (no collapsing)."),
    ) -> None:
        """Show every resource `up` would create (AWS: Pulumi program against a mock engine; on-prem: the Ansible run)."""
        loaded = load_checked(blueprint, show_warnings=not as_json)
        import pulumi

        from ..plan import plan

        try:
            result = plan(loaded)
        except pulumi.RunError as e:
            raise ClusterforgeError(f"{blueprint}: {e}") from None
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("clusterforge.ansible"):
                raise
            raise ToolMissingError(f"{blueprint}: on-prem plans need the clusterforge.ansible package "
                                   f"({e.name} is missing from this installation)") from None
        if isinstance(result, dict):  # on-prem: the Ansible plan
            if as_json:
                print(json.dumps(result, indent=2, sort_keys=False, default=str))
                return
            tree = Tree(f"[bold]ansible plan[/bold] {loaded.blueprint.name} (on-prem)")
            _dict_tree(tree, result)
            console.print(tree)
            return
        if as_json:
            print(json.dumps(result.to_json(), indent=2))
            return
        bp = loaded.blueprint
        where = f"aws {getattr(bp.target, 'region', '')} {getattr(bp.target, 'availability_zone', '')}".strip()
        custom = sum(1 for r in result.resources if r.custom)
        title = (f"[bold]plan[/bold] {bp.name} ({where}): {custom} cloud resources in "
                 f"{len(result.resources) - custom} components/providers — offline, mock engine, {result.seconds:.2f} s")
        out = console if console.is_terminal else Console(highlight=False, width=200)  # pipes: no cropping
        out.print(render_tree(result, title, show_all=show_all))
        out.print(_counts_table(result))
        if result.outputs:
            out.print("[bold]stack outputs:[/bold] " + ", ".join(sorted(result.outputs)))
