"""Sandbox rules: GPU passthrough (VFIO into Kata / VMs) needs bare metal, IOMMU and GPUs; gVisor's
GPU support is limited to listed GPUs and exposes no RDMA devices."""

from __future__ import annotations

from collections.abc import Iterator

from ._facts import version, vstr
from .registry import Hit, RuleContext, rule

KATA_GPU = "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-kata.html"
VFIO = "https://github.com/NVIDIA/deepops/blob/master/virtual/README.md"
GVISOR_GPU = "https://github.com/google/gvisor/blob/04980e1/g3doc/user_guide/gpu.md"


@rule(
    id="passthrough-on-aws",
    severity="error",
    summary="Passing GPUs into Kata micro-VMs or VMs (VFIO) needs the host's IOMMU, i.e. bare metal: on AWS only "
            "`.metal` instance types, and the catalog has none with GPUs.",
    fix="use `sandbox: container` or `gvisor` on AWS, or run Kata/VM passthrough on on-prem hosts",
    source=KATA_GPU,
)
def passthrough_on_aws(ctx: RuleContext) -> Iterator[Hit]:
    if not ctx.bp.is_aws:
        return
    for i, g in enumerate(ctx.bp.node_groups):
        hw = ctx.cluster.group(g).hardware
        if not g.sandbox.passthrough or not hw.gpus or (hw.instance is not None and hw.instance.is_bare_metal):
            continue
        yield Hit(("node_groups", i, "sandbox"), f"`node_groups.{i}.sandbox` `{g.sandbox.runtime}` passes GPUs through, "
                  f"but `{g.instance_type}` is a virtual machine without a usable IOMMU")


