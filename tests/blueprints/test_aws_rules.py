"""AWS rules over generated variants, beyond the one case per rule in test_rules.py: EKS support
dates on a fixed calendar, every EC2 name pulumi_aws ships, case-insensitive suggestions, every
non-NVIDIA accelerator family, and capacity that reaches only its own groups."""

from __future__ import annotations

import datetime
import random
from pathlib import Path
from typing import Any

import pytest

from blueprints import catalog, check, load_blueprint
from blueprints.aws import accelerator_family, capacity_for, reserved_groups
from blueprints.catalog import ec2_instance_type_names
from blueprints.models import KubernetesOrchestrator
from blueprints.rules import aws as aws_rules
from tests.conftest import EXAMPLES
from tests.stacks.conftest import variant_yaml

EOSS = catalog().aws["eks_versions"]["end_of_standard_support"]


def _ids(bp_patch: dict[str, Any], tmp_path: Path, example: str = "aws-eks-p4d") -> list[tuple[str, str]]:
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml(example, bp_patch))
    return [(f.rule_id, f.severity) for f in check(load_blueprint(path))]


@pytest.mark.parametrize("ver", sorted(EOSS))
def test_eks_version_warns_exactly_after_its_end_of_standard_support(ver: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    end = EOSS[ver]
    for today, warned in ((end - datetime.timedelta(days=1), False), (end, False), (end + datetime.timedelta(days=1), True)):
        monkeypatch.setattr(aws_rules, "_today", lambda t=today: t)
        got = ("eks-version-support", "warning") in _ids({"orchestrator": {"version": ver}}, tmp_path)
        assert got == warned, f"EKS {ver} on {today} (standard support ends {end})"


def test_eks_default_version_is_the_newest_catalogued_one() -> None:
    newest = max(EOSS, key=lambda v: tuple(int(x) for x in v.split(".")))
    default = KubernetesOrchestrator(kind="kubernetes").version
    assert default == newest, f"default {default}, newest in the catalog {newest}"
    assert load_blueprint(EXAMPLES / "aws-eks-p4d.yaml").blueprint.orchestrator.version == newest  # type: ignore[union-attr]

EOES = catalog().aws["eks_versions"]["end_of_extended_support"]


@pytest.mark.parametrize("ver", sorted(EOES))
def test_eks_version_is_refused_exactly_after_its_end_of_extended_support(ver: str, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS's calendar: 12 months of extended support after the end of standard support, then EKS creates no new
    cluster on the version. Through that day: the extended-support warning; the day after: the error alone."""
    end = EOES[ver]
    assert end.year == EOSS[ver].year + 1 and (end.month, end.day) == (EOSS[ver].month, EOSS[ver].day), ver
    for today, ended in ((end, False), (end + datetime.timedelta(days=1), True)):
        monkeypatch.setattr(aws_rules, "_today", lambda t=today: t)
        ids = _ids({"orchestrator": {"version": ver}}, tmp_path)
        assert (("eks-version-ended", "error") in ids) == ended, f"EKS {ver} on {today}"
        assert (("eks-version-support", "warning") in ids) == (not ended), f"EKS {ver} on {today}"


def test_eks_calendar_matches_aws_for_the_versions_it_lists() -> None:
    """Pinned to AWS's release calendar (kubernetes-versions.adoc at the commit the catalog cites): 1.29 and 1.34."""
    assert EOSS["1.29"] == datetime.date(2025, 3, 23) and EOES["1.29"] == datetime.date(2026, 3, 23)
    assert EOSS["1.34"] == datetime.date(2026, 12, 2) and EOES["1.34"] == datetime.date(2027, 12, 2)


@pytest.mark.parametrize(("k8s", "operator"), [("1.35", "v26.7.0"), ("1.33", "v26.7.0"), ("1.32", "v26.3.3")])
def test_default_gpu_operator_follows_the_kubernetes_version(k8s: str, operator: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's platform-support page: 26.7 (supported) lists Amazon EKS 1.33-1.36, 26.3 (deprecated) 1.32-1.36, so
    an unpinned operator is 26.7's newest patch where it fits, else 26.3's; the pairing passes check."""
    monkeypatch.setattr(aws_rules, "_today", lambda: datetime.date(2026, 1, 2))  # 1.32 still in standard support
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"orchestrator": {"version": k8s}}))
    loaded = load_blueprint(path)
    assert loaded.blueprint.orchestrator.gpu_operator_version == operator  # type: ignore[union-attr]
    assert not [f.format() for f in check(loaded) if f.rule_id.startswith(("gpu-operator", "eks-version"))]


def test_check_refuses_an_unlisted_gpu_operator_pairing_from_the_cli(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's pairing (GPU Operator v24.9.0 on Kubernetes 1.35): exit 1 naming the rule, NVIDIA's EKS range for
    24.9 (1.25-1.28) and the release to use."""
    from clusterforge.cli import main

    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"orchestrator": {"gpu_operator_version": "v24.9.0"}}))
    assert main(["check", str(path)]) == 1
    cap = capsys.readouterr()
    out = cap.out + cap.err
    assert "gpu-operator-kubernetes" in out and "1.25–1.28" in out and "v26.7.0" in out, out
    assert "warning: gpu-operator-support" in out, out


def test_eks_without_gpus_needs_no_gpu_operator_release(tmp_path: Path) -> None:
    """No GPU group: the operator is not installed, so a Kubernetes version no release lists is not refused for it."""
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"orchestrator": {"version": "1.31"}, "node_groups": [
        {"name": "system", "role": "controller", "count": 2, "instance_type": "m6i.xlarge"}]}))
    ids = {r for r, _ in [(f.rule_id, f.severity) for f in check(load_blueprint(path))]}
    assert "gpu-operator-kubernetes" not in ids


