"""Software rules: NVIDIA driver branch vs CUDA toolkit, open kernel modules, Kata version for GPU passthrough."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

from ..software_stack import blueprint_gpus, driver_runs_cuda
from ._facts import fld, version, vstr
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
    text = ctx.cluster.software.cuda
    cuda, branch = version(text), version(sw.driver_branch)
    need = _cuda_table(ctx)["major_compatibility"].get(str(cuda[0])) if cuda else None
    if need is None or not branch or branch[0] >= int(need):
        return
    gpus = tuple(k for _, k, _ in blueprint_gpus(ctx.bp, ctx.catalog))
    if driver_runs_cuda(ctx.catalog, branch[0], text, compat=sw.cuda_compat, gpus=gpus) == "forward":
        return  # the cuda-compat package runs it (rule cuda-forward-compat checks the package's own limits)
    yield Hit(("software", "driver_branch"), f"`software.driver_branch` {sw.driver_branch} cannot run CUDA "
              f"{text} (`software.cuda`); CUDA {cuda[0] if cuda else '?'}.x needs driver {need} or newer",
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
    cuda, branch = version(ctx.cluster.software.cuda), version(sw.driver_branch)
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
        hw = ctx.cluster.group(g).hardware
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
        if g.sandbox.runtime == "kata" and g.sandbox.passthrough and ctx.cluster.group(g).hardware.gpus:
            yield Hit(("software", "kata"), f"`software.kata` {ctx.bp.software.kata} is older than {vstr(need)}, needed "
                      f"to pass GPUs into Kata (node group `{g.name}`)")
            return


DRIVER_MATRIX = "https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html"


def _sw(ctx: RuleContext, name: str, fallback: tuple[Any, ...]) -> tuple[Any, ...]:
    """``software.<name>`` when the blueprint writes a `software` section, else ``fallback`` (the
    key the default matters for), so the finding points at a line the user wrote."""
    return ("software", name) if ("software",) in ctx.loaded.positions else fallback


def effective_driver(ctx: RuleContext) -> tuple[str | None, bool]:
    """``(release, pinned)``: ``software.driver_version`` (pinned) or the catalog's release of the
    branch (not pinned; ``None`` when the catalog knows no release of the branch)."""
    sw = ctx.bp.software
    if sw.driver_version:
        return sw.driver_version, True
    return ctx.catalog.driver_release(sw.driver_branch), False


@rule(
    id="driver-branch-gpu",
    severity="error",
    summary="Each GPU architecture has a first driver branch (the branch of its first CUDA toolkit) and older ones a "
            "last (newer branches dropped them); some parts also need a later release of the branch than its first. "
            "A pinned driver outside the range does not drive the GPUs; the finding names the range.",
    fix="pin a driver branch inside the GPU's range",
    source=DRIVER_MATRIX,
)
def driver_branch_gpu(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    branch = version(sw.driver_branch)
    if not branch:
        return
    release, pinned = effective_driver(ctx)
    seen: set[str] = set()
    for g in ctx.bp.node_groups:
        hw = ctx.cluster.group(g).hardware
        if hw.gpu is None or hw.gpu.key in seen:
            continue
        seen.add(hw.gpu.key)
        rng = ctx.catalog.driver_range(hw.gpu)
        if rng is None:
            continue
        span = f"R{rng.min_branch}" + (f"-R{rng.max_branch}" if rng.max_branch else " or newer")
        if branch[0] < rng.min_branch or (rng.max_branch and branch[0] > rng.max_branch):
            yield Hit(("software", "driver_branch"), f"`software.driver_branch` {sw.driver_branch} does not support "
                      f"`{hw.gpu.key}` ({rng.architecture}) of node group `{g.name}`: supported branches are {span}",
                      f"set `software.driver_branch` within {span}")
        elif rng.min_driver and release and version(release) < version(rng.min_driver):  # type: ignore[operator]
            where = ("software", "driver_version") if pinned else ("software", "driver_branch")
            yield Hit(where, f"driver {release} (`{fld(where)}`) is older than {rng.min_driver}, the first release "
                      f"that supports `{hw.gpu.key}` of node group `{g.name}`",
                      f"set `software.driver_version` to {rng.min_driver} or newer")


@rule(
    id="driver-branch-supported",
    severity="warning",
    summary="The NVIDIA driver branch should be a Long Term Support or Production branch still in NVIDIA's support "
            "table; other branches get no security fixes.",
    fix="use the Long Term Support branch (`software.driver_branch`, default)",
    source="https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html",
)
def driver_branch_supported(ctx: RuleContext) -> Iterator[Hit]:
    nd = ctx.catalog.bare_metal["nvidia_driver"]
    branch = ctx.bp.software.driver_branch.split(".")[0]
    row = nd["branches"].get(branch)
    this_month = datetime.date.today().strftime("%Y-%m")
    current = [f"{b} ({v['designation']} until {v['end_of_life']})" for b, v in nd["branches"].items()
               if str(v["end_of_life"]) >= this_month]
    fix = f"set `software.driver_branch: \"{nd['default_branch']}\"` (Long Term Support)"
    if row is None:
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {branch} is not in NVIDIA's support table "
                  f"(supported: {', '.join(current)})", fix)
    elif str(row["end_of_life"]) < this_month:
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {branch} reached its end of life in "
                  f"{row['end_of_life']} (supported: {', '.join(current)})", fix)


@rule(
    id="driver-version-branch",
    severity="error",
    summary="`software.driver_version` must be a release of `software.driver_branch` (its first number is the branch).",
    fix="make `software.driver_version` and `software.driver_branch` agree",
    source="https://github.com/NVIDIA/open-gpu-kernel-modules/tags",
)
def driver_version_branch(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    if sw.driver_version and sw.driver_version.split(".")[0] != sw.driver_branch.split(".")[0]:
        yield Hit(("software", "driver_version"), f"`software.driver_version` {sw.driver_version} is not a release of "
                  f"`software.driver_branch` {sw.driver_branch}",
                  f"set `software.driver_branch: \"{sw.driver_version.split('.')[0]}\"` or a {sw.driver_branch}.x release")
    elif (not sw.driver_version and ctx.bp.target.provider == "onprem" and ctx.catalog.driver_release(sw.driver_branch) is None
          and any(r.nvidia_gpus for r in ctx.cluster.groups)):
        yield Hit(("software", "driver_branch"), f"`software.driver_branch` {sw.driver_branch} has no catalogued release "
                  "to pin the driver, Fabric Manager and NSCQ to", "set `software.driver_version` to an exact release")


@rule(
    id="container-toolkit-cve",
    severity="error",
    summary="NVIDIA Container Toolkit older than the release that fixes NVIDIA's latest security bulletin for it "
            "(catalog `bare_metal.container_toolkit.security_fixes`).",
    fix="set `software.container_toolkit` to the catalog's minimum or newer (the default)",
    source="https://nvidia.custhelp.com/app/answers/detail/a_id/5850",
)
def container_toolkit_cve(ctx: RuleContext) -> Iterator[Hit]:
    ct = ctx.catalog.bare_metal["container_toolkit"]
    have, need = version(ctx.bp.software.container_toolkit), version(ct["minimum_version"])
    if have is not None and need is not None and have < need:
        open_fixes = [f for f in ct.get("security_fixes", []) if (fv := version(f["version"])) is not None and have < fv]
        cves = ", ".join(f"{', '.join(f['cves'])} (fixed in {f['version']}: {f['source']})" for f in open_fixes)
        yield Hit(("software", "container_toolkit"), f"`software.container_toolkit` {ctx.bp.software.container_toolkit} "
                  f"is older than {ct['minimum_version']} and open to {cves or 'NVIDIA security bulletins'}")



def _allow_list_groups(ctx: RuleContext) -> Iterator[tuple[int, str, str]]:
    """``(group index, runtime, version field)`` of GPU groups whose runtime has a driver allow-list."""
    for i, g in enumerate(ctx.bp.node_groups):
        hw = ctx.cluster.group(g).hardware
        if not hw.nvidia_gpus:
            continue
        if g.sandbox.runtime == "gvisor":
            yield i, "gvisor", "gvisor"
        elif g.sandbox.runtime == "kata" and g.sandbox.passthrough:
            yield i, "kata", "kata"


@rule(
    id="sandbox-driver-allow-list",
    severity="error",
    summary="gVisor's GPU proxy (nvproxy) and Kata's GPU guest support exact driver releases, listed per "
            "runtime release in the hardware catalog: the runtime release must be listed and "
            "`software.driver_version` must be one of its drivers.",
    fix="pin `software.driver_version` to a release the runtime lists",
    source="https://github.com/google/gvisor/blob/master/pkg/sentry/devices/nvproxy/version.go",
)
def sandbox_driver_allow_list(ctx: RuleContext) -> Iterator[Hit]:
    sw = ctx.bp.software
    release, pinned = effective_driver(ctx)
    done: set[str] = set()
    for i, runtime, field in _allow_list_groups(ctx):
        if runtime in done:
            continue
        done.add(runtime)
        want = str(getattr(sw, field))
        rel = ctx.catalog.runtime_release(runtime, want)
        known = ", ".join(r.release for r in ctx.catalog.runtime_releases(runtime))
        g = ctx.bp.node_groups[i]
        if rel is None:
            yield Hit(_sw(ctx, field, ("node_groups", i, "sandbox")), f"node group `{g.name}` runs `{runtime}` {want} (`software.{field}`), a "
                      f"release without a known GPU driver list", f"set `software.{field}` to one of {known}")
            continue
        drivers = list(rel.drivers)
        in_branch = [d for d in drivers if d.split(".")[0] == sw.driver_branch.split(".")[0]]
        choice = ", ".join(in_branch or drivers)
        where = "in the guest image" if rel.driver_on == "guest" else "on the host"
        if release is None:
            yield Hit(_sw(ctx, "driver_branch", ("node_groups", i, "sandbox")), f"node group `{g.name}` runs `{runtime}` {rel.release}, which "
                      f"supports exact drivers only, but the driver is floating (`software.driver_branch` "
                      f"{sw.driver_branch} without `software.driver_version`)",
                      f"set `software.driver_version` to one of {choice}")
        elif release not in drivers:
            where_field = ("software", "driver_version") if pinned else _sw(ctx, "driver_branch", ("node_groups", i, "sandbox"))
            yield Hit(where_field, f"driver {release} (`software.driver_version`{'' if pinned else ', from the branch'}) "
                      f"is not supported by `{runtime}` {rel.release} of node group `{g.name}` ({where}: "
                      f"{', '.join(drivers)})",
                      f"set `software.driver_version` to one of {choice}" if in_branch or rel.driver_on == "host"
                      else f"set `software.driver_branch: \"{drivers[0].split('.')[0]}\"` and "
                           f"`software.driver_version: \"{drivers[0]}\"`")


@rule(
    id="kernel-drift",
    severity="warning",
    summary="Nodes with out-of-tree kernel modules (NVIDIA driver, DOCA-OFED, Lustre client) lose them when an "
            "update moves the kernel and the next boot comes up without GPU, RDMA or Lustre: the blueprint must "
            "say how drift is prevented (`software.kernel_updates`).",
    fix="set `software.kernel_updates: hold` (pin the kernel) or `dkms-verify` (rebuild and verify after boot)",
    source="https://github.com/Azure/batch-shipyard/issues/174",
)
def kernel_drift(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.is_aws or ctx.bp.software.kernel_updates is not None:
        return
    names = {"nvidia": "the NVIDIA driver", "lustre": "the Lustre client"}
    for i, g in enumerate(ctx.bp.node_groups):
        # the modules the rendered host installs (a passthrough host with shared-NVSwitch Fabric Manager
        # installs the driver too): the same settings the roles are rendered from
        s = ctx.cluster.settings(g)
        mods = [names.get(m, m) for m in s.out_of_tree_modules if m == "nvidia"]
        if ctx.bp.software.doca_ofed and ctx.bp.network.fabric in ("infiniband", "roce"):
            mods.append("DOCA-OFED")
        mods += [names.get(m, m) for m in s.out_of_tree_modules if m != "nvidia"]
        if mods:
            yield Hit(_sw(ctx, "kernel_updates", ("node_groups", i, "name")),
                      f"node group `{g.name}` runs {', '.join(mods)} as out-of-tree kernel modules and "
                      f"`software.kernel_updates` is not set")
            return


@rule(
    id="sandbox-runtime-floating",
    severity="error",
    summary="`software.gvisor: latest` installs whichever gVisor release is current when a node is provisioned; its "
            "GPU proxy supports a moving list of exact drivers (older ones are dropped), so GPU nodes provisioned later "
            "can reject the pinned driver. GPU gVisor groups need a pinned release whose driver list the catalog has.",
    fix="pin `software.gvisor` to a release (e.g. the newest catalogued one)",
    source="https://github.com/google/gvisor/blob/master/pkg/sentry/devices/nvproxy/version.go",
)
def sandbox_runtime_floating(ctx: RuleContext) -> Iterator[Hit]:
    if ctx.bp.software.gvisor != "latest":
        return
    for i, runtime, _ in _allow_list_groups(ctx):
        if runtime == "gvisor":
            newest = ctx.catalog.runtime_release("gvisor", "latest")
            yield Hit(_sw(ctx, "gvisor", ("node_groups", i, "sandbox")),
                      f"node group `{ctx.bp.node_groups[i].name}` runs gVisor on GPUs with `software.gvisor: latest`; "
                      f"the driver list is checked against {newest.release if newest else 'no catalogued release'}",
                      f"set `software.gvisor: \"{newest.release}\"`" if newest else None)
            return


@rule(
    id="imex-domain",
    severity="error",
    summary="Multi-node NVLink nodes (GB200 NVL72 compute trays) run IMEX, whose node list names the IP address of "
            "every node of the NVLink domain, the same list on each; clusterforge takes one node group as one domain, so "
            "the group must fit in one domain (72 GPUs on GB200 NVL72) and give each host by IP address (IMEX's node "
            "list takes addresses, not names: a name would leave the domain unformed).",
    fix="split the group into one group per NVLink domain (rack), and give each host its IP address",
    source="https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/deployment.html",
)
def imex_domain(ctx: RuleContext) -> Iterator[Hit]:
    import ipaddress

    fast = ctx.catalog.extras["nccl_env_fast_paths"]
    for i, g in enumerate(ctx.bp.node_groups):
        s = ctx.cluster.settings(g)
        if not s.imex_nodes:
            continue
        limit = fast.get("mnnvl_domain_gpus", {}).get(s.gpu_model)
        if limit and s.gpu_count * len(g.hosts) > int(limit):
            yield Hit(("node_groups", i, "hosts"),
                      f"node group `{g.name}` is one NVLink domain for IMEX but holds {len(g.hosts)} hosts x "
                      f"{s.gpu_count} {s.gpu_model} = {s.gpu_count * len(g.hosts)} GPUs; one domain holds {limit}",
                      f"split `{g.name}` into groups of at most {int(limit) // max(s.gpu_count, 1)} hosts, one per rack")
        for j, h in enumerate(g.hosts):
            try:
                ipaddress.ip_address(h.address)
            except ValueError:
                yield Hit(("node_groups", i, "hosts", j, "address"),
                          f"host `{h.name}` of multi-node NVLink group `{g.name}` is given by name (`{h.address}`); "
                          "IMEX's node list takes IP addresses", f"set `address` to `{h.name}`'s IP address")


@rule(
    id="nvlsm-release",
    severity="error",
    summary="NVLink 5 NVSwitch systems (HGX B200, GB200) need the NVLink Subnet Manager (nvlsm), which carries a "
            "date-based version of its own: without a catalogued release for the driver branch it would be installed "
            "unpinned and unheld, and an upgrade could move it away from the Fabric Manager it was validated with.",
    fix="use a driver branch whose NVLSM release the hardware catalog lists (`bare_metal.nvidia_driver.nvswitch."
        "nvlsm_versions`), or add the branch's release there with its source",
    source="https://developer.download.nvidia.com/compute/cuda/redist/nvlsm/linux-x86_64/",
)
def nvlsm_release(ctx: RuleContext) -> Iterator[Hit]:
    for i, g in enumerate(ctx.bp.node_groups):
        p = ctx.cluster.settings(g).gpu_packages
        if p is None or "nvlsm" not in p.hold or p.nvlsm_version:
            continue
        known = sorted(ctx.catalog.bare_metal["nvidia_driver"]["nvswitch"].get("nvlsm_versions", {}))
        yield Hit(_sw(ctx, "driver_branch", ("node_groups", i, "hardware")),
                  f"node group `{g.name}` has NVLink 5 NVSwitches and needs NVLSM, but the catalog lists no NVLSM "
                  f"release for driver branch {p.branch} (known: {', '.join(known) or 'none'})",
                  f"set `software.driver_branch` to one of {', '.join(repr(k) for k in known)}")
