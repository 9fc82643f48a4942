"""The ssh launcher: run the payloads on the cluster's nodes over SSH.

Hosts come from the rendered Ansible inventory (``clusterforge render`` writes
``ansible/inventory.yml``; any inventory Ansible reads works, with its ``group_vars``), read with
Ansible's own ``InventoryManager`` so ``ansible_host``, ``ansible_user``, ``ansible_port``,
``ansible_ssh_private_key_file`` and ``ansible_connection`` mean what they mean to Ansible. Without
an inventory, the on-prem blueprint's ``hosts`` and ``target.ssh`` are used.

For each run the payload files are copied with ``scp`` into ``REMOTE_DIR`` on every node of the
test's node group (``connection: local`` hosts run here, without SSH). Then:

* ``ranks`` placement (collectives), one node: ``nccl_tests.py --gpus G`` when nccl-tests is
  installed on the node and the test runs on GPUs, else ``collectives.py --spawn G``;
* ``ranks``, several nodes: ``nccl_tests.py --hosts n1:G,n2:G`` on the first node (Open MPI's
  mpirun starts the ranks over SSH between the nodes) when nccl-tests is installed, else
  ``torchrun --nnodes K --node-rank i --master-addr <first node>`` started on every node at once;
* ``every-node`` (node checks): the payload on every node of the group at once (standard library
  only: plain ``python3``), each node's JSON line appended to the raw output;
* ``one-node`` (fio, AMP, ...): on the first node of the group, the JSON read from the payload's stdout.

``ssh`` runs with ``BatchMode=yes`` (keys or an agent, never a password prompt) and
``StrictHostKeyChecking=accept-new``. Artefacts: ``DIR/launch/<test-id>.sh`` (the commands),
``DIR/logs/<test-id>.log``, ``DIR/raw/<test-id>.*``.
"""

from __future__ import annotations

import os
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
    payload_files,
    run_logged,
    shell_join,
    write_launch_script,
)


@dataclass(frozen=True)
class SshHost:
    """One node: inventory ``name``, ``address`` to connect to, ``user``, ``port``, ``key`` (path), ``local``."""

    name: str
    address: str
    user: str | None = None
    port: int = 22
    key: str | None = None
    local: bool = False

    @property
    def destination(self) -> str:
        """``user@address`` (or the address alone)."""
        return f"{self.user}@{self.address}" if self.user else self.address


def ssh_options(host: SshHost) -> list[str]:
    """The ssh/scp options shared by every call to ``host`` (non-interactive, accept new host keys)."""
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=15"]
    if host.key:
        opts += ["-i", os.path.expanduser(host.key)]
    return opts


