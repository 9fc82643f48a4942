"""Parse nccl-tests output (text of every version, and ``-J`` JSON) into :class:`NcclRun` objects.

The built-in torch.distributed benchmark (:mod:`validate.payloads.collectives`) prints the same
table, so this module reads it too (its "Using devices" lines name ``cpu (gloo)`` on CPUs).

What the text parser copes with (all seen in the public outputs under ``tests/fixtures/nccl-tests``
or in the nccl-tests sources):

* pre-2.13 tables: no ``Group`` in Rank lines, ``error`` (max deviation) instead of ``#wrong``,
  no ``root`` column, all_gather without a ``redop`` column, broadcast with ``root`` instead of
  ``redop``, alltoall with a *blank* redop field;
* current tables: ``redop``/``root`` columns, ``#wrong`` counts printed with ``%g`` (so
  ``1.04858e+06``), ``N/A`` when correctness is not checked (``-c 0``), numbers squeezed into
  exponent form by ``getFloatStr``, per-iteration columns (``-I 1``), timestamps (``-S``);
* header lines with or without the leading ``#``;
* launcher prefixes: ``0: `` (``srun --label``), ``[1,0]<stdout>:`` (``mpirun --tag-output``),
  ``[0] ``, ``[pod/NAME/CONTAINER] `` (``kubectl logs --prefix``) and ISO timestamps;
* ``NCCL INFO``/``NCCL WARN`` lines inside the table (read for the network transport used);
* several runs in one file (one per header, per table header after a table, or per launcher
  stream), crash lines (``Test CUDA failure common.cu:1304 '...'``) and a non-MPI build launched
  as several processes (every process prints its own "Rank 0").

Units: sizes in bytes, time in microseconds, algbw/busbw in GB/s (1e9 bytes/s) as nccl-tests
prints them. Source of the formats: NVIDIA/nccl-tests src/util.cu and src/common.cu
(https://github.com/NVIDIA/nccl-tests/blob/master/src/util.cu).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from .bounds import (
    MAX_JSON_DEPTH,
    MAX_LINE_CHARS,
    JsonLimitError,
    clip_input,
    iter_lines,
    long_lines_note,
    note_unread,
    too_long,
)
from .bounds import loads as _bounded_loads

__all__ = [
    "COLLECTIVES",
    "FATAL_NCCL_WARN",
    "Device",
    "NcclRun",
    "NetUsage",
    "Placement",
    "Row",
    "Rows",
    "bus_factor",
    "iter_curve",
    "iter_values",
    "net_usage",
    "normalize_collective",
    "parse_nccl",
    "parse_nccl_json",
    "parse_nccl_lines",
    "parse_nccl_text",
]

COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
    "gather", "scatter", "hypercube",
)
"""Canonical collective names (the nccl-tests binary names without ``_perf``)."""

_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall", "alltoallv": "alltoall", "all2all": "alltoall", "send_recv": "sendrecv",
    "bcast": "broadcast",
}

TYPE_BYTES = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float": 4, "float32": 4,
    "double": 8, "float64": 8, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
"""Element size in bytes of the ``type`` column's data types (nccl-tests ``test_typenames``)."""


def normalize_collective(name: str | None) -> str | None:
    """``"all_reduce_perf"``, ``"./build/allreduce"``, ``"AllReduce"`` -> ``"all_reduce"``; unknown -> ``None``."""
    if not name:
        return None
    base = os.path.basename(name.strip()).lower()
    base = re.sub(r"(_perf)?(_mpi)?$", "", base)
    base = _ALIASES.get(base, base)
    return base if base in COLLECTIVES else None


def bus_factor(collective: str, nranks: int) -> float:
    """busbw / algbw for ``collective`` on ``nranks`` ranks (nccl-tests doc/PERFORMANCE.md).

    all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall, gather, scatter (n-1)/n;
    broadcast, reduce, sendrecv, hypercube 1. Raises ``ValueError`` for an unknown collective.
    """
    n = max(int(nranks), 1)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv", "hypercube"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


# ---------------------------------------------------------------------------------------------
# data model
# ---------------------------------------------------------------------------------------------


@dataclass
class Placement:
    """One placement (out-of-place or in-place) of a table row.

    ``time_us`` microseconds; ``algbw_gbps``/``busbw_gbps`` GB/s (1e9 bytes/s); ``wrong`` the
    ``#wrong`` count (``None`` when printed ``N/A``, i.e. not checked, or for the old ``error``
    column); ``max_error`` the old ``error`` column's max deviation (pre-2.13), else ``None``.
    """

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: float | None
    max_error: float | None = None


@dataclass
class Row:
    """One size of the table. ``redop`` is ``""`` for a blank field, ``None`` when the column is absent."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Placement | None
    in_place: Placement | None
    line: int = 0

    @property
    def placements(self) -> list[tuple[str, Placement]]:
        """``[("out-of-place", p), ("in-place", p)]`` for the placements present."""
        out = []
        if self.out_of_place is not None:
            out.append(("out-of-place", self.out_of_place))
        if self.in_place is not None:
            out.append(("in-place", self.in_place))
        return out

    @property
    def busbw_gbps(self) -> float | None:
        """The better busbw of the two placements (GB/s), ``None`` when neither printed one."""
        vals = [p.busbw_gbps for _, p in self.placements if p.busbw_gbps is not None]
        return max(vals) if vals else None

    @property
    def algbw_gbps(self) -> float | None:
        """The better algbw of the two placements (GB/s)."""
        vals = [p.algbw_gbps for _, p in self.placements if p.algbw_gbps is not None]
        return max(vals) if vals else None

    @property
    def wrong(self) -> float | None:
        """Sum of ``#wrong`` over the placements; ``None`` when no placement was checked."""
        vals = [p.wrong for _, p in self.placements if p.wrong is not None]
        return sum(vals) if vals else None


_FIELDS = ("time_us", "algbw_gbps", "busbw_gbps", "wrong", "max_error")
_PLACEMENTS = ("out-of-place", "in-place")
_NAN = float("nan")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_PlacementValues = tuple[float | None, float | None, float | None, float | None, float | None]
_NONE5: _PlacementValues = (None, None, None, None, None)


