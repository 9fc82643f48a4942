"""Node health checks: judge each node's collected facts against the blueprint's declared hardware.

The payload ``validate/payloads/node_health.py`` collects one document per node; this module parses
it (:mod:`validate.parsers.node`) and runs every check in :data:`CHECKS` against what the node group
declares (its hardware and node settings in the resolved cluster, :mod:`blueprints.resolved`).

Each check gives a :class:`Check`: ``verdict`` (``pass``, ``warn``, ``fail``, ``invalid`` (the node
could not be examined: a tool is missing or unreadable) or ``n/a`` (the blueprint declares no such
hardware and the node has none)), what was ``measured``, what was ``expected``, the ``cause`` and
the ``fix``. Hardware that is declared but absent is ``fail``; what cannot be seen is ``invalid``;
nothing absent is ever ``pass``.

:func:`judge_node_documents` returns one :class:`~validate.judge.JudgeResult` (kind ``node``) per
node, ``metrics["checks"]`` holding every check, plus one result for the cross-node checks (MTU,
driver version, GID index equal on all nodes) when the run has several nodes.
:func:`blocking_failures` reads those results back: a failed *blocking* check explains the later
suites' results on that node (:data:`CHECKS` says which suites each check explains).

Every fact about a vendor tool (process names, sysfs states, flag names) comes from the
``node_checks`` section of ``blueprints/data/catalog-extras.yaml``, with its source URL.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from blueprints.catalog import catalog
from blueprints.hardware import GroupHardware
from blueprints.models import Blueprint, EfaNetwork, InfinibandNetwork, NodeGroup, RoceNetwork
from blueprints.resolved import resolve
from blueprints.settings import NodeSettings
from blueprints.vendor import bare_metal, container_engine_units, vendor_units

from .parsers.node import (
    NodeFacts,
    parse_containerd_runtimes,
    parse_document,
    parse_limits,
    parse_lspci,
    parse_mdstat,
    parse_mlnx_qos,
    parse_nvlink_status,
    read_documents,
)
from .results import Expected, JudgeResult, Metrics

__all__ = [
    "CHECKS",
    "NA",
    "Check",
    "CheckSpec",
    "CheckVerdict",
    "NodeExpectation",
    "blocking_failures",
    "judge_node_documents",
    "judge_node_file",
    "node_expectation",
    "recorded_units",
]

class CheckVerdict(StrEnum):
    """The verdict of one check on one node, from best to worst: a node result's
    :class:`~validate.results.Verdict` plus ``n/a`` (the blueprint declares no such hardware and the
    node has none). The values are the strings recorded in ``metrics["checks"]``."""

    PASS = "pass"
    NA = "n/a"
    WARN = "warn"
    INVALID = "invalid"
    FAIL = "fail"


NA = CheckVerdict.NA
"""Check verdict: the blueprint declares no such hardware and the node has none."""
PASS, FAIL = CheckVerdict.PASS, CheckVerdict.FAIL

CHECK_VERDICTS: tuple[str, ...] = tuple(v.value for v in CheckVerdict)


def _facts() -> dict[str, Any]:
    return catalog().extras["node_checks"]


def recorded_units() -> list[str]:
    """systemd units (names without ``.service``) whose ``systemctl is-active`` state the node-health payload
    records, in this order: every vendor daemon of the catalog (:func:`blueprints.vendor.vendor_units`: NVIDIA's
    persistence daemon, Fabric Manager, NVLSM, DCGM, Lustre's LNet, DOCA-OFED's openibd), then the container engines
    (:func:`blueprints.vendor.container_engine_units`). The node suite passes them to the payload
    (``--services``), which runs on the node without the catalog."""
    return list(dict.fromkeys([*vendor_units().values(), *container_engine_units().values()]))


def _src(key: str) -> str:
    return str(_facts()[key]["source"])


@dataclass(frozen=True)
class CheckSpec:
    """One check: stable ``id``, ``title``, catalog ``source_key`` (its URL in catalog-extras.yaml),
    ``blocking`` (a failure makes the suites in ``explains`` meaningless on that node)."""

    id: str
    title: str
    source_key: str
    blocking: bool
    explains: tuple[str, ...]
    what: str

    @property
    def source(self) -> str:
        """URL of the fact the check enforces."""
        return _src(self.source_key)


@dataclass
class Check:
    """The outcome of one check on one node: ``verdict`` a :class:`CheckVerdict` (a plain string is
    converted), what was ``measured`` and ``expected``, the ``cause`` and ``fix`` of a non-pass, the
    ``source`` URL of the rule, ``blocking`` (a failed blocking check explains later suites' results)."""

    id: str
    verdict: CheckVerdict
    measured: str
    expected: str
    cause: str = ""
    fix: str = ""
    source: str = ""
    blocking: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, CheckVerdict):
            self.verdict = CheckVerdict(self.verdict)

    def to_json(self) -> dict[str, Any]:
        """The check as a JSON-able dict (``verdict`` its string value)."""
        return {**asdict(self), "verdict": self.verdict.value}


_G, _F, _S = ("nccl", "amp"), ("nccl",), ("fio",)
CHECKS: dict[str, CheckSpec] = {s.id: s for s in (
    CheckSpec("gpu.count", "GPU count and model", "nvidia_smi", True, _G,
              "`nvidia-smi -q -x`: the GPUs present and their product names against the declared count and model"),
    CheckSpec("gpu.driver", "driver branch", "nvidia_smi", True, _G,
              "`nvidia-smi -q -x` `driver_version` against `software.driver_branch`"),
    CheckSpec("gpu.persistence", "persistence mode", "nvidia_smi", False, (),
              "`nvidia-smi -q -x` `persistence_mode` Enabled on every GPU"),
    CheckSpec("gpu.ecc", "ECC errors", "nvidia_smi", True, _G,
              "`nvidia-smi -q -x` volatile uncorrectable ECC errors and row-remapping failures are zero"),
    CheckSpec("gpu.mig", "MIG mode", "mig", True, _G,
              "`nvidia-smi -q -x` `mig_mode/current_mig` Disabled on training nodes (MIG instances cannot join NCCL "
              "collectives across GPUs)"),
    CheckSpec("gpu.nvlink", "NVLink links", "nvidia_smi", True, _F,
              "`nvidia-smi nvlink -s`: no `<inactive>` link on GPUs with NVLink"),
    CheckSpec("gpu.fabric-manager", "Fabric Manager", "fabric_manager", True, _G,
              "NVSwitch systems: `nv-fabricmanager` running (`systemctl is-active` of Fabric Manager's unit, process "
              "list) and the GPUs' fabric state Completed"),
    CheckSpec("gpu.nvlsm", "NVLink subnet manager", "nvlsm", True, _G,
              "NVLink 5 NVSwitch systems: the NVLink subnet manager (NVLSM) running next to Fabric Manager"),
    CheckSpec("gdr.module", "GPUDirect RDMA", "peermem", True, _F,
              "the declared GPUDirect RDMA method: `nvidia_peermem` loaded, or DMA-BUF (open GPU kernel modules "
              "and kernel >= 5.12)"),
    CheckSpec("fabric.ports", "RDMA ports", "infiniband_port", True, _F,
              "`/sys/class/infiniband/DEV/ports/N`: every declared port ACTIVE / LinkUp at its declared rate and link "
              "layer; EFA: as many EFA devices as declared"),
    CheckSpec("fabric.mtu", "fabric MTU", "infiniband_port", True, _F,
              "`/sys/class/net/IF/mtu` of every fabric interface equals `network.mtu`"),
    CheckSpec("fabric.roce-gid", "RoCEv2 GID index", "roce_gid", True, _F,
              "`/sys/class/infiniband/DEV/ports/N/gids/I` at `NCCL_IB_GID_INDEX` is the RoCE v2 GID of the "
              "interface's IPv4 address"),
    CheckSpec("fabric.roce-qos", "PFC / trust / DSCP", "mlnx_qos", False, _F,
              "`mlnx_qos -i IF`: trust mode, PFC priorities and the DSCP-to-priority map as declared; ECN from "
              "`/sys/class/net/IF/ecn/roce_np/enable`"),
    CheckSpec("fabric.ipoib", "IPoIB", "ipoib", False, (),
              "the IPoIB interface exists in the declared mode with its address from `network.infiniband.ipoib.cidr`"),
    CheckSpec("pcie.acs", "PCIe ACS redirect", "acs", True, _F,
              "`lspci -vvv`: no ACS ReqRedir/CmpltRedir on the bridges above GPUs and RDMA NICs (training nodes)"),
    CheckSpec("pcie.iommu", "IOMMU mode", "iommu", True, _F,
              "`/proc/cmdline` and `/sys/kernel/iommu_groups/*/type`: passthrough (or off) on training nodes, on for "
              "GPU-passthrough sandbox hosts"),
    CheckSpec("limits.memlock", "memlock", "memlock", True, _F,
              "`/proc/self/limits` Max locked memory unlimited (RDMA registers GPU and host memory)"),
    CheckSpec("limits.shm", "/dev/shm", "dev_shm", False, _F,
              "`/dev/shm` size and the container runtime's default shm size at least the declared container size"),
    CheckSpec("storage.scratch", "scratch mount", "findmnt", True, _S,
              "`findmnt`: the NVMe scratch mounted at its mount point with the declared file system"),
    CheckSpec("storage.raid", "scratch RAID", "mdstat", True, _S,
              "`/proc/mdstat`: the scratch array's RAID level and active member count as declared"),
    CheckSpec("storage.shared", "Lustre / NFS mounts", "lustre_client", True, _S,
              "`findmnt`: every declared Lustre / NFS file system mounted with the declared options"),
    CheckSpec("software.runtimes", "container runtimes", "runtime_class", False, (),
              "`/etc/containerd/config.toml` registers the runtime handlers the group's RuntimeClasses name"),
    CheckSpec("software.modules", "kernel modules", "modinfo", True, _G,
              "`modinfo -F vermagic` of the GPU / fabric / storage modules names the running kernel"),
)}

