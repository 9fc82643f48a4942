"""``clusterforge up`` waiting for its nodes (:mod:`clusterforge.readiness`), against real boto3 clients under
botocore's Stubber: the SSM status records the nodes write (GetParametersByPath, as the API answers it:
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParametersByPath.html) and EKS's node group
status (https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html).

What the user sees is checked: the progress lines, the ✓ / ✗ lines naming each node with its step and message, how
to read its log, and the error (exit 1) when a node failed or the time ran out. No test waits: the clock is a
stand-in that the stand-in ``sleep`` advances.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from rich.console import Console

from blueprints.errors import ProvisionError, UsageError
from clusterforge.readiness import (
    DEFAULT_TIMEOUT_S,
    Expected,
    NodesNotReady,
    delete_records,
    parse_duration,
    wait_for_nodes,
)

PATH = "/clusterforge/p5-train-us-east-1/nodes"
NODES = {"p5-train-gpu-0": "i-0aaaaaaaaaaaaaaa0", "p5-train-gpu-1": "i-0bbbbbbbbbbbbbbb1"}
OUTPUT = {"path": PATH, "groups": {"gpu": {"nodes": NODES}}}
STEPS = ["scratch", "sysctl", "systemd", "efa", "ldconfig", "nccl-stack", "lustre", "sandbox", "kernel-cmdline",
         "ready"]


def record(instance: str, state: str, step: str, message: str = "") -> dict[str, Any]:
    """A parameter as GetParametersByPath returns it, holding the record a node's runner writes."""
    value = {"state": state, "step": step, "index": STEPS.index(step) + 1, "total": len(STEPS), "message": message,
             "group": "gpu", "instance": instance, "log": "/var/log/clusterforge-boot.log",
             "time": "2026-12-02T10:00:00Z"}
    return {"Name": f"{PATH}/{instance}", "Type": "String", "Value": json.dumps(value), "Version": 1,
            "ARN": f"arn:aws:ssm:us-east-1:123456789012:parameter{PATH}/{instance}"}


