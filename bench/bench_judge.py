"""Parse + judge time for a 10,000-row nccl-tests log (plain, launcher-tagged with NCCL INFO lines, rows only) and a
1,000-job fio JSON (figures printed, never asserted).

Inputs are generated in the formats of the real outputs in ``tests/fixtures``: the nccl-tests
log uses nccl-09's header (2 x 8 A100, current format) and a linear size sweep (``-i``) with a
saturating busbw curve; the fio document repeats fio-01's job with 1,000 distinct job names.

Run: ``.venv/bin/python bench/bench_judge.py [--rows 10000] [--jobs 1000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures"

from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.parsers.fio import parse_fio
from validate.parsers.nccl import parse_nccl


def nccl_log(rows: int) -> str:
    """A nccl-tests all_reduce log with ``rows`` sizes (linear step), 16 ranks on 2 nodes."""
    head = (FIXTURES / "nccl-tests" / "nccl-09.txt").read_text().split("           8 ")[0]
    lines = [head.rstrip("\n")]
    step = 1 << 20
    for i in range(rows):
        size = (i + 1) * step
        t_us = 30.0 + size / 125e3  # 125 GB/s algbw asymptote plus 30 us latency
        alg = size / t_us / 1e3
        bus = alg * 1.875
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t_us:7.1f}  {alg:6.2f}  {bus:6.2f}"
                     f"       0  {t_us:7.1f}  {alg:6.2f}  {bus:6.2f}       0")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 200.0", "#"]
    return "\n".join(lines) + "\n"


def tagged_log(rows: int) -> str:
    """The same log as :func:`nccl_log` the way mpirun --tag-output delivers it with NCCL_DEBUG=INFO: every line
    tagged, an NCCL INFO channel line from rank 1 every 10 rows, and every 100th row cut by another rank's line."""
    out = []
    for i, ln in enumerate(nccl_log(rows).splitlines()):
        if i % 10 == 0:
            out.append(f"[1,1]<stdout>:node-2:42:{i} [1] NCCL INFO Channel {i % 32:02d}/0 : 9[1] -> 1[1] [receive] via "
                       f"NET/IB/{i % 8}/GDRDMA")
        if i % 100 == 50 and len(ln) > 40:
            out.append(f"[1,0]<stdout>:{ln[:30]}[1,1]<stdout>:node-2:42:1 [1] NCCL INFO comm 0x1 rank 9 - Init COMPLETE")
            out.append(f"[1,0]<stdout>:{ln[30:]}")
        else:
            out.append(f"[1,0]<stdout>:{ln}")
    return "\n".join(out) + "\n"


def fio_json(jobs: int) -> str:
    """fio-01's document with ``jobs`` jobs (distinct names)."""
    doc = json.loads((FIXTURES / "fio" / "fio-01.json").read_text())
    base = doc["jobs"][0]
    doc["jobs"] = []
    for i in range(jobs):
        j = copy.deepcopy(base)
        j["jobname"] = f"job{i:04d}"
        j["job options"]["name"] = f"job{i:04d}"
        doc["jobs"].append(j)
    return json.dumps(doc, indent=2)


def timed(fn, repeat: int) -> tuple[float, object]:
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm", fabric="roce", nic_gbps=100, nics_per_node=16)
    with tempfile.TemporaryDirectory() as tmp:
        nlog = Path(tmp) / "all_reduce_perf.log"
        nlog.write_text(nccl_log(a.rows))
        fdoc = Path(tmp) / "fio.json"
        fdoc.write_text(fio_json(a.jobs))
        ntext, ftext = nlog.read_text(), fdoc.read_text()
        t_parse, runs = timed(lambda: parse_nccl(ntext), a.repeat)
        t_judge, res = timed(lambda: judge_text(ntext, ctx, source=str(nlog), kind="nccl"), a.repeat)
        t_file, _ = timed(lambda: judge_file(nlog, ctx), a.repeat)
        rows = len(runs[0].rows)  # type: ignore[index]
        print(f"nccl-tests log: {rows} rows, {nlog.stat().st_size / 1e6:.2f} MB, verdict {res[0].verdict}")  # type: ignore[index]
        print(f"  parse              {t_parse * 1e3:8.1f} ms  ({rows / t_parse:,.0f} rows/s)")
        print(f"  parse + judge      {t_judge * 1e3:8.1f} ms  ({rows / t_judge:,.0f} rows/s)")
        print(f"  judge_file (+read, detect) {t_file * 1e3:8.1f} ms")
        ttext = tagged_log(a.rows)
        t_tag, tres = timed(lambda: judge_text(ttext, ctx, source="tagged.log", kind="nccl"), a.repeat)
        print(f"  tagged + NCCL INFO lines, parse + judge {t_tag * 1e3:8.1f} ms  (verdict {tres[0].verdict})")  # type: ignore[index]
        excerpt = "\n".join(ln for ln in ntext.splitlines() if ln[:1] == " ") + "\n"
        t_ex, xres = timed(lambda: judge_text(excerpt, ctx, source="excerpt.log", kind="nccl"), a.repeat)
        print(f"  rows only (no header), parse + judge {t_ex * 1e3:8.1f} ms  "
              f"({xres[0].metrics['ranks']} ranks inferred)")  # type: ignore[index]
        t_fparse, rep = timed(lambda: parse_fio(ftext), a.repeat)
        t_fjudge, fres = timed(lambda: judge_text(ftext, ctx, source=str(fdoc), kind="fio"), a.repeat)
        t_ffile, _ = timed(lambda: judge_file(fdoc, ctx), a.repeat)
        njobs = len(rep.jobs)  # type: ignore[attr-defined]
        print(f"fio JSON: {njobs} jobs, {fdoc.stat().st_size / 1e6:.2f} MB, {len(fres)} results")  # type: ignore[arg-type]
        print(f"  parse              {t_fparse * 1e3:8.1f} ms  ({njobs / t_fparse:,.0f} jobs/s)")
        print(f"  parse + judge      {t_fjudge * 1e3:8.1f} ms  ({njobs / t_fjudge:,.0f} jobs/s)")
        print(f"  judge_file (+read, detect) {t_ffile * 1e3:8.1f} ms")
    print(f"(median of {a.repeat}; python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
