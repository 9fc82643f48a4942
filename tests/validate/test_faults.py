"""`clusterforge validate` and `report` under faults injected for real (issue 34): two runs on one folder,
damaged and cut-off results lines, a kill during a write, a full or read-only folder, a stopped payload,
fio failing for a reason other than a missing fio, and a moved results folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from validate.rundir import LOCK_NAME, QUARANTINE, RunLock
from validate.runner import read_results_lines

from .test_runner import CLI, REPO, cli, small_blueprint

Start = Callable[..., "subprocess.Popen[str]"]
"""The ``start`` fixture: ``start(*args, env=None)`` runs ``clusterforge ARGS`` in the background."""


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Start ``clusterforge ARGS`` in its own session (``start(*args, env=...)``). On teardown, passed or failed,
    every process this test left is killed by its PID: each started run's process group, then every process whose
    command line names the test's folder (payloads run in process groups of their own), stopped ones included."""
    procs: list[subprocess.Popen[str]] = []

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        e = dict(os.environ, COLUMNS="200")
        e.update(env or {})
        p = subprocess.Popen([*CLI, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=e, start_new_session=True)
        procs.append(p)
        return p

    yield run
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for pid in _procs_under(str(tmp_path)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.communicate(timeout=30)


def _wait_for(cond, proc: subprocess.Popen[str] | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the run ended first: {proc.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.05)


def _manifest(out: Path) -> dict:
    try:
        return json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def _running(out: Path, test: str) -> bool:
    return _manifest(out).get("tests", {}).get(test, {}).get("status") == "running"


# ---- 1. one run per folder ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_run_on_a_busy_folder_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(
        tmp_path: Path, start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl, amp]", collectives="[all_reduce]")
    out = tmp_path / "run"
    first = start("validate", str(bp), "-o", str(out))
    _wait_for(lambda: _running(out, "amp"), first)
    # the holder is stopped (SIGSTOP, its whole group) while the others try, so whatever the folder gains meanwhile
    # could only come from them (on a loaded machine the holder's amp test otherwise finishes during the attempts)
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        raw_before = sorted(p.name for p in (out / "raw").iterdir())
        # a --resume and a --force while it runs: both refused in one line naming the holder; nothing touched
        for extra in ("--resume", "--force"):
            p = cli("validate", str(bp), "-o", str(out), extra)
            assert p.returncode == 2, p.stdout + p.stderr
            assert f"pid {first.pid} on " in p.stderr and "in use by `clusterforge validate`" in p.stderr
            assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
            assert sorted(q.name for q in (out / "raw").iterdir()) == raw_before
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    _, err = first.communicate(timeout=240)
    assert first.returncode == 0, err
    lines = read_results_lines(out / "results.jsonl")
    assert sorted(d["test_id"] for d in lines) == ["amp", "nccl-all_reduce"]  # each once, none lost
    assert {d["verdict"] for d in lines} <= {"pass", "warn"}
    # a run killed with SIGKILL leaves its lock file (naming a dead pid): the next run takes it over
    forced = start("validate", str(bp), "-o", str(out), "--force")
    _wait_for(lambda: _running(out, "amp"), forced)
    assert f'"pid": {forced.pid}' in (out / LOCK_NAME).read_text()
    os.killpg(forced.pid, signal.SIGKILL)
    forced.wait()
    assert f'"pid": {forced.pid}' in (out / LOCK_NAME).read_text()
    p = cli("validate", str(bp), "-o", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(d["test_id"] for d in read_results_lines(out / "results.jsonl")) == ["amp", "nccl-all_reduce"]
    assert _manifest(out)["status"] == "complete"


def test_the_lock_file_is_never_followed_and_is_not_inherited(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).symlink_to(target)
    with pytest.raises(Exception, match="symbolic link"):
        RunLock(tmp_path / "run").acquire()
    assert target.read_text() == "precious\n"
    (tmp_path / "run" / LOCK_NAME).unlink()
    with RunLock(tmp_path / "run") as lock:
        assert lock.fd is not None and not os.get_inheritable(lock.fd)
        # another process cannot take it
        code = ("import sys; from validate.rundir import RunLock, FolderBusy\n"
                f"try:\n    RunLock(__import__('pathlib').Path({str(tmp_path / 'run')!r})).acquire()\n"
                "except FolderBusy as e:\n    print(e); sys.exit(7)\n")
        p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
        assert p.returncode == 7 and f"pid {os.getpid()}" in p.stdout
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


# ---- 2. damaged results lines ---------------------------------------------------------------------


@pytest.mark.slow
def test_damaged_lines_are_named_quarantined_and_only_their_tests_rerun(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce, sendrecv, broadcast]")
    out = tmp_path / "run"
    assert cli("validate", str(bp), "-o", str(out)).returncode == 0
    results = out / "results.jsonl"
    good = results.read_text().splitlines()
    assert [json.loads(x)["test_id"] for x in good] == ["nccl-all_reduce", "nccl-sendrecv", "nccl-broadcast"]
    raws = {t: (out / "raw" / f"{t}.txt").stat().st_mtime_ns for t in ("nccl-all_reduce", "nccl-sendrecv",
                                                                       "nccl-broadcast")}
    # a line in the middle damaged (a disk error, a hand edit) and the last one cut off (a killed writer)
    results.write_text(good[0] + "\n" + good[1][:300] + "#garbage\n" + good[2][: len(good[2]) // 2])
    # report: skips and names both, writes the report of the intact result, exit 0
    rep = cli("report", str(out))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "results.jsonl:2: damaged line (test nccl-sendrecv)" in rep.stdout + rep.stderr
    assert "results.jsonl:3: cut-off last line (test nccl-broadcast)" in rep.stdout + rep.stderr
    doc = json.loads((out / "report.json").read_text())
    assert [r["label"].split(":")[0] for r in doc["results"]] == ["nccl-all_reduce"]
    assert [d["line"] for d in doc["damaged_lines"]] == [2, 3]
    assert "results.jsonl:2" in (out / "report.md").read_text()
    # resume: the damaged lines move to the quarantine file, only their tests run again
    p = cli("validate", str(bp), "-o", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nccl-sendrecv: run again (results.jsonl line(s) 2" in p.stderr
    assert "nccl-broadcast: run again (results.jsonl line(s) 3" in p.stderr
    q = [json.loads(x) for x in (out / QUARANTINE).read_text().splitlines()]
    assert [(d["line"], d["test_id"], d["cut_off"]) for d in q] == [(2, "nccl-sendrecv", False),
                                                                     (3, "nccl-broadcast", True)]
    assert q[0]["text"] == good[1][:300] + "#garbage"  # nothing lost: the damaged text is kept
    lines = read_results_lines(results)
    assert sorted(d["test_id"] for d in lines) == ["nccl-all_reduce", "nccl-broadcast", "nccl-sendrecv"]
    assert lines[0] == json.loads(good[0])  # the intact result kept as it was, not rerun
    assert (out / "raw" / "nccl-all_reduce.txt").stat().st_mtime_ns == raws["nccl-all_reduce"]
    assert (out / "raw" / "nccl-sendrecv.txt").stat().st_mtime_ns != raws["nccl-sendrecv"]
    man = _manifest(out)
    assert man["status"] == "complete" and any("moved to results.quarantine.jsonl" in n for n in man["notes"])
    assert len(json.loads((out / "report.json").read_text())["results"]) == 3


def test_a_damaged_line_without_a_test_id_reruns_its_neighbours(tmp_path: Path) -> None:
    from validate.rundir import read_results

    lines = [json.dumps({"test_id": t, "kind": "nccl", "verdict": "pass", "source": "x"}) for t in "abc"]
    p = tmp_path / "results.jsonl"
    p.write_text(lines[0] + "\n" + "\x00\x01 binary junk\n" + lines[1] + "\n" + '[1, 2]\n' + lines[2] + "\n"
                 + "[" * 100000 + "\n")
    ok, damaged = read_results(p)
    assert [d["test_id"] for d in ok] == ["a", "b", "c"]
    assert [(d.line, d.covers(), d.last) for d in damaged] == [(2, {"a", "b"}, False), (4, {"b", "c"}, False),
                                                               (6, {"c"}, False)]
    assert "nested deeper" in damaged[2].reason


# ---- 3. atomic writes, no symbolic link followed --------------------------------------------------


@pytest.mark.slow
def test_a_kill_during_a_write_leaves_the_old_file_and_no_link_is_followed(tmp_path: Path) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl, amp]", collectives="[all_reduce]")
    out = tmp_path / "run"
    assert cli("validate", str(bp), "-o", str(out)).returncode == 0
    html = (out / "report.html").read_bytes()
    # a writer killed in the middle of a big write_atomic of report.html: the old page stays whole
    code = ("import sys; from pathlib import Path; from validate.untrusted import write_atomic\n"
            f"write_atomic(Path({str(out / 'report.html')!r}), b'x' * (1 << 30), root=Path({str(out)!r}))\n")
    writer = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    _wait_for(lambda: any(p.name.startswith(".report.html.") and p.stat().st_size > 0 for p in out.iterdir()), writer)
    writer.kill()
    writer.wait()
    assert (out / "report.html").read_bytes() == html
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # what a SIGKILL leaves
    # files outside the folder that links inside it point to are never written
    outside = {name: tmp_path / f"outside-{name}" for name in ("run.json", "amp.sh", "amp.log", "amp_bench.py")}
    for f in outside.values():
        f.write_text("precious\n")
    for name, place in (("run.json", out / "run.json"), ("amp.sh", out / "launch" / "amp.sh"),
                        ("amp.log", out / "logs" / "amp.log"), ("amp_bench.py", out / "payloads" / "amp_bench.py")):
        place.unlink()
        place.symlink_to(outside[name])
    p = cli("validate", str(bp), "-o", str(out), "--force", "--suites", "amp")
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(f.read_text() == "precious\n" for f in outside.values())
    assert not any(q.is_symlink() for q in (out / "run.json", out / "launch" / "amp.sh", out / "logs" / "amp.log",
                                            out / "payloads" / "amp_bench.py"))
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert not [q.name for q in out.iterdir() if q.name.endswith(".tmp")]  # the killed writer's temp file removed
    assert (out / "report.html").read_bytes() != html and b"</html>" in (out / "report.html").read_bytes()


@pytest.mark.slow
def test_run_json_parses_whenever_the_run_is_killed(tmp_path: Path, start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce, sendrecv]")
    out = tmp_path / "run"
    for delay in (0.5, 2.0, 4.0, 6.0):
        proc = start("validate", str(bp), "-o", str(out), "--resume" if (out / "run.json").exists() else "--force")
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if (out / "run.json").exists():
            assert json.loads((out / "run.json").read_text())["kind"] == "clusterforge-validation-run"
        for name in ("report.html", "report.json", "report.md", "junit.xml"):
            if (out / name).exists():
                assert (out / name).read_text().rstrip().endswith(("</html>", "}", "</testsuites>")) or \
                    name == "report.md"
    p = cli("validate", str(bp), "-o", str(out), "--resume" if (out / "run.json").exists() else "--force")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(d["test_id"] for d in read_results_lines(out / "results.jsonl")) == ["nccl-all_reduce",
                                                                                       "nccl-sendrecv"]
    assert not [q.name for q in out.iterdir() if q.name.endswith(".tmp")]


# ---- 4. a moved or copied results folder ----------------------------------------------------------


@pytest.mark.slow
def test_a_copied_results_folder_links_its_own_raw_files(tmp_path: Path) -> None:
    import shutil

    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce]")
    out = tmp_path / "run"
    assert cli("validate", str(bp), "-o", str(out)).returncode == 0
    copy = tmp_path / "archive" / "copy"
    shutil.copytree(out, copy)
    (copy / "raw" / "nccl-all_reduce.txt").write_text((copy / "raw" / "nccl-all_reduce.txt").read_text() + "# copy\n")
    p = cli("report", str(copy))
    assert p.returncode == 0, p.stdout + p.stderr
    md = (copy / "report.md").read_text()
    assert "- raw output: [nccl-all\\_reduce.txt](./raw/nccl-all_reduce.txt)" in md or \
        "(./raw/nccl-all_reduce.txt)" in md, md
    assert str(out) not in md.replace(str(copy), "")
    assert 'href="./raw/nccl-all_reduce.txt"' in (copy / "report.html").read_text()
    # moved: the original is gone, the moved folder still links its own files
    moved = tmp_path / "moved"
    out.rename(moved)
    assert cli("report", str(moved)).returncode == 0
    assert "(./raw/nccl-all_reduce.txt)" in (moved / "report.md").read_text()


# ---- 5. a full disk -------------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 16 MiB tmpfs (root can mount one here; skipped where mount is not allowed)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True,
                       check=False)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_names_the_path_and_resume_and_leaves_the_run_interrupted(tmp_path: Path, small_tmpfs: Path,
                                                                               start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl, amp]", collectives="[all_reduce, sendrecv]")
    out = small_tmpfs / "run"
    proc = start("validate", str(bp), "-o", str(out))
    _wait_for(lambda: bool(read_results_lines(out / "results.jsonl")), proc)
    filler = _fill(small_tmpfs)  # the disk fills while the next test runs
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("✗ cannot write " + str(out)) and "no space left on the device" in line, err
    assert f"clusterforge validate {bp} -o {out} --resume" in line and "Traceback" not in err
    man = json.loads((out / "run.json").read_text())
    assert man["status"] == "interrupted"
    assert "running" not in {t["status"] for t in man["tests"].values()}
    assert not [q for q in out.rglob("*.tmp")]
    kept = read_results_lines(out / "results.jsonl")
    assert kept and kept[0]["test_id"] == "nccl-all_reduce" and {d["verdict"] for d in kept} <= {"pass", "warn"}
    # room again: --resume completes the run; nothing lost, nothing blamed on the cluster
    filler.unlink()
    p = cli("validate", str(bp), "-o", str(out), "--resume")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert sorted(d["test_id"] for d in lines) == ["amp", "nccl-all_reduce", "nccl-sendrecv"]
    assert {d["verdict"] for d in lines} <= {"pass", "warn"}
    assert json.loads((out / "run.json").read_text())["status"] == "complete"


# ---- 6. bounded waits and the right blame ---------------------------------------------------------


def _procs_under(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (the run's payload folder), this one excepted."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            pids.append(int(d.name))
    return pids


@pytest.mark.slow
def test_a_stopped_payload_is_killed_with_its_whole_group_at_the_timeout(tmp_path: Path, start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce]")
    out = tmp_path / "run"
    proc = start("validate", str(bp), "-o", str(out), "--timeout", "10")
    _wait_for(lambda: _running(out, "nccl-all_reduce") and bool(_procs_under(str(out / "payloads"))), proc)
    time.sleep(1.0)  # its ranks start
    pgid = os.getpgid(_procs_under(str(out / "payloads"))[0])
    members = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _pgid(int(d.name)) == pgid]
    ranks = [m for m in members if m != pgid]
    assert pgid in members and ranks, members  # the payload leads its group, its ranks are in it
    # the ranks stopped, the payload itself running: SIGTERM ends the payload, and a timeout that signalled only
    # the process it started would leave the stopped ranks behind for ever
    for m in ranks:
        os.kill(m, signal.SIGSTOP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    (d,) = read_results_lines(out / "results.jsonl")
    assert d["verdict"] == "fail" and any("stopped after the --timeout of 10 s" in x for x in d["reasons"])
    assert [p for p in members if _pgid(p) == pgid] == []  # none survives, the stopped ranks included


def _pgid(pid: int) -> int | None:
    """The process group of a live process (``None`` when gone or a zombie, which only waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return None if state in ("Z", "X") else os.getpgid(pid)
    except (OSError, IndexError):
        return None


def test_every_planned_test_has_a_default_timeout_from_its_size(tmp_path: Path) -> None:
    from blueprints import load_blueprint
    from validate.launchers.local import LocalLauncher
    from validate.runner import plan_tests

    loaded = load_blueprint(REPO / "blueprints" / "examples" / "local-workstation.yaml")
    tests, _ = plan_tests(loaded, launcher="local", local_gpus=0)
    launcher = LocalLauncher(tmp_path)
    bounds = {t.id: launcher.timeout_for(t) for t in tests}
    assert all(600 <= b < 4 * 3600 for b in bounds.values()), bounds
    fio = next(t for t in tests if t.kind == "fio")
    assert bounds[fio.id] >= 600 + 6 * fio.params.runtime_s
    assert LocalLauncher(tmp_path, timeout_s=5).timeout_for(fio) == 5


@pytest.mark.slow
def test_fio_killed_by_a_signal_is_blamed_on_the_signal_not_on_a_missing_fio(tmp_path: Path, start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[fio]")
    out = tmp_path / "run"
    proc = start("validate", str(bp), "-o", str(out))

    def fio_pids() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if d.name.isdigit() and argv and argv[0].endswith(b"fio") and b".clusterforge-fio-" in b" ".join(argv):
                pids.append(int(d.name))
        return pids

    def parent(pid: int) -> int:
        try:
            return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    _wait_for(lambda: bool(fio_pids()), proc)
    pids = fio_pids()
    # the fio the payload started (fio forks its job processes with the same command line: killing one of those
    # only ends that job, and fio may still report success)
    for pid in [p for p in pids if parent(p) not in pids] or pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err
    lines = read_results_lines(out / "results.jsonl")
    reasons = " ".join(x for d in lines for x in d["reasons"])
    assert "killed by SIGKILL" in reasons and "not installed" not in reasons, reasons


def test_fio_on_a_full_target_is_blamed_on_the_full_target(tmp_path: Path, small_tmpfs: Path) -> None:
    from .test_payloads import PAYLOADS

    raw = tmp_path / "fio.json"
    _fill(small_tmpfs)  # the target is full before fio lays out its files
    p = subprocess.run([sys.executable, str(PAYLOADS / "fio_bench.py"), "--target", str(small_tmpfs), "--size", "64M",
                        "--runtime", "2", "--numjobs", "1", "--iodepth", "1", "--output", str(raw)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode != 0, p.stderr
    j = cli("judge", str(raw), "--json", "--kind", "fio")
    assert j.stdout.strip(), j.stderr
    doc = json.loads(j.stdout)
    reasons = " ".join(x for r in doc["results"] for x in r["reasons"])
    assert "target file system is full" in reasons and "not installed" not in reasons, reasons


@pytest.mark.slow
def test_sigterm_exits_143(tmp_path: Path, start: Start) -> None:
    bp = small_blueprint(tmp_path, suites="[nccl]", collectives="[all_reduce]")
    out = tmp_path / "run"
    proc = start("validate", str(bp), "-o", str(out))
    _wait_for(lambda: _running(out, "nccl-all_reduce"), proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "--resume" in err
    assert _manifest(out)["status"] == "interrupted"