CROSS_CHECKS = {
    "cross.mtu": "fabric MTU equal on all nodes and ports",
    "cross.driver": "GPU driver version equal on all nodes",
    "cross.gid": "RoCE v2 GID index the same on all nodes",
    "cross.runtimeclass": "Kubernetes runs: the group's RuntimeClass exists (`kubectl get runtimeclass`) and names the "
                          "containerd handler the nodes register",
}
CROSS_EXPLAINS: dict[str, tuple[str, ...]] = {
    "cross.mtu": _F, "cross.driver": _G, "cross.gid": _F, "cross.runtimeclass": ("nccl", "fio", "amp"),
}
"""Suites a failed cross-node check explains (a missing RuntimeClass stops every sandboxed pod)."""


# ---------------------------------------------------------------------------------------------
# expectations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeExpectation:
    """What a node of one group must have: the blueprint, group, resolved hardware and settings,
    and the IPoIB addresses (``{host: [{"netdev", "address"}]}``)."""

    bp: Blueprint
    group: NodeGroup
    hw: GroupHardware
    ns: NodeSettings
    ipoib: dict[str, list[dict[str, str]]]

    @property
    def nics(self) -> list[Any]:
        return list(self.group.hardware.nics) if self.group.hardware else []


def node_expectation(bp: Blueprint, group: str | NodeGroup) -> NodeExpectation:
    """The :class:`NodeExpectation` of node group ``group`` (a name or the group). Raises ``KeyError``."""
    cluster = resolve(bp)
    r = cluster.group(group)
    return NodeExpectation(bp=bp, group=r.group, hw=r.hardware, ns=r.settings, ipoib=cluster.ipoib.addresses)


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------


def _mk(cid: str, verdict: CheckVerdict | str, measured: str, expected: str, cause: str = "", fix: str = "") -> Check:
    spec = CHECKS[cid]
    v = CheckVerdict(verdict)
    return Check(cid, v, measured, expected, cause, fix, spec.source, spec.blocking and v == CheckVerdict.FAIL)


def _passthrough_gpus(f: NodeFacts) -> tuple[int, int]:
    """``(NVIDIA GPU functions, of them bound to vfio-pci)`` in the PCI tree the payload read."""
    gpus = [d for d in _endpoints(f) if (f.sysfs(f"/sys/bus/pci/devices/{d}/vendor") or "").lower() == "0x10de"]
    vfio = [d for d in gpus if (f.link(f"/sys/bus/pci/devices/{d}/driver") or "").endswith("/vfio-pci")]
    return len(gpus), len(vfio)


def check_gpu_count(f: NodeFacts, e: NodeExpectation) -> Check:
    want = e.ns.gpu_count
    exp = f"{want} x {e.ns.gpu_model}" if want else "no NVIDIA GPU declared"
    if e.ns.passthrough_host:
        exp += " bound to vfio-pci (passed through to the sandboxes)"
        total, vfio = _passthrough_gpus(f)
        meas = f"{total} NVIDIA GPU function(s) on the PCI bus, {vfio} bound to vfio-pci"
        if vfio >= want:
            return _mk("gpu.count", "pass", meas, exp)
        return _mk("gpu.count", "fail", meas, exp,
                   "GPUs are missing or not bound to vfio-pci: the sandboxes cannot get them",
                   "bind the GPUs to vfio-pci at boot (vfio-pci.ids=..., the sandbox role) and check `lspci -nnk`")
    c = f.cmd("nvidia-smi -q -x")
    smi = f.smi
    if smi is None:
        if not want:
            return _mk("gpu.count", NA, "nvidia-smi not present" if not c.ran else "no NVIDIA GPU visible", exp)
        if not c.ran:
            return _mk("gpu.count", "fail", "nvidia-smi not found", exp,
                       "the NVIDIA driver is not installed (or not on PATH) on this node",
                       "install the driver of the declared branch (clusterforge up / the nvidia_driver role)")
        return _mk("gpu.count", "fail", f"nvidia-smi exited {c.rc}: {(c.stderr or c.stdout).strip()[:200]}", exp,
                   "the driver is installed but cannot talk to the GPUs (module not loaded, version mismatch "
                   "between nvidia-smi and the kernel module, or a GPU fallen off the bus)",
                   "check `dmesg | grep -i nvrm`, reload the driver or reboot the node")
    gpus = smi["gpus"]
    names = sorted({g["name"] or "?" for g in gpus})
    measured = f"{len(gpus)} x {', '.join(names)}" if gpus else "0 GPUs"
    if not want:
        return _mk("gpu.count", "warn" if gpus else NA, measured, exp,
                   "the node has GPUs the blueprint does not declare" if gpus else "",
                   "declare them under hardware.gpu (or use the right instance type)" if gpus else "")
    cat = catalog()
    keys = {cat.resolve_gpu_key(n) for n in names}
    if len(gpus) < want:
        return _mk("gpu.count", "fail", measured, exp,
                   f"{want - len(gpus)} GPU(s) missing: fallen off the bus (XID 79), disabled, or hidden by "
                   "CUDA_VISIBLE_DEVICES/cgroups", "check `dmesg` for XID errors and `lspci | grep -i nvidia`; "
                   "reseat or replace the GPU")
    if e.ns.gpu_model and keys != {e.ns.gpu_model}:
        return _mk("gpu.count", "fail", measured, exp, "the GPU model differs from the declared one",
                   "fix hardware.gpu.model (or the instance type) in the blueprint, or run on the declared nodes")
    if len(gpus) > want:
        return _mk("gpu.count", "warn", measured, exp, "more GPUs than declared", "declare the real GPU count")
    return _mk("gpu.count", "pass", measured, exp)


def _no_gpu(f: NodeFacts, e: NodeExpectation, cid: str, exp: str) -> Check | None:
    """``n/a`` / ``invalid`` when there is nothing to examine for a GPU check; ``None`` to go on."""
    if not e.ns.gpu_count:
        return _mk(cid, NA, "no NVIDIA GPU declared", exp)
    if e.ns.passthrough_host:
        return _mk(cid, NA, "GPUs passed through to sandboxes: the host has no GPU driver (judged inside the sandbox)",
                   exp)
    if f.smi is None or not f.smi["gpus"]:
        return _mk(cid, "invalid", "nvidia-smi gave no GPU (see gpu.count)", exp)
    return None


def check_gpu_driver(f: NodeFacts, e: NodeExpectation) -> Check:
    want = e.ns.driver_branch
    exp = f"driver branch {want}"
    if (r := _no_gpu(f, e, "gpu.driver", exp)) is not None:
        return r
    assert f.smi is not None
    ver = f.smi.get("driver_version") or "?"
    if not (ver + ".").startswith(want + "."):
        return _mk("gpu.driver", "fail", f"driver {ver}", exp,
                   "the installed driver is not the declared branch (an unattended upgrade, or another image)",
                   f"install the {want} branch (and pin it: apt-mark hold) or change software.driver_branch")
    return _mk("gpu.driver", "pass", f"driver {ver}", exp)


def check_gpu_persistence(f: NodeFacts, e: NodeExpectation) -> Check:
    exp = "Enabled on every GPU"
    if (r := _no_gpu(f, e, "gpu.persistence", exp)) is not None:
        return r
    assert f.smi is not None
    off = [g["bus_id"] for g in f.smi["gpus"] if (g["persistence"] or "").lower() != "enabled"]
    if off:
        unit = vendor_units()["persistenced"]
        return _mk("gpu.persistence", "warn", f"Disabled on {len(off)} GPU(s): {', '.join(off[:4])}", exp,
                   f"{unit} is not running: each job pays the driver initialisation and GPU state is "
                   "lost between jobs", f"systemctl enable --now {unit}")
    return _mk("gpu.persistence", "pass", "Enabled on every GPU", exp)


