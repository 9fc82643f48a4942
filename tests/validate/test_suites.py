"""Suites as units: one registry that the runner, judge, reports, launchers and CLI use; typed test
plans and results; a new suite is one module plus its registration.

A new suite written as its own module and registered is shown end to end in
``test_adding_a_suite.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import random
import re
from pathlib import Path
from types import MappingProxyType

import pytest

from blueprints import load_blueprint
from blueprints.models import FABRICS, NETWORK_MODELS, EthernetNetwork, InfinibandNetwork, fabric_tag
from validate.expectations import (
    FABRIC_NAMES,
    IB_VERBS_FABRICS,
    RDMA_FABRICS,
    JudgeContext,
    context_from_blueprint,
)
from validate.judge import worst
from validate.payloads import PAYLOAD_DIR
from validate.plan import TestParams
from validate.results import VERDICTS, JudgeResult, Verdict, exit_code_for
from validate.runner import plan_tests, run_with
from validate.suites import (
    REGISTRY,
    Placement,
    Suite,
    detect_kind,
    get_suite,
    payload_files,
    suite_names,
)
from validate.suites.amp import AmpParams

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"

# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------


def test_the_registry_lists_the_five_suites_in_run_order() -> None:
    assert suite_names() == ("node", "nccl", "fio", "amp", "profile")
    for name, suite in REGISTRY.items():
        assert isinstance(suite, Suite) and suite.name == name and get_suite(name) is suite
        assert issubclass(suite.params_type, TestParams) and dataclasses.is_dataclass(suite.params_type)
        for f, path in suite.payload_files().items():
            assert path == PAYLOAD_DIR / f and path.is_file()
    assert [s.name for s in REGISTRY.values() if s.runs_first] == ["node"]
    assert {s.name: s.placement for s in REGISTRY.values()} == {
        "node": Placement.EVERY_NODE, "nccl": Placement.RANKS, "fio": Placement.ONE_NODE, "amp": Placement.ONE_NODE,
        "profile": Placement.ONE_NODE}
    # the payload files the launchers and `clusterforge render` copy are the suites', in registry order
    assert payload_files() == {f: p for s in REGISTRY.values() for f, p in s.payload_files().items()}
    assert list(payload_files()) == ["node_health.py", "collectives.py", "nccl_tests.py", "fio_bench.py", "amp_bench.py",
                                   "profile_bench.py", "trace_breakdown.py"]
    with pytest.raises(Exception, match="unknown suite 'iperf'; choose from node, nccl, fio, amp, profile"):
        get_suite("iperf")


def test_runner_judge_report_launchers_and_cli_name_no_suite() -> None:
    """They look suites up in the registry: no comparison with a suite name (``kind == "nccl"``,
    ``kind in ("fio", "amp")``) is left outside the suites' own modules."""
    names = set(suite_names())
    files = [REPO / "validate" / f for f in ("runner.py", "judge.py", "report.py", "results.py", "plan.py",
                                             "expectations.py")]
    files += sorted((REPO / "validate" / "launchers").glob("*.py"))
    files += [REPO / "clusterforge" / "commands" / f for f in ("validate.py", "judge.py", "report.py")]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in names]
                found += [f"{path.relative_to(REPO)}:{c.lineno}: {c.value!r}" for c in consts]
    assert not found, "suite names compared outside validate/suites:\n" + "\n".join(found)
    # nor do they import what belongs to one suite: its module, its parser, its payload, the node checks
    private = {f"validate.suites.{n}" for n in names} | {f"validate.parsers.{n}" for n in names} | {
        "validate.node_checks", "validate.payloads.nccl_tests", "validate.payloads.collectives"}
    imports = []
    for path in files:
        pkg = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[:len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                mods = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            imports += [f"{path.relative_to(REPO)}:{node.lineno}: {m}" for m in mods if m in private]
    assert not imports, "suite modules imported outside validate/suites:\n" + "\n".join(imports)


# What a suite expects is the suite's formula, in its own module; the judge context only asks.
SUITE_FORMULAS = {
    "nccl": ("expected_busbw", "BusbwExpectation", "intra_node_gbytes_s", "_nvls", "tree_two_node_fraction",
             "BUSBW_BOUND_MARGIN"),
    "amp": ("mfu_floor", "MFU_FLOOR_HOPPER"),
    "fio": ("StorageExpectation", "FioExpectations", "_nvme_expectations", "_shared_expectations", "fsx_client_mb_s",
            "FIO_BOUND_MARGIN", "_resolve_target"),
}


def _tokens(identifier: str) -> set[str]:
    """``fio_target`` -> {fio, target}; ``NcclThresholds`` -> {nccl, thresholds}."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", identifier)
    return {w.lower() for w in words}


def _identifiers(tree: ast.AST) -> list[tuple[int, str]]:
    """Every name the module defines, reads, imports or takes as a keyword or attribute."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.lineno, node.name))
        elif isinstance(node, ast.Name):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.arg):
            out.append((node.lineno, node.arg))
        elif isinstance(node, ast.keyword) and node.arg:
            out.append((node.value.lineno, node.arg))
        elif isinstance(node, ast.alias):
            out.append((node.lineno, node.asname or node.name))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+", node.value):
            out.append((node.lineno, node.value))  # a key such as "fio_target" (docstrings are prose, not keys)
    return out


