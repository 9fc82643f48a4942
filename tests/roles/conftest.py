"""Fixtures for the real Ansible converges: a cached Debian 12 root filesystem and per-example runs.

The root filesystem is built ONCE per machine with debootstrap (minbase + python3, python3-apt, systemd,
ca-certificates) under ``~/.cache/clusterforge-tests/debian-12-<hash>/root`` (:data:`CACHE`) and reused by later test
runs and other checkouts; the hash covers the package list, the mirror and this recipe. A file lock keeps pytest-xdist workers
from building it twice. Every converge works on its own copy, reached through the
``community.general.chroot`` connection, so tests never see each other's changes: an overlay mount of the cached root
(its writes go to the copy's own upper layer beside it; :func:`copy_rootfs`), or a ``cp -a`` copy where overlay
mounts are refused.

Converges are shared by the xdist workers of a run (see :class:`ConvergeCache`): each example is
converged once per run whichever worker gets to it first.

Downloaded ``.deb`` files are kept in ``~/.cache/clusterforge-tests/apt-archives`` and hard-linked into each copy
before a converge (and harvested after it), so only the first converge on a machine downloads the
small Debian packages the roles install (rdma-core, perftest, mdadm, xfsprogs, fio, containerd ...).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from tests.conftest import EXAMPLES, REPO

from .vendor_repo import VendorMirror, build_mirror

SUITE = "bookworm"
MIRROR = os.environ.get("CLUSTERFORGE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
INCLUDE = ("python3", "python3-apt", "systemd", "systemd-sysv", "ca-certificates")
RECIPE_VERSION = "1"

def _machine_cache() -> Path:
    """Where the content-keyed, build-once artefacts live: ``$CLUSTERFORGE_ROOTFS_CACHE``, else
    ``$XDG_CACHE_HOME/clusterforge-tests`` (``~/.cache/clusterforge-tests``), shared by every checkout on the machine
    as pip's cache is. Each entry's name carries the hash of what it was built from, so a checkout never reuses an
    entry built from other sources."""
    explicit = os.environ.get("CLUSTERFORGE_ROOTFS_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "clusterforge-tests"


CACHE = _machine_cache()
"""The machine-wide cache: the debootstrap root filesystem, the harvested ``.deb`` files, the stand-in vendor mirror."""
RUNS = REPO / ".cache" / "rootfs" / "converge"
"""This checkout's converge copies, one folder per pytest run (never shared between checkouts: a run removes the
copies of this checkout's finished runs)."""

VENDOR_OFF: dict[str, object] = {}
"""Extra vars of the real converge: vendor installs that have no stand-in repository (none left: DOCA-OFED
is not declared by any example)."""

GPU_EXAMPLES = ["onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata"]
"""Examples whose NVIDIA driver, container toolkit and sandbox installs run for real against the stand-ins."""

CONVERGES = [
    ("onprem-dgx-h100-ib", "ubuntu-22.04"),
    ("onprem-l40s-roce", "ubuntu-24.04"),
    ("onprem-sandbox-kata", "ubuntu-24.04"),
    ("onprem-dgx-h100-ib", "debian-12"),
    ("onprem-l40s-roce", "debian-12"),
    ("onprem-sandbox-kata", "debian-12"),
    ("local-workstation", "debian-12"),
]
"""(example, operating system) pairs converged: every GPU example on its declared Ubuntu release and on Debian 12
(the blueprint's ``target.os`` rewritten), and the workstation on Debian 12.

The roles select OS-specific task files and variables from Ansible's facts (the CUDA repository's ``ubuntu2x04`` /
``debian12`` distribution, the kernel headers meta-package of the distribution's image flavour; ``rdma``'s netplan or
ifupdown IPoIB configuration), so each GPU example's
vendor installs (driver stack, Container Toolkit, Kata / runsc), RoCE QoS and sandbox runtimes run on both
families. Ordered so round-robin over workers balances time."""

