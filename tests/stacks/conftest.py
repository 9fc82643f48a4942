"""Helpers for the Pulumi stack tests: plans of the AWS examples (computed once per worker),
blueprint variants written to temp files, and lookups that read like policies."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from blueprints.settings import NodeSettings
from clusterforge.plan import PlannedResource, PlanResult, plan_aws
from stacks.cloud_init import node_programs, placeholder_endpoints, render_cloud_config
from tests.conftest import EXAMPLES

from .aws_standin import aws  # noqa: F401 (the stand-in AWS on 127.0.0.1, a fixture of every stack test)

AWS_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("*.yaml") if load_blueprint(p).blueprint.is_aws)
"""Every example blueprint that targets AWS (new examples are picked up automatically)."""

LT = "aws:ec2/launchTemplate:LaunchTemplate"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
INSTANCE = "aws:ec2/instance:Instance"
NODEGROUP = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"

_PLANS: dict[str, PlanResult] = {}


def plan_example(name: str) -> PlanResult:
    """The plan of ``blueprints/examples/<name>.yaml`` (cached for the worker)."""
    if name not in _PLANS:
        _PLANS[name] = plan_aws(load_blueprint(EXAMPLES / f"{name}.yaml"))
    return _PLANS[name]


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = _merge(base.get(k), v)
        return out
    return copy.deepcopy(patch)


def variant_yaml(example: str, patch: dict[str, Any]) -> str:
    """The example's YAML with ``patch`` deep-merged in (``None`` deletes a key; lists replace)."""
    yaml = YAML(typ="safe", pure=True)
    data = yaml.load((EXAMPLES / f"{example}.yaml").read_text())
    buf = io.StringIO()
    YAML().dump(_merge(data, patch), buf)
    return buf.getvalue()


@pytest.fixture
def plan_variant(tmp_path: Path) -> Callable[..., PlanResult]:
    """``plan_variant(example, patch)`` -> the plan of the patched example (written to a temp file)."""

    def run(example: str, patch: dict[str, Any]) -> PlanResult:
        path = tmp_path / f"{example}-variant.yaml"
        path.write_text(variant_yaml(example, patch))
        return plan_aws(load_blueprint(path))

    return run


def user_data(lt: PlannedResource) -> str:
    """The decoded user data of a launch template (gunzipped when :func:`stacks.cloud_init.encode_user_data`
    compressed a cloud-config over the 16 KB limit, as cloud-init does on the node)."""
    raw = base64.b64decode(lt.inputs["userData"])
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    return expand_gz_files(text)


def expand_gz_files(text: str) -> str:
    """``text`` (user data) with an ``application/x-gzip`` MIME part (EKS user data over the limit) and
    every ``write_files`` entry sent ``gz+b64`` shown as the text cloud-init unpacks them to."""
    return _GZ_FILE.sub(_gunzip_file, _GZ_PART.sub(_gunzip_part, text))


_GZ_PART = re.compile(r"^Content-Type: application/x-gzip\nContent-Transfer-Encoding: base64\n\n([A-Za-z0-9+/=\n]+?)\n(?=--)",
                      re.MULTILINE)


def _gunzip_part(m: re.Match[str]) -> str:
    body = gzip.decompress(base64.b64decode(m.group(1).replace("\n", ""))).decode("utf-8")
    return "Content-Type: application/x-gzip (base64, unpacked here)\n\n" + body


_GZ_FILE = re.compile(r"^( *)content: ?(?:\n *)?([A-Za-z0-9+/=]+)\n\1encoding: gz\+b64\n", re.MULTILINE)
"""A ``gz+b64`` file entry; a base64 line longer than the YAML line width starts on the next line."""


def _gunzip_file(m: re.Match[str]) -> str:
    """A ``write_files`` entry sent ``gz+b64`` (EKS user data over the limit), as the literal cloud-init writes."""
    body = gzip.decompress(base64.b64decode(m.group(2))).decode("utf-8")
    pad = m.group(1) + "  "
    return (f"{m.group(1)}content: |\n" + "".join(pad + line + "\n" for line in body.splitlines())
            + f"{m.group(1)}encoding: gz+b64 (unpacked here)\n")


def by_id(plan: PlanResult) -> dict[str, PlannedResource]:
    """Resources keyed by their (mock) id."""
    return {r.id: r for r in plan.resources if r.id}


def sg_named(plan: PlanResult, suffix: str) -> PlannedResource:
    """The security group whose logical name ends with ``suffix`` (``-nodes``, ``-fsx``)."""
    found = [r for r in plan.of_type(SG) if r.name.endswith(suffix)]
    assert len(found) == 1, f"expected one security group *{suffix}, got {[r.name for r in found]}"
    return found[0]


def rules_of(plan: PlanResult, sg: PlannedResource, kind: str) -> list[PlannedResource]:
    """Ingress (``kind=INGRESS``) or egress rules attached to ``sg``."""
    return [r for r in plan.of_type(kind) if r.inputs.get("securityGroupId") == sg.id]


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stack test sees an empty clusterforge state directory of its own, never the user's
    (``plan`` and ``up`` read deployment records from it: :mod:`clusterforge.state`)."""
    monkeypatch.setenv("CLUSTERFORGE_STATE_DIR", str(tmp_path_factory.mktemp("cf-state")))


def with_programs(text: str, settings: NodeSettings) -> str:
    """User data ``text`` of a node of ``settings``, followed by the programs the node's step runner fetches from the
    stack's SSM parameters before the steps that run them (:func:`stacks.cloud_init.node_programs`, as the stack
    creates their parameters), each only where the user data pins its SHA-256: what the node runs, for tests that
    read it. A program the user data neither pins nor carries fails the test."""
    out = text
    for p in node_programs(settings):
        if f'"sha256": "{p.sha256()}"' in text:
            out += f"\n# fetched by the step runner: {p.dest}\n{p.text()}"
        else:
            assert f"path: {p.dest}" in text, f"{p.dest}: neither pinned nor carried by the user data"
    return out


def node_file(settings: NodeSettings, path: str, platform: str = "ubuntu") -> str:
    """The file ``path`` a node of ``settings`` gets at first boot (``platform``: ``ubuntu`` for EC2, ``al2023`` for
    EKS): from its user data, or, for a program its step runner fetches (:func:`with_programs`), the program whose
    SHA-256 its status settings pin."""
    doc = YAML(typ="safe", pure=True).load(render_cloud_config(settings, placeholder_endpoints(settings),
                                                               platform=platform))  # type: ignore[arg-type]
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    if path in files:
        return str(files[path])
    pinned = json.loads(files["/etc/clusterforge/node-status.json"])["programs"]
    assert path in pinned, f"{path} neither rendered nor fetched; files: {sorted(files)}"
    (program,) = [p for p in node_programs(settings) if p.dest == path]
    assert program.sha256() == pinned[path]["sha256"]
    return program.text()
