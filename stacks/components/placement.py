"""``clusterforge:aws:Placement``: the EC2 placement group decision and, when needed, the group.

The rules (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html):

* ``network.placement`` ``cluster`` / ``partition`` / ``spread``: one group of that strategy,
  shared by every node group;
* ``none`` or unset: no group;
* a **Capacity Block** never gets one: its instances are already placed in an EC2 UltraCluster and
  a placement-group constraint makes launches fail with InsufficientInstanceCapacity;
* an **On-Demand Capacity Reservation** gets no *new* group: if the reservation was created in a
  placement group (``capacity.placement_group``) the nodes use that group by name, otherwise none.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.naming import Naming

from ..inventory import PlacementDecision, decide_placement

__all__ = ["Placement", "PlacementArgs", "PlacementDecision", "decide_placement"]


@dataclass(frozen=True)
class PlacementArgs:
    """Inputs of :class:`Placement`: ``decision`` from :func:`decide_placement`; ``partition_count``
    for the ``partition`` strategy (EC2 allows up to 7 per AZ)."""

    naming: Naming
    decision: PlacementDecision
    partition_count: int = 2


class Placement(pulumi.ComponentResource):
    """The placement group (if any). Output: ``group_name`` — the name launch templates reference,
    or ``None`` when nodes launch without a placement group."""

    group_name: pulumi.Output[str] | None

    def __init__(self, name: str, args: PlacementArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:Placement", name, None, opts)
        d = args.decision
        self.group_name = None
        if d.create and d.strategy:
            pg = aws.ec2.PlacementGroup(
                f"{name}-pg", strategy=d.strategy,
                partition_count=args.partition_count if d.strategy == "partition" else None,
                tags=args.naming.tags(role="compute", name=args.naming.name("pg")),
                opts=pulumi.ResourceOptions(parent=self))
            self.group_name = pg.name
        elif d.use_existing:
            self.group_name = pulumi.Output.from_input(d.use_existing)
        self.register_outputs({"groupName": self.group_name, "reason": d.reason})