UBUNTU = {
    "ubuntu-22.04": ("22.04", "jammy", "Ubuntu 22.04.5 LTS"),
    "ubuntu-24.04": ("24.04", "noble", "Ubuntu 24.04.3 LTS"),
}
"""Ubuntu releases the roles claim: VERSION_ID, codename, PRETTY_NAME written into the Ubuntu-shaped roots."""


def converge_id(example: str, os_name: str) -> str:
    """Cache and test id of one converge, e.g. ``onprem-dgx-h100-ib@ubuntu-22.04``."""
    return f"{example}@{os_name}"


def shape_as(root: Path, os_name: str) -> None:
    """Make the Debian root filesystem ``root`` report ``os_name`` to Ansible's facts.

    For Ubuntu releases ``/etc/os-release``, ``/usr/lib/os-release`` and ``/etc/lsb-release`` say Ubuntu, so the
    roles select their Ubuntu task files and variables; apt still reads Debian's archive plus the stand-ins (which
    carry the Ubuntu-only packages the roles install). ``debian-12`` leaves the root as it is.
    """
    if os_name not in UBUNTU:
        return
    version, codename, pretty = UBUNTU[os_name]
    os_release = (f'PRETTY_NAME="{pretty}"\nNAME="Ubuntu"\nVERSION_ID="{version}"\nVERSION="{pretty[7:]}"\n'
                  f"VERSION_CODENAME={codename}\nID=ubuntu\nID_LIKE=debian\nUBUNTU_CODENAME={codename}\n")
    for rel in ("etc/os-release", "usr/lib/os-release"):
        p = root / rel
        if p.is_symlink():
            p.unlink()
        p.write_text(os_release)
    (root / "etc/lsb-release").write_text(f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={version}\nDISTRIB_CODENAME={codename}\n"
                                          f'DISTRIB_DESCRIPTION="{pretty}"\n')
    (root / "etc/debian_version").write_text("bookworm/sid\n")


def use_standin_archive(root: Path, mirror: VendorMirror, tree: str, os_name: str) -> None:
    """Point the root's apt at the stand-in archive ``<tree>/<os_name>/`` of ``mirror`` (a flat signed repository:
    ``ubuntu`` the Ubuntu archive's NVIDIA packages, ``ubuntu-base`` the general packages Debian's archive lacks),
    as a Ubuntu host has its archive configured already."""
    (root / "etc/apt/keyrings").mkdir(parents=True, exist_ok=True)
    (root / f"etc/apt/keyrings/{tree}-standin.asc").write_text((mirror.root / tree / os_name / "archive.asc").read_text())
    (root / f"etc/apt/sources.list.d/{tree}-standin.sources").write_text(
        f"Types: deb\nURIs: {mirror.base_url}/{tree}/{os_name}/\nSuites: /\n"
        f"Signed-By: /etc/apt/keyrings/{tree}-standin.asc\n")


def prepare_roots(work: Path, hosts: list[str], os_name: str, mirror: VendorMirror, *,
                  module_owned: bool = True) -> dict[str, Path]:
    """One private root filesystem per host under ``work/root-<host>``, shaped as ``os_name``: a Ubuntu-shaped root
    also gets the stand-in for the Ubuntu archive packages Debian's lacks (a Ubuntu host has its archive configured).
    What the converge tests and ``bench/bench_ansible.py`` converge against. ``module_owned=False`` for copies that
    outlive the test module (the run's shared converges, see :func:`copy_rootfs`)."""
    roots = {host: copy_rootfs(work / f"root-{host}", module_owned=module_owned) for host in hosts}
    for r in roots.values():
        shape_as(r, os_name)
        if os_name in UBUNTU:
            use_standin_archive(r, mirror, "ubuntu-base", os_name)
    return roots


