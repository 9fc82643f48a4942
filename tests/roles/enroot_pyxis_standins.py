"""Stand-in release files of enroot and pyxis for the enroot_pyxis converges (tests/roles/test_enroot_pyxis.py; a
stand-in vendor mirror can serve the same files).

``enroot_<version>-1_amd64.deb`` and ``enroot+caps_<version>-1_amd64.deb`` are real Debian packages built with
``dpkg-deb`` (``/etc/enroot/enroot.conf`` a conffile, as in NVIDIA's packages); the pyxis tarball is a stand-in SPANK
plugin with pyxis's build layout (``pyxis-<version>/Makefile`` building ``spank_pyxis.so`` against ``<slurm/spank.h>``),
not pyxis's source, which stays out of the repository.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

ENROOT = "4.1.2"
PYXIS = "0.24.0"

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


def build_deb(out: Path, name: str, depends: str, files: dict[str, tuple[str, int]], conffiles: list[str]) -> Path:
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


def build_pyxis_tarball(out: Path) -> Path:
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




def build_release_files(out: Path) -> dict[str, Path]:
    """The stand-in enroot packages and pyxis tarball in ``out``: ``{file name: path}``."""
    files = [
        build_deb(out, "enroot", "bash", {"/usr/bin/enroot": (f"#!/bin/sh\necho {ENROOT}\n", 0o755),
                                         "/etc/enroot/enroot.conf": (PACKAGE_CONF, 0o644)}, ["/etc/enroot/enroot.conf"]),
        build_deb(out, "enroot+caps", f"enroot (= {ENROOT}-1)", {"/usr/share/doc/enroot+caps/README": ("caps\n", 0o644)}, []),
        build_pyxis_tarball(out),
    ]
    return {p.name: p for p in files}


def role_vars(enroot_url: str, pyxis_url: str, files: dict[str, Path], **override: str) -> dict[str, Any]:
    """The enroot_pyxis variables for the stand-ins, as the catalog would give them for the real releases:
    ``enroot_url`` the folder of the .deb files, ``pyxis_url`` the tarball's URL; ``override`` replaces a file's pin
    (``pyxis`` the tarball's)."""
    def sha(name: str) -> str:
        return override.get(name, hashlib.sha256(files[name].read_bytes()).hexdigest())

    debs = [f"enroot_{ENROOT}-1_amd64.deb", f"enroot+caps_{ENROOT}-1_amd64.deb"]
    return {
        "enroot_pyxis_enroot_version": ENROOT,
        # both architectures, as the catalog lists them: a node takes its own
        "enroot_pyxis_enroot_debs": [{"url": f"{enroot_url}/{d}", "sha256": sha(d)} for d in debs]
        + [{"url": f"{enroot_url}/enroot_{ENROOT}-1_arm64.deb", "sha256": "0" * 64}],
        "enroot_pyxis_pyxis_version": PYXIS,
        "enroot_pyxis_pyxis_url": pyxis_url,
        "enroot_pyxis_pyxis_sha256": override.get("pyxis", hashlib.sha256(files[f"v{PYXIS}.tar.gz"].read_bytes()).hexdigest()),
        "enroot_pyxis_build_packages": ["gcc", "make", "libc6-dev", "libslurm-dev"],
        "enroot_pyxis_enroot_conf": NODE_CONF,
    }
