"""The node suite end to end: planned first, run by every launcher (the ssh launcher really runs the
payload on two `connection: local` hosts), judged, shown in the report, and explaining later results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from validate.launchers.kubernetes import manifest
from validate.launchers.slurm import sbatch_script
from validate.launchers.ssh import SshLauncher
from validate.node_checks import CHECKS, CROSS_CHECKS, judge_node_file, recorded_units
from validate.runner import plan_tests, read_results_lines

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterforge.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ), timeout=600, check=False)


def test_node_suite_is_planned_first_on_every_node_of_each_group() -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml")
    tests, _ = plan_tests(loaded, launcher="kubernetes")
    assert [t.id for t in tests][:2] == ["node-kata", "node-vms"]
    assert [(t.kind, t.nodes, t.ranks_per_node) for t in tests[:2]] == [("node", 2, 1), ("node", 1, 1)]
    assert all(t.kind != "node" for t in tests[2:])
    tests, _ = plan_tests(loaded, launcher="slurm", suites=["amp"])
    assert all(t.kind == "amp" for t in tests)


def test_slurm_runs_one_task_per_node() -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    test = plan_tests(loaded, launcher="slurm")[0][0]
    script = sbatch_script(loaded, test)
    assert "#SBATCH --nodes=4" in script and "#SBATCH --ntasks-per-node=1" in script and "--gpus" not in script
    units = ",".join(recorded_units())  # the catalog's vendor units and container engines, passed to the payload
    # each task writes its own file (srun's %t): two nodes' long JSON lines on one stream interleave mid-line;
    # the files are joined in task order into the one raw file the parser reads
    assert ('srun --nodes=4 --ntasks-per-node=1 --output="$CF_DIR/raw/node.json".task-%t '
            f'"$PY" "$CF_DIR/payloads/node_health.py" --services {units}\n' in script)
    assert ('for i in $(seq 0 $((4 - 1))); do cat "$CF_DIR/raw/node.json".task-$i 2>/dev/null; done '
            '> "$CF_DIR/raw/node.json"' in script)


def test_kubernetes_node_job_one_pod_per_node_read_only_host_view() -> None:
    loaded = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml")
    test = plan_tests(loaded, launcher="kubernetes")[0][0]
    obj = manifest(loaded, test)
    kubernetes_validate.validate(obj, "1.31.0", strict=True)
    spec = obj["spec"]
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (test.nodes, test.nodes, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["hostNetwork"] and pod["hostPID"] and not pod["automountServiceAccountToken"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    (c,) = pod["containers"]
    assert "securityContext" not in c and "resources" not in c  # not privileged, takes no GPU
    assert all(m["readOnly"] for m in c["volumeMounts"])
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert c["command"][-1] == ("exec python3 /opt/clusterforge/payloads/node_health.py "
                                f"--services {','.join(recorded_units())} --host-root /host")


def test_ssh_launcher_runs_the_payload_on_every_node(tmp_path: Path) -> None:
    text = (EXAMPLES / "local-workstation.yaml").read_text().replace(
        "      - {name: localhost, address: 127.0.0.1, connection: local}",
        "      - {name: localhost, address: 127.0.0.1, connection: local}\n"
        "      - {name: localhost2, address: 127.0.0.2, connection: local}")
    bp_file = tmp_path / "two.yaml"
    bp_file.write_text(text)
    loaded = load_blueprint(bp_file)
    test = plan_tests(loaded, launcher="ssh", suites=["node"])[0][0]
    assert test.nodes == 2
    launcher = SshLauncher(tmp_path / "run", loaded)
    launcher.prepare()
    res = launcher.run(test)
    assert res.returncode == 0, res.log.read_text()
    results = judge_node_file(res.raw, loaded.blueprint, "local", label="node", expected_nodes=2)
    # two documents (this machine twice, named as the inventory names them); nothing to compare across
    # nodes on plain Ethernet without GPUs, so no cross-node result
    assert [r.label for r in results] == ["node: localhost", "node: localhost2"]  # the inventory names
    assert all(r.kind == "node" and r.metrics["checks"] for r in results)
    assert "node_health.py" in (tmp_path / "run" / "launch" / "node.sh").read_text()


def test_docs_list_every_check_with_its_source() -> None:
    doc = (REPO / "docs" / "node-checks.md").read_text()
    for spec in CHECKS.values():
        row = next((ln for ln in doc.splitlines() if ln.startswith(f"| `{spec.id}` |")), None)
        assert row is not None and spec.source in row, spec.id
    for cid in CROSS_CHECKS:
        assert f"| `{cid}` |" in doc


@pytest.mark.slow
def test_validate_local_runs_the_node_suite_first_and_explains_later_results(tmp_path: Path) -> None:
    """The local workstation declares a RAID0 scratch this machine does not have: storage.scratch fails
    (blocking) and the fio results are marked as explained by it; the report shows the node table."""
    text = (EXAMPLES / "local-workstation.yaml").read_text()
    text = text.replace("    hardware: {}", "    hardware: {nvme: {count: 4}}\n    local_nvme: {mount: /cf-missing-scratch}")
    text = text.replace("suites: [node, nccl, fio, amp]", "suites: [node, fio]")
    bp = tmp_path / "bp.yaml"
    bp.write_text(text)
    out = tmp_path / "run"
    stopped = cli("validate", str(bp), "--launcher", "local", "-o", str(out))
    assert stopped.returncode == 3 and not (out / "results.jsonl").exists()  # the missing mount stops it first
    p = cli("validate", str(bp), "--launcher", "local", "--run-anyway", "-o", str(out))
    lines = read_results_lines(out / "results.jsonl")
    assert lines[0]["kind"] == "node" and lines[0]["test_id"] == "node", p.stdout + p.stderr
    checks = {c["id"]: c for c in lines[0]["metrics"]["checks"]}
    assert checks["storage.scratch"]["verdict"] == "fail" and checks["storage.scratch"]["blocking"]
    assert checks["gpu.count"]["verdict"] == "n/a"  # no GPU declared, none here: said so, not passed
    fio = [d for d in lines if d["kind"] == "fio"]
    assert fio and all(d["metrics"]["explained_by"] == [f"{lines[0]['metrics']['host']}: storage.scratch"] for d in fio)
    assert all(any("explained by the node suite" in n for n in d["notes"]) for d in fio)
    md = (out / "report.md").read_text()
    assert "## Node checks" in md and "storage.scratch" in md and "Results explained by a failed blocking node check" in md
    html = (out / "report.html").read_text()
    assert "<h2>Node checks</h2>" in html
    assert p.returncode == 1  # the node failed a check
    man = json.loads((out / "run.json").read_text())
    assert next(iter(man["tests"])) == "node"


def test_render_writes_the_node_artifacts(tmp_path: Path) -> None:
    p = cli("render", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "-o", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "validate" / "slurm" / "node.sbatch").exists() or any(tmp_path.rglob("node.sbatch"))
    assert any(tmp_path.rglob("node_health.py"))
    cm = next(tmp_path.rglob("00-payloads-configmap.yaml"))
    assert "node_health.py" in YAML(typ="safe").load(cm.read_text())["data"]


def test_judge_cli_judges_recorded_node_documents(tmp_path: Path, fixtures_dir: Path) -> None:
    from .node_fixtures import RecordedNode, as_recorded_yaml

    bp = tmp_path / "dgx.yaml"  # the example as deployed on the recorded nodes (driver 550, nvidia-peermem)
    bp.write_text(as_recorded_yaml((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text(), gpudirect="nvidia-peermem"))
    a = RecordedNode.load(fixtures_dir / "node" / "dgx-h100" / "dgx-01")
    b = RecordedNode.load(fixtures_dir / "node" / "dgx-h100" / "dgx-02")
    b.set_sysfs("/sys/class/infiniband/mlx5_3/ports/1/state", "1: DOWN")
    raw = tmp_path / "node.json"
    raw.write_text(json.dumps(a.doc()) + "\n" + json.dumps(b.doc()) + "\n")
    p = cli("judge", str(raw), "--blueprint", str(bp), "--group", "dgx", "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert [(r["label"], r["verdict"]) for r in doc["results"]] == [
        ("node: dgx-01", "pass"), ("node: dgx-02", "fail"), ("node: cross-node", "pass")]
    assert any("fabric.ports" in x and "mlx5_3/1" in x for x in doc["results"][1]["reasons"])
    p = cli("judge", str(raw))
    assert p.returncode == 2 and "--blueprint" in p.stdout + p.stderr


FAKE_KUBECTL = r'''#!{python}
"""Stands in for kubectl (no cluster here): answers what KubernetesLauncher asks for a node Job."""
import json, os, sys
args = sys.argv[1:]
open(os.environ["FAKE_KUBECTL_LOG"], "a").write(" ".join(args) + "\n")
if args[:2] == ["get", "job"]:
    print(json.dumps({{"spec": {{"completions": 2}}, "status": {{"succeeded": 2}}}}))
elif args[:2] == ["get", "runtimeclass"]:
    print(json.dumps({{"items": [{{"metadata": {{"name": "kata-qemu-nvidia-gpu"}}, "handler": "kata"}}]}}))
elif args[0] == "logs":
    assert "--max-log-requests=5" in args, args
    sys.stdout.write(open(os.environ["FAKE_KUBECTL_LOGS"]).read())
'''


def test_kubernetes_launcher_collects_every_pod_and_the_runtime_classes(tmp_path: Path, fixtures_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from validate.launchers.kubernetes import KubernetesLauncher

    from .node_fixtures import RecordedNode

    docs = [RecordedNode.load(fixtures_dir / "node" / "dgx-h100" / h).doc() for h in ("dgx-01", "dgx-02")]
    logs = tmp_path / "logs.txt"
    logs.write_text("".join(json.dumps(d) + "\n" for d in docs))
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    monkeypatch.setenv("FAKE_KUBECTL_LOG", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("FAKE_KUBECTL_LOGS", str(logs))
    loaded = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml")
    test = plan_tests(loaded, launcher="kubernetes", suites=["node"])[0][0]
    launcher = KubernetesLauncher(tmp_path / "run", loaded, kubectl=str(kubectl), poll_s=0.01)
    launcher.prepare()
    res = launcher.run(test)
    assert res.returncode == 0, res.log.read_text()
    results = judge_node_file(res.raw, loaded.blueprint, test.group, label=test.id, expected_nodes=test.nodes)
    assert [r.label for r in results] == ["node-kata: dgx-01", "node-kata: dgx-02", "node-kata: cross-node"]
    rc = next(c for c in results[-1].metrics["checks"] if c["id"] == "cross.runtimeclass")
    assert rc["verdict"] == "fail" and "handler kata" in rc["cause"]  # the fake cluster's class names the wrong handler


def test_the_payload_records_the_units_the_runner_names_from_the_catalog(tmp_path: Path) -> None:
    """The payload runs on the node without the catalog: the units it records are the ones the node suite passes
    (every vendor unit of the catalog, then the container engines), and no other."""
    from blueprints.vendor import container_engine_units, vendor_units
    from validate.payloads import PAYLOAD_DIR
    from validate.suites import get_suite

    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    test = plan_tests(loaded, launcher="slurm")[0][0]
    args = get_suite("node").payload_args(test)
    assert args[0] == "--services"
    assert args[1].split(",") == [*vendor_units().values(), *container_engine_units().values()]
    out = tmp_path / "node.json"
    subprocess.run([sys.executable, str(PAYLOAD_DIR / "node_health.py"), *args, "--output", str(out)], check=True,
                   timeout=120)
    recorded = {k.removeprefix("systemctl is-active ") for k in json.loads(out.read_text())["commands"]
                if k.startswith("systemctl is-active ")}
    assert recorded == set(args[1].split(","))
    subprocess.run([sys.executable, str(PAYLOAD_DIR / "node_health.py"), "--output", str(out)], check=True, timeout=120)
    assert not [k for k in json.loads(out.read_text())["commands"] if k.startswith("systemctl ")]



# Reviewed by hand (not read from the registry): which checks are blocking and which suites their failure explains.
# A blocking failure marks the later results of those suites on that node as explained by it, so a change here changes
# verdicts users read; it must show up as a change of this table.
BLOCKING = {
    "gpu.count": ("nccl", "amp"), "gpu.driver": ("nccl", "amp"), "gpu.ecc": ("nccl", "amp"), "gpu.mig": ("nccl", "amp"),
    "gpu.nvlink": ("nccl",), "gpu.fabric-manager": ("nccl", "amp"), "gpu.nvlsm": ("nccl", "amp"),
    "gdr.module": ("nccl",), "fabric.ports": ("nccl",), "fabric.mtu": ("nccl",), "fabric.roce-gid": ("nccl",),
    "pcie.acs": ("nccl",), "pcie.iommu": ("nccl",), "limits.memlock": ("nccl",),
    "storage.scratch": ("fio",), "storage.raid": ("fio",), "storage.shared": ("fio",),
    "software.modules": ("nccl", "amp"),
}
NOT_BLOCKING = {"gpu.persistence": (), "fabric.roce-qos": ("nccl",), "fabric.ipoib": (), "limits.shm": ("nccl",),
                "software.runtimes": ()}


def test_every_checks_blocking_flag_and_the_suites_it_explains_are_the_reviewed_ones() -> None:
    assert set(CHECKS) == set(BLOCKING) | set(NOT_BLOCKING)
    doc = (REPO / "docs" / "node-checks.md").read_text()
    for cid, spec in CHECKS.items():
        blocking = cid in BLOCKING
        explains = (BLOCKING if blocking else NOT_BLOCKING)[cid]
        assert (spec.blocking, tuple(spec.explains)) == (blocking, explains), cid
        row = next(ln for ln in doc.splitlines() if ln.startswith(f"| `{cid}` |")).split(" | ")
        assert row[2:4] == ["yes" if blocking else "no", ", ".join(explains) or "–"], (cid, row[2:4])
