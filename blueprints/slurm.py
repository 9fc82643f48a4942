"""Slurm from the blueprint: the cluster-wide settings (:class:`SlurmSettings`) and the pure renderer of the files
every Slurm node reads (:func:`slurm_files`).

:func:`slurm_settings` turns a blueprint with ``orchestrator: slurm`` into one frozen :class:`SlurmSettings`: the
Slurm version the nodes' distribution ships (catalog ``slurm.distributions``) and what that version supports
(``slurm.features``), the controller (the ``role: controller`` group's first host), one :class:`SlurmNode` per compute
host with its CPUs, memory and GPUs as gres (from the declared hardware or the catalog), the partitions, accounting,
topology and containers. :func:`slurm_files` writes ``slurm.conf``, ``gres.conf``, ``cgroup.conf``,
``topology.conf``, ``plugstack.conf`` and ``slurmdbd.conf`` from it, line by line through one ``key=value``
primitive (:func:`conf_line`), with only options the version has.

Both targets and ``clusterforge render`` read these files (node settings carry them to the roles; the rules check the
settings), so what ``check`` judged is what the nodes get. Sources: https://slurm.schedmd.com/slurm.conf.html,
https://slurm.schedmd.com/gres.conf.html, https://slurm.schedmd.com/cgroup.conf.html,
https://slurm.schedmd.com/topology.conf.html, https://slurm.schedmd.com/slurmdbd.conf.html.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .catalog import Catalog, catalog
from .hardware import group_hardware, nvidia_device_files
from .models import (
    Blueprint,
    EfaNetwork,
    InfinibandNetwork,
    NodeGroup,
    RoceNetwork,
    SlurmOrchestrator,
)

__all__ = [
    "CONF_DIR",
    "SlurmNode",
    "SlurmPartitionSettings",
    "SlurmSettings",
    "aws_dns_zone",
    "compress_hostlist",
    "conf_line",
    "describe",
    "enroot_files",
    "pyxis_file",
    "pyxis_url",
    "slurm_catalog",
    "slurm_files",
    "slurm_settings",
    "version_tuple",
]

CONF_DIR = "/etc/slurm"
"""Where the Debian and Ubuntu packages read the configuration (``slurm-client``'s default ``SLURM_CONF``)."""
STATE_DIR = "/var/spool/slurmctld"
SPOOL_DIR = "/var/spool/slurmd"
LOG_DIR = "/var/log/slurm"
HEALTH_PROGRAM = "/usr/sbin/clusterforge-slurm-health"
"""The node health check slurmd runs (``roles/slurm_node/files/clusterforge-slurm-health``)."""
HEALTH_EXPECTATIONS = "/etc/clusterforge/slurm-health.json"
PROLOG = f"{CONF_DIR}/prolog.sh"
EPILOG = f"{CONF_DIR}/epilog.sh"
PROLOG_EPILOG_TIMEOUT_S = 300
"""``PrologEpilogTimeout``: a prolog or epilog that hangs is killed and the node drained, instead of holding the job
(ParallelCluster issue 6777, "Prolog hung")."""
HEALTH_TIMEOUT_S = 50
"""The health check stops its own checks after this many seconds, inside slurmd's 60 s kill (catalog
``slurm.health_check_kill_s``)."""
HEALTH_REASON = "cf-health"
"""Prefix of the reason the health check drains a node with; it resumes only nodes whose reason starts with it."""
DATABASE = "slurm_acct_db"
DATABASE_USER = "slurm"
DB_PASSWORD_FILE = f"{CONF_DIR}/slurmdbd.dbpass"


def slurm_catalog(cat: Catalog | None = None) -> dict[str, Any]:
    """The ``slurm`` section of ``cat`` (default: the catalog, ``blueprints/data/catalog-extras.yaml``):
    distributions, packages, features, ports, CPU topologies, each with its source."""
    return (cat or catalog()).extras["slurm"]


def version_tuple(v: str) -> tuple[int, ...]:
    """``"22.05.8"`` -> ``(22, 5, 8)``: Slurm versions compare as tuples of integers."""
    return tuple(int(p) for p in v.split(".") if p.isdigit())


@dataclass(frozen=True)
class SlurmNode:
    """One compute host as slurm.conf names it.

    ``name``: the host's short hostname (``NodeName``, what ``hostname -s`` prints on the node); ``address``: where
    slurmctld reaches it (``NodeAddr``; ``None`` on AWS, where nodes register their own); ``cpus`` logical CPUs;
    ``sockets`` / ``cores_per_socket`` / ``threads_per_core`` ``None`` when only the CPU count is known;
    ``real_memory_mib`` ``RealMemory`` in MiB (95 % of the installed memory), ``None`` when unknown;
    ``mem_spec_limit_mib`` memory kept for the OS and daemons (``MemSpecLimit``, MiB); ``gpu_type`` the gres type (the
    GPU's catalog key) and ``gpus`` the count; ``features`` node features (group, GPU model, fabric).
    """

    name: str
    address: str | None
    group: str
    cpus: int | None
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    real_memory_mib: int | None
    mem_spec_limit_mib: int | None
    gpu_type: str | None
    gpus: int
    features: tuple[str, ...]

    @property
    def gpu_files(self) -> str | None:
        """The gres.conf ``File=`` of the node's GPUs, ``/dev/nvidia[0-7]`` (NVIDIA's device files are ``/dev/nvidiaN``,
        https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html#device-node-verification)."""
        if not self.gpus:
            return None
        return "/dev/nvidia0" if self.gpus == 1 else f"/dev/nvidia[0-{self.gpus - 1}]"

    @property
    def gpu_devices(self) -> list[str]:
        """Every GPU device file of the node, ``["/dev/nvidia0", ...]`` (:func:`blueprints.hardware.nvidia_device_files`)."""
        return nvidia_device_files(self.gpus)


@dataclass(frozen=True)
class SlurmPartitionSettings:
    """One partition: its ``name``, the ``nodes`` it holds (NodeNames), whether it is the ``default``, ``max_time``
    (``None``: Slurm's default) and ``exclusive`` (``OverSubscribe=EXCLUSIVE``)."""

    name: str
    nodes: tuple[str, ...]
    groups: tuple[str, ...]
    default: bool
    max_time: str | None
    exclusive: bool


@dataclass(frozen=True)
class SlurmSettings:
    """Everything the Slurm files of one cluster are rendered from (see the module docstring).

    ``os``: the nodes' operating system; ``version``: the distribution's Slurm (``"22.05.8"``), ``package_version`` its
    Debian revision and ``version_source`` where both were read; ``features``: the capabilities that version has
    (catalog ``slurm.features``); ``controller`` / ``controller_address``: the controller's hostname and address
    (``None`` on AWS until deploy time); ``controller_group``; ``login_groups`` / ``compute_groups``: group names;
    ``nodes``; ``partitions``; ``cgroup_version``: the nodes' cgroup hierarchy (``v2`` on every OS clusterforge
    claims); ``topology``: ``none`` / ``tree`` / ``block``; ``switches``: topology.conf switch lines
    ``(name, nodes, children)``.
    """

    blueprint: str
    cluster_name: str
    os: str
    version: str
    package_version: str
    version_source: str
    features: frozenset[str]
    controller: str | None
    controller_address: str | None
    controller_group: str | None
    login_groups: tuple[str, ...]
    compute_groups: tuple[str, ...]
    nodes: tuple[SlurmNode, ...]
    partitions: tuple[SlurmPartitionSettings, ...]
    configless: bool
    gres: Literal["explicit", "autodetect"]
    cgroup_version: Literal["v1", "v2"]
    accounting: bool
    database_host: str | None
    database_port: int
    password_file: str
    pyxis: bool
    topology: Literal["none", "tree", "block"]
    switches: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    health_check_interval_s: int
    rdma: bool
    ports: Mapping[str, int] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)
    container_pins: Mapping[str, str] = field(default_factory=dict)
    """SHA-256 of the enroot / pyxis release files by file name: the catalog's (none published today) and then the
    blueprint's ``orchestrator.container_pins``."""

    def has(self, feature: str) -> bool:
        """Whether the cluster's Slurm version has ``feature`` (a key of catalog ``slurm.features``)."""
        return feature in self.features

    def group_nodes(self, group: str) -> list[SlurmNode]:
        """The nodes of one compute group."""
        return [n for n in self.nodes if n.group == group]

    @property
    def conf_server(self) -> str:
        """``host:port`` configless slurmds fetch the configuration from."""
        return f"{self.controller}:{self.ports['slurmctld']}"


