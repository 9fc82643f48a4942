"""Node readiness from the node's side: every boot step of an EC2 node runs through the step runner in its user data,
which reports to the node's status record (SSM parameter ``/clusterforge/<stack>/nodes/<instance id>``), and a
failing step is reported with its name and the line that says why.

The runner is the one the user data carries (``stacks/files/clusterforge_node.py`` without docstrings), run for real
with ``python3`` in a temporary root: cloud-init's instance data and the node's status settings as the user data
writes them, the steps' commands replaced by stand-ins that pass or fail. The record goes through a stand-in ``aws``
CLI (the Deep Learning AMI has the AWS CLI: catalog ``node_images.ec2_gpu.aws_cli``) or, on images without one,
through ``clusterforge_aws.py`` against a stand-in SSM on 127.0.0.1 that checks every SigV4 signature.
What AWS says and the tests encode: cloud-init runs the per-boot scripts, then ``runcmd`` (``scripts_user``), then
``power_state`` (https://github.com/canonical/cloud-init/blob/main/config/cloud.cfg.tmpl); PutParameter's request
(https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html); standard-tier values up to
4 KB (catalog ``node_status``).
"""

from __future__ import annotations

import base64
import dis
import gzip
import hashlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from blueprints.catalog import catalog
from blueprints.settings import node_settings
from stacks.cloud_init import placeholder_endpoints, render_cloud_config, scratch_script
from stacks.node_status import (
    AWS_MODULE,
    BOOT_LOG,
    NODE_COMMAND,
    NODE_MODULE,
    READY_AFTER_REBOOT,
    STATUS_CONFIG,
    module_source,
    runner_parameter,
    runner_value,
    status_path,
)
from tests.conftest import EXAMPLES

from .aws_standin import FILES, INSTANCE_ID, REGION
from .conftest import plan_example, user_data, variant_yaml

REPO = Path(__file__).resolve().parents[2]
STACK_PATH = status_path("p5-train-us-east-1")
HEALTH = REPO / "roles" / "slurm_node" / "files" / "clusterforge-slurm-health"


def _doc(example: str, group: str, patch: dict[str, Any] | None = None, tmp: Path | None = None) -> dict[str, Any]:
    if patch is None:
        bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    else:
        assert tmp is not None
        (tmp / "bp.yaml").write_text(variant_yaml(example, patch))
        bp = load_blueprint(tmp / "bp.yaml").blueprint
    s = node_settings(bp, group)
    return YAML(typ="safe", pure=True).load(render_cloud_config(s, placeholder_endpoints(s), status_path=STACK_PATH))


def _files(doc: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["content"] for f in doc["write_files"]}


def _functions(source: str) -> dict[str, list[tuple[str, str]]]:
    """Every function's instructions (operation, argument as written), by qualified name: a docstring is only a
    constant of its function, never an instruction."""
    out = {}

    def walk(code: types.CodeType) -> None:
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                ops = [(i.opname, i.argval.co_qualname if isinstance(i.argval, types.CodeType) else i.argrepr)
                       for i in dis.get_instructions(c)]
                # a class's docstring is stored as its __doc__: the two instructions that do it are the docstring
                docs = [k for k, op in enumerate(ops) if op == ("STORE_NAME", "__doc__")]
                out[c.co_qualname] = [op for k, op in enumerate(ops) if k not in docs and k + 1 not in docs]
                walk(c)

    walk(compile(source, "<source>", "exec"))
    return out


# ---------------------------------------------------------------------------------------------
# what the user data carries
# ---------------------------------------------------------------------------------------------

