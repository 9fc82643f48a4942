#!/usr/bin/env python3
"""Node health collector: what this node really has, as one JSON document (standard library only).

Runs on a cluster node before any collective (``python3 node_health.py [--services UNIT,...] [--output FILE]``) and
collects, with the standard tools and files, everything the node checks judge. It does not judge:
it records the tools' own output verbatim (``nvidia-smi -q -x`` XML, ``lspci -vvv`` text,
``findmnt --json`` ...) and the sysfs / procfs files as read, so the judge (``validate.node_checks``)
works on exactly what the tools said, and recorded outputs can be replayed in tests.

Document (one JSON object on one line; several nodes' documents concatenate as JSON lines)::

    {"kind": "node-health", "version": 1, "host": "gpu-01", "hostname": "gpu-01", "kernel": "6.8.0-45-generic",
     "collected_at": "2026-01-01T00:00:00+00:00", "uid": 0,
     "commands": {"nvidia-smi -q -x": {"argv": [...], "rc": 0, "stdout": "...", "stderr": "",
                                       "missing": false}, ...},
     "files": {"/proc/cmdline": "...", "/proc/mdstat": "...", ...},   # None: absent/unreadable
     "dirs": {"/sys/class/iommu": [...], ...},                           # None: absent
     "sysfs": {"/sys/class/net/ib0/mtu": "4092", ...},
     "links": {"/sys/bus/pci/devices/0000:18:00.0": "/sys/devices/pci0000:15/...", ...},
     "statvfs": {"/dev/shm": {"size_bytes": 67108864}},
     "processes": ["nv-fabricmanage", "nvlsm", ...]}

A missing tool is recorded as ``"missing": true`` (never an error): the judge then says what it
could not see. ``--host-root`` prefixes the configuration files read (``/etc/...``) for a run in a
container that mounts the host's root read-only there. Exit status 0 whenever the document was
written.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import socket
import subprocess
import sys

VERSION = 1
MAX_TEXT = 4 * 1024 * 1024
"""Longest text kept from one command or file (bytes); longer output is cut and marked."""

MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "ib_core", "mlx5_core", "mlx5_ib", "efa",
           "lustre", "lnet", "ko2iblnd", "vfio_pci", "nfs")
"""Kernel modules whose ``modinfo -F vermagic`` is recorded (built for the running kernel?)."""

FILES = ("/proc/cmdline", "/proc/mdstat", "/proc/modules", "/proc/self/limits", "/proc/driver/nvidia/version",
         "/proc/sys/kernel/osrelease")
"""Kernel files read as they are."""

CONFIG_FILES = ("/etc/docker/daemon.json", "/etc/containerd/config.toml", "/etc/nvidia-container-runtime/config.toml",
                "/etc/security/limits.d/90-clusterforge-memlock.conf", "/etc/nccl.conf")
"""Configuration files read under ``--host-root``."""



def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n[clusterforge: output cut]\n"


def run(argv: list[str], timeout: float = 60) -> dict:
    """``{"argv", "rc", "stdout", "stderr", "missing"}`` of one command (never raises)."""
    rec: dict = {"argv": argv, "rc": None, "stdout": "", "stderr": "", "missing": False}
    if shutil.which(argv[0]) is None:
        rec["missing"] = True
        return rec
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        rec["stderr"] = f"timed out after {timeout:g} s"
        rec["rc"] = 124
        return rec
    except OSError as e:
        rec["stderr"] = str(e)
        rec["rc"] = 127
        return rec
    rec["rc"] = p.returncode
    rec["stdout"] = _cut(p.stdout.decode("utf-8", "replace"))
    rec["stderr"] = _cut(p.stderr.decode("utf-8", "replace"))[-4000:]
    return rec


def read(path: str) -> str | None:
    """The text of ``path`` (``None`` when absent or unreadable)."""
    try:
        with open(path, "rb") as f:
            return _cut(f.read(MAX_TEXT + 1).decode("utf-8", "replace"))
    except OSError:
        return None


def listdir(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def collect_sysfs(doc: dict) -> None:
    """RDMA ports, network interfaces, IOMMU groups and PCI topology from sysfs."""
    sysfs: dict = doc["sysfs"]
    dirs: dict = doc["dirs"]
    links: dict = doc["links"]

    def keep(path: str) -> None:
        v = read(path)
        if v is not None:
            sysfs[path] = v.strip()

    ib = "/sys/class/infiniband"
    dirs[ib] = listdir(ib)
    for dev in dirs[ib] or []:
        base = f"{ib}/{dev}"
        keep(f"{base}/node_type")
        keep(f"{base}/fw_ver")
        dirs[f"{base}/device/net"] = listdir(f"{base}/device/net")
        drv = os.path.realpath(f"{base}/device/driver") if os.path.exists(f"{base}/device/driver") else None
        if drv:
            links[f"{base}/device/driver"] = drv
        links[f"{base}/device"] = os.path.realpath(f"{base}/device")
        ports = listdir(f"{base}/ports") or []
        dirs[f"{base}/ports"] = ports
        for port in ports:
            p = f"{base}/ports/{port}"
            for leaf in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid"):
                keep(f"{p}/{leaf}")
            for i in range(16):  # the first GID table entries: NCCL_IB_GID_INDEX is small
                keep(f"{p}/gids/{i}")
                keep(f"{p}/gid_attrs/types/{i}")
                keep(f"{p}/gid_attrs/ndevs/{i}")
    net = "/sys/class/net"
    dirs[net] = listdir(net)
    for nd in dirs[net] or []:
        base = f"{net}/{nd}"
        for leaf in ("mtu", "operstate", "speed", "type", "mode", "address"):
            keep(f"{base}/{leaf}")
        if os.path.exists(f"{base}/device/driver"):
            links[f"{base}/device/driver"] = os.path.realpath(f"{base}/device/driver")
        ecn = f"{base}/ecn/roce_np/enable"
        if os.path.isdir(ecn):
            for i in range(8):
                keep(f"{ecn}/{i}")
    dirs["/sys/class/iommu"] = listdir("/sys/class/iommu")
    groups = listdir("/sys/kernel/iommu_groups")
    dirs["/sys/kernel/iommu_groups"] = groups
    for g in groups or []:
        keep(f"/sys/kernel/iommu_groups/{g}/type")
    for dev in listdir("/sys/bus/pci/devices") or []:
        p = f"/sys/bus/pci/devices/{dev}"
        links[p] = os.path.realpath(p)
        if os.path.exists(f"{p}/driver"):
            links[f"{p}/driver"] = os.path.realpath(f"{p}/driver")
        keep(f"{p}/class")
        keep(f"{p}/vendor")


def collect_commands(doc: dict, services: list[str] | tuple[str, ...] = ()) -> None:
    """The tools' outputs: ``nvidia-smi``, ``lspci``, ``findmnt``, ``ip``, ``systemctl is-active`` of each unit of
    ``services``, ``modinfo`` of :data:`MODULES`, ``mlnx_qos`` of every RoCE netdev."""
    cmds: dict = doc["commands"]
    cmds["nvidia-smi -q -x"] = run(["nvidia-smi", "-q", "-x"], timeout=120)
    if not cmds["nvidia-smi -q -x"]["missing"]:
        cmds["nvidia-smi nvlink -s"] = run(["nvidia-smi", "nvlink", "-s"])
    cmds["lspci -vvv"] = run(["lspci", "-vvv", "-D"], timeout=120)
    cmds["findmnt"] = run(["findmnt", "--json", "--list", "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"])
    cmds["ip addr"] = run(["ip", "-j", "addr", "show"])
    for unit in services:
        cmds[f"systemctl is-active {unit}"] = run(["systemctl", "is-active", unit], timeout=20)
    for mod in MODULES:
        cmds[f"modinfo {mod}"] = run(["modinfo", "-F", "vermagic", mod], timeout=20)
    # RoCE QoS of every netdev that belongs to an RDMA device (ConnectX: mlnx_qos from DOCA/MLNX_OFED)
    netdevs = {}
    for dev in doc["dirs"].get("/sys/class/infiniband") or []:
        for nd in doc["dirs"].get(f"/sys/class/infiniband/{dev}/device/net") or []:
            netdevs[nd] = dev
    for nd, dev in sorted(netdevs.items()):
        if doc["sysfs"].get(f"/sys/class/infiniband/{dev}/ports/1/link_layer") == "Ethernet":
            cmds[f"mlnx_qos -i {nd}"] = run(["mlnx_qos", "-i", nd], timeout=30)


def processes() -> list[str]:
    """Names (``comm``, 15 characters at most) of the running processes."""
    names = set()
    for p in glob.glob("/proc/[0-9]*/comm"):
        v = read(p)
        if v:
            names.add(v.strip())
    return sorted(names)


def collect(host_root: str = "/", node_name: str | None = None, services: list[str] | tuple[str, ...] = ()) -> dict:
    """The node-health document of this node (see the module docstring). ``node_name``: the name the
    cluster knows the node by (inventory host, Kubernetes node); default ``$CLUSTERFORGE_NODE_NAME``,
    then Slurm's ``$SLURMD_NODENAME``, else the host name. ``services``: systemd unit names whose
    ``systemctl is-active`` state is recorded (the lead passes the catalog's vendor units and container
    engines, ``--services``; the payload knows no unit by name)."""
    doc: dict = {
        "kind": "node-health",
        "version": VERSION,
        "host": (node_name or os.environ.get("CLUSTERFORGE_NODE_NAME") or os.environ.get("SLURMD_NODENAME")
                 or socket.gethostname()),
        "hostname": socket.gethostname(),
        "kernel": os.uname().release,
        "machine": os.uname().machine,
        "collected_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017 - Python 3.9 nodes
        "uid": os.getuid(),
        "host_root": host_root,
        "commands": {},
        "files": {},
        "dirs": {},
        "sysfs": {},
        "links": {},
        "statvfs": {},
        "processes": [],
    }
    for f in FILES:
        doc["files"][f] = read(f)
    for f in CONFIG_FILES:
        doc["files"][f] = read(os.path.join(host_root, f.lstrip("/")))
    for path in ("/dev/shm",):
        try:
            st = os.statvfs(path)
            doc["statvfs"][path] = {"size_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}
        except OSError:
            doc["statvfs"][path] = None
    collect_sysfs(doc)
    collect_commands(doc, services)
    doc["processes"] = processes()
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--output", help="write the document here (default: stdout)")
    ap.add_argument("--host-root", default="/", help="where the host's root is mounted (containers)")
    ap.add_argument("--node-name", help="the node's name in the cluster (default: $CLUSTERFORGE_NODE_NAME, $SLURMD_NODENAME "
                    "or the host name)")
    ap.add_argument("--services", default="", help="comma-separated systemd units whose `systemctl is-active` state "
                    "is recorded (the runner passes the catalog's vendor units and container engines)")
    a = ap.parse_args(argv)
    services = [u for u in a.services.split(",") if u]
    text = json.dumps(collect(a.host_root, a.node_name, services), sort_keys=True) + "\n"
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
