"""Wall time of `clusterforge validate` through Slurm beside the local launcher, on the same suites (figures
printed, never asserted).

Both runs validate the same one-node blueprint (the node suite and AMP on a tiny GPT on the CPU) on this machine:
the local launcher runs the payloads as subprocesses; the Slurm launcher submits each test to a one-node Slurm
started here (``tests/validate/test_slurm_launcher.py``: private munged, slurmctld, one slurmd, stopped at the end)
with ``sbatch``, watches the job with ``scontrol`` (``CLUSTERFORGE_SLURM_POLL`` seconds at most between looks) and
judges what it wrote. The difference is the scheduler's share: submission, scheduling, job launch, polling.

Needs root and Debian's slurm-wlm / munge packages (tests/system-packages.txt); prints why and exits 0 otherwise.
Run: ``.venv/bin/python bench/bench_slurm_validate.py [--repeat 1] [--poll 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.validate.test_slurm_launcher import blueprint, missing_slurm, one_node_slurm


def _run(args: list[str], env: dict[str, str]) -> tuple[float, int, dict[str, float]]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "clusterforge.cli", *args], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=900, check=False)
    wall = time.perf_counter() - t0
    out = Path(args[args.index("-o") + 1])
    try:
        tests = json.loads((out / "run.json").read_text())["tests"]
        per = {tid: float(rec.get("duration_s") or 0) for tid, rec in tests.items()}
    except (OSError, ValueError, KeyError):
        per = {}
    if p.returncode not in (0, 1):
        print(p.stdout[-2000:], p.stderr[-2000:], sep="\n")
    return wall, p.returncode, per


def main() -> int:
    """Run both launchers ``--repeat`` times and print the median wall time and per-test times of each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--poll", type=float, default=1.0, help="CLUSTERFORGE_SLURM_POLL: most seconds between looks")
    a = ap.parse_args()
    if (why := missing_slurm()) is not None:
        print(f"skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="cf-bench-slurm-validate-") as tmp:
        base = Path(tmp)
        bp = blueprint(base)
        (base / "slurm").mkdir()
        t0 = time.perf_counter()
        with one_node_slurm(base / "slurm") as cluster:
            print(f"one-node Slurm up (munged, slurmctld, slurmd idle) in {time.perf_counter() - t0:.2f} s")
            results: dict[str, list[float]] = {"local": [], "slurm": []}
            per: dict[str, dict[str, float]] = {}
            for i in range(a.repeat):
                for launcher in ("local", "slurm"):
                    out = base / f"{launcher}-{i}"
                    args = ["validate", str(bp), "--launcher", launcher, "-o", str(out), "--run-anyway"]
                    env = {**os.environ, "COLUMNS": "200"}
                    if launcher == "slurm":
                        args += ["--remote-python", sys.executable]
                        env = {**cluster.env, "COLUMNS": "200", "CLUSTERFORGE_SLURM_POLL": str(a.poll)}
                    wall, rc, per[launcher] = _run(args, env)
                    results[launcher].append(wall)
                    print(f"  run {i + 1}: {launcher:5s} {wall:6.2f} s (exit {rc}; per test: "
                          + ", ".join(f"{k} {v:.2f} s" for k, v in per[launcher].items()) + ")")
        loc, slu = statistics.median(results["local"]), statistics.median(results["slurm"])
        print(f"validate --suites node,amp, median of {a.repeat}: local {loc:.2f} s, slurm {slu:.2f} s "
              f"(+{slu - loc:.2f} s, x{slu / loc:.2f}; poll at most every {a.poll:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
