"""Day two on AWS, from the user's side: ``up`` / ``down`` / ``plan`` through the CLI against a
stand-in ``pulumi`` executable (the real Automation API drives it; the Pulumi CLI and an AWS
account are not available here), with the state each ``up`` records.

What the tests encode:

* teardown from state: ``down`` never loads the blueprint (one that fails ``check`` comes down), asks
  first (``--yes`` for scripts), fails loudly when nothing is recorded, and says which file systems
  get a final backup (FSx skips it unless asked: ``SkipFinalBackup`` defaults to true,
  https://docs.aws.amazon.com/fsx/latest/APIReference/API_DeleteFileSystemLustreConfiguration.html);
* state location and identity: the backend is the same from any working directory; a second file
  with the same name and region cannot take the first one's stack;
* updates: each kind of change prints its policy from the catalog table, ``up`` asks before replacing
  or deleting and refuses what it must not do; the AMI is resolved once and passed back on later ``up``s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.stacks.conftest import variant_yaml

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

RECORDED_AMI = "ami-0a1b2c3d4e5f60718"

FAKE = '''#!{python}
import json, os, sys
argv = [a for a in sys.argv[1:] if a != "--non-interactive"]
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": argv, "backend": os.environ.get("PULUMI_BACKEND_URL"), "cwd": os.getcwd()}}) + "\\n")
verb = argv[:2]
if argv[:1] == ["version"]:
    print("v3.272.0")
elif argv[:1] in (["up"], ["destroy"], ["preview"]):
    print(f"{{argv[0]}}: Updating (stack)")
    sys.exit(int(os.environ.get("FAKE_PULUMI_FAIL", "0")) if argv[0] == "up" else 0)
elif verb == ["stack", "output"]:
    print(json.dumps({{"vpcId": "vpc-1", "nodeImages": {{"gpu": {ami!r}}}}}))
elif verb == ["stack", "history"]:
    print(json.dumps([{{"kind": "update", "startTime": "2026-01-01T00:00:00.000Z", "message": "",
                        "environment": {{}}, "config": {{}}, "result": "succeeded",
                        "endTime": "2026-01-01T00:01:00.000Z", "resourceChanges": {{"create": 34}}, "version": 1}}]))
'''


@pytest.fixture
def cli(tmp_path: Path):
    """``cli(verb, *args, cwd=...)`` runs ``clusterforge`` with a stand-in ``pulumi`` on PATH and HOME
    in ``tmp_path``; returns the completed process; ``cli.calls()`` are the stand-in's invocations."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    exe = bin_dir / "pulumi"
    exe.write_text(FAKE.format(python=sys.executable, log=str(log), ami=RECORDED_AMI))
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PULUMI_", "CLUSTERFORGE_", "XDG_"))}
    env.update({"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
                "PULUMI_CONFIG_PASSPHRASE": "correct horse"})

    class Cli:
        home = tmp_path / "home"

        def __call__(self, verb: str, *args: str, cwd: Path = tmp_path,
                     fail: bool = False) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "clusterforge.cli", verb, *args], capture_output=True,
                                  text=True, env={**env, "FAKE_PULUMI_FAIL": "255" if fail else "0"}, cwd=cwd,
                                  timeout=180, check=False, stdin=subprocess.DEVNULL)

        def calls(self) -> list[dict[str, Any]]:
            return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

        def verbs(self) -> list[str]:
            return [c["argv"][0] for c in self.calls() if c["argv"][:1] != ["version"]]

        def reset(self) -> None:
            log.unlink(missing_ok=True)

    return Cli()


def blueprint(tmp_path: Path, patch: dict[str, Any] | None = None, name: str = "p5.yaml") -> Path:
    """A copy of the p5 example (``patch`` deep-merged) at ``tmp_path/name``."""
    path = tmp_path / name
    path.write_text(variant_yaml("aws-p5-efa-lustre", patch or {}))
    return path


DEFAULT_STATE = Path(".local/state/clusterforge")
STACK = "p5-train-us-east-1"


