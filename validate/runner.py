"""Plan the validation tests of a blueprint, run them through a launcher, judge each as it finishes.

Flow (``clusterforge validate`` is a thin shell around :func:`run_validation`):

1. :func:`plan_tests` turns the blueprint's ``validation`` section into :class:`PlannedTest` objects:
   one per collective (``nccl-<collective>``), one per fio target (``fio-<name>``: every
   ``local_nvme`` mount and storage mount, or ``validation.fio.targets``; for local runs a
   temporary directory when none of them exists here, with a note) and one AMP run (``amp``);
   the node group is added to the id when the blueprint has several compute groups.
2. Each test runs through the launcher, which writes ``DIR/raw/<test-id>.txt|.json``; the raw
   output is judged at once with :func:`validate.judge.judge_file` and every result is appended to
   ``DIR/results.jsonl`` (flushed and fsynced), and ``DIR/run.json`` (the manifest) is rewritten, so
   an interrupted run keeps what it had. Every line records what its test ran with
   (``run_with``: parameters, nodes, ranks, device; :func:`run_with`). ``resume=True`` keeps a
   planned test's results only when every one passed or warned and it ran with the parameters
   planned now; tests that failed, were invalid, were interrupted or whose parameters changed run
   again (their old lines are dropped first, so results of different parameters never mix), and
   results of tests that are not planned (other suites) are kept untouched. ``force=True`` reruns
   every planned test; with ``keep_unplanned`` (``--force --suites X``) the other suites' results
   stay. A rerun into a non-empty directory without ``resume`` or ``force`` is refused.
3. :func:`validate.report.write_reports` writes the JSON, Markdown, JUnit XML and HTML reports.

Exit status (:attr:`RunSummary.exit_code`): 0 when every result is pass or warn, 1 when any is
fail, 3 when the run says nothing (no results, or an ``invalid`` result and no ``fail``). A suite
whose tool is not installed (fio) gives ``invalid`` results whose ``metrics.missing_tool`` names
it (:attr:`RunSummary.missing_tools`); it never turns the run into a ``fail`` and never hides one.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from blueprints import LoadedBlueprint
from blueprints.catalog import UnknownHardwareError, catalog
from blueprints.errors import InvalidRunError, UsageError
from blueprints.models import Blueprint, LustreStorage, NodeGroup
from blueprints.settings import node_settings, on_mount

from .judge import JudgeResult, exit_code_for, judge_file, worst
from .launchers.common import Launcher, LaunchResult, PlannedTest
from .node_checks import blocking_failures, explains, judge_node_file

__all__ = [
    "CPU_MAX_BYTES",
    "SUITES",
    "RunEvents",
    "RunSummary",
    "plan_tests",
    "prepare_output_dir",
    "run_validation",
    "run_with",
]

SUITES = ("node", "nccl", "fio", "amp")
"""Suites in run order: the node health checks come first, so later results can be explained by them."""

CPU_MAX_BYTES = 64 * 1024**2
"""Largest collective message on a CPU-only (gloo) run: larger sizes only measure memory copies
and take minutes, so the sweep is capped here (with a note)."""

CPU_AMP_MAX_PARAMS = 20_000_000
"""On a CPU-only run, an AMP model larger than this (parameters) is replaced by :data:`TINY_GPT`."""

TINY_GPT = {"layers": 2, "hidden": 128, "heads": 4, "seq_len": 64, "vocab": 512}
"""The GPT used for CPU-only AMP runs when the blueprint's model is too large for a CPU."""

RESULTS = "results.jsonl"
MISMATCH = "hardware mismatch:"
"""Prefix of a test note saying the local machine lacks the declared hardware: the result is then
``invalid`` (it says nothing about the declared cluster)."""
MANIFEST = "run.json"
RESUMABLE = ("pass", "warn")
"""Verdicts a resumed run keeps; every other result (fail, invalid) is run again."""
RUN_ARTEFACTS = ("raw", "logs", "launch", "payloads", "slurm", "kubernetes", RESULTS, MANIFEST)
"""What a run writes into DIR besides the reports (``--force`` removes a previous run)."""


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------