class Rows(Sequence[Row]):
    """The rows of one table, stored by column: about 110 bytes a row instead of some 700 for :class:`Row`
    objects, so a table of hundreds of thousands of sizes (a linear ``-i`` sweep) costs memory of the
    order of its text. A sequence of :class:`Row` (each made when it is read; equal to a list of the
    same rows); :meth:`sizes`, :meth:`values` and :meth:`peak` read whole columns without making rows.
    Units as in :class:`Row` and :class:`Placement`.
    """

    __slots__ = ("_big", "_ints", "_shape", "_shape_ids", "_shapes", "_vals")

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        self._ints = array("q")      # size_bytes, count, line of each row
        self._vals = array("d")      # the 5 fields (_FIELDS) of out-of-place then in-place; NaN: None
        self._shape = array("I")     # index into _shapes
        self._shapes: list[tuple[str, str | None, int | None, bool, bool]] = []  # dtype, redop, root, has oop, has ip
        self._shape_ids: dict[tuple[str, str | None, int | None, bool, bool], int] = {}
        self._big: dict[int, Row] = {}  # rows whose integers do not fit 64 bits, kept whole
        for r in rows:
            self.append(r)

    def add(self, size: int, count: int, dtype: str, redop: str | None, root: int | None,
            oop: _PlacementValues | None, ip: _PlacementValues | None, line: int = 0) -> None:
        """Append a row given as values: ``oop`` / ``ip`` are the placements' ``(time_us, algbw_gbps,
        busbw_gbps, wrong, max_error)`` (``None``: the placement is absent)."""
        lo, hi = _INT64
        if not (lo <= size <= hi and lo <= count <= hi and lo <= line <= hi):
            self._big[len(self._shape)] = Row(size, count, dtype, redop, root,
                                              Placement(*oop) if oop is not None else None,
                                              Placement(*ip) if ip is not None else None, line)
            size = count = line = 0
        key = (dtype, redop, root, oop is not None, ip is not None)
        sid = self._shape_ids.get(key)
        if sid is None:
            sid = self._shape_ids[key] = len(self._shapes)
            self._shapes.append(key)
        self._ints.extend((size, count, line))
        nan = _NAN
        self._vals.extend([nan if v is None else v for v in (oop or _NONE5) + (ip or _NONE5)])
        self._shape.append(sid)

    def append(self, row: Row) -> None:
        """Append ``row``."""
        def vals(p: Placement | None) -> _PlacementValues | None:
            return None if p is None else (p.time_us, p.algbw_gbps, p.busbw_gbps, p.wrong, p.max_error)
        self.add(row.size_bytes, row.count, row.dtype, row.redop, row.root, vals(row.out_of_place),
                 vals(row.in_place), row.line)

    def __len__(self) -> int:
        return len(self._shape)

    def _row(self, i: int) -> Row:
        big = self._big.get(i)
        if big is not None:
            return big
        dtype, redop, root, has_oop, has_ip = self._shapes[self._shape[i]]
        v = self._vals[10 * i: 10 * i + 10]
        vs = [None if _isnan(x) else x for x in v]
        return Row(self._ints[3 * i], self._ints[3 * i + 1], dtype, redop, root,
                   Placement(*vs[:5]) if has_oop else None, Placement(*vs[5:]) if has_ip else None,
                   self._ints[3 * i + 2])

    @overload
    def __getitem__(self, i: int) -> Row: ...

    @overload
    def __getitem__(self, i: slice) -> list[Row]: ...

    def __getitem__(self, i: int | slice) -> Row | list[Row]:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row index out of range")
        return self._row(i)

    def __iter__(self) -> Iterator[Row]:
        return (self._row(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({list(self)!r})" if len(self) <= 8 else f"Rows(<{len(self)} rows>)"

    def _col(self, name: str, placement: str) -> array[float]:
        """Field ``name`` of ``placement`` of every row as an array, NaN where :meth:`values` has ``None``."""
        pi = _PLACEMENTS.index(placement)
        col = self._vals[pi * 5 + _FIELDS.index(name)::10]
        absent = {k for k, s in enumerate(self._shapes) if not s[3 + pi]}
        if absent:
            for i, sid in enumerate(self._shape):
                if sid in absent:
                    col[i] = _NAN
        for i, r in self._big.items():
            p = r.out_of_place if pi == 0 else r.in_place
            v = getattr(p, name) if p is not None else None
            col[i] = _NAN if v is None else v
        return col

    def _size(self, i: int) -> int:
        big = self._big.get(i)
        return big.size_bytes if big is not None else self._ints[3 * i]

    def sizes(self) -> list[int]:
        """``size_bytes`` of every row, in order."""
        out = list(self._ints[0::3])
        for i, r in self._big.items():
            out[i] = r.size_bytes
        return out

    def values(self, name: str, placement: str) -> list[float | None]:
        """Field ``name`` (one of ``time_us``, ``algbw_gbps``, ``busbw_gbps``, ``wrong``, ``max_error``) of
        ``placement`` (``out-of-place`` / ``in-place``) of every row, in order; ``None`` where the row has no
        such placement or it printed no value. Raises ``ValueError`` for another name or placement."""
        return [x if -_INF <= x <= _INF else None for x in self._col(name, placement)]  # NaN: None

    def distinct(self, name: str) -> set[Any]:
        """The distinct values of ``dtype``, ``redop`` or ``root`` among the rows. Raises ``ValueError`` for
        another name."""
        k = ("dtype", "redop", "root").index(name)
        return {s[k] for s in self._shapes}

    def peak(self) -> tuple[float, int, str] | None:
        """``(busbw GB/s, size bytes, placement)`` of the highest busbw (the first row and placement on a tie),
        or ``None`` when no row printed one."""
        best: tuple[float, int] | None = None  # (busbw, 2 x row + placement)
        for k, pl in enumerate(_PLACEMENTS):
            for i, v in enumerate(self._col("busbw_gbps", pl)):
                if not _isnan(v) and (best is None or v > best[0] or (v == best[0] and 2 * i + k < best[1])):
                    best = (v, 2 * i + k)
        if best is None:
            return None
        return best[0], self[best[1] // 2].size_bytes, _PLACEMENTS[best[1] % 2]


@dataclass
class Device:
    """One "Using devices" line: ``Rank 3 Group 0 Pid 46 on node-1 device 3 [0x54] NVIDIA A100-SXM4-40GB``."""

    rank: int
    host: str
    device: int | None
    name: str
    pid: int | None = None
    group: int | None = None
    bus_id: str | None = None


@dataclass
class NcclRun:
    """One collective benchmark run (one table) and everything its output says about itself.

    ``collective`` is the canonical name when the output names it (``collective_from`` says how:
    ``header``, ``command line``, ``json args``, ``filename``) or when the columns and the
    busbw/algbw ratio pin it down (``columns``); ``candidates`` lists the possibilities when they
    do not (e.g. ``["all_gather", "alltoall"]`` for a current-format table with redop ``none``).
    ``errors`` are fatal lines (crash, CUDA/NCCL failure, timeout), deduplicated, in order;
    ``networks`` the NCCL network transports named in ``NCCL INFO`` lines (``Socket``, ``IB``,
    ``AWS Libfabric`` ...); ``duplicated_rank0`` is set when several processes each printed their
    own rank 0 (a non-MPI nccl-tests build launched as N processes); ``log_lines`` every line of
    the run's output that is not part of the table or its header (``NCCL INFO``/``NCCL WARN``
    lines, error lines, launcher messages; at most :data:`MAX_LOG_LINES`), which the judge reads
    for failure signatures and :func:`net_usage` for the transport and NICs of each channel;
    ``settings`` the environment the log shows the run was given (``NCCL_*``, ``RCCL_*``, ``FI_*`` and the
    ``*_VISIBLE_DEVICES`` variables: ``NAME=value`` on a command line, ``mpirun -x``, ``export``, and NCCL's own
    ``NAME set by environment to value`` INFO lines), the last value seen before and during the run; ``tool``
    is ``nccl-tests``, ``rccl-tests`` (AMD's fork, which prints ``rccl-tests: Version`` and ``RCCL version``)
    or ``torch``.
    """

    index: int = 0
    fmt: str = "text"
    tool: str = "nccl-tests"
    version: str | None = None
    backend: str | None = None
    collective: str | None = None
    collective_from: str | None = None
    candidates: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: Rows = field(default_factory=Rows)
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbps: float | None = None
    avg_busbw_check: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    net_provider: str | None = None
    net_plugin_missing: bool = False
    duplicated_rank0: bool = False
    duplicate_streams: int = 0
    concluded: bool = False
    truncated: bool = False
    first_line: int = 0
    format_notes: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list, repr=False)
    settings: dict[str, str] = field(default_factory=dict)
    nccl_version: str | None = None
    """The NCCL release the run used, from the tool's own output: nccl-tests' ``nccl-library=<code>`` (the loaded
    library's ``ncclGetVersion``), NCCL's ``NCCL version X.Y.Z+cudaA.B`` line (``NCCL_DEBUG=VERSION`` or ``INFO``), or
    the ``-J`` JSON's ``nccl_version``; ``X.Y.Z`` (``None``: the output does not say)."""
    nccl_cuda: str | None = None
    """The CUDA of that NCCL build (``A.B`` of ``+cudaA.B``) when NCCL's own version line names it."""
    stage: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rows, Rows):
            self.rows = Rows(self.rows)

    # ---- derived facts -----------------------------------------------------------------------
    @property
    def ranks(self) -> int | None:
        """Number of ranks listed under "Using devices" (``None`` when the header is missing)."""
        return len({d.rank for d in self.devices}) or None

    @property
    def hosts(self) -> list[str]:
        """Distinct host names of the ranks, in rank order."""
        seen: dict[str, None] = {}
        for d in sorted(self.devices, key=lambda d: d.rank):
            seen.setdefault(d.host, None)
        return list(seen)

    @property
    def nodes(self) -> int | None:
        """Number of distinct hosts in the "Using devices" lines (``None`` without them)."""
        return len(self.hosts) or None

    @property
    def device_name(self) -> str | None:
        """The most common device name (``"NVIDIA A100-SXM4-40GB"``, ``"cpu (gloo)"``), or ``None``."""
        names = Counter(d.name for d in self.devices if d.name)
        return names.most_common(1)[0][0] if names else None

    @property
    def is_cpu(self) -> bool:
        """True for a CPU measurement (the torch benchmark on gloo: device ``cpu (gloo)``)."""
        name = (self.device_name or "").lower()
        return self.backend == "gloo" or name.startswith("cpu") or "gloo" in name

    @property
    def checked(self) -> bool | None:
        """Whether correctness was checked: ``False`` when every ``#wrong`` is ``N/A`` (or ``validation: 0``)."""
        if not self.rows:
            return None
        if any(not _isnan(v) for pl in _PLACEMENTS for v in self.rows._col("wrong", pl)):  # NaN: not checked
            return True
        return bool(self.config.get("validation") == 1 and "error" in self.columns)

    @property
    def wrong_total(self) -> float | None:
        """Sum of ``#wrong`` over all rows and placements; ``None`` when nothing was checked."""
        oop, ip = self.rows._col("wrong", "out-of-place"), self.rows._col("wrong", "in-place")
        vals = [(0 if _isnan(a) else a) + (0 if _isnan(b) else b) for a, b in zip(oop, ip) if not (_isnan(a) and _isnan(b))]
        return sum(vals) if vals else None

    def peak(self) -> tuple[float, int, str] | None:
        """``(busbw GB/s, size bytes, placement)`` of the highest busbw in the table, or ``None``."""
        return self.rows.peak()

    def inferred_ranks(self) -> int | None:
        """Ranks recovered from the table when the header is missing.

        Per-rank-count collectives (all_gather, reduce_scatter, alltoall): size = count x typesize
        x n exactly. all_reduce (and the ``(n-1)/n`` collectives): busbw / algbw = 2(n-1)/n (resp.
        (n-1)/n), so ``n`` is the one rank count whose factor reproduces every printed busbw from
        its algbw within the printing precision (nccl-tests prints 6 characters: 2 decimals below
        1000 GB/s, 1 below 10,000). ``None`` when no row or more than one rank count fits.
        """
        coll = self.collective
        per_rank = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
        if coll is None and self.candidates and all(c in per_rank for c in self.candidates):
            coll = self.candidates[0]  # the same size/count and busbw/algbw relations hold for every candidate
        for r in reversed(self.rows):
            ts = TYPE_BYTES.get(r.dtype.lower())
            if ts and r.count > 0 and coll in per_rank:
                q = r.size_bytes / (r.count * ts)
                if q >= 2 and abs(q - round(q)) < 1e-9:
                    return round(q)
        if coll == "all_reduce":
            def fac(n: int) -> float:
                return 2.0 * (n - 1) / n
        elif coll in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
            def fac(n: int) -> float:
                return (n - 1) / n
        else:
            return None
        pts = [(alg, bus) for pl in _PLACEMENTS
               for alg, bus in zip(self.rows.values("algbw_gbps", pl), self.rows.values("busbw_gbps", pl))
               if alg and bus and alg >= 0.05]
        if not pts:
            return None
        pts.sort(reverse=True)
        pts = pts[:64]

        def tol(v: float) -> float:
            return 0.005 if v < 1000 else (0.05 if v < 10000 else 0.5)

        fits = []
        for n in range(2, 4097):
            f = fac(n)
            if all(abs(bus - alg * f) <= tol(alg) * f + tol(bus) + 1e-9 for alg, bus in pts):
                fits.append(n)
                if len(fits) > 1:
                    return None
        return fits[0] if fits else None

    @property
    def label(self) -> str:
        """Short human name: ``"all_reduce #2"`` style (collective or ``"collective"``)."""
        what = self.collective or (" or ".join(self.candidates) if self.candidates else "collective")
        return what


# ---------------------------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------------------------

_PREFIXES = [
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s"),  # kubectl --timestamps
    re.compile(r"^\[pod/[^\]]+\]\s?"),                                             # kubectl logs --prefix
]
_STREAM_PREFIXES = [
    re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?"),   # mpirun --tag-output: [jobid,rank]<stdout>:
    re.compile(r"^\s*(\d+):\s"),                              # srun --label: "0: "
    re.compile(r"^\[(\d+)\]\s"),                               # inline "[0] "
]

# Every pattern below runs in time linear in the line: no two adjacent quantifiers can share
# characters (``\s*:?\s+`` is written ``(?:\s*+:\s++|\s++)``), a trailing ``(.*?)\s*$`` is ``(.*)$``
# stripped afterwards, and ``X.*Y`` searched in a line is ``X(?:(?!X).)*Y`` (each character is scanned
# from one X only). Lines longer than bounds.MAX_LINE_CHARS never reach them.
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([A-Za-z_][\w]*)(?:\s+(.*))?$")
_NA = {"n/a", "nan", "-nan", "inf", "-inf", "+inf"}
_RANK = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(-?\d+)(?:\s*+(\[[^\]]*\]))?(.*)$"
)
_VERSION = re.compile(r"(?:nccl-tests|benchmark)\s+version\s+(\S+)", re.IGNORECASE)
_LIBRARY = re.compile(r"\bnccl-library=(\d+)")
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")


