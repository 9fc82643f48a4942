"""A real Slurm cluster from the files clusterforge renders (issue 25, "Proven on a real Slurm, here").

The blueprint :data:`BLUEPRINT` (on-prem Debian 12: a controller with accounting, a login node, two L40S compute
nodes ``gpu-01`` / ``gpu-02``) is rendered by ``clusterforge render``'s Slurm step (``render_slurm``), and
``tests/roles/slurm_cluster.py`` starts Debian's slurmctld, slurmdbd + MariaDB, slurmd and munged on it, one set of
namespaces per node, with the rendered files verbatim at ``/etc/slurm``. The compute nodes also get what the
slurm_node role writes beside them: the health check program (``roles/slurm_node/files/clusterforge-slurm-health``)
and its expectations (``blueprints.slurm.health_expectations``). Stand-ins for the hardware only: ``/dev/nvidiaN``
character devices (major 195) and an ``nvidia-smi`` that reports the recorded L40S node
(``tests/fixtures/node/l40s-roce/l40s-01``) with as many GPUs as the node has device files.

Every test asserts what Slurm itself reports: ``sinfo``, ``srun`` task output and exit codes, ``sacct``, and the
node state and reason slurmctld records. The only difference from production in the files: the blueprint sets
``orchestrator.cgroup_version: v1`` (this machine mounts cgroup v1; Debian 12 hosts are v2 only), the renderer's
documented switch, so ``cgroup.conf`` says ``CgroupPlugin=cgroup/v1``.

Skipped only without root or without the Debian packages (the skip names them; ``make test`` installs them from
tests/system-packages.txt).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from blueprints.slurm import HEALTH_REASON

from .slurm_cluster import (
    ClusterError,
    LiveCluster,
    blueprint_cluster,
    conf_value,
    missing_prerequisites,
    start_cluster,
)

pytestmark = pytest.mark.slow

BLUEPRINT = """\
apiVersion: clusterforge/v1
kind: Blueprint
name: live-slurm
target: {provider: onprem, os: debian-12, ssh: {user: root}}
node_groups:
  - name: ctl
    role: controller
    hosts: [{name: ctl-01, address: 10.78.0.10}]
  - name: login
    role: login
    hosts: [{name: login-01, address: 10.78.0.9}]
  - name: gpu
    role: compute
    hosts: [{name: gpu-01, address: 10.78.0.11}, {name: gpu-02, address: 10.78.0.12}]
    hardware:
      gpu: l40s:2
      cpu: {sockets: 1, cores_per_socket: 2, threads_per_core: 1}
      memory_gib: 8
software: {driver_branch: "550"}   # the stand-in nvidia-smi replays a recorded L40S with driver 550.90.07
orchestrator:
  kind: slurm
  cgroup_version: v1
  pyxis: false
  os_memory_gib: 1
  health_check_interval_s: 5
"""
"""The test cluster. CPU topology and memory fit this 2-core machine (slurmd drains a node that has fewer CPUs or
less memory than slurm.conf says); ``health_check_interval_s: 5`` so a drain shows within seconds."""

PROBE = """\
import errno, os, socket
seen = []
for i in range(int(os.environ["PROBE_DEVICES"])):
    try:
        os.close(os.open(f"/dev/nvidia{i}", os.O_RDONLY))
        seen.append("opened")
    except OSError as e:
        seen.append(errno.errorcode[e.errno])