def _cpu_ranks() -> int:
    """gloo processes for a CPU-only local run: 2 to 4, one per two cores."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))


def _estimate_params(layers: int, hidden: int, vocab: int) -> int:
    return vocab * hidden + layers * 12 * hidden * hidden


def _local_gpu_name() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    import subprocess

    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return names[0] if names else None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "root"


def _fio_targets(bp: Blueprint, g: NodeGroup) -> list[tuple[str, str, str]]:
    """``[(label, directory, kind)]`` fio should test for group ``g`` (kind: nvme, lustre, nfs, dir)."""
    declared: list[tuple[str, str, str]] = []
    if g.local_nvme is not None:
        declared.append(("scratch", g.local_nvme.mount, "nvme"))
    for s in bp.storage:
        declared.append((s.name, s.mount, "lustre" if isinstance(s, LustreStorage) else "nfs"))
    if not bp.validation.fio.targets:
        return declared
    out = []
    for t in bp.validation.fio.targets:
        match = next((d for d in declared if on_mount(t, d[1])), None)
        out.append((match[0] if match and match[1] == t else _slug(t), t, match[2] if match else "dir"))
    return out


def _usable_here(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def plan_tests(loaded: LoadedBlueprint, *, launcher: str = "local", suites: list[str] | None = None,
               gpus: int | None = None, local_gpus: int | None = None) -> tuple[list[PlannedTest], list[str]]:
    """The tests to run and run-level notes.

    ``launcher``: ``local`` plans for this machine (one node; ``local_gpus`` GPUs, detected with
    nvidia-smi when ``None``; gloo processes when there is none), any other launcher plans for the
    blueprint's nodes. ``suites`` overrides ``validation.suites``. ``gpus`` overrides the ranks per
    node (GPUs, or gloo processes on a CPU-only machine). Raises :class:`UsageError` for an unknown
    suite, a ``gpus`` value this machine cannot honour, or a blueprint without compute groups.
    """
    bp = loaded.blueprint
    v = bp.validation
    chosen = list(suites) if suites else list(v.suites)
    bad = [s for s in chosen if s not in SUITES]
    if bad:
        raise UsageError(f"unknown suite(s) {', '.join(bad)}; choose from {', '.join(SUITES)}")
    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {gpus}")
    groups = bp.gpu_groups
    if not groups:
        raise UsageError(f"{loaded.file}: no node group with role `compute` to validate")
    local = launcher == "local"
    notes: list[str] = []
    if local and local_gpus is None:
        from .launchers.local import local_gpu_count

        local_gpus = local_gpu_count()
    cat = catalog()
    tests: list[PlannedTest] = []
    node_tests: list[PlannedTest] = []
    several = len(groups) > 1
    if local and several:
        notes.append(f"local launcher: only node group {groups[0].name} is validated (this machine is one node)")
        groups = groups[:1]
    for g in groups:
        ns = node_settings(bp, g)
        prefix = f"{g.name}-" if several else ""
        gpu_key = ns.gpu_model
        gpu_mismatch: str | None = None
        if local:
            nodes = 1
            if local_gpus:
                device = "cuda"
                if gpus is not None and gpus > local_gpus:
                    raise UsageError(f"--gpus {gpus}: this machine has {local_gpus} GPU(s)")
                ranks = gpus or local_gpus
                detected = _local_gpu_name()
                if detected:
                    gpu_key = cat.resolve_gpu_key(detected) or gpu_key
            else:
                device = "cpu"
                ranks = gpus or _cpu_ranks()
                if ns.gpu_count:
                    gpu_mismatch = (f"{MISMATCH} node group {g.name} declares {ns.gpu_count} x {ns.gpu_model} per node "
                                    "but this machine has no NVIDIA GPU (collectives ran on gloo CPU processes, AMP on "
                                    "the CPU)")
                    notes.append(gpu_mismatch)
                gpu_key = None
        else:
            nodes = g.size
            device = "cuda" if ns.gpu_count else "cpu"
            ranks = gpus or ns.gpu_count or 1
            if ns.passthrough_host:
                notes.append(f"node group {g.name} passes its GPUs into {ns.sandbox.runtime} sandboxes: the host "
                             "sees no GPU, so the suites must run inside a sandbox (use --launcher kubernetes)")
        if "node" in chosen:
            node_tests.append(PlannedTest(
                id=f"node{'-' + g.name if several else ''}", kind="node", group=g.name, nodes=nodes, ranks_per_node=1,
                device="cpu", params={}, description=f"node health checks on {nodes} node(s) of {g.name}",
                notes=(gpu_mismatch,) if gpu_mismatch else ()))
        if "nccl" in chosen:
            colls = list(v.nccl.collectives)
            if bp.workload and bp.workload.architecture == "moe" and "alltoall" not in colls:
                colls.append("alltoall")
                notes.append("workload is mixture-of-experts: alltoall added to the collectives")
            max_bytes = v.nccl.max_bytes
            cnotes: list[str] = []
            if device == "cpu" and max_bytes > CPU_MAX_BYTES:
                max_bytes = CPU_MAX_BYTES
                cnotes.append(f"CPU-only run: largest message capped at {CPU_MAX_BYTES // 2**20} MiB "
                              f"(blueprint asks {v.nccl.max_bytes} bytes)")
            min_bytes = min(v.nccl.min_bytes, max_bytes)
            if gpu_mismatch:
                cnotes.append(gpu_mismatch)
            total = nodes * ranks
            if total < 2:
                cnotes.append("one rank: busbw is 0 by definition, the collective test cannot say anything")
            for c in colls:
                tests.append(PlannedTest(
                    id=f"nccl-{prefix}{c}", kind="nccl", group=g.name, nodes=nodes, ranks_per_node=ranks,
                    device=device,
                    params={"collective": c, "min_bytes": min_bytes, "max_bytes": max_bytes,
                            "step_factor": v.nccl.step_factor, "iters": v.nccl.iters,
                            "warmup_iters": v.nccl.warmup_iters, "check": v.nccl.check},
                    description=f"{c} over {nodes} node(s) x {ranks} {'GPU' if device == 'cuda' else 'CPU process'}"
                                f"{'s' if ranks != 1 and device == 'cuda' else 'es' if ranks != 1 else ''}",
                    notes=tuple(cnotes)))
        if "fio" in chosen:
            targets = _fio_targets(bp, g)
            fio_mismatch: str | None = None
            if local:
                usable = [t for t in targets if _usable_here(t[1])]
                missing = [t[1] for t in targets if t not in usable]
                if missing:
                    notes.append(f"fio targets not present or not writable on this machine: {', '.join(missing)}")
                if not usable:
                    tmp = tempfile.gettempdir()
                    why = "none of the declared fio targets exists here" if targets else "no fio target is declared"
                    usable = [("tmp", tmp, "dir")]
                    notes.append(f"fio: {why}; testing the temporary directory {tmp} instead")
                    if targets:
                        fio_mismatch = (f"{MISMATCH} the declared fio targets ({', '.join(t[1] for t in targets)}) do not "
                                        f"exist on this machine; the temporary directory {tmp} was measured instead")
                targets = usable
            f = v.fio
            for label, path, kind in targets:
                tnotes: tuple[str, ...] = ("temporary directory: no expectation, figures are informative",) if label == "tmp" else ()
                if local and fio_mismatch:
                    tnotes += (fio_mismatch,)
                tests.append(PlannedTest(
                    id=f"fio-{prefix}{label}", kind="fio", group=g.name, nodes=1, ranks_per_node=1, device="cpu",
                    params={"target": path, "target_kind": kind, "size": f.size, "runtime_s": f.runtime_s,
                            "numjobs": f.numjobs, "iodepth": f.iodepth},
                    description=f"fio on {path} ({kind})", notes=tnotes))
        if "amp" in chosen:
            a = v.amp
            model = {"layers": a.model.layers, "hidden": a.model.hidden, "heads": a.model.heads,
                     "seq_len": a.model.seq_len, "vocab": a.model.vocab}
            anotes: list[str] = [gpu_mismatch] if gpu_mismatch else []
            if device == "cpu" and _estimate_params(model["layers"], model["hidden"], model["vocab"]) > CPU_AMP_MAX_PARAMS:
                anotes.append(f"CPU-only run: the blueprint's {a.model.layers}-layer d={a.model.hidden} GPT is too "
                              f"large for a CPU; a {TINY_GPT['layers']}-layer d={TINY_GPT['hidden']} GPT ran instead")
                model = dict(TINY_GPT)
            peak = None
            if device == "cuda" and gpu_key:
                try:
                    spec = cat.gpu(gpu_key)
                    bf16 = a.precision in ("auto", "bf16") and spec.supports_bf16
                    peak = spec.peak_tflops("bf16" if bf16 else "fp16")
                except UnknownHardwareError:
                    peak = None
            tests.append(PlannedTest(
                id=f"amp{'-' + g.name if several else ''}", kind="amp", group=g.name, nodes=1, ranks_per_node=1,
                device=device,
                params={**model, "batch_size": a.batch_size, "steps": a.steps,
                        "warmup_steps": 3 if a.compile else 2, "precision": a.precision,
                        "compile": a.compile, "fp32_baseline": a.fp32_baseline, "peak_tflops": peak,
                        "gpu_model": gpu_key},
                description=(f"GPT {model['layers']}x{model['hidden']} seq {model['seq_len']} batch {a.batch_size} "
                             f"on one {'GPU' if device == 'cuda' else 'CPU'}"),
                notes=tuple(anotes)))
    return node_tests + tests, notes


# ---------------------------------------------------------------------------------------------
# the run directory
# ---------------------------------------------------------------------------------------------


def _read_manifest(out_dir: Path) -> dict[str, Any] | None:
    p = out_dir / MANIFEST
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def prepare_output_dir(out_dir: Path, *, blueprint_name: str, resume: bool, force: bool) -> None:
    """Make ``out_dir`` ready: refuse a non-empty directory unless ``resume`` or ``force``.

    ``resume`` requires a previous run of the same blueprint; ``force`` deletes a previous run's
    files (only a directory that holds a validation run, never an arbitrary one). Raises
    :class:`UsageError` with the fix.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a directory — pass a directory for -o")
    entries = list(out_dir.iterdir()) if out_dir.exists() else []
    is_run = (out_dir / MANIFEST).exists() or (out_dir / RESULTS).exists()
    if resume and force:
        raise UsageError("--resume and --force contradict each other: keep the results (--resume) or replace them (--force)")
    if resume:
        if not is_run:
            raise UsageError(f"{out_dir}: no validation run to resume (no {MANIFEST} or {RESULTS}); run without --resume")
        man = _read_manifest(out_dir) or {}
        prev = (man.get("blueprint") or {}).get("name")
        if prev and prev != blueprint_name:
            raise UsageError(f"{out_dir} holds a run of blueprint {prev}, not {blueprint_name}: use another -o "
                             "or --force to replace it")
        return
    if entries and not force:
        raise UsageError(f"{out_dir} is not empty: use --resume to continue the run there or --force to replace it")
    if entries and force:
        if not is_run:
            raise UsageError(f"{out_dir} is not empty and holds no validation run: --force only replaces a previous "
                             "run; choose an empty or new directory")
        for e in entries:
            if e.name in RUN_ARTEFACTS or e.name.startswith(("report", "junit", "results")):
                if e.is_dir() and not e.is_symlink():
                    shutil.rmtree(e)
                else:
                    e.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def read_results_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects in ``results.jsonl``; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def _label_of(d: dict[str, Any]) -> str | None:
    """The test id a results.jsonl line belongs to: ``test_id``, else the label before ``": "``."""
    if isinstance(d.get("test_id"), str):
        return d["test_id"]
    if isinstance(d.get("label"), str):
        return d["label"].split(": ", 1)[0]
    return None