def remote_argv(host: SshHost, command: str) -> list[str]:
    """argv that runs the shell ``command`` on ``host`` (``sh -c`` for a local host)."""
    if host.local:
        return ["sh", "-c", command]
    return ["ssh", *ssh_options(host), "-p", str(host.port), host.destination, command]


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
    """Runs payloads on the nodes over SSH. ``remote_python`` must have torch; ``remote_dir`` holds the payloads."""

    name = "ssh"

    def __init__(self, out_dir: Path, loaded: LoadedBlueprint, *, inventory: Path | None = None,
                 remote_python: str = "python3", remote_dir: str | None = None, timeout_s: float | None = None):
        super().__init__(out_dir, timeout_s=timeout_s)
        self.loaded = loaded
        self.inventory = inventory
        self.remote_python = remote_python
        self.remote_dir = remote_dir or f"/tmp/clusterforge-validate-{loaded.blueprint.name}"
        self.launch_dir = self.out_dir / "launch"
        self._staged: set[SshHost] = set()
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
        return str((self.out_dir / "payloads").resolve()) if host.local else self.remote_dir

    def stage(self, host: SshHost, log: Path) -> None:
        """Copy the payload files to ``host`` once per run (``mkdir -p`` + ``scp``). Raises UsageError on failure."""
        if host in self._staged or host.local:
            return
        rc, _ = run_logged(remote_argv(host, f"mkdir -p {shlex.quote(self.remote_dir)}"), log, timeout_s=120)
        if rc == 0:
            files = [str(self.out_dir / "payloads" / f) for f in payload_files()]
            rc, _ = run_logged(["scp", "-q", *ssh_options(host), "-P", str(host.port), *files,
                                f"{host.destination}:{self.remote_dir}/"], log, timeout_s=300)
        if rc != 0:
            raise InvalidRunError(f"could not copy the payloads to {host.name} ({host.destination}), exit {rc}: "
                             f"see {log}; check SSH access (key, user, known_hosts)")
        self._staged.add(host)

    def _has_nccl_tests(self, host: SshHost, suite: RanksSuite, collective: str, log: Path) -> bool:
        key = (host.name, collective)
        if key not in self._probe:
            cmd = (f"{self.remote_python} {self._payload_dir(host)}/{suite.binary_payload} --probe "
                   f"--collective {collective}")
            rc, _ = run_logged(remote_argv(host, cmd), log, timeout_s=60)
            self._probe[key] = rc == 0
        return self._probe[key]

    def commands(self, test: PlannedTest, hosts: list[SshHost], log: Path) -> tuple[list[tuple[SshHost, str]], list[str]]:
        """``([(host, shell command)], notes)``: the first pair's stdout is the raw output."""
        py = self.remote_python
        h0 = hosts[0]
        d0 = self._payload_dir(h0)
        notes: list[str] = []
        suite = get_suite(test.kind)
        if isinstance(suite, RanksSuite):
            use_bin = test.device == "cuda" and self._has_nccl_tests(h0, suite, suite.binary_name(test), log)
            if use_bin:
                notes.append(f"nccl-tests binaries (via {suite.binary_payload})")
                args = suite.binary_payload_args(test)
                if len(hosts) > 1:
                    args += ["--hosts", ",".join(f"{h.address}:{test.ranks_per_node}" for h in hosts)]
                else:
                    args += ["--gpus", str(test.ranks_per_node)]
                return [(h0, f"{py} {d0}/{suite.binary_payload} {shell_join(args)}")], notes
            notes.append("torch.distributed benchmark (nccl-tests not installed)" if test.device == "cuda"
                         else "torch.distributed benchmark on gloo (CPU)")
            if len(hosts) == 1:
                cmd = f"{py} {d0}/{suite.payload} --spawn {test.ranks_per_node} {shell_join(suite.payload_args(test))}"
                return [(h0, cmd)], notes
            cmds = []
            for i, h in enumerate(hosts):
                cmd = (f"{py} -m torch.distributed.run --nnodes {len(hosts)} --nproc-per-node "
                       f"{test.ranks_per_node} --node-rank {i} --master-addr {h0.address} "
                       f"--master-port {MASTER_PORT} {self._payload_dir(h)}/{suite.payload} "
                       f"{shell_join(suite.payload_args(test))}")
                cmds.append((h, cmd))
            return cmds, notes
        if suite.placement == Placement.EVERY_NODE:
            # every node of the group proves its own configuration; stdlib only, so plain python3 will do
            return [(h, (f"python3 {self._payload_dir(h)}/{suite.payload} "
                        f"{shell_join([*suite.payload_args(test), '--node-name', h.name])}"))
                    for h in hosts], notes
        if len(hosts) > 1:
            notes.append(f"{suite.name} ran on {h0.name}, the first of {len(hosts)} nodes")
        return [(h0, f"{py} {d0}/{suite.payload} {shell_join(suite.payload_args(test))}")], notes

    def run(self, test: PlannedTest) -> LaunchResult:
        """Stage payloads on the group's nodes, run ``test``, write ``raw/<id>.*`` from the first node's stdout."""
        raw, log = self.fresh_outputs(test)
        hosts = self.hosts(test.group)[: max(test.nodes, 1)]
        for h in hosts:
            self.stage(h, log)
        cmds, notes = self.commands(test, hosts, log)
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
            with open(log, "ab") as lf:
                for (h, c), part in zip(cmds, parts):
                    lf.write(f"$ [{h.name}] {c}\n".encode())
                    lf.flush()
                    with open(part, "wb") as pf:
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
        with open(raw, "wb") as rf:
            for part in parts:
                if part.exists():
                    rf.write(part.read_bytes())
                    part.unlink()
        return max(codes, key=lambda c: c != 0) if codes else 1

    def _run_parallel(self, cmds: list[tuple[SshHost, str]], raw: Path, log: Path) -> int:
        """Start every node's command at once; the first node's stdout is ``raw``. Returns the worst status."""
        procs = []
        with open(log, "ab") as lf, open(raw, "wb") as rf:
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
