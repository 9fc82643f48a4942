"""Benchmark: ``clusterforge cost`` of big blueprints (target: pricing a 4,096-instance blueprint under 1 s).

The cloud cost prices the resources of the offline plan (:func:`clusterforge.cost.price_plan` over the
:class:`~clusterforge.plan.PlanResult` that ``plan`` makes), so ``clusterforge cost`` of an AWS blueprint is
the plan (``bench/bench_plan.py``: about 15 s at 4,096 instances, the Pulumi SDK's own cost) plus the pricing.
This script times the parts apart, per size:

* ``plan s``: the offline plan (load + check + Pulumi program under the mock engine), once;
* ``price ms``: pricing that plan's resources from the catalog, best of 5 (what ``cost`` adds to ``plan``,
  and what ``plan``'s cost line adds);
* ``json ms``: the ``cost --json`` document made and serialised;
* on-prem: the DGX example with its GPU group grown to N hosts, loaded and checked once (``load s``), then
  priced (:func:`clusterforge.cost.price_onprem`, best of 5, ``price ms``).

With ``--cli`` it also runs ``clusterforge cost FILE --json`` in a fresh interpreter and prints its wall time.
Figures are printed, never asserted.

Measured on the 2-core development machine while other sessions ran (load average 9), 2026-12-02:

| instances | resources | plan s | price ms | json ms | | DGX hosts | load s | price ms | break-even |
|---|---|---|---|---|---|---|---|---|---|
| 2 | 43 | 0.59 | 0.0 | 0.0 | | 2 | 0.04 | 0.0 | 23.0 % |
| 512 | 553 | 6.54 | 6.3 | 0.1 | | 512 | 0.19 | 0.0 | 23.0 % |
| 4,096 | 4,137 | 71.7 | 60.3 | 0.0 | | 4,096 | 2.11 | 0.0 | 23.0 % |

The 1 s target holds for what ``cost`` does itself: pricing 4,137 planned resources takes 60 ms under that load
(identical instances become one line, so the JSON stays a few lines long), and on-prem pricing is per node group.
It does **not** hold end to end for an AWS blueprint: ``clusterforge cost`` runs the plan first (the cost must
price exactly what the plan creates), and the plan of 4,096 instances takes 13.5-21 s on a quiet machine
(``bench/bench_plan.py``) and 72 s at load 9. On-prem cost needs no Pulumi run.

Run: ``.venv/bin/python bench/bench_cost.py [--cli] [SIZES...]`` (default 2 512 4096).
"""

from __future__ import annotations

import io
import ipaddress
import json
import sys
import tempfile
import time
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from blueprints import load_blueprint
from clusterforge.cost import load_prices, price_onprem, price_plan
from clusterforge.plan import plan_aws

EXAMPLE = REPO / "blueprints" / "examples" / "aws-p5-efa-lustre.yaml"
ONPREM = REPO / "blueprints" / "examples" / "onprem-dgx-h100-ib.yaml"


def aws_blueprint(count: int, directory: Path) -> Path:
    """The p5 example with ``count`` GPU nodes (a /19 compute subnet above 4,000, as bench_plan.py does)."""
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


def onprem_blueprint(count: int, directory: Path) -> Path:
    """The DGX example with ``count`` DGX hosts (addresses from 10.1.0.0/16, IPoIB in a /15 for 8 NICs a host)."""
    yaml = YAML()
    data = yaml.load(ONPREM.read_text())
    hosts = ipaddress.ip_network("10.1.0.0/16").hosts()
    dgx = next(g for g in data["node_groups"] if g["name"] == "dgx")
    dgx["hosts"] = [{"name": f"dgx-{i:05d}", "address": str(next(hosts))} for i in range(count)]
    data["network"]["infiniband"]["ipoib"]["cidr"] = "172.16.0.0/12"
    buf = io.StringIO()
    yaml.dump(data, buf)
    path = directory / f"dgx-{count}.yaml"
    path.write_text(buf.getvalue())
    return path


def best(fn, runs: int = 5) -> tuple[float, object]:
    out = None
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv: list[str]) -> int:
    cli = "--cli" in argv
    sizes = [int(a) for a in argv if a.isdigit()] or [2, 512, 4096]
    prices = load_prices()
    plan_aws(load_blueprint(EXAMPLE))  # warm imports
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        print(f"{'instances':>9} {'resources':>9} {'plan s':>7} {'price ms':>9} {'json ms':>8} {'$/h':>12} {'cli s':>6}")
        for n in sizes:
            path = aws_blueprint(n, tmpd)
            t0 = time.perf_counter()
            loaded = load_blueprint(path)
            result = plan_aws(loaded)
            plan_s = time.perf_counter() - t0
            price_s, report = best(lambda r=result, lb=loaded: price_plan(r, lb, prices))
            json_s, _ = best(lambda rep=report: json.dumps(rep.to_json()))  # type: ignore[attr-defined]
            cli_s = ""
            if cli:
                import subprocess

                exe = Path(sys.executable).with_name("clusterforge")
                t1 = time.perf_counter()
                subprocess.run([str(exe), "cost", str(path), "--json"], check=True, capture_output=True)
                cli_s = f"{time.perf_counter() - t1:.2f}"
            print(f"{n:>9} {len(result.resources):>9} {plan_s:>7.2f} {price_s * 1000:>9.1f} {json_s * 1000:>8.1f} "
                  f"{report.per_hour_usd:>12,.2f} {cli_s:>6}", flush=True)  # type: ignore[attr-defined]
        print()
        print(f"{'dgx hosts':>9} {'load s':>7} {'price ms':>9} {'$/h':>10} {'break-even':>10}")
        for n in sizes:
            path = onprem_blueprint(n, tmpd)
            t0 = time.perf_counter()
            loaded = load_blueprint(path)
            _ = loaded.cluster
            load_s = time.perf_counter() - t0
            price_s, report = best(lambda lb=loaded: price_onprem(lb, prices))
            be = report.onprem.breakeven_utilization  # type: ignore[attr-defined]
            print(f"{n:>9} {load_s:>7.2f} {price_s * 1000:>9.1f} {report.per_hour_usd:>10,.0f} "  # type: ignore[attr-defined]
                  f"{'' if be is None else f'{be:.1%}':>10}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
