"""What a new user ran into in ``validate`` (issue 29, kind 6): the ``--resume`` command printed after an interrupt
carries every option of the interrupted run, and the finished tests' report is written when the run is stopped;
memlock is not warned about on a node without RDMA."""

from __future__ import annotations

import os
import shlex
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusterforge.commands.validate import resume_command
from validate.node_checks import check_memlock
from validate.runner import read_results_lines

from .test_faults import Start, _manifest, _running, _wait_for, small_blueprint, start  # noqa: F401 - start: fixture


def test_resume_command_carries_every_option():
    cmd = resume_command(Path("my bp.yaml"), Path("results/x"), launcher="slurm", suites="nccl,fio", gpus=4,
                         inventory=Path("inv.ini"), remote_python="/opt/py/bin/python3", image=None, timeout=900.0,
                         run_anyway=False)
    assert shlex.split(cmd) == ["clusterforge", "validate", "my bp.yaml", "-o", "results/x", "--resume",
                                "--launcher", "slurm", "--suites", "nccl,fio", "--gpus", "4", "--inventory", "inv.ini",
                                "--remote-python", "/opt/py/bin/python3", "--timeout", "900"]
    plain = resume_command(Path("bp.yaml"), Path("out"), launcher="local", suites=None, gpus=None, inventory=None,
                           remote_python="python3", image=None, timeout=None, run_anyway=True)
    assert plain == "clusterforge validate bp.yaml -o out --resume --run-anyway"


@pytest.mark.slow
def test_ctrl_c_keeps_a_report_and_prints_the_whole_resume_command(tmp_path: Path, start: Start) -> None:  # noqa: F811
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce, sendrecv]")
    out = tmp_path / "run"
    proc = start("validate", str(bp), "-o", str(out), "--suites", "nccl", "--gpus", "2", "--timeout", "600")
    _wait_for(lambda: bool(read_results_lines(out / "results.jsonl")) and _running(out, "nccl-sendrecv"), proc)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"clusterforge validate {bp} -o {out} --resume --suites nccl --gpus 2 --timeout 600" in err
    assert _manifest(out)["status"] == "interrupted"
    md = (out / "report.md").read_text()
    assert "interrupted: 1 result(s) so far" in md.splitlines()[0] and "nccl" in md


def _limits(soft: str) -> SimpleNamespace:
    text = f"Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         {soft:<21}{soft:<21}bytes\n"
    return SimpleNamespace(file=lambda path: text if path == "/proc/self/limits" else None)


@pytest.mark.parametrize(("rdma", "verdict"), [(True, "fail"), (False, "pass")])
def test_memlock_matters_only_with_rdma(rdma, verdict):
    e = SimpleNamespace(ns=SimpleNamespace(memlock_unlimited=True, rdma=rdma))
    c = check_memlock(_limits("65536"), e)  # type: ignore[arg-type]
    assert c.verdict == verdict
    text = f"{c.measured} {c.expected} {c.cause} {c.fix}"
    assert "declared" not in text
    assert ("no RDMA" in text) is (not rdma)


def test_a_long_test_shows_it_is_still_running_without_a_terminal(capsys):
    import time as _time

    from clusterforge.commands.validate import _Progress

    p = _Progress(live=False, heartbeat_s=0.05)
    test = SimpleNamespace(id="nccl-all_reduce", description="all_reduce over 2 node(s) x 8 GPUs")
    p.planned([test], set(), [])
    p.started(test)
    _time.sleep(0.3)
    p.finished(test, ["pass"], SimpleNamespace(returncode=0), 0.3)
    out = capsys.readouterr().out
    assert "▶ nccl-all_reduce" in out and out.count("nccl-all_reduce still running (") >= 2
    _time.sleep(0.2)  # stopped with the test: no line after it finished
    assert "still running" not in capsys.readouterr().out
