"""The Slurm launcher: one sbatch script per test, run with ``srun``, submitted and watched as a real job.

Each script is self-contained and runnable by hand: it works in ``CF_DIR`` (the environment variable
``CLUSTERFORGE_VALIDATE_DIR``, else the job's working directory), which must hold ``payloads/`` and
be on a file system every node sees. It writes the raw output to ``CF_DIR/raw/<test-id>.*`` and the
job log to ``logs/<job-name>-<job-id>.out``.

Each test's payload is placed as its suite's :class:`~validate.suites.Placement` says:

* ``ranks`` (collectives): ``srun`` one task per GPU (``--ntasks-per-node=G --gpus-per-node=G``); the nccl-tests
  binary (``srun --mpi=pmix <collective>_perf -g 1``, the binary built with ``MPI=1``) when
  ``nccl_tests.py --probe`` finds it, else ``collectives.py``, which reads ``SLURM_PROCID``,
  ``SLURM_NTASKS`` and ``SLURM_LOCALID`` and rendezvouses at ``MASTER_ADDR`` = the first node;
* ``every-node`` (node checks): one task on every node (one JSON line per node);
* ``one-node`` (fio, AMP, ...): one task on one node, with the GPUs the suite asks for (AMP: one).

How :class:`SlurmLauncher` runs a test (``clusterforge validate --launcher slurm`` on a login node):

1. :meth:`~SlurmLauncher.prepare` asks the controller ``scontrol ping``: a controller that does not answer
   stops the run before anything is submitted, ``invalid`` (exit 3) with Slurm's own line.
2. ``sbatch --parsable`` submits the test's script (one job at a time: the benchmarks never share nodes
   with each other); the job id is recorded in ``DIR/slurm/<test-id>.job`` until the job is collected.
3. The job is watched with ``scontrol show job`` (``sacct`` once the controller has forgotten it) and
   every poll is reported (:attr:`SlurmLauncher.report`; by default a line on stderr when the state,
   the pending reason or the nodes change, and every 30 s while nothing changes).
4. A job that does not start is ``invalid``, never a cluster ``fail``: pending longer than
   ``CLUSTERFORGE_SLURM_BLOCKED_TIMEOUT`` seconds (default 300) for a reason only an administrator can
   clear (:data:`BLOCKED_REASONS`: a down or inactive partition, unavailable nodes, a limit the job
   exceeds, a hold; ReFrame cancels on the same list, https://github.com/reframe-hpc/reframe,
   ``reframe/core/schedulers/slurm.py``), or longer than ``CLUSTERFORGE_SLURM_PENDING_TIMEOUT`` seconds
   (default 3600) for any reason (a busy cluster: ``Resources``, ``Priority``). The job is cancelled and
   the run stops with Slurm's reason (:class:`SchedulerError`, exit 3); a controller that stops
   answering for ``CLUSTERFORGE_SLURM_BLOCKED_TIMEOUT`` seconds, a job Slurm refuses, or one somebody
   else cancels or preempts stops it the same way. The finished tests' results are kept: ``--resume``
   goes on from there. Reason codes: https://slurm.schedmd.com/job_reason_codes.html; job states:
   https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES.
5. A job that runs longer than the test's timeout (``--timeout``, else the suite's default) is cancelled
   and judged as a timed-out test (exit status 124, as the other launchers); so is a job that reached
   its Slurm time limit (``TIMEOUT``; the script asks for the timeout plus a minute, so the job ends
   even when nobody watches it). Ctrl-C or SIGTERM cancels the job (``scancel``) before the run stops.
6. When the job ends its log (``DIR/logs/<job-name>-<job-id>.out``) is appended to ``DIR/logs/<test-id>.log``
   and the raw output the job wrote is judged like every launcher's.

A run killed outright (SIGKILL, a lost SSH session) leaves its job in the queue; ``--resume`` finds it by
the recorded id and waits for it when it is still pending or running the same script, instead of
submitting a second one (a job of a script that changed since is cancelled).

sbatch/srun/scontrol/scancel: https://slurm.schedmd.com/sbatch.html, https://slurm.schedmd.com/srun.html,
https://slurm.schedmd.com/scontrol.html, https://slurm.schedmd.com/scancel.html.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from blueprints import LoadedBlueprint
from blueprints.errors import InvalidRunError, ToolMissingError, UsageError
from blueprints.models import SlurmOrchestrator
from blueprints.role_templates import encoder

from ..suites import Placement, RanksSuite, get_suite
from ..untrusted import open_nofollow, read_nofollow, write_atomic
from .common import (
    MASTER_PORT,
    Launcher,
    LaunchResult,
    PlannedTest,
    child_env,
    shell_join,
)


def job_name(loaded: LoadedBlueprint, test: PlannedTest) -> str:
    """The job name of ``test``'s script (``cf-<blueprint>-<test-id>``, at most 64 characters)."""
    return f"cf-{loaded.blueprint.name}-{test.id}"[:64]


