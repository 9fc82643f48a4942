"""The NCCL suite: collective benchmarks (nccl-tests, or the built-in torch.distributed benchmark).

Plan: one test per collective of ``validation.nccl.collectives`` (``nccl-[group-]<collective>``;
``alltoall`` added for a mixture-of-experts workload) over the group's nodes x GPUs (a local run:
this machine, gloo processes without a GPU, the largest message capped at :data:`CPU_MAX_BYTES`).
Payloads: ``collectives.py`` (torch.distributed, prints the nccl-tests table) and ``nccl_tests.py``
(finds and runs the nccl-tests binaries); the raw output is the table text (``raw/<id>.txt``).

Judge, in order: duplicated rank 0 -> invalid; the log's GPU (device lines, JSON ``devices``) is not
the declared one -> invalid ("not this hardware"); no table (crash lines -> fail quoting the error,
else invalid); one rank -> invalid; ``#wrong`` > 0 or "Out of bounds ... FAILED" -> fail; error
lines -> fail. Every crash or error is diagnosed from the whole log through the signature table
(:mod:`validate.signatures`: NCCL WARN and INFO lines, CUDA errors, not only the last line; a
single-node run never gets a network cause). The NCCL INFO channel lines (``NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,NET``) say which transport and NIC every channel used: TCP sockets on an
RDMA fabric -> fail; fewer NICs than declared, GPUDirect RDMA missing on a node, GPU peer-to-peer
through host memory -> warn. Bandwidth: above the physical upper bound of the declared hardware
(:data:`BUSBW_BOUND_MARGIN`) -> invalid; a multi-node run without a declared
NIC rate, or with an unknown node count -> warn, no bandwidth verdict; peak busbw / expected
(:func:`expected_busbw`, ring or tree as NCCL would pick) below
``validation.nccl.thresholds.fail_ratio`` -> fail (at socket speed on an RDMA fabric: the fallback
is named), below ``warn_ratio`` -> warn, with the causes the NCCL INFO lines single out, or every
cause the numbers allow when the log has none; the size curve: a cliff (busbw collapsing at larger
sizes and not recovering) -> warn (fail when it halves) naming the size where it starts, a
recovered mid-size cliff -> warn, an isolated one-size dip -> note. CPU (gloo) runs have no GPU or
fabric expectation: they pass with a note unless the data is wrong or the run crashed.

Metrics (:class:`NcclMetrics`): ``collective``, ``ranks``, ``nodes``, ``peak_busbw_gbps`` and
``avg_busbw_gbps`` (GB/s = 1e9 bytes/s), ``size_at_peak_bytes``, ``wrong`` (``None``: unchecked),
``per_gpu_network_gbytes_s`` ...; expected (:class:`NcclExpected`): ``busbw_gbps``, ``ratio`` ...;
series (:class:`NcclSeries`) ``size``, ``busbw_oop``, ``busbw_ip`` (the report's plot, as
:func:`busbw_curves`).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, cast

from blueprints.catalog import UnknownHardwareError, catalog
from blueprints.models import Blueprint, NcclThresholds
from blueprints.resolved import ResolvedGroup

from ..expectations import (
    FABRIC_NAMES,
    IB_VERBS_FABRICS,
    RDMA_FABRICS,
    JudgeContext,
)
from ..parsers.detect import RawText
from ..parsers.nccl import (
    FATAL_NCCL_WARN,
    NcclRun,
    NetUsage,
    iter_curve,
    iter_values,
    net_usage,
    parse_nccl,
    parse_nccl_lines,
)
from ..plan import PlannedTest, TestParams
from ..results import Curve, Expected, JudgeResult, Metrics, Series, Verdict, fmt_bytes, pct
from ..signatures import by_id, diagnose, doc_ref
from ..stack import StackExpectations, compare_versions, declared_python, declared_stack
from .base import (
    GroupPlan,
    HtmlSection,
    RanksSuite,
    gpu_mismatch,
    mig_profile,
    nothing,
    part_label,
    png,
    resolve_gpu,
)

__all__ = [
    "BUSBW_BOUND_MARGIN",
    "CPU_MAX_BYTES",
    "BusbwExpectation",
    "NcclExpected",
    "NcclMetrics",
    "NcclParams",
    "NcclSeries",
    "NcclSuite",
    "busbw_curves",
    "expected_busbw",
    "intra_node_gbytes_s",
    "judge_nccl_run",
    "nccl_expected",
    "nccl_metrics",
    "nccl_series",
    "tree_two_node_fraction",
]

CPU_MAX_BYTES = 64 * 1024**2
"""Largest collective message on a CPU-only (gloo) run: larger sizes only measure memory copies
and take minutes, so the sweep is capped here (with a note)."""

MAX_PLOTS = 60
"""At most this many busbw plots in one HTML page (the rest are listed without a plot)."""


@dataclass(frozen=True)
class NcclParams(TestParams):
    """What one collective test runs (``collectives.py`` / nccl-tests ``-b -e -f -n -w -c``).

    ``collective``: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``alltoall``, ``sendrecv``,
    ``broadcast`` or ``reduce``; ``min_bytes``/``max_bytes``: smallest and largest message, bytes;
    ``step_factor``: size multiplier between steps; ``iters``/``warmup_iters``: timed and warm-up
    iterations per size; ``check``: count wrong elements (``-c 1``).
    """

    raw_suffix: ClassVar[str] = ".txt"

    collective: str
    min_bytes: int
    max_bytes: int
    step_factor: int
    iters: int
    warmup_iters: int
    check: bool
    nccl_tests_dir: str | None = None
    """Where the nodes' nccl-tests binaries are (``NodeSettings.nccl_stack.tests_dir``: the nccl_stack role installs
    them there); ``None``: the payload's own search (``PATH``, the usual build folders)."""
    python: str | None = None
    """The declared training environment's interpreter on the nodes, for the torch benchmark
    (:func:`validate.stack.declared_python`)."""


class NcclMetrics(Metrics, total=False):
    """What an NCCL result measured (``JudgeResult.metrics`` of kind ``nccl``). Keys are set as the
    judge learns them (a run that stops early has fewer). GB/s = 1e9 bytes/s.

    ``collective`` (``all_reduce`` ..., or ``"a or b"`` when the log leaves a choice), ``tool``
    (``nccl-tests`` or the torch benchmark), ``backend`` (``nccl``/``gloo``), ``device_name`` (the GPU
    the log names), ``ranks``, ``nodes``, ``gpu_model`` (the catalog key judged against), ``rows``
    (sizes in the table), ``avg_busbw_gbps`` (nccl-tests' average bus bandwidth, GB/s), ``wrong``
    (wrong elements, ``None``: unchecked), ``out_of_bounds`` (values out of bounds, ``None``: not
    printed), ``min_size_bytes``/``max_size_bytes`` (message sizes, bytes), ``small_message_time_us``
    (time of the smallest size, microseconds), ``networks`` / ``net_provider`` (NCCL's network and
    OFI provider), ``transports`` (channels per transport, from the NCCL INFO lines), ``nics_used``
    (host -> NIC indices its inter-node channels used), ``peak_busbw_gbps`` (GB/s) at
    ``size_at_peak_bytes`` (bytes) in ``peak_placement`` (``out-of-place``/``in-place``),
    ``peak_algbw_gbps`` (GB/s), ``per_gpu_network_gbytes_s`` (what each GPU sent over the network at
    the peak, GB/s: busbw x (k-1)/(n-1)), ``cliff_start_bytes`` (the size a busbw cliff starts at).
    """

    collective: str | None
    tool: str
    backend: str
    device_name: str | None
    ranks: int | None
    nodes: int | None
    gpu_model: str | None
    rows: int
    avg_busbw_gbps: float | None
    wrong: float | None
    out_of_bounds: int | None
    min_size_bytes: int
    max_size_bytes: int
    small_message_time_us: float | None
    networks: list[str]
    net_provider: str
    transports: dict[str, int]
    nics_used: dict[str, list[int]]
    peak_busbw_gbps: float
    size_at_peak_bytes: int
    peak_placement: str
    peak_algbw_gbps: float | None
    per_gpu_network_gbytes_s: float
    cliff_start_bytes: int


class NcclExpected(Expected, total=False):
    """What an NCCL result was compared with (``JudgeResult.expected`` of kind ``nccl``; from
    :class:`BusbwExpectation`, GB/s = 1e9 bytes/s): ``busbw_gbps`` (expected peak busbw), ``basis``
    (``nvlink``, ``xgmi``, ``pcie``, ``network`` or ``threshold``), ``algorithm`` (``ring``, ``tree``,
    ``alltoall``, ``p2p``), ``intra_node_gbps`` / ``inter_node_gbps`` (the two bounds), ``upper_gbps``
    (physical upper bound at line rate) with ``upper_derivation``, ``warn_ratio`` / ``fail_ratio``
    (``validation.nccl.thresholds``), and the common ``ratio`` (peak / expected), ``derivation``,
    ``source``."""

    busbw_gbps: float
    basis: str
    algorithm: str
    intra_node_gbps: float | None
    inter_node_gbps: float | None
    upper_gbps: float | None
    upper_derivation: str
    warn_ratio: float
    fail_ratio: float


class NcclSeries(Series, total=False):
    """The size curve of an NCCL result (``JudgeResult.series`` of kind ``nccl``), one entry per table
    row: ``size`` (message size, bytes), ``busbw_oop`` / ``busbw_ip`` (out-of-place / in-place busbw,
    GB/s; ``None`` where the row has none)."""

    size: list[int]
    busbw_oop: list[float | None]
    busbw_ip: list[float | None]


def nccl_metrics(r: JudgeResult) -> NcclMetrics:
    """``r.metrics`` as the NCCL suite's keys (``r`` a result of kind ``nccl``; the same dictionary)."""
    return cast(NcclMetrics, r.metrics)


def nccl_expected(r: JudgeResult) -> NcclExpected:
    """``r.expected`` as the NCCL suite's keys (the same dictionary)."""
    return cast(NcclExpected, r.expected)


def nccl_series(r: JudgeResult) -> NcclSeries:
    """``r.series`` as the NCCL suite's size curve (the same dictionary)."""
    return cast(NcclSeries, r.series)


