"""Rules about node hardware: instance types and GPU models the catalog knows, NVSwitch, NVMe, NICs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..aws import accelerator_family
from ._facts import instance_spec
from .registry import Hit, RuleContext, rule

AC_SPECS = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
INSTANCE_NAME = re.compile(r"^[a-z][a-z0-9-]*\.(metal(-[0-9a-z]+)?|[0-9]*(nano|micro|small|medium|large|xlarge))$")
ACCELERATED_FAMILY = re.compile(r"^(p\d|g\d|trn\d|inf\d|dl\d|f\d|vt\d)")


def _close(name: str, known: list[str]) -> str:
    import difflib

    m = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean `{m[0]}`?)" if m else ""


@rule(
    id="instance-type-format",
    severity="error",
    summary="A compute group's EC2 instance type is `family.size`, e.g. `p5.48xlarge`.",
    fix="write the instance type as EC2 names it (`aws ec2 describe-instance-types`)",
    source="https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html",
)
def instance_type_format(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):  # other roles: instance-type-exists (EC2's own list)
        if g.compute and g.instance_type and not INSTANCE_NAME.match(g.instance_type):
            yield Hit(("node_groups", i, "instance_type"),
                      f"`node_groups.{i}.instance_type` `{g.instance_type}` is not an EC2 instance type name"
                      f"{_close(g.instance_type, ctx.catalog.instance_type_names)}")


@rule(
    id="instance-type-unknown",
    severity="error",
    summary="Compute node groups use an instance type from the hardware catalog (GPU count, EFA, NVMe and "
            "expected benchmark figures come from it).",
    fix="use a catalogued accelerated type (`clusterforge` lists them in blueprints/data/hardware-catalog.yaml)",
    source=AC_SPECS,
)
def instance_type_unknown(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    names = ctx.catalog.instance_type_names
    for i, g in enumerate(ctx.bp.node_groups):
        if (g.compute and g.instance_type and INSTANCE_NAME.match(g.instance_type)
                and instance_spec(g, ctx.catalog) is None and not accelerator_family(g.instance_type, ctx.catalog)):
            yield Hit(("node_groups", i, "instance_type"),
                      f"compute group `{g.name}`: `node_groups.{i}.instance_type` `{g.instance_type}` is not in the "
                      f"hardware catalog{_close(g.instance_type, names)}",
                      f"use one of {', '.join(names)}")


@rule(
    id="instance-type-not-in-catalog",
    severity="warning",
    summary="A non-compute group uses an accelerated instance type the catalog does not know: its GPUs, EFA and "
            "NVMe are not checked.",
    fix="use a catalogued type, or a general-purpose type (m/c/r families) for login, controller and storage roles",
    source=AC_SPECS,
)
def instance_type_not_in_catalog(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        if (not g.compute and g.instance_type and ACCELERATED_FAMILY.match(g.instance_type)
                and instance_spec(g, ctx.catalog) is None and not accelerator_family(g.instance_type, ctx.catalog)):
            yield Hit(("node_groups", i, "instance_type"),
                      f"{g.role} group `{g.name}`: accelerated type `{g.instance_type}` is not in the hardware catalog")


@rule(
    id="gpu-model-known",
    severity="error",
    summary="`hardware.gpu.model` must be a catalog GPU (key, short name or nvidia-smi name): expected busbw, "
            "MFU and memory come from it.",
    fix="use a catalog key such as `h100-sxm`, `a100-80gb-sxm`, `l40s` or the name nvidia-smi prints",
    source="https://docs.nvidia.com/deploy/nvidia-smi/index.html",
)
def gpu_model_known(ctx: RuleContext) -> Iterator[Hit]:
    keys = ctx.catalog.provisioned_gpu_keys  # suggest only what clusterforge provisions (NVIDIA)
    for i, g in enumerate(ctx.bp.node_groups):
        if g.hardware and g.hardware.gpu and ctx.catalog.resolve_gpu_key(g.hardware.gpu.model) is None:
            yield Hit(("node_groups", i, "hardware", "gpu"),
                      f"`node_groups.{i}.hardware.gpu.model` `{g.hardware.gpu.model}` is not in the GPU catalog"
                      f"{_close(g.hardware.gpu.model.lower(), keys)}",
                      f"use one of {', '.join(keys)}")


@rule(
    id="gpu-short-name-ambiguous",
    severity="warning",
    summary="A GPU short name that stands for several catalog parts (`h100`: SXM or PCIe; `a100`: 40 or 80 GB) is "
            "read as the one the catalog maps it to (`h100` -> `h100-sxm`); the parts differ in NVLink, memory and "
            "power, so expected busbw and MFU follow the part named.",
    fix="name the part: a catalog key such as `h100-sxm` or `h100-pcie`",
    source="https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/README.md",
)
def gpu_short_name_ambiguous(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        gpu = g.hardware.gpu if g.hardware else None
        parts = ctx.catalog.gpu_parts(gpu.model) if gpu else []
        if gpu and len(parts) > 1:
            read_as = ctx.catalog.resolve_gpu_key(gpu.model)
            yield Hit(("node_groups", i, "hardware", "gpu"),
                      f"`node_groups.{i}.hardware.gpu.model` `{gpu.model}` is read as `{read_as}`, but the catalog "
                      f"has {len(parts)} parts of that name ({', '.join(f'`{k}`' for k in parts)}) with different "
                      f"NVLink, memory and expected busbw",
                      f"name the part: {' or '.join(f'`{k}`' for k in parts)}")


@rule(
    id="accelerator-not-nvidia",
    severity="error",
    summary="clusterforge installs the NVIDIA stack (driver, CUDA, NCCL, container toolkit); AMD Instinct and AWS "
            "Trainium nodes need ROCm / Neuron instead.",
    fix="use NVIDIA GPU nodes for this blueprint (ROCm and Neuron stacks are not provisioned)",
    source=AC_SPECS,
)
def accelerator_not_nvidia(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        hw = ctx.cluster.group(g).hardware
        if hw.gpu is not None and hw.gpu.vendor != "nvidia":
            where = ("node_groups", i, "instance_type") if ctx.bp.is_aws else ("node_groups", i, "hardware", "gpu")
            yield Hit(where, f"node group `{g.name}` has {hw.gpus} x `{hw.gpu.key}` ({hw.gpu.vendor}); the NVIDIA "
                      f"driver, CUDA and NCCL do not run on it")


@rule(
    id="nvswitch-needs-sxm",
    severity="error",
    summary="`hardware.gpu.nvswitch: true` needs NVLink (SXM) GPUs: Fabric Manager fails to start on PCIe cards.",
    fix="remove `nvswitch: true` for PCIe GPUs (L40S, L4, H100 PCIe)",
    source="https://github.com/NVIDIA/deepops/blob/master/roles/nvidia-dgx/vars/ubuntu-22.04.yml",
)
def nvswitch_needs_sxm(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        gpu = g.hardware.gpu if g.hardware else None
        if gpu is None or not gpu.nvswitch:
            continue
        key = ctx.catalog.resolve_gpu_key(gpu.model)
        if key and not ctx.catalog.gpu(key).has_nvlink:
            yield Hit(("node_groups", i, "hardware", "gpu"),
                      f"`node_groups.{i}.hardware.gpu.nvswitch` is true but `{key}` is a PCIe part without NVLink")


@rule(
    id="hardware-system-mismatch",
    severity="warning",
    summary="`hardware.system` names a catalog system (e.g. `dgx-h100`) whose GPUs differ from `hardware.gpu`.",
    fix="make `hardware.gpu` match the system (DGX H100: `h100-sxm:8`) or drop `system`",
    source="https://github.com/NVIDIA/dgxc-benchmarking/blob/841f5466cd86b66abd48049e839c563776f6d716/README.md",
)
def hardware_system_mismatch(ctx: RuleContext) -> Iterator[Hit]:
    systems = ctx.catalog.systems
    for i, g in enumerate(ctx.bp.node_groups):
        hw = g.hardware
        if hw is None or not hw.system:
            continue
        p = ("node_groups", i, "hardware", "system")
        sysdef = systems.get(hw.system)
        if sysdef is None:
            yield Hit(p, f"`node_groups.{i}.hardware.system` `{hw.system}` is not a catalog system "
                      f"({', '.join(systems)})", "use a catalog system name or drop `system`")
            continue
        want_key = sysdef["gpus"]["type"]
        want_n = int(sysdef["gpus"]["count"])
        got_key = ctx.catalog.resolve_gpu_key(hw.gpu.model) if hw.gpu else None
        got_n = hw.gpu.count if hw.gpu else 0
        if got_key != want_key or got_n != want_n:
            got = f"{got_n} x `{got_key or (hw.gpu.model if hw.gpu else 'none')}`"
            yield Hit(p, f"`{hw.system}` has {want_n} x `{want_key}` but `node_groups.{i}.hardware.gpu` says {got}",
                      f"set `gpu: {want_key}:{want_n}` or drop `system`")


@rule(
    id="local-nvme-drives",
    severity="error",
    summary="`local_nvme` needs NVMe data drives: instance store on the AWS type, or `hardware.nvme` on-prem.",
    fix="remove `local_nvme`, pick an instance type with NVMe instance store, or declare `hardware.nvme`",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/InstanceStorage.html",
)
def local_nvme_drives(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        if g.local_nvme is None:
            continue
        p = ("node_groups", i, "local_nvme")
        if ctx.bp.is_aws:
            it = instance_spec(g, ctx.catalog)
            if it is not None and it.instance_store is None:
                yield Hit(p, f"`{g.instance_type}` has no NVMe instance store, so `node_groups.{i}.local_nvme` has no "
                          f"drives to use")
        elif g.hardware is not None and g.hardware.nvme is None:
            yield Hit(p, f"`node_groups.{i}.local_nvme` is set but `node_groups.{i}.hardware.nvme` declares no data drives",
                      "declare the drives (`hardware: {nvme: {count: N}}`) or remove `local_nvme`")


@rule(
    id="local-nvme-raid-single",
    severity="warning",
    summary="`local_nvme.raid: none` uses one drive; the other NVMe drives of the node stay idle.",
    fix="set `raid: raid0` to stripe over every drive",
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/raid-config.html",
)
def local_nvme_raid_single(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        if g.local_nvme is None or g.local_nvme.raid != "none":
            continue
        drives = ctx.cluster.group(g).hardware.nvme_drives or 0
        if drives > 1:
            yield Hit(("node_groups", i, "local_nvme", "raid"),
                      f"`node_groups.{i}.local_nvme.raid` is `none` but each node has {drives} NVMe drives")


@rule(
    id="rail-nic-count",
    severity="warning",
    summary="A rail-optimised InfiniBand node has one NIC per GPU; fewer NICs leave GPUs sharing a rail (less "
            "bandwidth per GPU than expected).",
    fix="list one `hardware.nics` entry per GPU, or set `network.infiniband.rail_optimized: false`",
    source="https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md",
)
def rail_nic_count(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if net.fabric != "infiniband" or not net.infiniband.rail_optimized:  # type: ignore[union-attr]
        return
    for i, g in enumerate(ctx.bp.node_groups):
        hw = g.hardware
        if hw is None or hw.gpu is None or not hw.nics or not g.compute:
            continue
        if len(hw.nics) != hw.gpu.count:
            yield Hit(("node_groups", i, "hardware", "nics"),
                      f"group `{g.name}` has {hw.gpu.count} GPUs but {len(hw.nics)} InfiniBand NIC(s) in "
                      f"`node_groups.{i}.hardware.nics` on a rail-optimised fabric")


@rule(
    id="nvme-by-id-paths",
    severity="error",
    summary="`hardware.nvme.by_id` restricts discovery to stable `/dev/disk/by-id/...` links; kernel names like "
            "`/dev/nvme1n1` change between boots and AMIs and have wiped the wrong disk.",
    fix="use the drives' `/dev/disk/by-id/nvme-...` links (`ls -l /dev/disk/by-id/`) or leave `by_id` empty",
    source="https://github.com/aws/aws-parallelcluster/issues/195",
)
def nvme_by_id_paths(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        nvme = g.hardware.nvme if g.hardware else None
        for j, dev in enumerate(nvme.by_id if nvme else []):
            if not dev.startswith("/dev/disk/by-id/") or len(dev) <= len("/dev/disk/by-id/"):
                yield Hit(("node_groups", i, "hardware", "nvme", "by_id", j),
                          f"`node_groups.{i}.hardware.nvme.by_id.{j}` `{dev}` is not a `/dev/disk/by-id/` link")
        if nvme and nvme.by_id and len(nvme.by_id) != nvme.count:
            yield Hit(("node_groups", i, "hardware", "nvme", "by_id"),
                      f"`node_groups.{i}.hardware.nvme.by_id` lists {len(nvme.by_id)} drive(s) but `count` is {nvme.count}",
                      "list one by-id link per drive, or correct `count`")
