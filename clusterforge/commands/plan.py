"""``clusterforge plan BLUEPRINT [--json] [--all]``: what ``up`` would create, offline.

AWS blueprints: the Pulumi program runs in-process against a mock engine
(:mod:`clusterforge.plan`) — no credentials, no network, no Pulumi CLI. The tree shows every
resource under its component with counts; ``--json`` prints
``{"resources": [{"type", "name", "parent", "inputs"}]}`` with engine (camelCase) property names.
On-prem blueprints: every host, role and variable of the Ansible run; the hosts of a node group that
differ only in some values (address ...) are shown once with those values per host, and lines
longer than the terminal are cut with a marker (``--all``: every host in full, nothing cut).
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


CUT_MARK = " …[+{n} chars, --all]"
"""Marker appended to every line of the on-prem plan that is cut to the terminal width."""


def _value_lines(value: Any, prefix: str) -> list[tuple[str, str]]:
    """``[(tree prefix, text)]`` of a JSON-like value: mappings as ``key: value`` lines, lists one item a
    line (hosts and roles labelled by ``name``), nested values indented with tree guides."""
    out: list[tuple[str, str]] = []
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = []
        for i, v in enumerate(value):
            if isinstance(v, dict) and isinstance(v.get("name"), str):
                items.append((v["name"], {k: x for k, x in v.items() if k != "name"}))
            elif isinstance(v, (dict, list)):
                items.append((str(i), v))
            else:
                items.append(("", v))
    else:
        return [(prefix, json.dumps(value))]
    for n, (k, v) in enumerate(items):
        last = n == len(items) - 1
        guide, nxt = ("└── ", "    ") if last else ("├── ", "│   ")
        if isinstance(v, (dict, list)) and v:
            out.append((prefix + guide, k))
            out += _value_lines(v, prefix + nxt)
        elif k:
            out.append((prefix + guide, f"{k}: {json.dumps(v)}"))
        else:
            out.append((prefix + guide, v if isinstance(v, str) else json.dumps(v)))
    return out


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every scalar (and empty container) of ``value`` by its path."""
    if isinstance(value, dict) and value:
        out: dict[tuple[Any, ...], Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, (*path, k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, (*path, i)))
        return out
    return {path: value}


def _set_path(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for k in path[:-1]:
        value = value[k]
    value[path[-1]] = new


def group_identical_hosts(hosts: list[dict[str, Any]]) -> list[tuple[list[dict[str, Any]], list[tuple[Any, ...]]]]:
    """``[(hosts, differing leaf paths)]``: hosts of one node group whose plans have the same shape and differ
    only in some leaf values (address, ansible_host, IPoIB address ...) form one entry, in plan order."""
    groups: list[tuple[list[dict[str, Any]], list[tuple[Any, ...]]]] = []
    index: dict[tuple[Any, ...], int] = {}
    for h in hosts:
        body = {k: v for k, v in h.items() if k != "name"}
        leaves = _leaves(body)
        key = ((h.get("vars") or {}).get("clusterforge_node_group"), tuple(leaves))
        if key in index:
            members, _ = groups[index[key]]
            members.append(h)
        else:
            index[key] = len(groups)
            groups.append(([h], []))
    out = []
    for members, _ in groups:
        first = _leaves({k: v for k, v in members[0].items() if k != "name"})
        diff = [p for p in first if any(_leaves({k: v for k, v in m.items() if k != "name"})[p] != first[p]
                                        for m in members[1:])]
        out.append((members, diff))
    return out


def onprem_plan_lines(result: dict[str, Any], title: str, *, show_all: bool) -> list[str]:
    """The on-prem plan as text lines: identical hosts of a node group once (their differing values
    listed per host) unless ``show_all``; uncut (cutting is :func:`fit_lines`)."""
    import copy

    hosts = list(result.get("hosts") or [])
    entries: list[tuple[str, Any]] = []
    if show_all:
        entries = [(h["name"], {k: v for k, v in h.items() if k != "name"}) for h in hosts]
    else:
        for members, diff in group_identical_hosts(hosts):
            body = copy.deepcopy({k: v for k, v in members[0].items() if k != "name"})
            if len(members) == 1:
                entries.append((members[0]["name"], body))
                continue
            for path in diff:
                _set_path(body, path, "(per host, below)")
            per_host = {m["name"]: {".".join(str(x) for x in path): _leaves({k: v for k, v in m.items()
                                                                             if k != "name"})[path] for path in diff}
                        for m in members}
            body["per host"] = per_host
            names = ", ".join(m["name"] for m in members)
            entries.append((f"{names} ({len(members)} identical hosts)", body))
    lines = [title]
    for n, (label, body) in enumerate(entries):
        last = n == len(entries) - 1
        lines.append(("└── " if last else "├── ") + label)
        lines += [p + t for p, t in _value_lines(body, "    " if last else "│   ")]
    return lines


def fit_lines(lines: list[str], width: int | None) -> list[str]:
    """``lines`` cut to ``width`` characters, each cut line ending in :data:`CUT_MARK`; ``None``: uncut."""
    if width is None:
        return lines
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        keep = max(20, width - len(CUT_MARK.format(n=len(line))))
        out.append(line[:keep] + CUT_MARK.format(n=len(line) - keep))
    return out


def register(app: typer.Typer) -> None:
    """Add the ``plan`` verb to ``app``."""

    @app.command("plan")
    def plan_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print the planned resources as JSON."),
        show_all: bool = typer.Option(False, "--all", help="List every resource and every on-prem host in full "
                                      "(no collapsing, no cut values)."),
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
            hosts = result.get("hosts") or []
            shown = len(hosts) if show_all else len(group_identical_hosts(hosts))
            title = (f"ansible plan {loaded.blueprint.name} (on-prem): {len(hosts)} host(s)"
                     + ("" if show_all or shown == len(hosts) else
                        ", identical hosts of a node group shown once (--all lists every host in full)"))
            lines = onprem_plan_lines(result, title, show_all=show_all)
            width = None if show_all else (console.width if console.is_terminal else 200)
            for line in fit_lines(lines, width):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            return
        if as_json:
            print(json.dumps(result.to_json(), indent=2))
            return
        bp = loaded.blueprint
        where = f"aws {getattr(bp.target, 'region', '')} {getattr(bp.target, 'availability_zone', '')}".strip()
        custom = sum(1 for r in result.resources if r.custom)
        title = (f"[bold]plan[/bold] {bp.name} ({where}): {custom} cloud resources in "
                 f"{len(result.resources) - custom} components/providers — offline, mock engine, {result.seconds:.2f} s")
        # never crop: a terminal wraps long lines; runs of one type are collapsed with a marker instead
        out = Console(highlight=False, width=10_000, force_terminal=console.is_terminal, soft_wrap=True)
        out.print(render_tree(result, title, show_all=show_all))
        out.print(_counts_table(result))
        if result.outputs:
            out.print("[bold]stack outputs:[/bold] " + ", ".join(sorted(result.outputs)))
