"""Rule branches no other rule test reached (issue 35: branch coverage of ``blueprints/rules`` by the rule tests).

Each test reaches one branch the rule tests left unexecuted and asserts what it does (the rule id, the key the
finding points at, and where the user acts on them the message's figures and the fix), next to the neighbouring
blueprint on which the branch must stay silent: the last value that passes and the first that does not, the
boundary taken from the rule's source (the catalog entry or the page in the rule's ``source=``). Each test's opening
comment names the branch (the condition as the rule writes it) and the mutants it kills. The blueprints are the
examples of ``test_rules.BASES`` changed as plain data, like ``test_rules.CASES``; a few branches depend on a
catalog fact the shipped catalog never meets, and those tests run against a catalog variant, saying which.

Branches no valid blueprint reaches have no test (the models refuse the input first, or the code is defensive):

- ``efa-interfaces-max`` ``if it is None: continue``: an EFA group always has a catalogued instance type
  (``aws.efa_group`` requires one);
- ``ami-architecture``: the loop over the groups never ends without its ``return`` (two architectures were found, so
  some group differs from the first);
- ``gpu-operator-kubernetes``, ``_listed_versions`` -> ``none``: only with a catalog in which every GPU Operator
  release is past its end of support;
- ``ssh-ingress-open`` ``except ValueError``: the model refuses a `target.ssh_ingress_cidrs` entry that is no CIDR;
- ``secret-in-blueprint``, ``_strings`` with a non-string mapping key: every mapping of the model has string keys
  (the loader refuses another key as ``schema-wrong-type``);
- ``cuda-driver-minor`` ``return`` and ``driver-branch-gpu`` ``if not branch``: `software.driver_branch` must be a
  three-digit branch and the resolved CUDA is ``major.minor`` (the model's patterns, or the catalog's default);
- ``fsx-storage-capacity-step``, ``_capacity_steps`` ``if not entry``: the catalog has a row for each deployment type
  the model allows;
- ``_step_compute_s`` ``s.shape is None or g.hardware.gpu is None``: its callers return earlier without a shape, and
  a group with GPU memory has a catalogued GPU (every catalogued instance type's accelerator resolves);
- ``_facts.mounts``: every storage entry is Lustre or NFS.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from blueprints.catalog import Catalog, catalog
from blueprints.rules import registry

from .test_rule_edges import _found
from .test_rules import A, D, S

FSX = "storage.0.fsx"


def _insert(index: int, group: dict[str, Any]) -> Any:
    """An op putting node group ``group`` at ``index`` of `node_groups` (before the example's groups)."""

    def op(doc: dict[str, Any]) -> None:
        doc["node_groups"].insert(index, copy.deepcopy(group))

    return op


def _paths(found: list[tuple[str, str, str]]) -> list[str]:
    return [p for p, _, _ in found]


def _use_catalog(monkeypatch: pytest.MonkeyPatch, cat: Catalog) -> None:
    """Run the rules of this test against ``cat`` (as ``test_rules.Case.patch`` does)."""
    monkeypatch.setattr("blueprints.rules.registry.catalog", lambda: cat)


# --- aws.py -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("az, fires", [("us-east-1a", False), ("us-east-2a", True), ("us-west-2a", True)])
def test_fsx_zone_must_be_a_zone_of_the_region(docs, monkeypatch, az, fires):
    # aws-az-in-region, the FSx branch: `not az.startswith(t.region) or len(az) != len(t.region) + 1`. A zone is the
    # region's name and one letter (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-regions-availability-zones.html):
    # us-east-2a has the length of a us-east-1 zone but another region (kills `or` -> `and`)
    found = _found(docs, "aws-az-in-region", "p5", [S(f"{FSX}.availability_zone", az)], monkeypatch)
    if not fires:
        assert found == []
        return
    assert found == [(f"{FSX}.availability_zone",
                      f"`storage.0.fsx.availability_zone` `{az}` is not in `target.region` `us-east-1`",
                      "remove it (the file system goes into the compute zone)")]


def test_efa_capable_not_used_looks_past_a_type_the_catalog_does_not_list(docs, monkeypatch):
    # efa-capable-not-used: `it is not None and it.efa_supported and it.gpu_count` is false for an instance type outside
    # the hardware catalog (m7i.xlarge) and the loop goes on to the next compute group (kills `and` -> `or`, which reads
    # the spec of the unknown type and fails)
    eth = [S("network", {"fabric": "ethernet"}), S("node_groups.0.count", 1),
           S("node_groups.0.instance_type", "m7i.xlarge")]
    p5 = [*eth, A("node_groups", {"name": "gpu2", "role": "compute", "count": 1, "instance_type": "p5.48xlarge"})]
    assert _found(docs, "efa-capable-not-used", "p5", p5, monkeypatch) == [
        ("network.fabric", "`network.fabric` is `ethernet` but `p5.48xlarge` (`node_groups.1`) has 32 EFA interface(s)",
         "set `network.fabric: efa`")]
    # two uncatalogued CPU instances on Ethernet: the loop ends without an EFA-capable GPU type, nothing to say
    cpu = [*eth, A("node_groups", {"name": "cpu2", "role": "compute", "count": 1, "instance_type": "m7i.xlarge"})]
    assert _found(docs, "efa-capable-not-used", "p5", cpu, monkeypatch) == []


def test_public_ip_on_a_type_outside_the_catalog_is_not_judged(docs, monkeypatch):
    # public-ip-multi-card: `if it is None: continue` for the Slurm controller's m7i.xlarge (not in the hardware
    # catalog); the GPU group after it is still judged (kills `continue` -> `break`)
    ctl = [S("node_groups.0.public_ip", True)]
    assert _found(docs, "public-ip-multi-card", "p5s", ctl, monkeypatch) == []
    both = [*ctl, S("node_groups.1.public_ip", True)]
    assert _paths(_found(docs, "public-ip-multi-card", "p5s", both, monkeypatch)) == ["node_groups.1.public_ip"]


@pytest.mark.parametrize("interfaces, fires", [(1, False), (2, True)])
def test_public_ip_counts_the_efa_interfaces_the_blueprint_asks_for(docs, monkeypatch, interfaces, fires):
    # public-ip-multi-card: `efa.efa.interfaces != "max"` -> nics = min(interfaces, cards). EC2 auto-assigns a public
    # IPv4 address only to an instance with one network interface (the rule's source, aws-parallelcluster PR 7457):
    # one EFA interface on a p5 is allowed, two are not (kills `nics > 1` -> `>= 1` and the min/max mutants)
    ops = [S("node_groups.0.public_ip", True), S("network.efa.interfaces", interfaces)]
    found = _found(docs, "public-ip-multi-card", "p5", ops, monkeypatch)
    if not fires:
        assert found == []
        return
    assert [(p, m) for p, m, _ in found] == [
        ("node_groups.0.public_ip", ("`node_groups.0.public_ip` is true but `p5.48xlarge` gets 2 network interfaces "
                                    "(EFA per card)"))]


@pytest.mark.parametrize("n, fires", [(64, False), (65, True)])
def test_capacity_block_holds_at_most_64_instances(docs, monkeypatch, n, fires):
    # capacity-block-size: `n is not None and n > limit`. A Capacity Block holds up to 64 instances (catalog
    # capacity_blocks.max_instances_per_block, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html):
    # 64 is a block, 65 is not (kills `>` -> `>=`)
    ops = [S("target.capacity.instance_count", n), S("node_groups.0.count", n)]
    found = _found(docs, "capacity-block-size", "cb", ops, monkeypatch)
    if not fires:
        assert found == []
        return
    assert [(p, m) for p, m, _ in found] == [
        ("target.capacity.instance_count", ("`target.capacity.instance_count` is 65; a Capacity Block has at most 64 "
                                           "instances"))]


@pytest.mark.parametrize("count, fires", [(64, False), (65, True)])
def test_capacity_block_without_instance_count_points_at_the_first_reserved_group(docs, monkeypatch, count, fires):
    # capacity-block-size: `n is None and nodes > limit` -> the finding names `_reserved(ctx)[0]`'s count. A controller
    # group (on demand, not in the block) comes first, so the compute group is `node_groups.1` (kills `[0]` -> `[1]`,
    # an IndexError, and `nodes > limit` -> `>=`)
    ctl = {"name": "ctl", "role": "controller", "count": 1, "instance_type": "m7i.xlarge"}
    ops = [D("target.capacity.instance_count"), S("node_groups.0.count", count), _insert(0, ctl)]
    found = _found(docs, "capacity-block-size", "cb", ops, monkeypatch)
    if not fires:
        assert found == []
        return
    assert [(p, m) for p, m, _ in found] == [
        ("node_groups.1.count", "the compute `count` total 65 exceeds the 64 instances of one Capacity Block")]


def test_capacity_single_instance_type_compares_the_groups_that_name_a_type(docs, monkeypatch):
    # capacity-single-instance-type: `if not g.instance_type: continue` (aws-node-group-fields reports the missing type);
    # the first group with a type is the one the others are compared with (kills `continue` -> `break`)
    groups = [{"name": "a", "count": 1}, {"name": "b", "count": 1, "instance_type": "p5.48xlarge"},
              {"name": "c", "count": 1, "instance_type": "p5e.48xlarge"}]
    found = _found(docs, "capacity-single-instance-type", "cb", [S("node_groups", groups)], monkeypatch)
    assert [(p, m) for p, m, _ in found] == [
        ("node_groups.2.instance_type", ("`node_groups.2.instance_type` `p5e.48xlarge` differs from `node_groups.1` "
                                        "(`p5.48xlarge`); `cr-0123456789abcdef0` reserves one instance type"))]
    same = [S("node_groups", [*groups[:2], {**groups[2], "instance_type": "p5.48xlarge"}])]
    assert _found(docs, "capacity-single-instance-type", "cb", same, monkeypatch) == []


RESERVATION = {"type": "reservation", "reservation_id": "cr-0abc", "placement_group": "pg-train"}


@pytest.mark.parametrize("placement, path", [
    ("none", "target.capacity.placement_group"),
    ("spread", "network.placement"),
    ("partition", "network.placement"),
    ("cluster", None),
])
def test_reservation_with_its_own_placement_group(docs, monkeypatch, placement, path):
    # reservation-vs-placement-group, the branches with `pg is not None`: the nodes launch into the reservation's
    # cluster placement group (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html), so `none`, `spread` and
    # `partition` are ignored; `cluster` says what happens (kills `placement == "none"` -> `!=` and the tuple mutants)
    ops = [S("target.capacity", RESERVATION), S("network.placement", placement)]
    found = _found(docs, "reservation-vs-placement-group", "p5", ops, monkeypatch)
    if path is None:
        assert found == []
        return
    ((p, msg, fix),) = found
    assert p == path and fix == "set `network.placement: cluster`"
    assert msg == ("`network.placement: none` is ignored: the nodes launch into `pg-train`, the placement group of "
                   "reservation `cr-0abc`" if placement == "none" else
                   f"`network.placement` `{placement}` is ignored: the nodes launch into the reservation's cluster "
                   "placement group `pg-train`")


@pytest.mark.parametrize("cidr, fires", [
    ("10.0.0.0/15", True), ("10.0.0.0/16", False), ("10.0.0.0/28", False), ("10.0.0.0/29", True), ("fd00::/56", True),
])
def test_vpc_cidr_block_is_an_ipv4_16_to_28(docs, monkeypatch, cidr, fires):
    # vpc-cidr-layout: `vpc.version != 4 or vpc.prefixlen < 16 or vpc.prefixlen > 28`. A VPC's IPv4 block is between
    # a /16 and a /28 (https://docs.aws.amazon.com/vpc/latest/userguide/vpc-cidr-blocks.html); an IPv6 block is not a
    # primary CIDR (kills `< 16` -> `<= 16`, `> 28` -> `>= 28`, `!= 4` -> `== 4`, `or` -> `and`)
    subnet = cidr if cidr.endswith(("/28", "/29")) or ":" in cidr else "10.0.0.0/20"
    ops = [S("target.vpc", {"cidr_block": cidr, "subnet_cidr_block": subnet, "nat_gateway": False})]
    found = _found(docs, "vpc-cidr-layout", "p5", ops, monkeypatch)
    assert found == ([("target.vpc.cidr_block", f"`target.vpc.cidr_block` `{cidr}` must be an IPv4 /16 to /28",
                       "use an IPv4 block from /16 to /28, e.g. `10.0.0.0/16`")] if fires else [])


def test_vpc_without_nat_is_fine_when_a_group_has_a_public_ip(docs, monkeypatch):
    # vpc-no-egress: `if not any(g.public_ip ...)` false: the Slurm controller reaches the internet through its own
    # public address, so the warning is about a cluster without any route out
    no_nat = [S("target.vpc", {"nat_gateway": False})]
    assert _paths(_found(docs, "vpc-no-egress", "p5s", no_nat, monkeypatch)) == ["target.vpc.nat_gateway"]
    public = [*no_nat, S("node_groups.0.public_ip", True)]
    assert _found(docs, "vpc-no-egress", "p5s", public, monkeypatch) == []


@pytest.mark.parametrize("n, fires", [(45, False), (46, True)])
def test_aws_tags_at_most_50_with_clusterforges_5(docs, monkeypatch, n, fires):
    # aws-tags: `len(t.tags) + reserved > 50`. AWS allows 50 user tags per resource
    # (https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html) and the stack sets 5 (OWN_TAGS): 45 of the
    # blueprint's own fit, 46 do not (kills `> 50` -> `>= 50` and `+` -> `-`)
    ops = [S("target.tags", {f"team{k}": "ml" for k in range(n)})]
    found = [(p, m) for p, m, _ in _found(docs, "aws-tags", "p5", ops, monkeypatch)]
    assert found == ([("target.tags", ("`target.tags` has 46 tags; with clusterforge's 5 that is more than 50 per "
                                      "resource"))] if fires else [])


def test_aws_tags_that_clusterforge_sets_itself(docs, monkeypatch):
    # aws-tags: `k in OWN_TAGS or k.startswith("clusterforge:")`: the stack's own tags would overwrite these. Tag keys
    # are case-sensitive (same AWS page), so `name` is another key than `Name`
    tags = {"Name": "x", "clusterforge:team": "y", "managed-by": "z", "name": "ok", "team": "ml"}
    found = _found(docs, "aws-tags", "p5", [S("target.tags", tags)], monkeypatch)
    assert found == [(f"target.tags.{k}", (f"tag key `{k}` in `target.tags` is set by clusterforge on every resource "
                                          "and would be overwritten"), "rename the tag")
                     for k in ("Name", "clusterforge:team", "managed-by")]


def test_aws_tag_keys_up_to_128_and_values_up_to_256_characters(docs, monkeypatch):
    # aws-tags: `len(k) > 128 or len(v) > 256` (same AWS page: keys up to 128, values up to 256 characters); the message
    # quotes the key's first 40 characters (kills `> 128` -> `>= 128`, `> 256` -> `>= 256`, `or` -> `and`)
    tags = {"k" * 128: "v" * 256, "a" * 129: "v", "b": "v" * 257}
    found = _found(docs, "aws-tags", "p5", [S("target.tags", tags)], monkeypatch)
    assert [(p, m) for p, m, _ in found] == [
        (f"target.tags.{'a' * 129}", f"tag `{'a' * 40}` is too long (key 129/128, value 1/256 characters)"),
        ("target.tags.b", "tag `b` is too long (key 1/128, value 257/256 characters)")]


def test_instance_type_exists_leaves_an_accelerator_family_to_its_own_rule(docs, monkeypatch):
    # instance-type-exists: `if accelerator_family(t, ...): continue`. `inf3.xlarge` is no EC2 type but names the
    # Inferentia family (catalog non_nvidia_accelerators): instance-type-accelerator-not-nvidia says what it carries and
    # the group gets one finding, not two; a plain unknown name (`m9i.xlarge`) is this rule's
    inf = [S("node_groups.0.instance_type", "inf3.xlarge")]
    assert _found(docs, "instance-type-exists", "p5s", inf, monkeypatch) == []
    ((path, msg, _),) = _found(docs, "instance-type-accelerator-not-nvidia", "p5s", inf, monkeypatch)
    assert (path, msg) == ("node_groups.0.instance_type",
                           "group `controller`: `inf3.xlarge` carries AWS Inferentia (Neuron SDK), not NVIDIA GPUs")
    typo = [S("node_groups.0.instance_type", "m9i.xlarge")]
    assert _paths(_found(docs, "instance-type-exists", "p5s", typo, monkeypatch)) == ["node_groups.0.instance_type"]


@pytest.mark.parametrize("enabled, fires", [(True, True), (False, False)])
def test_gpudirect_rdma_on_plain_ethernet(docs, monkeypatch, enabled, fires):
    # gpudirect-rdma-unavailable: `net.fabric == "ethernet"`: plain Ethernet has no RDMA transport for GPUDirect RDMA
    # (RoCE is `fabric: roce`); switching it off is the fix, and then nothing is said
    ops = [S("network", {"fabric": "ethernet", "gpudirect_rdma": {"enabled": enabled}})]
    found = _found(docs, "gpudirect-rdma-unavailable", "roce", ops, monkeypatch)
    # the fix says what GPUDirect RDMA needs, not the rule's default about an instance type (this is on-prem)
    assert found == ([("network.gpudirect_rdma.enabled", "GPUDirect RDMA is requested on an Ethernet fabric",
                       ("remove `network.gpudirect_rdma.enabled` (or set it to false): GPUDirect RDMA needs an EFA, "
                       "InfiniBand or RoCE `network.fabric`"))] if fires else [])


def test_gpudirect_rdma_judges_every_efa_compute_group(docs, monkeypatch):
    # gpudirect-rdma-unavailable: `it.efa_rdma_read is False` is false for the p5 (RDMA read) and the loop goes on to the
    # g5 group after it, whose EFA has no RDMA read (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html)
    ops = [S("node_groups.0.count", 1), S("network.gpudirect_rdma", {"enabled": True}),
           A("node_groups", {"name": "g5", "role": "compute", "count": 1, "instance_type": "g5.48xlarge"})]
    found = _found(docs, "gpudirect-rdma-unavailable", "p5", ops, monkeypatch)
    msg = "GPUDirect RDMA is requested but the EFA of `g5.48xlarge` (`node_groups.1`) has no RDMA read"
    assert [(p, m) for p, m, _ in found] == [("network.gpudirect_rdma.enabled", msg)]


def _catalog_backups_with_s3(value: bool) -> Catalog:
    c = catalog()
    aws = copy.deepcopy(c.aws)
    aws["fsx"]["backups_with_s3_repository"] = value
    return Catalog(c.data, c.extras, aws, c.software)


def test_fsx_backup_s3_follows_the_catalog_fact(docs, monkeypatch):
    # fsx-backup-s3: `if ctx.catalog.aws["fsx"]["backups_with_s3_repository"]: return`. The shipped catalog says FSx
    # takes no backups of a file system linked to S3 (API_CreateBackup); a catalog where AWS allowed it silences the rule
    ops = [S(f"{FSX}.s3", {"data_repository_path": "s3://bucket/data"}), S(f"{FSX}.automatic_backup_retention_days", 7)]
    assert _paths(_found(docs, "fsx-backup-s3", "p5", ops, monkeypatch)) == [f"{FSX}.automatic_backup_retention_days"]
    _use_catalog(monkeypatch, _catalog_backups_with_s3(True))
    assert _found(docs, "fsx-backup-s3", "p5", ops, monkeypatch) == []


def test_eks_version_older_than_every_catalogued_one(docs, monkeypatch):
    # A version the catalog has no dates for is judged by its place. EKS versions end in release order (14 months of
    # standard and 12 of extended support: https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html);
    # 1.28 is the oldest in eks_versions and its extended support ended on 2025-11-26, so 1.27 has ended too: an error
    # (eks-version-ended: EKS creates no cluster on it), not a warning (kills `<` -> `>` in _older_than_catalog)
    newest = max(catalog().aws["eks_versions"]["end_of_standard_support"], key=lambda v: tuple(map(int, v.split("."))))
    fix = f'set `orchestrator.version: "{newest}"`'
    ended = _found(docs, "eks-version-ended", "eks", [S("orchestrator.version", "1.27")], monkeypatch)
    assert ended == [("orchestrator.version", ("`orchestrator.version` 1.27 is older than 1.28, whose EKS extended "
                      "support ended on 2025-11-26; EKS no longer creates clusters on it"), fix)]
    assert _found(docs, "eks-version-support", "eks", [S("orchestrator.version", "1.27")], monkeypatch) == []
    for newer in ("1.36", "1.28"):  # 1.28 is catalogued: its own dates judge it (the existing cases)
        assert [p for p, m, _ in _found(docs, "eks-version-ended", "eks", [S("orchestrator.version", newer)], monkeypatch)
                if "older than" in m] == []
    assert _found(docs, "eks-version-support", "eks", [S("orchestrator.version", "1.36")], monkeypatch) == []
    # a catalog whose oldest version is still in extended support: an older version may be too; only a warning
    c = catalog()
    aws = copy.deepcopy(c.aws)
    aws["eks_versions"]["end_of_extended_support"]["1.28"] = datetime.date(2099, 1, 1)
    _use_catalog(monkeypatch, Catalog(c.data, c.extras, aws, c.software))
    assert _found(docs, "eks-version-ended", "eks", [S("orchestrator.version", "1.27")], monkeypatch) == []
    msg = "`orchestrator.version` 1.27 is older than every EKS version in the catalog"
    assert _found(docs, "eks-version-support", "eks", [S("orchestrator.version", "1.27")], monkeypatch) == [
        ("orchestrator.version", msg, fix)]


def test_gpu_operator_release_the_catalog_has_no_row_for(docs, monkeypatch):
    # gpu-operator-kubernetes, `release is None`: GPU Operator 23.9 is older than every row of NVIDIA's platform-support
    # table in the catalog; the message lists the rows in version order (25.3 before 25.10) and the fix is the release
    # chosen for the cluster's Kubernetes 1.35 (26.7, newest patch v26.7.0)
    ops = [S("orchestrator.gpu_operator_version", "v23.9.0")]
    found = _found(docs, "gpu-operator-kubernetes", "eks", ops, monkeypatch)
    assert found == [("orchestrator.gpu_operator_version",
                      ("`orchestrator.gpu_operator_version` v23.9.0: the catalog has no platform-support row for its "
                      "release (listed: 24.9, 25.3, 25.10, 26.3, 26.7)"),
                      "set `orchestrator.gpu_operator_version: v26.7.0` or unset it")]


# --- fabric.py --------------------------------------------------------------------------------------------------------

SM = "network.infiniband.subnet_manager"


@pytest.mark.parametrize("sm, where", [
    ({"kind": "opensm"}, "kind"), ({"kind": "ufm", "host": "mgmt-01"}, "host"),
    ({"kind": "switch", "host": "mgmt-01"}, "host"), ({"kind": "ufm"}, None), ({"kind": "switch"}, None),
])
def test_subnet_manager_host_only_for_opensm(docs, monkeypatch, sm, where):
    # ib-opensm-host: OpenSM runs on a host of the blueprint and needs one; UFM and a managed switch run their own
    # subnet manager, where a `host` would be ignored (kills `and not sm.host` -> `and sm.host`, the tuple mutants)
    found = _found(docs, "ib-opensm-host", "dgx", [S(SM, sm)], monkeypatch)
    if where is None:
        assert found == []
    elif where == "kind":
        assert found == [(f"{SM}.kind", f"`{SM}.kind` is `opensm` but no `host` runs it",
                          "set `subnet_manager.host` to one of the blueprint's hosts (a management or compute node)")]
    else:
        assert found == [(f"{SM}.host", f"`{SM}.host` is set but the subnet manager runs on the {sm['kind']}",
                          "remove `host` (only `kind: opensm` runs on a host)")]


@pytest.mark.parametrize("cidr, fires", [("192.168.300.0/24", True), ("192.168.100.1/24", False)])
def test_ipoib_cidr_that_is_no_network(docs, monkeypatch, cidr, fires):
    # ipoib-cidr: `except ValueError` of ip_network(cidr, strict=False): 300 is no IPv4 octet; host bits are fine (the
    # renderers take the network of the address, like `ip addr add 192.168.100.1/24`)
    found = _found(docs, "ipoib-cidr", "dgx", [S("network.infiniband.ipoib.cidr", cidr)], monkeypatch)
    assert [(p, m) for p, m, _ in found] == ([("network.infiniband.ipoib.cidr", (f"`network.infiniband.ipoib.cidr` "
                                               f"`{cidr}` is not a network"))] if fires else [])


DGX_B = {"name": "dgx-b", "role": "compute", "hosts": [{"name": "dgx-11", "address": "10.0.0.21"}],
         "hardware": {"gpu": "h100-sxm:8", "cpu_vendor": "intel"}}


def test_nccl_ib_hca_looks_past_a_group_without_declared_nics(docs, monkeypatch):
    # nccl-env-disables-fabric: `if not d.nics: continue` for a GPU group that declares no NICs (rdma-nics-declared
    # reports it); the DGX group after it still has 6 of its 8 NICs left out (kills `continue` -> `break`)
    ops = [_insert(1, DGX_B), S("network.nccl", {"env": {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}})]
    ((path, msg, _),) = _found(docs, "nccl-env-disables-fabric", "dgx", ops, monkeypatch)
    assert path == "network.nccl.env.NCCL_IB_HCA"
    assert "leaves out 6 of the 8 NICs that node group `dgx` (8 x h100-sxm on NVSwitch) declares" in msg, msg


L40S_B = {"name": "l40s-b", "role": "compute", "hosts": [{"name": "l40s-11", "address": "10.1.0.31"}],
          "hardware": {"gpu": "l40s:4", "cpu_vendor": "amd", "memory_gib": 768,
                       "cpu": {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2}}}


def test_socket_ifname_on_ethernet_looks_past_a_group_without_data_nics(docs, monkeypatch):
    # nccl-env-disables-fabric / -narrows-fabric on `fabric: ethernet`: `if not data: continue` for a group that declares
    # no Ethernet NIC; the next group's NICs are judged (kills `continue` -> `break` in _socket_hits)
    eth = [S("network", {"fabric": "ethernet"}), _insert(0, L40S_B)]
    ((_, msg, fix),) = _found(docs, "nccl-env-disables-fabric", "roce",
                              [*eth, S("network.nccl", {"env": {"NCCL_SOCKET_IFNAME": "=eth9"}})], monkeypatch)
    assert "selects none of the Ethernet NICs node group `l40s` (4 x l40s) declares (ens1f0np0, ens2f0np0)" in msg, msg
    assert fix == "name the declared data NICs (e.g. `=ens1f0np0,ens2f0np0`) or remove it"
    ((_, msg, _),) = _found(docs, "nccl-env-narrows-fabric", "roce",
                            [*eth, S("network.nccl", {"env": {"NCCL_SOCKET_IFNAME": "=ens1f0np0"}})], monkeypatch)
    assert "leaves out 1 of the 2 Ethernet NICs node group `l40s` (4 x l40s) declares (ens2f0np0)" in msg, msg


# --- general.py -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mount, fires", [("/usr/local/data", True), ("/etc/cluster", True), ("/usrdata", False),
                                          ("/srv/data", False)])
