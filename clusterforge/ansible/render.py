"""Render an on-prem blueprint into an Ansible run: inventory, group_vars, site.yml, roles, ansible.cfg.

Layout written by :func:`render_ansible` into ``out_dir`` (run by hand with
``cd out_dir && ansible-playbook -i inventory.yml site.yml``)::

    ansible.cfg                 roles_path = roles, smart fact gathering, host key checking on
    inventory.yml               hosts with address and connection vars; groups (see below)
    group_vars/<group>.yml      one per node group: the roles' prefixed variables
    site.yml                    copy of roles/site.yml (one play per role, on group ``with_<role>``)
    roles/<role>/...            copy of the repository's roles (the directory is self-contained)
    files/validate/*.py         the validation payloads (validation_tools copies them to the nodes)

Inventory groups: one per node group (the name with ``-`` turned into ``_``), ``role_<role>`` per
node role (``role_compute``, ``role_controller`` ...) and ``with_<ansible role>`` per Ansible role,
whose children are the node groups that get that role. Connection variables are the address, the
SSH user, port, become flag and the private key *path* from ``target.ssh`` (never key contents);
hosts with ``connection: local`` use Ansible's local connection.

Everything comes from the resolved cluster (``loaded.cluster``, :mod:`blueprints.resolved`): every
group variable is a field of the group's node settings mapped onto the role's prefixed variable by
:func:`blueprints.role_vars.node_role_vars` (the mapping the cloud user data renders the roles'
templates with), and the hosts' IPoIB addresses are the cluster's IPoIB assignment; nothing is
re-derived or re-checked here (the rules did that, with positions).
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter

from blueprints import LoadedBlueprint
from blueprints.models import Blueprint, Host, NodeGroup, OnpremTarget
from blueprints.naming import inventory_group
from blueprints.resolved import ResolvedCluster
from blueprints.role_templates import ANSIBLE_MANAGED, ROLES_DIR
from blueprints.role_vars import ROLE_ORDER, node_role_vars, roles_for
from blueprints.settings import NodeSettings
from blueprints.values import AnsibleExpression

from ..errors import ClusterforgeError, UsageError

__all__ = [
    "ROLES_DIR",
    "ROLE_ORDER",
    "group_name",
    "inventory_data",
    "node_role_vars",
    "plan_ansible",
    "render_ansible",
    "roles_for",
]

RENDERED_MARKER = ".clusterforge-rendered"
"""File that marks a ``roles/`` directory as written by :func:`render_ansible` (safe to replace; ``clusterforge
render`` refuses to write into one without it)."""

ANSIBLE_CFG = """\
# Rendered by clusterforge; ansible-playbook reads it when run from this directory.
[defaults]
roles_path = roles
inventory = inventory.yml
interpreter_python = auto_silent
gathering = smart
host_key_checking = True
retry_files_enabled = False
forks = 50
callback_result_format = yaml
ansible_managed = {ANSIBLE_MANAGED}

[connection]
pipelining = True