def partition_of(loaded: LoadedBlueprint, group: str) -> str:
    """The Slurm partition that holds node group ``group``: the first rendered partition listing it
    (:attr:`blueprints.slurm.SlurmSettings.partitions`), else ``orchestrator.partition``."""
    orch = loaded.blueprint.orchestrator
    default = orch.partition if isinstance(orch, SlurmOrchestrator) else ""
    settings = getattr(loaded.cluster, "slurm", None)
    for part in getattr(settings, "partitions", None) or ():
        if group in part.groups:
            return str(part.name)
    return default


def _time_limit(seconds: float) -> str:
    s = int(max(60, seconds))
    return f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def sbatch_script(loaded: LoadedBlueprint, test: PlannedTest, *, time_limit_s: float = 3600) -> str:
    """The sbatch script text for ``test`` (bash; ``#SBATCH`` options, then ``srun``)."""
    bp = loaded.blueprint
    orch = bp.orchestrator if isinstance(bp.orchestrator, SlurmOrchestrator) else None
    gpus = test.device == "cuda"
    name = job_name(loaded, test)
    raw = f'"$CF_DIR/raw/{test.id}{test.raw_suffix}"'
    lines = [
        "#!/bin/bash",
        f"# clusterforge validation for blueprint {bp.name}: {test.description}",
        f"# Submit from the directory that holds payloads/ (or set CLUSTERFORGE_VALIDATE_DIR): sbatch {test.id}.sbatch",
        f"#SBATCH --job-name={name}",
    ]
    suite = get_suite(test.kind)
    if suite.placement == Placement.EVERY_NODE:
        lines += [f"#SBATCH --nodes={test.nodes}", "#SBATCH --ntasks-per-node=1"]
    elif suite.placement == Placement.RANKS:
        lines += [f"#SBATCH --nodes={test.nodes}", f"#SBATCH --ntasks-per-node={test.ranks_per_node}"]
        if gpus:
            lines.append(f"#SBATCH --gpus-per-node={test.ranks_per_node}")
        lines.append("#SBATCH --exclusive")
    else:
        lines += ["#SBATCH --nodes=1", "#SBATCH --ntasks=1"]
        if suite.gpus(test):
            lines.append(f"#SBATCH --gpus-per-node={suite.gpus(test)}")
    if orch is not None:
        word = encoder("clusterforge_not_option")  # one word of the directive line, never a newline
        lines.append(f"#SBATCH --partition={word(partition_of(loaded, test.group))}")
        if orch.account:
            lines.append(f"#SBATCH --account={word(orch.account)}")
    lines += [
        f"#SBATCH --time={_time_limit(time_limit_s)}",
        "#SBATCH --output=logs/%x-%j.out",
        "# logs/ must exist where the job starts (Slurm opens --output before this script runs)",
        "set -euo pipefail",
        'CF_DIR="${CLUSTERFORGE_VALIDATE_DIR:-$PWD}"',
        'PY="${CLUSTERFORGE_PYTHON:-python3}"',
        'mkdir -p "$CF_DIR/raw" "$CF_DIR/logs"',
    ]
    env_py = suite.environment_python(test)
    if env_py:  # the default python3: the declared training environment where the node has it
        lines.append(f'if [ "$PY" = python3 ] && [ -x {shlex.quote(env_py)} ]; then PY={shlex.quote(env_py)}; fi')
    payload = f'"$CF_DIR/payloads/{suite.payload}"'
    if isinstance(suite, RanksSuite):
        coll = suite.binary_name(test)
        lines += [
            'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            f"export MASTER_PORT={MASTER_PORT}",
        ]
        torch_cmd = f'srun "$PY" {payload} {shell_join(suite.payload_args(test))} --output {raw}'
        if gpus:
            lines += [
                (f'if BIN="$("$PY" "$CF_DIR/payloads/{suite.binary_payload}" --probe --collective {coll}'
                 f'{"".join(" " + shlex.quote(a) for a in suite.binary_search_args(test))} 2>/dev/null)"; then'),
                f'  srun --mpi=pmix "$BIN" {shell_join(suite.binary_flags(test, 1))} | tee {raw}',
                "else",
                f"  {torch_cmd}",
                "fi",
            ]
        else:
            lines.append(torch_cmd)
    elif suite.placement == Placement.EVERY_NODE:
        # one task per node; every node prints one JSON line (the payload needs the standard library only). Each
        # task writes a file of its own (srun --output %t): srun forwards the tasks' stdout in pieces, and two
        # documents of tens of KB sent to one stream interleave mid-line. The parts are joined in task order.
        args = shell_join(suite.payload_args(test))
        args = f" {args}" if args else ""
        lines += [f'rm -f {raw}.task-*',
                  f'srun --nodes={test.nodes} --ntasks-per-node=1 --output={raw}.task-%t "$PY" {payload}{args}',
                  "rc=$?",
                  f'for i in $(seq 0 $(({test.nodes} - 1))); do cat {raw}.task-$i 2>/dev/null; done > {raw}',
                  f'rm -f {raw}.task-*',
                  "exit $rc"]
    else:
        lines.append(f'srun --nodes=1 --ntasks=1 "$PY" {payload} {shell_join(suite.payload_args(test))} '
                     f"--output {raw}")
    return "\n".join(lines) + "\n"


