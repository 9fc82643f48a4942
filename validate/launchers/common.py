"""What every launcher shares: the launch result, the payload files, running a logged process.

A :class:`~validate.plan.PlannedTest` is one validation test (one collective, one fio target, one
AMP run) with everything its payload needs; its suite (:data:`validate.suites.REGISTRY`) plans it
and builds its payload's arguments (:meth:`~validate.suites.Suite.payload_args`, the single place
that turns a planned test into payload flags, so the four launchers and the rendered artefacts can
never disagree); a launcher (:mod:`.local`, :mod:`.ssh`, :mod:`.slurm`, :mod:`.kubernetes`) places
the payload on the nodes as the suite's :class:`~validate.suites.Placement` says and writes the
raw output to ``DIR/raw/<test-id>.txt`` (collectives) or ``.json`` (every other suite).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from ..plan import PlannedTest
from ..suites import payload_files
from ..untrusted import open_nofollow, write_atomic

__all__ = [
    "MASTER_PORT",
    "LaunchResult",
    "Launcher",
    "PlannedTest",
    "child_env",
    "open_nofollow",
    "payload_files",
    "payload_sources",
    "run_logged",
    "shell_join",
    "stage_payloads",
    "write_launch_script",
]

MASTER_PORT = 29500
"""TCP port of the torch.distributed rendezvous on the first node (every launcher's payloads)."""


@dataclass
class LaunchResult:
    """What a launcher did for one test.

    ``raw``: the raw output file (may be missing or empty when the payload crashed early);
    ``returncode``: the payload's exit status (124 on timeout); ``log``: stdout+stderr of the
    launch; ``command``: the command line as a user would type it; ``notes``: launcher facts
    (e.g. "nccl-tests not installed: torch benchmark used").
    """

    raw: Path
    returncode: int
    log: Path
    command: str
    duration_s: float
    notes: list[str] = field(default_factory=list)


class Launcher(ABC):
    """Base class. Subclasses set ``name`` and implement :meth:`run`.

    ``out_dir`` is the validation run's directory; every launcher writes its runnable artefacts
    (scripts, manifests, the payload copies) under it and the raw output to ``out_dir/raw``.
    ``timeout_s`` bounds one test (``None``: no bound).
    """

    name: str = ""

    def __init__(self, out_dir: Path, *, timeout_s: float | None = None):
        self.out_dir = Path(out_dir)
        self.timeout_s = timeout_s
        self.raw_dir = self.out_dir / "raw"
        self.log_dir = self.out_dir / "logs"

    def prepare(self) -> None:
        """Create the output folders and copy the payloads; raise ToolMissingError when a tool is absent."""
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stage_payloads(self.out_dir / "payloads")

    def timeout_for(self, test: PlannedTest) -> float:
        """Seconds ``test`` may run: ``--timeout`` when given, else :func:`default_timeout_s` of its planned size
        (a hung payload never hangs the run for ever)."""
        return self.timeout_s if self.timeout_s is not None else default_timeout_s(test)

    def raw_path(self, test: PlannedTest) -> Path:
        """``out_dir/raw/<id>.txt|.json``."""
        return self.raw_dir / f"{test.id}{test.raw_suffix}"

    def log_path(self, test: PlannedTest) -> Path:
        """``out_dir/logs/<id>.log``."""
        return self.log_dir / f"{test.id}.log"

    def fresh_outputs(self, test: PlannedTest) -> tuple[Path, Path]:
        """``(raw, log)`` of ``test`` with any file left by an earlier attempt removed."""
        raw, log = self.raw_path(test), self.log_path(test)
        raw.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        return raw, log

    @abstractmethod
    def run(self, test: PlannedTest) -> LaunchResult:
        """Run ``test`` to completion and return where its raw output is."""

    def close(self) -> None:
        """Remove what the run left on the nodes (the ssh launcher's private run directories); called once
        when the run ends, however it ends."""


def default_timeout_s(test: PlannedTest) -> float:
    """The bound on ``test`` when no ``--timeout`` is given: its suite's :meth:`~validate.suites.base.Suite.default_timeout_s`."""
    from ..suites import get_suite

    return get_suite(test.kind).default_timeout_s(test)


def stage_payloads(dest: Path) -> list[Path]:
    """Copy the standalone payload files of every registered suite into ``dest`` (created); returns the copies."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, src in payload_files().items():
        target = dest / name
        write_atomic(target, src.read_bytes())  # a link at target is replaced, never written through
        out.append(target)
    return out


def payload_sources() -> dict[str, str]:
    """``{file name: source text}`` of the standalone payloads (for a Kubernetes ConfigMap)."""
    return {name: src.read_text(encoding="utf-8") for name, src in payload_files().items()}


def shell_join(argv: list[str]) -> str:
    """``argv`` quoted for a POSIX shell."""
    return " ".join(shlex.quote(a) for a in argv)


def write_launch_script(path: Path, launcher: str, test: PlannedTest, body: str) -> Path:
    """Write the runnable-by-hand ``launch/<id>.sh`` (``#!/bin/sh``, a comment naming the test, ``body``), mode 0755."""
    return write_atomic(path, f"#!/bin/sh\n# clusterforge validate, {launcher} launcher: {test.description}\n{body}",
                        mode=0o755)


# ---------------------------------------------------------------------------------------------
# running a local process with a log, a timeout and no orphans
# ---------------------------------------------------------------------------------------------


def run_logged(argv: list[str], log: Path, *, stdout_to: Path | None = None, cwd: Path | None = None,
               env: dict[str, str] | None = None, timeout_s: float | None = None) -> tuple[int, float]:
    """Run ``argv``; stderr (and stdout unless ``stdout_to``) go to ``log``. Returns ``(status, seconds)``.

    On timeout the whole process group is killed and the status is 124. ``stdout_to`` receives
    stdout alone (e.g. a JSON document or a table). Raises ``FileNotFoundError`` when the program
    does not exist.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        lf = stack.enter_context(open_nofollow(log, "ab"))
        lf.write(f"$ {shell_join(argv)}\n".encode())
        lf.flush()
        out_f = stack.enter_context(open_nofollow(stdout_to, "wb")) if stdout_to is not None else None
        proc = subprocess.Popen(argv, stdout=out_f or lf, stderr=lf, cwd=cwd, env=child_env(env),
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            _kill_rest(proc)  # a child it left behind (stopped, or detached from it) does not outlive the test
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            lf.write(f"\n# killed after {timeout_s:g} s (timeout)\n".encode())
            rc = 124
        except BaseException:
            _kill_group(proc)
            raise
    return rc, time.perf_counter() - t0


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) plus ``CLUSTERFORGE_DIE_WITH_PARENT=1``: payloads then end
    when the launcher is killed (they run in their own session, so they miss its process group's signals)."""
    out = dict(os.environ if env is None else env)
    out["CLUSTERFORGE_DIE_WITH_PARENT"] = "1"
    return out


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group of ``proc`` (its own session) and SIGCONT it (a stopped process acts on
    SIGTERM only once continued), wait up to 5 s for ``proc``, then SIGKILL the whole group: members
    that ignored SIGTERM, stayed stopped or outlived the leader go too."""
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _kill_rest(proc)


def _kill_rest(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL what is left of ``proc``'s process group (stopped members included) and reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
