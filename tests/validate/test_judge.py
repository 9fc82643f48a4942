"""The judge: the fixture verdicts the issue requires, the failure signatures (wrong data, crash,
one rank, duplicated rank 0, socket speed on RDMA, collapse, cliff), expectations from the
catalog and blueprint (NVLink, NIC rate, NVMe RAID0, FSx, instance store, thresholds) and the
AMP checks. Contexts are built the way a user builds them: flags or a blueprint."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from blueprints import load_blueprint
from validate.expectations import (
    ContextError,
    JudgeContext,
    apply_overrides,
    context_from_blueprint,
    context_from_flags,
)
from validate.judge import JudgeResult, UnreadableInput, judge_file, judge_text, worst
from validate.suites.amp import mfu_floor
from validate.suites.fio import fio_expectations
from validate.suites.nccl import expected_busbw

from ..conftest import EXAMPLES

FLAGS = {
    "nccl-01.txt": {"instance_type": "p4de.24xlarge", "nodes": 2},
    "nccl-02.txt": {"instance_type": "p5.48xlarge", "nodes": 2},
    "nccl-04.txt": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-40GB"},
    "nccl-05.txt": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-40GB"},
    "nccl-07.txt": {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-40GB"},
    # OCI BM.GPU4.8 style: 2 x 8 A100-40GB, RoCE with 16 x 100 Gbit/s RDMA NICs per node
    "nccl-09.txt": {"nodes": 2, "gpus_per_node": 8, "gpu": "a100-40gb-sxm", "fabric": "roce", "nic_gbps": 100,
                    "nics_per_node": 16},
    "nccl-11.txt": {},
    "nccl-12.txt": {},
    "nccl-13.txt": {},
}
EXPECTED_VERDICT = {
    "nccl-01.txt": "pass", "nccl-02.txt": "pass", "nccl-04.txt": "pass", "nccl-05.txt": "pass",
    "nccl-07.txt": "pass", "nccl-09.txt": "pass", "nccl-11.txt": "fail", "nccl-12.txt": "fail",
    "nccl-13.txt": "invalid",
}


def _judge_nccl(fixtures_dir, name, **flags) -> JudgeResult:
    (r,) = judge_file(fixtures_dir / "nccl-tests" / name, context_from_flags(**(flags or FLAGS[name])))
    return r


@pytest.mark.parametrize("name", sorted(EXPECTED_VERDICT))
def test_fixture_verdicts(fixtures_dir, name):
    r = _judge_nccl(fixtures_dir, name)
    assert r.verdict == EXPECTED_VERDICT[name], (r.reasons, r.notes)
    assert r.kind == "nccl" and r.source.endswith(name)
    if r.verdict != "pass":
        assert r.reasons, "every non-pass verdict names its reason"
    else:
        assert r.reasons == []


def test_p4de_efa_against_the_nic_rate(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-01.txt")
    m, e = r.metrics, r.expected
    assert (m["collective"], m["ranks"], m["nodes"], m["gpu_model"]) == ("all_reduce", 16, 2, "a100-80gb-sxm")
    assert m["peak_busbw_gbps"] == 78.33 and m["size_at_peak_bytes"] == 2**31 and m["wrong"] == 0
    assert m["avg_busbw_gbps"] is None  # no footer in this log
    # 400 Gbit/s / 8 / 8 GPUs = 6.25 GB/s per GPU; 2 nodes: tree 0.65 x 2(n-1)/n x 8 x 6.25 = 60.9 GB/s
    # (the ring would give 0.8 x 8 x 6.25 = 40); NVLink (240) is not the bound
    assert e["basis"] == "network" and e["algorithm"] == "tree"
    assert e["busbw_gbps"] == pytest.approx(0.65 * 30 / 16 * 50, abs=1e-3)
    # the physical bound: B x (n-1)/(k-1) = 6.25 x 15 = 93.75 GB/s
    assert e["upper_gbps"] == pytest.approx(93.75)
    assert m["per_gpu_network_gbytes_s"] == pytest.approx(78.33 / 15, rel=1e-3)  # 5.2 GB/s of 6.25


def test_p5_two_nodes_expect_the_tree(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-02.txt")
    # 3200 Gbit/s / 8 / 8 = 50 GB/s per GPU; tree 0.65 x 30/16 x 8 x 50 = 487.5 GB/s; NVLS intra-node 675
    assert r.expected["basis"] == "network" and r.expected["algorithm"] == "tree"
    assert r.expected["busbw_gbps"] == pytest.approx(487.5)
    assert r.expected["intra_node_gbps"] == pytest.approx(0.8 * 450 * 30 / 16)
    assert r.expected["ratio"] == pytest.approx(487.26 / 487.5, abs=1e-4) and r.verdict == "pass"


def test_single_node_a100_unchecked_noted(fixtures_dir):
    for name, coll in (("nccl-04.txt", "all_reduce"), ("nccl-05.txt", "all_gather"), ("nccl-07.txt", "alltoall")):
        r = _judge_nccl(fixtures_dir, name)
        assert r.metrics["collective"] == coll and r.metrics["wrong"] is None
        assert r.expected["basis"] == "nvlink" and r.expected["busbw_gbps"] == pytest.approx(240.0)
        assert any("correctness not checked" in n for n in r.notes)
        assert 0.9 < r.expected["ratio"] < 1.0


def test_roce_dip_at_512mib_is_noted_only(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-09.txt")
    dips = [n for n in r.notes if "dips" in n]
    assert len(dips) == 1 and "512 MiB" in dips[0] and "out-of-place" in dips[0] and "recovers at 1 GiB" in dips[0]


def test_wrong_results_fail_names_size_and_cause(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-11.txt")
    assert r.metrics["wrong"] == 128 and r.metrics["out_of_bounds"] == 4
    assert "1 MiB" in r.reasons[0] and "Out of bounds values: 4 FAILED" in r.reasons[0] and "Xid" in r.reasons[0]


def test_crash_quotes_the_error_and_cause(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-12.txt")
    assert len(r.reasons) == 1
    assert "CUDA-capable device(s) is/are busy or unavailable" in r.reasons[0]
    assert "node-1, node-2" in r.reasons[0] and "Exclusive-Process" in r.reasons[0]


def test_one_rank_is_invalid(fixtures_dir):
    r = _judge_nccl(fixtures_dir, "nccl-13.txt")
    assert "one rank" in r.reasons[0] and "busbw is 0" in r.reasons[0]


def test_duplicated_rank0_is_invalid(fixtures_dir):
    one = (fixtures_dir / "nccl-tests" / "nccl-13.txt").read_text()
    text = "".join(f"{i}: {ln}\n" for i in range(4) for ln in one.splitlines())
    results = judge_text(text, JudgeContext(), source="a2a.log", kind="nccl")
    assert results and all(r.verdict == "invalid" and "duplicated rank 0" in r.reasons[0] for r in results)
    assert "MPI=1" in results[0].reasons[0]


def test_a_log_from_other_gpus_is_invalid_not_judged_with_their_figures(fixtures_dir):
    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint
    # the log says A100; the flag and the blueprint say H100: not this hardware
    ctx = apply_overrides(context_from_blueprint(bp), gpu="h100-sxm", nodes=1)
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", ctx)
    assert r.verdict == "invalid" and "not this hardware" in r.reasons[0] and "A100-SXM4-40GB" in r.reasons[0]
    assert "--gpu declares h100-sxm" in r.reasons[0] and r.expected == {}
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", context_from_blueprint(bp))
    assert r.verdict == "invalid" and "blueprint p5-train declares h100-sxm" in r.reasons[0]
    # the same GPU under another name (nvidia-smi name vs catalog key) is the same hardware
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", context_from_flags(gpu="a100-40gb", nodes=1))
    assert r.verdict == "pass"


# ---- synthetic variants of real logs ------------------------------------------------------


def _scale(text: str, factor_for_size) -> str:
    """Scale algbw/busbw of nccl-tests rows (real log text) by factor_for_size(size); the last eight
    fields of a row are time, algbw, busbw, #wrong for out-of-place then in-place."""
    out = []
    for ln in text.splitlines():
        m = re.match(r"^(\d+: )?\s*(\d+)\s+\d+\s+[a-z]", ln)
        if not m:
            out.append(ln)
            continue
        f = factor_for_size(int(m.group(2)))
        toks = ln[len(m.group(1) or ""):].split()
        for i in (-7, -6, -3, -2):
            toks[i] = f"{float(toks[i]) * f:.2f}"
        out.append((m.group(1) or "") + "  ".join(toks))
    return "\n".join(out) + "\n"


