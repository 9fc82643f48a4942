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

Every group variable is a field of :func:`blueprints.settings.node_settings` mapped onto the role's
prefixed variable (see :func:`role_vars`); nothing is re-derived here. The only values read from the
blueprint directly are declared, not derived: the opensm priority, the DOCA-OFED / Kata / gVisor
versions, the IPoIB subnet (host addresses are assigned in host order) and the orchestrator kind.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from blueprints import LoadedBlueprint
from blueprints.models import Blueprint, Host, InfinibandNetwork, NodeGroup
from blueprints.settings import NodeSettings, ipoib_addresses, node_settings

from ..errors import ClusterforgeError, UsageError

__all__ = [
    "ROLES_DIR",
    "ROLE_ORDER",
    "group_name",
    "inventory_data",
    "ipoib_addresses",
    "plan_ansible",
    "render_ansible",
    "role_vars",
    "roles_for",
]

ROLE_ORDER = (
    "host_tuning",
    "rdma",
    "nvidia_driver",
    "nvme_scratch",
    "lustre_client",
    "nfs_client",
    "container_runtime",
    "sandbox",
    "validation_tools",
    "kernel_updates",
)
"""Every role in ``roles/``, in the order ``site.yml`` runs them. ``rdma`` runs before ``nvidia_driver``:
with DOCA-OFED the driver's modules (nvidia-peermem) must be built against OFED's ``ib_core``, not the
inbox one (https://docs.nvidia.com/networking/display/mlnxofedv24010331/gpudirect+rdma).
``kernel_updates`` runs last, after every role that installs kernel packages or modules."""

ROLES_DIR = Path(os.environ.get("CLUSTERFORGE_ROLES_DIR", Path(__file__).resolve().parents[2] / "roles"))
"""The repository's ``roles/`` directory (``CLUSTERFORGE_ROLES_DIR`` overrides it)."""

_MARKER = ".clusterforge-rendered"
"""File that marks a ``roles/`` directory as written by :func:`render_ansible` (safe to replace)."""

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

[connection]
pipelining = True

