"""Benchmark: wall time of the offline ``plan`` (the Pulumi program under the mock engine).

Plans the ``aws-p5-efa-lustre`` example with its GPU node group resized to 2, 64, 512 and 4,096
p5.48xlarge instances (above 4,000 the compute subnet grows to a /19, which a /20 cannot hold) and prints, per size: instances, registered resources, wall seconds for
the whole plan (load + rules + program + mock engine) and milliseconds per resource. Figures
are printed, never asserted.

Run: ``.venv/bin/python bench/bench_plan.py [SIZES...]``
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


def main(sizes: list[int]) -> None:
    plan_aws(load_blueprint(EXAMPLE))  # warm imports (pulumi_aws is large)
    print(f"{'instances':>9} {'resources':>9} {'wall s':>8} {'ms/resource':>11} {'peak RSS MiB':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = blueprint_with(n, Path(tmp))
            t0 = time.perf_counter()
            result = plan_aws(load_blueprint(path))
            wall = time.perf_counter() - t0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            print(f"{n:>9} {len(result.resources):>9} {wall:>8.2f} {1000 * wall / len(result.resources):>11.2f} {rss:>12}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2, 64, 512, 4096])
