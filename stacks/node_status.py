"""Node readiness on AWS: each node's boot steps report to a status record that ``clusterforge up`` waits on.

Every cloud-init step of an EC2 node (:func:`stacks.cloud_init.render_cloud_config`) runs through the node's step
runner ``clusterforge_node.py`` (``stacks/files``, standard library only, written by cloud-init to
:data:`NODE_MODULE`) as ``clusterforge-node step NAME COMMAND``: the step is reported as ``configuring``, its output
goes to the console, to cloud-init's output log and to :data:`BOOT_LOG`, and a failing step is reported as ``failed``
with its name and the line that says why; the later steps of that boot do not run. The last ``runcmd`` entry, ``clusterforge-node ready``,
runs the node's quick checks as step ``checks`` (on Slurm compute nodes the slurm_node role's health check, the
node suite's rules for GPUs, driver, ECC, MIG and mounts, without draining: :func:`stacks.slurm_boot.quick_checks`)
and reports ``ready``; a host that reboots into its kernel command line reports ``ready`` after that reboot.

The status record is the SSM parameter ``<path>/<instance id>`` with ``path`` = :func:`status_path` of the Pulumi
stack (``/clusterforge/<stack>/nodes``), a JSON value (catalog ``node_status``: String, Standard tier). It is put with
the AWS CLI where the node's image has one (catalog ``node_images.*.aws_cli``: the Deep Learning AMI), else with
``clusterforge_aws.py`` (SigV4 with the instance role, :data:`AWS_MODULE`; also the Slurm helper's library). The node
role may put parameters under that path only (:func:`status_policy`). The stack exports the path and the nodes it
expects as ``nodeReadiness``; ``clusterforge up`` polls the path (:mod:`clusterforge.readiness`).

EKS managed node groups carry none of this: their user data budget (EC2's 16 KB less EKS's own bootstrap part) has
no room for the runner, and ``up`` reads EKS's own word on them instead (the node group's status and health issues).

Sources: cloud-init runs ``runcmd`` (module ``scripts_user``) after the per-boot scripts and before ``power_state``
(https://github.com/canonical/cloud-init/blob/main/config/cloud.cfg.tmpl); PutParameter
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html ; parameter ARNs in IAM
policies https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-paramstore-access.html .
"""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import json
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from blueprints.catalog import catalog
from blueprints.settings import NodeSettings

__all__ = [
    "AWS_MODULE",
    "BOOT_LOG",
    "NODE_COMMAND",
    "NODE_MODULE",
    "READY_AFTER_REBOOT",
    "STATUS_CONFIG",
    "BootStep",
    "image_has_aws_cli",
    "module_source",
    "ready_after_reboot",
    "runner_parameter",
    "runner_value",
    "shim",
    "status_config",
    "status_path",
    "status_policy",
]

NODE_MODULE = "/usr/local/lib/clusterforge/clusterforge_node.py"
"""Where cloud-init writes the node's step runner."""
AWS_MODULE = "/usr/local/lib/clusterforge/clusterforge_aws.py"
"""Where cloud-init writes the node's AWS requests module (IMDSv2, SigV4; the Slurm helper imports it too)."""
NODE_COMMAND = "/usr/local/sbin/clusterforge-node"
"""The command the boot steps run through (``exec python3 NODE_MODULE "$@"``)."""
STATUS_CONFIG = "/etc/clusterforge/node-status.json"
"""The node's status settings: parameter path, node group, step names in order, quick checks, boot log."""
BOOT_LOG = "/var/log/clusterforge-boot.log"
"""Every step's command and output, and each report that could not be written."""
READY_AFTER_REBOOT = "/var/lib/cloud/scripts/per-boot/99-clusterforge-ready.sh"
"""Per-boot script of a host that reboots into its kernel command line: reports ``ready`` after that reboot."""

FILES = Path(__file__).resolve().parent / "files"
"""``stacks/files``: the node-side programs."""


def status_path(stack: str) -> str:
    """The SSM parameter path under which the nodes of Pulumi stack ``stack`` write their status records
    (``/clusterforge/<stack>/nodes``). Stack names (letters, digits, ``-``, ``_``, ``.``) are valid parameter name
    characters (PutParameter's naming constraints)."""
    return f"/clusterforge/{stack}/nodes"


@dataclass(frozen=True)
class BootStep:
    """One reported boot step: ``name`` (in the status record) and the shell ``command`` it runs."""

    name: str
    command: str

    def runcmd(self) -> str:
        """The ``runcmd`` entry (or per-boot line) that runs the command as this step."""
        return f"{NODE_COMMAND} step {self.name} {self.command}"


def status_config(path: str, group: str, steps: list[str], checks: list[str] | None) -> str:
    """The JSON text of :data:`STATUS_CONFIG`: parameter ``path``, node ``group``, the step names in the order they
    run (ending with ``ready``), the quick checks' argv (``None``: the node has none), the boot log and the parameter
    tier (catalog ``node_status.tier``)."""
    return json.dumps({"path": path, "group": group, "steps": steps, "checks": checks, "log": BOOT_LOG,
                       "tier": str(catalog().aws["node_status"]["tier"])}, sort_keys=True) + "\n"


