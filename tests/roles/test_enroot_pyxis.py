"""The enroot_pyxis role converged for real in the Debian 12 root filesystem, against stand-in release files.

A local HTTP server on 127.0.0.1 serves what NVIDIA's release pages serve: ``enroot_4.1.2-1_amd64.deb`` and
``enroot+caps_4.1.2-1_amd64.deb`` (real Debian packages built here with ``dpkg-deb``; enroot.conf is a conffile, as
in NVIDIA's package) and a pyxis release tarball. The tarball is a stand-in SPANK plugin with pyxis's build layout
(``pyxis-<version>/Makefile`` building ``spank_pyxis.so`` against ``<slurm/spank.h>``), not pyxis's source, which
stays out of the repository; the real pyxis release was built once by hand the same way (see the role's README
section in the report of issue 25). The root gets Slurm's plugins first (slurm-wlm-basic-plugins, as slurm_node
leaves a node), then the role installs the compiler and libslurm-dev and builds the plugin inside the root: the
plugin's ``plugin_version`` must be the root's ``SLURM_VERSION_NUMBER``, read from the built ELF file.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import re
import shutil
import socketserver
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .conftest import CACHE, _locked, copy_rootfs, installed_packages, role_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the stand-in packages")]

ENROOT = "4.1.2"
PYXIS = "0.24.0"
PLUGIN_DIR = "usr/lib/x86_64-linux-gnu/slurm-wlm"
SLURM_PLUGINS = "slurm-wlm-basic-plugins"

PACKAGE_CONF = "#ENROOT_RUNTIME_PATH        ${XDG_RUNTIME_DIR}/enroot\n"
NODE_CONF = ("# clusterforge: node-local enroot paths, per user\n"
             "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)\n"
             "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)\n"
             "ENROOT_CACHE_PATH /var/lib/enroot/cache/user-$(id -u)\n")

STANDIN_C = """\
/* clusterforge test stand-in for pyxis: a SPANK plugin built like pyxis (same Makefile targets, same output) */
#include <slurm/spank.h>
SPANK_PLUGIN(pyxis, 1)
int slurm_spank_init(spank_t sp, int ac, char **av) { (void)sp; (void)ac; (void)av; return 0; }
"""
STANDIN_MAKEFILE = """\
PLUGIN := spank_pyxis.so
CFLAGS := -std=gnu11 -O2 -Wall -fpic $(CFLAGS)
all: $(PLUGIN)
spank_pyxis.o: spank_pyxis.c
\t$(CC) $(CFLAGS) -c $<
$(PLUGIN): spank_pyxis.o
\t$(CC) -shared -o $@ $^
"""


def _deb(out: Path, name: str, depends: str, files: dict[str, tuple[str, int]], conffiles: list[str]) -> Path:
    root = out / f".build-{name}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {ENROOT}-1\nArchitecture: amd64\nMaintainer: clusterforge tests "
        f"<tests@clusterforge.invalid>\nDepends: {depends}\nDescription: clusterforge test stand-in for {name}\n")
    if conffiles:
        (root / "DEBIAN/conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    for path, (text, mode) in files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(mode)
    deb = out / f"{name}_{ENROOT}-1_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return deb


def _tarball(out: Path) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in (("Makefile", STANDIN_MAKEFILE), ("spank_pyxis.c", STANDIN_C)):
            data = text.encode()
            info = tarfile.TarInfo(f"pyxis-{PYXIS}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = out / f"v{PYXIS}.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


@dataclass
class Releases:
    """The stand-in release files served on 127.0.0.1, the requests the server saw, and the role's variables."""

    root: Path
    base: str = ""
    requests: list[str] = field(default_factory=list)
    server: socketserver.TCPServer | None = None

    def sha(self, name: str) -> str:
        return hashlib.sha256((self.root / name).read_bytes()).hexdigest()

    def extravars(self, **override: str) -> dict[str, Any]:
        debs = [f"enroot_{ENROOT}-1_amd64.deb", f"enroot+caps_{ENROOT}-1_amd64.deb"]
        pins = {d: override.get(d, self.sha(d)) for d in debs}
        return {
            "enroot_pyxis_enroot_version": ENROOT,
            # both architectures, as the catalog lists them: the node takes its own
            "enroot_pyxis_enroot_debs": [{"url": f"{self.base}/enroot/v{ENROOT}/{d}", "sha256": pins[d]} for d in debs]
            + [{"url": f"{self.base}/enroot/v{ENROOT}/enroot_{ENROOT}-1_arm64.deb", "sha256": "0" * 64}],
            "enroot_pyxis_pyxis_version": PYXIS,
            "enroot_pyxis_pyxis_url": f"{self.base}/pyxis/archive/refs/tags/v{PYXIS}.tar.gz",
            "enroot_pyxis_pyxis_sha256": override.get("pyxis", self.sha(f"v{PYXIS}.tar.gz")),
            "enroot_pyxis_build_packages": ["gcc", "make", "libc6-dev", "libslurm-dev"],
            "enroot_pyxis_enroot_conf": NODE_CONF,
        }


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Releases]:
    root = tmp_path_factory.mktemp("releases")
    _deb(root, "enroot", "bash", {"/usr/bin/enroot": (f"#!/bin/sh\necho {ENROOT}\n", 0o755),
                                  "/etc/enroot/enroot.conf": (PACKAGE_CONF, 0o644)}, ["/etc/enroot/enroot.conf"])
    _deb(root, "enroot+caps", f"enroot (= {ENROOT}-1)", {"/usr/share/doc/enroot+caps/README": ("caps\n", 0o644)}, [])
    _tarball(root)
    rel = Releases(root)
    routes = {f"/enroot/v{ENROOT}/enroot_{ENROOT}-1_amd64.deb": f"enroot_{ENROOT}-1_amd64.deb",
              f"/enroot/v{ENROOT}/enroot+caps_{ENROOT}-1_amd64.deb": f"enroot+caps_{ENROOT}-1_amd64.deb",
              f"/pyxis/archive/refs/tags/v{PYXIS}.tar.gz": f"v{PYXIS}.tar.gz"}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path: str) -> str:
            rel.requests.append(path)
            return str(root / routes.get(path, "absent"))

        def log_message(self, format: str, *args: object) -> None:
            pass

    rel.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    rel.server.daemon_threads = True
    threading.Thread(target=rel.server.serve_forever, daemon=True).start()
    rel.base = f"http://127.0.0.1:{rel.server.server_address[1]}"
    yield rel
    rel.server.shutdown()
    rel.server.server_close()


