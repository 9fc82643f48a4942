"""The judge never passes what it cannot know, and diagnoses from the whole log.

The field inputs (tests/fixtures/field) are judged through the CLI exactly as their README says;
every kind of fault also gets generated variants: other error spellings, launcher prefixes, node
counts, GPUs, fio options and targets, NIC layouts. Contexts are built as a user builds them."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.catalog import catalog
from clusterforge.cli import main
from validate.expectations import context_from_blueprint, context_from_flags
from validate.judge import judge_file, judge_text
from validate.parsers.fio import parse_size
from validate.signatures import SIGNATURES, diagnose, troubleshooting_markdown
from validate.suites.fio import FIO_BOUND_MARGIN, fio_expectations
from validate.suites.nccl import BUSBW_BOUND_MARGIN, expected_busbw

from ..conftest import EXAMPLES, REPO
from ..golden_files import assert_golden


def _cli(capsys, *argv) -> tuple[int, dict, str]:
    rc = main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, (json.loads(out) if out.strip() else {}), err


def _field(fixtures_dir: Path, name: str) -> Path:
    return fixtures_dir / "field" / name


# ---- the field inputs, as the README runs them ---------------------------------------------


def test_fabric_manager_not_running_fails_naming_it(fixtures_dir, capsys):
    rc, doc, _ = _cli(capsys, "judge", _field(fixtures_dir, "05-fm-not-running-h100.log"),
                      "--nodes", "1", "--gpus-per-node", "8", "--gpu", "h100-sxm")
    (res,) = doc["results"]
    assert rc == 1 and res["verdict"] == "fail"
    assert "system not yet initialized" in res["reasons"][0] and "Fabric Manager service is not running" in res["reasons"][0]
    assert "docs/troubleshooting.md#fabric-manager-not-running" in res["reasons"][0]


def test_docker_shm_fails_naming_dev_shm_not_the_network(fixtures_dir, capsys):
    rc, doc, _ = _cli(capsys, "judge", _field(fixtures_dir, "06-docker-shm-unhandled.log"),
                      "--nodes", "1", "--gpus-per-node", "4")
    (res,) = doc["results"]
    assert rc == 1 and res["verdict"] == "fail"
    assert "/dev/shm is too small" in res["reasons"][0] and "--shm-size" in res["reasons"][0]
    assert not re.search(r"RDMA|memlock|NIC|network", res["reasons"][0])


def test_fio_buffered_read_is_invalid(fixtures_dir, capsys):
    rc, doc, _ = _cli(capsys, "judge", _field(fixtures_dir, "10-fio-buffered-read.json"),
                      "--blueprint", _field(fixtures_dir, "10-fio-buffered-bp.yaml"), "--target", "/scratch")
    (res,) = doc["results"]
    assert rc == 3 and res["verdict"] == "invalid"
    assert "page cache" in res["reasons"][0] and "no direct=1" in res["reasons"][0]
    # judged with fio's defaults: rw=read, bs=4 KiB
    assert res["metrics"]["rw"] == "read" and res["metrics"]["block_size_bytes"] == 4096
    # 4551 MB/s from one 3000 MB/s drive is also above what the drive can do
    assert any("above what" in x and "3000 MB/s" in x for x in res["reasons"])


@pytest.mark.parametrize("argv,needle", [
    (["--target", "/nope"], "--target /nope is not a storage mount the blueprint declares; declared: /scratch"),
    (["--target", "/scratch/sub"], "is not a storage mount the blueprint declares"),
])
def test_undeclared_target_is_a_usage_error(fixtures_dir, capsys, argv, needle):
    rc = main(["judge", str(_field(fixtures_dir, "10-fio-buffered-read.json")),
               "--blueprint", str(_field(fixtures_dir, "10-fio-buffered-bp.yaml")), *argv])
    _, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    # the blueprint's own warnings may precede it; the usage error is one line
    lines = [ln for ln in err.splitlines() if ln.strip() and "warning:" not in ln]
    assert len(lines) == 1 and needle in lines[0]


def test_target_without_any_declared_storage_is_a_usage_error(fixtures_dir, capsys):
    rc = main(["judge", str(_field(fixtures_dir, "10-fio-buffered-read.json")), "--target", "/scratch"])
    _, err = capsys.readouterr()
    assert rc == 2 and "no storage is declared" in err and len(err.strip().splitlines()) == 1
    # with --instance-type, the instance store is the declared storage and takes the target as its mount
    ctx = context_from_flags(instance_type="p4d.24xlarge", target="/local")
    assert [s.mount for s in fio_expectations(ctx).storage] == ["/local"]


# ---- the whole kind: crash signatures -------------------------------------------------------

HEAD = ("# nThread 1 nGpus {g} minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0\n#\n# Using devices\n")


def _devices(nodes: int, g: int, name: str) -> str:
    return "".join(f"#  Rank {n * g + i:2d} Group  0 Pid {100 + i} on node-{n + 1} device {i} [0x{i:02x}] {name}\n"
                   for n in range(nodes) for i in range(g))


def _prefix(text: str, style: str) -> str:
    if style == "none":
        return text
    out = []
    for ln in text.splitlines():
        r = 1 if ("Test " in ln or "NCCL WARN" in ln) else 0  # rank 0 prints the header, rank 1 fails
        tag = {"srun": f"{r}: ", "mpi": f"[1,{r}]<stdout>:", "bracket": f"[{r}] "}[style]
        out.append(tag + ln)
    return "\n".join(out) + "\n"


FM_LINES = [
    "node-{n}: Test CUDA failure common.cu:{line} 'system not yet initialized'",
    "node-{n}: Test CUDA failure common.cu:{line} 'cudaErrorSystemNotReady'",
    ("node-{n}:77:77 [0] init.cc:{line} NCCL WARN Cuda failure 'system not yet initialized'\n"
    "node-{n}: Test NCCL failure common.cu:{line} 'unhandled cuda error'"),
]


@pytest.mark.parametrize("gpu,name", [("h100-sxm", "NVIDIA H100 80GB HBM3"), ("a100-80gb-sxm", "NVIDIA A100-SXM4-80GB"),
                                      ("b200", "NVIDIA B200"), ("h200-sxm", "NVIDIA H200")])
@pytest.mark.parametrize("style", ["none", "srun", "mpi"])
def test_fabric_manager_kind(gpu, name, style):
    rnd = random.Random(f"{gpu}{style}")
    for template in FM_LINES:
        nodes = rnd.choice([1, 2])
        body = HEAD.format(g=8) + (_devices(nodes, 8, name) if rnd.random() < 0.5 else "")
        body += template.format(n=nodes, line=rnd.randint(100, 1400)) + "\n"
        ctx = context_from_flags(nodes=nodes, gpus_per_node=8, gpu=gpu)
        (r,) = judge_text(_prefix(body, style), ctx, source="fm.log", kind="nccl")
        assert r.verdict == "fail", (template, r.reasons)
        assert "Fabric Manager" in r.reasons[0] and "#fabric-manager-not-running" in r.reasons[0]


SHM_WARNINGS = [
    "node-1:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes",
    ("node-1:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-KWf "
    "(size 5967872)"),
    "node-1:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
]


@pytest.mark.parametrize("g", [2, 4, 8])
@pytest.mark.parametrize("style", ["none", "srun", "mpi", "bracket"])
def test_unhandled_system_error_on_one_node_is_dev_shm(g, style):
    for name in ("GeForce RTX 2080 Ti", "NVIDIA A100-SXM4-40GB", "Tesla T4"):
        for final in ("Test NCCL failure common.cu:777 'unhandled system error'",
                      "Test NCCL failure common.cu:958 'unhandled system error (run with NCCL_DEBUG=INFO for details)'"):
            body = HEAD.format(g=g) + _devices(1, g, name) + f"node-1: {final}\n"
            (r,) = judge_text(_prefix(body, style), context_from_flags(nodes=1, gpus_per_node=g), source="x.log", kind="nccl")
            assert r.verdict == "fail" and "/dev/shm" in r.reasons[0], r.reasons
            assert not re.search(r"RDMA|memlock|NIC", r.reasons[0])
            # with NCCL's own warning lines in the log the specific signature wins
            for w in SHM_WARNINGS:
                (r,) = judge_text(_prefix(body.replace("node-1: Test", w + "\nnode-1: Test"), style),
                                  context_from_flags(nodes=1, gpus_per_node=g), source="x.log", kind="nccl")
                assert "#shm-too-small" in r.reasons[0], r.reasons


def test_unhandled_system_error_across_nodes_names_the_network_and_shm():
    body = HEAD.format(g=8) + _devices(2, 8, "NVIDIA H100 80GB HBM3") + "node-2: Test NCCL failure common.cu:777 " \
        "'unhandled system error'\n"
    (r,) = judge_text(body, context_from_flags(instance_type="p5.48xlarge", nodes=2), source="x.log", kind="nccl")
    assert r.verdict == "fail" and "#system-error-multi-node" in r.reasons[0]
    assert "RDMA" in r.reasons[0] and "/dev/shm" in r.reasons[0]


def test_every_signature_matches_its_example_and_network_causes_stay_off_single_nodes():
    for sig in SIGNATURES:
        if not sig.pattern:
            continue
        assert sig.regex.search(sig.example), sig.id
        multi = sig.nodes != "single"
        fabric = sig.fabrics[0] if sig.fabrics else None
        assert sig.id in [s.id for s, _ in diagnose([sig.example], multi=multi, fabric=fabric)], sig.id
        single = [s for s, _ in diagnose([sig.example], multi=False, fabric=fabric)]
        assert all(s.scope != "network" for s in single), (sig.id, [s.id for s in single])


@pytest.mark.parametrize("sig", [s for s in SIGNATURES if s.pattern and s.scope == "network" and s.nodes == "any"],
                         ids=lambda s: s.id)
def test_network_signature_in_a_crash_log(sig):
    fabric = sig.fabrics[0] if sig.fabrics else "infiniband"
    body = (HEAD.format(g=8) + "{devices}" + f"node-1:5:5 [0] NCCL INFO {sig.example}\n"
            "node-1: Test NCCL failure common.cu:1000 'internal error'\n")
    multi = body.format(devices=_devices(2, 8, "NVIDIA H100 80GB HBM3"))
    ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="h100-sxm", fabric=fabric, nic_gbps=400, nics_per_node=8)
    (r,) = judge_text(multi, ctx, source="x.log", kind="nccl")
    assert r.verdict == "fail" and f"#{sig.id}" in r.reasons[0], r.reasons
    single = body.format(devices=_devices(1, 8, "NVIDIA H100 80GB HBM3"))
    (r,) = judge_text(single, context_from_flags(nodes=1, gpus_per_node=8, gpu="h100-sxm", fabric=fabric),
                      source="x.log", kind="nccl")
    assert r.verdict == "fail" and f"#{sig.id}" not in " ".join(r.reasons)


def test_troubleshooting_page_matches_the_table():
    page = troubleshooting_markdown()
    assert_golden({"troubleshooting.md": page}, REPO / "docs", complete=False)
    for sig in SIGNATURES:
        assert f"\n## {sig.id}\n" in page
    # causes never cite internal numbers
    assert not re.search(r"bug-\d+|field failure", page)


# ---- never pass what it cannot know: the network -------------------------------------------


@pytest.mark.parametrize("name,flags", [
    ("nccl-09.txt", {}), ("nccl-09.txt", {"gpu": "a100-40gb-sxm"}), ("nccl-01.txt", {"gpu": "a100-80gb-sxm"}),
    ("nccl-02.txt", {"nodes": 2, "gpus_per_node": 8}), ("nccl-09.txt", {"nodes": 2, "fabric": "roce"}),
    ("nccl-02.txt", {"gpus_per_node": 8, "gpu": "h100-sxm"}), ("nccl-01.txt", {}),
])
def test_multi_node_without_a_network_gets_no_bandwidth_verdict(fixtures_dir, name, flags):
    # nccl-01/02 are excerpts without 'Using devices': 16 ranks from the table, nodes only from the flags
    (r,) = judge_file(fixtures_dir / "nccl-tests" / name, context_from_flags(**flags))
    assert r.verdict == "warn" and "no bandwidth verdict" in r.reasons[0] and "#network-unknown" in r.reasons[0]
    assert r.expected.get("busbw_gbps") is None and r.expected.get("ratio") is None


def test_multi_node_blueprint_without_nic_rate_is_not_judged_by_nvlink(fixtures_dir, tmp_path):
    bp = tmp_path / "ib.yaml"
    bp.write_text((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    ctx = context_from_blueprint(load_blueprint(bp).blueprint)
    ctx = type(ctx)(**{**ctx.__dict__, "nic_gbps": None, "nics_per_node": None})
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-02.txt", ctx)
    assert r.verdict == "warn" and "no bandwidth verdict" in r.reasons[0]


# ---- never pass what it cannot know: the GPU ------------------------------------------------

LOG_GPUS = {"nccl-04.txt": "a100-40gb-sxm", "nccl-05.txt": "a100-40gb-sxm", "nccl-07.txt": "a100-40gb-sxm",
            "nccl-09.txt": "a100-40gb-sxm"}
"""The public logs that name their GPUs (nccl-01 and nccl-02 are excerpts without 'Using devices' lines)."""


@pytest.mark.parametrize("name", sorted(LOG_GPUS))
def test_a_log_from_another_gpu_is_invalid(fixtures_dir, name):
    for declared in ("h100-sxm", "a100-40gb-sxm", "a100-80gb-sxm", "l40s", "b200", "h200-sxm"):
        ctx = context_from_flags(gpu=declared, nodes=2 if name == "nccl-09.txt" else 1,
                                 fabric="roce", nic_gbps=400, nics_per_node=8)
        (r,) = judge_file(fixtures_dir / "nccl-tests" / name, ctx)
        if declared == LOG_GPUS[name]:
            assert "not this hardware" not in " ".join(r.reasons)
        else:
            assert r.verdict == "invalid" and "not this hardware" in r.reasons[0], (declared, r.reasons)


def test_unknown_gpu_name_against_a_declared_one_is_invalid():
    body = HEAD.format(g=4) + _devices(1, 4, "GeForce RTX 2080 Ti") + \
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n" \
        "   134217728      33554432     float     sum      -1   9000.0   14.91   22.37      0   9000.0   14.91   22.37      0\n"
    (r,) = judge_text(body, context_from_flags(gpu="h100-sxm", nodes=1), source="x.log", kind="nccl")
    assert r.verdict == "invalid" and "not this hardware" in r.reasons[0]


# ---- never pass what it cannot know: the physical bound -------------------------------------


def _scale(text: str, f: float) -> str:
    out = []
    for ln in text.splitlines():
        m = re.match(r"^(\d+: )?(\s*\d+\s+\d+\s+[a-z]\w*\s+.*)$", ln)
        toks = ln[len(m.group(1) or ""):].split() if m else []
        if not m or len(toks) < 10:
            out.append(ln)
            continue
        for i in (-7, -6, -3, -2):
            toks[i] = f"{float(toks[i]) * f:.2f}"
        out.append((m.group(1) or "") + "  ".join(toks))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name,flags,bound", [
    ("nccl-04.txt", {"gpu": "a100-40gb-sxm", "nodes": 1}, 300.0),                  # NVLink 3, no NVLS: L
    ("nccl-02.txt", {"instance_type": "p5.48xlarge", "nodes": 2}, 750.0),          # B x (n-1)/(k-1) = 50 x 15
    ("nccl-01.txt", {"instance_type": "p4de.24xlarge", "nodes": 2}, 93.75),        # 6.25 x 15
    ("nccl-09.txt", {"gpu": "a100-40gb-sxm", "fabric": "roce", "nic_gbps": 100, "nics_per_node": 16, "nodes": 2}, 300.0),
])
def test_above_the_physical_bound_is_invalid(fixtures_dir, name, flags, bound):
    text = (fixtures_dir / "nccl-tests" / name).read_text()
    ctx = context_from_flags(**flags)
    (r,) = judge_text(text, ctx, source=name, kind="nccl")
    assert r.verdict == "pass" and r.expected["upper_gbps"] == pytest.approx(bound)
    peak = r.metrics["peak_busbw_gbps"]
    below = bound * BUSBW_BOUND_MARGIN * 0.98 / peak
    above = bound * BUSBW_BOUND_MARGIN * 1.03 / peak
    (r,) = judge_text(_scale(text, above), ctx, source=name, kind="nccl")
    assert r.verdict == "invalid" and "physical upper bound" in r.reasons[0]
    (r,) = judge_text(_scale(text, below), ctx, source=name, kind="nccl")
    assert r.verdict != "invalid"


def test_published_measurements_pass_against_the_algorithm_model():
    """The expectation model reproduces published healthy runs: 2 nodes use the tree, 4 nodes the ring."""
    cat = catalog()
    ref = cat.reference_benchmarks["nccl_all_reduce_busbw_gbytes_s"]
    cases = [("p5_2node_16gpu_efa", "p5.48xlarge", 2, "tree"), ("p4de_2node_16gpu_efa", "p4de.24xlarge", 2, "tree"),
             ("p5en_4node_32gpu_efa", "p5en.48xlarge", 4, "ring"), ("p6_b200_4node_32gpu_efa", "p6-b200.48xlarge", 4, "ring")]
    for key, it, k, algo in cases:
        ctx = context_from_flags(instance_type=it, nodes=k)
        e = expected_busbw(ctx, collective="all_reduce", ranks=8 * k, nodes=k, gpu_key=ctx.gpu_model)
        got = float(ref[key]["busbw"])
        assert e.algorithm == algo, key
        assert got / e.busbw_gbps >= ctx.thresholds["nccl"].warn_ratio, (key, got, e.busbw_gbps)
        assert got <= e.upper_gbps, (key, got, e.upper_gbps)


# ---- NCCL INFO lines: transports and NICs ---------------------------------------------------


def _with_info(text: str, lines: list[str]) -> str:
    return text.replace("# Using devices", "\n".join(lines) + "\n# Using devices", 1)


IB4 = {"nodes": 2, "gpus_per_node": 8, "gpu": "a100-40gb-sxm", "fabric": "infiniband", "nic_gbps": 400, "nics_per_node": 4}
USING4 = "node-{h}:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:10.0.0.{h}<0>"


def _channels(used: list[int], transport: str = "IB", gdr: bool = True) -> list[str]:
    out = []
    for h in (1, 2):
        for c in range(8):
            nic = used[c % len(used)]
            out.append(f"node-{h}:1:{c} [{c}] NCCL INFO Channel {c:02d}/0 : {c}[{c}] -> {c + 8}[{c}] [send] via "
                       f"NET/{transport}/{nic}" + ("/GDRDMA" if gdr else ""))
    return out


@pytest.mark.parametrize("used", [[0], [0, 1], [0, 1, 2], [3], [0, 1, 2, 3]])
def test_nics_used_against_the_declared_ones(fixtures_dir, used):
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(),
                      [USING4.format(h=1), USING4.format(h=2), *_channels(used)])
    (r,) = judge_text(text, context_from_flags(**IB4), source="x.log", kind="nccl")
    if len(used) < 4:
        assert r.verdict == "warn" and f"{len(used)} of 4 NICs used" in r.reasons[0] and "#nics-unused" in r.reasons[0]
    else:
        assert r.verdict == "pass", r.reasons
    assert r.metrics["nics_used"]["node-1"] == sorted(set(used))


def test_fewer_nics_listed_than_declared(fixtures_dir):
    using = "node-{h}:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.{h}<0>"
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(),
                      [using.format(h=1), using.format(h=2), *_channels([0])])
    (r,) = judge_text(text, context_from_flags(**IB4), source="x.log", kind="nccl")
    assert r.verdict == "warn" and "NCCL saw 1 of the 4 declared NICs (mlx5_0)" in r.reasons[0]


@pytest.mark.parametrize("fabric", ["infiniband", "roce", "efa"])
def test_socket_channels_on_an_rdma_fabric_fail(fixtures_dir, fabric):
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(), _channels([0], "Socket", gdr=False))
    (r,) = judge_text(text, context_from_flags(**{**IB4, "fabric": fabric}), source="x.log", kind="nccl")
    assert r.verdict == "fail" and "via NET/Socket" in r.reasons[0] and "#socket-on-rdma" in r.reasons[0]


def test_gdr_missing_on_one_node_warns(fixtures_dir):
    lines = [ln if "node-1" in ln else ln.replace("/GDRDMA", "") for ln in _channels([0, 1, 2, 3])]
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(),
                      [USING4.format(h=1), USING4.format(h=2), *lines])
    (r,) = judge_text(text, context_from_flags(**IB4), source="x.log", kind="nccl")
    assert r.verdict == "warn" and "GPUDirect RDMA not used on node-2" in r.reasons[0]
    # NCCL decides GPUDirect RDMA per GPU and NIC pair by their PCIe distance (NCCL_NET_GDR_LEVEL): a node whose
    # channels use it on some pairs has it working, and is not named
    mixed = [ln.replace("/GDRDMA", "") if "node-2" in ln and " [0] " in ln else ln for ln in _channels([0, 1, 2, 3])]
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(),
                      [USING4.format(h=1), USING4.format(h=2), *mixed])
    (r,) = judge_text(text, context_from_flags(**IB4), source="x.log", kind="nccl")
    assert r.verdict == "pass" and not any("GPUDirect RDMA" in x for x in r.reasons), r.reasons


def test_p2p_through_shared_memory_on_an_nvlink_node_warns(fixtures_dir):
    shm = [f"node-1:1:{c} [{c}] NCCL INFO Channel {c:02d}/0 : {c}[{c}] -> {(c + 1) % 8}[{(c + 1) % 8}] via SHM/direct/direct"
           for c in range(8)]
    text = _with_info((fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text(), shm)
    (r,) = judge_text(text, context_from_flags(gpu="a100-40gb-sxm", nodes=1), source="x.log", kind="nccl")
    assert r.verdict == "warn" and "via SHM" in r.reasons[0] and "#p2p-through-host" in r.reasons[0]


def test_low_network_bandwidth_without_info_lines_names_every_cause(fixtures_dir):
    text = _scale((fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text(), 0.6)
    (r,) = judge_text(text, context_from_flags(**IB4), source="x.log", kind="nccl")
    assert r.verdict == "warn" and "Possible causes (the log has no NCCL INFO channel lines" in r.reasons[0]
    assert "GPUDirect" in r.reasons[0] and "NCCL_DEBUG=INFO" in r.reasons[0]
    # a single node never gets a network cause
    text = _scale((fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text(), 0.6)
    (r,) = judge_text(text, context_from_flags(gpu="a100-40gb-sxm", nodes=1), source="x.log", kind="nccl")
    assert r.verdict == "warn" and not re.search(r"GPUDirect RDMA|NIC|network", r.reasons[0])


# ---- parsers through the judge: interleaved tags, excerpts, cliffs --------------------------


@pytest.mark.parametrize("style", ["mpi", "srun", "bracket"])
def test_interleaved_launcher_output_judges_like_the_clean_log(fixtures_dir, style):
    clean = (fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text()
    ctx = context_from_flags(gpu="a100-40gb-sxm", fabric="roce", nic_gbps=100, nics_per_node=16)
    (want,) = judge_text(clean, ctx, source="x.log", kind="nccl")
    tag = {"mpi": "[1,{r}]<stdout>:", "srun": "{r}: ", "bracket": "[{r}] "}[style]
    rnd = random.Random(style)
    out = []
    for ln in clean.splitlines():
        if re.match(r"^\s*\d+\s+\d+\s+float", ln) and rnd.random() < 0.5:
            cut = rnd.choice([m.start() for m in re.finditer(r"\s\S", ln)][1:])
            info = f"node-2:4{rnd.randint(0, 9)}:1 [1] NCCL INFO comm 0x5{rnd.randint(0, 9)} rank 9 nranks 16 cudaDev 1 - Init COMPLETE"
            out.append(tag.format(r=0) + ln[:cut] + tag.format(r=1) + info)
            out.append(tag.format(r=0) + ln[cut:])
        else:
            out.append(tag.format(r=0) + ln)
    (got,) = judge_text("\n".join(out) + "\n", ctx, source="x.log", kind="nccl")
    assert got.series == want.series and got.verdict == want.verdict
    assert got.metrics["peak_busbw_gbps"] == want.metrics["peak_busbw_gbps"] and got.metrics["ranks"] == 16


@pytest.mark.parametrize("name,flags", [
    ("nccl-01.txt", {"instance_type": "p4de.24xlarge", "nodes": 2}),
    ("nccl-02.txt", {"instance_type": "p5.48xlarge", "nodes": 2}),
    ("nccl-09.txt", {"gpu": "a100-40gb-sxm", "fabric": "roce", "nic_gbps": 100, "nics_per_node": 16, "nodes": 2}),
    ("nccl-04.txt", {"gpu": "a100-40gb-sxm", "nodes": 1}),
])
def test_an_excerpt_without_header_is_judged_with_kind_nccl(fixtures_dir, tmp_path, capsys, name, flags):
    rows = [re.sub(r"^\d+: ", "", ln) for ln in (fixtures_dir / "nccl-tests" / name).read_text().splitlines()]
    rows = [ln for ln in rows if re.match(r"^\s*\d+\s+\d+\s+float", ln)]
    rnd = random.Random(name)
    start = rnd.randint(0, 5)
    p = tmp_path / "excerpt.txt"
    p.write_text("\n".join(rows[start:]) + "\n")
    (full,) = judge_file(fixtures_dir / "nccl-tests" / name, context_from_flags(**flags))
    argv = ["judge", str(p), "--kind", "nccl"]
    for k, v in flags.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    _rc, doc, _ = _cli(capsys, *argv)
    (res,) = doc["results"]
    assert res["metrics"]["collective"] == "all_reduce" and res["metrics"]["ranks"] == full.metrics["ranks"]
    assert res["verdict"] == full.verdict and res["metrics"]["peak_busbw_gbps"] == full.metrics["peak_busbw_gbps"]


@pytest.mark.parametrize("start", [2**27, 2**28, 2**29, 2**30])
@pytest.mark.parametrize("depth", [0.3, 0.6])
def test_a_cliff_is_reported_with_the_size_where_it_starts(fixtures_dir, start, depth):
    text = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    out = []
    for ln in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+\d+\s+float", ln)
        if m and int(m.group(1)) >= start:
            toks = ln.split()
            for i in (5, 6, 9, 10):
                toks[i] = f"{float(toks[i]) * (1 - depth):.2f}"
            ln = "  ".join(toks)
        out.append(ln)
    (r,) = judge_text("\n".join(out), context_from_flags(gpu="a100-40gb-sxm", nodes=1), source="x.log", kind="nccl")
    from validate.judge import fmt_bytes

    cliffs = [x for x in r.reasons if "cliff from" in x]
    assert cliffs and f"cliff from {fmt_bytes(start)}" in cliffs[0], r.reasons
    assert r.metrics["cliff_start_bytes"] == start and r.verdict in ("warn", "fail")


# ---- fio: the page cache, defaults, bounds, the client's share ------------------------------

NVME_BP = (Path(__file__).resolve().parents[1] / "fixtures" / "field" / "10-fio-buffered-bp.yaml")


def _fio_doc(fixtures_dir: Path, options: dict, read_bw: float) -> str:
    doc = json.loads(_field(fixtures_dir, "10-fio-buffered-read.json").read_text())
    job = doc["jobs"][0]
    job["job options"] = {"name": "T1", "filename": "/scratch/T1.dat", "ioengine": "libaio", **options}
    job["read"]["bw_bytes"] = int(read_bw)
    job["read"]["iops"] = read_bw / (parse_size(options.get("bs")) or 4096)
    # self-consistent (issue 29 kind 4): the I/O count of the job's block size
    job["read"]["total_ios"] = job["read"]["io_bytes"] // (parse_size(options.get("bs")) or 4096)
    return json.dumps(doc)


@pytest.mark.parametrize("options,buffered", [
    ({}, True), ({"direct": "0"}, True), ({"buffered": "1"}, True), ({"direct": "1", "buffered": "1"}, True),
    ({"direct": "1"}, False), ({"direct": "1", "buffered": "0"}, False),
])
@pytest.mark.parametrize("rw,bs", [(None, None), ("read", "1M"), ("randread", "4k"), ("write", "128k")])
def test_buffered_fio_is_invalid_against_an_expectation(fixtures_dir, options, buffered, rw, bs):
    ctx = context_from_flags(load_blueprint(NVME_BP).blueprint, target="/scratch")
    opts = dict(options)
    if rw:
        opts["rw"] = rw
    if bs:
        opts["bs"] = bs
    text = _fio_doc(fixtures_dir, opts, 2.5e9)  # below the drive's 3000 MB/s: only the options decide
    if rw == "write":
        d = json.loads(text)
        j = d["jobs"][0]
        j["write"], j["read"] = copy.deepcopy(j["read"]), copy.deepcopy(j["write"])
        text = json.dumps(d)
    (r,) = judge_text(text, ctx, source="fio.json", kind="fio")
    if buffered:
        assert r.verdict == "invalid" and "page cache" in r.reasons[0] and "#fio-page-cache" in r.reasons[0]
    else:
        assert r.verdict != "invalid", r.reasons
    assert r.metrics["rw"] == (rw or "read") and r.metrics["block_size_bytes"] == {None: 4096, "1M": 2**20, "4k": 4096,
                                                                                   "128k": 131072}[bs]
    # without any expectation the same job only records figures
    (r,) = judge_text(text, context_from_flags(), source="fio.json", kind="fio")
    assert r.verdict == "pass"


def test_fio_text_output_does_not_claim_buffered(fixtures_dir):
    (r,) = judge_file(fixtures_dir / "fio" / "fio-04.txt", context_from_flags(instance_type="p4d.24xlarge"))
    assert not any("page cache" in x for x in r.reasons)


@pytest.mark.parametrize("factor,verdict", [(0.9, "pass"), (1.2, "pass"), (1.3, "invalid"), (3.0, "invalid")])
def test_direct_io_above_the_drive_is_invalid(fixtures_dir, factor, verdict):
    ctx = context_from_flags(load_blueprint(NVME_BP).blueprint, target="/scratch")
    text = _fio_doc(fixtures_dir, {"direct": "1", "rw": "read", "bs": "1M"}, 3000e6 * factor)
    (r,) = judge_text(text, ctx, source="fio.json", kind="fio")
    assert r.verdict == verdict, r.reasons
    if verdict == "invalid":
        assert f"more than {FIO_BOUND_MARGIN - 1:.0%} over it" in r.reasons[0]


FSX_BP = """apiVersion: clusterforge/v1
kind: Blueprint
name: big-fsx
target: {{provider: aws, region: us-east-1, availability_zone: us-east-1a}}
node_groups:
  - name: gpu
    count: 2
    instance_type: {it}
