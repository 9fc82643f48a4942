"""The payloads really run here: gloo collectives in several processes, fio on a temp directory,
the AMP benchmark on a tiny GPT on CPU. Their outputs are checked against the formulas and read
back with the project's own parsers and judge."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from validate.payloads import collectives, fio_bench, nccl_tests
from validate.payloads.amp_bench import flops_per_token

REPO = Path(__file__).resolve().parents[2]
PAYLOADS = REPO / "validate" / "payloads"
ALL_COLLS = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce"]


def run_payload(name: str, *args: str, cwd: Path | None = None, timeout: float = 90,
                module: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", CLUSTERFORGE_DIE_WITH_PARENT="1")
    if module:
        argv = [sys.executable, "-m", f"validate.payloads.{name}", *args]
        cwd = cwd or REPO
    else:
        argv = [sys.executable, name, *args]
        env.pop("PYTHONPATH", None)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, check=False)


def table_rows(text: str) -> dict[str, list[list[str]]]:
    """{collective: [row fields]} from the benchmark's text (independent of the project parser)."""
    out: dict[str, list[list[str]]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# Collective test starting:"):
            current = line.split(":", 1)[1].strip().removesuffix("_perf")
            out[current] = []
        elif current and line.strip() and not line.startswith("#"):
            out[current].append(line.split())
    return out


# ---------------------------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coll,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_reduce", 16, 1.875),
    ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("alltoall", 2, 0.5),
    ("sendrecv", 8, 1.0), ("broadcast", 8, 1.0), ("reduce", 4, 1.0), ("all_reduce", 1, 0.0),
])
def test_bus_factor_matches_nccl_tests(coll: str, n: int, factor: float) -> None:
    assert collectives.bus_factor(coll, n) == pytest.approx(factor, abs=1e-12)


def test_count_and_size_follow_nccl_tests() -> None:
    # full count for all_reduce; per-rank count, 16-byte aligned, for all_gather/alltoall/reduce_scatter
    assert collectives.count_and_size("all_reduce", 1048576, 3, 4) == (262144, 1048576)
    assert collectives.count_and_size("all_gather", 1048576, 3, 4) == (87380, 87380 * 4 * 3)
    assert collectives.count_and_size("alltoall", 1024, 8, 2) == (64, 1024)
    assert collectives.count_and_size("reduce_scatter", 100, 8, 4) == (0, 0)
    assert collectives.algbw_gbps(1_000_000_000, 1e6) == pytest.approx(1.0)
    assert collectives.parse_size("256M") == 256 * 2**20 and collectives.parse_size("8") == 8
    assert collectives.size_sweep(1024, 4096, 2) == [1024, 2048, 4096]


def test_number_formatting_is_nccl_tests() -> None:
    assert [collectives.format_time_us(t) for t in (69.123, 111.74, 1468.24, 17286.4)] == \
        ["69.12", "111.7", "1468.2", "17286"]
    assert collectives.format_bw(419.494) == "419.49"
    assert collectives.format_bw(1715.44) == "1715.4"
    assert collectives.format_bw(43046.1) == "43046"
    row = collectives.format_row(268435456, 67108864, "float", "sum", -1,
                                 [(1119.8, 239.71, 419.49, 0), (1117.4, 240.24, 420.42, 0)])
    # same columns as nccl-tests src/common.cu (fixtures/nccl-02 line, column ends 12/26/36/44/52/61/69/77/84)
    assert row == ("   268435456      67108864     float     sum      -1   1119.8  239.71  419.49      0"
                   "   1117.4  240.24  420.42      0")


# ---------------------------------------------------------------------------------------------
# the collective benchmark, really run with gloo
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def all_collectives_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path_factory.mktemp("coll") / "out.txt"
    # up to 4 MiB: on a loaded machine gloo's bandwidth at 64 KiB can print as 0.00 GB/s, which the
    # judge rightly reads as "no bandwidth measured"
    p = run_payload("collectives", "--spawn", "3", "-o", ",".join(ALL_COLLS), "-b", "1K", "-e", "4M", "-f", "8",
                    "-n", "3", "-w", "1", "--output", str(out))
    return p, out.read_text() if out.exists() else ""