def nccl_version_from_code(code: int) -> str:
    """``NCCL_VERSION_CODE`` -> ``X.Y.Z``: ``X*10000 + Y*100 + Z`` from 2.9 on, ``X*1000 + Y*100 + Z`` before
    (nccl.h's ``NCCL_VERSION`` macro, https://github.com/NVIDIA/nccl/blob/master/src/nccl.h.in); 22809 -> 2.28.9."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
_BACKEND = re.compile(r"\bbackend[:=\s]+(gloo|nccl|mpi|ucc)\b", re.IGNORECASE)
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"Collective test concluded:\s*(\S+)")
_NTHREAD = re.compile(r"^nThread\s+\d+\s+nGpus\s+\d+")
_CONFIG_KEYS = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|warmup iters|agg iters|iters|validation|graph|unalign)(?:\s*+:\s++|\s++)(-?\d+)"
)
_STEP = re.compile(r"step:\s*(\d+)\((factor|bytes)\)")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?", re.IGNORECASE)
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?", re.IGNORECASE)
_COMMAND = re.compile(
    r"\b(all_reduce|all_gather|alltoallv?|reduce_scatter|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf(?:_mpi)?\b"
)
_FATAL = re.compile(
    r"Test (?:CUDA |NCCL )?failure|\bTest timeout\b|^\s*+#?\s*+error:|Invalid number of GPUs|Segmentation fault"
    r"|\bBus error\b|exited on signal|srun: error:|\*\*\* Process received signal|\bout of memory\b"
    r"|\bMPI_ABORT\b|terminate called|Aborted \(core dumped\)|^\w*(?:Error|Exception): "
    r"|collectives: (?:(?!collectives: ).)*failed"
    r"|Timed out|timed out after|\bkilled\b(?:(?!\bkilled\b).)*\bsignal\b|^Killed$",
    re.IGNORECASE,
)
FATAL_NCCL_WARN = re.compile(
    r"Duplicate GPU detected|Multiple Ranks are using the same GPU|has been set to \"1\" and communicator has multiple ranks"
    r"|ibv_modify_qp failed with -?\d"
)
"""NCCL WARN messages NCCL follows with an error return, so a log that holds one failed whatever else it printed: at
communicator init ``Duplicate GPU detected`` (since 2.5), ``Multiple Ranks are using the same GPU/Partition`` and
``NCCL_NVLS_ENABLE has been set to "1" ...`` (``ncclInvalidUsage``; src/init.cc, src/transport/nvls.cc of 2.31), and
``Call to ibv_modify_qp failed with <errno>`` once its retries are spent (``ncclSystemError``; src/misc/ibvwrap.cc: the
retries themselves are INFO lines). Read as errors as well as warnings, so a log of these lines alone is a crash with its
cause; outside NCCL's own prefixed lines (an excerpt quoting the message) they count as error lines too."""

MAX_LOG_LINES = 20000
"""At most this many non-table lines are kept per run (a full NCCL_DEBUG=INFO log of a large job is
longer; the signatures and channel lines come early, at communicator setup). The launcher streams after
the first (``[1,N]<stdout>:`` of the other ranks) keep at most 3 x this many between them, so a log of
thousands of ranks is read in memory flat in its size."""