network: {{fabric: efa, placement: cluster}}
storage:
  - kind: lustre
    name: shared
    mount: /fsx
    fsx: {{deployment_type: PERSISTENT_2, storage_capacity_gib: {gib}, throughput_per_tib_mbps: {per_tib}}}
"""


@pytest.mark.parametrize("it,gib,per_tib,expect", [
    ("p5.48xlarge", 2400, 250, 2400 / 1024 * 250),         # small file system: its total is below one client
    ("p5.48xlarge", 96000, 1000, 100 * 125),                # large: one client gets AWS's 100 Gbit/s without EFA
    ("p4d.24xlarge", 48000, 500, 100 * 125),
])
def test_fsx_expectation_is_one_clients_share(tmp_path, it, gib, per_tib, expect):
    p = tmp_path / "fsx.yaml"
    p.write_text(FSX_BP.format(it=it, gib=gib, per_tib=per_tib))
    ctx = context_from_blueprint(load_blueprint(p).blueprint)
    (fsx,) = [s for s in fio_expectations(ctx).storage if s.kind == "fsx-lustre"]
    assert fsx.read_mb_s == pytest.approx(expect) and fsx.write_mb_s == pytest.approx(expect)
    assert fsx.upper_read_mb_s is not None and fsx.upper_read_mb_s >= fsx.read_mb_s
    if expect == 100 * 125:
        assert "one client gets at most" in fsx.derivation


# ---- AMP: the GPU in the result is compared with the declared one ---------------------------


@pytest.mark.parametrize("declared,verdict", [("h100-sxm", "pass"), ("h100", "pass"), ("a100-40gb-sxm", "invalid"),
                                              ("b200", "invalid"), ("l40s", "invalid")])
def test_amp_result_from_another_gpu_is_invalid(declared, verdict):
    from .test_judge import AMP

    (r,) = judge_text(json.dumps(AMP), context_from_flags(gpu=declared), source="amp.json", kind="amp")
    assert r.verdict == verdict, r.reasons
    if verdict == "invalid":
        assert "not this hardware" in r.reasons[0] and "NVIDIA H100 80GB HBM3" in r.reasons[0]