def image_has_aws_cli(settings: NodeSettings) -> bool:
    """Whether the image an EC2 node of ``settings`` boots has the AWS CLI (catalog ``node_images.<image>.aws_cli``:
    the Deep Learning AMI for GPU groups; Canonical's Ubuntu for the others is not known to). A ``target.ami_id`` is
    taken to be an image of the same kind."""
    image = "ec2_gpu" if settings.gpu_count > 0 else "ec2_cpu"
    return bool(catalog().aws["node_images"][image].get("aws_cli", False))


def runner_parameter(path: str) -> str:
    """The SSM parameter holding the step runner for nodes with the AWS CLI: ``/clusterforge/<stack>/runner`` beside
    the status records' ``path`` (``/clusterforge/<stack>/nodes``), outside the part the nodes may write."""
    return path.rsplit("/", 1)[0] + "/runner"


def runner_value() -> str:
    """The runner parameter's value: the runner as user data would carry it (:func:`module_source`), gzip'd (fixed
    timestamp) and base64-encoded; within a standard parameter's 4 KB (catalog ``node_status.value_max_bytes``)."""
    return base64.b64encode(gzip.compress(module_source("clusterforge_node.py").encode(), 9, mtime=0)).decode("ascii")


def shim(runner: str | None = None) -> str:
    """The text of :data:`NODE_COMMAND`: ``exec python3`` of the runner. ``runner``: the SSM parameter it is fetched
    from on the first call (nodes with the AWS CLI: EC2's 16 KB of user data has no room for it beside the rest),
    checked against its SHA-256 pinned here; without a runner the steps still run, unreported, and the boot log says
    so. ``None``: the runner travels in the user data."""
    q = shlex.quote
    if runner is None:
        return f"#!/bin/sh\nexec python3 {q(NODE_MODULE)} \"$@\"\n"
    digest = hashlib.sha256(module_source("clusterforge_node.py").encode()).hexdigest()
    return f"""#!/bin/sh
# clusterforge: the boot step runner, fetched once from SSM parameter {runner} and checked against its pinned SHA-256
R=${{CLUSTERFORGE_RUNNER:-{NODE_MODULE}}}; LOG=${{CLUSTERFORGE_BOOT_LOG:-{BOOT_LOG}}}
if [ ! -s "$R" ]; then
  mkdir -p "${{R%/*}}"
  for i in 1 2 3 4 5; do
    aws ssm get-parameter --region "$(cloud-init query v1.region)" --name {q(runner)} --query Parameter.Value \\
      --output text 2>>"$LOG" | base64 -d | gunzip >"$R.new" 2>>"$LOG" && break
    sleep "${{CLUSTERFORGE_RETRY_S:-5}}"
  done
  if echo "{digest}  $R.new" | sha256sum -c --quiet - >>"$LOG" 2>&1; then mv "$R.new" "$R"; else rm -f "$R.new"; fi
fi
[ -s "$R" ] && exec python3 "$R" "$@"
echo "clusterforge-node: no step runner from {runner}: '$*' runs unreported" >>"$LOG"
[ "$1" = step ] || exit 0
shift 2
exec "$@"
"""


def ready_after_reboot() -> str:
    """The per-boot script :data:`READY_AFTER_REBOOT`: once, after the reboot ``ready`` asked for."""
    marker = "/var/lib/clusterforge/ready-after-reboot"
    return f"#!/bin/sh\n[ -e {marker} ] || exit 0\nrm -f {marker}\nexec {NODE_COMMAND} ready\n"


@cache
def module_source(name: str) -> str:
    """``stacks/files/<name>`` as it travels in user data: without its docstrings (EC2 caps user data at 16 KB; the
    file in the repository keeps them). Same code, same behaviour: the tests run the repository's file and compare
    both syntax trees."""
    tree = ast.parse((FILES / name).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return f"# clusterforge: stacks/files/{name} without its docstrings\n" + ast.unparse(tree) + "\n"


def status_policy(parameter_arn: str) -> str:
    """IAM policy JSON for the nodes of a stack whose status records live under ``parameter_arn``
    (``arn:<partition>:ssm:<region>:<account>:parameter/clusterforge/<stack>/nodes``): ``ssm:PutParameter`` on the
    parameters under it (each node its record) and ``ssm:GetParameter`` on the stack's runner parameter
    (:func:`runner_parameter`), nothing else: no other read, no delete, no other stack's path."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "NodeStatusRecord", "Effect": "Allow", "Action": ["ssm:PutParameter"], "Resource": f"{parameter_arn}/*"},
        {"Sid": "NodeStepRunner", "Effect": "Allow", "Action": ["ssm:GetParameter"],
         "Resource": runner_parameter(parameter_arn)},
    ]})
