"""The resolved cluster: one object per blueprint, its groups' hardware, settings and predicates,
and the IPoIB assignment the renderers write."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from blueprints import check, load_blueprint, parse_blueprint
from blueprints.hardware import group_hardware
from blueprints.resolved import assign_ipoib, resolve, smallest_ipoib_prefix
from blueprints.settings import node_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"
DGX = (EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_group_is_resolved_once_and_matches_its_parts(path: Path) -> None:
    loaded = load_blueprint(path)
    bp = loaded.blueprint
    cluster = loaded.cluster
    assert cluster is resolve(bp) is loaded.cluster  # cached: every consumer gets this object
    assert [r.name for r in cluster.groups] == [g.name for g in bp.node_groups]
    for i, (r, g) in enumerate(zip(cluster.groups, bp.node_groups, strict=True)):
        assert r.index == i and r.group is g and r.path == ("node_groups", i)
        assert r.hardware == group_hardware(bp, g)
        assert r.settings == node_settings(bp, g)
        assert cluster.group(g.name) is r and cluster.group(g) is r and cluster.settings(g.name) is r.settings
        # the predicates, each against its plain definition
        assert r.compute == (g.role == "compute")
        assert r.has_gpus == (r.hardware.gpus > 0)
        assert r.training == (g.role == "compute" and r.hardware.gpus > 0 and not g.sandbox.passthrough)
        assert r.nvidia_gpus == r.settings.gpu_count
        # NodeSettings.training_node is the training predicate on the NVIDIA stack
        assert r.settings.training_node == (r.training and r.nvidia_gpus > 0)
    assert cluster.compute_groups == tuple(r for r in cluster.groups if r.compute)
    assert cluster.training_groups == tuple(r for r in cluster.groups if r.training)
    assert set(cluster.node_settings) == {g.name for g in bp.node_groups}


def test_predicates_on_known_examples() -> None:
    kata = load_blueprint(EXAMPLES / "onprem-sandbox-kata.yaml").cluster
    assert [r.name for r in kata.compute_groups] == ["kata", "vms"]
    assert kata.training_groups == ()  # GPUs passed into sandboxes: no training on the host
    assert [r.name for r in kata.gpu_groups] == ["kata", "vms"]
    eks = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml").cluster
    assert [r.name for r in eks.compute_groups] == ["gpu"] and [r.name for r in eks.efa_groups] == ["gpu"]
    assert eks.primary_group.name == "gpu"
    ws = load_blueprint(EXAMPLES / "local-workstation.yaml").cluster
    assert ws.gpu_groups == () and ws.primary_group.name == "local"


def test_an_amd_group_trains_but_takes_no_nvidia_stack() -> None:
    text = DGX.replace("gpu: h100-sxm:8", "gpu: mi300x:8")
    r = parse_blueprint(text, "amd.yaml").cluster.group("dgx")
    assert r.has_gpus and r.training and r.nvidia_gpus == 0 and not r.settings.training_node


def test_primary_group_prefers_a_compute_group_with_nvidia_gpus() -> None:
    text = DGX.replace("  - name: mgmt\n    role: controller", "  - name: mgmt\n    role: compute")
    c = parse_blueprint(text, "two.yaml").cluster
    assert [r.name for r in c.compute_groups] == ["mgmt", "dgx"]
    assert c.primary_group.name == "dgx"


def test_the_ipoib_assignment_skips_addresses_the_blueprint_uses() -> None:
    c = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").cluster
    a = c.ipoib
    assert a.cidr == "192.168.100.0/24" and a.taken == ("192.168.100.2",)  # the Lustre MGS NID
    assert a.wanted == ("mgmt-01", "dgx-01", "dgx-02", "dgx-03", "dgx-04") and a.unassigned == ()
    assert a.addresses["mgmt-01"] == [{"netdev": "ibp12s0", "address": "192.168.100.1/24"}]
    assert [a.addresses[h][0]["address"] for h in a.wanted[1:]] == [f"192.168.100.{k}/24" for k in (3, 4, 5, 6)]
    assert a.addresses["dgx-01"][0]["netdev"] == "ibp24s0"


@pytest.mark.parametrize("prefix", range(26, 31))
@pytest.mark.parametrize("hosts", [1, 3, 5, 9])
@pytest.mark.parametrize("in_subnet", [0, 2, 4])
def test_ipoib_assignment_and_check_agree(prefix: int, hosts: int, in_subnet: int) -> None:
    """Generated variants: a /prefix IPoIB subnet, ``hosts`` compute hosts of which ``in_subnet``
    have their management address inside it. `check` reports `ipoib-cidr` exactly when the
    assignment leaves a host without an address, and the suggested prefix is enough."""
    lines = [f"      - {{name: n{k:02d}, address: {'10.9.0.' + str(64 + k) if k < in_subnet else '10.0.1.' + str(k + 1)}}}"
             for k in range(hosts)]
    text = f"""\
