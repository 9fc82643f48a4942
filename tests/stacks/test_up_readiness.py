"""``clusterforge up`` waits for its nodes, from the user's side: the CLI in this process (so boto3 can be stood in
for), the real Pulumi Automation API driving a stand-in ``pulumi`` whose stack outputs carry ``nodeReadiness`` as the
program exports it, and real boto3 SSM clients under botocore's Stubber answering with the nodes' status records.

Checked: the exit code, the progress and the ✓ / ✗ lines, ``--no-wait``, ``--wait-timeout``, the record ``up`` writes
and ``down`` emptying the records' path after the stack is gone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from clusterforge import readiness
from clusterforge.cli import main

from .conftest import variant_yaml

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

STACK = "p5-train-us-east-1"
PATH = f"/clusterforge/{STACK}/nodes"
NODES = {"p5-train-gpu-0": "i-0aaaaaaaaaaaaaaa0", "p5-train-gpu-1": "i-0bbbbbbbbbbbbbbb1"}

FAKE = '''#!{python}
import json, sys
argv = [a for a in sys.argv[1:] if a != "--non-interactive"]
if argv[:1] == ["version"]:
    print("v3.272.0")
elif argv[:1] in (["up"], ["destroy"], ["preview"]):
    print(f"{{argv[0]}}: Updating (stack)")
elif argv[:2] == ["stack", "output"]:
    print(json.dumps({{"vpcId": "vpc-1", "nodeReadiness": {readiness}}}))
elif argv[:2] == ["stack", "history"]:
    print(json.dumps([{{"kind": "update", "startTime": "2026-01-01T00:00:00.000Z", "message": "",
                        "environment": {{}}, "config": {{}}, "result": "succeeded",
                        "endTime": "2026-01-01T00:01:00.000Z", "resourceChanges": {{"create": 34}}, "version": 1}}]))
'''


def value(instance: str, state: str, step: str, message: str = "", index: int = 4) -> dict[str, Any]:
    record = {"state": state, "step": step, "index": index, "total": 10, "message": message, "group": "gpu",
              "instance": instance, "log": "/var/log/clusterforge-boot.log", "time": "2026-12-02T10:00:00Z"}
    return {"Name": f"{PATH}/{instance}", "Type": "String", "Value": json.dumps(record), "Version": 1}


@pytest.fixture
def up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``up(*args, polls=[...])`` runs ``clusterforge up`` of the p5 example in this process; each poll is the list of
    parameters GetParametersByPath answers. Returns (exit code, stdout, stderr, the stubbed SSM client's stubber)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(FAKE.format(python=sys.executable, readiness=json.dumps(
        {"path": PATH, "groups": {"gpu": {"nodes": NODES}}})))
    exe.chmod(0o755)
    for k in ("PULUMI_BACKEND_URL", "CLUSTERFORGE_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse")
    monkeypatch.setattr(readiness, "POLL_S", 0.0)
    bp = tmp_path / "p5.yaml"
    bp.write_text(variant_yaml("aws-p5-efa-lustre", {}))
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    stub = Stubber(ssm)
    made: list[str] = []

    def client(service: str, **kw: Any) -> Any:
        made.append(service)
        assert service == "ssm" and kw.get("region_name") == "us-east-1", (service, kw)
        return ssm

    monkeypatch.setattr(boto3, "client", client)

    def run(*args: str, verb: str = "up", polls: list[list[dict[str, Any]]] | None = None,
            deletes: list[list[str]] | None = None, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, Stubber]:
        for params in polls or []:
            stub.add_response("get_parameters_by_path", {"Parameters": params}, {"Path": PATH, "Recursive": False})
        for names in deletes or []:
            stub.add_response("delete_parameters", {"DeletedParameters": names}, {"Names": names})
        with stub:
            code = main([verb, str(bp) if verb == "up" else STACK, "--yes", *args])
        out = capsys.readouterr()
        return code, out.out, out.err, stub

    run.made = made  # type: ignore[attr-defined]
    run.home = tmp_path / "home"  # type: ignore[attr-defined]
    return run


def test_up_waits_until_every_node_is_ready(up, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = NODES.values()
    code, out, err, stub = up(polls=[[value(a, "configuring", "efa")],
                                     [value(a, "ready", "ready", index=10), value(b, "ready", "ready", index=10)]],
                              capsys=capsys)
    assert code == 0, err
    stub.assert_no_pending_responses()
    assert "p5-train: deployed (succeeded) as stack p5-train-us-east-1" in out
    assert f"waiting for 2 node(s) to configure (up to 1 h; status records {PATH}/<instance id>)" in out
    assert f"  p5-train-gpu-0 ({a}): configuring at step efa (4/10)" in out
    assert out.rstrip().endswith("✓ 2 nodes ready (0 s)")
    record = json.loads((up.home / ".local/state/clusterforge/deployments" / f"{STACK}.json").read_text())
    assert record["node_status_path"] == PATH, "down empties the records' path from the record"


def test_up_fails_naming_the_node_and_its_step(up, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = NODES.values()
    why = "clusterforge-lustre: mount.lustre: fs-0123.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh: Connection timed out"
    code, out, err, _ = up(polls=[[value(a, "ready", "ready", index=10), value(b, "failed", "lustre", why, 7)]],
                           capsys=capsys)
    assert code == 1
    assert f"✗ node p5-train-gpu-1 ({b}) failed at step lustre (7/10): {why}" in err
    assert f"its log: aws ssm start-session --target {b} --region us-east-1" in out
    assert err.rstrip().endswith("✗ 1 node(s) failed to configure (p5-train-gpu-1): fix the cause and `up` again (the "
                                 "failed nodes keep running; `down` removes them)")


def test_up_times_out_naming_the_nodes_that_never_reported(up, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err, _ = up("--wait-timeout", "0s", polls=[[]], capsys=capsys)
    assert code == 1
    for name, iid in NODES.items():
        assert f"✗ node {name} ({iid}): never reported after 0 s" in err
    assert "2 of 2 node(s) not ready after 0 s (2 never reported: see their console output)" in err


def test_no_wait_returns_after_pulumi(up, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, _stub = up("--no-wait", capsys=capsys)
    assert code == 0, err
    assert up.made == [] and "waiting for" not in out


def test_a_bad_wait_timeout_is_one_line_before_anything_runs(up, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, _ = up("--wait-timeout", "soon", capsys=capsys)
    assert code == 2
    assert err.strip() == ("✗ --wait-timeout 'soon': give a duration such as 90s, 45m or 2h (a bare number is "
                           "minutes)")
    assert "deployed" not in out


def test_down_deletes_the_status_records_after_the_stack(up, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = NODES.values()
    assert up(polls=[[value(a, "ready", "ready", index=10), value(b, "ready", "ready", index=10)]],
              capsys=capsys)[0] == 0
    names = [f"{PATH}/{a}", f"{PATH}/{b}"]
    code, out, err, stub = up(verb="down", polls=[[value(a, "ready", "ready"), value(b, "ready", "ready")]],
                              deletes=[names], capsys=capsys)
    assert code == 0, err
    stub.assert_no_pending_responses()
    assert f"p5-train: destroyed stack {STACK}" in out
    assert f"deleted 2 node status record(s) under {PATH}" in out
