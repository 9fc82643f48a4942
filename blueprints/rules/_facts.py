"""Facts the rules share: what hardware a node group resolves to, mounts, versions, field names.

Everything here is a pure function of the blueprint and the hardware catalog; nothing raises
for a blueprint the models accepted (unknown hardware resolves to ``None``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog, GpuSpec, InstanceTypeSpec
from ..models import Blueprint, LustreStorage, NfsStorage, NodeGroup

GIB = 2**30
"""Bytes in a GiB (AWS publishes GPU memory per instance type in GiB)."""
GB = 10**9
"""Bytes in a GB (GPU datasheets give memory in vendor GB)."""


def fld(path: tuple[Any, ...]) -> str:
    """A document path as the dotted field name used in messages: ``node_groups.0.instance_type``."""
    return ".".join(str(p) for p in path)


def version(text: str | None) -> tuple[int, ...] | None:
    """``"v0.5.6"`` / ``"2.21.5-1"`` / ``"550.54.14"`` -> ``(0, 5, 6)`` etc.; ``None`` if no number."""
    if not text:
        return None
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", str(text))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def vstr(v: tuple[int, ...]) -> str:
    """``(2, 18, 0)`` -> ``"2.18.0"``."""
    return ".".join(str(x) for x in v)


@dataclass(frozen=True)
class GroupHardware:
    """What one node of a group has.

    ``gpu`` is the catalog entry (``None`` for CPU-only or unknown models), ``gpus`` the GPUs per
    node, ``gpu_memory_bytes`` the memory of one GPU in bytes (GiB as AWS publishes it for
    instance types, vendor GB for on-prem parts), ``instance`` the AWS instance type entry.
    """

    gpu: GpuSpec | None
    gpus: int
    gpu_memory_bytes: float | None
    instance: InstanceTypeSpec | None


def instance_spec(cat: Catalog, g: NodeGroup) -> InstanceTypeSpec | None:
    """The catalog entry of the group's instance type, or ``None`` (unset or unknown)."""
    if not g.instance_type:
        return None
    try:
        return cat.instance_type(g.instance_type)
    except KeyError:
        return None


def group_hardware(bp: Blueprint, cat: Catalog, g: NodeGroup) -> GroupHardware:
    """Resolve a node group's GPUs from its instance type (AWS) or its ``hardware`` (on-prem)."""
    if bp.is_aws:
        it = instance_spec(cat, g)
        if it is None or not it.gpu_count:
            return GroupHardware(None, 0, None, it)
        key = cat.resolve_gpu_key(it.gpu_key)
        spec = cat.gpu(key) if key else None
        mem = it.gpu_memory_gib_each * GIB if it.gpu_memory_gib_each else (spec.memory_gb * GB if spec and spec.memory_gb else None)
        return GroupHardware(spec, it.gpu_count, mem, it)
    hw = g.hardware
    if hw is None or hw.gpu is None:
        return GroupHardware(None, 0, None, None)
    key = cat.resolve_gpu_key(hw.gpu.model)
    spec = cat.gpu(key) if key else None
    return GroupHardware(spec, hw.gpu.count, spec.memory_gb * GB if spec and spec.memory_gb else None, None)


def training_groups(bp: Blueprint, cat: Catalog) -> list[tuple[int, NodeGroup, GroupHardware]]:
    """``(index, group, hardware)`` of compute groups with GPUs that are not passed into sandboxes
    (the nodes that run multi-GPU training directly on the host)."""
    out = []
    for i, g in enumerate(bp.node_groups):
        if g.role != "compute":
            continue
        hw = group_hardware(bp, cat, g)
        if hw.gpus and not g.sandbox.passthrough:
            out.append((i, g, hw))
    return out


def compute_groups(bp: Blueprint) -> list[tuple[int, NodeGroup]]:
    """``(index, group)`` of the groups with role ``compute``."""
    return [(i, g) for i, g in enumerate(bp.node_groups) if g.role == "compute"]


@dataclass(frozen=True)
class Mount:
    """A mount point declared somewhere in the blueprint, with the path of the key that declares it."""

    mount: str
    path: tuple[Any, ...]
    what: str


def mounts(bp: Blueprint) -> list[Mount]:
    """Every shared storage mount and every group's NVMe scratch mount, in document order."""
    out: list[Mount] = []
    for i, g in enumerate(bp.node_groups):
        if g.local_nvme is not None:
            out.append(Mount(g.local_nvme.mount.rstrip("/") or "/", ("node_groups", i, "local_nvme", "mount"),
                             f"NVMe scratch of node group `{g.name}`"))
    for i, s in enumerate(bp.storage):
        if isinstance(s, (LustreStorage, NfsStorage)):
            out.append(Mount(s.mount.rstrip("/") or "/", ("storage", i, "mount"), f"{s.kind} storage `{s.name}`"))
    return out


def reprs(value: object, limit: int = 40) -> str:
    """A user value for a message, quoted and cut to ``limit`` characters."""
    text = str(value)
    text = text if text.isprintable() else repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