def test_state_is_in_the_users_state_dir_whatever_the_working_directory(cli, tmp_path: Path) -> None:
    bp = blueprint(tmp_path)
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    assert cli("up", str(bp), "--yes").returncode == 0
    res = cli("down", str(bp), "--yes", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    backend = f"file://{cli.home / DEFAULT_STATE / 'pulumi'}"
    stack_calls = [c for c in cli.calls() if c["argv"][:1] != ["version"]]
    assert {c["backend"] for c in stack_calls} == {backend}
    assert [c["argv"][c["argv"].index("--stack") + 1] for c in stack_calls if c["argv"][0] in ("up", "destroy")] \
        == [STACK, STACK]
    assert not (tmp_path / ".clusterforge").exists() and not (elsewhere / ".clusterforge").exists()


def test_down_with_nothing_recorded_fails_and_destroys_nothing(cli, tmp_path: Path) -> None:
    res = cli("down", str(blueprint(tmp_path)), "--yes", "--state-dir", str(tmp_path / "empty"))
    assert res.returncode == 1
    assert "no deployment recorded" in res.stderr and "nothing was destroyed" in res.stderr
    assert "destroy" not in cli.verbs() and "destroyed" not in res.stdout


def test_down_needs_no_valid_blueprint_and_asks_first(cli, tmp_path: Path) -> None:
    bp = blueprint(tmp_path)
    assert cli("up", str(bp), "--yes").returncode == 0
    # the blueprint no longer passes check (a newer rule, an edit): down still works from the record
    bp.write_text(bp.read_text().replace("count: 2", "count: not-a-number"))
    assert cli("check", str(bp)).returncode == 1
    cli.reset()
    res = cli("down", str(bp))  # no terminal, no --yes: refused before Pulumi is touched
    assert res.returncode == 1 and "rerun with --yes" in res.stderr
    assert cli.verbs() == []
    assert f"down: stack {STACK}" in res.stdout
    assert "node group gpu: 2 × p5.48xlarge — destroyed" in res.stdout
    assert "file system shared (PERSISTENT_2, 2400 GiB): deleted after a final backup" in res.stdout
    res = cli("down", str(bp), "--yes")
    assert res.returncode == 0, res.stderr
    assert "destroy" in cli.verbs() and f"p5-train: destroyed stack {STACK}" in res.stdout
    assert not (cli.home / DEFAULT_STATE / "deployments" / f"{STACK}.json").exists()
    # by name too, once recorded again; and an opt-out of the final backup is said out loud
    bp2 = blueprint(tmp_path, {"storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
        "deployment_type": "PERSISTENT_2", "storage_capacity_gib": 2400, "throughput_per_tib_mbps": 250,
        "final_backup": False}}]}, name="p5b.yaml")
    assert cli("up", str(bp2), "--yes").returncode == 0
    res = cli("down", "p5-train", "--yes")
    assert res.returncode == 0, res.stderr
    assert "deleted WITHOUT a final backup (fsx.final_backup: false)" in res.stdout


def test_a_second_blueprint_with_the_same_name_cannot_take_the_stack(cli, tmp_path: Path) -> None:
    first = blueprint(tmp_path, name="first.yaml")
    second = blueprint(tmp_path, {"node_groups": [{"name": "gpu", "role": "compute", "count": 1,
                                                   "instance_type": "p5.48xlarge"}]}, name="second.yaml")
    assert cli("up", str(first), "--yes").returncode == 0
    cli.reset()
    res = cli("up", str(second), "--yes")
    assert res.returncode == 1
    assert f"stack `{STACK}` belongs to {first.resolve()}" in res.stderr and "--adopt" in res.stderr
    assert cli.verbs() == [], "Pulumi must not be touched"
    res = cli("plan", str(second))
    assert res.returncode == 0 and f"belongs to {first.resolve()}" in res.stdout
    # the same cluster moved to a new file: --adopt moves the record (and shows the changes first)
    res = cli("up", str(second), "--adopt", "--yes")
    assert res.returncode == 0, res.stderr
    record = json.loads((cli.home / DEFAULT_STATE / "deployments" / f"{STACK}.json").read_text())
    assert record["blueprint_file"] == str(second.resolve())