def _drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (a writer killed mid-line) so the next append starts on a fresh line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def _append_result_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """Append JSON lines and fsync, so a kill right after keeps them."""
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(d, sort_keys=False) + "\n" for d in lines)
        f.flush()
        os.fsync(f.fileno())


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


class RunEvents(Protocol):
    """Progress callbacks (the CLI renders them with rich). Every method must return quickly."""

    def planned(self, tests: list[PlannedTest], done: set[str], notes: list[str]) -> None: ...
    def started(self, test: PlannedTest) -> None: ...
    def finished(self, test: PlannedTest, verdicts: list[str], launch: LaunchResult, seconds: float) -> None: ...


@dataclass
class RunSummary:
    """Outcome of :func:`run_validation`: every result (resumed ones too), the verdict per test,
    the report files, the exit code (0 pass/warn, 1 fail, 3 invalid run) and the tools that were
    missing (``{tool: {"suites", "tests", "reason"}}``: those suites' results are ``invalid``)."""

    out_dir: Path
    results: list[Any]
    verdicts: dict[str, str]
    reports: dict[str, Path]
    skipped: list[str]
    exit_code: int
    notes: list[str] = field(default_factory=list)
    missing_tools: dict[str, dict[str, Any]] = field(default_factory=dict)


def judge_context(loaded: LoadedBlueprint, test: PlannedTest, launcher: str) -> Any:
    """The :class:`~validate.expectations.JudgeContext` for ``test``.

    The blueprint's context of the test's node group; a local run describes this machine instead
    (one node; on a CPU-only machine no GPU, so GPU expectations do not apply); fio tests point
    ``fio_target`` at the tested directory.
    """
    from .expectations import context_from_blueprint

    bp = loaded.blueprint
    ctx = context_from_blueprint(bp, test.group)
    if launcher == "local":
        changes: dict[str, Any] = {"nodes": 1}
        if test.device == "cpu":
            changes.update(gpus_per_node=None, gpu_model=None, nvlink_gbytes_s=None)
        elif test.kind == "nccl":
            changes["gpus_per_node"] = test.ranks_per_node
        ctx = dataclasses.replace(ctx, **changes, provenance=ctx.provenance + (("nodes", "local launcher: this machine"),))
        if test.device == "cuda" and test.params.get("gpu_model") and test.params["gpu_model"] != ctx.gpu_model:
            from .expectations import apply_overrides

            ctx = apply_overrides(ctx, gpu_model=test.params["gpu_model"])
    if test.kind == "fio":
        from .expectations import apply_overrides

        ctx = apply_overrides(ctx, fio_target=test.params["target"])
    return ctx


