"""Facts the rules share: mounts, versions, field names, and (from the resolved cluster,
:mod:`blueprints.resolved`, where each is defined once) what hardware a node group has and which
groups are compute and training groups. Rules reach the resolved cluster itself as ``ctx.cluster``.

Everything here is a pure function of the blueprint and the hardware catalog; nothing raises
for a blueprint the models accepted (unknown hardware resolves to ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog
from ..hardware import GB, GIB, GroupHardware, instance_spec
from ..models import Blueprint, LustreStorage, NfsStorage, NodeGroup
from ..resolved import resolve
from ..versions import version, vstr

__all__ = ["GB", "GIB", "GroupHardware", "Mount", "compute_groups", "fld", "instance_spec",
           "mounts", "reprs", "training_groups", "version", "vstr"]

def fld(path: tuple[Any, ...]) -> str:
    """A document path as the dotted field name used in messages: ``node_groups.0.instance_type``."""
    return ".".join(str(p) for p in path)


def training_groups(bp: Blueprint, cat: Catalog) -> list[tuple[int, NodeGroup, GroupHardware]]:
    """``(index, group, hardware)`` of the training groups (:attr:`blueprints.resolved.ResolvedGroup.training`)."""
    return [(r.index, r.group, r.hardware) for r in resolve(bp, cat).training_groups]


def compute_groups(bp: Blueprint) -> list[tuple[int, NodeGroup]]:
    """``(index, group)`` of the compute groups (:attr:`blueprints.resolved.ResolvedGroup.compute`)."""
    return [(r.index, r.group) for r in resolve(bp).compute_groups]


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
