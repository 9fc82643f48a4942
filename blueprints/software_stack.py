"""The software stack a blueprint's jobs run on, resolved once from ``software`` and the catalog's
compatibility model (``blueprints/data/software-catalog.yaml``, ``Catalog.software``).

:func:`software_stack` fills every field the blueprint leaves unset with the catalog's default for the
declared hardware: the newest default row (``software-catalog.yaml`` ``defaults``) whose CUDA the driver
branch runs natively (``cuda_driver_minimums``) and every declared NVIDIA GPU architecture supports
(``driver_architectures.*.first_cuda``). Stated fields are kept as written; the ``check`` rules of
:mod:`blueprints.rules.stack` report stated combinations the model rejects. The node settings
(:mod:`blueprints.settings`), the resolved cluster (``ResolvedCluster.software``), the rules and the
renderers read the stack from here, never ``bp.software.cuda`` and friends.

The compatibility helpers (:func:`driver_runs_cuda`, :func:`arch_first_cuda`, ...) are the one
implementation of NVIDIA's rules the rules and the defaults share:
https://docs.nvidia.com/deploy/cuda-compatibility/ .
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from .catalog import Catalog, catalog
from .hardware import group_hardware
from .models import Blueprint
from .versions import version

__all__ = [
    "CudaMode",
    "SoftwareStack",
    "arch_first_cuda",
    "arch_last_cuda_major",
    "blueprint_gpus",
    "cuda_minor",
    "cuda_supports_arch",
    "driver_runs_cuda",
    "native_branch",
    "nccl_build_for",
    "software_stack",
    "tag_cuda",
    "wheel_drops_arch",
]

CudaMode = Literal["native", "minor-version", "forward"]
"""How a driver branch runs a CUDA release: ``native`` (the branch the toolkit shipped with, or newer),
``minor-version`` (an older branch of the same CUDA major: minor-version compatibility, CUDA 11+),
``forward`` (an older major's branch through the ``cuda-compat`` package, data-centre GPUs only)."""


def cuda_minor(text: str) -> str:
    """``"12.8.1"`` -> ``"12.8"`` (the ``major.minor`` the catalog tables are keyed by)."""
    return ".".join(text.split(".")[:2])


def native_branch(cat: Catalog, cuda: str) -> int | None:
    """The driver branch CUDA ``cuda`` shipped with (catalog ``cuda_driver_minimums.toolkit``); for a minor
    release the table lacks, ``None``. Source: the "CUDA Toolkit and Corresponding Driver Versions" table,
    https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html ."""
    row = cat.extras["cuda_driver_minimums"]["toolkit"].get(cuda_minor(cuda))
    return int(row) if row is not None else None


def major_branch(cat: Catalog, cuda: str) -> int | None:
    """The first driver branch that runs any CUDA of ``cuda``'s major (minor-version compatibility,
    ``cuda_driver_minimums.major_compatibility``); ``None`` for a major the catalog does not know."""
    row = cat.extras["cuda_driver_minimums"]["major_compatibility"].get(cuda.split(".")[0])
    return int(row) if row is not None else None


def driver_runs_cuda(cat: Catalog, branch: int, cuda: str, *, compat: bool = False,
                     gpus: tuple[str, ...] = ()) -> CudaMode | None:
    """How driver branch ``branch`` runs CUDA ``cuda``, or ``None`` when it cannot.

    ``native`` when the branch is at least the one the toolkit shipped with (for a minor release the
    table lacks: at least the major's first branch); ``minor-version`` for an older branch of the same
    major; ``forward`` when ``compat`` (the ``cuda-compat`` package is installed), every GPU key of
    ``gpus`` is a data-centre part and the branch is one NVIDIA lists as a base for the toolkit's major
    (catalog ``cuda_compat.forward``). Source: https://docs.nvidia.com/deploy/cuda-compatibility/ ."""
    native, floor = native_branch(cat, cuda), major_branch(cat, cuda)
    if native is not None and branch >= native:
        return "native"
    if native is None and floor is not None and branch >= floor:
        return "native"
    if floor is not None and branch >= floor:
        return "minor-version"
    fwd = cat.software["cuda_compat"]["forward"]
    datacenter = set(cat.software["cuda_compat"]["datacenter_gpus"])
    bases = [int(b) for b in fwd["base_branches"].get(cuda.split(".")[0], [])]
    if compat and all(g in datacenter for g in gpus) and branch in bases:
        return "forward"
    return None


def arch_first_cuda(cat: Catalog, architecture: str | None) -> str | None:
    """The first CUDA toolkit with support for a GPU architecture (catalog
    ``driver_architectures.architectures.<arch>.first_cuda``); ``None`` when the catalog lists none."""
    row = cat.extras["driver_architectures"]["architectures"].get(architecture or "")
    return str(row["first_cuda"]) if row and row.get("first_cuda") else None


def arch_last_cuda_major(cat: Catalog, architecture: str | None) -> int | None:
    """The last CUDA major that builds for a GPU architecture (catalog
    ``cuda_architecture_support.last_cuda_major``); ``None`` while current toolkits support it."""
    row = cat.software["cuda_architecture_support"]["last_cuda_major"].get(architecture or "")
    return int(row["major"]) if row is not None else None


def cuda_supports_arch(cat: Catalog, cuda: str, architecture: str | None) -> bool:
    """Whether CUDA ``cuda`` builds for ``architecture``: at least its first toolkit
    (:func:`arch_first_cuda`) and at most its last major (:func:`arch_last_cuda_major`)."""
    first, last = arch_first_cuda(cat, architecture), arch_last_cuda_major(cat, architecture)
    v = version(cuda) or ()
    return (first is None or v >= (version(first) or ())) and (last is None or (v[:1] or (0,))[0] <= last)


def wheel_drops_arch(cat: Catalog, pytorch: str, tag: str, architecture: str | None) -> bool:
    """Whether PyTorch ``pytorch``'s ``tag`` wheels carry no kernels for ``architecture``: the tag's CUDA
    does not build for it (:func:`cuda_supports_arch`) or the release's matrix drops it (catalog
    ``pytorch.releases.<r>.dropped``)."""
    row = cat.software["pytorch"]["releases"].get(pytorch, {})
    if architecture in (row.get("dropped") or {}).get(tag, []):
        return True
    return not cuda_supports_arch(cat, tag_cuda(cat, pytorch, tag), architecture)


def blueprint_gpus(bp: Blueprint, cat: Catalog) -> list[tuple[int, str, str]]:
    """``(group index, GPU key, architecture)`` of every node group with NVIDIA GPUs, in document order."""
    out = []
    for i, g in enumerate(bp.node_groups):
        hw = group_hardware(bp, g, cat)
        if hw.gpu is not None and hw.nvidia_gpus and hw.gpu.architecture:
            out.append((i, hw.gpu.key, hw.gpu.architecture))
    return out


def nccl_build_for(cat: Catalog, nccl: str, cuda: str) -> str | None:
    """The CUDA ``major.minor`` of NVIDIA's NCCL ``nccl`` build for ``cuda``'s major (catalog
    ``nccl_releases``: one build per major, ``<nccl>-1+cuda<X.Y>``); ``None`` when the release is not
    catalogued or has no build for that major."""
    row = cat.software["nccl_releases"]["releases"].get(nccl.split("-")[0])
    if row is None:
        return None
    major = cuda.split(".")[0]
    return next((str(b) for b in row["cuda_builds"] if str(b).split(".")[0] == major), None)


@dataclass(frozen=True)
class SoftwareStack:
    """The resolved software stack of a blueprint (one for the cluster).

    Versions are strings as the vendors write them. ``cuda``: the toolkit (``major.minor``); ``nccl``:
    the NCCL release; ``nccl_cuda``: the CUDA of NVIDIA's NCCL build for ``cuda``'s major (``None``: the
    catalog knows no build); ``nccl_package_version``: the apt/dnf version of that build
    (``2.28.9-1+cuda13.0``); ``aws_ofi_nccl`` / ``efa_installer``: the EFA stack (used on EFA groups);
    ``pytorch`` / ``pytorch_cuda`` (index tag ``cu130``) / ``pytorch_index_url`` / ``python``: the pip
    training environment; ``container_image`` and ``container_*``: the NGC PyTorch container and what it
    carries (``None`` when no catalogued release runs on the driver, or the catalog has not read the field); ``stated``: the ``software`` fields
    the blueprint wrote.
    """

    cuda: str
    nccl: str
    nccl_cuda: str | None
    nccl_package_version: str | None
    aws_ofi_nccl: str
    efa_installer: str
    pytorch: str
    pytorch_cuda: str
    pytorch_index_url: str
    python: str | None
    container_image: str | None
    container_release: str | None
    container_cuda: str | None
    container_pytorch: str | None
    container_nccl: str | None
    container_python: str | None
    stated: frozenset[str]


def _pick_row(cat: Catalog, bp: Blueprint, branch: int, archs: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = list(cat.software["defaults"])
    sw = bp.software
    if sw.cuda:
        exact = [r for r in rows if str(r["cuda"]) == cuda_minor(sw.cuda)]
        same = [r for r in rows if str(r["cuda"]).split(".")[0] == sw.cuda.split(".")[0]]
        return (exact or same or rows)[0]
    for r in rows:
        cuda = str(r["cuda"])
        native = native_branch(cat, cuda) or major_branch(cat, cuda) or 0
        if (branch >= native and all(cuda_supports_arch(cat, cuda, a) for a in archs)
                and not any(wheel_drops_arch(cat, str(r["pytorch"]), str(r["pytorch_cuda"]), a) for a in archs)):
            return r
    return rows[-1]


def tag_cuda(cat: Catalog, pytorch: str, tag: str) -> str:
    """The CUDA of a PyTorch wheel index tag (catalog ``pytorch.releases``; else read from the tag:
    ``cu130`` -> ``13.0``)."""
    row = cat.software["pytorch"]["releases"].get(pytorch, {})
    if tag in row.get("cuda_tags", {}):
        return str(row["cuda_tags"][tag])
    digits = tag[2:]
    return f"{digits[:-1]}.{digits[-1]}"


_CACHE: OrderedDict[tuple[int, int], tuple[Blueprint, Catalog, SoftwareStack]] = OrderedDict()


def software_stack(bp: Blueprint, cat: Catalog | None = None) -> SoftwareStack:
    """The :class:`SoftwareStack` of ``bp``: stated ``software`` fields as written, the rest from the
    catalog's default row for the declared hardware (see the module docstring). Never raises for a
    blueprint the models accepted. Cached per blueprint and catalog object (the node settings of every
    group and every rule ask for it)."""
    cat = cat or catalog()
    key = (id(bp), id(cat))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is bp and hit[1] is cat:
        return hit[2]
    out = _software_stack(bp, cat)
    _CACHE[key] = (bp, cat, out)
    while len(_CACHE) > 32:
        _CACHE.popitem(last=False)
    return out


def _software_stack(bp: Blueprint, cat: Catalog) -> SoftwareStack:
    sw = bp.software
    stated = frozenset(k for k in ("cuda", "nccl", "aws_ofi_nccl", "efa_installer", "pytorch", "pytorch_cuda",
                                   "container_image") if getattr(sw, k) is not None)
    gpus = blueprint_gpus(bp, cat)
    branch = (version(sw.driver_branch) or (0,))[0]
    row = _pick_row(cat, bp, branch, [a for _, _, a in gpus])
    cuda = sw.cuda or str(row["cuda"])
    if not sw.cuda and (native_branch(cat, cuda) or 0) > branch:
        # no default row runs natively on this (older) branch: the newest toolkit of the row's major that does
        archs = [a for _, _, a in gpus]
        older = [c for c, b in cat.extras["cuda_driver_minimums"]["toolkit"].items()
                 if int(b) <= branch and c.split(".")[0] == cuda.split(".")[0]
                 and all(cuda_supports_arch(cat, c, a) for a in archs)]
        if older:
            cuda = max(older, key=lambda c: version(c) or ())
    nccl = sw.nccl or str(row["nccl"])
    nccl_cuda = nccl_build_for(cat, nccl, cuda)
    pytorch = sw.pytorch or str(row["pytorch"])
    tags = cat.software["pytorch"]["releases"].get(pytorch, {}).get("cuda_tags", {})
    if sw.pytorch_cuda:
        tag = sw.pytorch_cuda
    elif sw.cuda or sw.pytorch:
        same = [t for t, c in tags.items() if str(c).split(".")[0] == cuda.split(".")[0]
                and (version(str(c)) or ()) <= (version(cuda) or ())]
        tag = max(same, key=lambda t: version(str(tags[t])) or ()) if same else str(row["pytorch_cuda"])
    else:
        tag = str(row["pytorch_cuda"])
    py = cat.software["pytorch"]["releases"].get(pytorch, {}).get("python") or []
    ngc = cat.software["ngc_pytorch"]
    release = None
    if sw.container_image:
        release = sw.container_image.rsplit(":", 1)[1].split("-")[0]
    else:
        keys = [g for _, g, _ in gpus]
        for rel, c in sorted(ngc["releases"].items(), reverse=True):
            if driver_runs_cuda(cat, branch, str(c["cuda"]), compat=sw.cuda_compat, gpus=tuple(keys)):
                release = rel
                break
    c = ngc["releases"].get(release or "", {})
    image = sw.container_image or (ngc["image"].format(release=release) if release else None)
    return SoftwareStack(
        cuda=cuda, nccl=nccl, nccl_cuda=nccl_cuda,
        nccl_package_version=f"{nccl.split('-')[0]}-1+cuda{nccl_cuda}" if nccl_cuda else None,
        aws_ofi_nccl=sw.aws_ofi_nccl or str(row["aws_ofi_nccl"]),
        efa_installer=sw.efa_installer or str(cat.software["efa_installer"]["default"]),
        pytorch=pytorch, pytorch_cuda=tag,
        pytorch_index_url=cat.software["pytorch"]["index_url"].format(tag=tag),
        python=(str(cat.software["pytorch"]["python_default"]) if str(cat.software["pytorch"]["python_default"]) in py
                else (str(py[-1]) if py else None)),
        container_image=image, container_release=release,
        container_cuda=str(c["cuda"]) if c else None,
        container_pytorch=str(c["pytorch"]) if c.get("pytorch") else None,
        container_nccl=str(c["nccl"]) if c.get("nccl") else None,
        container_python=str(c["python"]) if c.get("python") else None,
        stated=stated,
    )