def write_scripts(loaded: LoadedBlueprint, tests: list[PlannedTest], dest: Path,
                  *, time_limit_s: float = 3600) -> list[Path]:
    """Write ``dest/<test-id>.sbatch`` for every test (mode 0755) and create ``dest/logs``; returns the
    scripts. Slurm opens ``--output=logs/...`` before the script runs, so the folder must exist in the
    directory the job starts in (submit from ``dest``, or pass ``--chdir`` to a copy of it)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "logs").mkdir(exist_ok=True)
    out = []
    for t in tests:
        p = dest / f"{t.id}.sbatch"
        write_atomic(p, sbatch_script(loaded, t, time_limit_s=time_limit_s), mode=0o755)
        out.append(p)
    return out




# ---------------------------------------------------------------------------------------------
# watching a job
# ---------------------------------------------------------------------------------------------

ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                           "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED",
                           "RESV_DEL_HOLD", "SPECIAL_EXIT"})
"""Job states of a job that has not ended (https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES)."""
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED", "RESIZING"})
"""States of a job that holds its nodes (its run time counts against the test's timeout)."""
BLOCKED_REASONS = frozenset({
    "PartitionDown", "PartitionInactive", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig",
    "ReqNodeNotAvail", "NodeDown", "FrontEndDown", "BadConstraints", "InvalidAccount", "InvalidQOS",
    "AccountNotAllowed", "QOSNotAllowed", "QOSJobLimit", "QOSResourceLimit", "QOSUsageThreshold", "Licenses",
    "JobHeldAdmin", "JobHeldUser", "DependencyNeverSatisfied", "ReservationDeleted",
    "launch_failed_requeued_held",
})
"""Pending reasons that an administrator (or the job's owner) has to clear: the job waits
``CLUSTERFORGE_SLURM_BLOCKED_TIMEOUT`` seconds at most. From https://slurm.schedmd.com/job_reason_codes.html
and ReFrame's list of reasons it cancels a pending job on (``reframe/core/schedulers/slurm.py``), plus
``launch failed requeued held`` (a node failed to launch the job, its prolog for one: the job is held until
somebody releases it); compared by :func:`reason_code`;
``ReqNodeNotAvail`` also shows for a moment during long backfill cycles (reframe-hpc/reframe#1049), hence a
grace time rather than an immediate stop."""
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out on send/recv", "Zero Bytes were transmitted",
               "Connection refused", "Communication connection failure", "Connection timed out",
               "Could not establish a configuration source", "No route to host")
"""What Slurm's clients print when the controller does not answer (the job may be fine: ask again later)."""
GONE = ("Invalid job id specified",)
"""What ``scontrol show job`` prints for a job the controller no longer holds (``MinJobAge`` passed)."""

_BLOCKED = frozenset(r.lower() for r in BLOCKED_REASONS)


def reason_code(reason: str | None) -> str:
    """A pending reason as :data:`BLOCKED_REASONS` is compared: its first word (before ``,`` or ``(``), spaces as
    underscores (squeue writes ``launch failed requeued held``, scontrol ``launch_failed_requeued_held``),
    lower case."""
    head = re.split(r"[,(]", (reason or "").strip(), maxsplit=1)[0].strip()
    return head.replace(" ", "_").lower()


