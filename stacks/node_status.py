"""Node readiness on AWS: each node's boot steps report to a status record that ``clusterforge up`` waits on.

Every cloud-init step of an EC2 node (:func:`stacks.cloud_init.render_cloud_config`) runs through the node's step
runner ``clusterforge_node.py`` (``stacks/files``, standard library only, written by cloud-init to
:data:`NODE_MODULE`) as ``clusterforge-node step NAME COMMAND``: the step is reported as ``configuring``, its output
goes to the console, to cloud-init's output log and to :data:`BOOT_LOG`, and a failing step is reported as ``failed``
with its name and the line that says why; the later steps of that boot do not run. The last ``runcmd`` entry, ``clusterforge-node ready``,
runs the node's quick checks as step ``checks`` and reports ``ready``; a host that reboots into its kernel command line
reports ``ready`` after that reboot.

The quick checks (:func:`quick_checks`) are the slurm_node role's health check (``clusterforge-slurm-health``, the
node suite's rules for GPU devices, count and model, driver branch, ECC, MIG and mounts) run with ``--no-scheduler``
(a verdict, never a drain) against :attr:`blueprints.settings.NodeSettings.health`, which the user data carries in
:data:`NODE_SETTINGS`. Every EC2 node with something to check runs them: GPUs its host uses, or a declared mount. A
failed check is reported ``failed`` at step ``checks`` with the check's ``FAIL`` line (its name and reason); a node
with nothing to check reports ``no quick checks on this node``.

Programs the nodes fetch (:class:`NodeProgram`): EC2's 16 KB of user data has no room for the step runner on the
Deep Learning AMI's nodes, nor for the health check beside a p5 group's other files, so the stack keeps them as
standard-tier SSM parameters ``/clusterforge/<stack>/programs/<program>/<part>`` (:data:`PROGRAMS`; a group's own
rendered programs under ``programs/<program>/<group>``, :func:`stacks.cloud_init.node_programs`: the EFA script),
each gzip'd and base64-encoded and split into values of at most 4 KB (catalog ``node_status.value_max_bytes``). A
node fetches every part of one, joins and unpacks them and runs the program only when its SHA-256 is the one pinned
in its user data: the runner through the shell :func:`shim` with the AWS CLI (nodes whose image has none carry the
runner in their user data), the others through the runner, before the step whose command names them (with the AWS
CLI, else ``clusterforge_aws.py``'s signed GetParameter). A program that cannot be fetched, or is not the pinned one,
is never run: its step fails saying so.

The status record is the SSM parameter ``<path>/<instance id>`` with ``path`` = :func:`status_path` of the Pulumi
stack (``/clusterforge/<stack>/nodes``), a JSON value (catalog ``node_status``: String, Standard tier). It is put with
the AWS CLI where the node's image has one (catalog ``node_images.*.aws_cli``: the Deep Learning AMI), else with
``clusterforge_aws.py`` (SigV4 with the instance role, :data:`AWS_MODULE`; also the Slurm helper's library). The node
role may put parameters under that path only (:func:`status_policy`). The stack exports the path and the nodes it
expects as ``nodeReadiness``; ``clusterforge up`` polls the path (:mod:`clusterforge.readiness`). The node role may
read the programs' parameters and no other (:func:`status_policy`).

EKS managed node groups carry none of this: their user data budget (EC2's 16 KB less EKS's own bootstrap part) has
no room for the runner, and ``up`` reads EKS's own word on them instead (the node group's status and health issues).

Sources: cloud-init runs ``runcmd`` (module ``scripts_user``) after the per-boot scripts and before ``power_state``
(https://github.com/canonical/cloud-init/blob/main/config/cloud.cfg.tmpl); PutParameter
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html ; GetParameter
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html ; parameter ARNs in IAM
policies https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-paramstore-access.html ; standard-tier
values up to 4 KB https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html .
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
    "CHECKER",
    "HEALTH_CHECK",
    "NODE_COMMAND",
    "NODE_MODULE",
    "NODE_SETTINGS",
    "PROGRAMS",
    "READY_AFTER_REBOOT",
    "RUNNER",
    "STATUS_CONFIG",
    "BootStep",
    "NodeProgram",
    "image_has_aws_cli",
    "module_source",
    "quick_checks",
    "ready_after_reboot",
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
"""The node's status settings: parameter path, node group, step names in order, quick checks, the programs to fetch,
boot log."""
NODE_SETTINGS = "/etc/clusterforge/node-settings.json"
"""The node's :class:`blueprints.settings.NodeSettings` as the user data writes them (the quick checks' contract is
its ``health``)."""
CHECKER = "/usr/local/lib/clusterforge/clusterforge-slurm-health"
"""Where the runner writes the health check it fetched (:data:`HEALTH_CHECK`) before step ``checks``."""
BOOT_LOG = "/var/log/clusterforge-boot.log"
"""Every step's command and output, and each report that could not be written."""
READY_AFTER_REBOOT = "/var/lib/cloud/scripts/per-boot/99-clusterforge-ready.sh"
"""Per-boot script of a host that reboots into its kernel command line: reports ``ready`` after that reboot."""

