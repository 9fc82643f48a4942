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


def _bare_metal(ctx: RuleContext) -> dict[str, Any]:
    return ctx.catalog.extras["bare_metal"]


@rule(
    id="driver-branch-supported",
    severity="warning",
    summary="The NVIDIA driver branch should be a Long Term Support or Production branch still in NVIDIA's support "
            "table; other branches get no security fixes.",
    fix="use the Long Term Support branch (`software.driver_branch`, default)",
    source="https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html",
)
def driver_branch_supported(ctx: RuleContext) -> Iterator[Hit]:
    nd = _bare_metal(ctx)["nvidia_driver"]
    branch = ctx.bp.software.driver_branch.split(".")[0]
    if branch not in nd["branches"]:
        listed = ", ".join(f"{b} ({v['designation']} until {v['end_of_life']})" for b, v in nd["branches"].items())
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {branch} is not in NVIDIA's support table "
                  f"({listed})", f"set `software.driver_branch: \"{nd['default_branch']}\"` (Long Term Support)")


@rule(
    id="driver-version-branch",
    severity="error",
    summary="`software.driver_version` must be a release of `software.driver_branch`; a branch without a catalogued "
            "release needs an explicit version (driver, Fabric Manager and NSCQ are installed at exactly it).",
    fix="set `software.driver_version` to a release of the branch (e.g. `580.105.08` for 580)",
    source="https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",
)
def driver_version_branch(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    branch = sw.driver_branch.split(".")[0]
    if sw.driver_version and sw.driver_version.split(".")[0] != branch:
        yield Hit(("software", "driver_version"), f"`software.driver_version` {sw.driver_version} is not a release of "
                  f"`software.driver_branch` {branch}")
    elif (not sw.driver_version and ctx.bp.target.provider == "onprem"
          and branch != _bare_metal(ctx)["nvidia_driver"]["default_branch"]
          and any(group_hardware(ctx.bp, g, ctx.catalog).nvidia_gpus for g in ctx.bp.node_groups)):
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {branch} has no catalogued release to pin "
                  "the driver, Fabric Manager and NSCQ to")


@rule(
    id="container-toolkit-cve",
    severity="error",
    summary="NVIDIA Container Toolkit before 1.17.8 is affected by CVE-2025-23266 (container escape through the "
            "createContainer hook).",
    fix="set `software.container_toolkit` to 1.17.8 or newer (the default)",
    source="https://nvidia.custhelp.com/app/answers/detail/a_id/5659",
)
def container_toolkit_cve(ctx: RuleContext) -> Iterator[Hit]:
    ct = _bare_metal(ctx)["container_toolkit"]
    have, need = version(ctx.bp.software.container_toolkit), version(ct["minimum_version"])
    if have is not None and need is not None and have < need:
        yield Hit(("software", "container_toolkit"), f"`software.container_toolkit` {ctx.bp.software.container_toolkit} "
                  f"is older than {ct['minimum_version']}, the first release fixing CVE-2025-23266")


@rule(
    id="gvisor-nvproxy-driver",
    severity="error",
    summary="gVisor's nvproxy accepts only the NVIDIA driver versions compiled into each runsc release; any other "
            "version makes every GPU sandbox fail at start.",
    fix="set `software.gvisor` to a runsc release whose nvproxy lists the driver version, or pin that driver",
    source="https://gvisor.dev/docs/user_guide/gpu/#driver-versions",
)
def gvisor_nvproxy_driver(ctx: RuleContext) -> Iterator[Hit]:
    from ..vendor import resolved_driver_version, runsc_supported_drivers

    sw = ctx.bp.software
    groups = [g for g in ctx.bp.node_groups
              if g.sandbox.runtime == "gvisor" and group_hardware(ctx.bp, g, ctx.catalog).nvidia_gpus]
    if not groups:
        return
    supported = runsc_supported_drivers(sw.gvisor)
    releases = ", ".join(_bare_metal(ctx)["gvisor"]["releases"])
    if supported is None:
        yield Hit(("software", "gvisor"), f"`software.gvisor` {sw.gvisor} is not a runsc release with a known nvproxy "
                  f"driver list (known: {releases}); `latest` moves under the pinned driver",
                  f"set `software.gvisor: \"{_bare_metal(ctx)['gvisor']['default_release']}\"`")
        return
    driver = resolved_driver_version(sw.driver_branch, sw.driver_version)
    if driver and driver not in supported:
        newest = [v for v in supported if v.split(".")[0] == driver.split(".")[0]]
        yield Hit(("software", "gvisor"), f"runsc {sw.gvisor} (`software.gvisor`) does not support NVIDIA driver {driver} "
                  f"(node group `{groups[0].name}` runs GPUs under gVisor)",
                  f"set `software.driver_version` to one of {', '.join(newest or supported[-3:])}")
