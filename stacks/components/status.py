"""``clusterforge:aws:NodeStatus``: what the stack's EC2 nodes need to report their boot steps.

Each node's boot steps report to the SSM parameter ``<path>/<instance id>`` (:mod:`stacks.node_status`), ``path``
= ``/clusterforge/<stack>/nodes``. The component creates the SSM parameters ``/clusterforge/<stack>/programs/<program>
/<part>`` holding the programs the nodes fetch at first boot (:data:`stacks.node_status.PROGRAMS`: the step runner,
for nodes with the AWS CLI, and the quick checks' health check; :meth:`stacks.node_status.NodeProgram.values`,
standard tier, catalog ``node_status``), and the policy the node roles get (:class:`.iam.NodeIam`, ``policy_arns``):
``ssm:PutParameter`` on the parameters under the path and ``ssm:GetParameter`` on the programs' parameters, in the
stack's region and account, nothing else (:func:`stacks.node_status.status_policy`). The parameter ARN is
``arn:<partition>:ssm:<region>:<account>:parameter<path>`` (the name's leading slash is the one after ``parameter``:
catalog ``node_status.arn_form_source``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from blueprints.catalog import catalog
from blueprints.naming import Naming

from ..node_status import PROGRAMS, NodeProgram, status_policy

__all__ = ["NodeStatus", "NodeStatusArgs", "parameter_arn"]


def parameter_arn(partition: str, region: str, account: str, path: str) -> str:
    """The IAM ARN of the SSM parameter (or path) ``path`` (``/clusterforge/...``)."""
    return f"arn:{partition}:ssm:{region}:{account}:parameter{path}"


@dataclass(frozen=True)
class NodeStatusArgs:
    """Inputs of :class:`NodeStatus`: the status records' ``path`` (:func:`stacks.node_status.status_path` of the
    stack), the stack's ``region`` and the node groups' own ``programs`` (:func:`stacks.cloud_init.node_programs` of
    every EC2 group), kept beside :data:`stacks.node_status.PROGRAMS`."""

    naming: Naming
    path: str
    region: str
    programs: tuple[NodeProgram, ...] = ()


class NodeStatus(pulumi.ComponentResource):
    """The programs' parameters and the node status policy. Outputs: ``policy_arn`` (for the node roles), ``path``."""

    policy_arn: pulumi.Output[str]
    path: str

    def __init__(self, name: str, args: NodeStatusArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("clusterforge:aws:NodeStatus", name, None, opts)
        n = args.naming
        child = pulumi.ResourceOptions(parent=self)
        parts = [aws.ssm.Parameter(f"{name}-{key}-{i}", name=param, type="String",
                                   tier=str(catalog().aws["node_status"]["tier"]), value=value,
                                   description=f"clusterforge: the nodes' program {p.dest}, part {i + 1} of "
                                               f"{len(p.values())} (gzip, base64; its SHA-256 is pinned in their user "
                                               "data)",
                                   tags=n.tags(role="iam", name=n.name(f"node-{key}-{i}")), opts=child)
                 for p in PROGRAMS + args.programs for key in (p.name.replace("/", "-"),)
                 for i, (param, value) in enumerate(zip(p.parameters(args.path), p.values()))]
        invoke = pulumi.InvokeOutputOptions(parent=self)
        account = aws.get_caller_identity_output(opts=invoke).account_id
        partition = aws.get_partition_output(opts=invoke).partition
        document = pulumi.Output.all(partition, account).apply(
            lambda xs: status_policy(parameter_arn(str(xs[0]), args.region, str(xs[1]), args.path), args.programs))
        policy = aws.iam.Policy(f"{name}-policy", description=f"clusterforge {n.blueprint}: nodes put their status "
                                f"records under {args.path}", policy=document,
                                tags=n.tags(role="iam", name=n.name("node-status")), opts=child)
        # the roles get the policy once the programs are there to fetch
        self.policy_arn = pulumi.Output.all(policy.arn, *(p.arn for p in parts)).apply(lambda xs: str(xs[0]))
        self.path = args.path
        self.register_outputs({"policyArn": policy.arn, "path": args.path})