def _up_then(cli, tmp_path: Path, patch: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    """Deploy the example, change it by ``patch``, and run ``up`` again (no terminal)."""
    bp = blueprint(tmp_path)
    assert cli("up", str(bp), "--yes").returncode == 0
    bp.write_text(variant_yaml("aws-p5-efa-lustre", patch))
    cli.reset()
    return cli("up", str(bp), *extra)


def test_growing_a_group_is_in_place_and_not_asked(cli, tmp_path: Path) -> None:
    res = _up_then(cli, tmp_path, {"node_groups": [{"name": "gpu", "role": "compute", "count": 4,
                                                    "instance_type": "p5.48xlarge",
                                                    "local_nvme": {"raid": "raid0", "filesystem": "xfs",
                                                                   "mount": "/scratch"}}]})
    assert res.returncode == 0, res.stderr
    assert "in-place      node_groups.gpu.count: 2 → 4" in res.stdout
    assert "up" in cli.verbs()


def test_a_launch_template_change_replaces_nodes_and_is_asked(cli, tmp_path: Path) -> None:
    res = _up_then(cli, tmp_path, {"target": {"root_volume_gib": 400}})
    assert res.returncode == 1
    assert "replace-nodes target.root_volume_gib: 200 → 400" in res.stdout
    assert "running nodes: 2 node(s) of gpu will be replaced" in res.stdout
    assert "rerun with --yes" in res.stderr and "up" not in cli.verbs()


def test_shrinking_a_group_deletes_nodes_and_is_asked(cli, tmp_path: Path) -> None:
    res = _up_then(cli, tmp_path, {"node_groups": [{"name": "gpu", "role": "compute", "count": 1,
                                                    "instance_type": "p5.48xlarge",
                                                    "local_nvme": {"raid": "raid0", "filesystem": "xfs",
                                                                   "mount": "/scratch"}}]})
    assert res.returncode == 1 and "delete        node_groups.gpu.count: 2 → 1" in res.stdout
    assert "up" not in cli.verbs()


@pytest.mark.parametrize(("patch", "line"), [
    # FSx cannot change its deployment type in place (UpdateFileSystemLustreConfiguration has no such field:
    # https://docs.aws.amazon.com/fsx/latest/APIReference/API_UpdateFileSystemLustreConfiguration.html)
    ({"storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
        "deployment_type": "PERSISTENT_1", "storage_capacity_gib": 2400, "throughput_per_tib_mbps": 200}}]},
     "refused       storage.shared.fsx.deployment_type: PERSISTENT_2 → PERSISTENT_1"),
    # FSx for Lustre storage cannot shrink (https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-storage-capacity.html)
    ({"storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
        "deployment_type": "PERSISTENT_2", "storage_capacity_gib": 1200, "throughput_per_tib_mbps": 250,
        "metadata": {"mode": "AUTOMATIC"}}}]},
     "refused       storage.shared.fsx.storage_capacity_gib: 2400 → 1200"),
    ({"target": {"availability_zone": "us-east-1b"}}, "refused       target.availability_zone: us-east-1a → us-east-1b"),
])
def test_changes_up_refuses_even_with_yes(cli, tmp_path: Path, patch: dict[str, Any], line: str) -> None:
    res = _up_then(cli, tmp_path, patch, "--yes")
    assert res.returncode == 1, res.stdout
    assert line in res.stdout
    assert "`up` does not do this to a running cluster" in res.stderr
    assert "up" not in cli.verbs()


def test_the_ami_is_recorded_and_reused_until_refresh(cli, tmp_path: Path) -> None:
    bp = blueprint(tmp_path)
    assert cli("up", str(bp), "--yes").returncode == 0
    record = json.loads((cli.home / DEFAULT_STATE / "deployments" / f"{STACK}.json").read_text())
    assert record["images"] == {"gpu": RECORDED_AMI}

    def images_config() -> dict[str, str]:
        sets = [c["argv"] for c in cli.calls() if c["argv"][:2] == ["config", "set"] and "clusterforge:images" in c["argv"]]
        assert sets, "no clusterforge:images setting"
        return json.loads(sets[-1][-1])

    cli.reset()
    res = cli("up", str(bp))  # no change at all: nothing asked, the recorded image given back
    assert res.returncode == 0, res.stderr
    assert f"{STACK}: no changes" in res.stdout
    assert images_config() == {"gpu": RECORDED_AMI}
    cli.reset()
    res = cli("up", str(bp), "--refresh-ami")
    assert res.returncode == 1 and f"replace-nodes images.gpu: {RECORDED_AMI} → latest" in res.stdout
    assert "up" not in cli.verbs()
    cli.reset()
    assert cli("up", str(bp), "--refresh-ami", "--yes").returncode == 0
    assert images_config() == {}, "--refresh-ami lets the stack read the SSM parameter again"


