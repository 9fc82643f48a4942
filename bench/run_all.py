"""Run every ``bench/bench_*.py`` script in turn and print their figures (``make bench``).

Benchmarks print figures; they never assert timings (machines are noisy). Exit code is the
number of scripts that crashed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    """Run the scripts; returns how many failed."""
    failed = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"== {script.name}: exit {rc} in {time.perf_counter() - t0:.1f} s\n", flush=True)
        failed += rc != 0
    return failed


if __name__ == "__main__":
    sys.exit(main())
