"""``clusterforge up`` / ``down`` through the real Pulumi Automation API, against a stand-in ``pulumi``
executable (the Pulumi CLI is not installed on build machines). The stand-in records how it is
called and prints progress lines, so the test sees what the Automation API asks of the CLI: the
stack, the local file backend, the blueprint setting, and that Pulumi's output is streamed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

FAKE = '''#!{python}
import json, os, sys
argv = [a for a in sys.argv[1:] if a != "--non-interactive"]
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": argv, "backend": os.environ.get("PULUMI_BACKEND_URL"),
                         "passphrase": os.environ.get("PULUMI_CONFIG_PASSPHRASE"), "cwd": os.getcwd()}}) + "\\n")
verb = argv[:2]
if argv[:1] == ["version"]:
    print("v3.272.0")
elif argv[:1] in (["up"], ["destroy"], ["preview"]):
    print(f"{{argv[0]}}: Updating (stack)")
    print("    + 34 to create")
    sys.exit(int(os.environ.get("FAKE_PULUMI_FAIL", "0")))
elif verb == ["stack", "output"]:
    print(json.dumps({{"vpcId": "vpc-1", "nodePrivateIps": {{"gpu": ["10.0.0.5"]}}}}))
elif verb == ["stack", "history"]:
    print(json.dumps([{{"kind": "update", "startTime": "2026-01-01T00:00:00.000Z", "message": "",
                        "environment": {{}}, "config": {{}}, "result": "succeeded",
                        "endTime": "2026-01-01T00:01:00.000Z", "resourceChanges": {{"create": 34}}, "version": 1}}]))
'''


@pytest.fixture
def fake_pulumi(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(FAKE.format(python=sys.executable, log=str(log)))
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "CLUSTERFORGE_", "XDG_"))}
    env.update({"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
                "PULUMI_CONFIG_PASSPHRASE": "correct horse"})
    return env, log


def run(verb: str, env: dict[str, str], cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterforge.cli", verb, str(EXAMPLES / "aws-p5-efa-lustre.yaml"),
                           *extra], capture_output=True, text=True, env=env, cwd=cwd, timeout=180, check=False)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_up_uses_a_local_state_backend_and_streams_pulumi_output(fake_pulumi, tmp_path: Path) -> None:
    env, log = fake_pulumi
    res = run("up", env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "up: Updating (stack)" in res.stdout and "+ 34 to create" in res.stdout, "Pulumi output not streamed"
    assert "p5-train: deployed (succeeded) as stack p5-train-us-east-1" in res.stdout
    made = calls(log)
    stack_calls = [c for c in made if c["argv"][:1] != ["version"]]
    # the default state directory is the user's (HOME here), never the working directory's
    state = (tmp_path / ".local" / "state" / "clusterforge" / "pulumi").resolve()
    assert state.is_dir(), "default state directory not created"
    assert not (tmp_path / ".clusterforge").exists()
    for c in stack_calls:
        assert c["backend"] == f"file://{state}", c
        assert c["cwd"] == str(Path(__file__).resolve().parents[2]), "must run the repository's Pulumi project"
        assert "--stack" in c["argv"] and c["argv"][c["argv"].index("--stack") + 1] == "p5-train-us-east-1"
    config = [c["argv"] for c in stack_calls if c["argv"][:2] == ["config", "set"]]
    assert config and config[0][2] == "clusterforge:blueprint"
    assert config[0][-1] == str((EXAMPLES / "aws-p5-efa-lustre.yaml").resolve())
    assert any(c["argv"][0] == "up" for c in stack_calls)
    assert "correct horse" not in res.stdout + res.stderr, "the passphrase must never be printed"


def test_state_dir_option_and_down(fake_pulumi, tmp_path: Path) -> None:
    env, log = fake_pulumi
    state = tmp_path / "elsewhere"
    assert run("up", env, tmp_path, "--state-dir", str(state)).returncode == 0
    res = run("down", env, tmp_path, "--state-dir", str(state), "--yes")
    assert res.returncode == 0, res.stderr
    assert "destroy: Updating (stack)" in res.stdout and "p5-train: destroyed stack p5-train-us-east-1" in res.stdout
    verbs = [c["argv"][0] for c in calls(log)]
    assert verbs.count("destroy") == 1 and verbs.count("up") == 1
    assert all(c["backend"] == f"file://{state.resolve() / 'pulumi'}" for c in calls(log)
               if c["argv"][:1] != ["version"])


def test_failed_up_is_one_line_after_pulumis_own_messages(fake_pulumi, tmp_path: Path) -> None:
    env, _ = fake_pulumi
    env["FAKE_PULUMI_FAIL"] = "255"
    res = run("up", env, tmp_path)
    assert res.returncode == 1
    assert "+ 34 to create" in res.stdout
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines == ["✗ pulumi up failed; Pulumi's messages are above"], res.stderr