def mark_explained(results: list[JudgeResult], group: str,
                   blockers: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    """Mark ``results`` of node group ``group`` as explained by the failed blocking node checks of that group.

    ``blockers`` is :func:`validate.node_checks.blocking_failures` of the run's node results. A
    result gets ``metrics["explained_by"]`` (``["host: check-id", ...]``) and a note naming the
    failed check, its measurement and its fix, when the check explains the result's suite
    (:data:`validate.node_checks.CHECKS`); the verdict is left as judged.
    """
    for r in results:
        why = [(host, c) for (g, host), checks in sorted(blockers.items()) if g == group
               for c in checks if explains(c, r.kind)]
        if not why:
            continue
        r.metrics["explained_by"] = [f"{host}: {c['id']}" for host, c in why]
        for host, c in why:
            r.note(f"explained by the node suite: {host} failed blocking check {c['id']} (measured {c['measured']}; "
                   f"expected {c['expected']}){'. Fix: ' + c['fix'] if c.get('fix') else ''}")


MISSING_TOOL = "clusterforge: missing tool:"
"""Start of the line a payload prints (stderr, and its output file where it has one) when a tool it needs
is not installed on the node (fio, torch), before exiting 127: ``clusterforge: missing tool: TOOL ...``."""


def missing_tool_line(launch: LaunchResult) -> tuple[str, str] | None:
    """``(tool, advice)`` from a payload's missing-tool line in the raw output or the launch log, else ``None``.

    Only a payload that exited 127 (the shell's "command not found" status, which the payloads use for
    a missing tool) counts, so a test that happens to print the words is not affected.
    """
    if launch.returncode != 127:
        return None
    for path in (launch.raw, launch.log):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-400:]
        except OSError:
            continue
        for ln in lines:
            at = ln.find(MISSING_TOOL)
            if at >= 0:
                advice = ln[at + len(MISSING_TOOL):].strip()
                return (advice.split()[0] if advice else "tool"), advice
    return None


