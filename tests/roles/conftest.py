"""Fixtures for the real Ansible converges: a cached Debian 12 root filesystem and per-example runs.

The root filesystem is built ONCE with debootstrap (minbase + python3, python3-apt, systemd,
ca-certificates) under ``.cache/rootfs/debian-12-<hash>/root`` and reused by later test runs; the
hash covers the package list, the mirror and this recipe. A file lock keeps pytest-xdist workers
from building it twice. Every converge works on its own ``cp -a`` copy, reached through the
``community.general.chroot`` connection, so tests never see each other's changes.

Converges are shared by the xdist workers of a run (see :class:`ConvergeCache`): each example is
converged once per run whichever worker gets to it first.

Downloaded ``.deb`` files are kept in ``.cache/rootfs/apt-archives`` and hard-linked into each copy
before a converge (and harvested after it), so only the first converge on a machine downloads the
small Debian packages the roles install (rdma-core, perftest, mdadm, xfsprogs, fio, containerd ...).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
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

from tests.conftest import EXAMPLES, REPO

SUITE = "bookworm"
MIRROR = os.environ.get("CLUSTERFORGE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
INCLUDE = ("python3", "python3-apt", "systemd", "systemd-sysv", "ca-certificates")
RECIPE_VERSION = "1"
CACHE = Path(os.environ.get("CLUSTERFORGE_ROOTFS_CACHE", REPO / ".cache" / "rootfs"))

VENDOR_OFF = {
    "nvidia_driver_install_packages": False,
    "container_runtime_install_nvidia_toolkit": False,
    "lustre_client_install_packages": False,
    "sandbox_install_vendor_packages": False,
}
"""Extra vars of the real converge: packages that are not in Debian's archive are not installed
(NVIDIA driver / container toolkit, Lustre client, Kata / gVisor); their steps run in check mode."""

CONVERGE_ORDER = ["onprem-dgx-h100-ib", "onprem-sandbox-kata", "local-workstation", "onprem-l40s-roce"]
"""The on-prem examples, ordered so that round-robin over two workers balances the converge time."""

CHECK_MODE_EXAMPLES = {"onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata"}
"""Examples with vendor install steps (exercised in check mode)."""

VENDOR_INSTALL_TAGS = ["nvidia_driver_install", "container_runtime_install", "lustre_client_install", "sandbox_install",
                       "rdma_install"]
VENDOR_CHECK_VARS = {
    # DOCA-OFED instead of the inbox rdma-core (no example declares it; exercised here)
    "rdma_doca_ofed_version": "2.9.1",
    # a site mirror the check-mode run points the Lustre role at (Debian has no Lustre client)
    "lustre_client_apt_repo_url": "https://lustre-mirror.example.internal/debian12/client",
    "lustre_client_apt_repo_key_url": "https://lustre-mirror.example.internal/debian12/client/KEY.asc",
}


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


def copy_rootfs(dest: Path) -> Path:
    """A private copy of the cached root filesystem at ``dest`` with the shared .deb cache linked in."""
    base = build_rootfs()
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _run(["cp", "-a", str(base), str(dest)])
    shutil.copy2("/etc/resolv.conf", dest / "etc/resolv.conf")
    archives = CACHE / "apt-archives"
    target = dest / "var/cache/apt/archives"
    for deb in archives.glob("*.deb"):
        if not (target / deb.name).exists():
            _link(deb, target / deb.name)
    return dest


def harvest_debs(root: Path) -> None:
    """Keep the .deb files a converge downloaded for the next converge (under the cache lock)."""
    with _locked(CACHE / "archives.lock"):
        _harvest(root, CACHE / "apt-archives")


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
    check: dict[str, Any] | None = None
    check_rc: int | None = None

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
    """Identifier shared by every xdist worker of one pytest run (a fresh one without xdist)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not uid:
        uid = os.environ.setdefault("CLUSTERFORGE_TEST_RUN_UID", uuid.uuid4().hex)
    return uid


