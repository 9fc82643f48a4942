"""Rules at the edges their one firing case leaves open (issue 35; found by ``make mutate``'s surviving mutants).

Each test names the mutant it kills: a condition whose ``and`` could become ``or``, a loop whose ``continue`` could
become ``break`` (only the first node group would be looked at). The blueprints are the examples of
``test_rules.BASES`` changed as plain data, like ``test_rules.CASES``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from blueprints.catalog import Catalog, catalog

from .test_rules import A, Case, D, S, _build, _check


def _fired(docs: dict[str, dict[str, Any]], rule: str, ops: list[Any], monkeypatch: pytest.MonkeyPatch,
           base: str = "roce") -> list[tuple[int, str]]:
    text, lines = _build(docs, base, ops)
    by_line = {v: k for k, v in lines.items()}
    found = _check(text, Case(rule, base, ops, ""), monkeypatch)
    return [(f.line, ".".join(map(str, by_line.get(f.line, ())))) for f in found if f.rule_id == rule]


def _move_compute_last(doc: dict[str, Any]) -> None:
    doc["node_groups"] = doc["node_groups"][1:] + doc["node_groups"][:1]  # controller and login groups first


def _second_compute_group(doc: dict[str, Any]) -> None:
    g = copy.deepcopy(doc["node_groups"][0])
    g["name"] = "l40s-b"
    for i, h in enumerate(g["hosts"]):
        h["name"] = f"l40s-b{i}"
        h["address"] = f"10.9.0.{i + 10}"
    doc["node_groups"].insert(1, g)


def test_fio_expectation_missing_with_only_a_read_threshold(docs, monkeypatch):
    # kills `min_read_mb_s and min_write_mb_s` -> `or`: a declared read rate leaves the writes unjudged
    ops = [D("node_groups.0.hardware.nvme.model"), S("storage.0.throughput_mb_s", 2500)]
    assert [p for _, p in _fired(docs, "fio-expectation-missing", ops, monkeypatch)] == ["node_groups.0.hardware.nvme"]
    both = [*ops, S("validation.fio", {"thresholds": {"min_read_mb_s": 1000, "min_write_mb_s": 800}})]
    assert _fired(docs, "fio-expectation-missing", both, monkeypatch) == []
    for one in ("min_read_mb_s", "min_write_mb_s"):
        only = [*ops, S("validation.fio", {"thresholds": {one: 1000}})]
        assert [p for _, p in _fired(docs, "fio-expectation-missing", only, monkeypatch)] == [
            "node_groups.0.hardware.nvme"], one


def test_fio_expectation_missing_looks_past_groups_without_nvme(docs, monkeypatch):
    # kills `continue` -> `break` for a group without local NVMe: the compute group comes after the controller and login
    ops = [_move_compute_last, D("node_groups.2.hardware.nvme.model"), S("storage.0.throughput_mb_s", 2500)]
    assert [p for _, p in _fired(docs, "fio-expectation-missing", ops, monkeypatch)] == ["node_groups.2.hardware.nvme"]


def test_fio_expectation_missing_looks_past_groups_with_drive_figures(docs, monkeypatch):
    # kills `continue` -> `break` for a group whose drives declare their MB/s: the next group's drives do not
    ops = [_second_compute_group, D("node_groups.0.hardware.nvme.model"), S("node_groups.0.hardware.nvme.seq_read_mb_s", 6800),
           S("node_groups.0.hardware.nvme.seq_write_mb_s", 5600), D("node_groups.1.hardware.nvme.model"),
           S("storage.0.throughput_mb_s", 2500)]
    assert [p for _, p in _fired(docs, "fio-expectation-missing", ops, monkeypatch)] == ["node_groups.1.hardware.nvme"]


def test_nccl_suite_single_gpu_is_about_one_gpu_not_none(docs, monkeypatch):
    # kills `gpus == 1` -> `<= 1`: the workstation example declares no GPU and runs the NCCL suite as the CPU (gloo)
    # benchmark over several ranks, which measures something; exactly one GPU is the case that measures nothing
    assert _fired(docs, "nccl-suite-single-gpu", [], monkeypatch, base="ws") == []
    one = [S("node_groups.0.hardware", {"gpu": "l4:1"})]
    assert [p for _, p in _fired(docs, "nccl-suite-single-gpu", one, monkeypatch, base="ws")] == ["validation.suites"]


def _hosts(n: int) -> list[dict[str, str]]:
    return [{"name": f"l40s-{i + 1:02d}", "address": f"10.1.0.{21 + i}"} for i in range(n)]


@pytest.mark.parametrize(("gpus", "hosts", "fires"), [
    (1, 1, True),    # one GPU in the cluster
    (1, 2, False),   # 1 x 2 = 2 GPUs (kills gpus ** nodes)
    (2, 2, False),   # 2 x 2 = 4 (kills gpus / nodes and //)
    (1, 3, False),   # 1 x 3 = 3 (kills gpus & nodes)
])
def test_nccl_suite_single_gpu_counts_gpus_times_nodes(docs, monkeypatch, gpus, hosts, fires):
    ops = [S("node_groups.0.hardware.gpu", f"l40s:{gpus}"), S("node_groups.0.hardware.nics", []),
           S("node_groups.0.hosts", _hosts(hosts))]
    assert bool(_fired(docs, "nccl-suite-single-gpu", ops, monkeypatch)) is fires


def _messages(docs: dict[str, dict[str, Any]], rule: str, base: str, ops: list[Any],
              monkeypatch: pytest.MonkeyPatch) -> list[str]:
    text, _ = _build(docs, base, ops)
    return [f.message for f in _check(text, Case(rule, base, ops, ""), monkeypatch) if f.rule_id == rule]


def test_fio_targets_mounted_names_the_declared_mounts(docs, monkeypatch):
    # kills `', '.join(points) or 'none declared'` -> `and`: the message lists the mounts a target may use
    (msg,) = _messages(docs, "fio-targets-mounted", "p5", [S("validation.fio", {"targets": ["/data"]})], monkeypatch)
    assert msg == "`validation.fio.targets.0` `/data` is not on a declared mount (/scratch, /fsx)"
    none = [D("node_groups.0.local_nvme"), S("storage", []), S("validation.fio", {"targets": ["/data"]})]
    (msg,) = _messages(docs, "fio-targets-mounted", "p5", none, monkeypatch)
    assert msg.endswith("is not on a declared mount (none declared)")


def test_onprem_group_without_hosts(docs, monkeypatch):
    # the first branch of onprem-node-group-fields (its case covers the AWS-only keys): an empty `hosts` list is
    # reported at the group's name (kills `p + ("name",)` -> `p << ("name",)`, a crash)
    ops = [S("node_groups.2.hosts", [])]
    text, lines = _build(docs, "roce", ops)
    found = [f for f in _check(text, Case("onprem-node-group-fields", "roce", ops, ""), monkeypatch)
             if f.rule_id == "onprem-node-group-fields"]
    assert [(f.line, f.message) for f in found] == [
        (lines[("node_groups", 2, "name")], "on-prem node group `login` has no `node_groups.2.hosts`")]


def _found(docs: dict[str, dict[str, Any]], rule: str, base: str, ops: list[Any],
           monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """``(path, message, fix)`` of each finding of ``rule``; the path is the innermost key on the finding's line."""
    text, lines = _build(docs, base, ops)
    by_line: dict[int, tuple[Any, ...]] = {}
    for k, v in lines.items():
        if len(k) > len(by_line.get(v, ())):
            by_line[v] = k
    return [(".".join(map(str, by_line.get(f.line, ()))), f.message, f.fix)
            for f in _check(text, Case(rule, base, ops, ""), monkeypatch) if f.rule_id == rule]


