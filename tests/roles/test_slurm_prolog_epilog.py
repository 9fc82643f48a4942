"""The slurm_node prolog and epilog (``roles/slurm_node/templates/{prolog,epilog}.sh.j2`` and the numbered scripts of
``prolog.d`` / ``epilog.d``) run for real against a temporary tree, rendered as the role renders them.

The tree mirrors the node: ``etc/slurm/prolog.sh`` with ``prolog.d`` beside it (the runners find their folder from
their own path), an ``enroot.conf`` whose paths lie in the tree, a folder standing in for ``/dev/shm`` and a ``squeue``
on PATH that answers with the jobs a test says still run on the node. The job's user is an unused uid (64123):
its files are made with that owner, and its leftover process is a real ``sleep`` started under that uid, killed
by PID on teardown if the epilog did not.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from blueprints.role_templates import render_role_template
from clusterforge.ansible.render import ROLES_DIR

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files and processes of another uid need root (CI runs as root)")

UID = GID = 64123
JOB = "4711"


class Tree:
    """The node's files under ``root``, the hooks rendered from the role's templates."""

    def __init__(self, root: Path):
        self.root = root
        self.slurm = root / "etc/slurm"
        for kind in ("prolog", "epilog"):
            self._render(f"{kind}.sh.j2", self.slurm / f"{kind}.sh")
            for t in sorted((ROLES_DIR / "slurm_node/templates" / f"{kind}.d").glob("*.j2")):
                self._render(f"{kind}.d/{t.name}", self.slurm / f"{kind}.d" / t.name.removesuffix(".j2"))
        self.bin = root / "bin"
        self.bin.mkdir()
        self.squeue_out = root / "squeue.out"
        self.squeue_rc = 0
        self.shm = root / "shm"
        self.shm.mkdir(mode=0o1777)
        self.conf = root / "enroot.conf"
        r = root
        self.conf.write_text(
            "# as the renderer writes it: node-local, per user\n"
            f"ENROOT_RUNTIME_PATH   {r}/run/enroot/user-$(id -u)\n"
            f"ENROOT_DATA_PATH      {r}/var/lib/enroot/data/user-$(id -u)\n"
            f'ENROOT_CACHE_PATH     "{r}/var/lib/enroot/cache/${{USER}}"\n'
            f"ENROOT_TEMP_PATH      {r}/tmp\n")
        self.runtime = r / f"run/enroot/user-{UID}"
        self.data = r / f"var/lib/enroot/data/user-{UID}"
        self.cache = r / "var/lib/enroot/cache/cfuser"

    def _render(self, template: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(render_role_template("slurm_node", template, {}))
        dest.chmod(0o755)

    def run(self, kind: str, uid: int = UID, budget: int | None = None) -> subprocess.CompletedProcess[str]:
        squeue = self.bin / "squeue"
        squeue.write_text(f"#!/bin/sh\necho \"$@\" >> {self.root}/squeue.args\n"
                          f"cat {self.squeue_out} 2>/dev/null\nexit {self.squeue_rc}\n")
        squeue.chmod(0o755)
        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_JOB_ID": JOB, "SLURM_JOB_UID": str(uid),
               "SLURM_JOB_GID": str(GID), "SLURM_JOB_USER": "cfuser", "SLURMD_NODENAME": "gpu-01",
               "CLUSTERFORGE_ENROOT_CONF": str(self.conf), "CLUSTERFORGE_SHM_DIR": str(self.shm)}
        if budget is not None:
            env["CLUSTERFORGE_HOOK_BUDGET_S"] = str(budget)
        return subprocess.run([str(self.slurm / f"{kind}.sh")], capture_output=True, text=True, env=env, timeout=120,
                              check=False)

    def owned(self, path: Path, uid: int = UID, text: str = "x") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chown(path, uid, GID)
        return path


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture
def user_process() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "300"], user=UID, group=GID, stdin=subprocess.DEVNULL)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def _stat(p: Path) -> tuple[int, int, str]:
    st = p.stat()
    return st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)


def test_runner_runs_the_executables_in_name_order_and_stops_at_the_first_failure(tree: Tree) -> None:
    d = tree.slurm / "prolog.d"
    for name, body in [("10-first", "echo 10 >> {log}"), ("70-fails", "echo 70 >> {log}; exit 3"),
                       ("90-never", "echo 90 >> {log}")]:
        (d / name).write_text("#!/bin/sh\n" + body.format(log=tree.root / "order") + "\n")
        (d / name).chmod(0o755)
    (d / "20-not-executable").write_text("#!/bin/sh\necho 20 >> " + str(tree.root / "order") + "\n")
    r = tree.run("prolog")
    assert r.returncode == 3
    assert (tree.root / "order").read_text().split() == ["10", "70"]
    assert "job 4711: 70-fails failed (exit 3)" in r.stderr
    assert tree.runtime.is_dir()  # 50-enroot-dirs ran between them


def test_runner_bounds_the_hooks_with_its_budget(tree: Tree) -> None:
    hang = tree.slurm / "epilog.d/10-hangs"
    hang.write_text("#!/bin/sh\nexec sleep 300\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    r = tree.run("epilog", budget=2)
    assert time.monotonic() - t0 < 15
    assert r.returncode == 124
    assert "10-hangs ran out of time (budget 2 s)" in r.stderr


def test_prolog_makes_the_users_enroot_directories(tree: Tree) -> None:
    r = tree.run("prolog")
    assert r.returncode == 0, r.stderr
    for p in (tree.runtime, tree.data, tree.cache):
        assert _stat(p) == (UID, GID, "0o700"), p
        assert _stat(p.parent) == (0, 0, "0o755"), p.parent
    assert not (tree.root / "tmp").exists()  # ENROOT_TEMP_PATH is shared: not the prolog's
    tree.runtime.chmod(0o755)
    assert tree.run("prolog").returncode == 0
    assert _stat(tree.runtime) == (UID, GID, "0o700")


def test_prolog_refuses_a_link_where_a_users_directory_belongs(tree: Tree) -> None:
    tree.runtime.parent.mkdir(parents=True)
    tree.runtime.symlink_to("/etc")
    r = tree.run("prolog")
    assert r.returncode == 1
    assert f"{tree.runtime} (ENROOT_RUNTIME_PATH) is a symbolic link: remove it, then resume the node" in r.stderr
    assert _stat(Path("/etc"))[0] == 0


def test_prolog_leaves_values_it_cannot_expand_to_enroot(tree: Tree) -> None:
    tree.conf.write_text("ENROOT_RUNTIME_PATH /run/enroot/$(some-command)\nENROOT_DATA_PATH relative/path\n")
    r = tree.run("prolog")
    assert r.returncode == 0, r.stderr
    assert "ENROOT_RUNTIME_PATH" in r.stderr and "not a plain per-user path" in r.stderr
    assert "ENROOT_DATA_PATH" in r.stderr and "not an absolute path" in r.stderr


def _leftovers(tree: Tree) -> dict[str, Path]:
    assert tree.run("prolog").returncode == 0
    (tree.shm / "sem.dir").mkdir()
    os.chown(tree.shm / "sem.dir", UID, GID)
    return {
        "data": tree.owned(tree.data / "pyxis_4711.0/etc/hostname"),
        "runtime": tree.owned(tree.runtime / "pyxis_4711.0.pid"),
        "cache": tree.owned(tree.cache / "layer.tar.zst"),
        "shm": tree.owned(tree.shm / "nccl-ABCDEF"),
        "shm-dir": tree.owned(tree.shm / "sem.dir/psm2_shm.1"),
        "other-shm": tree.owned(tree.shm / "theirs", uid=UID + 1),
    }


def test_epilog_of_the_users_last_job_cleans_up(tree: Tree, user_process: subprocess.Popen[bytes]) -> None:
    left = _leftovers(tree)
    tree.squeue_out.write_text(f"{JOB}\n")  # only this job, completing
    r = tree.run("epilog")
    assert r.returncode == 0, r.stderr
    assert user_process.wait(timeout=10) == -9
    assert not tree.data.exists() and not tree.runtime.exists()
    assert left["cache"].exists(), "the image cache stays for the next job"
    assert not left["shm"].exists() and not left["shm-dir"].exists() and not (tree.shm / "sem.dir").exists()
    assert left["other-shm"].exists()
    args = (tree.root / "squeue.args").read_text().split()
    assert args[args.index("-u") + 1] == str(UID) and args[args.index("-w") + 1] == "gpu-01"


@pytest.mark.parametrize("case", ["another job of the user runs here", "squeue gives no answer"])
def test_epilog_leaves_the_user_alone_while_unsure(tree: Tree, user_process: subprocess.Popen[bytes], case: str) -> None:
    left = _leftovers(tree)
    if case == "squeue gives no answer":
        tree.squeue_rc = 1
    else:
        tree.squeue_out.write_text(f"{JOB}\n4712\n")
    r = tree.run("epilog")
    assert r.returncode == 0, r.stderr
    assert user_process.poll() is None
    assert all(p.exists() for p in left.values())
    if case == "squeue gives no answer":
        assert "squeue gave no answer: the user's files and processes are left in place" in r.stderr


def test_epilog_never_cleans_up_after_root(tree: Tree) -> None:
    root_file = tree.owned(tree.shm / "root-segment", uid=0)
    tree.squeue_out.write_text("")
    r = tree.run("epilog", uid=0)
    assert r.returncode == 0, r.stderr
    assert root_file.exists()


def test_epilog_keeps_a_shared_enroot_folder(tree: Tree) -> None:
    shared = tree.root / "shared-data"
    tree.conf.write_text(f"ENROOT_DATA_PATH {shared}\n")
    tree.owned(shared / "container/file")
    tree.squeue_out.write_text(f"{JOB}\n")
    assert tree.run("epilog").returncode == 0
    assert (shared / "container/file").exists()


def _stand_in_smi(tree: Tree, apps: str = "", rc: int = 0) -> Path:
    """An ``nvidia-smi`` on the tree's PATH that records its arguments and lists ``apps`` as the compute processes."""
    smi = tree.bin / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {tree.root}/smi.args\n"
                   f"case \"$*\" in *query-compute-apps*) printf '%s' '{apps}'; exit {rc};; esac\nexit 0\n")
    smi.chmod(0o755)
    return tree.root / "smi.args"