def test_plan_shows_the_changes_offline(cli, tmp_path: Path) -> None:
    bp = blueprint(tmp_path)
    res = cli("plan", str(bp), "--json")
    assert res.returncode == 0 and "changes" not in json.loads(res.stdout), "nothing deployed: no changes"
    assert cli("up", str(bp), "--yes").returncode == 0
    bp.write_text(variant_yaml("aws-p5-efa-lustre", {"target": {"ssh_ingress_cidrs": ["203.0.113.0/24"]}}))
    cli.reset()
    res = cli("plan", str(bp), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["changes"]["changes"] == [{
        "field": "target.ssh_ingress_cidrs", "resource": "target", "type": "target", "action": "changed",
        "old": [], "new": ["203.0.113.0/24"], "policy": "in-place", "why": "security-group rules change beside the nodes",
        "source": "https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html"}]
    assert doc["changes"]["up"] == "proceeds" and doc["changes"]["replaced"] == [] and doc["changes"]["stack"] == STACK
    text = cli("plan", str(bp))
    assert any(line.startswith("  in-place      target.ssh_ingress_cidrs") for line in text.stdout.splitlines()), \
        "the text output keeps its lines"
    assert cli.verbs() == [], "plan is offline"


def test_plan_json_gives_each_change_its_resource_action_and_policy(cli, tmp_path: Path) -> None:
    """A change of every class against one deployment, read as data: the gpu group's instance type replaces its 2
    nodes (policy table: the group's launch template changes), a removed file system is deleted, a new availability
    zone is refused; the record's owner file conflict is its own shape."""
    bp = blueprint(tmp_path)
    assert cli("up", str(bp), "--yes").returncode == 0
    bp.write_text(variant_yaml("aws-p5-efa-lustre", {"target": {"availability_zone": "us-east-1b"},
                                                     "node_groups": [{"name": "gpu", "count": 2,
                                                                      "instance_type": "p5e.48xlarge"}],
                                                     "storage": []}))
    doc = json.loads(cli("plan", str(bp), "--json").stdout)["changes"]
    by_field = {c["field"]: c for c in doc["changes"]}
    gpu = by_field["node_groups.gpu.instance_type"]
    assert (gpu["resource"], gpu["type"], gpu["action"], gpu["policy"]) == \
        ("node_groups.gpu", "node-group", "changed", "replace-nodes")
    assert (gpu["old"], gpu["new"]) == ("p5.48xlarge", "p5e.48xlarge")
    fs = next(c for c in doc["changes"] if c["type"] == "file-system")
    assert (fs["resource"], fs["action"], fs["policy"], fs["new"]) == ("storage.shared", "removed", "delete", None)
    az = by_field["target.availability_zone"]
    assert (az["resource"], az["type"], az["policy"]) == ("target", "target", "refused") and az["why"]
    assert doc["replaced"] == [{"group": "gpu", "nodes": 2, "stopped_first": False}]
    assert doc["deleted"] == ["storage.shared"] and doc["up"] == "refuses"
    other = tmp_path / "other" / "p5.yaml"
    other.parent.mkdir()
    other.write_text(bp.read_text())
    owned = json.loads(cli("plan", str(other), "--json").stdout)["changes"]
    assert owned == {"stack": STACK, "owner": str(bp.resolve()), "refused": owned["refused"]}
    assert "belongs to" in owned["refused"]


def test_stack_record_uses_the_recorded_image_in_the_program() -> None:
    """The program gives an EC2 group the recorded AMI instead of reading the SSM parameter (mock engine)."""
    from blueprints import load_blueprint
    from clusterforge.plan import PROJECT, _stacks_program, run_program

    loaded = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml")
    cfg = {f"{PROJECT}:blueprint": str(loaded.file), f"{PROJECT}:images": json.dumps({"gpu": RECORDED_AMI})}
    result = run_program(_stacks_program, stack=STACK, config=cfg)
    lts = result.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert [lt.inputs["imageId"] for lt in lts] == [RECORDED_AMI]
    assert not [a for t, a in result.invokes if t == "aws:ssm/getParameter:getParameter"]
    assert result.outputs["nodeImages"] == {"gpu": RECORDED_AMI}


FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"


def _fsx(plan_variant, fsx: dict[str, Any]) -> dict[str, Any]:
    plan = plan_variant("aws-p5-efa-lustre", {"storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx",
                                                           "fsx": fsx}]})
    (fs,) = plan.of_type(FSX)
    return fs.inputs