def test_aws_node_group_fields_every_branch(docs, monkeypatch):
    # its case covers a missing instance_type; each other branch once (kills the crashing `p + (...)` mutants)
    found = _found(docs, "aws-node-group-fields", "p5", [D("node_groups.0.count")], monkeypatch)
    assert [(p, f) for p, _, f in found] == [("node_groups.0.name", "add `count:` (number of instances)")]
    found = _found(docs, "aws-node-group-fields", "p5", [S("node_groups.0.hardware", {"gpu": "h100:8"})], monkeypatch)
    assert [(p, f) for p, _, f in found] == [("node_groups.0.hardware", "remove `hardware`")]
    hosts = [{"name": "gpu-01", "address": "10.0.0.5"}]
    found = _found(docs, "aws-node-group-fields", "p5", [S("node_groups.0.hosts", hosts)], monkeypatch)
    assert [(p, f) for p, _, f in found] == [("node_groups.0.hosts", "remove `hosts` and set `count`")]


@pytest.mark.parametrize(("count", "fires"), [(1, True), (2, False), (3, True)])
def test_onprem_count_must_equal_the_hosts(docs, monkeypatch, count, fires):
    # the roce compute group lists 2 hosts: a count below or above that is refused (kills `!=` -> `>` / `<`)
    found = _found(docs, "onprem-node-group-fields", "roce", [S("node_groups.0.count", count)], monkeypatch)
    assert bool(found) is fires
    if fires:
        assert found[0][1] == f"`node_groups.0.count` is {count} but the group lists 2 host(s)"


def test_host_unique_says_when_names_differ_only_in_case(docs, monkeypatch):
    # kills `'; host names ignore case' if same` -> `if not same`
    (exact,) = _found(docs, "host-unique", "dgx", [S("node_groups.1.hosts.1.name", "dgx-01")], monkeypatch)
    assert exact[1] == "host `dgx-01` is already `node_groups.1.hosts.0` (group `dgx`)"
    (case,) = _found(docs, "host-unique", "dgx", [S("node_groups.1.hosts.1.name", "DGX-01")], monkeypatch)
    assert case[1] == "host `DGX-01` is already `dgx-01`, `node_groups.1.hosts.0` (group `dgx`); host names ignore case"


def test_onprem_public_ip_is_aws_only(docs, monkeypatch):
    found = _found(docs, "onprem-node-group-fields", "roce", [S("node_groups.0.public_ip", True)], monkeypatch)
    assert [(p, m, f) for p, m, f in found] == [
        ("node_groups.0.public_ip", "`node_groups.0.public_ip` is AWS only", "remove `public_ip`")]


@pytest.mark.parametrize(("key", "fires"), [
    # Linux NAME_MAX is 255 bytes a component (https://man7.org/linux/man-pages/man3/pathconf.3.html):
    # "/" + 255 + "/" + 255 = 512 characters is still a path
    ("/" + "k" * 255 + "/" + "e" * 255, False),
    # 513: longer than the rule lets a path be (512), as a key body pasted on one line is
    ("/" + "k" * 255 + "/" + "e" * 256, True),
])
def test_ssh_key_material_length(docs, monkeypatch, key, fires):
    assert len(key) in (512, 513)
    found = _found(docs, "ssh-key-material", "dgx", [S("target.ssh.private_key_file", key)], monkeypatch)
    assert bool(found) is fires


def test_ssh_key_material_without_a_pem_header(docs, monkeypatch):
    # a key body with a line break but no BEGIN line is still key material (kills `or` -> `and`)
    key = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ"
    assert _found(docs, "ssh-key-material", "dgx", [S("target.ssh.private_key_file", key)], monkeypatch)


def test_local_connection_single_names_the_first_local_host(docs, monkeypatch):
    # the first local host at node_groups.1.hosts.0: both indices appear in the message (kills index mutants)
    ops = [S("node_groups.1.hosts.0.connection", "local"), S("node_groups.1.hosts.1.connection", "local")]
    (f,) = _found(docs, "local-connection-single", "dgx", ops, monkeypatch)
    assert f[0] == "node_groups.1.hosts.1.connection"
    assert "like `node_groups.1.hosts.0`; both would run on the control machine" in f[1]


def test_mount_dir_duplicate_only_for_the_same_mount_on_the_same_node(docs, monkeypatch):
    # a scratch mount that sorts before /fsx is no duplicate (kills `o.mount == m.mount` -> `<=`)
    assert _found(docs, "mount-dir-duplicate", "p5", [S("node_groups.0.local_nvme.mount", "/a-scratch")],
                  monkeypatch) == []
    # two compute groups' NVMe scratch at the same /scratch are on different nodes (kills `!=` -> `==` in _same_node)
    assert _found(docs, "mount-dir-duplicate", "roce", [_second_compute_group], monkeypatch) == []


