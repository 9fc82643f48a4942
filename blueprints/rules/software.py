"""Software rules: NVIDIA driver branch vs CUDA toolkit, open kernel modules, Kata version for GPU passthrough."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._facts import group_hardware, version, vstr
from .registry import Hit, RuleContext, rule

CUDA_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"


def _cuda_table(ctx: RuleContext) -> dict[str, Any]:
    return ctx.catalog.extras["cuda_driver_minimums"]


@rule(
    id="cuda-driver-compat",
    severity="error",
    summary="The NVIDIA driver branch must support the CUDA major version (11.x: 450+, 12.x: 525+, 13.x: 580+); "
            "otherwise every CUDA program fails with 'driver version is insufficient'.",
    fix="raise `software.driver_branch` or lower `software.cuda`",
    source=CUDA_NOTES,
)
def cuda_driver_compat(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    cuda, branch = version(sw.cuda), version(sw.driver_branch)
    need = _cuda_table(ctx)["major_compatibility"].get(str(cuda[0])) if cuda else None
    if need is not None and branch and branch[0] < int(need):
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {sw.driver_branch} cannot run CUDA "
                  f"{sw.cuda} (`software.cuda`); CUDA {cuda[0] if cuda else '?'}.x needs driver {need} or newer",
                  f"set `software.driver_branch: \"{need}\"` or newer")


@rule(
    id="cuda-driver-minor",
    severity="warning",
    summary="A driver older than the CUDA toolkit's own release runs it only in minor-version compatibility mode "
            "(no PTX JIT of newer code, some features missing).",
    fix="use the driver branch the CUDA release shipped with, or newer",
    source=CUDA_NOTES,
)
def cuda_driver_minor(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    cuda, branch = version(sw.cuda), version(sw.driver_branch)
    if not cuda or not branch or len(cuda) < 2:
        return
    table = _cuda_table(ctx)
    major = table["major_compatibility"].get(str(cuda[0]))
    need = table["toolkit"].get(f"{cuda[0]}.{cuda[1]}")
    if need is not None and major is not None and int(major) <= branch[0] < int(need):
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {sw.driver_branch} is older than the "
                  f"{need} branch that CUDA {cuda[0]}.{cuda[1]} shipped with", f"set `software.driver_branch: \"{need}\"`")


@rule(
    id="open-kernel-modules-required",
    severity="error",
    summary="Blackwell data-centre GPUs (B200, GB200) are supported only with the open GPU kernel modules.",
    fix="set `software.driver_open_kernel_modules: true`",
    source="https://developer.nvidia.com/blog/nvidia-transitions-fully-towards-open-source-gpu-kernel-modules/",
)
def open_kernel_modules_required(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.software.driver_open_kernel_modules:
        return
    archs = set(ctx.catalog.extras["open_kernel_modules_required"]["architectures"])
    for g in ctx.bp.node_groups:
        hw = group_hardware(ctx.bp, g, ctx.catalog)
        if hw.gpu is not None and hw.gpu.architecture in archs:
            yield Hit(("software", "driver_open_kernel_modules"),
                      f"`software.driver_open_kernel_modules` is false but node group `{g.name}` has `{hw.gpu.key}` "
                      f"({hw.gpu.architecture})")
            return


@rule(
    id="kata-version-gpu-passthrough",
    severity="error",
    summary="GPU passthrough into Kata Containers with NVIDIA's sandbox device plugin needs Kata 3.23 or newer.",
    fix="set `software.kata` to 3.23.0 or newer",
    source="https://pkg.go.dev/github.com/nvidia/sandbox-device-plugin",
)
def kata_version_gpu_passthrough(ctx: RuleContext) -> Iterator[Hit]:
    need = version(ctx.catalog.extras["kata_gpu_passthrough"]["min_kata_version"])
    have = version(ctx.bp.software.kata)
    if need is None or have is None or have >= need:
        return
    for g in ctx.bp.node_groups:
        if g.sandbox.runtime == "kata" and g.sandbox.passthrough and group_hardware(ctx.bp, g, ctx.catalog).gpus:
            yield Hit(("software", "kata"), f"`software.kata` {ctx.bp.software.kata} is older than {vstr(need)}, needed "
                      f"to pass GPUs into Kata (node group `{g.name}`)")
            return