[ssh_connection]
pipelining = True
ssh_args = -o ControlMaster=auto -o ControlPersist=60s
"""


def group_name(name: str) -> str:
    """Inventory group of a node group: the DNS-label name with ``-`` replaced by ``_`` (valid Ansible name)."""
    return name.replace("-", "_")


def roles_for(bp: Blueprint, s: NodeSettings) -> list[str]:
    """The Ansible roles a node group with settings ``s`` gets, in :data:`ROLE_ORDER`.

    host_tuning: every host. nvidia_driver: GPU hosts whose GPUs are not passed through.
    rdma: RDMA fabrics, the opensm host, and compute groups with NCCL settings (``/etc/nccl.conf``).
    nvme_scratch / lustre_client / nfs_client: when declared. container_runtime: GPU hosts, Kata / gVisor
    sandboxes and every node of a Kubernetes cluster. sandbox: non-container runtimes or passthrough.
    validation_tools: compute groups. kernel_updates: hosts with out-of-tree modules or a kernel hold.
    """
    wanted = {
        "host_tuning": True,
        "nvidia_driver": s.install_gpu_driver,
        "rdma": s.rdma or s.opensm or (bool(s.nccl_env) and s.role == "compute"),
        "nvme_scratch": s.scratch is not None,
        "lustre_client": any(m.source for m in s.lustre),
        "nfs_client": bool(s.nfs),
        "container_runtime": s.gpu_count > 0 or s.sandbox.runtime in ("kata", "gvisor")
        or bp.orchestrator.kind == "kubernetes",
        "sandbox": s.sandbox.runtime != "container" or s.sandbox.gpu_passthrough,
        "validation_tools": s.role == "compute",
        "kernel_updates": bool(s.out_of_tree_modules or s.kernel_hold_packages),
    }
    return [r for r in ROLE_ORDER if wanted[r]]


def role_vars(bp: Blueprint, s: NodeSettings, role: str) -> dict[str, Any]:
    """The prefixed variables of ``role`` for a node group with settings ``s``.

    Returns ``{variable: value}`` with plain YAML types (str, int, bool, list, dict). Units follow the
    settings model: ``*_kib`` KiB, ``*_gib`` GiB, ``*_mtu`` bytes. Raises ``KeyError`` for an unknown role.
    """
    if role == "kernel_updates":
        return {
            "kernel_updates_mode": s.kernel_updates or "",
            "kernel_updates_hold_packages": list(s.kernel_hold_packages),
            "kernel_updates_unattended_blacklist": list(s.kernel_hold_blacklist),
            "kernel_updates_modules": list(s.out_of_tree_modules),
        }
    if role == "host_tuning":
        return {
            "host_tuning_memlock_unlimited": s.memlock_unlimited,
            "host_tuning_sysctls": dict(s.sysctls),
            "host_tuning_hugepages_2m": s.hugepages_2m,
            "host_tuning_cpu_governor": s.cpu_governor,
            "host_tuning_kernel_cmdline": list(s.kernel_cmdline),
            "host_tuning_disable_acs": s.disable_acs,
        }
    if role == "nvidia_driver":
        v = {
            "nvidia_driver_branch": s.driver_branch,
            "nvidia_driver_version": s.driver_version or "",
            "nvidia_driver_open_kernel_modules": s.driver_open_kernel_modules,
            "nvidia_driver_fabric_manager": s.fabric_manager,
            "nvidia_driver_dcgm": s.dcgm,
        }
        p = s.gpu_packages
        if p is not None:
            v.update({
                "nvidia_driver_cuda_repo_base_url": p.repo_base_url,
                "nvidia_driver_cuda_repo_dist": p.repo_dist,
                "nvidia_driver_cuda_repo_arch": dict(p.repo_arch),
                "nvidia_driver_cuda_repo_key_file": p.repo_key_file,
                "nvidia_driver_packages": list(p.packages),
                "nvidia_driver_hold": list(p.hold),
                "nvidia_driver_apt_pin_packages": list(p.apt_pin_packages),
                "nvidia_driver_secure_boot_packages": list(p.secure_boot_packages),
                "nvidia_driver_secure_boot_hold": list(p.secure_boot_hold),
                "nvidia_driver_services": list(p.services),
                "nvidia_driver_fabricmanager_config": p.fabricmanager_config or "",
                "nvidia_driver_fabricmanager_settings": {p.fabric_mode[0]: p.fabric_mode[1]} if p.fabric_mode else {},
            })
        return v
    if role == "rdma":
        v: dict[str, Any] = {
            "rdma_fabric": s.fabric,
            "rdma_devices": list(s.rdma_devices),
            "rdma_nccl_env": dict(s.nccl_env),
            "rdma_gpudirect": s.gpudirect_rdma or "none",
            "rdma_opensm": s.opensm,
            "rdma_ipoib": s.ipoib,
        }
        net = bp.network
        if s.opensm and isinstance(net, InfinibandNetwork):
            v["rdma_opensm_priority"] = net.infiniband.subnet_manager.priority
        if s.ipoib and s.ipoib_mode:
            v["rdma_ipoib_mode"] = s.ipoib_mode
        if s.roce is not None:
            v.update({
                "rdma_roce_interfaces": list(s.roce.interfaces),
                "rdma_roce_trust": s.roce.trust,
                "rdma_roce_flow_control": s.roce.flow_control or "none",
                "rdma_roce_pfc_priority": s.roce.pfc_priority,
                "rdma_roce_pfc_vector": s.roce.pfc_vector,
                "rdma_roce_dscp": s.roce.dscp,
                "rdma_roce_ecn": s.roce.ecn,
                "rdma_roce_mtu": s.roce.mtu or 0,
                "rdma_roce_gid_index": "discover" if s.roce.gid_index == "discover" else "",
            })
        if bp.software.doca_ofed:
            v["rdma_doca_ofed_version"] = bp.software.doca_ofed
        return v
    if role == "nvme_scratch":
        sc = s.scratch
        if sc is None:
            return {}
        return {
            "nvme_scratch_mount": sc.mount,
            "nvme_scratch_filesystem": sc.filesystem,
            "nvme_scratch_raid": sc.raid,
            "nvme_scratch_chunk_kib": sc.chunk_kib,
            "nvme_scratch_mount_options": list(sc.mount_options),
            "nvme_scratch_md_device": sc.md_device,
            "nvme_scratch_md_name": Path(sc.md_device).name,
            "nvme_scratch_devices": list(sc.by_id),
            "nvme_scratch_expected_drives": sc.expected_drives or 0,
            "nvme_scratch_discovery": sc.discovery,
            "nvme_scratch_wipe_signatures": sc.wipe_signatures,
        }
    if role == "lustre_client":
        mounts = [m for m in s.lustre if m.source]  # FSx mounts (source filled at deploy time) are cloud-only
        return {
            "lustre_client_mounts": [
                {"name": m.name, "mount": m.mount, "source": m.source, "options": list(m.options),
                 "stripes": [dict(st) for st in m.stripes]}
                for m in mounts
            ],
            "lustre_client_lnet_networks": ",".join(dict.fromkeys(m.lnet_networks for m in mounts)),
            "lustre_client_lnet_route_to": next((m.lnet_route_to for m in mounts if m.lnet_route_to), ""),
            "lustre_client_packages": list(s.lustre_client_packages),
        }
    if role == "nfs_client":
        return {
            "nfs_client_mounts": [
                {"name": m.name, "mount": m.mount, "source": m.source, "version": m.version, "options": list(m.options)}
                for m in s.nfs
            ],
        }
    if role == "container_runtime":
        sb = s.sandbox
        return {
            "container_runtime_default_runtime": s.container_default_runtime,
            "container_runtime_nvidia_runtime": s.container_default_runtime == "nvidia",
            "container_runtime_nvidia_toolkit_version": s.container_toolkit,
            "container_runtime_nvidia_toolkit_packages": list(s.container_toolkit_packages),
            "container_runtime_nvidia_toolkit_repo_url": s.container_toolkit_repo_url,
            "container_runtime_kata_runtime_class": (sb.runtime_class or "") if sb.runtime == "kata" else "",
            "container_runtime_gvisor_runtime_class": (sb.runtime_class or "") if sb.runtime == "gvisor" else "",
        }
    if role == "sandbox":
        sb = s.sandbox
        v = {
            "sandbox_runtime": sb.runtime,
            "sandbox_gpu_passthrough": sb.gpu_passthrough,
            "sandbox_runtime_class": sb.runtime_class or "",
            "sandbox_gpu_count": s.gpu_count,
            "sandbox_kata_version": bp.software.kata,
            "sandbox_kata_release_url": s.kata_release_url,
            "sandbox_gvisor_release": s.gvisor_release,
            "sandbox_gvisor_release_url": s.gvisor_release_url,
            "sandbox_vfio_nvswitches": sb.nvswitch_plan != "shared-nvswitch",
            "sandbox_kata_pcie_root_ports": sb.pcie_root_ports or 0,
        }
        if s.kata_tarball:
            v["sandbox_kata_tarball"] = s.kata_tarball
        if sb.vm_vcpus is not None:
            v["sandbox_vm_vcpus"] = sb.vm_vcpus
        if sb.vm_memory_gib is not None:
            v["sandbox_vm_memory_gib"] = sb.vm_memory_gib
        if sb.vm_gpus_per_vm is not None:
            v["sandbox_vm_gpus_per_vm"] = sb.vm_gpus_per_vm
        return v
    if role == "validation_tools":
        return {"validation_tools_payload_src": "{{ playbook_dir }}/files/validate"}
    raise KeyError(role)


def _connection_vars(h: Host) -> dict[str, Any]:
    v: dict[str, Any] = {"ansible_host": h.address}
    if h.connection == "local":
        v["ansible_connection"] = "local"
        v["ansible_python_interpreter"] = "{{ ansible_playbook_python }}"
    return v


def _check_names(bp: Blueprint) -> None:
    seen: dict[str, str] = {}
    for g in bp.node_groups:
        for h in g.hosts:
            if h.name in seen and seen[h.name] != g.name:
                raise ClusterforgeError(
                    f"host {h.name} is in node groups {seen[h.name]} and {g.name}: a host belongs to one node group "
                    "(its variables come from that group) — remove it from one of them")
            seen[h.name] = g.name
    reserved = {f"role_{r}" for r in ("compute", "login", "controller", "storage")} | {f"with_{r}" for r in ROLE_ORDER}
    reserved |= {"all", "ungrouped"}
    for g in bp.node_groups:
        if group_name(g.name) in reserved:
            raise ClusterforgeError(
                f"node group `{g.name}` clashes with the inventory group `{group_name(g.name)}` clusterforge "
                "generates — rename the node group")


def _onprem_groups(bp: Blueprint) -> list[tuple[NodeGroup, NodeSettings, list[str]]]:
    out = []
    for g in bp.node_groups:
        if not g.hosts:
            continue
        s = node_settings(bp, g)
        out.append((g, s, roles_for(bp, s)))
    return out


def inventory_data(loaded: LoadedBlueprint) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(inventory, group_vars)`` of an on-prem blueprint as plain data.

    ``inventory`` is the YAML inventory (``{"all": {"vars": ..., "children": ...}}``); ``group_vars``
    maps each node group's inventory group to its variables. Raises :class:`UsageError` for AWS
    blueprints and :class:`ClusterforgeError` for host/group name clashes.
    """
    bp = loaded.blueprint
    if bp.target.provider != "onprem":
        raise UsageError(f"`{bp.name}` targets {bp.target.provider}: the Ansible inventory is for on-prem blueprints")
    _check_names(bp)
    ssh = bp.target.ssh
    all_vars: dict[str, Any] = {
        "clusterforge_blueprint": bp.name,
        "ansible_user": ssh.user,
        "ansible_port": ssh.port,
    }
    if ssh.private_key_file:
        all_vars["ansible_ssh_private_key_file"] = ssh.private_key_file  # a path, never key material
    all_vars["ansible_become"] = ssh.become
    ipoib = ipoib_addresses(bp)
    children: dict[str, Any] = {}
    by_role: dict[str, list[str]] = {}
    by_node_role: dict[str, list[str]] = {}
    group_vars: dict[str, dict[str, Any]] = {}
    for g, s, roles in _onprem_groups(bp):
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
            gv.update(role_vars(bp, s, r))
        group_vars[gname] = gv
    for name, members in by_node_role.items():
        children[name] = {"children": {m: None for m in members}}
    for r in ROLE_ORDER:
        members = by_role.get(f"with_{r}", [])
        children[f"with_{r}"] = {"children": {m: None for m in members}} if members else {}
    return {"all": {"vars": all_vars, "children": children}}, group_vars


