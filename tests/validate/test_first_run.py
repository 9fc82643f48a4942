"""A new user's first runs of `clusterforge validate` and `make demo`, from the command line.

A machine without fio (simulated by a PATH that holds every program but fio), resume after
failures and changed parameters, `--force --suites`, and a local run on a machine that lacks the
blueprint's hardware."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from validate.runner import read_results_lines

from .test_runner import EXAMPLES, REPO, cli, small_blueprint


@pytest.fixture(scope="module")
def path_without_fio(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH with every executable of this PATH except fio (links in one folder)."""
    d = tmp_path_factory.mktemp("bin-without-fio")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            src = os.path.join(folder, name)
            if name == "fio" or (d / name).exists() or not os.access(src, os.X_OK) or os.path.isdir(src):
                continue
            (d / name).symlink_to(src)
    assert shutil.which("fio", path=str(d)) is None
    return str(d)


def _fio_blueprint(tmp_path: Path, suites: str) -> Path:
    return small_blueprint(tmp_path, suites=suites, collectives="[all_reduce]")


@pytest.mark.slow
def test_without_fio_the_fio_suite_is_invalid_and_says_how_to_install_it(tmp_path: Path, path_without_fio: str) -> None:
    bp = _fio_blueprint(tmp_path, "[fio, amp]")
    out = tmp_path / "run"
    p = cli("validate", str(bp), "-o", str(out), env={"PATH": path_without_fio})
    assert p.returncode == 3, p.stdout + p.stderr  # nothing failed; one suite said nothing
    lines = read_results_lines(out / "results.jsonl")
    verdicts = {d["test_id"]: d["verdict"] for d in lines}
    assert verdicts == {"fio-tmp": "invalid", "amp": "pass"} or verdicts == {"fio-tmp": "invalid", "amp": "warn"}
    fio = next(d for d in lines if d["test_id"] == "fio-tmp")
    assert fio["metrics"]["missing_tool"] == "fio"
    assert "fio suite could not run" in fio["reasons"][0] and "apt-get install fio" in fio["reasons"][0]
    assert "fio suite could not run" in p.stdout and "(invalid: fio-tmp)" in p.stdout
    # the install advice is printed once, after the verdict; the test's own line names the missing tool
    assert p.stdout.count("apt-get install fio") == 1, p.stdout
    assert "fio-tmp: the suite could not run: `fio` is not installed on the node" in p.stdout
    man = json.loads((out / "run.json").read_text())
    assert man["missing_tools"]["fio"]["suites"] == ["fio"] and man["missing_tools"]["fio"]["tests"] == ["fio-tmp"]
    assert "fio suite could not run" in (out / "report.md").read_text()
    assert "apt-get install fio" in (out / "report.html").read_text()


@pytest.mark.slow
def test_wrong_data_fails_the_run_and_a_missing_tool_never_hides_it(tmp_path: Path, path_without_fio: str) -> None:
    bp = _fio_blueprint(tmp_path, "[nccl, fio]")
    out = tmp_path / "run"
    # the payload's documented testing hook corrupts rank 1's results: the run must fail (exit 1),
    # and fio missing here (invalid, exit 3 on its own) does not turn that into "could not say"
    p = cli("validate", str(bp), "-o", str(out), env={"PATH": path_without_fio, "CLUSTERFORGE_CORRUPT_RANK": "1"})
    assert p.returncode == 1, p.stdout + p.stderr
    lines = read_results_lines(out / "results.jsonl")
    verdicts = {d["test_id"]: d["verdict"] for d in lines}
    assert verdicts == {"nccl-all_reduce": "fail", "fio-tmp": "invalid"}
    assert next(d for d in lines if d["test_id"] == "nccl-all_reduce")["metrics"]["wrong"] > 0
    assert "verdict: fail" in p.stdout