def test_fsx_backups_on_by_default_with_a_named_opt_out(plan_variant) -> None:
    base = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 2400, "throughput_per_tib_mbps": 250}
    fs = _fsx(plan_variant, base)
    # DeleteFileSystem takes no final backup unless SkipFinalBackup is false (its default is true):
    # https://docs.aws.amazon.com/fsx/latest/APIReference/API_DeleteFileSystemLustreConfiguration.html
    assert fs["skipFinalBackup"] is False
    assert fs["automaticBackupRetentionDays"] == 7 and fs["copyTagsToBackups"] is True
    assert _fsx(plan_variant, {**base, "automatic_backup_retention_days": 30})["automaticBackupRetentionDays"] == 30
    opted_out = _fsx(plan_variant, {**base, "final_backup": False})
    assert opted_out["skipFinalBackup"] is True and "finalBackupTags" not in opted_out
    # backups exist only for persistent file systems not linked to S3:
    # https://docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html
    scratch = _fsx(plan_variant, {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 1200})
    assert not {"skipFinalBackup", "automaticBackupRetentionDays"} & set(scratch)
    linked = _fsx(plan_variant, {**base, "s3": {"data_repository_path": "s3://bucket/data"}})
    assert not {"skipFinalBackup", "automaticBackupRetentionDays"} & set(linked)


def _leaf_paths(model: Any, prefix: str = "") -> set[str]:
    """Every field path of a pydantic model, through nested models, lists of models and unions
    (named list entries as ``*``)."""
    import typing

    from pydantic import BaseModel

    out: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        models: list[Any] = []
        listed = False
        todo = [info.annotation]
        while todo:
            t = todo.pop()
            origin = typing.get_origin(t)
            if isinstance(t, type) and issubclass(t, BaseModel):
                models.append(t)
            elif origin in (list, tuple):
                listed = True
                todo.extend(typing.get_args(t))
            elif origin is not None:
                todo.extend(a for a in typing.get_args(t) if not isinstance(a, (str, int)))
        out.add(path)
        for m in models:
            out |= _leaf_paths(m, f"{path}.*" if listed else path)
    return out


def test_every_blueprint_field_has_an_update_policy() -> None:
    """ParallelCluster's rule for its own schema: no field without an update policy. A new blueprint
    field must be added to the catalog table (aws-catalog.yaml update_policy), or `up` refuses it."""
    from blueprints.models import AwsTarget, Blueprint
    from clusterforge.updates import POLICIES, classify, policy_table

    for entry in policy_table():
        assert entry["policy"] in POLICIES, entry
        # every explanation whole: an unquoted comma in a flow mapping once cut ten of them mid-sentence
        assert set(entry) <= {"path", "policy", "decreased", "added", "removed", "why", "source"}, entry
        assert all(entry[k] in POLICIES for k in ("added", "removed", "decreased") if k in entry), entry
    # the table is the AWS target's: its target fields, not the on-prem ones
    paths = {p for p in _leaf_paths(Blueprint) if not p.startswith("target.")} | _leaf_paths(AwsTarget, "target")
    leaves = {p for p in paths if not any(q.startswith(p + ".") for q in paths)}
    unclassified = sorted(p for p in leaves
                          if classify(p.replace("*", "x"), 1, 2, "changed").why.startswith("this field has no"))
    assert unclassified == []


