"""Launchers: how validation payloads reach the nodes.

* :mod:`.local`: subprocesses on this machine (CPU or local GPUs);
* :mod:`.ssh`: the nodes of the rendered Ansible inventory over SSH (scp + torchrun or mpirun);
* :mod:`.slurm`: one sbatch script per test (srun), ``sbatch --wait``;
* :mod:`.kubernetes`: an MPIJob per collective, a Job per fio target and for AMP (kubectl).

Each launcher writes runnable artefacts under the run directory and the raw outputs to
``DIR/raw``. :func:`render_artifacts` writes the Slurm scripts and Kubernetes manifests of a
blueprint without running anything (used by ``clusterforge render``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blueprints import LoadedBlueprint
from blueprints.errors import UsageError

from .common import Launcher, LaunchResult, PlannedTest, stage_payloads

__all__ = ["LAUNCHERS", "LaunchResult", "Launcher", "PlannedTest", "make_launcher", "render_artifacts"]

LAUNCHERS = ("local", "ssh", "slurm", "kubernetes")


def make_launcher(name: str, loaded: LoadedBlueprint, out_dir: Path, **options: Any) -> Launcher:
    """The launcher called ``name`` for a run into ``out_dir``.

    ``options`` (each optional): ``timeout_s`` (seconds per test); ``python`` (local: interpreter;
    slurm: ``python3`` on the nodes); ``inventory`` and ``remote_python`` (ssh); ``image``
    (kubernetes); ``nccl_tests_dirs`` (local). Raises :class:`UsageError` for an unknown name.
    """
    timeout_s = options.get("timeout_s")
    if name == "local":
        from .local import LocalLauncher

        return LocalLauncher(out_dir, timeout_s=timeout_s, python=options.get("python"),
                             nccl_tests_dirs=options.get("nccl_tests_dirs"))
    if name == "ssh":
        from .ssh import SshLauncher

        return SshLauncher(out_dir, loaded, inventory=options.get("inventory"),
                           remote_python=options.get("remote_python") or "python3", timeout_s=timeout_s)
    if name == "slurm":
        from .slurm import SlurmLauncher

        return SlurmLauncher(out_dir, loaded, timeout_s=timeout_s, python=options.get("remote_python") or "python3")
    if name == "kubernetes":
        from .kubernetes import DEFAULT_IMAGE, KubernetesLauncher

        return KubernetesLauncher(out_dir, loaded, timeout_s=timeout_s, image=options.get("image") or DEFAULT_IMAGE)
    raise UsageError(f"unknown launcher {name!r}; choose from {', '.join(LAUNCHERS)}")


def render_artifacts(loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
    """Write the validation artefacts a user runs by hand; returns the files written.

    Every blueprint gets both sets, whatever orchestrator it declares (a DGX cluster run by
    Slurm may also host Kubernetes jobs, and the user picks the launcher at validate time):
    ``out_dir/slurm/<test-id>.sbatch`` plus ``out_dir/slurm/payloads/*.py`` (submit from
    ``out_dir/slurm``), and ``out_dir/kubernetes/*.yaml`` (the payload ConfigMap first, then one
    MPIJob or Job per test: ``kubectl apply -f out_dir/kubernetes``). The ssh and local launchers
    need no files.
    """
    from validate.runner import plan_tests

    from .kubernetes import write_manifests
    from .slurm import write_scripts

    written: list[Path] = []
    tests, _ = plan_tests(loaded, launcher="slurm")
    dest = Path(out_dir) / "slurm"
    written += write_scripts(loaded, tests, dest)
    written += stage_payloads(dest / "payloads")
    tests, _ = plan_tests(loaded, launcher="kubernetes")
    written += write_manifests(loaded, tests, Path(out_dir) / "kubernetes")
    return written
