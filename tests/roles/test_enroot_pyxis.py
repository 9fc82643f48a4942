"""The enroot_pyxis role converged for real in the Debian 12 root filesystem, against stand-in release files.

A local HTTP server on 127.0.0.1 serves what NVIDIA's release pages serve: ``enroot_4.1.2-1_amd64.deb`` and
``enroot+caps_4.1.2-1_amd64.deb`` (real Debian packages built here with ``dpkg-deb``; enroot.conf is a conffile, as
in NVIDIA's package) and a pyxis release tarball. The tarball is a stand-in SPANK plugin with pyxis's build layout
(``pyxis-<version>/Makefile`` building ``spank_pyxis.so`` against ``<slurm/spank.h>``), not pyxis's source, which
stays out of the repository (pyxis 0.24.0 itself was built by hand the same way, ``make -C <unpacked tarball>``,
against this machine's libslurm-dev 22.05.8: plugin_version 0x160508, and ``srun --help`` lists its
``--container-image``; not part of the suite). The root gets Slurm's plugins first (slurm-wlm-basic-plugins, as slurm_node
leaves a node), then the role installs the compiler and libslurm-dev and builds the plugin inside the root: the
plugin's ``plugin_version`` must be the root's ``SLURM_VERSION_NUMBER``, read from the built ELF file.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .conftest import CACHE, _locked, copy_rootfs, installed_packages, role_run
from .enroot_pyxis_standins import ENROOT, NODE_CONF, PYXIS, build_release_files, role_vars

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb builds the stand-in packages")]

PLUGIN_DIR = "usr/lib/x86_64-linux-gnu/slurm-wlm"
"""Where Debian's slurm-wlm-basic-plugins puts Slurm's plugins (``dpkg -L slurm-wlm-basic-plugins``)."""
SLURM_PLUGINS = "slurm-wlm-basic-plugins"

@dataclass
class Releases:
    """The stand-in release files served on 127.0.0.1, the requests the server saw, and the role's variables."""

    root: Path
    base: str = ""
    requests: list[str] = field(default_factory=list)
    server: socketserver.TCPServer | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def extravars(self, **override: str) -> dict[str, Any]:
        return role_vars(f"{self.base}/enroot/v{ENROOT}", f"{self.base}/pyxis/archive/refs/tags/v{PYXIS}.tar.gz",
                         self.files, **override)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Releases]:
    root = tmp_path_factory.mktemp("releases")
    rel = Releases(root, files=build_release_files(root))
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
                      if len(f := line.split()) >= 8 and f[7].split("@")[0] == symbol)
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
