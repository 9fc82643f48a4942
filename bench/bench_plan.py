"""Benchmark: wall time of the offline ``plan`` (the Pulumi program under the mock engine).

Plans the ``aws-p5-efa-lustre`` example with its GPU node group resized to 2, 64, 512 and 4,096
p5.48xlarge instances (above 4,000 the compute subnet grows to a /19, which a /20 cannot hold) and prints, per size: instances, registered resources, wall seconds for
the whole plan (load + rules + program + mock engine) and milliseconds per resource. Figures
are printed, never asserted.

Two modes:

* default (in-process, as tests call it): ``plan_aws(load_blueprint(FILE))`` timed in this process,
  load + rules + program + mock engine; the cyclic garbage collection that follows each run is
  timed and printed apart (``gc s``);
* ``--cli``: ``clusterforge plan FILE --json`` as a user runs it, in a fresh interpreter (imports,
  load, rules, plan, JSON printed to a pipe), timed from outside; ``cpu s`` is the child's user +
  system time, ``peak RSS`` the child's. The command leaves the cyclic collector off (it exits
  after printing), so there is no ``gc s`` column.

Measured on the 2-core development machine, quiet (load average about 1.3), target 15 s at 4,096:

| mode | 64 | 512 | 4,096 instances (4,137 resources) | peak RSS |
|---|---|---|---|---|
| in-process | 0.57 s (5.4 ms/resource) | 2.45 s (4.4) | 14.7 s (3.6 ms/resource) | 1065 MiB |
| ``--cli`` (fresh interpreter, JSON printed) | | | 17.3 s (17.3 CPU s) | 1076 MiB |

Run: ``.venv/bin/python bench/bench_plan.py [--cli] [SIZES...]``
"""

from __future__ import annotations

import io
import resource
import sys
import tempfile
import time
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from blueprints import load_blueprint
from clusterforge.plan import plan_aws

EXAMPLE = REPO / "blueprints" / "examples" / "aws-p5-efa-lustre.yaml"


def blueprint_with(count: int, directory: Path) -> Path:
    """The example with ``count`` GPU nodes, written to ``directory``."""
    yaml = YAML()
    data = yaml.load(EXAMPLE.read_text())
    data["node_groups"][0]["count"] = count
    if count > 4000:
        data["target"]["vpc"] = {"subnet_cidr_block": "10.0.32.0/19"}
    buf = io.StringIO()
    yaml.dump(data, buf)
    path = directory / f"p5-{count}.yaml"
    path.write_text(buf.getvalue())
    return path


def _in_process(sizes: list[int], tmp: Path) -> None:
    import gc

    plan_aws(load_blueprint(EXAMPLE))  # warm imports (pulumi_aws is large)
    print(f"{'instances':>9} {'resources':>9} {'wall s':>8} {'ms/resource':>11} {'gc s':>6} {'peak RSS MiB':>12}")
    for n in sizes:
        path = blueprint_with(n, tmp)
        gc.collect()
        t0 = time.perf_counter()
        result = plan_aws(load_blueprint(path))
        wall = time.perf_counter() - t0
        t1 = time.perf_counter()
        gc.collect()
        collect = time.perf_counter() - t1
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"{n:>9} {len(result.resources):>9} {wall:>8.2f} {1000 * wall / len(result.resources):>11.2f} "
              f"{collect:>6.2f} {rss:>12}")


def _cli(sizes: list[int], tmp: Path) -> None:
    import json
    import subprocess

    exe = Path(sys.executable).with_name("clusterforge")
    print(f"{'instances':>9} {'resources':>9} {'wall s':>8} {'ms/resource':>11} {'cpu s':>6} {'peak RSS MiB':>12}")
    for n in sizes:
        path = blueprint_with(n, tmp)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([str(exe), "plan", str(path), "--json"], check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        count = len(json.loads(out.stdout)["resources"])
        print(f"{n:>9} {count:>9} {wall:>8.2f} {1000 * wall / count:>11.2f} {cpu:>6.2f} {after.ru_maxrss // 1024:>12}")


def main(argv: list[str]) -> None:
    """Print the figures for the sizes in ``argv`` (default 2, 64, 512, 4096); ``--cli`` times the command."""
    cli = "--cli" in argv
    sizes = [int(a) for a in argv if a != "--cli"] or [2, 64, 512, 4096]
    with tempfile.TemporaryDirectory() as tmp:
        (_cli if cli else _in_process)(sizes, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