def client(service: str) -> tuple[Any, Stubber]:
    c = boto3.client(service, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    return c, Stubber(c)


def polls(stub: Stubber, *pages: list[dict[str, Any]]) -> None:
    for params in pages:
        stub.add_response("get_parameters_by_path", {"Parameters": params}, {"Path": PATH, "Recursive": False})


class Clock:
    """A clock that only the stand-in ``sleep`` moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def wait(expected: Expected, ssm: Any, *, eks: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Any, str]:
    out = io.StringIO()
    con = Console(file=out, force_terminal=False, width=200)
    clock = Clock()
    try:
        result: Any = wait_for_nodes(expected, region="us-east-1", timeout_s=timeout_s, ssm=ssm, eks=eks,
                                     console=con, clock=clock, sleep=clock.sleep, poll_s=15)
    except ProvisionError as e:
        result = e
    return result, out.getvalue()


def test_up_returns_when_every_node_reported_ready(capsys: pytest.CaptureFixture[str]) -> None:
    ssm, stub = client("ssm")
    a, b = NODES.values()
    polls(stub, [], [record(a, "configuring", "efa")],
          [record(a, "configuring", "nccl-stack"), record(b, "configuring", "lustre")],
          [record(a, "ready", "ready", "no quick checks on this node"), record(b, "ready", "ready")])
    with stub:
        nodes, out = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    stub.assert_no_pending_responses()
    assert [(n.name, n.state) for n in nodes] == [("p5-train-gpu-0", "ready"), ("p5-train-gpu-1", "ready")]
    assert out.splitlines() == [
        f"waiting for 2 node(s) to configure (up to 1 h; status records {PATH}/<instance id>)",
        f"  p5-train-gpu-0 ({a}): configuring at step efa (4/10)",
        f"  p5-train-gpu-0 ({a}): configuring at step nccl-stack (6/10)",
        f"  p5-train-gpu-1 ({b}): configuring at step lustre (7/10)",
        f"  p5-train-gpu-0 ({a}): ready",
        f"  p5-train-gpu-1 ({b}): ready",
    ]
    assert capsys.readouterr().out.strip() == "✓ 2 nodes ready (45 s)"


def test_a_failed_node_stops_the_wait_and_names_node_step_message_and_log(capsys: pytest.CaptureFixture[str]) -> None:
    ssm, stub = client("ssm")
    a, b = NODES.values()
    why = "clusterforge-efa: ERROR: libnccl-net-ofi.so not found in /opt/amazon/ofi-nccl/lib"
    polls(stub, [record(a, "configuring", "efa"), record(b, "configuring", "efa")],
          [record(a, "failed", "efa", why), record(b, "configuring", "nccl-stack")])
    with stub:
        err, out = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    stub.assert_no_pending_responses()  # it did not poll again: one failed node is enough
    assert isinstance(err, NodesNotReady) and err.exit_code == 1
    assert str(err) == ("1 node(s) failed to configure (p5-train-gpu-0); 1 other(s) still configuring: fix the cause "
                        "and `up` again (the failed nodes keep running; `down` removes them)")
    assert f"  p5-train-gpu-0 ({a}): failed at step efa (4/10): {why}" in out
    assert capsys.readouterr().err.strip() == f"✗ node p5-train-gpu-0 ({a}) failed at step efa (4/10): {why}"
    assert (f"its log: aws ssm start-session --target {a} --region us-east-1, then: sudo tail -n 100 "
            "/var/log/clusterforge-boot.log") in out
    assert f"aws ec2 get-console-output --instance-id {a} --region us-east-1 --latest" in out


def test_a_failed_quick_check_names_the_node_and_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    """The last step of a node's first boot runs the node suite's quick checks (step ``checks``); a failed one is
    reported with the health check's FAIL line (tests/stacks/test_node_status.py runs the runner and the check for
    real and asserts this message), and ``up`` names the node, the step and the check."""
    ssm, stub = client("ssm")
    a, b = NODES.values()
    steps = [*STEPS[:-1], "checks", "ready"]
    why = ("clusterforge-slurm-health: FAIL gpu.count: 7 of 8 GPUs visible: check `dmesg` for XID errors and `lspci | "
           "grep -i nvidia`; reseat or replace the GPU")

    def checked(instance: str, state: str, step: str, message: str = "") -> dict[str, Any]:
        p = record(instance, state, "ready", message)
        value = json.loads(p["Value"])
        value.update(step=step, index=steps.index(step) + 1, total=len(steps))
        return {**p, "Value": json.dumps(value)}

    polls(stub, [checked(a, "configuring", "checks"), checked(b, "configuring", "checks")],
          [checked(a, "failed", "checks", why), checked(b, "ready", "ready", "quick checks passed")])
    with stub:
        err, out = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    assert isinstance(err, NodesNotReady) and err.exit_code == 1
    assert str(err).startswith("1 node(s) failed to configure (p5-train-gpu-0)")
    assert f"  p5-train-gpu-0 ({a}): configuring at step checks (10/11)" in out
    assert f"  p5-train-gpu-1 ({b}): ready" in out
    # (the console wraps the long line at its width)
    assert f"p5-train-gpu-0 ({a}): failed at step checks (10/11): {why}" in " ".join(out.split())
    assert capsys.readouterr().err.strip() == f"✗ node p5-train-gpu-0 ({a}) failed at step checks (10/11): {why}"


def test_the_timeout_names_nodes_that_never_reported_and_where_the_others_are(capsys: pytest.CaptureFixture[str]) -> None:
    ssm, stub = client("ssm")
    a, b = NODES.values()
    # two polls 15 s apart, then 30 s have passed: the wait gives up
    polls(stub, [record(a, "configuring", "nccl-stack")], [record(a, "configuring", "nccl-stack")],
          [record(a, "configuring", "nccl-stack")])
    with stub:
        err, out = wait(Expected.from_output(OUTPUT), ssm, timeout_s=30)  # type: ignore[arg-type]
    stub.assert_no_pending_responses()
    assert isinstance(err, NodesNotReady) and err.exit_code == 1
    assert str(err) == ("2 of 2 node(s) not ready after 30 s (1 never reported: see their console output): "
                        "`up --wait-timeout` waits longer; the deployed resources stay")
    assert capsys.readouterr().err.splitlines() == [
        f"✗ node p5-train-gpu-0 ({a}): still at step nccl-stack (6/10) after 30 s",
        f"✗ node p5-train-gpu-1 ({b}): never reported after 30 s"]
    assert f"--target {b} --region us-east-1" in out


def test_records_of_other_instances_are_ignored() -> None:
    """A node replaced by an earlier ``up`` left its record; only the instances the stack names count."""
    ssm, stub = client("ssm")
    a, b = NODES.values()
    polls(stub, [record("i-0cccccccccccccccc", "ready", "ready"), record(a, "ready", "ready")],
          [record("i-0cccccccccccccccc", "failed", "efa", "old"), record(a, "ready", "ready"), record(b, "ready", "ready")])
    with stub:
        nodes, _ = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    assert [n.state for n in nodes] == ["ready", "ready"]


def test_records_are_read_page_by_page() -> None:
    ssm, stub = client("ssm")
    a, b = NODES.values()
    stub.add_response("get_parameters_by_path", {"Parameters": [record(a, "ready", "ready")], "NextToken": "t1"},
                      {"Path": PATH, "Recursive": False})
    stub.add_response("get_parameters_by_path", {"Parameters": [record(b, "ready", "ready")]},
                      {"Path": PATH, "Recursive": False, "NextToken": "t1"})
    with stub:
        nodes, _ = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    assert [n.state for n in nodes] == ["ready", "ready"]


EKS_OUTPUT = {"path": "/clusterforge/eks-p4d-us-west-2/nodes",
              "groups": {"gpu": {"eksCluster": "eks-p4d-eks", "eksNodeGroup": "eks-p4d-gpu-mng"}}}


def nodegroup(status: str, issues: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"nodegroup": {"nodegroupName": "eks-p4d-gpu-mng", "clusterName": "eks-p4d-eks", "status": status,
                          "health": {"issues": issues or []}}}


def test_eks_node_groups_are_ready_when_eks_says_active() -> None:
    eks, stub = client("eks")
    want = {"clusterName": "eks-p4d-eks", "nodegroupName": "eks-p4d-gpu-mng"}
    stub.add_response("describe_nodegroup", nodegroup("UPDATING"), want)
    stub.add_response("describe_nodegroup", nodegroup("ACTIVE"), want)
    ssm, _ = client("ssm")  # EKS nodes write no record: SSM is not read
    with stub:
        nodes, out = wait(Expected.from_output(EKS_OUTPUT), ssm, eks=eks)  # type: ignore[arg-type]
    assert [(n.name, n.state) for n in nodes] == [("eks-p4d-gpu-mng", "ready")]
    assert "EKS node group eks-p4d-gpu-mng (group gpu): configuring at step updating" in out


def test_an_eks_health_issue_fails_with_ekss_code_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    eks, stub = client("eks")
    issue = {"code": "NodeCreationFailure", "message": "Instances failed to join the kubernetes cluster",
             "resourceIds": ["i-0ddddddddddddddd0"]}
    stub.add_response("describe_nodegroup", nodegroup("DEGRADED", [issue]),
                      {"clusterName": "eks-p4d-eks", "nodegroupName": "eks-p4d-gpu-mng"})
    ssm, _ = client("ssm")
    with stub:
        err, out = wait(Expected.from_output(EKS_OUTPUT), ssm, eks=eks)  # type: ignore[arg-type]
    assert isinstance(err, NodesNotReady)
    assert capsys.readouterr().err.strip() == (
        "✗ node EKS node group eks-p4d-gpu-mng (group gpu) failed at step degraded: NodeCreationFailure: Instances "
        "failed to join the kubernetes cluster (i-0ddddddddddddddd0)")
    assert "aws eks describe-nodegroup --cluster-name eks-p4d-eks --nodegroup-name eks-p4d-gpu-mng" in out


def test_a_status_that_cannot_be_read_names_the_permission() -> None:
    ssm, stub = client("ssm")
    stub.add_client_error("get_parameters_by_path", "AccessDeniedException", "not authorized to perform "
                          "ssm:GetParametersByPath")
    with stub:
        err, _ = wait(Expected.from_output(OUTPUT), ssm)  # type: ignore[arg-type]
    assert isinstance(err, ProvisionError) and not isinstance(err, NodesNotReady)
    assert str(err).startswith("the nodes' status cannot be read (AccessDeniedException: not authorized")
    assert "ssm:GetParametersByPath" in str(err) and "`up --no-wait`" in str(err)


def test_a_stack_without_readiness_output_is_not_waited_for() -> None:
    assert Expected.from_output(None) is None
    assert Expected.from_output({"vpcId": "vpc-1"}) is None


def test_down_deletes_every_record_ten_names_at_a_time() -> None:
    """DeleteParameters takes at most 10 names
    (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_DeleteParameters.html)."""
    ssm, stub = client("ssm")
    ids = [f"i-0{n:016x}" for n in range(12)]
    stub.add_response("get_parameters_by_path", {"Parameters": [record(i, "ready", "ready") for i in ids]},
                      {"Path": PATH, "Recursive": False})
    names = [f"{PATH}/{i}" for i in ids]
    stub.add_response("delete_parameters", {"DeletedParameters": names[:10]}, {"Names": names[:10]})
    stub.add_response("delete_parameters", {"DeletedParameters": names[10:]}, {"Names": names[10:]})
    with stub:
        assert delete_records(ssm, PATH) == 12
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("45m", 2700), ("2h", 7200), ("30", 1800), ("0s", 0)])
def test_wait_timeout_takes_seconds_minutes_hours(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "5d"])
def test_a_wait_timeout_that_is_no_duration_is_one_line(text: str) -> None:
    with pytest.raises(UsageError, match=r"--wait-timeout .*: give a duration such as 90s, 45m or 2h"):
        parse_duration(text)
