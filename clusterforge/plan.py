"""Offline plan: run the Pulumi program in-process against a mock engine and record every resource.

``pulumi up`` needs the Pulumi CLI, a state backend and cloud credentials; ``clusterforge plan``
needs none of them. It runs the real program (``stacks/__main__.py``, the same file ``pulumi up``
runs) under :func:`pulumi.runtime.set_mocks` with a monitor that records every registration:
type token, logical name, parent, dependencies and inputs under their **engine** (camelCase)
property names — what the Pulumi engine would send to the provider. Invokes the program makes
(the AMI's SSM parameter, the AMI's root device, availability zones, an existing subnet's VPC)
are answered by :class:`PlanMocks` with deterministic stand-ins, so plans are stable and can be
compared with golden files. Outputs computed by AWS (ids, IPs, the FSx DNS name) are mock values
too: ``plan`` shows *what* would be created and *how it is wired*, not values AWS assigns.

This is the AWS target's planner (:class:`clusterforge.targets.aws.AwsTarget`); every target's plan,
typed, comes from :func:`clusterforge.targets.plan`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import hashlib
import logging
import re
import runpy
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from blueprints import LoadedBlueprint
from stacks.config import CONFIG_NAMESPACE

__all__ = [
    "PlanMocks",
    "PlanResult",
    "PlannedResource",
    "natural_key",
    "plan_aws",
    "run_program",
]

PROJECT = CONFIG_NAMESPACE
"""Pulumi project name (``Pulumi.yaml``); stack config keys live under it."""

SECRET = "[secret]"
"""What a secret input or output looks like in a plan (secrets are never printed)."""

MOCK_ACCOUNT = "123456789012"


@dataclass(frozen=True)
class PlannedResource:
    """One resource the program registers.

    ``type``: Pulumi type token (``aws:ec2/launchTemplate:LaunchTemplate``); ``name``: logical
    name; ``urn``; ``parent``: the parent's logical name (``None`` under the stack);
    ``parent_urn``; ``inputs``: engine property names (camelCase) to plain JSON values, secrets
    replaced by ``"[secret]"``; ``custom``: a cloud resource (``False`` for components and
    providers' components); ``depends_on``: URNs of the resources it depends on; ``id``: the
    mock engine's id for it (links resources: a rule's ``securityGroupId`` is a group's ``id``);
    ``delete_before_replace``: the resource option (a replacement deletes the old one first).
    """

    type: str
    name: str
    urn: str
    parent: str | None
    parent_urn: str | None
    inputs: dict[str, Any]
    custom: bool
    depends_on: tuple[str, ...] = ()
    id: str | None = None
    delete_before_replace: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"type", "name", "parent", "inputs"}`` — the ``plan --json`` shape."""
        return {"type": self.type, "name": self.name, "parent": self.parent, "inputs": self.inputs}


@dataclass
class PlanResult:
    """Everything one program run registered: ``resources`` in registration order, stack
    ``outputs`` (secrets masked), the ``invokes`` made (token, args), the engine log ``messages``
    (level, text) the program wrote with ``pulumi.log``, and ``seconds`` it took."""

    stack: str
    resources: list[PlannedResource]
    outputs: dict[str, Any] = field(default_factory=dict)
    invokes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    messages: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """``{"resources": [{"type", "name", "parent", "inputs"}, ...]}`` (the stack resource excluded)."""
        return {"resources": [r.to_json() for r in self.resources]}

    def of_type(self, type_token: str) -> list[PlannedResource]:
        """Resources whose type token equals ``type_token``."""
        return [r for r in self.resources if r.type == type_token]

    def counts(self) -> Counter[str]:
        """Number of resources per type token."""
        return Counter(r.type for r in self.resources)


# ---------------------------------------------------------------------------------------------
# mock engine
# ---------------------------------------------------------------------------------------------

def _h(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:n]


_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc", "aws:ec2/subnet:Subnet": "subnet", "aws:ec2/securityGroup:SecurityGroup": "sg",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt", "aws:ec2/instance:Instance": "i",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fs", "aws:ec2/internetGateway:InternetGateway": "igw",
    "aws:ec2/natGateway:NatGateway": "nat", "aws:ec2/eip:Eip": "eipalloc", "aws:ec2/routeTable:RouteTable": "rtb",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra",
    "aws:ec2/placementGroup:PlacementGroup": "pg",
}