def test_host_unique_duplicate_address(docs, monkeypatch):
    # the address branch (its case covers names; kills the crashing `p + ("address",)` mutants)
    found = _found(docs, "host-unique", "dgx", [S("node_groups.1.hosts.1.address", "10.0.0.11")], monkeypatch)
    text, _ = _build(docs, "dgx", [])
    assert "10.0.0.11" in text  # the address of another host of the example
    assert [(p, f) for p, _, f in found] == [("node_groups.1.hosts.1.address", "give every host its own address")]


def test_a_long_user_value_is_cut_to_40_characters_in_the_message(docs, monkeypatch):
    # user values quoted in a finding (here a host address that is no IP address or DNS name) are cut to 40
    # characters, the last three '...'; a value of exactly 40 is quoted whole, as is a short one (printable values
    # as they are, without repr's quotes)
    base = "roce"
    for address, shown in (("bad_host", "bad_host"), ("bad_" + "a" * 36, "bad_" + "a" * 36),
                           ("bad_" + "a" * 37, "bad_" + "a" * 33 + "...")):
        ops = [S("node_groups.0.hosts.0.address", address)]
        text, _ = _build(docs, base, ops)
        found = [f for f in _check(text, Case("host-address-valid", base, ops, ""), monkeypatch)
                 if f.rule_id == "host-address-valid"]
        assert len(found) == 1 and f"`{shown}` is neither" in found[0].message, (address, found)


def test_vpc_layout_checks_the_public_subnet_only_when_a_nat_gateway_uses_it(docs, monkeypatch):
    # the public (NAT) subnet exists only with `nat_gateway: true`: outside the VPC it is refused then, ignored without
    outside = {"cidr_block": "10.0.0.0/16", "public_subnet_cidr_block": "10.9.0.0/24"}
    with_nat = [S("target.vpc", {**outside, "nat_gateway": True})]
    assert [p for _, p in _fired(docs, "vpc-cidr-layout", with_nat, monkeypatch, base="p5")] == [
        "target.vpc.public_subnet_cidr_block"]
    without = [S("target.vpc", {**outside, "nat_gateway": False})]
    assert _fired(docs, "vpc-cidr-layout", without, monkeypatch, base="p5") == []


def test_imds_tag_key_rule_is_for_slurm_clusters_only(docs, monkeypatch):
    # only a Slurm cluster reads its node names from instance tags through IMDS; another AWS blueprint may use any
    # tag key EC2 accepts (a '/' included)
    tags = [S("target.tags", {"team/owner": "ml"})]
    assert _fired(docs, "slurm-aws-tag-keys", tags, monkeypatch, base="p5") == []
    assert [p for _, p in _fired(docs, "slurm-aws-tag-keys", tags, monkeypatch, base="p5s")] == ["target.tags.team/owner"]


def test_nvls_needs_nvlink_4(docs, monkeypatch):
    # NVLink SHARP (NVLS) came with NVLink 4 NVSwitches (HGX H100, NCCL 2.17.1 release notes); an NVSwitch system of
    # NVLink 3 GPUs (HGX A100) has none, so an older NCCL leaves nothing unused there
    old = [S("software.cuda", "12.0"), S("software.nccl", "2.16.5")]
    assert [p for _, p in _fired(docs, "nccl-nvls", old, monkeypatch, base="dgx")] == ["software.nccl"]
    a100 = [*old, S("node_groups.1.hardware.gpu", "a100-80gb-sxm:8")]
    assert _fired(docs, "nccl-nvls", a100, monkeypatch, base="dgx") == []


# --- the words users act on, and the sizing figures at their documented formulas -------------------------------------

def test_sandbox_allow_list_says_where_the_driver_lives(docs, monkeypatch):
    # Kata passes the GPU into a guest that carries its own driver; gVisor's nvproxy uses the host's (catalog
    # `driver_on`, from each runtime's release notes): the message names the place to change (kills
    # `driver_on == "guest"` -> `is "guest"`: the catalog's strings are not the interned literal)
    cat = catalog()
    kata = cat.runtime_release("kata", str(docs["kata"]["software"]["kata"]))
    (_, msg, _), = _found(docs, "sandbox-driver-allow-list", "kata", [S("software.driver_version", "595.44.02")],
                          monkeypatch)
    assert kata.driver_on == "guest" and f"(in the guest image: {', '.join(kata.drivers)})" in msg
    gv = cat.runtime_releases("gvisor")[0]
    unlisted = next(d for d in cat.driver_releases(gv.drivers[0].split(".")[0]) if d not in gv.drivers)
    ops = [S("node_groups.1.sandbox", "gvisor"), S("software.gvisor", gv.release),
           S("software.driver_branch", unlisted.split(".")[0]), S("software.driver_version", unlisted)]
    (_, msg, _), = _found(docs, "sandbox-driver-allow-list", "dgx", ops, monkeypatch)
    assert gv.driver_on == "host" and f"(on the host: {', '.join(gv.drivers)})" in msg


def _catalog_without_nvlsm() -> Catalog:
    c = catalog()
    extras = copy.deepcopy(c.extras)
    extras["bare_metal"]["nvidia_driver"]["nvswitch"].pop("nvlsm_versions", None)
    return Catalog(c.data, extras, c.aws)


def test_nvlsm_release_with_no_release_catalogued_says_none(docs, monkeypatch):
    # kills `', '.join(known) or 'none'` -> `and`: with no NVLSM release in the catalog the message says so
    ops = [S("node_groups.1.hardware.gpu", "b200:8"), S("software.driver_branch", "590")]
    text, _ = _build(docs, "dgx", ops)
    found = _check(text, Case("nvlsm-release", "dgx", ops, "", patch=_catalog_without_nvlsm), monkeypatch)
    (msg,) = [f.message for f in found if f.rule_id == "nvlsm-release"]
    assert msg.endswith("no NVLSM release for driver branch 590 (known: none)"), msg