@pytest.mark.slow
def test_every_collective_runs_correct_with_nccl_tests_formulas(all_collectives_run) -> None:
    p, file_text = all_collectives_run
    assert p.returncode == 0, p.stderr
    assert file_text == p.stdout  # --output holds exactly what rank 0 printed
    rows = table_rows(p.stdout)
    assert sorted(rows) == sorted(ALL_COLLS)
    for coll, rs in rows.items():
        assert rs, coll
        bus = []
        for f in rs:
            size, count = int(f[0]), int(f[1])
            spec = collectives.COLLECTIVES[coll]
            assert f[2] == "float" and f[3] == spec.redop and int(f[4]) == spec.root
            if spec.per_rank_count:
                assert size == count * 4 * 3 and (count * 4) % 16 == 0
            else:
                assert size == count * 4
            for t, alg, b, wrong in (f[5:9], f[9:13]):
                assert wrong == "0", (coll, f)
                # algbw = size / time (GB/s = 1e9 B/s), busbw = algbw x factor, to print precision
                t_us = float(t)
                assert float(alg) == pytest.approx(size / t_us / 1e3, abs=0.006 + 0.001 * float(alg))
                exp_bus = size / t_us / 1e3 * collectives.bus_factor(coll, 3)
                assert float(b) == pytest.approx(exp_bus, abs=0.006 + 0.001 * exp_bus)
                bus.append(float(b))
        block = p.stdout.split(f"# Collective test starting: {coll}_perf", 1)[1]
        assert "# Out of bounds values : 0 OK" in block
        avg = float(block.split("# Avg bus bandwidth    :", 1)[1].split()[0])
        assert avg == pytest.approx(sum(bus) / len(bus), abs=0.006)
    assert p.stdout.count("#  Rank ") == 3 * len(ALL_COLLS)
    assert "device  0 [cpu] cpu (gloo)" in p.stdout


def test_project_parser_and_judge_read_the_benchmark(all_collectives_run, tmp_path: Path) -> None:
    from validate.expectations import JudgeContext
    from validate.judge import judge_file
    from validate.parsers.nccl import parse_nccl

    p, _ = all_collectives_run
    runs = parse_nccl(p.stdout, "out.txt")
    assert [r.collective for r in runs] == ALL_COLLS
    assert all(len(r.devices) == 3 and r.out_of_bounds == 0 for r in runs)
    raw = tmp_path / "nccl.txt"
    raw.write_text(p.stdout)
    results = judge_file(raw, JudgeContext(fabric="ethernet"), kind="nccl", label="t")
    assert [r.verdict for r in results] == ["pass"] * len(ALL_COLLS)
    assert all(r.metrics["ranks"] == 3 and r.metrics["wrong"] == 0 for r in results)


@pytest.mark.slow
def test_wrong_results_are_counted_and_fail(tmp_path: Path) -> None:
    """The testing hook --corrupt-rank R overwrites 3 output elements on rank R after each checked op."""
    from validate.expectations import JudgeContext
    from validate.judge import judge_file

    p = run_payload("collectives", "--spawn", "2", "-o", "all_reduce,alltoall", "-b", "1K", "-e", "16K", "-f", "4",
                    "-n", "1", "-w", "0", "--corrupt-rank", "1")
    assert p.returncode == 1  # like nccl-tests: wrong results make the process fail
    rows = table_rows(p.stdout)
    for coll in ("all_reduce", "alltoall"):
        assert len(rows[coll]) == 3
        for f in rows[coll]:
            assert f[8] == "3" and f[12] == "3", f  # out-of-place and in-place, 3 elements on one rank
        block = p.stdout.split(f"starting: {coll}_perf", 1)[1]
        # (sizes x placements) with a wrong element, summed over processes: 3 x 2 on rank 1
        assert "# Out of bounds values : 6 FAILED" in block
    raw = tmp_path / "bad.txt"
    raw.write_text(p.stdout)
    results = judge_file(raw, JudgeContext(fabric="ethernet"), kind="nccl")
    assert {r.verdict for r in results} == {"fail"}
    # -c 0: nothing is checked, #wrong prints N/A even with the hook on (the environment-variable
    # form of the hook is exercised through the CLI in test_runner)
    unchecked = run_payload("collectives", "--spawn", "2", "-o", "broadcast", "-b", "4K", "-e", "4K", "-n", "1",
                            "-w", "0", "-c", "0", "--corrupt-rank", "1")
    f = table_rows(unchecked.stdout)["broadcast"][0]
    assert unchecked.returncode == 0 and f[8] == "N/A" and f[12] == "N/A"


