"""The branches of the suites (``validate/suites``) that the other judge tests leave out (issue 35, mutation testing).

Branch coverage of the "suites" area of ``tools/mutate.py`` showed lines no test reached: a mutant there (a comparison
flipped, a number changed, ``and`` for ``or``) survived whatever it did. Each test here reaches such lines from the
user's side (a raw output judged against a context built from flags or a blueprint, a planned test, a report section)
and asserts what the user sees: the verdict, its figures and its message. A threshold is tested on both sides (the
last value that passes and the first that does not), its figure typed from its documented source (the blueprint
reference's defaults in ``docs/blueprint-reference.md``, the hardware catalog's cited figures, a vendor's page), never
imported from the code under test.

Lines left unreached cannot be reached from any input: a catalog key the blueprint or flag validation has already
checked, a parser that never raises, a figure every catalog entry has, two expressions always set together.
Helpers and real public logs are reused from the neighbouring judge tests (``tests/fixtures``, origins in
``tests/fixtures/README.md``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint, parse_blueprint
from blueprints.catalog import catalog
from validate.expectations import JudgeContext, apply_overrides, context_from_blueprint, context_from_flags
from validate.judge import judge_text
from validate.parsers.detect import RawText
from validate.results import JudgeResult, Verdict
from validate.runner import plan_tests
from validate.suites import REGISTRY, compared, detect_suite, get_suite, register, summary
from validate.suites.amp import AmpSuite, loss_curve
from validate.suites.base import (
    Explanation,
    RanksSuite,
    Suite,
    UnreadableInput,
    gpu_mismatch,
    open_raw_input,
    read_raw,
)
from validate.suites.fio import fio_expectations, fsx_client_mb_s
from validate.suites.nccl import NcclSuite, busbw_curves, expected_busbw, intra_node_gbytes_s

from ..conftest import EXAMPLES
from .node_fixtures import as_recorded
from .test_judge import AMP
from .test_judge_boundaries import (
    A100_NODE,
    AMP_RESULT,
    _fio01,
    _fio02,
    _nccl,
    _nccl04,
    _set_write,
    with_peak,
)
from .test_judge_diagnosis import IB4, USING4, _channels, _scale, _with_info
from .test_judge_log_causes import _with_line
from .test_node_checks import drop_gpu, node

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(b64: str | None) -> bool:
    return b64 is not None and base64.b64decode(b64)[:8] == PNG_MAGIC


def _judge(text: str, ctx: JudgeContext, kind: str, source: str = "out.txt") -> list[JudgeResult]:
    return judge_text(text, ctx, source=source, kind=kind)


def _one(text: str, ctx: JudgeContext, kind: str, source: str = "out.txt") -> JudgeResult:
    (r,) = _judge(text, ctx, kind, source)
    return r


def _amp(ctx: JudgeContext | None = None, **changes: Any) -> JudgeResult:
    """One H100 bf16 AMP result (tests/validate/test_judge_boundaries.py AMP_RESULT: 11,000 tokens/s, 1.1x the fp32
    baseline's 10,000) with ``changes``, judged."""
    return _one(json.dumps({**AMP_RESULT, **changes}), ctx or JudgeContext(), "amp", "amp.json")


def _blueprint(name: str, edit: Any = None) -> Any:
    """The example blueprint ``name`` (``blueprints/examples``), its document changed by ``edit(doc)`` when given."""
    loaded = load_blueprint(EXAMPLES / name)
    if edit is None:
        return loaded
    doc = json.loads(json.dumps(loaded.data))
    edit(doc)
    return parse_blueprint(json.dumps(doc), name)


# =====================================================================================================================
# the registry (validate/suites/__init__.py) and the Suite defaults (validate/suites/base.py)
# =====================================================================================================================


class _Bare(Suite):
    """A suite that overrides nothing it need not: its results are reported by the defaults."""

    name = "bare"
    title = "Bare"
    payloads = ("bare.py",)

    def plan(self, gp: Any) -> tuple[list[Any], list[str]]:
        return [], []

    def payload_args(self, test: Any) -> list[str]:
        return []

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        r = JudgeResult(source=source, kind=self.name, label=label)
        r.degrade(Verdict.WARN, f"bare saw {text.strip()}")
        return [r]


class _BareRanks(RanksSuite):
    """A collective suite with the defaults of :class:`RanksSuite`."""

    name = "bareranks"
    title = "Bare ranks"
    payloads = ("bare_ranks.py", "bare_binary.py")

    def plan(self, gp: Any) -> tuple[list[Any], list[str]]:
        return [], []

    def payload_args(self, test: Any) -> list[str]:
        return []

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        return []

    def binary_name(self, test: Any) -> str:
        return "x"

    def binary_payload_args(self, test: Any) -> list[str]:
        return []

    def local_binary(self, test: Any, dirs: list[str]) -> str | None:
        return None

    def binary_flags(self, test: Any, gpus_per_process: int = 1) -> list[str]:
        return []


def test_register_refuses_a_name_that_is_no_lower_case_word_and_a_taken_one() -> None:
    for bad in ("Nccl", "9th", "my-suite", ""):
        cls = type("Named", (_Bare,), {"name": bad})
        with pytest.raises(ValueError, match="use a lower-case word"):
            register(cls())
        assert bad not in REGISTRY
    nccl = REGISTRY["nccl"]
    with pytest.raises(ValueError, match="suite 'nccl' is already registered"):
        register(NcclSuite())
    assert REGISTRY["nccl"] is nccl  # the first one stays


def test_detection_with_no_suite_registered_finds_none(monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path) -> None:
    text = _nccl04(fixtures_dir)
    assert detect_suite(text).name == "nccl"
    monkeypatch.setattr("validate.suites.REGISTRY", {})
    assert detect_suite(text) is None


def test_a_suite_with_the_default_report_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    bare = _Bare()
    monkeypatch.setitem(REGISTRY, "bare", bare)
    (r,) = bare.judge_text("x\n", JudgeContext(), source="bare.out", label=None)
    # no summary of its own: the first reason; not compared without a ratio
    assert bare.summary(r) is None and summary(r) == "bare saw x" and not compared(r)
    r.expected["ratio"] = 0.9
    assert compared(r)
    assert bare.result_plot(r) is None and bare.html_section([r], 0) is None and bare.markdown_section([r]) == []
    assert bare.expected_text(r) is None and bare.explanations([r]) == []
    ranks = _BareRanks()
    assert ranks.binary_search_args(None) == [] and ranks.binary_payload == "bare_binary.py"
    assert ranks.placement == "ranks"


def test_results_of_a_kind_no_suite_judges_are_compared_by_their_ratio_or_busbw() -> None:
    r = JudgeResult(source="x", kind="gone")
    assert not compared(r)
    r.expected["busbw_gbps"] = 100.0
    assert compared(r)
    # no reason yet: the first note, whatever came after it
    r.note("first note")
    r.note("second note")
    assert summary(r) == "first note"
    r.degrade(Verdict.WARN, "first reason")
    assert summary(r) == "first reason"


def test_the_default_judge_of_a_group_file_uses_the_groups_context(tmp_path: Path) -> None:
    # the DGX example declares h100-sxm: an H100 result passes, an A100 one is another GPU's
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    group = "dgx"  # its GPU group (the first, "mgmt", has no GPU)
    p = tmp_path / "amp.json"
    p.write_text(json.dumps(AMP))
    (r,) = get_suite("amp").judge_group_file(p, loaded, group, label="amp-dgx")
    assert (r.label, r.verdict, r.metrics["gpu_model"]) == ("amp-dgx", "pass", "h100-sxm"), r.reasons
    p.write_text(json.dumps({**AMP, "gpu_name": "NVIDIA A100-SXM4-40GB"}))
    (r,) = get_suite("amp").judge_group_file(p, loaded, group)
    assert r.verdict == "invalid" and "h100-sxm is declared" in r.reasons[0]


@pytest.mark.parametrize("launcher", ["ssh", "slurm", "kubernetes"])
def test_only_the_local_launcher_judges_this_machine(launcher: str) -> None:
    # Suite.context: `launcher == "local"` describes this machine (one node); every other launcher of
    # validate/launchers.LAUNCHERS runs on the blueprint's nodes and keeps its node count. "kubernetes" sorts before
    # "local" (kills `==` -> `<=`)
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    tests, _ = plan_tests(loaded, launcher=launcher)
    test = next(t for t in tests if t.kind == "nccl")
    remote = get_suite("nccl").context(loaded, test, launcher)
    assert remote.nodes == context_from_blueprint(loaded.blueprint, test.group).nodes > 1
    assert get_suite("nccl").context(loaded, test, "local").nodes == 1


def test_unreadable_raw_outputs_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnreadableInput, match="no such file"):
        open_raw_input(tmp_path / "missing.txt")
    p = tmp_path / "nccl.txt"
    p.write_text("# nccl-tests\n")
    assert read_raw(p) == "# nccl-tests\n"

    def refused(path: Path) -> RawText:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("validate.suites.base.open_raw", refused)
    with pytest.raises(UnreadableInput, match="cannot read: Permission denied"):
        open_raw_input(p)
    # a file removed after it was opened (the judge reads it lazily): a usage error, not a traceback
    monkeypatch.setattr("validate.suites.base.open_raw", lambda path: RawText(tmp_path / "gone.txt", 10, "utf-8"))
    with pytest.raises(UnreadableInput, match="gone.txt: cannot read: No such file or directory"):
        read_raw(p)
    (tmp_path / "amp.json").write_text(json.dumps(AMP))
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    test = next(t for t in plan_tests(loaded, launcher="local", local_gpus=0)[0] if t.kind == "amp")
    with pytest.raises(UnreadableInput, match="amp.json: cannot read: No such file or directory"):
        get_suite("amp").judge_test(tmp_path / "amp.json", test, loaded, "local")


