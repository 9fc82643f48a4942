"""`clusterforge validate --launcher slurm` on a multi-node Slurm started from the files clusterforge renders
(``tests/roles/slurm_cluster.py``: one set of namespaces per node, the rendered slurm.conf verbatim): the CLI runs
on the login node, as a user runs it, and the node suite (every node), nccl all_reduce with gloo across the two
compute nodes (srun, ``MASTER_ADDR`` = the first node) and AMP on a CPU go through sbatch / srun and are judged.

The results folder is under ``/var/tmp``: every node sees it (each node's ``/tmp`` is private), as a real
cluster's shared file system.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.roles.slurm_cluster import LiveCluster, blueprint_cluster, missing_prerequisites, start_cluster
from validate.runner import read_results_lines

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

BLUEPRINT = """\
apiVersion: clusterforge/v1
kind: Blueprint
name: slurm-validate
target: {provider: onprem, os: debian-12, ssh: {user: root}}
node_groups:
  - name: ctl
    role: controller
    hosts: [{name: ctl-01, address: 10.79.0.10}]
  - name: login
    role: login
    hosts: [{name: login-01, address: 10.79.0.9}]
  - name: cpu
    role: compute
    hosts: [{name: cpu-01, address: 10.79.0.11}, {name: cpu-02, address: 10.79.0.12}]
    hardware:
      cpu: {sockets: 1, cores_per_socket: 2, threads_per_core: 1}
      memory_gib: 8
network:
  fabric: ethernet
orchestrator:
  kind: slurm
  cgroup_version: v1
  pyxis: false
  os_memory_gib: 1
  health_check_interval_s: 0
  accounting: {enabled: false}
validation:
  suites: [node, nccl, amp]
  nccl:
    collectives: [all_reduce]
    min_bytes: 1024
    max_bytes: 65536
    iters: 5
    warmup_iters: 1
  amp:
    model: {layers: 2, hidden: 128, heads: 4, seq_len: 64, vocab: 512}
    batch_size: 4
    steps: 6
    compile: false
"""
"""CPU-only compute nodes (the payloads run gloo and AMP on the CPU), no accounting (nothing here needs sacct:
the launcher reads the job's end from scontrol), sizes that fit this 2-core machine."""


@pytest.fixture(scope="module")
def cluster_and_blueprint() -> Iterator[tuple[LiveCluster, Path]]:
    """The cluster of :data:`BLUEPRINT` from its rendered files and the roles' files on the nodes
    (:func:`~tests.roles.slurm_cluster.blueprint_cluster`), and the blueprint file (in a shared folder)."""
    if reason := missing_prerequisites(accounting=False):
        pytest.skip(reason)
    shared = Path(tempfile.mkdtemp(prefix="cf-slurm-validate-", dir="/var/tmp"))
    try:
        bp = shared / "bp.yaml"
        bp.write_text(BLUEPRINT)
        made = blueprint_cluster(BLUEPRINT, shared / "render")
        with start_cluster(made.tree, made.nodes, shared / "cluster", role_trees=made.role_trees) as cluster:
            yield cluster, bp
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_validate_on_the_login_node_runs_node_nccl_and_amp_through_slurm(
        cluster_and_blueprint: tuple[LiveCluster, Path]) -> None:
    cluster, bp = cluster_and_blueprint
    out = bp.parent / "results"
    p = cluster.run_on(cluster.client.name,
                       [sys.executable, "-m", "clusterforge.cli", "validate", str(bp), "--launcher", "slurm",
                        "--remote-python", sys.executable, "-o", str(out)],
                       env={"COLUMNS": "200", "CLUSTERFORGE_SLURM_POLL": "1", "GLOO_SOCKET_IFNAME": "eth0"},
                       cwd=str(REPO), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert [d["test_id"] for d in lines if d["kind"] != "node"] == ["nccl-all_reduce", "amp"]
    assert {d["verdict"] for d in lines} <= {"pass", "warn"}, [(d["label"], d["verdict"], d["reasons"]) for d in lines]
    # the node suite ran on both compute nodes (one document each, one task per node)
    docs = [json.loads(ln) for ln in (out / "raw" / "node.json").read_text().splitlines() if ln.strip()]
    assert len(docs) == 2
    # gloo across the two "hosts": 2 ranks (one per node), correct data
    nccl = next(d for d in lines if d["kind"] == "nccl")
    assert nccl["metrics"]["ranks"] == 2 and nccl["metrics"]["wrong"] == 0, nccl
    amp = next(d for d in lines if d["kind"] == "amp")
    assert amp["metrics"]["tokens_per_s"] > 0
    man = json.loads((out / "run.json").read_text())
    assert man["launcher"] == "slurm" and man["status"] == "complete"
    assert any("COMPLETED on cpu-[01-02]" in n for n in man["tests"]["nccl-all_reduce"]["launch_notes"])
    assert "nccl-all_reduce: job " in p.stderr and "running on cpu-[01-02]" in p.stderr