def test_reserved_instances_are_replaced_delete_first() -> None:
    """A Capacity Block sized to the group has no free slot: a replacement must stop the old instance
    before launching the new one, so `up` does not fail half-way with InsufficientInstanceCapacity."""
    from tests.stacks.conftest import plan_example

    cb = plan_example("aws-p5-capacity-block")
    by_group = {i.name: i.delete_before_replace for i in cb.of_type("aws:ec2/instance:Instance")}
    assert by_group and all(v for k, v in by_group.items() if "-gpu-" in k), by_group
    on_demand = plan_example("aws-p5-efa-lustre").of_type("aws:ec2/instance:Instance")
    assert on_demand and not any(i.delete_before_replace for i in on_demand)


def test_check_refuses_an_s3_link_fsx_cannot_make(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Data repository associations need Lustre 2.12+ and are not offered on SCRATCH_1
    (https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateDataRepositoryAssociation.html)."""
    from clusterforge.cli import main

    for fsx, words in ((
            {"deployment_type": "SCRATCH_1", "storage_capacity_gib": 1200}, "SCRATCH_1 file system, which has no data"),
            ({"deployment_type": "SCRATCH_2", "storage_capacity_gib": 1200, "file_system_type_version": "2.10"},
             "needs Lustre 2.12 or newer")):
        path = blueprint(tmp_path, {"storage": [{"kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
            **fsx, "s3": {"data_repository_path": "s3://bucket/train"}}}]})
        assert main(["check", str(path)]) == 1
        captured = capsys.readouterr()
        err = captured.out + captured.err
        assert "fsx-deployment-feature" in err and words in err, err


def test_eks_capacity_block_groups_are_scaled_to_zero_before_an_update(cli, tmp_path: Path) -> None:
    """EKS replaces managed nodes surge-first; a Capacity Block has no spare slot, and AWS's way is to set
    the node group's size to 0 before updating it (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html).
    `up` refuses a node-replacing change on a running block group, and lets it through at count 0."""
    cb = {"target": {"capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0",
                                  "node_groups": ["gpu"]}}}
    path = tmp_path / "eks.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", cb))
    assert cli("check", str(path)).returncode == 0, cli("check", str(path)).stdout
    assert cli("up", str(path), "--yes").returncode == 0
    path.write_text(variant_yaml("aws-eks-p4d", {**cb, "target": {**cb["target"], "root_volume_gib": 400}}))
    cli.reset()
    res = cli("up", str(path), "--yes")
    assert res.returncode == 1 and "refused       target.root_volume_gib: 200 → 400" in res.stdout
    assert "set `count: 0` for gpu and `up` first" in res.stderr and "up" not in cli.verbs()
    # scaled to 0 first (a delete, confirmed), the same change goes through
    groups = [{"name": "system", "role": "controller", "count": 2, "instance_type": "m6i.xlarge"},
              {"name": "gpu", "role": "compute", "count": 0, "instance_type": "p4d.24xlarge",
               "local_nvme": {"mount": "/scratch"}, "labels": {"clusterforge.io/accelerator": "a100"}}]
    path.write_text(variant_yaml("aws-eks-p4d", {**cb, "node_groups": groups}))
    res = cli("up", str(path), "--yes")
    assert res.returncode == 0 and "delete        node_groups.gpu.count: 2 → 0" in res.stdout, res.stderr
    path.write_text(variant_yaml("aws-eks-p4d", {**cb, "node_groups": groups,
                                                 "target": {**cb["target"], "root_volume_gib": 400}}))
    res = cli("up", str(path), "--yes")
    assert res.returncode == 0 and "replace-nodes target.root_volume_gib: 200 → 400" in res.stdout, res.stderr


def test_a_failed_first_up_still_owns_its_stack_and_comes_down(cli, tmp_path: Path) -> None:
    """Pulumi may have created half the cluster when `up` fails: the stack is claimed before Pulumi runs,
    so another file with the same name cannot take it, and `down` can remove what was created."""
    first = blueprint(tmp_path, name="first.yaml")
    res = cli("up", str(first), "--yes", fail=True)
    assert res.returncode == 1 and "pulumi up failed" in res.stderr
    res = cli("up", str(blueprint(tmp_path, name="second.yaml")), "--yes")
    assert res.returncode == 1 and f"belongs to {first.resolve()}" in res.stderr
    cli.reset()
    res = cli("down", str(first), "--yes")
    assert res.returncode == 0, res.stderr
    assert cli.verbs().count("destroy") == 1
