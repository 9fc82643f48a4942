"""The stack's inventory (``stacks/inventory.py``) is what the Pulumi program registers: for every AWS example and
the variants that switch the stack's optional parts on and off, the offline plan under the mock engine registers
exactly the inventory's resources (type token, logical name, parent component, custom or component), every input
the inventory records equals the registered one, and pricing the inventory (what ``clusterforge cost`` does)
gives the same report as pricing the plan. A resource the program adds, drops or renames, or a priced input it
changes, fails here before ``cost`` could price something the stack does not create."""

from __future__ import annotations

from typing import Any

import pytest

from blueprints import load_blueprint
from clusterforge.cost import price_plan
from clusterforge.plan import PlanResult, plan_aws
from stacks.inventory import InventoryError, inventory
from tests.conftest import EXAMPLES
from tests.stacks.conftest import AWS_EXAMPLES, variant_yaml

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "spot": ("aws-p5-efa-lustre", {"target": {"capacity": {"type": "spot", "max_price": 60.5}}}),
    "reservation in its placement group": ("aws-p5-efa-lustre", {"target": {"capacity": {
        "type": "reservation", "reservation_id": "cr-0abc", "instance_count": 2, "placement_group": "odcr-pg"}}}),
    "existing subnet": ("aws-p5-efa-lustre", {"target": {"vpc": {"subnet_id": "subnet-0existing"}}}),
    "no NAT gateway, SSH from two CIDRs": ("aws-p5-efa-lustre", {"target": {
        "vpc": {"nat_gateway": False}, "ssh_ingress_cidrs": ["203.0.113.0/24", "198.51.100.0/24"]}}),
    "FSx with user-provisioned metadata and an S3 link": ("aws-p5-efa-lustre", {"storage": [{
        "kind": "lustre", "name": "shared", "mount": "/fsx", "fsx": {
            "deployment_type": "PERSISTENT_2", "storage_capacity_gib": 4800, "throughput_per_tib_mbps": 500,
            "metadata": {"mode": "USER_PROVISIONED", "iops": 6000},
            "s3": {"data_repository_path": "s3://datasets-bucket/train", "file_system_path": "/train"}}}]}),
    "scratch FSx": ("aws-p5-efa-lustre", {"storage": [{
        "kind": "lustre", "name": "shared", "mount": "/fsx",
        "fsx": {"deployment_type": "SCRATCH_2", "storage_capacity_gib": 1200}}]}),
    "no storage": ("aws-p5-efa-lustre", {"storage": []}),
    "EKS on spot": ("aws-eks-p4d", {"target": {"capacity": {"type": "spot"}}}),
    "EKS with a gVisor group": ("aws-eks-p4d", {"node_groups": [
        {"name": "system", "role": "controller", "count": 2, "instance_type": "m6i.xlarge"},
        {"name": "gpu", "role": "compute", "count": 2, "instance_type": "p4d.24xlarge"},
        {"name": "untrusted", "role": "compute", "count": 1, "instance_type": "p4d.24xlarge", "sandbox": "gvisor"}]}),
}


def _cases() -> list[Any]:
    return ([pytest.param(name, None, id=name) for name in AWS_EXAMPLES]
            + [pytest.param(base, patch, id=label) for label, (base, patch) in VARIANTS.items()])


def _load(tmp_path, example: str, patch: dict[str, Any] | None) -> Any:
    if patch is None:
        return load_blueprint(EXAMPLES / f"{example}.yaml")
    path = tmp_path / f"{example}-variant.yaml"
    path.write_text(variant_yaml(example, patch))
    return load_blueprint(path)


def _registered(plan: PlanResult) -> list[tuple[str, str, str | None, bool]]:
    return sorted((r.type, r.name, r.parent, r.custom) for r in plan.resources)


def _links_by_name(value: Any, names: dict[str, str]) -> Any:
    """A plan input with the ids other resources are linked by (``launchTemplate.id``) replaced by the linked
    resource's logical name, as the inventory links them."""
    if isinstance(value, dict):
        return {k: (names.get(v, v) if k == "id" and isinstance(v, str) else _links_by_name(v, names))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_links_by_name(v, names) for v in value]
    return value


def _missing(expected: Any, actual: Any, where: str = "") -> list[str]:
    """What of ``expected`` (the inventory's inputs) ``actual`` (the registered inputs) lacks or has otherwise:
    mappings compare key by key (``actual`` may have more keys), lists item by item and of the same length."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: {actual!r} is not a mapping"]
        out = []
        for k, v in expected.items():
            out += _missing(v, actual[k], f"{where}.{k}") if k in actual else [f"{where}.{k}: not registered"]
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: {actual!r} != {expected!r}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for m in _missing(e, a, f"{where}[{i}]")]
    return [] if expected == actual else [f"{where}: registered {actual!r}, inventory {expected!r}"]


@pytest.mark.parametrize(("example", "patch"), _cases())
def test_inventory_is_what_the_program_registers(tmp_path, example, patch) -> None:
    loaded = _load(tmp_path, example, patch)
    plan = plan_aws(loaded)
    inv = inventory(loaded.blueprint, loaded.cluster)
    registered = _registered(plan)
    listed = sorted((r.type, r.name, r.parent, r.custom) for r in inv.resources)
    assert listed == registered, (
        f"registered, not in the inventory: {sorted(set(registered) - set(listed))}\n"
        f"in the inventory, not registered: {sorted(set(listed) - set(registered))}")
    names = {r.id: r.name for r in plan.resources if r.id}
    by_key = {(r.type, r.name): r for r in plan.resources}
    wrong = []
    for r in inv.resources:
        if r.inputs:
            actual = _links_by_name(by_key[r.type, r.name].inputs, names)
            wrong += [f"{r.name}{m}" for m in _missing(dict(r.inputs), actual)]
    assert not wrong, "\n".join(wrong)
    # what `cost` prints is what pricing the plan itself gives
    assert price_plan(inv.resources, loaded).to_json() == price_plan(plan, loaded).to_json()


def test_the_inventory_covers_what_the_cost_reads() -> None:
    """Every resource type the examples' plans register that the pricing reads inputs of carries those inputs in
    the inventory (an instance without its launch template or group tag would be priced as an unknown type)."""
    priced = {"aws:ec2/instance:Instance", "aws:ec2/launchTemplate:LaunchTemplate", "aws:eks/nodeGroup:NodeGroup",
              "aws:fsx/lustreFileSystem:LustreFileSystem", "aws:ebs/volume:Volume"}
    seen = set()
    for name in AWS_EXAMPLES:
        loaded = load_blueprint(EXAMPLES / f"{name}.yaml")
        for r in inventory(loaded.blueprint, loaded.cluster).resources:
            if r.type in priced:
                assert r.inputs, f"{name}: {r.type} {r.name} has no inputs in the inventory"
                seen.add(r.type)
    assert seen == priced, f"no example exercises {sorted(priced - seen)}"


def test_efa_interfaces_beyond_the_type_are_refused_in_one_line(tmp_path) -> None:
    loaded = _load(tmp_path, "aws-p5-efa-lustre", {"network": {"efa": {"interfaces": 64}}})
    with pytest.raises(InventoryError, match=r"node group `gpu`: p5\.48xlarge supports at most \d+ EFA interfaces"):
        inventory(loaded.blueprint, loaded.cluster)