ENV_PENDING = "CLUSTERFORGE_SLURM_PENDING_TIMEOUT"
ENV_BLOCKED = "CLUSTERFORGE_SLURM_BLOCKED_TIMEOUT"
ENV_POLL = "CLUSTERFORGE_SLURM_POLL"
DEFAULT_PENDING_S = 3600.0
DEFAULT_BLOCKED_S = 300.0
DEFAULT_POLL_S = 5.0
HEARTBEAT_S = 30.0
"""The default reporter repeats an unchanged state this often."""
_JOB_ID = re.compile(r"(\d+)(?:;\S+)?")
_MAX_JOB_LOG = 4 << 20
"""Bytes of a job's log copied into the test's log (the end of it; the whole file stays in ``DIR/logs``)."""


class SchedulerError(InvalidRunError):
    """Slurm could not run a test: the controller does not answer, the job was refused, never started, or
    was cancelled or preempted by somebody else. Nothing about the cluster was measured: ``invalid``, exit 3."""


@dataclass(frozen=True)
class JobStatus:
    """One look at a job: ``state`` (``PENDING``, ``RUNNING``, ``COMPLETED`` ...), ``reason`` (why it is
    pending or why it ended; ``None`` when Slurm gives none), ``nodes`` (its node list), ``exit_code`` and
    ``signal`` (``ExitCode=N:S``, when known), ``source`` (``scontrol`` or ``sacct``)."""

    job_id: str
    state: str
    reason: str | None = None
    nodes: str = ""
    exit_code: int | None = None
    signal: int | None = None
    cancelled_by: str | None = None
    source: str = "scontrol"

    @property
    def active(self) -> bool:
        """The job has not ended."""
        return self.state in ACTIVE_STATES

    @property
    def started(self) -> bool:
        """The job holds its nodes."""
        return self.state in STARTED_STATES

    @property
    def blocked(self) -> bool:
        """Pending for a reason in :data:`BLOCKED_REASONS`."""
        return not self.started and self.active and reason_code(self.reason) in _BLOCKED


@dataclass(frozen=True)
class JobProgress:
    """What :attr:`SlurmLauncher.report` is told at every poll: ``job_id``, ``state``, ``reason`` (pending),
    ``nodes`` (running), ``seconds`` in that state. ``str()``: one short line for a status column."""

    job_id: str
    state: str
    reason: str | None
    nodes: str
    seconds: float
    exit_code: int | None = None

    def __str__(self) -> str:
        if self.state not in ACTIVE_STATES:
            code = f", exit {self.exit_code}" if self.exit_code is not None else ""
            return f"job {self.job_id} {self.state.lower()}{code}{f' on {self.nodes}' if self.nodes else ''}"
        where = f" ({self.reason})" if self.reason and self.state not in STARTED_STATES else ""
        where += f" on {self.nodes}" if self.nodes and self.state in STARTED_STATES else ""
        return f"job {self.job_id} {self.state.lower()}{where} {self.seconds:.0f} s"

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        """What a reporter compares to tell a change from a repeat."""
        return (self.job_id, self.state, self.reason, self.nodes)


class StderrReporter:
    """The default :attr:`SlurmLauncher.report`: a line on stderr (``  <test-id>: job 42 pending (Resources)
    12 s``) when a job's state, reason or nodes change, and every :data:`HEARTBEAT_S` seconds otherwise. Under
    the CLI's live table rich shows these lines above the table."""

    def __init__(self, stream: IO[str] | None = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.stream = stream
        self.heartbeat_s = heartbeat_s
        self._last: dict[str, tuple[tuple[str, str, str | None, str], float]] = {}

    def __call__(self, test: PlannedTest, progress: JobProgress) -> None:
        now = time.monotonic()
        last = self._last.get(test.id)
        if last is not None and last[0] == progress.key and now - last[1] < self.heartbeat_s:
            return
        self._last[test.id] = (progress.key, now)
        stream = self.stream or sys.stderr
        try:
            stream.write(f"  {test.id}: {progress}\n")
            stream.flush()
        except (OSError, ValueError):
            pass


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name}={raw!r}: give a positive number of seconds (or unset it for {default:g})")
    return value


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    err = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()]
    return (err or lines or [""])[-1][:500]


def _unreachable(text: str) -> bool:
    return any(u.lower() in text.lower() for u in UNREACHABLE)


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", text)
    return m.group(1) if m else None


