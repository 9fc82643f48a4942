"""EKS managed node groups in a Capacity Block follow the block's window (issue 27 kind 6), from the user's side:
the rendered stack input under Pulumi's mock engine and ``check``'s output.

What the tests encode (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html): a node group
created before its block is active cannot launch instances until the block starts, and AWS's way is to create it
with a desired size of 0 and scale it up at the block's start with an Auto Scaling scheduled action; EKS scales the
group to 0 forty minutes before the block ends, so its minimum must be 0; an update of the group needs its desired
size at 0. ``plan``'s mock engine answers the block lookup with a stand-in window (2000-01-01 to 2100-01-01 UTC); the
tests move the clock around it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusterforge.cli import main
from clusterforge.plan import PlanResult
from stacks.components import capacity_block
from tests.stacks.conftest import variant_yaml

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

CB = {"target": {"capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0",
                              "node_groups": ["gpu"]}},
      "network": {"placement": "none"}}
START = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
END = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
BEFORE = START - datetime.timedelta(hours=6)
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SCHEDULE = "aws:autoscaling/schedule:Schedule"


def _groups(plan: PlanResult) -> dict[str, dict[str, Any]]:
    return {r.name.removesuffix("-mng").rsplit("-", 1)[-1]: r.inputs for r in plan.of_type(NODE_GROUP)}


def test_a_group_created_before_its_block_starts_at_zero_and_is_scaled_up_at_the_start(
        plan_variant: Callable[..., PlanResult], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity_block, "_now", lambda: BEFORE)
    plan = plan_variant("aws-eks-p4d", CB)
    groups = _groups(plan)
    assert groups["gpu"]["capacityType"] == "CAPACITY_BLOCK"
    assert groups["gpu"]["scalingConfig"] == {"desiredSize": 0, "minSize": 0, "maxSize": 2}
    assert groups["system"]["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}, \
        "a group outside the block keeps its fixed size"
    (sched,) = plan.of_type(SCHEDULE)
    assert sched.inputs["startTime"] == "2000-01-01T00:00:00Z"
    assert (sched.inputs["desiredCapacity"], sched.inputs["minSize"], sched.inputs["maxSize"]) == (2, 0, 2)
    gpu_ng = next(r for r in plan.of_type(NODE_GROUP) if r.name.endswith("gpu-mng"))
    assert sched.inputs["autoscalingGroupName"] == f"eks-{gpu_ng.name}-asg", "the node group's own ASG"
    assert sched.parent == gpu_ng.parent
    assert ("aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation",
            {"id": "cr-0123456789abcdef0"}) in [(t, {k: v for k, v in a.items() if k == "id"}) for t, a in plan.invokes]


@pytest.mark.parametrize(("now", "desired", "scheduled", "warned"), [
    (START - datetime.timedelta(seconds=1), 0, True, False),
    (START, 2, False, False),
    (END - datetime.timedelta(seconds=1), 2, False, False),
    (END, 0, False, True),
])
def test_the_group_is_sized_by_the_window_when_up_runs(now: datetime.datetime, desired: int, scheduled: bool,
                                                       warned: bool, plan_variant: Callable[..., PlanResult],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the start: 0 and the scheduled scale-up; during the block: ``count`` (no action in the past); from
    the end: 0, and the engine log says the block is over."""
    monkeypatch.setattr(capacity_block, "_now", lambda: now)
    plan = plan_variant("aws-eks-p4d", CB)
    assert _groups(plan)["gpu"]["scalingConfig"] == {"desiredSize": desired, "minSize": 0, "maxSize": 2}
    assert bool(plan.of_type(SCHEDULE)) == scheduled
    assert any("Capacity Block cr-0123456789abcdef0 ended" in m for _, m in plan.messages) == warned


def test_a_scheduled_action_is_kept_out_of_later_deletes(plan_variant: Callable[..., PlanResult],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Auto Scaling removes a one-time action once it ran, and the ASG goes with the node group: the stack never
    deletes the action itself (Pulumi's retain_on_delete), so an `up` after the start cannot fail on it."""
    seen: list[Any] = []
    real = capacity_block.aws.autoscaling.Schedule

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(k["opts"])
        return real(*a, **k)

    monkeypatch.setattr(capacity_block, "_now", lambda: BEFORE)
    monkeypatch.setattr(capacity_block.aws.autoscaling, "Schedule", spy)
    plan_variant("aws-eks-p4d", CB)
    assert [o.retain_on_delete for o in seen] == [True]


def test_plan_shows_a_block_group_at_its_count(plan_variant: Callable[..., PlanResult]) -> None:
    """Offline, the block's window is a stand-in that holds today: the group at `count` (what `cost` prices)."""
    plan = plan_variant("aws-eks-p4d", CB)
    assert _groups(plan)["gpu"]["scalingConfig"] == {"desiredSize": 2, "minSize": 0, "maxSize": 2}
    assert not plan.of_type(SCHEDULE)


def test_window_boundaries() -> None:
    w = capacity_block.BlockWindow(START, END)
    assert capacity_block.eks_block_scaling(w, 4, START - datetime.timedelta(microseconds=1)).phase == "before"
    assert capacity_block.eks_block_scaling(w, 4, START).phase == "active"
    assert capacity_block.eks_block_scaling(w, 4, END).phase == "ended"
    assert capacity_block.eks_block_scaling(w, 0, START).max_size == 1, "EKS needs a maximum of at least 1"


def test_check_says_what_the_stack_does_with_a_block_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "eks-cb.yaml"
    path.write_text(variant_yaml("aws-eks-p4d", CB))
    assert main(["check", str(path)]) == 0
    out = "".join(capsys.readouterr())
    assert "warning: eks-capacity-block-window" in out and "`gpu`, 2 nodes" in out and "`count: 0` first" in out, out
    assert "`system`" not in out.split("eks-capacity-block-window", 1)[1].split("\n", 1)[0]