def test_every_ec2_type_is_accepted_for_a_login_group(tmp_path: Path) -> None:
    """A sample of the ~1,400 names pulumi_aws ships (seeded): each is accepted for a login group
    unless it is a non-NVIDIA accelerator family, which gets its own message."""
    names = sorted(ec2_instance_type_names())
    assert len(names) > 500
    for name in random.Random(11).sample(names, 25):
        ids = {r for r, _ in _ids({"node_groups": [{"name": "login", "role": "login", "count": 1, "instance_type": name},
                                                   {"name": "gpu", "count": 2, "instance_type": "p4d.24xlarge"}]},
                                  tmp_path)}
        assert "instance-type-exists" not in ids, name
        assert ("instance-type-accelerator-not-nvidia" in ids) == bool(accelerator_family(name)), name


def test_ec2_names_read_from_the_provider_source_equal_its_enum() -> None:
    """`check` reads the EC2 names from pulumi_aws's generated enum source instead of importing the
    SDK (a second of start-up); the text read must give exactly the enum the SDK defines."""
    import warnings

    from blueprints.catalog import _instance_type_names_from_source

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pulumi_aws.ec2 import InstanceType
    assert _instance_type_names_from_source() == frozenset(str(m.value) for m in InstanceType)


@pytest.mark.parametrize(("typed", "suggested"), [("M6i.2XLarge", "m6i.2xlarge"), ("C7I.LARGE", "c7i.large"),
                                                  ("m6i.2xlarg", "m6i.2xlarge"), ("q9x.8xlarge", None)])
def test_invented_or_mis_cased_types_are_refused_with_a_suggestion(typed: str, suggested: str | None,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", {"node_groups": [
        {"name": "system", "role": "controller", "count": 1, "instance_type": typed},
        {"name": "gpu", "count": 2, "instance_type": "p4d.24xlarge"}]}))
    found = [f for f in check(load_blueprint(path)) if f.rule_id == "instance-type-exists"]
    assert len(found) == 1 and found[0].severity == "error"
    if suggested:
        assert f"did you mean `{suggested}`" in found[0].message


@pytest.mark.parametrize("itype", ["inf2.48xlarge", "inf1.24xlarge", "dl1.24xlarge", "dl2q.24xlarge", "f2.12xlarge",
                                   "vt1.24xlarge", "g4ad.16xlarge", "trn1n.32xlarge"])
@pytest.mark.parametrize("role", ["compute", "login"])
def test_non_nvidia_accelerators_get_their_own_message(itype: str, role: str, tmp_path: Path) -> None:
    ids = {r for r, _ in _ids({"node_groups": [{"name": "x", "role": role, "count": 1, "instance_type": itype},
                                               {"name": "gpu", "count": 2, "instance_type": "p4d.24xlarge"}]}, tmp_path)}
    assert "instance-type-accelerator-not-nvidia" in ids
    assert not {"instance-type-unknown", "instance-type-exists", "instance-type-not-in-catalog"} & ids, ids


@pytest.mark.parametrize("cap", ["capacity-block", "reservation"])
@pytest.mark.parametrize("role", ["login", "controller", "storage"])
def test_reservation_reaches_only_its_groups(cap: str, role: str, tmp_path: Path) -> None:
    capacity = {"type": cap, "reservation_id": "cr-0abc", "instance_count": 2}
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", {
        "target": {"capacity": capacity}, "network": {"placement": "none"},
        "node_groups": [{"name": "gpu", "count": 2, "instance_type": "p5.48xlarge"},
                        {"name": "other", "role": role, "count": 1, "instance_type": "m6i.2xlarge"}]}))
    bp = load_blueprint(path).blueprint
    assert [g.name for g in reserved_groups(bp)] == ["gpu"]
    assert capacity_for(bp, bp.group("other")).type == "on-demand"
    assert capacity_for(bp, bp.group("gpu")).type == cap
    assert not [f for f in check(load_blueprint(path)) if f.severity == "error"]


def test_unset_placement_with_a_capacity_block_is_no_finding(tmp_path: Path) -> None:
    ids = _ids({"network": {"placement": None}}, tmp_path, "aws-p5-capacity-block")
    assert not [r for r, _ in ids if "placement" in r], ids


@pytest.mark.parametrize(("node_groups", "groups", "expect"), [
    (["gpu"], None, None),
    (["gpus"], None, "is not a node group (did you mean `gpu`?)"),
    ([], None, "is empty"),
    (None, [{"name": "login", "role": "login", "count": 1, "instance_type": "m6i.2xlarge"}], "no `compute` group"),
    (None, [{"name": "gpu", "count": 2, "instance_type": "p5.48xlarge"},
            {"name": "login", "role": "login", "count": 1, "instance_type": "p5.48xlarge"}], "in reservation"),
])
def test_capacity_node_groups_must_be_unambiguous(node_groups: list[str] | None, groups: list[dict[str, Any]] | None,
                                                  expect: str | None, tmp_path: Path) -> None:
    cap: dict[str, Any] = {"type": "reservation", "reservation_id": "cr-0abc"}
    if node_groups is not None:
        cap["node_groups"] = node_groups
    patch: dict[str, Any] = {"target": {"capacity": cap}, "network": {"placement": "none"}}
    if groups is not None:
        patch["node_groups"] = groups
    path = tmp_path / "bp.yaml"
    path.write_text(variant_yaml("aws-p5-efa-lustre", patch))
    found = [f for f in check(load_blueprint(path)) if f.rule_id == "capacity-node-groups"]
    if expect is None:
        assert not found, [f.format() for f in found]
    else:
        assert found and expect in found[0].message and found[0].severity == "error", [f.format() for f in found]
