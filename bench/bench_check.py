"""Benchmark ``load_blueprint`` + ``check`` on large blueprints; prints figures, asserts nothing.

Two generated blueprints:

* on-prem: 4096 DGX-class hosts (8 x H100, 8 x NDR NICs, NVMe RAID0) in 4 node groups plus a
  management host, InfiniBand with opensm, an existing Lustre server;
* AWS: 512 x p5.48xlarge in 8 node groups of 64, EFA, cluster placement group, FSx for Lustre.

For each: the file size, the median and min of several in-process runs (warm: catalog and
imports loaded), split into load and check, and one cold ``clusterforge check`` subprocess
(interpreter start, imports, catalog). Target: under 1 s each on a 2-core machine.

Run: ``.venv/bin/python bench/bench_check.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from blueprints import check, load_blueprint


def onprem(hosts: int = 4096, groups: int = 4) -> dict[str, Any]:
    """An on-prem blueprint with ``hosts`` GPU hosts in ``groups`` node groups (plus one mgmt host)."""
    per = hosts // groups
    node_groups: list[dict[str, Any]] = [
        {"name": "mgmt", "role": "controller", "hosts": [{"name": "mgmt-01", "address": "10.0.0.2"}]}]
    for g in range(groups):
        node_groups.append({
            "name": f"dgx-{g}",
            "role": "compute",
            "hosts": [{"name": f"dgx-{g}-{i:04d}", "address": f"10.{1 + g}.{i // 256}.{i % 256}"} for i in range(per)],
            "hardware": {
                "system": "dgx-h100", "gpu": "h100-sxm:8", "cpu_vendor": "intel",
                "nics": [{"device": f"mlx5_{k}", "netdev": f"ibp{k}s0", "speed_gbps": 400, "numa_node": k // 4}
                         for k in range(8)],
                "nvme": {"count": 8, "size_gb": 3840},
            },
            "local_nvme": {"raid": "raid0", "filesystem": "xfs", "mount": "/raid"},
        })
    return {
        "apiVersion": "clusterforge/v1", "kind": "Blueprint", "name": "big-onprem",
        "target": {"provider": "onprem", "os": "ubuntu-22.04", "ssh": {"user": "ubuntu"}},
        "node_groups": node_groups,
        "network": {"fabric": "infiniband", "infiniband": {
            "generation": "NDR", "subnet_manager": {"kind": "opensm", "host": "mgmt-01"},
            "ipoib": {"enabled": True, "cidr": "172.16.0.0/16"}}},
        "storage": [{"kind": "lustre", "name": "lustre", "mount": "/lustre",
                     "server": {"mgs_nids": ["172.16.0.2@o2ib"], "fsname": "lustre1"},
                     "stripes": [{"path": "checkpoints", "count": -1, "size": "4M"}]}],
        "software": {"lustre_client_repos": {"ubuntu-22.04": {
            "url": "https://repo.example.com/lustre/2.15.7/ubuntu2204/",
            "key_url": "https://repo.example.com/lustre/lustre-repo.asc"}}},
        "orchestrator": {"kind": "slurm", "partition": "gpu"},
        "workload": {"parameters_b": 405, "sequence_length": 8192},
    }


def aws(groups: int = 8, per: int = 64) -> dict[str, Any]:
    """An AWS blueprint with ``groups`` x ``per`` p5.48xlarge instances on EFA."""
    return {
        "apiVersion": "clusterforge/v1", "kind": "Blueprint", "name": "big-aws",
        "target": {"provider": "aws", "region": "us-east-1", "availability_zone": "us-east-1a",
                   "capacity": {"type": "on-demand"}, "tags": {"team": "llm", "cost-center": "1234"}},
        "node_groups": [{"name": "login", "role": "login", "count": 2, "instance_type": "m7i.2xlarge"}] + [
            {"name": f"gpu-{g}", "role": "compute", "count": per, "instance_type": "p5.48xlarge",
             "local_nvme": {"raid": "raid0", "filesystem": "xfs", "mount": "/scratch"},
             "labels": {"rack": f"r{g}"}} for g in range(groups)],
        "network": {"fabric": "efa", "placement": "cluster", "efa": {"interfaces": "max"}},
        "storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx",
                     "fsx": {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 115200,
                             "throughput_per_tib_mbps": 1000, "metadata": {"mode": "AUTOMATIC"}}}],
        "workload": {"parameters_b": 671, "architecture": "moe", "experts": 256, "active_parameters_b": 37},
        "validation": {"suites": ["nccl", "fio", "amp"],
                       "nccl": {"collectives": ["all_reduce", "all_gather", "reduce_scatter", "alltoall"]}},
    }


def _time(path: Path, runs: int) -> tuple[list[float], list[float], int, int]:
    loads, checks = [], []
    n_findings = errors = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        loaded = load_blueprint(path)
        t1 = time.perf_counter()
        findings = check(loaded)
        t2 = time.perf_counter()
        loads.append(t1 - t0)
        checks.append(t2 - t1)
        n_findings = len(findings)
        errors = sum(f.severity == "error" for f in findings)
    return loads, checks, n_findings, errors


def _cold(path: Path) -> float:
    exe = Path(sys.executable).with_name("clusterforge")
    cmd = [str(exe), "check", str(path)] if exe.exists() else [sys.executable, "-m", "clusterforge.cli", "check", str(path)]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> int:
    """Generate both blueprints, time them and print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="in-process runs per blueprint (median reported)")
    args = ap.parse_args()
    load_blueprint(REPO / "blueprints" / "examples" / "local-workstation.yaml")  # warm imports
    check(load_blueprint(REPO / "blueprints" / "examples" / "local-workstation.yaml"))  # and the catalog
    with tempfile.TemporaryDirectory() as tmp:
        for label, doc, nodes in (("onprem 4096 hosts", onprem(), 4097), ("aws 512 instances", aws(), 514)):
            path = Path(tmp) / f"{doc['name']}.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
            loads, checks, n, errors = _time(path, args.runs)
            total = [a + b for a, b in zip(loads, checks)]
            cold = _cold(path)
            print(f"{label:<20} {path.stat().st_size / 1024:7.0f} KiB  {nodes:5d} nodes  "
                  f"load {statistics.median(loads) * 1e3:6.1f} ms  check {statistics.median(checks) * 1e3:6.1f} ms  "
                  f"total median {statistics.median(total) * 1e3:6.1f} ms (min {min(total) * 1e3:.1f}, n={args.runs})  "
                  f"cold CLI {cold * 1e3:6.0f} ms  findings {n} ({errors} errors)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
