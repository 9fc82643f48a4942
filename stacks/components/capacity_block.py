"""EKS managed node groups in a Capacity Block for ML: their size follows the block's window.

AWS's rules (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html):

* a node group created before its block is active cannot launch instances until the block starts (its Auto
  Scaling group records launch errors meanwhile); AWS's way is to create it with a desired size of 0 and scale it
  up when the block becomes active, e.g. with an Auto Scaling **scheduled action at the block's start time**;
* EKS itself adds a scheduled action ("Amazon EKS Node Group Capacity Scaledown Before Reservation End") that
  scales the group to 0 forty minutes before the block ends (EC2 starts shutting instances down 30 minutes before);
  the group's minimum must allow it;
* an update of a node group in a block needs its desired size at 0 (the update policy refuses node-replacing
  changes on a running block group, :func:`clusterforge.targets.aws` ``_capacity_block_eks``).

So :func:`eks_block_scaling` reads the block's window at deploy time (``ec2:DescribeCapacityBlockReservations``
through ``aws.ec2.get_capacity_block_reservation``) and sizes the group by it: before the start, desired 0 plus a
scheduled action at the start (:func:`schedule_block_start`); during the block, the group's ``count``; after the end,
0 (and a warning: the block is gone). The minimum is 0 throughout, the maximum ``count``. The scheduled action is
kept out of ``down`` and of later updates (``retain_on_delete``): a one-time action is removed by Auto Scaling once
it ran, and the Auto Scaling group goes away with the node group.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_aws as aws

__all__ = ["BlockScaling", "BlockWindow", "block_window", "eks_block_scaling", "schedule_block_start"]

SCHEDULED_ACTION = "clusterforge-capacity-block-start"
"""Name of the scheduled action that scales a node group up at its Capacity Block's start."""


@dataclass(frozen=True)
class BlockWindow:
    """A Capacity Block's ``start`` and ``end`` (UTC)."""

    start: datetime.datetime
    end: datetime.datetime


@dataclass(frozen=True)
class BlockScaling:
    """How an EKS node group in a Capacity Block is sized now: ``phase`` (``before``, ``active``, ``ended``),
    ``desired`` / ``min_size`` / ``max_size`` (nodes) and the block's ``window``."""

    phase: Literal["before", "active", "ended"]
    desired: int
    min_size: int
    max_size: int
    window: BlockWindow


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _parse(text: str) -> datetime.datetime:
    when = datetime.datetime.fromisoformat(str(text))
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def block_window(reservation_id: str, *, parent: pulumi.Resource | None = None) -> BlockWindow:
    """The start and end of Capacity Block ``reservation_id``, read from EC2 when the program runs (``plan``'s mock
    engine answers with a stand-in window). Raises :class:`pulumi.RunError` when EC2 gives no dates for it."""
    found = aws.ec2.get_capacity_block_reservation(id=reservation_id, opts=pulumi.InvokeOptions(parent=parent))
    start, end = getattr(found, "start_date", None), getattr(found, "end_date", None)
    if not start or not end:
        raise pulumi.RunError(f"Capacity Block {reservation_id}: EC2 gives no start and end date for it (is it a "
                              "Capacity Block of this account and region?)")
    return BlockWindow(_parse(start), _parse(end))


def eks_block_scaling(window: BlockWindow, count: int, now: datetime.datetime | None = None) -> BlockScaling:
    """The size of an EKS node group of ``count`` nodes in a block with ``window``, at ``now`` (default: the clock):
    desired 0 before the start, ``count`` from the start to the end, 0 after it; minimum 0, maximum ``count``
    (at least 1, as EKS requires)."""
    at = now or _now()
    phase: Literal["before", "active", "ended"] = (
        "before" if at < window.start else "active" if at < window.end else "ended")
    return BlockScaling(phase, count if phase == "active" else 0, 0, max(count, 1), window)


def schedule_block_start(name: str, node_group: aws.eks.NodeGroup, scaling: BlockScaling, count: int,
                         parent: pulumi.Resource) -> aws.autoscaling.Schedule | None:
    """Before the block starts: a one-time Auto Scaling scheduled action on the node group's Auto Scaling group that
    sets its desired size to ``count`` at the block's start (``None`` in the other phases)."""
    if scaling.phase != "before":
        return None
    asg = node_group.resources.apply(lambda rs: str((rs[0].autoscaling_groups or [])[0].name))
    return aws.autoscaling.Schedule(
        f"{name}-block-start",
        scheduled_action_name=SCHEDULED_ACTION,
        autoscaling_group_name=asg,
        start_time=scaling.window.start.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        desired_capacity=count, min_size=scaling.min_size, max_size=scaling.max_size,
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=True))
