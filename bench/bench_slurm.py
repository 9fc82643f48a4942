"""Seconds from starting the Slurm daemons to every node ``idle`` on the live test cluster (figures printed, never
asserted).

The cluster is the one ``tests/roles/test_slurm_live.py`` starts (``BLUEPRINT``: a controller with slurmdbd +
MariaDB, a login node, two L40S compute nodes), from the files ``clusterforge render`` writes, through
``tests/roles/slurm_cluster.py``: one set of namespaces per node on this machine. Printed per run: daemons to all
idle (slurmctld and the slurmds started, every compute node ``idle`` in ``sinfo``), the whole start (munged on every
node, MariaDB's data directory and server, slurmdbd, the cluster registered, then the above) and the stop (every
daemon, namespace, link and cgroup gone).

Needs root and the Debian packages of tests/system-packages.txt; without them it says why and exits 0 (nothing to
measure). Run: ``.venv/bin/python bench/bench_slurm.py [--repeat 3] [--no-accounting]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.roles.slurm_cluster import blueprint_cluster, missing_prerequisites, start_cluster
from tests.roles.test_slurm_live import BLUEPRINT


def one_run(text: str, tmp: Path) -> tuple[float, float, float]:
    """(daemons to all idle, whole start, stop) in seconds for one cluster of blueprint ``text``."""
    spec = blueprint_cluster(text, tmp)
    t0 = time.perf_counter()
    with start_cluster(spec.tree, spec.nodes, tmp / "run", role_trees=spec.role_trees) as cluster:
        idle, up = cluster.seconds_to_idle, cluster.seconds_up
        t_stop = time.perf_counter()
    total = time.perf_counter() - t0
    return idle, up, total - (t_stop - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-accounting", action="store_true", help="render with accounting off (no MariaDB, slurmdbd)")
    a = ap.parse_args()
    text = BLUEPRINT
    if a.no_accounting:
        text = text.replace("  pyxis: false\n", "  pyxis: false\n  accounting: {enabled: false}\n")
    reason = missing_prerequisites(accounting=not a.no_accounting)
    if reason:
        print(f"skipped: {reason}")
        return 0
    runs = []
    for i in range(a.repeat):
        with tempfile.TemporaryDirectory(prefix="cf-bench-slurm-") as tmp:
            idle, up, down = one_run(text, Path(tmp))
        runs.append((idle, up, down))
        print(f"run {i + 1}: daemons to all idle {idle:6.2f} s   whole start {up:6.2f} s   stop {down:6.2f} s",
              flush=True)
    med = [statistics.median(r[k] for r in runs) for k in range(3)]
    nodes = "controller + login + 2 compute" + ("" if a.no_accounting else " + slurmdbd/MariaDB")
    print(f"live Slurm cluster ({nodes}): daemons to all idle {med[0]:.2f} s, whole start {med[1]:.2f} s, "
          f"stop {med[2]:.2f} s (median of {a.repeat}; python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