def check_gpu_ecc(f: NodeFacts, e: NodeExpectation) -> Check:
    exp = "0 volatile uncorrectable ECC errors, no row-remapping failure"
    if (r := _no_gpu(f, e, "gpu.ecc", exp)) is not None:
        return r
    assert f.smi is not None
    bad = [f"{g['bus_id']}: {g['ecc_uncorrectable_volatile']} uncorrectable" for g in f.smi["gpus"]
           if (g["ecc_uncorrectable_volatile"] or 0) > 0]
    bad += [f"{g['bus_id']}: row remapping failed" for g in f.smi["gpus"] if (g["remap_failure"] or "").lower() == "yes"]
    if bad:
        return _mk("gpu.ecc", "fail", "; ".join(bad[:4]), exp,
                   "GPU memory errors: results computed on this GPU may be wrong (corrupted gradients)",
                   "drain the node, reset the GPU (nvidia-smi -r) or replace it; run `dcgmi diag -r 3`")
    pending = [g["bus_id"] for g in f.smi["gpus"] if (g["remap_pending"] or "").lower() == "yes"]
    off = [g["bus_id"] for g in f.smi["gpus"] if (g["ecc_mode"] or "").lower() == "disabled"]
    if pending:
        return _mk("gpu.ecc", "warn", f"row remapping pending on {', '.join(pending[:4])}", exp,
                   "a row remap waits for a GPU reset", "reset the GPU (nvidia-smi -r) when the node is idle")
    if off:
        return _mk("gpu.ecc", "warn", f"ECC disabled on {', '.join(off[:4])}", "ECC enabled",
                   "ECC is off: memory errors go undetected", "nvidia-smi -e 1 and reboot")
    return _mk("gpu.ecc", "pass", "no uncorrectable ECC error", exp)


def check_gpu_mig(f: NodeFacts, e: NodeExpectation) -> Check:
    exp = "MIG Disabled (training node)" if e.ns.training_node else "any MIG mode"
    if (r := _no_gpu(f, e, "gpu.mig", exp)) is not None:
        return r
    assert f.smi is not None
    on = [g["bus_id"] for g in f.smi["gpus"] if (g["mig_current"] or "").lower() == "enabled"]
    if on and e.ns.training_node:
        return _mk("gpu.mig", "fail", f"MIG Enabled on {len(on)} GPU(s): {', '.join(on[:4])}", exp,
                   "MIG splits each GPU into instances that NCCL cannot use across GPUs",
                   "nvidia-smi -mig 0 on every GPU (then reset the GPUs)")
    return _mk("gpu.mig", "pass", f"MIG Enabled on {len(on)} GPU(s)" if on else "MIG Disabled", exp)


def check_gpu_nvlink(f: NodeFacts, e: NodeExpectation) -> Check:
    has = bool(e.hw.gpu and e.hw.gpu.has_nvlink) and e.ns.gpu_count > 1
    exp = "every NVLink link active" if has else "no NVLink declared"
    if not has:
        return _mk("gpu.nvlink", NA, "GPUs without NVLink (or one GPU)" if e.ns.gpu_count else "no GPU declared", exp)
    if (r := _no_gpu(f, e, "gpu.nvlink", exp)) is not None:
        return r
    c = f.cmd("nvidia-smi nvlink -s")
    if not c.ok:
        return _mk("gpu.nvlink", "invalid", f"nvidia-smi nvlink -s exited {c.rc}", exp, "", "run nvidia-smi nvlink -s by hand")
    st = parse_nvlink_status(c.stdout)
    down = {g: s["inactive"] for g, s in st.items() if s["inactive"]}
    none = [g for g, s in st.items() if not s["up"]]
    if down or none or not st:
        what = ", ".join(f"GPU {g}: {n} inactive" for g, n in sorted(down.items())) or "no link reported"
        return _mk("gpu.nvlink", "fail", what, exp,
                   "NVLink links down: traffic between these GPUs falls back to PCIe (or fails on NVSwitch systems)",
                   "check `nvidia-smi nvlink -e` error counters and Fabric Manager; reset the GPUs or service the baseboard")
    return _mk("gpu.nvlink", "pass", f"{sum(s['up'] for s in st.values())} links active on {len(st)} GPU(s)", exp)


def check_fabric_manager(f: NodeFacts, e: NodeExpectation) -> Check:
    fm = _facts()["fabric_manager"]
    unit = vendor_units()["fabricmanager"]
    want = e.ns.fabric_manager
    exp = f"{unit} active" if want else "not needed (no NVSwitch)"
    if not want:
        return _mk("gpu.fabric-manager", NA, "no NVSwitch declared" if e.ns.gpu_count else "no GPU declared", exp)
    svc = f.cmd(f"systemctl is-active {unit}")
    running = fm["process"] in f.processes or svc.stdout.strip() == "active"
    smi = f.smi
    states = sorted({g["fabric_state"] for g in (smi or {}).get("gpus", []) if g["fabric_state"]})
    measured = f"service {svc.stdout.strip() or 'unknown'}, process {'running' if running else 'absent'}"
    if states:
        measured += f", GPU fabric state {', '.join(states)}"
    if not running:
        return _mk("gpu.fabric-manager", "fail", measured, exp,
                   "Fabric Manager is not running on an NVSwitch system: CUDA reports 'system not yet initialized' "
                   "and every collective fails", f"systemctl enable --now {unit} (the package version must "
                   "equal the driver version)")
    if states and any(s.lower() not in ("completed", "n/a") for s in states):
        return _mk("gpu.fabric-manager", "fail", measured, exp, "the NVSwitch fabric has not finished training",
                   f"check `journalctl -u {unit}`; restart it after the driver")
    return _mk("gpu.fabric-manager", "pass", measured, exp)


def check_nvlsm(f: NodeFacts, e: NodeExpectation) -> Check:
    # NVLSM has no unit of its own: Fabric Manager's unit starts it (catalog nvswitch.nvlink5_fabricmanager), so the
    # process is what is looked for
    ls = _facts()["nvlsm"]
    proc, fm_unit = ls["process"], vendor_units()["fabricmanager"]
    package = bare_metal()["nvidia_driver"]["nvswitch"]["nvlsm"]
    gen = e.hw.gpu.nvlink_gen if e.hw.gpu else None
    want = e.ns.fabric_manager and (gen or 0) >= int(ls["min_nvlink_gen"])
    exp = f"{proc} running" if want else f"not needed (NVSwitch with NVLink {ls['min_nvlink_gen']}+ only)"
    if not want:
        return _mk("gpu.nvlsm", NA, f"NVLink generation {gen}" if gen else "no NVLink 5 NVSwitch declared", exp)
    if proc in f.processes:
        return _mk("gpu.nvlsm", "pass", f"{proc} running", exp)
    return _mk("gpu.nvlsm", "fail", f"{proc} not running", exp,
               "NVLink 5 NVSwitch systems need the NVLink subnet manager beside Fabric Manager; without it the "
               "NVSwitches stay uninitialised and CUDA returns 'system not yet initialized'",
               f"install the {package} package, load ib_umad and restart {fm_unit} (its start script starts {proc} "
               f"on the NVSwitch management port, then Fabric Manager; see `journalctl -u {fm_unit}`)")


def _kernel_at_least(kernel: str, minimum: str) -> bool:
    got = [int(x) for x in re.findall(r"\d+", kernel)[:2]]
    need = [int(x) for x in minimum.split(".")]
    return got >= need


def check_gdr(f: NodeFacts, e: NodeExpectation) -> Check:
    method = e.ns.gpudirect_rdma
    if method is None:
        return _mk("gdr.module", NA, "GPUDirect RDMA not declared" + ("" if e.ns.rdma else " (no RDMA fabric)"),
                   "none")
    if method == "nvidia-peermem":
        mod = _facts()["peermem"]["module"]
        exp = f"{mod} loaded"
        if mod in f.modules_loaded:
            return _mk("gdr.module", "pass", f"{mod} loaded", exp)
        built = f.cmd(f"modinfo {mod}").ok
        return _mk("gdr.module", "fail", f"{mod} not loaded ({'built' if built else 'not built'} for {f.kernel})",
                   exp, "without the peer-memory module NCCL copies through host memory (NET/IB without GDRDMA): "
                   "inter-node busbw drops", f"modprobe {mod} and add it to /etc/modules-load.d"
                   + ("" if built else "; it is not built for the running kernel: reinstall the driver's DKMS modules"))
    dm = _facts()["dmabuf"]
    ver = f.file("/proc/driver/nvidia/version") or ""
    open_mod = dm["open_modules_marker"] in ver
    kern_ok = _kernel_at_least(f.kernel, dm["min_kernel"])
    exp = f"open GPU kernel modules and kernel >= {dm['min_kernel']}"
    meas = f"{'open' if open_mod else 'proprietary' if ver else 'no'} GPU kernel module, kernel {f.kernel}"
    if open_mod and kern_ok:
        return _mk("gdr.module", "pass", meas, exp)
    return _mk("gdr.module", "fail", meas, exp,
               "DMA-BUF GPUDirect RDMA needs the open GPU kernel modules on a kernel with DMA-BUF support",
               "install the open kernel modules (software.driver_open_kernel_modules) or declare method nvidia-peermem")