def test_mount_inside_an_os_managed_directory(docs, monkeypatch, mount, fires):
    # mount-dir-reserved: `any(m.mount.startswith(d + "/") for d in owned)`: below /usr or /etc the package manager owns
    # the files (FHS 3.0, the rule's source); `/usrdata` only shares the prefix (kills `d + "/"` -> `d`), `/srv` is for
    # site data
    found = _found(docs, "mount-dir-reserved", "p5", [S("storage.0.mount", mount)], monkeypatch)
    top = "/" + mount.split("/")[1]
    assert [(p, m) for p, m, _ in found] == ([("storage.0.mount", (f"`storage.0.mount` `{mount}` is inside the "
                                               f"OS-managed directory `{top}`"))] if fires else [])


# --- hardware.py ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model, fires", [("h100-sxm", False), ("h100-pcie", True)])
def test_nvswitch_true_on_an_sxm_part_is_right(docs, monkeypatch, model, fires):
    # nvswitch-needs-sxm: `key and not ctx.catalog.gpu(key).has_nvlink` is false for the H100 SXM of a DGX (NVLink 4 to
    # the NVSwitches): `nvswitch: true` written out is what the example implies; on the PCIe part it is refused
    ops = [S("node_groups.1.hardware.gpu", {"model": model, "count": 8, "nvswitch": True})]
    found = _paths(_found(docs, "nvswitch-needs-sxm", "dgx", ops, monkeypatch))
    assert found == (["node_groups.1.hardware.gpu"] if fires else [])


