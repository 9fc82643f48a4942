"""The cluster a raw output is judged against: :class:`JudgeContext` and its construction.

A :class:`JudgeContext` describes the hardware a raw output came from (nodes, GPUs, fabric, NICs,
NVLink), the blueprint's thresholds of every suite, and what each suite expects of this node group.
Build it from a blueprint (:func:`context_from_blueprint`) and/or from command-line flags
(:func:`context_from_flags`), then :func:`apply_overrides`. Precedence when a judge reads a value:
**flags (``explicit``) > what the log says > the blueprint**.

This module knows no suite. What a suite expects (an NCCL busbw, a storage target's MB/s, an MFU
floor) is that suite's formula, in its own module of :mod:`validate.suites`, with its sources:

* thresholds: the blueprint's ``validation.<suite>.thresholds`` models, whose defaults are the only
  ones (:attr:`JudgeContext.thresholds`, from :func:`suite_thresholds`; a suite reads its own with
  :meth:`JudgeContext.thresholds_for`);
* expectations a suite derives from the node group or from flags (the fio suite's storage
  targets): every registered suite is an :class:`ExpectationSource` (registered here by
  :func:`validate.suites.register`); :func:`context_from_blueprint` and :func:`apply_overrides` ask
  each for its expectations and hold them by suite name (:attr:`JudgeContext.expectations`, read
  with :meth:`JudgeContext.expectations_for`);
* expectations computed at judge time from the context and the log (an NCCL run's ranks and nodes)
  are the suite's functions of the context.

Units: GB/s = 1e9 bytes/s, Gbit/s = 1e9 bits/s, MB/s = 1e6 bytes/s, TiB = 2**40 bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from blueprints.catalog import GpuSpec, UnknownHardwareError, catalog
from blueprints.errors import UsageError
from blueprints.models import (
    FABRICS,
    NETWORK_MODELS,
    Blueprint,
    EfaNetwork,
    EthernetNetwork,
    InfinibandNetwork,
    Validation,
    fabric_tag,
)
from blueprints.resolved import ResolvedGroup, resolve
from blueprints.slurm import host_memory_gib

__all__ = [
    "FABRICS",
    "FABRIC_NAMES",
    "IB_VERBS_FABRICS",
    "RDMA_FABRICS",
    "ContextError",
    "ExpectationSource",
    "JudgeContext",
    "SuiteExpectations",
    "apply_overrides",
    "context_from_blueprint",
    "context_from_flags",
    "expectation_sources",
    "register_source",
    "suite_thresholds",
    "unregister_source",
]

RDMA_FABRICS: tuple[str, ...] = tuple(fabric_tag(m) for m in NETWORK_MODELS if m.rdma)
"""Fabrics on which NCCL should use RDMA (a net plugin or IB verbs), never TCP sockets (the network
models' ``rdma``: ``efa``, ``infiniband``, ``roce``)."""

IB_VERBS_FABRICS: tuple[str, ...] = tuple(fabric_tag(m) for m in NETWORK_MODELS if m.ib_verbs)
"""Fabrics NCCL reaches through IB verbs (the network models' ``ib_verbs``: ``infiniband``, ``roce``)."""

FABRIC_NAMES: dict[str, str] = {fabric_tag(m): m.display_name for m in NETWORK_MODELS}
"""Fabric tag -> its name in prose (``infiniband`` -> ``InfiniBand``)."""


class ContextError(UsageError):
    """A flag or blueprint value the judge cannot use (unknown GPU, instance type, node group, target)."""


# ---------------------------------------------------------------------------------------------
# what the context asks the suites
# ---------------------------------------------------------------------------------------------


class SuiteExpectations(Protocol):
    """What one suite expects of a node group, held in :attr:`JudgeContext.expectations` under the
    suite's name (a frozen dataclass of the suite's module, e.g. the fio suite's storage targets)."""

    def to_json(self) -> dict[str, Any]:
        """Its keys in the context's JSON (:meth:`JudgeContext.to_json`), JSON-able."""
        ...


class ExpectationSource(Protocol):
    """A suite as the context sees it (every :class:`validate.suites.base.Suite` is one): its
    ``name``, the override names it takes (:attr:`override_names`: flag name -> the name recorded in
    :attr:`JudgeContext.explicit`, e.g. ``target`` -> ``fio_target``), and two questions."""

    @property
    def name(self) -> str:
        """The suite's name: the key of its expectations in :attr:`JudgeContext.expectations`."""
        ...

    @property
    def override_names(self) -> Mapping[str, str]:
        """Override (flag) names this suite takes beyond the context's fields, -> their recorded name."""
        ...

    def context_expectations(self, bp: Blueprint | None, group: ResolvedGroup | None) -> SuiteExpectations | None:
        """What the suite expects of node ``group`` of ``bp`` (both ``None``: a context without a
        blueprint); ``None``: nothing the context need hold."""
        ...

    def override_expectations(self, current: SuiteExpectations | None, ctx: JudgeContext,
                              overrides: Mapping[str, Any]) -> SuiteExpectations | None:
        """``current`` after ``overrides`` (recorded names -> values, the context's own fields among them)
        were applied to ``ctx`` (already updated). Raises :class:`ContextError` for an unusable value."""
        ...


_SOURCES: dict[str, ExpectationSource] = {}


def register_source(source: ExpectationSource) -> None:
    """Ask ``source`` for its expectations in every context built from now on (``validate.suites.register``
    calls this for every suite it registers). Replaces a source of the same name."""
    _SOURCES[source.name] = source


def unregister_source(name: str) -> None:
    """Stop asking the suite called ``name`` (``validate.suites.unregister``)."""
    _SOURCES.pop(name, None)


def expectation_sources() -> tuple[ExpectationSource, ...]:
    """The registered sources, in registration order (the suites' run order)."""
    return tuple(_SOURCES.values())


def _bare_expectations() -> dict[str, SuiteExpectations]:
    """Each registered suite's expectations of a context without a blueprint."""
    out: dict[str, SuiteExpectations] = {}
    for src in _SOURCES.values():
        exp = src.context_expectations(None, None)
        if exp is not None:
            out[src.name] = exp
    return out


# ---------------------------------------------------------------------------------------------
# the context
# ---------------------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)
E = TypeVar("E")


def suite_thresholds(v: Validation) -> dict[str, BaseModel]:
    """``{suite name: thresholds model}`` of a blueprint's ``validation`` section: every member of the
    :class:`~blueprints.models.Validation` model that has a ``thresholds`` field (``nccl``, ``fio``,
    ``amp``, and any suite added there), in the model's field order."""
    out: dict[str, BaseModel] = {}
    for name in type(v).model_fields:
        th = getattr(getattr(v, name), "thresholds", None)
        if isinstance(th, BaseModel):
            out[name] = th
    return out


def _suite_entry(entries: Mapping[str, object], suite: str, cls: type[E], what: str) -> E:
    """``entries[suite]`` when it is a ``cls``, ``cls()`` when the suite has no entry; raises ``TypeError``
    (``what`` names the mapping) when the entry is of another type."""
    got = entries.get(suite)
    if got is None:
        return cls()
    if not isinstance(got, cls):
        raise TypeError(f"{what} of suite {suite!r} are {type(got).__name__}, not {cls.__name__}")
    return got


@dataclass(frozen=True)
class JudgeContext:
    """The cluster a raw output is judged against. Every field may be ``None`` (unknown).

    Fields: ``nodes`` and ``gpus_per_node``; ``gpu_model`` (catalog key); ``fabric`` (``efa``,
    ``infiniband``, ``roce``, ``ethernet``); ``instance_type`` (AWS); ``nic_gbps`` (line rate of one
    fabric NIC, Gbit/s) and ``nics_per_node``; ``memory_gib``: installed memory of one host in GiB (2^30 bytes; a
    buffered fio read of a smaller file measured the page cache); ``nvlink_gbytes_s`` (NVLink per GPU per direction,
    GB/s, ``None`` for PCIe parts); ``expectations``: suite name -> what that suite expects of the
    node group (:class:`SuiteExpectations`, e.g. the fio suite's storage targets; asked of every
    registered :class:`ExpectationSource`), which a suite reads with :meth:`expectations_for`;
    ``thresholds``: suite name -> the blueprint's ``validation.<suite>.thresholds`` model (see
    :func:`suite_thresholds`; a bare context holds the models' defaults), which a suite reads with
    :meth:`thresholds_for`;
    ``blueprint``/``group`` names for the report;
    ``explicit``: the fields given as flags/overrides (they win over what a log says);
    ``provenance``: ``(field, where it came from)`` pairs.
    """

    nodes: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    fabric: str | None = None
    instance_type: str | None = None
    nic_gbps: float | None = None
    nics_per_node: int | None = None
    memory_gib: float | None = None
    nvlink_gbytes_s: float | None = None
    expectations: dict[str, SuiteExpectations] = field(default_factory=_bare_expectations)
    thresholds: dict[str, BaseModel] = field(default_factory=lambda: suite_thresholds(Validation()))
    blueprint: str | None = None
    group: str | None = None
    explicit: frozenset[str] = frozenset()
    provenance: tuple[tuple[str, str], ...] = ()

    @property
    def gpu(self) -> GpuSpec | None:
        """The catalog :class:`GpuSpec` of ``gpu_model`` (``None`` when unknown)."""
        if not self.gpu_model:
            return None
        try:
            return catalog().gpu(self.gpu_model)
        except UnknownHardwareError:
            return None

    @property
    def node_network_gbps(self) -> float | None:
        """Fabric line rate per node in Gbit/s (NICs x rate), ``None`` when the rate is unknown."""
        if self.nic_gbps is None:
            return None
        nics = self.nics_per_node if self.nics_per_node is not None else (self.gpus_per_node or 1)
        return self.nic_gbps * nics

    def thresholds_for(self, suite: str, model: type[M]) -> M:
        """Suite ``suite``'s thresholds: the ``model`` object in :attr:`thresholds`, else ``model()`` (its
        defaults). Raises ``TypeError`` when the context holds another type for ``suite``."""
        return _suite_entry(self.thresholds, suite, model, "thresholds")

    def expectations_for(self, suite: str, kind: type[E]) -> E:
        """Suite ``suite``'s expectations: the ``kind`` object in :attr:`expectations`, else ``kind()``
        (nothing expected). Raises ``TypeError`` when the context holds another type for ``suite``."""
        return _suite_entry(self.expectations, suite, kind, "expectations")

    def with_expectations(self, suite: str, expectations: SuiteExpectations) -> JudgeContext:
        """This context with ``expectations`` as suite ``suite``'s."""
        return dataclasses.replace(self, expectations={**self.expectations, suite: expectations})

    def is_explicit(self, name: str) -> bool:
        """True when ``name`` was given as a flag/override (it wins over the log)."""
        return name in self.explicit

    def describe(self) -> str:
        """One line for humans: ``2 node(s) x 8 h100-sxm, efa 32 x 100 Gbit/s per node (p5.48xlarge)``."""
        parts = []
        if self.nodes or self.gpus_per_node or self.gpu_model:
            parts.append(f"{self.nodes or '?'} node(s) x {self.gpus_per_node or '?'} {self.gpu_model or 'GPU'}")
        if self.fabric:
            net = self.fabric
            if self.nic_gbps:
                net += f" {self.nics_per_node or '?'} x {self.nic_gbps:g} Gbit/s per node"
            parts.append(net)
        text = ", ".join(parts)
        if self.instance_type:
            text += f" ({self.instance_type})"
        if self.blueprint:
            text += f" [blueprint {self.blueprint}{'/' + self.group if self.group else ''}]"
        return text.strip() or "no context (pass --blueprint or hardware flags)"

    def to_json(self) -> dict[str, Any]:
        """The context as a JSON-able dict (for report headers)."""
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "thresholds":  # one key per suite: its thresholds model as a dict
                d.update({name: th.model_dump() for name, th in self.thresholds.items()})
            elif f.name == "expectations":  # each suite's own keys
                for exp in self.expectations.values():
                    d.update(exp.to_json())
            else:
                d[f.name] = getattr(self, f.name)
        d["explicit"] = sorted(self.explicit)
        d["provenance"] = [list(p) for p in self.provenance]
        return d


# ---------------------------------------------------------------------------------------------
# building contexts
# ---------------------------------------------------------------------------------------------


def _pick_group(bp: Blueprint, group: str | None) -> ResolvedGroup:
    cluster = resolve(bp)
    if group:
        try:
            return cluster.group(group)
        except KeyError:
            names = ", ".join(g.name for g in bp.node_groups)
            raise ContextError(f"blueprint {bp.name} has no node group {group!r}; groups: {names}") from None
    return cluster.primary_group


def context_from_blueprint(bp: Blueprint, group: str | None = None, **overrides: Any) -> JudgeContext:
    """The :class:`JudgeContext` of node group ``group`` of ``bp`` (default: the first compute
    group with GPUs): its hardware from the resolved cluster and the catalog, the blueprint's
    thresholds, and what every registered suite expects of the group
    (:meth:`ExpectationSource.context_expectations`); then ``overrides`` applied as explicit values
    (see :func:`apply_overrides`).

    Raises :class:`ContextError` for an unknown group or override.
    """
    r = _pick_group(bp, group)
    g, ns = r.group, r.settings
    cat = catalog()
    prov: list[tuple[str, str]] = []
    where = f"blueprint {bp.name}, node group {g.name}"
    nic_gbps: float | None = None
    nics: int | None = None
    net = bp.network
    if ns.instance_type:  # an EC2 instance type: the catalog knows its NICs
        it = r.hardware.instance
        if it is not None:
            nic_gbps, nics = it.per_nic_gbps, it.network_cards
            if isinstance(net, EfaNetwork) and isinstance(net.efa.interfaces, int):
                nics = min(net.efa.interfaces, it.network_cards)
            prov.append(("nic_gbps", f"instance type {it.name}: {it.network_gbps:g} Gbit/s over {it.network_cards} network cards"))
    elif g.hardware and g.hardware.nics:
        speeds = [n.speed_gbps for n in g.hardware.nics]
        nic_gbps, nics = sum(speeds) / len(speeds), len(speeds)
        prov.append(("nic_gbps", f"{where}: hardware.nics"))
    elif isinstance(net, InfinibandNetwork) and net.infiniband.generation:
        nic_gbps = cat.infiniband_port_gbps(net.infiniband.generation)
        prov.append(("nic_gbps", f"InfiniBand {net.infiniband.generation} port rate (NIC count not declared)"))
    elif isinstance(net, EthernetNetwork) and net.speed_gbps:
        nic_gbps, nics = net.speed_gbps, 1
        prov.append(("nic_gbps", f"{where}: network.speed_gbps"))
    spec = None
    if ns.gpu_model:
        try:
            spec = cat.gpu(ns.gpu_model)
        except UnknownHardwareError:
            spec = None
    expectations: dict[str, SuiteExpectations] = {}
    for src in _SOURCES.values():
        exp = src.context_expectations(bp, r)
        if exp is not None:
            expectations[src.name] = exp
    memory = host_memory_gib(bp, g)
    if memory is not None:
        prov.append(("memory_gib", f"{where}: hardware.memory_gib, else its system or instance type (catalog)"))
    v = bp.validation
    ctx = JudgeContext(
        nodes=g.size or None,
        gpus_per_node=ns.gpu_count or None,
        gpu_model=spec.key if spec else ns.gpu_model,
        fabric=net.fabric,
        instance_type=ns.instance_type,
        nic_gbps=nic_gbps,
        nics_per_node=nics,
        memory_gib=memory,
        nvlink_gbytes_s=spec.nvlink_unidir_gbytes_s if spec and spec.has_nvlink else None,
        expectations=expectations,
        thresholds=suite_thresholds(v),
        blueprint=bp.name,
        group=g.name,
        provenance=tuple([("nodes", where), ("gpu_model", where), ("fabric", f"blueprint {bp.name}")] + prov),
    )
    return apply_overrides(ctx, **overrides) if overrides else ctx


_FIELDS = {f.name for f in dataclasses.fields(JudgeContext)} - {"explicit", "provenance"}
_ALIASES = {"gpu": "gpu_model", "nvlink": "nvlink_gbytes_s"}


def apply_overrides(ctx: JudgeContext, **overrides: Any) -> JudgeContext:
    """``ctx`` with ``overrides`` set and marked explicit (they win over what a log says).

    ``instance_type`` also fills gpu_model, gpus_per_node, nic_gbps, nics_per_node, fabric and
    nvlink unless those are given too; ``gpu`` (alias of ``gpu_model``: a key, short name or
    nvidia-smi name) is resolved to its catalog key and fills ``nvlink_gbytes_s``. Names beyond the
    context's fields are the registered suites' (:attr:`ExpectationSource.override_names`, e.g. the
    fio suite's ``target``); every suite is then asked for its expectations of the updated context
    (:meth:`ExpectationSource.override_expectations`: the fio suite adds an instance type's
    instance store). ``None`` values are ignored. Raises :class:`ContextError` for an unknown name,
    GPU, instance type or fabric, or a value a suite cannot use.
    """
    sources = tuple(_SOURCES.values())
    names = dict(_ALIASES)
    for src in sources:
        names.update(src.override_names)
    ov = {names.get(k, k): v for k, v in overrides.items() if v is not None}
    suite_names = {n for src in sources for n in src.override_names.values()}
    unknown = set(ov) - _FIELDS - suite_names
    if unknown:
        raise ContextError(f"unknown judge context field(s): {', '.join(sorted(unknown))}")
    cat = catalog()
    changes: dict[str, Any] = {k: v for k, v in ov.items() if k in _FIELDS}
    prov = list(ctx.provenance)
    if "fabric" in ov and ov["fabric"] not in FABRICS:
        raise ContextError(f"unknown fabric {ov['fabric']!r}; known: {', '.join(FABRICS)}")
    if "instance_type" in ov:
        try:
            it = cat.instance_type(str(ov["instance_type"]))
        except UnknownHardwareError as e:
            raise ContextError(str(e)) from None
        derived: dict[str, Any] = {"nic_gbps": it.per_nic_gbps, "nics_per_node": it.network_cards,
                                   "fabric": "efa" if it.efa_supported else "ethernet"}
        if it.memory_gib:
            derived["memory_gib"] = it.memory_gib
        if it.gpu_count and it.gpu_key not in ("trainium", "trainium2"):
            derived.update(gpus_per_node=it.gpu_count, gpu_model=cat.resolve_gpu_key(it.gpu_key) or it.gpu_key)
        for k, v in derived.items():
            if k not in ov:
                changes[k] = v
                prov.append((k, f"instance type {it.name} (catalog)"))
    if "gpu_model" in changes:
        key = cat.resolve_gpu_key(str(changes["gpu_model"]))
        if key is None:
            raise ContextError(f"unknown GPU model {changes['gpu_model']!r}; known: {', '.join(sorted(cat.gpu_keys))}")
        changes["gpu_model"] = key
        if "nvlink_gbytes_s" not in ov:
            spec = cat.gpu(key)
            changes["nvlink_gbytes_s"] = spec.nvlink_unidir_gbytes_s if spec.has_nvlink else None
    for k in ("nodes", "gpus_per_node", "nics_per_node"):
        if k in ov and (not isinstance(ov[k], int) or ov[k] < 1):
            raise ContextError(f"{k.replace('_', '-')} must be a positive integer, got {ov[k]!r}")
    if "nic_gbps" in ov and (not isinstance(ov["nic_gbps"], (int, float)) or ov["nic_gbps"] <= 0):
        raise ContextError(f"nic-gbps must be a positive number (Gbit/s), got {ov['nic_gbps']!r}")
    if "memory_gib" in ov and (not isinstance(ov["memory_gib"], (int, float)) or ov["memory_gib"] <= 0):
        raise ContextError(f"memory-gib must be a positive number (GiB per host), got {ov['memory_gib']!r}")
    for k in ov:
        prov.append((k, "flag"))
    new = dataclasses.replace(ctx, **changes, explicit=ctx.explicit | frozenset(ov), provenance=tuple(prov))
    expectations = dict(new.expectations)
    for src in sources:
        exp = src.override_expectations(expectations.get(src.name), new, ov)
        if exp is not None:
            expectations[src.name] = exp
    return dataclasses.replace(new, expectations=expectations)


def context_from_flags(
    blueprint: Blueprint | None = None,
    group: str | None = None,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    gpu: str | None = None,
    instance_type: str | None = None,
    fabric: str | None = None,
    nic_gbps: float | None = None,
    nics_per_node: int | None = None,
    memory_gib: float | None = None,
    **suite_flags: Any,
) -> JudgeContext:
    """The context of the ``judge`` command: the blueprint's (if any), then each flag that is not
    ``None`` applied as an explicit override (:func:`apply_overrides`); ``suite_flags`` are the
    registered suites' own (the fio suite's ``target``: the storage mount its jobs tested). Raises
    :class:`ContextError` (a usage error, exit 2) for an unknown GPU, instance type, fabric, node
    group or flag, or a flag value a suite cannot use."""
    base = context_from_blueprint(blueprint, group) if blueprint is not None else JudgeContext()
    if blueprint is None and group:
        raise ContextError("--group needs --blueprint")
    return apply_overrides(base, nodes=nodes, gpus_per_node=gpus_per_node, gpu_model=gpu, instance_type=instance_type,
                           fabric=fabric, nic_gbps=nic_gbps, nics_per_node=nics_per_node, memory_gib=memory_gib,
                           **suite_flags)