def _features(version: str, cat: dict[str, Any]) -> frozenset[str]:
    have = version_tuple(version)
    return frozenset(k for k, v in cat["features"].items() if have >= version_tuple(str(v["since"])))


def _cpu_topology(bp: Blueprint, g: NodeGroup,
                  cat: dict[str, Any]) -> tuple[int | None, int | None, int | None, int | None, float | None]:
    """``(cpus, sockets, cores_per_socket, threads_per_core, memory_gib)`` of one host of ``g``: declared hardware
    first, then the catalog's system / instance type (``slurm.cpu_topology``, ``aws_instance_types``)."""
    topo = cat.get("cpu_topology", {})
    hw = g.hardware
    key = g.instance_type if bp.is_aws else (hw.system if hw else None)
    entry = topo.get(key or "", {})
    sockets = entry.get("sockets")
    cores = entry.get("cores_per_socket")
    threads = entry.get("threads_per_core")
    memory = entry.get("memory_gib")
    cpus = sockets * cores * threads if sockets and cores and threads else None
    if bp.is_aws:
        it = group_hardware(bp, g).instance
        if it is not None:
            cpus = it.vcpus or cpus
            memory = it.memory_gib or memory
    if hw is not None and hw.cpu is not None:
        sockets, cores, threads, cpus = (hw.cpu.sockets, hw.cpu.cores_per_socket, hw.cpu.threads_per_core,
                                         hw.cpu.cpus)
    if hw is not None and hw.memory_gib is not None:
        memory = hw.memory_gib
    return cpus, sockets, cores, threads, memory