def test_hardware_system_not_in_the_catalog(docs, monkeypatch):
    # hardware-system-mismatch: `if sysdef is None` -> the unknown name is reported with the catalog's systems and the
    # loop goes on: the DGX group after it still gets its mismatch (kills `continue` -> `break`)
    systems = ", ".join(catalog().systems)
    ops = [S("node_groups.0.hardware.system", "dgx-h900"), S("node_groups.1.hardware.gpu", "h100-sxm:4")]
    found = _found(docs, "hardware-system-mismatch", "dgx", ops, monkeypatch)
    msg = f"`node_groups.0.hardware.system` `dgx-h900` is not a catalog system ({systems})"
    assert found[0] == ("node_groups.0.hardware.system", msg, "use a catalog system name or drop `system`")
    assert _paths(found) == ["node_groups.0.hardware.system", "node_groups.1.hardware.system"]
    assert "dgx-h100" in systems


@pytest.mark.parametrize("drives, fires", [(1, False), (2, True)])
def test_raid_none_is_only_a_waste_with_a_second_drive(docs, monkeypatch, drives, fires):
    # local-nvme-raid-single: `drives > 1`: one drive is all the node has (kills `> 1` -> `>= 1`)
    ops = [S("node_groups.0.local_nvme.raid", "none"), S("node_groups.0.hardware.nvme.count", drives)]
    found = [(p, m) for p, m, _ in _found(docs, "local-nvme-raid-single", "roce", ops, monkeypatch)]
    msg = "`node_groups.0.local_nvme.raid` is `none` but each node has 2 NVMe drives"
    assert found == ([("node_groups.0.local_nvme.raid", msg)] if fires else [])