def _missing_tool_result(test: PlannedTest, launch: LaunchResult) -> list[JudgeResult] | None:
    """The ``invalid`` result of a test whose payload said a tool is missing (``metrics.missing_tool``)."""
    found = missing_tool_line(launch)
    if found is None:
        return None
    tool, advice = found
    r = JudgeResult(source=str(launch.raw), kind=test.kind, label=test.id)
    r.metrics["missing_tool"] = tool
    r.degrade("invalid", f"the {test.kind} suite could not run: {advice}. A tool that is not installed says "
                         "nothing about the hardware")
    return [r]


def _ensure_raw(launch: LaunchResult) -> None:
    """Give the judge something to quote when the payload died before writing its output."""
    raw = launch.raw
    if raw.exists() and raw.stat().st_size > 0:
        return
    tail = ""
    if launch.log.exists():
        lines = launch.log.read_text(encoding="utf-8", errors="replace").splitlines()
        tail = "\n".join(lines[-40:])
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(f"# clusterforge: the payload exited {launch.returncode} without output; last lines of its log:\n"
                   f"{tail}\n", encoding="utf-8")


def run_with(test: PlannedTest) -> dict[str, Any]:
    """What ``test`` runs with, as recorded on each of its ``results.jsonl`` lines and compared on
    ``--resume``: ``{"params", "nodes", "ranks_per_node", "device"}`` (JSON-normalised)."""
    return json.loads(json.dumps({"params": test.params, "nodes": test.nodes,
                                  "ranks_per_node": test.ranks_per_node, "device": test.device}))