def host_memory_gib(bp: Blueprint, g: NodeGroup) -> float | None:
    """Installed memory of one host of ``g`` in GiB (2^30 bytes): ``hardware.memory_gib`` when declared, else the AWS
    instance type's (``aws_instance_types``) or the catalog system's (``slurm.cpu_topology``); ``None`` when nothing
    says. The one answer Slurm's ``RealMemory`` and the fio judge's page-cache check both use."""
    return _cpu_topology(bp, g, slurm_catalog())[4]


def _fabric(bp: Blueprint) -> str | None:
    net = bp.network
    if isinstance(net, InfinibandNetwork):
        return "infiniband"
    if isinstance(net, RoceNetwork):
        return "roce"
    if isinstance(net, EfaNetwork):
        return "efa"
    return None


def real_memory_mib(memory_gib: float, cat: dict[str, Any] | None = None) -> int:
    """``RealMemory`` (MiB) for a host with ``memory_gib`` GiB installed: 95 % of it, rounded down (catalog
    ``slurm.real_memory_fraction``; ParallelCluster's rule, because slurmd measures less than is installed and drains a
    node whose ``RealMemory`` is above what it measures)."""
    return math.floor(memory_gib * 1024 * float((cat or slurm_catalog())["real_memory_fraction"]))


def aws_dns_zone(blueprint: str) -> str:
    """The Route 53 private hosted zone of an AWS Slurm cluster, ``<blueprint>.clusterforge.internal``: known at
    render time, so slurm.conf names every host ``NodeAddr=<name>.<zone>`` and no user data waits for another
    instance's IP (the stack makes the zone and one A record per instance, ``stacks/components/slurm.py``).
    ``.internal`` is the top-level domain ICANN reserved for private use
    (https://www.icann.org/en/board-activities-and-meetings/materials/approved-resolutions-special-meeting-of-the-icann-board-29-07-2024-en)."""
    return f"{blueprint}.clusterforge.internal"