FILES = Path(__file__).resolve().parent / "files"
"""``stacks/files``: the node-side programs."""
REPO = FILES.parents[1]


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


def status_config(path: str, group: str, steps: list[str], checks: list[str] | None,
                  programs: tuple[NodeProgram, ...] = ()) -> str:
    """The JSON text of :data:`STATUS_CONFIG`: parameter ``path``, node group ``group``, the step names in the order
    they run (ending with ``ready``), the quick checks' argv (``None``: the node has none; :func:`quick_checks`), the
    boot log, the parameter tier (catalog ``node_status.tier``) and the ``programs`` the runner fetches before the step
    whose command names them, ``{dest: {"parameters": [names in order], "sha256": pinned digest}}``: the group's own
    (``programs``) and, with checks, the health check (:data:`HEALTH_CHECK`)."""
    fetched = programs + ((HEALTH_CHECK,) if checks is not None else ())
    return json.dumps({"path": path, "group": group, "steps": steps, "checks": checks, "log": BOOT_LOG,
                       "tier": str(catalog().aws["node_status"]["tier"]),
                       "programs": {p.dest: {"parameters": p.parameters(path), "sha256": p.sha256()}
                                    for p in fetched}}, sort_keys=True) + "\n"


def quick_checks(settings: NodeSettings) -> list[str] | None:
    """The argv of an EC2 node's quick checks at the end of its first boot (step ``checks``): the health check the
    runner fetched (:data:`CHECKER`) with ``--no-scheduler`` against ``health`` of :data:`NODE_SETTINGS`
    (:attr:`blueprints.settings.NodeSettings.health`); ``None`` when there is nothing to check (no GPUs the host
    uses, no mounts). The same on Slurm nodes: the boot's verdict never drains (slurmd's own runs do)."""
    if not settings.health.checks_anything:
        return None
    return ["python3", CHECKER, "--config", NODE_SETTINGS, "--section", "health", "--no-scheduler"]


def image_has_aws_cli(settings: NodeSettings) -> bool:
    """Whether the image an EC2 node of ``settings`` boots has the AWS CLI (catalog ``node_images.<image>.aws_cli``:
    the Deep Learning AMI for GPU groups; Canonical's Ubuntu for the others is not known to). A ``target.ami_id`` is
    taken to be an image of the same kind."""
    image = "ec2_gpu" if settings.gpu_count > 0 else "ec2_cpu"
    return bool(catalog().aws["node_images"][image].get("aws_cli", False))


@dataclass(frozen=True)
class NodeProgram:
    """A program the nodes fetch from the stack's SSM parameters (see the module docstring): ``name`` (its parameters'
    folder under ``programs``: ``runner``, ``checks``, or ``<program>/<node group>`` for one group's), ``dest`` (where a
    node writes it, mode 0755) and either ``source`` (a Python file of the repository, sent without docstrings) or
    ``content`` (a program rendered for one node group)."""

    name: str
    dest: str
    source: Path | None = None
    content: str | None = None

    def text(self) -> str:
        """The program as it travels: ``content``, or :func:`module_source` of ``source`` (docstrings stripped)."""
        if self.content is not None:
            return self.content
        assert self.source is not None
        return _without_docstrings(self.source)

    def sha256(self) -> str:
        """SHA-256 of :meth:`text` (hex), pinned in the nodes' user data."""
        return hashlib.sha256(self.text().encode()).hexdigest()

    def values(self) -> list[str]:
        """The parameters' values in order: :meth:`text` gzip'd (fixed timestamp) and base64-encoded, cut into pieces
        of at most a standard parameter's 4 KB (catalog ``node_status.value_max_bytes``, a multiple of 4: each piece
        is whole base64 quads). Joined, they are the base64 text again."""
        return list(_packed(self.text()))

    def parameters(self, path: str) -> list[str]:
        """The names of :meth:`values`' parameters, ``/clusterforge/<stack>/programs/<name>/<0..n-1>``, beside the
        status records' ``path`` (``/clusterforge/<stack>/nodes``), outside the part the nodes may write. ``path``
        may be the path's IAM ARN: the names come out as ARNs."""
        return [f"{path.rsplit('/', 1)[0]}/programs/{self.name}/{i}" for i in range(len(self.values()))]


@cache
def _packed(text: str) -> tuple[str, ...]:
    b64 = base64.b64encode(gzip.compress(text.encode(), 9, mtime=0)).decode("ascii")
    size = int(catalog().aws["node_status"]["value_max_bytes"]) // 4 * 4
    return tuple(b64[i:i + size] for i in range(0, len(b64), size))


