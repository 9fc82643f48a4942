"""``clusterforge up`` waits for the nodes it deployed: each node configured, or the node and step that failed.

What the stack exports as ``nodeReadiness`` says what to wait for (:func:`stacks.node_status.readiness_output`):

* EC2 node groups: every instance by name and id. Each node writes its status record, the SSM parameter
  ``<path>/<instance id>`` (``path`` = ``/clusterforge/<stack>/nodes``), as its boot steps run
  (:mod:`stacks.node_status`): ``configuring`` with the step, ``failed`` with the step and the line that says why,
  ``ready`` once the steps and the node's quick checks passed. ``up`` reads them all with GetParametersByPath;
  a record of another instance (a replaced node's) is ignored.
* EKS managed node groups carry no status record (their user data has no room for it): ``up`` reads EKS's own
  word, DescribeNodegroup's status and health issues. ``ACTIVE`` without issues is ready (EKS saw the nodes join the
  cluster); ``CREATE_FAILED`` / ``DEGRADED`` or an issue is failed, with EKS's code and message.

``up`` waits until every node is ready, or one has failed (the others keep configuring; ``up`` stops at once), or
``--wait-timeout`` passes (nodes that never reported are named as such); a failure or a timeout is
:class:`NodesNotReady` (exit 1) after lines saying, per node, what failed and how to read its log. Progress: a live
table on a terminal, a line per change otherwise.

Sources: GetParametersByPath (10 parameters per page by default, ``NextToken``)
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParametersByPath.html ; DescribeNodegroup
(``status``, ``health.issues``) https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html ;
Session Manager https://docs.aws.amazon.com/cli/latest/reference/ssm/start-session.html ; console output
https://docs.aws.amazon.com/cli/latest/reference/ec2/get-console-output.html .
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from blueprints.errors import ProvisionError, UsageError

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "POLL_S",
    "Expected",
    "Node",
    "NodesNotReady",
    "delete_records",
    "parse_duration",
    "read_records",
    "wait_for_nodes",
]

DEFAULT_TIMEOUT_S = 60 * 60
"""How long ``up`` waits by default (``--wait-timeout``): one hour. A p5 node's first boot installs the Lustre
client and builds MPI and nccl-tests from source (the ``nccl-stack`` step) after the instance itself started; an
hour bounds that with room. It is a bound chosen here, not a measured duration: a node still configuring when it
passes is named with its step."""

POLL_S = 15.0
"""Seconds between two reads of the status records (GetParametersByPath pages are cheap; a node's step takes
minutes)."""

FAILED_EKS = ("CREATE_FAILED", "DEGRADED", "DELETE_FAILED")
"""DescribeNodegroup statuses that mean the node group will not become ready by waiting."""


class NodesNotReady(ProvisionError):
    """A node failed to configure, or did not report ready in time (exit 1); the lines above name each node."""


def parse_duration(text: str) -> float:
    """``--wait-timeout`` as seconds: ``90s``, ``45m``, ``2h`` or a bare number of minutes. Raises
    :class:`UsageError` with the accepted forms."""
    t = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    number = t[:-1] if scale else t
    try:
        value = float(number) * (scale or 60)
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(f"--wait-timeout {text!r}: give a duration such as 90s, 45m or 2h (a bare number is minutes)")
    return value


@dataclass
class Node:
    """What ``up`` knows of one node: ``group``, ``name`` (the instance's Name tag, or the EKS node group), ``instance``
    (id; ``""`` for an EKS node group), ``state`` (``waiting`` until a record arrives, ``configuring``, ``ready``,
    ``failed``), the ``step`` with its ``index`` / ``total``, the record's ``message`` and ``time``, and ``log``
    (the boot log on the node)."""

    group: str
    name: str
    instance: str = ""
    state: str = "waiting"
    step: str = ""
    index: int | None = None
    total: int | None = None
    message: str = ""
    time: str = ""
    log: str = ""
    eks: tuple[str, str] | None = None
    """``(cluster, node group)`` for an EKS managed node group."""

    @property
    def where(self) -> str:
        """``p5-train-gpu-0 (i-0abc...)`` or ``EKS node group NAME``."""
        if self.eks is not None:
            return f"EKS node group {self.eks[1]} (group {self.group})"
        return f"{self.name} ({self.instance})"

    @property
    def at(self) -> str:
        """``efa (4/10)``: the step and where it is in the node's boot."""
        if not self.step:
            return ""
        return f"{self.step} ({self.index}/{self.total})" if self.index and self.total else self.step

    def update(self, record: dict[str, Any]) -> bool:
        """Take a status record (the parameter's JSON value); returns whether anything changed."""
        before = (self.state, self.step, self.message)
        self.state = str(record.get("state") or "configuring")
        self.step = str(record.get("step") or "")
        self.index = record.get("index") if isinstance(record.get("index"), int) else None
        self.total = record.get("total") if isinstance(record.get("total"), int) else None
        self.message = str(record.get("message") or "")
        self.time = str(record.get("time") or "")
        self.log = str(record.get("log") or "")
        return before != (self.state, self.step, self.message)


@dataclass(frozen=True)
class Expected:
    """The stack's ``nodeReadiness`` output: the status records' ``path``, the EC2 nodes (``(group, name, instance
    id)``) and the EKS managed node groups (``(group, cluster, node group)``)."""

    path: str
    ec2: tuple[tuple[str, str, str], ...] = ()
    eks: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def from_output(cls, data: Any) -> Expected | None:
        """Read the output (``{"path", "groups": {group: {"nodes": {name: id}} | {"eksCluster", "eksNodeGroup"}}}``);
        ``None`` when the stack exports none (deployed by a clusterforge without readiness)."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return None
        ec2, eks = [], []
        for group, g in sorted((data.get("groups") or {}).items()):
            if isinstance(g, dict) and g.get("eksNodeGroup"):
                eks.append((str(group), str(g.get("eksCluster")), str(g["eksNodeGroup"])))
            elif isinstance(g, dict):
                ec2 += [(str(group), str(name), str(iid)) for name, iid in sorted((g.get("nodes") or {}).items())]
        return cls(path=data["path"], ec2=tuple(ec2), eks=tuple(eks))

    def nodes(self) -> list[Node]:
        """A :class:`Node` per EC2 instance and per EKS node group, all ``waiting``."""
        return ([Node(group=g, name=n, instance=i) for g, n, i in self.ec2]
                + [Node(group=g, name=ng, eks=(c, ng)) for g, c, ng in self.eks])


def read_records(ssm: Any, path: str) -> dict[str, dict[str, Any]]:
    """Every status record under ``path``, by instance id (the parameter name's last part); a value that is not a
    JSON object is skipped."""
    out: dict[str, dict[str, Any]] = {}
    for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=path, Recursive=False):
        for p in page.get("Parameters", []):
            try:
                value = json.loads(p.get("Value", ""))
            except ValueError:
                continue
            if isinstance(value, dict):
                out[str(p["Name"]).rsplit("/", 1)[-1]] = value
    return out


def _eks_record(eks: Any, cluster: str, nodegroup: str) -> dict[str, Any]:
    """An EKS managed node group's DescribeNodegroup answer as a status record."""
    ng = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    status = str(ng.get("status", ""))
    issues = (ng.get("health") or {}).get("issues") or []
    if issues or status in FAILED_EKS:
        what = "; ".join(f"{i.get('code')}: {i.get('message')}"
                         + (f" ({', '.join(i.get('resourceIds') or [])})" if i.get("resourceIds") else "")
                         for i in issues) or f"node group {status}"
        return {"state": "failed", "step": status.lower(), "message": what}
    if status == "ACTIVE":
        return {"state": "ready", "step": "active", "message": "EKS: the nodes joined the cluster"}
    return {"state": "configuring", "step": status.lower()}


class _Progress:
    """Node states on the console: a live table on a terminal, else a line per change."""

    def __init__(self, nodes: list[Node], console: Any, live: bool) -> None:
        self.nodes, self.console, self.live_on = nodes, console, live
        self.live: Any = None

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        styles = {"ready": "green", "failed": "red", "configuring": "yellow", "waiting": "dim"}
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("node", "group", "state", "step", "since"):
            t.add_column(col)
        for n in self.nodes:
            t.add_row(n.name, n.group, Text(n.state, style=styles.get(n.state, "")), n.at, n.time)
        return t

    def start(self) -> None:
        if self.live_on:
            from rich.live import Live

            self.live = Live(self, console=self.console, refresh_per_second=2, transient=False)
            self.live.start()

    def changed(self, n: Node) -> None:
        if self.live is None:
            self.console.print(f"  {n.where}: {n.state}" + (f" at step {n.at}" if n.at and n.state != "ready" else "")
                               + (f": {n.message}" if n.state == "failed" else ""), markup=False, highlight=False)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _log_hint(n: Node, region: str) -> str:
    """How to read the boot log of node ``n``."""
    if n.eks is not None:
        return (f"    EKS's view: aws eks describe-nodegroup --cluster-name {n.eks[0]} --nodegroup-name {n.eks[1]} "
                f"--region {region}; the nodes: kubectl get nodes -l clusterforge.io/node-group={n.group}")
    log = n.log or "/var/log/clusterforge-boot.log"
    return (f"    its log: aws ssm start-session --target {n.instance} --region {region}, then: sudo tail -n 100 {log}"
            f" (or /var/log/cloud-init-output.log)\n    without a session: aws ec2 get-console-output --instance-id "
            f"{n.instance} --region {region} --latest --output text")


def wait_for_nodes(expected: Expected, *, region: str, timeout_s: float, ssm: Any = None, eks: Any = None,
                   console: Any = None, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep, poll_s: float | None = None) -> list[Node]:
    """Wait until every node of ``expected`` is ready (returns the nodes), one has failed, or ``timeout_s`` seconds
    passed (both: :class:`NodesNotReady` after a line per node that is not ready, with how to read its log). ``ssm``
    and ``eks``: boto3 clients of ``region`` (made here when ``None``; ``eks`` only when there are EKS node groups);
    ``console``: a rich console (default clusterforge's); ``clock`` / ``sleep`` / ``poll_s`` (default
    :data:`POLL_S`): for tests. AWS errors (no credentials, access denied) are :class:`ProvisionError` naming the
    permission."""
    from .console import console as default_console

    con = console or default_console
    nodes = expected.nodes()
    if not nodes:
        return nodes
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # boto3 is a dependency of clusterforge; a broken install says so
        raise ProvisionError("`up` waits for the nodes with boto3: `pip install boto3`, or `up --no-wait`") from None
    if ssm is None or (eks is None and expected.eks):
        import boto3

        ssm = ssm or boto3.client("ssm", region_name=region)
        eks = eks or (boto3.client("eks", region_name=region) if expected.eks else None)
    con.print(f"waiting for {len(expected.ec2)} node(s)" + (f" and {len(expected.eks)} EKS node group(s)"
                                                                 if expected.eks else "")
              + f" to configure (up to {_duration(timeout_s)}; status records {expected.path}/<instance id>)",
              markup=False, highlight=False)
    progress = _Progress(nodes, con, live=bool(getattr(con, "is_terminal", False)))
    start = clock()
    progress.start()
    try:
        while True:
            try:
                records = read_records(ssm, expected.path) if expected.ec2 else {}
                for n in nodes:
                    record = records.get(n.instance) if n.eks is None else _eks_record(eks, *n.eks)
                    if record is not None and n.update(record):
                        progress.changed(n)
            except (BotoCoreError, ClientError) as e:
                raise ProvisionError(f"the nodes' status cannot be read ({_aws_error(e)}): the deploying identity needs "
                                     "ssm:GetParametersByPath on the stack's path (and eks:DescribeNodegroup on EKS); "
                                     "`up --no-wait` skips the wait") from None
            failed = [n for n in nodes if n.state == "failed"]
            if failed or all(n.state == "ready" for n in nodes) or clock() - start >= timeout_s:
                break
            sleep(POLL_S if poll_s is None else poll_s)
    finally:
        progress.stop()
    return _verdict(nodes, region=region, waited=clock() - start, console=con)


def _verdict(nodes: list[Node], *, region: str, waited: float, console: Any) -> list[Node]:
    """The nodes when all are ready; else the lines naming each node that is not, then :class:`NodesNotReady`."""
    from .console import fail, ok

    failed = [n for n in nodes if n.state == "failed"]
    if not failed and all(n.state == "ready" for n in nodes):
        ok(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ready ({_duration(waited)})")
        return nodes
    for n in failed:
        fail(f"node {n.where} failed at step {n.at or n.step}: {n.message or '(no message)'}")
        console.print(_log_hint(n, region), markup=False, highlight=False)
    late = [n for n in nodes if n.state in ("waiting", "configuring")]
    if failed:
        names = ", ".join(n.name for n in failed)
        others = f"; {len(late)} other(s) still configuring" if late else ""
        raise NodesNotReady(f"{len(failed)} node(s) failed to configure ({names}){others}: fix the cause and `up` "
                            "again (the failed nodes keep running; `down` removes them)")
    for n in late:
        why = "never reported" if n.state == "waiting" else f"still at step {n.at}"
        fail(f"node {n.where}: {why} after {_duration(waited)}")
        console.print(_log_hint(n, region), markup=False, highlight=False)
    never = sum(1 for n in late if n.state == "waiting")
    raise NodesNotReady(f"{len(late)} of {len(nodes)} node(s) not ready after {_duration(waited)}"
                        + (f" ({never} never reported: see their console output)" if never else "")
                        + ": `up --wait-timeout` waits longer; the deployed resources stay")


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 5 min``."""
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    h, m = divmod(s // 60, 60)
    return f"{h} h {m} min" if h and m else f"{h} h" if h else f"{m} min"


def _aws_error(e: Exception) -> str:
    err = getattr(e, "response", {}).get("Error", {}) if hasattr(e, "response") else {}
    return f"{err.get('Code')}: {err.get('Message')}" if err else str(e)


def delete_records(ssm: Any, path: str) -> int:
    """Delete every status record under ``path`` (``down``, after the stack is gone); returns how many. DeleteParameters
    takes at most 10 names per call (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_DeleteParameters.html)."""
    names = [p["Name"] for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=path, Recursive=False)
             for p in page.get("Parameters", [])]
    for i in range(0, len(names), 10):
        ssm.delete_parameters(Names=names[i:i + 10])
    return len(names)