def slurm_settings(bp: Blueprint, catalog_: Catalog | None = None) -> SlurmSettings | None:
    """The :class:`SlurmSettings` of ``bp`` against ``catalog_`` (default: the catalog), or ``None`` when its
    orchestrator is not Slurm.

    Never raises for a blueprint the models accepted: what cannot be known (no controller group, an OS without a
    catalogued Slurm, a host without CPU or memory figures) is left ``None`` / empty and the rules in
    :mod:`blueprints.rules.slurm` report it with a position and a fix.
    """
    orch = bp.orchestrator
    if not isinstance(orch, SlurmOrchestrator):
        return None
    full = catalog_ or catalog()
    cat = slurm_catalog(full)
    # every node runs one Slurm version: the OS of the GPU nodes' image (on-prem: the declared OS of every host)
    os_name = bp.target.node_os(full.aws["node_images"], kubernetes=False, gpus=True)
    dist = cat["distributions"].get(os_name, {})
    version = str(dist.get("version", "0"))
    controllers = [g for g in bp.node_groups if g.role == "controller"]
    ctl_group = controllers[0] if controllers else None
    controller = controller_address = None
    if ctl_group is not None and ctl_group.hosts:
        controller, controller_address = ctl_group.hosts[0].name, ctl_group.hosts[0].address
    elif ctl_group is not None:  # AWS: named by its instance tag, reached through its Route 53 record
        controller = f"{ctl_group.name}-0"
        controller_address = f"{controller}.{aws_dns_zone(bp.name)}" if bp.is_aws else None
    fabric = _fabric(bp)
    nodes: list[SlurmNode] = []
    compute = [g for g in bp.node_groups if g.compute]
    for g in compute:
        hw = group_hardware(bp, g, full)
        cpus, sockets, cores, threads, memory = _cpu_topology(bp, g, cat)
        real = real_memory_mib(memory, cat) if memory else None
        spec = math.floor(orch.os_memory_gib * 1024) if real else None
        gpu_type = hw.gpu_key if hw.nvidia_gpus else None
        feats = tuple(dict.fromkeys(f for f in (g.name, gpu_type, fabric) if f))
        names = [(h.name, h.address) for h in g.hosts] if g.hosts else [
            (f"{g.name}-{i}", f"{g.name}-{i}.{aws_dns_zone(bp.name)}" if bp.is_aws else None) for i in range(g.size)]
        for name, addr in names:
            nodes.append(SlurmNode(name, addr, g.name, cpus, sockets, cores, threads, real, spec, gpu_type,
                                   hw.nvidia_gpus, feats))
    partitions = _partitions(orch, compute, nodes, fabric)
    topology: Literal["none", "tree", "block"]
    if orch.topology == "auto":
        topology = "tree" if bp.network.rdma and len(nodes) > 1 else "none"
    else:
        topology = orch.topology
    switches: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
    if topology == "tree":
        leaves = [(f"leaf-{g.name}", tuple(n.name for n in nodes if n.group == g.name), ()) for g in compute]
        leaves = [leaf for leaf in leaves if leaf[1]]
        switches = leaves + ([("spine", (), tuple(leaf[0] for leaf in leaves))] if len(leaves) > 1 else [])
    acc = orch.accounting
    return SlurmSettings(
        blueprint=bp.name,
        cluster_name=orch.cluster_name or _cluster_name(bp.name),
        os=os_name,
        version=version,
        package_version=str(dist.get("package_version", "")),
        version_source=str(dist.get("source", cat["source"])),
        features=_features(version, cat),
        controller=controller,
        controller_address=controller_address,
        controller_group=ctl_group.name if ctl_group else None,
        login_groups=tuple(g.name for g in bp.node_groups if g.role == "login"),
        compute_groups=tuple(g.name for g in compute),
        nodes=tuple(nodes),
        partitions=tuple(partitions),
        configless=orch.configless,
        gres=orch.gres,
        cgroup_version=orch.cgroup_version,
        accounting=acc.enabled,
        database_host=acc.database_host,
        database_port=acc.database_port,
        password_file=acc.password_file or DB_PASSWORD_FILE,
        pyxis=orch.pyxis,
        topology=topology,
        switches=tuple(switches),
        health_check_interval_s=orch.health_check_interval_s,
        rdma=bp.network.rdma,
        ports=dict(cat["ports"]),
        extra=dict(orch.extra),
        container_pins={**_catalog_pins(cat), **orch.container_pins},
    )


def _catalog_pins(cat: Mapping[str, Any]) -> dict[str, str]:
    pins = {f"{k}": str(v) for k, v in (cat["enroot"].get("sha256") or {}).items()}
    if cat["pyxis"].get("sha256"):
        pins[pyxis_file(cat)] = str(cat["pyxis"]["sha256"])
    return pins