def test_ipoib_netdev_fix_says_where_to_read_the_name(docs, monkeypatch):
    # the fix used to invent a name from the NIC's index (`ibp{12 + j}s0`); it now says where the real one is shown
    ops = [S("network.infiniband.ipoib", {"enabled": True, "cidr": "192.168.100.0/24"}),
           D("node_groups.0.hardware.nics.0.netdev"), S("storage", [])]  # no Lustre over o2ib: the IPoIB branch
    hits = [(p, f) for p, _, f in _found(docs, "netdev-required", "dgx", ops, monkeypatch)]
    assert hits == [("node_groups.0.hardware.nics.0.device",  # the NIC's line (a flow mapping)
                     "add `netdev:` (the port's interface as `ip -br link` lists it) to `node_groups.0.hardware.nics.0`")]


def test_socket_interface_on_efa_is_never_judged_as_plain_ethernet(docs, monkeypatch):
    # kills `fabric == "ethernet"` -> `<= "ethernet"` ("efa" sorts before "ethernet"): NICs written on an AWS group
    # are refused for what they are, not read as the Ethernet data NICs of a socket transport
    ops = [S("node_groups.0.hardware", {"nics": [{"device": "ens5", "netdev": "ens5", "link_layer": "ethernet",
                                                  "speed_gbps": 100}]}),
           S("network.nccl", {"env": {"NCCL_SOCKET_IFNAME": "=eth9"}})]
    text, _ = _build(docs, "p5", ops)
    ids = {f.rule_id for f in _check(text, Case("aws-node-group-fields", "p5", ops, ""), monkeypatch)}
    assert "aws-node-group-fields" in ids and "nccl-env-disables-fabric" not in ids


def _catalog_trn1_without_rdma_write() -> Catalog:
    c = catalog()
    data = copy.deepcopy(c.data)
    data["aws_instance_types"]["trn1.32xlarge"]["efa_rdma"]["write"] = False
    return Catalog(data, c.extras, c.aws)


def test_efa_env_capability_judges_only_the_groups_that_run_nccl(docs, monkeypatch):
    # NCCL's environment reaches the NVIDIA GPU groups; a Trainium group (Neuron's collectives, not NCCL) is not
    # judged by it even where its EFA lacked the capability (a catalog variant: every catalogued trn type has RDMA
    # write). Kills `it is None or not r.nvidia_gpus` -> `and`.
    trn = {"name": "trn", "role": "compute", "count": 2, "instance_type": "trn1.32xlarge"}
    ops = [S("network.nccl", {"env": {"FI_EFA_USE_DEVICE_RDMA_WRITE": "1"}}), A("node_groups", trn)]
    text, _ = _build(docs, "p5", ops)
    found = _check(text, Case("efa-env-capability", "p5", ops, "", patch=_catalog_trn1_without_rdma_write), monkeypatch)
    assert [f for f in found if f.rule_id == "efa-env-capability"] == []
    p4d = [S("node_groups.0.instance_type", "p4d.24xlarge"), *ops]  # p4d's EFA has RDMA read only (catalog)
    (_, msg, _), = _found(docs, "efa-env-capability", "p5", p4d, monkeypatch)
    assert "`p4d.24xlarge` (node group `gpu`) does not have" in msg


def test_parallel_fabric_demand_figures(docs, monkeypatch):
    # Llama 3.1 70B (L = 80, h = 8192, 64 heads of 128, 8 KV heads; 70.6e9 parameters) on two p4d (A100 bf16
    # 312 TFLOP/s; 400 Gbit/s for 8 GPUs = 6.25 GB/s per GPU). PaLM FLOPs per token: 6 x 70.6e9 + 12 x 80 x 64 x
    # 128 x s.
    # TP16, s = 4096: 4 x 2 x 15/16 x 4096 x 8192 x 2 bytes x 80 layers = 40.3 GB = 6,442 ms; compute
    # 4096 x 455.8e9 / 16 / 312e12 = 374 ms. PP2 halves both (40 layers per stage): 3,221 ms vs 187 ms (kills
    # `tp * cp * pp` -> `tp * cp ** pp`).
    tp = {"model": "llama-3.1-70b", "tensor_parallel": 16}
    for extra, moves, ms, compute in [({}, "40 GB", "6,442", "374"), ({"pipeline_parallel": 2}, "20 GB", "3,221", "187")]:
        (_, msg, _), = _found(docs, "parallel-fabric-demand", "eks", [S("workload", tp | extra)], monkeypatch)
        assert msg == (f"`workload.tensor_parallel` 16 across nodes moves {moves} per GPU per micro-batch: {ms} ms over "
                       f"the inter-node fabric (6.25 GB/s per GPU) vs {compute} ms of compute at peak"), msg
    # CP16, s = 32768: 2048 tokens per rank; each of the 15 ring steps passes a rank's K and V (2 x 2048 x 8 x 128 x
    # 2 bytes = 8.4 MB per layer), three times (forward; backward K/V and their gradients): 3 x 15 x 8.4 MB x 80 =
    # 30.2 GB = 4,832 ms; compute 32768 x 681.3e9 / 16 / 312e12 = 4,472 ms (kills `(cp - 1)` -> `(cp / 1)` and
    # `2 * tokens * kv_heads` -> `2 * tokens % kv_heads`)
    cp = {"model": "llama-3.1-70b", "context_parallel": 16, "sequence_length": 32768}
    (_, msg, _), = _found(docs, "parallel-fabric-demand", "eks", [S("workload", cp)], monkeypatch)
    assert msg == ("`workload.context_parallel` 16 across nodes moves 30 GB per GPU per micro-batch: 4,832 ms over "
                   "the inter-node fabric (6.25 GB/s per GPU) vs 4,472 ms of compute at peak"), msg


def test_moe_all_to_all_names_the_link_it_crosses(docs, monkeypatch):
    # test_sizing's EP16 case (8.1 GB per GPU, 1.29 s at 6.25 GB/s vs 1.10 s of compute): across two nodes it is the
    # fabric's bandwidth, and the message says so (kills `if crosses` -> `if not crosses`, which named NVLink)
    ops = [S("workload", {"model": "mixtral-8x7b", "architecture": "moe", "expert_parallel": 16})]
    (_, msg, _), = _found(docs, "moe-fabric-bandwidth", "eks", ops, monkeypatch)
    assert msg == ("expert parallelism (`workload.expert_parallel`) 16 across nodes moves 8.1 GB per GPU per micro-batch "
                   "in all-to-all: 1,288 ms over the inter-node fabric (6.25 GB/s per GPU) vs 1,101 ms of compute at peak")