def _changed_keys(old: Any, new: dict[str, Any]) -> list[str]:
    """Names of what differs between a recorded ``run_with`` and the planned one (``params.x``, ``nodes`` ...)."""
    if not isinstance(old, dict):
        return ["(not recorded)"]
    out = [k for k in ("nodes", "ranks_per_node", "device") if old.get(k) != new.get(k)]
    op, np_ = old.get("params") or {}, new.get("params") or {}
    out += [f"params.{k}" for k in sorted(set(op) | set(np_)) if op.get(k) != np_.get(k)]
    return out


def _missing_tools(results: list[Any]) -> dict[str, dict[str, Any]]:
    """``{tool: {"suites": [...], "tests": [...], "reason": str}}`` of results whose suite could not
    run because ``tool`` is not installed (``metrics.missing_tool``)."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        tool = r.metrics.get("missing_tool")
        if not tool:
            continue
        rec = out.setdefault(str(tool), {"suites": [], "tests": [], "reason": r.reasons[0] if r.reasons else ""})
        if r.kind not in rec["suites"]:
            rec["suites"].append(r.kind)
        test = (r.label or "").split(": ", 1)[0]
        if test and test not in rec["tests"]:
            rec["tests"].append(test)
    return out


def _plan_resume(lines: list[dict[str, Any]], tests: list[PlannedTest], *, resume: bool
                 ) -> tuple[set[str], list[str]]:
    """``(kept, notes)``: the planned tests whose recorded results are kept (every verdict in
    :data:`RESUMABLE` and the same :func:`run_with`), and a note per planned test that runs again."""
    by_test: dict[str, list[dict[str, Any]]] = {}
    for d in lines:
        lbl = _label_of(d)
        if lbl:
            by_test.setdefault(lbl, []).append(d)
    kept: set[str] = set()
    notes: list[str] = []
    if not resume:
        return kept, notes
    for t in tests:
        mine = by_test.get(t.id)
        if not mine:
            continue  # never ran or interrupted: runs now
        bad = sorted({str(d.get("verdict")) for d in mine} - set(RESUMABLE))
        changed = sorted({k for d in mine for k in _changed_keys(d.get("run_with"), run_with(t))})
        if bad:
            notes.append(f"{t.id}: run again (it was {' and '.join(bad)} before)")
        elif changed:
            notes.append(f"{t.id}: run again (its parameters changed since its results were recorded: "
                         f"{', '.join(changed)})")
        else:
            kept.add(t.id)
    return kept, notes


def run_validation(loaded: LoadedBlueprint, out_dir: Path, launcher: Launcher, tests: list[PlannedTest], *,
                   resume: bool = False, force: bool = False, keep_unplanned: bool = False,
                   notes: list[str] | None = None, events: RunEvents | None = None,
                   title: str | None = None) -> RunSummary:
    """Run ``tests`` with ``launcher`` into ``out_dir``, judging and recording each as it finishes.

    See the module docstring for the files and for ``resume`` (rerun what failed, was invalid,
    was interrupted or changed parameters), ``force`` (rerun every planned test) and
    ``keep_unplanned`` (with ``force``: keep the results of tests not planned now, i.e.
    ``--force --suites X`` keeps the other suites). Raises :class:`UsageError` for a directory that
    is not ready (see :func:`prepare_output_dir`), :class:`InvalidRunError` when nothing could be
    judged, and lets ``KeyboardInterrupt`` through after marking the manifest ``interrupted``.
    """
    from .report import load_results, write_reports

    bp = loaded.blueprint
    out_dir = Path(out_dir)
    fresh = not out_dir.exists() or not any(out_dir.iterdir())
    same_run = ((out_dir / MANIFEST).exists() or (out_dir / RESULTS).exists()) and \
        ((_read_manifest(out_dir) or {}).get("blueprint") or {}).get("name") in (None, bp.name)
    partial_force = force and keep_unplanned and same_run and not resume
    prepare_output_dir(out_dir, blueprint_name=bp.name, resume=resume or partial_force,
                       force=force and not partial_force)
    try:
        launcher.prepare()
    except BaseException:
        if fresh:  # nothing ran: leave no half-made run directory behind
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    results_path = out_dir / RESULTS
    reuse = resume or partial_force
    if reuse:
        _drop_torn_tail(results_path)
    old_lines = read_results_lines(results_path) if reuse else []
    done, rerun_notes = _plan_resume(old_lines, tests, resume=resume)
    planned_ids = {t.id for t in tests}
    keep_lines = [d for d in old_lines if _label_of(d) not in planned_ids or _label_of(d) in done]
    if len(keep_lines) != len(old_lines):  # results of tests that run again go, so nothing mixes
        tmp = results_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(d) + "\n" for d in keep_lines), encoding="utf-8")
        os.replace(tmp, results_path)
    notes = list(notes or [])
    prev = _read_manifest(out_dir) if reuse else None
    bp_text = Path(loaded.file).read_bytes() if Path(loaded.file).exists() else b""
    sha = hashlib.sha256(bp_text).hexdigest()
    if prev and (prev.get("blueprint") or {}).get("sha256") not in (None, sha):
        notes.append("the blueprint changed since the results being kept were recorded")
    if prev and prev.get("launcher") not in (None, launcher.name):
        notes.append(f"run with the {launcher.name} launcher; the results kept from before came from the "
                     f"{prev['launcher']} launcher")
    notes += rerun_notes
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    kept_unplanned = {lbl for lbl in (_label_of(d) for d in keep_lines) if lbl and lbl not in planned_ids}
    manifest: dict[str, Any] = {
        "kind": "clusterforge-validation-run",
        "version": 1,
        "blueprint": {"name": bp.name, "file": str(loaded.file), "sha256": sha},
        "launcher": launcher.name,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "created": (prev or {}).get("created", now),
        "updated": now,
        "status": "running",
        "notes": notes,
        "tests": {t.id: {**t.to_json(), "status": "done" if t.id in done else "pending"} for t in tests},
    }
    if prev:
        for tid, rec in (prev.get("tests") or {}).items():
            if tid in manifest["tests"] and tid in done:
                manifest["tests"][tid] = {**manifest["tests"][tid], **{k: v for k, v in rec.items() if k != "status"},
                                          "status": "done"}
            elif tid in kept_unplanned:
                manifest["tests"][tid] = rec
    _write_json_atomic(out_dir / MANIFEST, manifest)
    if events:
        events.planned(tests, done, notes)
    recorded: set[str] = set()
    # failed blocking node checks of this run (resumed ones too): they explain later results
    from .report import load_results as _load

    blockers = blocking_failures(_load(out_dir)) if reuse and results_path.exists() else {}
    try:
        for t in tests:
            if t.id in done:
                continue
            rec = manifest["tests"][t.id]
            rec["status"] = "running"
            rec["started"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
            _write_json_atomic(out_dir / MANIFEST, manifest)
            if events:
                events.started(t)
            launch = launcher.run(t)
            _ensure_raw(launch)
            if t.kind == "node":
                results = judge_node_file(launch.raw, bp, t.group, label=t.id, expected_nodes=t.nodes)
            else:
                ctx = judge_context(loaded, t, launcher.name)
                results = judge_file(launch.raw, ctx, kind=t.kind, label=t.id)
                mark_explained(results, t.group, blockers)
            if not any(r.metrics.get("missing_tool") for r in results):
                results = _missing_tool_result(t, launch) or results
            for r in results:
                # wall time of the test, shared between the results it produced (JUnit testcase time)
                r.metrics["test_wall_time_s"] = round(launch.duration_s / len(results), 3)
                for n in (*t.notes, *launch.notes):
                    if n.startswith(MISMATCH):
                        r.degrade("invalid", n + "; this result says nothing about the declared cluster: run the "
                                                 "suites on it (--launcher ssh, slurm or kubernetes)")
                    else:
                        r.note(n)
                if launch.returncode == 124:
                    r.degrade("fail", f"the test was stopped after the --timeout of {launcher.timeout_s:g} s: raise --timeout "
                                      "or shrink the test (validation sizes, steps, runtime)")
            if t.kind == "node":
                blockers.update(blocking_failures(results))
            lines = [{**r.to_json(), "test_id": t.id, "run_with": run_with(t)} for r in results]
            _append_result_lines(results_path, lines)
            recorded.add(t.id)
            vs = [str(r.verdict) for r in results]
            rec.update(status="done", finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                       returncode=launch.returncode, raw=str(launch.raw.relative_to(out_dir)),
                       log=str(launch.log.relative_to(out_dir)), command=launch.command,
                       duration_s=round(launch.duration_s, 3), launch_notes=launch.notes, verdict=worst(vs))
            manifest["updated"] = rec["finished"]
            _write_json_atomic(out_dir / MANIFEST, manifest)
            if events:
                events.finished(t, vs, launch, launch.duration_s)
    except BaseException:
        manifest["status"] = "interrupted"
        # results.jsonl is the record: the signal may land after a test's lines were written but
        # before this loop noted it, so read it back
        recorded |= {str(d.get("test_id")) for d in read_results_lines(results_path) if d.get("test_id")}
        for tid, rec in manifest["tests"].items():
            if rec.get("status") == "running":  # results.jsonl is the record: a test whose lines landed is done
                rec["status"] = "done" if tid in recorded else "interrupted"
        _write_json_atomic(out_dir / MANIFEST, manifest)
        raise
    all_results = load_results(out_dir)
    if not all_results:
        manifest["status"] = "complete"
        _write_json_atomic(out_dir / MANIFEST, manifest)
        raise InvalidRunError(f"{out_dir}: no test produced a result (planned: {', '.join(t.id for t in tests) or 'none'})")
    reports = write_reports(all_results, out_dir, title=title or f"Validation of {bp.name} ({launcher.name} launcher)",
                            blueprint=bp, raw_dir=out_dir / "raw")
    all_verdicts = [str(r.verdict) for r in all_results]
    missing = _missing_tools(all_results)
    manifest["missing_tools"] = missing
    manifest["status"] = "complete"
    manifest["verdict"] = worst(all_verdicts)
    manifest["reports"] = {k: str(Path(v).relative_to(out_dir)) if Path(v).is_relative_to(out_dir) else str(v)
                           for k, v in reports.items()}
    _write_json_atomic(out_dir / MANIFEST, manifest)
    per_test_all: dict[str, list[str]] = {}
    for d in read_results_lines(results_path):
        lbl = _label_of(d)
        if lbl and isinstance(d.get("verdict"), str):
            per_test_all.setdefault(lbl, []).append(d["verdict"])
    per_test = {k: worst(v) for k, v in per_test_all.items()}
    return RunSummary(out_dir=out_dir, results=all_results, verdicts=per_test, reports=dict(reports),
                      skipped=sorted(done), exit_code=exit_code_for(all_verdicts), notes=notes,
                      missing_tools=missing)