def rewritten_files(summary: dict[str, Any]) -> list[str]:
    """``host: role : task`` of each file-writing task (copy, template) that ran in the run ``summary`` describes
    instead of being skipped. Every file a role writes is probed first (one stat and hash per file, issue 28), so on a
    rerun each write is skipped; one that still runs compares its probe with something else than what lands on disk
    (e.g. ``copy: content:`` of a JSON-looking string, which Ansible turns into a dict and writes compact)."""
    return [f"{r['host']}: {r['role']} : {r['task']}" for r in summary["results"]
            if r["status"] == "ok" and r["action"].rsplit(".", 1)[-1] in ("copy", "template")]


def role_failures(root: Path, tmp: Path, role: str, tags: str, extravars: dict[str, Any]) -> list[str]:
    """Run ``role`` (with ``tags``) against the root filesystem ``root`` through the chroot connection, facts
    gathered; returns the failure messages (one line each). Asserts that the playbook ran."""
    return role_run(root, tmp, role, tags, extravars)[0]


def role_run(root: Path, tmp: Path, role: str, tags: str,
             extravars: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """:func:`role_failures` plus what each task did: ``(failures, [(task name, status)])`` in run order, status
    one of ``ok``, ``changed``, ``skipped``, ``failed`` (a looped task: its last item's)."""
    import ansible_runner

    from clusterforge.ansible.render import ROLES_DIR
    from clusterforge.ansible.runner import ansible_path

    tmp.mkdir(parents=True, exist_ok=True)
    play = [{"name": f"Run {role}.", "hosts": "target", "gather_facts": True, "roles": [{"role": role}]}]
    r = ansible_runner.run(
        private_data_dir=str(tmp), playbook=play, quiet=True, tags=tags, extravars=extravars,
        inventory={"all": {"hosts": {"target": {"ansible_connection": "community.general.chroot",
                                                "ansible_host": str(root), "ansible_python_interpreter": "/usr/bin/python3"}}}},
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES_DIR), "ANSIBLE_NOCOLOR": "1", "PATH": ansible_path()},
        suppress_env_files=True,
    )
    events = list(r.events)
    assert any(e["event"] == "playbook_on_stats" for e in events), "the playbook ran"
    failures = [" ".join(str((e.get("event_data") or {}).get("res", {}).get("msg", "")).split())
                for e in events if e["event"] == "runner_on_failed"]
    tasks = []
    for e in events:
        kind = e["event"]
        if kind in ("runner_on_ok", "runner_on_skipped", "runner_on_failed"):
            d = e.get("event_data") or {}
            status = {"runner_on_skipped": "skipped", "runner_on_failed": "failed"}.get(kind) or (
                "changed" if (d.get("res") or {}).get("changed") else "ok")
            tasks.append((str(d.get("task", "")), status))
    return failures, tasks