def test_kv_concurrency_is_silent_when_not_one_request_fits(docs, monkeypatch):
    # Llama 3.1 405B fp8 on one p5: 406 GB of weights leave 213 GB; one request of 524,288 tokens needs 0.516 MB x
    # 524,288 = 271 GB of KV cache. inference-memory-fit says so; the concurrency warning has nothing to add (kills
    # `or sv.fit == 0` -> `and`, which warned about 4 requests when none fits)
    ops = [S("workload", {"purpose": "inference", "model": "llama-3.1-405b", "quantization": "fp8",
                          "sequence_length": 524288, "concurrency": 4})]
    (_, fit, _), = _found(docs, "inference-memory-fit", "p5", ops, monkeypatch)
    assert "one request of 524288 tokens needs 271 GB of KV cache" in fit
    assert _found(docs, "inference-kv-concurrency", "p5", ops, monkeypatch) == []


# --- seed-41 survivors of `tools/mutate.py --sample 3 --seed 41` ------------------------------------------------------

def test_mount_inside_an_image_dir_is_refused_but_a_dir_of_its_own_under_opt_is_not(docs, monkeypatch):
    # EFA's installer and the OFI plugin live in `/opt/amazon` (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    # efa-start.html): a mount at `/opt/amazon/efa` covers part of it; `/opt` itself only when mounted on exactly
    # (kills `d != "/opt"` -> `d is "/opt"`: the catalog's strings are not the interned literal)
    (_, msg, _), = _found(docs, "mount-over-image-dir", "p5", [S("storage.0.mount", "/opt/amazon/efa")], monkeypatch)
    assert msg == "`storage.0.mount` `/opt/amazon/efa` (lustre storage `shared`) would cover `/opt/amazon`", msg
    assert _found(docs, "mount-over-image-dir", "p5", [S("storage.0.mount", "/opt/scratch")], monkeypatch) == []
    (_, msg, _), = _found(docs, "mount-over-image-dir", "p5", [S("storage.0.mount", "/opt")], monkeypatch)
    assert msg.endswith("would cover `/opt`"), msg


def test_inventory_group_name_says_who_generates_the_group(docs, monkeypatch):
    # Ansible's own groups (https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#default-groups),
    # the renderer's node-role groups and its Ansible-role groups are named apart (kills the AddNot on the first choice)
    said = {name: _found(docs, "inventory-group-name", "dgx", [S("node_groups.0.name", name)], monkeypatch)[0][1]
            for name in ("all", "ungrouped", "role-compute", "with-rdma")}
    assert said["all"].endswith("inventory group `all`, which clusterforge generates for every inventory"), said
    assert said["ungrouped"].endswith("`ungrouped`, which clusterforge generates for every inventory"), said
    assert said["role-compute"].endswith("`role_compute`, which clusterforge generates for a node role"), said
    assert said["with-rdma"].endswith("`with_rdma`, which clusterforge generates for an Ansible role"), said


@pytest.mark.parametrize("per_vm, idle", [(1, None), (2, None), (3, 1), (4, None)])
def test_vm_gpus_idle_is_the_remainder_of_the_hosts_gpus(docs, monkeypatch, per_vm, idle):
    # the Kata example's GPU group has 4 GPUs per host: VMs of 1, 2 or 4 GPUs use them all, VMs of 3 leave 1 idle
    # (kills `gpus % per_vm` -> `gpus ^ per_vm`: 4 ^ 2 = 6, 4 ^ 1 = 5)
    found = _found(docs, "vm-gpus-idle", "kata", [S("node_groups.1.sandbox.vm.gpus_per_vm", per_vm)], monkeypatch)
    if idle is None:
        assert found == []
    else:
        (_, msg, _), = found
        assert msg.startswith(f"4 GPUs per host in VMs of `node_groups.1.sandbox.vm.gpus_per_vm` {per_vm} leave "
                              f"{idle} GPU(s) idle"), msg


def test_a_second_controller_group_names_the_first(docs, monkeypatch):
    # one slurmctld per cluster here: the second controller group is refused and the message names the one kept
    second = copy.deepcopy(docs["dgx"]["node_groups"][0])
    second["name"] = "mgmt-b"
    second["hosts"] = [{"name": "mgmt-02", "address": "10.0.0.20"}]
    (path, msg, _), = _found(docs, "slurm-controller", "dgx", [A("node_groups", second)], monkeypatch)
    assert path == "node_groups.2.role"
    assert msg == "node group `mgmt-b` is a second controller group; Slurm runs one slurmctld here (`mgmt`)", msg


@pytest.mark.parametrize("trays, fires", [(18, False), (19, True)])
def test_imex_domain_holds_one_nvl72_rack(docs, monkeypatch, trays, fires):
    # a GB200 NVL72 rack is one NVLink domain of 72 GPUs, 18 compute trays of 4 (NVIDIA Mission Control, high-speed
    # fabric management): 18 trays fit in one node group, 19 do not; the message gives the product
    hosts = [{"name": f"gb-{k:02d}", "address": f"10.0.1.{k + 10}"} for k in range(trays)]
    ops = [S("node_groups.1.hardware.gpu", "gb200:4"), S("node_groups.1.hosts", hosts)]
    found = [(p, m, f) for p, m, f in _found(docs, "imex-domain", "dgx", ops, monkeypatch) if "domain holds" in m]
    if not fires:
        assert found == []
        return
    (_, msg, fix), = found
    assert msg == ("node group `dgx` is one NVLink domain for IMEX but holds 19 hosts x 4 gb200-per-gpu = 76 GPUs; "
                   "one domain holds 72"), msg
    assert fix == "split `dgx` into groups of at most 18 hosts, one per rack"


def test_cuda_driver_compat_reads_the_branch_of_a_dotted_driver_branch(docs, monkeypatch):
    # `software.driver_branch` may carry a point release (`470.199`): the branch is its first number. 470 is a base
    # branch of CUDA 12's forward compatibility (https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html),
    # so with `cuda_compat` an H100 runs CUDA 12.4 on it; without it the driver cannot (kills `branch[0]` -> `branch[-1]`)
    ops = [S("software.driver_branch", "470.199"), S("software.cuda", "12.4")]
    assert _found(docs, "cuda-driver-compat", "dgx", [*ops, S("software.cuda_compat", True)], monkeypatch) == []
    (_, msg, fix), = _found(docs, "cuda-driver-compat", "dgx", ops, monkeypatch)
    assert msg == ("`software.driver_branch` 470.199 cannot run CUDA 12.4 (`software.cuda`); CUDA 12.x needs driver 525 "
                   "or newer"), msg
    assert fix == 'set `software.driver_branch: "525"` or newer'