@pytest.mark.parametrize("links, fires", [(1, True), (2, False), (3, True)])
def test_nvme_by_id_lists_one_link_per_drive(docs, monkeypatch, links, fires):
    # nvme-by-id-paths: `len(nvme.by_id) != nvme.count`: the roce example declares 2 drives (kills `!=` -> `<` / `>`)
    by_id = [f"/dev/disk/by-id/nvme-MTFDKCC3T8TFS_{k + 1}" for k in range(links)]
    found = _found(docs, "nvme-by-id-paths", "roce", [S("node_groups.0.hardware.nvme.by_id", by_id)], monkeypatch)
    msg = f"`node_groups.0.hardware.nvme.by_id` lists {links} drive(s) but `count` is 2"
    fix = "list one by-id link per drive, or correct `count`"
    assert found == ([("node_groups.0.hardware.nvme.by_id", msg, fix)] if fires else [])


# --- registry.py ------------------------------------------------------------------------------------------------------

def test_a_rule_needs_a_new_id_and_a_source_url():
    # the registry refuses a second rule with a taken id and a rule without a source URL (the rule author's side: every
    # finding carries its source); neither is registered
    before = dict(registry._RULES)
    with pytest.raises(ValueError, match="duplicate rule id aws-tags"):
        registry.rule("aws-tags", "error", "s", "f", "https://example.com")(lambda ctx: iter(()))
    with pytest.raises(ValueError, match="rule zz-no-source needs a source URL"):
        registry.rule("zz-no-source", "error", "s", "f", "docs/somewhere.md")(lambda ctx: iter(()))
    assert registry._RULES == before


