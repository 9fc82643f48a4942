#!/usr/bin/env python3
"""fio storage benchmark for one directory: NVMe scratch, Lustre, NFS or a plain directory.

Runs three fio jobs one after another (``stonewall``), each its own reporting group
(``group_reporting`` sums the ``--numjobs`` clones):

* ``seq-write``: sequential write, 1 MiB blocks;
* ``seq-read``:  sequential read, 1 MiB blocks (reads the files ``seq-write`` wrote);
* ``rand-read``: random read, 4 KiB blocks;

with ``--direct=1`` (O_DIRECT, bypasses the page cache) and the libaio engine at ``--iodepth``.
When the filesystem refuses O_DIRECT (tmpfs, some FUSE mounts) the run falls back to buffered
I/O and records the fallback in the output (numbers then include the page cache). Lustre and
NFS targets add ``--fallocate=none`` (Lustre clients before 2.14 have no fallocate).

Sizing: ``--size`` per job, capped so that all jobs together use at most half of the target's
free space (the cap is recorded). Work files live in a private ``.clusterforge-fio-*`` directory
under the target and are removed afterwards, also when fio fails or the run is interrupted
(SIGTERM/SIGINT/SIGHUP).

Output: fio's own ``--output-format=json`` document with one extra top-level key,
``"clusterforge"``: ``{"version": 1, "target", "kind", "direct": bool, "size_per_job_bytes",
"numjobs", "iodepth", "runtime_s", "profiles": [...], "notes": [str], "error": str|null}``. With
``--output FILE`` it goes to FILE, else to stdout. Exit status: fio's, 127 when fio is missing,
2 for a bad target.

fio options and its JSON output format: https://fio.readthedocs.io/en/latest/fio_doc.html . Example::

    python3 fio_bench.py --target /scratch --kind nvme --size 4G --runtime 30 --numjobs 4 --iodepth 32 --output fio.json
"""

from __future__ import annotations

import argparse
import errno
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

VERSION = 1

PROFILES: dict[str, dict[str, str]] = {
    "seq-write": {"rw": "write", "bs": "1M"},
    "seq-read": {"rw": "read", "bs": "1M"},
    "rand-read": {"rw": "randread", "bs": "4k"},
}
"""Job name -> fio options; run in this order (the reads use the files the write laid out)."""

KINDS = ("nvme", "lustre", "nfs", "dir")
MIB = 1024 * 1024
SIZE_SUFFIXES = {"": 1, "K": 1024, "M": MIB, "G": 1024**3, "T": 1024**4}


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


def parse_size(text: str) -> int:
    """``"64M"``, ``"4G"``, ``"1048576"`` -> bytes (binary suffixes, like fio). Raises ``ValueError``."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, suf = (t[:-1], t[-1]) if t and t[-1] in "KMGT" else (t, "")
    if not num.isdigit():
        raise ValueError(f"not a size: {text!r} (write bytes or a number with K, M, G or T)")
    return int(num) * SIZE_SUFFIXES[suf]


def size_per_job(requested: int, free_bytes: int, numjobs: int) -> tuple[int, str | None]:
    """Bytes per job: ``requested``, capped so all jobs use at most half of ``free_bytes``, in whole MiB.

    Returns ``(size, note)``; ``note`` says when the cap applied. Raises ``ValueError`` when less
    than 1 MiB per job fits.
    """
    cap = (free_bytes // 2) // max(numjobs, 1)
    size = min(requested, cap)
    size -= size % MIB
    if size < MIB:
        raise ValueError(f"only {free_bytes / MIB:.0f} MiB free: fio needs at least {2 * numjobs} MiB "
                         f"({numjobs} job(s) x 1 MiB, at most half the free space)")
    note = None
    if size < requested:
        note = (f"file size capped to {size // MIB} MiB per job (asked {requested // MIB} MiB): "
                f"{numjobs} job(s) may use at most half of the {free_bytes / 1e9:.1f} GB free")
    return size, note


def supports_o_direct(directory: str) -> tuple[bool, str | None]:
    """Whether files in ``directory`` accept O_DIRECT writes; ``(False, reason)`` when they do not."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False, "this platform has no O_DIRECT"
    fd, path = tempfile.mkstemp(prefix=".odirect-probe-", dir=directory)
    os.close(fd)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT requires
    try:
        try:
            dfd = os.open(path, os.O_WRONLY | flag)
        except OSError as e:
            return False, f"open(O_DIRECT) failed: {os.strerror(e.errno or 0)}"
        try:
            os.write(dfd, buf)
        except OSError as e:
            return False, f"O_DIRECT write failed: {os.strerror(e.errno or errno.EINVAL)}"
        finally:
            os.close(dfd)
        return True, None
    finally:
        buf.close()
        os.unlink(path)