class ConvergeCache:
    """Converges each example once per pytest run, shared by all xdist workers through files and locks.

    The first worker that needs an example converges it while holding ``<example>.lock`` and stores the
    result as JSON; other workers wait on the lock and reuse it. Copies live under
    ``.cache/rootfs/converge/<run uid>``; copies of earlier runs are removed when a run starts.
    """

    def __init__(self, base: Path):
        self.base = base

    def get(self, example: str) -> Converged:
        result = self.base / example / "result.json"
        with _locked(self.base / f"{example}.lock"):
            if result.exists():
                return Converged.from_json(result.read_text())
            c = self._converge(example)
            result.write_text(c.to_json())
            return c

    def _converge(self, example: str) -> Converged:
        from blueprints import load_blueprint
        from clusterforge.ansible.runner import chroot_connection, load_summary, run_site

        loaded = load_blueprint(EXAMPLES / f"{example}.yaml")
        work = self.base / example
        work.mkdir(parents=True, exist_ok=True)
        groups = {g.name: g.hosts[0].name for g in loaded.blueprint.node_groups if g.hosts}
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        roots = {host: copy_rootfs(work / f"root-{host}") for host in groups.values()}
        seconds["copy"] = time.perf_counter() - t0
        out = work / "ansible"
        override = chroot_connection(roots)
        t0 = time.perf_counter()
        rc = run_site(loaded, out, extravars=VENDOR_OFF, connection_override=override)
        seconds["converge"] = time.perf_counter() - t0
        first = load_summary(out)
        for r in roots.values():
            harvest_debs(r)
        t0 = time.perf_counter()
        rerun_rc = run_site(loaded, out, extravars=VENDOR_OFF, connection_override=override)
        seconds["rerun"] = time.perf_counter() - t0
        return Converged(example, out, roots, groups, rc, first, rerun_rc, load_summary(out), seconds)

    def check_vendor_steps(self, example: str) -> Converged:
        """Run the install phases with the vendor packages enabled, in check mode (once per run)."""
        c = self.get(example)
        result = self.base / example / "check.json"
        with _locked(self.base / f"{example}.lock"):
            if result.exists():
                return Converged.from_json(result.read_text())
            from blueprints import load_blueprint
            from clusterforge.ansible.runner import chroot_connection, load_summary, run_site

            loaded = load_blueprint(EXAMPLES / f"{example}.yaml")
            t0 = time.perf_counter()
            c.check_rc = run_site(loaded, c.out, check=True, tags=VENDOR_INSTALL_TAGS, extravars=VENDOR_CHECK_VARS,
                                  connection_override=chroot_connection(c.roots))
            c.seconds["check"] = time.perf_counter() - t0
            c.check = load_summary(c.out)
            result.write_text(c.to_json())
            return c


@pytest.fixture(scope="session")
def converges() -> ConvergeCache:
    """Cross-worker cache of converged examples (needs root for chroot)."""
    if os.geteuid() != 0:
        pytest.skip("the chroot connection needs root (CI runs as root)")
    runs = CACHE / "converge"
    uid = _run_uid()
    with _locked(CACHE / "converge.lock"):
        for old in runs.glob("*") if runs.is_dir() else []:
            # copies of finished runs (untouched for 15 minutes) are removed; this run's stay
            if old.name != uid and time.time() - old.stat().st_mtime > 900:
                shutil.rmtree(old, ignore_errors=True)
        base = runs / uid
        base.mkdir(parents=True, exist_ok=True)
    cache = ConvergeCache(base)
    # Share the work across xdist workers up front (pytest-xdist's loadgroup does not group tests under
    # pytest 9): worker i converges the examples i, i+n, ... first, then uses the others' results.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and count > 1:
        index = int(worker[2:])
        for i, example in enumerate(CONVERGE_ORDER):
            if i % count == index:
                cache.get(example)
                if example in CHECK_MODE_EXAMPLES:
                    cache.check_vendor_steps(example)
    return cache
