"""The nccl and amp suites record the versions a run used, from the tools' own output, and name any difference from
the blueprint's declared stack (issue 26); the nccl suite runs the nodes' installed nccl-tests by default."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from blueprints import load_blueprint
from blueprints.software_stack import software_stack
from tests.conftest import EXAMPLES
from validate.expectations import apply_overrides, context_from_blueprint
from validate.parsers.nccl import nccl_version_from_code, parse_nccl_text
from validate.results import Verdict
from validate.runner import plan_tests
from validate.stack import StackExpectations
from validate.suites.amp import judge_amp_run
from validate.suites.nccl import NcclSuite, judge_nccl_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DGX = EXAMPLES / "onprem-dgx-h100-ib.yaml"


def test_nccl_version_codes_decode_as_nccl_h_defines_them():
    # nccl.h: NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before
    # (https://github.com/NVIDIA/nccl/blob/master/src/nccl.h.in)
    assert nccl_version_from_code(22606) == "2.26.6"
    assert nccl_version_from_code(22809) == "2.28.9"
    assert nccl_version_from_code(2804) == "2.8.4"
    assert nccl_version_from_code(2708) == "2.7.8"  # the minor digit of a 4-digit code: 27 % 10, not 27 & 10 = 10
    assert nccl_version_from_code(2408) == "2.4.8"
    assert nccl_version_from_code(20906) == "2.9.6"  # the first release of the 5-digit codes


def test_the_nccl_tests_version_line_gives_the_library_that_ran():
    # real nccl-tests 2.17.8 output: "# nccl-tests version 2.17.8 nccl-headers=22606 nccl-library=22606"
    run = parse_nccl_text((FIXTURES / "nccl-tests" / "nccl-12.txt").read_text())[0]
    assert (run.version, run.nccl_version) == ("2.17.8", "2.26.6")


def test_nccls_own_version_line_gives_version_and_cuda_build():
    # the real output with NCCL_DEBUG=VERSION: NCCL prints "NCCL version 2.26.6+cuda12.9" (an older nccl-tests
    # without the nccl-library= field stands for the run's version line)
    _, rest = (FIXTURES / "nccl-tests" / "nccl-12.txt").read_text().split("\n", 1)
    head, more = rest.split("\n", 1)
    text = ("# nccl-tests version 2.17.8\n" + head + "\nnode1:123:123 [0] NCCL INFO NCCL version 2.26.6+cuda12.9\n"
            + more)
    run = parse_nccl_text(text)[0]
    assert (run.nccl_version, run.nccl_cuda) == ("2.26.6", "12.9")


def _ctx(declared: StackExpectations, suite: str, gpu: str | None = None):  # type: ignore[no-untyped-def]
    ctx = context_from_blueprint(load_blueprint(DGX).blueprint)
    ctx = dataclasses.replace(ctx, expectations={**ctx.expectations, suite: declared})
    return apply_overrides(ctx, gpu=gpu) if gpu else ctx


def test_an_nccl_other_than_the_declared_one_is_a_finding():
    run = parse_nccl_text((FIXTURES / "nccl-tests" / "nccl-12.txt").read_text())[0]  # ran NCCL 2.26.6
    stack = software_stack(load_blueprint(DGX).blueprint)  # the example declares the catalog default
    gh200 = "NVIDIA GH200 120GB"  # the fixture's GPUs: judged as that hardware, so only the versions differ
    r = judge_nccl_run(run, _ctx(StackExpectations(nccl=stack.nccl), "nccl", gh200), source="x")
    assert r.metrics["software"] == {"nccl": "2.26.6"}
    assert r.verdict in (Verdict.WARN, Verdict.FAIL)
    assert any(f"NCCL 2.26.6 ran, but the blueprint's stack is {stack.nccl} (software.nccl)" in x for x in r.reasons)
    same = judge_nccl_run(run, _ctx(StackExpectations(nccl="2.26.6"), "nccl", gh200), source="x")
    assert not any("ran, but the blueprint's stack" in x for x in same.reasons)
    assert "NCCL 2.26.6 as declared" in same.notes
    # judged against other hardware (the DGX's H100s): the versions are recorded, not compared
    other = judge_nccl_run(run, _ctx(StackExpectations(nccl=stack.nccl), "nccl"), source="x")
    assert other.metrics["software"] == {"nccl": "2.26.6"}
    assert not any("ran, but the blueprint's stack" in x for x in other.reasons)


def _amp(software: dict[str, str | None]):  # type: ignore[no-untyped-def]
    from validate.parsers.amp import parse_amp

    doc = {"kind": "amp", "version": 1, "device": "cpu", "gpu_name": None, "gpu_count": 0, "precision": "bf16",
           "compile": False, "model": {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 64, "vocab": 256,
                                       "parameters": 1000}, "batch_size": 4, "steps": 6, "tokens_per_s": 200.0,
           "step_time_s": 1.0, "model_tflops": 0.001, "peak_tflops": None, "mfu": None, "peak_memory_bytes": 1,
           "loss_start": 6.0, "loss_end": 4.0, "losses": [6.0, 4.0], "fp32_baseline": None, "software": software,
           "error": None}
    return parse_amp(json.dumps(doc))[0]


def test_the_amp_result_records_the_torch_it_ran_and_names_a_difference():
    declared = StackExpectations(torch="2.12.0", torch_cuda="13.0", nccl="2.28.9")
    ran = _amp({"torch": "2.12.0+cu130", "cuda": "13.0", "nccl": "2.27.7", "python": "3.12.3"})
    r = judge_amp_run(ran, _ctx(declared, "amp"), source="x")
    assert r.metrics["software"] == {"torch": "2.12.0+cu130", "torch_cuda": "13.0", "torch_nccl": "2.27.7",
                                     "python": "3.12.3"}
    assert r.verdict == Verdict.PASS, r.reasons
    assert "PyTorch 2.12.0+cu130 as declared" in r.notes
    assert any("PyTorch's own NCCL is 2.27.7" in n for n in r.notes)  # the wheel's NCCL: noted, not a finding
    other = judge_amp_run(_amp({"torch": "2.11.0+cu128", "cuda": "12.8"}), _ctx(declared, "amp"), source="x")
    assert other.verdict == Verdict.WARN
    assert any("PyTorch 2.11.0+cu128 ran, but the blueprint's stack is 2.12.0 (software.pytorch)" in x
               for x in other.reasons)
    assert any("PyTorch's CUDA 12.8 ran, but the blueprint's stack is 13.0 (software.pytorch_cuda)" in x
               for x in other.reasons)


def test_the_nccl_suite_runs_the_nodes_installed_nccl_tests_by_default():
    loaded = load_blueprint(DGX)
    tests, _ = plan_tests(loaded, launcher="ssh", suites=["nccl"])
    suite = NcclSuite()
    stack_dir = next(r.settings.nccl_stack.tests_dir for r in __import__("blueprints.resolved", fromlist=["resolve"])
                     .resolve(loaded.blueprint).groups if r.settings.nccl_stack is not None)
    for t in tests:
        args = suite.binary_payload_args(t)
        assert args[-2:] == ["--nccl-tests-dir", stack_dir]
    local, _ = plan_tests(loaded, launcher="local", suites=["nccl"], local_gpus=0)
    assert all(suite.binary_search_args(t) == [] for t in local)  # this machine: the payload's own search


def test_amp_and_the_torch_benchmark_run_the_declared_environment_on_the_nodes():
    from validate.launchers.slurm import sbatch_script
    from validate.suites import get_suite

    loaded = load_blueprint(EXAMPLES / "aws-p5-slurm.yaml")
    tests, _ = plan_tests(loaded, launcher="slurm", suites=["amp", "nccl"])
    venv = "/opt/clusterforge/pytorch/bin/python"  # catalog nccl_stack.pytorch.venv, made by the nccl_stack role
    assert {get_suite(t.kind).environment_python(t) for t in tests} == {venv}
    script = sbatch_script(loaded, next(t for t in tests if t.kind == "amp"))
    assert f'if [ "$PY" = python3 ] && [ -x {venv} ]; then PY={venv}; fi' in script
    assert script.index("PY=/opt/clusterforge") < script.index('"$PY" "$CF_DIR/payloads/amp_bench.py"')
    local, _ = plan_tests(load_blueprint(EXAMPLES / "local-workstation.yaml"), launcher="local", suites=["amp"])
    assert all(get_suite(t.kind).environment_python(t) is None for t in local)  # this machine: this interpreter