@rule(
    id="passthrough-needs-gpu",
    severity="error",
    summary="`sandbox.gpu_passthrough: true` binds GPUs to vfio-pci: the group must have GPUs.",
    fix="remove `gpu_passthrough`, or describe the GPUs (`hardware.gpu` / a GPU instance type)",
    source=VFIO,
)
def passthrough_needs_gpu(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.gpu_passthrough and not ctx.cluster.group(g).hardware.gpus:
            yield Hit(("node_groups", i, "sandbox", "gpu_passthrough"),
                      f"`node_groups.{i}.sandbox.gpu_passthrough` is true but group `{g.name}` has no GPUs")


@rule(
    id="passthrough-runtime",
    severity="error",
    summary="GPUs bound to vfio-pci are invisible to runc and gVisor: passthrough works only with `kata` or `vm`.",
    fix="set `sandbox.runtime: kata` (or `vm`), or drop `gpu_passthrough`",
    source=KATA_GPU,
)
def passthrough_runtime(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.gpu_passthrough and g.sandbox.runtime in ("container", "gvisor"):
            yield Hit(("node_groups", i, "sandbox", "gpu_passthrough"),
                      f"`node_groups.{i}.sandbox.gpu_passthrough` is true with runtime `{g.sandbox.runtime}`")


@rule(
    id="passthrough-gpudirect-rdma",
    severity="warning",
    summary="On passthrough hosts the GPUs belong to vfio-pci, so host-side GPUDirect RDMA (nvidia-peermem) does not "
            "apply; the NICs would have to be passed into the guests as well.",
    fix="remove `network.gpudirect_rdma.enabled: true` (unset, it is off on passthrough groups), or keep RDMA training "
        "nodes in a non-passthrough group",
    source="https://github.com/NVIDIA/nccl/issues/2079",
)
def passthrough_gpudirect_rdma(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if net.fabric not in ("infiniband", "roce") or net.gpudirect_rdma.enabled is not True:
        return  # unset follows the group (off on passthrough groups): only a value the user wrote is flagged
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.passthrough and ctx.cluster.group(g).hardware.gpus:
            yield Hit(("node_groups", i, "sandbox"), f"group `{g.name}` passes its GPUs into `{g.sandbox.runtime}` "
                      f"guests but `network.gpudirect_rdma.enabled` is set to true")


@rule(
    id="gvisor-gpu-support",
    severity="error",
    summary="gVisor's nvproxy supports a listed set of GPUs only (catalog `gvisor_nvproxy.supported_gpus`).",
    fix="use `sandbox: kata` (passthrough) or `container` for this GPU",
    source=GVISOR_GPU,
)
def gvisor_gpu_support(ctx: RuleContext) -> Iterator[Hit]:
    supported = ctx.catalog.gvisor_supported_gpus
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.runtime != "gvisor":
            continue
        hw = ctx.cluster.group(g).hardware
        if hw.gpu is not None and hw.gpu.key not in supported:
            yield Hit(("node_groups", i, "sandbox"), f"gVisor (`node_groups.{i}.sandbox`) does not support "
                      f"`{hw.gpu.key}`; nvproxy supports {', '.join(supported)}")


@rule(
    id="gvisor-rdma",
    severity="warning",
    summary="gVisor exposes only the NVIDIA GPU devices, no RDMA verbs devices: NCCL inside falls back to TCP sockets "
            "on an RDMA fabric.",
    fix="run multi-node training in `container` (runc) sandboxes, or accept socket bandwidth",
    source=GVISOR_GPU,
)
def gvisor_rdma(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.network.fabric not in ("efa", "infiniband", "roce"):
        return
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.runtime == "gvisor" and ctx.cluster.group(g).hardware.gpus:
            yield Hit(("node_groups", i, "sandbox"), f"group `{g.name}` runs gVisor on the `{ctx.bp.network.fabric}` "
                      f"fabric; the sandbox cannot open RDMA devices")


@rule(
    id="vm-gpus-per-vm",
    severity="error",
    summary="`sandbox.vm.gpus_per_vm` cannot exceed the GPUs of one host.",
    fix="lower `gpus_per_vm` to at most the host's GPU count",
    source=VFIO,
)
def vm_gpus_per_vm(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        vm = g.sandbox.vm
        gpus = ctx.cluster.group(g).hardware.gpus
        if g.sandbox.runtime == "vm" and vm is not None and gpus and vm.gpus_per_vm > gpus:
            yield Hit(("node_groups", i, "sandbox", "vm", "gpus_per_vm"),
                      f"`node_groups.{i}.sandbox.vm.gpus_per_vm` is {vm.gpus_per_vm} but each host has {gpus} GPUs",
                      f"use `gpus_per_vm: {gpus}` or fewer")


@rule(
    id="vm-gpus-idle",
    severity="warning",
    summary="When the host's GPU count is not a multiple of `gpus_per_vm`, the remainder is bound to vfio-pci but no "
            "VM gets it.",
    fix="choose `gpus_per_vm` that divides the GPUs per host (1, 2, 4 or 8 on an 8-GPU host)",
    source=VFIO,
)
def vm_gpus_idle(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        vm = g.sandbox.vm
        gpus = ctx.cluster.group(g).hardware.gpus
        if g.sandbox.runtime == "vm" and vm is not None and gpus and vm.gpus_per_vm <= gpus and gpus % vm.gpus_per_vm:
            yield Hit(("node_groups", i, "sandbox", "vm", "gpus_per_vm"),
                      f"{gpus} GPUs per host in VMs of `node_groups.{i}.sandbox.vm.gpus_per_vm` {vm.gpus_per_vm} leave "
                      f"{gpus % vm.gpus_per_vm} GPU(s) idle")


@rule(
    id="vm-settings-runtime",
    severity="warning",
    summary="`sandbox.vm` sizes libvirt VMs and is ignored unless `sandbox.runtime` is `vm`.",
    fix="set `runtime: vm`, or remove `sandbox.vm`",
    source=VFIO,
)
def vm_settings_runtime(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        if g.sandbox.vm is not None and g.sandbox.runtime != "vm":
            yield Hit(("node_groups", i, "sandbox", "vm"), f"`node_groups.{i}.sandbox.vm` is set but the runtime is "
                      f"`{g.sandbox.runtime}`")


FM_GUIDE = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"


@rule(
    id="nvswitch-passthrough-plan",
    severity="error",
    summary="Passing the SXM GPUs of an NVSwitch system into Kata or VMs needs a fabric plan (`sandbox.nvswitch`): "
            "`full-passthrough` (every GPU and NVSwitch to one guest, Fabric Manager in the guest, the runtime able "
            "to pass NVSwitches, enough PCIe root ports) or `shared-nvswitch` (Fabric Manager on the host, each "
            "guest one supported partition size). Without one CUDA in the guest fails with 'system not yet "
            "initialized' or sees no NVLink.",
    fix="set `sandbox.nvswitch: full-passthrough` (one guest per host) or `shared-nvswitch` with `gpus_per_guest`",
    source=FM_GUIDE,
)
def nvswitch_passthrough_plan(ctx: RuleContext) -> Iterator[Hit]:
    virt = ctx.catalog.extras["nvswitch_virtualization"]
    sizes = [int(x) for x in virt["partition_sizes"]]
    for i, g in enumerate(ctx.bp.node_groups):
        hw = ctx.cluster.group(g).hardware
        if not (g.sandbox.passthrough and hw.nvswitch and hw.gpus):
            continue
        p = ("node_groups", i, "sandbox")
        plan = g.sandbox.nvswitch
        if plan is None:
            yield Hit(p, f"node group `{g.name}` passes its {hw.gpus} x `{hw.gpu_key}` into `{g.sandbox.runtime}` guests "
                      f"on an NVSwitch system without a fabric plan (`node_groups.{i}.sandbox.nvswitch`): only the GPUs "
                      f"would be passed and no Fabric Manager would set up the NVSwitches")
            continue
        vm_gpus = g.sandbox.vm.gpus_per_vm if g.sandbox.runtime == "vm" and g.sandbox.vm else None
        if plan.mode == "full-passthrough":
            if vm_gpus is not None and vm_gpus != hw.gpus:
                yield Hit(p + ("vm", "gpus_per_vm"), f"`full-passthrough` gives all {hw.gpus} GPUs and the NVSwitches to "
                          f"one guest, but `node_groups.{i}.sandbox.vm.gpus_per_vm` is {vm_gpus}",
                          f"set `gpus_per_vm: {hw.gpus}`, or use `nvswitch: {{mode: shared-nvswitch, gpus_per_guest: "
                          f"{vm_gpus}}}`")
            if plan.gpus_per_guest not in (None, hw.gpus):
                yield Hit(p + ("nvswitch", "gpus_per_guest"), f"`full-passthrough` passes all {hw.gpus} GPUs; "
                          f"`node_groups.{i}.sandbox.nvswitch.gpus_per_guest` {plan.gpus_per_guest} contradicts it",
                          "remove `gpus_per_guest` (it applies to `shared-nvswitch`)")
            need = version(str(virt["kata_full_passthrough_min"]))
            have = version(ctx.bp.software.kata)
            if g.sandbox.runtime == "kata" and need and have and have < need:
                yield Hit(("software", "kata"), f"`software.kata` {ctx.bp.software.kata} cannot pass the NVSwitches "
                          f"with the GPUs (node group `{g.name}`, `full-passthrough`); Kata {vstr(need)} can",
                          f"set `software.kata` to {vstr(need)} or newer")
        else:
            want = plan.gpus_per_guest or vm_gpus or hw.gpus
            if want not in sizes or want > hw.gpus:
                fits = [s for s in sizes if s <= hw.gpus]
                yield Hit(p + ("nvswitch",), f"`shared-nvswitch` guests of node group `{g.name}` get {want} GPU(s); "
                          f"Fabric Manager partitions hold {', '.join(map(str, fits))} GPUs",
                          f"set `node_groups.{i}.sandbox.nvswitch.gpus_per_guest` to one of {', '.join(map(str, fits))}")
            elif vm_gpus is not None and plan.gpus_per_guest is not None and vm_gpus != plan.gpus_per_guest:
                yield Hit(p + ("vm", "gpus_per_vm"), f"`node_groups.{i}.sandbox.vm.gpus_per_vm` {vm_gpus} differs from "
                          f"the partition size `nvswitch.gpus_per_guest` {plan.gpus_per_guest}",
                          f"set `gpus_per_vm: {plan.gpus_per_guest}`")