_SETTING = re.compile(
    r"(?<![\w-])((?:NCCL|RCCL|FI)_[A-Z0-9_]+|CUDA_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES)"
    r"=(\"[^\"]*\"|'[^']*'|[^\s\"';]*)"
)
_SET_BY_ENV = re.compile(r"\b((?:NCCL|RCCL)_[A-Z0-9_]+) set by environment to ([^\s.]*)")
_RCCL = re.compile(r"^(?:rccl-tests\b|RCCL version\s*:)", re.IGNORECASE)
_NCCL_WARN = re.compile(r"NCCL WARN\s+(.*)$")
_USING_NETWORK = re.compile(r"NCCL INFO\s+Using network\s+(.+)$")
_VIA_NET = re.compile(r"via NET/([^/\s]+(?: [^/\s]+)?)/")
_PLUGIN_MISSING = re.compile(r"NET/Plugin(?:(?!NET/Plugin).)*(no plugin|not found|could not|failed to|unable to)",
                             re.IGNORECASE)
_PROVIDER = re.compile(r"Selected Provider is (\w+)", re.IGNORECASE)


def _strip_prefix(line: str) -> tuple[str | None, str]:
    """Remove launcher/log prefixes; return ``(stream id or None, content)``."""
    for p in _PREFIXES:
        line = p.sub("", line, count=1)
    stream = None
    for p in _STREAM_PREFIXES:
        m = p.match(line)
        if m:
            stream = m.group(1)
            line = line[m.end():]
            for q in _PREFIXES:
                line = q.sub("", line, count=1)
            break
    return stream, line


_LINE_START = (r"(?=\s*(?:#|\d+\s+\d+\s+[A-Za-z]|[\w.\-]+:\d+:\d+ \[\d+\] NCCL|nThread|Using devices|Rank\s+\d"
               r"|[\w.\-]+: Test |\.\. ))")
_MID_TAGS = re.compile(
    r"\[\d+,(?P<mpi>\d+)\]<(?:stdout|stderr)>:\s?"                      # mpirun --tag-output, anywhere
    r"|(?<![\w:\[/.\-])(?P<srun>\d+): " + _LINE_START +                 # srun --label
    r"|(?<![\w:/.\-])\[(?P<br>\d+)\] " + _LINE_START                   # "[0] "
)
_MID_TAG_HINT = re.compile(r"\]<std|\d: |\d\] ")


def _split_interleaved(stream: str | None, line: str) -> list[tuple[str | None, str]]:
    """Split a line at launcher tags that appear inside it (output of several ranks interleaved).

    ``"   1048576  262144  float  sum  -1[1,1]<stdout>:node-2:7:7 [1] NCCL INFO x"`` ->
    ``[(stream, "   1048576  262144  float  sum  -1"), ("1", "node-2:7:7 [1] NCCL INFO x")]``.
    An ``N: `` or ``[N] `` tag counts only where a known line start follows it (a table row,
    ``#``, an NCCL log line, a Rank line), so numbers inside text are not taken for tags.
    """
    out: list[tuple[str | None, str]] = []
    pos = 0
    cur = stream
    for m in _MID_TAGS.finditer(line):
        if m.start() == 0 and not out and pos == 0:
            cur = m.group("mpi") or m.group("srun") or m.group("br")
            pos = m.end()
            continue
        out.append((cur, line[pos:m.start()]))
        cur = m.group("mpi") or m.group("srun") or m.group("br")
        pos = m.end()
    out.append((cur, line[pos:]))
    return out


def _rejoin(stream: str, line: str) -> str:
    """``line`` of launcher stream ``stream`` without the same stream's ``[N]`` tags glued to the text inside it: a
    launcher that tags every write (``mpirun --tag-output``-style ``[0]``) splits a row printed in several writes, and
    an excerpt joins the pieces back as ``... sum  -1[0]    1626.5 ...`` (NVIDIA/nccl issue #1453); the tag becomes the
    blank it replaced. Tags of other streams are left for :func:`_split_interleaved`."""
    tag = f"[{stream}]"
    if tag not in line:
        return line
    return re.sub(r"(?<=\S)" + re.escape(tag) + r"(?=\s)", " ", line)


_MISSING = object()


def _num(tok: str) -> float | None:
    """A printed number (``"1.0e+04"``, ``"-1"``) as float; ``N/A``/``nan`` -> ``None``.

    Raises ``ValueError`` for anything else."""
    try:
        v = float(tok)
    except ValueError:
        if tok.lower() in _NA:
            return None
        raise
    return None if math.isnan(v) or math.isinf(v) else v


_INF = math.inf
_isnan = math.isnan


def _convs(toks: list[str]) -> list[Any]:
    """Each token of a table row as :func:`_num` reads it, ``_MISSING`` where it raises (one pass over the row)."""
    out: list[Any] = []
    for t in toks:
        try:
            v = float(t)
        except ValueError:
            out.append(None if t.lower() in _NA else _MISSING)
            continue
        out.append(v if -_INF < v < _INF else None)
    return out


_TIMESTAMP_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_TIMESTAMP_TIME = re.compile(r"^\d\d:\d\d:\d\d$")


def _placement(names: tuple[str, ...], vals: list[Any]) -> _PlacementValues | None:
    """A placement's ``(time_us, algbw_gbps, busbw_gbps, wrong, max_error)`` from its columns' values."""
    if not vals:
        return None
    n = len(vals)
    a, b, c, d, e = _field_index(names)
    return (vals[a] if 0 <= a < n else None, vals[b] if 0 <= b < n else None, vals[c] if 0 <= c < n else None,
            vals[d] if 0 <= d < n else None, vals[e] if 0 <= e < n else None)


@functools.lru_cache(maxsize=64)
def _field_index(names: tuple[str, ...]) -> tuple[int, ...]:
    """Where each of :data:`_FIELDS` is among a placement's column ``names`` (the last of a repeated name,
    ``time`` before ``cputime``, ``#wrong`` before ``wrong``); -1 when absent."""
    last = {c: i for i, c in enumerate(names)}

    def at(*cands: str) -> int:
        return next((last[c] for c in cands if c in last), -1)
    return (at("time", "cputime"), at("algbw"), at("busbw"), at("#wrong", "wrong"), at("error"))


_DEFAULT_GROUP = ("time", "algbw", "busbw", "#wrong")


