"""The on-prem target: existing bare-metal hosts configured by the Ansible roles.

``plan`` lists every host with its groups, roles and variables (:func:`clusterforge.ansible.render.plan_ansible`);
``render`` writes the inventory, group_vars, site.yml and roles; ``up`` runs the site playbook through
ansible-runner (:func:`clusterforge.ansible.runner.run_site`); ``down`` has nothing to destroy.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blueprints.errors import ProvisionError, ToolMissingError, UsageError

from .base import DeployOptions, Plan, Target

if TYPE_CHECKING:
    from rich.console import Console

    from blueprints import LoadedBlueprint

    from ..cost import CostReport

__all__ = [
    "DEFAULT_ANSIBLE_DIR",
    "OnpremPlan",
    "OnpremTarget",
    "fit_lines",
    "group_identical_hosts",
    "onprem_plan_lines",
]

DEFAULT_ANSIBLE_DIR = Path(".clusterforge/ansible")
"""Where ``up`` writes the Ansible files of blueprint NAME (``DEFAULT_ANSIBLE_DIR / NAME``) unless ``-o``."""


def _ansible(module: str) -> Any:
    """``clusterforge.ansible.<module>``; :class:`ToolMissingError` when the on-prem package is not installed."""
    from importlib import import_module

    try:
        return import_module(f"clusterforge.ansible.{module}")
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("clusterforge.ansible"):
            raise
        raise ToolMissingError(f"on-prem targets need the clusterforge.ansible package ({e.name} is missing from "
                               "this installation)") from None


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



@dataclass
class OnpremPlan(Plan):
    """The Ansible run ``up`` would make: ``data`` is :func:`~clusterforge.ansible.render.plan_ansible`'s
    ``{"hosts": [{"name", "groups", "roles", "vars", ...}], ...}``."""

    blueprint: str
    data: dict[str, Any] = field(default_factory=dict)
    provider: str = "onprem"

    def to_json(self) -> dict[str, Any]:
        """The Ansible plan as JSON data (values JSON cannot hold are turned into strings)."""
        out: dict[str, Any] = json.loads(json.dumps(self.data, default=str))
        return out

    def show(self, console: Console, *, show_all: bool = False) -> None:
        """Every host, identical hosts of a node group once (``show_all``: each in full, nothing cut);
        lines longer than the terminal (200 characters off a terminal) end in :data:`CUT_MARK`."""
        hosts = self.data.get("hosts") or []
        shown = len(hosts) if show_all else len(group_identical_hosts(hosts))
        title = (f"ansible plan {self.blueprint} (on-prem): {len(hosts)} host(s)"
                 + ("" if show_all or shown == len(hosts) else
                    ", identical hosts of a node group shown once (--all lists every host in full)"))
        lines = onprem_plan_lines(self.data, title, show_all=show_all)
        width = None if show_all else (console.width if console.is_terminal else 200)
        for line in fit_lines(lines, width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


class OnpremTarget(Target):
    """``target.provider: onprem``: configure existing hosts over SSH (or locally) with the Ansible roles."""

    provider = "onprem"
    render_dir = "ansible"

    def plan(self, loaded: LoadedBlueprint) -> OnpremPlan:
        """Every host, role and variable of the Ansible run."""
        return OnpremPlan(blueprint=loaded.blueprint.name, data=_ansible("render").plan_ansible(loaded))

    def cost(self, loaded: LoadedBlueprint, plan: Plan | None = None, *, utilization: float = 1.0,
             prices: dict[str, Any] | None = None) -> CostReport:
        """The plan's hosts priced per node group: capital written off, power at ``utilization``, space, facility,
        support, and the comparison with the nearest catalogued cloud instance (:func:`clusterforge.cost.price_onprem`).
        ``plan``: the on-prem plan of ``loaded`` (made here when ``None``)."""
        from ..cost import price_onprem

        if plan is None:
            plan = self.plan(loaded)
        assert isinstance(plan, OnpremPlan)
        groups = {rg.name for rg in loaded.cluster.groups}
        hosts = {g: sum(1 for h in plan.data.get("hosts") or [] if g in (h.get("groups") or [])) for g in groups}
        return price_onprem(loaded, prices, utilization=utilization, hosts=hosts)

    def render(self, loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
        """``ansible.cfg``, ``inventory.yml``, ``group_vars/``, ``site.yml``, the roles and payloads
        (``ansible-playbook -i inventory.yml site.yml`` in ``out_dir``)."""
        written: list[Path] = _ansible("render").render_ansible(loaded, out_dir)
        return written

    def up(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        """Run the site playbook (``options.check``: check mode; ``tags`` / ``limit`` as Ansible's).
        A host with ``connection: local`` is this machine: without ``options.yes`` (or ``check``) it
        asks on a terminal and refuses with :class:`UsageError` elsewhere. ``preview`` and
        ``state_dir`` do not apply and are ignored."""
        from ..console import ok

        bp = loaded.blueprint
        local_hosts = [h.name for g in bp.node_groups for h in g.hosts if h.connection == "local"]
        if local_hosts and not options.check and not options.yes:
            # the roles change kernel parameters, limits and packages: never do that to the
            # control machine without an explicit yes
            if not sys.stdin.isatty():
                raise UsageError(f"{loaded.file}: host {local_hosts[0]} is this machine (connection: local); "
                                 "rerun with --yes to configure it, or --check to see what would change")
            import typer

            if not typer.confirm(f"{local_hosts[0]} is this machine: configure it as root (kernel cmdline, "
                                 "limits, packages)?", default=False):
                raise UsageError("not confirmed; nothing was changed (use --check to see what would change)")
        run_site = _ansible("runner").run_site
        out = options.output or DEFAULT_ANSIBLE_DIR / bp.name
        rc = run_site(loaded, out, check=options.check, tags=list(options.tags) or None, limit=options.limit)
        if rc != 0:
            raise ProvisionError(f"ansible run for `{bp.name}` failed (exit {rc}); the failed tasks are above")
        ok(f"{bp.name}: {'checked' if options.check else 'provisioned'} ({out})")

    def down(self, what: str, options: DeployOptions) -> None:
        """Always :class:`UsageError`: clusterforge does not uninstall what the roles configured."""
        raise UsageError(f"`{what}` is an on-prem blueprint: there is nothing to destroy on bare "
                         "metal (clusterforge does not uninstall what the Ansible roles configured)")