def test_a_declared_gpu_the_catalog_does_not_know_is_told_apart_by_its_family() -> None:
    # no vendor to compare (the declared key is unknown): the log's name must contain the declared family
    assert gpu_mismatch("NVIDIA H100 80GB HBM3", None, "zz9-sxm")
    assert not gpu_mismatch("ZZ9 accelerator", None, "zz9-sxm")
    # the vendors are compared only when both are known: the same catalog part is no mismatch
    assert not gpu_mismatch("NVIDIA H100 80GB HBM3", "h100-sxm", "h100-sxm")


# =====================================================================================================================
# node (validate/suites/node.py)
# =====================================================================================================================


@pytest.fixture(scope="module")
def dgx_loaded() -> Any:
    """The DGX example as deployed on the recorded nodes (tests/fixtures/node/dgx-h100)."""
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    return dataclasses.replace(loaded, blueprint=as_recorded(loaded.blueprint, gpudirect="nvidia-peermem"))


def _dgx_docs(fixtures_dir: Path, lost_gpu: bool = False) -> str:
    """The two recorded DGX H100 nodes' documents, one per line (as the payload prints them)."""
    nodes = [node(fixtures_dir, "dgx-h100", h) for h in ("dgx-01", "dgx-02")]
    if lost_gpu:  # dgx-01's first GPU is gone from nvidia-smi (fallen off the bus)
        drop_gpu(nodes[0], 0)
    return "".join(json.dumps(n.doc()) + "\n" for n in nodes)


def test_node_documents_need_the_blueprints_group(fixtures_dir: Path, dgx_loaded: Any, tmp_path: Path) -> None:
    suite = get_suite("node")
    (r,) = suite.judge_text(_dgx_docs(fixtures_dir), JudgeContext(), source="raw/node.json", label=None)
    assert (r.verdict, r.label) == ("invalid", "node.json") and "--blueprint" in r.reasons[0]
    p = tmp_path / "node.json"
    p.write_text(_dgx_docs(fixtures_dir))
    results = suite.judge_group_file(p, dgx_loaded, "dgx")
    assert [x.label for x in results] == ["node: dgx-01", "node: dgx-02", "node: cross-node"]
    assert all(x.verdict == "pass" for x in results), [x.reasons for x in results]
    # the planned test spans the group's 4 nodes: two documents are two that did not answer
    (test,), _ = plan_tests(dgx_loaded, launcher="slurm", suites=["node"])
    results = suite.judge_test(p, test, dgx_loaded, "slurm")
    assert results[0].label == f"{test.id}: dgx-01"
    assert results[-1].verdict == "fail" and "2 of 4 node(s) answered" in results[-1].reasons[-1]
    assert suite.gpus(test) == 0 and suite.compared(results[0])


def test_a_failed_blocking_node_check_explains_the_later_suites(fixtures_dir: Path, dgx_loaded: Any,
                                                                 tmp_path: Path) -> None:
    p = tmp_path / "node.json"
    p.write_text(_dgx_docs(fixtures_dir, lost_gpu=True))
    suite = get_suite("node")
    results = suite.judge_group_file(p, dgx_loaded, "dgx")
    assert results[0].verdict == "fail"
    (ex, *_) = suite.explanations(results)
    assert isinstance(ex, Explanation) and (ex.suite, ex.host, ex.check) == ("node", "dgx-01", "gpu.count")
    assert "nccl" in ex.explains and "amp" in ex.explains
    assert ex.ref == "dgx-01: gpu.count"
    assert ex.note().startswith("explained by the node suite: dgx-01 failed blocking check gpu.count (measured ")
    assert ex.fix and ex.note().endswith(f"). Fix: {ex.fix}")
    assert re.fullmatch(r"\d+ pass, \d+ n/a, 1 fail", suite.summary(results[0]))  # the checks of dgx-01 by verdict
    assert suite.summary(JudgeResult(source="x", kind="node")) is None
    assert suite.explanations([JudgeResult(source="x", kind="nccl")]) == []


def _check(cid: str, verdict: str, **extra: Any) -> dict[str, Any]:
    return {"id": cid, "verdict": verdict, "measured": f"{cid} measured", "expected": f"{cid} expected", **extra}


def _node_result(host: str, checks: list[dict[str, Any]]) -> JudgeResult:
    return JudgeResult(source="raw/node.json", kind="node", label=f"node: {host}",
                       metrics={"host": host, "group": "gpu", "checks": checks})


def test_the_node_report_section_explains_every_failing_cell() -> None:
    from validate.node_checks import CHECKS

    ids = list(CHECKS)
    a, b, c = ids[0], ids[1], ids[2]
    results = [
        _node_result("n1", [_check(a, "fail", blocking=True, cause="a GPU fell off the bus", fix="reseat it",
                                   source="https://docs.nvidia.com/deploy/xid-errors/"),
                            _check(b, "warn", source="javascript:alert(1)"), _check(c, "n/a")]),
        _node_result("n2", [_check(a, "pass"), _check(b, "pass"), _check(c, "n/a")]),
        JudgeResult(source="raw/nccl.txt", kind="nccl", label="nccl-all_reduce",
                    metrics={"explained_by": ["n1: " + a]}),
    ]
    md = "\n".join(get_suite("node").markdown_section(results))
    assert f"| node | {a} | {b} |" in md and f"Not applicable on every node: {c}" in md
    assert (f"- **n1 / {a}** (fail, blocking): measured {a} measured; expected {a} expected. Cause: a GPU fell off the "
            "bus. Fix: reseat it ([source](https://docs.nvidia.com/deploy/xid-errors/))") in md
    # a failing cell without cause or fix; a source that is no safe link is shown as text, never linked
    assert f"- **n1 / {b}** (warn): measured {b} measured; expected {b} expected (source: javascript:alert(1))" in md
    assert "](javascript" not in md
    assert "Results explained by a failed blocking node check:" in md and f"- nccl-all_reduce: n1: {a}" in md
    html = get_suite("node").html_section(results, 0)
    assert html is not None and html.heading == "Node checks" and "reseat it" in (html.html or "")
    # every check n/a: no table, the n/a line only; nothing failing, nothing explained
    md = get_suite("node").markdown_section([_node_result("n1", [_check(a, "pass")])])
    assert md == ["", "## Node checks", "", f"| node | {a} |", "|---|---|", "| n1 | ✅ pass |"]
    quiet = [_node_result("n1", [_check(c, "n/a")])]
    md = get_suite("node").markdown_section(quiet)
    assert "| node |" not in "\n".join(md) and md[-1] == f"Not applicable on every node: {c}"
    assert get_suite("node").markdown_section([JudgeResult(source="x", kind="nccl")]) == []
    assert get_suite("node").html_section([JudgeResult(source="x", kind="nccl")], 0) is None


# =====================================================================================================================
# AMP (validate/suites/amp.py)
# =====================================================================================================================


def test_amp_summary_expected_text_and_loss_curve() -> None:
    amp = get_suite("amp")
    r = _amp()
    # 11,000 tokens/s; MFU 580 / 989 TFLOP/s = 59%; 11,000 / 10,000 = 1.10x fp32
    assert amp.summary(r) == "bf16 on NVIDIA H100 80GB HBM3: 1.1e+04 tokens/s, MFU 59%, 1.10x fp32"
    assert amp.expected_text(r) == "MFU ≥ 30%"  # the H100-class floor (torchtitan's 33-39% MFU on H100)
    bare = JudgeResult(source="amp.json", kind="amp", metrics={"tokens_per_s": 900.0, "device": "cpu"})
    assert amp.summary(bare) == "? on cpu: 900 tokens/s" and amp.expected_text(bare) is None
    assert amp.summary(JudgeResult(source="amp.json", kind="amp")) is None
    curve = loss_curve(JudgeResult(source="amp.json", kind="amp", label="amp", series={"losses": [10.9, None, 7.2]}))
    assert curve is not None and curve.points == ((0.0, 10.9), (2.0, 7.2))  # the non-finite step is left out
    assert loss_curve(JudgeResult(source="amp.json", kind="amp", series={"losses": []})) is None


