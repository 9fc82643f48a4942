"""The ssh launcher: run the payloads on the cluster's nodes over SSH.

Hosts come from the rendered Ansible inventory (``clusterforge render`` writes
``ansible/inventory.yml``; any inventory Ansible reads works, with its ``group_vars``), read with
Ansible's own ``InventoryManager`` so ``ansible_host``, ``ansible_user``, ``ansible_port``,
``ansible_ssh_private_key_file`` and ``ansible_connection`` mean what they mean to Ansible. Without
an inventory, the on-prem blueprint's ``hosts`` and ``target.ssh`` are used.

For each run every node of the test's node group gets a private run directory, made atomically by
``mktemp -d`` on the node (mode 0700, owned by the SSH user, a fresh random name under the node's
``$TMPDIR``, else ``/tmp``, or under ``remote_dir`` when one is given: never a fixed shared name), and
the payload files are copied into it with ``scp``; every payload runs with that directory as its
working directory and ``TMPDIR`` (so NCCL's debug file and any temporary file of a payload stay in
it) under ``umask 077``, and the launcher removes it when the run ends (``connection: local`` hosts
run here, without SSH, from ``DIR/payloads``). Then:

* ``ranks`` placement (collectives), one node: ``nccl_tests.py --gpus G`` when nccl-tests is
  installed on the node and the test runs on GPUs, else ``collectives.py --spawn G``;
* ``ranks``, several nodes: ``nccl_tests.py --hosts n1:G,n2:G`` on the first node (Open MPI's
  mpirun starts the ranks over SSH between the nodes) when nccl-tests is installed, else
  ``torchrun --nnodes K --node-rank i --master-addr <first node>`` started on every node at once;
* ``every-node`` (node checks): the payload on every node of the group at once (standard library
  only: plain ``python3``), each node's JSON line appended to the raw output;
* ``one-node`` (fio, AMP, ...): on the first node of the group, the JSON read from the payload's stdout.

``ssh`` runs with ``BatchMode=yes`` (keys or an agent, never a password prompt) and
``StrictHostKeyChecking=accept-new``; its command line keeps options apart from arguments: ``ssh
[options] -l USER -p PORT -- HOST COMMAND`` (``scp [options] -o User=USER -P PORT -- FILES HOST:DIR/``),
a host or user that could be read as an option (a leading ``-``, whitespace, control characters, an
``@`` in a user) is refused when the host is read, and every remote command is built from words
quoted with :func:`shlex.quote`. Artefacts: ``DIR/launch/<test-id>.sh`` (the commands),
``DIR/logs/<test-id>.log``, ``DIR/raw/<test-id>.*``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from blueprints import LoadedBlueprint
from blueprints.errors import InvalidRunError, ToolMissingError, UsageError

from ..suites import Placement, RanksSuite, get_suite
from .common import (
    MASTER_PORT,
    Launcher,
    LaunchResult,
    PlannedTest,
    child_env,
    open_nofollow,
    payload_files,
    run_logged,
    shell_join,
    write_launch_script,
)

_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?")
"""A login name ssh may be given: POSIX portable user names (plus a trailing ``$``), never a leading ``-``."""
_ADDRESS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*|\[?[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]?")
"""A host name or an IPv4 / IPv6 address (a zone index allowed), never a leading ``-``."""
RUN_DIR_TEMPLATE = "clusterforge-validate.XXXXXXXXXX"
"""The last component of a node's private run directory, as ``mktemp -d`` takes it (random X's)."""
_RUN_DIR = re.compile(r"/[A-Za-z0-9_./-]*/clusterforge-validate\.[A-Za-z0-9]{10}")


def check_ssh_target(name: str, address: str, user: str | None, port: int) -> None:
    """Raise :class:`UsageError` when ``address``, ``user`` or ``port`` of host ``name`` could be read by ssh
    as anything but a host, a login name or a port (a leading ``-`` is an option; whitespace, quotes,
    ``@`` or control characters are never part of one)."""
    if not _ADDRESS.fullmatch(address or ""):
        raise UsageError(f"host {name!r}: address {address!r} is not a host name or an IP address (letters, "
                         "digits, '.', '-', '_', ':'; not starting with '-'): fix ansible_host or the blueprint's "
                         "`hosts[].address`")
    if user is not None and not _USER.fullmatch(user):
        raise UsageError(f"host {name!r}: SSH user {user!r} is not a login name (letters, digits, '.', '-', '_'; "
                         "not starting with '-'): fix ansible_user or the blueprint's `target.ssh.user`")
    if not 0 < int(port) < 65536:
        raise UsageError(f"host {name!r}: SSH port {port!r} is not a TCP port (1-65535)")


@dataclass(frozen=True)
class SshHost:
    """One node: inventory ``name``, ``address`` to connect to, ``user``, ``port``, ``key`` (path), ``local``.

    A remote host's address, user and port are checked when it is made (:func:`check_ssh_target`)."""

    name: str
    address: str
    user: str | None = None
    port: int = 22
    key: str | None = None
    local: bool = False

    def __post_init__(self) -> None:
        if not self.local:
            check_ssh_target(self.name, self.address, self.user, self.port)

    @property
    def destination(self) -> str:
        """``user@address`` (or the address alone), as a person reads it; the command lines pass the user
        with ``-l`` / ``-o User=`` and the address after ``--``."""
        return f"{self.user}@{self.address}" if self.user else self.address

    @property
    def scp_host(self) -> str:
        """The address as scp's ``HOST:PATH`` argument takes it (an IPv6 address in brackets)."""
        return f"[{self.address.strip('[]')}]" if ":" in self.address else self.address