# --- sandbox.py -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("per_guest, fires", [(4, True), (8, False)])
def test_full_passthrough_gives_the_guest_every_gpu(docs, monkeypatch, per_guest, fires):
    # nvswitch-passthrough-plan: `plan.gpus_per_guest not in (None, hw.gpus)`: full passthrough hands the guest all 8
    # GPUs and the NVSwitches, so a partition size other than 8 contradicts it
    ops = [S("node_groups.0.sandbox.nvswitch", {"mode": "full-passthrough", "gpus_per_guest": per_guest})]
    found = _found(docs, "nvswitch-passthrough-plan", "kata", ops, monkeypatch)
    path = "node_groups.0.sandbox.nvswitch.gpus_per_guest"
    msg = f"`full-passthrough` passes all 8 GPUs; `{path}` 4 contradicts it"
    fix = "remove `gpus_per_guest` (it applies to `shared-nvswitch`)"
    assert found == ([(path, msg, fix)] if fires else [])


# --- slurm.py ---------------------------------------------------------------------------------------------------------

def test_slurm_cluster_without_a_compute_group(docs, monkeypatch):
    # slurm-controller: `if not s.nodes`: the DGX servers as login nodes leave Slurm nothing to run jobs on
    found = _found(docs, "slurm-controller", "dgx", [S("node_groups.1.role", "login")], monkeypatch)
    assert found == [("orchestrator.kind", ("`orchestrator.kind: slurm` but no node group has `role: compute`: the "
                      "cluster has no node to run jobs"), "add a node group with `role: compute`")]
    assert _found(docs, "slurm-controller", "dgx", [], monkeypatch) == []


def test_slurm_host_names_only_of_slurm_nodes(docs, monkeypatch):
    # slurm-host-name: `g.role not in ("compute", "controller", "login")` -> a storage server is no Slurm node and may
    # have a dotted name; the compute group after it is still judged (kills `continue` -> `break`, `not in` -> `in`)
    nfs = {"name": "nfs", "role": "storage", "hosts": [{"name": "nfs-01.example.com", "address": "10.1.0.5"}]}
    assert _found(docs, "slurm-host-name", "roce", [_insert(0, nfs)], monkeypatch) == []
    dotted = [_insert(0, nfs), S("node_groups.1.hosts.0.name", "l40s-01.example.com")]
    assert _paths(_found(docs, "slurm-host-name", "roce", dotted, monkeypatch)) == ["node_groups.1.hosts.0.name"]


@pytest.mark.parametrize("os_gib, spec, fires", [(19, 19456, True), (19455 / 1024, 19455, False)])
def test_mem_spec_limit_must_leave_memory_for_jobs(docs, monkeypatch, os_gib, spec, fires):
    # slurm-real-memory: `spec >= nodes[0].real_memory_mib`. RealMemory is 95 % of `memory_gib` (catalog
    # slurm.real_memory_fraction, ParallelCluster's rule): 20 GiB -> 19456 MiB. MemSpecLimit is the memory kept from jobs
    # (https://slurm.schedmd.com/slurm.conf.html#OPT_MemSpecLimit): all 19456 MiB leave none, 19455 leave 1 MiB (kills
    # `>=` -> `>`)
    ops = [S("node_groups.0.hardware.memory_gib", 20), S("orchestrator.os_memory_gib", os_gib)]
    found = _found(docs, "slurm-real-memory", "roce", ops, monkeypatch)
    msg = (f"`orchestrator.os_memory_gib` keeps {spec} MiB for the OS, all of the 19456 MiB RealMemory of node group "
           "`l40s`: no job could get memory")
    assert found == ([("orchestrator.os_memory_gib", msg, "lower `orchestrator.os_memory_gib`")] if fires else [])


@pytest.mark.parametrize("value, fires", [("STACK", True), ("memlock,STACK", False), ("MEMLOCK", False)])
def test_propagate_resource_limits_except_must_keep_memlock(docs, monkeypatch, value, fires):
    # slurm-memlock-rdma: `key.lower() == "propagateresourcelimitsexcept" and "MEMLOCK" not in items`: an exception list
    # without MEMLOCK hands the submitting shell's memlock limit to RDMA jobs; Slurm reads the names case-insensitively
    ops = [S("orchestrator.extra", {"PropagateResourceLimitsExcept": value})]
    found = [(p, m) for p, m, _ in _found(docs, "slurm-memlock-rdma", "dgx", ops, monkeypatch)]
    assert found == ([("orchestrator.extra.PropagateResourceLimitsExcept",
                       ("`PropagateResourceLimitsExcept=STACK` drops MEMLOCK: jobs on this RDMA fabric get the "
                       "submitting shell's memlock limit"))] if fires else [])


@pytest.mark.parametrize("defaults, fires", [(1, False), (2, True)])
def test_one_default_partition(docs, monkeypatch, defaults, fires):
    # slurm-partition-groups: `sum(1 for p in parts if p.default) > 1` (kills `> 1` -> `>= 1`)
    parts = [{"name": n, "groups": ["dgx"], **({"default": True} if k < defaults else {})} for k, n in enumerate("ab")]
    found = _found(docs, "slurm-partition-groups", "dgx", [S("orchestrator.partitions", parts)], monkeypatch)
    assert found == ([("orchestrator.partitions", "more than one partition has `default: true`",
                       "mark one partition as the default")] if fires else [])


# --- software.py ------------------------------------------------------------------------------------------------------

def test_old_kata_is_judged_on_the_passthrough_group_wherever_it_is(docs, monkeypatch):
    # kata-version-gpu-passthrough: GPU passthrough into Kata needs 3.23.0 (catalog kata_gpu_passthrough, from NVIDIA's
    # sandbox device plugin). The VM group first: `g.sandbox.runtime == "kata" and ...` is false for it and the loop
    # goes on to the Kata group (kills `and` -> `or` and a `return` after the first group)
    vms_first = [S("software.kata", "3.22.9"), lambda d: d["node_groups"].reverse()]
    msg = "`software.kata` 3.22.9 is older than 3.23.0, needed to pass GPUs into Kata (node group `kata`)"
    assert _found(docs, "kata-version-gpu-passthrough", "kata", vms_first, monkeypatch) == [
        ("software.kata", msg, "set `software.kata` to 3.23.0 or newer")]
    assert _found(docs, "kata-version-gpu-passthrough", "kata", [S("software.kata", "3.23.0")], monkeypatch) == []
    # no group passes GPUs into Kata: the version does not matter (the loop ends without a finding)
    assert _found(docs, "kata-version-gpu-passthrough", "dgx", [S("software.kata", "3.10.0")], monkeypatch) == []
    no_gpu = [S("software.kata", "3.10.0"), S("node_groups.0.sandbox", {"runtime": "kata", "gpu_passthrough": False})]
    assert _found(docs, "kata-version-gpu-passthrough", "kata", no_gpu, monkeypatch) == []


KATA_B = {"name": "kata-b", "role": "compute", "hosts": [{"name": "katab-01", "address": "10.2.0.61"}],
          "hardware": {"gpu": "h100-sxm:8", "cpu_vendor": "amd"},
          "sandbox": {"runtime": "kata", "gpu_passthrough": True, "nvswitch": "full-passthrough"}}
GVISOR = {"name": "gv", "role": "compute", "hosts": [{"name": "gv-01", "address": "10.2.0.51"}],
          "hardware": {"gpu": "l40s:4", "cpu_vendor": "intel"}, "sandbox": "gvisor"}