def test_amp_report_plot() -> None:
    amp = get_suite("amp")
    assert amp.html_section([JudgeResult(source="x", kind="nccl")], 0) is None
    section = amp.html_section([_amp()], 0)
    assert section is not None and section.heading == "Training (AMP)" and _is_png(section.png)
    only_losses = JudgeResult(source="amp.json", kind="amp", series={"losses": [3.0, 2.0]})
    assert _is_png(amp.html_section([only_losses], 0).png)
    no_losses = JudgeResult(source="amp.json", kind="amp", metrics={"tokens_per_s": 10.0, "precision": "bf16"})
    assert _is_png(amp.html_section([no_losses], 0).png)


def test_amp_payload_flags_follow_the_blueprint() -> None:
    def off(doc: dict[str, Any]) -> None:
        doc["validation"]["amp"] = {"compile": False, "fp32_baseline": False}

    (test,), _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml", off), launcher="slurm", suites=["amp"])
    args = AmpSuite().payload_args(test)
    assert "--compile" not in args and "--fp32-baseline" not in args
    # the H100 SXM dense BF16 peak, 989 TFLOP/s (https://www.nvidia.com/en-us/data-center/h100/: 1,979 with sparsity)
    assert args[-2:] == ["--peak-tflops", "989"]
    (test,), _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="slurm", suites=["amp"])
    assert {"--compile", "--fp32-baseline"} <= set(AmpSuite().payload_args(test))
    assert AmpSuite().gpus(test) == 1 and AmpSuite().mounts(test) == ()  # the Suite defaults: one GPU, no mount
    (cpu,), _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="local", local_gpus=0, suites=["amp"])
    assert AmpSuite().gpus(cpu) == 0


def test_amp_planned_for_a_gpu_without_a_catalog_peak_passes_none(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = AmpSuite.plan
    monkeypatch.setattr(AmpSuite, "plan", lambda self, gp: seen.append(gp) or real(self, gp))
    plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="slurm", suites=["amp"])
    (test,), _ = real(AmpSuite(), dataclasses.replace(seen[0], gpu_key="zz9-sxm"))
    assert test.params.peak_tflops is None and "--peak-tflops" not in AmpSuite().payload_args(test)


def test_amp_cpu_build_of_torch_is_noted() -> None:
    r = _amp(software={"torch": "2.5.1", "cuda": None, "nccl": None})
    assert "PyTorch 2.5.1 is a CPU build (torch.version.cuda is None)" in r.notes
    assert r.verdict == "pass"
    assert not any("CPU build" in n for n in _amp(software={"torch": "2.5.1", "cuda": "12.4"}).notes)


def test_amp_without_throughput_or_loss_did_not_run() -> None:
    r = _amp(tokens_per_s=None, losses=[], loss_start=None, loss_end=None)
    assert r.verdict == "invalid" and r.reasons == [
        "the AMP result holds no throughput and no loss: the benchmark did not run"]
    # a throughput alone is judged (no loss to read: no loss verdict, no loss note)
    r = _amp(losses=[], loss_start=None, loss_end=None)
    assert r.verdict == "pass" and not any("loss" in n for n in r.notes), r.notes
    # losses alone too
    r = _amp(tokens_per_s=None)
    assert r.verdict != "invalid" and "loss fell from 10.9 to 7.2" in r.notes


def test_amp_non_finite_throughput_fails() -> None:
    r = _amp(tokens_per_s=float("inf"))
    assert r.verdict == "fail" and "throughput is not finite" in r.reasons[0]


def test_amp_mfu_unknown_without_a_peak() -> None:
    # V100 has no bf16 tensor cores (the catalog has no bf16 peak for it): the note says so, not "pass --gpu" (the
    # GPU is known; naming it again changes nothing); an unknown GPU has no catalog entry at all
    r = _amp(gpu_name="Tesla V100-SXM2-32GB", peak_tflops=None, mfu=None)
    assert r.metrics["mfu"] is None and "mfu_floor" not in r.expected and r.verdict == "pass", r.reasons
    assert ("MFU unknown: the catalog has no bf16 peak for v100-sxm (the GPU has no bf16 tensor cores or their figure "
            "is not catalogued)") in r.notes
    r = _amp(gpu_name="Acme Tensor X1", peak_tflops=None, mfu=None)
    assert r.metrics["mfu"] is None and "mfu_floor" not in r.expected and r.verdict == "pass", r.reasons
    assert "MFU unknown: GPU 'Acme Tensor X1' not in the catalog (pass --gpu)" in r.notes
    # a peak without the model's TFLOP/s (a payload that predates the field): the note names what is missing
    r = _amp(peak_tflops=989.0, mfu=None, model_tflops=None)
    assert "MFU unknown: the result carries no model TFLOP/s (an older payload)" in r.notes
    r = _amp(gpu_name=None, device="cuda", peak_tflops=None, mfu=None)
    assert "MFU unknown: no GPU name (pass --gpu)" in r.notes


def test_an_fp32_amp_run_has_no_speed_up_to_judge() -> None:
    # equal tokens/s with the fp32 baseline would fail a bf16 run ("AMP is slower than fp32"); an fp32 run is no AMP
    r = _amp(precision="fp32", tokens_per_s=10000.0)
    assert "the run itself is fp32: no AMP speed-up to judge" in r.notes
    assert not any("fp32" in x for x in r.reasons), r.reasons
    assert _amp(tokens_per_s=10000.0).verdict == "warn"


# =====================================================================================================================
# profile (validate/suites/profile.py)
# =====================================================================================================================


def _profile_doc(**rank: Any) -> dict[str, Any]:
    row = {"rank": 0, "host": "n1", "path": "gpu", "breakdown": {"compute": 0.9, "idle": 0.1}, "window_us": 300000.0,
           "step_us": [100000.0, 100000.0, 100000.0], **rank}
    return {"kind": "profile", "device": "cuda", "world_size": 1, "step_time_s": 0.1, "schedule": {"active": 3},
            "ranks": [row]}


def _profile(text: str, source: str = "profile.json") -> list[JudgeResult]:
    return get_suite("profile").judge_text(text, JudgeContext(), source=source, label=None)


def test_profile_plan_on_a_cpu_swaps_a_large_model_for_the_tiny_gpt() -> None:
    # the DGX example's AMP model is the default GPT (24 x 2048, vocab 50304: some 1.3 billion parameters)
    (test,), _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="local", local_gpus=0, gpus=1,
                            suites=["profile"])
    p = test.params
    assert (p.layers, p.hidden, p.precision) == (2, 128, "fp32")
    assert any("too large for a CPU; a 2-layer d=128 GPT ran instead" in n for n in test.notes)


