"""The node settings mapped onto the Ansible roles' variables: one mapping for every path that
configures a node.

Bare metal puts these variables into the rendered ``group_vars`` (``clusterforge render``); the
cloud path renders the roles' own templates with the very same variables into user data
(:mod:`blueprints.role_templates`). Nothing here re-derives a setting from the blueprint or the catalog: each
variable is a field of :class:`blueprints.settings.NodeSettings` (the download and key pins included).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .models import Blueprint
from .settings import NodeSettings
from .values import AnsibleExpression
from .vendor import kata_tarball, kernel_spec, nvswitch_management_vpd, vendor_units

__all__ = ["ROLE_ORDER", "node_role_vars", "roles_for"]

ROLE_ORDER = (
    "host_tuning",
    "rdma",
    "nvidia_driver",
    "nvme_scratch",
    "lustre_client",
    "nfs_client",
    "container_runtime",
    "sandbox",
    "munge",
    "slurm_dbd",
    "slurm_controller",
    "slurm_node",
    "slurm_login",
    "enroot_pyxis",
    "nccl_stack",
    "validation_tools",
    "kernel_updates",
)
"""Every role in ``roles/``, in the order ``site.yml`` runs them. ``rdma`` runs before ``nvidia_driver``:
with DOCA-OFED the driver's modules (nvidia-peermem) must be built against OFED's ``ib_core``, not the
inbox one (https://docs.nvidia.com/networking/display/mlnxofedv24010331/gpudirect+rdma).
``kernel_updates`` runs last, after every role that installs kernel packages or modules. The Slurm roles run after the
driver (slurmd waits for the GPU device files): ``munge`` first (every daemon authenticates with it), ``slurm_dbd``
before ``slurm_controller`` (slurmctld registers with slurmdbd when it starts, https://slurm.schedmd.com/accounting.html),
the controller before the nodes and login hosts, ``enroot_pyxis`` last (pyxis builds against the installed Slurm).
``nccl_stack`` after the driver (it installs NCCL from the CUDA repository the driver role configures) and before
``validation_tools`` (whose payloads run the nccl-tests binaries it builds)."""


def roles_for(bp: Blueprint, s: NodeSettings) -> list[str]:
    """The Ansible roles a node group with settings ``s`` gets, in :data:`ROLE_ORDER`.

    host_tuning: every host. nvidia_driver: GPU hosts whose GPUs are not passed through.
    rdma: RDMA fabrics, the opensm host, and compute groups with NCCL settings (``/etc/nccl.conf``).
    nvme_scratch / lustre_client / nfs_client: when declared. container_runtime: GPU hosts, Kata / gVisor
    sandboxes and every node of a Kubernetes cluster. sandbox: non-container runtimes or passthrough.
    nccl_stack: training nodes outside Kubernetes (:attr:`NodeSettings.nccl_stack`).
    validation_tools: compute groups. kernel_updates: hosts with out-of-tree modules or a kernel hold.
    munge / slurm_*: the group's part in a Slurm cluster (:attr:`NodeSettings.slurm`): slurm_dbd and
    slurm_controller on the controller, slurm_node on compute groups, slurm_login on login groups, enroot_pyxis where
    jobs run or are submitted (when ``orchestrator.pyxis``).
    """
    compute = bp.group(s.group).compute
    wanted = {
        "host_tuning": True,
        "nvidia_driver": s.install_gpu_driver,
        "rdma": s.rdma or s.opensm or (bool(s.nccl_env) and compute),
        "nvme_scratch": s.scratch is not None,
        "lustre_client": any(m.source for m in s.lustre),
        "nfs_client": bool(s.nfs),
        "container_runtime": s.gpu_count > 0 or s.sandbox.runtime in ("kata", "gvisor")
        or bp.orchestrator.kind == "kubernetes",
        "sandbox": s.sandbox.runtime != "container" or s.sandbox.gpu_passthrough,
        "munge": s.slurm is not None,
        "slurm_dbd": s.slurm is not None and s.slurm.accounting,
        "slurm_controller": s.slurm is not None and s.slurm.part == "controller",
        "slurm_node": s.slurm is not None and s.slurm.part == "node",
        "slurm_login": s.slurm is not None and s.slurm.part == "login",
        "enroot_pyxis": s.slurm is not None and s.slurm.pyxis,
        "nccl_stack": s.nccl_stack is not None,
        "validation_tools": compute,
        "kernel_updates": bool(s.out_of_tree_modules or s.kernel_hold_packages),
    }
    return [r for r in ROLE_ORDER if wanted[r]]


def node_role_vars(s: NodeSettings, role: str, *, lustre_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The prefixed variables of ``role`` that come from the settings ``s`` alone.

    This is what both paths share: the rendered ``group_vars`` and the
    cloud user data, which renders the roles' templates with it. Returns ``{variable: value}`` with
    plain YAML types (str, int, bool, list, dict). Units follow the settings model: ``*_kib`` KiB,
    ``*_gib`` GiB, ``*_mtu`` bytes. ``lustre_sources`` maps an FSx mount's name to its source
    (``<dns>@tcp:/<mount_name>``, known at deploy time); without one an FSx mount is left out of
    ``lustre_client_mounts``. Raises ``KeyError`` for an unknown role.
    """
    if role in SLURM_ROLES:
        return _slurm_role_vars(s, role)
    if role == "kernel_updates":
        return {
            "kernel_updates_mode": s.kernel_updates or "",
            "kernel_updates_hold_packages": list(s.kernel_hold_packages),
            "kernel_updates_unattended_blacklist": list(s.kernel_hold_blacklist),
            "kernel_updates_modules": list(s.out_of_tree_modules),
            # the boot-time module check runs before the daemons that need the modules (catalog names)
            "kernel_updates_before_units": [f"{vendor_units()[d]}.service" for d in ("persistenced", "fabricmanager", "lnet")],
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
        v: dict[str, Any] = {
            "nvidia_driver_branch": s.driver_branch,
            "nvidia_driver_version": s.driver_version or "",
            "nvidia_driver_open_kernel_modules": s.driver_open_kernel_modules,
            "nvidia_driver_fabric_manager": s.fabric_manager,
            "nvidia_driver_dcgm": s.dcgm,
            "nvidia_driver_kernel": kernel_spec(s.os),
        }
        p = s.gpu_packages
        if p is not None:
            v.update({
                "nvidia_driver_cuda_repo_base_url": p.repo_base_url,
                "nvidia_driver_cuda_repo_dist": p.repo_dist,
                "nvidia_driver_cuda_repo_arch": dict(p.repo_arch),
                "nvidia_driver_cuda_repo_key_file": p.repo_key_file,
                "nvidia_driver_cuda_repo_key_fingerprints": p.repo_key_fingerprints,
                "nvidia_driver_packages": list(p.packages),
                "nvidia_driver_dcgm_packages": list(p.dcgm_packages),
                "nvidia_driver_dcgm_legacy": list(p.dcgm_legacy),
                "nvidia_driver_hold": list(p.hold),
                "nvidia_driver_apt_pins": [pin.model_dump() for pin in p.apt_pins],
                "nvidia_driver_secure_boot_version": p.secure_boot_version or "",
                "nvidia_driver_secure_boot_packages": list(p.secure_boot_packages),
                "nvidia_driver_secure_boot_hold": list(p.secure_boot_hold),
                "nvidia_driver_secure_boot_apt_pins": [pin.model_dump() for pin in p.secure_boot_apt_pins],
                "nvidia_driver_secure_boot_unavailable": p.secure_boot_unavailable or "",
                "nvidia_driver_services": list(p.services),
                "nvidia_driver_persistenced_service": p.persistenced_service,
                "nvidia_driver_fabricmanager_service": p.fabricmanager_service or "",
                "nvidia_driver_fabricmanager_config": p.fabricmanager_config or "",
                "nvidia_driver_fabricmanager_settings": {p.fabric_mode[0]: p.fabric_mode[1]} if p.fabric_mode else {},
                "nvidia_driver_fabricmanager_modules": list(p.fabricmanager_modules),
                "nvidia_driver_imex_service": p.imex_service or "",
                "nvidia_driver_imex_config": p.imex_config or "",
                "nvidia_driver_imex_node_config_key": p.imex_node_config_key or "",
                "nvidia_driver_imex_nodes_config": p.imex_nodes_config or "",
                "nvidia_driver_imex_nodes": list(s.imex_nodes),
            })
        return v
    if role == "rdma":
        v = {
            "rdma_fabric": s.fabric,
            "rdma_devices": list(s.rdma_devices),
            "rdma_nccl_env": dict(s.nccl_env),
            "rdma_gpudirect": s.gpudirect_rdma or "none",
            "rdma_opensm": s.opensm,
            "rdma_ipoib": s.ipoib,
        }
        if s.opensm_priority is not None:
            v["rdma_opensm_priority"] = s.opensm_priority
        if s.opensm:  # never a second subnet manager on an NVSwitch management port (NVLSM's)
            v["rdma_opensm_exclude_vpd"] = [nvswitch_management_vpd()]
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
        if s.doca_ofed:
            v["rdma_doca_ofed_version"] = s.doca_ofed
        if s.doca_repository is not None:
            d = s.doca_repository
            v.update({
                "rdma_doca_repo_base_url": d.base_url,
                "rdma_doca_dist": d.dist,
                "rdma_doca_arch": dict(d.arch),
                "rdma_doca_key_file": d.key_file,
                "rdma_doca_key_fingerprints": d.key_fingerprints,
                "rdma_doca_packages": list(d.packages),
                "rdma_doca_previous_ofed": dict(d.previous_ofed),
                "rdma_doca_dkms": d.dkms,
                "rdma_doca_rebuild_dkms": list(d.rebuild_dkms),
                "rdma_doca_openibd_service": d.openibd_service,
                "rdma_kernel": kernel_spec(s.os),
            })
        return v
    if role == "nvme_scratch":
        sc = s.scratch
        if sc is None:  # no scratch declared: the role's script task is skipped (its `when`)
            return {"nvme_scratch_mount": ""}
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
        sources = {m.name: m.source for m in s.lustre if m.source} | dict(lustre_sources or {})
        mounts = [m for m in s.lustre if m.name in sources]  # FSx: the source is known at deploy time only
        return {
            "lustre_client_mounts": [
                {"name": m.name, "mount": m.mount, "source": sources[m.name], "options": list(m.options),
                 "stripes": [dict(st) for st in m.stripes]}
                for m in mounts
            ],
            "lustre_client_lnet_networks": ",".join(dict.fromkeys(m.lnet_networks for m in mounts)),
            "lustre_client_lnet_route_to": next((m.lnet_route_to for m in mounts if m.lnet_route_to), ""),
            "lustre_client_lnet_service": vendor_units()["lnet"],
            # client tunings (NodeSettings.lustre_tuning): module options and lctl parameters, where any apply
            **({"lustre_client_module_options": {m: dict(o) for m, o in s.lustre_tuning.module_options.items()},
                "lustre_client_params": dict(s.lustre_tuning.params)} if s.lustre_tuning else {}),
            "lustre_client_packages": list(s.lustre_client_packages),
            "lustre_client_kernel": kernel_spec(s.os),
            **({} if s.lustre_client_repo is None else {  # on premises the site names its repository
                "lustre_client_apt_repo_url": s.lustre_client_repo.url,
                "lustre_client_apt_repo_key_url": s.lustre_client_repo.key_url,
                "lustre_client_apt_repo_suite": s.lustre_client_repo.suite,
                "lustre_client_apt_repo_components": list(s.lustre_client_repo.components),
            }),
            **({"lustre_client_dnf_packages": list(s.lustre_client_dnf_packages)} if s.lustre_client_dnf_packages else {}),
            # the repository key's pinned fingerprints (Amazon's FSx repository's, when the catalog pins any)
            **({"lustre_client_apt_repo_key_fingerprints": s.lustre_client_repo.key_fingerprints}
               if s.lustre_client_repo is not None and s.lustre_client_repo.key_fingerprints else {}),
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
            "container_runtime_nvidia_toolkit_key_fingerprints": s.container_toolkit_key_fingerprints,
            "container_runtime_nvidia_persistenced_service": vendor_units()["persistenced"],
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
            "sandbox_kata_version": sb.kata_version,
            "sandbox_kata_release_url": sb.kata_release_url,
            "sandbox_gvisor_release": sb.gvisor_release,
            "sandbox_gvisor_release_url": sb.gvisor_release_url,
            # the catalog's integrity pins: the sandbox script refuses a download that has none
            "sandbox_kata_sha256": sb.kata_sha256,
            "sandbox_gvisor_sha512": sb.gvisor_sha512,
            "sandbox_vfio_nvswitches": sb.nvswitch_plan != "shared-nvswitch",
            "sandbox_kata_pcie_root_ports": sb.pcie_root_ports or 0,
        }
        if sb.kata_tarball:  # `{arch}`: the node's Debian architecture, filled in by the role's script
            v["sandbox_kata_tarball"] = kata_tarball(sb.kata_version, "{arch}")
        if sb.vm_vcpus is not None:
            v["sandbox_vm_vcpus"] = sb.vm_vcpus
        if sb.vm_memory_gib is not None:
            v["sandbox_vm_memory_gib"] = sb.vm_memory_gib
        if sb.vm_gpus_per_vm is not None:
            v["sandbox_vm_gpus_per_vm"] = sb.vm_gpus_per_vm
        return v
    if role == "nccl_stack":
        n = s.nccl_stack
        if n is None:
            return {}
        return {
            "nccl_stack_nccl_version": n.nccl,
            "nccl_stack_cuda": n.cuda,
            "nccl_stack_packages": list(n.packages),
            "nccl_stack_build_packages": list(n.build_packages),
            "nccl_stack_cuda_home": n.cuda_home,
            "nccl_stack_nccl_home": n.nccl_home,
            "nccl_stack_mpi_home": n.mpi_home,
            "nccl_stack_tests_version": n.tests_version,
            "nccl_stack_tests_url": n.tests_url,
            "nccl_stack_tests_sha256": n.tests_sha256,
            "nccl_stack_tests_dir": n.tests_dir,
            "nccl_stack_net_plugin": n.net_plugin,
            "nccl_stack_torch_version": n.torch or "",
            "nccl_stack_torch_index_url": n.torch_index_url,
            "nccl_stack_venv": n.venv,
            "nccl_stack_container_image": n.container_image or "",
            "nccl_stack_enroot_import": n.enroot_import,
            "nccl_stack_images_dir": n.images_dir,
        }
    if role == "validation_tools":
        return {"validation_tools_payload_src": AnsibleExpression("{{ playbook_dir }}/files/validate")}
    raise KeyError(role)



SLURM_ROLES = ("munge", "slurm_dbd", "slurm_controller", "slurm_node", "slurm_login", "enroot_pyxis")


def _slurm_role_vars(s: NodeSettings, role: str) -> dict[str, Any]:
    """The variables of the Slurm roles (:attr:`NodeSettings.slurm`); ``{}`` for a group without Slurm. Package
    names come from the catalog's ``slurm.packages``; file texts from :func:`blueprints.slurm.slurm_files`."""
    sl = s.slurm
    if sl is None:
        return {}
    pk = sl.packages
    if role == "munge":
        return {"munge_packages": list(pk["munge"]), "munge_key_host": sl.munge_key_host}
    if role == "slurm_dbd":
        return {
            "slurm_dbd_packages": list(pk["dbd"]) + (list(pk["database"]) if sl.local_database else []),
            "slurm_dbd_conf": sl.dbd_conf or "",
            "slurm_dbd_local_database": sl.local_database,
            "slurm_dbd_database": "slurm_acct_db",
            "slurm_dbd_database_user": "slurm",
            "slurm_dbd_cluster_name": sl.cluster_name,
            "slurm_dbd_password_file": sl.password_file,
        }
    if role == "slurm_controller":
        return {
            "slurm_controller_packages": list(pk["controller"]),
            "slurm_controller_files": dict(sl.files),
            "slurm_controller_state_dir": "/var/spool/slurmctld",
            "slurm_controller_accounting": sl.accounting,
        }
    if role == "slurm_node":
        return {
            "slurm_node_packages": list(pk["node"]),
            "slurm_node_files": dict(sl.files),
            "slurm_node_conf_server": sl.conf_server,
            "slurm_node_gpu_devices": list(sl.gpu_devices),
            "slurm_node_health": dict(sl.health),
        }
    if role == "slurm_login":
        return {"slurm_login_packages": list(pk["login"]), "slurm_login_files": dict(sl.files)}
    if role == "enroot_pyxis":
        return {
            "enroot_pyxis_build_packages": list(pk["pyxis_build"]),
            "enroot_pyxis_enroot_version": sl.enroot_version,
            "enroot_pyxis_enroot_debs": [dict(d) for d in sl.enroot_debs],
            "enroot_pyxis_pyxis_version": sl.pyxis_version,
            "enroot_pyxis_pyxis_url": sl.pyxis_url,
            "enroot_pyxis_pyxis_sha256": sl.pyxis_sha256,
            "enroot_pyxis_enroot_conf": sl.enroot_conf,
        }
    raise KeyError(role)
