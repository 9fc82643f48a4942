"""Launchers: the artefacts they write (Slurm scripts, Kubernetes manifests validated against the
Kubernetes schema), the ssh launcher run against this machine, and one clear line when a tool is
missing or a cluster is unreachable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from clusterforge.errors import InvalidRunError, ToolMissingError, UsageError
from validate.launchers import make_launcher, render_artifacts
from validate.launchers.common import PlannedTest
from validate.launchers.kubernetes import manifest, mpijob_pod_templates
from validate.launchers.slurm import SlurmLauncher
from validate.launchers.ssh import SshHost, SshLauncher, hosts_from_inventory, remote_argv
from validate.payloads import PAYLOAD_DIR
from validate.runner import plan_tests
from validate.suites import payload_files
from validate.suites.amp import AmpParams
from validate.suites.fio import FioParams
from validate.suites.nccl import NcclParams

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
K8S_VERSION = "1.31.0"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterforge.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120, check=False)


def load_yaml(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


# ---------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------


def test_slurm_scripts_for_the_dgx_blueprint(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    files = render_artifacts(loaded, tmp_path)
    slurm = tmp_path / "slurm"
    names = sorted(p.name for p in files if p.suffix == ".sbatch")
    assert names == sorted(["node.sbatch", "nccl-all_reduce.sbatch", "nccl-all_gather.sbatch", "nccl-reduce_scatter.sbatch",
                            "fio-scratch.sbatch", "fio-lustre.sbatch", "amp.sbatch"])
    # the registered suites' payloads travel next to the scripts, unchanged
    assert list(payload_files()) == ["node_health.py", "collectives.py", "nccl_tests.py", "fio_bench.py", "amp_bench.py",
                                     "profile_bench.py", "trace_breakdown.py"]
    for f in payload_files():
        assert (slurm / "payloads" / f).read_bytes() == (PAYLOAD_DIR / f).read_bytes()
    for name in names:
        script = slurm / name
        assert os.access(script, os.X_OK)
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert check.returncode == 0, (name, check.stderr)
    ar = (slurm / "nccl-all_reduce.sbatch").read_text()
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu", "#SBATCH --exclusive", "#SBATCH --output=logs/%x-%j.out"):
        assert line in ar.splitlines()
    assert 'srun --mpi=pmix "$BIN" -b 8 -e 8589934592 -f 2 -n 20 -w 5 -c 1 -g 1 | tee "$CF_DIR/raw/nccl-all_reduce.txt"' in ar
    assert 'srun "$PY" "$CF_DIR/payloads/collectives.py" -o all_reduce' in ar
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in ar
    fio = (slurm / "fio-lustre.sbatch").read_text()
    assert "--target /lustre --kind lustre --size 4G --runtime 30 --numjobs 4 --iodepth 32" in fio
    assert "#SBATCH --gpus-per-node" not in fio
    amp = (slurm / "amp.sbatch").read_text()
    assert "#SBATCH --gpus-per-node=1" in amp and "--compile --fp32-baseline --peak-tflops 989" in amp


def test_slurm_launcher_needs_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    launcher = SlurmLauncher(tmp_path / "run", loaded)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no sbatch, whatever this machine has
    with pytest.raises(ToolMissingError, match="sbatch not found"):
        launcher.prepare()
    monkeypatch.undo()
    p = cli("validate", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "--launcher", "slurm", "-o", str(tmp_path / "r"),
            env={"PATH": str(Path(sys.executable).parent)})
    assert p.returncode == 3  # nothing was measured: an invalid run, not a failed cluster (1)
    assert p.stderr.strip().splitlines()[-1].startswith("✗ sbatch not found")
    assert "Traceback" not in p.stderr and not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------------------------


def _validate_k8s(obj: dict) -> None:
    if obj["kind"] == "MPIJob":  # a CRD: check its structure, then its pod templates against the core schema
        for tmpl in mpijob_pod_templates(obj):
            kubernetes_validate.validate(tmpl, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_kubernetes_manifests_for_eks_validate_and_use_efa_storage_and_runtime_class(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml")
    files = render_artifacts(loaded, tmp_path)
    docs = {p.stem: load_yaml(p) for p in files if p.parent.name == "kubernetes"}
    assert sorted(docs) == sorted(["00-payloads-configmap", "node", "nccl-all_reduce", "nccl-all_gather",
                                   "nccl-reduce_scatter", "fio-scratch", "fio-datasets", "amp"])
    for obj in docs.values():
        _validate_k8s(obj)
        assert obj["metadata"]["namespace"] == "clusterforge"
    cm = docs["00-payloads-configmap"]
    assert cm["data"]["collectives.py"] == (PAYLOAD_DIR / "collectives.py").read_text()
    mpi = docs["nccl-all_reduce"]
    assert mpi["apiVersion"] == "kubeflow.org/v2beta1" and mpi["spec"]["slotsPerWorker"] == 8
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    wspec = worker["template"]["spec"]
    limits = wspec["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits["vpc.amazonaws.com/efa"] == "4"  # p4d: 4 EFA interfaces
    assert limits["hugepages-2Mi"] == "5120Mi"
    # plain containers: the node's default (NVIDIA) runtime, no RuntimeClass the cluster may not have
    assert "runtimeClassName" not in wspec and wspec["nodeSelector"] == {"clusterforge.io/node-group": "gpu"}
    assert wspec["automountServiceAccountToken"] is False
    env = {e["name"]: e["value"] for e in wspec["containers"][0]["env"]}
    # aws-ofi-nccl >= 1.7 on p4d needs no FI_* variable; the plugin is selected by name
    assert env["NCCL_NET_PLUGIN"] == "ofi" and "FI_PROVIDER" not in env and "LD_LIBRARY_PATH" not in env
    script = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][2]
    assert "mpirun --allow-run-as-root -np 16" in script and "/etc/mpi/hostfile" in script
    assert "-x NCCL_NET_PLUGIN" in script and "collectives.py -o all_reduce" in script
    vols = {v["name"]: v for v in docs["fio-datasets"]["spec"]["template"]["spec"]["volumes"]}
    assert vols["target"]["persistentVolumeClaim"]["claimName"] == "datasets"  # the stack's PVC (k8s_addons)
    mounts = docs["fio-datasets"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "target", "mountPath": "/fsx"} in mounts
    scratch = {v["name"]: v for v in docs["fio-scratch"]["spec"]["template"]["spec"]["volumes"]}
    assert scratch["target"]["hostPath"] == {"path": "/scratch", "type": "Directory"}
    amp = docs["amp"]["spec"]["template"]["spec"]
    assert amp["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert docs["amp"]["spec"]["backoffLimit"] == 0
    # multi-line scripts are written as readable YAML literal blocks, no anchors
    text = (tmp_path / "kubernetes" / "nccl-all_reduce.yaml").read_text()
    assert "- |" in text and "&id" not in text


def test_kata_sandbox_pods_use_the_kata_runtime_class(tmp_path: Path) -> None:
    files = render_artifacts(load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml"), tmp_path)
    amp = load_yaml(next(p for p in files if p.name == "amp-kata.yaml"))
    _validate_k8s(amp)
    assert amp["spec"]["template"]["spec"]["runtimeClassName"] == "kata-qemu-nvidia-gpu"


def test_mpijob_structure_check_rejects_broken_objects() -> None:
    with pytest.raises(ValueError, match="Launcher and Worker"):
        mpijob_pod_templates({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "x"},
                              "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Worker": {}}}})
    with pytest.raises(ValueError, match="slotsPerWorker"):
        mpijob_pod_templates({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "x"},
                              "spec": {"mpiReplicaSpecs": {}}})


def test_kubernetes_launcher_reports_a_missing_kubectl_or_cluster(tmp_path: Path) -> None:
    bp = str(EXAMPLES / "aws-eks-p4d.yaml")
    p = cli("validate", bp, "--launcher", "kubernetes", "-o", str(tmp_path / "a"),
            env={"PATH": str(Path(sys.executable).parent)})
    assert p.returncode == 3 and "kubectl not found" in p.stderr and "Traceback" not in p.stderr
    kubectl = shutil.which("kubectl")
    if kubectl:  # really invoke kubectl against a cluster that is not there
        cfg = tmp_path / "kubeconfig"
        cfg.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n"
                       "contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
                       "users:\n- name: u\n  user: {token: t}\n")
        p = cli("validate", bp, "--launcher", "kubernetes", "-o", str(tmp_path / "b"), env={"KUBECONFIG": str(cfg)})
        assert p.returncode == 3 and "kubectl create namespace failed" in p.stderr and "KUBECONFIG" in p.stderr
        assert not (tmp_path / "b").exists()  # nothing ran: no half-made run directory is left


# ---------------------------------------------------------------------------------------------
# ssh
# ---------------------------------------------------------------------------------------------


def test_ssh_launcher_runs_a_collective_on_this_machine(tmp_path: Path) -> None:
    """The local-workstation host has `connection: local`: the ssh launcher runs it without SSH."""
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    launcher = SshLauncher(tmp_path, loaded, remote_python=sys.executable)
    launcher.prepare()
    test = PlannedTest(id="nccl-all_reduce", kind="nccl", group="local", nodes=1, ranks_per_node=2, device="cpu",
                       params=NcclParams(collective="all_reduce", min_bytes=1024, max_bytes=4096, step_factor=2,
                                         iters=2, warmup_iters=1, check=True),
                       description="all_reduce over 1 node x 2 CPU processes")
    res = launcher.run(test)
    assert res.returncode == 0, res.log.read_text()
    text = res.raw.read_text()
    assert "# Out of bounds values : 0 OK" in text and text.count("#  Rank ") == 2
    script = (tmp_path / "launch" / "nccl-all_reduce.sh").read_text()
    assert f"sh -c '{sys.executable} {(tmp_path / 'payloads').resolve()}/collectives.py --spawn 2" in script


def test_ssh_commands_inventory_and_unreachable_hosts(tmp_path: Path) -> None:
    host = SshHost(name="gpu-01", address="10.0.0.11", user="ubuntu", port=2222, key="~/.ssh/id_ed25519")
    argv = remote_argv(host, "python3 /tmp/x/fio_bench.py --target /scratch")
    assert argv[0] == "ssh" and argv[-3:] == ["--", "10.0.0.11", "python3 /tmp/x/fio_bench.py --target /scratch"]
    assert argv[argv.index("-l") + 1] == "ubuntu"
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=accept-new" in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == os.path.expanduser("~/.ssh/id_ed25519")
    # hosts from an Ansible inventory, group_vars included
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  children:\n    dgx:\n      hosts:\n        dgx-01: {ansible_host: 10.0.0.11}\n"
                   "        dgx-02: {ansible_host: 10.0.0.12, ansible_port: 2200}\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("ansible_user: ops\nansible_ssh_private_key_file: /k/id\n")
    hosts = hosts_from_inventory(inv, "dgx")
    assert [(h.name, h.address, h.user, h.port, h.key) for h in hosts] == [
        ("dgx-01", "10.0.0.11", "ops", 22, "/k/id"), ("dgx-02", "10.0.0.12", "ops", 2200, "/k/id")]
    with pytest.raises(UsageError, match="inventory not found"):
        hosts_from_inventory(tmp_path / "nope.yml")
    # AWS nodes have no address before `up`: the inventory is required
    aws = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml")
    with pytest.raises(UsageError, match="--inventory"):
        SshLauncher(tmp_path / "aws", aws).hosts("gpu")
    # a real ssh to a closed port fails at the copy step with one clear message
    inv2 = tmp_path / "closed.yml"
    inv2.write_text("all:\n  hosts:\n    ghost: {ansible_host: 127.0.0.1, ansible_port: 1, ansible_user: nobody}\n")
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    launcher = make_launcher("ssh", loaded, tmp_path / "run", inventory=inv2)
    launcher.prepare()
    test = PlannedTest(id="amp", kind="amp", group="local", nodes=1, ranks_per_node=1, device="cpu",
                       params=AmpParams(layers=2, hidden=128, heads=4, seq_len=64, vocab=512, batch_size=2, steps=2,
                                        warmup_steps=1, precision="auto", compile=False, fp32_baseline=False,
                                        peak_tflops=None, gpu_model=None), description="amp")
    with pytest.raises(InvalidRunError, match="could not copy the payloads to ghost"):
        launcher.run(test)
    log = (tmp_path / "run" / "logs" / "amp.log").read_text()
    assert "ssh -o BatchMode=yes" in log and "-l nobody -p 1 -- 127.0.0.1" in log


def test_ssh_launcher_needs_the_ssh_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match="ssh not found"):
        SshLauncher(tmp_path / "run", loaded).prepare()


def test_unknown_launcher_is_a_usage_error(tmp_path: Path) -> None:
    p = cli("validate", str(EXAMPLES / "local-workstation.yaml"), "--launcher", "pbs", "-o", str(tmp_path / "x"))
    assert p.returncode == 2 and "choose from local, ssh, slurm, kubernetes" in p.stderr


def test_ssh_multi_node_collectives_use_torchrun_on_every_node(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")
    launcher = SshLauncher(tmp_path, loaded)
    hosts = launcher.hosts("l40s")
    launcher._run_dirs.update({h: "/tmp/cf" for h in hosts})  # what stage() records: each node's mktemp -d
    assert [(h.address, h.user) for h in hosts] == [("10.1.0.21", "ops"), ("10.1.0.22", "ops")]
    test = PlannedTest(id="nccl-all_reduce", kind="nccl", group="l40s", nodes=2, ranks_per_node=4, device="cpu",
                       params=NcclParams(collective="all_reduce", min_bytes=8, max_bytes=1024, step_factor=2,
                                         iters=5, warmup_iters=1, check=True), description="x")
    cmds, _ = launcher.commands(test, hosts, tmp_path / "log")
    assert [h.address for h, _ in cmds] == ["10.1.0.21", "10.1.0.22"]
    for i, (_, c) in enumerate(cmds):
        assert c.startswith("python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 4 "
                            f"--node-rank {i} --master-addr 10.1.0.21 --master-port 29500 /tmp/cf/collectives.py -o all_reduce")
    fio = PlannedTest(id="fio-scratch", kind="fio", group="l40s", nodes=1, ranks_per_node=1, device="cpu",
                      params=FioParams(target="/scratch", target_kind="nvme", size="4G", runtime_s=30, numjobs=4,
                                       iodepth=32), description="fio")
    cmds, notes = launcher.commands(fio, hosts, tmp_path / "log")
    assert cmds == [(hosts[0], ("python3 /tmp/cf/fio_bench.py --target /scratch --kind nvme --size 4G --runtime 30 "
                               "--numjobs 4 --iodepth 32"))]
    assert notes == ["fio ran on l40s-01, the first of 2 nodes"]


@pytest.mark.parametrize("interfaces", [0, 1, 2, 3, "max"])
def test_kubernetes_collective_pods_request_the_efa_interfaces_the_nodes_have(tmp_path: Path, interfaces) -> None:
    """A collective pod asks for as many `vpc.amazonaws.com/efa` devices as each node gets EFA interfaces
    (`network.efa.interfaces`, `max` = p4d's 4): asking for more than the nodes have leaves the pod
    unschedulable; without EFA it asks for none."""
    text = (EXAMPLES / "aws-eks-p4d.yaml").read_text()
    path = tmp_path / "bp.yaml"
    path.write_text(text.replace("  fabric: efa\n", f"  fabric: efa\n  efa: {{interfaces: {interfaces}}}\n", 1))
    loaded = load_blueprint(path)
    assert loaded.cluster.settings("gpu").efa_interfaces == (4 if interfaces == "max" else interfaces)
    tests, _ = plan_tests(loaded, launcher="kubernetes")
    mpi = manifest(loaded, next(t for t in tests if t.kind == "nccl"))
    limits = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    want = 4 if interfaces == "max" else interfaces
    assert limits.get("vpc.amazonaws.com/efa") == (str(want) if want else None)
