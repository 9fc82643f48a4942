"""The local launcher: run every test as subprocesses on this machine (CPU or local GPUs).

Each test's payload is placed as its suite's :class:`~validate.suites.Placement` says:

* ``ranks`` (collectives): the nccl-tests binary when it is installed and the test runs on GPUs
  (``nccl_tests.py --gpus G``, one process driving G GPUs), else the torch benchmark with
  ``collectives.py --spawn N`` (N gloo processes on a CPU-only machine, N NCCL ranks on GPUs);
* ``every-node`` (node checks): the payload once (this machine is the one node);
* ``one-node`` (fio, AMP, ...): the payload with the suite's arguments, ``--output`` the raw file.

Artefacts: ``DIR/payloads/*.py`` (the copies that ran), ``DIR/launch/<test-id>.sh`` (the exact
command, runnable by hand), ``DIR/logs/<test-id>.log`` and ``DIR/raw/<test-id>.*``. The payloads
run with this interpreter (``sys.executable``), which has torch installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ..suites import Placement, RanksSuite, get_suite
from .common import (
    Launcher,
    LaunchResult,
    PlannedTest,
    run_logged,
    shell_join,
    write_launch_script,
)


def local_gpu_count() -> int:
    """NVIDIA GPUs on this machine by ``nvidia-smi -L`` (0 when nvidia-smi is absent or fails).

    Honours ``CUDA_VISIBLE_DEVICES`` when it is set (an empty value means no GPU). Does not import torch.
    """
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        return len([d for d in vis.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    import subprocess

    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


class LocalLauncher(Launcher):
    """Runs the payloads as local subprocesses. ``python``: interpreter with torch (default: this one)."""

    name = "local"

    def __init__(self, out_dir: Path, *, timeout_s: float | None = None, python: str | None = None,
                 nccl_tests_dirs: list[str] | None = None):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.python = python or sys.executable
        self.nccl_tests_dirs = list(nccl_tests_dirs or [])
        self.payloads = self.out_dir / "payloads"
        self.launch_dir = self.out_dir / "launch"

    def prepare(self) -> None:
        """Create folders and copy the payloads (every tool used is this Python, fio and nccl-tests, checked per test)."""
        super().prepare()
        self.launch_dir.mkdir(parents=True, exist_ok=True)

    def command(self, test: PlannedTest) -> tuple[list[str], list[str], bool]:
        """``(argv, notes, stdout_is_raw)`` for ``test``; ``stdout_is_raw`` when the payload prints its document."""
        py = [self.python]
        raw = str(self.raw_path(test))
        suite = get_suite(test.kind)
        if isinstance(suite, RanksSuite):
            binary = None
            if test.device == "cuda":
                binary = suite.local_binary(test, self.nccl_tests_dirs)
            if binary is not None:
                argv = py + [str(self.payloads / suite.binary_payload), *suite.binary_payload_args(test),
                             "--gpus", str(test.ranks_per_node), "--output", raw]
                for d in self.nccl_tests_dirs:
                    argv += ["--nccl-tests-dir", d]
                return argv, [f"nccl-tests binary {binary}"], False
            note = ("torch.distributed benchmark on "
                    + (f"{test.ranks_per_node} GPU(s) (NCCL): nccl-tests not installed" if test.device == "cuda"
                       else f"{test.ranks_per_node} CPU processes (gloo)"))
            argv = py + [str(self.payloads / suite.payload), "--spawn", str(test.ranks_per_node),
                         *suite.payload_args(test), "--output", raw]
            return argv, [note], False
        return py + [str(self.payloads / suite.payload), *suite.payload_args(test), "--output", raw], [], False

    def run(self, test: PlannedTest) -> LaunchResult:
        """Run ``test`` here; writes ``launch/<id>.sh``, ``logs/<id>.log`` and ``raw/<id>.*``."""
        argv, notes, _ = self.command(test)
        raw, log = self.fresh_outputs(test)
        write_launch_script(self.launch_dir / f"{test.id}.sh", self.name, test, f"exec {shell_join(argv)}\n")
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, test.ranks_per_node))))
        if get_suite(test.kind).placement == Placement.RANKS and test.device == "cpu":
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        rc, dt = run_logged(argv, log, env=env, timeout_s=self.timeout_for(test))
        return LaunchResult(raw=raw, returncode=rc, log=log, command=shell_join(argv), duration_s=dt, notes=notes)
