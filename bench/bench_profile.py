"""The profile suite's costs (figures printed, never asserted):

* the breakdown's time on recorded GPU traces (``tests/fixtures/profile``, HTA's public test data) and on a
  long synthetic one made by repeating rank 0's steps (``--repeat`` copies, shifted in time), per event;
* on this CPU, the profiler's overhead on the AMP step (mean profiled step over mean unprofiled step of the same
  run: the schedule's ``wait`` steps run without the profiler) and the trace size per profiled step.

Run: ``.venv/bin/python bench/bench_profile.py [--repeat 50] [--no-cpu-run]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT / "tests" / "fixtures" / "profile"

from validate.payloads import trace_breakdown as tb


def _timed(doc: dict, label: str) -> None:
    n = len(doc["traceEvents"])
    t0 = time.perf_counter()
    r = tb.analyze(doc)
    dt = time.perf_counter() - t0
    print(f"  {label}: {n:,} events, analyze {dt * 1e3:.1f} ms ({dt / n * 1e6:.2f} us/event): "
          + ", ".join(f"{c} {v:.1%}" for c, v in r["breakdown"].items() if v >= 0.005))


def gpu_traces(repeat: int) -> None:
    print("breakdown of recorded GPU traces (HolisticTraceAnalysis tests/data):")
    for p in sorted(FIXTURES.glob("*.json.gz")):
        _timed(tb.load_trace(str(p)), p.name)
    doc = tb.load_trace(str(FIXTURES / "sampled_rank-0.json.gz"))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    span = max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)
    big = []
    for k in range(repeat):
        for e in doc["traceEvents"]:
            c = copy.copy(e)
            if isinstance(c.get("ts"), (int, float)):
                c["ts"] = c["ts"] + k * span
            if isinstance(c.get("args"), dict) and "correlation" in c["args"]:
                c["args"] = {**c["args"], "correlation": c["args"]["correlation"] + k * 10_000_000}
            big.append(c)
    _timed({"traceEvents": big}, f"sampled_rank-0 x {repeat}")


def cpu_run() -> None:
    sys.path.insert(0, str(ROOT / "validate" / "payloads"))
    import profile_bench  # the payload, as a node runs it
    import torch

    torch.set_num_threads(1)
    print("profiler on this CPU (1 rank, GPT 2x128 seq 64 batch 4, fp32; wait 6 / warmup 1 / active 3):")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "profile.json"
        args = profile_bench.build_parser().parse_args(
            ["--device", "cpu", "--wait", "6", "--warmup", "1", "--active", "3", "--output", str(out)])
        t0 = time.perf_counter()
        doc = profile_bench.run_rank(args, 0, 1, 0, None)
        wall = time.perf_counter() - t0
        assert doc is not None
        r = doc["ranks"][0]
        steps = r["step_times_s"]
        plain, profiled = statistics.median(steps[2:6]), statistics.median(steps[-3:])  # warm unprofiled steps
        print(f"  unprofiled step {plain * 1e3:.1f} ms, profiled step {profiled * 1e3:.1f} ms (medians) "
              f"(x{profiled / plain:.2f}); trace {r['trace_bytes'] / 1e6:.2f} MB "
              f"({r['trace_bytes'] / 3 / 1e6:.2f} MB per profiled step); whole run with export and breakdown "
              f"{wall:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--no-cpu-run", action="store_true")
    a = ap.parse_args()
    gpu_traces(a.repeat)
    if not a.no_cpu_run:
        cpu_run()


if __name__ == "__main__":
    main()