def ssh_options(host: SshHost) -> list[str]:
    """The ssh/scp options shared by every call to ``host`` (non-interactive, accept new host keys)."""
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=15"]
    if host.key:
        opts += ["-i", os.path.expanduser(host.key)]
    return opts


def remote_argv(host: SshHost, command: str) -> list[str]:
    """argv that runs the shell ``command`` on ``host`` (``sh -c`` for a local host): ``ssh [options] -l USER
    -p PORT -- ADDRESS COMMAND``, so neither the address nor the command can be read as an option."""
    if host.local:
        return ["sh", "-c", command]
    user = ["-l", host.user] if host.user else []  # address, user and port were checked when the host was made
    return ["ssh", *ssh_options(host), *user, "-p", str(host.port), "--", host.address, command]


def scp_argv(host: SshHost, files: list[str], remote_dir: str) -> list[str]:
    """argv that copies ``files`` into ``remote_dir`` on ``host``: ``scp -q [options] -o User=USER -P PORT --
    FILES ADDRESS:DIR/`` (``host`` was checked when it was made)."""
    user = ["-o", f"User={host.user}"] if host.user else []
    return ["scp", "-q", *ssh_options(host), *user, "-P", str(host.port), "--", *files,
            f"{host.scp_host}:{remote_dir}/"]


def make_run_dir_command(base: str | None) -> str:
    """The remote shell command that makes a private run directory and prints its path: ``umask 077`` and
    ``mktemp -d`` (an atomic mkdir of a random name, mode 0700) under ``base``, else ``$TMPDIR``, else /tmp."""
    parent = shlex.quote(base.rstrip("/") or "/") if base else '"${TMPDIR:-/tmp}"'
    return f"umask 077 && mktemp -d {parent}/{RUN_DIR_TEMPLATE}"


def in_run_dir(run_dir: str, command: str) -> str:
    """``command`` run inside the private ``run_dir``: ``umask 077``, working directory and ``TMPDIR`` there."""
    d = shlex.quote(run_dir)
    return f"umask 077 && cd {d} && TMPDIR={d} && export TMPDIR && {command}"


def hosts_from_inventory(path: Path, group: str | None = None) -> list[SshHost]:
    """Hosts of ``group`` (all hosts when the group is absent or ``None``) in an Ansible inventory.

    Raises :class:`UsageError` when the file cannot be read or has no hosts.
    """
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    if not Path(path).exists():
        raise UsageError(f"{path}: inventory not found — run `clusterforge render BLUEPRINT -o DIR` and pass "
                         "DIR/ansible/inventory.yml")
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(path)])
    vm = VariableManager(loader=loader, inventory=inv)
    pattern = group if group and group in inv.groups else "all"
    out = []
    for h in inv.get_hosts(pattern):
        v = vm.get_vars(host=h)
        out.append(SshHost(
            name=h.name,
            address=str(v.get("ansible_host") or h.name),
            user=v.get("ansible_user") or v.get("ansible_ssh_user"),
            port=int(v.get("ansible_port") or v.get("ansible_ssh_port") or 22),
            key=v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file"),
            local=v.get("ansible_connection") == "local",
        ))
    if not out:
        raise UsageError(f"{path}: no hosts in group {group or 'all'!r}")
    return out