def parse_scontrol_job(job_id: str, text: str) -> JobStatus | None:
    """The :class:`JobStatus` in ``scontrol show job -o`` output (``None`` without a ``JobState``)."""
    state = _field(text, "JobState")
    if not state:
        return None
    reason = _field(text, "Reason")
    code = _field(text, "ExitCode") or ""
    m = re.fullmatch(r"(\d+):(\d+)", code)
    nodes = _field(text, "NodeList") or ""
    return JobStatus(job_id=job_id, state=state, reason=None if reason in (None, "", "None") else reason,
                     nodes="" if nodes == "(null)" else nodes, exit_code=int(m.group(1)) if m else None,
                     signal=int(m.group(2)) if m else None, source="scontrol")


def parse_sacct_job(job_id: str, text: str) -> JobStatus | None:
    """The :class:`JobStatus` in ``sacct -n -P -X -o JobID,State,ExitCode,NodeList,Reason`` output."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or parts[0].split(".")[0] != job_id:
            continue
        words = parts[1].split()
        if not words:
            return None
        by = words[2] if len(words) > 2 and words[1] == "by" else None
        m = re.fullmatch(r"(\d+):(\d+)", parts[2])
        return JobStatus(job_id=job_id, state=words[0], reason=None if parts[4] in ("", "None") else parts[4],
                         nodes="" if parts[3] in ("", "None assigned") else parts[3],
                         exit_code=int(m.group(1)) if m else None, signal=int(m.group(2)) if m else None,
                         cancelled_by=by, source="sacct")
    return None


class _Unreachable(Exception):
    """A Slurm client could not reach the controller (``str``: Slurm's line)."""


class SlurmLauncher(Launcher):
    """Submits each test with ``sbatch --parsable`` from ``DIR`` (which must be on a shared file system) and
    watches the job until it ends (see the module docstring).

    ``python``: the Python with torch on the nodes. ``pending_timeout_s``, ``blocked_timeout_s`` and
    ``poll_s`` default to the environment variables :data:`ENV_PENDING`, :data:`ENV_BLOCKED` and
    :data:`ENV_POLL`. ``report(test, JobProgress)`` is called at every poll (default
    :class:`StderrReporter`).
    """

    name = "slurm"

    def __init__(self, out_dir: Path, loaded: LoadedBlueprint, *, timeout_s: float | None = None,
                 python: str = "python3", pending_timeout_s: float | None = None,
                 blocked_timeout_s: float | None = None, poll_s: float | None = None,
                 report: Callable[[PlannedTest, JobProgress], None] | None = None):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.loaded = loaded
        self.python = python
        self.script_dir = self.out_dir / "slurm"
        self.pending_timeout_s = pending_timeout_s or _env_seconds(ENV_PENDING, DEFAULT_PENDING_S)
        self.blocked_timeout_s = blocked_timeout_s or _env_seconds(ENV_BLOCKED, DEFAULT_BLOCKED_S)
        self.poll_s = poll_s or _env_seconds(ENV_POLL, DEFAULT_POLL_S)
        self.report: Callable[[PlannedTest, JobProgress], None] = report or StderrReporter()
        self._active: dict[str, str] = {}  # job id -> test id, for close()

    # -- Slurm's clients ------------------------------------------------------------------------
    def _slurm(self, argv: list[str], log: Path | None, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client; its command and output go to ``log``. A client that hangs past ``timeout``
        counts as a controller that does not answer."""
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=child_env(),
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            p = subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: Socket timed out on send/recv operation "
                                                           f"(no answer within {timeout:g} s)\n")
        if log is not None:
            with open_nofollow(log, "ab") as f:
                f.write(f"$ {shell_join(argv)}\n{p.stdout}{p.stderr}".encode())
        return p

    def query(self, job_id: str, log: Path | None = None) -> JobStatus | None:
        """The job's status from ``scontrol show job`` (``sacct`` when the controller forgot it); ``None``
        when neither knows it. Raises :class:`_Unreachable` when the controller does not answer."""
        p = self._slurm(["scontrol", "show", "job", "-o", job_id], None, timeout=60)
        if p.returncode == 0:
            st = parse_scontrol_job(job_id, p.stdout)
            if st is not None:
                return st
        text = p.stdout + p.stderr
        if p.returncode != 0 and _unreachable(text):
            raise _Unreachable(_first_line(text))
        if p.returncode != 0 and not any(g in text for g in GONE):
            raise _Unreachable(_first_line(text) or f"scontrol exit {p.returncode}")
        if shutil.which("sacct") is None:
            return None
        q = self._slurm(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList,Reason"],
                        log, timeout=60)
        return parse_sacct_job(job_id, q.stdout) if q.returncode == 0 else None

    def cancel(self, job_id: str, log: Path | None) -> None:
        """``scancel`` the job (best effort: a controller that does not answer leaves it to its time limit)."""
        try:
            self._slurm(["scancel", job_id], log, timeout=30)
        finally:
            self._active.pop(job_id, None)

    # -- the launcher ---------------------------------------------------------------------------
    def prepare(self) -> None:
        """Folders, payload copies, and the controller's answer to ``scontrol ping``.

        Raises ToolMissingError when a Slurm client is not on PATH, :class:`SchedulerError` when the
        controller does not answer (nothing is submitted then)."""
        missing = [t for t in ("sbatch", "scontrol", "scancel") if shutil.which(t) is None]
        if missing:
            raise ToolMissingError(f"{missing[0]} not found: run `clusterforge validate --launcher slurm` on a Slurm "
                                   "login node (or use `clusterforge render` and submit the scripts there)")
        p = self._slurm(["scontrol", "ping"], None, timeout=60)
        if p.returncode != 0:
            said = "; ".join(ln.strip() for ln in (p.stdout + p.stderr).splitlines()
                             if ln.strip() and not ln.strip().startswith("*"))[:500]
            raise SchedulerError(f"the Slurm controller does not answer (`scontrol ping`: {said or f'exit {p.returncode}'}): "
                                 "nothing was submitted; start slurmctld or point SLURM_CONF at the cluster's "
                                 "slurm.conf, then run again")
        super().prepare()
        self.script_dir.mkdir(parents=True, exist_ok=True)

    def _record(self, test: PlannedTest) -> Path:
        return self.script_dir / f"{test.id}.job"

    def _resume_hint(self) -> str:
        return (f"the finished tests are kept: fix it, then `clusterforge validate {self.loaded.file} --launcher slurm "
                f"-o {self.out_dir} --resume`")

    def _adopt(self, test: PlannedTest, script_sha: str, log: Path) -> str | None:
        """The id of a job an earlier, killed run submitted for this same script and that is still pending or
        running (its record ``slurm/<test-id>.job``); a recorded job of another script is cancelled."""
        rec = self._record(test)
        try:
            doc = json.loads(read_nofollow(rec, 4096).decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            return None
        job = str(doc.get("job_id", "")) if isinstance(doc, dict) else ""
        if not _JOB_ID.fullmatch(job):
            rec.unlink(missing_ok=True)
            return None
        try:
            st = self.query(job, log)
        except _Unreachable:
            st = None
        if st is not None and st.active:
            if doc.get("script_sha256") == script_sha:
                self._active[job] = test.id
                return job
            self.cancel(job, log)
        rec.unlink(missing_ok=True)
        return None

    def _submit(self, test: PlannedTest, script: Path, script_sha: str, log: Path) -> str:
        """``sbatch --parsable`` the script; returns the job id. Raises :class:`SchedulerError` when Slurm
        refuses the job or does not answer. An interrupt while sbatch runs waits for its answer and cancels
        the job it may have made."""
        env = dict(os.environ)
        env["CLUSTERFORGE_VALIDATE_DIR"] = str(self.out_dir.resolve())
        env["CLUSTERFORGE_PYTHON"] = self.python
        argv = ["sbatch", "--parsable", "--export=ALL", f"--chdir={self.out_dir.resolve()}", str(script.resolve())]
        with open_nofollow(log, "ab") as f:
            f.write(f"$ {shell_join(argv)}\n".encode())
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(env),
                                stdin=subprocess.DEVNULL, start_new_session=True)  # Ctrl-C reaches us, not sbatch
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\nsbatch: Socket timed out on send/recv operation (no answer within 180 s)\n"
        except BaseException:
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out = ""
            m = _JOB_ID.fullmatch(out.strip())
            if m:
                self.cancel(m.group(1), log)
            raise
        with open_nofollow(log, "ab") as f:
            f.write(f"{out}{err}".encode())
        m = _JOB_ID.fullmatch(out.strip())
        if proc.returncode != 0 or not m:
            said = _first_line(err or out) or f"sbatch exit {proc.returncode}"
            if _unreachable(err + out):
                raise SchedulerError(f"{test.id}: the Slurm controller does not answer ({said}); nothing about the "
                                     f"cluster was measured; {self._resume_hint()}")
            raise SchedulerError(f"{test.id}: Slurm refused the job ({said}; script {script}); nothing about the "
                                 f"cluster was measured; {self._resume_hint()}")
        job = m.group(1)
        self._active[job] = test.id
        write_atomic(self._record(test), json.dumps({
            "job_id": job, "script_sha256": script_sha, "script": str(script),
            "submitted": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}) + "\n")
        return job

    def _blocked_message(self, test: PlannedTest, st: JobStatus, waited: float, limit_env: str) -> str:
        reason = st.reason or "no reason given"
        partition = partition_of(self.loaded, test.group) or "<partition>"
        hint = {
            "PartitionDown": f"`scontrol show partition {partition}`; an administrator brings it back with "
                             f"`scontrol update PartitionName={partition} State=UP`",
            "PartitionInactive": f"`scontrol update PartitionName={partition} State=UP`",
            "ReqNodeNotAvail": "`sinfo -R` lists the nodes that are down, drained or reserved and why",
            "NodeDown": "`sinfo -R` lists the nodes that are down and why",
            "launch_failed_requeued_held": f"a node could not launch the job (its prolog failed, for one): "
                                           f"`scontrol show job {st.job_id}`, `sinfo -R` and the node's slurmd log "
                                           f"say why; `scontrol release {st.job_id}` after the fix",
        }.get(reason.split(",")[0].replace(" ", "_"), "`squeue -j " + st.job_id + " -o %r` and https://slurm.schedmd.com/job_reason_codes.html")
        return (f"{test.id}: Slurm job {st.job_id} did not start within {waited:.0f} s ({limit_env}): still "
                f"{st.state}, Slurm's reason: {reason} (see {hint}); the job was cancelled and nothing about the "
                f"cluster was measured; {self._resume_hint()}")

    def _wait(self, test: PlannedTest, job: str, log: Path) -> tuple[JobStatus | None, bool]:
        """Poll until the job ends; returns ``(last status, timed_out)``. Raises :class:`SchedulerError` (after
        cancelling the job) when it does not start in time or the controller stops answering."""
        t_sub = time.monotonic()
        t_state = t_sub
        blocked_since: float | None = None
        lost_since: float | None = None
        running_since: float | None = None
        timed_out = False
        cancel_deadline: float | None = None
        key: tuple[str, str | None, str] | None = None
        last: JobStatus | None = None
        interval = min(0.5, self.poll_s)
        limit = self.timeout_for(test)
        while True:
            now = time.monotonic()
            try:
                st = self.query(job)
                lost_since = None
            except _Unreachable as e:
                lost_since = lost_since or now
                if now - lost_since > self.blocked_timeout_s:
                    self.cancel(job, log)
                    raise SchedulerError(f"{test.id}: the Slurm controller stopped answering while job {job} was "
                                         f"{last.state if last else 'submitted'} ({e}; for {now - lost_since:.0f} s, "
                                         f"{ENV_BLOCKED}); the job was cancelled if it could be; "
                                         f"{self._resume_hint()}") from None
                time.sleep(min(self.poll_s, 5.0))
                continue
            if st is None:
                return last, timed_out
            if (st.state, st.reason, st.nodes) != key:
                key = (st.state, st.reason, st.nodes)
                t_state = now
                interval = min(0.5, self.poll_s)
                with open_nofollow(log, "ab") as f:
                    f.write(f"# {datetime.datetime.now().isoformat(timespec='seconds')} job {job}: {st.state}"
                            f"{f' ({st.reason})' if st.reason else ''}{f' on {st.nodes}' if st.nodes else ''}\n".encode())
            last = st
            self.report(test, JobProgress(job, st.state, st.reason, st.nodes, now - t_state, st.exit_code))
            if not st.active:
                return st, timed_out
            if st.started:
                running_since = running_since or now
                blocked_since = None
                if not timed_out and now - running_since > limit:
                    timed_out = True
                    cancel_deadline = now + 120
                    with open_nofollow(log, "ab") as f:
                        f.write(f"\n# killed after {limit:g} s (timeout): scancel {job}\n".encode())
                    self._slurm(["scancel", job], log, timeout=30)
            elif running_since is None:
                blocked_since = (blocked_since or now) if st.blocked else None
                if blocked_since is not None and now - blocked_since > self.blocked_timeout_s:
                    self.cancel(job, log)
                    raise SchedulerError(self._blocked_message(test, st, now - t_sub,
                                                               f"{ENV_BLOCKED}={self.blocked_timeout_s:g}"))
                if now - t_sub > self.pending_timeout_s:
                    self.cancel(job, log)
                    raise SchedulerError(self._blocked_message(test, st, now - t_sub,
                                                               f"{ENV_PENDING}={self.pending_timeout_s:g}"))
            if cancel_deadline is not None and now > cancel_deadline:
                return st, timed_out  # cancelled for the timeout and still not gone: stop waiting
            time.sleep(interval)
            interval = min(self.poll_s, interval * 1.5)

    def _append_job_log(self, test: PlannedTest, job: str, log: Path) -> Path:
        """Copy the end of the job's own log into the test's log; returns the job log's path."""
        job_log = self.out_dir / "logs" / f"{job_name(self.loaded, test)}-{job}.out"
        try:
            size = job_log.stat().st_size
            data = read_nofollow(job_log, max(size, 1) + 1)[-_MAX_JOB_LOG:]
        except OSError:
            data = b"(no job log: the job never ran, or its node cannot write DIR/logs)\n"
        with open_nofollow(log, "ab") as f:
            f.write(f"# ---- job {job} log {job_log} ----\n".encode() + data + b"\n")
        return job_log

    def run(self, test: PlannedTest) -> LaunchResult:
        """Submit ``test``'s script (or wait for the job an earlier, killed run left), watch it, collect it."""
        script = write_scripts(self.loaded, [test], self.script_dir, time_limit_s=self.timeout_for(test) + 60)[0]
        script_sha = hashlib.sha256(script.read_bytes()).hexdigest()
        raw, log = self.raw_path(test), self.log_path(test)
        log.unlink(missing_ok=True)
        t0 = time.perf_counter()
        notes: list[str] = []
        job = self._adopt(test, script_sha, log)
        if job is not None:
            notes.append(f"Slurm job {job}, submitted by an earlier run that was stopped, was still queued or "
                         "running: its output was collected")
        else:
            raw.unlink(missing_ok=True)
            job = self._submit(test, script, script_sha, log)
        try:
            st, timed_out = self._wait(test, job, log)
        except BaseException:
            if job in self._active:
                self.cancel(job, log)
                with open_nofollow(log, "ab") as f:
                    f.write(f"# cancelled job {job}: the run was stopped\n".encode())
            self._record(test).unlink(missing_ok=True)
            raise
        self._active.pop(job, None)
        job_log = self._append_job_log(test, job, log)
        self._record(test).unlink(missing_ok=True)
        rc = self._returncode(test, job, st, timed_out, notes)
        notes.append(f"Slurm job {job}: {st.state if st else 'final state unknown'}"
                     f"{f' on {st.nodes}' if st and st.nodes else ''}; job log {job_log.relative_to(self.out_dir)}")
        return LaunchResult(raw=raw, returncode=rc, log=log,
                            command=f"sbatch --parsable --chdir={self.out_dir.resolve()} {script.resolve()}",
                            duration_s=time.perf_counter() - t0, notes=notes)

    def _returncode(self, test: PlannedTest, job: str, st: JobStatus | None, timed_out: bool, notes: list[str]) -> int:
        """The test's exit status from the job's end; raises :class:`SchedulerError` for a job that ended without
        saying anything about the cluster (cancelled by somebody else, preempted, revoked)."""
        if timed_out or (st is not None and st.state in ("TIMEOUT", "DEADLINE")):
            return 124
        if st is None:
            notes.append(f"the final state of Slurm job {job} is unknown (the controller forgot it and sacct has no "
                         "record): judged on its output alone")
            raw = self.raw_path(test)
            return 0 if raw.exists() and raw.stat().st_size > 0 else 1
        if st.state in ("CANCELLED", "PREEMPTED", "REVOKED"):
            who = f" by user {st.cancelled_by}" if st.cancelled_by else ""
            raise SchedulerError(f"{test.id}: Slurm job {job} was {st.state.lower()}{who} before it finished "
                                 f"(reason: {st.reason or 'none given'}); nothing about the cluster was measured; "
                                 f"{self._resume_hint()}")
        if st.state == "OUT_OF_MEMORY":
            notes.append(f"Slurm job {job} ran out of memory (its cgroup limit): the payload was killed")
            return st.exit_code or 137
        if st.state in ("NODE_FAIL", "BOOT_FAIL"):
            notes.append(f"Slurm job {job} ended {st.state}: a node of the job failed ({st.reason or 'no reason'}; "
                         "`sinfo -R`)")
            return st.exit_code or 1
        if st.signal:
            return 128 + st.signal
        return st.exit_code if st.exit_code is not None else (0 if st.state == "COMPLETED" else 1)

    def close(self) -> None:
        """Cancel every job this run submitted that is still tracked (an interrupted or failed run)."""
        for job in list(self._active):
            self.cancel(job, self.log_dir / "slurm-cancel.log")
