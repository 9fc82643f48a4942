"""The pinned multi-card NIC layout for every EFA instance type in the catalog."""

from __future__ import annotations

import pytest

from blueprints.catalog import catalog
from stacks.components.nodes import NicSlot, ami_parameter, efa_layout

EFA_TYPES = [n for n in catalog().instance_type_names if catalog().instance_type(n).efa_supported]


@pytest.mark.parametrize("name", EFA_TYPES)
def test_max_gives_one_efa_per_card_up_to_the_catalog_maximum(name: str) -> None:
    spec = catalog().instance_type(name)
    slots = efa_layout(spec, "max", efa_fabric=True)
    efa = [s for s in slots if s.interface_type != "interface"]
    assert len(efa) == spec.max_efa_interfaces
    assert sorted(s.network_card_index for s in efa) == list(range(spec.max_efa_interfaces or 0))
    assert slots[0] == NicSlot(0, 0, "interface"), "primary must be ENA at card 0 / device 0 (efa-only cannot be)"
    assert NicSlot(0, 1, "efa-only") in slots
    assert all(s.device_index == 0 for s in efa if s.network_card_index > 0)
    per_card: dict[int, int] = {}
    for s in slots:
        per_card[s.network_card_index] = per_card.get(s.network_card_index, 0) + 1
    assert max(per_card.values()) <= (spec.max_interfaces_per_card or 2)


def test_fewer_interfaces_on_request_and_too_many_refused() -> None:
    p5 = catalog().instance_type("p5.48xlarge")
    assert [s.network_card_index for s in efa_layout(p5, 4, efa_fabric=True)] == [0, 0, 1, 2, 3]
    assert efa_layout(p5, 0, efa_fabric=True) == [NicSlot(0, 0, "interface")]
    with pytest.raises(ValueError, match="at most 32"):
        efa_layout(p5, 33, efa_fabric=True)


def test_no_efa_without_the_fabric_or_for_unknown_types() -> None:
    p5 = catalog().instance_type("p5.48xlarge")
    assert efa_layout(p5, "max", efa_fabric=False) == [NicSlot(0, 0, "interface")]
    assert efa_layout(None, "max", efa_fabric=True) == [NicSlot(0, 0, "interface")]


def test_default_ami_follows_architecture_and_gpus() -> None:
    assert ami_parameter("p5.48xlarge", catalog().instance_type("p5.48xlarge")).startswith(
        "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04")
    assert "/arm64/" in ami_parameter("p6e-gb200.36xlarge", catalog().instance_type("p6e-gb200.36xlarge"))
    assert ami_parameter("m6i.xlarge", None) == (
        "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id")
    assert "/arm64/" in ami_parameter("m7g.xlarge", None)