# --- seed-43 survivors ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [2, 4])
def test_efa_placement_decision_for_two_nodes_and_more(docs, monkeypatch, nodes):
    # EFA between 2 or more instances wants a cluster placement group decided (kills `< 2` -> `!= 2`: 4 nodes too)
    ops = [D("network.placement"), S("node_groups.0.count", nodes)]
    assert [p for p, _, _ in _found(docs, "efa-placement-decision", "p5", ops, monkeypatch)] == ["network.fabric"]
    one = [D("network.placement"), S("node_groups.0.count", 1)]
    assert _found(docs, "efa-placement-decision", "p5", one, monkeypatch) == []


def test_nccl_ib_hca_narrowing_counts_the_rails_left(docs, monkeypatch):
    # the DGX example declares 8 ConnectX-7 NDR ports; an HCA list of 2 leaves 6 out and NCCL uses 2 of 8 rails
    nics = docs["dgx"]["node_groups"][1]["hardware"]["nics"]
    two = ",".join(n["device"] for n in nics[:2])
    (_, msg, _), = _found(docs, "nccl-env-disables-fabric", "dgx", [S("network.nccl", {"env": {"NCCL_IB_HCA": two}})],
                          monkeypatch)
    assert len(nics) == 8 and "leaves out 6 of the 8 NICs" in msg and "NCCL uses 2 of 8 rails" in msg, msg


def test_hardware_system_without_a_gpu_says_none(docs, monkeypatch):
    # `system: dgx-h100` is 8 x h100-sxm; a group that names the system but declares no GPU is told it says 0 x none
    (_, msg, fix), = _found(docs, "hardware-system-mismatch", "dgx", [D("node_groups.1.hardware.gpu")], monkeypatch)
    assert msg.endswith("but `node_groups.1.hardware.gpu` says 0 x `none`"), msg
    assert fix == "set `gpu: h100-sxm:8` or drop `system`"


def test_shared_nvswitch_guest_size_and_vm_size_must_agree(docs, monkeypatch):
    # shared-nvswitch partitions of 4 GPUs with VMs (runtime `vm`) of 2: the VM size is the one to change (the branch
    # after the partition-size check, which no test reached: a `+` -> `//` there raised inside the rule unnoticed)
    ops = [S("node_groups.0.sandbox.runtime", "vm"),
           S("node_groups.0.sandbox.nvswitch", {"mode": "shared-nvswitch", "gpus_per_guest": 4}),
           S("node_groups.0.sandbox.vm", {"vcpus": 32, "memory_gib": 256, "gpus_per_vm": 2})]
    (path, msg, fix), = _found(docs, "nvswitch-passthrough-plan", "kata", ops, monkeypatch)
    assert path == "node_groups.0.sandbox.vm.gpus_per_vm"
    assert msg == ("`node_groups.0.sandbox.vm.gpus_per_vm` 2 differs from the partition size "
                   "`nvswitch.gpus_per_guest` 4") and fix == "set `gpus_per_vm: 4`"


@pytest.mark.parametrize("nids, says", [(["10.0.0.5@efa"], "efa"), (["10.0.0.5@kfi", "10.0.0.6@efa"], "efa/kfi")])
def test_efa_and_kfi_nids_need_the_efa_fabric(docs, monkeypatch, nids, says):
    # LNet's `efa` / `kfi` networks are AWS EFA client networks (Lustre wiki, "Mounting a Lustre File System on Client
    # Nodes"): an InfiniBand cluster given such NIDs is told which networks it named
    ops = [S("storage.0.server.mgs_nids", nids)]
    (path, msg, _), = _found(docs, "lustre-nid-network", "dgx", ops, monkeypatch)
    assert path == "storage.0.server.mgs_nids"
    assert msg == f"`storage.0.server.mgs_nids` uses `{says}` NIDs but `network.fabric` is `infiniband`", msg


def test_kv_concurrency_is_silent_when_the_weights_do_not_fit(docs, monkeypatch):
    # Llama 3.1 405B in bf16 (2 bytes x 405.9e9 parameters, the model card's count = 812 GB) on one p5 (8 x 80 GB less
    # the runtime reserve): inference-memory-fit refuses it, and no negative count of requests is reported (kills
    # `free > 0` -> `free != 0`)
    ops = [S("workload", {"purpose": "inference", "model": "llama-3.1-405b", "sequence_length": 8192,
                          "concurrency": 4}), S("node_groups.0.count", 1)]
    (_, fit, _), = _found(docs, "inference-memory-fit", "p5", ops, monkeypatch)
    assert "needs 812 GB of weights but 8 GPUs hold" in fit, fit
    assert _found(docs, "inference-kv-concurrency", "p5", ops, monkeypatch) == []


# --- seed-44 survivors ------------------------------------------------------------------------------------------------

def test_an_nccl_variable_that_narrows_a_fast_path_is_not_called_one_that_disables_it(docs, monkeypatch):
    # NCCL_ALGO=Ring narrows NCCL's algorithm choice (catalog nccl_env_fast_paths, effect `narrows`): a warning of
    # nccl-env-narrows-fabric, never the error of nccl-env-disables-fabric (kills `row["effect"] != effect` -> `is`)
    ops = [S("network.nccl", {"env": {"NCCL_ALGO": "Ring"}})]
    assert [p for p, _, _ in _found(docs, "nccl-env-narrows-fabric", "dgx", ops, monkeypatch)] == [
        "network.nccl.env.NCCL_ALGO"]
    assert _found(docs, "nccl-env-disables-fabric", "dgx", ops, monkeypatch) == []