def _with_slurm(dest: Path) -> Path:
    """A copy of the Debian root with Slurm's plugins installed, as slurm_node / slurm_login leave a node."""
    root = copy_rootfs(dest)
    subprocess.run(["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", SLURM_PLUGINS],
                   check=True, capture_output=True, text=True, env={"DEBIAN_FRONTEND": "noninteractive",
                                                                    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    with _locked(CACHE / "archives.lock"):
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            if not (CACHE / "apt-archives" / deb.name).exists():
                shutil.copy2(deb, CACHE / "apt-archives" / deb.name)
    return root


def _elf_uint(path: Path, symbol: str) -> int:
    """The 4-byte value of the data symbol ``symbol`` in the ELF file ``path`` (readelf's symbol and section tables)."""
    syms = subprocess.run(["readelf", "-W", "--dyn-syms", str(path)], check=True, capture_output=True, text=True).stdout
    value, ndx = next((int(f[1], 16), int(f[6])) for line in syms.splitlines()
                      if len(f := line.split()) >= 8 and f[7] == symbol)
    secs = subprocess.run(["readelf", "-W", "-S", str(path)], check=True, capture_output=True, text=True).stdout
    m = re.search(rf"^\s*\[\s*{ndx}\]\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", secs, re.MULTILINE)
    assert m, f"section {ndx} of {path}"
    offset = value - int(m.group(1), 16) + int(m.group(2), 16)
    with path.open("rb") as elf:
        elf.seek(offset)
        return int.from_bytes(elf.read(4), "little")


def _changed(tasks: list[tuple[str, str]]) -> list[str]:
    return [name for name, status in tasks if status == "changed"]


@pytest.fixture(scope="module")
def converged(releases: Releases, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("the chroot connection needs root (CI runs as root)")
    work = tmp_path_factory.mktemp("enroot-pyxis")
    root = _with_slurm(work / "root")
    first = role_run(root, work / "run1", "enroot_pyxis", "all", releases.extravars())
    rerun = role_run(root, work / "run2", "enroot_pyxis", "all", releases.extravars())
    return {"root": root, "work": work, "first": first, "rerun": rerun}


def test_converge_installs_enroot_and_builds_pyxis_against_the_roots_slurm(converged: dict[str, Any],
                                                                           releases: Releases) -> None:
    root: Path = converged["root"]
    failures, tasks = converged["first"]
    assert failures == []
    pkgs = installed_packages(root)
    assert pkgs["enroot"][0] == pkgs["enroot+caps"][0] == f"{ENROOT}-1"
    assert (root / "etc/enroot/enroot.conf").read_text() == NODE_CONF
    plugin = root / PLUGIN_DIR / "spank_pyxis.so"
    header = (root / "usr/include/slurm/slurm_version.h").read_text()
    want = int(re.search(r"#define SLURM_VERSION_NUMBER (0x[0-9a-fA-F]+)", header).group(1), 16)  # type: ignore[union-attr]
    assert _elf_uint(plugin, "plugin_version") == want
    assert (root / "etc/slurm/plugstack.conf.d/pyxis.conf").read_text() == f"required /{PLUGIN_DIR}/spank_pyxis.so\n"
    assert "include /etc/slurm/plugstack.conf.d/*.conf" in (root / "etc/slurm/plugstack.conf").read_text()
    stamp = (root / "var/lib/clusterforge/pyxis.built").read_text()
    assert f"pyxis={PYXIS}\n" in stamp and f"slurm={pkgs[SLURM_PLUGINS][0]}\n" in stamp
    assert pkgs["libslurm-dev"][0] == pkgs[SLURM_PLUGINS][0]
    for d in ("run/enroot", "var/lib/enroot/data", "var/lib/enroot/cache"):
        st = (root / d).stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o755), d
    assert (root / "etc/tmpfiles.d/clusterforge-enroot.conf").read_text().splitlines()[1:] == [
        "d /run/enroot 0755 root root -"]
    assert f"/enroot/v{ENROOT}/enroot_{ENROOT}-1_arm64.deb" not in releases.requests  # only this node's architecture
    assert ("Restart slurmd.", "changed") not in tasks  # an image root: nothing started


def test_rerun_changes_nothing(converged: dict[str, Any]) -> None:
    failures, tasks = converged["rerun"]
    assert failures == [] and _changed(tasks) == []


def test_a_new_slurm_rebuilds_pyxis(converged: dict[str, Any], releases: Releases) -> None:
    root: Path = converged["root"]
    stamp = root / "var/lib/clusterforge/pyxis.built"
    plugin = root / PLUGIN_DIR / "spank_pyxis.so"
    # the plugin on disk was built for the Slurm before an upgrade: the stamp names that one
    stamp.write_text(re.sub(r"^slurm=.*$", "slurm=22.05.7-1", stamp.read_text(), flags=re.MULTILINE))
    plugin.write_bytes(b"an older build")
    failures, tasks = role_run(root, converged["work"] / "run3", "enroot_pyxis", "all", releases.extravars())
    assert failures == []
    assert "Install enroot and build pyxis against the installed Slurm (every download checked before anything is installed)." in _changed(tasks)
    assert "slurm=22.05.7-1" not in stamp.read_text()
    assert plugin.read_bytes().startswith(b"\x7fELF")


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the chroot connection needs root (CI runs as root)")
    return _with_slurm(tmp_path_factory.mktemp("enroot-pyxis-refused") / "root")


@pytest.mark.parametrize(("case", "says"), [
    ("enroot-wrong", f"enroot_{ENROOT}-1_amd64.deb does not match its pinned SHA-256"),
    ("enroot-unpinned", f"no SHA-256 pinned for enroot+caps_{ENROOT}-1_amd64.deb: refusing an unverified download"),
    ("pyxis-wrong", f"v{PYXIS}.tar.gz does not match its pinned SHA-256"),
    ("pyxis-unpinned", f"no SHA-256 pinned for the pyxis {PYXIS} tarball: refusing an unverified download"),
])
def test_a_wrong_or_missing_pin_installs_nothing(bare: Path, releases: Releases, tmp_path: Path, case: str,
                                                 says: str) -> None:
    override = {"enroot-wrong": {f"enroot_{ENROOT}-1_amd64.deb": "ab" * 32},
                "enroot-unpinned": {f"enroot+caps_{ENROOT}-1_amd64.deb": ""},
                "pyxis-wrong": {"pyxis": "cd" * 32}, "pyxis-unpinned": {"pyxis": ""}}[case]
    before = len(releases.requests)
    failures, _ = role_run(bare, tmp_path, "enroot_pyxis", "all", releases.extravars(**override))
    assert len(failures) == 1 and says in failures[0], failures
    if case.endswith("unpinned"):
        assert releases.requests[before:] == [], "nothing is downloaded without its pin"
    pkgs = installed_packages(bare)
    assert not {"enroot", "enroot+caps", "gcc", "libslurm-dev"} & set(pkgs)
    assert not (bare / PLUGIN_DIR / "spank_pyxis.so").exists()
    assert not (bare / "etc/slurm/plugstack.conf.d/pyxis.conf").exists()
    assert not (bare / f"var/cache/clusterforge/pyxis-{PYXIS}.tar.gz").exists() or case != "pyxis-wrong"