@functools.lru_cache(maxsize=64)
def _split_columns(columns: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Header columns after ``type`` -> (leading [redop/root], oop group names, ip group names)."""
    lead: list[str] = []
    i = 0
    while i < len(columns) and columns[i] in ("redop", "root"):
        lead.append(columns[i])
        i += 1
    rest = [c for c in columns[i:] if c != "timestamp"]
    starts = [j for j, c in enumerate(rest) if c in ("time", "cputime")]
    if len(starts) >= 2:
        return tuple(lead), tuple(rest[starts[0]:starts[1]]), tuple(rest[starts[1]:])
    if len(starts) == 1:
        return tuple(lead), tuple(rest[starts[0]:]), ()
    return tuple(lead), _DEFAULT_GROUP, _DEFAULT_GROUP


_RowValues = tuple[int, int, str, str | None, int | None, _PlacementValues | None, _PlacementValues | None]


def _row_values(m: re.Match[str], columns: list[str]) -> _RowValues | None:
    """A table row given the header columns after ``type`` (may be empty: heuristics) as values for :meth:`Rows.add`
    (no objects made), ``None`` when the line is no row."""
    size, count, dtype = int(m.group(1)), int(m.group(2)), m.group(3)
    toks = (m.group(4) or "").split()
    if len(toks) >= 2 and _TIMESTAMP_DATE.match(toks[-2]) and _TIMESTAMP_TIME.match(toks[-1]):
        toks = toks[:-2]
    if columns:
        lead, g_oop, g_ip = _split_columns(tuple(columns))
    else:
        lead, g_oop, g_ip = (), _DEFAULT_GROUP, _DEFAULT_GROUP
    vals = _convs(toks)
    # leading tokens: at most one alphabetic redop name, then numbers only
    nlead = 0
    while nlead < len(vals) and vals[nlead] is _MISSING:
        nlead += 1
    if nlead > 1:
        return None
    numeric = vals[nlead:]
    if any(v is _MISSING for v in numeric):
        return None
    redop: str | None = None
    root: int | None = None
    if nlead == 1:
        redop = toks[0]
    elif "redop" in lead:
        redop = ""  # blank redop field (old alltoall)
    width = len(g_oop) + len(g_ip)
    n_root = 1 if ("root" in lead or (not columns and len(numeric) in (width + 1, len(g_ip) + 1))) else 0
    if n_root:
        if not numeric or numeric[0] is None:
            return None
        root = int(numeric[0])
        numeric = numeric[1:]
    if len(numeric) == width:
        return (size, count, dtype, redop, root, _placement(g_oop, numeric[: len(g_oop)]),
                _placement(g_ip, numeric[len(g_oop):]) if g_ip else None)
    if g_ip and len(numeric) == len(g_ip):
        # trace replay prints the out-of-place half blank: in-place only
        return (size, count, dtype, redop, root, None, _placement(g_ip, numeric))
    return None


class _StreamParser:
    """State machine over the lines of one output stream (one process / launcher prefix)."""

    # stages: 0 version, 1 collective starting, 2 nThread, 3 devices, 4 table header, 5 rows, 6 footer
    def __init__(self, shared_log: list[int] | None = None) -> None:
        self.shared_log = shared_log  # [lines the streams sharing it may still keep], None: only MAX_LOG_LINES
        self.runs: list[NcclRun] = []
        self.cur: NcclRun | None = None
        self.orphan_errors: list[str] = []
        self.orphan_warnings: list[str] = []
        self.orphan_networks: list[str] = []
        self.orphan_provider: str | None = None
        self.orphan_plugin_missing = False
        self.orphan_log: list[str] = []
        self.pending_collective: str | None = None
        self.pending_version: str | None = None
        self.pending_backend: str | None = None
        self.pending_tool: str | None = None
        self.settings: dict[str, str] = {}  # every setting seen so far in this stream (a new run starts with them)
        self.first_line = 0
        self.ranks_seen: dict[int, set[int]] = {}  # id of a run -> ranks of its Rank lines

    def _new(self, lineno: int) -> NcclRun:
        run = NcclRun(first_line=lineno, settings=dict(self.settings))
        if self.pending_tool:
            run.tool = self.pending_tool
        if self.pending_collective:
            run.collective, run.collective_from = self.pending_collective, "command line"
            self.pending_collective = None
        self.runs.append(run)
        self.cur = run
        return run

    def _at(self, stage: int, lineno: int) -> NcclRun:
        cur = self.cur
        if cur is None or cur.stage >= stage:
            cur = self._new(lineno)
        cur.stage = stage
        return cur

    def feed(self, lineno: int, line: str) -> None:
        s = line.strip()
        if not s:
            return
        m = _ROW.match(s)
        if m and not s.startswith("#"):
            cur = self.cur
            if cur is None or cur.stage > 5:
                cur = self._new(lineno)
            row = _row_values(m, cur.columns)
            if row is not None:
                cur.stage = 5
                cur.rows.add(*row, line=lineno)
                return
        h = s.lstrip("#").strip()
        if not h:
            return
        if "_" in h and ("=" in h or " set by environment " in h) and "NCCL WARN" not in h:
            self._settings(h)  # a WARN line quotes settings (`Set NCCL_MULTI_RANK_GPU_ENABLE=1 to ...`), never sets one
        if _RCCL.match(h):
            self.pending_tool = "rccl-tests"
            if self.cur is not None:
                self.cur.tool = "rccl-tests"
            self._log(h)
            return
        if "NCCL INFO" in h or "NCCL WARN" in h:
            self._nccl_line(h)
            return
        vm = _VERSION.search(h)
        if vm and h.startswith(("nccl-tests", "clusterforge")):
            run = self._at(0, lineno)
            run.version = vm.group(1)
            lm = _LIBRARY.search(h)
            if lm:
                run.nccl_version = nccl_version_from_code(int(lm.group(1)))
            if h.startswith("clusterforge"):
                run.tool = "torch"
            bm = _BACKEND.search(h)
            if bm:
                run.backend = bm.group(1).lower()
            return
        sm = _STARTING.search(h)
        if sm:
            run = self._at(1, lineno)
            coll = normalize_collective(sm.group(1))
            if coll:
                run.collective, run.collective_from = coll, "header"
            return
        if _NTHREAD.match(h):
            run = self._at(2, lineno)
            for key, val in _CONFIG_KEYS.findall(h):
                run.config[key.replace(" ", "_")] = int(val)
            st = _STEP.search(h)
            if st:
                run.config["step_" + st.group(2)] = int(st.group(1))
            return
        if h.startswith("Using devices"):
            cur = self.cur
            if cur is None or cur.stage > 3:
                cur = self._new(lineno)
            cur.stage = 3
            return
        rm = _RANK.match(h)
        if rm:
            rank = int(rm.group(1))
            cur = self.cur
            if cur is None or cur.stage > 3:
                cur = self._new(lineno)
            cur.stage = 3
            ranks = self.ranks_seen.setdefault(id(cur), set())
            if rank in ranks:
                cur.duplicated_rank0 = cur.duplicated_rank0 or rank == 0
                return
            ranks.add(rank)
            cur.devices.append(Device(
                rank=rank, group=int(rm.group(2)) if rm.group(2) else None, pid=int(rm.group(3)),
                host=rm.group(4), device=int(rm.group(5)), bus_id=(rm.group(6) or "").strip("[]") or None,
                name=rm.group(7).strip(),
            ))
            low = rm.group(7).lower()
            if "gloo" in low:
                cur.backend = cur.backend or "gloo"
            return
        toks = h.split()
        if len(toks) >= 3 and toks[0] == "size" and toks[1] == "count" and toks[2] == "type":
            run = self._at(4, lineno)
            run.columns = toks[3:]
            if "error" in run.columns:
                run.format_notes.append("pre-2.13 table: `error` column (max deviation) instead of `#wrong`")
            return
        if toks and toks[0] in ("(B)", "out-of-place"):
            return
        om = _OOB.search(h)
        if om and self.cur is not None:
            self.cur.out_of_bounds = int(om.group(1))
            self.cur.out_of_bounds_ok = None if om.group(2) is None else om.group(2).upper() == "OK"
            self.cur.stage = max(self.cur.stage, 6)
            return
        am = _AVG.search(h)
        if am and self.cur is not None:
            try:
                self.cur.avg_busbw_gbps = _num(am.group(1))
            except ValueError:
                self.cur.avg_busbw_gbps = None
            self.cur.avg_busbw_check = am.group(2).upper() if am.group(2) else None
            self.cur.stage = max(self.cur.stage, 6)
            return
        cm = _CONCLUDED.search(h)
        if cm and self.cur is not None:
            self.cur.concluded = True
            self.cur.stage = max(self.cur.stage, 6)
            return
        if _FATAL.search(s) or FATAL_NCCL_WARN.search(s):
            msg = s.lstrip("#").strip()
            self._log(msg)
            target = self.cur.errors if self.cur is not None else self.orphan_errors
            if msg not in target:
                target.append(msg)
            return
        cmd = _COMMAND.search(s)
        if cmd:
            coll = normalize_collective(cmd.group(1))
            cur = self.cur
            if cur is not None and cur.collective is None and not cur.rows and cur.stage < 4:
                cur.collective, cur.collective_from = coll, "command line"
            else:
                self.pending_collective = coll
            return
        self._log(h)

    def _settings(self, line: str) -> None:
        """Record the environment settings ``line`` shows (see :attr:`NcclRun.settings`)."""
        found = [(m.group(1), m.group(2).strip("\"'")) for m in _SETTING.finditer(line)]
        found += [(m.group(1), m.group(2)) for m in _SET_BY_ENV.finditer(line)]
        for name, value in found:
            self.settings[name] = value
            if self.cur is not None:
                self.cur.settings[name] = value

    def _log(self, line: str) -> None:
        target = self.cur.log_lines if self.cur is not None else self.orphan_log
        if len(target) < MAX_LOG_LINES:
            if self.shared_log is not None:
                if self.shared_log[0] <= 0:
                    return
                self.shared_log[0] -= 1
            target.append(line)

    def _nccl_line(self, h: str) -> None:
        self._log(h)
        cur = self.cur
        nv = _NCCL_VERSION.search(h)
        if nv and cur is not None:
            cur.nccl_version, cur.nccl_cuda = nv.group(1), nv.group(2) or cur.nccl_cuda
        nets = cur.networks if cur is not None else self.orphan_networks
        um = _USING_NETWORK.search(h)
        if um and um.group(1).strip() and um.group(1).strip() not in nets:
            nets.append(um.group(1).strip())
        vm = _VIA_NET.search(h)
        if vm and vm.group(1) not in nets:
            nets.append(vm.group(1))
        pm = _PROVIDER.search(h)
        if pm:
            if cur is not None:
                cur.net_provider = pm.group(1).lower()
            else:
                self.orphan_provider = pm.group(1).lower()
        if _PLUGIN_MISSING.search(h):
            if cur is not None:
                cur.net_plugin_missing = True
            else:
                self.orphan_plugin_missing = True
        wm = _NCCL_WARN.search(h)
        if wm:
            target = cur.warnings if cur is not None else self.orphan_warnings
            if wm.group(1) not in target:
                target.append(wm.group(1))
            if FATAL_NCCL_WARN.search(wm.group(1)):
                errors = cur.errors if cur is not None else self.orphan_errors
                if wm.group(1) not in errors:
                    errors.append(wm.group(1))

    def finish(self) -> list[NcclRun]:
        runs = self.runs
        if (self.orphan_errors or self.orphan_warnings or self.orphan_networks) and not runs:
            runs.append(NcclRun(first_line=self.first_line, settings=dict(self.settings)))
        if runs:
            first = runs[0]
            first.log_lines[:0] = self.orphan_log[: max(MAX_LOG_LINES - len(first.log_lines), 0)]
            first.errors[:0] = [e for e in self.orphan_errors if e not in first.errors]
            first.warnings[:0] = [w for w in self.orphan_warnings if w not in first.warnings]
            for n in self.orphan_networks:
                if n not in first.networks:
                    first.networks.append(n)
            first.net_provider = first.net_provider or self.orphan_provider
            first.net_plugin_missing = first.net_plugin_missing or self.orphan_plugin_missing
        return runs


def _has_content(run: NcclRun) -> bool:
    return bool(run.devices or run.rows or run.columns or run.config)


def parse_nccl_text(text: str, filename: str | None = None) -> list[NcclRun]:
    """Parse nccl-tests (or torch benchmark) stdout into runs, in file order.

    ``filename`` (optional) names the collective when the output does not
    (``all_gather_perf.log``). Returns ``[]`` when the text holds nothing recognisable;
    a run with ``errors`` and no ``rows`` is a crash. Never raises for odd input.

    Bounds (:mod:`validate.parsers.bounds`): only the first ``MAX_INPUT_CHARS`` characters are read,
    and lines longer than ``MAX_LINE_CHARS`` are skipped (every run then carries a format note saying
    how many); time is linear in the length of the text. :func:`parse_nccl_lines` reads the same from
    a stream of lines.
    """
    text = clip_input(text)
    pos = 0

    def read(n: int) -> str:
        nonlocal pos
        piece = text[pos:pos + n]
        pos += len(piece)
        return piece
    return parse_nccl_lines(iter_lines(read), filename)


def parse_nccl_lines(lines: Iterable[str], filename: str | None = None) -> list[NcclRun]:
    """:func:`parse_nccl_text` of the text whose lines (without line breaks, as :meth:`str.splitlines` gives
    them) ``lines`` yields, read once, in order: a file's lines streamed by
    :meth:`validate.parsers.detect.RawText.lines` are parsed in memory flat in the file's size (what is
    kept: the table rows, compactly (:class:`Rows`), and at most :data:`MAX_LOG_LINES` other lines per
    run). Lines over ``MAX_LINE_CHARS`` are skipped with a note, as there. Never raises for odd input."""
    long_lines: list[int] = []
    streams: dict[str | None, _StreamParser] = {}
    order: list[str | None] = []
    pending: dict[str | None, tuple[int, str]] = {}  # stream -> (line it started on, text so far)
    shared_log = [3 * MAX_LOG_LINES]

    def feed(lineno: int, stream: str | None, line: str) -> None:
        sp = streams.get(stream)
        if sp is None:
            sp = streams[stream] = _StreamParser(shared_log if streams else None)
            sp.first_line = lineno
            order.append(stream)
        sp.feed(lineno, line)

    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
        if too_long(raw):
            long_lines.append(lineno)
            continue
        stream, line = _strip_prefix(raw.rstrip("\r"))
        if stream is not None and "[" in line:
            line = _rejoin(stream, line)
        if pending or ((":" in line or "]" in line) and _MID_TAG_HINT.search(line)):
            segs = _split_interleaved(stream, line)
            for i, (sid, seg) in enumerate(segs):
                started, before = pending.pop(sid, (lineno, ""))
                seg = before + seg
                if i < len(segs) - 1:
                    pending[sid] = (started, seg[:MAX_LINE_CHARS + 1])  # cut by another stream's tag: continues later
                elif too_long(seg):
                    long_lines.append(started)
                else:
                    feed(started, sid, seg)  # a line continued later is counted on the line it started on
            continue
        feed(lineno, stream, line)
    for sid, (started, seg) in pending.items():  # cut, and the log ended before it continued
        if not too_long(seg):
            feed(started, sid, seg)
    per_stream = [(sid, streams[sid].finish()) for sid in order]
    with_content = [(sid, runs) for sid, runs in per_stream if any(_has_content(r) for r in runs)]
    runs: list[NcclRun] = []
    if len(with_content) > 1:
        # every launcher stream printed its own table: each process ran alone (non-MPI build)
        for _, rs in with_content:
            for r in rs:
                if _has_content(r):
                    r.duplicated_rank0 = True
                    r.duplicate_streams = len(with_content)
        runs = [r for _, rs in with_content for r in rs if _has_content(r) or r.errors]
    elif with_content:
        runs = [r for r in with_content[0][1]]
    extra_errors: list[str] = []
    extra_warn: list[str] = []
    extra_nets: list[str] = []
    extra_log: list[str] = []
    plugin_missing = False
    provider = None
    extra_settings: dict[str, str] = {}
    extra_tool: str | None = None
    for sid, rs in per_stream:
        if with_content and any(sid == w[0] for w in with_content):
            continue
        extra_settings.update(streams[sid].settings)  # a command line printed outside the ranks' streams
        if streams[sid].pending_tool:
            extra_tool = streams[sid].pending_tool
        for r in rs:
            extra_errors += [e for e in r.errors if e not in extra_errors]
            extra_warn += [w for w in r.warnings if w not in extra_warn]
            extra_nets += [n for n in r.networks if n not in extra_nets]
            extra_log += r.log_lines[: max(MAX_LOG_LINES - len(extra_log), 0)]
            plugin_missing = plugin_missing or r.net_plugin_missing
            provider = provider or r.net_provider
            extra_settings.update(r.settings)
            if r.tool == "rccl-tests":
                extra_tool = "rccl-tests"
            if not with_content:
                runs.append(r)
    if with_content and runs:
        # errors printed by other ranks belong to the run that was executing: the last one
        # with no footer, else the last one.
        open_runs = [r for r in runs if not r.concluded and r.out_of_bounds is None]
        target = open_runs[0] if open_runs else runs[-1]
        target.errors += [e for e in extra_errors if e not in target.errors]
        target.warnings += [w for w in extra_warn if w not in target.warnings]
        for n in extra_nets:
            for r in runs:
                if n not in r.networks:
                    r.networks.append(n)
        for r in runs:
            r.net_plugin_missing = r.net_plugin_missing or plugin_missing
            r.net_provider = r.net_provider or provider
            r.log_lines += extra_log[: max(MAX_LOG_LINES - len(r.log_lines), 0)]
            r.settings = {**extra_settings, **r.settings}
            if extra_tool and r.tool == "nccl-tests":
                r.tool = extra_tool
    # drop empty shells (a version line alone with nothing else) unless they hold errors
    runs = [r for r in runs if _has_content(r) or r.errors]
    # several single-rank runs of the same collective, one after the other: N processes of a
    # non-MPI build each printed "Rank 0" (without launcher prefixes)
    single = [r for r in runs if r.ranks == 1 and r.devices and r.devices[0].rank == 0]
    if len(single) >= 2 and len(single) == len([r for r in runs if r.devices]):
        keys = {(r.collective, r.config.get("minBytes"), r.config.get("maxBytes")) for r in single}
        if len(keys) == 1:
            for r in single:
                r.duplicated_rank0 = True
                r.duplicate_streams = max(r.duplicate_streams, len(single))
    for i, r in enumerate(runs):
        r.index = i
        _finalize(r, filename)
    if long_lines:
        note = long_lines_note(len(long_lines), long_lines[0])
        note_unread(note)
        for r in runs:
            r.format_notes.append(note)
    return runs


def _finalize(run: NcclRun, filename: str | None) -> None:
    """Name the collective (filename hint, then columns) and note format quirks."""
    if run.collective is None and filename:
        m = _COMMAND.search(os.path.basename(filename)) or re.search(
            r"(all_?reduce|all_?gather|all_?to_?all|reduce_?scatter|broadcast|sendrecv)", os.path.basename(filename), re.IGNORECASE
        )
        if m:
            coll = normalize_collective(m.group(1).lower().replace("-", "_"))
            if coll:
                run.collective, run.collective_from = coll, "filename"
    if run.collective is None and run.rows:
        coll, cands = _infer_collective(run)
        if coll:
            run.collective, run.collective_from = coll, "columns"
        run.candidates = cands
    if run.rows and run.columns:
        lead = _split_columns(tuple(run.columns))[0]
        if "redop" in lead and "" in run.rows.distinct("redop"):
            run.format_notes.append("blank redop field (pre-2.13 alltoall)")
        if "redop" not in run.columns:
            run.format_notes.append("no redop column (pre-2.13 table)")


def _infer_collective(run: NcclRun) -> tuple[str | None, list[str]]:
    """Which collective a table is, from its columns and its busbw/algbw ratio."""
    lead = _split_columns(tuple(run.columns))[0] if run.columns else ()
    redops = run.rows.distinct("redop")
    roots = {x for x in run.rows.distinct("root") if x is not None}
    has_redop_col = "redop" in lead or any(x for x in redops if x)
    ratio = None
    best = 0.0
    cols = [(run.rows._col("algbw_gbps", pl), run.rows._col("busbw_gbps", pl)) for pl in _PLACEMENTS]
    for i in range(len(run.rows)):
        for algs, buses in cols:
            alg, bus = algs[i], buses[i]
            if alg > best and not _isnan(bus):  # NaN (not printed) is never > best
                best, ratio = alg, bus / alg
    per_rank = False
    for r in run.rows:
        ts = TYPE_BYTES.get(r.dtype.lower())
        if ts and r.count > 0:
            per_rank = r.size_bytes > r.count * ts
            break
    if run.columns and not has_redop_col:
        if "root" in lead:
            return "broadcast", []
        return "all_gather", []
    if redops == {""}:
        return "alltoall", []
    ops = {x for x in redops if x}
    if ratio is None:
        return None, []
    if ratio > 1.02:
        return "all_reduce", []
    if ratio >= 0.98 and not per_rank:  # within 2 % of 1 (not abs(ratio - 1) <= 0.02: 1.02 - 1 > 0.02 in floats)
        if ops == {"none"}:
            return "broadcast", []
        if roots and max(roots) >= 0:
            return "reduce", []
        return "sendrecv", ["sendrecv", "reduce"]
    if ratio < 0.999 or per_rank:
        if ops and ops != {"none"}:
            return "reduce_scatter", []
        return None, ["all_gather", "alltoall"]
    return None, []


# ---------------------------------------------------------------------------------------------
# JSON (-J)
# ---------------------------------------------------------------------------------------------


def _jnum(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            return _num(v.strip())
        except ValueError:
            return None
    f = float(v)
    return None if math.isnan(f) or math.isinf(f) else f


def _jbool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


_REPAIR_MAX_CHARS = 4 * 1024 * 1024
"""Largest cut-short ``-J`` document (characters) that :func:`_repair_json` tries to repair (the
JSON of a whole nccl-tests run is a few hundred KB)."""


def _closers_at(text: str, cuts: list[int]) -> dict[int, str | None]:
    """For each index in ``cuts``: the brackets that close ``text[:i + 1]`` (a JSON prefix), ``None`` when
    it ends inside a string or nests deeper than :data:`~validate.parsers.bounds.MAX_JSON_DEPTH`.
    One pass over the text."""
    wanted = set(cuts)
    out: dict[int, str | None] = {}
    stack: list[str] = []
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
        if i in wanted:
            out[i] = None if in_str or len(stack) > MAX_JSON_DEPTH else "".join(reversed(stack))
    return out


def _repair_json(text: str) -> Any:
    """Decode a JSON document cut short (a crashed ``-J`` run) by closing its open brackets.

    Tries cutting back to each of the last 64 ``,``/``{``/``[`` positions; ``None`` if none decodes,
    the text is longer than :data:`_REPAIR_MAX_CHARS` or nests deeper than the JSON bound.
    """
    if len(text) > _REPAIR_MAX_CHARS:
        return None
    cuts = [i for i, ch in enumerate(text) if ch in ",{["][-64:]
    closers = _closers_at(text, cuts)
    for i in reversed(cuts):
        head = text[: i + 1] if text[i] in "{[" else text[:i]
        close = closers.get(i)
        if close is None or not close:
            continue
        try:
            return _bounded_loads(head + close)
        except json.JSONDecodeError:
            continue
    return None


def _pl(obj: Any) -> Placement | None:
    if not isinstance(obj, dict):
        return None
    t = obj.get("time", obj.get("cpu_time"))
    return Placement(time_us=_jnum(t), algbw_gbps=_jnum(obj.get("alg_bw")),
                     busbw_gbps=_jnum(obj.get("bus_bw")), wrong=_jnum(obj.get("nwrong")))


def parse_nccl_json(data: str | dict[str, Any], filename: str | None = None) -> list[NcclRun]:
    """Parse the JSON that nccl-tests ``-J FILE`` writes (v2.17.3+, JSON_FILE_VERSION 2-3).

    Accepts the text or the decoded dict. A document cut short by a crash is repaired (brackets
    closed) and the run marked ``truncated``. Raises ``ValueError`` when the text is not such
    a document, nests deeper than :data:`~validate.parsers.bounds.MAX_JSON_DEPTH` or has fields of
    the wrong type. Source: NVIDIA/nccl-tests src/util.cu (``writeBenchmarkLine*``, ``writeResultFooter``).
    """
    truncated = False
    if isinstance(data, str):
        try:
            doc = _bounded_loads(data)
        except JsonLimitError as e:
            note_unread(f"nccl-tests JSON: {e}")
            raise ValueError(f"not an nccl-tests JSON document: {e}") from None
        except json.JSONDecodeError:
            doc = _repair_json(data)
            if doc is None:
                raise ValueError("not an nccl-tests JSON document") from None
            truncated = True
    else:
        doc = data
    if not isinstance(doc, dict) or not ("results" in doc or "config" in doc or "nccl_version" in doc):
        raise ValueError("not an nccl-tests JSON document")
    try:
        return [_json_run(doc, truncated, filename)]
    except (TypeError, ValueError, OverflowError, AttributeError) as e:
        raise ValueError(f"not an nccl-tests JSON document: a field of the wrong type ({e})") from None


def _json_run(doc: dict[str, Any], truncated: bool, filename: str | None) -> NcclRun:
    """The run of a decoded ``-J`` document. Raises ``TypeError``/``ValueError`` for fields of the wrong type."""
    run = NcclRun(fmt="json", truncated=truncated)
    run.version = str(doc["version"]) if "version" in doc else None
    nv = str(doc.get("nccl_version") or "")
    if re.fullmatch(r"\d+", nv):
        run.nccl_version = nccl_version_from_code(int(nv))
    elif (m := re.match(r"(\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?", nv)) is not None:
        run.nccl_version, run.nccl_cuda = m.group(1), m.group(2)
    args = doc.get("args") or []
    if args:
        coll = normalize_collective(str(args[0]))
        if coll:
            run.collective, run.collective_from = coll, "json args"
    cfg = doc.get("config") or {}
    key_map = {"nthreads": "nThread", "ngpus": "nGpus", "minimum_bytes": "minBytes", "maximum_bytes": "maxBytes",
               "warmup_iters": "warmup_iters", "iterations": "iters", "aggregated_iterations": "agg_iters",
               "validation": "validation", "graph": "graph", "step_factor": "step_factor", "step_bytes": "step_bytes"}
    for k, v in cfg.items():
        if k in key_map and isinstance(v, (int, float)) and not isinstance(v, bool):
            run.config[key_map[k]] = int(v)
    for d in cfg.get("devices") or []:
        if not isinstance(d, dict):
            continue
        run.devices.append(Device(
            rank=int(d.get("rank", len(run.devices))), group=d.get("group"), pid=d.get("pid"),
            host=str(d.get("hostname", "")), device=d.get("device"), bus_id=d.get("device_hex"),
            name=str(d.get("device_info", "")).strip(),
        ))
    run.columns = ["redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]
    for res in doc.get("results") or []:
        if not isinstance(res, dict) or "size" not in res:
            continue  # a result without its size: the one a crash cut short right after its opening brace

        root_raw = res.get("root")
        try:
            root = int(str(root_raw).strip()) if root_raw is not None else None
        except ValueError:
            root = None
        run.rows.append(Row(
            size_bytes=int(res.get("size", 0)), count=int(res.get("count", 0)), dtype=str(res.get("type", "")),
            redop=str(res["redop"]).strip() if res.get("redop") is not None else None, root=root,
            out_of_place=_pl(res.get("out_of_place")), in_place=_pl(res.get("in_place")),
        ))
        if run.collective is None and res.get("experiment_name"):
            coll = normalize_collective(str(res["experiment_name"]))
            if coll:
                run.collective, run.collective_from = coll, "json args"
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict):
        c = _jnum(oob.get("count"))
        run.out_of_bounds = int(c) if c is not None else None
        run.out_of_bounds_ok = _jbool(oob.get("okay"))
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        run.avg_busbw_gbps = _jnum(avg.get("bandwidth"))
        ok = avg.get("okay")
        run.avg_busbw_check = None if ok == "unchecked" or ok is None else ("OK" if _jbool(ok) else "FAILED")
    for e in doc.get("errors") or []:
        if isinstance(e, str) and e.strip():
            run.errors.append(e.strip())
    run.concluded = "end_time" in doc and not truncated
    if truncated:
        run.errors.append("JSON output cut short: the run crashed or was killed before it finished")
    _finalize(run, filename)
    return run


def parse_nccl(text: str, filename: str | None = None) -> list[NcclRun]:
    """Parse nccl-tests text or ``-J`` JSON (whichever ``text`` is). See the two parsers; JSON that is
    not an nccl-tests document (or is over the JSON bounds) is read as text. Never raises."""
    text = clip_input(text)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return parse_nccl_json(stripped, filename)
        except ValueError:
            pass
    return parse_nccl_text(text, filename)


def iter_values(run: NcclRun, name: str, placement: str) -> Iterator[float | None]:
    """Field ``name`` of ``placement`` of every row of ``run`` in order (:meth:`Rows.values`, ``None``: not
    printed), read from the table's compact columns without a list of the whole table."""
    for v in run.rows._col(name, placement):
        yield None if _isnan(v) else v


def iter_curve(run: NcclRun, placement: str) -> Iterable[tuple[int, float]]:
    """``(size bytes, busbw GB/s)`` of one placement (``"out-of-place"``/``"in-place"``), skipping blanks."""
    rows = run.rows
    for i, bus in enumerate(rows._col("busbw_gbps", placement)):  # compact columns: no list of the whole table
        if not _isnan(bus):
            yield rows._size(i), bus


# ---------------------------------------------------------------------------------------------
# NCCL INFO: transports and NICs per channel (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET)
# ---------------------------------------------------------------------------------------------


@dataclass
class NetUsage:
    """What the ``NCCL INFO`` lines say about the transports and NICs the channels used.

    ``transports``: channel count per transport (``"NET/IB"``, ``"NET/Socket"``, ``"NET/AWS Libfabric"``,
    ``"P2P"``, ``"SHM"``, ``"NVLS"``, ...); ``nics_used``: per host, the network device indices
    (the ``N`` of ``via NET/IB/N``) that inter-node channels used; ``gdr``: per host, ``[channels
    with /GDRDMA, channels without]``; ``nic_names``: device index -> name from the ``NET/IB :
    Using [0]mlx5_0:1/IB ...`` (or ``NET/Socket : Using``) line; ``nics_listed``: how many devices
    that line lists (``None`` without it); ``nics_found``: the OFI plugin's ``(found N nics)``;
    ``channel_lines``: how many channel lines were read (0: the log has no NET/INIT debug output).
    Source of the formats: NVIDIA/nccl src/transport.cc and src/transport/net_ib.cc
    (https://github.com/NVIDIA/nccl).
    """

    transports: dict[str, int] = field(default_factory=dict)
    nics_used: dict[str, set[int]] = field(default_factory=dict)
    gdr: dict[str, list[int]] = field(default_factory=dict)
    nic_names: dict[int, str] = field(default_factory=dict)
    nics_listed: int | None = None
    nics_found: int | None = None
    channel_lines: int = 0

    @property
    def net_transports(self) -> list[str]:
        """The inter-node transports seen (``NET/...``), most used first."""
        return [t for t, _ in sorted(self.transports.items(), key=lambda kv: -kv[1]) if t.startswith("NET/")]


_HOST = re.compile(r"^([\w.\-]+):\d+:\d+ \[\d+\]")
_CHANNEL = re.compile(r"\b(?:Channel|Ring|Tree)\s+\d+(?:/\d+)?\s*:(?:(?!\b(?:Channel|Ring|Tree)\s+\d).)*?"
                      r"\bvia\s+(\S+(?: Libfabric)?(?:/\S+)?)")
_NET_DEV = re.compile(r"^NET/([^/]+)/(\d+)(/GDRDMA)?")
_USING_DEVS = re.compile(r"NET/(IB|Socket)\s*:\s*Using\s+(.*?)(?:;\s*OOB.*)?$")
_DEV_ITEM = re.compile(r"\[(\d+)\]([^\s:\[]+)")
_FOUND_NICS = re.compile(r"\(found (\d+) nics?\)")


def net_usage(lines: Iterable[str]) -> NetUsage:
    """Read the channel, device-list and OFI lines among ``lines`` (a run's ``log_lines``).

    ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA`` counts transport ``NET/IB``, NIC 1
    for the line's host, one GDRDMA channel; ``via P2P/IPC``, ``via P2P/CUMEM`` count ``P2P``;
    ``via SHM`` and the old ``via direct shared memory`` count ``SHM``; ``via NVLS`` ``NVLS``.
    """
    u = NetUsage()
    for line in lines:
        if too_long(line) or "NCCL INFO" not in line:
            continue
        if " via " in line:
            cm = _CHANNEL.search(line)
            if not cm:
                continue
            via = cm.group(1)
            u.channel_lines += 1
            hm = _HOST.match(line)
            host = hm.group(1) if hm else "?"
            nm = _NET_DEV.match(via)
            if nm:
                t = "NET/" + nm.group(1)
                u.nics_used.setdefault(host, set()).add(int(nm.group(2)))
                g = u.gdr.setdefault(host, [0, 0])
                g[0 if nm.group(3) else 1] += 1
            elif via.startswith("P2P"):
                t = "P2P"
            elif via.startswith(("SHM", "direct")):
                t = "SHM"
            else:
                t = via.split("/")[0]
            u.transports[t] = u.transports.get(t, 0) + 1
            continue
        um = _USING_DEVS.search(line)
        if um:
            items = _DEV_ITEM.findall(um.group(2))
            if items and (u.nics_listed is None or um.group(1) == "IB"):
                u.nics_listed = len(items)
                u.nic_names = {int(i): n for i, n in items}
            continue
        fm = _FOUND_NICS.search(line)
        if fm:
            u.nics_found = int(fm.group(1))
    return u