@pytest.mark.parametrize("dev, fires", [("/dev/disk/by-id/", True), ("/dev/disk/by-id/n", False)])
def test_a_by_id_path_must_name_a_link(docs, monkeypatch, dev, fires):
    # the directory itself is not a drive: the shortest valid entry has one character after `/dev/disk/by-id/`
    ops = [S("node_groups.0.hardware.nvme.by_id", ["/dev/disk/by-id/nvme-MTFDKCC3T8TFS_1", dev])]
    found = [p for p, _, _ in _found(docs, "nvme-by-id-paths", "roce", ops, monkeypatch)]
    assert found == (["node_groups.0.hardware.nvme.by_id.1"] if fires else [])


def test_a_plugin_sharing_exactly_one_net_api_with_nccl_is_older_not_unloadable(docs, monkeypatch):
    # NCCL 2.26.5 loads net plugin APIs v6-v10 (its src/plugin/net), aws-ofi-nccl 1.7.2 exports v2-v6 (its
    # nccl_ofi_interface_nvidia.cpp): one common version, v6, so NCCL loads the plugin through an older API: the
    # warning, not the error (kills `max(lo) <= min(hi)` -> `<` at the one-version boundary)
    ops = [S("software", {"nccl": "2.26.5", "aws_ofi_nccl": "1.7.2"})]
    (_, msg, _), = _found(docs, "nccl-net-plugin-api-older", "p5", ops, monkeypatch)
    assert msg == "aws-ofi-nccl 1.7.2 (`software.aws_ofi_nccl`) exports net API up to v6; NCCL 2.26.5 uses up to v10", msg
    assert _found(docs, "nccl-net-plugin-api", "p5", ops, monkeypatch) == []


@pytest.mark.parametrize("iops, fires", [(1500, False), (6000, False), (12000, False), (192000, False), (0, True),
                                         (9000, True), (180001, True), (204000, True)])
def test_fsx_metadata_iops_at_the_offered_values(docs, monkeypatch, iops, fires):
    # FSx for Lustre user-provisioned metadata IOPS: 1500, 3000, 6000, or 12000 to 192000 in steps of 12000
    # (the rule's source: the FSx API model in botocore, MetadataConfiguration.Iops): both ends are offered values
    ops = [S("storage.0.fsx.metadata", {"mode": "USER_PROVISIONED", "iops": iops})]
    found = [p for p, _, _ in _found(docs, "fsx-metadata-iops", "p5", ops, monkeypatch)]
    assert found == (["storage.0.fsx.metadata.iops"] if fires else []), iops


def test_an_ethernet_port_below_the_infiniband_rate_is_not_a_slow_infiniband_port(docs, monkeypatch):
    # kills `link_layer == "infiniband"` -> `<` in the slower-than-half-a-port branch ("ethernet" sorts before
    # "infiniband"): a 100 GbE management port on an NDR cluster (400 Gbit/s a 4x port) is no split InfiniBand port
    nic = {"device": "mlx5_8", "netdev": "eno1", "speed_gbps": 100, "link_layer": "ethernet"}
    assert _fired(docs, "ib-generation-nic-speed", [A("node_groups.1.hardware.nics", nic)], monkeypatch, base="dgx") == []
    ib = {"device": "mlx5_8", "netdev": "ibp1s0", "speed_gbps": 100}
    assert [p for _, p in _fired(docs, "ib-generation-nic-speed", [A("node_groups.1.hardware.nics", ib)], monkeypatch,
                                 base="dgx")] == ["node_groups.1.hardware.nics.8.speed_gbps"]


def test_efa_on_prem_is_refused(docs, monkeypatch):
    # kills `fabric == "efa"` -> `<` on the on-prem side ("efa" sorts first of the fabrics, so nothing is below it)
    efa = [S("network", {"fabric": "efa"})]
    assert [p for _, p in _fired(docs, "fabric-provider", efa, monkeypatch, base="roce")] == ["network.fabric"]


def test_an_hdd_file_system_without_a_drive_cache_is_refused(docs, monkeypatch):
    # kills `storage_type == "HDD"` -> `<` (no storage type sorts below "HDD"): FSx for Lustre HDD storage needs
    # `drive_cache_type` (READ or NONE), https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html
    hdd = [S("storage.0.fsx.storage_type", "HDD"), S("storage.0.fsx.deployment_type", "PERSISTENT_1")]
    assert [p for _, p in _fired(docs, "fsx-drive-cache", hdd, monkeypatch, base="p5")] == ["storage.0.fsx.storage_type"]
    cached = [*hdd, S("storage.0.fsx.drive_cache_type", "READ")]
    assert _fired(docs, "fsx-drive-cache", cached, monkeypatch, base="p5") == []


def test_doca_ofed_os_is_an_on_prem_rule(docs, monkeypatch):
    # kills `provider != "onprem"` -> `>` ("aws" sorts before "onprem"): AWS nodes get EFA, never DOCA-OFED from the
    # bare-metal roles, so no DOCA repository is looked up for an AWS target
    assert _fired(docs, "doca-ofed-os", [S("software.doca_ofed", "3.2.1")], monkeypatch, base="p5") == []


def test_passthrough_gpudirect_rdma_only_for_a_value_the_user_set_true(docs, monkeypatch):
    # kills `fabric not in (...) or enabled is not True` -> `and`: an InfiniBand cluster that switched GPUDirect RDMA
    # off has nothing to warn about on its passthrough group
    ops = [S("node_groups.1.sandbox", "kata")]
    assert [p for _, p in _fired(docs, "passthrough-gpudirect-rdma", ops, monkeypatch, base="dgx")] == [
        "node_groups.1.sandbox"]
    off = [*ops, S("network.gpudirect_rdma", {"enabled": False})]
    assert _fired(docs, "passthrough-gpudirect-rdma", off, monkeypatch, base="dgx") == []


def test_cuda_driver_minor_reads_a_three_part_cuda_release(docs, monkeypatch):
    # kills `len(cuda) < 2` -> `!= 2`: CUDA 12.4.1 is a 12.4 toolkit (driver 550 or newer for full compatibility,
    # https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/), so driver branch 535 runs it in minor-version mode
    ops = [S("software", {"driver_branch": "535", "cuda": "12.4.1"})]
    assert [p for _, p in _fired(docs, "cuda-driver-minor", ops, monkeypatch, base="p5")] == ["software.driver_branch"]