print(socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES"), ",".join(seen))
"""
"""Opens every /dev/nvidiaN of the node: the device cgroup answers EPERM for a GPU the job was not given; a GPU it
was given opens as far as the kernel, which has no NVIDIA driver here (ENXIO)."""


def _skip_reason() -> str | None:
    return missing_prerequisites(accounting=True)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """The live cluster of :data:`BLUEPRINT`, for the whole session (stopped and cleaned at its end)."""
    if reason := _skip_reason():
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("live-slurm")
    spec = blueprint_cluster(BLUEPRINT, out)
    with start_cluster(spec.tree, spec.nodes, out / "run", role_trees=spec.role_trees) as cluster:
        print(f"live Slurm cluster: all nodes idle {cluster.seconds_to_idle:.2f} s after the daemons started "
              f"({cluster.seconds_up:.2f} s with munge and accounting)")
        yield cluster


def srun(cluster: LiveCluster, *argv: str, env: dict[str, str] | None = None,
         timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """``srun`` from the login node."""
    return cluster.run_on(cluster.client.name, ["srun", *argv], env=env, timeout=timeout)


def test_the_rendered_files_are_what_the_nodes_read(slurm_cluster: LiveCluster) -> None:
    """Every node mounts the rendered files verbatim; configless compute nodes fetched theirs from slurmctld."""
    ctl = slurm_cluster.controller.name
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        rendered = (slurm_cluster.conf_dir / name).read_text()
        assert slurm_cluster.run_on(ctl, ["cat", f"/etc/slurm/{name}"], check=True).stdout == rendered
    assert slurm_cluster.configless
    node = slurm_cluster.compute[0].name
    assert slurm_cluster.run_on(node, ["test", "-e", "/etc/slurm/slurm.conf"]).returncode == 1
    cached = slurm_cluster.run_on(node, ["cat", "/run/slurm/conf/slurm.conf"], check=True).stdout
    assert cached == (slurm_cluster.conf_dir / "slurm.conf").read_text()


def test_nodes_register_idle_with_the_declared_gres(slurm_cluster: LiveCluster) -> None:
    """``sinfo`` shows every compute node of the blueprint ``idle`` with ``gpu:<model>:<count>``."""
    res = slurm_cluster.run_on(slurm_cluster.client.name, ["sinfo", "-N", "-h", "-o", "%N %T %G"], check=True)
    conf = (slurm_cluster.conf_dir / "slurm.conf").read_text()
    expected = sorted(f"{n} idle {gres}" for n, gres in re.findall(r"^NodeName=(\S+) .*\bGres=(\S+)", conf, re.MULTILINE))
    assert expected == ["gpu-01 idle gpu:l40s:2", "gpu-02 idle gpu:l40s:2"]
    assert sorted(res.stdout.splitlines()) == expected


def test_srun_runs_one_task_on_each_node(slurm_cluster: LiveCluster) -> None:
    """``srun -N2`` crosses the namespaces: each task runs on its own node and reaches the other by name."""
    res = srun(slurm_cluster, "-N2", "-n2", "/bin/sh", "-c",
               'echo "$SLURM_PROCID $(hostname) $(getent hosts gpu-01 | cut -d" " -f1)"')
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split("\n")[:-1]) == ["0 gpu-01 10.78.0.11", "1 gpu-02 10.78.0.11"]


def test_a_job_opens_only_the_gpu_it_was_given(slurm_cluster: LiveCluster) -> None:
    """``--gres=gpu:1``: the job's GPU reaches the (absent) driver, the node's other GPU is refused by the device
    cgroup (ConstrainDevices=yes); a job given both GPUs reaches both."""
    env = {"PROBE_DEVICES": "2"}
    one = srun(slurm_cluster, "-N2", "-n2", "--gres=gpu:1", sys.executable, "-c", PROBE, env=env)
    assert one.returncode == 0, one.stderr
    assert sorted(one.stdout.splitlines()) == ["gpu-01 0 ENXIO,EPERM", "gpu-02 0 ENXIO,EPERM"]
    both = srun(slurm_cluster, "-N1", "-w", "gpu-02", "--gres=gpu:2", sys.executable, "-c", PROBE, env=env)
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines() == ["gpu-02 0,1 ENXIO,ENXIO"]


def test_a_job_past_its_memory_limit_is_oom_killed(slurm_cluster: LiveCluster) -> None:
    """``--mem=50M`` and 300 MB touched: the memory cgroup kills it and Slurm says so; with ``--mem=500M`` the same
    program finishes (so the limit, not the program, is what failed)."""
    grab = "b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); print('held', len(b) >> 20)"
    small = srun(slurm_cluster, "-n1", "--mem=50M", sys.executable, "-c", grab)
    assert small.returncode != 0
    assert re.search(r"oom-kill|out-of-memory|Out Of Memory", small.stderr, re.IGNORECASE), small.stderr
    large = srun(slurm_cluster, "-n1", "--mem=500M", sys.executable, "-c", grab)
    assert large.returncode == 0, large.stderr
    assert large.stdout.strip() == "held 300"


def test_sacct_records_the_gpus_a_job_used(slurm_cluster: LiveCluster) -> None:
    """A batch job with ``--gres=gpu:2`` on each of two nodes: slurmdbd records ``gres/gpu=4`` in AllocTRES."""
    assert slurm_cluster.accounting
    sub = slurm_cluster.run_on(slurm_cluster.client.name, [
        "sbatch", "--parsable", "-N2", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "srun true"], check=True)
    job = sub.stdout.strip().split(";")[0]

    def recorded() -> str | None:
        out = slurm_cluster.run_on(slurm_cluster.client.name, [
            "sacct", "-j", job, "-X", "-n", "-P", "-o", "State,AllocTRES"]).stdout.strip()
        return out if out.startswith("COMPLETED|") else None

    _state, tres = slurm_cluster.wait_for(f"job {job} COMPLETED in sacct", recorded, timeout=60).split("|")
    assert "gres/gpu=4" in tres.split(","), tres
    assert "node=2" in tres.split(","), tres


def test_a_failing_health_check_drains_the_node_and_a_passing_one_resumes_it(slurm_cluster: LiveCluster) -> None:
    """A GPU device file disappears on gpu-02 (a GPU fell off the bus): the health program slurmd runs every
    HealthCheckInterval drains the node with its reason; once the device is back the next run resumes it."""
    node = "gpu-02"
    interval = int(conf_value((slurm_cluster.conf_dir / "slurm.conf").read_text(), "HealthCheckInterval") or 0)
    assert interval == 5

    def state_reason() -> tuple[str, str]:
        out = slurm_cluster.run_on(slurm_cluster.client.name, ["sinfo", "-h", "-n", node, "-o", "%T|%E"]).stdout
        state, _, reason = out.strip().partition("|")
        return state, reason

    # an earlier test's job may still be completing on the node
    slurm_cluster.wait_for(f"{node} idle", lambda: state_reason()[0] == "idle", timeout=60)
    slurm_cluster.run_on(node, ["rm", "/dev/nvidia1"], check=True)
    try:
        _state, reason = slurm_cluster.wait_for(
            f"{node} drained by the health check", lambda: (sr := state_reason())[0] in ("drained", "draining")
            and sr, timeout=4 * interval + 10)
        assert reason.startswith(f"{HEALTH_REASON}: gpu.devices"), reason
        assert "/dev/nvidia1" in reason, reason
    finally:
        slurm_cluster.run_on(node, ["mknod", "-m", "666", "/dev/nvidia1", "c", "195", "1"], check=True)
    slurm_cluster.wait_for(f"{node} resumed by the health check", lambda: state_reason() == ("idle", "none"),
                           timeout=4 * interval + 10)


WRONG_GRES = BLUEPRINT.replace("live-slurm", "live-slurm-inval").replace(
    "  health_check_interval_s: 5\n", "  health_check_interval_s: 0\n  accounting: {enabled: false}\n")


def test_a_gres_conf_with_fewer_gpus_than_slurm_conf_makes_the_node_inval(tmp_path: Path) -> None:
    """slurm.conf rendered for 2 GPUs per node, gres.conf as rendered for 1 (a node left with an old gres.conf):
    slurmd reports the one device gres.conf lists, slurmctld compares it with ``Gres=gpu:l40s:2`` and refuses the node
    with its own reason, as on real hardware (slurm.md §3 issue 1)."""
    if reason := _skip_reason():
        pytest.skip(reason)
    spec = blueprint_cluster(WRONG_GRES, tmp_path / "two")
    one = blueprint_cluster(WRONG_GRES.replace("gpu: l40s:2", "gpu: l40s:1"), tmp_path / "one")
    gres = (one.tree / "etc/slurm/gres.conf").read_text()
    assert "File=/dev/nvidia0\n" in gres
    (spec.tree / "etc/slurm/gres.conf").write_text(gres)
    assert "Gres=gpu:l40s:2" in (spec.tree / "etc/slurm/slurm.conf").read_text()
    nodes = [n for n in spec.nodes if n.role != "login"]
    with pytest.raises(ClusterError) as info, start_cluster(spec.tree, nodes, tmp_path / "run", up_timeout=15,
                                                            role_trees=spec.role_trees):
        pass
    text = str(info.value)
    assert "slurmctld refused gpu-01, gpu-02 before every compute node was idle" in text
    for node in ("gpu-01", "gpu-02"):
        assert re.search(rf"^{node} inval gres/gpu count reported lower than configured \(1 < 2\)$", text,
                         re.MULTILINE), text
    # stopped as cleanly as a cluster that came up: no cgroup, link or process of its own is left
    ids = json.loads((tmp_path / "run" / "cluster.json").read_text())
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{ids['cgroup']}")), ids
    assert not Path(f"/sys/class/net/{ids['bridge']}").exists(), ids
    for pid in ids["holders"]:
        assert not Path(f"/proc/{pid}").exists(), pid


def test_without_root_the_cluster_is_skipped_with_the_reason() -> None:
    """As another user the prerequisites check names root: the only reasons the live tests skip are root and the
    Debian packages (and the users those packages create)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user")
    # nobody may not reach the clone (a fresh clone under a 0700 temporary folder, as CI makes one): the module
    # (standard library only) is copied to a folder nobody can read, and run by the base interpreter, not the venv's
    share = Path(tempfile.mkdtemp(prefix="cf-nobody-"))
    try:
        share.chmod(0o755)
        shutil.copy(Path(__file__).with_name("slurm_cluster.py"), share / "slurm_cluster.py")
        (share / "slurm_cluster.py").chmod(0o644)
        res = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", os.path.realpath(sys.executable), "-c",
             "from slurm_cluster import missing_prerequisites; print(missing_prerequisites())"],
            cwd=share, capture_output=True, text=True, timeout=60, check=False,
        )
    finally:
        shutil.rmtree(share)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "the live Slurm cluster needs root (namespaces, mounts, cgroups, mknod)"
