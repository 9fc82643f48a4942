"""Slurm rules: what makes a Slurm cluster come up wrong, from the failures its users report.

Each rule reads :attr:`blueprints.resolved.ResolvedCluster.slurm` (the settings the files are rendered from), so a
finding speaks about exactly what the nodes would get. Sources: the slurm.conf / gres.conf man pages and the issues
collected in the project's Slurm reference (gres count -> INVAL, "Low RealMemory", version order, memlock on RDMA).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..slurm import EXTRA_KEYS, SlurmSettings, pyxis_file, slurm_catalog, version_tuple
from .registry import Hit, RuleContext, rule

SLURM_CONF = "https://slurm.schedmd.com/slurm.conf.html"


def _slurm(ctx: RuleContext) -> SlurmSettings | None:
    return ctx.cluster.slurm


@rule(
    id="slurm-controller",
    severity="error",
    summary="A Slurm cluster needs one node group with `role: controller` (slurmctld, slurmdbd, the munge key); "
            "without one no scheduler is installed.",
    fix="add a node group with `role: controller` (one host; on AWS a small instance type)",
    source="https://slurm.schedmd.com/quickstart_admin.html",
)
def slurm_controller(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    controllers = [(i, g) for i, g in enumerate(ctx.bp.node_groups) if g.role == "controller"]
    if not controllers:
        yield Hit(("orchestrator", "kind"), "`orchestrator.kind: slurm` but no node group has `role: controller`")
    for i, g in controllers[1:]:
        yield Hit(("node_groups", i, "role"), f"node group `{g.name}` is a second controller group; Slurm runs one "
                  f"slurmctld here (`{controllers[0][1].name}`)", "give this group another role or merge the groups")
    if not s.nodes:
        yield Hit(("orchestrator", "kind"), "`orchestrator.kind: slurm` but no node group has `role: compute`: the "
                  "cluster has no node to run jobs", "add a node group with `role: compute`")


@rule(
    id="slurm-controller-count",
    severity="error",
    summary="On AWS the controller group is one instance: slurm.conf names one SlurmctldHost, the state volume attaches "
            "to one instance, and a second would run a second, split-brain slurmctld.",
    fix="set `count: 1` on the controller group",
    source="https://slurm.schedmd.com/slurm.conf.html#OPT_SlurmctldHost",
)
def slurm_controller_count(ctx: RuleContext) -> Iterator[Hit]:
    if _slurm(ctx) is None or not ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        if g.role == "controller" and g.size != 1:
            yield Hit(("node_groups", i, "count"), f"controller group `{g.name}` has {g.size} instances")


@rule(
    id="slurm-os-version",
    severity="error",
    summary="Slurm comes from the nodes' distribution; an OS without a catalogued Slurm package has nothing to install.",
    fix="use an OS the catalog lists under `slurm.distributions` (debian-12, ubuntu-22.04, ubuntu-24.04)",
    source="https://packages.debian.org/src:slurm-wlm",
)
def slurm_os_version(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is not None and s.os not in slurm_catalog(ctx.catalog)["distributions"]:
        yield Hit(("target",), f"the nodes run `{s.os}`, which has no catalogued Slurm package")


@rule(
    id="slurm-host-name",
    severity="error",
    summary="A host's `name` is its Slurm NodeName, which must be the short hostname the node reports; a name with a "
            "dot never matches `hostname -s`, so slurmd cannot find its own node line and does not start.",
    fix="name the host by its short hostname (`gpu-01`, not `gpu-01.example.com`)",
    source="https://slurm.schedmd.com/slurm.conf.html#OPT_NodeName",
)
def slurm_host_name(ctx: RuleContext) -> Iterator[Hit]:
    if _slurm(ctx) is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        if g.role not in ("compute", "controller", "login"):
            continue
        for j, h in enumerate(g.hosts):
            if "." in h.name:
                yield Hit(("node_groups", i, "hosts", j, "name"), f"host `{h.name}` has a dot in its name",
                          f"set `name: {h.name.split('.')[0]}` (the node's `hostname -s`)")


@rule(
    id="slurm-node-resources",
    severity="error",
    summary="Every compute node line needs its CPUs and memory: without `RealMemory` memory cannot be scheduled "
            "(CR_Core_Memory) and the catalog knows only catalogued systems and instance types.",
    fix="declare `hardware.cpu` (sockets, cores_per_socket, threads_per_core as `slurmd -C` prints them) and "
        "`hardware.memory_gib`",
    source=f"{SLURM_CONF}#OPT_RealMemory",
)
def slurm_node_resources(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        nodes = s.group_nodes(g.name)
        if not nodes:
            continue
        n = nodes[0]
        missing = [w for w, v in (("hardware.cpu", n.cpus), ("hardware.memory_gib", n.real_memory_mib)) if v is None]
        if missing:
            yield Hit(("node_groups", i), f"node group `{g.name}`: Slurm needs {' and '.join(f'`{m}`' for m in missing)}"
                      " (not in the catalog for this hardware)")


@rule(
    id="slurm-real-memory",
    severity="error",
    summary="`RealMemory` above the memory the OS reports drains the node (\"Low RealMemory\"); clusterforge writes 95 % "
            "of `hardware.memory_gib`, so a declared size above the system's drains every node. `MemSpecLimit` must "
            "leave memory for jobs.",
    fix="declare the memory the host really has (`free -g`), or leave `hardware.memory_gib` unset for a catalogued "
        "system",
    source="https://github.com/aws/aws-parallelcluster/issues/1517",
)
def slurm_real_memory(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    topo = slurm_catalog(ctx.catalog).get("cpu_topology", {})
    for i, g in enumerate(ctx.bp.node_groups):
        nodes = s.group_nodes(g.name)
        if not nodes or nodes[0].real_memory_mib is None:
            continue
        hw = g.hardware
        system_gib = topo.get(hw.system or "", {}).get("memory_gib") if hw is not None else None
        if hw is not None and hw.memory_gib is not None and system_gib and hw.memory_gib > system_gib:
            yield Hit(("node_groups", i, "hardware", "memory_gib"),
                      f"node group `{g.name}`: `hardware.memory_gib` {hw.memory_gib:g} is more than the {system_gib} GiB "
                      f"a `{hw.system}` has; RealMemory={nodes[0].real_memory_mib} would drain every node")
        spec = nodes[0].mem_spec_limit_mib or 0
        if spec >= nodes[0].real_memory_mib:
            yield Hit(("orchestrator", "os_memory_gib"),
                      f"`orchestrator.os_memory_gib` keeps {spec} MiB for the OS, all of the {nodes[0].real_memory_mib} MiB "
                      f"RealMemory of node group `{g.name}`: no job could get memory",
                      "lower `orchestrator.os_memory_gib`")


@rule(
    id="slurm-gres-count",
    severity="error",
    summary="The declared GPU count becomes `Gres=gpu:N` and N gres.conf device files: more than the system has and "
            "slurmd waits for the missing /dev/nvidiaN and the node never registers; a gres.conf with fewer devices "
            "than `Gres=` puts the node in INVAL (\"gres/gpu count reported lower than configured\"); fewer than the "
            "system has and the other GPUs are never scheduled.",
    fix="declare the GPU count the system has (`hardware.gpu: MODEL:COUNT`)",
    source="https://github.com/awslabs/awsome-distributed-ai/issues/195",
)
def slurm_gres_count(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    systems = ctx.catalog.systems
    for i, g in enumerate(ctx.bp.node_groups):
        nodes = s.group_nodes(g.name)
        hw = g.hardware
        if not nodes or hw is None or hw.system is None or hw.gpu is None:
            continue
        sysgpus = (systems.get(hw.system) or {}).get("gpus") or {}
        want = sysgpus.get("count")
        if want and nodes[0].gpus != int(want):
            yield Hit(("node_groups", i, "hardware", "gpu"),
                      f"node group `{g.name}`: Gres=gpu:{nodes[0].gpu_type}:{nodes[0].gpus} but a `{hw.system}` has "
                      f"{want} GPUs: " + (f"slurmd would wait for /dev/nvidia{want} and up, which do not exist, and "
                                           "never register" if nodes[0].gpus > int(want) else
                                           f"{int(want) - nodes[0].gpus} GPUs per node would never be scheduled"),
                      f"set `hardware.gpu: {hw.gpu.model}:{want}`")


@rule(
    id="slurm-version-feature",
    severity="error",
    summary="An option the distribution's Slurm does not have stops slurmctld: `gres: autodetect` needs "
            "`AutoDetect=nvidia` (24.11+), `topology: block` needs topology/block (23.11+).",
    fix="use `gres: explicit` / `topology: tree`, or an OS whose Slurm has the feature",
    source="https://slurm.schedmd.com/gres.conf.html#OPT_AutoDetect",
)
def slurm_version_feature(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    feats = slurm_catalog(ctx.catalog)["features"]
    for field, value, feature in (("gres", s.gres, "gres_autodetect_nvidia"), ("topology", s.topology, "topology_block")):
        if value in ("autodetect", "block") and not s.has(feature):
            yield Hit(("orchestrator", field), f"`orchestrator.{field}: {value}` needs Slurm {feats[feature]['since']} or "
                      f"newer; {s.os} ships Slurm {s.version} ({feats[feature]['source']})")


@rule(
    id="slurm-version-order",
    severity="error",
    summary="slurmdbd must be at least slurmctld's version, and slurmctld at least every slurmd's; a node whose OS "
            "ships a newer Slurm than the controller's cannot register.",
    fix="run the controller on the same OS release as the nodes (or a newer one)",
    source="https://slurm.schedmd.com/upgrades.html",
)
def slurm_version_order(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None or s.controller_group is None:
        return
    cat = ctx.catalog
    dists = slurm_catalog(cat)["distributions"]
    images = cat.aws["node_images"]

    def group_version(i: int) -> str | None:
        g = ctx.bp.node_groups[i]
        os_name = ctx.bp.target.node_os(images, kubernetes=False, gpus=ctx.cluster.group(g).hardware.nvidia_gpus > 0)
        v = dists.get(os_name, {}).get("version")
        return str(v) if v is not None else None

    ctl_index = next(i for i, g in enumerate(ctx.bp.node_groups) if g.name == s.controller_group)
    ctl = group_version(ctl_index)
    if ctl is None:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        v = group_version(i) if g.role in ("compute", "login") else None
        if v is not None and version_tuple(v) > version_tuple(ctl):
            yield Hit(("node_groups", i), f"node group `{g.name}` would run Slurm {v}, newer than the controller's "
                      f"{ctl} (`{s.controller_group}`)")


@rule(
    id="slurm-extra-key",
    severity="error",
    summary="`orchestrator.extra` may set scheduling, limit, timeout, priority and logging options only: node and "
            "partition lines are the blueprint's, and an option that names a program, plugin or file would run code "
            "or read a file `check` never saw.",
    fix="remove the key; declare nodes and partitions in the blueprint",
    source=SLURM_CONF,
)
def slurm_extra_key(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None:
        return
    allowed = {k.lower() for k in EXTRA_KEYS}
    for key in s.extra:
        if key.lower() not in allowed:
            yield Hit(("orchestrator", "extra", key), f"`orchestrator.extra.{key}` is not an option clusterforge lets a "
                      f"blueprint set (allowed: {', '.join(EXTRA_KEYS)})")


@rule(
    id="slurm-memlock-rdma",
    severity="error",
    summary="On an RDMA fabric jobs need the node's unlimited locked memory: Slurm propagates the submitting shell's "
            "limits to the job, and NCCL / libibverbs fail to register memory under a small memlock.",
    fix="remove MEMLOCK from `orchestrator.extra.PropagateResourceLimits`, or keep "
        "`PropagateResourceLimitsExcept=MEMLOCK` (clusterforge's default on RDMA fabrics)",
    source=f"{SLURM_CONF}#OPT_PropagateResourceLimitsExcept",
)
def slurm_memlock_rdma(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None or not s.rdma:
        return
    for key, value in s.extra.items():
        items = {v.strip().upper() for v in value.split(",")}
        if key.lower() == "propagateresourcelimits" and items & {"ALL", "MEMLOCK"}:
            yield Hit(("orchestrator", "extra", key), f"`{key}={value}` hands the submitting shell's memlock limit to "
                      "every job on this RDMA fabric")
        if key.lower() == "propagateresourcelimitsexcept" and "MEMLOCK" not in items:
            yield Hit(("orchestrator", "extra", key), f"`{key}={value}` drops MEMLOCK: jobs on this RDMA fabric get the "
                      "submitting shell's memlock limit")


@rule(
    id="slurm-accounting-database",
    severity="error",
    summary="slurmdbd with an external database needs its password from a file your secret store puts on the "
            "controller; clusterforge never writes a database password into rendered files.",
    fix="set `orchestrator.accounting.password_file`, or drop `database_host` to run MariaDB on the controller",
    source="https://github.com/aws/aws-parallelcluster/issues/6651",
)
def slurm_accounting_database(ctx: RuleContext) -> Iterator[Hit]:
    orch = ctx.bp.orchestrator
    acc = getattr(orch, "accounting", None)
    if acc is not None and acc.enabled and acc.database_host and not acc.password_file:
        yield Hit(("orchestrator", "accounting", "database_host"),
                  f"`orchestrator.accounting.database_host` {acc.database_host} has no `password_file`")


@rule(
    id="slurm-partition-groups",
    severity="error",
    summary="A partition names compute node groups of the blueprint; an unknown or non-compute group leaves it empty.",
    fix="name node groups with `role: compute`",
    source=f"{SLURM_CONF}#OPT_Nodes_1",
)
def slurm_partition_groups(ctx: RuleContext) -> Iterator[Hit]:
    orch = ctx.bp.orchestrator
    parts = getattr(orch, "partitions", None) or []
    compute = {g.name for g in ctx.bp.node_groups if g.compute}
    for i, p in enumerate(parts):
        for j, gname in enumerate(p.groups):
            if gname not in compute:
                yield Hit(("orchestrator", "partitions", i, "groups", j),
                          f"partition `{p.name}` names `{gname}`, which is not a compute node group")
    if parts and sum(1 for p in parts if p.default) > 1:
        yield Hit(("orchestrator", "partitions"), "more than one partition has `default: true`",
                  "mark one partition as the default")


@rule(
    id="slurm-container-pins",
    severity="error",
    summary="pyxis needs enroot's release packages and pyxis's source, and NVIDIA publishes no checksum for either; "
            "clusterforge never downloads a file it cannot verify, so the blueprint pins each file it uses.",
    fix="add the SHA-256 of each file you verified to `orchestrator.container_pins` (`sha256sum FILE`), or set "
        "`orchestrator.pyxis: false`",
    source="https://github.com/NVIDIA/enroot/blob/master/doc/installation.md",
)
def slurm_container_pins(ctx: RuleContext) -> Iterator[Hit]:
    s = _slurm(ctx)
    if s is None or not s.pyxis:
        return
    missing: list[str] = []
    for r in ctx.cluster.groups:
        sl = r.settings.slurm
        if sl is None or not sl.pyxis:
            continue
        missing += [d["url"].rsplit("/", 1)[1] for d in sl.enroot_debs if not d["sha256"]]
        if not sl.pyxis_sha256:
            missing.append(pyxis_file(slurm_catalog(ctx.catalog)))
    missing = list(dict.fromkeys(missing))
    if missing:
        yield Hit(("orchestrator", "pyxis"), f"`orchestrator.pyxis` is on but these files have no pin: "
                  f"{', '.join(f'`{m}`' for m in missing)}")


_IMDS_TAG_KEY = re.compile(r"[A-Za-z0-9+\-=.,_:@]+")


@rule(
    id="slurm-aws-tag-keys",
    severity="error",
    summary="A Slurm node on AWS reads its NodeName from its instance tags through the instance metadata service, "
            "which EC2 turns on only when every tag key of the instance is one it can serve (letters, digits, "
            "`+ - = . , _ : @`; no spaces or `/`): any other key makes the launch fail.",
    fix="rename the tag key (e.g. `team-owner` for `team/owner`)",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/work-with-tags-in-IMDS.html",
)
def slurm_aws_tag_keys(ctx: RuleContext) -> Iterator[Hit]:
    if _slurm(ctx) is None or not ctx.bp.is_aws:
        return
    for k in getattr(ctx.bp.target, "tags", {}):
        if not _IMDS_TAG_KEY.fullmatch(k) or k in (".", ".."):
            yield Hit(("target", "tags", k), f"tag key `{k}` cannot be served by the instance metadata service")