def test_sandbox_allow_list_reports_each_runtime_once(docs, monkeypatch):
    # sandbox-driver-allow-list: `if runtime in done: continue`: the second Kata group shares the first one's guest
    # image, so its finding would say the same again; the gVisor group after it is still judged (kills `continue` ->
    # `break`)
    ops = [S("software.driver_version", "595.44.02"), A("node_groups", KATA_B), A("node_groups", GVISOR)]
    found = _found(docs, "sandbox-driver-allow-list", "kata", ops, monkeypatch)
    assert [p for p, _, _ in found] == ["software.driver_version"] * 2
    assert "not supported by `kata` 3.32.0 of node group `kata` (in the guest image: " in found[0][1], found[0][1]
    assert "of node group `gv` (on the host: " in found[1][1], found[1][1]


def test_floating_gvisor_only_matters_to_a_gvisor_gpu_group(docs, monkeypatch):
    # sandbox-runtime-floating: `if runtime == "gvisor"` is false for the Kata group (its allow-list is Kata's): the
    # loop ends without a finding; a gVisor GPU group after it is named (kills `==` -> `!=` and a `break`)
    latest = [S("software.gvisor", "latest")]
    assert _found(docs, "sandbox-runtime-floating", "kata", latest, monkeypatch) == []
    newest = catalog().runtime_release("gvisor", "latest").release
    found = _found(docs, "sandbox-runtime-floating", "kata", [*latest, A("node_groups", GVISOR)], monkeypatch)
    assert found == [("software.gvisor", (f"node group `gv` runs gVisor on GPUs with `software.gvisor: latest`; the "
                      f"driver list is checked against {newest}"), f'set `software.gvisor: "{newest}"`')]


# --- stack.py ---------------------------------------------------------------------------------------------------------

def _catalog_without_datacenter_gpu(key: str) -> Catalog:
    c = catalog()
    sw = copy.deepcopy(c.software)
    sw["cuda_compat"]["datacenter_gpus"].remove(key)
    return Catalog(c.data, c.extras, c.aws, sw)


def test_cuda_compat_only_on_a_datacenter_gpu(docs, monkeypatch):
    # cuda-forward-compat: `key not in datacenter`: NVIDIA's forward-compatibility package runs on data-centre GPUs only
    # (catalog cuda_compat.datacenter_gpus, from NVIDIA's CUDA forward-compatibility page). Every NVIDIA GPU of the
    # shipped catalog is one, so a catalog without the L40S stands for a workstation part; R535 is a listed base branch
    # of CUDA 12, so the shipped catalog has nothing to say about the same blueprint
    ops = [S("software.driver_branch", "535"), S("software.cuda", "12.8"), S("software.cuda_compat", True)]
    assert _found(docs, "cuda-forward-compat", "roce", ops, monkeypatch) == []
    _use_catalog(monkeypatch, _catalog_without_datacenter_gpu("l40s"))
    found = _found(docs, "cuda-forward-compat", "roce", ops, monkeypatch)
    assert [(p, m) for p, m, _ in found] == [
        ("software.cuda_compat", ("`software.cuda_compat` is set but `l40s` of node group `l40s` is not an NVIDIA "
                                 "data-centre GPU"))]


# --- storage.py -------------------------------------------------------------------------------------------------------

def test_fsx_automatic_metadata_takes_no_iops(docs, monkeypatch):
    # fsx-metadata-iops: `md.mode == "AUTOMATIC" and md.iops is not None`: FSx sizes the IOPS itself in AUTOMATIC mode
    # (AWS API FileSystemLustreMetadataConfiguration, the rule's botocore model)
    ops = [S(f"{FSX}.metadata", {"mode": "AUTOMATIC", "iops": 3000})]
    assert _found(docs, "fsx-metadata-iops", "p5", ops, monkeypatch) == [
        (f"{FSX}.metadata.iops", "`storage.0.fsx.metadata.iops` is set in AUTOMATIC mode",
         "remove `iops` or set `mode: USER_PROVISIONED`")]


@pytest.mark.parametrize("lustre, fires", [("2.10", True), ("2.12", False)])
def test_fsx_data_repository_association_needs_lustre_2_12(docs, monkeypatch, lustre, fires):
    # fsx-deployment-feature: `version < oldest`: a data repository association needs Lustre 2.12 or newer (catalog
    # fsx.features_min_lustre_for_data_repository_association, API_CreateDataRepositoryAssociation); PERSISTENT_1 offers
    # 2.10 and 2.12 (kills `<` -> `<=`)
    fsx = {"deployment_type": "PERSISTENT_1", "storage_capacity_gib": 1200, "throughput_per_tib_mbps": 200,
           "file_system_type_version": lustre, "s3": {"data_repository_path": "s3://bucket/train"}}
    found = _found(docs, "fsx-deployment-feature", "p5", [S(FSX, fsx)], monkeypatch)
    msg = ("`storage.0.fsx.s3` needs Lustre 2.12 or newer for a data repository association; "
           "`file_system_type_version` is 2.10")
    assert found == ([(f"{FSX}.s3", msg, 'set `file_system_type_version: "2.15"`')] if fires else [])


def test_fsx_efa_needs_persistent_2(docs, monkeypatch):
    # fsx-efa-requirements: `fsx.deployment_type != "PERSISTENT_2"`: EFA-enabled file systems are PERSISTENT_2 only
    # (catalog fsx.features: efa)
    fsx = {"deployment_type": "PERSISTENT_1", "storage_capacity_gib": 1200, "throughput_per_tib_mbps": 200,
           "efa_enabled": True}
    found = _found(docs, "fsx-efa-requirements", "p5", [S(FSX, fsx)], monkeypatch)
    assert [(p, m) for p, m, _ in found] == [
        (f"{FSX}.efa_enabled", "`storage.0.fsx.efa_enabled` needs PERSISTENT_2, not PERSISTENT_1")]
    assert _found(docs, "fsx-efa-requirements", "p5", [S(f"{FSX}.efa_enabled", True)], monkeypatch) == []


@pytest.mark.parametrize("lustre, fires", [("2.10", True), ("2.12", False)])
def test_fsx_persistent_2_has_no_lustre_2_10(docs, monkeypatch, lustre, fires):
    # fsx-lustre-version: `deployment_type == "PERSISTENT_2" and v == "2.10"`: Lustre 2.10 is offered for SCRATCH and
    # PERSISTENT_1 only (botocore FSx model, FileSystemTypeVersion); 2.12 without a metadata configuration is offered
    ops = [D(f"{FSX}.metadata"), S(f"{FSX}.file_system_type_version", lustre)]
    found = [(p, m) for p, m, _ in _found(docs, "fsx-lustre-version", "p5", ops, monkeypatch)]
    assert found == ([(f"{FSX}.file_system_type_version", ("`storage.0.fsx.file_system_type_version` 2.10 is not "
                                                           "offered for PERSISTENT_2"))] if fires else [])


def test_lustre_nids_are_not_checked_against_an_ipoib_cidr_that_is_no_network(docs, monkeypatch):
    # lustre-o2ib-ipoib: `except ValueError: cidr = None` and then `if cidr is None: continue`: with an IPoIB `cidr` that
    # is no network (ipoib-cidr reports it) no NID is said to be outside it
    ops = [S("network.infiniband.ipoib.cidr", "192.168.300.0/24"), S("storage.0.server.mgs_nids", ["10.9.9.9@o2ib"])]
    assert _found(docs, "lustre-o2ib-ipoib", "dgx", ops, monkeypatch) == []
    assert _paths(_found(docs, "ipoib-cidr", "dgx", ops, monkeypatch)) == ["network.infiniband.ipoib.cidr"]


