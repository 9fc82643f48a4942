"""Golden files of the planned resources of every AWS example.

A change to what ``pulumi up`` would create shows up as a diff of ``tests/golden/stacks/<example>.json``.
After checking that the change is intended, regenerate with::

    CLUSTERFORGE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/stacks/test_golden.py
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from clusterforge.plan import PlanResult

from ..golden_files import assert_golden, golden_dir
from .conftest import AWS_EXAMPLES, expand_gz_files, plan_example

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

GOLDEN = golden_dir("stacks")
PROVIDER_KEYS = {"region", "kubeconfig", "enableServerSideApply"}
"""Provider inputs kept in golden files (the others are SDK defaults that follow the environment)."""


def normalized(plan: PlanResult) -> dict[str, Any]:
    """The plan as stable JSON: user data decoded to text (gzip and ``gz+b64`` files unpacked, the size sent on the
    first line), provider inputs reduced to what the program sets."""
    resources = []
    for r in plan.resources:
        inputs = dict(r.inputs)
        if r.type.startswith("pulumi:providers:"):
            inputs = {k: v for k, v in inputs.items() if k in PROVIDER_KEYS}
        if "userData" in inputs:
            raw = base64.b64decode(inputs["userData"])
            gz = raw[:2] == b"\x1f\x8b"
            text = expand_gz_files((gzip.decompress(raw) if gz else raw).decode("utf-8"))
            # readable: a gzip'd document and gz+b64 files shown unpacked, each marked with its size as sent
            inputs["userData"] = [f"<{len(raw)} bytes sent{', gzip' if gz else ''}>", *text.splitlines()]
        resources.append({"type": r.type, "name": r.name, "parent": r.parent, "inputs": inputs})
    invokes = sorted(([t, a] for t, a in plan.invokes), key=lambda x: json.dumps(x, sort_keys=True))
    return {"resources": resources, "outputs": plan.outputs, "invokes": invokes}


@pytest.mark.parametrize("example", AWS_EXAMPLES)
def test_plan_matches_golden(example: str) -> None:
    got = json.dumps(normalized(plan_example(example)), indent=1, sort_keys=True) + "\n"
    assert_golden({f"{example}.json": got}, GOLDEN, complete=False)


def test_plans_are_deterministic() -> None:
    """Two runs of the program give the same plan (golden files would be meaningless otherwise)."""
    from blueprints import load_blueprint
    from clusterforge.plan import plan_aws
    from tests.conftest import EXAMPLES

    a = normalized(plan_aws(load_blueprint(EXAMPLES / "aws-eks-p4d.yaml")))
    b = normalized(plan_example("aws-eks-p4d"))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