def test_socket_speed_on_efa_fails_with_the_ofi_cause(fixtures_dir):
    text = _scale((fixtures_dir / "nccl-tests" / "nccl-02.txt").read_text(), lambda s: 0.006)  # 487 -> 2.9 GB/s
    (r,) = judge_text(text, context_from_flags(instance_type="p5.48xlarge", nodes=2), source="x.log", kind="nccl")
    assert r.verdict == "fail"
    assert "socket speed on an RDMA fabric" in r.reasons[0]
    assert "NCCL is not using the EFA provider: check the OFI plugin path" in r.reasons[0]


def test_socket_transport_in_nccl_info_fails_even_at_good_bandwidth(fixtures_dir):
    text = (fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text().replace(
        "#  Rank  0 Group", "node-1:43:120 [0] NCCL INFO Using network Socket\n#  Rank  0 Group", 1)
    (r,) = judge_text(text, context_from_flags(**FLAGS["nccl-09.txt"]), source="x.log", kind="nccl")
    assert r.verdict == "fail" and "NCCL used TCP sockets on an RoCE cluster" in r.reasons[0]
    assert "NCCL_IB_GID_INDEX" in r.reasons[0]


def test_sustained_collapse_warns_and_halving_fails(fixtures_dir):
    base = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    ctx = context_from_flags(**FLAGS["nccl-04.txt"])
    warn = _scale(base, lambda s: 0.7 if s >= 2**31 else 1.0)
    (r,) = judge_text(warn, ctx, source="x.log", kind="nccl")
    assert r.verdict == "warn" and any("cliff from 2 GiB" in x and "collapses" in x for x in r.reasons)
    assert r.metrics["cliff_start_bytes"] == 2**31
    fail = _scale(base, lambda s: 0.3 if s >= 2**31 else 1.0)
    (r,) = judge_text(fail, ctx, source="x.log", kind="nccl")
    assert r.verdict == "fail" and any("does not recover" in x for x in r.reasons)


def test_mid_size_cliff_warns(fixtures_dir):
    base = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    text = _scale(base, lambda s: 0.5 if s in (2**26, 2**27, 2**28) else 1.0)
    (r,) = judge_text(text, context_from_flags(**FLAGS["nccl-04.txt"]), source="x.log", kind="nccl")
    assert r.verdict == "warn" and any("mid-size cliff" in x and "recovers at 512 MiB" in x for x in r.reasons)


def test_far_below_nvlink_fails_with_fabric_manager_hint(fixtures_dir):
    text = _scale((fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text(), lambda s: 0.3)
    (r,) = judge_text(text, context_from_flags(**FLAGS["nccl-04.txt"]), source="x.log", kind="nccl")
    assert r.verdict == "fail" and "Fabric Manager" in r.reasons[0] and "= 29% of the expected 240" in r.reasons[0]


def test_cpu_gloo_run_passes_with_a_note():
    text = """# clusterforge torch.distributed collective benchmark version 1 (nccl-tests table format) torch 2.13.0 backend gloo
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0
# Using devices
#  Rank  0 Group  0 Pid  1 on  ws device  0 [cpu] cpu (gloo)
#  Rank  1 Group  0 Pid  2 on  ws device  1 [cpu] cpu (gloo)
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1   100.00    0.01    0.01      0   110.00    0.01    0.01      0
        2048           512     float     sum      -1   150.00    0.01    0.01      0   140.00    0.01    0.01      0
        4096          1024     float     sum      -1   900.00    0.00    0.00      0   900.00    0.00    0.00      0
        8192          2048     float     sum      -1   950.00    0.01    0.01      0   960.00    0.01    0.01      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0075
# Collective test concluded: all_reduce_perf
"""
    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint  # even against a GPU blueprint
    (r,) = judge_text(text, context_from_blueprint(bp), source="allreduce.txt", kind="nccl")
    assert r.verdict == "pass" and any("CPU measurement" in n for n in r.notes)
    assert r.expected == {}
    # the 4 KiB dip is summarised, without GPU/fabric causes
    assert any("CPU curve is irregular (2 dip(s)" in n for n in r.notes) and not any("PFC" in n for n in r.notes)


def test_crash_with_partial_table_and_truncation(fixtures_dir):
    lines = (fixtures_dir / "nccl-tests" / "nccl-11.txt").read_text().splitlines()
    cut = [ln for ln in lines if not ln.strip().startswith(("33554432", "67108864", "134217728", "# Out", "# Avg",
                                                             "# Collective test concluded", ".."))]
    cut = [ln.replace("      96", "       0").replace("      32", "       0") for ln in cut]
    (r,) = judge_text("\n".join(cut), JudgeContext(), source="x.log", kind="nccl")
    assert r.verdict == "warn" and "stopped at 16 MiB of 128 MiB" in r.reasons[0]
    crash = "node-2: Test NCCL failure common.cu:1000 'remote process exited or there was a network error'"
    (r,) = judge_text("\n".join([*cut, crash]), JudgeContext(), source="x.log", kind="nccl")
    assert r.verdict == "fail" and "remote process exited" in r.reasons[0] and "another rank died" in r.reasons[0]


def test_unknown_content_is_invalid_with_kind_and_a_usage_error_without(tmp_path):
    p = tmp_path / "deploy.yaml"
    p.write_text("apiVersion: apps/v1\nkind: Deployment\n")
    for kind in ("nccl", "fio", "amp"):
        (r,) = judge_file(p, JudgeContext(), kind=kind)
        assert r.verdict == "invalid" and r.kind == kind
    with pytest.raises(UnreadableInput, match="not a nccl-tests, fio or AMP"):
        judge_file(p, JudgeContext())
    (tmp_path / "bin").write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(UnreadableInput, match="binary"):
        judge_file(tmp_path / "bin", JudgeContext())
    with pytest.raises(UnreadableInput, match="directory"):
        judge_file(tmp_path, JudgeContext())
    (r,) = judge_text("", JudgeContext(), source="e.txt")
    assert r.kind == "unknown" and r.verdict == "invalid"


def test_payload_that_died_silently_fails():
    text = ("# clusterforge: the payload exited 1 without output; last lines of its log:\n"
            "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")
    for kind in ("fio", "amp"):
        (r,) = judge_text(text, JudgeContext(), source="raw.txt", kind=kind)
        assert r.verdict == "fail" and "No module named 'torch'" in r.reasons[0]
    (r,) = judge_text(text, JudgeContext(), source="raw.txt", kind="nccl")
    assert r.verdict == "fail" and "No module named 'torch'" in r.reasons[0]


# ---- expectations ---------------------------------------------------------------------------


def test_expectations_from_example_blueprints():
    ib = context_from_blueprint(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint)
    assert (ib.nodes, ib.gpus_per_node, ib.gpu_model, ib.fabric, ib.nic_gbps, ib.nics_per_node) == (
        4, 8, "h100-sxm", "infiniband", 400, 8)
    # 4 DGX H100 on 8 x NDR: 4 nodes, so the ring: 0.8 x 8 GPUs x 50 GB/s = 320 GB/s (below NVLink's 360)
    e = expected_busbw(ib, collective="all_reduce", ranks=32, nodes=4, gpu_key="h100-sxm")
    assert e.inter_gbps == pytest.approx(0.8 * 8 * 50) and e.basis == "network" and e.algorithm == "ring"
    # bound: SHARP on InfiniBand may reduce in the switch: 2(n-1)/n x 8 x 50
    assert e.upper_gbps == pytest.approx(62 / 32 * 400)
    assert e.upper_derivation == "network 1.938 x g x B = 775.0 GB/s (SHARP)"  # as the report prints it
    a2a = expected_busbw(ib, collective="alltoall", ranks=32, nodes=4, gpu_key="h100-sxm")
    assert a2a.basis == "network" and a2a.busbw_gbps == pytest.approx(50 * 0.8 * 31 / 24)
    assert a2a.upper_gbps == pytest.approx(50 * 31 / 24)  # line rate B x (n-1)/(n-g), no efficiency factor
    roce = context_from_blueprint(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint)
    intra = expected_busbw(roce, collective="all_reduce", ranks=4, nodes=1, gpu_key="l40s")
    assert intra.basis == "pcie" and intra.busbw_gbps == pytest.approx(31 * 0.8)
    (scratch,) = [s for s in fio_expectations(roce).storage if s.mount == "/scratch"]
    assert scratch.kind == "nvme-raid0" and scratch.read_mb_s == 2 * 6800 and scratch.write_mb_s == 2 * 5600
    p5 = context_from_blueprint(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint)
    fsx = next(s for s in fio_expectations(p5).storage if s.kind == "fsx-lustre")
    assert fsx.read_mb_s == pytest.approx(2400 / 1024 * 250)
    store = next(s for s in fio_expectations(p5).storage if s.kind == "instance-store")
    assert store.read_iops_4k == 4_400_000 and store.read_mb_s is None


def test_blueprint_thresholds_override(tmp_path, fixtures_dir):
    text = (EXAMPLES / "onprem-l40s-roce.yaml").read_text() + (
        "  nccl: {thresholds: {min_busbw_gbps: 300, warn_ratio: 0.9, fail_ratio: 0.6}}\n"
        "  amp: {thresholds: {min_mfu: 0.5}}\n"
        "  fio: {thresholds: {min_write_mb_s: 100}}\n")
    p = tmp_path / "bp.yaml"
    p.write_text(text.replace("validation:\n  suites: [nccl, fio, amp]\n", "validation:\n  suites: [nccl, fio, amp]\n"))
    ctx = context_from_blueprint(load_blueprint(p).blueprint)
    assert ctx.thresholds["nccl"].min_busbw_gbps == 300 and ctx.thresholds["amp"].min_mfu == 0.5
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", apply_overrides(ctx, nodes=1, gpu="a100-40gb-sxm"))
    assert r.expected["basis"] == "threshold" and r.expected["busbw_gbps"] == 300 and r.verdict == "warn"
    (f,) = judge_file(fixtures_dir / "fio" / "fio-02.json", apply_overrides(ctx, target="/scratch"))
    assert f.expected["write_mb_s"] == 100 and f.verdict == "pass"


def test_context_errors_are_usage_errors():
    with pytest.raises(ContextError, match="unknown GPU model 'h999'"):
        context_from_flags(gpu="h999")
    with pytest.raises(ContextError, match="unknown instance type"):
        context_from_flags(instance_type="p9.huge")
    with pytest.raises(ContextError, match="no node group 'nope'"):
        context_from_blueprint(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "nope")
    with pytest.raises(ContextError, match="nodes must be a positive integer"):
        context_from_flags(nodes=0)


def test_mfu_floor_scales_with_matmul_efficiency():
    h100, _, src = mfu_floor("h100-sxm")
    a100, _, _ = mfu_floor("a100-40gb-sxm")
    assert h100 == pytest.approx(0.30) and a100 == pytest.approx(0.30 * 0.869 / 0.803) and "torchtitan" in src
    assert mfu_floor("l40s")[0] == pytest.approx(0.30)


# ---- fio -----------------------------------------------------------------------------------

NVME8 = """apiVersion: clusterforge/v1
kind: Blueprint
name: nvme-box
target: {provider: onprem, os: ubuntu-22.04}
node_groups:
  - name: gpu
    hosts: [{name: n1, address: 10.0.0.1}]
    hardware: {gpu: h100-sxm:8, nvme: {count: 8, model: samsung-pm1743}}
    local_nvme: {raid: raid0, mount: /scratch}
network: {fabric: ethernet}
"""


@pytest.fixture()
def nvme8_ctx(tmp_path) -> JudgeContext:
    p = tmp_path / "nvme8.yaml"
    p.write_text(NVME8)
    return context_from_blueprint(load_blueprint(p).blueprint)


def test_fio04_verify_failure_fails(fixtures_dir):
    (r,) = judge_file(fixtures_dir / "fio" / "fio-04.txt", JudgeContext())
    assert r.kind == "fio" and r.verdict == "fail" and r.metrics["verify_failures"] == 1
    assert "sha256 mismatch" in r.reasons[0] and "offset 668565504" in r.reasons[0] and "smart-log" in r.reasons[0]


def test_fio02_fails_against_an_8_drive_nvme_raid0(fixtures_dir, nvme8_ctx):
    (r,) = judge_file(fixtures_dir / "fio" / "fio-02.json", apply_overrides(nvme8_ctx, target="/scratch"))
    assert r.verdict == "fail"
    assert r.metrics["write_bw_bytes_per_s"] == 192599430 and r.metrics["read_bw_bytes_per_s"] == 0
    assert r.expected["write_mb_s"] == 8 * 6600 and r.expected["target"] == "/scratch"
    assert "/proc/mdstat" in r.reasons[0] and "expect 8 members" in r.reasons[0]
    # without any context the same file only records figures
    (r,) = judge_file(fixtures_dir / "fio" / "fio-02.json", JudgeContext())
    assert r.verdict == "pass" and r.expected == {}


def test_fio_path_picks_the_target_and_rate_passes(fixtures_dir, nvme8_ctx):
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    job = doc["jobs"][0]
    job["job options"] = {"name": "seq", "rw": "write", "bs": "1M", "directory": "/scratch/cf-fio", "direct": "1"}
    # a self-consistent edit (issue 29 kind 4): 1 MiB per I/O, IOPS x 1 MiB = the bandwidth
    job["write"]["total_ios"] = job["write"]["io_bytes"] // 2**20
    job["write"]["bw_bytes"], job["write"]["iops"] = 40_000_000_000, 40_000_000_000 / 2**20
    (r,) = judge_text(json.dumps(doc), nvme8_ctx, source="fio.json", kind="fio")
    assert r.expected["target"] == "/scratch" and r.verdict == "pass" and r.expected["ratio"] == pytest.approx(40e3 / 52.8e3, rel=1e-3)
    job["write"]["bw_bytes"], job["write"]["iops"] = 30_000_000_000, 30_000_000_000 / 2**20  # 57%: warn
    (r,) = judge_text(json.dumps(doc), nvme8_ctx, source="fio.json", kind="fio")
    assert r.verdict == "warn"


def test_fio_iops_against_the_instance_store(fixtures_dir):
    doc = json.loads((fixtures_dir / "fio" / "fio-01.json").read_text())
    doc["global options"].update({"rw": "randread"})
    doc["jobs"][0]["job options"]["rw"] = "randread"
    doc["jobs"][0]["write"].update({"io_bytes": 0, "bw_bytes": 0, "iops": 0, "total_ios": 0})
    ctx = context_from_flags(instance_type="p4d.24xlarge")
    (r,) = judge_text(json.dumps(doc), ctx, source="fio.json", kind="fio")
    # 85k IOPS against the 2,000,000 4 KiB random-read IOPS AWS publishes for p4d's 8 drives
    assert r.verdict == "fail" and r.expected["read_iops"] == 2_000_000 and "IOPS" in r.reasons[0]


def test_fio_job_error_fails(fixtures_dir):
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    doc["jobs"][0]["error"] = 28
    (r,) = judge_text(json.dumps(doc), JudgeContext(), source="fio.json", kind="fio")
    assert r.verdict == "fail" and "error 28" in r.reasons[0] and "No space left" in r.reasons[0]


# ---- AMP -----------------------------------------------------------------------------------

AMP = {
    "kind": "amp", "version": 1, "device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
    "precision": "bf16", "compile": True,
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 50304, "parameters": 1313873920},
    "batch_size": 8, "steps": 30, "tokens_per_s": 63900.0, "step_time_s": 0.2564, "model_tflops": 580.0,
    "peak_tflops": 989.0, "mfu": 0.586, "peak_memory_bytes": 54 * 10**9, "loss_start": 10.9, "loss_end": 7.2,
    "losses": [10.9, 9.1, 8.0, 7.2],
    "fp32_baseline": {"tokens_per_s": 20000.0, "step_time_s": 0.82, "loss_start": 10.9, "loss_end": 7.3},
    "error": None,
}


def _amp(ctx: JudgeContext | None = None, **changes) -> JudgeResult:
    (r,) = judge_text(json.dumps({**AMP, **changes}), ctx or JudgeContext(), source="amp.json", kind="amp")
    return r


def test_amp_healthy_h100_passes():
    r = _amp()
    assert r.verdict == "pass", r.reasons
    assert r.metrics["mfu"] == pytest.approx(0.586) and r.metrics["speedup_vs_fp32"] == pytest.approx(63900 / 20000)
    assert r.expected["mfu_floor"] == pytest.approx(0.30) and r.series["losses"] == AMP["losses"]


def test_amp_mfu_below_floor_warns_and_far_below_fails():
    assert _amp(model_tflops=250.0, mfu=250 / 989).verdict == "warn"
    r = _amp(model_tflops=100.0, mfu=100 / 989)
    assert r.verdict == "fail" and "below 0.5 of the floor (validation.amp.thresholds.mfu_fail_fraction)" in r.reasons[0] and "throttling" in r.reasons[0]


def test_amp_mfu_from_catalog_when_payload_has_no_peak():
    r = _amp(peak_tflops=None, mfu=None, gpu_name="NVIDIA A100-SXM4-40GB", model_tflops=156.0)
    assert r.metrics["gpu_model"] == "a100-40gb-sxm" and r.metrics["mfu"] == pytest.approx(0.5)


def test_amp_loss_checks():
    r = _amp(losses=[10.9, 9.0, float("nan")], loss_end=float("nan"))
    assert r.verdict == "fail" and "not finite at step 2" in r.reasons[0]
    r = _amp(losses=[7.0, 8.0, 9.5], loss_start=7.0, loss_end=9.5)
    assert r.verdict == "fail" and "rose from 7 to 9.5" in r.reasons[0]
    r = _amp(losses=[7.0, 7.0], loss_start=7.0, loss_end=7.0)
    assert r.verdict == "warn" and "did not fall" in r.reasons[0]


def test_amp_speedup_checks():
    r = _amp(fp32_baseline={"tokens_per_s": 70000.0, "step_time_s": 0.23, "loss_start": 10.9, "loss_end": 7.3})
    assert r.verdict == "fail" and "slower than fp32" in r.reasons[0]
    r = _amp(fp32_baseline={"tokens_per_s": 60000.0, "step_time_s": 0.27, "loss_start": 10.9, "loss_end": 7.3})
    assert r.verdict == "warn" and "barely faster" in r.reasons[0]


def test_amp_cpu_run_is_not_judged_on_speed():
    r = _amp(device="cpu", gpu_name=None, precision="bf16", peak_tflops=None, mfu=None, model_tflops=0.01,
             tokens_per_s=900.0, fp32_baseline={"tokens_per_s": 1200.0, "step_time_s": 1, "loss_start": 6.3,
                                                "loss_end": 6.1}, loss_start=6.3, loss_end=6.0, losses=[6.3, 6.0])
    assert r.verdict == "pass" and any("CPU run" in n for n in r.notes)


def test_amp_cpu_run_judged_for_a_given_gpu_is_invalid_not_a_pass():
    """Judged with ``--gpu h100`` a CPU run (900 tokens/s: a small fraction of any GPU's expectation) is not this
    hardware: invalid, never the plain pass of a CPU run judged as a CPU run (issue 29 kind 6)."""
    cpu = {"device": "cpu", "gpu_name": None, "precision": "bf16", "peak_tflops": None, "mfu": None,
           "model_tflops": 0.01, "tokens_per_s": 900.0, "fp32_baseline": None, "loss_start": 6.3, "loss_end": 6.0,
           "losses": [6.3, 6.0]}
    r = _amp(apply_overrides(JudgeContext(), gpu="h100"), **cpu)
    assert r.verdict == "invalid" and "ran on the CPU" in r.reasons[0] and "torch.version.cuda" in r.reasons[0]
    assert _amp(**cpu).verdict == "pass"  # nothing given: a CPU run is judged as one


def test_amp_error_fails_with_cause():
    r = _amp(error="RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", tokens_per_s=0.0, losses=[])
    assert r.verdict == "fail" and "out of memory" in r.reasons[0] and "batch_size" in r.reasons[0]


# ---- result plumbing ----------------------------------------------------------------------


def test_worst_and_json_round_trip(fixtures_dir):
    assert worst(["pass", "warn"]) == "warn" and worst(["warn", "invalid"]) == "invalid"
    assert worst(["invalid", "fail", "pass"]) == "fail" and worst([]) == "invalid"
    r = _judge_nccl(fixtures_dir, "nccl-09.txt")
    d = json.loads(json.dumps(r.to_json()))
    assert set(d) >= {"source", "kind", "verdict", "reasons", "metrics", "expected", "notes"}
    back = JudgeResult.from_json(d)
    assert back == r
    r2 = _amp(losses=[1.0, math.inf])
    assert r2.to_json()["series"]["losses"] == [1.0, None]  # JSON has no inf
    with pytest.raises(ValueError):
        JudgeResult.from_json({"source": "x", "kind": "nccl", "verdict": "great"})


def test_results_are_labelled_per_run(fixtures_dir, tmp_path):
    p = tmp_path / "two.log"
    p.write_text((fixtures_dir / "nccl-tests" / "nccl-11.txt").read_text()
                 + (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text())
    results = judge_file(p, JudgeContext(), label="nccl-allreduce")
    assert [r.label for r in results] == ["nccl-allreduce: all_reduce #1", "nccl-allreduce: all_reduce #2"]
    assert [r.verdict for r in results] == ["fail", "pass"]
    assert Path(results[0].source) == p


def test_fio_error_lines(fixtures_dir):
    err = "fio: pid=4242, err=5/file:io_u.c:1787, func=io_u error, error=Input/output error"
    (r,) = judge_text(err + "\n", JudgeContext(), source="fio.txt", kind="fio")
    assert r.verdict == "fail" and "Input/output error" in r.reasons[0]
    doc = (fixtures_dir / "fio" / "fio-02.json").read_text()
    (r,) = judge_text("fio: io_u error on file /scratch/x: Input/output error: write offset=0\n" + doc,
                      JudgeContext(), source="fio.json", kind="fio")
    assert r.verdict == "warn" and "alongside the results" in r.reasons[0]


def test_curve_thresholds_come_from_the_blueprint(fixtures_dir):
    """The collapse and cliff limits are the blueprint's `validation.nccl.thresholds`: the same
    result fails at the defaults and only warns when the blueprint allows a deeper collapse, and a
    mid-size cliff the defaults warn about is accepted with a larger `cliff_ratio`."""
    import dataclasses

    from blueprints.models import NcclThresholds

    base = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    ctx = context_from_flags(**FLAGS["nccl-04.txt"])
    collapse = _scale(base, lambda s: 0.3 if s >= 2**31 else 1.0)
    (r,) = judge_text(collapse, ctx, source="x.log", kind="nccl")
    assert r.verdict == "fail"
    lenient = dataclasses.replace(ctx, thresholds={**ctx.thresholds, "nccl": NcclThresholds(collapse_fail_ratio=0.8)})
    (r,) = judge_text(collapse, lenient, source="x.log", kind="nccl")
    assert r.verdict == "warn" and any("does not recover" in x for x in r.reasons)
    cliff = _scale(base, lambda s: 0.5 if s in (2**26, 2**27, 2**28) else 1.0)
    (r,) = judge_text(cliff, dataclasses.replace(ctx, thresholds={**ctx.thresholds, "nccl": NcclThresholds(cliff_ratio=0.6)}), source="x.log", kind="nccl")
    assert r.verdict == "pass" and not any("mid-size cliff" in x for x in r.reasons)


def test_nccl_thresholds_reach_the_judge_from_a_blueprint_file(tmp_path):
    """`validation.nccl.thresholds` written in a blueprint file is what the judge context carries."""
    text = (EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text()
    assert "\nvalidation:\n" in text
    text = text.replace("\nvalidation:\n", "\nvalidation:\n  nccl:\n    thresholds: {cliff_ratio: 0.4, socket_fallback_ratio: 0.1}\n", 1)
    path = tmp_path / "bp.yaml"
    path.write_text(text)
    from validate.expectations import context_from_blueprint

    ctx = context_from_blueprint(load_blueprint(path).blueprint)
    th = ctx.thresholds["nccl"]
    assert th.cliff_ratio == 0.4 and th.socket_fallback_ratio == 0.1 and th.dip_ratio == 0.05


@pytest.mark.parametrize("mount", ["/raid", "/lustre"])
def test_fio_job_on_exactly_the_mount_point_is_judged_against_that_target(fixtures_dir, tmp_path, mount):
    # `--filename=/raid`: the job's path is the mount itself, not a file below it; the DGX example has two storage
    # targets (the NVMe RAID0 at /raid, Lustre at /lustre) and the path alone picks one, without any --target
    ctx = context_from_blueprint(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint)
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    doc["jobs"][0]["job options"]["filename"] = mount
    p = tmp_path / "fio.json"
    p.write_text(json.dumps(doc))
    (r,) = judge_file(p, ctx)
    assert r.expected.get("target") == mount, (r.expected, r.notes)


def test_a_failed_fio_job_without_io_is_not_called_mixed(fixtures_dir, nvme8_ctx, tmp_path):
    # fio error 5 (EIO) before any I/O: the job fails with the error's name; it did neither reads nor writes, so it is
    # not a "mixed read/write job"
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    job = doc["jobs"][0]
    job["error"] = 5
    for d in ("read", "write"):
        for k in ("io_bytes", "io_kbytes", "bw_bytes", "bw", "iops", "total_ios"):
            if k in job[d]:
                job[d][k] = 0
    p = tmp_path / "fio.json"
    p.write_text(json.dumps(doc))
    (r,) = judge_file(p, apply_overrides(nvme8_ctx, target="/scratch"))
    assert r.verdict == "fail" and "ended with error 5 (Input/output error)" in r.reasons[0]
    assert not any("mixed read/write" in n for n in r.notes), r.notes


def test_a_sustained_collapse_exactly_at_the_fail_ratio_fails(fixtures_dir):
    # `collapse_fail_ratio` is "this deep or deeper: fail": a blueprint that sets it to the run's own depth fails the
    # run, and one a hair deeper only warns. The depth is the deepest placement's drop from its best busbw before the
    # cliff (every size from 2 GiB on at 0.3x) to its lowest busbw after it
    import dataclasses

    from blueprints.models import NcclThresholds
    from validate.parsers.nccl import parse_nccl

    text = _scale((fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text(), lambda s: 0.3 if s >= 2**31 else 1.0)
    (run,) = parse_nccl(text)
    depth = 0.0
    for place in ("out_of_place", "in_place"):
        pts = [(row.size_bytes, getattr(row, place).busbw_gbps) for row in run.rows]
        best = max(bw for size, bw in pts if size < 2**31)
        depth = max(depth, 1 - min(bw for size, bw in pts if size >= 2**31) / best)
    assert 0.5 < depth < 1
    base = context_from_flags(**FLAGS["nccl-04.txt"])
    for ratio, verdict in ((depth, "fail"), (math.nextafter(depth, 1), "warn")):
        th = NcclThresholds(collapse_warn_ratio=0.15, collapse_fail_ratio=ratio)
        ctx = dataclasses.replace(base, thresholds={**base.thresholds, "nccl": th})
        (r,) = judge_text(text, ctx, source="x.log", kind="nccl")
        assert r.verdict == verdict and any("does not recover" in x for x in r.reasons), (ratio, r.reasons)
