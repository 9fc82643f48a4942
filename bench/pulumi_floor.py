"""The floor under ``clusterforge plan``: what Pulumi's Python SDK and its mock engine alone cost for a
node group of N instances, with no clusterforge code in the run.

The program has the shape of the one node group ``plan`` builds for ``aws-p5-efa-lustre`` (see
:class:`stacks.components.nodes.NodeGroupComponent`): one component resource, one launch template, and
N ``aws.ec2.Instance`` children, each with the launch template's id and ``latest_version`` and a tag
map, and one exported list of the instances' private IPs. It runs under Pulumi's own mock engine
(:func:`pulumi.runtime.set_mocks`, https://www.pulumi.com/docs/using-pulumi/testing/unit/) with a
minimal :class:`pulumi.runtime.Mocks` that echoes inputs back as state. What it leaves out is what
clusterforge adds: loading and checking the blueprint, the network, storage and IAM resources, the
user data, and recording each registration for the plan.

Run: ``.venv/bin/python bench/pulumi_floor.py N``, from a fresh interpreter as ``bench_plan.py --floor``
does, so imports count as they do for ``clusterforge plan``. Prints ``N <seconds>`` (the program and
the mock engine, imports excluded) on one line, then ends the process at once, as the console script
does after ``plan``; the caller times the whole process.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await


class EchoMocks(pulumi.runtime.Mocks):
    """Resource state = inputs, plus the two computed attributes the program reads."""

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "aws:ec2/instance:Instance":
            state["privateIp"] = "10.0.0.10"
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        return f"{args.name}-id", state

    def call(self, args: Any) -> dict[str, Any]:
        return {}


class Group(pulumi.ComponentResource):
    """One node group: a launch template and ``count`` instances launched from it."""

    def __init__(self, name: str, count: int) -> None:
        super().__init__("floor:aws:NodeGroup", name)
        child = pulumi.ResourceOptions(parent=self)
        lt = aws.ec2.LaunchTemplate(f"{name}-lt", instance_type="p5.48xlarge", opts=child)
        tags = {"clusterforge:blueprint": "floor", "clusterforge:group": name, "clusterforge:role": "compute"}
        ips = []
        for i in range(count):
            host = f"{name}-{i}"
            inst = aws.ec2.Instance(
                host,
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=lt.id, version=lt.latest_version.apply(str)),
                tags={**tags, "Name": host},
                opts=child,
            )
            ips.append(inst.private_ip)
        self.private_ips = pulumi.Output.all(*ips)
        self.register_outputs({"private_ips": self.private_ips})


def main(count: int) -> float:
    """Run the program for ``count`` instances under the mock engine; returns the seconds it took."""
    gc.disable()  # as `clusterforge plan` runs (clusterforge.plan._cyclic_gc_paused)
    t0 = time.perf_counter()
    pulumi.runtime.set_mocks(EchoMocks(), project="floor", stack="floor", preview=False)

    def program() -> None:
        pulumi.export("private_ips", Group("gpu", count).private_ips)

    _sync_await(run_pulumi_func(program))
    return time.perf_counter() - t0


if __name__ == "__main__":
    n = int(sys.argv[1])
    print(n, f"{main(n):.3f}", flush=True)
    # end as `clusterforge plan` does (clusterforge.cli._end_process): without the interpreter's teardown,
    # which after N instances frees about 60 Output objects per instance one by one
    os._exit(0)