[ssh_connection]
pipelining = True
ssh_args = -o ControlMaster=auto -o ControlPersist=60s
""".replace("{ANSIBLE_MANAGED}", ANSIBLE_MANAGED)


def group_name(name: str) -> str:
    """Inventory group of a node group: the DNS-label name with ``-`` replaced by ``_`` (valid Ansible name)."""
    return inventory_group(name)


def _connection_vars(h: Host) -> dict[str, Any]:
    v: dict[str, Any] = {"ansible_host": h.address}
    if h.connection == "local":
        v["ansible_connection"] = "local"
        v["ansible_python_interpreter"] = AnsibleExpression("{{ ansible_playbook_python }}")
    return v


def _onprem_groups(cluster: ResolvedCluster) -> list[tuple[NodeGroup, NodeSettings, list[str]]]:
    return [(r.group, r.settings, roles_for(cluster.blueprint, r.settings)) for r in cluster.groups if r.group.hosts]


def onprem_target(bp: Blueprint) -> OnpremTarget:
    """``bp.target`` as the on-prem settings (SSH, OS). The target registry hands this module on-prem
    blueprints only; another caller with a blueprint of another provider gets :class:`UsageError`."""
    target = bp.target
    if not isinstance(target, OnpremTarget):
        raise UsageError(f"`{bp.name}` targets {target.provider}: the Ansible inventory is for on-prem blueprints")
    return target


def inventory_data(loaded: LoadedBlueprint) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(inventory, group_vars)`` of an on-prem blueprint as plain data.

    ``inventory`` is the YAML inventory (``{"all": {"vars": ..., "children": ...}}``); ``group_vars``
    maps each node group's inventory group to its variables. Raises :class:`UsageError` for AWS
    blueprints. Host and inventory group names are the rules' business (``host-unique``,
    ``inventory-group-name``): ``loaded`` is a checked blueprint.
    """
    bp = loaded.blueprint
    target = onprem_target(bp)
    cluster = loaded.cluster
    ssh = target.ssh
    all_vars: dict[str, Any] = {
        "clusterforge_blueprint": bp.name,
        "ansible_user": ssh.user,
        "ansible_port": ssh.port,
    }
    if ssh.private_key_file:
        all_vars["ansible_ssh_private_key_file"] = ssh.private_key_file  # a path, never key material
    all_vars["ansible_become"] = ssh.become
    ipoib = cluster.ipoib.addresses
    children: dict[str, Any] = {}
    by_role: dict[str, list[str]] = {}
    by_node_role: dict[str, list[str]] = {}
    group_vars: dict[str, dict[str, Any]] = {}
    for g, s, roles in _onprem_groups(cluster):
        gname = group_name(g.name)
        hosts: dict[str, Any] = {}
        for h in g.hosts:
            hv = _connection_vars(h)
            if h.name in ipoib:
                hv["rdma_ipoib_interfaces"] = ipoib[h.name]
            hosts[h.name] = hv
        children[gname] = {"hosts": hosts}
        by_node_role.setdefault(f"role_{g.role}", []).append(gname)
        for r in roles:
            by_role.setdefault(f"with_{r}", []).append(gname)
        gv: dict[str, Any] = {"clusterforge_node_group": g.name, "clusterforge_node_role": g.role}
        for r in roles:
            gv.update(node_role_vars(s, r))
        group_vars[gname] = gv
    for name, members in by_node_role.items():
        children[name] = {"children": {m: None for m in members}}
    for r in ROLE_ORDER:
        members = by_role.get(f"with_{r}", [])
        children[f"with_{r}"] = {"children": {m: None for m in members}} if members else {}
    return {"all": {"vars": all_vars, "children": children}}, group_vars


class _Unsafe(str):
    """A string value written as ``!unsafe``: Ansible never templates it
    (https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_advanced_syntax.html#unsafe-or-raw-strings)."""


class _Representer(SafeRepresenter):
    """ruamel's safe representer plus ``!unsafe`` strings (a subclass: the tag is not added to ruamel's own)."""


_Representer.add_representer(_Unsafe, lambda r, v: r.represent_scalar("!unsafe", str(v)))


def as_data(value: Any) -> Any:
    """``value`` (YAML data: mappings, lists, scalars) with every string value marked ``!unsafe`` for Ansible,
    except the :class:`~blueprints.role_templates.AnsibleExpression` values clusterforge writes itself. Mapping
    keys stay plain (variable names; Ansible does not template keys). Blueprint values are data: a value that
    holds ``{{ lookup('pipe', ...) }}`` reaches the roles as those characters (``docs/security.md``)."""
    if isinstance(value, AnsibleExpression):
        return str(value)
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, dict):
        return {k: as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v) for v in value]
    return value


def _yaml() -> YAML:
    y = YAML(typ="safe", pure=True)
    y.Representer = _Representer
    y.default_flow_style = False
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.sort_base_mapping_type_on_output = False  # keep role order, not alphabetical
    return y