RUNNER = NodeProgram("runner", NODE_MODULE, source=FILES / "clusterforge_node.py")
"""The boot step runner: fetched by :func:`shim` on nodes with the AWS CLI; the others carry it in their user data."""
HEALTH_CHECK = NodeProgram("checks", CHECKER, source=REPO / "roles" / "slurm_node" / "files" / "clusterforge-slurm-health")
"""The slurm_node role's health check, the quick checks' program: fetched by the runner before step ``checks``."""
PROGRAMS = (RUNNER, HEALTH_CHECK)
"""The programs the stack keeps in SSM parameters for every node (a node group's own: the group's
:func:`stacks.cloud_init.node_programs`)."""


def shim(runner: list[str] | None = None) -> str:
    """The text of :data:`NODE_COMMAND`: ``exec python3`` of the runner. ``runner``: the SSM parameters it is fetched
    from on the first call (:meth:`NodeProgram.parameters` of :data:`RUNNER`; nodes with the AWS CLI), checked against
    its SHA-256 pinned here; without a runner the steps still run, unreported, and the boot log says so (a step whose
    program the runner would have fetched, the EFA script, then fails: its program is not there; the quick checks do
    not run). ``None``: the runner travels in the user data."""
    q = shlex.quote
    if runner is None:
        return f"#!/bin/sh\nexec python3 {q(NODE_MODULE)} \"$@\"\n"
    return f"""#!/bin/sh
# clusterforge: the boot step runner, fetched once from SSM parameters {runner[0].rsplit("/", 1)[0]}/* and checked against its pinned SHA-256
R=${{CLUSTERFORGE_RUNNER:-{NODE_MODULE}}}; LOG=${{CLUSTERFORGE_BOOT_LOG:-{BOOT_LOG}}}
if [ ! -s "$R" ]; then
  mkdir -p "${{R%/*}}"; G=$(cloud-init query v1.region)
  for i in 1 2 3 4 5; do
    for p in {" ".join(q(n) for n in runner)}; do
      aws ssm get-parameter --region "$G" --name "$p" --query Parameter.Value --output text 2>>"$LOG" || exit 1
    done | base64 -d | gunzip >"$R.new" 2>>"$LOG" && break
    sleep "${{CLUSTERFORGE_RETRY_S:-5}}"
  done
  if echo "{RUNNER.sha256()}  $R.new" | sha256sum -c --quiet - >>"$LOG" 2>&1; then mv "$R.new" "$R"; else rm -f "$R.new"; fi
fi
[ -s "$R" ] && exec python3 "$R" "$@"
echo "clusterforge-node: no step runner from {runner[0].rsplit("/", 1)[0]}: '$*' runs unreported" >>"$LOG"
[ "$1" = step ] || exit 0
shift 2
exec "$@"
"""


def ready_after_reboot() -> str:
    """The per-boot script :data:`READY_AFTER_REBOOT`: once, after the reboot ``ready`` asked for."""
    marker = "/var/lib/clusterforge/ready-after-reboot"
    return f"#!/bin/sh\n[ -e {marker} ] || exit 0\nrm -f {marker}\nexec {NODE_COMMAND} ready\n"


def module_source(name: str) -> str:
    """``stacks/files/<name>`` as it travels in user data: without its docstrings (EC2 caps user data at 16 KB; the
    file in the repository keeps them). Same code, same behaviour: the tests run the repository's file and compare
    both syntax trees."""
    return _without_docstrings(FILES / name)


@cache
def _without_docstrings(path: Path) -> str:
    """The Python program at ``path`` without its docstrings (nor comments: the first line names the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return f"# clusterforge: {path.relative_to(REPO)} without its docstrings\n" + ast.unparse(tree) + "\n"


def status_policy(parameter_arn: str, programs: tuple[NodeProgram, ...] = ()) -> str:
    """IAM policy JSON for the nodes of a stack whose status records live under ``parameter_arn``
    (``arn:<partition>:ssm:<region>:<account>:parameter/clusterforge/<stack>/nodes``): ``ssm:PutParameter`` on the
    parameters under it (each node its record) and ``ssm:GetParameter`` on each parameter of the stack's programs
    (:data:`PROGRAMS` and the node groups' ``programs``, :meth:`NodeProgram.parameters`), nothing else: no other read,
    no delete, no other stack's path."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "NodeStatusRecord", "Effect": "Allow", "Action": ["ssm:PutParameter"], "Resource": f"{parameter_arn}/*"},
        {"Sid": "NodePrograms", "Effect": "Allow", "Action": ["ssm:GetParameter"],
         "Resource": [n for p in PROGRAMS + programs for n in p.parameters(parameter_arn)]},
    ]})