def test_profile_documents_one_per_line_and_bad_lines() -> None:
    doc = json.dumps(_profile_doc())
    results = _profile(doc + "\n{not json\n" + json.dumps(_profile_doc(rank=1)) + "\nlog line\n")
    assert [r.label for r in results] == ["profile.json: #1", "profile.json: #2"]
    assert all(r.metrics["bound"] == "compute" for r in results)
    (r,) = _profile("no JSON here\n")
    assert r.verdict == "invalid" and 'no profile result ({"kind": "profile", ...})' in r.reasons[0]
    # a trace with events but none the breakdown can read is no profile either
    (r,) = _profile(json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name"}]}))
    assert r.verdict == "invalid"
    # a rank without an integer number or a breakdown is left out
    (r,) = _profile(json.dumps(_profile_doc(rank="0")))
    assert r.verdict == "invalid" and "holds no rank with a breakdown" in r.reasons[0]


@pytest.mark.parametrize(("idle", "verdict"), [(0.20, "warn"), (0.1999, "pass"), (0.4999, "warn"), (0.50, "fail")])
def test_profile_bound_thresholds(idle: float, verdict: str) -> None:
    # docs/blueprint-reference.md ProfileThresholds: max_idle 0.2 (reached: idle-bound), fail_share 0.5
    (r,) = _profile(json.dumps(_profile_doc(breakdown={"compute": 1 - idle, "idle": idle})))
    assert r.verdict == verdict, r.reasons
    assert r.metrics["bound"] == ("compute" if verdict == "pass" else "idle")


def test_profile_report_sections_of_a_report_without_profiles() -> None:
    profile = get_suite("profile")
    others = [JudgeResult(source="x", kind="nccl"), JudgeResult(source="p.json", kind="profile")]  # no ranks
    assert profile.markdown_section(others) == [] and profile.html_section(others, 0) is None


def test_profile_summary() -> None:
    profile = get_suite("profile")
    (r,) = _profile(json.dumps(_profile_doc(breakdown={"compute": 0.7, "idle": 0.3})))
    assert profile.summary(r) == "idle-bound (idle 30%) on 1 rank(s), step 100 ms" and profile.compared(r)
    r = JudgeResult(source="p.json", kind="profile", metrics={"bound": "compute", "world_size": 2, "straggler": 1})
    assert profile.summary(r) == "compute-bound on 2 rank(s); straggler rank 1"
    failed = JudgeResult(source="p.json", kind="profile")
    failed.degrade(Verdict.FAIL, "the profiled training step failed")
    assert profile.summary(failed) is None and not profile.compared(failed)
    assert summary(failed) == "the profiled training step failed"


# =====================================================================================================================
# fio (validate/suites/fio.py)
# =====================================================================================================================

# AWS FSx for Lustre "SSD storage performance" (https://docs.aws.amazon.com/fsx/latest/LustreGuide/ssd-storage.html,
# the catalog's fsx_lustre.performance_ssd): SCRATCH_2 reads 200 and writes 100 MB/s per TiB from disk and bursts to
# 1300 MB/s per TiB over the network; SCRATCH_1 has no row of its own.
FSX_SCRATCH = """apiVersion: clusterforge/v1
kind: Blueprint
name: fsx-scratch
target: {provider: aws, region: us-east-1, availability_zone: us-east-1a}
node_groups:
  - name: gpu
    count: 2
    instance_type: p5.48xlarge
network: {fabric: efa, placement: cluster}
storage:
  - kind: lustre
    name: scratch2
    mount: /fsx
    fsx: {deployment_type: SCRATCH_2, storage_capacity_gib: 2400}
  - kind: lustre
    name: scratch1
    mount: /fsx1
    fsx: {deployment_type: SCRATCH_1, storage_capacity_gib: 2400}
"""
TIB_2400_GIB = 2400 / 1024

# an NFS server declared at 2000 MB/s to one client, and a local NVMe scratch inside its mount without hardware.nvme
NFS_NESTED = """apiVersion: clusterforge/v1
kind: Blueprint
name: nfs-box
target: {provider: onprem, os: ubuntu-22.04}
node_groups:
  - name: gpu
    hosts: [{name: n1, address: 10.0.0.1}]
    hardware: {gpu: h100-sxm:8}
    local_nvme: {mount: /data/scratch}
network: {fabric: ethernet}
storage:
  - {kind: nfs, name: shared, mount: /data, server: 10.0.0.5, export: /export, throughput_mb_s: 2000}
"""
# docs/blueprint-reference.md, validation.fio.thresholds: warn below 0.7, fail below 0.4 of the expected rate
FIO_WARN = 0.7


def _fio_at(path: str, write_mb_s: float) -> dict[str, Any]:
    """fio-02 (one sequential 256 KiB write job, direct=1) as if run on ``path`` at ``write_mb_s`` MB/s."""
    doc = _set_write(_fio02(Path(__file__).resolve().parents[1] / "fixtures"), write_mb_s)
    doc["jobs"][0]["job options"]["filename"] = path
    return doc


def _fio_one(doc: Any, ctx: JudgeContext, source: str = "fio.json") -> JudgeResult:
    return _one(doc if isinstance(doc, str) else json.dumps(doc), ctx, "fio", source)


def test_fsx_scratch_expectations_come_from_the_per_tib_table() -> None:
    ctx = context_from_blueprint(parse_blueprint(FSX_SCRATCH, "fsx.yaml").blueprint)
    s2, s1 = (s for s in fio_expectations(ctx).storage)
    assert (s2.mount, s2.kind) == ("/fsx", "fsx-lustre")
    assert s2.read_mb_s == pytest.approx(TIB_2400_GIB * 200) and s2.write_mb_s == pytest.approx(TIB_2400_GIB * 100)
    # upper bound: the network burst, below one p5 client's 100 Gbit/s without EFA (12,500 MB/s)
    assert s2.upper_read_mb_s == pytest.approx(TIB_2400_GIB * 1300) and "network burst" in s2.upper_derivation
    assert (s1.read_mb_s, s1.write_mb_s, s1.upper_read_mb_s) == (None, None, None)
    assert "no per-unit throughput in the catalog" in s1.derivation


@pytest.mark.parametrize(("factor", "verdict"), [(FIO_WARN, "pass"), (FIO_WARN - 1e-6, "warn")])
def test_fsx_write_below_one_clients_share_names_the_fsx_causes(factor: float, verdict: str) -> None:
    ctx = context_from_blueprint(parse_blueprint(FSX_SCRATCH, "fsx.yaml").blueprint)
    r = _fio_one(_fio_at("/fsx/cf/fio-test.dat", TIB_2400_GIB * 100 * factor), ctx)
    assert r.expected["write_mb_s"] == pytest.approx(TIB_2400_GIB * 100, abs=1e-3)
    assert r.verdict == verdict, r.reasons
    if verdict == "warn":
        assert "this one client's share of the file system" in r.reasons[0] and "lfs setstripe" in r.reasons[0]


@pytest.mark.parametrize(("gbps", "efa", "mb_s", "why"), [
    (699.0, True, 699 * 125, "the client instance's 699 Gbit/s"),
    (700.0, True, 700 * 125, "AWS's per-client limit with EFA, 700 Gbit/s"),
    (None, False, 100 * 125, "AWS's per-client limit without EFA, 100 Gbit/s"),
])
def test_one_fsx_client_gets_the_smaller_of_its_network_and_awss_limit(gbps: float | None, efa: bool, mb_s: float,
                                                                       why: str) -> None:
    # AWS FSx for Lustre performance, "Throughput to individual client instances": 100 Gbit/s without EFA, 700 with
    # (catalog fsx_lustre_client); 1 Gbit/s = 125 MB/s
    assert fsx_client_mb_s(gbps, efa) == (pytest.approx(mb_s), why)


@pytest.mark.parametrize(("write_mb_s", "verdict"), [(1400.0, "pass"), (1399.99, "warn")])
def test_nfs_declared_throughput_is_the_expectation(write_mb_s: float, verdict: str) -> None:
    ctx = context_from_blueprint(parse_blueprint(NFS_NESTED, "nfs.yaml").blueprint)
    r = _fio_one(_fio_at("/data/cf/fio.dat", write_mb_s), ctx)
    assert (r.expected["target"], r.expected["write_mb_s"], r.verdict) == ("/data", 2000.0, verdict), r.reasons
    if verdict == "warn":
        assert "slow server/network path" in r.reasons[0]


def test_fio_job_paths_targets_and_several_mounts() -> None:
    ctx = context_from_blueprint(parse_blueprint(NFS_NESTED, "nfs.yaml").blueprint)
    # the deepest mount holding the path is the target, whichever the blueprint lists first
    r = _fio_one(_fio_at("/data/scratch/fio.dat", 100.0), ctx)
    assert r.expected["target"] == "/data/scratch" and "ratio" not in r.expected
    assert "no sequential write expectation for gpu NVMe scratch /data/scratch: no `hardware.nvme` declared" in r.notes[-1]
    # a path under no mount, two targets: the user must say which (no "no storage expectation" note: there are some)
    r = _fio_one(_fio_at("/mnt/elsewhere/fio.dat", 100.0), ctx)
    assert r.verdict == "pass" and r.expected == {}
    assert r.notes == [
        "the job's paths name no known mount and the cluster has several storage targets: pass --target MOUNT"]
    # --target names the second of them
    r = _fio_one(_fio_at("/mnt/elsewhere/fio.dat", 1399.99), apply_overrides(ctx, target="/data"))
    assert "judged against nfs shared /data (--target)" in r.notes and r.verdict == "warn"


def test_a_local_run_on_the_temporary_directory_records_figures_only(tmp_path: Path) -> None:
    loaded = parse_blueprint(NFS_NESTED, "nfs.yaml")
    (test,), notes = plan_tests(loaded, launcher="local", local_gpus=0, suites=["fio"])
    assert test.id == "fio-tmp" and any("none of the declared fio targets exists here" in n for n in notes)
    assert any(n.startswith("hardware mismatch:") for n in test.notes)
    ctx = get_suite("fio").context(loaded, test, "local")
    r = _fio_one(_fio_at("/mnt/elsewhere/fio.dat", 100.0), ctx)
    assert r.verdict == "pass" and r.expected == {}
    assert f"fio target {test.params.target} is not a storage target declared in the blueprint: figures recorded " \
           "only" in r.notes


def test_fio_targets_the_blueprint_names(tmp_path: Path) -> None:
    def targets(doc: dict[str, Any]) -> None:
        doc["validation"]["fio"] = {"targets": [str(tmp_path), "/scratch", "/scratch/sub", "/"]}

    loaded = _blueprint("onprem-l40s-roce.yaml", targets)
    tests, _ = plan_tests(loaded, launcher="slurm", suites=["fio"])
    slug = str(tmp_path).strip("/").replace("/", "-")
    assert [(t.id, t.params.target, t.params.target_kind) for t in tests] == [
        (f"fio-{slug}", str(tmp_path), "dir"), ("fio-scratch", "/scratch", "nvme"),
        ("fio-scratch-sub", "/scratch/sub", "nvme"), ("fio-root", "/", "dir")]
    fio = get_suite("fio")
    assert fio.payload_args(tests[1])[:4] == ["--target", "/scratch", "--kind", "nvme"]
    assert fio.gpus(tests[1]) == 0 and fio.mounts(tests[1]) == ("/scratch",)
    # on this machine: the directory that exists is tested, the others are named; no fallback, no mismatch
    tests, notes = plan_tests(loaded, launcher="local", local_gpus=0, suites=["fio"])
    assert [t.params.target for t in tests] == [str(tmp_path), "/"]
    assert "fio targets not present or not writable on this machine: /scratch, /scratch/sub" in notes
    assert all(not t.notes for t in tests)  # no "temporary directory" nor hardware-mismatch note on a fio test


@pytest.mark.parametrize(("meta", "verdict", "cause"), [
    ({"error": "fio is not installed on this node", "missing_tool": "fio"}, "invalid", "A tool that is not installed"),
    ({"error": "fio exited -9: killed", "fio_returncode": -9}, "fail", "fio was killed by SIGKILL"),
    ({"error": "fio exited -1: hung up", "fio_returncode": -1}, "fail", "fio was killed by SIGHUP"),
    # fio that exits 0 without its JSON was not killed (fio_bench.py records the status it got)
    ({"error": "fio exited 0 without JSON: no output", "fio_returncode": 0}, "fail",
     "fio reported an error (quoted above) on the target"),
    ({"error": "fio exited -99: ?", "fio_returncode": -99}, "fail", "fio was killed by signal 99"),
    ({"error": "fio exited -15 without JSON: no output"}, "fail", "fio was killed by SIGTERM"),
    ({"error": "fio exited 1: see job errors", "fio_returncode": 1,
      "fio_stderr": "fio: io_u error on file /scratch/x: No space left on device: write offset=0"}, "fail",
     "the target file system is full (ENOSPC)"),
    ({"error": "fio exited 1: see job errors", "fio_returncode": 1,
      "fio_stderr": "fio: pid=12, err=13/file:filesetup.c:150, func=open, error=Permission denied"}, "fail",
     "the target cannot be written"),
    ({"error": "interrupted by SIGTERM"}, "fail", "the run was interrupted"),
    ({"error": "fio exited 1: fio: bad option"}, "fail", "fio reported an error (quoted above) on the target"),
])
def test_the_fio_payloads_own_errors(meta: dict[str, Any], verdict: str, cause: str) -> None:
    # validate/payloads/fio_bench.py writes {"jobs": [], "clusterforge": {...}} when fio did not run to the end
    r = _fio_one({"jobs": [], "clusterforge": meta}, JudgeContext())
    assert r.verdict == verdict and cause in r.reasons[0], r.reasons
    assert (r.metrics.get("missing_tool") == "fio") is (verdict == "invalid")


@pytest.mark.parametrize("text", [json.dumps({"jobs": [], "clusterforge": "not a record"}),
                                  json.dumps({"jobs": [], "clusterforge": {"error": None}}),
                                  "fio-3.36 starting {but no JSON follows\n"])
def test_a_payload_document_without_an_error_and_no_job_is_invalid(text: str) -> None:
    r = _fio_one(text, JudgeContext())
    assert r.verdict == "invalid" and r.reasons == ["no fio job, result or verify line found"]


def test_a_verify_failure_in_a_jobs_file_fails_that_job(fixtures_dir: Path) -> None:
    # fio names the job's files <jobname>.<job>.<file>; the verify line as fio prints it (fixture fio-04)
    text = json.dumps(_fio02(fixtures_dir)) + (
        "\nsha256: verify failed at file disk_fill.0.0 offset 668565504, length 32768 (requested block: "
        "offset=668565504, length=32768, flags=88)\n")
    (r,) = _judge(text, JudgeContext(), "fio", "fio.txt")
    assert (r.label, r.verdict, r.metrics["verify_failures"]) == ("fio.txt: disk_fill", "fail", 1)
    assert "sha256 mismatch in disk_fill.0.0 at offset 668565504" in r.reasons[0]


def test_a_job_that_did_no_io_is_invalid(fixtures_dir: Path) -> None:
    doc = _fio01(fixtures_dir)
    for d in ("read", "write"):
        doc["jobs"][0][d].update({"io_bytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0, "total_ios": 0})
    r = _fio_one(doc, JudgeContext())
    assert r.verdict == "invalid" and r.reasons == ["fio job 'rand_read_write' did no I/O (0 bytes read and written)"]


@pytest.mark.parametrize(("options", "invalid"), [
    ({"bs": "4k"}, True),                        # one block size: 16 KiB per I/O contradicts it
    ({"bsrange": "4k-64k"}, False),              # a range: bytes per I/O say nothing
    ({"bs": "4k-64k"}, False),
    ({"bs": "4k,64k"}, False),                   # different read and write sizes
])
def test_bytes_per_io_are_only_held_to_one_fixed_block_size(fixtures_dir: Path, options: dict[str, str],
                                                            invalid: bool) -> None:
    doc = _fio01(fixtures_dir)
    doc["jobs"][0]["job options"].update(options)
    doc["jobs"][0]["read"]["total_ios"] //= 4  # 16 KiB per read I/O
    r = _fio_one(doc, JudgeContext())
    assert any("bytes per I/O, not the job's block size" in x for x in r.reasons) is invalid, r.reasons


def test_a_direction_without_iops_is_not_held_to_its_bandwidth(fixtures_dir: Path) -> None:
    doc = _fio01(fixtures_dir)
    doc["jobs"][0]["write"]["iops"] = 0  # IOPS x block size = 0 would contradict any bandwidth
    r = _fio_one(doc, JudgeContext())
    assert not any("IOPS x" in x for x in r.reasons), r.reasons


def _randread(fixtures_dir: Path, iops: float) -> dict[str, Any]:
    """fio-01 (4 x iodepth 64, 4 KiB, /dev/nvme0n1, 30 s) as a pure random read at ``iops``, kept self-consistent."""
    doc = _fio01(fixtures_dir)
    doc["global options"]["rw"] = "randread"
    job = doc["jobs"][0]
    job["job options"]["rw"] = "randread"
    job["write"].update({"io_bytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0, "total_ios": 0})
    rd = job["read"]
    rd.update({"iops": iops, "bw_bytes": iops * 4096, "bw": iops * 4})
    rd["io_bytes"] = round(iops * 4096 * rd["runtime"] / 1000)
    rd["total_ios"] = rd["io_bytes"] // 4096
    return doc


@pytest.mark.parametrize(("iops", "verdict"), [(2_500_000, "pass"), (2_500_001, "invalid"),
                                               (1_400_000, "pass"), (1_399_999, "warn")])
def test_instance_store_iops_bound_and_ratio(fixtures_dir: Path, iops: int, verdict: str) -> None:
    # AWS p4d.24xlarge: 8 x 1000 GB NVMe, 2,000,000 4 KiB random read IOPS for all volumes
    # (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html); 25% above it cannot be these drives (the fio
    # suite's documented margin), 0.7 of it is the documented warn ratio
    r = _fio_one(_randread(fixtures_dir, iops), context_from_flags(instance_type="p4d.24xlarge"))
    assert r.verdict == verdict, r.reasons
    fio = get_suite("fio")
    if verdict == "invalid":
        assert r.expected["upper_read_iops"] == 2_000_000 and "ratio" not in r.expected
        assert "IOPS is above what p4d.24xlarge NVMe instance store can physically deliver" in r.reasons[0]
        assert fio.expected_text(r) is None
    else:
        assert r.expected["read_iops"] == 2_000_000 and fio.expected_text(r) == "read 2e+06 IOPS"
        assert fio.summary(r).endswith(f"IOPS = {round(iops / 2e4)}% of expected")


def test_fio_summary_expected_text_and_plot(fixtures_dir: Path) -> None:
    fio = get_suite("fio")
    l40s = apply_overrides(context_from_blueprint(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint),
                           target="/scratch")
    # the L40S example's /scratch: a RAID0 of 2 Micron 7450 at 5600 MB/s sequential write each
    r = _fio_one(_set_write(_fio02(fixtures_dir), 7840.0), l40s)
    assert fio.summary(r) == "write bs=256 KiB: write 7840 MB/s, 2.991e+04 IOPS = 70% of expected"
    assert fio.expected_text(r) == "write 11200 MB/s"
    bare = _fio_one(_fio02(fixtures_dir), JudgeContext())  # no expectation: figures only
    assert fio.expected_text(bare) is None and "of expected" not in fio.summary(bare)
    assert fio.summary(JudgeResult(source="x", kind="fio")) is None
    section = fio.html_section([r, bare, JudgeResult(source="x", kind="nccl")], 0)
    assert section is not None and section.heading == "Storage (fio)" and _is_png(section.png)
    assert _is_png(fio.html_section([bare], 0).png)  # no expectation to mark, one bar (no log scale)
    assert fio.html_section([JudgeResult(source="x", kind="fio")], 0) is None


# =====================================================================================================================
# NCCL (validate/suites/nccl.py)
# =====================================================================================================================

# ml-engineering network/README.md (stas00, commit 744d01e): about 80% of a link's advertised rate is achievable
ACHIEVABLE = 0.8
# docs/blueprint-reference.md, validation.nccl.thresholds: warn below 0.8, fail below 0.5 of the expected busbw
NCCL_WARN, NCCL_FAIL = 0.8, 0.5
_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]")


def _fixture(fixtures_dir: Path, name: str) -> str:
    return (fixtures_dir / "nccl-tests" / name).read_text()


@pytest.mark.filterwarnings("ignore:No artists with labels found to put in legend")  # the 0-byte-only plot
def test_nccl_summary_expected_text_curves_and_plot(fixtures_dir: Path) -> None:
    nccl = get_suite("nccl")
    r = _nccl(_nccl04(fixtures_dir), context_from_flags(**A100_NODE))
    # 8 x A100 on one node: NVLink 300 GB/s one way x 0.8 = 240 GB/s; the log peaks at 235.26 GB/s at 8 GiB
    assert nccl.summary(r) == "all_reduce, 8 ranks / 1 node(s): peak busbw 235.3 GB/s at 8 GiB = 98% of expected 240 GB/s"
    assert nccl.expected_text(r) == "busbw 240 GB/s" and nccl.compared(r)
    oop, ip = busbw_curves(r)
    assert (oop.label, ip.label) == ("busbw out-of-place", "busbw in-place")
    assert oop.points[0][0] == 4.0 and oop.points[-1] == (8589934592.0, 235.26)  # the 0-byte rows are left out
    assert _is_png(nccl.result_plot(r))
    bare = JudgeResult(source="x", kind="nccl", series={"size": [8], "busbw_oop": [0.1], "busbw_ip": [None]})
    assert nccl.result_plot(bare) is None and nccl.summary(bare) is None and nccl.expected_text(bare) is None
    # a result without an expectation, one recorded without its ratios, one of 0-byte sizes only: still drawn
    two = {"size": [8, 16], "busbw_oop": [0.1, 0.2], "busbw_ip": [0.1, 0.2]}
    for expected in ({}, {"busbw_gbps": 100.0}):
        assert _is_png(nccl.result_plot(JudgeResult(source="x", kind="nccl", series=two, expected=expected)))
    zeros = {"size": [0, 0], "busbw_oop": [0.0, 0.0], "busbw_ip": [0.0, 0.0]}
    assert _is_png(nccl.result_plot(JudgeResult(source="x", kind="nccl", series=zeros)))
    assert busbw_curves(JudgeResult(source="x", kind="nccl", series={"size": [0, 8], "busbw_oop": [1.0, None]})) == []


def test_a_nccl_tests_json_document_is_read_whole(tmp_path: Path) -> None:
    from validate.judge import judge_file

    from .test_parsers import _json_doc

    p = tmp_path / "all_reduce.json"
    p.write_text(json.dumps(_json_doc(), indent=1))
    ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="h100-sxm")
    (from_file,) = judge_file(p, ctx)
    (from_text,) = _judge(p.read_text(), ctx, "nccl", str(p))
    assert from_file.metrics["peak_busbw_gbps"] == pytest.approx(255.6 * 1.875)
    assert from_file.to_json() == from_text.to_json()


def test_nccl_plan_moe_one_rank_and_payload_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def moe(doc: dict[str, Any]) -> None:
        doc["workload"] = {"parameters_b": 47, "architecture": "moe", "experts": 8, "active_parameters_b": 13}

    tests, notes = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml", moe), launcher="slurm", suites=["nccl"])
    assert [t.params.collective for t in tests] == ["all_reduce", "all_gather", "reduce_scatter", "alltoall"]
    assert "workload is mixture-of-experts: alltoall added to the collectives" in notes
    tests, notes = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="slurm", suites=["nccl"])
    assert "alltoall" not in [t.params.collective for t in tests] and not notes
    nccl = NcclSuite()
    t = tests[0]
    assert nccl.binary_name(t) == "all_reduce" and nccl.gpus(t) == 8
    # validation.nccl defaults (docs/blueprint-reference.md): 8 bytes to 8 GiB, factor 2, 20 iterations, 5 warm-up, -c 1
    assert nccl.payload_args(t) == ["-o", "all_reduce", "-b", "8", "-e", "8589934592", "-f", "2", "-n", "20", "-w",
                                    "5", "-c", "1", "--device", "cuda"]
    assert nccl.binary_flags(t, 8) == ["-b", "8", "-e", "8589934592", "-f", "2", "-n", "20", "-w", "5", "-c", "1",
                                       "-g", "8"]
    binary = tmp_path / "all_reduce_perf"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert nccl.local_binary(t, [str(tmp_path)]) == str(binary)
    # one GPU on this machine: one rank, said in the plan
    monkeypatch.setattr("validate.runner._local_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    tests, _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="local", local_gpus=1, suites=["nccl"])
    assert all("one rank: busbw is 0 by definition" in " ".join(x.notes) for x in tests)
    tests, _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="local", local_gpus=2, suites=["nccl"])
    assert not any("one rank" in " ".join(x.notes) for x in tests) and nccl.gpus(tests[0]) == 2
    tests, _ = plan_tests(_blueprint("onprem-dgx-h100-ib.yaml"), launcher="local", local_gpus=0, suites=["nccl"])
    assert nccl.gpus(tests[0]) == 0


# 2 nodes x 8 GPUs with 4 NICs of 400 Gbit/s each: B = 4 x 400 / 8 / 8 = 25 GB/s per GPU (no GPU named: the network
# alone bounds it). The formulas are those of expected_busbw's documentation (ml-engineering's network chapter).
NET2 = {"fabric": "infiniband", "nic_gbps": 400, "nics_per_node": 4}
B_NET2 = 4 * 400 / 8 / 8


@pytest.mark.parametrize(("collective", "expected", "upper"), [
    ("sendrecv", ACHIEVABLE * B_NET2, 8 * B_NET2),                       # f x B; line rate g x B
    ("all_gather", ACHIEVABLE * 8 * B_NET2, B_NET2 * 15 / 1),            # f x g x B; B x (n-1)/(k-1)
    ("reduce_scatter", ACHIEVABLE * 8 * B_NET2, B_NET2 * 15 / 1),
    ("broadcast", ACHIEVABLE * 8 * B_NET2, 8 * B_NET2),                  # f x g x B; g x B
    ("reduce", ACHIEVABLE * 8 * B_NET2, 8 * B_NET2),
    ("alltoall", ACHIEVABLE * B_NET2 * 15 / 8, B_NET2 * 15 / 8),         # f x B x (n-1)/(n-g)
])
def test_expected_busbw_of_each_collective_across_two_nodes(collective: str, expected: float, upper: float) -> None:
    e = expected_busbw(context_from_flags(**NET2), collective=collective, ranks=16, nodes=2, gpu_key=None)
    assert e is not None and e.basis == "network" and e.intra_gbps is None
    assert e.busbw_gbps == pytest.approx(expected) and e.upper_gbps == pytest.approx(upper)


def test_expected_busbw_without_a_collective_takes_the_lowest_candidate() -> None:
    ctx = context_from_flags(**NET2)
    for cands in (("sendrecv", "all_gather"), ("all_gather", "sendrecv")):
        e = expected_busbw(ctx, collective=None, ranks=16, nodes=2, gpu_key=None, candidates=cands)
        assert e.busbw_gbps == pytest.approx(ACHIEVABLE * B_NET2) and e.algorithm == "p2p"


def test_expected_busbw_of_one_rank_is_only_a_declared_threshold() -> None:
    assert expected_busbw(JudgeContext(), collective="all_reduce", ranks=1, nodes=1, gpu_key="a100-40gb-sxm") is None
    e = expected_busbw(JudgeContext(), collective="all_reduce", ranks=1, nodes=1, gpu_key=None, min_busbw_gbps=100)
    assert (e.busbw_gbps, e.basis, e.source) == (100, "threshold", "blueprint")


def test_an_unknown_nic_count_assumes_one_nic_per_gpu(fixtures_dir: Path) -> None:
    # OCI A100 2 x 8 (nccl-09) with a 200 Gbit/s NIC rate and no count: 8 NICs assumed, B = 8 x 200 / 8 / 8 = 25 GB/s;
    # on 2 nodes the tree: t x 2(n-1)/n x g x B with t the catalog's measured tree fraction
    t = float(catalog().extras["nccl_algorithms"]["tree_two_node_fraction"])
    ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm", fabric="roce", nic_gbps=200)
    r = _nccl(_fixture(fixtures_dir, "nccl-09.txt"), ctx)
    assert "NIC count unknown: assumed one 200 Gbit/s NIC per GPU (pass --nics-per-node)" in r.notes
    assert r.expected["inter_node_gbps"] == pytest.approx(t * 2 * 15 / 16 * 8 * 25, abs=1e-3)
    r = _nccl(_fixture(fixtures_dir, "nccl-09.txt"), apply_overrides(ctx, nics_per_node=8))
    assert not any("NIC count unknown" in n for n in r.notes)


def test_intra_node_rate_of_an_unknown_or_missing_gpu_is_none() -> None:
    assert intra_node_gbytes_s("zz9-sxm") is None and intra_node_gbytes_s(None) is None
    # NVIDIA L40S: PCIe Gen4 x16, no NVLink; the catalog's PCIe table (ml-engineering): 31 GB/s one way
    assert intra_node_gbytes_s("l40s")[:2] == (31.0, "pcie")


def test_runs_without_a_table_or_without_data(fixtures_dir: Path) -> None:
    lines = _nccl04(fixtures_dir).splitlines()
    header = "\n".join(ln for ln in lines if not _ROW.match(ln)) + "\n"
    r = _nccl(header, context_from_flags(**A100_NODE))
    assert r.verdict == "invalid" and r.reasons[0].startswith("no result table: the run printed a header but no sizes")
    zeros = "\n".join(ln for ln in lines if not _ROW.match(ln) or int(ln.split()[0]) <= 64) + "\n"  # busbw 0.00 rows
    r = _nccl(zeros, context_from_flags(**A100_NODE))
    assert r.verdict == "invalid" and r.reasons == [
        "every busbw is 0: the run moved no data between ranks (one rank per communicator?)"]


def test_nccl_warn_lines_are_noted_and_the_min_bw_check_warns(fixtures_dir: Path) -> None:
    text = _with_line(_nccl04(fixtures_dir), "hostname:3442:3442 [0] NCCL WARN Could not find real path of "
                      "/sys/class/net/ib0", before="#       size")
    r = _nccl(text, context_from_flags(**A100_NODE))
    assert r.verdict == "pass" and "NCCL WARN Could not find real path of /sys/class/net/ib0" in r.notes
    # NCCL_TESTS_MIN_BW: nccl-tests marks its own average FAILED
    failed = re.sub(r"(# Avg bus bandwidth\s*:\s*\S+)", r"\1 FAILED", _nccl04(fixtures_dir))
    r = _nccl(failed, context_from_flags(**A100_NODE))
    assert r.verdict == "warn" and r.reasons == [
        "nccl-tests' own NCCL_TESTS_MIN_BW check FAILED (Avg bus bandwidth 68.4048 GB/s)"]


def _broadcast_without_devices() -> str:
    """A broadcast_perf table without 'Using devices' lines: busbw = algbw for any rank count, so the table does not
    say how many ranks ran."""
    rows = []
    for i, size in enumerate(1 << k for k in range(20, 26)):
        t = 100.0 * (i + 1)
        bw = size / t / 1e3
        rows.append(f"{size:>12} {size // 4:>12}     float    none       0  {t:8.2f} {bw:7.2f} {bw:7.2f}      0  "
                    f"{t:8.2f} {bw:7.2f} {bw:7.2f}      0")
    return ("$ ./build/broadcast_perf -b 1M -e 32M -f 2\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
            "busbw #wrong\n" + "\n".join(rows) + "\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 24.2\n")


def test_a_run_whose_rank_count_is_unknown_gets_no_bandwidth_verdict() -> None:
    r = _nccl(_broadcast_without_devices(), context_from_flags(gpu="a100-40gb-sxm"))
    assert r.metrics["ranks"] is None and r.verdict == "pass" and "busbw_gbps" not in r.expected
    assert ("number of ranks unknown (no 'Using devices' lines and the table does not pin it down): pass --nodes and "
            "--gpus-per-node to judge the bandwidth") in r.notes
    # the flags say it: 1 node x 8 GPUs, judged against NVLink (A100 300 GB/s one way x 0.8); 55.9 GB/s fails
    r = _nccl(_broadcast_without_devices(), context_from_flags(gpu="a100-40gb-sxm", nodes=1, gpus_per_node=8))
    assert r.metrics["ranks"] == 8 and r.expected["busbw_gbps"] == pytest.approx(300 * ACHIEVABLE)
    assert r.verdict == "fail"


def test_a_gpu_the_catalog_does_not_know_gives_no_expectation(fixtures_dir: Path) -> None:
    text = _nccl04(fixtures_dir).replace("A100-SXM4-40GB", "Acme X1")
    r = _nccl(text, context_from_flags(nodes=1))
    assert r.verdict == "pass" and r.expected == {}
    assert "GPU 'Acme X1' is not in the hardware catalog; no NVLink expectation (pass --gpu)" in r.notes
    assert "no expectation: the GPU model (--gpu) unknown; peak busbw 235.3 GB/s at 8 GiB recorded" in r.notes


def test_a_run_on_fewer_gpus_or_nodes_than_declared_says_so(fixtures_dir: Path) -> None:
    r = _nccl(_nccl04(fixtures_dir), context_from_flags(gpus_per_node=16, gpu="a100-40gb-sxm"))
    assert "the run used 8 of 16 GPUs per node" in r.notes and r.verdict == "pass"
    r = _nccl(_nccl04(fixtures_dir), context_from_flags(gpus_per_node=8, gpu="a100-40gb-sxm"))
    assert not any("GPUs per node" in n for n in r.notes)
    # the EKS p4d example declares 2 nodes; the log ran on one host
    ctx = context_from_blueprint(load_blueprint(EXAMPLES / "aws-eks-p4d.yaml").blueprint)
    r = _nccl(_nccl04(fixtures_dir), ctx)
    assert "the run used 1 of the blueprint's 2 nodes" in r.notes
    r = _nccl(_nccl04(fixtures_dir), apply_overrides(ctx, nodes=1))  # the user says one node: nothing to note
    assert not any("of the blueprint's" in n for n in r.notes)


P4DE = {"instance_type": "p4de.24xlarge", "nodes": 2}


def test_efa_without_its_plugin_is_socket_speed(fixtures_dir: Path) -> None:
    # the line NCCL prints when it finds no network plugin (aws-ofi-nccl missing), prefixed as srun --label prints it
    line = ("0: node-1:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal "
            "implementation\n")
    r = _nccl(line + _fixture(fixtures_dir, "nccl-01.txt"), context_from_flags(**P4DE))
    assert r.verdict == "fail" and r.reasons[0].startswith(
        "NCCL used TCP sockets on an EFA cluster ('NET/Plugin' found no plugin). Likely cause: NCCL is not using the "
        "EFA provider")
    assert _nccl(_fixture(fixtures_dir, "nccl-01.txt"), context_from_flags(**P4DE)).verdict == "pass"


@pytest.mark.parametrize(("found", "verdict"), [(3, "warn"), (4, "pass")])
def test_efa_interfaces_the_ofi_plugin_found(fixtures_dir: Path, found: int, verdict: str) -> None:
    # AWS p4de.24xlarge: 4 EFA interfaces (https://aws.amazon.com/ec2/instance-types/p4/)
    line = f"0: node-1:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found {found} nics)\n"
    r = _nccl(line + _fixture(fixtures_dir, "nccl-01.txt"), context_from_flags(**P4DE))
    assert r.metrics["net_provider"] == "efa" and r.verdict == verdict, r.reasons
    if verdict == "warn":
        assert r.reasons[0].startswith(f"the OFI plugin found {found} of the 4 declared EFA interfaces.")


def test_a_partition_key_in_nccl_ib_pkey_is_named_for_an_error_after_the_table(fixtures_dir: Path) -> None:
    # amd-agi/maxtext-slurm docs/ib-pkey-fix-report-en.md: NCCL_IB_PKEY=0xf0dc (a key, not an index); an error line
    # after the results
    text = ("export NCCL_IB_PKEY=0xf0dc\n" + _fixture(fixtures_dir, "nccl-09.txt")
            + "node-1: Test NCCL failure common.cu:1005 'unhandled system error'\n")
    r = _nccl(text, context_from_flags(**IB4))
    assert r.verdict == "fail" and r.reasons[0].startswith(
        "the run reported \"Test NCCL failure common.cu:1005 'unhandled system error'\" on node-1. the log sets "
        "NCCL_IB_PKEY=0xf0dc.")
    assert "Also: " in r.reasons[0]


def test_a_crash_with_every_rank_on_device_0_names_the_binding(fixtures_dir: Path) -> None:
    text = re.sub(r"(on node-\d device) +\d", r"\1  0", _fixture(fixtures_dir, "nccl-09.txt"))
    text = "\n".join(ln for ln in text.splitlines() if not _ROW.match(ln)) + (
        "\nnode-1: Test NCCL failure common.cu:1005 'unhandled cuda error'\n")
    r = _nccl(text, context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm"))
    assert r.verdict == "fail" and r.reasons[0].startswith("crashed before printing a result: ")
    assert ("the device lines show all 8 ranks of node-1 (and 1 more host(s)) on 'device 0': each task was given only "
            "its own GPU. Likely cause:") in r.reasons[0]


def test_gpudirect_rdma_disabled_in_the_log_warns(fixtures_dir: Path) -> None:
    # NCCL's own line (the signature's example); no channel lines say more
    line = "node-1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"
    r = _nccl(_with_info(_fixture(fixtures_dir, "nccl-09.txt"), [line]), context_from_flags(**IB4))
    assert r.verdict == "warn" and r.reasons[0].startswith(
        "the log says \"GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\". Likely cause: GPUDirect RDMA is disabled")
    assert _nccl(_fixture(fixtures_dir, "nccl-09.txt"), context_from_flags(**IB4)).verdict == "pass"


def test_low_busbw_with_channel_lines_names_the_network(fixtures_dir: Path) -> None:
    info = [USING4.format(h=1), USING4.format(h=2), *_channels([0, 1, 2, 3])]
    r = _nccl(_scale(_with_info(_fixture(fixtures_dir, "nccl-09.txt"), info), 0.6), context_from_flags(**IB4))
    assert r.verdict == "warn" and "below the warn ratio 0.8. Likely cause: inter-node traffic below the NIC rate" in \
        r.reasons[0]
    assert "every HCA listed in NCCL_IB_HCA and at full link rate" in r.reasons[0]
    assert "the NCCL INFO lines show NET/IB x16; if one node alone is slow too" in r.reasons[0]
    # socket channels explain it: the low figure points at them
    socket = _channels([0, 1, 2, 3], "Socket", gdr=False)
    r = _nccl(_scale(_with_info(_fixture(fixtures_dir, "nccl-09.txt"), socket), 0.6), context_from_flags(**IB4))
    assert r.reasons[0].startswith("NCCL used TCP sockets on an InfiniBand cluster")
    assert r.reasons[-1].endswith("below the warn ratio 0.8. Likely cause: the transport named above")


@pytest.mark.parametrize(("peak", "verdict"), [(24.8 * NCCL_FAIL, "warn"), (24.8 * NCCL_FAIL - 0.01, "fail")])
def test_low_busbw_between_pcie_gpus_names_pcie(fixtures_dir: Path, peak: float, verdict: str) -> None:
    # NVIDIA L40S: PCIe Gen4 x16 (no NVLink), 31 GB/s one way in the catalog's PCIe table x 0.8 = 24.8 GB/s
    text = with_peak(_nccl04(fixtures_dir).replace("A100-SXM4-40GB", "NVIDIA L40S"), peak)
    r = _nccl(text, context_from_flags(nodes=1, gpus_per_node=8, gpu="l40s"))
    assert r.expected["basis"] == "pcie" and r.expected["busbw_gbps"] == pytest.approx(31 * ACHIEVABLE)
    assert r.verdict == verdict, r.reasons
    assert "Likely cause: PCIe peer-to-peer goes through the CPU" in r.reasons[0]


def test_shared_memory_channels_warn_only_where_nvlink_is_known(fixtures_dir: Path) -> None:
    shm = [f"node-1:1:{c} [{c}] NCCL INFO Channel {c:02d}/0 : {c}[{c}] -> {(c + 1) % 8}[{(c + 1) % 8}] via "
           "SHM/direct/direct" for c in range(8)]
    flags = {"nodes": 2, "gpus_per_node": 8, "fabric": "roce", "nic_gbps": 100, "nics_per_node": 16}
    r = _nccl(_with_info(_fixture(fixtures_dir, "nccl-09.txt"), shm), context_from_flags(**flags))
    assert r.verdict == "warn" and "8 intra-node channel(s) 'via SHM'" in r.reasons[0]  # A100: NVLink 3
    unknown = _fixture(fixtures_dir, "nccl-09.txt").replace("A100-SXM4-40GB", "Acme X1")
    r = _nccl(_with_info(unknown, shm), context_from_flags(**flags))
    assert r.verdict == "pass" and r.metrics["transports"] == {"SHM": 8}, r.reasons


def test_a_size_beyond_64_bits_is_judged_not_a_traceback(fixtures_dir: Path) -> None:
    lines = _nccl04(fixtures_dir).splitlines()
    last = max(i for i, ln in enumerate(lines) if _ROW.match(ln))
    lines.insert(last + 1, f"{2 ** 64:>20}  {2 ** 62}   float     sum    35.20    0.00    1.00    N/A    34.05    0.00    "
                           "1.00    N/A")
    r = _nccl("\n".join(lines) + "\n", context_from_flags(**A100_NODE))
    assert r.metrics["max_size_bytes"] == 2 ** 64 and r.metrics["peak_busbw_gbps"] == 235.26
    assert r.verdict == "warn" and "busbw cliff" in r.reasons[0]


def test_each_placement_of_the_curve_is_judged_on_its_own() -> None:
    # an nccl-tests -J document (tests/validate/test_parsers.py) whose out-of-place busbw is "nan" at every size: the
    # in-place curve, falling by half at the largest size, is still judged
    from .test_parsers import _json_doc

    doc = _json_doc()
    first = json.loads(json.dumps(doc["results"][0]))
    first.update(size=2 ** 14, count=2 ** 12)
    doc["results"].insert(0, first)
    for row, bw in zip(doc["results"], (50.0, 100.0, 300.0, 150.0), strict=True):
        row["out_of_place"]["bus_bw"], row["in_place"]["bus_bw"] = "nan", bw
    r = _one(json.dumps(doc), context_from_flags(nodes=2, gpus_per_node=8, gpu="h100-sxm"), "nccl", "all_reduce.json")
    assert r.series["busbw_oop"] == [None] * 4
    assert any(x.startswith("in-place busbw cliff from 4 GiB: busbw collapses from 300 GB/s at 64 MiB to 150 GB/s")
               for x in r.reasons), r.reasons


def _gloo(rows: list[tuple[int, float]]) -> str:
    """A two-process gloo run of the torch benchmark (tests/validate/test_judge.py's CPU run) with ``rows``
    (size bytes, busbw GB/s)."""
    table = "\n".join(f"{s:>12} {s // 4:>12}     float     sum      -1   100.00 {bw:7.2f} {bw:7.2f}      0   100.00 "
                      f"{bw:7.2f} {bw:7.2f}      0" for s, bw in rows)
    return ("# clusterforge torch.distributed collective benchmark version 1 (nccl-tests table format) torch 2.13.0 "
            "backend gloo\n# Collective test starting: all_reduce_perf\n"
            "# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 "
            "validation: 1 graph: 0\n# Using devices\n"
            "#  Rank  0 Group  0 Pid  1 on  ws device  0 [cpu] cpu (gloo)\n"
            "#  Rank  1 Group  0 Pid  2 on  ws device  1 [cpu] cpu (gloo)\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
            "busbw #wrong\n" + table + "\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1\n"
            "# Collective test concluded: all_reduce_perf\n")


def test_a_smooth_cpu_curve_gets_no_irregularity_note() -> None:
    r = _nccl(_gloo([(1024, 1.0), (2048, 2.0), (4096, 3.0), (8192, 4.0)]), JudgeContext())
    assert r.verdict == "pass" and any("CPU measurement" in n for n in r.notes)
    assert not any("irregular" in n for n in r.notes)
    # two sizes are too few to judge the shape of a GPU curve either
    r = _nccl(_gloo([(1024, 4.0), (2048, 1.0)]), JudgeContext())
    assert not any("irregular" in n for n in r.notes)
    r = _nccl(_gloo([(1024, 4.0), (2048, 1.0), (4096, 1.0)]), JudgeContext())
    assert any("the CPU curve is irregular (2 dip(s)" in n for n in r.notes), r.notes
