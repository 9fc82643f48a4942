"""Launchers stage and run payloads in a private per-run directory on the nodes (issue 33, part 3).

The ssh launcher is run from the user's side against stand-in ``ssh`` / ``scp`` programs on PATH that
behave like OpenSSH's for what is checked here: they record their argv, refuse a command line whose
host is not separated from the options by ``--``, and run the remote command with ``sh -c`` on this
machine (scp copies into the remote directory, which must already exist, as scp needs)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from blueprints import load_blueprint
from clusterforge.errors import UsageError
from validate.launchers.common import PlannedTest
from validate.launchers.kubernetes import manifest
from validate.launchers.ssh import SshHost, SshLauncher, hosts_from_inventory, remote_argv, scp_argv
from validate.payloads import collectives
from validate.suites.fio import FioParams
from validate.suites.nccl import NcclParams

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"

FAKE_SSH = r'''#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SSH_LOG"], "a") as f:
    f.write(json.dumps(["ssh", *args]) + "\n")
if "--" not in args:
    sys.exit(255)  # a host read where options are parsed: refuse, as an option-looking host would be abused
i = args.index("--")
host, command = args[i + 1], args[i + 2:]
if host.startswith("-") or len(command) != 1:
    sys.exit(255)
sys.exit(subprocess.call(["sh", "-c", command[0]]))
'''

FAKE_SCP = r'''#!{python}
import json, os, shutil, stat, sys
args = sys.argv[1:]
if "--" not in args:
    sys.exit(1)
i = args.index("--")
files, dest = args[i + 1:-1], args[-1]
host, _, path = dest.partition(":")
mode = stat.S_IMODE(os.stat(path).st_mode)  # the directory must exist: scp does not make it
with open(os.environ["FAKE_SSH_LOG"], "a") as f:
    f.write(json.dumps(["scp", *args, {{"mode": mode}}]) + "\n")
for src in files:
    shutil.copy(src, path)
'''


def _fake_openssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``(log, remote_tmp)``: stand-in ssh and scp first on PATH, the "node's" TMPDIR."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("scp", FAKE_SCP)):
        p = bin_dir / name
        p.write_text(text.replace("{python}", sys.executable).replace("{{", "{").replace("}}", "}"))
        p.chmod(0o755)
    remote_tmp = tmp_path / "node-tmp"
    remote_tmp.mkdir()
    log = tmp_path / "ssh-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.setenv("TMPDIR", str(remote_tmp))
    return log, remote_tmp


def _inventory(tmp_path: Path, user: str = "ops") -> Path:
    inv = tmp_path / "inventory.yml"
    inv.write_text(f"all:\n  hosts:\n    node-1: {{ansible_host: 127.0.0.1, ansible_user: {user}}}\n")
    return inv


def _collective() -> PlannedTest:
    return PlannedTest(id="nccl-all_reduce", kind="nccl", group="local", nodes=1, ranks_per_node=2, device="cpu",
                       params=NcclParams(collective="all_reduce", min_bytes=1024, max_bytes=2048, step_factor=2,
                                         iters=2, warmup_iters=1, check=True),
                       description="all_reduce over 1 node x 2 CPU processes")


def test_ssh_run_stages_payloads_in_a_private_mktemp_directory_and_removes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, remote_tmp = _fake_openssh(tmp_path, monkeypatch)
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    launcher = SshLauncher(tmp_path / "run", loaded, inventory=_inventory(tmp_path), remote_python=sys.executable)
    launcher.prepare()
    res = launcher.run(_collective())
    assert res.returncode == 0, res.log.read_text()
    assert "# Out of bounds values : 0 OK" in res.raw.read_text()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    ssh_calls = [c for c in calls if c[0] == "ssh"]
    # every ssh: options, `-l USER`, then `--`, then the address and one quoted command; never user@host
    for c in ssh_calls:
        i = c.index("--")
        assert c[i + 1] == "127.0.0.1" and len(c) == i + 3
        assert c[c.index("-l") + 1] == "ops" and c.index("-l") < i
        assert not any("@" in a for a in c[:i + 2])
    # the run directory: made by mktemp -d under umask 077 on the node, never a fixed /tmp name
    mk = ssh_calls[0][-1]
    assert mk.startswith("umask 077 && mktemp -d ") and mk.endswith("/clusterforge-validate.XXXXXXXXXX")
    scp = next(c for c in calls if c[0] == "scp")
    assert scp[-1] == {"mode": 0o700}, "the run directory must be private (0700) before the payloads are copied"
    dest = scp[-2]
    assert dest.startswith(f"127.0.0.1:{remote_tmp}/clusterforge-validate.") and dest.endswith("/")
    run_dir = dest.split(":", 1)[1].rstrip("/")
    assert scp[scp.index("--") - 1] != "127.0.0.1" and "User=ops" in scp[:scp.index("--")]
    # the payload ran inside it, with TMPDIR there (NCCL's debug file and any temporary file stay private)
    run_cmd = ssh_calls[-1][-1]
    assert f"cd {shlex.quote(run_dir)} && TMPDIR={shlex.quote(run_dir)}" in run_cmd
    assert f"{run_dir}/collectives.py" in run_cmd
    script = (tmp_path / "run" / "launch" / "nccl-all_reduce.sh").read_text()
    assert "/tmp/clusterforge-validate-" not in script and " -- 127.0.0.1 " in script
    assert Path(run_dir).is_dir()
    launcher.close()
    assert not Path(run_dir).exists() and list(remote_tmp.iterdir()) == []


def test_each_run_gets_its_own_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _log, remote_tmp = _fake_openssh(tmp_path, monkeypatch)
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    dirs = []
    for i in range(2):
        launcher = SshLauncher(tmp_path / f"run{i}", loaded, inventory=_inventory(tmp_path))
        launcher.prepare()
        host = launcher.hosts("local")[0]
        launcher.stage(host, tmp_path / f"stage{i}.log")
        dirs.append(launcher.run_dir(host))
    assert dirs[0] != dirs[1] and all(d and Path(d).parent == remote_tmp for d in dirs)
    assert all(stat.S_IMODE(os.stat(d).st_mode) == 0o700 for d in dirs if d)


@pytest.mark.parametrize("field,value", [("address", "-oProxyCommand=touch /tmp/pwned"), ("address", "a b"),
                                         ("user", "-oProxyCommand=touch /tmp/pwned"), ("user", "root@evil"),
                                         ("user", "ops\n-oX=y"), ("address", "")])
def test_hosts_and_users_that_read_as_options_are_refused(field: str, value: str) -> None:
    kw: dict[str, str] = {"address": "10.0.0.1", "user": "ops", field: value}
    with pytest.raises(UsageError, match="not a (host name|login name)"):
        SshHost(name="n", address=kw["address"], user=kw["user"])


def test_an_inventory_user_beginning_with_dash_is_refused_before_any_ssh(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, user="'-oProxyCommand=touch /tmp/pwned'")
    with pytest.raises(UsageError, match="SSH user"):
        hosts_from_inventory(inv)


def test_command_lines_separate_options_from_the_host() -> None:
    host = SshHost(name="gpu-01", address="fe80::1%eth0", user="ubuntu", port=2222)
    argv = remote_argv(host, "true")
    assert argv[-3:] == ["--", "fe80::1%eth0", "true"] and argv[argv.index("-l") + 1] == "ubuntu"
    scp = scp_argv(host, ["/x/a.py"], "/tmp/clusterforge-validate.AbCdEf0123")
    assert scp[-3:] == ["--", "/x/a.py", "[fe80::1%eth0]:/tmp/clusterforge-validate.AbCdEf0123/"]
    assert "User=ubuntu" in scp and "-P" in scp


def test_remote_dir_is_a_parent_of_private_directories_not_the_directory(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")
    with pytest.raises(UsageError, match="absolute path"):
        SshLauncher(tmp_path, loaded, remote_dir="/tmp/$(id)")
    launcher = SshLauncher(tmp_path, loaded)
    assert "clusterforge-validate-" not in str(launcher.remote_dir)


def test_nccl_debug_file_lives_in_a_private_directory(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    path = collectives.nccl_debug_env(env, str(tmp_path))
    assert path is not None
    d = Path(path).parent
    assert d.parent == tmp_path and d.name.startswith("clusterforge-nccl-") and d.name != f"clusterforge-nccl-{os.getpid()}"
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    other = collectives.nccl_debug_env({}, str(tmp_path))
    assert other is not None and Path(other).parent != d


def test_kubernetes_one_node_jobs_write_into_a_private_directory(tmp_path: Path) -> None:
    loaded = load_blueprint(EXAMPLES / "aws-eks-p4d.yaml")
    fio = PlannedTest(id="fio-scratch", kind="fio", group=loaded.blueprint.node_groups[0].name, nodes=1,
                      ranks_per_node=1, device="cpu",
                      params=FioParams(target="/scratch", target_kind="nvme", size="1G", runtime_s=5, numjobs=1,
                                       iodepth=1), description="fio")
    obj = manifest(loaded, fio)
    script = obj["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "/tmp/fio.json" not in script and "umask 077" in script and "mktemp -d" in script
    assert '--output "$CF_RUN_DIR"/fio.json' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