def fio_command(fio: str, workdir: str, output: str, *, size: int, runtime: int, numjobs: int, iodepth: int,
                direct: bool, kind: str, profiles: list[str]) -> list[str]:
    """The fio argv: global options first, then one ``--name`` section per profile with ``--stonewall``."""
    engine = "libaio" if sys.platform.startswith("linux") else "posixaio"
    cmd = [
        fio, "--output-format=json", f"--output={output}", "--eta=never",
        f"--directory={workdir}", "--filename_format=cf-fio.$jobnum.$filenum",
        f"--size={size}", f"--runtime={runtime}", "--time_based", f"--numjobs={numjobs}",
        f"--iodepth={iodepth}", f"--ioengine={engine}", f"--direct={1 if direct else 0}",
        "--group_reporting", "--randrepeat=0", "--norandommap", "--thread",
    ]
    if kind in ("lustre", "nfs"):
        cmd.append("--fallocate=none")
    for name in profiles:
        opts = PROFILES[name]
        cmd += [f"--name={name}", f"--rw={opts['rw']}", f"--bs={opts['bs']}", "--stonewall"]
    return cmd


def extract_json(text: str) -> dict[str, Any]:
    """fio's JSON document from ``text`` (fio may print warnings before the first ``{``)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON document in fio output")
    return json.loads(text[start:])


class _Interrupted(Exception):
    pass


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """Run the profiles on ``args.target``; returns ``(document, exit status)``. Never leaves work files."""
    meta: dict[str, Any] = {
        "version": VERSION, "target": args.target, "kind": args.kind, "direct": None,
        "size_per_job_bytes": None, "numjobs": args.numjobs, "iodepth": args.iodepth,
        "runtime_s": args.runtime, "profiles": args.profiles, "notes": [], "error": None, "missing_tool": None,
    }
    doc: dict[str, Any] = {"jobs": []}

    def failed(msg: str, rc: int) -> tuple[dict[str, Any], int]:
        meta["error"] = msg
        doc["clusterforge"] = meta
        return doc, rc

    fio = shutil.which(args.fio)
    if fio is None:
        # an absent tool is not a fault of the hardware: the judge makes this result `invalid`
        meta["missing_tool"] = "fio"
        msg = (f"fio is not installed on this node (no `{args.fio}` on PATH): install it with "
               "`apt-get install fio` (Debian, Ubuntu), `dnf install fio` (RHEL, Fedora) or `brew install fio` "
               "(macOS), or the validation_tools role")
        print(f"clusterforge: missing tool: {msg}", file=sys.stderr)  # the line the runner looks for
        return failed(msg, 127)
    target = os.path.abspath(args.target)
    if not os.path.isdir(target):
        return failed(f"target {target} does not exist or is not a directory: mount it or fix validation.fio.targets", 2)
    if not os.access(target, os.W_OK | os.X_OK):
        return failed(f"target {target} is not writable by uid {os.getuid()}: run as a user that can write there", 2)
    try:
        size, note = size_per_job(args.size, shutil.disk_usage(target).free, args.numjobs)
    except ValueError as e:
        return failed(f"{target}: {e}", 2)
    meta["size_per_job_bytes"] = size
    if note:
        meta["notes"].append(note)

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    workdir = None
    proc = None
    try:
        for s in old:
            signal.signal(s, _raise_interrupted)
        workdir = tempfile.mkdtemp(prefix=".clusterforge-fio-", dir=target)
        if args.direct == "auto":
            direct, why = supports_o_direct(workdir)
            if not direct:
                meta["notes"].append(f"{target} refuses O_DIRECT ({why}): ran buffered I/O (--direct=0); "
                                     "figures include the page cache")
        else:
            direct = args.direct == "1"
        meta["direct"] = direct
        out_json = os.path.join(workdir, "fio-output.json")
        cmd = fio_command(fio, workdir, out_json, size=size, runtime=args.runtime, numjobs=args.numjobs,
                          iodepth=args.iodepth, direct=direct, kind=args.kind, profiles=args.profiles)
        meta["command"] = " ".join(cmd)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stdout, stderr = proc.communicate()
        rc = proc.returncode
        proc = None
        meta["fio_returncode"] = rc  # negative: killed by that signal (the judge names it)
        meta["fio_stderr"] = "\n".join(stderr.strip().splitlines()[-10:])[-4000:]
        text = ""
        if os.path.exists(out_json):
            with open(out_json, encoding="utf-8", errors="replace") as f:
                text = f.read()
        try:
            doc = extract_json(text or stdout)
        except ValueError:
            err = (stderr or stdout).strip().splitlines()
            return failed(f"fio exited {rc} without JSON: {err[-1] if err else 'no output'}", rc or 1)
        if rc != 0:
            err = stderr.strip().splitlines()
            meta["error"] = f"fio exited {rc}: {err[-1] if err else 'see job errors'}"
        doc["clusterforge"] = meta
        return doc, rc
    except _Interrupted as e:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        return failed(f"interrupted by {e}", 130)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="fio_bench.py", description="fio sequential/random profiles on one directory.")
    p.add_argument("--target", required=True, help="directory to test (a mount point or a directory on it)")
    p.add_argument("--kind", choices=KINDS, default="dir", help="what the target is (default dir)")
    p.add_argument("--size", type=parse_size, default=parse_size("4G"), help="file size per job (default 4G)")
    p.add_argument("--runtime", type=int, default=30, help="seconds per profile (default 30)")
    p.add_argument("--numjobs", type=int, default=4, help="parallel jobs per profile (default 4)")
    p.add_argument("--iodepth", type=int, default=32, help="queue depth (default 32)")
    p.add_argument("--direct", choices=["auto", "1", "0"], default="auto",
                   help="O_DIRECT: auto (probe, fall back to buffered with a note), 1 or 0")
    p.add_argument("--profiles", default=",".join(PROFILES),
                   help=f"comma-separated, in order (default {','.join(PROFILES)})")
    p.add_argument("--fio", default="fio", help="fio executable (default: fio on PATH)")
    p.add_argument("--output", help="write the JSON here (default stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _die_with_parent()
    args.profiles = [x.strip() for x in args.profiles.split(",") if x.strip()]
    bad = [x for x in args.profiles if x not in PROFILES]
    if bad or not args.profiles:
        parser.error(f"unknown profile(s) {', '.join(bad)}; choose from {', '.join(PROFILES)}")
    if args.runtime < 1 or args.numjobs < 1 or args.iodepth < 1:
        parser.error("--runtime, --numjobs and --iodepth must be >= 1")
    doc, rc = run(args)
    text = json.dumps(doc, indent=2)
    if args.output:
        tmp = args.output + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)
    else:
        print(text)
    if doc["clusterforge"].get("error"):
        print(f"fio_bench: {doc['clusterforge']['error']}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