def test_every_boot_step_of_a_p5_node_is_reported_and_runcmd_ends_with_ready() -> None:
    doc = _doc("aws-p5-efa-lustre", "gpu")
    files = _files(doc)
    runcmd = doc["runcmd"]
    assert runcmd[-1] == f"{NODE_COMMAND} ready"
    steps = [c.split()[2] for c in runcmd[:-1]]
    assert all(c.startswith(f"{NODE_COMMAND} step ") for c in runcmd[:-1]), runcmd
    assert steps == ["sysctl", "systemd", "efa", "ldconfig", "nccl-stack", "lustre", "sandbox", "kernel-cmdline"]
    assert runcmd[2] == f"{NODE_COMMAND} step efa /usr/local/sbin/clusterforge-efa.sh"
    # the NVMe scratch runs at every boot (before runcmd) as a reported step too, the script itself unchanged
    per_boot = files["/var/lib/cloud/scripts/per-boot/10-clusterforge-scratch.sh"]
    assert per_boot == f"#!/bin/sh\nexec {NODE_COMMAND} step scratch /usr/local/sbin/clusterforge-scratch.sh\n"
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert s.scratch is not None and files["/usr/local/sbin/clusterforge-scratch.sh"] == scratch_script(s.scratch)
    config = json.loads(files[STATUS_CONFIG])
    assert config == {"path": "/clusterforge/p5-train-us-east-1/nodes", "group": "gpu", "checks": None,
                      "steps": ["scratch", *steps, "ready"], "log": BOOT_LOG,
                      "tier": catalog().aws["node_status"]["tier"]}
    # the Deep Learning AMI has the AWS CLI: the runner comes from the stack's SSM parameter (no room in EC2's 16 KB
    # beside the rest), is checked against its SHA-256 pinned in the user data and puts the records with the CLI
    assert catalog().aws["node_images"]["ec2_gpu"]["aws_cli"] is True
    assert NODE_MODULE not in files and AWS_MODULE not in files
    shim = files[NODE_COMMAND]
    assert runner_parameter(STACK_PATH) == "/clusterforge/p5-train-us-east-1/runner"
    assert "--name /clusterforge/p5-train-us-east-1/runner" in shim
    assert hashlib.sha256(module_source("clusterforge_node.py").encode()).hexdigest() in shim


@pytest.mark.parametrize(("example", "group", "checks"), [
    ("aws-p5-slurm", "gpu", ["/usr/sbin/clusterforge-slurm-health", "--dry-run"]),
    ("aws-p5-slurm", "controller", None),
])
def test_slurm_compute_nodes_run_the_slurm_health_check_as_their_quick_checks(example: str, group: str,
                                                                               checks: list[str] | None) -> None:
    files = _files(_doc(example, group))
    config = json.loads(files[STATUS_CONFIG])
    assert config["checks"] == checks
    assert config["steps"][-2:] == (["checks", "ready"] if checks else ["slurm", "ready"])
    # the Slurm helper imports IMDSv2 and SigV4 from the node's AWS module: every Slurm node has it
    assert AWS_MODULE in files and "from clusterforge_aws import" in files["/usr/local/sbin/clusterforge-slurm-aws"]


def test_nodes_without_the_aws_cli_get_the_sigv4_client(tmp_path: Path) -> None:
    patch = {"node_groups": [{"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge",
                              "local_nvme": {"mount": "/scratch"}},
                             {"name": "svc", "role": "login", "count": 1, "instance_type": "m7i.2xlarge"}]}
    files = _files(_doc("aws-p5-efa-lustre", "svc", patch, tmp_path))
    assert "aws_cli" not in catalog().aws["node_images"]["ec2_cpu"], "Canonical's Ubuntu is not known to have it"
    assert AWS_MODULE in files and files[NODE_MODULE] == module_source("clusterforge_node.py")
    assert files[NODE_COMMAND] == f'#!/bin/sh\nexec python3 {NODE_MODULE} "$@"\n'


