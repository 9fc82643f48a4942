"""What hardware one node of a node group has: the one place a group's GPUs, NVSwitch and NVMe
drives are resolved, from its AWS instance type (catalog) or its on-prem ``hardware`` section.

Used by the node settings model (:mod:`blueprints.settings`), the pre-deploy rules and the
validation expectations, so they cannot disagree about a group. Pure functions; nothing raises
for a blueprint the models accepted (unknown hardware resolves to ``None`` / 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Catalog, GpuSpec, InstanceTypeSpec, catalog
from .models import Blueprint, NodeGroup

__all__ = ["GB", "GIB", "GroupHardware", "group_hardware", "instance_spec", "nvidia_device_files"]

GIB = 2**30
"""Bytes in a GiB (AWS publishes GPU memory per instance type in GiB)."""
GB = 10**9
"""Bytes in a GB (GPU datasheets give memory in vendor GB)."""


@dataclass(frozen=True)
class GroupHardware:
    """What one node of a group has.

    ``gpu`` is the catalog entry (``None`` for CPU-only or unknown models); ``gpu_key`` its
    catalog key, or the declared model name when the catalog does not know it; ``gpus`` the
    accelerators per node (any vendor: check ``gpu.vendor``); ``gpu_memory_bytes`` the memory of
    one GPU in bytes (GiB as AWS publishes it for instance types, vendor GB for on-prem parts);
    ``nvswitch`` whether the GPUs are joined by NVSwitch (needs Fabric Manager); ``nvme_drives``
    the local NVMe data drives (AWS instance store or ``hardware.nvme.count``), ``None`` if none
    are known; ``instance`` the AWS instance type entry.
    """

    gpu: GpuSpec | None
    gpu_key: str | None
    gpus: int
    gpu_memory_bytes: float | None
    nvswitch: bool
    nvme_drives: int | None
    instance: InstanceTypeSpec | None

    @property
    def nvidia_gpus(self) -> int:
        """GPUs per node that take the NVIDIA stack (driver, container toolkit, NCCL): unknown
        models count as NVIDIA (a rule reports them), other vendors' accelerators do not."""
        return self.gpus if self.gpu is None or self.gpu.vendor == "nvidia" else 0


def nvidia_device_files(count: int) -> list[str]:
    """The device files of a node's ``count`` NVIDIA GPUs, ``["/dev/nvidia0", ...]`` (the driver names them
    ``/dev/nvidiaN``, https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html#device-node-verification):
    what Slurm's gres.conf lists and the health check looks for."""
    return [f"/dev/nvidia{i}" for i in range(count)]


def instance_spec(g: NodeGroup, cat: Catalog | None = None) -> InstanceTypeSpec | None:
    """The catalog entry of the group's instance type, or ``None`` (unset or unknown)."""
    if not g.instance_type:
        return None
    try:
        return (cat or catalog()).instance_type(g.instance_type)
    except KeyError:
        return None


def group_hardware(bp: Blueprint, g: NodeGroup, cat: Catalog | None = None) -> GroupHardware:
    """Resolve a node group's hardware from its instance type (AWS) or ``hardware`` (on-prem)."""
    cat = cat or catalog()
    if bp.is_aws:
        it = instance_spec(g, cat)
        drives = it.instance_store.count if it and it.instance_store else None
        if it is None or not it.gpu_count:
            return GroupHardware(None, None, 0, None, False, drives, it)
        key = cat.resolve_gpu_key(it.gpu_key)
        spec = cat.gpu(key) if key else None
        mem = (it.gpu_memory_gib_each * GIB if it.gpu_memory_gib_each
               else spec.memory_gb * GB if spec and spec.memory_gb else None)
        nvswitch = bool(it.requires_fabric_manager and spec is not None and spec.has_nvlink)
        return GroupHardware(spec, key or it.gpu_key, it.gpu_count, mem, nvswitch, drives, it)
    hw = g.hardware
    drives = hw.nvme.count if hw and hw.nvme else None
    if hw is None or hw.gpu is None:
        return GroupHardware(None, None, 0, None, False, drives, None)
    key = cat.resolve_gpu_key(hw.gpu.model)
    spec = cat.gpu(key) if key else None
    # unset: SXM parts in 8-GPU baseboards sit on NVSwitch
    nvswitch = (hw.gpu.nvswitch if hw.gpu.nvswitch is not None else
                spec is not None and bool(spec.has_nvlink) and hw.gpu.count >= 8)
    mem = spec.memory_gb * GB if spec and spec.memory_gb else None
    return GroupHardware(spec, key or hw.gpu.model, hw.gpu.count, mem, bool(nvswitch), drives, None)