def _epilog_with_gpus(tree: Tree, gpus: str) -> subprocess.CompletedProcess[str]:
    script = tree.slurm / "epilog.d/45-gpu-state.sh"
    env = {"PATH": f"{tree.bin}:/usr/bin:/bin", "SLURM_JOB_ID": JOB, "SLURM_JOB_GPUS": gpus}
    return subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_epilog_resets_the_jobs_gpus(tree: Tree) -> None:
    args = _stand_in_smi(tree)
    r = _epilog_with_gpus(tree, "0,1")
    assert r.returncode == 0, r.stderr
    calls = args.read_text().splitlines()
    assert "-i 0,1 -rac" in calls and "-i 0,1 -c DEFAULT" in calls
    assert any("--query-compute-apps" in c for c in calls)


def test_epilog_fails_when_a_gpu_still_runs_a_process(tree: Tree) -> None:
    _stand_in_smi(tree, apps="GPU-1234, 999, python")
    r = _epilog_with_gpus(tree, "0")
    assert r.returncode == 1 and "still run processes" in r.stderr and "999" in r.stderr


def test_epilog_without_gpus_or_nvidia_smi_does_nothing(tree: Tree) -> None:
    args = _stand_in_smi(tree)
    assert _epilog_with_gpus(tree, "").returncode == 0
    assert _epilog_with_gpus(tree, "0;reboot").returncode == 0  # not a GPU list: never handed to nvidia-smi
    assert not args.exists()
    (tree.bin / "nvidia-smi").unlink()
    assert _epilog_with_gpus(tree, "0").returncode == 0
