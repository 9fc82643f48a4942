"""The Slurm launcher: one sbatch script per test, run with ``srun``, submitted with ``sbatch --wait``.

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

sbatch/srun options: https://slurm.schedmd.com/sbatch.html, https://slurm.schedmd.com/srun.html.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from blueprints import LoadedBlueprint
from blueprints.errors import ToolMissingError
from blueprints.models import SlurmOrchestrator
from blueprints.role_templates import encoder

from ..suites import Placement, RanksSuite, get_suite
from ..untrusted import write_atomic
from .common import (
    MASTER_PORT,
    Launcher,
    LaunchResult,
    PlannedTest,
    run_logged,
    shell_join,
)


def _time_limit(seconds: float) -> str:
    s = int(max(60, seconds))
    return f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def sbatch_script(loaded: LoadedBlueprint, test: PlannedTest, *, time_limit_s: float = 3600) -> str:
    """The sbatch script text for ``test`` (bash; ``#SBATCH`` options, then ``srun``)."""
    bp = loaded.blueprint
    orch = bp.orchestrator if isinstance(bp.orchestrator, SlurmOrchestrator) else None
    gpus = test.device == "cuda"
    name = f"cf-{bp.name}-{test.id}"[:64]
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
        lines.append(f"#SBATCH --partition={word(orch.partition)}")
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
                f'if BIN="$("$PY" "$CF_DIR/payloads/{suite.binary_payload}" --probe --collective {coll} 2>/dev/null)"; then',
                f'  srun --mpi=pmix "$BIN" {shell_join(suite.binary_flags(test, 1))} | tee {raw}',
                "else",
                f"  {torch_cmd}",
                "fi",
            ]
        else:
            lines.append(torch_cmd)
    elif suite.placement == Placement.EVERY_NODE:
        # one task per node; every node prints one JSON line (the payload needs the standard library only)
        args = shell_join(suite.payload_args(test))
        args = f" {args}" if args else ""
        lines.append(f'srun --nodes={test.nodes} --ntasks-per-node=1 "$PY" {payload}{args} > {raw}')
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


class SlurmLauncher(Launcher):
    """Submits each test with ``sbatch --wait`` from ``DIR`` (which must be on a shared file system)."""

    name = "slurm"

    def __init__(self, out_dir: Path, loaded: LoadedBlueprint, *, timeout_s: float | None = None,
                 python: str = "python3"):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.loaded = loaded
        self.python = python
        self.script_dir = self.out_dir / "slurm"

    def prepare(self) -> None:
        """Folders, payload copies; raises ToolMissingError when ``sbatch`` is not on PATH."""
        if shutil.which("sbatch") is None:
            raise ToolMissingError("sbatch not found: run `clusterforge validate --launcher slurm` on a Slurm "
                                   "login node (or use `clusterforge render` and submit the scripts there)")
        super().prepare()
        self.script_dir.mkdir(parents=True, exist_ok=True)

    def run(self, test: PlannedTest) -> LaunchResult:
        """Write the script, ``sbatch --parsable --wait`` it and wait; raw output lands in ``raw/``."""
        script = write_scripts(self.loaded, [test], self.script_dir,
                               time_limit_s=self.timeout_s or 3600)[0]
        raw, log = self.fresh_outputs(test)
        env = dict(os.environ)
        env["CLUSTERFORGE_VALIDATE_DIR"] = str(self.out_dir.resolve())
        env["CLUSTERFORGE_PYTHON"] = self.python
        argv = ["sbatch", "--parsable", "--wait", f"--chdir={self.out_dir.resolve()}", str(script.resolve())]
        rc, dt = run_logged(argv, log, env=env, timeout_s=None if self.timeout_s is None else self.timeout_s + 600)
        return LaunchResult(raw=raw, returncode=rc, log=log, command=shell_join(argv), duration_s=dt,
                            notes=["job log: DIR/logs/<job-name>-<job-id>.out"])