apiVersion: clusterforge/v1
kind: Blueprint
name: ib
target: {{provider: onprem, ssh: {{user: ubuntu}}}}
node_groups:
  - name: gpu
    role: compute
    hosts:
{chr(10).join(lines)}
    hardware:
      gpu: h100-sxm:8
      nics: [{{device: mlx5_0, netdev: ibp24s0, speed_gbps: 400}}]
network:
  fabric: infiniband
  infiniband:
    subnet_manager: {{kind: switch}}
    ipoib: {{cidr: 10.9.0.64/{prefix}}}
"""
    loaded = parse_blueprint(text, "ib.yaml")
    a = loaded.cluster.ipoib
    subnet = ipaddress.ip_network(f"10.9.0.64/{prefix}")
    usable = subnet.num_addresses - 2
    taken_inside = sum(1 for k in range(min(in_subnet, hosts)) if ipaddress.ip_address(f"10.9.0.{64 + k}") in subnet
                       and 64 + k not in (int(subnet.network_address.packed[3]), int(subnet.broadcast_address.packed[3])))
    assert len(a.wanted) == hosts
    assert len(a.addresses) == min(hosts, usable - taken_inside)
    assigned = [ipaddress.ip_interface(v[0]["address"]).ip for v in a.addresses.values()]
    assert len(set(assigned)) == len(assigned)
    assert not {str(x) for x in assigned} & {h.address for h in loaded.blueprint.node_groups[0].hosts}
    findings = [f for f in check(loaded) if f.rule_id == "ipoib-cidr"]
    assert bool(findings) == bool(a.unassigned)
    if findings:
        (f,) = findings
        line = next(n for n, t in enumerate(text.splitlines(), 1) if "ipoib:" in t)
        assert f.path == ("network", "infiniband", "ipoib", "cidr") and f.line == line
        need = smallest_ipoib_prefix(loaded.blueprint, hosts)
        assert need is not None and f.fix == f"use a larger subnet (at least /{need})"
        wider = parse_blueprint(text.replace(f"10.9.0.64/{prefix}", f"10.9.0.64/{need}"), "ib.yaml")
        assert wider.cluster.ipoib.unassigned == ()
        assert not [f for f in check(wider) if f.rule_id == "ipoib-cidr"]


def test_ipv6_subnets_count_like_the_assignment() -> None:
    """An IPv6 /126 holds three IPoIB addresses (the Subnet-Router anycast address is not a host)."""
    text = DGX.replace("cidr: 192.168.100.0/24", "cidr: 'fd00::/126'").replace("mgs_nids: [192.168.100.2@o2ib]",
                                                                               "mgs_nids: [10.0.0.2@tcp]")
    text = text.replace("      - {name: dgx-04, address: 10.0.0.14}\n", "")
    loaded = parse_blueprint(text, "v6.yaml")
    a = loaded.cluster.ipoib
    assert len(a.wanted) == 4 and a.unassigned == ("dgx-03",)
    (f,) = [f for f in check(loaded) if f.rule_id == "ipoib-cidr"]
    assert "3 free addresses for 4 IPoIB hosts" in f.message and f.fix == "use a larger subnet (at least /125)"


def test_assign_ipoib_never_raises_on_a_bad_cidr() -> None:
    loaded = parse_blueprint(DGX.replace("cidr: 192.168.100.0/24", "cidr: not-a-net"), "bad.yaml")
    assert assign_ipoib(loaded.blueprint, [None, "ib0"]).addresses == {}
    assert loaded.cluster.ipoib.cidr is None
    assert [f.rule_id for f in check(loaded) if f.rule_id == "ipoib-cidr"] == ["ipoib-cidr"]