def hosts_from_blueprint(loaded: LoadedBlueprint, group: str) -> list[SshHost]:
    """Hosts of node group ``group`` as the blueprint lists them (``hosts``: on-prem servers). Raises
    :class:`UsageError` for a group without hosts (cloud nodes: their addresses exist only after
    ``clusterforge up``)."""
    bp = loaded.blueprint
    g = bp.group(group)
    ssh = getattr(bp.target, "ssh", None)
    if not g.hosts or ssh is None:
        raise UsageError(f"{loaded.file}: AWS nodes have no addresses before `clusterforge up`; pass the "
                         "inventory with --inventory (ansible/inventory.yml from `clusterforge render`)")
    return [SshHost(name=h.name, address=h.address, user=ssh.user, port=ssh.port, key=ssh.private_key_file,
                    local=h.connection == "local") for h in g.hosts]


class SshLauncher(Launcher):
    """Runs payloads on the nodes over SSH. ``remote_python`` must have torch; ``remote_dir``, when given, is the
    absolute directory on the nodes under which each run makes its private directory (default: ``$TMPDIR``,
    else /tmp)."""

    name = "ssh"

    def __init__(self, out_dir: Path, loaded: LoadedBlueprint, *, inventory: Path | None = None,
                 remote_python: str = "python3", remote_dir: str | None = None, timeout_s: float | None = None):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.loaded = loaded
        self.inventory = inventory
        self.remote_python = remote_python
        if remote_dir is not None and not re.fullmatch(r"/[A-Za-z0-9_./-]*", remote_dir):
            raise UsageError(f"remote directory {remote_dir!r}: give an absolute path of letters, digits, '.', '-', "
                             "'_' and '/' (each run makes its own private directory under it)")
        self.remote_dir = remote_dir
        self.launch_dir = self.out_dir / "launch"
        self._run_dirs: dict[SshHost, str] = {}
        self._probe: dict[tuple[str, str], bool] = {}

    def hosts(self, group: str) -> list[SshHost]:
        """The nodes of ``group`` (inventory first, blueprint otherwise)."""
        if self.inventory is not None:
            return hosts_from_inventory(self.inventory, group)
        return hosts_from_blueprint(self.loaded, group)

    def prepare(self) -> None:
        """Folders, payload copies, and a check that ``ssh``/``scp`` exist when any host is remote."""
        super().prepare()
        self.launch_dir.mkdir(parents=True, exist_ok=True)
        remote = any(not h.local for r in self.loaded.cluster.compute_groups for h in self._hosts_or_empty(r.name))
        if remote:
            for tool in ("ssh", "scp"):
                if shutil.which(tool) is None:
                    raise ToolMissingError(f"{tool} not found: install the OpenSSH client (apt-get install "
                                           "openssh-client) to use --launcher ssh")

    def _hosts_or_empty(self, group: str) -> list[SshHost]:
        try:
            return self.hosts(group)
        except (UsageError, KeyError):
            return []

    def _payload_dir(self, host: SshHost) -> str:
        if host.local:
            return str((self.out_dir / "payloads").resolve())
        if host not in self._run_dirs:
            raise InvalidRunError(f"{host.name}: the payloads were not staged on this node before the run")
        return self._run_dirs[host]

    def run_dir(self, host: SshHost) -> str | None:
        """The private run directory made on ``host`` by :meth:`stage` (``None`` before, and for local hosts)."""
        return self._run_dirs.get(host)

    def stage(self, host: SshHost, log: Path) -> None:
        """Make the node's private run directory (:func:`make_run_dir_command`) and copy the payload files into
        it, once per run. Raises InvalidRunError on failure."""
        if host in self._run_dirs or host.local:
            return
        out = log.with_name(f"{log.name}.run-dir")
        rc, _ = run_logged(remote_argv(host, make_run_dir_command(self.remote_dir)), log, stdout_to=out,
                           timeout_s=120)
        made = out.read_text(encoding="utf-8", errors="replace").strip() if out.exists() else ""
        out.unlink(missing_ok=True)
        if rc == 0 and not _RUN_DIR.fullmatch(made):
            raise InvalidRunError(f"{host.name}: mktemp -d printed {made[:200]!r}, not a private run directory: "
                                  f"see {log}")
        if rc == 0:
            self._run_dirs[host] = made
            files = [str(self.out_dir / "payloads" / f) for f in payload_files()]
            rc, _ = run_logged(scp_argv(host, files, made), log, timeout_s=300)
        if rc != 0:
            raise InvalidRunError(f"could not copy the payloads to {host.name} ({host.destination}), exit {rc}: "
                             f"see {log}; check SSH access (key, user, known_hosts)")

    def close(self) -> None:
        """Remove every node's private run directory (best effort: a node that does not answer keeps it)."""
        log = self.log_dir / "ssh-cleanup.log"
        for host, d in list(self._run_dirs.items()):
            try:
                run_logged(remote_argv(host, f"rm -rf -- {shlex.quote(d)}"), log, timeout_s=60)
            except OSError:
                pass
            del self._run_dirs[host]

    def _has_nccl_tests(self, host: SshHost, suite: RanksSuite, collective: str, log: Path,
                        search: list[str] | None = None) -> bool:
        key = (host.name, collective)
        if key not in self._probe:
            cmd = shell_join([self.remote_python, f"{self._payload_dir(host)}/{suite.binary_payload}", "--probe",
                              "--collective", collective, *(search or [])])
            rc, _ = run_logged(remote_argv(host, self._in_run_dir(host, cmd)), log, timeout_s=60)
            self._probe[key] = rc == 0
        return self._probe[key]

    def commands(self, test: PlannedTest, hosts: list[SshHost], log: Path) -> tuple[list[tuple[SshHost, str]], list[str]]:
        """``([(host, shell command)], notes)``: the first pair's stdout is the raw output. Every word is quoted;
        :meth:`run` runs each command inside the node's private run directory (:func:`in_run_dir`)."""
        py = shlex.quote(self.remote_python)
        env_py = get_suite(test.kind).environment_python(test)
        if env_py and self.remote_python == "python3":  # the default: the declared venv where the node has it
            q = shlex.quote(env_py)
            py = f'"$(if [ -x {q} ]; then echo {q}; else echo python3; fi)"'
        h0 = hosts[0]

        def payload(h: SshHost, name: str) -> str:
            return shlex.quote(f"{self._payload_dir(h)}/{name}")

        notes: list[str] = []
        suite = get_suite(test.kind)
        if isinstance(suite, RanksSuite):
            use_bin = test.device == "cuda" and self._has_nccl_tests(h0, suite, suite.binary_name(test), log,
                                                                         suite.binary_search_args(test))
            if use_bin:
                notes.append(f"nccl-tests binaries (via {suite.binary_payload})")
                args = suite.binary_payload_args(test)
                if len(hosts) > 1:
                    args += ["--hosts", ",".join(f"{h.address}:{test.ranks_per_node}" for h in hosts)]
                else:
                    args += ["--gpus", str(test.ranks_per_node)]
                return [(h0, f"{py} {payload(h0, suite.binary_payload)} {shell_join(args)}")], notes
            notes.append("torch.distributed benchmark (nccl-tests not installed)" if test.device == "cuda"
                         else "torch.distributed benchmark on gloo (CPU)")
            if len(hosts) == 1:
                cmd = (f"{py} {payload(h0, suite.payload)} --spawn {test.ranks_per_node} "
                       f"{shell_join(suite.payload_args(test))}")
                return [(h0, cmd)], notes
            cmds = []
            for i, h in enumerate(hosts):
                cmd = (f"{py} -m torch.distributed.run --nnodes {len(hosts)} --nproc-per-node "
                       f"{test.ranks_per_node} --node-rank {i} --master-addr {shlex.quote(h0.address)} "
                       f"--master-port {MASTER_PORT} {payload(h, suite.payload)} "
                       f"{shell_join(suite.payload_args(test))}")
                cmds.append((h, cmd))
            return cmds, notes
        if suite.placement == Placement.EVERY_NODE:
            # every node of the group proves its own configuration; stdlib only, so plain python3 will do
            return [(h, (f"python3 {payload(h, suite.payload)} "
                        f"{shell_join([*suite.payload_args(test), '--node-name', h.name])}"))
                    for h in hosts], notes
        if len(hosts) > 1:
            notes.append(f"{suite.name} ran on {h0.name}, the first of {len(hosts)} nodes")
        return [(h0, f"{py} {payload(h0, suite.payload)} {shell_join(suite.payload_args(test))}")], notes

    def _in_run_dir(self, host: SshHost, command: str) -> str:
        """``command`` as it runs on ``host``: inside its private run directory (local hosts: unchanged)."""
        return command if host.local else in_run_dir(self._payload_dir(host), command)

    def run(self, test: PlannedTest) -> LaunchResult:
        """Stage payloads on the group's nodes, run ``test``, write ``raw/<id>.*`` from the first node's stdout."""
        raw, log = self.fresh_outputs(test)
        hosts = self.hosts(test.group)[: max(test.nodes, 1)]
        for h in hosts:
            self.stage(h, log)
        cmds, notes = self.commands(test, hosts, log)
        cmds = [(h, self._in_run_dir(h, c)) for h, c in cmds]
        write_launch_script(self.launch_dir / f"{test.id}.sh", self.name, test,
                            "".join(f"{shell_join(remote_argv(h, c))} &\n" for h, c in cmds[1:])
                            + f"{shell_join(remote_argv(*cmds[0]))}\nwait\n")
        t0 = time.perf_counter()
        if get_suite(test.kind).placement == Placement.EVERY_NODE:
            rc = self._run_each(cmds, raw, log)
            return LaunchResult(raw=raw, returncode=rc, log=log, command=shell_join(remote_argv(*cmds[0])),
                                duration_s=time.perf_counter() - t0, notes=notes)
        if len(cmds) == 1:
            rc, _ = run_logged(remote_argv(*cmds[0]), log, stdout_to=raw, timeout_s=self.timeout_s)
        else:
            rc = self._run_parallel(cmds, raw, log)
        return LaunchResult(raw=raw, returncode=rc, log=log, command=shell_join(remote_argv(*cmds[0])),
                            duration_s=time.perf_counter() - t0, notes=notes)

    def _run_each(self, cmds: list[tuple[SshHost, str]], raw: Path, log: Path) -> int:
        """Run every node's command at once; ``raw`` gets every node's stdout (one JSON line each), in host
        order. Returns the worst status (a node that does not answer leaves its document out: the judge says so)."""
        parts = [raw.with_name(f"{raw.name}.{i}") for i in range(len(cmds))]
        procs = []
        try:
            with open_nofollow(log, "ab") as lf:
                for (h, c), part in zip(cmds, parts):
                    lf.write(f"$ [{h.name}] {c}\n".encode())
                    lf.flush()
                    with open_nofollow(part, "wb") as pf:
                        procs.append(subprocess.Popen(remote_argv(h, c), stdout=pf, stderr=lf, env=child_env(),
                                                      start_new_session=True))
                codes = []
                deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
                for p in procs:
                    left = None if deadline is None else max(1.0, deadline - time.monotonic())
                    try:
                        codes.append(p.wait(timeout=left))
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                        codes.append(124)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        with open_nofollow(raw, "wb") as rf:
            for part in parts:
                if part.exists():
                    rf.write(part.read_bytes())
                    part.unlink()
        return max(codes, key=lambda c: c != 0) if codes else 1

    def _run_parallel(self, cmds: list[tuple[SshHost, str]], raw: Path, log: Path) -> int:
        """Start every node's command at once; the first node's stdout is ``raw``. Returns the worst status."""
        procs = []
        with open_nofollow(log, "ab") as lf, open_nofollow(raw, "wb") as rf:
            try:
                for i, (h, c) in enumerate(cmds):
                    lf.write(f"$ [{h.name}] {c}\n".encode())
                    lf.flush()
                    procs.append(subprocess.Popen(remote_argv(h, c), stdout=rf if i == 0 else lf, stderr=lf,
                                                  env=child_env(), start_new_session=True))
                deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
                codes = []
                for p in procs:
                    left = None if deadline is None else max(1.0, deadline - time.monotonic())
                    try:
                        codes.append(p.wait(timeout=left))
                    except subprocess.TimeoutExpired:
                        codes.append(124)
                        for q in procs:
                            if q.poll() is None:
                                q.kill()
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        return max(codes, key=lambda c: c != 0) if codes else 1
