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
import re
import stat
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
from stacks.cloud_init import (
    EFA_SCRIPT,
    node_programs,
    placeholder_endpoints,
    render_cloud_config,
    scratch_script,
)
from stacks.node_status import (
    AWS_MODULE,
    BOOT_LOG,
    CHECKER,
    HEALTH_CHECK,
    NODE_COMMAND,
    NODE_MODULE,
    NODE_SETTINGS,
    PROGRAMS,
    READY_AFTER_REBOOT,
    RUNNER,
    STATUS_CONFIG,
    module_source,
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
    assert EFA_SCRIPT not in files, "the EFA script is one of the group's programs: the runner fetches it from SSM"
    # the NVMe scratch runs at every boot (before runcmd) as a reported step too, the script itself unchanged
    per_boot = files["/var/lib/cloud/scripts/per-boot/10-clusterforge-scratch.sh"]
    assert per_boot == f"#!/bin/sh\nexec {NODE_COMMAND} step scratch /usr/local/sbin/clusterforge-scratch.sh\n"
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert s.scratch is not None and files["/usr/local/sbin/clusterforge-scratch.sh"] == scratch_script(s.scratch)
    config = json.loads(files[STATUS_CONFIG])
    programs = "/clusterforge/p5-train-us-east-1/programs"
    (efa,) = node_programs(s)
    assert config == {"path": "/clusterforge/p5-train-us-east-1/nodes", "group": "gpu",
                      "checks": ["python3", CHECKER, "--config", NODE_SETTINGS, "--section", "health", "--no-scheduler"],
                      "steps": ["scratch", *steps, "checks", "ready"], "log": BOOT_LOG,
                      "tier": catalog().aws["node_status"]["tier"],
                      "programs": {
                          EFA_SCRIPT: {"parameters": [f"{programs}/efa/gpu/0"], "sha256": efa.sha256()},
                          CHECKER: {"parameters": [f"{programs}/checks/0", f"{programs}/checks/1"],
                                    "sha256": HEALTH_CHECK.sha256()}}}
    assert efa.dest == EFA_SCRIPT and efa.text().startswith("#!/bin/bash\n# clusterforge: EFA software (full stack)")
    # the Deep Learning AMI has the AWS CLI: the runner comes from the stack's SSM parameter (no room in EC2's 16 KB
    # beside the rest), is checked against its SHA-256 pinned in the user data and puts the records with the CLI
    assert catalog().aws["node_images"]["ec2_gpu"]["aws_cli"] is True
    assert NODE_MODULE not in files and AWS_MODULE not in files
    shim = files[NODE_COMMAND]
    assert RUNNER.parameters(STACK_PATH) == [f"{programs}/runner/0"]
    assert f"for p in {programs}/runner/0; do" in shim
    assert hashlib.sha256(module_source("clusterforge_node.py").encode()).hexdigest() in shim


@pytest.mark.parametrize(("example", "group", "health"), [
    ("aws-p5-slurm", "gpu", {"gpu_count": 8, "gpu_model": "h100-sxm", "mounts": ["/scratch", "/fsx"]}),
    ("aws-p5-slurm", "controller", {"gpu_count": 0, "mounts": ["/fsx"]}),  # a declared mount on any group
])
def test_slurm_nodes_run_the_same_quick_checks(example: str, group: str, health: dict[str, Any]) -> None:
    """Slurm nodes run the health check like every EC2 node (fetched, ``--no-scheduler``: booting never drains;
    slurmd's own runs of the bundle's copy do), against the same expectations slurmd's runs read."""
    files = _files(_doc(example, group))
    config = json.loads(files[STATUS_CONFIG])
    assert config["checks"] == ["python3", CHECKER, "--config", NODE_SETTINGS, "--section", "health", "--no-scheduler"]
    assert config["steps"][-3:] == ["slurm", "checks", "ready"] and CHECKER in config["programs"]
    settings = json.loads(files[NODE_SETTINGS])
    assert {k: v for k, v in settings["health"].items() if k in health} == health
    if group == "gpu":  # slurm-health.json in the bundle: the same expectations, with slurmd's time limit and prefix
        assert settings["slurm"]["health"] == {**settings["health"], "timeout_s": 50, "reason_prefix": "cf-health"}
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


@pytest.mark.parametrize("name", ["clusterforge_node.py", "clusterforge_aws.py", "clusterforge-slurm-aws.py",
                                  "clusterforge-slurm-health"])
def test_the_programs_in_user_data_are_the_repositorys_without_docstrings(name: str) -> None:
    docs = [_doc("aws-p5-slurm", "gpu"), _doc("aws-p5-slurm", "controller")]
    if name == "clusterforge-slurm-health":  # it travels in SSM parameters (HEALTH_CHECK), the same way
        shipped, source = HEALTH_CHECK.text(), HEALTH.read_text()
    else:
        where = {"clusterforge_node.py": NODE_MODULE, "clusterforge_aws.py": AWS_MODULE,
                 "clusterforge-slurm-aws.py": "/usr/local/sbin/clusterforge-slurm-aws"}[name]
        shipped = next(_files(d)[where] for d in docs if where in _files(d))
        source = (FILES / name).read_text()
    assert _functions(shipped) == _functions(source) and len(_functions(source)) >= 5
    assert '"""' not in shipped and len(shipped) < len(source)


@pytest.mark.parametrize("program", [*PROGRAMS, *node_programs(node_settings(
    load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu"))], ids=lambda p: p.name)
def test_every_program_fits_standard_parameters_and_joins_back(program: Any) -> None:
    """Each part within a standard parameter's 4 KB (catalog ``node_status``); the parts joined, unpacked, are the
    program whose SHA-256 the nodes pin; a part is whole base64 quads."""
    values = program.values()
    limit = int(catalog().aws["node_status"]["value_max_bytes"])
    assert all(len(v.encode()) <= limit and len(v) % 4 == 0 for v in values)
    text = gzip.decompress(base64.b64decode("".join(values)))
    assert text.decode() == program.text() and hashlib.sha256(text).hexdigest() == program.sha256()
    assert len(program.parameters(STACK_PATH)) == len(values)
    assert len(values) == (2 if program is HEALTH_CHECK else 1), "the health check takes two (about 6 KB)"


# ---------------------------------------------------------------------------------------------
# the runner, for real
# ---------------------------------------------------------------------------------------------

AWS_CLI = """#!{python}
import json, sys
argv = sys.argv[1:]
open({calls!r}, "a").write(json.dumps(argv) + "\\n")
if argv[:2] == ["ssm", "get-parameter"]:
    assert argv[2:4] == ["--region", "us-east-1"] and argv[6:] == ["--query", "Parameter.Value", "--output", "text"], argv
    values = json.load(open({values!r}))
    if argv[5] not in values:
        sys.exit("An error occurred (ParameterNotFound) when calling the GetParameter operation: " + argv[5])
    print(values[argv[5]])
"""
"""A stand-in AWS CLI: records every call; ``ssm get-parameter`` answers from the stack's parameters (a JSON file)."""


def stack_parameters(settings: Any = None) -> dict[str, str]:
    """The programs' SSM parameters a stack holds (name -> value), as the NodeStatus component creates them: every
    node's and, with ``settings``, that node group's own."""
    programs = PROGRAMS + (node_programs(settings) if settings is not None else ())
    return {n: v for p in programs for n, v in zip(p.parameters(STACK_PATH), p.values())}


class Node:
    """A temporary root holding what cloud-init writes for one node (the runner, its settings, instance data) and
    a stand-in ``aws`` CLI (:data:`AWS_CLI`) answering get-parameter from the stack's program parameters and
    recording each ``put-parameter``; :meth:`run` runs the runner like ``runcmd`` does."""

    def __init__(self, tmp: Path, doc: dict[str, Any], cli: bool = True, settings: Any = None) -> None:
        self.root = tmp / "root"
        files = _files(doc)
        # the runner as the node has it: from the user data, or fetched from the runner parameter
        files.setdefault(NODE_MODULE, module_source("clusterforge_node.py"))
        for path, content in files.items():
            if path in (NODE_MODULE, AWS_MODULE, STATUS_CONFIG, NODE_SETTINGS):
                dest = self.root / path.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(content)
        (self.root / "run" / "cloud-init").mkdir(parents=True)
        (self.root / "run" / "cloud-init" / "instance-data.json").write_text(
            json.dumps({"v1": {"instance_id": INSTANCE_ID, "region": REGION, "cloud_name": "aws"}}))
        (self.root / "var" / "log").mkdir(parents=True)
        self.calls = tmp / "aws-calls.jsonl"
        self.values = tmp / "parameters.json"
        self.values.write_text(json.dumps(stack_parameters(settings)))
        self.bin = tmp / "bin"
        self.bin.mkdir()
        if cli:  # the AWS CLI as the runner calls it: the request as --cli-input-json
            (self.bin / "aws").write_text(AWS_CLI.format(python=sys.executable, calls=str(self.calls),
                                                         values=str(self.values)))
            (self.bin / "aws").chmod(0o755)
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "CLUSTERFORGE_ROOT": str(self.root),
                    "CLUSTERFORGE_RETRY_S": "0"}

    def run(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(self.root / NODE_MODULE.lstrip("/")), *argv], capture_output=True,
                              text=True, env={**self.env, **env}, timeout=120, check=False)

    def records(self) -> list[dict[str, Any]]:
        """The status records the CLI was asked to put, in order (each checked against PutParameter's request)."""
        out = []
        for line in self.calls.read_text().splitlines() if self.calls.exists() else []:
            argv = json.loads(line)
            if argv[:2] == ["ssm", "get-parameter"]:
                continue
            assert argv[:4] == ["ssm", "put-parameter", "--region", REGION] and argv[4] == "--cli-input-json"
            request = json.loads(argv[5])
            assert request["Name"] == f"{STACK_PATH}/{INSTANCE_ID}"
            assert (request["Type"], request["Overwrite"], request["Tier"]) == ("String", True, "Standard")
            out.append(json.loads(request["Value"]))
        return out

    def fetched(self) -> list[str]:
        """The parameters the CLI was asked for, in order."""
        calls = [json.loads(x) for x in self.calls.read_text().splitlines()] if self.calls.exists() else []
        return [c[5] for c in calls if c[:2] == ["ssm", "get-parameter"]]

    def checks_here(self, mounts: list[str], devices: list[str] | None = None) -> None:
        """The quick checks' argv as the user data has it, reading this root's node settings and a mount table with
        ``mounts`` (this machine's ``/etc`` and ``/proc`` are not the node's); ``devices``: stand-ins for the GPU
        device files the settings expect."""
        mountinfo = self.root / "mountinfo"
        mountinfo.write_text("".join(f"{40 + i} 22 0:{50 + i} / {m} rw,relatime shared:{i} - "
                                     f"{'lustre 10.0.0.5@tcp:/abcdefgh' if m == '/fsx' else 'xfs /dev/md127'} rw\n"
                                     for i, m in enumerate(mounts)))
        config_path = self.root / STATUS_CONFIG.lstrip("/")
        config = json.loads(config_path.read_text())
        argv = config["checks"]
        if argv[3] == NODE_SETTINGS:  # not yet pointed here
            assert argv == ["python3", CHECKER, "--config", NODE_SETTINGS, "--section", "health", "--no-scheduler"]
            config["checks"] = [*argv[:3], str(self.root / NODE_SETTINGS.lstrip("/")), *argv[4:6], "--mountinfo",
                                str(mountinfo), argv[6]]
            config_path.write_text(json.dumps(config))
        if devices is not None:
            settings_path = self.root / NODE_SETTINGS.lstrip("/")
            settings = json.loads(settings_path.read_text())
            settings["health"]["gpu_devices"] = devices
            settings_path.write_text(json.dumps(settings))

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
    assert (failed["group"], failed["instance"], failed["total"], failed["log"]) == ("gpu", INSTANCE_ID, 11, BOOT_LOG)
    log = node.log()
    assert "step efa: sh -c" in log and "cleaning up" in log and "step lustre not run" in log


NOTHING_TO_CHECK = {"node_groups": [{"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge"},
                                     {"name": "svc", "role": "login", "count": 1, "instance_type": "m7i.2xlarge"}],
                    "storage": None}
"""A blueprint whose ``svc`` group has nothing to check: no GPUs, no mounts."""


def test_a_node_whose_steps_pass_reports_ready_and_a_later_boot_only_its_failures(tmp_path: Path) -> None:
    doc = _doc("aws-p5-efa-lustre", "svc", NOTHING_TO_CHECK, tmp_path)
    config = json.loads(_files(doc)[STATUS_CONFIG])
    assert config["checks"] is None and config["programs"] == {}, "no GPUs, no mounts: nothing to check, no checker"
    node = Node(tmp_path, doc)
    for name in config["steps"][:-1]:
        assert node.run("step", name, "true").returncode == 0
    assert node.run("ready").returncode == 0
    last = node.records()[-1]
    assert (last["state"], last["step"], last["index"], last["message"]) == (
        "ready", "ready", len(config["steps"]), "no quick checks on this node")
    assert node.fetched() == [], "no program to fetch"
    n = len(node.records())
    node.reboot()  # a per-boot step (the NVMe scratch on a group with one) runs again: quiet when it passes
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
    node.checks_here(["/scratch", "/fsx"])  # the GPUs are the guests': the host checks its mounts only
    (node.root / "run" / "clusterforge-reboot-required").write_text("")  # the kernel command line script's flag
    assert node.run("ready").returncode == 0
    assert [(r["state"], r["step"]) for r in node.records()] == [("configuring", "reboot")]
    assert (node.root / "var/lib/clusterforge/ready-after-reboot").exists()
    node.reboot()
    (node.root / "var/lib/clusterforge/ready-after-reboot").unlink()  # what the per-boot script does, then `ready`
    assert node.run("ready").returncode == 0
    assert (node.records()[-1]["state"], node.records()[-1]["message"]) == ("ready", "quick checks passed")
    assert json.loads(_files(doc)[NODE_SETTINGS])["health"] == {
        "gpu_count": 0, "gpu_names": [], "gpu_devices": [], "driver_branch": "", "training_node": False,
        "mounts": ["/scratch", "/fsx"]}


def test_the_efa_script_is_fetched_checked_and_run_before_its_step(tmp_path: Path) -> None:
    """A group's own program (its EFA script, :func:`stacks.cloud_init.node_programs`) comes from the stack's
    parameters before the step that runs it: fetched once, unpacked, checked against the pinned SHA-256, run; its
    failure is the step's, with the script's ERROR line."""
    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint
    s = node_settings(bp, "gpu")
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"), settings=s)
    script = node.root / EFA_SCRIPT.lstrip("/")
    record = tmp_path / "efa-installer-record"  # the AMI's EFA software (the installer's record): none is installed
    record.write_text("EFA installer version: 1.43.2\n")
    res = node.run("step", "efa", EFA_SCRIPT, RECORD=str(record), LDCONF=str(tmp_path / "ofi.conf"))
    (efa,) = node_programs(s)
    assert node.fetched() == [f"{STACK_PATH.rsplit('/', 1)[0]}/programs/efa/gpu/0"]
    assert script.read_text() == efa.text() and script.stat().st_mode & 0o777 == 0o755
    # the script ran: this machine has no OFI plugin, and the script says so
    assert res.returncode == 1 and "EFA software present (installer 1.43.2)" in res.stdout
    last = node.records()[-1]
    assert (last["state"], last["step"]) == ("failed", "efa")
    assert last["message"].startswith("clusterforge-efa: ERROR: libnccl-net-ofi.so not found in ")
    node.reboot()
    node.run("step", "efa", EFA_SCRIPT, RECORD=str(record), LDCONF=str(tmp_path / "ofi.conf"))
    assert len(node.fetched()) == 1, "a program already in place with its pinned SHA-256 is not fetched again"


def test_a_program_that_is_not_the_pinned_one_fails_its_step_unrun(tmp_path: Path) -> None:
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"), settings=s)
    marker = tmp_path / "owned"
    values = json.loads(node.values.read_text())
    (name,) = [n for n in values if "/programs/efa/" in n]
    values[name] = base64.b64encode(gzip.compress(f"#!/bin/sh\ntouch {marker}\n".encode())).decode()
    node.values.write_text(json.dumps(values))
    assert node.run("step", "efa", EFA_SCRIPT).returncode == 1
    assert not marker.exists() and not (node.root / EFA_SCRIPT.lstrip("/")).exists()
    last = node.records()[-1]
    assert (last["state"], last["step"]) == ("failed", "efa")
    assert last["message"].startswith(f"ERROR: {EFA_SCRIPT} from {STACK_PATH.rsplit('/', 1)[0]}/programs/efa/gpu/* "
                                      "has SHA-256 ") and last["message"].endswith("not run (update the stack: "
                                                                                   "clusterforge up)")
    assert node.run("step", "lustre", "true").returncode == 1, "the later steps of this boot do not run"


def test_a_program_that_cannot_be_fetched_fails_its_step_with_the_clis_word(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))  # the stack holds no EFA program for this node
    assert node.run("step", "efa", EFA_SCRIPT).returncode == 1
    assert len(node.fetched()) == 3, "tried three times"
    message = node.records()[-1]["message"]
    assert message.startswith(f"ERROR: {EFA_SCRIPT} from ") and "could not be fetched (aws ssm get-parameter: exit 1: " in message
    assert "ParameterNotFound" in message and message.endswith("): not run")


# ---------------------------------------------------------------------------------------------
# the quick checks, for real: the health check fetched by the runner, against stand-in hardware
# ---------------------------------------------------------------------------------------------

DGX_SMI = REPO / "tests" / "fixtures" / "node" / "dgx-h100" / "dgx-01" / "nvidia-smi-q-x.xml"
"""A recorded ``nvidia-smi -q -x`` of a DGX H100 (eight H100 80GB HBM3: what a p5.48xlarge has)."""
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the GPU device files are made with mknod (CI runs as root)")


def _gpu_node(tmp: Path, gpus_seen: int = 8) -> tuple[Node, list[str]]:
    """The p5 group's node (no Slurm: the quick checks are its only health check) with the steps before ``checks``
    passed, a stand-in ``nvidia-smi`` printing the DGX recording (its driver of the blueprint's branch) with
    ``gpus_seen`` GPUs, the eight GPU device files and both mounts; returns the node and its device files."""
    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert s.slurm is None and s.health.gpu_count == 8 and "NVIDIA H100 80GB HBM3" in s.health.gpu_names
    node = Node(tmp, _doc("aws-p5-efa-lustre", "gpu"), settings=s)
    xml = DGX_SMI.read_text().replace("<driver_version>550.90.07</driver_version>",
                                      f"<driver_version>{s.health.driver_branch}.82.07</driver_version>")
    for _ in range(8 - gpus_seen):  # a GPU that fell off the bus
        xml = re.sub(r"\s*<gpu id=\"[^\"]+\">.*?</gpu>", "", xml, count=1, flags=re.DOTALL)
    (tmp / "smi.xml").write_text(xml)
    (node.bin / "nvidia-smi").write_text(f"#!/bin/sh\ncat {tmp / 'smi.xml'}\n")
    (node.bin / "nvidia-smi").chmod(0o755)
    devices = []
    for i in range(8):
        dev = tmp / f"nvidia{i}"
        os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(195, i))
        devices.append(str(dev))
    node.checks_here(["/scratch", "/fsx"], devices)
    config = json.loads((node.root / STATUS_CONFIG.lstrip("/")).read_text())
    for name in config["steps"][:-2]:
        assert node.run("step", name, "true").returncode == 0
    return node, devices


@root_only
def test_a_gpu_node_whose_quick_checks_pass_is_ready(tmp_path: Path) -> None:
    node, _ = _gpu_node(tmp_path)
    res = node.run("ready")
    assert res.returncode == 0, res.stderr
    assert [(r["state"], r["step"], r["message"]) for r in node.records()[-2:]] == [
        ("configuring", "checks", ""), ("ready", "ready", "quick checks passed")]
    # the health check came from the stack's two parameters, unpacked to the pinned program
    assert node.fetched() == HEALTH_CHECK.parameters(STACK_PATH)
    assert (node.root / CHECKER.lstrip("/")).read_text() == HEALTH_CHECK.text()


@root_only
@pytest.mark.parametrize(("fault", "says"), [
    ("gpu", "clusterforge-slurm-health: FAIL gpu.count: 7 of 8 GPUs visible: check `dmesg` for XID errors"),
    ("device", "clusterforge-slurm-health: FAIL gpu.devices: {dev} missing: load the NVIDIA driver"),
    ("mount", "clusterforge-slurm-health: FAIL storage.mounts: /fsx not mounted: mount it (`mount -a`"),
])
def test_a_failed_quick_check_fails_the_node_naming_the_check(tmp_path: Path, fault: str, says: str) -> None:
    node, devices = _gpu_node(tmp_path, gpus_seen=7 if fault == "gpu" else 8)
    if fault == "device":
        os.unlink(devices[5])
    if fault == "mount":
        node.checks_here(["/scratch"])
    assert node.run("ready").returncode == 1
    last = node.records()[-1]
    assert (last["state"], last["step"], last["index"], last["total"]) == ("failed", "checks", 10, 11)
    assert last["message"].startswith(says.format(dev=devices[5])), last["message"]
    assert not (node.root / "var/lib/clusterforge/ready").exists()
    assert "step checks failed (exit status 1)" in node.log()


def test_a_health_check_that_is_not_the_pinned_one_is_refused_unrun(tmp_path: Path) -> None:
    node = Node(tmp_path, _doc("aws-p5-efa-lustre", "gpu"))
    marker = tmp_path / "owned"
    values = json.loads(node.values.read_text())
    program = f"open({str(marker)!r}, 'w')\n".encode()
    forged = base64.b64encode(gzip.compress(program)).decode()
    first, second = HEALTH_CHECK.parameters(STACK_PATH)
    values.update({first: forged[:8], second: forged[8:]})
    node.values.write_text(json.dumps(values))
    assert node.run("ready").returncode == 1
    assert not marker.exists() and not (node.root / CHECKER.lstrip("/")).exists()
    last = node.records()[-1]
    assert (last["state"], last["step"]) == ("failed", "checks")
    assert last["message"].startswith(f"ERROR: {CHECKER} from /clusterforge/p5-train-us-east-1/programs/checks/* "
                                      f"has SHA-256 {hashlib.sha256(program).hexdigest()[:16]}..., not the "
                                      f"pinned {HEALTH_CHECK.sha256()[:16]}...: not run")


def test_a_cpu_node_without_the_cli_fetches_its_checks_signed_and_names_a_missing_mount(tmp_path: Path, aws) -> None:
    """A node of Canonical's Ubuntu (no AWS CLI) with an FSx mount: the runner in its user data fetches the health
    check with clusterforge_aws.py (SigV4 GetParameter against the stand-in SSM) and reports the missing mount."""
    patch = {"node_groups": [{"name": "gpu", "role": "compute", "count": 2, "instance_type": "p5.48xlarge"},
                             {"name": "svc", "role": "login", "count": 1, "instance_type": "m7i.2xlarge"}]}
    doc = _doc("aws-p5-efa-lustre", "svc", patch, tmp_path)
    assert json.loads(_files(doc)[NODE_SETTINGS])["health"] == {
        "gpu_count": 0, "gpu_names": [], "gpu_devices": [], "driver_branch": "", "training_node": False,
        "mounts": ["/fsx"]}
    node = Node(tmp_path, doc, cli=False)
    for name, value in json.loads(node.values.read_text()).items():  # what the stack put
        aws["parameters"][name] = [{"Name": name, "Value": value}]
    node.checks_here([])
    env = {"CLUSTERFORGE_IMDS": aws["url"], "CLUSTERFORGE_AWS_ENDPOINT": aws["url"]}
    assert node.run("ready", **env).returncode == 1
    assert aws["calls"].count("GetParameter") == 2
    puts = aws["parameters"][f"{STACK_PATH}/{INSTANCE_ID}"]
    last = json.loads(puts[-1]["Value"])
    assert (last["state"], last["step"]) == ("failed", "checks")
    assert last["message"].startswith("clusterforge-slurm-health: FAIL storage.mounts: /fsx not mounted")
    node.reboot()  # mounted now: the program fetched before is not fetched again
    (node.root / "var/lib/clusterforge/failed").unlink()
    node.checks_here(["/fsx"])
    assert node.run("ready", **env).returncode == 0
    assert aws["calls"].count("GetParameter") == 2
    assert json.loads(aws["parameters"][f"{STACK_PATH}/{INSTANCE_ID}"][-1]["Value"])["message"] == "quick checks passed"


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
        f"    assert sys.argv[3:] == ['--region', 'us-east-1', '--name', {RUNNER.parameters(STACK_PATH)[0]!r}, "
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
    (value,) = RUNNER.values()
    shim, env, runner = _shim_node(tmp_path, value)
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
    assert "FAILED" in log and ("no step runner from /clusterforge/p5-train-us-east-1/programs/runner: 'step efa touch"
                                in log)
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
    """Least privilege: PutParameter on ``/clusterforge/<stack>/nodes/*`` and GetParameter on each part of the
    stack's programs (the runner, the health check, the GPU group's EFA script), in the stack's region and account
    (parameter ARNs as AWS writes them: catalog ``node_status.arn_form_source``); no other action, no wildcard, no
    other stack's path."""
    plan = plan_example(example)
    stack = plan.stack  # the plan's stack is named after the blueprint
    policy, doc = _status_policy(plan, stack)
    arn = f"arn:aws:ssm:us-east-1:123456789012:parameter/clusterforge/{stack}"
    programs = ["runner/0", "checks/0", "checks/1", "efa/gpu/0"]
    assert doc["Statement"] == [
        {"Sid": "NodeStatusRecord", "Effect": "Allow", "Action": ["ssm:PutParameter"], "Resource": f"{arn}/nodes/*"},
        {"Sid": "NodePrograms", "Effect": "Allow", "Action": ["ssm:GetParameter"],
         "Resource": [f"{arn}/programs/{p}" for p in programs]}]
    attached = sorted(a.inputs["role"].removeprefix(f"{stack}-").removesuffix("-role")
                      for a in plan.of_type(ATTACH) if a.inputs["policyArn"] == policy.inputs.get("arn", policy.urn)
                      or a.inputs["policyArn"].endswith(f":{stack}-node-status-policy"))
    assert attached == roles, "every EC2 node role, and only those, gets the policy"
    parameters = plan.of_type(PARAMETER)
    assert sorted(r.inputs["name"] for r in parameters) == sorted(f"/clusterforge/{stack}/programs/{p}"
                                                                 for p in programs)
    assert {r.inputs["tier"] for r in parameters} == {"Standard"}
    # (their values, NodeProgram.values(), are secret inputs of aws.ssm.Parameter: the plan shows them masked)
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
