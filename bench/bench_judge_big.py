"""Judge 50 MB raw outputs (issue 34, kind 7): time and peak memory of one fresh process each (figures printed,
never asserted; the targets are printed beside them).

Inputs, generated in the formats of the real outputs in ``tests/fixtures``:

* ``info``: the log of a 4,096-rank all_reduce as ``mpirun --tag-output`` prints it with ``NCCL_DEBUG=INFO``:
  rank 0's header and table (nccl-09), between them NCCL INFO channel lines from every rank (the bulk of a
  big job's log);
* ``table``: one nccl-tests table of a linear size sweep (:func:`bench_judge.nccl_log`), some 420,000 rows;
* ``nodes``: node-health documents (the recorded DGX H100 nodes, one JSON line per node, 500+ nodes),
  judged against ``onprem-dgx-h100-ib.yaml``'s ``dgx`` group as ``clusterforge judge --blueprint`` does.

Targets (issue 34): under 10 s and 200 MiB peak RSS for each. Run: ``.venv/bin/python bench/bench_judge_big.py
[--mb 50]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "validate"))
FIXTURES = ROOT / "tests" / "fixtures"

TARGET_S = 10.0
TARGET_MIB = 200.0


def info_log(path: Path, size: int) -> None:
    """A 4,096-rank tagged NCCL_DEBUG=INFO log of about ``size`` bytes."""
    table = (FIXTURES / "nccl-tests" / "nccl-09.txt").read_text()
    head, _, rest = table.partition("#       size")
    with open(path, "w") as f:
        f.writelines(f"[1,0]<stdout>:{ln}\n" for ln in head.splitlines())
        i = written = 0
        while written < size:
            r = i % 4096
            line = (f"[1,{r}]<stdout>:node-{r // 8:04d}:{1000 + r % 8}:{2000 + i % 97} [{r % 8}] NCCL INFO Channel "
                    f"{i % 32:02d}/0 : {r}[{r % 8}] -> {(r + 8) % 4096}[{r % 8}] [send] via NET/IB/{r % 8}/GDRDMA\n")
            f.write(line)
            written += len(line)
            i += 1
        f.writelines(f"[1,0]<stdout>:{ln}\n" for ln in ("#       size" + rest).splitlines())


def table_log(path: Path, size: int) -> None:
    """One nccl-tests table of about ``size`` bytes (a linear sweep)."""
    from bench_judge import nccl_log

    rows = max(size // 122, 10)
    path.write_text(nccl_log(rows))


def node_docs(path: Path, size: int) -> None:
    """Node-health documents of the two recorded DGX nodes, renamed, one JSON line each, about ``size`` bytes."""
    from node_fixtures import RecordedNode

    docs = [RecordedNode.load(FIXTURES / "node" / "dgx-h100" / h).doc() for h in ("dgx-01", "dgx-02")]
    with open(path, "w") as f:
        n = written = 0
        while written < size:
            line = json.dumps({**docs[n % 2], "host": f"dgx-{n:04d}"}) + "\n"
            f.write(line)
            written += len(line)
            n += 1


_CHILD = textwrap.dedent("""
    import resource, sys, time
    from collections import Counter
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    kind, path = sys.argv[1], Path(sys.argv[2])
    if kind == "nodes":
        from blueprints import load_blueprint
        from node_fixtures import as_recorded
        from validate.node_checks import judge_node_file
        bp = as_recorded(load_blueprint(Path(sys.argv[4])).blueprint, gpudirect="nvidia-peermem")
        t0 = time.perf_counter()
        res = judge_node_file(path, bp, "dgx", label="node")
    else:
        from validate.expectations import context_from_flags
        from validate.judge import judge_file
        ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm", fabric="roce", nic_gbps=100,
                                 nics_per_node=16)
        t0 = time.perf_counter()
        res = judge_file(path, ctx)
    dt = time.perf_counter() - t0
    u = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM: this process's own peak (ru_maxrss also counts the parent's RSS at the fork that started it)
    peak = int(next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))) / 1024
    print(f"{dt:.2f} {u.ru_utime + u.ru_stime:.2f} {peak:.0f} {len(res)} " + ",".join(f"{n} {v}" for v, n in Counter(r.verdict.value for r in res).items()))
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50.0, help="size of each input in MB (1e6 bytes)")
    a = ap.parse_args()
    size = int(a.mb * 1e6)
    with tempfile.TemporaryDirectory() as tmp:
        for kind, make in (("info", info_log), ("table", table_log), ("nodes", node_docs)):
            path = Path(tmp) / f"{kind}.log"
            make(path, size)
            out = subprocess.run([sys.executable, "-c", _CHILD, kind, str(path), str(ROOT / "tests" / "validate"),
                                  str(ROOT / "blueprints" / "examples" / "onprem-dgx-h100-ib.yaml")],
                                 check=False, cwd=ROOT, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            secs, cpu, mib, n, verdicts = out.stdout.split(" ", 4)
            ok = float(secs) < TARGET_S and float(mib) < TARGET_MIB
            print(f"judge {kind:<5} {path.stat().st_size / 1e6:5.1f} MB: {float(secs):6.2f} s wall ({float(cpu):.2f} s CPU "
                  f"of the process, imports included), peak RSS {float(mib):4.0f} MiB "
                  f"({n} results: {verdicts.strip()})  target < {TARGET_S:g} s, < {TARGET_MIB:g} MiB: "
                  f"{'met' if ok else 'MISSED'}")
    print(f"(one fresh process each, peak RSS of the whole process; python {sys.version.split()[0]}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