@pytest.mark.slow
def test_resume_reruns_failed_and_changed_tests_and_honours_suites(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce, sendrecv]")
    out = tmp_path / "run"
    # first run: every collective fails (corrupted rank)
    first = cli("validate", str(bp), "-o", str(out), env={"CLUSTERFORGE_CORRUPT_RANK": "1"})
    assert first.returncode == 1, first.stdout + first.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert {d["verdict"] for d in lines} == {"fail"}
    assert all(d["run_with"]["params"]["max_bytes"] == 65536 for d in lines)  # what each result ran with
    # resume: the failed tests run again (nothing is kept) and now pass; each test has one result
    again = cli("validate", str(bp), "-o", str(out), "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming:" not in again.stdout
    assert "nccl-all_reduce: run again (it was fail before)" in again.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert sorted((d["test_id"], d["verdict"]) for d in lines) == [("nccl-all_reduce", "pass"), ("nccl-sendrecv", "pass")]
    # resume with --suites: counts are about the planned tests only
    one = cli("validate", str(bp), "-o", str(out), "--resume", "--suites", "nccl")
    assert one.returncode == 0
    assert "resuming: 2 of 2 planned test(s) passed or warned before with the same parameters and are kept; 0 run now" in one.stdout
    assert "2 test(s) kept from the earlier run)" in one.stdout  # the closing line counts tests, not results
    # a parameter changed: that test runs again instead of mixing results of two sizes
    bp.write_text(bp.read_text().replace("max_bytes: 65536", "max_bytes: 32768"))
    changed = cli("validate", str(bp), "-o", str(out), "--resume")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "parameters changed since its results were recorded: params.max_bytes" in changed.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert len(lines) == 2 and all(d["run_with"]["params"]["max_bytes"] == 32768 for d in lines)


@pytest.mark.slow
def test_force_with_suites_keeps_the_other_suites(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl, amp]", collectives="[all_reduce]")
    out = tmp_path / "run"
    assert cli("validate", str(bp), "-o", str(out)).returncode == 0
    before = {d["test_id"]: d for d in read_results_lines(out / "results.jsonl")}
    raw = out / "raw" / "nccl-all_reduce.txt"
    mtime = raw.stat().st_mtime_ns
    p = cli("validate", str(bp), "-o", str(out), "--force", "--suites", "amp")
    assert p.returncode == 0, p.stdout + p.stderr
    after = read_results_lines(out / "results.jsonl")
    assert sorted(d["test_id"] for d in after) == ["amp", "nccl-all_reduce"]
    assert next(d for d in after if d["test_id"] == "nccl-all_reduce") == before["nccl-all_reduce"]
    assert raw.stat().st_mtime_ns == mtime
    assert len(json.loads((out / "report.json").read_text())["results"]) == 2
    assert set(json.loads((out / "run.json").read_text())["tests"]) == {"amp", "nccl-all_reduce"}


def test_local_run_without_the_declared_gpus_stops_before_running(tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli("validate", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "-o", str(out), env={"CUDA_VISIBLE_DEVICES": ""},
            timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "hardware mismatch: node group" in p.stderr and "nothing was run" in p.stderr
    assert "--run-anyway" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()


@pytest.mark.parametrize("mount", ["/scratch-that-is-not-here", "/nonexistent/nvme"])
def test_local_run_without_the_declared_mounts_stops_before_writing_fio_files(tmp_path: Path, mount: str) -> None:
    text = (EXAMPLES / "local-workstation.yaml").read_text().replace(
        "    hardware: {}\n", f"    hardware: {{nvme: {{count: 1}}}}\n    local_nvme: {{mount: {mount}, raid: none}}\n")
    assert mount in text
    bp = tmp_path / "bp.yaml"
    bp.write_text(text)
    out = tmp_path / "run"
    p = cli("validate", str(bp), "-o", str(out), "--suites", "fio", timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    assert f"the declared fio targets ({mount}) do not exist on this machine" in p.stderr
    assert "nothing was run" in p.stderr and not out.exists()


@pytest.mark.slow
def test_run_anyway_runs_and_the_results_are_invalid(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce]")
    text = bp.read_text()
    assert "hardware: {}" in text
    bp.write_text(text.replace("hardware: {}", "hardware: {gpu: l40s:1}"))
    p = cli("validate", str(bp), "-o", str(tmp_path / "run"), "--run-anyway", env={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 3, p.stdout + p.stderr
    (d,) = read_results_lines(tmp_path / "run" / "results.jsonl")
    assert d["verdict"] == "invalid" and any("hardware mismatch" in r for r in d["reasons"])


@pytest.mark.slow
def test_make_demo_on_a_machine_without_fio_exits_0_and_says_which_suite_could_not_run(
        tmp_path: Path, path_without_fio: str) -> None:
    env = dict(os.environ, PATH=path_without_fio, CLUSTERFORGE_DEMO_OUT=str(tmp_path / "demo"), COLUMNS="200")
    p = subprocess.run([sys.executable, "-m", "clusterforge.demo"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    tail = p.stdout[p.stdout.rindex("done"):]
    assert "the fio suite could not run" in tail and "apt-get install fio" in tail
    man = json.loads((tmp_path / "demo" / "validate-local" / "run.json").read_text())
    assert set(man["missing_tools"]) == {"fio"}


@pytest.mark.slow
@pytest.mark.parametrize("suites", [["nccl"], ["amp"], ["nccl", "amp"]])
def test_a_node_without_torch_gives_invalid_results_that_say_how_to_install_it(tmp_path: Path, suites: list[str]) -> None:
    """The launcher's Python has no torch (a node where only the system Python exists)."""
    from blueprints import load_blueprint
    from validate.launchers.local import LocalLauncher
    from validate.runner import plan_tests, run_validation

    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # -S: no site-packages, so no torch
    no_torch.chmod(0o755)
    loaded = load_blueprint(small_blueprint(tmp_path, suites="[nccl, amp]", collectives="[all_reduce]"))
    tests, notes = plan_tests(loaded, launcher="local", suites=suites, local_gpus=0)
    out = tmp_path / "run"
    summary = run_validation(loaded, out, LocalLauncher(out, python=str(no_torch)), tests, notes=notes)
    assert summary.exit_code == 3
    assert {r.verdict for r in summary.results} == {"invalid"}
    assert set(summary.missing_tools) == {"torch"}
    assert sorted(summary.missing_tools["torch"]["tests"]) == sorted(t.id for t in tests)
    for r in summary.results:
        assert r.reasons[0].startswith(f"the {r.kind} suite could not run: torch (PyTorch) is not installed")
        assert "pip install torch" in r.reasons[0]
