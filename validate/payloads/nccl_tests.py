#!/usr/bin/env python3
"""Run an NVIDIA nccl-tests binary (``all_reduce_perf`` ...) on this node or, through mpirun, on many.

nccl-tests (https://github.com/NVIDIA/nccl-tests) is the reference collective benchmark; when its
binaries are installed, validation runs them instead of the torch benchmark (``collectives.py``).
This wrapper finds the binary, builds the command line from the blueprint's sizes and flags
(``-b -e -f -n -w -c -g``, optional ``-J`` JSON), runs it and copies its output, unchanged, to
``--output`` as well as stdout.

* One node, no MPI: one process drives ``--gpus`` GPUs (``-g G``), e.g.
  ``python3 nccl_tests.py --collective all_reduce --gpus 8 -b 8 -e 8G``.
* Several nodes: ``--hosts node1:8,node2:8`` runs Open MPI's ``mpirun -np 16 -H node1:8,node2:8``
  with one rank per GPU (``-g 1``), exporting ``NCCL_*``, ``FI_*``, ``LD_LIBRARY_PATH`` and ``PATH``;
  the binaries must be built with ``MPI=1`` (a non-MPI build prints one "Rank 0" block per process,
  which the judge reports as invalid).
* ``--probe``: print the binary's path and exit 0, or exit 127 when it is not installed (scripts
  use this to fall back to ``collectives.py``).

Search order for ``<collective>_perf``: ``--nccl-tests-dir``, ``$NCCL_TESTS_DIR``, ``PATH``, then
``/opt/nccl-tests/build``, ``/usr/local/nccl-tests/build`` and ``~/nccl-tests/build``.
Exit status: the binary's (non-zero when nccl-tests finds wrong results), 127 when not found.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import subprocess
import sys

BINARIES = {
    "all_reduce": "all_reduce_perf",
    "all_gather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "alltoall": "alltoall_perf",
    "sendrecv": "sendrecv_perf",
    "broadcast": "broadcast_perf",
    "reduce": "reduce_perf",
}
"""Collective name -> nccl-tests binary name."""

DEFAULT_DIRS = ("/opt/nccl-tests/build", "/usr/local/nccl-tests/build", "~/nccl-tests/build")

DEFAULT_MPI_ARGS = "--bind-to none --mca pml ^cm,ucx --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0"
"""Open MPI options: MPI only bootstraps nccl-tests (NCCL moves the data), so plain TCP suffices."""

EXPORT_PREFIXES = ("NCCL_", "FI_", "OFI_", "UCX_", "CUDA_")


def _die_with_parent() -> None:
    """With ``CLUSTERFORGE_DIE_WITH_PARENT=1`` (set by clusterforge's launchers), get SIGTERM when the
    launching process dies, so a killed validation run leaves no benchmark running (Linux only)."""
    if os.environ.get("CLUSTERFORGE_DIE_WITH_PARENT") != "1" or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before prctl
        sys.exit(143)


def find_binary(collective: str, dirs: list[str] | None = None, environ: dict[str, str] | None = None) -> str | None:
    """Absolute path of ``<collective>_perf`` or ``None``. Raises ``KeyError`` for an unknown collective."""
    env = os.environ if environ is None else environ
    name = BINARIES[collective]
    search = list(dirs or [])
    if env.get("NCCL_TESTS_DIR"):
        search.append(env["NCCL_TESTS_DIR"])
    for d in search:
        p = os.path.join(os.path.expanduser(d), name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return os.path.abspath(p)
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        return found
    for d in DEFAULT_DIRS:
        p = os.path.join(os.path.expanduser(d), name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``"node1:8,node2:8"`` -> ``[("node1", 8), ("node2", 8)]`` (slots default to 1). Raises ``ValueError``."""
    hosts = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, slots = part.partition(":")
        if not name or (slots and not slots.isdigit()):
            raise ValueError(f"bad host entry {part!r}: write NAME:SLOTS")
        hosts.append((name, int(slots or 1)))
    if not hosts:
        raise ValueError("empty host list")
    return hosts


def nccl_args(*, min_bytes: str, max_bytes: str, step_factor: int, iters: int, warmup_iters: int, check: bool,
              gpus_per_process: int, json_file: str | None = None) -> list[str]:
    """The nccl-tests flags: ``-b -e -f -n -w -c -g`` (and ``-J`` for JSON, nccl-tests >= 2.17.3)."""
    a = ["-b", str(min_bytes), "-e", str(max_bytes), "-f", str(step_factor), "-n", str(iters),
         "-w", str(warmup_iters), "-c", "1" if check else "0", "-g", str(gpus_per_process)]
    if json_file:
        a += ["-J", json_file]
    return a


def build_command(binary: str, flags: list[str], *, hosts: list[tuple[str, int]] | None = None,
                  mpirun: str = "mpirun", mpi_args: str = DEFAULT_MPI_ARGS,
                  environ: dict[str, str] | None = None) -> list[str]:
    """The argv: the binary alone, or ``mpirun -np N -H host:slots,... -x VAR ... binary flags``."""
    if not hosts:
        return [binary, *flags]
    env = os.environ if environ is None else environ
    np_ = sum(s for _, s in hosts)
    cmd = [mpirun, "-np", str(np_), "-H", ",".join(f"{h}:{s}" for h, s in hosts), *shlex.split(mpi_args)]
    exports = sorted(k for k in env if k.startswith(EXPORT_PREFIXES)) + ["LD_LIBRARY_PATH", "PATH"]
    for k in exports:
        cmd += ["-x", k]
    return cmd + [binary, *flags]


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="nccl_tests.py", description="Run an nccl-tests binary, locally or via mpirun.")
    p.add_argument("--collective", required=True, choices=sorted(BINARIES))
    p.add_argument("-b", "--min-bytes", default="8")
    p.add_argument("-e", "--max-bytes", default="8G")
    p.add_argument("-f", "--step-factor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup-iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("--gpus", type=int, default=1, help="GPUs driven by the single process when no --hosts")
    p.add_argument("--hosts", help="NODE:SLOTS,... for mpirun (one rank per GPU)")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--mpi-args", default=DEFAULT_MPI_ARGS)
    p.add_argument("--nccl-tests-dir", action="append", default=[], help="directory holding the *_perf binaries")
    p.add_argument("--json", help="also write nccl-tests JSON here (-J; nccl-tests >= 2.17.3)")
    p.add_argument("--output", help="copy the output to this file")
    p.add_argument("--probe", action="store_true", help="print the binary path and exit (127 when missing)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the binary's exit status, or 127 when it is missing."""
    args = build_parser().parse_args(argv)
    _die_with_parent()
    binary = find_binary(args.collective, args.nccl_tests_dir)
    if binary is None:
        where = ", ".join(args.nccl_tests_dir + ["$NCCL_TESTS_DIR", "PATH", *DEFAULT_DIRS])
        print(f"nccl_tests: {BINARIES[args.collective]} not found (searched {where}); build "
              "https://github.com/NVIDIA/nccl-tests with `make MPI=1` or pass --nccl-tests-dir", file=sys.stderr)
        return 127
    if args.probe:
        print(binary)
        return 0
    try:
        hosts = parse_hosts(args.hosts) if args.hosts else None
    except ValueError as e:
        print(f"nccl_tests: --hosts: {e}", file=sys.stderr)
        return 2
    if hosts and shutil.which(args.mpirun) is None:
        print(f"nccl_tests: {args.mpirun} not found: install Open MPI (the EFA installer and DOCA-OFED ship one) "
              "or run one node at a time", file=sys.stderr)
        return 127
    flags = nccl_args(min_bytes=args.min_bytes, max_bytes=args.max_bytes, step_factor=args.step_factor,
                      iters=args.iters, warmup_iters=args.warmup_iters, check=bool(args.check),
                      gpus_per_process=1 if hosts else args.gpus, json_file=args.json)
    cmd = build_command(binary, flags, hosts=hosts, mpirun=args.mpirun, mpi_args=args.mpi_args)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(args.output, "w", encoding="utf-8")) if args.output else None
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if out is not None:
                out.write(line)
                out.flush()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
