"""The software stack a node group declares, as the nccl and amp judges compare it with what a run used.

The blueprint's stack is resolved once (:func:`blueprints.software_stack.software_stack`: ``software.nccl``,
``software.cuda``, ``software.pytorch`` / ``pytorch_cuda``, or the catalog's defaults for the hardware) and installed by
the ``nccl_stack`` role (:attr:`blueprints.settings.NodeSettings.nccl_stack`). A run reports what it actually used in
its own output (nccl-tests' ``nccl-library=`` code or NCCL's ``NCCL version`` line; the AMP payload's
``torch.__version__``, ``torch.version.cuda``, ``torch.cuda.nccl.version()``); :func:`compare_versions` names every
difference as a finding (verdict ``warn``), never a silent pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from blueprints.models import Blueprint
from blueprints.resolved import ResolvedGroup, resolve
from blueprints.software_stack import tag_cuda

from .results import JudgeResult, Verdict

if TYPE_CHECKING:
    from .suites.base import GroupPlan

__all__ = ["StackExpectations", "compare_versions", "declared_python", "declared_stack"]


@dataclass(frozen=True)
class StackExpectations:
    """The versions a node group declares (``None``: not declared / not known), held in the judge context under the
    nccl and amp suites' names. ``nccl``: NCCL ``X.Y.Z`` the nodes install; ``nccl_cuda``: the CUDA of that NCCL build
    (``A.B``); ``torch``: the PyTorch release of the training environment; ``torch_cuda``: the CUDA its wheel is
    built for (``A.B``, from the wheel index tag ``cuXY``); ``nccl_tests_dir``: where the nodes' nccl-tests binaries
    are; ``python``: the training environment's interpreter (the venv's ``bin/python``)."""

    nccl: str | None = None
    nccl_cuda: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    nccl_tests_dir: str | None = None
    python: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"declared_stack": {...}}`` (the keys above)."""
        return {"declared_stack": dataclasses.asdict(self)}


def declared_stack(bp: Blueprint | None, group: ResolvedGroup | None) -> StackExpectations:
    """The stack node ``group`` of ``bp`` declares (nothing without a blueprint)."""
    if bp is None or group is None:
        return StackExpectations()
    cluster = resolve(bp)
    st = cluster.software
    ns = group.settings.nccl_stack
    return StackExpectations(
        nccl=st.nccl.split("-")[0], nccl_cuda=st.nccl_cuda, torch=st.pytorch, torch_cuda=tag_cuda(cluster.catalog, st.pytorch, st.pytorch_cuda),
        nccl_tests_dir=ns.tests_dir if ns else None, python=f"{ns.venv}/bin/python" if ns and ns.torch else None)


def declared_python(gp: GroupPlan) -> str | None:
    """The interpreter of the PyTorch venv the nccl_stack role makes on the nodes of ``gp`` (``None`` for a plan of
    this machine, and where the nodes get no venv)."""
    ns = gp.settings.nccl_stack
    return f"{ns.venv}/bin/python" if ns is not None and ns.torch and not gp.local else None


def _base(v: str) -> str:
    """``2.12.0+cu130`` -> ``2.12.0``; ``13.0.1`` stays (callers compare what they mean)."""
    return v.split("+", 1)[0]


def _minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def compare_versions(r: JudgeResult, declared: StackExpectations, ran: dict[str, str | None], where: str) -> None:
    """Record ``ran`` (``nccl``, ``nccl_cuda``, ``torch``, ``torch_cuda``, ``torch_nccl``: what the run used) in
    ``r.metrics["software"]`` and name every difference from ``declared`` (``warn``, with the blueprint field to look
    at); ``where`` says which output the versions come from. A version the output does not give is noted as unknown.
    The NCCL a PyTorch wheel carries is its own (pip's nvidia-nccl package, not the node's libnccl2): only noted."""
    got = {k: v for k, v in ran.items() if v}
    r.metrics["software"] = got
    checks = (("nccl", "NCCL", declared.nccl, _base, "software.nccl"),
              ("nccl_cuda", "NCCL's CUDA build", declared.nccl_cuda, _minor, "software.cuda"),
              ("torch", "PyTorch", declared.torch, _base, "software.pytorch"),
              ("torch_cuda", "PyTorch's CUDA", declared.torch_cuda, _minor, "software.pytorch_cuda"))
    for key, what, want, norm, field in checks:
        if key not in ran:
            continue
        have = ran.get(key)
        if want is None:
            continue
        if not have:
            r.note(f"{what} version unknown: {where} does not say which one ran (declared {want})")
        elif norm(have) != norm(want):
            r.degrade(Verdict.WARN, f"{what} {have} ran, but the blueprint's stack is {want} ({field}): the run did "
                                    "not use the declared software; rerun on nodes converged with this blueprint "
                                    "(clusterforge up / the nccl_stack role) or point the run at them")
        else:
            r.note(f"{what} {have} as declared")
    tn = ran.get("torch_nccl")
    if tn and declared.nccl and _base(tn) != declared.nccl:
        r.note(f"PyTorch's own NCCL is {tn} (the wheel's nvidia-nccl package), the nodes' libnccl2 is {declared.nccl}")
