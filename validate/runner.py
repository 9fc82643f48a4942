"""Plan the validation tests of a blueprint, run them through a launcher, judge each as it finishes.

Flow (``clusterforge validate`` is a thin shell around :func:`run_validation`):

1. :func:`plan_tests` asks each chosen suite of :data:`validate.suites.REGISTRY` to plan its
   :class:`~validate.plan.PlannedTest` objects per node group (the node checks first; then, e.g.,
   one per collective ``nccl-<collective>``, one per fio target ``fio-<name>``, one AMP run
   ``amp``); the node group is added to the id when the blueprint has several compute groups.
2. Each test runs through the launcher, which writes ``DIR/raw/<test-id>.txt|.json``; the raw
   output is judged at once by its suite (:meth:`validate.suites.Suite.judge_test`) and every result is appended to
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

import datetime
import errno
import hashlib
import json
import os
import platform
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from blueprints import LoadedBlueprint
from blueprints.catalog import catalog
from blueprints.errors import InvalidRunError, UsageError

from .launchers.common import Launcher, LaunchResult
from .parsers.bounds import MAX_INPUT_CHARS
from .parsers.bounds import loads as bounded_loads
from .plan import Device, PlannedTest
from .results import JudgeResult, Verdict, exit_code_for, worst
from .rundir import (
    HIDDEN,
    QUARANTINE,
    Damaged,
    RunLock,
    append_lines,
    line_test_id,
    quarantine,
    read_results,
    remove_stale_temps,
)
from .suites import REGISTRY, GroupPlan, get_suite
from .suites.base import MISMATCH, Explanation
from .untrusted import read_nofollow, write_atomic

__all__ = [
    "MISMATCH",
    "RunEvents",
    "RunSummary",
    "plan_tests",
    "prepare_output_dir",
    "run_validation",
    "run_with",
]

RESULTS = "results.jsonl"
MANIFEST = "run.json"
RESUMABLE = (Verdict.PASS.value, Verdict.WARN.value)
"""Verdicts a resumed run keeps; every other result (fail, invalid) is run again."""
RUN_ARTEFACTS = ("raw", "logs", "launch", "payloads", "slurm", "kubernetes", RESULTS, MANIFEST)
"""What a run writes into DIR besides the reports (``--force`` removes a previous run)."""


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------


def _cpu_ranks() -> int:
    """gloo processes for a CPU-only local run: 2 to 4, one per two cores."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))


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


def plan_tests(loaded: LoadedBlueprint, *, launcher: str = "local", suites: list[str] | None = None,
               gpus: int | None = None, local_gpus: int | None = None) -> tuple[list[PlannedTest], list[str]]:
    """The tests to run and run-level notes.

    ``launcher``: ``local`` plans for this machine (one node; ``local_gpus`` GPUs, detected with
    nvidia-smi when ``None``; gloo processes when there is none), any other launcher plans for the
    blueprint's nodes. ``suites`` (names in :data:`validate.suites.REGISTRY`) overrides
    ``validation.suites``. ``gpus`` overrides the ranks per node (GPUs, or gloo processes on a
    CPU-only machine). Each chosen suite plans its tests per node group
    (:meth:`~validate.suites.Suite.plan`), in registry order, the ``runs_first`` suites' tests (the
    node checks) ahead of every other. Raises :class:`UsageError` for an unknown suite, a ``gpus``
    value this machine cannot honour, or a blueprint without compute groups.
    """
    bp = loaded.blueprint
    v = bp.validation
    chosen = list(suites) if suites else list(v.suites)
    bad = [s for s in chosen if s not in REGISTRY]
    if bad:
        raise UsageError(f"unknown suite(s) {', '.join(bad)}; choose from {', '.join(REGISTRY)}")
    if gpus is not None and gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {gpus}")
    groups = list(loaded.cluster.compute_groups)
    if not groups:
        raise UsageError(f"{loaded.file}: no node group with role `compute` to validate")
    local = launcher == "local"
    notes: list[str] = []
    if local and local_gpus is None:
        from .launchers.local import local_gpu_count

        local_gpus = local_gpu_count()
    cat = catalog()
    first: list[PlannedTest] = []
    tests: list[PlannedTest] = []
    several = len(groups) > 1
    if local and several:
        notes.append(f"local launcher: only node group {groups[0].name} is validated (this machine is one node)")
        groups = groups[:1]
    for r in groups:
        g, ns = r.group, r.settings
        gpu_key = ns.gpu_model
        gpu_mismatch: str | None = None
        device: Device
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
                                    "but this machine has no NVIDIA GPU (a run here puts the collectives on gloo CPU "
                                    "processes and AMP on the CPU)")
                    notes.append(gpu_mismatch)
                gpu_key = None
        else:
            nodes = g.size
            device = "cuda" if ns.gpu_count else "cpu"
            ranks = gpus or ns.gpu_count or 1
            if ns.passthrough_host:
                notes.append(f"node group {g.name} passes its GPUs into {ns.sandbox.runtime} sandboxes: the host "
                             "sees no GPU, so the suites must run inside a sandbox (use --launcher kubernetes)")
        gp = GroupPlan(loaded=loaded, group=g, settings=ns, local=local, nodes=nodes, device=device, ranks=ranks,
                       gpu_key=gpu_key, mismatch=gpu_mismatch, several=several)
        for name, suite in REGISTRY.items():
            if name not in chosen:
                continue
            planned, snotes = suite.plan(gp)
            (first if suite.runs_first else tests).extend(planned)
            notes.extend(snotes)
    return first + tests, notes