def busbw_curves(r: JudgeResult) -> list[Curve]:
    """The busbw (GB/s) against message size (bytes) curves of an NCCL result, out-of-place then in-place;
    sizes of 0 bytes and rows without a figure are left out, as is a placement with no point."""
    s = nccl_series(r)
    sizes = s.get("size") or []
    out = []
    for ys, name in ((s.get("busbw_oop") or [], "out-of-place"), (s.get("busbw_ip") or [], "in-place")):
        pts = tuple((float(x), float(y)) for x, y in zip(sizes, ys) if y is not None and x > 0)
        if pts:
            out.append(Curve(label=f"busbw {name}", x_unit="bytes", y_unit="GB/s", points=pts))
    return out


def _thresholds(ctx: JudgeContext) -> NcclThresholds:
    """The NCCL thresholds of ``ctx`` (``validation.nccl.thresholds``, else the model's defaults)."""
    return ctx.thresholds_for(NcclSuite.name, NcclThresholds)


class NcclSuite(RanksSuite):
    """The NCCL suite (see the module docstring)."""

    name = "nccl"
    title = "NCCL collectives"
    payloads = ("collectives.py", "nccl_tests.py")
    params_type = NcclParams
    thresholds_type = NcclThresholds
    max_result_plots = MAX_PLOTS
    markers = (
        (re.compile(r"nThread\s+\d+\s+nGpus\s+\d+"), 5),
        (re.compile(r"Using devices"), 2),
        (re.compile(r"Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+\S+\s+device"), 4),
        (re.compile(r"size\s+count\s+type"), 4),
        (re.compile(r"Avg bus bandwidth\s*:"), 5),
        (re.compile(r"Out of bounds values\s*:"), 5),
        (re.compile(r"Collective test (?:starting|concluded)"), 5),
        (re.compile(r"nccl-tests version"), 5),
        (re.compile(r"Test (?:CUDA |NCCL )?failure \S+\.cu:\d+"), 5),
        (FATAL_NCCL_WARN, 4),
        (re.compile(r"(?m)^(?:\S*\s)?\s*\d+\s+\d+\s+(?:float|double|half|bfloat16|int8|uint8|int32|uint32|int64|uint64)"
                    r"\s+(?:\w+\s+)?(?:-?\d+(?:\[\d+\])?\s+)?[\d.eE+-]+\s+[\d.eE+-]+\s+[\d.eE+-]+\s+(?:\d\S*|N/A)"), 4),
        (re.compile(r"\b(?:all_reduce|all_gather|alltoall|reduce_scatter|sendrecv|broadcast)_perf\b"), 2),
    )
    """nccl-tests header, rank, table and footer lines (the torch benchmark prints the same table), and the NCCL WARN
    messages NCCL follows with an error return (:data:`~validate.parsers.nccl.FATAL_NCCL_WARN`)."""
    name_hints = ("nccl", "_perf", "collective")

    # -- recognising its outputs ------------------------------------------------------------------

    def recognises(self, window: str) -> bool:
        """nccl-tests ``-J`` JSON: a ``"results"`` key beside ``"nccl_version"``, ``"config"`` or ``"out_of_bounds"``."""
        return bool(re.search(r'"results"\s*:', window)
                    and re.search(r'"(?:nccl_version|config|out_of_bounds)"\s*:', window))

    # -- planning -------------------------------------------------------------------------------

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """One test per collective over ``gp.nodes`` x ``gp.ranks``; run note when ``alltoall`` is added."""
        v = gp.bp.validation.nccl
        notes: list[str] = []
        colls = list(v.collectives)
        if gp.bp.workload and gp.bp.workload.architecture == "moe" and "alltoall" not in colls:
            colls.append("alltoall")
            notes.append("workload is mixture-of-experts: alltoall added to the collectives")
        max_bytes = v.max_bytes
        cnotes: list[str] = []
        if gp.device == "cpu" and max_bytes > CPU_MAX_BYTES:
            max_bytes = CPU_MAX_BYTES
            cnotes.append(f"CPU-only run: largest message capped at {CPU_MAX_BYTES // 2**20} MiB "
                          f"(blueprint asks {v.max_bytes} bytes)")
        min_bytes = min(v.min_bytes, max_bytes)
        if gp.mismatch:
            cnotes.append(gp.mismatch)
        nodes, ranks, device = gp.nodes, gp.ranks, gp.device
        if nodes * ranks < 2:
            cnotes.append("one rank: busbw is 0 by definition, the collective test cannot say anything")
        tests = [PlannedTest(
            id=gp.test_id(self.name, c), kind=self.name, group=gp.group.name, nodes=nodes, ranks_per_node=ranks,
            device=device,
            params=NcclParams(collective=c, min_bytes=min_bytes, max_bytes=max_bytes, step_factor=v.step_factor,
                              iters=v.iters, warmup_iters=v.warmup_iters, check=v.check,
                              nccl_tests_dir=(gp.settings.nccl_stack.tests_dir
                                              if gp.settings.nccl_stack is not None and not gp.local else None),
                              python=declared_python(gp)),
            description=f"{c} over {nodes} node(s) x {ranks} {'GPU' if device == 'cuda' else 'CPU process'}"
                        f"{'s' if ranks != 1 and device == 'cuda' else 'es' if ranks != 1 else ''}",
            notes=tuple(cnotes)) for c in colls]
        return tests, notes

    # -- payload --------------------------------------------------------------------------------

    def payload_args(self, test: PlannedTest) -> list[str]:
        """Flags of ``collectives.py`` (nccl-tests-compatible ``-o -b -e -f -n -w -c``, plus ``--device``)."""
        p = test.params_as(NcclParams)
        return ["-o", p.collective, "-b", str(p.min_bytes), "-e", str(p.max_bytes),
                "-f", str(p.step_factor), "-n", str(p.iters), "-w", str(p.warmup_iters),
                "-c", "1" if p.check else "0", "--device", test.device]

    def binary_name(self, test: PlannedTest) -> str:
        """The collective (``nccl_tests.py --probe --collective X`` finds ``X_perf``)."""
        return test.params_as(NcclParams).collective

    def local_binary(self, test: PlannedTest, dirs: list[str]) -> str | None:
        """The ``<collective>_perf`` nccl-tests binary on this machine (``dirs``, then ``PATH`` and the
        usual build folders, as ``nccl_tests.py`` searches), or ``None``."""
        from ..payloads import nccl_tests

        return nccl_tests.find_binary(self.binary_name(test), dirs)

    def environment_python(self, test: PlannedTest) -> str | None:
        """The declared venv's interpreter (:attr:`NcclParams.python`), for the torch benchmark."""
        return test.params_as(NcclParams).python

    def binary_search_args(self, test: PlannedTest) -> list[str]:
        """``--nccl-tests-dir <dir>`` where the node settings say the binaries are (the nccl_stack role's directory),
        for ``nccl_tests.py`` and its ``--probe``; ``[]`` without one."""
        d = test.params_as(NcclParams).nccl_tests_dir
        return ["--nccl-tests-dir", d] if d else []

    def binary_payload_args(self, test: PlannedTest) -> list[str]:
        """Flags of ``nccl_tests.py`` (it adds ``-g`` and, with ``--hosts``, mpirun)."""
        p = test.params_as(NcclParams)
        return ["--collective", p.collective, "-b", str(p.min_bytes), "-e", str(p.max_bytes),
                "-f", str(p.step_factor), "-n", str(p.iters), "-w", str(p.warmup_iters),
                "-c", "1" if p.check else "0", *self.binary_search_args(test)]

    def binary_flags(self, test: PlannedTest, gpus_per_process: int = 1) -> list[str]:
        """Flags for an nccl-tests binary itself (``-b -e -f -n -w -c -g``)."""
        p = test.params_as(NcclParams)
        return ["-b", str(p.min_bytes), "-e", str(p.max_bytes), "-f", str(p.step_factor),
                "-n", str(p.iters), "-w", str(p.warmup_iters), "-c", "1" if p.check else "0",
                "-g", str(gpus_per_process)]

    def gpus(self, test: PlannedTest) -> int:
        """GPUs per node: one per rank on a GPU run."""
        return test.ranks_per_node if test.device == "cuda" else 0

    # -- judging --------------------------------------------------------------------------------

    def adjust_context(self, ctx: JudgeContext, test: PlannedTest, local: bool) -> JudgeContext:
        """A local GPU run uses as many GPUs per node as it has ranks."""
        if local and test.device == "cuda":
            import dataclasses

            return dataclasses.replace(ctx, gpus_per_node=test.ranks_per_node)
        return ctx

    def context_expectations(self, bp: Blueprint | None, group: ResolvedGroup | None) -> StackExpectations:
        """The stack node ``group`` declares: the NCCL the judge compares a run's with, and where the nodes'
        nccl-tests binaries are (:func:`validate.stack.declared_stack`)."""
        return declared_stack(bp, group)

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """One result per nccl-tests run in ``text`` (see the module docstring)."""
        return _judge_nccl_text(text, ctx, source, label)

    def judge_raw(self, raw: RawText, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """:meth:`judge_text` of the file ``raw``, its lines streamed (:func:`~validate.parsers.nccl.parse_nccl_lines`:
        memory flat in the file's size, whatever its NCCL INFO lines or rows); a ``-J`` JSON document (the file
        starts with ``{``) is read whole, as JSON must be."""
        if raw.first_char() == "{":
            return self.judge_text(raw.read(), ctx, source=source, label=label)
        runs = parse_nccl_lines(raw.lines(), Path(source).name)
        return _judge_nccl_runs(runs, raw.excerpt, ctx, source, label)

    # -- reporting ------------------------------------------------------------------------------

    def summary(self, r: JudgeResult) -> str | None:
        """``all_reduce, 16 ranks / 2 node(s): peak busbw 350 GB/s at 8 GiB = 92% of expected 380 GB/s``."""
        m, e = nccl_metrics(r), nccl_expected(r)
        if m.get("peak_busbw_gbps") is None:
            return None
        s = (f"{m.get('collective') or 'collective'}, {m.get('ranks') or '?'} ranks / {m.get('nodes') or '?'} node(s):"
             f" peak busbw {m['peak_busbw_gbps']:.4g} GB/s at {fmt_bytes(m.get('size_at_peak_bytes'))}")
        if e.get("busbw_gbps"):
            s += f" = {pct(m['peak_busbw_gbps'] / e['busbw_gbps'])} of expected {e['busbw_gbps']:.4g} GB/s"
        return s

    def compared(self, r: JudgeResult) -> bool:
        """Compared when a busbw expectation (GB/s) or a ratio was recorded."""
        e = nccl_expected(r)
        return e.get("ratio") is not None or e.get("busbw_gbps") is not None

    def expected_text(self, r: JudgeResult) -> str | None:
        """``busbw 380 GB/s``."""
        e = nccl_expected(r)
        return f"busbw {e['busbw_gbps']:.4g} GB/s" if e.get("busbw_gbps") else None

    def result_plot(self, r: JudgeResult) -> str | None:
        """busbw (GB/s) against message size, out-of-place and in-place, with the expected, warn and fail lines."""
        sizes = nccl_series(r).get("size") or []
        if len(sizes) < 2:
            return None
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        for curve in busbw_curves(r):
            style = "-o" if curve.label.endswith("out-of-place") else "-s"
            ax.plot(curve.xs, curve.ys, style, markersize=3, linewidth=1.2, label=curve.label)
        e = nccl_expected(r)
        if e.get("busbw_gbps"):
            ax.axhline(e["busbw_gbps"], color="tab:green", linestyle="--", linewidth=1,
                       label=f"expected {e['busbw_gbps']:.4g} GB/s ({e.get('basis', '')})")
            if e.get("warn_ratio"):
                ax.axhline(e["busbw_gbps"] * e["warn_ratio"], color="tab:orange", linestyle=":", linewidth=1,
                           label=f"warn below {e['warn_ratio']:g}x")
            if e.get("fail_ratio"):
                ax.axhline(e["busbw_gbps"] * e["fail_ratio"], color="tab:red", linestyle=":", linewidth=1,
                           label=f"fail below {e['fail_ratio']:g}x")
        ax.set_xscale("log", base=2)
        ticks = [x for x in sizes if x > 0]
        if ticks:
            step = max(1, len(ticks) // 10)
            ax.set_xticks(ticks[::step])
            ax.set_xticklabels([fmt_bytes(t) for t in ticks[::step]], rotation=45, fontsize=7)
        ax.set_xlabel("message size")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{r.title} [{r.verdict}]", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        return png(fig)

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """A note when more runs were judged than plotted (:data:`MAX_PLOTS`)."""
        count = sum(r.kind == self.name for r in results)
        if count <= plotted:
            return None
        return HtmlSection(heading="", note=f"busbw plots shown for the first {plotted} of {count} collective runs.")



# ---------------------------------------------------------------------------------------------
# expectations: what the declared hardware should deliver
# ---------------------------------------------------------------------------------------------


ML_NETWORK = "https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/network/README.md"
"""Source of the multi-node formula and the 0.8 achievable fraction."""

BUSBW_BOUND_MARGIN = 1.10
"""A peak busbw more than 10% above the physical upper bound (:attr:`BusbwExpectation.upper_gbps`)
cannot come from the declared hardware: nccl-tests prints busbw with 2 decimals and times with CUDA
events averaged over its iterations (well under 1% error), and vendors' link rates are exact products
of lane rates (NVLink 4: 18 links x 25 GB/s); 10% leaves room for clock and rounding effects only."""

NCCL_TREE_BLOG = "https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/"
"""Source of the double binary tree's traffic (each byte crosses the network once per direction on two nodes)."""

NCCL_PERFORMANCE = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
"""Source of busbw's definition (algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter)."""


@dataclass(frozen=True)
class BusbwExpectation:
    """Expected peak busbw (GB/s) of one collective run, with how it was derived.

    ``basis``: ``threshold`` (blueprint/flag), ``nvlink``, ``xgmi`` (AMD Instinct), ``pcie`` or ``network``
    (whichever bound is lower); ``algorithm``: the NCCL algorithm the figure assumes (``ring``, ``tree``,
    ``alltoall``, ``p2p``); ``intra_gbps``/``inter_gbps`` the two bounds (``None`` when not
    applicable or unknown: ``inter_gbps`` is ``None`` for a multi-node run without a NIC rate);
    ``upper_gbps`` the physical upper bound at line rate (no efficiency factor; ``None`` when no
    bound is known) with ``upper_derivation``; ``derivation`` a sentence with the arithmetic;
    ``source`` the URL of the formula.
    """

    busbw_gbps: float
    basis: str
    derivation: str
    source: str
    intra_gbps: float | None = None
    inter_gbps: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    algorithm: str = "ring"
    upper_gbps: float | None = None
    upper_derivation: str = ""


def intra_node_gbytes_s(gpu_key: str | None, gpus: int | None = None) -> tuple[float, str, str] | None:
    """Per-GPU unidirectional GB/s inside a node of ``gpus`` GPUs (``None``: a full board): NVLink when the part
    has it; AMD Infinity Fabric (xGMI) on AMD Instinct parts, a full mesh of one link to each peer, so a GPU talks
    to ``g - 1`` peers at ``xgmi_link_gbytes_s`` each (8 MI300X: 7 x 64 = 448 GB/s; 2 of them: 64 GB/s;
    :data:`XGMI_SOURCE`); else the PCIe x16 rate of its generation. Returns
    ``(GB/s, "nvlink"|"xgmi"|"pcie", source)`` or ``None``."""
    if not gpu_key:
        return None
    cat = catalog()
    try:
        spec = cat.gpu(gpu_key)
    except UnknownHardwareError:
        return None
    if spec.has_nvlink:
        return float(spec.nvlink_unidir_gbytes_s or 0), "nvlink", spec.raw.get("field_sources", {}).get("nvlink_gen", spec.source)
    link, links = spec.raw.get("xgmi_link_gbytes_s"), spec.raw.get("xgmi_links")
    if link and links:
        peers = int(links) if gpus is None else max(min(gpus - 1, int(links)), 1)
        src = spec.raw.get("field_sources", {}).get("xgmi_links", spec.source)
        return float(link) * peers, "xgmi", str(src)
    pcie = str(spec.raw.get("pcie") or "")
    gen = pcie.split("_")[0] if pcie else ""
    rates = cat.fabrics.get("pcie_x16_unidir_gbytes_s", {})
    if gen in rates:
        return float(rates[gen]), "pcie", str(cat.fabrics.get("pcie_source", ""))
    return None


XGMI_SOURCE = "https://github.com/stas00/ml-engineering/blob/0030e63f5275afee38233676690ce10478647cca/network/README.md"
"""Source of the xGMI mesh model: MI300X peer-to-peer 64 GB/s, all-to-all 448 GB/s on a board of 8 (``64*7=448``);
measured busbw 47.7 GB/s on 2 GPUs and 312.9 GB/s on 8."""


def _nvls(gpu_key: str | None) -> bool:
    """True for NVSwitch parts with NVLink SHARP (NVLink 4+: H100/H200/B200/GB200), which reduce in the switch.
    Never for another vendor's part (AMD's xGMI mesh has no switch to reduce in)."""
    return _vendor(gpu_key) == "nvidia" and _nvlink_gen(gpu_key) >= 4


def _vendor(gpu_key: str | None) -> str | None:
    """Vendor of a catalog GPU (``nvidia``, ``amd``, ``aws``), ``None`` when unknown."""
    if not gpu_key:
        return None
    try:
        return catalog().gpu(gpu_key).vendor
    except KeyError:
        return None


def tree_two_node_fraction() -> float:
    """Measured fraction of the tree algorithm's line-rate busbw that healthy 2-node all_reduce runs reach
    (catalog ``nccl_algorithms.tree_two_node_fraction``, with the measurements it comes from)."""
    return float(catalog().extras["nccl_algorithms"]["tree_two_node_fraction"])


def expected_busbw(
    ctx: JudgeContext,
    *,
    collective: str | None,
    ranks: int,
    nodes: int,
    gpu_key: str | None,
    candidates: tuple[str, ...] = (),
    min_busbw_gbps: float | None = None,
    allow_tree: bool = True,
) -> BusbwExpectation | None:
    """Expected peak busbw for ``collective`` over ``ranks`` ranks on ``nodes`` nodes of ``gpu_key``.

    Notation: ``n`` ranks, ``k`` nodes, ``g = n / k`` GPUs per node, ``L`` the per-GPU link rate
    inside the node (NVLink unidirectional, else PCIe x16; GB/s), ``B`` the per-GPU share of the
    node's NICs (NICs x Gbit/s / 8 / GPUs per node; GB/s), ``f`` the catalog's achievable fraction
    (0.8), ``t`` the measured tree fraction (:func:`tree_two_node_fraction`, 0.65).

    Expected figure (what a healthy cluster delivers; NCCL picks the faster algorithm):

    * one node: ``f x L`` (ring; NVLS may exceed it, which is noted, not judged);
    * all_reduce across nodes: ring ``f x g x B`` (every channel's ring leaves each node once, so
      busbw is the node's NIC rate over its GPUs' rings); on exactly two nodes the double binary
      tree sends each byte across the network once per direction instead of twice, so busbw
      reaches ``t x 2(n-1)/n x g x B`` (NCCL 2.4 trees: :data:`NCCL_TREE_BLOG`; on more nodes
      the tree's interior nodes carry twice the traffic and it is no faster than the ring);
      published measurements agree: 2 x p5 487 GB/s (tree), 4 x p6-b200 382 and 4 x p5en 365
      GB/s (ring, 95% and 91% of ``g x B`` = 400);
    * all_gather, reduce_scatter, broadcast, reduce (rings only): ``f x g x B``;
    * alltoall: ``f x B x (n-1)/(n-g)`` (only the off-node share crosses the NICs);
    * sendrecv: ``f x B``;
    * each capped by the intra-node figure ``f x L`` (``f x L x 2(n-1)/n`` for the tree on NVLS
      parts, where the NVSwitch reduces so each GPU sends and receives the data once).

    Physical upper bound (``upper_gbps``, line rate, no efficiency; a result above it with
    :data:`BUSBW_BOUND_MARGIN` cannot come from this hardware): inside a node ``L`` (every
    all_reduce without in-switch reduction sends ``2(n-1)/n`` of the data per GPU: Patarasuk and
    Yuan's bandwidth-optimal bound), ``2(n-1)/n x L`` for all_reduce on NVLS parts; across nodes
    all_reduce/all_gather/reduce_scatter ``B x (n-1)/(k-1)`` (the same bound per node; on
    InfiniBand, where SHARP can reduce in the switch, ``2(n-1)/n x g x B``), broadcast, reduce and
    sendrecv ``g x B``, alltoall ``B x (n-1)/(n-g)``.

    ``allow_tree`` ``False`` (the log pins NCCL_ALGO to a list without Tree) expects the ring on two nodes too.

    ``min_busbw_gbps`` (GB/s; ``validation.nccl.thresholds.min_busbw_gbps``) replaces the derived
    figure when set. ``collective`` ``None`` with ``candidates`` uses the lowest candidate expectation. Returns
    ``None`` when neither an intra-node nor an inter-node figure can be computed and no threshold
    is set. For a multi-node run without a NIC rate the intra-node figure is returned with
    ``inter_gbps`` ``None``: the judge then gives no bandwidth verdict.
    """
    cat = catalog()
    frac = cat.achievable_fraction
    tfrac = tree_two_node_fraction()
    ranks = max(ranks, 1)
    nodes = max(min(nodes, ranks), 1)
    g = max(ranks // nodes, 1)
    n, k = ranks, nodes
    colls = [collective] if collective else (list(candidates) or ["all_reduce"])
    link = None
    link_kind = ""
    intra_src = ""
    if g >= 2 or k >= 2:
        got = intra_node_gbytes_s(gpu_key, g)
        if got is not None:
            link, link_kind, intra_src = got
    nvls = _nvls(gpu_key) and link_kind == "nvlink"
    ar = 2.0 * (n - 1) / n
    notes: list[str] = []
    b = node_gbps = None
    gpus = max(ctx.gpus_per_node or g, g)
    if k >= 2 and ctx.nic_gbps is not None:
        nics = ctx.nics_per_node
        if nics is None:
            nics = g
            notes.append(f"NIC count unknown: assumed one {ctx.nic_gbps:g} Gbit/s NIC per GPU (pass --nics-per-node)")
        node_gbps = ctx.nic_gbps * nics
        b = node_gbps / 8.0 / gpus  # per-GPU NIC rate, GB/s (the node's NICs are shared by all its GPUs)
    best: tuple[float, str, str, str, float | None, float | None, float | None, str] | None = None
    for c in colls:
        intra_exp = intra_up = None
        algo = "ring"
        inter = inter_up = None
        inter_text = up_text = ""
        if b is not None:
            if c == "all_reduce":
                ring = frac * g * b
                tree = tfrac * ar * g * b if (k == 2 and allow_tree) else 0.0
                if tree > ring:
                    algo, inter = "tree", tree
                    inter_text = (f"network {node_gbps:g} Gbit/s per node / 8 / {gpus} GPUs = {b:.3g} GB/s per GPU; "
                                  f"2 nodes: tree {tfrac:g} x 2(n-1)/n x g x B = {tfrac:g} x {ar:.4g} x {g} x {b:.3g} "
                                  f"= {tree:.1f} GB/s")
                else:
                    inter = ring
                    inter_text = (f"network {node_gbps:g} Gbit/s per node / 8 / {gpus} GPUs = {b:.3g} GB/s per GPU; "
                                  f"{k} nodes: ring {frac:g} x g x B = {frac:g} x {g} x {b:.3g} = {ring:.1f} GB/s")
                if ctx.fabric == "infiniband":
                    inter_up, up_text = ar * g * b, f"network {ar:.4g} x g x B = {ar * g * b:.1f} GB/s (SHARP)"
                else:
                    inter_up = b * (n - 1) / (k - 1)
                    up_text = f"network B x (n-1)/(k-1) = {b:.3g} x {n - 1}/{k - 1} = {inter_up:.1f} GB/s"
            elif c == "alltoall":
                inter = frac * b * (n - 1) / max(n - g, 1)
                inter_up = b * (n - 1) / max(n - g, 1)
                algo = "alltoall"
                inter_text = (f"network {b:.3g} GB/s per GPU x {frac:g} x (n-1)/(n-g) = {n - 1}/{n - g} = {inter:.1f} GB/s "
                              "(alltoall: the off-node share crosses the NICs)")
                up_text = f"network B x (n-1)/(n-g) = {inter_up:.1f} GB/s"
            elif c == "sendrecv":
                inter, inter_up, algo = frac * b, g * b, "p2p"
                inter_text = f"network {b:.3g} GB/s per GPU x {frac:g} = {inter:.1f} GB/s"
                up_text = f"network g x B = {inter_up:.1f} GB/s"
            else:
                inter = frac * g * b
                inter_text = (f"network {b:.3g} GB/s per GPU x {g} GPUs per node (ring: the node's NICs carry every "
                              f"ring once) x {frac:g} = {inter:.1f} GB/s")
                if c in ("all_gather", "reduce_scatter", "gather", "scatter"):
                    inter_up = b * (n - 1) / (k - 1)
                    up_text = f"network B x (n-1)/(k-1) = {inter_up:.1f} GB/s"
                else:
                    inter_up = g * b
                    up_text = f"network g x B = {inter_up:.1f} GB/s"
        if link is not None:
            # NVLS reduces in the NVSwitch: each GPU sends and receives the data once (algbw <= L);
            # without it every GPU sends 2(n-1)/n of the data (busbw <= L), whatever the algorithm
            chain = ar if (algo == "tree" and nvls) else 1.0
            intra_exp = frac * link * chain
            intra_up = link * (ar if (c == "all_reduce" and nvls) else 1.0)
        cand_exp = min(x for x in (inter, intra_exp) if x is not None) if (inter is not None or intra_exp is not None) else None
        if cand_exp is None:
            continue
        ups = [x for x in (inter_up, intra_up) if x is not None]
        up = min(ups) if ups else None
        if up is not None:
            parts = [t for t in (up_text,) if t and inter_up == up]
            if intra_up == up:
                parts.append(f"{link_kind} {link:g} GB/s per GPU" + (f" x 2(n-1)/n = {intra_up:.1f} GB/s"
                                                                     if intra_up != link else ""))
            up_deriv = " and ".join(parts)
        else:
            up_deriv = ""
        if best is None or cand_exp < best[0]:
            intra_text = ""
            if intra_exp is not None:
                intra_text = (f"{link_kind} {link:g} GB/s per GPU x {frac:g}" + (" x 2(n-1)/n (NVLS)" if chain != 1.0 else "")
                              + f" = {intra_exp:.1f} GB/s")
            if inter is not None and (intra_exp is None or inter < intra_exp):
                basis, text = "network", inter_text
            else:
                basis, text = (link_kind or "nvlink"), intra_text
            best = (cand_exp, basis, text, algo, intra_exp, inter, up, up_deriv)
    th = min_busbw_gbps
    if best is None:
        if th is None:
            return None
        return BusbwExpectation(th, "threshold", f"validation.nccl.thresholds.min_busbw_gbps = {th:g} GB/s", "blueprint")
    val, basis, text, algo, intra_exp, inter, up, up_deriv = best
    src = ML_NETWORK if basis == "network" else (intra_src or ML_NETWORK)
    if algo == "tree":
        src = f"{NCCL_TREE_BLOG}; {ML_NETWORK}"
    if th is not None:
        return BusbwExpectation(th, "threshold", f"validation.nccl.thresholds.min_busbw_gbps = {th:g} GB/s", "blueprint",
                                intra_exp, inter, tuple(notes), algo, up, up_deriv)
    return BusbwExpectation(val, basis, text, src, intra_exp, inter, tuple(notes), algo, up, up_deriv)




# ---------------------------------------------------------------------------------------------
# judging
# ---------------------------------------------------------------------------------------------

# The curve-shape thresholds (dips, cliffs, collapse, socket fallback, above-expectation note) are
# the blueprint's `validation.nccl.thresholds` (blueprints.models.NcclThresholds), with their defaults.


def _first_errors(errors: list[str], limit: int = 2) -> list[str]:
    """Distinct error messages with the host/pid prefix removed (``node-1: X`` and ``node-2: X`` are one)."""
    out: list[str] = []
    for e in errors:
        core = re.sub(r"^\.\.\s*\S+ pid \d+:\s*", "", e)
        core = re.sub(r"^[\w.\-]+:\s+(?=Test )", "", core)
        if core not in out:
            out.append(core)
    return out[:limit]


def _hosts_in(errors: list[str]) -> list[str]:
    hosts: list[str] = []
    for e in errors:
        m = re.match(r"^(?:\.\.\s*)?([\w.\-]+)(?::| pid )", e)
        if m and m.group(1) not in hosts and not m.group(1).startswith("Test"):
            hosts.append(m.group(1))
    return hosts


def _diagnosis(run: NcclRun, multi: bool | None, fabric: str | None) -> str | None:
    """``"Likely cause: ... Fix: ... (docs/...)"`` from the first log signature in the run's whole output
    (errors, NCCL WARN/INFO lines, anything else it printed), plus the other signatures seen; ``None``
    when no signature matches."""
    found = diagnose([*run.errors, *run.warnings, *run.log_lines], multi=multi, fabric=fabric)
    if not found:
        return None
    sig, line = found[0]
    text = sig.text()
    if line and line not in " ".join(run.errors[:2]):
        text += f" [log: {line[:200]!r}]"
    others = [s.title for s, _ in found[1:3]]
    if others:
        text += f". Also in the log: {'; '.join(others)}"
    return text


def _judge_nccl_text(text: str, ctx: JudgeContext, source: str, label: str | None) -> list[JudgeResult]:
    return _judge_nccl_runs(parse_nccl(text, Path(source).name), lambda: text, ctx, source, label)


def _judge_nccl_runs(runs: list[NcclRun], text: Callable[[], str], ctx: JudgeContext, source: str,
                     label: str | None) -> list[JudgeResult]:
    """One result per run; ``text()`` gives the output (or its head and tail) when there is none, for why."""
    name = Path(source).name
    if not runs:
        r = JudgeResult(source=source, kind="nccl", label=label or name)
        return [nothing(r, text(), "no nccl-tests output: no header, result table or error line found")]
    many = len(runs) > 1
    out = []
    for run in runs:
        part = run.label + (f" #{run.index + 1}" if many else "")
        out.append(judge_nccl_run(run, ctx, source=source, label=part_label(label, name, part, many)))
    return out


def judge_nccl_run(run: NcclRun, ctx: JudgeContext, *, source: str, label: str | None = None) -> JudgeResult:
    """Judge one parsed nccl-tests (or torch benchmark) run; see the module docstring for the order."""
    m = NcclMetrics()
    r = JudgeResult(source=source, kind="nccl", label=label, metrics=m, expected=NcclExpected())
    coll = run.collective
    m["collective"] = coll or (" or ".join(run.candidates) if run.candidates else None)
    m["tool"] = run.tool
    if run.backend:
        m["backend"] = run.backend
    m["device_name"] = run.device_name
    # ---- who ran: flags > log > blueprint ----------------------------------------------------
    log_nodes = run.nodes
    ranks = run.ranks or run.inferred_ranks()
    if ranks is not None and not run.ranks:
        r.note(f"no 'Using devices' lines: {ranks} ranks follow from the table (busbw / algbw or size / count)")
    ranks, log_nodes, contradiction = _counts(run, ctx, r, ranks, log_nodes)
    nodes = ctx.nodes if ctx.is_explicit("nodes") and ctx.nodes else (log_nodes or (ctx.nodes if run.ranks is None
                                                                                      or log_nodes else None))
    if ranks is None and nodes and ctx.gpus_per_node:
        ranks = nodes * ctx.gpus_per_node
        r.note(f"ranks not in the log: assumed {nodes} node(s) x {ctx.gpus_per_node} GPUs = {ranks}")
    if not run.devices and not ctx.is_explicit("nodes") and ranks and ctx.gpus_per_node and ranks > ctx.gpus_per_node:
        nodes = max(nodes or 1, -(-ranks // ctx.gpus_per_node))
    log_gpu = resolve_gpu(run.device_name)
    declared = ctx.gpu_model
    tool_vendor = "amd" if run.tool == "rccl-tests" else None
    mismatch = bool(declared and not run.is_cpu and (
        gpu_mismatch(run.device_name, log_gpu, declared, log_vendor=tool_vendor) if run.device_name
        else (tool_vendor is not None and _vendor(declared) not in (None, tool_vendor))))
    gpu_key = declared if (ctx.is_explicit("gpu_model") or mismatch) else (log_gpu or declared)
    if run.device_name and not log_gpu and not run.is_cpu and not mismatch:
        if catalog().generic_gpu_name(run.device_name):
            r.note(f"the log names its GPUs {run.device_name!r}, the name a driver gives a part it does not know yet: "
                   + (f"judged as the declared {declared}" if declared else "no expectation (pass --gpu)"))
        else:
            r.note(f"GPU {run.device_name!r} is not in the hardware catalog"
                   + (f"; using the declared {declared}" if declared else "; no NVLink expectation (pass --gpu)"))
    multi: bool | None = bool(nodes and nodes > 1) if nodes else None
    m["ranks"] = ranks
    m["nodes"] = nodes
    m["gpu_model"] = gpu_key
    if run.tool != "torch":  # nccl-tests names the NCCL it ran; the torch benchmark's NCCL is the wheel's
        ran = {"nccl": run.nccl_version, **({"nccl_cuda": run.nccl_cuda} if run.nccl_cuda else {})}
        if mismatch:  # another machine's run: what it used is recorded, not compared with this blueprint
            m["software"] = {k: v for k, v in ran.items() if v}
        else:
            compare_versions(r, ctx.expectations_for(NcclSuite.name, StackExpectations), ran, f"the {run.tool} output")
    m["rows"] = len(run.rows)
    m["avg_busbw_gbps"] = run.avg_busbw_gbps
    m["wrong"] = run.wrong_total
    m["out_of_bounds"] = run.out_of_bounds
    if run.rows:
        m["min_size_bytes"] = run.rows[0].size_bytes
        m["max_size_bytes"] = run.rows[-1].size_bytes
        small = run.rows[0].out_of_place or run.rows[0].in_place
        m["small_message_time_us"] = small.time_us if small else None
    if run.networks:
        m["networks"] = list(run.networks)
    if run.net_provider:
        m["net_provider"] = run.net_provider
    usage = net_usage(run.log_lines)
    if usage.channel_lines:
        m["transports"] = dict(usage.transports)
        m["nics_used"] = {h: sorted(v) for h, v in usage.nics_used.items()}
    for note in run.format_notes:
        r.note(f"format: {note}")
    r.series = NcclSeries(
        size=run.rows.sizes(),
        busbw_oop=run.rows.values("busbw_gbps", "out-of-place"),
        busbw_ip=run.rows.values("busbw_gbps", "in-place"),
    )
    # ---- runs that cannot say anything ------------------------------------------------------
    if run.duplicated_rank0:
        k = run.duplicate_streams or 2
        r.degrade(Verdict.INVALID, f"duplicated rank 0: {k} processes each printed their own 'Rank 0' and ran alone, so no "
                             "collective crossed GPUs. Likely cause: nccl-tests built without MPI but launched with "
                             "mpirun/srun; fix: rebuild with `make MPI=1 MPI_HOME=...` (or run one process with -g N)")
        return r
    if mismatch:
        assert declared is not None
        if ctx.is_explicit("gpu_model"):
            by = "--gpu"
        elif ctx.is_explicit("instance_type"):
            by = f"--instance-type {ctx.instance_type}"
        else:
            by = f"blueprint {ctx.blueprint}" if ctx.blueprint else "the context"
        what = (f"the log's GPUs are {run.device_name!r}" + (f" ({log_gpu})" if log_gpu else "")
                if run.device_name else "the log is an rccl-tests output (AMD GPUs)")
        theirs = catalog().gpu_name_vendor(run.device_name or "") or tool_vendor
        other = f" (another vendor: {theirs}, not {_vendor(declared)})" if theirs and theirs != _vendor(declared) else ""
        r.degrade(Verdict.INVALID, f"not this hardware: {what} but {by} declares {declared}{other}; its figures say "
                             "nothing about the declared cluster. " + by_id("not-this-hardware").hint())
        # a crash or wrong data is still a failure on whatever hardware: those checks run, the bandwidth ones do not
    if contradiction and not mismatch:
        r.degrade(Verdict.INVALID, f"counts that contradict each other: {contradiction}; busbw depends on the rank count, "
                                   "so no bandwidth verdict. Fix: pass the run's own --nodes and --gpus-per-node (or "
                                   "none), and keep the whole output")
        mismatch = True  # the correctness and crash checks still run; the bandwidth ones do not
    mig = _mig_instances(run)
    # under MIG every rank sees its one instance as CUDA device 0: that is no per-task binding
    hidden = None if mig else _gpus_hidden_per_task(run)
    failing_setting = _failing_setting(run, ctx.fabric)
    if not run.rows:
        if run.errors:
            errs = _first_errors(run.errors)
            hosts = _hosts_in(run.errors)
            msg = f"crashed before printing a result: {errs[0]!r}"
            if len(errs) > 1:
                msg += f" (also {errs[1]!r})"
            if hosts:
                msg += f" on {', '.join(hosts)}"
            cause = _diagnosis(run, multi, ctx.fabric)
            if hidden:  # read in the log's own device lines: named before any signature guess
                cause = f"{hidden}. " + by_id("gpus-hidden-per-task").text() + (f". Also: {cause}" if cause else "")
            if failing_setting:  # a setting the log shows that makes NCCL fail: named before any signature guess
                cause = failing_setting + (f". Also: {cause}" if cause else "")
            r.degrade(Verdict.FAIL, msg + (f". {cause}" if cause else ". Rerun with NCCL_DEBUG=INFO to see why"))
        else:
            cause = _diagnosis(run, multi, ctx.fabric)
            r.degrade(Verdict.INVALID, "no result table: the run printed a header but no sizes (interrupted before the "
                                 "first size, or output cut); rerun and keep the whole output" + (f". {cause}" if cause else ""))
        return r
    if ranks == 1 and not mismatch:
        r.degrade(Verdict.INVALID, "one rank: busbw is 0 by definition (bus factor (n-1)/n = 0), so this run says nothing "
                             "about NVLink or the network. Fix: launch one process per GPU (mpirun -np N / srun -n N) "
                             "or use -g N")
        return r
    peak = run.peak()
    if peak is None or peak[0] <= 0:
        if not mismatch:
            r.degrade(Verdict.INVALID, "every busbw is 0: the run moved no data between ranks (one rank per communicator?)")
        return r
    peak_bw, peak_size, peak_where = peak
    m["peak_busbw_gbps"] = peak_bw
    m["size_at_peak_bytes"] = peak_size
    m["peak_placement"] = peak_where
    # the table is read by column, never as a list of rows (a log may hold hundreds of thousands of them)
    placements = ("out-of-place", "in-place")
    m["peak_algbw_gbps"] = max((a for pl in placements for a in iter_values(run, "algbw_gbps", pl) if a is not None),
                               default=None)
    # ---- correctness -------------------------------------------------------------------------
    wrong_at = sorted((i, k, w) for k, pl in enumerate(placements)
                      for i, w in enumerate(iter_values(run, "wrong", pl)) if w)  # row order, out-of-place first
    bad = [(run.rows[i].size_bytes, placements[k], w) for i, k, w in wrong_at]
    if bad or (run.out_of_bounds or 0) > 0 or run.out_of_bounds_ok is False:
        where = ", ".join(f"{fmt_bytes(s)} {n} ({w:g})" for s, n, w in bad[:4]) + (" ..." if len(bad) > 4 else "")
        total = sum(w for _, _, w in bad)
        msg = (f"wrong results: #wrong = {total:g} element(s)" + (f" at {where}" if bad else "")
               + (f"; Out of bounds values: {run.out_of_bounds} FAILED" if run.out_of_bounds else ""))
        r.degrade(Verdict.FAIL, msg + ". The collective returned corrupted data. Likely cause: a GPU, NVLink or NIC "
                               "hardware fault or a NCCL/driver bug; check `nvidia-smi -q -d ECC` and dmesg for Xid "
                               "errors on every node, then rerun pinning NCCL_ALGO/NCCL_PROTO to isolate the path")
    elif run.checked is False:
        r.note("correctness not checked (#wrong printed N/A: run with -c 1 to count wrong elements)")
    if run.errors:
        errs = _first_errors(run.errors)
        hosts = _hosts_in(run.errors)
        cause = _diagnosis(run, multi, ctx.fabric)
        if failing_setting:
            cause = failing_setting + (f". Also: {cause}" if cause else "")
        text = f"the run reported {errs[0]!r}" + (f" on {', '.join(hosts)}" if hosts else "")
        if r.verdict == "fail":
            r.note(text + " (nccl-tests exits non-zero after wrong results)")
        else:
            r.degrade(Verdict.FAIL, text + (f". {cause}" if cause else ""))
    for w in run.warnings[:3]:
        r.note(f"NCCL WARN {w}")
    if run.avg_busbw_check == "FAILED":
        r.degrade(Verdict.WARN, f"nccl-tests' own NCCL_TESTS_MIN_BW check FAILED (Avg bus bandwidth {run.avg_busbw_gbps:g} GB/s)")
    maxb = run.config.get("maxBytes")
    if maxb and run.rows[-1].size_bytes < maxb and run.out_of_bounds is None and not run.concluded:
        r.degrade(Verdict.WARN, f"the run stopped at {fmt_bytes(run.rows[-1].size_bytes)} of {fmt_bytes(maxb)} without its "
                          "footer: interrupted, hung or killed (use nccl-tests -T to time out hangs)")
        # the peak is reached at the largest sizes, which are missing: comparing the partial curve with
        # the expectation would blame the fabric for a truncated log
        r.note(f"bandwidth not judged against the expectation: the sizes above {fmt_bytes(run.rows[-1].size_bytes)}, "
               f"where busbw peaks, are missing; peak so far {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)}")
        return r
    if mismatch:
        return r
    # ---- CPU runs ----------------------------------------------------------------------------
    if run.is_cpu:
        r.note(f"CPU measurement ({run.backend or 'gloo'} over shared memory / TCP sockets): no GPU or fabric "
               f"expectation applies; peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded")
        _curve(run, r, peak_bw, _thresholds(ctx), cpu=True)
        return r
    if mig:
        shm = usage.transports.get("SHM", 0)
        via = (f"; {shm} channel(s) went 'via SHM' (host memory) between instances of different GPUs" if shm else "")
        r.degrade(Verdict.WARN, f"no bandwidth verdict: {mig}{via}. MIG has no CUDA peer-to-peer, NVLink or NVLink SHARP "
                                "between instances, so the run measured neither NVLink nor the declared intra-node figure "
                                f"(peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded). "
                                + by_id("mig-instances").hint())
        _curve(run, r, peak_bw, _thresholds(ctx))
        return r
    if hidden:
        r.degrade(Verdict.WARN, f"{hidden}: the busbw did not go over NVLink or PCIe peer-to-peer. "
                                + by_id("gpus-hidden-per-task").text())
    # ---- the settings the log shows, then transport and NICs (NCCL INFO lines) ---------------
    fabric = ctx.fabric
    g_run = (ranks // max(nodes or 1, 1)) if ranks else (ctx.gpus_per_node or 0)
    settings_cause = _settings(run, ctx, r, bool(multi), gpu_key, g_run)
    _transport(run, usage, ctx, r, bool(multi), gpu_key, settings_cause)
    # ---- expectation -------------------------------------------------------------------------
    if ranks is None:
        r.note("number of ranks unknown (no 'Using devices' lines and the table does not pin it down): pass --nodes "
               "and --gpus-per-node to judge the bandwidth")
        _curve(run, r, peak_bw, _thresholds(ctx))
        return r
    nodes_eff = nodes or 1
    exp = expected_busbw(ctx, collective=coll, ranks=ranks, nodes=nodes_eff, gpu_key=gpu_key,
                         candidates=tuple(run.candidates), min_busbw_gbps=_thresholds(ctx).min_busbw_gbps,
                         allow_tree=_tree_allowed(run.settings.get("NCCL_ALGO")))
    if multi:
        factor = (nodes_eff - 1) / (ranks - 1) if ranks > 1 else 0
        m["per_gpu_network_gbytes_s"] = round(peak_bw * factor, 4)
    if exp is not None and exp.upper_gbps and peak_bw > exp.upper_gbps * BUSBW_BOUND_MARGIN:
        nccl_expected(r).update({"upper_gbps": round(exp.upper_gbps, 3), "upper_derivation": exp.upper_derivation})
        r.degrade(Verdict.INVALID, f"not this hardware: peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} is above the "
                             f"physical upper bound of the declared hardware, {exp.upper_gbps:.4g} GB/s "
                             f"({exp.upper_derivation}; more than {BUSBW_BOUND_MARGIN - 1:.0%} over it): the log was not "
                             "produced by the hardware it is judged against. " + by_id("not-this-hardware").hint())
        return r
    if nodes is None and ranks > 1 and _thresholds(ctx).min_busbw_gbps is None:
        r.degrade(Verdict.WARN, f"no bandwidth verdict: the log does not say how many nodes its {ranks} ranks ran on (no "
                          f"complete 'Using devices' lines), so NVLink and the network cannot be told apart (peak busbw "
                          f"{peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded). Fix: pass --nodes and --gpus-per-node "
                          f"(or --blueprint) ({doc_ref('network-unknown')})")
        _curve(run, r, peak_bw, _thresholds(ctx))
        return r
    if multi and ctx.nic_gbps is None and _thresholds(ctx).min_busbw_gbps is None:
        r.degrade(Verdict.WARN, f"no bandwidth verdict: a run across {nodes_eff} nodes is limited by the network, and no NIC "
                          f"rate is declared (peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded; the "
                          "intra-node (NVLink or xGMI) figure alone would pass a broken network). " + by_id("network-unknown").hint())
        if exp is not None and exp.upper_gbps:
            nccl_expected(r).update({"upper_gbps": round(exp.upper_gbps, 3), "upper_derivation": exp.upper_derivation})
        _check_ranks(run, ctx, r, ranks)
        _curve(run, r, peak_bw, _thresholds(ctx))
        return r
    if exp is None:
        missing = []
        if not gpu_key:
            missing.append("the GPU model (--gpu)")
        if multi and ctx.nic_gbps is None:
            missing.append("the NIC rate (--nic-gbps, --nics-per-node)")
        r.note("no expectation: " + (" and ".join(missing) or "not enough hardware facts") + " unknown; "
               f"peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} recorded")
        _curve(run, r, peak_bw, _thresholds(ctx))
        return r
    ratio = peak_bw / exp.busbw_gbps
    th = _thresholds(ctx)
    nccl_expected(r).update({
        "busbw_gbps": round(exp.busbw_gbps, 3), "basis": exp.basis, "algorithm": exp.algorithm,
        "derivation": exp.derivation, "source": exp.source,
        "intra_node_gbps": round(exp.intra_gbps, 3) if exp.intra_gbps else None,
        "inter_node_gbps": round(exp.inter_gbps, 3) if exp.inter_gbps else None,
        "upper_gbps": round(exp.upper_gbps, 3) if exp.upper_gbps else None,
        "warn_ratio": th.warn_ratio, "fail_ratio": th.fail_ratio, "ratio": round(ratio, 4),
    })
    for n in exp.notes:
        r.note(n)
    fig = (f"peak busbw {peak_bw:.4g} GB/s at {fmt_bytes(peak_size)} ({peak_where}) = {pct(ratio)} of the expected "
           f"{exp.busbw_gbps:.4g} GB/s ({exp.derivation})")
    inter = exp.inter_gbps
    explained = bool(settings_cause) or any("NET/Socket" in x or "TCP sockets" in x for x in r.reasons)
    if ratio < th.fail_ratio:
        if fabric in RDMA_FABRICS and multi and inter and peak_bw < th.socket_fallback_ratio * inter:
            assert fabric is not None
            r.degrade(Verdict.FAIL, fig + f": socket speed on an RDMA fabric ({pct(peak_bw / inter)} of the "
                                    f"inter-node rate {inter:.4g} GB/s). "
                                    + (f"Likely cause: {settings_cause}" if settings_cause else _socket_cause(fabric)))
        else:
            r.degrade(Verdict.FAIL, fig + f", below the fail ratio {th.fail_ratio:g}. "
                      + _low_cause(exp.basis, fabric, bool(multi), usage, explained, settings_cause))
    elif ratio < th.warn_ratio:
        r.degrade(Verdict.WARN, fig + f", below the warn ratio {th.warn_ratio:g}. "
                  + _low_cause(exp.basis, fabric, bool(multi), usage, explained, settings_cause))
    else:
        r.note(fig)
        if ratio > th.above_ratio and exp.basis != "threshold":
            nvls = _nvls(gpu_key)
            r.note("above the ring-model expectation: "
                   + ("NVLS (NVSwitch SHARP) or tree algorithms move" if nvls else "tree algorithms move")
                   + " less data than busbw's point-to-point ring formula assumes (nccl-tests issue #153)")
    _check_ranks(run, ctx, r, ranks)
    _curve(run, r, peak_bw, _thresholds(ctx))
    return r


def _settings(run: NcclRun, ctx: JudgeContext, r: JudgeResult, multi: bool, gpu_key: str | None, g: int) -> str:
    """Judge the environment the log shows the run was given (:attr:`NcclRun.settings`) before any bandwidth
    heuristic: each setting that switches off a fast path this run would use (the catalog's
    ``nccl_env_fast_paths``, the table the blueprint rule ``nccl-env-disables-fabric`` reads) is a warning naming
    the setting, what it switches off and the fix (unset it); one that narrows a path (a forced NCCL_ALGO or
    NCCL_PROTO, few channels) is a note. Returns the cause text for low bandwidth (``""`` when no setting
    explains it): the judge then names these settings instead of guessing."""
    if not run.settings:
        return ""
    cat = catalog()
    fabric = ctx.fabric
    rdma = fabric in RDMA_FABRICS and multi
    instance = None
    if ctx.instance_type:
        try:
            instance = cat.instance_type(ctx.instance_type)
        except UnknownHardwareError:
            instance = None
    needs = {
        "multi-gpu": g >= 2,
        "nvlink": g >= 2 and _nvlink_gen(gpu_key) > 0,
        "nvls": g >= 2 and _nvls(gpu_key),
        "mnnvl": multi and (gpu_key or "") in cat.mnnvl_gpus,
        "rdma": multi and fabric in IB_VERBS_FABRICS,
        "roce": multi and fabric == "roce",
        "efa": multi and fabric == "efa",
        "net": rdma,
        "gdr": rdma,
        "efa-rdma-read": multi and fabric == "efa" and bool(instance and instance.efa_rdma_read),
    }
    causes: list[str] = []
    for name, value in sorted(run.settings.items()):
        for row in cat.fast_paths_switched_off(name, value):
            if not needs.get(str(row["needs"]), False):
                continue
            what = f"the log sets {name}={value}, which switches off {row['switches_off']}"
            if row["effect"] == "disables":
                r.degrade(Verdict.WARN, f"{what}: this run does not measure that path of the cluster. Fix: unset {name} "
                                        f"in the job's environment and rerun (source: {row['source']})")
            else:
                r.note(f"{what} (source: {row['source']})")
            causes.append(f"{name}={value} in the log ({row['switches_off']})")
            break
    return "; ".join(causes)


GENERIC_HOSTS = frozenset({"localhost", "localhost.localdomain", "127.0.0.1"})
"""Host names that do not tell nodes apart (containers started with the host's network often print these)."""


def _counts(run: NcclRun, ctx: JudgeContext, r: JudgeResult, ranks: int | None,
            log_nodes: int | None) -> tuple[int | None, int | None, str | None]:
    """Reconcile the counts a run states: its device lines (how many, up to which ``Rank N``, on how many hosts), its
    table (busbw / algbw = the bus factor of the rank count, :meth:`NcclRun.inferred_ranks`) and the explicit flags
    (``--nodes``, ``--gpus-per-node``). Returns ``(ranks, nodes from the log, contradiction)``: device lines that stop
    short of their highest rank (an excerpt) give way to the table and say nothing about the nodes (noted); a table
    that contradicts complete device lines, or flags that contradict the log, are a contradiction (the judge names it
    and gives no bandwidth verdict rather than judge on either count)."""
    if not run.devices:
        return ranks, log_nodes, _flag_contradiction(ctx, ranks, "the table's bus factor gives") if ranks else None
    listed = run.ranks or 0
    top = max(d.rank for d in run.devices) + 1
    table = run.inferred_ranks() if run.rows else None
    if top > listed:
        ranks = max(top, table or 0)
        r.note(f"the device lines list {listed} rank(s) but go up to 'Rank {top - 1}': the log lacks the other ranks' "
               f"lines (an excerpt?)" + (f"; busbw / algbw in the table gives {table} ranks" if table else "")
               + f"; judged as {ranks} ranks on an unknown number of nodes")
        return ranks, None, _flag_contradiction(ctx, ranks, "the log has")
    if table is not None and table != listed:
        return ranks, log_nodes, (f"the device lines list {listed} ranks on {log_nodes} host(s) but busbw / algbw in the "
                                  f"table is the bus factor of {table} ranks")
    found = _flag_contradiction(ctx, listed, "the log's device lines list")
    if found:
        return ranks, log_nodes, found
    if ctx.is_explicit("nodes") and ctx.nodes and log_nodes and ctx.nodes != log_nodes:
        hosts = run.hosts
        if all(h.lower() in GENERIC_HOSTS for h in hosts):
            r.note(f"--nodes {ctx.nodes} overrides the log's host name {hosts[0]!r}, which does not tell nodes apart")
        else:
            shown = ", ".join(hosts[:4]) + (" ..." if len(hosts) > 4 else "")
            return ranks, log_nodes, f"--nodes {ctx.nodes}, but the log's {listed} ranks ran on {log_nodes} host(s) ({shown})"
    return ranks, log_nodes, None


def _flag_contradiction(ctx: JudgeContext, ranks: int, said_by: str) -> str | None:
    """The contradiction between explicit ``--nodes`` x ``--gpus-per-node`` and the ``ranks`` the log states, if any."""
    if ctx.is_explicit("nodes") and ctx.is_explicit("gpus_per_node") and ctx.nodes and ctx.gpus_per_node:
        flagged = ctx.nodes * ctx.gpus_per_node
        if flagged != ranks:
            return f"--nodes {ctx.nodes} x --gpus-per-node {ctx.gpus_per_node} = {flagged} ranks, but {said_by} {ranks}"
    return None


def _mig_instances(run: NcclRun) -> str | None:
    """What the log says when its ranks ran on MIG instances, else ``None``: device lines naming a MIG profile
    (``NVIDIA H200 MIG 1g.35gb``, the name CUDA gives an instance) or a ``CUDA_VISIBLE_DEVICES`` of MIG UUIDs. MIG has
    no CUDA peer-to-peer, NVLink or NVLink SHARP between instances (:data:`~validate.signatures.MIG_INSTANCES`)."""
    profiles = sorted({p[1] for p in (mig_profile(d.name) for d in run.devices) if p})
    if profiles:
        parent = mig_profile(run.device_name) or mig_profile(next(d.name for d in run.devices if mig_profile(d.name)))
        return (f"the ranks ran on MIG instances ({', '.join(profiles)} of {parent[0] if parent else 'a GPU'}, "
                "named in the device lines)")
    visible = run.settings.get("CUDA_VISIBLE_DEVICES", "")
    if visible.strip().upper().startswith("MIG-"):
        return "the ranks ran on MIG instances (CUDA_VISIBLE_DEVICES lists MIG UUIDs)"
    return None


PKEY_FULL_MEMBER_BIT = 0x8000
"""Bit 15 of an InfiniBand partition key: set for a full member (``0xffff``, ``0xf0dc``), clear for a limited one
(``0x7fff``). No port's P_Key table is that long, so an NCCL_IB_PKEY with it set is a key, not an index
(amd-agi/maxtext-slurm docs/ib-pkey-fix-report-en.md at f8645ca: ``pkeys/1 -> 0xf0dc (bit 15 = 1 -> full member)``,
and ``NCCL_IB_PKEY=0xf0dc`` made ``ibv_modify_qp`` fail)."""


def _failing_setting(run: NcclRun, fabric: str | None) -> str | None:
    """A setting the log shows that makes NCCL fail rather than slow down, named with its cause and fix, else ``None``:
    NCCL_IB_PKEY given a partition key (full-member bit :data:`PKEY_FULL_MEMBER_BIT` set) where NCCL takes an index into
    the port's P_Key table (signature ``ib-pkey-value-not-index``). Only where the fabric is InfiniBand/RoCE or
    unknown (NCCL_IB_PKEY means nothing to EFA)."""
    value = run.settings.get("NCCL_IB_PKEY")
    if value is None or (fabric is not None and fabric not in IB_VERBS_FABRICS):
        return None
    try:
        number = int(value, 0)  # NCCL parses it with strtoll(.., 0): 0x-prefixed hex is accepted
    except ValueError:
        return None
    if number < PKEY_FULL_MEMBER_BIT:
        return None
    return f"the log sets NCCL_IB_PKEY={value}. " + by_id("ib-pkey-value-not-index").text()


def _gpus_hidden_per_task(run: NcclRun) -> str | None:
    """What the device lines say when every rank of a node that runs several ranks sees its GPU as device 0 (each task
    was bound to one GPU; NVIDIA/nccl issue #1066, NVIDIA/nccl-tests issue #300), else ``None``. Ranks of one process
    (``-g N``) always number their GPUs 0..N-1, so they never look like this."""
    per_host: dict[str, list[int | None]] = {}
    for d in run.devices:
        per_host.setdefault(d.host, []).append(d.device)
    hosts = [h for h, devs in per_host.items() if len(devs) >= 2 and all(x == 0 for x in devs)]
    if not hosts or run.is_cpu:
        return None
    n = len(per_host[hosts[0]])
    return (f"the device lines show all {n} ranks of {hosts[0]}" + (f" (and {len(hosts) - 1} more host(s))"
                                                                     if len(hosts) > 1 else "")
            + " on 'device 0': each task was given only its own GPU")


def _tree_allowed(algo: str | None) -> bool:
    """Whether NCCL may pick the tree under the log's ``NCCL_ALGO`` (``None``: unset): a list naming it, or an
    exclusion list (``^...``) that does not (NCCL environment reference, NCCL_ALGO)."""
    if not algo:
        return True
    names = {a.split(":")[-1].strip().lower() for a in re.split(r"[,;]", algo.lstrip("^")) if a.strip()}
    return ("tree" not in names) if algo.startswith("^") else ("tree" in names)


def _transport(run: NcclRun, u: NetUsage, ctx: JudgeContext, r: JudgeResult, multi: bool, gpu_key: str | None,
               settings_cause: str = "") -> None:
    """Judge what the NCCL INFO lines say: socket transport on an RDMA fabric (fail), fewer NICs used than
    declared, GPUDirect RDMA missing on some node, GPU peer-to-peer through host memory (warn); log
    signatures that explain a run that finished (GPUDirect RDMA disabled) likewise. ``settings_cause``: the
    settings of the log that explain them (:func:`_settings`), named as the cause first."""
    fabric = ctx.fabric
    if fabric in RDMA_FABRICS and multi:
        fname = FABRIC_NAMES[fabric]
        via_socket = u.transports.get("NET/Socket", 0)
        socket = bool(via_socket) or "Socket" in run.networks or (run.net_provider in ("tcp", "sockets"))
        if run.net_plugin_missing and fabric == "efa" and not any(t != "NET/Socket" for t in u.net_transports):
            socket = True
        if socket:
            if via_socket:
                how = f"{via_socket} channel(s) 'via NET/Socket'"
            elif run.net_plugin_missing and fabric == "efa":
                how = "'NET/Plugin' found no plugin"
            else:
                how = "network 'Socket' in the NCCL INFO lines"
            r.degrade(Verdict.FAIL, f"NCCL used TCP sockets on an {fname} cluster ({how}). "
                      + (f"Likely cause: {settings_cause}" if settings_cause else _socket_cause(fabric)))
        declared = ctx.nics_per_node
        if u.nics_used and declared:
            used = {h: len(v) for h, v in u.nics_used.items()}
            fewest_host = min(used, key=used.__getitem__)
            fewest = used[fewest_host]
            pool = u.nics_listed if (u.nics_listed and fabric != "efa") else None
            avail = min(declared, pool) if pool else (declared if fabric != "efa" else None)
            if pool and pool < declared:
                names = ", ".join(u.nic_names.get(i, str(i)) for i in sorted(u.nic_names))
                r.degrade(Verdict.WARN, f"NCCL saw {pool} of the {declared} declared NICs ({names}), so inter-node bandwidth "
                                  f"is capped at {pool}/{declared} of the NIC rate. {by_id('nics-unused').text()}")
            elif avail and fewest < avail:
                names = ", ".join(u.nic_names.get(i, f"#{i}") for i in sorted(u.nics_used[fewest_host]))
                r.degrade(Verdict.WARN, f"{fewest} of {avail} NICs used on {fewest_host} (inter-node channels via {names}). "
                                  + by_id("nics-unused").text())
        if fabric == "efa" and u.nics_found is not None and declared and u.nics_found < declared:
            r.degrade(Verdict.WARN, f"the OFI plugin found {u.nics_found} of the {declared} declared EFA interfaces. "
                              + by_id("nics-unused").text())
        if fabric in IB_VERBS_FABRICS and u.gdr:
            without = [h for h, (w, wo) in u.gdr.items() if w == 0 and wo > 0]
            with_gdr = [h for h, (w, _) in u.gdr.items() if w > 0]
            if without and (with_gdr or "GPU Direct RDMA Disabled" in " ".join(run.log_lines)):
                r.degrade(Verdict.WARN, f"GPUDirect RDMA not used on {', '.join(sorted(without))} (its inter-node channels "
                                  "lack /GDRDMA). " + by_id("gdr-disabled").text())
        for sig, line in diagnose(run.log_lines, multi=True, fabric=fabric):
            if sig.id == "gdr-disabled" and not any("GPUDirect RDMA" in x for x in r.reasons):
                r.degrade(Verdict.WARN, f"the log says {line[line.find('GPU Direct'):][:80]!r}. " + sig.text())
    shm = u.transports.get("SHM", 0)
    if shm and not u.transports.get("P2P") and (_nvlink_gen(gpu_key) or multi is False):
        r.degrade(Verdict.WARN, f"{shm} intra-node channel(s) 'via SHM': GPUs of one node exchanged data through host "
                          "memory. " + by_id("p2p-through-host").text())


def _nvlink_gen(gpu_key: str | None) -> int:
    """NVLink generation of a catalog GPU (0 when unknown or PCIe-only); NVLS needs generation 4+."""
    if not gpu_key:
        return 0
    try:
        return int(catalog().gpu(gpu_key).nvlink_gen or 0)
    except KeyError:
        return 0


def _socket_cause(fabric: str) -> str:
    if fabric == "efa":
        return ("Likely cause: NCCL is not using the EFA provider: check the OFI plugin path (the aws-ofi-nccl "
                "directory, /opt/amazon/ofi-nccl/lib, and libfabric, /opt/amazon/efa/lib, must be on LD_LIBRARY_PATH "
                "inside the job); with NCCL_DEBUG=INFO the log must say 'Selected Provider is efa' "
                f"({doc_ref('socket-on-rdma')})")
    return ("Likely cause: NCCL fell back to TCP sockets instead of IB verbs: the job cannot open the HCAs. Pass the "
            "RDMA devices (/dev/infiniband), IPC_LOCK and memlock unlimited into the container, check NCCL_IB_HCA"
            + (" and NCCL_IB_GID_INDEX (RoCEv2)" if fabric == "roce" else "") + f" ({doc_ref('socket-on-rdma')})")


def _network_cause(fabric: str | None) -> str:
    extra = {
        "efa": "every EFA interface attached and up (`fi_info -p efa`), all nodes in one cluster placement group",
        "infiniband": "every HCA listed in NCCL_IB_HCA and at full link rate (`ibstat`), the subnet manager healthy",
        "roce": "every NIC in NCCL_IB_HCA at full rate, PFC/ECN on the RoCE priority (drops collapse RoCE)",
    }.get(fabric or "", "the NICs' link rate")
    return ("inter-node traffic below the NIC rate: check GPUDirect RDMA on every node (nvidia-peermem or DMA-BUF) "
            f"and {extra}")


def _low_cause(basis: str, fabric: str | None, multi: bool, usage: NetUsage | None = None,
               explained: bool = False, named: str = "") -> str:
    """The likely causes of low busbw. A single-node run gets only node-local causes; a multi-node run
    without NCCL INFO channel lines gets every cause the numbers allow, and the advice to rerun with them."""
    if basis == "threshold":
        return "Below the blueprint's validation.nccl.thresholds.min_busbw_gbps"
    if named:  # a setting of the log explains it (:func:`_settings`): named before any guess
        return f"Likely cause: {named}"
    local = by_id("xgmi-below-rate" if basis == "xgmi" else "nvlink-below-rate")
    if basis == "pcie":
        local_text = ("PCIe peer-to-peer goes through the CPU: check PCIe ACS and IOMMU translation on bare metal "
                      f"(iommu=pt) and `nvidia-smi topo -m` ({doc_ref(local.id)})")
    else:
        local_text = f"{local.cause}; {local.fix} ({doc_ref(local.id)})"
    if not multi:
        return f"Likely cause: {local_text}"
    net = by_id("network-below-rate")
    if explained:
        return "Likely cause: the transport named above"
    if usage is not None and usage.channel_lines:
        return (f"Likely cause: {_network_cause(fabric)} ({doc_ref(net.id)}); the NCCL INFO lines show "
                f"{', '.join(f'{k} x{v}' for k, v in usage.transports.items())}; if one node alone is slow too, "
                f"{local_text}")
    return (f"Possible causes (the log has no NCCL INFO channel lines to tell them apart): {net.cause}; or, if one "
            f"node alone is slow too, {local_text}. Fix: {net.fix} ({doc_ref(net.id)})")


def _check_ranks(run: NcclRun, ctx: JudgeContext, r: JudgeResult, ranks: int) -> None:
    if not run.devices or not ctx.gpus_per_node or max(d.rank for d in run.devices) + 1 > (run.ranks or 0):
        return  # no device lines, or only some of them (an excerpt): they say nothing about the nodes
    per_host: dict[str, int] = {}
    for d in run.devices:
        per_host[d.host] = per_host.get(d.host, 0) + 1
    most = max(per_host.values())
    if most > ctx.gpus_per_node:
        r.degrade(Verdict.WARN, f"{most} ranks on one node but the nodes have {ctx.gpus_per_node} GPUs: ranks share GPUs "
                          "(check the launcher's processes per node)")
    elif most < ctx.gpus_per_node:
        r.note(f"the run used {most} of {ctx.gpus_per_node} GPUs per node")
    if ctx.nodes and len(per_host) < ctx.nodes and not ctx.is_explicit("nodes"):
        r.note(f"the run used {len(per_host)} of the blueprint's {ctx.nodes} nodes")


class _Points:
    """The ``(size bytes, busbw GB/s)`` points of one placement of a run (:func:`iter_curve`), held in two arrays
    (16 bytes a point instead of some 120 for a list of tuples: a table may have hundreds of thousands of rows)."""

    def __init__(self, run: NcclRun, placement: str) -> None:
        self.sizes: array[int] | list[int] = array("q")
        self.bws = array("d")
        for size, bw in iter_curve(run, placement):
            try:
                self.sizes.append(size)
            except OverflowError:  # a size over 64 bits (hostile or broken output): keep Python integers
                self.sizes = [*self.sizes, size]
            self.bws.append(bw)

    def __len__(self) -> int:
        return len(self.bws)

    def __getitem__(self, i: int) -> tuple[int, float]:
        return self.sizes[i], self.bws[i]

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self.sizes, self.bws)


def _curve(run: NcclRun, r: JudgeResult, peak: float, th: NcclThresholds, cpu: bool = False) -> None:
    """Shape of the size curve per placement: isolated dips (note), cliffs (warn), collapse (warn/fail).

    For CPU (gloo) runs the anomalies are counted into one note: processes sharing a few cores
    make those curves irregular, and the GPU/fabric causes do not apply.
    """
    if cpu:
        probe = JudgeResult(source=r.source, kind=r.kind)
        _curve(run, probe, peak, th)
        n = len(probe.reasons) + sum("dips" in x for x in probe.notes)
        if n:
            r.note(f"the CPU curve is irregular ({n} dip(s) or drop(s) between sizes): expected for gloo processes "
                   "sharing a machine's cores; not judged")
        return
    floor = th.curve_floor_ratio * peak
    for placement in ("out-of-place", "in-place"):
        pts = _Points(run, placement)
        if len(pts) < 3:
            continue
        best = 0.0
        best_at = 0
        low: list[tuple[int, float, float, int]] = []  # (index, depth, best before, size of best)
        for i, (size, bw) in enumerate(pts):
            if best >= floor and best > 0 and bw < best * (1 - th.dip_ratio):
                low.append((i, 1 - bw / best, best, best_at))
            if bw > best:
                best, best_at = bw, size
        segs: list[list[tuple[int, float, float, int]]] = []
        for item in low:
            if segs and segs[-1][-1][0] == item[0] - 1:
                segs[-1].append(item)
            else:
                segs.append([item])
        for seg in segs:
            first, last = seg[0][0], seg[-1][0]
            depth = max(x[1] for x in seg)
            ref_bw, ref_size = seg[0][2], seg[0][3]
            lo_size = pts[first][0]
            end_size, end_bw = pts[last]
            recovered = last < len(pts) - 1
            if not recovered and ((len(seg) >= 2 and depth >= th.collapse_warn_ratio) or depth >= th.collapse_fail_ratio):
                cliff = by_id("busbw-cliff")
                msg = (f"{placement} busbw cliff from {fmt_bytes(lo_size)}: busbw collapses from {ref_bw:.4g} GB/s at "
                       f"{fmt_bytes(ref_size)} to {end_bw:.4g} GB/s at {fmt_bytes(end_size)} (-{pct(depth)}) and does "
                       f"not recover. {cliff.text()}")
                nccl_metrics(r).setdefault("cliff_start_bytes", lo_size)
                r.degrade(Verdict.FAIL if depth >= th.collapse_fail_ratio and len(seg) >= 2 else Verdict.WARN, msg)
            elif recovered and len(seg) >= 2 and depth >= th.cliff_ratio:
                msg = (f"{placement} mid-size cliff: busbw drops from {ref_bw:.4g} GB/s ({fmt_bytes(ref_size)}) to "
                       f"{min(pts[i][1] for i, *_ in seg):.4g} GB/s between {fmt_bytes(lo_size)} and {fmt_bytes(end_size)} "
                       f"(-{pct(depth)}) and recovers at {fmt_bytes(pts[last + 1][0])}. Likely cause: a poor "
                       "algorithm/protocol switch point (try NCCL_ALGO/NCCL_PROTO) or contention during the run")
                r.degrade(Verdict.WARN, msg)
            else:
                where = (f"at {fmt_bytes(lo_size)}" if first == last else f"from {fmt_bytes(lo_size)} to {fmt_bytes(end_size)}")
                tail = f", recovers at {fmt_bytes(pts[last + 1][0])}" if recovered else " (last size)"
                r.note(f"{placement} busbw dips {where}: {min(pts[i][1] for i, *_ in seg):.4g} GB/s vs {ref_bw:.4g} GB/s at "
                       f"{fmt_bytes(ref_size)} (-{depth * 100:.1f}%){tail}; isolated, noted only")