def blueprint_for(example: str, os_name: str, work: Path, lustre_repo: dict[str, str] | None = None) -> Path:
    """The example blueprint as converged on ``os_name``: ``target.os`` set to it and, when ``lustre_repo`` is
    given and the example mounts a Lustre server, ``software.lustre_client_repos`` naming that repository (the
    stand-in site repository) for ``os_name`` instead of the example's site URLs. A copy under ``work`` when it
    differs from the example."""
    src = EXAMPLES / f"{example}.yaml"
    data = yaml.safe_load(src.read_text())
    target = data["target"]
    changed = target.get("os", "ubuntu-22.04") != os_name
    target["os"] = os_name
    if lustre_repo and any(s.get("kind") == "lustre" and s.get("server") for s in data.get("storage") or []):
        data.setdefault("software", {})["lustre_client_repos"] = {os_name: dict(lustre_repo)}
        changed = True
    if not changed:
        return src
    dest = work / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def dgx_variant(tmp: Path, name: str, os_name: str, *, gpu: str | None = None, gpudirect_rdma: str | None = None,
                **software: Any) -> Path:
    """The DGX example (``onprem-dgx-h100-ib.yaml``) edited as a user would, written to ``tmp/<name>.yaml``.

    ``target.os`` becomes ``os_name`` (with a ``software.lustre_client_repos`` entry for it, as the site would
    add); ``gpu`` replaces the ``dgx`` node group's ``hardware.gpu``, ``gpudirect_rdma``
    the ``network.gpudirect_rdma.method``, and each keyword sets ``software.<keyword>`` (``None`` leaves a field as
    the example has it). Comments and order are kept (ruamel round trip), so the variant reads like the example.
    """
    yaml = YAML()
    doc = yaml.load((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    doc["target"]["os"] = os_name
    repos = doc["software"].get("lustre_client_repos") or {}
    if repos and os_name not in repos:  # the site's Lustre client build for the new OS, beside the example's
        first = dict(next(iter(repos.values())))
        dist = os_name.replace("-", "").replace(".", "")  # Whamcloud's directory names: ubuntu2404, debian12
        repos[os_name] = {**first, "url": first["url"].rstrip("/").rsplit("/", 1)[0] + f"/{dist}/"}
    if gpu is not None:
        next(g for g in doc["node_groups"] if g["name"] == "dgx")["hardware"]["gpu"] = gpu
    if gpudirect_rdma is not None:
        doc["network"]["gpudirect_rdma"]["method"] = gpudirect_rdma
    for key, value in software.items():
        if value is not None:
            doc["software"][key] = value
    buf = io.StringIO()
    yaml.dump(doc, buf)
    path = tmp / f"{name}.yaml"
    path.write_text(buf.getvalue())
    return path


def dpkg_packages(root: Path) -> dict[str, tuple[str, str, str]]:
    """``{package: (version, want, status)}`` of every package dpkg knows in the root filesystem ``root``.

    ``want`` is the selection (``install``, ``hold``, ``deinstall``, ``purge``, ``unknown``), ``status`` dpkg's
    state (``installed``, ``unpacked``, ``half-configured``, ``config-files`` ...), or ``reinstreq`` when dpkg marked
    the package as needing a reinstall. Read with ``dpkg-query`` inside the chroot.
    """
    fmt = "-f=${Package} ${Version} ${db:Status-Want} ${db:Status-Eflag} ${db:Status-Status}\n"
    out = _run(["chroot", str(root), "dpkg-query", "-W", fmt]).stdout
    return {p: (v, want, status if eflag == "ok" else eflag)
            for p, v, want, eflag, status in (line.split() for line in out.splitlines())}


def installed_packages(root: Path) -> dict[str, tuple[str, str]]:
    """``{package: (version, selection)}`` of the fully installed packages in ``root`` (selection ``install`` or
    ``hold``); see :func:`dpkg_packages`."""
    return {p: (v, want) for p, (v, want, status) in dpkg_packages(root).items() if status == "installed"}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def rootfs_key() -> str:
    """Cache key of the root filesystem: suite, mirror, package list and recipe version."""
    text = "|".join([SUITE, MIRROR, ",".join(INCLUDE), RECIPE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def build_rootfs() -> Path:
    """The cached Debian 12 root filesystem (built on first use); returns its ``root`` directory."""
    base = CACHE / f"debian-12-{rootfs_key()}"
    root = base / "root"
    with _locked(CACHE / "build.lock"):
        if (base / "ready").exists():
            return root
        if shutil.which("debootstrap") is None:
            pytest.fail("debootstrap is not installed: `apt-get install debootstrap` (.ci/run installs it)")
        tmp = base.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE, str(tmp / "root"), MIRROR])
        except subprocess.CalledProcessError as e:
            pytest.fail(f"debootstrap failed: {(e.stderr or e.stdout)[-2000:]}")
        r = tmp / "root"
        # An image build never starts services: invoke-rc.d asks policy-rc.d, which says no.
        (r / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
        (r / "usr/sbin/policy-rc.d").chmod(0o755)
        _run(["chroot", str(r), "apt-get", "update", "-q"])
        archives = CACHE / "apt-archives"
        archives.mkdir(parents=True, exist_ok=True)
        _harvest(r, archives)
        _run(["chroot", str(r), "apt-get", "clean"])
        shutil.rmtree(base, ignore_errors=True)
        tmp.rename(base)
        (base / "ready").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return root


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _harvest(root: Path, archives: Path) -> None:
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        dst = archives / deb.name
        if not dst.exists():
            _link(deb, dst)


COPIES: list[Path] = []
"""Every root filesystem copy this process made, in order. An overlay copy takes next to nothing before the roles
install anything (a ``cp -a`` copy 0.3 GB) and up to 1.5 GB after; ``tests/conftest.py`` removes the copies a test
module made when the module's fixtures are torn down (see :func:`remove_copies`), so a run's disk use stays near one
module's copies plus the converges (the run's own, removed when the run ends)."""


def remove_copies(since: int = 0) -> None:
    """Remove the root filesystem copies made after the first ``since`` (Ansible's logs and results, kept beside the
    copies in the test's folder, stay). ``CLUSTERFORGE_KEEP_ROOTS=1`` keeps them to look into after a run."""
    if os.environ.get("CLUSTERFORGE_KEEP_ROOTS") == "1":
        return
    while len(COPIES) > since:
        remove_tree(COPIES.pop())


OVERLAY_SOURCE = "clusterforge-root"
"""The source name of every root filesystem overlay the tests mount (how :func:`root_overlays` finds them)."""


def layers_of(root: Path) -> Path:
    """The folder beside a copy at ``root`` that holds its overlay's layers: ``upper`` (what the copy changed),
    ``work`` (the overlay's own), ``lower`` (the lower directories, a text file) and ``owner`` (the mounting pid)."""
    return root.parent / f".{root.name}.layers"


def root_overlays(under: Path | None = None) -> list[Path]:
    """Mount points of the tests' root overlays on this machine (``/proc/self/mountinfo``), below ``under`` when
    given, deepest first (so a copy mounted inside another comes off first)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields, after = pre.split(), post.split()
        if len(after) >= 2 and after[0] == "overlay" and after[1] == OVERLAY_SOURCE and len(fields) > 4:
            mp = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
            if under is None or mp == under or mp.is_relative_to(under):
                out.append(mp)
    return sorted(out, key=lambda p: len(p.parts), reverse=True)


def remove_tree(path: Path) -> None:
    """Remove ``path`` with every root copy in it: the overlays below it are unmounted first (lazily: a process a role
    left running inside a root, a gpg-agent, does not keep it mounted), then the folder and, for a copy at ``path``
    itself, its layers beside it. Never raises."""
    for mp in root_overlays(path):
        subprocess.run(["umount", "-l", str(mp)], capture_output=True, check=False)
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(layers_of(path), ignore_errors=True)


def remove_stale_overlays() -> None:
    """Unmount and remove the root copies whose mounting process is gone (a run that was killed), on this machine;
    none while ``CLUSTERFORGE_KEEP_ROOTS=1`` (copies kept to look into stay mounted until a run without it)."""
    if os.environ.get("CLUSTERFORGE_KEEP_ROOTS") == "1":
        return
    for mp in root_overlays():
        try:
            pid = int((layers_of(mp) / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{pid}").exists():
            remove_tree(mp)


def _mount_overlay(lower: list[Path], dest: Path) -> bool:
    """Mount an overlay of ``lower`` (topmost first) at ``dest`` with a fresh upper layer in :func:`layers_of`,
    the shared .deb cache linked into that layer (hard links: the cache and the layers share a file system);
    ``False`` (nothing left behind) where the kernel or the process may not mount one."""
    layers = layers_of(dest)
    shutil.rmtree(layers, ignore_errors=True)
    upper, work = layers / "upper", layers / "work"
    work.mkdir(parents=True)
    src = lower[-1]
    for rel in ("", "var", "var/cache", "var/cache/apt", "var/cache/apt/archives"):
        d = upper / rel
        d.mkdir(exist_ok=True)
        st = (src / rel).stat()
        os.chown(d, st.st_uid, st.st_gid)
        d.chmod(st.st_mode & 0o7777)
    for deb in (CACHE / "apt-archives").glob("*.deb"):
        _link(deb, upper / "var/cache/apt/archives" / deb.name)
    (layers / "lower").write_text("\n".join(str(p) for p in lower) + "\n")
    (layers / "owner").write_text(f"{os.getpid()}\n")
    dest.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={':'.join(str(p) for p in lower)},upperdir={upper},workdir={work}"
    r = subprocess.run(["mount", "-t", "overlay", OVERLAY_SOURCE, "-o", opts, str(dest)], capture_output=True,
                       text=True, check=False)
    if r.returncode != 0:
        shutil.rmtree(layers, ignore_errors=True)
        dest.rmdir()
        return False
    return True


def snapshot_root(src: Path, dest: Path) -> Path:
    """A private copy at ``dest`` of the root copy ``src`` as it is now: an overlay whose lower layers are ``src``'s
    own (its upper layer over the cached root), so nothing is copied; ``cp -a`` where ``src`` is not an overlay or
    the mount is refused. ``src`` must not change while the snapshot lives (the run's shared converges do not)."""
    lower_file = layers_of(src) / "lower"
    if src in root_overlays(src) and lower_file.is_file():
        lower = [layers_of(src) / "upper", *(Path(p) for p in lower_file.read_text().split())]
        if _mount_overlay(lower, dest):
            return dest
    _run(["cp", "-a", str(src), str(dest)])
    return dest


ROOM_GB = 3.0
"""Free space (GB, 1e9 bytes) a root filesystem copy asks for before it starts: the copy (0.3 GB where it falls back
to ``cp -a``) and what a whole node's roles install into it (the DGX example's largest host: about 1.5 GB), with room to spare."""


def check_room(where: Path, need_gb: float = ROOM_GB) -> None:
    """Fail the test with one line (where, how much is free, what to free) when the file system holding ``where`` has
    less than ``need_gb`` free, instead of letting every later copy and write fail on ENOSPC."""
    probe = where
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 1e9
    if free < need_gb:
        pytest.fail(f"no room for a root filesystem copy at {where}: {free:.1f} GB free, {need_gb:.1f} GB needed; "
                    "free space on that file system (old pytest folders under /tmp/pytest-of-*, old clones) "
                    "or point TMPDIR elsewhere", pytrace=False)


def copy_rootfs(dest: Path, *, module_owned: bool = True) -> Path:
    """A private copy of the cached root filesystem at ``dest`` with the shared .deb cache linked in. A
    ``module_owned`` copy is recorded in :data:`COPIES` and removed when the test module that made it ends; fails
    the test with one line when there is no room for it (:func:`check_room`)."""
    base = build_rootfs()
    if dest.exists() or layers_of(dest).exists():
        remove_tree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    check_room(dest)
    if module_owned:
        COPIES.append(dest)
    if not _mount_overlay([base], dest):
        _run(["cp", "-a", str(base), str(dest)])
    shutil.copy2("/etc/resolv.conf", dest / "etc/resolv.conf")
    # The copy is thrown away after the test, so dpkg's fsync after every unpacked file buys nothing; without it
    # the roles' apt installs take half the wall-clock time (87 s -> 44 s for the L40S example's Debian packages
    # on this machine). What the roles run and install is unchanged.
    (dest / "etc/dpkg/dpkg.cfg.d/unsafe-io").write_text("# clusterforge tests: throwaway root filesystem\nforce-unsafe-io\n")
    archives = CACHE / "apt-archives"
    target = dest / "var/cache/apt/archives"
    for deb in archives.glob("*.deb"):
        if not (target / deb.name).exists():
            _link(deb, target / deb.name)
    return dest


def harvest_debs(root: Path) -> None:
    """Keep the .deb files a converge downloaded for the next converge (under the cache lock); from an overlay copy's
    upper layer, where they were written (a hard link out of the mounted copy would cross file systems)."""
    upper = layers_of(root) / "upper"
    with _locked(CACHE / "archives.lock"):
        _harvest(upper if upper.is_dir() else root, CACHE / "apt-archives")


@dataclass
class Converged:
    """The result of converging one example blueprint: one chroot per node group (its first host)."""

    example: str
    out: Path
    roots: dict[str, Path]
    groups: dict[str, str]
    rc: int
    first: dict[str, Any]
    rerun_rc: int
    rerun: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    os_name: str = "debian-12"

    def root(self, group: str) -> Path:
        """Root filesystem of the representative host of node group ``group``."""
        return self.roots[self.groups[group]]

    def to_json(self) -> str:
        d = asdict(self)
        d["out"] = str(self.out)
        d["roots"] = {h: str(p) for h, p in self.roots.items()}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> Converged:
        d = json.loads(text)
        d["out"] = Path(d["out"])
        d["roots"] = {h: Path(p) for h, p in d["roots"].items()}
        return cls(**d)


def _run_uid() -> str:
    """Identifier shared by every xdist worker of one pytest run: ``tests/conftest.py`` sets
    ``CLUSTERFORGE_TEST_RUN_UID`` in the controlling process before the workers start (a fresh one if unset)."""
    return os.environ.setdefault("CLUSTERFORGE_TEST_RUN_UID", uuid.uuid4().hex)


class ConvergeCache:
    """Converges each (example, OS) pair once per pytest run, shared by all xdist workers through files and locks.

    The first worker that needs a converge runs it while holding ``<id>.lock`` and stores the result as JSON;
    other workers wait on the lock and reuse it. Copies live under ``.cache/rootfs/converge/<run uid>`` in the checkout (:data:`RUNS`)
    and are removed when the run ends (:func:`remove_run`); copies an interrupted run left are removed when the next
    run starts. Vendor packages come from the stand-in mirror
    (:mod:`tests.roles.vendor_repo`) that this worker serves on 127.0.0.1.
    """

    def __init__(self, base: Path, mirror: VendorMirror):
        self.base = base
        self.mirror = mirror

    def get(self, example: str, os_name: str | None = None) -> Converged:
        os_name = os_name or next(o for e, o in CONVERGES if e == example)
        cid = converge_id(example, os_name)
        result = self.base / cid / "result.json"
        with _locked(self.base / f"{cid}.lock"):
            if result.exists():
                return Converged.from_json(result.read_text())
            c = self._converge(example, os_name)
            result.write_text(c.to_json())
            return c

    def extravars(self) -> dict[str, Any]:
        """Extra vars of every converge: the stand-in mirror URLs, vendor installs without a stand-in off."""
        return {**self.mirror.extravars(), **VENDOR_OFF}

    def _converge(self, example: str, os_name: str) -> Converged:
        from blueprints import load_blueprint
        from clusterforge.ansible.runner import chroot_connection, load_summary, run_site

        work = self.base / converge_id(example, os_name)
        work.mkdir(parents=True, exist_ok=True)
        loaded = load_blueprint(blueprint_for(example, os_name, work / "blueprint", self.mirror.lustre_client_repo()))
        groups = {g.name: g.hosts[0].name for g in loaded.blueprint.node_groups if g.hosts}
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        roots = prepare_roots(work, list(groups.values()), os_name, self.mirror, module_owned=False)
        seconds["copy"] = time.perf_counter() - t0
        out = work / "ansible"
        override = chroot_connection(roots)
        t0 = time.perf_counter()
        rc = run_site(loaded, out, extravars=self.extravars(), connection_override=override)
        seconds["converge"] = time.perf_counter() - t0
        first = load_summary(out)
        for r in roots.values():
            harvest_debs(r)
        t0 = time.perf_counter()
        rerun_rc = run_site(loaded, out, extravars=self.extravars(), connection_override=override)
        seconds["rerun"] = time.perf_counter() - t0
        c = Converged(example, out, roots, groups, rc, first, rerun_rc, load_summary(out), seconds)
        c.os_name = os_name
        return c


def remove_run(uid: str) -> None:
    """Remove the converge copies of run ``uid`` (called by the controlling process once every worker has finished;
    ``CLUSTERFORGE_KEEP_ROOTS=1`` keeps them)."""
    if os.environ.get("CLUSTERFORGE_KEEP_ROOTS") != "1":
        remove_tree(RUNS / uid)


MIRROR_SOURCES = ("tests/roles/vendor_repo.py", "tests/roles/cuda_repos.py", "tests/roles/nccl_stack_standins.py",
                  "tests/fixtures/cuda-repos", "tests/fixtures/nvidia-smi", "blueprints")
"""What the stand-in vendor mirror is built from (files or folders, repository-relative): the builders, the recorded
repository indexes and ``nvidia-smi`` outputs, and the whole ``blueprints`` package (catalogs, settings, vendor
facts; the examples choose which driver releases the mirror carries)."""


def mirror_key() -> str:
    """SHA-256 (12 hex digits) over the path and bytes of every file of :data:`MIRROR_SOURCES`: the mirror's cache
    entry, so an edit to any of them builds a new mirror, in this checkout or any other on the machine."""
    h = hashlib.sha256()
    for src in MIRROR_SOURCES:
        p = REPO / src
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(f"{f.relative_to(REPO)}\0{f.stat().st_size}\0".encode() + f.read_bytes())
    return h.hexdigest()[:12]


def vendor_mirror() -> VendorMirror:
    """The stand-in vendor mirror (built once per machine under the cache lock), served by this process."""
    root = CACHE / f"vendor-mirror-{mirror_key()}"
    with _locked(CACHE / "vendor-mirror.lock"):
        mirror = build_mirror(root)
        os.utime(root)  # in use: the pruning below measures from the last use
        for old in CACHE.glob("vendor-mirror-*"):  # mirrors of sources no checkout used for a week
            if old.is_dir() and not root.name.startswith(old.name[:26]) and time.time() - old.stat().st_mtime > 7 * 86400:
                shutil.rmtree(old, ignore_errors=True)
    return mirror.start()


@pytest.fixture(scope="session")
def converges() -> Iterator[ConvergeCache]:
    """Cross-worker cache of converged examples (needs root for chroot)."""
    if os.geteuid() != 0:
        pytest.skip("the chroot connection needs root (CI runs as root)")
    runs = RUNS
    uid = _run_uid()
    runs.mkdir(parents=True, exist_ok=True)
    with _locked(runs.parent / "converge.lock"):
        for old in runs.glob("*") if runs.is_dir() else []:
            # copies of finished runs (untouched for 15 minutes) are removed; this run's stay
            if old.name != uid and time.time() - old.stat().st_mtime > 900:
                shutil.rmtree(old, ignore_errors=True)
        base = runs / uid
        base.mkdir(parents=True, exist_ok=True)
    mirror = vendor_mirror()
    cache = ConvergeCache(base, mirror)
    # Share the work across xdist workers up front (the Makefile's --dist loadscope sends each test module
    # to one worker, so without this the worker that gets test_converge would run every converge):
    # worker i converges the pairs i, i+n, ... first, then uses the others' results.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and count > 1:
        index = int(worker[2:])
        for i, (example, os_name) in enumerate(CONVERGES):
            if i % count == index:
                cache.get(example, os_name)
    yield cache
    mirror.stop()
