"""`clusterforge validate --launcher slurm` against a real Slurm: the CLI as a user runs it on a login node
submits every test as a batch job, shows the jobs' progress, collects and judges their outputs; a controller
that does not answer, or a job that never starts, is `invalid` (exit 3) with Slurm's own words; a job that
outlives the test's timeout is cancelled and judged as timed out; SIGTERM cancels the job; results are kept as
they come and `--resume` goes on from there.

The cluster: until the shared multi-node fixture (``tests/roles/slurm_cluster.py``) lands, a private one-node
Slurm started here after the recipe of tests/roles/slurm_cluster.py (Debian 12's slurm-wlm 22.05): a
private munged, slurmctld and one slurmd (``slurmd -N``) on 127.0.0.1 with free ports, every file under the
test's temporary folder, ``SLURM_CONF`` pointing at it, everything stopped at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from validate.runner import read_results_lines

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "clusterforge.cli"]
PYTHON = str(Path(sys.executable))
"""The Python with torch the jobs run (the node and this machine share the file system)."""

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo", "squeue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MiniSlurm:
    """A one-node Slurm cluster under ``base`` (see the module docstring). ``env``: the environment a
    Slurm client needs (``SLURM_CONF``); ``node`` and ``partition``: the names in its slurm.conf."""

    base: Path
    node: str
    partition: str
    port: int
    pids: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm client against this cluster."""
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout, check=False)

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = open(self.base / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the daemon's stdout for its life
        self.pids[name] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=self.env,
                                           start_new_session=True)
        log.close()

    def start_controller(self) -> None:
        """slurmctld in the foreground of its own session (its state survives a restart)."""
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])

    def stop(self, name: str) -> None:
        """SIGTERM the daemon ``name`` and wait for it (SIGKILL after 15 s)."""
        p = self.pids.pop(name, None)
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def wait_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", timeout=20)
            if p.returncode == 0 and p.stdout.strip() == "idle":
                return
            time.sleep(0.25)
        logs = "\n".join(f.read_text(errors="replace")[-1500:] for f in sorted((self.base / "log").glob("*")))
        raise AssertionError(f"the Slurm node did not come up idle: {logs}")

    def jobs(self) -> list[str]:
        """Lines of ``squeue`` (every job still pending or running)."""
        p = self.run("squeue", "-h", "-o", "%i %T %r %j")
        assert p.returncode == 0, p.stderr
        return [ln for ln in p.stdout.splitlines() if ln.strip()]


def _write_conf(c: MiniSlurm, ctld_host: str) -> None:
    b = c.base
    text = f"""\
ClusterName=cflaunch
SlurmctldHost={ctld_host}(127.0.0.1)
SlurmctldPort={c.port}
SlurmdPort={c.port + 1 if c.port < 65535 else c.port - 1}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={b}/munge/sock
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=60
KillWait=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={c.node} NodeHostname={ctld_host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName={c.partition} Nodes={c.node} Default=YES MaxTime=UNLIMITED State=UP
"""
    c.conf.write_text(text)


def missing_slurm() -> str | None:
    """Why a one-node Slurm cannot start here (not root, a program missing), or None."""
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (CI runs as root)"
    dirs = (*os.environ.get("PATH", "").split(":"), "/usr/sbin")
    missing = [b for b in SLURM_BINARIES if not any((Path(d) / b).exists() for d in dirs)]
    return f"install the Slurm packages of tests/system-packages.txt: {', '.join(missing)} not found" if missing else None