def test_the_judge_context_knows_no_suite_and_each_formula_lives_in_its_suite() -> None:
    """``validate/expectations.py`` holds the suite-independent judge context and asks the registered
    suites for their expectations: it neither defines nor names a suite's formula, and no name in it
    carries a registered suite's name (the node suite's name is also the word for a machine, which the
    context's hardware fields use: ``nics_per_node``). Each formula is defined in its suite's module."""
    import importlib

    path = REPO / "validate" / "expectations.py"
    ids = _identifiers(ast.parse(path.read_text()))
    formulas = {f for fs in SUITE_FORMULAS.values() for f in fs}
    named = [f"expectations.py:{ln}: {n}" for ln, n in ids if n in formulas]
    assert not named, "a suite's formula is named by the judge context again:\n" + "\n".join(named)
    suites = set(suite_names()) - {"node"}
    carrying = sorted({f"expectations.py:{ln}: {n}" for ln, n in ids if _tokens(n) & suites})
    assert not carrying, "the judge context names a suite:\n" + "\n".join(carrying)
    for suite, names in SUITE_FORMULAS.items():
        module = importlib.import_module(f"validate.suites.{suite}")
        tree = ast.parse(Path(module.__file__ or "").read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
            t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        assert set(names) <= defined, f"validate/suites/{suite}.py lacks {sorted(set(names) - defined)}"
    # the context holds what the suites answered, by suite name, and shows it where the fields stood
    ctx = context_from_blueprint(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint)
    assert list(ctx.expectations) == ["nccl", "fio", "amp"]  # the registry's order (node expects nothing)
    assert ctx.expectations["fio"] is ctx.expectations_for("fio", type(ctx.expectations["fio"]))
    # nccl and amp both hold the group's declared software stack (validate.stack)
    assert ctx.expectations["nccl"] == ctx.expectations["amp"] and type(ctx.expectations["amp"]).__name__ == "StackExpectations"
    assert [k for k in ctx.to_json() if k in ("storage", "fio_target", "declared_stack")] == [
        "declared_stack", "storage", "fio_target"]


def test_a_suite_registered_later_is_asked_for_its_expectations() -> None:
    """The context asks every registered suite (:func:`validate.suites.register`), not a list of its own."""
    from validate.expectations import apply_overrides, context_from_flags
    from validate.suites import register, unregister

    @dataclasses.dataclass(frozen=True)
    class Probe:
        group: str | None = None
        flag: str | None = None

        def to_json(self) -> dict[str, object]:
            return {"probe_group": self.group, "probe_flag": self.flag}

    class ProbeSuite(Suite):
        name = "probe"
        title = "probe"
        payloads = ("probe.py",)
        params_type = TestParams
        override_names = MappingProxyType({"probe": "probe_flag"})

        def plan(self, gp):
            return [], []

        def payload_args(self, test):
            return []

        def judge_text(self, text, ctx, *, source, label):
            return []

        def context_expectations(self, bp, group):
            return Probe(group.group.name if group is not None else None)

        def override_expectations(self, current, ctx, overrides):
            return dataclasses.replace(current, flag=overrides.get("probe_flag"))

    bp = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint
    register(ProbeSuite())
    try:
        ctx = context_from_blueprint(bp)
        assert ctx.expectations["probe"] == Probe(ctx.group)
        assert JudgeContext().expectations["probe"] == Probe()
        flagged = context_from_flags(bp, probe="x")
        assert flagged.expectations["probe"] == Probe(ctx.group, "x") and flagged.is_explicit("probe_flag")
        assert flagged.to_json()["probe_flag"] == "x"
    finally:
        unregister("probe")
    assert "probe" not in context_from_blueprint(bp).expectations
    with pytest.raises(Exception, match="unknown judge context field"):
        apply_overrides(JudgeContext(), probe="x")


def test_each_suite_plans_typed_params_that_record_as_before() -> None:
    """Every planned test carries its suite's params dataclass; ``run_with`` records the same keys as the
    untyped dicts did, so results recorded before still resume."""
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    tests, _ = plan_tests(loaded, launcher="slurm")
    keys = {
        "node": [],
        # + where the nodes' nccl-tests binaries and training venv are (nccl_stack role): a run there records them
        "nccl": ["collective", "min_bytes", "max_bytes", "step_factor", "iters", "warmup_iters", "check",
                 "nccl_tests_dir", "python"],
        "fio": ["target", "target_kind", "size", "runtime_s", "numjobs", "iodepth"],
        "amp": ["layers", "hidden", "heads", "seq_len", "vocab", "batch_size", "steps", "warmup_steps", "precision",
                "compile", "fp32_baseline", "peak_tflops", "gpu_model", "python"],
    }
    assert {t.kind for t in tests} == set(keys)
    for t in tests:
        assert type(t.params) is get_suite(t.kind).params_type
        assert list(run_with(t)["params"]) == keys[t.kind]
        assert type(t.params).from_json(t.params.to_json()) == t.params
        assert t.raw_suffix == (".txt" if t.kind == "nccl" else ".json")
    with pytest.raises(ValueError, match="unknown field"):
        type(tests[1].params).from_json({**tests[1].params.to_json(), "bogus": 1})
    # the AMP payload times an fp32 baseline exactly when the blueprint asks for it (validation.amp.fp32_baseline,
    # on by default): the speed-up check needs it
    amp = next(t for t in tests if t.kind == "amp")
    assert amp.params_as(AmpParams).fp32_baseline is True
    assert "--fp32-baseline" in get_suite("amp").payload_args(amp)
    off = dataclasses.replace(amp, params=dataclasses.replace(amp.params_as(AmpParams), fp32_baseline=False))
    assert "--fp32-baseline" not in get_suite("amp").payload_args(off)
    # a test handed to another suite is refused, naming both parameter types
    by_kind = {t.kind: t for t in tests}
    for kind, other in (("nccl", "fio"), ("fio", "amp"), ("amp", "nccl")):
        with pytest.raises(TypeError, match=f"params are {type(by_kind[other].params).__name__}, not "
                                            f"{get_suite(kind).params_type.__name__}"):
            get_suite(kind).payload_args(by_kind[other])


# ---------------------------------------------------------------------------------------------
# the verdict
# ---------------------------------------------------------------------------------------------


def test_verdict_is_an_enum_whose_values_are_the_recorded_strings() -> None:
    assert [v.value for v in Verdict] == list(VERDICTS) == ["pass", "warn", "invalid", "fail"]
    r = JudgeResult(source="x", kind="nccl", verdict="warn")  # a plain string is converted
    assert r.verdict is Verdict.WARN
    r.degrade("fail", "broken")
    assert r.verdict is Verdict.FAIL
    d = r.to_json()
    assert type(d["verdict"]) is str and json.dumps(d["verdict"]) == '"fail"'
    assert JudgeResult.from_json(json.loads(json.dumps(d))).verdict is Verdict.FAIL
    with pytest.raises(ValueError, match="unknown verdict"):
        JudgeResult.from_json({**d, "verdict": "ok"})
    rng = random.Random(9)
    for _ in range(200):  # worst and the exit code over generated verdict lists
        vs = [rng.choice(VERDICTS) for _ in range(rng.randint(0, 6))]
        w = worst(vs)
        assert isinstance(w, Verdict)
        assert w == (max(vs, key=VERDICTS.index) if vs else "invalid")
        assert exit_code_for(vs) == {"pass": 0, "warn": 0, "fail": 1, "invalid": 3}[w]


# ---------------------------------------------------------------------------------------------
# fabric names and thresholds come from the blueprint models
# ---------------------------------------------------------------------------------------------


def test_fabric_names_come_from_the_network_models() -> None:
    assert FABRICS == ("efa", "infiniband", "roce", "ethernet")
    assert RDMA_FABRICS == tuple(fabric_tag(m) for m in NETWORK_MODELS if m.rdma) == ("efa", "infiniband", "roce")
    assert IB_VERBS_FABRICS == ("infiniband", "roce")
    assert FABRIC_NAMES == {fabric_tag(m): m.display_name for m in NETWORK_MODELS}
    assert fabric_tag(InfinibandNetwork) == "infiniband" and not EthernetNetwork.rdma
    # no module of validate/ (payloads aside: they stand alone) spells a fabric list of its own
    found = []
    for path in (REPO / "validate").rglob("*.py"):
        if "payloads" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                lits = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(lits & set(FABRICS)) >= 2:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, f"fabric lists outside the blueprint models: {found}"


@pytest.mark.parametrize("seed", range(6))
def test_judge_thresholds_are_the_blueprint_models(seed: int) -> None:
    """Generated thresholds in a blueprint reach the judge unchanged, and the defaults are the models'."""
    rng = random.Random(seed)
    warn, fail = round(rng.uniform(0.5, 0.95), 2), round(rng.uniform(0.1, 0.45), 2)
    fwarn, ffail = round(rng.uniform(0.5, 0.95), 2), round(rng.uniform(0.1, 0.45), 2)
    speedup = round(rng.uniform(1.0, 3.0), 2)
    bp = load_blueprint(EXAMPLES / rng.choice(["onprem-dgx-h100-ib.yaml", "aws-p5-efa-lustre.yaml"])).blueprint
    v = bp.validation
    bp = bp.model_copy(update={"validation": v.model_copy(update={
        "nccl": v.nccl.model_copy(update={"thresholds": v.nccl.thresholds.model_copy(
            update={"warn_ratio": warn, "fail_ratio": fail})}),
        "fio": v.fio.model_copy(update={"thresholds": v.fio.thresholds.model_copy(
            update={"warn_ratio": fwarn, "fail_ratio": ffail})}),
        "amp": v.amp.model_copy(update={"thresholds": v.amp.thresholds.model_copy(
            update={"min_speedup_vs_fp32": speedup})}),
        "profile": v.profile.model_copy(update={"thresholds": v.profile.thresholds.model_copy(
            update={"max_comm_exposed": fail})}),
    })})
    ctx = context_from_blueprint(bp)
    nccl, fio, amp, profile = (get_suite(n).thresholds(ctx) for n in ("nccl", "fio", "amp", "profile"))
    assert nccl is bp.validation.nccl.thresholds and fio is bp.validation.fio.thresholds
    assert amp is bp.validation.amp.thresholds and list(ctx.thresholds) == ["nccl", "fio", "amp", "profile"]
    assert profile is bp.validation.profile.thresholds and profile.max_comm_exposed == fail
    assert (nccl.warn_ratio, nccl.fail_ratio, fio.warn_ratio, fio.fail_ratio) == (warn, fail, fwarn, ffail)
    assert amp.min_speedup_vs_fp32 == speedup
    assert json.loads(json.dumps(ctx.to_json()))["nccl"] == bp.validation.nccl.thresholds.model_dump()
    assert {k: ctx.to_json()["nccl"][k] for k in ("min_busbw_gbps", "warn_ratio", "fail_ratio")} == {
        "min_busbw_gbps": None, "warn_ratio": warn, "fail_ratio": fail}
    # the defaults of a bare context are the models' defaults
    from blueprints.models import Validation

    dv = Validation()
    bare = JudgeContext()
    assert bare.thresholds == {"nccl": dv.nccl.thresholds, "fio": dv.fio.thresholds, "amp": dv.amp.thresholds,
                               "profile": dv.profile.thresholds}
    assert get_suite("node").thresholds(bare) is None  # a suite without thresholds
    # the JSON of a context keeps one key per suite, where the per-suite fields stood
    keys = list(bare.to_json())
    assert keys[keys.index("fio_target") + 1:keys.index("blueprint")] == ["nccl", "fio", "amp", "profile"]


def test_a_local_gpu_run_is_judged_against_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each suite's judge context on a local run: one node; the GPUs of this machine (the detected model
    for AMP, as many GPUs per node as ranks for NCCL); the tested directory for fio; none on a CPU run."""
    from validate.runner import judge_context
    from validate.suites.fio import fio_expectations

    monkeypatch.setattr("validate.runner._local_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")  # declares L40S GPUs
    tests, _ = plan_tests(loaded, launcher="local", local_gpus=2)
    by_kind = {t.kind: t for t in tests}
    amp = judge_context(loaded, by_kind["amp"], "local")
    assert by_kind["amp"].params.gpu_model == "h100-sxm" and amp.gpu_model == "h100-sxm" and amp.nodes == 1
    assert amp.is_explicit("gpu_model")
    nccl = judge_context(loaded, by_kind["nccl"], "local")
    assert (nccl.nodes, nccl.gpus_per_node, nccl.gpu_model) == (1, 2, "l40s")
    fio = judge_context(loaded, by_kind["fio"], "local")
    assert fio_expectations(fio).target == by_kind["fio"].params.target
    # on the cluster (ssh) the blueprint's group describes the run
    tests, _ = plan_tests(loaded, launcher="ssh")
    ssh = {t.kind: judge_context(loaded, t, "ssh") for t in tests}
    assert ssh["amp"].gpu_model == "l40s" and ssh["nccl"].nodes == 2 and not ssh["amp"].explicit
    # a CPU-only machine: no GPU expectation
    tests, _ = plan_tests(loaded, launcher="local", local_gpus=0)
    cpu = judge_context(loaded, next(t for t in tests if t.kind == "nccl"), "local")
    assert (cpu.gpu_model, cpu.gpus_per_node, cpu.nvlink_gbytes_s) == (None, None, None)


def test_validate_reads_the_resolved_settings_not_the_provider() -> None:
    """No module of validate/ asks which provider a blueprint targets (``bp.is_aws``,
    ``target.provider``): what differs between targets (instance type, EFA interfaces, runtime handler,
    scratch discovery) is a field of the resolved node settings."""
    found = []
    for path in sorted((REPO / "validate").rglob("*.py")):
        if "payloads" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                    node.attr == "is_aws"
                    or (node.attr == "provider" and isinstance(node.value, ast.Attribute) and node.value.attr == "target")):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
    assert not found, "provider branches in validate/:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------------
# typed results: what the judges write is what their types declare
# ---------------------------------------------------------------------------------------------


def test_each_suite_writes_only_the_keys_its_typed_results_declare(fixtures_dir: Path, tmp_path: Path) -> None:
    """The typed dictionaries are plain dicts at run time, so this holds them to what the judges really
    write: every key of a judged result's metrics, expected and series, over the public and field
    outputs, each variant of the AMP document and the recorded node documents, is declared by its
    suite's type (the runner's keys by :class:`validate.results.Metrics`); and ``to_json`` /
    ``from_json`` keep every key and value."""
    from typing import get_type_hints

    from validate.expectations import context_from_flags
    from validate.judge import judge_file, judge_text
    from validate.node_checks import NodeExpected, NodeMetrics, judge_node_file
    from validate.results import Expected, Metrics, Series
    from validate.suites.amp import AmpExpected, AmpMetrics, AmpSeries
    from validate.suites.fio import FioExpected, FioMetrics
    from validate.suites.nccl import NcclExpected, NcclMetrics, NcclSeries

    from .node_fixtures import RecordedNode, as_recorded_yaml
    from .test_judge import AMP

    types = {"nccl": (NcclMetrics, NcclExpected, NcclSeries), "fio": (FioMetrics, FioExpected, Series),
             "amp": (AmpMetrics, AmpExpected, AmpSeries), "node": (NodeMetrics, NodeExpected, Series)}
    for metrics, expected, series in types.values():
        assert issubclass(metrics, dict) and set(get_type_hints(Metrics)) <= set(get_type_hints(metrics))
        assert set(get_type_hints(Expected)) <= set(get_type_hints(expected))
        assert set(get_type_hints(Series)) <= set(get_type_hints(series))
    results = []
    ctx = context_from_flags(instance_type="p5.48xlarge", nodes=2)
    for sub in ("nccl-tests", "fio", "field"):
        for f in sorted((fixtures_dir / sub).iterdir()):
            if f.suffix in (".txt", ".json", ".log"):
                results += judge_file(f, ctx)
    onprem = context_from_flags(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint)
    for f in sorted((fixtures_dir / "nccl-tests").iterdir()):
        results += judge_file(f, onprem)
    scratch = context_from_flags(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").blueprint, target="/scratch")
    for f in sorted((fixtures_dir / "fio").iterdir()):
        results += judge_file(f, scratch)
    for changes in ({}, {"mfu": 0.05, "model_tflops": 50.0}, {"losses": [7.0, 8.0]}, {"error": "CUDA out of memory"},
                    {"device": "cpu", "gpu_name": None}, {"fp32_baseline": None}, {"gpu_name": "NVIDIA A100-SXM4-40GB"}):
        results += judge_text(json.dumps({**AMP, **changes}), JudgeContext(gpu_model="h100-sxm"), source="amp.json", kind="amp")
    bp = tmp_path / "dgx.yaml"
    bp.write_text(as_recorded_yaml((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text(), gpudirect="nvidia-peermem"))
    raw = tmp_path / "node.json"
    raw.write_text("".join(json.dumps(RecordedNode.load(fixtures_dir / "node" / "dgx-h100" / h).doc()) + "\n"
                           for h in ("dgx-01", "dgx-02")))
    results += judge_node_file(raw, load_blueprint(bp).blueprint, "dgx", label="node", expected_nodes=2)
    kinds = {r.kind for r in results}
    assert kinds == set(types), kinds
    undeclared = []
    for r in results:
        metrics, expected, series = types[r.kind]
        for what, got, typed in (("metrics", r.metrics, metrics), ("expected", r.expected, expected),
                                 ("series", r.series, series)):
            extra = set(got) - set(get_type_hints(typed))
            undeclared += [f"{r.kind} {r.title}: {what}.{k}" for k in sorted(extra)]
        assert JudgeResult.from_json(json.loads(json.dumps(r.to_json()))).to_json() == r.to_json()
    assert not undeclared, "keys written but not declared by the suite's type:\n" + "\n".join(sorted(set(undeclared)))
    # the figures the reports compare are there (the typed dicts are not empty shells)
    assert any("peak_busbw_gbps" in r.metrics and "busbw_gbps" in r.expected for r in results if r.kind == "nccl")
    assert any(r.expected.get("ratio") is not None for r in results if r.kind == "fio")
    assert any("mfu_floor" in r.expected for r in results if r.kind == "amp")


@pytest.mark.parametrize("layers, kept", [(1, True), (2, False)])
def test_a_cpu_run_keeps_the_blueprints_amp_model_up_to_20_million_parameters(layers, kept):
    # GPT parameters ~ 12 x layers x hidden^2 + vocab x hidden (Kaplan et al. 2020, "Scaling Laws for Neural Language
    # Models", table 1); a CPU-only run keeps a model of at most 20 M (CPU_AMP_MAX_PARAMS) and swaps a larger one for
    # the tiny GPT. hidden 1024, vocab 4096: 1 layer is 16.8 M (kept), 2 layers 29.4 M (swapped)
    from blueprints import parse_blueprint
    from validate.suites.amp import TINY_GPT

    doc = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").data
    doc["validation"]["amp"] = {"model": {"layers": layers, "hidden": 1024, "heads": 16, "seq_len": 64, "vocab": 4096}}
    loaded = parse_blueprint(json.dumps(doc), "bp.yaml")
    tests, _ = plan_tests(loaded, launcher="local", local_gpus=0, gpus=1, suites=["amp"])
    (amp,) = tests
    model = {k: amp.params.to_json()[k] for k in TINY_GPT}
    want = {"layers": layers, "hidden": 1024, "heads": 16, "seq_len": 64, "vocab": 4096} if kept else TINY_GPT
    assert model == want


def test_the_file_name_breaks_a_tie_between_suites():
    # an excerpt with one nccl-tests marker (the table header) and one fio marker (an IOPS line), 4 points each: the
    # name of the file the user gave decides (`fio` in it: one more point for fio), else the earlier suite
    text = "#  size  count  type\n  read: IOPS=100, BW=1MiB/s\n"
    assert detect_kind(text, "fio-run.log") == "fio"
    assert detect_kind(text, "nccl-run.log") == detect_kind(text, "out.log") == detect_kind(text, None) == "nccl"


def test_the_node_test_carries_the_groups_mismatch_note_and_only_then():
    # a local run of the DGX example on a machine without its GPUs: the planned node test says so in its notes; the
    # same blueprint planned for Slurm (its own nodes) has no such note
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    (local,), _ = plan_tests(loaded, launcher="local", local_gpus=0, gpus=1, suites=["node"])
    assert local.kind == "node" and len(local.notes) == 1 and local.notes[0].startswith("hardware mismatch:"), local.notes
    (slurm,), _ = plan_tests(loaded, launcher="slurm", suites=["node"])
    assert slurm.kind == "node" and slurm.notes == ()


def test_a_fio_expectation_is_recorded_to_the_kilobyte_per_second(fixtures_dir, tmp_path):
    # the expected MB/s of a judged fio job is kept to 3 decimals (1 kB/s): a blueprint threshold of 100.12345 MB/s is
    # recorded as 100.123
    from validate.expectations import apply_overrides
    from validate.judge import judge_file

    text = (EXAMPLES / "onprem-l40s-roce.yaml").read_text() + "  fio: {thresholds: {min_write_mb_s: 100.12345}}\n"
    p = tmp_path / "bp.yaml"
    p.write_text(text)
    ctx = context_from_blueprint(load_blueprint(p).blueprint)
    (r,) = judge_file(fixtures_dir / "fio" / "fio-02.json", apply_overrides(ctx, target="/scratch"))
    assert r.expected["write_mb_s"] == 100.123, r.expected


def test_a_silent_payload_crash_names_the_last_line_of_its_log() -> None:
    # the runner's stub for a payload that died without output: without an error-looking line the log's last line is
    # named (kills `tail[-1]` -> `tail[-2]`, which named the one before or raised IndexError on a one-line log)
    from validate.suites.base import payload_crash

    stub = "the payload exited 137 without output\n# launcher: srun\n"
    assert payload_crash(stub + "loading model\nstep 3 of 30\n") == (
        "the payload exited 137 without output; its log ends with 'step 3 of 30'")
    assert payload_crash(stub + "step 3 of 30\n") == "the payload exited 137 without output; its log ends with 'step 3 of 30'"
    assert payload_crash(stub) == "the payload exited 137 without output"
    assert payload_crash("all fine") is None


def test_the_nccl_plot_note_counts_the_collective_runs_only():
    # the report plots the busbw of the first MAX_PLOTS collective runs and says how many were judged: runs of other
    # suites (node, profile, ...) in the same report are not collective runs (kills `r.kind == self.name` -> `>`:
    # "node" and "profile" sort after "nccl")
    nccl = get_suite("nccl")
    runs = [JudgeResult(source=f"nccl-{i}.log", kind="nccl") for i in range(3)]
    others = [JudgeResult(source="node.json", kind="node"), JudgeResult(source="profile.json", kind="profile")]
    assert nccl.html_section(runs + others, plotted=3) is None
    section = nccl.html_section(others + runs, plotted=2)
    assert section is not None and section.note == "busbw plots shown for the first 2 of 3 collective runs."


def test_a_fio_target_the_user_can_write_but_not_enter_is_not_usable(tmp_path, monkeypatch):
    # creating fio's file in a directory needs write and search (x) permission on it (path_resolution(7)); root passes
    # both checks on any directory, so the user's permissions are stood in for
    from validate.suites import fio as fio_suite

    monkeypatch.setattr(fio_suite.os, "access", lambda path, mode: not mode & fio_suite.os.X_OK)
    assert not fio_suite._usable_here(str(tmp_path))
    monkeypatch.setattr(fio_suite.os, "access", lambda path, mode: True)
    assert fio_suite._usable_here(str(tmp_path)) and not fio_suite._usable_here(str(tmp_path / "missing"))