def _as_int(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _as_int(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_as_int(x) for x in v]
    return v


class PlanMocks(pulumi.runtime.Mocks):
    """Deterministic answers for resources and invokes of the clusterforge program.

    Resource ids are ``<prefix>-<hash of name>``; computed attributes the program reads (FSx
    ``dnsName`` / ``mountName``, instance ``privateIp``, launch template ``latestVersion``, EKS
    ``endpoint`` / ``certificateAuthority`` / cluster security group, IAM ``arn``) are derived from
    the logical name, so two runs of the same blueprint give the same plan.
    """

    def __init__(self, region: str = "us-east-1") -> None:
        self.region = region
        self.invokes: list[tuple[str, dict[str, Any]]] = []
        self._registering = threading.local()

    def registered_inputs(self) -> dict[str, Any]:
        """The inputs of the registration :meth:`new_resource` last answered in this thread, as the mock
        engine deserialized them. The engine registers a resource in one thread, calling ``new_resource``
        inside ``RegisterResource``, so :class:`RecordingMonitor` reads them there instead of
        deserializing the request a second time (about 0.2 ms per resource, ``bench/bench_plan.py``)."""
        inputs: dict[str, Any] = self._registering.inputs
        del self._registering.inputs
        return inputs

    def new_resource(self, args: Any) -> tuple[str | None, dict[str, Any]]:
        typ: str = args.typ
        name: str = args.name
        self._registering.inputs = args.inputs
        state: dict[str, Any] = dict(args.inputs)
        rid = f"{_ID_PREFIX.get(typ, typ.rsplit(':', 1)[-1].lower())}-{_h(typ, name)}"
        region = state.get("region") or self.region
        if typ == "pulumi:providers:aws" and "region" in state:
            self.region = state["region"]
        state.setdefault("arn", f"arn:aws:{typ.split(':')[1].split('/')[0]}:{region}:{MOCK_ACCOUNT}:{name}")
        if typ.startswith("aws:"):
            state.setdefault("name", name)
        if typ == "aws:ec2/instance:Instance":
            h = int(_h(name, n=8), 16)
            state["privateIp"] = f"10.0.{(h >> 8) % 15}.{4 + h % 250}"
        elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state["dnsName"] = f"{rid}.fsx.{region}.amazonaws.com"
            state["mountName"] = _h("mount", name, n=8)
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
            state["defaultVersion"] = 1
        elif typ == "aws:eks/cluster:Cluster":
            state["endpoint"] = f"https://{_h(name, n=32).upper()}.gr7.{region}.eks.amazonaws.com"
            state["certificateAuthority"] = {"data": "TU9DSy1DQQ=="}
            vpc = dict(state.get("vpcConfig") or {})
            vpc["clusterSecurityGroupId"] = f"sg-{_h('eks', name)}"
            state["vpcConfig"] = vpc
        elif typ == "aws:eks/nodeGroup:NodeGroup":
            state.setdefault("nodeGroupName", name)
            # EKS names the node group's Auto Scaling group (a Capacity Block's scheduled action names it)
            state.setdefault("resources", [{"autoscalingGroups": [{"name": f"eks-{name}-asg"}]}])
        elif typ == "aws:iam/role:Role":
            state["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:role/{name}"
        elif typ == "aws:iam/instanceProfile:InstanceProfile":
            state["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:instance-profile/{name}"
        elif typ == "aws:kms/key:Key":
            state["arn"] = f"arn:aws:kms:{region}:{MOCK_ACCOUNT}:key/{_h(name, n=32)}"
        return rid, state

    def call(self, args: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        token: str = args.token
        a = dict(args.args)
        self.invokes.append((token, _as_int(a)))
        if token == "aws:ssm/getParameter:getParameter":
            value = f"ami-{_h('ami', a.get('name', ''))}"
            return {"name": a.get("name"), "value": value, "insecureValue": value, "type": "String",
                    "arn": f"arn:aws:ssm:{self.region}::parameter{a.get('name')}", "id": a.get("name"),
                    "version": 1, "withDecryption": True}, []
        if token == "aws:ec2/getAmi:getAmi":
            ids = [v for f in a.get("filters") or [] if f.get("name") == "image-id" for v in f.get("values", [])]
            ami = ids[0] if ids else f"ami-{_h('ami')}"
            return {"id": ami, "imageId": ami, "rootDeviceName": "/dev/sda1", "architecture": "x86_64",
                    "mostRecent": True, "name": "mock-ami"}, []
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            # four availability zones and, as in an account with Local Zones enabled, one Local Zone, whose
            # name sorts first; filters on opt-in-status / zone-type apply as DescribeAvailabilityZones applies them
            zones = [(f"{self.region}-bos-1a", "opted-in", "local-zone")] + [
                (f"{self.region}{c}", "opt-in-not-required", "availability-zone") for c in "abcd"]
            for f in a.get("filters") or []:
                key = {"opt-in-status": 1, "zone-type": 2}.get(f.get("name"))
                if key is not None:
                    zones = [z for z in zones if z[key] in f.get("values", [])]
            names = [z[0] for z in zones]
            return {"id": self.region, "names": names, "zoneIds": [f"use1-az{i}" for i in range(1, len(names) + 1)],
                    "state": "available"}, []
        if token == "aws:ec2/getSubnet:getSubnet":
            sid = a.get("id") or "subnet-mock"
            return {"id": sid, "vpcId": f"vpc-{_h('existing', sid)}", "availabilityZone": f"{self.region}a",
                    "cidrBlock": "10.0.0.0/20", "arn": f"arn:aws:ec2:{self.region}:{MOCK_ACCOUNT}:subnet/{sid}"}, []
        if token == "aws:index/getPartition:getPartition":
            return {"id": "aws", "partition": "aws", "dnsSuffix": "amazonaws.com",
                    "reverseDnsPrefix": "com.amazonaws"}, []
        if token == "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation":
            # a stand-in window that holds any day the plan runs: the plan shows the block's node groups at their
            # `count` (what `cost` prices); `up` before the block's start creates them at 0 nodes plus a scheduled
            # scale-up at the start (stacks.components.capacity_block; `check` says so)
            return {"id": a.get("id"), "startDate": "2000-01-01T00:00:00Z", "endDate": "2100-01-01T00:00:00Z",
                    "reservationType": "capacity-block", "instanceCount": 0}, []
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": MOCK_ACCOUNT, "arn": f"arn:aws:iam::{MOCK_ACCOUNT}:user/plan", "id": MOCK_ACCOUNT,
                    "userId": "PLAN"}, []
        return a, []


# ---------------------------------------------------------------------------------------------
# recording monitor and the in-process run
# ---------------------------------------------------------------------------------------------

def _clean(v: Any) -> Any:
    """Deserialized property values -> plain JSON (secrets masked, resource refs as URNs)."""
    if isinstance(v, pulumi.Output) or rpc.is_rpc_secret(v):
        return SECRET
    if isinstance(v, pulumi.output.Unknown):
        return "[unknown]"
    if isinstance(v, dict):
        return {k: _clean(v[k]) for k in sorted(v)}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, pulumi.Resource):
        return f"<resource {type(v).__name__}>"
    return str(v)


class RecordingMonitor(MockMonitor):
    """A mock monitor that also records each registration as a :class:`PlannedResource`."""

    mocks: PlanMocks

    def __init__(self, mocks: PlanMocks) -> None:
        super().__init__(mocks)
        self.records: list[PlannedResource] = []
        self.names: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:
        resp = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return resp
        urn = resp.urn
        self.names[urn] = request.name
        parent_urn = request.parent or None
        top = parent_urn is None or "::pulumi:pulumi:Stack::" in parent_urn
        # a plan runs with preview off, so every input is known: the engine's deserialization (unknowns
        # dropped) is the full set of inputs
        inputs = self.mocks.registered_inputs()
        self.records.append(PlannedResource(
            type=request.type, name=request.name, urn=urn,
            parent=None if top or parent_urn is None else self.names.get(parent_urn, parent_urn),
            parent_urn=None if top else parent_urn,
            inputs=_clean(inputs), custom=bool(request.custom),
            depends_on=tuple(request.dependencies), id=resp.id or None,
            delete_before_replace=bool(request.deleteBeforeReplace),
        ))
        return resp


class _EngineLog(logging.Handler):
    """Collects what the program logs through the engine (``pulumi.log.*``) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[tuple[str, str]] = []
        self.logger = logging.getLogger(f"clusterforge.plan.engine.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelname.lower(), record.getMessage()))


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one bounded plan run.

    The mock engine keeps every resource's inputs, outputs and asyncio tasks (about 60 ``Output``
    objects per resource) alive until the run ends, and each full collection walks all of them, so
    with the collector on the cost per resource grew with the plan's size (3 ms per resource at 2
    instances, 7.5 ms at 1,024). Paused, it stays flat; the garbage is collected once afterwards.
    Figures: ``bench/bench_plan.py``. Reference counting still frees everything acyclic meanwhile.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_program(program: Callable[[], None], *, stack: str, config: dict[str, str], region: str = "us-east-1",
                project: str = PROJECT) -> PlanResult:
    """Run ``program`` (a Pulumi program as a function) under the mock engine and record it.

    ``config`` is the stack config (``{"clusterforge:blueprint": "/abs/path.yaml"}``). Each call
    runs in a fresh ``contextvars`` context, so runs are independent. Exceptions from the program
    (e.g. :class:`pulumi.RunError`) propagate.
    """
    def _run() -> PlanResult:
        mocks = PlanMocks(region)
        monitor = RecordingMonitor(mocks)
        log = _EngineLog()
        pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor,
                                 logger=log.logger)
        pulumi.runtime.set_all_config(dict(config))
        t0 = time.perf_counter()
        _sync_await(run_pulumi_func(program))
        root = settings.get_root_resource()
        outputs: dict[str, Any] = {}
        for k, v in getattr(root, "outputs", {}).items():
            outputs[k] = _resolve(v)
        # registration order depends on Output resolution; sort so plans and golden files are stable
        resources = sorted(monitor.records, key=lambda r: (r.parent or "", r.type, natural_key(r.name)))
        return PlanResult(stack=stack, resources=resources, outputs=outputs, invokes=list(mocks.invokes),
                          messages=list(log.messages), seconds=time.perf_counter() - t0)

    with _cyclic_gc_paused(), _own_event_loop():
        return contextvars.Context().run(_run)


@contextlib.contextmanager
def _own_event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A new asyncio event loop, current for one plan run, then closed with its default executor.

    The mock engine answers registrations from worker threads of the loop's default executor. Without
    this, the run's loop and those idle threads outlived the run: later runs in the same process
    reused the loop, and the console script's process had threads alive after ``plan`` printed, so it
    could not end without the interpreter's teardown (:func:`clusterforge.cli._end_process`), which
    takes about 5 s after a 4,096-instance plan (``bench/bench_plan.py --cli``). Afterwards no loop is
    current; the next Pulumi call in this thread makes its own (``_ensure_event_loop``).
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders ``gpu-2`` before ``gpu-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _resolve(v: Any) -> Any:
    if isinstance(v, pulumi.Output):
        if _sync_await(v.is_secret()):
            return SECRET
        return _resolve(_sync_await(v.future()))
    if isinstance(v, dict):
        return {k: _resolve(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_resolve(x) for x in v]
    return _as_int(v)


def _stacks_program() -> None:
    """Execute ``stacks/__main__.py`` exactly as Pulumi does (fresh module namespace each time)."""
    sys.modules.pop("stacks.__main__", None)
    runpy.run_module("stacks", run_name="__main__", alter_sys=False)


def plan_aws(loaded: LoadedBlueprint) -> PlanResult:
    """Plan an AWS blueprint: run the stack program with ``clusterforge:blueprint`` = its file.

    Raises :class:`pulumi.RunError` (or the program's own error) when the program refuses it.
    """
    bp = loaded.blueprint
    region = getattr(bp.target, "region", "us-east-1")
    cfg = {f"{PROJECT}:blueprint": str(Path(loaded.file).resolve())}
    return run_program(_stacks_program, stack=bp.name, config=cfg, region=region)