def _rate_gbps(rate: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def check_ports(f: NodeFacts, e: NodeExpectation) -> Check:
    port = _facts()["infiniband_port"]
    net = e.bp.network
    devs = f.listing("/sys/class/infiniband")
    if isinstance(net, EfaNetwork):
        want = e.ns.efa_interfaces or None  # the EFA interfaces the node settings give each node
        exp = f"{want} EFA device(s), ports ACTIVE" if want else "EFA devices"
        efa = [d for d in devs or [] if (f.link(f"/sys/class/infiniband/{d}/device/driver") or "").endswith("/efa")
               or d.startswith("rdmap")]
        down = [d for d in efa if f.sysfs(f"/sys/class/infiniband/{d}/ports/1/state") != port["active_state"]]
        meas = f"{len(efa)} EFA device(s)" + (f", not ACTIVE: {', '.join(down)}" if down else "")
        if devs is None:
            return _mk("fabric.ports", "fail", "no /sys/class/infiniband", exp, "the EFA driver is not loaded",
                       "install the EFA installer (efa kernel module) and reboot")
        if (want and len(efa) < want) or down:
            return _mk("fabric.ports", "fail", meas, exp,
                       "EFA interfaces missing or down: the instance was launched without all EFA network cards, "
                       "or the driver is not bound", "launch with one EFA interface per network card; check `fi_info -p efa`")
        return _mk("fabric.ports", "pass", meas, exp)
    nics = e.nics if isinstance(net, (InfinibandNetwork, RoceNetwork)) else []
    if not nics:
        return _mk("fabric.ports", NA, f"{len(devs or [])} RDMA device(s) present", "no RDMA port declared")
    exp = "; ".join(f"{n.device}/{n.port} ACTIVE {n.speed_gbps:g} Gb/s {n.link_layer}" for n in nics)
    if devs is None:
        return _mk("fabric.ports", "fail", "no /sys/class/infiniband", exp,
                   "the RDMA stack is not loaded (ib_core / mlx5_ib)", "install rdma-core or DOCA-OFED and load mlx5_ib")
    bad: list[str] = []
    good: list[str] = []
    for n in nics:
        base = f"/sys/class/infiniband/{n.device}/ports/{n.port}"
        state, phys, rate, ll = (f.sysfs(f"{base}/{x}") for x in ("state", "phys_state", "rate", "link_layer"))
        if state is None:
            bad.append(f"{n.device}/{n.port} absent")
            continue
        gbps = _rate_gbps(rate)
        probs = []
        if state != port["active_state"]:
            probs.append(f"state {state}, phys {phys}")
        if gbps is not None and gbps + 1e-6 < n.speed_gbps:
            probs.append(f"rate {rate}")
        if ll and ll.lower() != n.link_layer:
            probs.append(f"link layer {ll}")
        (bad if probs else good).append(f"{n.device}/{n.port} " + (", ".join(probs) if probs else f"ACTIVE {rate}"))
    if bad:
        return _mk("fabric.ports", "fail", "; ".join(bad + good), exp,
                   "a declared port is missing, down, at a lower rate or in the wrong link layer: a cable, transceiver "
                   "or switch port fault, no subnet manager (IB: state INIT), or the port in the wrong mode",
                   "check `ibstat` / `mlxlink -d DEV`, the subnet manager, the cable; set the link type with mlxconfig")
    return _mk("fabric.ports", "pass", "; ".join(good), exp)


def fabric_netdevs(f: NodeFacts, e: NodeExpectation) -> list[str]:
    """The node's fabric interfaces: the declared NICs' netdevs (IB/RoCE); EFA has none with an MTU to judge."""
    return [n.netdev for n in e.nics if n.netdev] if isinstance(e.bp.network, (InfinibandNetwork, RoceNetwork)) else []


def measured_mtus(f: NodeFacts, e: NodeExpectation) -> dict[str, int | None]:
    """``{netdev: MTU}`` of the fabric interfaces (``None``: interface absent)."""
    out: dict[str, int | None] = {}
    for nd in fabric_netdevs(f, e):
        v = f.sysfs(f"/sys/class/net/{nd}/mtu")
        out[nd] = int(v) if v and v.isdigit() else None
    return out


def check_mtu(f: NodeFacts, e: NodeExpectation) -> Check:
    want = e.bp.network.mtu
    mtus = measured_mtus(f, e)
    exp = f"MTU {want}" if want else "no MTU declared (equal on all nodes: cross.mtu)"
    if not mtus:
        return _mk("fabric.mtu", NA, "no fabric interface declared", exp)
    meas = ", ".join(f"{k} {v if v is not None else 'absent'}" for k, v in mtus.items())
    if any(v is None for v in mtus.values()):
        return _mk("fabric.mtu", "fail", meas, exp, "a declared fabric interface does not exist",
                   "fix hardware.nics[].netdev or the interface naming (udev)")
    if want and any(v != want for v in mtus.values()):
        return _mk("fabric.mtu", "fail", meas, exp,
                   "interface MTU differs from the declared fabric MTU (and from the switches): large frames are "
                   "dropped or fragmented", f"set MTU {want} on the interfaces (netplan / nmcli) and on the switch ports")
    return _mk("fabric.mtu", "pass", meas, exp)


def _v4_gid(addr: str) -> str:
    """RoCE v2 GID of an IPv4 address: ``::ffff:a.b.c.d`` as sysfs prints it (8 groups of 4 hex digits)."""
    b = ipaddress.IPv4Address(addr).packed
    return "0000:0000:0000:0000:0000:ffff:" + f"{b[0]:02x}{b[1]:02x}:{b[2]:02x}{b[3]:02x}"


def gid_index_found(f: NodeFacts, device: str, port: int, netdev: str | None) -> dict[str, int | None]:
    """``{ipv4 address: index of its RoCE v2 GID}`` on ``device``/``port`` (``None``: no such GID)."""
    rtype = _facts()["roce_gid"]["type"]
    out: dict[str, int | None] = {}
    for a in (f.addresses.get(netdev or "", []) if netdev else []):
        ip = a.split("/")[0]
        if ":" in ip:
            continue
        out[ip] = None
        for i in range(16):
            base = f"/sys/class/infiniband/{device}/ports/{port}"
            if (f.sysfs(f"{base}/gids/{i}") or "").lower() == _v4_gid(ip) and f.sysfs(f"{base}/gid_attrs/types/{i}") == rtype:
                out[ip] = i
                break
    return out


def check_roce_gid(f: NodeFacts, e: NodeExpectation) -> Check:
    net = e.bp.network
    if not isinstance(net, RoceNetwork) or not e.nics:
        return _mk("fabric.roce-gid", NA, "not a RoCE fabric" if not isinstance(net, RoceNetwork) else "no NIC declared",
                   "RoCE v2 GID at NCCL_IB_GID_INDEX")
    idx = net.roce.gid_index
    rtype = _facts()["roce_gid"]["type"]
    if idx == "discover":
        return _check_discovered_gid(f, e, rtype)
    exp = f"GID index {idx} = {rtype} GID of each interface's IPv4 address"
    bad: list[str] = []
    good: list[str] = []
    for n in e.nics:
        base = f"/sys/class/infiniband/{n.device}/ports/{n.port}"
        gid, typ, ndev = (f.sysfs(f"{base}/{x}") for x in (f"gids/{idx}", f"gid_attrs/types/{idx}", f"gid_attrs/ndevs/{idx}"))
        found = gid_index_found(f, n.device, n.port, n.netdev)
        if not found:
            bad.append(f"{n.device}: {n.netdev or 'no netdev declared'} has no IPv4 address")
            continue
        ok = [ip for ip, i in found.items() if i == idx]
        if ok:
            good.append(f"{n.device} gid[{idx}] {gid} ({typ}, {ndev}) = {ok[0]}")
        else:
            where = ", ".join(f"{ip} at index {i}" if i is not None else f"{ip}: no RoCE v2 GID" for ip, i in found.items())
            bad.append(f"{n.device} gid[{idx}] {gid or 'empty'} ({typ or 'no type'}); {where}")
    if bad:
        return _mk("fabric.roce-gid", "fail", "; ".join(bad + good), exp,
                   f"NCCL_IB_GID_INDEX={idx} does not select the RoCE v2 GID of the data-plane address (the GID table "
                   "order follows the address configuration: an extra IPv6 or VLAN address shifts it; RoCE v1 has no "
                   "routing): NCCL fails to connect or runs over the wrong address",
                   "set network.roce.gid_index to the index of the RoCE v2 IPv4 GID (`show_gids`), or fix the "
                   "interface's addresses so it lands on the declared index")
    return _mk("fabric.roce-gid", "pass", "; ".join(good), exp)


def _check_discovered_gid(f: NodeFacts, e: NodeExpectation, rtype: str) -> Check:
    """``gid_index: discover``: the renderers look the index up on each node, so what must hold is that
    every declared NIC has a RoCE v2 GID for its data-plane IPv4 address (at whatever index)."""
    exp = f"a {rtype} GID for each interface's IPv4 address (index discovered on the node)"
    bad: list[str] = []
    good: list[str] = []
    for n in e.nics:
        found = gid_index_found(f, n.device, n.port, n.netdev)
        if not found:
            bad.append(f"{n.device}: {n.netdev or 'no netdev declared'} has no IPv4 address")
        for ip, i in found.items():
            (good if i is not None else bad).append(
                f"{n.device} {ip} at index {i}" if i is not None else f"{n.device} {ip}: no {rtype} GID")
    if bad:
        return _mk("fabric.roce-gid", "fail", "; ".join(bad + good), exp,
                   f"no {rtype} GID for the data-plane address: the discovery finds no index and NCCL cannot "
                   "connect over RoCE v2 (RoCE v1 and link-local GIDs do not route between hosts)",
                   "give each RoCE interface its declared IPv4 address (the kernel adds the RoCE v2 GID for it)")
    return _mk("fabric.roce-gid", "pass", "; ".join(good), exp)


def check_roce_qos(f: NodeFacts, e: NodeExpectation) -> Check:
    q = e.ns.roce
    if q is None or not q.interfaces:
        return _mk("fabric.roce-qos", NA, "not a RoCE fabric" if q is None else "no netdev declared", "RoCE QoS")
    exp = (f"trust {q.trust}, PFC {q.pfc_vector if q.flow_control == 'pfc' else 'off'}, DSCP {q.dscp} -> priority "
           f"{q.pfc_priority}" + (", ECN on" if q.ecn else ""))
    bad: list[str] = []
    seen: list[str] = []
    missing: list[str] = []
    for nd in q.interfaces:
        c = f.cmd(f"mlnx_qos -i {nd}")
        qos = parse_mlnx_qos(c.stdout) if c.ok else None
        if qos is None:
            missing.append(nd)
            continue
        probs = []
        if qos["trust"] and qos["trust"] != q.trust:
            probs.append(f"trust {qos['trust']}")
        if q.flow_control == "pfc" and qos["pfc"] is not None and ",".join(map(str, qos["pfc"])) != q.pfc_vector:
            probs.append(f"PFC {','.join(map(str, qos['pfc']))}")
        if q.trust == "dscp" and qos["dscp2prio"] and qos["dscp2prio"].get(q.dscp) != q.pfc_priority:
            probs.append(f"DSCP {q.dscp} -> priority {qos['dscp2prio'].get(q.dscp)}")
        if q.ecn:
            en = f.sysfs(f"/sys/class/net/{nd}/ecn/roce_np/enable/{q.pfc_priority}")
            if en is not None and en != "1":
                probs.append(f"ECN off on priority {q.pfc_priority}")
        (bad if probs else seen).append(f"{nd}: " + (", ".join(probs) if probs else "as declared"))
    if bad:
        return _mk("fabric.roce-qos", "fail", "; ".join(bad + seen), exp,
                   "host QoS differs from the declared (and switch) settings: RoCE traffic lands in a lossy queue and "
                   "drops under congestion", "apply with `mlnx_qos -i IF --trust dscp --pfc ...` (the roce role) and "
                   "match the switches")
    if missing:
        return _mk("fabric.roce-qos", "invalid", f"mlnx_qos gave nothing for {', '.join(missing)}", exp, "",
                   "install mlnx_qos (DOCA-OFED / mlnx-tools) so the node can show its QoS")
    return _mk("fabric.roce-qos", "pass", "; ".join(seen), exp)


def _host_key(name: str) -> str:
    return name.split(".")[0].lower()


def check_ipoib(f: NodeFacts, e: NodeExpectation) -> Check:
    nd = e.ns.ipoib_netdev
    if not e.ns.ipoib or not nd:
        return _mk("fabric.ipoib", NA, "IPoIB not declared", "no IPoIB")
    want = next((v for h, v in e.ipoib.items() if _host_key(h) == _host_key(f.host)), None)
    want_addr = next((a["address"] for a in want or [] if a["netdev"] == nd), None)
    exp = f"{nd} in {e.ns.ipoib_mode} mode" + (f" with {want_addr}" if want_addr else "")
    mode = f.sysfs(f"/sys/class/net/{nd}/mode")
    if f.sysfs(f"/sys/class/net/{nd}/mtu") is None:
        return _mk("fabric.ipoib", "fail", f"{nd} absent", exp, "the IPoIB interface does not exist (ib_ipoib not "
                   "loaded or another name)", "modprobe ib_ipoib; fix hardware.nics[].netdev")
    addrs = f.addresses.get(nd, [])
    meas = f"{nd} {mode or '?'} mode, addresses {', '.join(addrs) or 'none'}"
    if mode and mode != e.ns.ipoib_mode:
        return _mk("fabric.ipoib", "fail", meas, exp, "IPoIB mode differs from the declared one",
                   f"echo {e.ns.ipoib_mode} > /sys/class/net/{nd}/mode (and persist it in netplan)")
    if want_addr and want_addr not in addrs:
        return _mk("fabric.ipoib", "fail", meas, exp, "the IPoIB address is missing or differs (LNet and storage bind to it)",
                   "rerun the network role (clusterforge up) or set the address by hand")
    if not want_addr and not [a for a in addrs if "." in a]:
        return _mk("fabric.ipoib", "warn", meas, exp, "no IPv4 address on the IPoIB interface", "declare ipoib.cidr")
    return _mk("fabric.ipoib", "pass", meas, exp)


def _pci_ancestors(f: NodeFacts, bdf: str) -> list[str]:
    path = f.link(f"/sys/bus/pci/devices/{bdf}") or ""
    parts = re.findall(r"/([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", path)
    return [p for p in parts if p != bdf]


def _endpoints(f: NodeFacts) -> list[str]:
    """PCI functions of NVIDIA GPUs (class 0x03xx, vendor 0x10de) and RDMA/network adapters of the fabric vendors."""
    out = []
    for link in (f.doc.get("links") or {}):
        m = re.fullmatch(r"/sys/bus/pci/devices/(\S+)", link)
        if not m:
            continue
        bdf = m.group(1)
        cls = (f.sysfs(f"{link}/class") or "").lower()
        ven = (f.sysfs(f"{link}/vendor") or "").lower()
        if (cls.startswith("0x03") and ven == "0x10de") or (cls.startswith(("0x0207", "0x0200")) and ven == "0x15b3"):
            out.append(bdf)
    return sorted(out)


def check_acs(f: NodeFacts, e: NodeExpectation) -> Check:
    acs = _facts()["acs"]
    flags = acs["redirect_flags"]
    if not e.ns.disable_acs:
        return _mk("pcie.acs", NA, "not a training node (GPUs passed through or absent)", "ACS left as is")
    exp = f"no {'/'.join(flags)} on bridges above GPUs and NICs"
    c = f.cmd("lspci -vvv")
    if not c.ran:
        return _mk("pcie.acs", "invalid", "lspci not found", exp, "", "install pciutils")
    dev = parse_lspci(c.stdout)
    eps = _endpoints(f)
    if not eps:
        return _mk("pcie.acs", "invalid", "no GPU or NIC found in the PCI tree", exp, "",
                   "the payload could not read /sys/bus/pci/devices")
    bridges = sorted({b for ep in eps for b in _pci_ancestors(f, ep)})
    if any(dev.get(b, {}).get("caps_denied") for b in bridges):
        return _mk("pcie.acs", "invalid", "lspci could not read capabilities (not root)", exp, "",
                   "run the node suite as root (sudo) so lspci shows ACSCtl")
    on = [b for b in bridges if any((dev.get(b, {}).get("acs_ctl") or {}).get(fl) for fl in flags)]
    if on:
        return _mk("pcie.acs", "fail", f"redirect on {len(on)} of {len(bridges)} bridge(s): {', '.join(on[:6])}", exp,
                   "ACS redirects peer-to-peer PCIe traffic (GPU-GPU, GPU-NIC GPUDirect) through the root complex: "
                   "bandwidth collapses or the transfers hang",
                   "disable ACS on these bridges at boot (`setpci -s BDF ECAP_ACS+0x6.w=0000`, the host_tuning role) "
                   "or in the BIOS")
    return _mk("pcie.acs", "pass", f"no redirect on {len(bridges)} bridge(s) above {len(eps)} device(s)", exp)


def check_iommu(f: NodeFacts, e: NodeExpectation) -> Check:
    io = _facts()["iommu"]
    cmdline = (f.file("/proc/cmdline") or "").split()
    types: dict[str, int] = {}
    for path, v in (f.doc.get("sysfs") or {}).items():
        if re.fullmatch(r"/sys/kernel/iommu_groups/[^/]+/type", path):
            types[v] = types.get(v, 0) + 1
    translated = sum(n for t, n in types.items() if t in io["translated_group_types"])
    ident = types.get(io["passthrough_group_type"], 0)
    iommus = f.listing("/sys/class/iommu") or []
    params = [p for p in cmdline if re.match(r"(intel_iommu|amd_iommu|iommu)(\.\w+)?=", p)]
    meas = (f"cmdline {' '.join(params) or '(no iommu parameter)'}; {len(iommus)} IOMMU unit(s); groups "
            + (", ".join(f"{t}: {n}" for t, n in sorted(types.items())) or "none"))
    if e.ns.passthrough_host:
        exp = "IOMMU on (intel_iommu=on / amd_iommu=on, iommu=pt) for VFIO GPU passthrough"
        if not iommus and not types:
            return _mk("pcie.iommu", "fail", meas, exp, "the IOMMU is off: GPUs cannot be bound to vfio-pci for the "
                       "sandboxes", "add intel_iommu=on iommu=pt (amd_iommu=on on AMD) to the kernel command line and "
                       "enable VT-d / AMD-Vi in the BIOS")
        return _mk("pcie.iommu", "pass", meas, exp)
    if not e.ns.training_node:
        return _mk("pcie.iommu", NA, meas, "no requirement (not a training node)")
    exp = "IOMMU off or in passthrough (iommu=pt: groups 'identity')"
    if translated:
        return _mk("pcie.iommu", "fail", meas, exp,
                   "the IOMMU translates DMA: GPU peer-to-peer and GPUDirect RDMA go through the IOMMU (slow or broken)",
                   "add iommu=pt to the kernel command line (the host_tuning role) and reboot")
    if "iommu=pt" not in cmdline and iommus and not ident:
        return _mk("pcie.iommu", "warn", meas, exp, "IOMMU present but the mode cannot be read from the groups",
                   "add iommu=pt to the kernel command line")
    return _mk("pcie.iommu", "pass", meas, exp)


def check_memlock(f: NodeFacts, e: NodeExpectation) -> Check:
    """The locked-memory limit matters only where RDMA registers buffers (an RDMA fabric): there it must be unlimited
    (fail otherwise); on a node without RDMA any limit passes, with no warning about a value nobody needs."""
    needed = e.ns.memlock_unlimited and e.ns.rdma
    exp = "unlimited (RDMA registers GPU and host buffers)" if needed else "any (no RDMA on this fabric)"
    lim = parse_limits(f.file("/proc/self/limits") or "")
    soft = lim["memlock_soft"]
    if soft is None:
        return _mk("limits.memlock", "invalid", "/proc/self/limits unreadable", exp)
    meas = "unlimited" if soft == "unlimited" else f"{soft} bytes"
    if soft == "unlimited" or not needed:
        return _mk("limits.memlock", "pass", meas, exp)
    return _mk("limits.memlock", "fail", meas, exp,
               "locked memory is limited: RDMA cannot register GPU/host buffers (NCCL 'ibv_reg_mr failed' / "
               "'Cannot allocate memory')",
               "set `* - memlock unlimited` in /etc/security/limits.d and LimitMEMLOCK=infinity for the job's service "
               "(slurmd, containerd), then start a new session")


def _size_bytes(text: str) -> int | None:
    # docker's size grammar (go-units RAMInBytes, which reads daemon.json's default-shm-size): a number, at most one
    # space, binary prefixes up to p, then an optional i and an optional b ("2Gi", "2GiB", "2g", "1 p"); nothing
    # around it; https://github.com/docker/go-units/blob/master/size.go
    m = re.fullmatch(r"(\d+(?:\.\d+)?) ?([kKmMgGtTpP]?)[iI]?[bB]?", text or "")
    if not m:
        return None
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def check_shm(f: NodeFacts, e: NodeExpectation) -> Check:
    want = _size_bytes(e.ns.container_shm_size) or 0
    exp = f"/dev/shm >= {e.ns.container_shm_size}, container default shm >= {e.ns.container_shm_size}"
    st = (f.doc.get("statvfs") or {}).get("/dev/shm")
    if not st:
        return _mk("limits.shm", "fail", "/dev/shm absent", exp, "no shared-memory file system: NCCL's SHM transport "
                   "and PyTorch DataLoader workers fail", "mount tmpfs on /dev/shm")
    size = int(st.get("size_bytes") or 0)
    meas = f"/dev/shm {size / 2**30:.3g} GiB"
    from .parsers.bounds import JsonLimitError
    from .parsers.bounds import loads as bounded_loads

    docker = f.file("/etc/docker/daemon.json")
    dshm = None
    if docker is not None:
        try:
            conf = bounded_loads(docker)
        except JsonLimitError:  # over the bounds of validate.parsers.bounds: not read, so not judged
            conf = None
        except ValueError:
            # dockerd exits at start on a daemon.json it cannot parse, an empty one included ("unable to configure
            # the Docker daemon with file /etc/docker/daemon.json: ..."; https://github.com/moby/moby/issues/41268)
            return _mk("limits.shm", "fail", meas + "; /etc/docker/daemon.json is not JSON", exp,
                       "dockerd refuses to start with a daemon.json it cannot parse: no container runs",
                       "fix the file's JSON (`python3 -m json.tool /etc/docker/daemon.json` names the line) and "
                       "restart docker")
        dshm = conf.get("default-shm-size") if isinstance(conf, dict) else None
    if dshm is not None:
        meas += f"; docker default-shm-size {dshm}"
    if size < want:
        return _mk("limits.shm", "fail", meas, exp, "/dev/shm is smaller than the declared container size: NCCL's "
                   "SHM transport fails with 'unhandled system error' (Bus error)", "remount /dev/shm larger "
                   "(`mount -o remount,size=50% /dev/shm`)")
    # docker reads the value as a JSON string in go-units' RAMInBytes grammar and exits at start on anything else
    # (MemBytes.UnmarshalJSON: a number or "" is "invalid size"; https://github.com/moby/moby/blob/v28.3.0/opts/opts.go)
    dshm_bytes = _size_bytes(dshm) if isinstance(dshm, str) else None
    if dshm is not None and dshm_bytes is None:
        return _mk("limits.shm", "fail", meas, exp,
                   f"default-shm-size {json.dumps(dshm)} is not a size docker reads: dockerd refuses to start",
                   f"set \"default-shm-size\": \"{e.ns.container_shm_size}\" in /etc/docker/daemon.json")
    if dshm_bytes is not None and dshm_bytes < want:
        return _mk("limits.shm", "fail", meas, exp, "containers get a /dev/shm smaller than declared (docker "
                   "default 64 MiB): NCCL fails with 'unhandled system error'",
                   f"set \"default-shm-size\": \"{e.ns.container_shm_size}\" in /etc/docker/daemon.json or run "
                   "containers with --shm-size / --ipc=host")
    return _mk("limits.shm", "pass", meas, exp)


def _mount_at(f: NodeFacts, target: str) -> dict[str, Any] | None:
    found = [m for m in f.mounts if m["target"] == target]
    return found[-1] if found else None


def check_scratch(f: NodeFacts, e: NodeExpectation) -> Check:
    s = e.ns.scratch
    if s is None:
        return _mk("storage.scratch", NA, "no local_nvme declared", "no scratch")
    exp = f"{s.mount} mounted ({s.filesystem})"
    if not f.cmd("findmnt").ok:
        return _mk("storage.scratch", "invalid", "findmnt gave nothing", exp, "", "install util-linux (findmnt)")
    m = _mount_at(f, s.mount)
    if m is None:
        return _mk("storage.scratch", "fail", f"nothing mounted at {s.mount}", exp,
                   "the scratch array is not mounted (mount failed at boot with nofail, or never created): jobs write "
                   "to the root disk", "rerun the nvme_scratch role (clusterforge up) or `mount " + s.mount + "`")
    meas = f"{m['source']} on {s.mount} ({m['fstype']})"
    if m["fstype"] != s.filesystem:
        return _mk("storage.scratch", "fail", meas, exp, "another file system is mounted there",
                   "recreate the scratch array with the declared file system")
    return _mk("storage.scratch", "pass", meas, exp)


def check_raid(f: NodeFacts, e: NodeExpectation) -> Check:
    s = e.ns.scratch
    if s is None:
        return _mk("storage.raid", NA, "no local_nvme declared", "no scratch")
    n = s.expected_drives
    exp = (f"{s.raid} over {n} drive(s)" if n else s.raid) if s.raid == "raid0" else "one drive, no RAID"
    m = _mount_at(f, s.mount)
    md = parse_mdstat(f.file("/proc/mdstat") or "")
    if m is None:
        return _mk("storage.raid", "invalid", f"nothing mounted at {s.mount} (see storage.scratch)", exp)
    src = str(m["source"] or "")
    name = next((k for k in md if src.endswith("/" + k) or src == k), None)
    if name is None and len(md) == 1 and src.startswith("/dev/md"):
        name = next(iter(md))
    if s.raid == "none":
        return _mk("storage.raid", "pass" if not src.startswith("/dev/md") else "warn", src, exp)
    if name is None:
        if n == 1:
            return _mk("storage.raid", "pass", f"{src} (one drive)", exp)
        return _mk("storage.raid", "fail", f"{s.mount} is on {src}, not an md array", exp,
                   "the scratch is a single drive instead of the RAID0 over all drives", "recreate the array over every "
                   "NVMe data drive (the nvme_scratch role)")
    a = md[name]
    members = len(a["members"])
    meas = f"{name}: {a['level'] or '?'} {a['state']}, {members} active member(s)" + (
        f", failed {', '.join(a['failed'])}" if a["failed"] else "")
    if a["level"] != s.raid or (n and members != n) or a["failed"] or a["state"] != "active":
        return _mk("storage.raid", "fail", meas, exp,
                   "the array does not span every declared drive (a drive missing at creation, failed or not "
                   "discovered): scratch throughput drops by the missing share",
                   "check `nvme list` and `mdadm --detail /dev/" + name + "`; recreate the array over all drives")
    return _mk("storage.raid", "pass", meas, exp)


def check_shared(f: NodeFacts, e: NodeExpectation) -> Check:
    want = [("lustre", m.mount, [o for o in m.options if o not in ("_netdev", "defaults", "nofail")]) for m in e.ns.lustre]
    want += [("nfs", m.mount, [o for o in m.options if o not in ("_netdev", "defaults", "nofail")]) for m in e.ns.nfs]
    if not want:
        return _mk("storage.shared", NA, "no shared storage declared", "none")
    exp = "; ".join(f"{k} on {p}" + (f" ({','.join(o)})" if o else "") for k, p, o in want)
    if not f.cmd("findmnt").ok:
        return _mk("storage.shared", "invalid", "findmnt gave nothing", exp, "", "install util-linux (findmnt)")
    bad: list[str] = []
    good: list[str] = []
    for kind, path, opts in want:
        m = _mount_at(f, path)
        if m is None:
            bad.append(f"{path} not mounted")
            continue
        fs = str(m["fstype"] or "")
        if not fs.startswith(kind):
            bad.append(f"{path} is {fs}, not {kind}")
            continue
        have = set(m["options"])
        miss = [o for o in opts if o not in have and not (o.startswith("nconnect") and kind == "nfs" and
                                                           any(h.startswith("nconnect") for h in have))]
        (bad if miss else good).append(f"{path} {fs}" + (f" without {','.join(miss)}" if miss else ""))
    for nfs in e.ns.nfs:
        mm = _mount_at(f, nfs.mount)
        if mm and not any(o in (f"vers={nfs.version}", f"nfsvers={nfs.version}") for o in mm["options"]):
            bad.append(f"{nfs.mount} not NFS version {nfs.version} ({','.join(o for o in mm['options'] if 'vers' in o)})")
    if bad:
        return _mk("storage.shared", "fail", "; ".join(bad + good), exp,
                   "a shared file system is missing or mounted without the declared options (flock missing breaks "
                   "file locking; a missing mount sends data to the local disk)",
                   "mount it with the declared options (the lustre_client / nfs roles; `mount -a`), check LNet (`lctl ping`)")
    return _mk("storage.shared", "pass", "; ".join(good), exp)


def expected_handlers(e: NodeExpectation) -> list[str]:
    """containerd runtime handlers the group needs: ``nvidia`` for GPU containers, the sandbox's handler."""
    sb = e.ns.sandbox
    out = []
    if e.ns.container_default_runtime == "nvidia" and sb.runtime == "container":
        out.append("nvidia")
    if sb.runtime in ("kata", "gvisor"):
        # the node settings name the handler the cloud user data or the roles register
        out.append(sb.runtime_handler or sb.runtime)
    return out


def check_runtimes(f: NodeFacts, e: NodeExpectation) -> Check:
    want = expected_handlers(e)
    exp = ("containerd runtimes " + ", ".join(want)) if want else "no extra runtime"
    if not want:
        return _mk("software.runtimes", NA, "no GPU container runtime or sandbox declared", exp)
    cfg = parse_containerd_runtimes(f.file("/etc/containerd/config.toml"))
    docker = f.file("/etc/docker/daemon.json") or ""
    if cfg is None and not docker:
        return _mk("software.runtimes", "fail", "no /etc/containerd/config.toml or /etc/docker/daemon.json", exp,
                   "no container runtime is configured on this node", "run the container_runtime role (clusterforge up)")
    have = set((cfg or {}).get("runtimes") or {}) | ({"nvidia"} if '"nvidia"' in docker else set())
    miss = [h for h in want if h not in have]
    meas = f"registered: {', '.join(sorted(have)) or 'none'}"
    if miss:
        return _mk("software.runtimes", "fail", meas, exp,
                   f"runtime handler(s) {', '.join(miss)} not registered: pods of the RuntimeClass never start "
                   "(`no runtime for ... is configured`)", "rerun the container_runtime role and restart containerd")
    return _mk("software.runtimes", "pass", meas, exp)


def check_modules(f: NodeFacts, e: NodeExpectation) -> Check:
    want = []
    if e.ns.install_gpu_driver:
        want.append("nvidia")
    if e.ns.gpudirect_rdma == "nvidia-peermem":
        want.append(_facts()["peermem"]["module"])
    if isinstance(e.bp.network, (InfinibandNetwork, RoceNetwork)):
        want.append("mlx5_ib")
    if isinstance(e.bp.network, EfaNetwork):
        want.append(_facts()["efa"]["driver"])
    if e.ns.lustre:
        want.append("lustre")
    exp = ("built for the running kernel: " + ", ".join(want)) if want else "no out-of-tree module declared"
    if not want:
        return _mk("software.modules", NA, f"kernel {f.kernel}", exp)
    bad: list[str] = []
    good: list[str] = []
    for mod in want:
        c = f.cmd(f"modinfo {mod}")
        vm = c.stdout.strip().split()[0] if c.ok and c.stdout.strip() else None
        if not c.ran:
            return _mk("software.modules", "invalid", "modinfo not found", exp, "", "install kmod")
        if vm is None:
            bad.append(f"{mod}: none for {f.kernel}")
        elif vm != f.kernel:
            bad.append(f"{mod}: built for {vm}")
        else:
            good.append(mod)
    meas = f"kernel {f.kernel}; " + "; ".join(bad + ([f"ok: {', '.join(good)}"] if good else []))
    if bad:
        return _mk("software.modules", "fail", meas, exp,
                   "a module is not built for the running kernel (a kernel update without a DKMS rebuild): it will "
                   "not load after the next reboot, or is missing now",
                   "install the headers of the running kernel and rebuild (dkms autoinstall), or boot the kernel the "
                   "modules were built for")
    return _mk("software.modules", "pass", meas, exp)


NODE_CHECKS: tuple[Callable[[NodeFacts, NodeExpectation], Check], ...] = (
    check_gpu_count, check_gpu_driver, check_gpu_persistence, check_gpu_ecc, check_gpu_mig, check_gpu_nvlink,
    check_fabric_manager, check_nvlsm, check_gdr, check_ports, check_mtu, check_roce_gid, check_roce_qos,
    check_ipoib, check_acs, check_iommu, check_memlock, check_shm, check_scratch, check_raid, check_shared,
    check_runtimes, check_modules,
)


def run_checks(facts: NodeFacts, exp: NodeExpectation) -> list[Check]:
    """Every check of :data:`CHECKS` on one node, in table order."""
    return [fn(facts, exp) for fn in NODE_CHECKS]


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


def _reason(c: Check) -> str:
    s = f"{c.id}: measured {c.measured}; expected {c.expected}"
    if c.cause:
        s += f". Cause: {c.cause}"
    if c.fix:
        s += f". Fix: {c.fix}"
    return s + ("" if not c.blocking else " [blocking]")


class NodeMetrics(Metrics, total=False):
    """What a node result holds (``JudgeResult.metrics`` of kind ``node``): ``host`` (the node, or
    ``cross-node``), ``group`` (its node group), ``checks`` (every :class:`Check` as its JSON dict),
    ``blocking`` (ids of the failed blocking checks), ``summary`` (``20 pass, 3 n/a, 1 fail``)."""

    host: str
    group: str
    checks: list[dict[str, Any]]
    blocking: list[str]
    summary: str


class NodeExpected(Expected, total=False):
    """What a node result was compared with: ``checks``, the number of checks run."""

    checks: int


def node_metrics(r: JudgeResult) -> NodeMetrics:
    """``r.metrics`` as the node checks' keys (``r`` a result of kind ``node``; the same dictionary)."""
    return cast(NodeMetrics, r.metrics)


def _result(source: str, label: str, host: str, checks: list[Check], group: str) -> JudgeResult:
    m, e = NodeMetrics(), NodeExpected()
    r = JudgeResult(source=source, kind="node", label=label, metrics=m, expected=e)
    for c in checks:
        if c.verdict in ("warn", "fail", "invalid"):
            r.degrade(c.verdict, _reason(c))
    if all(c.verdict == NA for c in checks):
        r.degrade("invalid", "every check is not applicable: the node showed nothing to judge")
    counts = {v: sum(c.verdict == v for c in checks) for v in CHECK_VERDICTS}
    m.update({"host": host, "group": group, "checks": [c.to_json() for c in checks],
              "blocking": [c.id for c in checks if c.blocking],
              "summary": ", ".join(f"{n} {v}" for v, n in counts.items() if n)})
    e["checks"] = len(checks)
    na = [c.id for c in checks if c.verdict == NA]
    if na:
        r.note(f"not applicable on this node (each check's measurement says why): {', '.join(na)}")
    return r


def expected_runtime_class(e: NodeExpectation) -> tuple[str, str] | None:
    """``(RuntimeClass name, handler)`` the group's pods run under on Kubernetes (``None``: the default runtime)."""
    sb = e.ns.sandbox
    if sb.runtime not in ("kata", "gvisor") or not sb.runtime_class:
        return None
    return sb.runtime_class, sb.runtime_handler or sb.runtime


def check_runtime_class(cluster: list[dict[str, Any]], e: NodeExpectation) -> Check:
    """The group's RuntimeClass against ``kubectl get runtimeclass -o json`` (a ``node-health-cluster`` document)."""
    src = _src("runtime_class")
    want = expected_runtime_class(e)
    if want is None:
        return Check("cross.runtimeclass", NA, "no sandbox RuntimeClass declared", "none", source=src)
    exp = f"RuntimeClass {want[0]} with handler {want[1]}"
    if not cluster:
        return Check("cross.runtimeclass", NA, "not a Kubernetes run (no RuntimeClass list)", exp, source=src)
    have = {str(rc.get("name")): str(rc.get("handler")) for d in cluster for rc in d.get("runtimeclasses") or []}
    meas = ", ".join(f"{k} -> {v}" for k, v in sorted(have.items())) or "no RuntimeClass"
    if have.get(want[0]) == want[1]:
        return Check("cross.runtimeclass", PASS, meas, exp, source=src)
    cause = (f"RuntimeClass {want[0]} is missing: pods asking for it are rejected" if want[0] not in have else
             f"RuntimeClass {want[0]} names handler {have[want[0]]}, the nodes register {want[1]}: pods never start")
    return Check("cross.runtimeclass", FAIL, meas, exp, cause,
                 "create the RuntimeClass with the node's handler (the stack's Kubernetes add-ons do it)", src, True)


def cross_checks(nodes: list[tuple[NodeFacts, NodeExpectation]], cluster: list[dict[str, Any]] | None = None,
                 expectation: NodeExpectation | None = None) -> list[Check]:
    """MTU, driver version and RoCE GID index compared across all nodes of a run, and the group's
    RuntimeClass against the cluster's (``cluster``: ``node-health-cluster`` documents)."""
    out = []
    mtus = {(f.host, nd): v for f, e in nodes for nd, v in measured_mtus(f, e).items() if v is not None}
    exp = "one value on every node"
    if mtus:
        vals = sorted(set(mtus.values()))
        meas = "; ".join(f"{h}/{nd} {v}" for (h, nd), v in sorted(mtus.items()))
        out.append(Check("cross.mtu", PASS if len(vals) == 1 else FAIL, meas if len(vals) > 1 else f"MTU {vals[0]} on "
                         f"{len(mtus)} interface(s)", exp, "" if len(vals) == 1 else
                         "MTU differs between nodes or ports: path MTU mismatches drop large RDMA/IPoIB frames",
                         "" if len(vals) == 1 else "set one MTU (network.mtu) on every fabric interface and switch port",
                         _src("infiniband_port"), len(vals) > 1))
    else:
        out.append(Check("cross.mtu", NA, "no fabric interface", exp, source=_src("infiniband_port")))
    drv = {f.host: str(v) for f, _ in nodes if (v := (f.smi or {}).get("driver_version"))}
    if drv:
        versions = sorted(set(drv.values()))
        out.append(Check("cross.driver", PASS if len(versions) == 1 else FAIL,
                         f"driver {versions[0]} on {len(drv)} node(s)" if len(versions) == 1 else
                         "; ".join(f"{h} {v}" for h, v in sorted(drv.items())), exp,
                         "" if len(versions) == 1 else "nodes run different driver versions: NCCL and CUDA behave "
                         "differently per node; Fabric Manager must match each driver",
                         "" if len(versions) == 1 else "install one driver version on every node",
                         _src("nvidia_smi"), len(versions) > 1))
    else:
        out.append(Check("cross.driver", NA, "no GPU driver seen", exp, source=_src("nvidia_smi")))
    gids: dict[str, set[int | None]] = {}
    for f, e in nodes:
        # a discovered index is looked up on each node, so it may differ between nodes
        if isinstance(e.bp.network, RoceNetwork) and e.bp.network.roce.gid_index != "discover":
            for n in e.nics:
                gids.setdefault(f.host, set()).update(gid_index_found(f, n.device, n.port, n.netdev).values())
    if gids:
        allv = {v for s in gids.values() for v in s if v is not None}
        ok = len(allv) == 1 and all(None not in s for s in gids.values())
        out.append(Check("cross.gid", PASS if ok else FAIL,
                         "; ".join(f"{h}: {sorted(map(str, s))}" for h, s in sorted(gids.items())), exp,
                         "" if ok else "the RoCE v2 GID sits at different indexes on different nodes: one "
                         "NCCL_IB_GID_INDEX cannot serve them all", "" if ok else
                         "make the interface address configuration identical on every node", _src("roce_gid"), not ok))
    else:
        out.append(Check("cross.gid", NA, "not a RoCE fabric", exp, source=_src("roce_gid")))
    e0 = expectation or (nodes[0][1] if nodes else None)
    if e0 is not None:
        out.append(check_runtime_class(cluster or [], e0))
    return out


def judge_node_documents(docs: list[dict[str, Any]], bp: Blueprint, group: str, *, source: str,
                         label: str = "node", expected_nodes: int | None = None,
                         cluster: list[dict[str, Any]] | None = None) -> list[JudgeResult]:
    """Judge node-health documents of node group ``group``.

    Returns one result per node (label ``"<label>: <host>"``, ``metrics["checks"]`` the checks),
    plus one ``"<label>: cross-node"`` result when there are several nodes, fewer than
    ``expected_nodes`` answered, or ``cluster`` documents (the Kubernetes RuntimeClass list) came along. No document at all gives one ``invalid`` result.
    """
    exp = node_expectation(bp, group)
    if not docs:
        r = JudgeResult(source=source, kind="node", label=label)
        r.degrade("invalid", "no node-health document in the output: the payload did not run (see the log)")
        return [r]
    nodes = []
    results = []
    for d in docs:
        f = parse_document(d)
        checks = run_checks(f, exp)
        nodes.append((f, exp))
        results.append(_result(source, f"{label}: {f.host}", f.host, checks, exp.group.name))
    if len(nodes) > 1 or (expected_nodes and len(nodes) < expected_nodes) or cluster:
        cross = cross_checks(nodes, cluster, exp)
        missing = bool(expected_nodes and len(nodes) < expected_nodes)
        if missing or any(c.verdict != NA for c in cross):  # nothing to compare: no cross-node result
            r = _result(source, f"{label}: cross-node", "cross-node", cross, exp.group.name)
            if missing:
                r.degrade("fail", f"{len(nodes)} of {expected_nodes} node(s) answered: the others did not run the payload")
            results.append(r)
    return results


def judge_node_file(path: Path, bp: Blueprint, group: str, *, label: str = "node",
                    expected_nodes: int | None = None) -> list[JudgeResult]:
    """:func:`judge_node_documents` on a raw file (see :func:`validate.parsers.node.read_documents`)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        text = ""
        r = JudgeResult(source=str(path), kind="node", label=label)
        r.degrade("invalid", f"cannot read {path}: {e}")
        return [r]
    return judge_node_documents(read_documents(text), bp, group, source=str(path), label=label,
                                expected_nodes=expected_nodes, cluster=read_documents(text, "node-health-cluster"))


def blocking_failures(results: Iterable[JudgeResult]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``{(group, host): [failed blocking check dicts]}`` from node results (``host`` ``cross-node`` for the
    cross-node checks, which concern every node of the group)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        if r.kind != "node":
            continue
        m = node_metrics(r)
        bad = [c for c in m.get("checks") or [] if c.get("blocking")]
        if bad:
            out[(str(m.get("group")), str(m.get("host")))] = bad
    return out


def explains(check: dict[str, Any], kind: str) -> bool:
    """Whether a failed check (a ``Check`` dict) explains a result of suite ``kind``."""
    spec = CHECKS.get(str(check.get("id")))
    if spec is None:
        return kind in CROSS_EXPLAINS.get(str(check.get("id")), ())
    return kind in spec.explains


# ---------------------------------------------------------------------------------------------
# the node x check table of the reports
# ---------------------------------------------------------------------------------------------


@dataclass
class NodeTable:
    """The reports' node x check table: ``rows`` ``[(node label, {check id: Check dict})]``, ``columns``
    (check ids applicable on some node, in :data:`CHECKS` order, cross-node checks last), ``not_applicable``
    (check ids ``n/a`` on every node), ``failing`` (``[(node, Check dict)]`` for every warn / fail / invalid cell)."""

    rows: list[tuple[str, dict[str, dict[str, Any]]]]
    columns: list[str]
    not_applicable: list[str]
    failing: list[tuple[str, dict[str, Any]]]


def node_table(results: Iterable[JudgeResult]) -> NodeTable | None:
    """The :class:`NodeTable` of the node results among ``results`` (``None`` when there is none)."""
    rows = []
    for r in results:
        m = node_metrics(r)
        if r.kind != "node" or not m.get("checks"):
            continue
        name = str(m.get("host") or r.title)
        if str(m.get("group")) and len({node_metrics(x).get("group") for x in results if x.kind == "node"}) > 1:
            name = f"{m.get('group')}/{name}"
        rows.append((name, {str(c["id"]): c for c in m["checks"]}))
    if not rows:
        return None
    order = list(CHECKS) + list(CROSS_CHECKS)
    seen = [cid for cid in order if any(cid in cells for _, cells in rows)]
    cols = [cid for cid in seen if any(cells.get(cid, {}).get("verdict") not in (None, NA) for _, cells in rows)]
    na = [cid for cid in seen if cid not in cols]
    failing = [(name, cells[cid]) for name, cells in rows for cid in cols
               if cells.get(cid, {}).get("verdict") in ("warn", "fail", "invalid")]
    return NodeTable(rows=rows, columns=cols, not_applicable=na, failing=failing)