@pytest.mark.parametrize("name", ["clusterforge_node.py", "clusterforge_aws.py", "clusterforge-slurm-aws.py"])
def test_the_programs_in_user_data_are_the_repositorys_without_docstrings(name: str) -> None:
    docs = [_doc("aws-p5-slurm", "gpu"), _doc("aws-p5-slurm", "controller")]
    where = {"clusterforge_node.py": NODE_MODULE, "clusterforge_aws.py": AWS_MODULE,
             "clusterforge-slurm-aws.py": "/usr/local/sbin/clusterforge-slurm-aws"}[name]
    shipped = next(_files(d)[where] for d in docs if where in _files(d))
    source = (FILES / name).read_text()
    assert _functions(shipped) == _functions(source) and len(_functions(source)) >= 5
    assert '"""' not in shipped and len(shipped) < len(source)


def test_the_runner_parameter_fits_a_standard_parameter() -> None:
    value = runner_value()
    assert len(value.encode()) <= int(catalog().aws["node_status"]["value_max_bytes"])
    assert gzip.decompress(base64.b64decode(value)).decode() == module_source("clusterforge_node.py")


# ---------------------------------------------------------------------------------------------
# the runner, for real
# ---------------------------------------------------------------------------------------------

class Node:
    """A temporary root holding what cloud-init writes for one node (the runner, its settings, instance data) and
    a stand-in ``aws`` CLI that records each ``put-parameter``; :meth:`run` runs the runner like ``runcmd`` does."""

    def __init__(self, tmp: Path, doc: dict[str, Any], cli: bool = True) -> None:
        self.root = tmp / "root"
        files = _files(doc)
        # the runner as the node has it: from the user data, or fetched from the runner parameter
        files.setdefault(NODE_MODULE, module_source("clusterforge_node.py"))
        for path, content in files.items():
            if path in (NODE_MODULE, AWS_MODULE, STATUS_CONFIG):
                dest = self.root / path.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(content)
        (self.root / "run" / "cloud-init").mkdir(parents=True)
        (self.root / "run" / "cloud-init" / "instance-data.json").write_text(
            json.dumps({"v1": {"instance_id": INSTANCE_ID, "region": REGION, "cloud_name": "aws"}}))
        (self.root / "var" / "log").mkdir(parents=True)
        self.calls = tmp / "aws-calls.jsonl"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        if cli:  # the AWS CLI as the runner calls it: the request as --cli-input-json
            (self.bin / "aws").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                          f"open({str(self.calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
            (self.bin / "aws").chmod(0o755)
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "CLUSTERFORGE_ROOT": str(self.root)}

    def run(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(self.root / NODE_MODULE.lstrip("/")), *argv], capture_output=True,
                              text=True, env={**self.env, **env}, timeout=120, check=False)

    def records(self) -> list[dict[str, Any]]:
        """The status records the CLI was asked to put, in order (each checked against PutParameter's request)."""
        out = []
        for line in self.calls.read_text().splitlines() if self.calls.exists() else []:
            argv = json.loads(line)
            assert argv[:4] == ["ssm", "put-parameter", "--region", REGION] and argv[4] == "--cli-input-json"
            request = json.loads(argv[5])
            assert request["Name"] == f"{STACK_PATH}/{INSTANCE_ID}"
            assert (request["Type"], request["Overwrite"], request["Tier"]) == ("String", True, "Standard")
            out.append(json.loads(request["Value"]))
        return out

    def log(self) -> str:
        return (self.root / BOOT_LOG.lstrip("/")).read_text()

    def reboot(self) -> None:
        """A new boot: ``/run`` is empty again, the rest of the disk stays."""
        for p in sorted((self.root / "run").glob("clusterforge-*")):
            p.unlink()


FAILING_EFA = ["sh", "-c", ("echo 'clusterforge-efa: EFA software present'; "
                            "echo 'clusterforge-efa: ERROR: libnccl-net-ofi.so not found in /opt/amazon/ofi-nccl/lib: "
                            "NCCL would fall back to TCP sockets' >&2; echo 'cleaning up'; exit 3")]