def test_an_hca_list_naming_port_1_leaves_out_port_2(docs, monkeypatch):
    # NCCL_IB_HCA `mlx5_0:1` selects port 1 of mlx5_0 only (NCCL env docs: `<device>:<port>`), so a NIC declared on
    # port 2 is left out (kills `p == port` -> `<=`)
    hca = "=" + ",".join(f"mlx5_{k}:1" for k in range(8))
    ops = [S("network.nccl.env", {"NCCL_IB_HCA": hca})]
    assert _fired(docs, "nccl-env-disables-fabric", ops, monkeypatch, base="dgx") == []
    moved = [*ops, S("node_groups.1.hardware.nics.0.port", 2)]
    assert [p for _, p in _fired(docs, "nccl-env-disables-fabric", moved, monkeypatch, base="dgx")] == [
        "network.nccl.env.NCCL_IB_HCA"]


def test_every_o2ib_lustre_file_system_is_named_when_ipoib_is_off(docs, monkeypatch):
    # two Lustre file systems reached over o2ib and IPoIB off: each gets its finding (kills `continue` -> `break` after the first one)
    second = {"kind": "lustre", "name": "scratch", "mount": "/scratch2",
              "server": {"mgs_nids": ["192.168.100.3@o2ib"], "fsname": "scratch", "throughput_mb_s": 20000}}
    ops = [S("network.infiniband.ipoib.enabled", False), A("storage", second)]
    fired = _fired(docs, "lustre-o2ib-ipoib", ops, monkeypatch, base="dgx")
    assert [p for _, p in fired] == ["network.infiniband.ipoib.enabled"] * 2


def test_shared_nvswitch_guest_size_falls_back_to_the_vm_size_then_the_host(docs, monkeypatch):
    # without `gpus_per_guest` a shared-nvswitch guest gets the VM's GPUs, else every GPU of the host (8: one of Fabric
    # Manager's partition sizes 1, 2, 4, 8), so neither blueprint is refused (kills `vm_gpus or hw.gpus` -> `and`)
    host = [S("node_groups.0.sandbox.nvswitch", {"mode": "shared-nvswitch"})]
    assert _found(docs, "nvswitch-passthrough-plan", "kata", host, monkeypatch) == []
    vm = [S("node_groups.0.sandbox.runtime", "vm"), *host,
          S("node_groups.0.sandbox.vm", {"vcpus": 32, "memory_gib": 256, "gpus_per_vm": 2})]
    assert _found(docs, "nvswitch-passthrough-plan", "kata", vm, monkeypatch) == []
    odd = [*vm[:2], S("node_groups.0.sandbox.vm", {"vcpus": 32, "memory_gib": 256, "gpus_per_vm": 3})]
    ((path, msg, _),) = _found(docs, "nvswitch-passthrough-plan", "kata", odd, monkeypatch)
    assert path == "node_groups.0.sandbox.nvswitch" and " get 3 GPU(s)" in msg


def test_vpc_layout_checks_the_control_plane_subnet_only_for_eks(docs, monkeypatch):
    # EKS needs a second-AZ subnet for its control plane (`control_plane_subnet_cidr_block`); only a Kubernetes
    # cluster creates it, so an overlap is refused there and ignored on another AWS blueprint (kills `kind ==
    # "kubernetes"` -> `>`: "none" and "slurm" sort after "kubernetes")
    vpc = {"cidr_block": "10.0.0.0/16", "subnet_cidr_block": "10.0.0.0/20", "control_plane_subnet_cidr_block": "10.0.8.0/24"}
    assert [p for _, p in _fired(docs, "vpc-cidr-layout", [S("target.vpc", vpc)], monkeypatch, base="eks")] == [
        "target.vpc.control_plane_subnet_cidr_block"]
    for base in ("p5", "p5s"):
        assert _fired(docs, "vpc-cidr-layout", [S("target.vpc", vpc)], monkeypatch, base=base) == [], base
    disjoint = {**vpc, "control_plane_subnet_cidr_block": "10.0.24.0/24"}  # the public (NAT) subnet is 10.0.16.0/24
    assert _fired(docs, "vpc-cidr-layout", [S("target.vpc", disjoint)], monkeypatch, base="eks") == []


def test_fsx_user_provisioned_metadata_needs_iops(docs, monkeypatch):
    # FSx for Lustre's USER_PROVISIONED metadata configuration takes the IOPS it provisions; AUTOMATIC takes none
    # (AWS API: FileSystemLustreMetadataConfiguration). Kills `mode == "USER_PROVISIONED"` -> `>`.
    fsx = "storage.0.fsx.metadata"
    missing = _found(docs, "fsx-metadata-iops", "p5", [S(fsx, {"mode": "USER_PROVISIONED"})], monkeypatch)
    assert [(p, fix) for p, _, fix in missing] == [
        ("storage.0.fsx.metadata.mode", "add `iops:` (1500, 3000, 6000 or a multiple of 12000 up to 192000)")]
    assert _found(docs, "fsx-metadata-iops", "p5", [S(fsx, {"mode": "AUTOMATIC"})], monkeypatch) == []


def test_sandbox_allow_list_fix_on_a_host_driver_outside_every_listed_branch(docs, monkeypatch):
    # gVisor's nvproxy uses the host's driver: with none of its listed drivers in the blueprint's branch the fix still
    # names a driver_version only (the host driver is the blueprint's own choice of branch), while Kata's guest
    # driver outside every listed branch says to move the branch too (kills `driver_on == "host"` -> `>`)
    cat = catalog()
    gv = cat.runtime_releases("gvisor")[0]
    listed = {d.split(".")[0] for d in gv.drivers}
    other = next(b for b in sorted(cat.extras["driver_releases"]["branches"], key=str) if str(b) not in listed
                 and cat.driver_releases(str(b)))
    other = str(other)
    release = cat.driver_releases(other)[0]
    ops = [S("node_groups.1.sandbox", "gvisor"), S("software.gvisor", gv.release),
           S("software.driver_branch", other), S("software.driver_version", release)]
    (_, msg, fix), = _found(docs, "sandbox-driver-allow-list", "dgx", ops, monkeypatch)
    assert gv.driver_on == "host" and "on the host" in msg
    assert fix == f"set `software.driver_version` to one of {', '.join(gv.drivers)}"