def enroot_files(arch: str, cat: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """``[(file name, URL)]`` of the enroot release packages for a dpkg architecture (``amd64``, ``arm64``), from the
    catalog's ``slurm.enroot`` (https://github.com/NVIDIA/enroot/blob/master/doc/installation.md)."""
    c = (cat or slurm_catalog())["enroot"]
    urls = [u.format(version=c["version"], arch=arch) for u in c["debs"]]
    return [(u.rsplit("/", 1)[1], u) for u in urls]


def pyxis_file(cat: Mapping[str, Any] | None = None) -> str:
    """The name the pyxis release tarball is pinned under, ``pyxis-<version>.tar.gz``."""
    return f"pyxis-{(cat or slurm_catalog())['pyxis']['version']}.tar.gz"


def pyxis_url(cat: Mapping[str, Any] | None = None) -> str:
    """Where the pyxis release tarball is downloaded from (catalog ``slurm.pyxis.url``)."""
    c = (cat or slurm_catalog())["pyxis"]
    return str(c["url"]).format(version=c["version"])


ENROOT_CONF = """\
# enroot.conf written by clusterforge: per-user runtime, data and cache on node-local storage, under root-owned
# parents (https://github.com/NVIDIA/enroot/blob/master/doc/configuration.md; pyxis issue 123: /run/enroot).
ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)
ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)
ENROOT_CACHE_PATH /var/lib/enroot/cache/user-$(id -u)
ENROOT_TEMP_PATH ${TMPDIR:-/tmp}
ENROOT_SQUASH_OPTIONS -noI -noD -noF -noX -no-duplicates
ENROOT_MOUNT_HOME y
ENROOT_RESTRICT_DEV y
ENROOT_ROOTFS_WRITABLE y
"""
"""``/etc/enroot/enroot.conf`` of every Slurm node (the enroot_pyxis role writes it)."""


def _cluster_name(name: str) -> str:
    """A blueprint name as a ``ClusterName``: lower case, letters, digits, ``_`` and ``-``, at most 40 characters."""
    out = "".join(c if c.isalnum() or c in "_-" else "-" for c in name.lower())[:40]
    return out if out[:1].isalpha() else f"c{out}"[:40]


def _partitions(orch: SlurmOrchestrator, compute: list[NodeGroup], nodes: list[SlurmNode],
                fabric: str | None) -> list[SlurmPartitionSettings]:
    by_group: dict[str, list[str]] = {}
    for n in nodes:
        by_group.setdefault(n.group, []).append(n.name)
    if orch.partitions:
        return [SlurmPartitionSettings(p.name, tuple(n for gname in p.groups for n in by_group.get(gname, [])),
                                       tuple(p.groups), p.default, p.max_time, p.exclusive)
                for p in orch.partitions]
    # one partition per (GPU model, fabric); the first GPU partition is `partition`, CPU-only groups go to `cpu`
    keyed: dict[tuple[str | None, str | None], list[str]] = {}
    for g in compute:
        gnodes = [n for n in nodes if n.group == g.name]
        gpu = gnodes[0].gpu_type if gnodes else None
        keyed.setdefault((gpu, fabric if gpu else None), []).append(g.name)
    out: list[SlurmPartitionSettings] = []
    for (gpu, _fab), groups in keyed.items():
        gpu_partitions = [p for p in out if p.name == orch.partition or p.name.startswith(f"{orch.partition}-")]
        if gpu is None:
            name = "cpu"
        elif not gpu_partitions:
            name = orch.partition
        else:
            name = f"{orch.partition}-{gpu}"
        out.append(SlurmPartitionSettings(name, tuple(n for gname in groups for n in by_group.get(gname, [])),
                                          tuple(groups), False, None, gpu is not None))
    if out:
        first = next((i for i, p in enumerate(out) if p.name == orch.partition), 0)
        p = out[first]
        out[first] = SlurmPartitionSettings(p.name, p.nodes, p.groups, True, p.max_time, p.exclusive)
    return out


# --- rendering -------------------------------------------------------------------------------------------------------

EXTRA_KEYS = (
    "AccountingStorageEnforce", "CompleteWait", "DebugFlags", "DefCpuPerGPU", "DefMemPerCPU", "DefMemPerGPU",
    "DefMemPerNode", "EnforcePartLimits", "FairShareDampeningFactor", "GetEnvTimeout", "InactiveLimit", "JobRequeue",
    "KillOnBadExit", "KillWait", "LaunchParameters", "MaxArraySize", "MaxJobCount", "MaxMemPerCPU", "MaxMemPerNode",
    "MaxStepCount", "MaxTasksPerNode", "MessageTimeout", "MinJobAge", "MpiDefault", "OverTimeLimit",
    "PriorityDecayHalfLife", "PriorityFavorSmall", "PriorityMaxAge", "PriorityType", "PriorityWeightAge",
    "PriorityWeightFairshare", "PriorityWeightJobSize", "PriorityWeightPartition", "PriorityWeightQOS",
    "PriorityWeightTRES", "PrivateData", "PropagateResourceLimits", "PropagateResourceLimitsExcept",
    "ReturnToService", "SchedulerParameters", "SlurmctldDebug", "SlurmctldTimeout", "SlurmdDebug", "SlurmdTimeout",
    "TCPTimeout", "TreeWidth", "UnkillableStepTimeout", "VSizeFactor", "Waittime",
)
"""The slurm.conf options ``orchestrator.extra`` may set (https://slurm.schedmd.com/slurm.conf.html): scheduling,
limits, timeouts, priorities and logging. Anything else is refused by the rule ``slurm-extra-key``: node and partition
lines are the blueprint's, ``Include`` would load a file ``check`` never saw, and the options that name a program
(``Prolog``, ``PrologSlurmctld``, ``ResumeProgram``, ``MailProg`` ...) or a plugin would let a blueprint value run code
as root on every node. Those that clusterforge writes itself (``PropagateResourceLimitsExcept``, ``ReturnToService``)
are replaced by the user's value."""

LEADING_KEYS = ("NodeName", "PartitionName", "SwitchName", "Name", "BlockName")
"""Keys that open a line of their own kind (slurm.conf, gres.conf, topology.conf) and so come first."""


def conf_value(value: Any) -> str:
    """One slurm.conf value: lists and tuples comma-joined, booleans ``YES`` / ``NO``, everything else ``str``.
    Raises ``ValueError`` for a value with whitespace, ``#`` or a newline: the blueprint's values are checked by the
    models and rules before they get here, so this is the last guard, not the validation."""
    if isinstance(value, bool):
        text = "YES" if value else "NO"
    elif isinstance(value, (list, tuple)):
        text = ",".join(conf_value(v) for v in value)
    else:
        text = str(value)
    if any(c.isspace() or c == "#" for c in text):
        raise ValueError(f"{text!r} cannot be a slurm.conf value (whitespace or '#')")
    return text


def conf_line(pairs: Mapping[str, Any]) -> str:
    """``key=value`` pairs as one configuration line: ``None`` and empty lists dropped, 0 and ``False`` kept, keys in
    :data:`LEADING_KEYS` first, then in the order given. Raises ``ValueError`` as :func:`conf_value`.

    >>> conf_line({"NodeName": "gpu-01", "CPUs": 2, "Weight": None, "Gres": ["gpu:l40s:2"]})
    'NodeName=gpu-01 CPUs=2 Gres=gpu:l40s:2'
    """
    items = [(k, v) for k, v in pairs.items() if v is not None and v != [] and v != ()]
    items.sort(key=lambda kv: 0 if kv[0] in LEADING_KEYS else 1)
    return " ".join(f"{k}={conf_value(v)}" for k, v in items)


def compress_hostlist(names: Iterable[str]) -> str:
    """Names as a Slurm hostlist expression: runs of names that differ only in a trailing zero-padded number become
    ``prefix[01-04]``; the rest are listed. ``["gpu-01", "gpu-02", "gpu-04", "ctl"]`` -> ``"ctl,gpu-[01-02,04]"``
    (https://slurm.schedmd.com/slurm.conf.html#SECTION_NODE-CONFIGURATION, hostlist expressions)."""
    import re

    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        if m and not m.group(1).endswith(("[", "]")):
            groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
        else:
            plain.append(n)
    parts = list(plain)
    for (prefix, width), nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        runs: list[str] = []
        start = prev = nums[0]
        for x in nums[1:] + [None]:  # type: ignore[list-item]
            if x is not None and x == prev + 1:
                prev = x
                continue
            runs.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if x is not None:
                start = prev = x
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(sorted(parts))


def _header(s: SlurmSettings, what: str) -> str:
    return (f"# {what} of Slurm cluster `{s.cluster_name}`, written by clusterforge from blueprint `{s.blueprint}`.\n"
            f"# Slurm {s.version} ({s.os} package {s.package_version}: {s.version_source}).\n"
            "# Do not edit on the node: change the blueprint and deploy again.\n")


def slurm_conf(s: SlurmSettings) -> str:
    """The text of ``slurm.conf`` (https://slurm.schedmd.com/slurm.conf.html)."""
    ctl = f"{s.controller}({s.controller_address})" if s.controller_address else s.controller
    ctld_params = ["enable_configless"] if s.configless and s.has("configless") else []
    pairs: dict[str, Any] = {
        "ClusterName": s.cluster_name,
        "SlurmctldHost": ctl,
        "SlurmctldPort": s.ports["slurmctld"],
        "SlurmdPort": s.ports["slurmd"],
        "SlurmUser": "slurm",
        "AuthType": "auth/munge",
        "StateSaveLocation": STATE_DIR,
        "SlurmdSpoolDir": SPOOL_DIR,
        "SlurmctldPidFile": "/run/slurmctld.pid",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmctldLogFile": f"{LOG_DIR}/slurmctld.log",
        "SlurmdLogFile": f"{LOG_DIR}/slurmd.log",
        "SlurmctldParameters": ctld_params,
        "SchedulerType": "sched/backfill",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "GresTypes": "gpu",
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": ["task/cgroup", "task/affinity"],
        "JobAcctGatherType": "jobacct_gather/cgroup",
        # RDMA registers pinned memory: the job keeps the node's unlimited memlock, not the submitting shell's
        "PropagateResourceLimitsExcept": "MEMLOCK" if s.rdma else None,
        "PrologFlags": ["Alloc", "Contain"],
        "Prolog": PROLOG,
        "Epilog": EPILOG,
        "PrologEpilogTimeout": PROLOG_EPILOG_TIMEOUT_S,
        "HealthCheckProgram": HEALTH_PROGRAM if s.health_check_interval_s else None,
        "HealthCheckInterval": s.health_check_interval_s or None,
        "HealthCheckNodeState": "ANY" if s.health_check_interval_s else None,
        "ReturnToService": 1,
        "TopologyPlugin": {"tree": "topology/tree", "block": "topology/block"}.get(s.topology),
    }
    if s.accounting:
        pairs.update({
            "AccountingStorageType": "accounting_storage/slurmdbd",
            "AccountingStorageHost": s.controller,
            "AccountingStoragePort": s.ports["slurmdbd"],
            "AccountingStorageTRES": "gres/gpu",
        })
    allowed = {k.lower(): k for k in EXTRA_KEYS}
    extra = {allowed[k.lower()]: v for k, v in s.extra.items() if k.lower() in allowed}
    for k in extra:
        pairs.pop(k, None)
    if "PropagateResourceLimits" in extra:  # the two are alternatives: the user's replaces clusterforge's
        pairs.pop("PropagateResourceLimitsExcept", None)
    lines = [_header(s, "slurm.conf")]
    lines += [f"{k}={conf_value(v)}" for k, v in pairs.items() if v is not None and v != [] and v != ()]
    if extra:
        lines += ["", "# orchestrator.extra"] + [f"{k}={conf_value(v)}" for k, v in extra.items()]
    lines.append("")
    lines.append("# Nodes: CPUs and memory from the blueprint's hardware or the catalog; RealMemory is 95 % of the "
                 "installed memory")
    for n in s.nodes:
        lines.append(conf_line({
            "NodeName": n.name,
            "NodeAddr": n.address,
            "CPUs": n.cpus,
            "Sockets": n.sockets,
            "CoresPerSocket": n.cores_per_socket,
            "ThreadsPerCore": n.threads_per_core,
            "RealMemory": n.real_memory_mib,
            "MemSpecLimit": n.mem_spec_limit_mib,
            "Gres": [f"gpu:{n.gpu_type}:{n.gpus}"] if n.gpus and n.gpu_type else None,
            "Feature": list(n.features),
            "State": "UNKNOWN",
        }))
    lines.append("")
    for p in s.partitions:
        if not p.nodes:
            continue
        lines.append(conf_line({
            "PartitionName": p.name,
            "Nodes": compress_hostlist(p.nodes),
            "Default": p.default,
            "MaxTime": p.max_time,
            "OverSubscribe": "EXCLUSIVE" if p.exclusive else None,
            "State": "UP",
        }))
    return "\n".join(lines) + "\n"


def gres_conf(s: SlurmSettings) -> str:
    """The text of ``gres.conf``: explicit device lines (``AutoDetect=off``, every GPU with its type) or
    ``AutoDetect=nvidia`` (https://slurm.schedmd.com/gres.conf.html). The same file on the controller and every node:
    slurmctld compares the counts, and a node whose devices are fewer than ``Gres=`` goes INVAL."""
    lines = [_header(s, "gres.conf")]
    if s.gres == "autodetect":
        lines.append("AutoDetect=nvidia")
        return "\n".join(lines) + "\n"
    lines.append("AutoDetect=off")
    for group in s.compute_groups:
        gnodes = [n for n in s.group_nodes(group) if n.gpus and n.gpu_type]
        if not gnodes:
            continue
        n = gnodes[0]
        lines.append(conf_line({"NodeName": compress_hostlist(x.name for x in gnodes), "Name": "gpu",
                                "Type": n.gpu_type, "File": n.gpu_files}))
    return "\n".join(lines) + "\n"


def cgroup_conf(s: SlurmSettings) -> str:
    """The text of ``cgroup.conf``: cores, memory and devices confined (https://slurm.schedmd.com/cgroup.conf.html).
    ``CgroupPlugin`` names the nodes' hierarchy when the version has the cgroup/v2 plugin (catalog feature
    ``cgroup_v2``); on cgroup v2 slurmd runs with systemd's ``Delegate=yes`` (https://slurm.schedmd.com/cgroup_v2.html;
    the slurm_node role's unit drop-in)."""
    lines = [_header(s, "cgroup.conf")]
    if s.has("cgroup_v2"):
        lines.append(f"CgroupPlugin=cgroup/{s.cgroup_version}")
    lines += ["ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainDevices=yes"]
    return "\n".join(lines) + "\n"


def topology_conf(s: SlurmSettings) -> str | None:
    """The text of ``topology.conf``: for a tree a leaf switch per compute group and a spine over them; for blocks
    (Slurm 23.11+, NVLink domains) one ``BlockName`` per compute group, the nodes the blueprint declares as one
    domain; ``None`` without a topology (https://slurm.schedmd.com/topology.conf.html)."""
    if s.topology == "block":
        lines = [_header(s, "topology.conf")]
        for group in s.compute_groups:
            names = [n.name for n in s.group_nodes(group)]
            if names:
                lines.append(conf_line({"BlockName": f"nvl-{group}", "Nodes": compress_hostlist(names)}))
        return "\n".join(lines) + "\n"
    if s.topology != "tree" or not s.switches:
        return None
    lines = [_header(s, "topology.conf")]
    for name, nodes, children in s.switches:
        lines.append(conf_line({"SwitchName": name, "Nodes": compress_hostlist(nodes) if nodes else None,
                                "Switches": ",".join(children) if children else None}))
    return "\n".join(lines) + "\n"


def slurmdbd_conf(s: SlurmSettings) -> str | None:
    """The text of ``slurmdbd.conf`` WITHOUT ``StoragePass``: the slurm_dbd role appends it on the controller from the
    password file, so the secret is never in a rendered file (https://slurm.schedmd.com/slurmdbd.conf.html)."""
    if not s.accounting:
        return None
    lines = [_header(s, "slurmdbd.conf")]
    lines += [f"{k}={conf_value(v)}" for k, v in {
        "AuthType": "auth/munge",
        "DbdHost": s.controller,
        "DbdPort": s.ports["slurmdbd"],
        "SlurmUser": "slurm",
        "LogFile": f"{LOG_DIR}/slurmdbd.log",
        "PidFile": "/run/slurmdbd.pid",
        "StorageType": "accounting_storage/mysql",
        "StorageHost": s.database_host or "localhost",
        "StoragePort": s.database_port,
        "StorageUser": DATABASE_USER,
        "StorageLoc": DATABASE,
    }.items()]
    return "\n".join(lines) + "\n"


def plugstack_conf(s: SlurmSettings) -> str | None:
    """``plugstack.conf``: includes ``plugstack.conf.d/*`` (where the enroot_pyxis role puts ``pyxis.conf``,
    https://github.com/NVIDIA/pyxis#slurm-plugstack-configuration)."""
    if not s.pyxis:
        return None
    return _header(s, "plugstack.conf") + f"include {CONF_DIR}/plugstack.conf.d/*\n"


def slurm_files(s: SlurmSettings) -> dict[str, str]:
    """Every Slurm configuration file of the cluster: ``{absolute path on the node: text}``, in a fixed order.
    ``slurmdbd.conf`` (controller only, no password) is included when accounting is on."""
    out = {
        f"{CONF_DIR}/slurm.conf": slurm_conf(s),
        f"{CONF_DIR}/gres.conf": gres_conf(s),
        f"{CONF_DIR}/cgroup.conf": cgroup_conf(s),
    }
    for path, text in ((f"{CONF_DIR}/topology.conf", topology_conf(s)),
                       (f"{CONF_DIR}/plugstack.conf", plugstack_conf(s)),
                       (f"{CONF_DIR}/slurmdbd.conf", slurmdbd_conf(s))):
        if text is not None:
            out[path] = text
    return out


def describe(s: SlurmSettings) -> str:
    """One line for ``check``: the Slurm version and its source, the controller, each partition with its nodes and
    gres, accounting and containers."""
    parts = []
    for p in s.partitions:
        nodes = [n for n in s.nodes if n.name in p.nodes]
        gres = f", gres gpu:{nodes[0].gpu_type}:{nodes[0].gpus} each" if nodes and nodes[0].gpus else ""
        parts.append(f"`{p.name}`{' (default)' if p.default else ''} {len(nodes)} node(s){gres}")
    extras = [w for w, on in (("accounting (slurmdbd)", s.accounting), ("pyxis + enroot", s.pyxis),
                              ("configless", s.configless), (f"topology {s.topology}", s.topology != "none")) if on]
    return (f"Slurm {s.version} from {s.os}'s packages, controller `{s.controller}`; partitions: {'; '.join(parts)}"
            f"{'; ' if extras else ''}{', '.join(extras)}")


def health_expectations(health: Mapping[str, Any]) -> dict[str, Any]:
    """What the health check of a Slurm compute node expects (``/etc/clusterforge/slurm-health.json``): the node's
    quick-check expectations (:attr:`blueprints.settings.NodeSettings.health`: GPU count, model and names, device
    files, driver branch, training node, mounts) with the check's own time limit inside slurmd's kill
    (:data:`HEALTH_TIMEOUT_S`) and the drain reason's prefix (:data:`HEALTH_REASON`)."""
    first = ("gpu_count", "gpu_model", "gpu_devices", "mounts")  # the order the role's variables have always had
    return {**{k: health[k] for k in first}, "timeout_s": HEALTH_TIMEOUT_S, "reason_prefix": HEALTH_REASON,
            **{k: v for k, v in health.items() if k not in first}}