def test_a_failing_step_is_reported_with_its_name_and_error_and_stops_the_boot(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    for name in ("scratch", "sysctl", "systemd"):
        assert node.run("step", name, "sh", "-c", f"echo {name} done").returncode == 0
    res = node.run("step", "efa", *FAILING_EFA)
    assert res.returncode == 3
    assert "EFA software present" in res.stdout, "a step's output still reaches cloud-init's log and the console"
    # later steps of this boot do not run, and nothing more is reported
    marker = tmp_path / "ran"
    assert node.run("step", "lustre", "touch", str(marker)).returncode == 1 and not marker.exists()
    assert node.run("ready").returncode == 1
    records = node.records()
    assert [(r["state"], r["step"], r["index"]) for r in records] == [
        ("configuring", "scratch", 1), ("configuring", "sysctl", 2), ("configuring", "systemd", 3),
        ("configuring", "efa", 4), ("failed", "efa", 4)]
    failed = records[-1]
    assert failed["message"] == ("clusterforge-efa: ERROR: libnccl-net-ofi.so not found in /opt/amazon/ofi-nccl/lib: "
                                 "NCCL would fall back to TCP sockets")
    assert (failed["group"], failed["instance"], failed["total"], failed["log"]) == ("gpu", INSTANCE_ID, 10, BOOT_LOG)
    log = node.log()
    assert "step efa: sh -c" in log and "cleaning up" in log and "step lustre not run" in log


def test_a_node_whose_steps_pass_reports_ready_and_a_later_boot_only_its_failures(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    config = json.loads((node.root / STATUS_CONFIG.lstrip("/")).read_text())
    for name in config["steps"][:-1]:
        assert node.run("step", name, "true").returncode == 0
    assert node.run("ready").returncode == 0
    last = node.records()[-1]
    assert (last["state"], last["step"], last["index"], last["message"]) == (
        "ready", "ready", len(config["steps"]), "no quick checks on this node")
    n = len(node.records())
    node.reboot()  # the per-boot scratch step runs again: quiet when it passes, reported when it fails
    assert node.run("step", "scratch", "true").returncode == 0 and len(node.records()) == n
    assert node.run("step", "scratch", "sh", "-c", "echo 'clusterforge-scratch: no drive'; exit 1").returncode == 1
    assert [(r["state"], r["step"], r["message"]) for r in node.records()[n:]] == [
        ("failed", "scratch", "clusterforge-scratch: no drive")]


def test_a_step_whose_program_is_missing_fails_with_the_reason(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    assert node.run("step", "efa", "/usr/local/sbin/no-such-script").returncode == 127
    assert node.records()[-1]["message"] == "ERROR: /usr/local/sbin/no-such-script: No such file or directory"


def test_a_report_that_cannot_be_put_never_fails_the_step(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    (node.bin / "aws").write_text("#!/bin/sh\necho 'An error occurred (AccessDeniedException)' >&2\nexit 254\n")
    res = node.run("step", "sysctl", "true")
    assert res.returncode == 0
    assert "status configuring sysctl not reported: aws ssm put-parameter: exit 254" in node.log()


def test_a_host_that_reboots_into_its_kernel_command_line_is_ready_after_the_reboot(tmp_path: Path) -> None:
    patch = {"node_groups": [{"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge",
                              "local_nvme": {"mount": "/scratch"},
                              "sandbox": {"runtime": "kata", "gpu_passthrough": True}}]}
    doc = _doc("aws-p5-efa-lustre", "gpu", patch, tmp_path)
    files = _files(doc)
    assert doc["power_state"]["condition"] == "test -f /run/clusterforge-reboot-required"
    assert files[READY_AFTER_REBOOT] == ("#!/bin/sh\n[ -e /var/lib/clusterforge/ready-after-reboot ] || exit 0\n"
                                         f"rm -f /var/lib/clusterforge/ready-after-reboot\nexec {NODE_COMMAND} ready\n")
    node = Node(tmp_path, doc)
    (node.root / "run" / "clusterforge-reboot-required").write_text("")  # the kernel command line script's flag
    assert node.run("ready").returncode == 0
    assert [(r["state"], r["step"]) for r in node.records()] == [("configuring", "reboot")]
    assert (node.root / "var/lib/clusterforge/ready-after-reboot").exists()
    node.reboot()
    (node.root / "var/lib/clusterforge/ready-after-reboot").unlink()  # what the per-boot script does, then `ready`
    assert node.run("ready").returncode == 0
    assert node.records()[-1]["state"] == "ready"


def _contract(tmp: Path, gpus: int, mounts: list[str]) -> Path:
    path = tmp / "slurm-health.json"
    path.write_text(json.dumps({"gpu_count": gpus, "gpu_model": "h100-sxm" if gpus else None,
                                "gpu_names": ["NVIDIA H100 80GB HBM3"] if gpus else [], "gpu_devices": [],
                                "mounts": mounts, "driver_branch": "580", "training_node": True, "timeout_s": 50,
                                "reason_prefix": "cf-health"}))
    return path


def test_the_quick_checks_of_a_slurm_node_name_the_failed_check(tmp_path: Path) -> None:
    """The slurm_node role's health check runs as step ``checks`` (no nvidia-smi here: gpu.count fails as on a node
    whose driver did not load); the record names the check and ready is not reported."""
    doc = _doc("aws-p5-slurm", "gpu")
    node = Node(tmp_path, doc)
    config_path = node.root / STATUS_CONFIG.lstrip("/")
    config = json.loads(config_path.read_text())
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("36 25 0:32 / /fsx rw,relatime shared:1 - lustre 10.0.0.5@tcp:/abcdefgh rw\n")
    # the same checks, from the repository, reading a contract here instead of /etc/clusterforge
    config["checks"] = [sys.executable, str(HEALTH), "--config", str(_contract(tmp_path, 8, ["/fsx"])),
                        "--mountinfo", str(mountinfo), "--dry-run"]
    config_path.write_text(json.dumps(config))
    assert node.run("ready").returncode == 1
    last = node.records()[-1]
    assert (last["state"], last["step"], last["index"]) == ("failed", "checks", len(config["steps"]) - 1)
    assert last["message"].startswith("clusterforge-slurm-health: FAIL gpu.count: nvidia-smi not found")
    # a node that passes them is ready
    node2 = Node(tmp_path / "second", doc)
    config["checks"][3] = str(_contract(tmp_path, 0, ["/fsx"]))
    (node2.root / STATUS_CONFIG.lstrip("/")).write_text(json.dumps(config))
    assert node2.run("ready").returncode == 0
    assert (node2.records()[-1]["state"], node2.records()[-1]["message"]) == ("ready", "quick checks passed")


def test_without_the_aws_cli_the_record_is_put_signed_with_the_instance_role(tmp_path: Path, aws) -> None:
    """An image without the AWS CLI: the runner puts the record with clusterforge_aws.py (IMDSv2 credentials,
    SigV4), retrying a throttled request."""
    doc = _doc("aws-p5-slurm", "controller")
    node = Node(tmp_path, doc, cli=False)
    aws["fail_puts"] = 2  # ThrottlingException twice, then it goes through
    env = {"CLUSTERFORGE_IMDS": aws["url"], "CLUSTERFORGE_AWS_ENDPOINT": aws["url"], "CLUSTERFORGE_RETRY_S": "0.01"}
    res = node.run("step", "slurm", *FAILING_EFA, **env)
    assert res.returncode == 3, res.stderr
    name = f"{STACK_PATH}/{INSTANCE_ID}"
    puts = aws["parameters"][name]
    assert [json.loads(p["Value"])["state"] for p in puts] == ["configuring", "failed"]
    assert aws["calls"].count("PutParameter") == 4
    assert all((p["Type"], p["Overwrite"], p["Tier"]) == ("String", True, "Standard") for p in puts)
    assert "ERROR: libnccl-net-ofi.so" in json.loads(puts[-1]["Value"])["message"]


def test_the_largest_record_fits_a_standard_parameter(tmp_path: Path) -> None:
    """A failure message is cut to 600 characters: the record stays within the standard tier's 4 KB."""
    node = Node(tmp_path, _doc("aws-p5-slurm", "gpu"))
    long = "ERROR: " + "x" * 5000
    node.run("step", "slurm", "sh", "-c", f"echo '{long}'; exit 1")
    value = json.dumps(node.records()[-1], sort_keys=True)
    assert len(value.encode()) <= int(catalog().aws["node_status"]["value_max_bytes"])
    assert node.records()[-1]["message"] == long[:600]


def test_runner_usage_and_settings_errors_are_one_line(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    res = node.run("bogus")
    assert res.returncode == 2 and res.stderr.strip() == "usage: clusterforge-node step NAME CMD [ARG...] | ready"
    os.remove(node.root / STATUS_CONFIG.lstrip("/"))
    res = node.run("step", "sysctl", "true")
    assert res.returncode == 0, "a step runs even when its status cannot be reported"
    assert f"{STATUS_CONFIG}: [Errno 2]" in res.stderr


# ---------------------------------------------------------------------------------------------
# the runner from its parameter (nodes with the AWS CLI)
# ---------------------------------------------------------------------------------------------

def _shim_node(tmp: Path, value: str) -> tuple[Path, dict[str, str], Path]:
    """The p5 node's rendered ``clusterforge-node``, a stand-in ``aws`` answering get-parameter with ``value`` and
    recording put-parameter, a stand-in ``cloud-init query``; returns (shim, environment, the runner's path)."""
    files = _files(_doc("aws-p5-efa-lustre", "gpu"))
    node = Node(tmp, _doc("aws-p5-efa-lustre", "gpu"))
    runner = node.root / NODE_MODULE.lstrip("/")
    runner.unlink()  # not fetched yet
    (node.bin / "aws").write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        "if sys.argv[1:3] == ['ssm', 'get-parameter']:\n"
        f"    assert sys.argv[3:] == ['--region', 'us-east-1', '--name', {runner_parameter(STACK_PATH)!r}, "
        "'--query', 'Parameter.Value', '--output', 'text'], sys.argv\n"
        f"    print({value!r})\n"
        "else:\n"
        f"    open({str(node.calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    (node.bin / "cloud-init").write_text("#!/bin/sh\n[ \"$*\" = 'query v1.region' ] && echo us-east-1\n")
    (node.bin / "cloud-init").chmod(0o755)
    shim = tmp / "clusterforge-node"
    shim.write_text(files[NODE_COMMAND])
    shim.chmod(0o755)
    env = {**node.env, "CLUSTERFORGE_RUNNER": str(runner), "CLUSTERFORGE_BOOT_LOG": str(tmp / "boot.log"),
           "CLUSTERFORGE_RETRY_S": "0"}
    return shim, env, runner


def test_the_runner_is_fetched_once_checked_and_run(tmp_path: Path) -> None:
    shim, env, runner = _shim_node(tmp_path, runner_value())
    res = subprocess.run([str(shim), "step", "sysctl", "true"], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    assert runner.read_text() == module_source("clusterforge_node.py")
    calls = [json.loads(x) for x in (tmp_path / "aws-calls.jsonl").read_text().splitlines()]
    assert [json.loads(json.loads(c[5])["Value"])["step"] for c in calls] == ["sysctl"]


def test_a_runner_that_is_not_the_pinned_one_is_not_run_and_the_steps_still_are(tmp_path: Path) -> None:
    evil = base64.b64encode(gzip.compress(b"import os\nos.system('touch /tmp/owned')\n")).decode()
    shim, env, runner = _shim_node(tmp_path, evil)
    marker = tmp_path / "ran"
    res = subprocess.run([str(shim), "step", "efa", "touch", str(marker)], capture_output=True, text=True, env=env,
                         check=False)
    assert res.returncode == 0 and marker.exists(), "the step itself runs, unreported"
    assert not runner.exists() and not (tmp_path / "aws-calls.jsonl").exists()
    log = (tmp_path / "boot.log").read_text()
    assert "FAILED" in log and "no step runner from /clusterforge/p5-train-us-east-1/runner: 'step efa touch" in log
    failing = subprocess.run([str(shim), "step", "efa", "false"], capture_output=True, text=True, env=env, check=False)
    assert failing.returncode == 1, "a failing step still fails the boot script's command"


# ---------------------------------------------------------------------------------------------
# the stack (the program under the mock engine)
# ---------------------------------------------------------------------------------------------

POLICY = "aws:iam/policy:Policy"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PARAMETER = "aws:ssm/parameter:Parameter"


def _status_policy(plan: Any, stack: str) -> tuple[Any, dict[str, Any]]:
    (policy,) = [r for r in plan.of_type(POLICY) if r.name == f"{stack}-node-status-policy"]
    return policy, json.loads(policy.inputs["policy"])


@pytest.mark.parametrize(("example", "roles"), [("aws-p5-efa-lustre", ["node-iam"]),
                                                ("aws-p5-slurm", ["controller-iam", "node-iam"])])
def test_node_roles_may_put_records_only_under_their_stacks_path(example: str, roles: list[str]) -> None:
    """Least privilege: PutParameter on ``/clusterforge/<stack>/nodes/*`` and GetParameter on the stack's runner, in
    the stack's region and account (parameter ARNs as AWS writes them: catalog ``node_status.arn_form_source``); no
    other action, no wildcard account or region, no other stack's path."""
    plan = plan_example(example)
    stack = plan.stack  # the plan's stack is named after the blueprint
    policy, doc = _status_policy(plan, stack)
    arn = f"arn:aws:ssm:us-east-1:123456789012:parameter/clusterforge/{stack}"
    assert doc["Statement"] == [
        {"Sid": "NodeStatusRecord", "Effect": "Allow", "Action": ["ssm:PutParameter"], "Resource": f"{arn}/nodes/*"},
        {"Sid": "NodeStepRunner", "Effect": "Allow", "Action": ["ssm:GetParameter"], "Resource": f"{arn}/runner"}]
    attached = sorted(a.inputs["role"].removeprefix(f"{stack}-").removesuffix("-role")
                      for a in plan.of_type(ATTACH) if a.inputs["policyArn"] == policy.inputs.get("arn", policy.urn)
                      or a.inputs["policyArn"].endswith(f":{stack}-node-status-policy"))
    assert attached == roles, "every EC2 node role, and only those, gets the policy"
    (runner,) = plan.of_type(PARAMETER)
    assert runner.inputs["name"] == f"/clusterforge/{stack}/runner" and runner.inputs["tier"] == "Standard"
    # (its value, runner_value(), is a secret input of aws.ssm.Parameter: the plan shows it masked)
    # the nodes write where the policy lets them: the path in every EC2 node's user data
    for lt in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        assert f'"path": "/clusterforge/{stack}/nodes"' in user_data(lt)


def test_the_stack_exports_what_up_waits_for() -> None:
    plan = plan_example("aws-p5-efa-lustre")
    instances = {i.name: i.id for i in plan.of_type("aws:ec2/instance:Instance")}
    assert plan.outputs["nodeReadiness"] == {"path": "/clusterforge/p5-train/nodes",
                                             "groups": {"gpu": {"nodes": instances}}}
    assert sorted(instances) == ["p5-train-gpu-0", "p5-train-gpu-1"]


def test_eks_node_groups_wait_on_eks_and_get_no_status_permission() -> None:
    plan = plan_example("aws-eks-p4d")
    groups = plan.outputs["nodeReadiness"]["groups"]
    ngs = {r.name for r in plan.of_type("aws:eks/nodeGroup:NodeGroup")}
    assert {g["eksNodeGroup"] for g in groups.values()} == ngs and len(ngs) == 2
    assert not [r for r in plan.resources if "node-status" in r.name], "EKS nodes write no status record"
    for lt in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        assert NODE_COMMAND not in user_data(lt)