@contextlib.contextmanager
def one_node_slurm(base: Path) -> Iterator[MiniSlurm]:
    """A one-node Slurm under the empty folder ``base``: private munged, slurmctld, one slurmd; stopped (jobs
    cancelled, slurmd first) when the block ends, however it ends."""
    for d in ("etc", "state", "log", "run", "munge", "spool"):
        (base / d).mkdir()
    # a node name of its own: no other test cluster on this machine shares its spool or state
    c = MiniSlurm(base=base, node=f"cfl{secrets.token_hex(3)}", partition="cpu", port=_free_port())
    _write_conf(c, socket.gethostname().split(".")[0])
    key = base / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    try:
        munged = subprocess.run(["munged", "--force", "-S", f"{base}/munge/sock", f"--key-file={key}",
                                 f"--pid-file={base}/run/munged.pid", f"--log-file={base}/log/munged.log",
                                 f"--seed-file={base}/munge/seed"], capture_output=True, text=True, check=False)
        assert munged.returncode == 0, munged.stderr
        c.start_controller()
        c._daemon("slurmd", ["slurmd", "-D", "-N", c.node, "-f", str(c.conf)])
        c.wait_idle()
        yield c
    finally:
        for job in c.jobs() if c.pids.get("slurmctld") else []:
            c.run("scancel", job.split()[0])
        c.stop("slurmd")
        c.stop("slurmctld")
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((base / "run" / "munged.pid").read_text().strip()), signal.SIGTERM)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniSlurm]:
    """The module's one-node Slurm (:func:`one_node_slurm`)."""
    why = missing_slurm()
    if why and os.geteuid() != 0:
        pytest.skip(why)
    assert why is None, why
    with one_node_slurm(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def blueprint(tmp_path: Path, *, suites: str = "[node, amp]", partition: str = "cpu") -> Path:
    """An on-prem blueprint whose compute group (partition `cpu`, as clusterforge renders it) is the test cluster's one node (a controller group beside it, as
    `check` asks of a Slurm blueprint); a tiny AMP model on the CPU."""
    text = f"""\
apiVersion: clusterforge/v1
kind: Blueprint
name: slurmlaunch
target:
  provider: onprem
  os: debian-12
  ssh: {{user: root, become: false}}
node_groups:
  - name: ctl
    role: controller
    hosts:
      - {{name: ctl, address: 192.0.2.10}}
  - name: cpu
    role: compute
    hosts:
      - {{name: vm, address: 127.0.0.1, connection: local}}
    hardware:
      cpu: {{sockets: 1, cores_per_socket: 2, threads_per_core: 1}}
      memory_gib: 16
network:
  fabric: ethernet
orchestrator:
  kind: slurm
  partition: {partition}
validation:
  suites: {suites}
  amp:
    model: {{layers: 2, hidden: 128, heads: 4, seq_len: 64, vocab: 512}}
    batch_size: 4
    steps: 6
    compile: false
"""
    p = tmp_path / "bp.yaml"
    p.write_text(text)
    return p


def cli(slurm: MiniSlurm, *args: str, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``clusterforge ARGS`` as a user on the login node runs it (SLURM_CONF set, stdout not a terminal)."""
    e = {**slurm.env, "COLUMNS": "200", "CLUSTERFORGE_SLURM_POLL": "1", **(env or {})}
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, env=e, timeout=timeout,
                          check=False)


def _validate_args(bp: Path, out: Path, *more: str) -> list[str]:
    return ["validate", str(bp), "--launcher", "slurm", "--remote-python", PYTHON, "-o", str(out), *more]


def _manifest(out: Path) -> dict:
    try:
        return json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_validate_through_slurm_runs_the_node_and_amp_suites_as_jobs_and_judges_them(
        slurm: MiniSlurm, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli(slurm, *_validate_args(blueprint(tmp_path), out))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = read_results_lines(out / "results.jsonl")
    assert [d["test_id"] for d in lines] == ["node", "amp"], lines
    assert {d["verdict"] for d in lines} <= {"pass", "warn"}, [(d["label"], d["verdict"], d["reasons"]) for d in lines]
    amp = next(d for d in lines if d["kind"] == "amp")
    assert amp["metrics"]["tokens_per_s"] > 0
    man = _manifest(out)
    assert man["status"] == "complete" and man["launcher"] == "slurm"
    for tid in ("node", "amp"):
        rec = man["tests"][tid]
        assert rec["returncode"] == 0 and rec["command"].startswith("sbatch --parsable")
        assert any(n.startswith("Slurm job ") and f"COMPLETED on {slurm.node}" in n for n in rec["launch_notes"])
        log = (out / rec["log"]).read_text()
        # the test's log holds the submission, the states the job went through and the job's own log
        assert "$ sbatch --parsable" in log and "# ---- job " in log, log
        assert f"COMPLETED on {slurm.node}" in log, log
        assert not (out / "slurm" / f"{tid}.job").exists()  # collected: no job left to adopt
    # the node documents came from the Slurm node, through srun (one task per node)
    assert len((out / "raw" / "node.json").read_text().splitlines()) == 1
    # progress while the jobs waited and ran: one line per change of state, naming the job and its node
    assert "amp: job " in p.stderr and f"running on {slurm.node}" in p.stderr, p.stderr
    assert f"RUNNING on {slurm.node}" in (out / "logs" / "amp.log").read_text()
    assert slurm.jobs() == []


@pytest.mark.slow
def test_a_stopped_controller_is_an_invalid_run_with_slurms_words(slurm: MiniSlurm, tmp_path: Path) -> None:
    slurm.stop("slurmctld")
    try:
        t0 = time.monotonic()
        out = tmp_path / "run"
        p = cli(slurm, *_validate_args(blueprint(tmp_path, suites="[node]"), out))
        took = time.monotonic() - t0
    finally:
        slurm.start_controller()
        slurm.wait_idle()
    assert p.returncode == 3, p.stdout + p.stderr  # invalid: nothing was measured; never 1 (a cluster fail)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("✗ the Slurm controller does not answer (`scontrol ping`: Slurmctld(primary) at ")
    assert "is DOWN" in last and "nothing was submitted" in last and "Traceback" not in p.stderr
    assert not out.exists()  # nothing ran: no half-made run folder
    assert took < 60


@pytest.mark.slow
def test_a_job_pending_on_a_down_partition_is_invalid_after_the_bounded_wait(slurm: MiniSlurm, tmp_path: Path) -> None:
    assert slurm.run("scontrol", "update", f"PartitionName={slurm.partition}", "State=DOWN").returncode == 0
    try:
        out = tmp_path / "run"
        t0 = time.monotonic()
        p = cli(slurm, *_validate_args(blueprint(tmp_path, suites="[node]"), out),
                env={"CLUSTERFORGE_SLURM_BLOCKED_TIMEOUT": "4"})
        took = time.monotonic() - t0
        left = slurm.jobs()
    finally:
        slurm.run("scontrol", "update", f"PartitionName={slurm.partition}", "State=UP")
    assert p.returncode == 3, p.stdout + p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert "did not start within" in last and "Slurm's reason: PartitionDown" in last, last
    assert f"scontrol update PartitionName={slurm.partition} State=UP" in last and "--resume" in last
    assert "Traceback" not in p.stderr
    assert "node: job " in p.stderr and "pending (PartitionDown)" in p.stderr  # the wait was shown
    assert left == []  # the job was cancelled, not left in the queue
    assert 4 <= took < 90
    assert _manifest(out)["tests"]["node"]["status"] == "interrupted"
    assert read_results_lines(out / "results.jsonl") == []


@pytest.mark.slow
def test_a_job_past_the_timeout_is_cancelled_and_judged_as_timed_out(slurm: MiniSlurm, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli(slurm, *_validate_args(blueprint(tmp_path, suites="[amp]"), out, "--timeout", "1"))
    assert p.returncode == 1, p.stdout + p.stderr  # the test ran and overran: the verdict is the test's
    (amp,) = read_results_lines(out / "results.jsonl")
    assert amp["verdict"] == "fail"
    assert any("stopped after the --timeout of 1 s" in r for r in amp["reasons"]), amp["reasons"]
    assert _manifest(out)["tests"]["amp"]["returncode"] == 124
    assert "scancel" in (out / "logs" / "amp.log").read_text()
    assert slurm.jobs() == []


@pytest.mark.slow
def test_sigterm_cancels_the_job_keeps_the_results_so_far_and_resume_finishes(slurm: MiniSlurm,
                                                                              tmp_path: Path) -> None:
    out = tmp_path / "run"
    bp = blueprint(tmp_path)
    e = {**slurm.env, "COLUMNS": "200", "CLUSTERFORGE_SLURM_POLL": "1"}
    proc = subprocess.Popen([*CLI, *_validate_args(bp, out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not any(" RUNNING " in j and "amp" in j for j in slurm.jobs()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the amp job never ran"
            time.sleep(0.2)
        # the node results were written when their job ended, before the amp job started
        assert {d["test_id"] for d in read_results_lines(out / "results.jsonl")} == {"node"}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err
    assert "interrupted:" in err and "--resume" in err
    deadline = time.monotonic() + 30
    while slurm.jobs() and time.monotonic() < deadline:  # scancel'd: the job leaves the queue
        time.sleep(0.2)
    assert slurm.jobs() == []
    man = _manifest(out)
    assert man["status"] == "interrupted" and man["tests"]["amp"]["status"] == "interrupted"
    assert "# cancelled job" in (out / "logs" / "amp.log").read_text()
    again = cli(slurm, *_validate_args(bp, out, "--resume"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming: 1 of 2 planned test(s)" in again.stdout
    assert "node: job" not in again.stderr and "amp: job" in again.stderr  # only amp ran again
    ids = [d["test_id"] for d in read_results_lines(out / "results.jsonl")]
    assert ids[0] == "node" and ids[-1] == "amp"
    assert _manifest(out)["status"] == "complete"


@pytest.mark.slow
def test_a_killed_run_leaves_its_job_queued_and_resume_waits_for_that_job(slurm: MiniSlurm, tmp_path: Path) -> None:
    """SIGKILL (a lost SSH session) cannot cancel anything: --resume finds the job by its record and collects it
    instead of submitting the same test a second time."""
    out = tmp_path / "run"
    bp = blueprint(tmp_path, suites="[amp]")
    e = {**slurm.env, "COLUMNS": "200", "CLUSTERFORGE_SLURM_POLL": "1"}
    proc = subprocess.Popen([*CLI, *_validate_args(bp, out)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "slurm" / "amp.job").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no job was recorded"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    job = json.loads((out / "slurm" / "amp.job").read_text())["job_id"]
    assert any(j.split()[0] == job for j in slurm.jobs())  # nobody cancelled it
    again = cli(slurm, *_validate_args(bp, out, "--resume"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"amp: job {job} " in again.stderr  # the same job, watched to its end
    (amp,) = read_results_lines(out / "results.jsonl")
    assert any(f"Slurm job {job}, submitted by an earlier run" in n for n in amp["notes"])
    # pass, or warn only because this machine's torch is not the blueprint's declared PyTorch (validate.stack)
    assert amp["verdict"] == "pass" or (amp["verdict"] == "warn" and amp["reasons"]
                                        and all("ran, but the blueprint's stack is" in x for x in amp["reasons"]))
    assert "$ sbatch" not in (out / "logs" / "amp.log").read_text()
    assert slurm.jobs() == []