# ---------------------------------------------------------------------------------------------
# the run directory
# ---------------------------------------------------------------------------------------------


def _read_manifest(out_dir: Path) -> dict[str, Any] | None:
    """``run.json`` within the JSON bounds (:func:`validate.parsers.bounds.loads`); ``None`` when it is
    missing, unreadable, a symbolic link or not an object."""
    p = out_dir / MANIFEST
    try:
        doc = bounded_loads(read_nofollow(p, MAX_INPUT_CHARS).decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def prepare_output_dir(out_dir: Path, *, blueprint_name: str, resume: bool, force: bool) -> None:
    """Make ``out_dir`` ready: refuse a non-empty directory unless ``resume`` or ``force``.

    ``resume`` requires a previous run of the same blueprint; ``force`` deletes a previous run's
    files (only a directory that holds a validation run, never an arbitrary one). Raises
    :class:`UsageError` with the fix.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a directory — pass a directory for -o")
    entries = [e for e in out_dir.iterdir() if e.name not in HIDDEN] if out_dir.exists() else []
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
    """The JSON objects in ``results.jsonl`` (within the bounds); damaged lines, a torn last line (a
    killed writer) among them, are skipped: :func:`validate.rundir.read_results` names them."""
    try:
        return read_results(path)[0]
    except OSError:
        return []


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically, replacing (never following) a symbolic link there."""
    write_atomic(path, json.dumps(data, indent=2) + "\n", root=path.parent)


def _reports_after_interrupt(out_dir: Path, bp: Any, title: str, cost: Any) -> None:
    """The reports of the tests an interrupted run finished (its title says it was interrupted), so a stopped run still
    leaves a report beside results.jsonl; nothing when no test finished. Never raises (the interrupt goes on)."""
    from .report import load_results, write_reports

    try:
        done = load_results(out_dir)
        if done:
            write_reports(done, out_dir, title=f"{title} (interrupted: {len(done)} result(s) so far)", blueprint=bp,
                          raw_dir=out_dir / "raw", cost=cost)
    except Exception as e:  # noqa: BLE001 - a second failure must not hide the interrupt
        print(f"clusterforge: the reports of the interrupted run were not written: {e}", file=sys.stderr)


def _write_manifest_last(path: Path, data: dict[str, Any]) -> None:
    """Write the manifest's final state even on a full disk: atomically when there is room, else in place
    (``O_NOFOLLOW``) as compact JSON, which is shorter than the indented file it replaces and so needs no
    new block. Never raises ``OSError``: the error that stopped the run is the one to report."""
    try:
        _write_json_atomic(path, data)
        return
    except OSError:
        pass
    payload = (json.dumps(data, separators=(",", ":")) + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size >= len(payload):
            os.pwrite(fd, payload, 0)
            os.ftruncate(fd, len(payload))
            os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _check_room(out_dir: Path, launch: LaunchResult) -> None:
    """Raise ``OSError(ENOSPC)`` naming ``launch.raw`` when the results folder is full after a test: its
    payload could not write all of its output, so its result would blame the cluster for the disk."""
    try:
        st = os.statvfs(out_dir)
    except OSError:
        return
    if st.f_bavail * st.f_frsize < 64 * 1024:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(launch.raw))


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
    results: list[JudgeResult]
    verdicts: dict[str, Verdict]
    reports: dict[str, Path]
    skipped: list[str]
    exit_code: int
    notes: list[str] = field(default_factory=list)
    missing_tools: dict[str, dict[str, Any]] = field(default_factory=dict)


def judge_context(loaded: LoadedBlueprint, test: PlannedTest, launcher: str) -> Any:
    """The :class:`~validate.expectations.JudgeContext` ``test`` is judged against: its suite's
    :meth:`~validate.suites.Suite.context` (the node group's, or this machine's on a local run)."""
    return get_suite(test.kind).context(loaded, test, launcher)


def explanations(results: list[JudgeResult]) -> dict[tuple[str, str, str], list[Explanation]]:
    """``{(suite, group, host): [Explanation]}``: what every registered suite finds in ``results`` that
    explains other suites' results (:meth:`~validate.suites.Suite.explanations`: the node suite's failed
    blocking checks). Later results for the same key replace earlier ones (``dict.update``)."""
    out: dict[tuple[str, str, str], list[Explanation]] = {}
    for suite in REGISTRY.values():
        for e in suite.explanations(results):
            out.setdefault((e.suite, e.group, e.host), []).append(e)
    return out


def mark_explained(results: list[JudgeResult], group: str,
                   found: dict[tuple[str, str, str], list[Explanation]]) -> None:
    """Mark ``results`` of node group ``group`` as explained by ``found`` (:func:`explanations` of the run's
    earlier results) of that group: a result gets ``metrics["explained_by"]`` (``["host: check-id", ...]``)
    and a note naming the failure, its measurement and its fix, when the explanation names the result's
    suite; the verdict is left as judged.
    """
    ordered = [e for _, es in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])) for e in es]
    for r in results:
        why = [e for e in ordered if e.group == group and r.kind in e.explains]
        if not why:
            continue
        r.metrics["explained_by"] = [e.ref for e in why]
        for e in why:
            r.note(e.note())


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
    r.degrade(Verdict.INVALID, f"the {test.kind} suite could not run: {advice}. A tool that is not installed says "
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
    write_atomic(raw, f"# clusterforge: the payload exited {launch.returncode} without output; last lines of its log:\n"
                 f"{tail}\n")


def run_with(test: PlannedTest) -> dict[str, Any]:
    """What ``test`` runs with, as recorded on each of its ``results.jsonl`` lines and compared on
    ``--resume``: ``{"params", "nodes", "ranks_per_node", "device"}`` (JSON-normalised)."""
    return json.loads(json.dumps({"params": test.params.to_json(), "nodes": test.nodes,
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


def _plan_resume(lines: list[dict[str, Any]], tests: list[PlannedTest], *, resume: bool,
                 damaged: list[Damaged] | None = None) -> tuple[set[str], list[str]]:
    """``(kept, notes)``: the planned tests whose recorded results are kept (every verdict in
    :data:`RESUMABLE` and the same :func:`run_with`, and no damaged line that may have been one of
    theirs), and a note per planned test that runs again."""
    by_test: dict[str, list[dict[str, Any]]] = {}
    for d in lines:
        lbl = line_test_id(d)
        if lbl:
            by_test.setdefault(lbl, []).append(d)
    # a damaged line names its test, else it belongs to a planned test without an intact line (which runs
    # again anyway) or, when every planned test has one, to one of its neighbours
    without = any(t.id not in by_test for t in tests)
    hit: dict[str, list[int]] = {}
    for dmg in damaged or []:
        for tid in dmg.covers() if dmg.test_id or not without else ():
            hit.setdefault(tid, []).append(dmg.line)
    kept: set[str] = set()
    notes: list[str] = []
    if not resume:
        return kept, notes
    for t in tests:
        mine = by_test.get(t.id)
        if t.id in hit:
            notes.append(f"{t.id}: run again (results.jsonl line(s) {', '.join(map(str, hit[t.id]))} that may hold "
                         f"its results are damaged; moved to {QUARANTINE})")
            continue
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
                   title: str | None = None, cost: dict[str, Any] | None = None) -> RunSummary:
    """:func:`_run_validation` holding the folder's exclusive :class:`~validate.rundir.RunLock` (created
    with the folder; a second run on it raises :class:`~validate.rundir.FolderBusy` naming the holder,
    before anything in the folder changes). A folder this call created is removed again when the run is
    refused before anything ran. ``cost``: the cluster's cost basis for the reports' cost of measured work
    (:func:`validate.report.build_report`)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a directory — pass a directory for -o")
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(out_dir, "validate")
    try:
        lock.acquire()
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    try:
        return _run_validation(loaded, out_dir, launcher, tests, resume=resume, force=force,
                               keep_unplanned=keep_unplanned, notes=notes, events=events, title=title, cost=cost)
    except UsageError:
        if created and not [e for e in out_dir.iterdir() if e.name not in HIDDEN]:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        lock.release()


def _run_validation(loaded: LoadedBlueprint, out_dir: Path, launcher: Launcher, tests: list[PlannedTest], *,
                    resume: bool = False, force: bool = False, keep_unplanned: bool = False,
                    notes: list[str] | None = None, events: RunEvents | None = None,
                    title: str | None = None, cost: dict[str, Any] | None = None) -> RunSummary:
    """Run ``tests`` with ``launcher`` into ``out_dir``, judging and recording each as it finishes.

    See the module docstring for the files and for ``resume`` (rerun what failed, was invalid,
    was interrupted or changed parameters), ``force`` (rerun every planned test) and
    ``keep_unplanned`` (with ``force``: keep the results of tests not planned now, i.e.
    ``--force --suites X`` keeps the other suites). Raises :class:`UsageError` for a directory that
    is not ready (see :func:`prepare_output_dir`), :class:`InvalidRunError` when nothing could be
    judged, and lets ``KeyboardInterrupt`` through after marking the manifest ``interrupted``.
    """
    from .report import load_results, valid_result, write_reports

    bp = loaded.blueprint
    out_dir = Path(out_dir)
    title = title or f"Validation of {bp.name} ({launcher.name} launcher)"
    if any(n.startswith(MISMATCH) for n in [*(notes or []), *(x for t in tests for x in t.notes)]):
        # --run-anyway: the top of every report says why its results are invalid
        title += (" - run on a machine without the declared hardware (--run-anyway): every affected result is invalid "
                  "and says nothing about the cluster")
    fresh = not out_dir.exists() or not any(e.name not in HIDDEN for e in out_dir.iterdir())
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
    remove_stale_temps(out_dir)  # a killed writer's temporary files (we hold the lock: nobody writes them now)
    reuse = resume or partial_force
    old_lines, damaged = read_results(results_path, valid=valid_result) if reuse else ([], [])
    notes = list(notes or [])
    if damaged:  # skipped, named, kept aside; the tests they may have covered run again
        quarantine(results_path, old_lines, damaged)
        notes += [f"{d.describe()}; moved to {QUARANTINE}" for d in damaged]
    done, rerun_notes = _plan_resume(old_lines, tests, resume=resume, damaged=damaged)
    planned_ids = {t.id for t in tests}
    keep_lines = [d for d in old_lines if line_test_id(d) not in planned_ids or line_test_id(d) in done]
    if len(keep_lines) != len(old_lines):  # results of tests that run again go, so nothing mixes
        write_atomic(results_path, "".join(json.dumps(d) + "\n" for d in keep_lines), root=out_dir)
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
    kept_unplanned = {lbl for lbl in (line_test_id(d) for d in keep_lines) if lbl and lbl not in planned_ids}
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

    blockers = explanations(_load(out_dir)) if reuse and results_path.exists() else {}
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
            _check_room(out_dir, launch)
            _ensure_raw(launch)
            results = get_suite(t.kind).judge_test(launch.raw, t, loaded, launcher.name)
            mark_explained(results, t.group, blockers)
            if not any(r.metrics.get("missing_tool") for r in results):
                results = _missing_tool_result(t, launch) or results
            for r in results:
                # wall time of the test, shared between the results it produced (JUnit testcase time)
                r.metrics["test_wall_time_s"] = round(launch.duration_s / len(results), 3)
                for n in (*t.notes, *launch.notes):
                    if n.startswith(MISMATCH):
                        r.degrade(Verdict.INVALID, n + "; this result says nothing about the declared cluster: run the "
                                                 "suites on it (--launcher ssh, slurm or kubernetes)")
                        # --run-anyway: whatever it measured here (even a failure) is about this machine, not the
                        # cluster: invalid, as the README promises, never fail
                        r.verdict = Verdict.INVALID
                    else:
                        r.note(n)
                if launch.returncode == 124:
                    given = "--timeout" if launcher.timeout_s is not None else "default timeout (from the test's size)"
                    r.degrade(Verdict.FAIL, f"the test was stopped after the {given} of {launcher.timeout_for(t):g} s: "
                                            "raise --timeout or shrink the test (validation sizes, steps, runtime)")
            blockers.update(explanations(results))
            lines = [{**r.to_json(), "test_id": t.id, "run_with": run_with(t)} for r in results]
            append_lines(results_path, lines)
            recorded.add(t.id)
            vs = [str(r.verdict) for r in results]
            rec.update(status="done", finished=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                       returncode=launch.returncode, raw=str(launch.raw.relative_to(out_dir)),
                       log=str(launch.log.relative_to(out_dir)), command=launch.command,
                       duration_s=round(launch.duration_s, 3), launch_notes=launch.notes, verdict=worst(vs).value)
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
        _write_manifest_last(out_dir / MANIFEST, manifest)
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):  # Ctrl-C or SIGTERM, not a full disk or a crash
            _reports_after_interrupt(out_dir, bp, title, cost)
        raise
    finally:
        launcher.close()
    all_results = load_results(out_dir)
    if not all_results:
        manifest["status"] = "complete"
        _write_json_atomic(out_dir / MANIFEST, manifest)
        raise InvalidRunError(f"{out_dir}: no test produced a result (planned: {', '.join(t.id for t in tests) or 'none'})")
    try:
        reports = write_reports(all_results, out_dir, title=title,
                                blueprint=bp, raw_dir=out_dir / "raw", cost=cost)
    except OSError:  # every test is recorded, the reports are not: --resume writes them
        manifest["status"] = "interrupted"
        _write_manifest_last(out_dir / MANIFEST, manifest)
        raise
    all_verdicts = [str(r.verdict) for r in all_results]
    missing = _missing_tools(all_results)
    manifest["missing_tools"] = missing
    manifest["status"] = "complete"
    manifest["verdict"] = worst(all_verdicts).value
    manifest["reports"] = {k: str(Path(v).relative_to(out_dir)) if Path(v).is_relative_to(out_dir) else str(v)
                           for k, v in reports.items()}
    _write_json_atomic(out_dir / MANIFEST, manifest)
    per_test_all: dict[str, list[str]] = {}
    for d in read_results_lines(results_path):
        lbl = line_test_id(d)
        if lbl and isinstance(d.get("verdict"), str):
            per_test_all.setdefault(lbl, []).append(d["verdict"])
    per_test = {k: worst(v) for k, v in per_test_all.items()}
    return RunSummary(out_dir=out_dir, results=all_results, verdicts=per_test, reports=dict(reports),
                      skipped=sorted(done), exit_code=exit_code_for(all_verdicts), notes=notes,
                      missing_tools=missing)