def _dump(data: Any, header: str) -> str:
    buf = io.StringIO()
    _yaml().dump(as_data(data), buf)
    text = buf.getvalue().replace(": null\n", ":\n")
    return f"---\n{header}{text}"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _copy_roles(out_dir: Path) -> Path:
    if not (ROLES_DIR / "site.yml").is_file():
        raise ClusterforgeError(f"the Ansible roles are not at {ROLES_DIR} — run from a clusterforge checkout or set "
                                "CLUSTERFORGE_ROLES_DIR to its roles/ directory")
    dest = out_dir / "roles"
    if dest.exists():
        if not (dest / RENDERED_MARKER).exists():
            raise UsageError(f"{dest} exists and was not written by clusterforge — choose another output directory")
        shutil.rmtree(dest)
    shutil.copytree(ROLES_DIR, dest, ignore=shutil.ignore_patterns("site.yml", "__pycache__", "*.pyc", ".*"))
    (dest / RENDERED_MARKER).write_text("Written by `clusterforge render`; replaced on every render.\n")
    return dest


def _copy_payloads(out_dir: Path) -> list[Path]:
    try:
        from validate.suites import payload_files
    except ImportError:  # the validation package is optional for rendering
        return []
    dest = out_dir / "files" / "validate"
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, src in payload_files().items():  # every registered suite's payload files
        if src.is_file():
            written.append(_write(dest / name, src.read_text()))
    return written


def render_ansible(loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
    """Write the Ansible run of ``loaded`` into ``out_dir``; returns the paths written.

    The list holds ``ansible.cfg``, ``inventory.yml``, every ``group_vars/*.yml``, ``site.yml``, the
    ``roles`` directory and the payload files. Files whose content is unchanged are not rewritten.
    Raises :class:`ClusterforgeError` when the roles are missing, :class:`UsageError`
    when ``out_dir/roles`` exists and was not written by clusterforge, or for a blueprint of another
    provider than ``onprem`` (nothing is written then).
    """
    bp = loaded.blueprint
    inventory, group_vars = inventory_data(loaded)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    source = Path(loaded.file).name
    header = f"# Rendered by clusterforge from {source} (blueprint {bp.name}); re-render instead of editing.\n"
    written = [_write(out_dir / "ansible.cfg", ANSIBLE_CFG)]
    written.append(_write(out_dir / "inventory.yml", _dump(inventory, header)))
    gv_dir = out_dir / "group_vars"
    for old in gv_dir.glob("*.yml") if gv_dir.is_dir() else []:
        if old.stem not in group_vars and old.read_text().startswith("---\n# Rendered by clusterforge"):
            old.unlink()  # a node group that no longer exists
    for gname, gv in group_vars.items():
        written.append(_write(gv_dir / f"{gname}.yml", _dump(gv, header)))
    written.append(_write(out_dir / "site.yml", (ROLES_DIR / "site.yml").read_text()))
    written.append(_copy_roles(out_dir))
    written.extend(_copy_payloads(out_dir))
    return written


def _hosts(inventory: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    for gname, g in inventory["all"]["children"].items():
        for host, hv in (g.get("hosts") or {}).items():
            yield gname, host, hv


def plan_ansible(loaded: LoadedBlueprint) -> dict[str, Any]:
    """Every host of the Ansible run, offline: ``{"hosts": [{"name", "address", "groups", "roles", "vars"}]}``.

    ``groups`` lists every inventory group of the host (node group, ``role_<role>``, ``with_<role>``),
    ``roles`` the Ansible roles it gets in run order, ``vars`` the merged variables (inventory ``all``
    vars, group_vars, host vars — the precedence Ansible applies). Raises :class:`UsageError` for AWS.
    """
    inventory, group_vars = inventory_data(loaded)
    children = inventory["all"]["children"]
    member_of: dict[str, list[str]] = {}
    for parent, g in children.items():
        for child in (g.get("children") or {}):
            member_of.setdefault(child, []).append(parent)
    hosts = []
    for gname, host, hv in _hosts(inventory):
        parents = member_of.get(gname, [])
        roles = [r for r in ROLE_ORDER if f"with_{r}" in parents]
        merged = {**inventory["all"]["vars"], **group_vars[gname], **hv}
        hosts.append({
            "name": host,
            "address": hv["ansible_host"],
            "groups": [gname, *parents],
            "roles": roles,
            "vars": merged,
        })
    return {"hosts": hosts}
