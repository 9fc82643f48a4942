"""A real multi-node Slurm cluster on this machine, started from the files clusterforge renders.

Each node (controller, compute nodes, an optional login node) gets its own network, UTS, mount and cgroup
namespaces, held open by one sleeping process. Inside a node's mount namespace private directories are
mounted over the real paths of the node contract (``/tmp/slurm-contract.md``, "Paths on a node"):
``/etc/slurm`` (the rendered files, verbatim), ``/etc/munge`` (the cluster's key, 0400 munge), ``/etc/hosts``
(every node), ``/etc/clusterforge``, ``/run`` (``/run/munge``, the pid files, ``/run/slurm``), ``/var/spool``
(``slurmd`` / ``slurmctld``), ``/var/log`` (``slurm``, ``munge``, ``mysql``), ``/var/lib/munge``,
``/var/lib/mysql`` (controller), ``/tmp`` and ``/dev`` (a private tmpfs with the usual character devices and
fake GPUs: ``/dev/nvidiaN``, major 195 as NVIDIA's driver registers them, so ``gres.conf`` ``File=`` and
``ConstrainDevices`` work: the allowed device opens with ENXIO, no driver, another one fails with EPERM, the
device cgroup). So every daemon runs as its Debian unit starts it (``slurmd -D -s $SLURMD_OPTIONS``,
``slurmctld -D -s``, ``slurmdbd -D -s``, ``munged`` as user munge), with no ``-f`` and no rewritten path.

The workarounds of the project's Slurm test-bed notes (SchedMD's multiple-slurmd and cgroup docs) that this machine needs:

- namespaces are entered with ``nsenter`` (``ip netns exec`` remounts ``/sys`` and hides the cgroup v1 mounts);
- a private ``/tmp`` per node (PMIx refuses a ``spmix_appdir`` that another "host" made);
- ``/etc/hosts`` per node, so nodes resolve each other by name;
- slurmds stop before slurmctld (a slurmd with an epilog-complete message pending retries the controller);
- a cgroup namespace per node, rooted at ``/sys/fs/cgroup/<controller>/cf-live-<id>/<node>``, with the
  cgroup file systems mounted again inside it: Slurm's ``slurm_<node>`` cgroups live below the node's own
  cgroup, two clusters started at once (several developers share this machine) never share a job cgroup,
  and teardown kills every process left in the node's cgroup and removes the whole tree;
- ``/run`` is private per node, so the ``/run/slurm/conf`` link of a configless slurmd never reaches the host
  and clients never need ``SLURM_CONF``: they run inside a node (:meth:`LiveCluster.run_on`), where
  ``/etc/slurm`` or ``/run/slurm/conf`` is what a real node has.

Needs root, the Debian packages of :data:`PROGRAMS` and cgroup v1 (this machine mounts the v1 controllers;
production Debian 12 / Ubuntu 22.04+ hosts are cgroup v2 only, which Slurm 22.05 drives through systemd and
dbus: not testable here, see the README). :func:`missing_prerequisites` says what is missing.

Use from pytest (``tests/roles/test_slurm_live.py``) or from a script (``bench/bench_slurm.py``)::

    with start_cluster(tree, nodes, workdir) as cluster:
        print(cluster.run_on("ctl-01", ["sinfo", "-N"]).stdout)
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

Role = Literal["controller", "compute", "login"]

PROGRAMS: dict[str, str] = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "sinfo": "slurm-client",
    "scontrol": "slurm-client",
    "srun": "slurm-client",
    "sbatch": "slurm-client",
    "sacct": "slurm-client",
    "sacctmgr": "slurm-client",
    "munged": "munge",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "setpriv": "util-linux",
    "ip": "iproute2",
}
"""Program → Debian package the cluster needs (the packages `make test` installs: tests/system-packages.txt)."""

ACCOUNTING_PROGRAMS: dict[str, str] = {
    "slurmdbd": "slurmdbd",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client",
}
"""Programs of a cluster whose ``slurm.conf`` says ``AccountingStorageType=accounting_storage/slurmdbd``."""

SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CONFIGLESS_FILES = (
    "slurm.conf", "acct_gather.conf", "cgroup.conf", "cli_filter.lua", "ext_sensors.conf", "gres.conf",
    "helpers.conf", "job_container.conf", "knl_cray.conf", "mpi.conf", "oci.conf", "plugstack.conf",
    "topology.conf",
)
"""What a configless slurmd fetches from slurmctld instead of reading ``/etc/slurm`` (Slurm 22.05,
https://slurm.schedmd.com/archive/slurm-22.05.8/configless_slurm.html "Initial Testing"): a compute node of a
configless cluster is given none of these files, as the slurm_node role writes none (contract
``slurm_node_files`` is empty when configless)."""

NVIDIA_MAJOR = 195
"""Character-device major of /dev/nvidiaN and /dev/nvidiactl (Linux devices.txt, "195 char Nvidia graphics
devices": https://www.kernel.org/doc/Documentation/admin-guide/devices.txt)."""

def _kept_under_tmp() -> list[Path]:
    """The host folders under ``/tmp`` a node must still see behind its private ``/tmp``: this repository and the
    Python environment running the tests (a fresh clone in CI may lie under /tmp; the CLI runs from it on the login
    node). Nested ones are left out (binding the outer folder brings them)."""
    import sys

    found = sorted({p for p in (Path(__file__).resolve().parents[2], Path(sys.prefix).resolve())
                    if p.is_relative_to("/tmp") and p != Path("/tmp")})
    return [p for p in found if not any(p != o and p.is_relative_to(o) for o in found)]


SMI_RECORDING = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "l40s-roce" / "l40s-01" / "nvidia-smi-q-x.xml"

NVIDIA_SMI = """\
#!/usr/bin/python3
# Stand-in for the NVIDIA driver's nvidia-smi on a node with fake GPUs (tests/roles/slurm_cluster.py): prints the
# recorded `nvidia-smi -q -x` of an L40S node with as many <gpu> entries as /dev has NVIDIA GPU device files.
import os, re, stat, sys
def gpu(d):
    st = os.stat("/dev/" + d)
    return re.fullmatch(r"nvidia[0-9]+", d) and stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195
devs = [d for d in os.listdir("/dev") if gpu(d)]
if not devs:
    sys.exit("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
args = sys.argv[1:]
if args[:1] == ["-i"] and len(args) >= 3:  # the epilog's GPU reset (epilog.d/45-gpu-state): no driver, no process
    if args[2:] in (["-rac"], ["-c", "DEFAULT"]):
        sys.exit(0)
    if args[2].startswith("--query-compute-apps="):
        sys.exit(0)  # no compute process on a fake GPU
if args != ["-q", "-x"]:
    sys.exit("this stand-in answers `nvidia-smi -q -x` and the epilog's reset and process query only")
text = @XML@
gpus = re.findall(r"<gpu id=.*?</gpu>\\n?", text, re.S)
for extra in gpus[len(devs):]:
    text = text.replace(extra, "")
count = "<attached_gpus>%d</attached_gpus>" % min(len(devs), len(gpus))
sys.stdout.write(re.sub(r"<attached_gpus>\\d+</attached_gpus>", count, text))
"""
"""``/usr/bin/nvidia-smi`` on a node with fake GPUs (what the health program asks the driver), from the recorded L40S
node of tests/fixtures/node (built to NVIDIA's documented XML format; see its README)."""

MARIADB_SETTINGS = ("--innodb-buffer-pool-size=1024M", "--innodb-log-file-size=64M", "--innodb-lock-wait-timeout=900")
"""The InnoDB values Slurm asks of the accounting database (slurmdbd warns "Database settings not recommended values"
otherwise): https://slurm.schedmd.com/archive/slurm-22.05.8/accounting.html "Slurm Accounting Configuration Before
Build"."""

NODE_DIRS: dict[str, tuple[str, str, int]] = {
    # node path: (private folder name, owner, mode)
    "/run": ("run", "root", 0o755),
    "/var/spool": ("var-spool", "root", 0o755),
    "/var/log": ("var-log", "root", 0o755),
    "/var/lib/munge": ("var-lib-munge", "munge", 0o711),
    "/tmp": ("tmp", "root", 0o1777),
}
"""Private folders bind-mounted over a node's real paths (``/var/lib/mysql`` too on a controller that keeps
the accounting database)."""


class ClusterError(RuntimeError):
    """The cluster did not come up (or not down cleanly): the message names the step and the logs to read."""


@dataclass(frozen=True)
class SlurmNode:
    """One "host" of the cluster: its short hostname, address on the cluster network, role and fake GPUs."""

    name: str
    address: str
    role: Role
    gpus: int = 0
    """How many /dev/nvidiaN the "hardware" has (independent of gres.conf: a wrong gres.conf is a test case)."""


def missing_prerequisites(accounting: bool = True) -> str | None:
    """Why this machine cannot run the live cluster (root, packages, cgroup v1), or None when it can."""
    if os.geteuid() != 0:
        return "the live Slurm cluster needs root (namespaces, mounts, cgroups, mknod)"
    programs = dict(PROGRAMS, **(ACCOUNTING_PROGRAMS if accounting else {}))
    missing = sorted({pkg for prog, pkg in programs.items() if shutil.which(prog, path=SBIN_PATH) is None})
    if missing:
        return f"the live Slurm cluster needs the Debian packages {', '.join(missing)} (tests/system-packages.txt)"
    for user in ("slurm", "munge") + (("mysql",) if accounting else ()):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"the live Slurm cluster needs the user {user!r} that its Debian package creates"
    if not any(fs == "cgroup" and "memory" in opts.split(",") for _, fs, opts in cgroup_mounts()):
        return "the live Slurm cluster needs the cgroup v1 memory controller mounted under /sys/fs/cgroup"
    return None


def cgroup_mounts() -> list[tuple[str, str, str]]:
    """This process's cgroup file systems under /sys/fs/cgroup: (mount point, fstype, super options)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        mountpoint = left.split()[4]
        fstype, _source, superopts = right.split()[:3]
        if fstype in ("cgroup", "cgroup2") and mountpoint.startswith("/sys/fs/cgroup/"):
            opts = ",".join(o for o in superopts.split(",") if o not in ("rw", "ro"))
            found.append((mountpoint, fstype, opts))
    return found


def conf_value(text: str, key: str) -> str | None:
    """The value of ``key`` in a Slurm ``key=value`` file (case-insensitive key, last one wins), or None."""
    value = None
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        for word in line.split():
            k, eq, v = word.partition("=")
            if eq and k.lower() == key.lower():
                value = v
    return value


def _sh(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _owner(path: Path, user: str, mode: int) -> None:
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    os.chmod(path, mode)


ENTER = (
    'for f in /sys/fs/cgroup/*/cgroup.procs; do echo $$ > "$f" 2>/dev/null || true; done; exec "$@"'
)
"""Run inside a node's namespaces: move into the node's cgroups (the root of its cgroup namespace), then exec."""


@dataclass
class _NodeState:
    node: SlurmNode
    root: Path  # host folder with the node's private folders
    holder: subprocess.Popen[bytes] | None = None
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)


@dataclass
class LiveCluster:
    """A running cluster: run commands inside its nodes, read their private files.

    ``nodes``: the nodes in the order given; ``addresses``: name → address; ``conf_dir``: the host folder holding
    the ``/etc/slurm`` files every non-configless node mounts (the rendered files, verbatim); ``workdir``: where
    the daemons' stdout/stderr (``logs/<node>-<daemon>.out``) and each node's private folders live;
    ``seconds_to_idle``: from starting slurmctld and the slurmds to every compute node ``idle``;
    ``seconds_up``: the whole start (munge, MariaDB, slurmdbd included).
    """

    nodes: tuple[SlurmNode, ...]
    conf_dir: Path
    workdir: Path
    cluster_id: str
    cluster_name: str
    accounting: bool
    configless: bool
    seconds_to_idle: float = 0.0
    seconds_up: float = 0.0
    _state: dict[str, _NodeState] = field(default_factory=dict, repr=False)

    @property
    def addresses(self) -> dict[str, str]:
        """Node name → address on the cluster network."""
        return {n.name: n.address for n in self.nodes}

    @property
    def controller(self) -> SlurmNode:
        """The controller node (slurmctld, slurmdbd and MariaDB when accounting)."""
        return next(n for n in self.nodes if n.role == "controller")

    @property
    def compute(self) -> list[SlurmNode]:
        """The compute nodes (slurmd)."""
        return [n for n in self.nodes if n.role == "compute"]

    @property
    def client(self) -> SlurmNode:
        """Where users submit from: the login node when there is one, else the controller."""
        return next((n for n in self.nodes if n.role == "login"), self.controller)

    def node(self, name: str) -> SlurmNode:
        """The node called ``name`` (ClusterError when there is none)."""
        try:
            return self._state[name].node
        except KeyError:
            raise ClusterError(f"no node {name!r} in this cluster (nodes: {', '.join(self._state)})") from None

    def nsenter_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` inside ``node``'s namespaces and cgroups (for Popen and friends)."""
        st = self._state[self.node(node).name]
        if st.holder is None or st.holder.poll() is not None:
            raise ClusterError(f"node {node}: its namespace holder is not running (see {self.workdir}/logs)")
        return ["nsenter", "-t", str(st.holder.pid), "--net", "--uts", "--mount", "--cgroup", "--",
                "/bin/sh", "-c", ENTER, "sh", *argv]

    def run_on(
        self,
        node: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        timeout: float = 120,
        input: str | None = None,
        cwd: str = "/tmp",
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``node`` as root, in a login-like environment (PATH, HOME=/root, LANG) plus ``env``,
        from ``cwd`` (a node path; default the node's private /tmp). Returns the CompletedProcess (text)."""
        inner = ["/usr/bin/env", "-C", cwd, *argv]
        return subprocess.run(
            self.nsenter_argv(node, inner), env=_node_env(env), input=input, capture_output=True, text=True,
            timeout=timeout, check=check,
        )

    def host_path(self, node: str, path: str) -> Path:
        """Where ``path`` of ``node`` (under one of its private folders) lies on this machine."""
        p = PurePosixPath(path)
        root = self._state[self.node(node).name].root
        for mount, (folder, _, _) in sorted(NODE_DIRS.items(), key=lambda kv: -len(kv[0])):
            if p == PurePosixPath(mount) or PurePosixPath(mount) in p.parents:
                return root / folder / p.relative_to(mount)
        if PurePosixPath("/etc") in p.parents:
            return root / "etc" / p.relative_to("/etc")
        raise ClusterError(f"{path} is not in a private folder of node {node} ({', '.join(NODE_DIRS)}, /etc)")

    def log(self, node: str, name: str) -> str:
        """The text of ``/var/log/<name>`` on ``node`` ('' when absent), e.g. ``log("gpu-01", "slurm/slurmd.log")``."""
        path = self.host_path(node, f"/var/log/{name}")
        return path.read_text(errors="replace") if path.exists() else ""

    def sinfo_states(self) -> dict[str, str]:
        """Node → state (``sinfo -N -h -o '%N %T'``, run on the client node)."""
        out = self.run_on(self.client.name, ["sinfo", "-N", "-h", "-o", "%N %T"], check=True).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_for(self, what: str, predicate, timeout: float = 60, interval: float = 0.25):  # type: ignore[no-untyped-def]
        """Poll ``predicate()`` until it returns something true; ClusterError naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r}); logs: "
                           f"{self.workdir}/logs and each node's /var/log/slurm")


def _node_env(env: Mapping[str, str] | None) -> dict[str, str]:
    base = {"PATH": SBIN_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8",
            "SHELL": "/bin/bash"}
    base.update(env or {})
    return base


def _unit(daemon: str) -> list[str]:
    """How Debian's ``<daemon>.service`` starts a Slurm daemon: ``EnvironmentFile=-/etc/default/<daemon>``,
    ``ExecStart=/usr/sbin/<daemon> -D -s $<DAEMON>_OPTIONS`` (slurm-wlm 22.05.8-4, debian/slurmd.service)."""
    var = f"{daemon.upper()}_OPTIONS"
    script = f"[ -r /etc/default/{daemon} ] && . /etc/default/{daemon}; exec /usr/sbin/{daemon} -D -s ${{{var}:-}}"
    return ["/bin/sh", "-c", script]


def _node_files(tree: Path, node: SlurmNode, configless: bool) -> dict[str, Path]:
    """Node path → rendered file, as the roles hand them out (contract "Role variables"): the controller gets
    every file, a login node every file but slurmdbd.conf, a compute node the same except, when configless, the
    files slurmctld serves (CONFIGLESS_FILES)."""
    files: dict[str, Path] = {}
    for path in sorted(p for p in tree.rglob("*") if p.is_file() or p.is_symlink()):
        node_path = "/" + path.relative_to(tree).as_posix()
        in_conf = node_path.startswith("/etc/slurm/")
        name = node_path.removeprefix("/etc/slurm/")
        if in_conf and name == "slurmdbd.conf" and node.role != "controller":
            continue
        if in_conf and configless and node.role == "compute" and name in CONFIGLESS_FILES:
            continue
        files[node_path] = path
    return files


def _role_files(trees: Mapping[str, Path], node: SlurmNode) -> dict[str, Path]:
    """Node path → file of the roles' own files for ``node`` (``trees[role]`` mirrors node paths, like the tree)."""
    tree = trees.get(node.role)
    if tree is None:
        return {}
    return {"/" + p.relative_to(tree).as_posix(): p for p in sorted(tree.rglob("*")) if p.is_file()}


def _overlay_dir(node_path: str) -> str:
    """The folder a node file is mounted through: ``/etc`` (writable overlay) or ``/usr/<dir>`` (read-only
    overlay); ClusterError for any other place."""
    parts = PurePosixPath(node_path).parts
    if len(parts) > 2 and parts[1] == "etc":
        return "/etc"
    if len(parts) > 3 and parts[1] == "usr":
        return f"/usr/{parts[2]}"
    raise ClusterError(f"{node_path}: the live cluster places files under /etc and /usr/<dir> only; fix: put it "
                       "there or extend tests/roles/slurm_cluster.py")


def _copy_mode(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


class _Starter:
    """Builds and starts the cluster; ``stop`` tears every piece down (called in ``start_cluster``'s finally)."""

    def __init__(self, tree: Path, nodes: Sequence[SlurmNode], workdir: Path, prefix: int, up_timeout: float,
                 role_trees: Mapping[str, Path]):
        self.tree = tree
        self.role_trees = role_trees
        self.nodes = tuple(nodes)
        self.workdir = workdir
        self.prefix = prefix
        self.up_timeout = up_timeout
        self.id = secrets.token_hex(3)
        self.bridge = f"cfs{self.id}"
        self.cgroup_base = f"cf-live-{self.id}"
        self.mounts = cgroup_mounts()
        self.logs = workdir / "logs"
        slurm_conf = (tree / "etc/slurm/slurm.conf").read_text() if (tree / "etc/slurm/slurm.conf").exists() else ""
        if not slurm_conf:
            raise ClusterError(f"{tree}/etc/slurm/slurm.conf: missing; fix: pass the rendered OUT/slurm folder")
        self.slurm_conf = slurm_conf
        self.cluster_name = conf_value(slurm_conf, "ClusterName") or "cluster"
        self.accounting = (conf_value(slurm_conf, "AccountingStorageType") or "").endswith("/slurmdbd")
        self.configless = "enable_configless" in (conf_value(slurm_conf, "SlurmctldParameters") or "")
        roles = [n.role for n in nodes]
        if roles.count("controller") != 1 or "compute" not in roles:
            raise ClusterError("the live cluster needs exactly one controller node and at least one compute node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ClusterError(f"node names repeat: {names}")
        self.cluster = LiveCluster(
            nodes=self.nodes, conf_dir=workdir / "conf" / "etc" / "slurm", workdir=workdir, cluster_id=self.id,
            cluster_name=self.cluster_name, accounting=self.accounting, configless=self.configless,
        )

    # ---- layout ---------------------------------------------------------------------------------------------
    def prepare(self, munge_key: bytes) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.tree / "etc" / "slurm", self.cluster.conf_dir, symlinks=True, dirs_exist_ok=True)
        hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + "".join(
            f"{n.address}\t{n.name}\n" for n in self.nodes)
        for node in self.nodes:
            root = self.workdir / "nodes" / node.name
            root.mkdir(parents=True)
            self.cluster._state[node.name] = _NodeState(node=node, root=root)
            for folder, owner, mode in NODE_DIRS.values():
                (root / folder).mkdir()
                _owner(root / folder, owner, mode)
            for sub, owner, mode in (("var-log/slurm", "slurm", 0o755), ("var-log/munge", "munge", 0o700),
                                     ("run/munge", "munge", 0o755), ("var-spool/slurmd", "root", 0o755),
                                     ("var-spool/slurmctld", "slurm", 0o700)):
                (root / sub).mkdir()
                _owner(root / sub, owner, mode)
            if node.role == "controller" and self.accounting:
                for sub, owner, mode in (("var-lib-mysql", "mysql", 0o755), ("var-log/mysql", "mysql", 0o750),
                                         ("run/mysqld", "mysql", 0o755)):
                    (root / sub).mkdir()
                    _owner(root / sub, owner, mode)
            etc = root / "etc"
            for sub in ("etc", "etc-work", "etc/slurm", "etc/munge", "dev"):
                (root / sub).mkdir(exist_ok=True)
            (etc / "hosts").write_text(hosts)
            (etc / "hostname").write_text(node.name + "\n")
            _owner(etc / "munge", "munge", 0o700)
            (etc / "munge" / "munge.key").write_bytes(munge_key)
            _owner(etc / "munge" / "munge.key", "munge", 0o400)
            files = _node_files(self.tree, node, self.configless) | _role_files(self.role_trees, node)
            for node_path, src in files.items():
                top = _overlay_dir(node_path)
                folder = "etc" if top == "/etc" else "usr-" + top.removeprefix("/usr/")
                _copy_mode(src, root / folder / node_path.removeprefix(top + "/"))
            if self.configless and node.role == "compute" and not (etc / "default" / "slurmd").exists():
                raise ClusterError(f"node {node.name}: configless, but no /etc/default/slurmd with SLURMD_OPTIONS="
                                   "--conf-server; fix: pass the slurm_node role's files (blueprint_cluster does)")
            if node.gpus:  # the driver's tool, standing in like the device files
                smi = root / "usr-bin" / "nvidia-smi"
                smi.parent.mkdir(exist_ok=True)
                # the recording goes inside the script: the node's /tmp is private, and a clone under /tmp (CI)
                # would leave a path to it unreadable on the node
                smi.write_text(NVIDIA_SMI.replace("@XML@", repr(SMI_RECORDING.read_text())))
                smi.chmod(0o755)
            dbd = etc / "slurm" / "slurmdbd.conf"
            if dbd.exists():
                _owner(dbd, "slurm", 0o600)  # the slurm_dbd role's mode (contract); slurmdbd refuses other modes

    def _cgroup_dirs(self, node: str | None = None) -> list[Path]:
        dirs = []
        for mountpoint, _fs, _opts in self.mounts:
            base = Path(mountpoint) / self.cgroup_base
            dirs.append(base / node if node else base)
        return dirs

    def make_cgroups(self) -> None:
        for mountpoint, _fs, opts in self.mounts:
            base = Path(mountpoint) / self.cgroup_base
            for d in [base] + [base / n.name for n in self.nodes]:
                d.mkdir()
                if "cpuset" in opts.split(","):
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        (d / f).write_text((d.parent / f).read_text())

    def setup_script(self, st: _NodeState) -> str:
        """What the namespace holder runs inside its new namespaces before it sleeps."""
        r = st.root
        q = shlex.quote
        lines = ["set -eu", f"hostname {q(st.node.name)}",
                 "mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup_root /sys/fs/cgroup"]
        for mountpoint, fs, opts in self.mounts:
            lines.append(f"mkdir -p {q(mountpoint)}")
            lines.append(f"mount -t {fs} {'-o ' + q(opts) + ' ' if opts else ''}{fs} {q(mountpoint)}")
        lines += [
            f"mount -t overlay cf-etc -o lowerdir=/etc,upperdir={q(str(r / 'etc'))},workdir={q(str(r / 'etc-work'))} /etc",
            f"mount --bind {q(str(r / 'etc/slurm'))} /etc/slurm",
            f"mount --bind {q(str(r / 'etc/munge'))} /etc/munge",
        ]
        for layer in sorted(r.glob("usr-*")):  # the node's programs over /usr/<dir>, read-only
            target = "/usr/" + layer.name.removeprefix("usr-")
            lines.append(f"mount -t overlay cf-usr -o lowerdir={q(str(layer))}:{target} {target}")
        # private /dev: a tmpfs with the host's harmless character devices, a devpts and /dev/shm of its own,
        # and the fake GPUs
        dev = q(str(r / "dev"))
        lines += [f"mount -t tmpfs -o mode=755,nosuid,size=1m cf-dev {dev}"]
        for name in ("null", "zero", "full", "random", "urandom", "tty"):
            lines += [f"touch {dev}/{name}", f"mount --bind /dev/{name} {dev}/{name}"]
        lines += [
            f"mkdir {dev}/pts {dev}/shm",
            f"mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts {dev}/pts",
            f"ln -s pts/ptmx {dev}/ptmx",
            f"mount -t tmpfs -o mode=1777,nosuid,nodev shm {dev}/shm",
            f"ln -s /proc/self/fd {dev}/fd",
            f"ln -s /proc/self/fd/0 {dev}/stdin", f"ln -s /proc/self/fd/1 {dev}/stdout",
            f"ln -s /proc/self/fd/2 {dev}/stderr",
        ]
        for i in range(st.node.gpus):
            lines += [f"mknod -m 666 {dev}/nvidia{i} c {NVIDIA_MAJOR} {i}"]
        if st.node.gpus:
            lines += [f"mknod -m 666 {dev}/nvidiactl c {NVIDIA_MAJOR} 255"]
        lines.append(f"mount --move {dev} /dev")
        for mount, (folder, _, _) in NODE_DIRS.items():
            if mount != "/tmp":
                lines.append(f"mount --bind {q(str(r / folder))} {mount}")
        if st.node.role == "controller" and self.accounting:
            lines.append(f"mount --bind {q(str(r / 'var-lib-mysql'))} /var/lib/mysql")
        for keep in _kept_under_tmp():  # the repository and its venv stay reachable when a clone lies under /tmp
            inside = r / "tmp" / keep.relative_to("/tmp")
            lines += [f"mkdir -p {q(str(inside))}", f"mount --bind {q(str(keep))} {q(str(inside))}"]
        # last: the node's folders may lie under /tmp; --rbind brings the kept folders bound inside it
        lines.append(f"mount --rbind {q(str(r / 'tmp'))} /tmp")
        lines += ["echo ready", "exec sleep infinity"]
        return "\n".join(lines) + "\n"

    def start_holders(self) -> None:
        net = ipaddress.ip_network(f"{self.cluster.controller.address}/{self.prefix}", strict=False)
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True, capture_output=True)
        for st in self.cluster._state.values():
            if ipaddress.ip_address(st.node.address) not in net:
                raise ClusterError(f"node {st.node.name}: {st.node.address} is not in {net} (the controller's network)")
            script = st.root / "holder.sh"
            script.write_text(self.setup_script(st))
            procs = " ".join(shlex.quote(str(d / "cgroup.procs")) for d in self._cgroup_dirs(st.node.name))
            cmd = (f"for f in {procs}; do echo $$ > \"$f\"; done; exec unshare --net --uts --mount --cgroup "
                   f"--propagation private /bin/sh {shlex.quote(str(script))}")
            err = open(self.logs / f"{st.node.name}-holder.err", "wb")  # noqa: SIM115 (closed by the child's exit)
            st.holder = subprocess.Popen(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            err.close()
        (self.workdir / "cluster.json").write_text(json.dumps({
            "id": self.id, "bridge": self.bridge, "cgroup": self.cgroup_base,
            "holders": [st.holder.pid for st in self.cluster._state.values() if st.holder]}))
        for i, st in enumerate(self.cluster._state.values()):
            assert st.holder is not None and st.holder.stdout is not None
            ready, _, _ = select.select([st.holder.stdout], [], [], 20)
            line = st.holder.stdout.readline() if ready else b""
            if line.strip() != b"ready":
                raise ClusterError(f"node {st.node.name}: namespace setup failed: "
                                   f"{(self.logs / f'{st.node.name}-holder.err').read_text()[-2000:]}")
            pid = str(st.holder.pid)
            veth = f"cfv{self.id}{i:x}"
            for argv in (["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pid],
                         ["ip", "link", "set", veth, "master", self.bridge, "up"],
                         ["nsenter", "-t", pid, "--net", "ip", "addr", "add", f"{st.node.address}/{self.prefix}",
                          "dev", "eth0"],
                         ["nsenter", "-t", pid, "--net", "ip", "link", "set", "eth0", "up"],
                         ["nsenter", "-t", pid, "--net", "ip", "link", "set", "lo", "up"]):
                res = subprocess.run(argv, capture_output=True, text=True, check=False)
                if res.returncode:
                    raise ClusterError(f"node {st.node.name}: {_sh(argv)}: {res.stderr.strip()}")

    # ---- daemons --------------------------------------------------------------------------------------------
    def daemon(self, node: str, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{node}-{name}.out", "wb")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(self.cluster.nsenter_argv(node, argv), env=_node_env(None), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.cluster._state[node].daemons[name] = proc
        return proc

    def check_alive(self, node: str, name: str) -> None:
        proc = self.cluster._state[node].daemons[name]
        if proc.poll() is not None:
            out = (self.logs / f"{node}-{name}.out").read_text(errors="replace")[-1500:]
            log = self.cluster.log(node, f"slurm/{name}.log")[-1500:] if name.startswith("slurm") else ""
            raise ClusterError(f"node {node}: {name} exited with {proc.returncode}: {out}{log}")

    def wait(self, what: str, node: str, daemon: str, predicate, timeout: float = 30):  # type: ignore[no-untyped-def]
        def alive_and():  # type: ignore[no-untyped-def]
            self.check_alive(node, daemon)
            return predicate()
        return self.cluster.wait_for(what, alive_and, timeout=timeout)

    def start_munge(self) -> None:
        # munge.service: User=munge, RuntimeDirectory=munge, ExecStart=/usr/sbin/munged $OPTIONS (forking);
        # -F keeps it in the foreground so its pid is ours to stop
        for n in self.nodes:
            self.daemon(n.name, "munged", ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                                           "/usr/sbin/munged", "-F"])
        for n in self.nodes:
            sock = self.cluster.host_path(n.name, "/run/munge/munge.socket.2")
            self.wait(f"munged on {n.name}", n.name, "munged", sock.exists, timeout=20)

    def start_accounting(self) -> None:
        ctl = self.cluster.controller.name
        dbd_conf = self.cluster._state[ctl].root / "etc" / "slurm" / "slurmdbd.conf"
        if not dbd_conf.exists():
            raise ClusterError(f"{self.tree}/etc/slurm/slurmdbd.conf: missing while slurm.conf stores accounting "
                               "in slurmdbd; fix: render slurmdbd.conf")
        text = dbd_conf.read_text()
        db = conf_value(text, "StorageLoc") or "slurm_acct_db"
        user = conf_value(text, "StorageUser") or "slurm"
        host = conf_value(text, "StorageHost") or "localhost"
        if host not in ("localhost", "127.0.0.1", ctl, self.cluster.controller.address):
            raise ClusterError(f"slurmdbd.conf StorageHost={host}: the live cluster runs MariaDB on the controller")
        run = self.cluster.run_on
        res = run(ctl, ["mariadb-install-db", "--user=mysql", "--datadir=/var/lib/mysql", "--skip-test-db",
                        "--auth-root-authentication-method=socket"], timeout=120)
        if res.returncode:
            raise ClusterError(f"mariadb-install-db on {ctl}: {res.stdout[-1000:]}{res.stderr[-1000:]}")
        # mariadb.service with Debian's /etc/mysql/mariadb.conf.d/50-server.cnf paths, nothing read from the host
        self.daemon(ctl, "mariadbd", ["mariadbd", "--no-defaults", "--user=mysql", "--datadir=/var/lib/mysql",
                                      "--socket=/run/mysqld/mysqld.sock", "--pid-file=/run/mysqld/mysqld.pid",
                                      "--port=3306", "--bind-address=127.0.0.1", "--skip-name-resolve",
                                      "--log-error=/var/log/mysql/error.log", *MARIADB_SETTINGS])
        self.wait("MariaDB", ctl, "mariadbd",
                  lambda: run(ctl, ["mariadb", "-u", "root", "-e", "select 1"], timeout=10).returncode == 0, 60)
        # what the slurm_dbd role does: a database, its user with a generated password, StoragePass appended
        password = secrets.token_urlsafe(18)
        sql = (f"CREATE DATABASE IF NOT EXISTS `{db}`;\n"
               + "".join(f"CREATE USER '{user}'@'{h}' IDENTIFIED BY '{password}';\n"
                         f"GRANT ALL ON `{db}`.* TO '{user}'@'{h}';\n" for h in ("localhost", "127.0.0.1")))
        res = run(ctl, ["mariadb", "-u", "root"], input=sql, timeout=30)
        if res.returncode:
            raise ClusterError(f"creating the accounting database on {ctl} failed: {res.stderr[-500:]}")
        with dbd_conf.open("a") as f:
            f.write(("" if text.endswith("\n") else "\n") + f"StoragePass={password}\n")
        self.daemon(ctl, "slurmdbd", _unit("slurmdbd"))
        self.wait("slurmdbd", ctl, "slurmdbd",
                  lambda: run(ctl, ["sacctmgr", "-n", "-P", "list", "cluster"], timeout=10).returncode == 0, 60)
        # registered before slurmctld starts (slurm.md §4 step 8; PC#6398: "cluster with no remote port")
        res = run(ctl, ["sacctmgr", "-i", "add", "cluster", self.cluster_name], timeout=30)
        if res.returncode:
            raise ClusterError(f"sacctmgr add cluster {self.cluster_name}: {res.stdout}{res.stderr}")

    def start_slurm(self) -> None:
        ctl = self.cluster.controller.name
        t0 = time.monotonic()
        self.daemon(ctl, "slurmctld", _unit("slurmctld"))
        for n in self.cluster.compute:
            self.daemon(n.name, "slurmd", _unit("slurmd"))
        want = {n.name for n in self.cluster.compute}

        def all_idle() -> bool:
            for n in self.cluster.compute:
                self.check_alive(n.name, "slurmd")
            self.check_alive(ctl, "slurmctld")
            res = self.cluster.run_on(ctl, ["sinfo", "-N", "-h", "-o", "%N %T"], timeout=15)
            states = dict(ln.split(None, 1) for ln in res.stdout.splitlines() if ln.strip())
            refused = sorted(n for n in want if states.get(n, "").startswith(("inval", "drain")))
            # slurmctld will not take refused nodes back by itself: no point waiting once every node has registered
            # (a node still `unknown` may yet be refused too: the message names all of them)
            registering = [n for n in want if states.get(n, "unknown").startswith("unknown")]
            if refused and not registering:
                raise ClusterError(f"slurmctld refused {', '.join(refused)} before every compute node was idle")
            return res.returncode == 0 and all(states.get(n) == "idle" for n in want)

        try:
            self.cluster.wait_for("every compute node idle", all_idle, timeout=self.up_timeout, interval=0.1)
        except ClusterError as exc:
            detail = self.cluster.run_on(ctl, ["sinfo", "-N", "-h", "-o", "%N %T %E"], timeout=15).stdout
            tails = "".join(f"\n--- {n.name} slurmd.log\n" + self.cluster.log(n.name, "slurm/slurmd.log")[-800:]
                            for n in self.cluster.compute)
            raise ClusterError(f"{exc}\n--- sinfo -N -o '%N %T %E'\n{detail}"
                               "--- slurmctld.log\n"
                               f"{self.cluster.log(ctl, 'slurm/slurmctld.log')[-800:]}{tails}") from None
        self.cluster.seconds_to_idle = time.monotonic() - t0

    # ---- teardown -------------------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop everything this cluster started; returns what could not be removed (empty when clean)."""
        problems: list[str] = []
        states = list(self.cluster._state.values())
        order = [("slurmd", 10), ("slurmctld", 10), ("slurmdbd", 10), ("mariadbd", 30), ("munged", 5)]
        for name, grace in order:
            procs = [st.daemons[name] for st in states if name in st.daemons]
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(grace)
                except subprocess.TimeoutExpired:  # e.g. a slurmd sleeping between prolog-complete retries
                    p.kill()
                    p.wait(5)
        # whatever is left in a node's cgroups (job steps, holders, stray clients) is killed by pid
        for _ in range(50):
            pids = self._cgroup_pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for st in states:
            if st.holder is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    st.holder.wait(10)
                if st.holder.stdout is not None:
                    st.holder.stdout.close()
        for d in self._cgroup_dirs():
            if d.exists():
                for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [d]:
                    for _ in range(50):
                        try:
                            sub.rmdir()
                            break
                        except FileNotFoundError:
                            break
                        except OSError:
                            time.sleep(0.1)
                    else:
                        problems.append(f"cgroup {sub} could not be removed")
        if Path(f"/sys/class/net/{self.bridge}").exists():
            res = subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, text=True, check=False)
            if res.returncode:
                problems.append(f"bridge {self.bridge}: {res.stderr.strip()}")
        return problems

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for d in self._cgroup_dirs():
            if d.exists():
                for procs in d.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids.update(int(x) for x in procs.read_text().split())
        return pids


@contextlib.contextmanager
def start_cluster(
    tree: Path,
    nodes: Sequence[SlurmNode],
    workdir: Path,
    *,
    role_trees: Mapping[str, Path] | None = None,
    prefix: int = 24,
    up_timeout: float = 60,
) -> Iterator[LiveCluster]:
    """Start the cluster whose rendered files are ``tree`` (``OUT/slurm``: paths mirror a node's, e.g.
    ``tree/etc/slurm/slurm.conf``) on ``nodes``; yield it once every compute node is ``idle``; stop it.

    ``role_trees``: role (``controller`` / ``compute`` / ``login``) → a folder of the roles' own files for nodes of
    that role, mirroring node paths like ``tree`` (the health program and its expectations, prolog / epilog runners):
    the files the Slurm roles write beside the rendered ones. Files go under ``/etc`` or ``/usr/<dir>`` only.
    ``workdir`` (an empty folder) receives the daemons' output and each node's private folders; it is kept for
    reading after the cluster stops. Raises ClusterError (one message naming the step and the logs) when the
    cluster does not come up, and after a stop that left processes, cgroups or links behind.
    """
    reason = missing_prerequisites(accounting=False)
    if reason:
        raise ClusterError(reason)
    t0 = time.monotonic()
    starter = _Starter(Path(tree), nodes, Path(workdir), prefix, up_timeout, role_trees or {})
    if starter.accounting and (reason := missing_prerequisites(accounting=True)):
        raise ClusterError(reason)
    leftovers: list[str] = []
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # `timeout` and CI runners stop pytest with SIGTERM, which would skip this finally: stop the cluster first
        def terminated(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, terminated)
    try:
        starter.prepare(os.urandom(1024))  # contract: 1024 random bytes, one key for every node
        starter.make_cgroups()
        starter.start_holders()
        starter.start_munge()
        if starter.accounting:
            starter.start_accounting()
        starter.start_slurm()
        starter.cluster.seconds_up = time.monotonic() - t0
        yield starter.cluster
    finally:
        leftovers = starter.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if leftovers:
        raise ClusterError("the live cluster did not stop cleanly: " + "; ".join(leftovers))


@dataclass(frozen=True)
class BlueprintCluster:
    """What :func:`start_cluster` needs for a blueprint: the rendered ``tree`` (``OUT/slurm``), the ``nodes`` (from
    the node groups; compute nodes with the blueprint's GPUs as fake devices) and the ``role_trees`` (the files the
    Slurm roles write beside the rendered ones, from the role variables and templates)."""

    tree: Path
    nodes: tuple[SlurmNode, ...]
    role_trees: Mapping[str, Path]


def blueprint_cluster(text: str, out: Path, *, gpus: Mapping[str, int] | None = None) -> BlueprintCluster:
    """Render blueprint YAML ``text`` into ``out`` as ``clusterforge render`` does (``out/slurm``) and add what the
    roles write on each kind of node (``out/roles/<role>``): on compute nodes the slurm_node role's
    ``/etc/default/slurmd``, prolog / epilog runners and hooks, health program and its expectations, rendered from
    ``blueprints.role_vars.node_role_vars`` with the role's own templates. ``gpus``: node → how many GPU device
    files that node really has (default: the blueprint's count)."""
    from blueprints.loader import parse_blueprint
    from blueprints.role_templates import render_role_template
    from blueprints.role_vars import node_role_vars
    from clusterforge.commands.render import render_slurm

    loaded = parse_blueprint(text, "blueprint.yaml")
    tree = out / "slurm"
    if not render_slurm(loaded, tree):
        raise ClusterError("the blueprint rendered no Slurm files; fix: orchestrator: {kind: slurm}")
    resolved = loaded.cluster
    settings = resolved.slurm
    assert settings is not None
    nodes: list[SlurmNode] = []
    for g in loaded.blueprint.node_groups:
        if g.role in ("controller", "login"):
            nodes += [SlurmNode(h.name, h.address, g.role) for h in g.hosts]  # type: ignore[arg-type]
    for n in settings.nodes:
        if n.address is None:
            raise ClusterError(f"node {n.name}: no address; fix: give every host an address (on-prem blueprint)")
        nodes.append(SlurmNode(n.name, n.address, "compute", (gpus or {}).get(n.name, n.gpus)))
    role_trees: dict[str, Path] = {}
    groups = set(settings.compute_groups)
    if len(groups) != 1:
        raise ClusterError("the live cluster renders the slurm_node role's files for one compute group")
    variables = node_role_vars(resolved.settings(next(iter(groups))), "slurm_node")
    node_tree = role_trees["compute"] = out / "roles" / "slurm_node"
    templates = Path(__file__).resolve().parents[2] / "roles" / "slurm_node" / "templates"

    def put(path: str, text: str, mode: int) -> None:
        dest = node_tree / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        dest.chmod(mode)

    for path, body in variables["slurm_node_files"].items():
        put(path, body, 0o644)
    put("/etc/default/slurmd", render_role_template("slurm_node", "slurmd-default.j2", variables), 0o644)
    for kind in ("prolog", "epilog"):
        put(f"/etc/slurm/{kind}.sh", render_role_template("slurm_node", f"{kind}.sh.j2", variables), 0o755)
        for t in sorted((templates / f"{kind}.d").glob("*.j2")):
            put(f"/etc/slurm/{kind}.d/{t.name.removesuffix('.j2')}",
                render_role_template("slurm_node", f"{kind}.d/{t.name}", variables), 0o755)
    program = templates.parent / "files" / "clusterforge-slurm-health"
    put("/usr/sbin/clusterforge-slurm-health", program.read_text(), 0o755)
    put("/etc/clusterforge/slurm-health.json",
        json.dumps(variables["slurm_node_health"], indent=2, sort_keys=True) + "\n", 0o644)
    return BlueprintCluster(tree, tuple(nodes), role_trees)


__all__ = [
    "ACCOUNTING_PROGRAMS", "CONFIGLESS_FILES", "PROGRAMS", "BlueprintCluster", "ClusterError", "LiveCluster",
    "SlurmNode", "blueprint_cluster",
    "cgroup_mounts", "conf_value", "missing_prerequisites", "start_cluster",
]