def test_standalone_copy_runs_under_torchrun(tmp_path: Path) -> None:
    """A copied file with no package around it, launched by torchrun (env:// rendezvous)."""
    shutil.copy(PAYLOADS / "collectives.py", tmp_path / "collectives.py")
    # the workers die with torchrun if the test kills it (documented launcher variable)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CLUSTERFORGE_DIE_WITH_PARENT="1")
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "collectives.py", "-o", "reduce_scatter", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2",
                        "-w", "1", "-d", "bfloat16"],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=90, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = table_rows(p.stdout)["reduce_scatter"]
    assert [f[2] for f in rows] == ["bfloat16", "bfloat16"] and all(f[8] == "0" for f in rows)
    assert p.stdout.count("#  Rank ") == 2


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    p = run_payload("collectives", "-o", "allreduce_typo", "--spawn", "2")
    assert p.returncode == 2 and "unknown collective(s) allreduce_typo" in p.stderr
    p = run_payload("collectives", "-o", "all_reduce")
    assert p.returncode == 2 and "no rank information" in p.stderr


# ---------------------------------------------------------------------------------------------
# nccl-tests wrapper
# ---------------------------------------------------------------------------------------------


def test_nccl_tests_wrapper_finds_runs_and_copies_the_binary_output(tmp_path: Path, fixtures_dir: Path) -> None:
    """The wrapper itself (finding, flags, output copy) with a stand-in binary that prints a real log."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fixture = fixtures_dir / "nccl-tests" / "nccl-09.txt"
    fake = bindir / "all_reduce_perf"
    fake.write_text(f'#!/bin/sh\necho "ARGS $*"\ncat {fixture}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out.txt"
    p = run_payload("nccl_tests", "--collective", "all_reduce", "--nccl-tests-dir", str(bindir), "-b", "8", "-e", "8G",
                    "--gpus", "8", "--output", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert text.splitlines()[0] == "ARGS -b 8 -e 8G -f 2 -n 20 -w 5 -c 1 -g 8"
    assert text.split("\n", 1)[1] == fixture.read_text()
    probe = run_payload("nccl_tests", "--collective", "all_reduce", "--nccl-tests-dir", str(bindir), "--probe")
    assert probe.returncode == 0 and probe.stdout.strip() == str(fake)
    missing = run_payload("nccl_tests", "--collective", "alltoall", "--nccl-tests-dir", str(bindir), "--probe")
    assert missing.returncode == 127 and "alltoall_perf not found" in missing.stderr
    cmd = nccl_tests.build_command("/opt/x/all_reduce_perf", ["-g", "1"], hosts=nccl_tests.parse_hosts("a:8,b:8"),
                                   environ={"NCCL_IB_HCA": "=mlx5_0:1", "HOME": "/root"})
    assert cmd[:5] == ["mpirun", "-np", "16", "-H", "a:8,b:8"]
    assert ["-x", "NCCL_IB_HCA"] == cmd[cmd.index("NCCL_IB_HCA") - 1: cmd.index("NCCL_IB_HCA") + 1]
    assert "HOME" not in cmd and cmd[-3:] == ["/opt/x/all_reduce_perf", "-g", "1"]


# ---------------------------------------------------------------------------------------------
# fio
# ---------------------------------------------------------------------------------------------


def test_fio_profiles_on_a_temp_directory(tmp_path: Path) -> None:
    from validate.parsers.fio import parse_fio

    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "fio.json"
    p = run_payload("fio_bench", "--target", str(target), "--size", "8M", "--runtime", "1", "--numjobs", "1",
                    "--iodepth", "4", "--output", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    meta = doc["clusterforge"]
    assert meta["error"] is None and meta["size_per_job_bytes"] == 8 * 2**20
    assert isinstance(meta["direct"], bool)
    assert [j["jobname"] for j in doc["jobs"]] == ["seq-write", "seq-read", "rand-read"]
    assert list(target.iterdir()) == []  # work files removed
    report = parse_fio(out.read_text())
    jobs = {j.name: j for j in report.jobs}
    assert jobs["seq-write"].write.bw_bytes_per_s > 0 and jobs["seq-read"].read.bw_bytes_per_s > 0
    assert jobs["rand-read"].read.iops > 0 and jobs["rand-read"].block_size == 4096
    assert jobs["seq-read"].block_size == 2**20


def test_fio_falls_back_to_buffered_io_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_direct(path, flags, *a, **k):  # a filesystem that refuses O_DIRECT (tmpfs before 6.6, some FUSE)
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", no_direct)
    assert fio_bench.supports_o_direct(str(tmp_path))[0] is False
    args = fio_bench.build_parser().parse_args(["--target", str(tmp_path), "--size", "4M", "--runtime", "1",
                                                "--numjobs", "1", "--iodepth", "1", "--profiles", "seq-write"])
    args.profiles = ["seq-write"]
    doc, rc = fio_bench.run(args)
    assert rc == 0
    meta = doc["clusterforge"]
    assert meta["direct"] is False and "--direct=0" in meta["command"]
    assert any("refuses O_DIRECT" in n for n in meta["notes"])
    assert list(tmp_path.iterdir()) == []


def test_fio_size_is_capped_by_free_space() -> None:
    size, note = fio_bench.size_per_job(4 * 2**30, 2**30, 4)
    assert size == 128 * 2**20 and "capped" in (note or "")
    assert fio_bench.size_per_job(64 * 2**20, 100 * 2**30, 1) == (64 * 2**20, None)
    with pytest.raises(ValueError, match="MiB free"):
        fio_bench.size_per_job(2**30, 3 * 2**20, 4)


def test_fio_work_files_removed_when_interrupted_or_failing(tmp_path: Path) -> None:
    out = tmp_path / "fio.json"
    target = tmp_path / "t"
    target.mkdir()
    proc = subprocess.Popen([sys.executable, str(PAYLOADS / "fio_bench.py"), "--target", str(target), "--size", "8M",
                             "--runtime", "30", "--numjobs", "1", "--iodepth", "1", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(target.glob(".clusterforge-fio-*/cf-fio*")):
        time.sleep(0.1)
    assert any(target.glob(".clusterforge-fio-*/cf-fio*")), "fio never started"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert list(target.iterdir()) == []
    assert "interrupted by SIGTERM" in json.loads(out.read_text())["clusterforge"]["error"]
    # fio failing without output: the error is in the document and nothing is left behind
    p = run_payload("fio_bench", "--target", str(target), "--size", "4M", "--runtime", "1", "--fio", "/bin/false",
                    "--output", str(out))
    assert p.returncode == 1 and "without JSON" in json.loads(out.read_text())["clusterforge"]["error"]
    assert list(target.iterdir()) == []
    p = run_payload("fio_bench", "--target", str(tmp_path / "missing"), "--output", str(out))
    assert p.returncode == 2 and "does not exist" in p.stderr


# ---------------------------------------------------------------------------------------------
# AMP
# ---------------------------------------------------------------------------------------------

AMP_KEYS = {"kind", "version", "device", "gpu_name", "gpu_count", "precision", "compile", "model", "batch_size",
            "steps", "tokens_per_s", "step_time_s", "model_tflops", "peak_tflops", "mfu", "peak_memory_bytes",
            "loss_start", "loss_end", "losses", "fp32_baseline", "software", "error"}
TINY = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "32", "--vocab", "256",
        "--batch-size", "4", "--steps", "6", "--warmup-steps", "2", "--device", "cpu"]


def test_amp_benchmark_schema_loss_and_mfu(tmp_path: Path) -> None:
    from validate.parsers.amp import parse_amp

    out = tmp_path / "amp.json"
    p = run_payload("amp_bench", *TINY, "--fp32-baseline", "--peak-tflops", "2.0", "--output", str(out))
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert set(d) == AMP_KEYS
    assert set(d["model"]) == {"layers", "hidden", "heads", "seq_len", "vocab", "parameters"}
    assert set(d["fp32_baseline"]) == {"tokens_per_s", "step_time_s", "loss_start", "loss_end"}
    import torch  # the versions the payload ran with, from torch itself (issue 26: validation records its stack)
    assert d["software"]["torch"] == torch.__version__ and d["software"]["cuda"] == torch.version.cuda
    assert d["software"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert d["kind"] == "amp" and d["version"] == 1 and d["device"] == "cpu" and d["gpu_name"] is None
    assert d["gpu_count"] == 0 and d["precision"] == "bf16" and d["compile"] is False and d["error"] is None
    assert d["steps"] == 6 and len(d["losses"]) == 8 and all(math.isfinite(x) for x in d["losses"])
    # a fixed batch repeated: the loss starts near ln(vocab) and really falls
    assert d["loss_start"] == pytest.approx(math.log(256), abs=0.5)
    assert d["loss_end"] < d["loss_start"] - 0.3
    assert d["fp32_baseline"]["loss_end"] < d["fp32_baseline"]["loss_start"]
    # N without position embedding, tied head: V*d + L*(12 d^2 + 13 d) + 2d (final LayerNorm)
    L, h, V, T = 2, 64, 256, 32
    n = V * h + L * (12 * h * h + 13 * h) + 2 * h
    assert d["model"]["parameters"] == n
    assert d["tokens_per_s"] == pytest.approx(4 * T / d["step_time_s"], rel=1e-9)
    assert d["model_tflops"] == pytest.approx(flops_per_token(n, L, h, T) * d["tokens_per_s"] / 1e12, rel=1e-9)
    assert flops_per_token(n, L, h, T) == 6 * n + 12 * L * h * T
    assert d["mfu"] == pytest.approx(d["model_tflops"] / 2.0) and d["peak_tflops"] == 2.0
    assert d["peak_memory_bytes"] > 0
    runs = parse_amp(out.read_text())
    assert len(runs) == 1


def test_amp_error_document_keeps_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "amp.json"
    p = run_payload("amp_bench", *TINY[:2], "--hidden", "66", "--heads", "4", "--steps", "2", "--device", "cpu",
                    "--output", str(out))
    assert p.returncode == 1 and "multiple of heads" in p.stderr
    d = json.loads(out.read_text())
    assert set(d) == AMP_KEYS and "hidden (66) must be a multiple of heads (4)" in d["error"]


def test_amp_compile_failure_falls_back_to_eager(tmp_path: Path) -> None:
    """No working C++ compiler for inductor: the run continues eagerly and reports compile false."""
    out = tmp_path / "amp.json"
    env = dict(os.environ, CXX="/bin/false", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "validate.payloads.amp_bench", *TINY, "--compile", "--output", str(out)],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert "torch.compile failed" in p.stderr and "running eager" in p.stderr
    d = json.loads(out.read_text())
    assert d["compile"] is False and d["error"] is None and d["loss_end"] < d["loss_start"]


def test_collectives_turn_on_nccl_init_and_net_debug_output(tmp_path):
    env: dict[str, str] = {}
    path = collectives.nccl_debug_env(env, str(tmp_path))
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    assert path and env["NCCL_DEBUG_FILE"] == path and path.startswith(str(tmp_path))
    # the user's own settings win, and their own debug file is not read back
    mine = {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/var/log/nccl.%h.%p"}
    assert collectives.nccl_debug_env(mine, str(tmp_path)) is None and mine["NCCL_DEBUG"] == "WARN"
    # what NCCL appends is read back incrementally, NCCL lines only
    Path(path).write_text("node-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\nunrelated\n")
    lines, off = collectives.read_debug_lines(path, 0)
    assert lines == ["node-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"]
    with open(path, "a") as f:
        f.write("node-1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n")
    lines, off2 = collectives.read_debug_lines(path, off)
    assert lines == ["node-1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"] and off2 > off
    assert collectives.read_debug_lines(str(tmp_path / "missing"), 5) == ([], 5)
