"""Software-stack rules: every pair of layers the catalog's compatibility model
(``blueprints/data/software-catalog.yaml``, :mod:`blueprints.software_stack`) says cannot work together.

Each rule reads the resolved stack (``ctx.cluster.software``: stated fields as written, the rest the
catalog's defaults for the declared hardware) and the catalog entry with its source; a finding points at
the ``software`` field when the blueprint states it, else at what brought the requirement in (the node
group's hardware or instance type).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..software_stack import (
    arch_first_cuda,
    arch_last_cuda_major,
    blueprint_gpus,
    cuda_minor,
    driver_runs_cuda,
    nccl_build_for,
    tag_cuda,
    wheel_drops_arch,
)
from ._facts import version, vstr
from .registry import Hit, RuleContext, rule

CUDA_ARCH_SOURCE = "https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html"


def _at(ctx: RuleContext, name: str, fallback: tuple[Any, ...]) -> tuple[Any, ...]:
    """``software.<name>`` when the blueprint states it, else ``fallback``."""
    return ("software", name) if getattr(ctx.bp.software, name, None) is not None else fallback


def _hw_path(ctx: RuleContext, i: int) -> tuple[Any, ...]:
    g = ctx.bp.node_groups[i]
    return ("node_groups", i, "instance_type") if g.instance_type else ("node_groups", i, "hardware", "gpu")


def _branch(ctx: RuleContext) -> int:
    return (version(ctx.bp.software.driver_branch) or (0,))[0]


@rule(
    id="cuda-gpu-architecture",
    severity="error",
    summary="Each GPU architecture needs a CUDA toolkit that knows it (Ampere 11.0, Ada and Hopper 11.8, Blackwell "
            "12.8: catalog `driver_architectures`) and still builds for it (CUDA 13 dropped Maxwell, Pascal, Volta).",
    fix="raise `software.cuda` (or leave it unset: the default fits the declared GPUs)",
    source=CUDA_ARCH_SOURCE,
)
def cuda_gpu_architecture(ctx: RuleContext) -> Iterator[Hit]:
    cuda = ctx.cluster.software.cuda
    for i, key, arch in blueprint_gpus(ctx.bp, ctx.catalog):
        first, last = arch_first_cuda(ctx.catalog, arch), arch_last_cuda_major(ctx.catalog, arch)
        where, group = _at(ctx, "cuda", _hw_path(ctx, i)), ctx.bp.node_groups[i].name
        if first and (version(cuda) or ()) < (version(first) or ()):
            yield Hit(where, f"`software.cuda` {cuda} predates `{key}` ({arch}) of node group `{group}`: {arch} needs "
                      f"CUDA {first} or newer", f'set `software.cuda: "{first}"` or newer')
            return
        if last is not None and (version(cuda) or (0,))[0] > last:
            yield Hit(where, f"`software.cuda` {cuda} no longer builds for `{key}` ({arch}) of node group `{group}`: "
                      f"CUDA {last}.x is the last with {arch} "
                      f"({ctx.catalog.software['cuda_architecture_support']['last_cuda_major'][arch]['source']})",
                      f"set `software.cuda` to a {last}.x release")
            return


@rule(
    id="cuda-forward-compat",
    severity="error",
    summary="`software.cuda_compat` (NVIDIA's cuda-compat package) runs a newer CUDA on an older driver only on "
            "NVIDIA data-centre GPUs and only on the base driver branches NVIDIA lists for that CUDA major.",
    fix="raise `software.driver_branch` to one that runs the CUDA natively, or use a listed base branch",
    source="https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html",
)
def cuda_forward_compat(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    if not sw.cuda_compat:
        return
    cat, cuda, branch = ctx.catalog, ctx.cluster.software.cuda, _branch(ctx)
    gpus = blueprint_gpus(ctx.bp, cat)
    datacenter = set(cat.software["cuda_compat"]["datacenter_gpus"])
    for i, key, _ in gpus:
        if key not in datacenter:
            yield Hit(("software", "cuda_compat"), f"`software.cuda_compat` is set but `{key}` of node group "
                      f"`{ctx.bp.node_groups[i].name}` is not an NVIDIA data-centre GPU")
            return
    if driver_runs_cuda(cat, branch, cuda, compat=True, gpus=tuple(k for _, k, _ in gpus)) is not None:
        return  # runs natively, by minor-version compatibility, or through the package on a listed base branch
    bases = cat.software["cuda_compat"]["forward"]["base_branches"].get(cuda.split(".")[0], [])
    yield Hit(("software", "cuda_compat"), f"`software.cuda_compat` cannot run CUDA {cuda} on driver branch "
              f"{sw.driver_branch}: NVIDIA lists {', '.join(f'R{b}' for b in bases) or 'no branch'} as base for "
              f"CUDA {cuda.split('.')[0]}.x")


@rule(
    id="nccl-cuda-build",
    severity="error",
    summary="NVIDIA builds each NCCL release for given CUDA majors (packages `<nccl>-1+cuda<X.Y>`); an NCCL with no "
            "build for the stack's CUDA major cannot be installed beside it.",
    fix="use an NCCL release built for the CUDA major (or leave `software.nccl` unset)",
    source="https://developer.download.nvidia.com/compute/redist/nccl/",
)
def nccl_cuda_build(ctx: RuleContext) -> Iterator[Hit]:
    st = ctx.cluster.software
    releases = ctx.catalog.software["nccl_releases"]["releases"]
    row = releases.get(st.nccl.split("-")[0])
    if row is None or nccl_build_for(ctx.catalog, st.nccl, st.cuda) is not None:
        return
    major = st.cuda.split(".")[0]
    built = [v for v, r in releases.items() if any(str(b).split(".")[0] == major for b in r["cuda_builds"])]
    which = "`software.nccl`" if ctx.bp.software.nccl is not None else "the default for this stack"
    yield Hit(_at(ctx, "nccl", ("software", "cuda")), f"NCCL {st.nccl} ({which}) has no build for CUDA "
              f"{major}.x (`software.cuda` {st.cuda}); it is built for CUDA {', '.join(map(str, row['cuda_builds']))}",
              f"set `software.nccl` to a release built for CUDA {major} (e.g. {built[-1]})" if built else None)


@rule(
    id="nccl-release-known",
    severity="error",
    summary="The nodes' NCCL is installed as NVIDIA's package `<nccl>-1+cuda<X.Y>`, pinned from the catalog's row "
            "of the release (its CUDA builds); a `software.nccl` the catalog has no row for cannot be pinned, and "
            "the nodes would get no NCCL, nccl-tests or training environment.",
    fix="use a catalogued NCCL release or leave `software.nccl` unset (a new release needs a catalog row in "
        "software-catalog.yaml `nccl_releases` with its CUDA builds and source)",
    source="https://developer.download.nvidia.com/compute/redist/nccl/",
)
def nccl_release_known(ctx: RuleContext) -> Iterator[Hit]:
    stated = ctx.bp.software.nccl
    releases = ctx.catalog.software["nccl_releases"]["releases"]
    if stated is None or stated.split("-")[0] in releases:
        return
    yield Hit(("software", "nccl"), f"NCCL {stated} (`software.nccl`) is not a release the catalog knows "
              f"({', '.join(releases)}): its package cannot be pinned, so the nodes would get no NCCL stack")


def _nccl_needs(ctx: RuleContext) -> Iterator[tuple[int, str, str, dict[str, Any]]]:
    """``(group index, GPU key, what, feature row)`` for every NCCL feature a declared GPU needs."""
    feats = ctx.catalog.software["nccl_features"]
    mnnvl = set(ctx.catalog.mnnvl_gpus)
    for i, key, arch in blueprint_gpus(ctx.bp, ctx.catalog):
        if arch in feats["architectures"]:
            yield i, key, f"{arch} GPUs", feats["architectures"][arch]
        if key in mnnvl:
            yield i, key, "multi-node NVLink", feats["mnnvl"]


@rule(
    id="nccl-gpu-support",
    severity="error",
    summary="NCCL must know the GPUs: Blackwell needs NCCL 2.25.1, the multi-node NVLink of GB200 NVL72 racks "
            "2.27.5 (catalog `nccl_features`); older releases fail to initialise or ignore the NVLink domain.",
    fix="raise `software.nccl` (or leave it unset)",
    source="https://docs.nvidia.com/dgx/dgxgb200nvl72-release-notes/nvonline-ids.html",
)
def nccl_gpu_support(ctx: RuleContext) -> Iterator[Hit]:
    nccl = ctx.cluster.software.nccl
    for i, key, what, row in _nccl_needs(ctx):
        need = version(str(row["min_nccl"]))
        if need and (version(nccl) or ()) < need:
            yield Hit(_at(ctx, "nccl", _hw_path(ctx, i)), f"NCCL {nccl} (`software.nccl`) predates {what} "
                      f"(`{key}` of node group `{ctx.bp.node_groups[i].name}`): needs NCCL {vstr(need)} or newer "
                      f"({row['source']})", f"set `software.nccl` to {vstr(need)} or newer")
            return


@rule(
    id="nccl-nvls",
    severity="warning",
    summary="NVSwitch systems with NVLink 4 or newer (HGX H100/H200/B200) reduce in the switch (NVLink SHARP, NVLS) "
            "from NCCL 2.17.1 on; an older NCCL leaves that bandwidth unused.",
    fix="raise `software.nccl` (or leave it unset)",
    source="https://github.com/NVIDIA/nccl/releases/tag/v2.17.1-1",
)
def nccl_nvls(ctx: RuleContext) -> Iterator[Hit]:
    nccl = ctx.cluster.software.nccl
    need = version(str(ctx.catalog.software["nccl_features"]["nvls"]["min_nccl"]))
    if not need or (version(nccl) or ()) >= need:
        return
    for r in ctx.cluster.training_groups:
        hw = r.hardware
        if hw.nvswitch and hw.gpu is not None and (hw.gpu.nvlink_gen or 0) >= 4:
            yield Hit(_at(ctx, "nccl", _hw_path(ctx, r.index)), f"NCCL {nccl} (`software.nccl`) predates NVLink SHARP "
                      f"(NVLS) on the NVSwitches of node group `{r.name}` (`{hw.gpu_key}`): needs {vstr(need)}",
                      f"set `software.nccl` to {vstr(need)} or newer")
            return


def _efa_family_groups(ctx: RuleContext) -> Iterator[tuple[int, str, str]]:
    """``(group index, instance type, family)`` of EFA groups with GPUs."""
    for r in ctx.cluster.efa_groups:
        if r.nvidia_gpus and r.group.instance_type:
            yield r.index, r.group.instance_type, r.group.instance_type.split(".")[0]


@rule(
    id="aws-ofi-nccl-instance-type",
    severity="error",
    summary="aws-ofi-nccl carries a platform configuration (topology, protocol, tuner) per EFA instance family; a "
            "release older than the family's first (p5e 1.11.0, p5en 1.13.0, p6-b200 1.15.0, p6e-gb200 1.16.1, "
            "p6-b300 1.18.0) runs it with generic defaults.",
    fix="raise `software.aws_ofi_nccl` (or leave it unset)",
    source="https://github.com/aws/aws-ofi-nccl/blob/v1.21.1/RELEASENOTES.md",
)
def aws_ofi_nccl_instance_type(ctx: RuleContext) -> Iterator[Hit]:
    have = version(ctx.cluster.software.aws_ofi_nccl) or ()
    fams = ctx.catalog.software["aws_ofi_nccl"]["instance_families"]
    for i, it, fam in _efa_family_groups(ctx):
        row = fams.get(fam)
        need = version(str(row["min_version"])) if row else None
        if need and have < need:
            yield Hit(_at(ctx, "aws_ofi_nccl", ("node_groups", i, "instance_type")),
                      f"aws-ofi-nccl {ctx.cluster.software.aws_ofi_nccl} (`software.aws_ofi_nccl`) predates support "
                      f"for `{it}` (node group `{ctx.bp.node_groups[i].name}`): first in {vstr(need)} ({row['source']})",
                      f"set `software.aws_ofi_nccl` to {vstr(need)} or newer")
            return


@rule(
    id="aws-ofi-nccl-nccl",
    severity="error",
    summary="aws-ofi-nccl supports NCCL from a floor release on (2.17.1 for current plugins, the net-plugin API "
            "versions it implements); an older NCCL cannot load it and falls back to TCP sockets.",
    fix="raise `software.nccl` (or leave it unset)",
    source="https://github.com/aws/aws-ofi-nccl/blob/v1.21.1/RELEASENOTES.md",
)
def aws_ofi_nccl_nccl(ctx: RuleContext) -> Iterator[Hit]:
    if not any(True for _ in _efa_family_groups(ctx)):
        return
    st = ctx.cluster.software
    row = ctx.catalog.software["aws_ofi_nccl"]["releases"].get(st.aws_ofi_nccl)
    need = version(str(row["min_nccl"])) if row else None
    if need and (version(st.nccl) or ()) < need:
        yield Hit(_at(ctx, "nccl", ("software", "aws_ofi_nccl")), f"NCCL {st.nccl} (`software.nccl`) is older than "
                  f"{vstr(need)}, the oldest NCCL aws-ofi-nccl {st.aws_ofi_nccl} supports",
                  f"set `software.nccl` to {vstr(need)} or newer")


def _net_apis(ctx: RuleContext) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """``((NCCL's lowest, highest), (plugin's lowest, highest))`` net-plugin API versions of the stack on EFA
    GPU groups; ``None`` off EFA or when the catalog lacks either release."""
    if not any(True for _ in _efa_family_groups(ctx)):
        return None
    st, sw = ctx.cluster.software, ctx.catalog.software
    n = sw["nccl_releases"]["releases"].get(st.nccl.split("-")[0], {}).get("net_plugin_api")
    p = sw["aws_ofi_nccl"]["releases"].get(st.aws_ofi_nccl, {}).get("net_plugin_api")
    return ((int(n[0]), int(n[1])), (int(p[0]), int(p[1]))) if n and p else None


@rule(
    id="nccl-net-plugin-api",
    severity="error",
    summary="NCCL loads a net plugin through one of the `ncclNet_vN` API versions it knows (2.26 dropped v5, 2.30 "
            "added v12); a plugin that exports none of them is not loaded and NCCL falls back to TCP sockets.",
    fix="use an aws-ofi-nccl release that exports an API version the NCCL release loads",
    source="https://github.com/NVIDIA/nccl/tree/v2.30.7-1/src/plugin/net",
)
def nccl_net_plugin_api(ctx: RuleContext) -> Iterator[Hit]:
    apis = _net_apis(ctx)
    if apis is None:
        return
    (nlo, nhi), (plo, phi) = apis
    if max(nlo, plo) > min(nhi, phi):
        st = ctx.cluster.software
        yield Hit(_at(ctx, "aws_ofi_nccl", ("software", "nccl")), f"aws-ofi-nccl {st.aws_ofi_nccl} "
                  f"(`software.aws_ofi_nccl`) exports net API v{plo}-v{phi}, NCCL {st.nccl} (`software.nccl`) loads "
                  f"v{nlo}-v{nhi}: NCCL cannot load the plugin")


@rule(
    id="nccl-net-plugin-api-older",
    severity="warning",
    summary="When the net plugin's newest `ncclNet_vN` API is older than the NCCL release's, NCCL drives it through the "
            "older API and the newer API's features (v10 traffic classes, v11 and v12 additions) stay unused.",
    fix="raise `software.aws_ofi_nccl` to a release that exports the NCCL release's newest net API",
    source="https://github.com/aws/aws-ofi-nccl/blob/v1.21.1/RELEASENOTES.md",
)
def nccl_net_plugin_api_older(ctx: RuleContext) -> Iterator[Hit]:
    apis = _net_apis(ctx)
    if apis is None:
        return
    (nlo, nhi), (plo, phi) = apis
    if max(nlo, plo) <= min(nhi, phi) and phi < nhi:
        st = ctx.cluster.software
        newer = [v for v, r in ctx.catalog.software["aws_ofi_nccl"]["releases"].items()
                 if r.get("net_plugin_api") and int(r["net_plugin_api"][1]) >= nhi]
        yield Hit(_at(ctx, "aws_ofi_nccl", ("software", "nccl")), f"aws-ofi-nccl {st.aws_ofi_nccl} "
                  f"(`software.aws_ofi_nccl`) exports net API up to v{phi}; NCCL {st.nccl} uses up to v{nhi}",
                  f"set `software.aws_ofi_nccl` to {newer[0]} or newer" if newer else None)


@rule(
    id="efa-env-capability",
    severity="error",
    summary="An EFA variable in `network.nccl.env` asks the device for a capability (FI_EFA_USE_DEVICE_RDMA: RDMA read; "
            "FI_EFA_USE_DEVICE_RDMA_WRITE: RDMA write) that the instance type's EFA does not have (catalog `efa_rdma`): "
            "libfabric cannot open the endpoint and NCCL falls back or fails.",
    fix="remove the variable (libfabric uses device RDMA where the hardware has it)",
    source="https://ofiwg.github.io/libfabric/v1.22.0/man/fi_efa.7.html",
)
def efa_env_capability(ctx: RuleContext) -> Iterator[Hit]:
    net = ctx.bp.network
    if net.fabric != "efa":
        return
    env = net.nccl.env
    for row in ctx.catalog.software["efa_env_capabilities"]:
        value = env.get(row["name"])
        if value is None or value.strip().lower() not in {str(v).lower() for v in row["values"]}:
            continue
        for r in ctx.cluster.efa_groups:
            it = r.hardware.instance
            if it is None or not r.nvidia_gpus:
                continue
            has = (it.raw.get("efa_rdma") or {}).get(row["needs"].split("_")[1])
            if has is False:
                yield Hit(("network", "nccl", "env", row["name"]), f"`network.nccl.env.{row['name']}={value}` asks "
                          f"EFA for RDMA {row['needs'].split('_')[1]}, which `{it.name}` (node group `{r.name}`) does "
                          "not have")
                break


@rule(
    id="container-toolkit-driver",
    severity="error",
    summary="The NVIDIA Container Toolkit needs driver 418.81.07 or newer on the host.",
    fix="raise `software.driver_branch`",
    source="https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html",
)
def container_toolkit_driver(ctx: RuleContext) -> Iterator[Hit]:
    ct = ctx.catalog.software["container_toolkit"]
    if not any(r.nvidia_gpus for r in ctx.cluster.groups):
        return
    if _branch(ctx) < int(ct["min_driver_branch"]):
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {ctx.bp.software.driver_branch} is older "
                  f"than the NVIDIA Container Toolkit needs ({ct['rule']})",
                  f"set `software.driver_branch` to {ct['min_driver_branch']} or newer")


@rule(
    id="pytorch-cuda-tag",
    severity="error",
    summary="PyTorch publishes each release for a few CUDA builds only (index tags such as cu126 / cu130: the "
            "release compatibility matrix); another tag has no wheels to install.",
    fix="use a tag the release publishes (or leave `software.pytorch_cuda` unset)",
    source="https://github.com/pytorch/pytorch/blob/main/RELEASE.md",
)
def pytorch_cuda_tag(ctx: RuleContext) -> Iterator[Hit]:
    st = ctx.cluster.software
    row = ctx.catalog.software["pytorch"]["releases"].get(st.pytorch)
    if row is None or st.pytorch_cuda in row["cuda_tags"]:
        return
    yield Hit(_at(ctx, "pytorch_cuda", ("software", "pytorch")), f"PyTorch {st.pytorch} (`software.pytorch`) has no "
              f"`{st.pytorch_cuda}` wheels (`software.pytorch_cuda`); it publishes {', '.join(row['cuda_tags'])} "
              f"({row['source']})", f"set `software.pytorch_cuda` to one of {', '.join(row['cuda_tags'])}")


@rule(
    id="pytorch-cuda-driver",
    severity="error",
    summary="The CUDA a PyTorch wheel is built with must run on the driver branch (natively, by minor-version "
            "compatibility, or through cuda-compat on data-centre GPUs); otherwise `torch.cuda.is_available()` is "
            "false ('driver too old').",
    fix="use an older wheel tag (`software.pytorch_cuda`) or raise `software.driver_branch`",
    source="https://docs.nvidia.com/deploy/cuda-compatibility/",
)
def pytorch_cuda_driver(ctx: RuleContext) -> Iterator[Hit]:
    st, sw = ctx.cluster.software, ctx.bp.software
    if not any(r.nvidia_gpus for r in ctx.cluster.training_groups):
        return
    cuda = tag_cuda(ctx.catalog, st.pytorch, st.pytorch_cuda)
    gpus = tuple(k for _, k, _ in blueprint_gpus(ctx.bp, ctx.catalog))
    if driver_runs_cuda(ctx.catalog, _branch(ctx), cuda, compat=sw.cuda_compat, gpus=gpus) is None:
        yield Hit(_at(ctx, "pytorch_cuda", ("software", "driver_branch")), f"PyTorch `{st.pytorch_cuda}` wheels "
                  f"(CUDA {cuda}) cannot run on driver branch {sw.driver_branch} (`software.driver_branch`)")


@rule(
    id="pytorch-gpu-architecture",
    severity="error",
    summary="A PyTorch wheel carries kernels only for the architectures of its CUDA build (`no kernel image is available "
            "for execution on the device` otherwise): Blackwell needs cu128 or newer, Volta a 12.x tag that keeps it.",
    fix="use a newer wheel tag (`software.pytorch_cuda`)",
    source="https://github.com/pytorch/pytorch/pull/164471",
)
def pytorch_gpu_architecture(ctx: RuleContext) -> Iterator[Hit]:
    st = ctx.cluster.software
    cuda = tag_cuda(ctx.catalog, st.pytorch, st.pytorch_cuda)
    tags = ctx.catalog.software["pytorch"]["releases"].get(st.pytorch, {}).get("cuda_tags", {})
    for i, key, arch in blueprint_gpus(ctx.bp, ctx.catalog):
        if not wheel_drops_arch(ctx.catalog, st.pytorch, st.pytorch_cuda, arch):
            continue
        fits = [t for t in tags if not wheel_drops_arch(ctx.catalog, st.pytorch, t, arch)]
        yield Hit(_at(ctx, "pytorch_cuda", _hw_path(ctx, i)), f"PyTorch {st.pytorch} `{st.pytorch_cuda}` wheels (CUDA "
                  f"{cuda}) carry no kernels for {arch} (`{key}` of node group `{ctx.bp.node_groups[i].name}`)",
                  f"set `software.pytorch_cuda` to one of {', '.join(fits)}" if fits else
                  "use a PyTorch release whose wheels support the GPU")
        return


@rule(
    id="container-image-driver",
    severity="error",
    summary="The NGC PyTorch container must be a release the catalog lists (its CUDA, NCCL and Python known) whose "
            "CUDA runs on the driver branch (natively, minor-version, or cuda-compat on data-centre GPUs).",
    fix="use a listed release whose CUDA the driver runs, or raise `software.driver_branch`",
    source="https://docs.nvidia.com/deeplearning/frameworks/support-matrix/index.html",
)
def container_image_driver(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    if sw.container_image is None:
        return
    st = ctx.cluster.software
    releases = ctx.catalog.software["ngc_pytorch"]["releases"]
    if st.container_release not in releases:
        yield Hit(("software", "container_image"), f"`software.container_image` {sw.container_image} is not a "
                  f"release the catalog knows the stack of (known: {', '.join(sorted(releases))})",
                  f"use one of {', '.join(sorted(releases))} or add the release to `ngc_pytorch` with its source")
        return
    cuda = cuda_minor(str(releases[st.container_release]["cuda"]))
    gpus = tuple(k for _, k, _ in blueprint_gpus(ctx.bp, ctx.catalog))
    if driver_runs_cuda(ctx.catalog, _branch(ctx), cuda, compat=sw.cuda_compat, gpus=gpus) is None:
        yield Hit(("software", "container_image"), f"`software.container_image` {sw.container_image} is built on "
                  f"CUDA {cuda}, which driver branch {sw.driver_branch} (`software.driver_branch`) cannot run")
