"""A results folder of a big validation (tens of thousands of results), written the way ``clusterforge validate``
appends ``results.jsonl``: for the report tests and ``bench/bench_report.py``.

:func:`write_big_run` writes node results for every node of a group (``node-dgx: dgx-NNNN``, the node suite's
``host`` and ``group`` metrics), nccl-tests runs between node pairs (``nccl-pair-NNNN: all_reduce``) and one fio
job per node, with a known set of failing, invalid and warning results (:class:`BigRun` says which).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from validate.results import JudgeResult, Verdict


@dataclass
class BigRun:
    """What :func:`write_big_run` wrote: the folder, the number of results and the labels of the results that
    are not ``pass`` (by verdict), plus one passing label of each suite."""

    folder: Path
    total: int
    bad: dict[str, list[str]] = field(default_factory=dict)
    passing: dict[str, str] = field(default_factory=dict)
    per_kind: dict[str, int] = field(default_factory=dict)


def _node(i: int, verdict: Verdict) -> JudgeResult:
    host = f"dgx-{i:04d}"
    r = JudgeResult(source="raw/node-dgx.json", kind="node", label=f"node-dgx: {host}",
                    metrics={"host": host, "group": "dgx", "checks": [], "blocking": [],  # type: ignore[typeddict-unknown-key]
                             "summary": "20 pass, 3 n/a" if verdict == Verdict.PASS else "19 pass, 3 n/a, 1 fail"},
                    expected={"checks": 24})  # type: ignore[typeddict-unknown-key]
    if verdict != Verdict.PASS:
        r.degrade(verdict, f"gpu.ecc: measured 3 uncorrectable ECC errors on {host}; expected 0. Fix: drain {host}")
    return r


def _nccl(i: int, verdict: Verdict) -> JudgeResult:
    bw = {Verdict.PASS: 365.0, Verdict.WARN: 290.0, Verdict.FAIL: 120.0, Verdict.INVALID: 0.0}[verdict]
    r = JudgeResult(source=f"raw/nccl-pair-{i:05d}.txt", kind="nccl", label=f"nccl-pair-{i:05d}: all_reduce",
                    metrics={"collective": "all_reduce", "ranks": 16, "nodes": 2, "peak_busbw_gbps": bw,  # type: ignore[typeddict-unknown-key]
                             "size_at_peak_bytes": 8 << 30},
                    expected={"busbw_gbps": 380.0, "ratio": bw / 380.0})  # type: ignore[typeddict-unknown-key]
    if verdict == Verdict.INVALID:
        r.degrade(verdict, "every busbw is 0: the run moved no data between ranks")
    elif verdict != Verdict.PASS:
        r.degrade(verdict, f"peak busbw {bw:g} GB/s is {bw / 380:.0%} of the expected 380 GB/s")
    return r


def _fio(i: int, verdict: Verdict) -> JudgeResult:
    r = JudgeResult(source=f"raw/fio-dgx-{i:04d}.json", kind="fio", label=f"fio-dgx-{i:04d}: seqread")
    if verdict != Verdict.PASS:
        r.degrade(verdict, "read 310 MB/s is 31% of the expected 1000 MB/s")
    return r


def write_big_run(folder: Path, *, nodes: int = 4096, pairs: int = 41_808, seed_bad: int = 7) -> BigRun:
    """Write ``folder/results.jsonl`` (and an empty ``folder/raw``) with ``nodes`` node results, ``pairs``
    nccl runs and ``nodes`` fio jobs (50,000 results by default). Every ``seed_bad * 101``-th node fails, every
    ``seed_bad * 1,009``-th pair fails and the next one is invalid, every 211th pair warns, every 977th fio job
    warns. Returns the :class:`BigRun`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "raw").mkdir(exist_ok=True)
    run = BigRun(folder, 0)
    makers = [("node", nodes, _node, lambda i: Verdict.FAIL if i % (seed_bad * 101) == 5 else Verdict.PASS),
              ("nccl", pairs, _nccl, lambda i: (Verdict.FAIL if i % (seed_bad * 1009) == 3 else
                                                Verdict.INVALID if i % (seed_bad * 1009) == 4 else
                                                Verdict.WARN if i % 211 == 17 else Verdict.PASS)),
              ("fio", nodes, _fio, lambda i: Verdict.WARN if i % 977 == 11 else Verdict.PASS)]
    with open(folder / "results.jsonl", "w", encoding="utf-8") as f:
        for kind, n, make, verdict_of in makers:
            for i in range(n):
                r = make(i, verdict_of(i))
                f.write(json.dumps({**r.to_json(), "test_id": r.title.split(": ")[0]}) + "\n")
                run.total += 1
                run.per_kind[kind] = run.per_kind.get(kind, 0) + 1
                if r.verdict != Verdict.PASS:
                    run.bad.setdefault(r.verdict.value, []).append(r.title)
                else:
                    run.passing.setdefault(kind, r.title)
    return run