def test_lustre_nid_outside_the_ipoib_subnet(docs, monkeypatch):
    # lustre-o2ib-ipoib: `lnet.startswith("o2ib") and ip not in cidr` for each MGS NID of an o2ib file system; a NID
    # named by host name is skipped (`except ValueError: continue`: mount.lustre resolves it) and the NIDs after it are
    # still checked (kills `continue` -> `break`). 192.168.100.3@o2ib1 is inside 192.168.100.0/24, @tcp is not o2ib
    nids = ["mgs.example.com@o2ib", "192.168.101.2@o2ib", "192.168.100.3@o2ib1", "10.0.0.9@tcp"]
    found = _found(docs, "lustre-o2ib-ipoib", "dgx", [S("storage.0.server.mgs_nids", nids)], monkeypatch)
    # IPoIB is on here: the fix is the subnet, not the rule's default of switching IPoIB on
    assert found == [
        ("storage.0.server.mgs_nids.1", ("MGS NID `192.168.101.2@o2ib` is outside the IPoIB subnet `192.168.100.0/24` "
                                        "(`network.infiniband.ipoib.cidr`); LNet would need a router"),
         "set `network.infiniband.ipoib.cidr` to the IPoIB subnet the MGS NIDs are in")]


# --- workload.py ------------------------------------------------------------------------------------------------------

MIXTRAL = {"model": "mixtral-8x7b", "architecture": "moe"}


def test_a_catalogued_moe_model_declared_dense(docs, monkeypatch):
    # workload-moe-fields: `w.architecture != "moe" and entry.get("experts")`: Mixtral 8x7B has 8 experts (model-shapes,
    # the Mixtral paper); left at the default `dense` it is refused, with `architecture: moe` it is fine
    found = _found(docs, "workload-moe-fields", "p5", [S("workload", {"model": "mixtral-8x7b"})], monkeypatch)
    assert found == [("workload.model", ("`workload.model` `mixtral-8x7b` is a mixture-of-experts model but "
                      "`workload.architecture` is `dense`"), "add `architecture: moe`")]
    assert _found(docs, "workload-moe-fields", "p5", [S("workload", MIXTRAL)], monkeypatch) == []


def test_an_moe_workload_without_experts(docs, monkeypatch):
    # workload-moe-fields: `experts is None` for a model outside the catalog (the case covers a missing
    # active_parameters_b)
    ops = [S("workload", {"parameters_b": 47, "architecture": "moe", "active_parameters_b": 13})]
    assert _found(docs, "workload-moe-fields", "p5", ops, monkeypatch) == [
        ("workload.architecture", "`workload.architecture` is `moe` without `workload.experts`",
         "add `experts:` (number of experts per MoE layer)")]


@pytest.mark.parametrize("active, fires", [(47, False), (47.5, True)])
def test_active_parameters_are_at_most_all_parameters(docs, monkeypatch, active, fires):
    # workload-moe-fields: `active > total` (kills `>` -> `>=`: every parameter active is a degenerate but valid MoE)
    ops = [S("workload", {"parameters_b": 47, "architecture": "moe", "experts": 8, "active_parameters_b": active})]
    found = _found(docs, "workload-moe-fields", "p5", ops, monkeypatch)
    msg = "`workload.active_parameters_b` 47.5 is more than `workload.parameters_b` 47"
    fix = "active parameters are a subset of all parameters"
    assert found == ([("workload.active_parameters_b", msg, fix)] if fires else [])


def test_moe_fields_on_a_dense_workload(docs, monkeypatch):
    # workload-moe-fields, the dense branch: each MoE-only field is named (kills `is not None` -> `is None`)
    ops = [S("workload", {"parameters_b": 47, "experts": 8, "active_parameters_b": 13})]
    assert _found(docs, "workload-moe-fields", "p5", ops, monkeypatch) == [
        (f"workload.{k}", f"`workload.{k}` is set on a dense workload", f"remove `{k}` or set `architecture: moe`")
        for k in ("experts", "active_parameters_b")]


@pytest.mark.parametrize("tp, fires", [(3, True), (8, False), (16, False)])
def test_tensor_parallelism_divides_the_attention_heads(docs, monkeypatch, tp, fires):
    # workload-parallel-layout: `s.shape.heads % w.tensor_parallel`: Llama 3.1 70B has 64 attention heads (model-shapes,
    # the Hugging Face config.json); 8 and 16 divide them, 3 does not (kills `%` -> other operators)
    ops = [S("workload", {"model": "llama-3.1-70b", "tensor_parallel": tp})]
    found = _found(docs, "workload-parallel-layout", "p5", ops, monkeypatch)
    msg = "`workload.tensor_parallel` 3 does not divide the model's 64 attention heads"
    assert found == ([("workload.tensor_parallel", msg, "use a divisor of 64")] if fires else [])


@pytest.mark.parametrize("zero, says", [(3, ""), (1, " with ZeRO-3 sharding")])
def test_training_memory_fit_names_a_layout_that_fits(docs, monkeypatch, zero, says):
    # training-memory-fit's fix when another layout fits (_suggest: `p != par and ... <= usable`): Llama 3.1 70B at
    # 32768 tokens without recompute needs 28 TB of activations per GPU on two p5; context parallelism 16 with full
    # recompute fits an H100 (80 GiB = 86 GB; 77 GB after the 10 % reserve) and ZeRO-3 is named when the blueprint's
    # stage is lower (kills `par.zero != 3` -> `==` and `<= usable` -> `> usable`)
    ops = [S("workload", {"model": "llama-3.1-70b", "sequence_length": 32768, "recompute": "none", "zero_stage": zero})]
    ((path, msg, fix),) = _found(docs, "training-memory-fit", "p5", ops, monkeypatch)
    assert path == "workload.model" and msg.endswith("but a GPU has 86 GB"), msg
    assert fix == f"use context parallelism 16, full recompute{says} (75 GB per GPU)"


@pytest.mark.parametrize("tp, fires", [(1, False), (2, True)])
def test_declared_tensor_parallelism_is_the_serving_replica(docs, monkeypatch, tp, fires):
    # _serving: `declared > 1` -> a replica is the declared tensor x pipeline parallel GPUs. Llama 3.1 70B in bf16 is
    # 141 GB of weights (70.6e9 x 2 bytes); an L40S has 48 GB (catalog), 43.2 GB after the 10 % reserve: two GPUs hold
    # 86 GB, a node's four 173 GB. Undeclared (1), a replica is the node and the weights fit (kills `> 1` -> `>= 1`)
    ops = [S("workload", {"purpose": "inference", "model": "llama-3.1-70b", "tensor_parallel": tp})]
    found = [(p, m) for p, m, _ in _found(docs, "inference-memory-fit", "roce", ops, monkeypatch)]
    assert found == ([("workload.model", ("`llama-3.1-70b` at bf16 needs 141 GB of weights but 2 GPUs hold 86 GB after "
                       "the runtime reserve"))] if fires else [])


def test_serving_without_gpus_is_not_sized(docs, monkeypatch):
    # _inference: `g is None` (no compute group with GPUs of known memory): the workstation example declares none, so
    # there is no memory to size Llama 3.1 405B against and the inference rules stay silent
    ops = [S("workload", {"purpose": "inference", "model": "llama-3.1-405b", "concurrency": 64})]
    for rule in ("inference-memory-fit", "inference-kv-concurrency", "inference-memory-per-node"):
        assert _found(docs, rule, "ws", ops, monkeypatch) == [], rule
    assert _found(docs, "inference-memory-per-node", "p5", ops, monkeypatch)  # the same workload on two p5 is sized


def test_moe_without_the_nccl_suite(docs, monkeypatch):
    # moe-alltoall: `"nccl" not in v.suites`: the all-to-all test runs in the NCCL suite, which the blueprint leaves out
    ops = [S("workload", MIXTRAL), S("validation.suites", ["node", "fio"])]
    assert _found(docs, "moe-alltoall", "p5", ops, monkeypatch) == [
        ("validation.suites", "`workload.architecture` is `moe` but `validation.suites` has no `nccl`",
         "add `nccl` to `validation.suites` with `alltoall` in `validation.nccl.collectives`")]


TP16 = {"model": "llama-3.1-70b", "tensor_parallel": 16}