def _yaml() -> YAML:
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.sort_base_mapping_type_on_output = False  # keep role order, not alphabetical
    return y


def _dump(data: Any, header: str) -> str:
    buf = io.StringIO()
    _yaml().dump(data, buf)
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
        if not (dest / _MARKER).exists():
            raise UsageError(f"{dest} exists and was not written by clusterforge — choose another output directory")
        shutil.rmtree(dest)
    shutil.copytree(ROLES_DIR, dest, ignore=shutil.ignore_patterns("site.yml", "__pycache__", "*.pyc", ".*"))
    (dest / _MARKER).write_text("Written by `clusterforge render`; replaced on every render.\n")
    return dest


def _copy_payloads(out_dir: Path) -> list[Path]:
    try:
        from validate.payloads import PAYLOAD_DIR, PAYLOAD_FILES
    except ImportError:  # the validation package is optional for rendering
        return []
    dest = out_dir / "files" / "validate"
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name in PAYLOAD_FILES:
        src = Path(PAYLOAD_DIR) / name
        if src.is_file():
            written.append(_write(dest / name, src.read_text()))
    return written


def render_ansible(loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
    """Write the Ansible run of ``loaded`` into ``out_dir``; returns the paths written.

    Returns ``[]`` (and writes nothing) for AWS blueprints: their nodes are configured by cloud-init.
    The list holds ``ansible.cfg``, ``inventory.yml``, every ``group_vars/*.yml``, ``site.yml``, the
    ``roles`` directory and the payload files. Files whose content is unchanged are not rewritten.
    Raises :class:`ClusterforgeError` when the roles are missing or names clash, :class:`UsageError`
    when ``out_dir/roles`` exists and was not written by clusterforge.
    """
    bp = loaded.blueprint
    if bp.target.provider != "onprem":
        return []
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
