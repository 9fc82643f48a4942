"""`clusterforge validate` really runs on this machine: planning, the local launcher, judging as
tests finish, results.jsonl/run.json, resume after a kill, exit codes, and the reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blueprints import load_blueprint
from clusterforge.errors import UsageError
from validate.runner import (
    exit_code_for,
    plan_tests,
    prepare_output_dir,
    read_results_lines,
)
from validate.suites.amp import TINY_GPT, AmpParams
from validate.suites.fio import FioParams
from validate.suites.nccl import CPU_MAX_BYTES, NcclParams

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
CLI = [sys.executable, "-m", "clusterforge.cli"]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, COLUMNS="200")
    e.update(env or {})
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, env=e, timeout=timeout, check=False)


def small_blueprint(tmp_path: Path, *, suites: str = "[nccl, amp]", collectives: str = "[all_reduce, sendrecv]") -> Path:
    """The local-workstation example with a shorter collective list (each test still really runs)."""
    text = (EXAMPLES / "local-workstation.yaml").read_text()
    text = text.replace("suites: [node, nccl, fio, amp]", f"suites: {suites}")
    text = text.replace("collectives: [all_reduce, all_gather, alltoall]", f"collectives: {collectives}")
    text = text.replace("max_bytes: 4194304", "max_bytes: 65536")
    assert f"suites: {suites}" in text and f"collectives: {collectives}" in text
    bp = tmp_path / "bp.yaml"
    bp.write_text(text)
    return bp


@pytest.mark.slow
def test_validate_local_workstation_end_to_end(tmp_path: Path) -> None:
    """The README promise: fio on a temp directory, gloo collectives, AMP on a tiny GPT, a report."""
    out = tmp_path / "run"
    p = cli("validate", str(EXAMPLES / "local-workstation.yaml"), "--launcher", "local", "-o", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    ids = ["node", "nccl-all_reduce", "nccl-all_gather", "nccl-alltoall", "fio-tmp", "amp"]
    lines = read_results_lines(out / "results.jsonl")
    assert [d["test_id"] for d in lines] == ids[:4] + ["fio-tmp"] * 3 + ["amp"]
    verdicts = {d["label"]: d["verdict"] for d in lines}
    assert set(verdicts.values()) <= {"pass", "warn"}, verdicts  # a healthy CPU machine: nothing fails
    nccl = [d for d in lines if d["kind"] == "nccl"]
    assert all(d["metrics"]["ranks"] >= 2 and d["metrics"]["wrong"] == 0 for d in nccl)
    assert [d["metrics"]["collective"] for d in nccl] == ["all_reduce", "all_gather", "alltoall"]
    fio = [d for d in lines if d["kind"] == "fio"]
    assert all(any("temporary directory" in n for n in d["notes"]) for d in fio)
    amp = next(d for d in lines if d["kind"] == "amp")
    assert amp["metrics"]["tokens_per_s"] > 0
    # raw outputs, runnable launch scripts, manifest, reports
    for i in ids:
        raw = out / "raw" / f"{i}{'.txt' if i.startswith('nccl') else '.json'}"
        assert raw.stat().st_size > 0
        assert (out / "launch" / f"{i}.sh").read_text().startswith("#!/bin/sh")
    amp_doc = json.loads((out / "raw" / "amp.json").read_text())
    assert amp_doc["loss_end"] < amp_doc["loss_start"] and amp_doc["fp32_baseline"] is not None
    man = json.loads((out / "run.json").read_text())
    assert man["status"] == "complete" and man["launcher"] == "local" and man["blueprint"]["name"] == "workstation"
    assert all(t["status"] == "done" and t["returncode"] == 0 for t in man["tests"].values())
    assert any("temporary directory" in n for n in man["notes"])
    for name in ("report.html", "report.md", "report.json", "junit.xml"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "report.json").read_text())["verdict"] in ("pass", "warn")
    assert f"HTML report: {out / 'report.html'}" in p.stdout
    assert not list(Path("/tmp").glob(".clusterforge-fio-*"))  # fio cleaned up its work directory
    # a second run into the same directory is refused with the fix
    again = cli("validate", str(EXAMPLES / "local-workstation.yaml"), "-o", str(out))
    assert again.returncode == 2 and "use --resume" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr


def _payload_processes(marker: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            pids.append(int(d.name))
    return pids


@pytest.mark.slow
def test_killed_run_keeps_results_and_resume_completes_it(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path)
    out = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "validate", str(bp), "-o", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not read_results_lines(results):
        if proc.poll() is not None:
            pytest.fail(f"validate ended before it could be killed: {proc.communicate()}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # like an OOM kill or a lost SSH session: no clean-up runs
    proc.wait()
    first = read_results_lines(results)
    assert first and first[0]["test_id"] == "nccl-all_reduce"
    done_before = {d["test_id"] for d in first}
    raw0 = out / "raw" / "nccl-all_reduce.txt"
    mtime0, text0 = raw0.stat().st_mtime_ns, raw0.read_text()
    man = json.loads((out / "run.json").read_text())
    assert man["status"] == "running"  # nobody could write "interrupted": results.jsonl is the record
    # the payload processes of the interrupted test do not outlive the killed run
    deadline = time.monotonic() + 15
    while _payload_processes(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _payload_processes(str(out)) == []
    refused = cli("validate", str(bp), "-o", str(out))
    assert refused.returncode == 2 and "--resume" in refused.stderr
    p = cli("validate", str(bp), "-o", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"resuming: {len(done_before)} of 3 planned test(s) passed or warned before with the same parameters" in p.stdout
    lines = read_results_lines(results)
    ids = [d["test_id"] for d in lines]
    assert sorted(ids) == sorted(["nccl-all_reduce", "nccl-sendrecv", "amp"])  # each once
    assert lines[: len(first)] == first  # finished results kept as they were
    assert raw0.stat().st_mtime_ns == mtime0 and raw0.read_text() == text0  # not rerun
    man = json.loads((out / "run.json").read_text())
    assert man["status"] == "complete" and {t["status"] for t in man["tests"].values()} == {"done"}
    report = json.loads((out / "report.json").read_text())
    assert len(report["results"]) == 3
    # --force replaces the run
    forced = cli("validate", str(bp), "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(d["test_id"] for d in read_results_lines(results)) == ["amp", "nccl-all_reduce", "nccl-sendrecv"]
    assert raw0.stat().st_mtime_ns != mtime0


@pytest.mark.slow
def test_one_rank_is_invalid(tmp_path: Path) -> None:
    """Wrong data failing the run (exit 1) is checked through the CLI in
    test_first_run.test_wrong_data_fails_the_run_and_a_missing_tool_never_hides_it."""
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce]")
    # one rank: busbw is 0 by definition, the test says nothing (exit 3)
    p = cli("validate", str(bp), "-o", str(tmp_path / "one"), "--gpus", "1")
    assert p.returncode == 3, p.stdout + p.stderr
    (d,) = read_results_lines(tmp_path / "one" / "results.jsonl")
    assert d["verdict"] == "invalid"


def test_plan_for_a_dgx_cluster_uses_the_blueprint_and_catalog() -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    tests, notes = plan_tests(loaded, launcher="slurm")
    assert [t.id for t in tests] == ["node", "nccl-all_reduce", "nccl-all_gather", "nccl-reduce_scatter",
                                     "fio-scratch", "fio-lustre", "amp"]
    assert (tests[0].kind, tests[0].nodes, tests[0].ranks_per_node) == ("node", 4, 1)
    nccl = tests[1]
    assert (nccl.nodes, nccl.ranks_per_node, nccl.device, nccl.ranks) == (4, 8, "cuda", 32)
    assert isinstance(nccl.params, NcclParams)
    assert nccl.params.max_bytes == 8 * 1024**3 and nccl.params.check is True
    fio = {t.id: t.params for t in tests if t.kind == "fio"}
    assert all(isinstance(p, FioParams) for p in fio.values())
    assert fio["fio-scratch"].target == "/raid" and fio["fio-scratch"].target_kind == "nvme"
    assert fio["fio-lustre"].target == "/lustre" and fio["fio-lustre"].target_kind == "lustre"
    amp = tests[-1].params
    assert isinstance(amp, AmpParams)
    assert amp.peak_tflops == 989.0 and amp.layers == 24 and amp.compile is True  # h100-sxm bf16 dense
    assert notes == []


def test_local_plan_on_a_cpu_machine_for_a_gpu_blueprint(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    monkeypatch.setattr("validate.suites.fio.tempfile.gettempdir", lambda: "/tmp")
    tests, notes = plan_tests(loaded, launcher="local", local_gpus=0, gpus=3)
    nccl = [t for t in tests if t.kind == "nccl"]
    assert all(t.device == "cpu" and t.nodes == 1 and t.ranks_per_node == 3 for t in nccl)
    assert all(t.params.max_bytes == CPU_MAX_BYTES and t.notes for t in nccl)
    amp = next(t for t in tests if t.kind == "amp")
    assert {k: amp.params.to_json()[k] for k in TINY_GPT} == TINY_GPT and amp.params.peak_tflops is None
    assert any("no NVIDIA GPU" in n for n in notes)
    assert any("/raid" in n and "/lustre" in n for n in notes)  # declared targets absent here
    assert [t.params.target for t in tests if t.kind == "fio"] == ["/tmp"]
    with pytest.raises(UsageError, match="this machine has 2 GPU"):
        plan_tests(loaded, launcher="local", local_gpus=2, gpus=4)
    with pytest.raises(UsageError, match="unknown suite"):
        plan_tests(loaded, launcher="local", local_gpus=0, suites=["nccl", "iperf"])


def test_moe_workload_adds_alltoall(tmp_path: Path) -> None:
    text = (EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text() + \
        "workload: {parameters_b: 47, architecture: moe, experts: 8, active_parameters_b: 13}\n"
    bp = tmp_path / "moe.yaml"
    bp.write_text(text)
    tests, notes = plan_tests(load_blueprint(bp), launcher="ssh", suites=["nccl"])
    assert [t.params.collective for t in tests][-1] == "alltoall"
    assert any("mixture-of-experts" in n for n in notes)


def test_output_directory_rules(tmp_path: Path) -> None:
    stranger = tmp_path / "home"
    stranger.mkdir()
    (stranger / "thesis.tex").write_text("x")
    with pytest.raises(UsageError, match="not empty"):
        prepare_output_dir(stranger, blueprint_name="a", resume=False, force=False)
    with pytest.raises(UsageError, match="holds no validation run"):
        prepare_output_dir(stranger, blueprint_name="a", resume=False, force=True)
    assert (stranger / "thesis.tex").exists()
    with pytest.raises(UsageError, match="no validation run to resume"):
        prepare_output_dir(stranger, blueprint_name="a", resume=True, force=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"blueprint": {"name": "a"}}))
    (run / "raw").mkdir()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="blueprint a, not b"):
        prepare_output_dir(run, blueprint_name="b", resume=True, force=False)
    prepare_output_dir(run, blueprint_name="a", resume=True, force=False)
    prepare_output_dir(run, blueprint_name="b", resume=False, force=True)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # only the run's own files went


def test_exit_codes() -> None:
    assert exit_code_for(["pass", "warn"]) == 0
    assert exit_code_for(["pass", "invalid", "fail"]) == 1
    assert exit_code_for(["pass", "invalid"]) == 3
    assert exit_code_for([]) == 3


def test_a_payload_that_dies_without_output_fails_quoting_its_error(tmp_path: Path) -> None:
    from validate.expectations import JudgeContext
    from validate.judge import judge_file
    from validate.launchers.common import LaunchResult
    from validate.runner import _ensure_raw

    log = tmp_path / "nccl-all_reduce.log"
    log.write_text("$ python3 collectives.py --spawn 2 -o all_reduce\n"
                   "collectives: rank 1 failed: RuntimeError: Distributed package doesn't have NCCL built in\n")
    raw = tmp_path / "raw" / "nccl-all_reduce.txt"
    _ensure_raw(LaunchResult(raw=raw, returncode=1, log=log, command="x", duration_s=1.0))
    (r,) = judge_file(raw, JudgeContext(fabric="ethernet"), kind="nccl", label="nccl-all_reduce")
    assert r.verdict == "fail"
    assert any("doesn't have NCCL built in" in x for x in r.reasons)


@pytest.mark.slow
def test_sigterm_stops_the_run_cleanly_and_says_how_to_resume(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, collectives="[all_reduce]")
    out = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "validate", str(bp), "-o", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not read_results_lines(out / "results.jsonl"):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143  # SIGTERM: 128 + 15
    assert "interrupted: 1 finished test(s) kept" in err and "--resume" in err and "Traceback" not in err
    man = json.loads((out / "run.json").read_text())
    assert man["status"] == "interrupted"
    # the signal lands right after the first result: the next test was either running or not yet started
    assert man["tests"]["nccl-all_reduce"]["status"] == "done"
    assert man["tests"]["amp"]["status"] in ("interrupted", "pending")
    assert _payload_processes(str(out)) == []