def test_on_prem_fabric_bandwidth_is_the_declared_nics(docs, monkeypatch):
    # _bandwidths on-prem: `r.group.hardware.nics` -> their sum. The DGX declares 8 x 400 Gbit/s for 8 GPUs: 50 GB/s per
    # GPU. Llama 3.1 70B TP16 moves 40.3 GB per GPU per micro-batch (test_rule_edges' formula): 805 ms; compute
    # 4096 x 455.8e9 / 16 / 989e12 (H100 SXM bf16 dense) = 118 ms
    ((path, msg, _),) = _found(docs, "parallel-fabric-demand", "dgx", [S("workload", TP16)], monkeypatch)
    assert path == "workload.tensor_parallel"
    assert msg == ("`workload.tensor_parallel` 16 across nodes moves 40 GB per GPU per micro-batch: 805 ms over the "
                   "inter-node fabric (50 GB/s per GPU) vs 118 ms of compute at peak"), msg


def test_on_prem_fabric_bandwidth_without_nics_is_the_network_speed(docs, monkeypatch):
    # _bandwidths on-prem without NICs: `network.speed_gbps`. The Kata example's 100 Gbit/s Ethernet for 8 GPUs is
    # 1.5625 GB/s per GPU (40.3 GB: 25,770 ms; kills `gbps / 8` -> `gbps * 8`). Without a speed the fabric is unknown
    # and nothing is judged (`if not bw: continue`)
    ((_, msg, _),) = _found(docs, "parallel-fabric-demand", "kata", [S("workload", TP16)], monkeypatch)
    assert "moves 40 GB per GPU per micro-batch: 25,770 ms over the inter-node fabric (1.5625 GB/s per GPU)" in msg, msg
    unknown = [D("network.speed_gbps"), S("workload", TP16)]
    assert _found(docs, "parallel-fabric-demand", "kata", unknown, monkeypatch) == []


def test_fabric_demand_without_a_compute_figure(docs, monkeypatch):
    # parallel-fabric-demand: `compute is None` (_step_compute_s: `if not peak`): the A100 has no FP8 tensor cores, so
    # there is no FP8 peak to time the micro-batch against (workload-fp8-support reports the precision); the same TP16
    # in bf16 is judged
    fp8 = [S("workload", TP16 | {"precision": "fp8"})]
    assert _found(docs, "parallel-fabric-demand", "eks", fp8, monkeypatch) == []
    assert _paths(_found(docs, "workload-fp8-support", "eks", fp8, monkeypatch)) == ["workload.precision"]
    assert _paths(_found(docs, "parallel-fabric-demand", "eks", [S("workload", TP16)], monkeypatch)) == [
        "workload.tensor_parallel"]


def test_fabric_demand_needs_the_models_shape(docs, monkeypatch):
    # parallel-fabric-demand: `s.shape is None`: `parameters_b` alone gives no layers or hidden size to size the
    # all-reduces (workload-shape says so)
    ops = [S("workload", {"parameters_b": 70, "tensor_parallel": 16})]
    assert _found(docs, "parallel-fabric-demand", "eks", ops, monkeypatch) == []
    assert _paths(_found(docs, "workload-shape", "eks", ops, monkeypatch)) == ["workload.parameters_b"]


def test_moe_across_nodes_on_plain_ethernet(docs, monkeypatch):
    # moe-fabric-bandwidth: `sum(sizes) >= 2 and fabric == "ethernet"`: the Kata example's two H100 hosts (its VM host
    # dropped) on 100 Gbit/s Ethernet run the all-to-all over TCP; one host has no inter-node all-to-all (kills `>= 2`
    # -> `> 2`)
    two = [S("workload", MIXTRAL), D("node_groups.1")]
    found = _found(docs, "moe-fabric-bandwidth", "kata", two, monkeypatch)
    assert [(p, m) for p, m, _ in found] == [
        ("network.fabric", "MoE workload across nodes on `network.fabric: ethernet` (NCCL over TCP)")]
    one = [*two, S("node_groups.0.hosts", [{"name": "kata-01", "address": "10.2.0.31"}])]
    assert _found(docs, "moe-fabric-bandwidth", "kata", one, monkeypatch) == []


def test_moe_all_to_all_without_a_compute_figure_or_a_link(docs, monkeypatch):
    # moe-fabric-bandwidth: `compute is None or not bw`. EP16 on two p4d is judged (test_rule_edges); in FP8 the A100 has
    # no peak to compare with (kills `or` -> `and`, which compared seconds with None). On the RoCE example the derived
    # expert parallelism (4, a node's L40S) stays on PCIe, whose bandwidth the catalog does not give (no NVLink)
    ep16 = {**MIXTRAL, "expert_parallel": 16}
    assert _paths(_found(docs, "moe-fabric-bandwidth", "eks", [S("workload", ep16)], monkeypatch)) == [
        "workload.expert_parallel"]
    assert _found(docs, "moe-fabric-bandwidth", "eks", [S("workload", ep16 | {"precision": "fp8"})], monkeypatch) == []
    assert _found(docs, "moe-fabric-bandwidth", "roce", [S("workload", MIXTRAL)], monkeypatch) == []


def test_moe_expert_parallelism_derived_from_the_node(docs, monkeypatch):
    # _expert_parallel without `expert_parallel`: min(experts, GPUs per node // tensor_parallel), at least 1. With
    # TP8 on a p4d (8 GPUs) that is 1: no all-to-all at all (`ep <= 1: return`); with TP1 it is 8 on NVLink within the
    # node. Neither moves enough to be reported: the derived degree never leaves the node
    for tp in (1, 8, 16):
        ops = [S("workload", {**MIXTRAL, "tensor_parallel": tp})]
        assert _found(docs, "moe-fabric-bandwidth", "eks", ops, monkeypatch) == [], tp


# --- seed-48 survivors (tools/mutate.py --sample 3 --seed 48) -----------------------------------------------------


def _catalog_with_images(gpu_os: str, cpu_os: str) -> Catalog:
    c = catalog()
    aws = copy.deepcopy(c.aws)
    aws["node_images"]["ec2_gpu"]["os"], aws["node_images"]["ec2_cpu"]["os"] = gpu_os, cpu_os
    return Catalog(c.data, c.extras, aws, c.software)


def test_slurm_compute_older_than_the_controller_is_allowed(docs, monkeypatch):
    # slurm-version-order: `version_tuple(v) > version_tuple(ctl)`. Slurm supports slurmd up to two releases older than
    # slurmctld, never newer (https://slurm.schedmd.com/upgrades.html): GPU nodes on Debian 12 (22.05) under a
    # controller on Ubuntu 24.04 (23.11, two releases on: 23.02, 23.11) are fine; the other way round fires (kills
    # `>` -> `!=`)
    ops = [S("orchestrator", {"kind": "slurm"}),
           A("node_groups", {"name": "ctl", "role": "controller", "instance_type": "m7i.xlarge", "count": 1})]
    _use_catalog(monkeypatch, _catalog_with_images("debian-12", "ubuntu-24.04"))
    assert _found(docs, "slurm-version-order", "p5", ops, monkeypatch) == []
    _use_catalog(monkeypatch, _catalog_with_images("ubuntu-24.04", "debian-12"))
    assert [m for _, m, _ in _found(docs, "slurm-version-order", "p5", ops, monkeypatch)] == [
        "node group `gpu` would run Slurm 23.11.4, newer than the controller's 22.05.8 (`ctl`)"]


@pytest.mark.parametrize(("gpus", "says"), [
    (16, "slurmd would wait for /dev/nvidia8 and up, which do not exist, and never register"),
    (4, "4 GPUs per node would never be scheduled"),
])
def test_slurm_gres_count_says_what_too_many_and_too_few_do(docs, monkeypatch, gpus, says):
    # slurm-gres-count: a DGX H100 has 8 GPUs. More in Gres= than the node has: slurmd looks for the device files
    # and never registers (https://slurm.schedmd.com/gres.html); fewer: the rest are never scheduled (kills
    # `nodes[0].gpus > int(want)` -> `is`)
    found = _found(docs, "slurm-gres-count", "dgx", [S("node_groups.1.hardware.gpu", f"h100-sxm:{gpus}")], monkeypatch)
    assert [(p, m.endswith(says), f) for p, m, f in found] == [
        ("node_groups.1.hardware.gpu", True, "set `hardware.gpu: h100-sxm:8`")], found
