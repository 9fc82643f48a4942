"""The cloud CLI verbs as a user runs them: ``plan`` (tree and --json), ``up``/``down`` without the
Pulumi CLI, ``render`` of the stack config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blueprints import load_blueprint
from clusterforge.cli import main
from stacks.render import render_stack_config
from tests.conftest import EXAMPLES, REPO

from .conftest import expand_gz_files, variant_yaml

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def test_plan_prints_a_tree_with_counts(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", str(EXAMPLES / "aws-p5-efa-lustre.yaml")])
    out = capsys.readouterr().out
    assert rc == 0
    # 38 + the node status policy and its attachment to the node role + the programs' parameters: the runner (one),
    # the health check (two) and the GPU group's EFA script (one)
    assert out.startswith("plan p5-train (aws us-east-1 us-east-1a): 44 cloud resources"), out[:200]
    assert "clusterforge:aws:NodeStatus p5-train-node-status (5 resources)" in out
    assert "clusterforge:aws:NodeGroup p5-train-gpu (3 resources)" in out
    assert "aws:ec2:LaunchTemplate p5-train-gpu-lt" in out
    assert "aws:ec2:Instance p5-train-gpu-0" in out and "aws:ec2:Instance p5-train-gpu-1" in out
    assert "aws:fsx:LustreFileSystem p5-train-fsx-shared-fs" in out
    assert "resources by type" in out
    assert "│ aws:vpc:SecurityGroupEgressRule" in out


def test_plan_json_has_type_name_parent_and_engine_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--json", str(EXAMPLES / "aws-p5-capacity-block.yaml")])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"resources"}
    for r in data["resources"]:
        assert set(r) == {"type", "name", "parent", "inputs"}, r
    lt = next(r for r in data["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate")
    assert lt["parent"] == "p5-block-gpu"
    # engine (camelCase) property names, as the provider receives them
    assert lt["inputs"]["metadataOptions"]["httpTokens"] == "required"
    assert lt["inputs"]["instanceMarketOptions"]["marketType"] == "capacity-block"
    assert {n["networkCardIndex"] for n in lt["inputs"]["networkInterfaces"]} == set(range(32))


def test_plan_reports_program_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "eks-ami.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"target": {"ami_id": "ami-0123456789abcdef0"}}))
    rc = main(["plan", str(path)])
    err = capsys.readouterr().err
    assert rc == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "target.ami_id" in lines[0] and "EKS" in lines[0], err


def _without_pulumi(tmp_path: Path) -> dict[str, str]:
    """Environment where no `pulumi` executable can be found (PATH = the venv only, empty HOME)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "CLUSTERFORGE_", "XDG_"))}
    env["PATH"] = str(Path(sys.executable).parent)
    env["HOME"] = str(tmp_path)
    return env


@pytest.mark.parametrize("verb", ["up"])  # `down` with nothing recorded stops earlier: tests/stacks/test_day_two.py
def test_up_and_down_without_pulumi_cli_say_how_to_install_it(verb: str, tmp_path: Path) -> None:
    assert not (Path(sys.executable).parent / "pulumi").exists()
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", verb, str(EXAMPLES / "aws-p5-efa-lustre.yaml")],
                         capture_output=True, text=True, env=_without_pulumi(tmp_path), cwd=tmp_path, timeout=120,
                         check=False)
    assert res.returncode == 1, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert "Pulumi CLI is not installed" in lines[0] and "https://get.pulumi.com" in lines[0]
    assert "Traceback" not in res.stderr


def test_up_without_passphrase_explains_it(tmp_path: Path) -> None:
    env = _without_pulumi(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pulumi").write_text("#!/bin/sh\nexit 0\n")
    (fake / "pulumi").chmod(0o755)
    env["PATH"] = f"{fake}:{env['PATH']}"
    res = subprocess.run([sys.executable, "-m", "clusterforge.cli", "up", str(EXAMPLES / "aws-p5-efa-lustre.yaml")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert res.returncode == 2, res.stderr
    assert "PULUMI_CONFIG_PASSPHRASE" in res.stderr and str(tmp_path / ".local/state/clusterforge") in res.stderr


def test_down_on_prem_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["down", str(EXAMPLES / "onprem-dgx-h100-ib.yaml")])
    assert rc == 2
    assert "nothing to destroy on bare metal" in capsys.readouterr().err


def test_render_writes_stack_config_and_user_data(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml")
    files = render_stack_config(loaded, tmp_path)
    names = sorted(p.relative_to(tmp_path).as_posix() for p in files)
    assert names == sorted(["Pulumi.eks-p4d.yaml", "Pulumi.yaml", "__main__.py", "blueprint.yaml", "cloud-init/gpu.mime",
                            "cloud-init/system.mime"])
    stack = (tmp_path / "Pulumi.eks-p4d.yaml").read_text()
    assert 'clusterforge:blueprint: "blueprint.yaml"' in stack
    assert (tmp_path / "blueprint.yaml").read_text() == (EXAMPLES / "aws-eks-p4d.yaml").read_text()
    gpu = expand_gz_files((tmp_path / "cloud-init" / "gpu.mime").read_text())  # over 16 KB: larger files travel gz+b64
    assert "FSX_DATASETS_DNS_NAME@tcp:/FSX_DATASETS_MOUNT_NAME" in gpu


def test_the_stack_program_refuses_an_on_prem_blueprint_in_one_line() -> None:
    """`pulumi up` of a stack whose `clusterforge:blueprint` names an on-prem blueprint: the program
    (run here against the mock engine) stops with one line naming the file and the way to deploy it."""
    import pulumi

    from clusterforge.plan import plan_aws

    path = EXAMPLES / "onprem-dgx-h100-ib.yaml"
    with pytest.raises(pulumi.RunError) as e:
        plan_aws(load_blueprint(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}: blueprint `") and "\n" not in msg
    assert "targets `onprem`; Pulumi deploys AWS blueprints only — run `clusterforge up`" in msg


def test_pulumi_project_files() -> None:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    project = yaml.load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "clusterforge" and project["main"] == "stacks/"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    example = yaml.load((REPO / "Pulumi.example.yaml").read_text())
    assert (REPO / example["config"]["clusterforge:blueprint"]).is_file()


def test_plan_on_prem_shows_the_ansible_run(capsys: pytest.CaptureFixture[str]) -> None:
    from clusterforge.ansible.render import plan_ansible

    path = EXAMPLES / "onprem-l40s-roce.yaml"
    assert main(["plan", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(plan_ansible(load_blueprint(path)), default=str))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ansible plan l40s-roce (on-prem)")
    assert "l40s-01" in out and "nvidia_driver" in out
