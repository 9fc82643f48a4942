"""The nccl_stack role converged for real in the Debian 12 root filesystem, against the stand-in vendor mirror.

The role's variables are the DGX example's (``node_role_vars`` of its ``dgx`` group: NCCL's packages at the stack's
NVIDIA build, the catalog's build packages and paths), with the download URLs pointed at the mirror as a site mirror
would point them (:meth:`tests.roles.vendor_repo.VendorMirror.nccl_stack_vars`): the stand-in nccl-tests release and
its SHA-256, the stand-in wheel index. The root gets NVIDIA's CUDA repository entry first, as the nvidia_driver role
leaves a node (``/etc/apt/sources.list.d/nvidia-cuda.sources`` with the repository key), carrying stand-in NCCL
packages (pinned, one older, one newer) and the CUDA compiler packages (:mod:`tests.roles.nccl_stack_standins`: what
the stand-in build proves and what it does not). g++, make, Open MPI and python3-venv are Debian's real packages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from blueprints.resolved import resolve
from blueprints.role_vars import node_role_vars
from blueprints.settings import NcclStackSettings
from blueprints.vendor import bare_metal
from tests.conftest import EXAMPLES

from .conftest import copy_rootfs, dpkg_packages, harvest_debs, role_run, vendor_mirror
from .nccl_stack_standins import nccl_code, newer, older
from .vendor_repo import VendorMirror

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("dpkg-deb") is None or shutil.which("gcc") is None,
                                 reason="dpkg-deb and gcc build the stand-in packages")]

ENV = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def _stack() -> NcclStackSettings:
    bp = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint
    s = next(r.settings for r in resolve(bp).groups if r.settings.group == "dgx")
    assert s.nccl_stack is not None
    return s.nccl_stack


def _chroot(root: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], check=check, capture_output=True, text=True, env=ENV)


def _with_cuda_repo(dest: Path, mirror: VendorMirror) -> Path:
    """A copy of the Debian root with NVIDIA's CUDA repository configured as the nvidia_driver role leaves it."""
    root = copy_rootfs(dest)
    repo = bare_metal()["nvidia_driver"]["cuda_repo"]
    d = f"{repo['dists']['debian-12']}/{repo['arch']['x86_64']}"
    (root / "etc/apt/keyrings").mkdir(parents=True, exist_ok=True)
    shutil.copy(mirror.root / "cuda" / d / repo["key_file"], root / "etc/apt/keyrings/nvidia-cuda.asc")
    (root / "etc/apt/sources.list.d/nvidia-cuda.sources").write_text(
        f"Types: deb\nURIs: {mirror.base_url}/cuda/{d}/\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-cuda.asc\n")
    _chroot(root, "apt-get", "update", "-q")
    return root


def _changed(tasks: list[tuple[str, str]]) -> list[str]:
    return [name for name, status in tasks if status == "changed"]


@pytest.fixture(scope="module")
def mirror() -> Iterator[VendorMirror]:
    m = vendor_mirror()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def converged(mirror: VendorMirror, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("the chroot connection needs root (CI runs as root)")
    work = tmp_path_factory.mktemp("nccl-stack")
    root = _with_cuda_repo(work / "root", mirror)
    stack = _stack()
    extravars = {**node_role_vars(stack_settings(stack), "nccl_stack"), **mirror.nccl_stack_vars()}
    first = role_run(root, work / "run1", "nccl_stack", "all", extravars)
    harvest_debs(root)
    rerun = role_run(root, work / "run2", "nccl_stack", "all", extravars)
    return {"root": root, "work": work, "first": first, "rerun": rerun, "stack": stack, "vars": extravars}


def stack_settings(stack: NcclStackSettings) -> Any:
    """An object whose ``nccl_stack`` is ``stack`` (what :func:`node_role_vars` reads for this role)."""
    bp = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint
    return next(r.settings for r in resolve(bp).groups if r.settings.group == "dgx").model_copy(
        update={"nccl_stack": stack})


def _run_perf(root: Path, tests_dir: str) -> str:
    p = _chroot(root, f"{tests_dir}/all_reduce_perf", check=False)
    assert p.returncode == 2, p.stderr  # the stand-in says it measures nothing
    assert "measures nothing" in p.stderr
    return p.stdout


def test_converge_installs_the_pinned_nccl_builds_nccl_tests_against_it_and_makes_the_venv(
        converged: dict[str, Any]) -> None:
    root: Path = converged["root"]
    stack: NcclStackSettings = converged["stack"]
    failures, _ = converged["first"]
    assert failures == []
    pkgs = dpkg_packages(root)
    for spec in stack.packages:  # e.g. libnccl2=2.28.9-1+cuda13.0: the pinned build, held; not the newer one
        name, version = spec.split("=")
        assert pkgs[name] == (version, "hold", "installed"), name
    assert pkgs["libopenmpi-dev"][2] == "installed" and pkgs["g++"][2] == "installed"
    # nccl-tests was built with MPI against the installed NCCL: the binary's own version line names the NCCL it was
    # compiled against (headers) and the one it runs against (library); it links Debian's Open MPI
    out = _run_perf(root, stack.tests_dir)
    code = nccl_code(stack.nccl)
    assert f"# nccl-tests version {stack.tests_version} nccl-headers={code} nccl-library={code}" in out
    assert "# MPI library: Open MPI" in out
    built = sorted(p.name for p in (root / stack.tests_dir.lstrip("/")).glob("*_perf"))
    from validate.payloads.nccl_tests import (
        BINARIES,  # every binary the validation payload looks for is there
    )
    assert built == sorted(BINARIES.values())
    stamp = (root / stack.tests_dir.lstrip("/") / ".clusterforge-built").read_text()
    assert f"nccl={stack.packages[0].split('=')[1]}\n" in stamp and f"sha256={converged['vars']['nccl_stack_tests_sha256']}" in stamp
    # the venv holds the pinned PyTorch of the stack's wheel index (the index also serves a newer release)
    tag = stack.torch_index_url.rstrip("/").rsplit("/", 1)[1]
    py = _chroot(root, f"{stack.venv}/bin/python", "-c", "import torch; print(torch.__version__, torch.version.cuda)")
    assert py.stdout.split() == [f"{stack.torch}+{tag}", stack.cuda]
    assert newer(str(stack.torch)) not in py.stdout


def test_rerun_changes_nothing(converged: dict[str, Any]) -> None:
    failures, tasks = converged["rerun"]
    assert failures == []
    assert _changed(tasks) == []
    # the preflight run found the pinned NCCL held, nccl-tests built against it and the venv in place: neither the
    # download nor the install script runs again (a module run each on every rerun)
    assert ("Download the nccl-tests source release and check it against its SHA-256 pin.", "skipped") in tasks
    assert ("Install NCCL, build nccl-tests against it and make the PyTorch venv.", "skipped") in tasks


def test_another_nccl_reinstalls_and_rebuilds(converged: dict[str, Any]) -> None:
    """software.nccl changed to another release: the held packages move to it and nccl-tests is rebuilt against it."""
    root: Path = converged["root"]
    stack: NcclStackSettings = converged["stack"]
    other = older(stack.nccl)
    version = stack.packages[0].split("=")[1].replace(f"{stack.nccl}-", f"{other}-")
    moved = stack.model_copy(update={"nccl": other, "packages": [f"{p.split('=')[0]}={version}" for p in stack.packages]})
    extravars = {**converged["vars"], **{k: v for k, v in node_role_vars(stack_settings(moved), "nccl_stack").items()
                                         if k in ("nccl_stack_nccl_version", "nccl_stack_packages")}}
    failures, tasks = role_run(root, converged["work"] / "run3", "nccl_stack", "all", extravars)
    assert failures == []
    assert "Install NCCL, build nccl-tests against it and make the PyTorch venv." in _changed(tasks)
    pkgs = dpkg_packages(root)
    assert all(pkgs[p.split("=")[0]] == (version, "hold", "installed") for p in stack.packages)
    assert f"nccl-library={nccl_code(other)}" in _run_perf(root, stack.tests_dir)
    # and back to the example's stack
    failures, _ = role_run(root, converged["work"] / "run4", "nccl_stack", "all", converged["vars"])
    assert failures == []
    assert f"nccl-library={nccl_code(stack.nccl)}" in _run_perf(root, stack.tests_dir)


def test_an_archive_that_is_not_the_pinned_one_is_refused_before_anything_is_installed(
        converged: dict[str, Any]) -> None:
    root: Path = converged["root"]
    stack: NcclStackSettings = converged["stack"]
    d = root / stack.tests_dir.lstrip("/")
    (d / ".clusterforge-built").unlink()  # as a node that has not built this release yet
    for f in (root / "var/cache/clusterforge").glob("nccl-tests-*"):
        f.unlink()
    bad = {**converged["vars"], "nccl_stack_tests_sha256": "0" * 64}
    failures, tasks = role_run(root, converged["work"] / "run5", "nccl_stack", "all", bad)
    assert len(failures) == 1 and "does not match its pinned SHA-256" in failures[0], failures
    assert ("Install NCCL, build nccl-tests against it and make the PyTorch venv.", "changed") not in tasks
    assert not list((root / "var/cache/clusterforge").glob("nccl-tests-*"))  # nothing kept
    unpinned = {**converged["vars"], "nccl_stack_tests_sha256": ""}
    failures, _ = role_run(root, converged["work"] / "run6", "nccl_stack", "all", unpinned)
    assert len(failures) == 1 and "refusing an unverified download" in failures[0], failures


def test_the_stand_in_build_fails_where_nvidias_would_without_the_nccl_headers(converged: dict[str, Any]) -> None:
    """NVIDIA's build needs nccl.h from NCCL_HOME (or the compiler's default paths): with libnccl-dev's header gone,
    the stand-in release's make stops in the compile step with the compiler's own message."""
    root: Path = converged["root"]
    stack: NcclStackSettings = converged["stack"]
    tarball = next((root / "var/cache/clusterforge").glob(f"nccl-tests-{stack.tests_version}.tar.gz"), None)
    if tarball is None:  # the refusal test removed it: fetch it again as the role does
        failures, _ = role_run(root, converged["work"] / "run7", "nccl_stack", "all", converged["vars"])
        assert failures == []
        tarball = root / "var/cache/clusterforge" / f"nccl-tests-{stack.tests_version}.tar.gz"
    header = root / "usr/include/nccl.h"
    aside = root / "usr/include/nccl.h.aside"
    header.rename(aside)
    try:
        _chroot(root, "sh", "-c", "rm -rf /tmp/nt && mkdir /tmp/nt && tar -xzf "
                f"/var/cache/clusterforge/{tarball.name} -C /tmp/nt --strip-components=1")
        mpi_home = stack.mpi_home.replace("{multiarch}", "x86_64-linux-gnu")
        p = _chroot(root, "make", "-C", "/tmp/nt", "MPI=1", f"MPI_HOME={mpi_home}", f"CUDA_HOME={stack.cuda_home}",
                    "NCCL_HOME=/opt/no-nccl", check=False)
        assert p.returncode != 0
        assert re.search(r"nccl\.h: No such file or directory", p.stderr), p.stderr[-2000:]
    finally:
        aside.rename(header)


def _record_tool(root: Path, name: str, body: str) -> Path:
    """A stand-in ``name`` in the root's /usr/local/bin that appends its arguments to /var/log/<name>.calls, then runs
    ``body`` (sh)."""
    tool = root / "usr/local/bin" / name
    tool.write_text(f'#!/bin/sh\necho "$*" >> /var/log/{name}.calls\n{body}')
    tool.chmod(0o755)
    return root / "var/log" / f"{name}.calls"


def test_a_declared_container_replaces_the_venv_enroot_import_with_pyxis_ctr_pull_otherwise(
        converged: dict[str, Any]) -> None:
    """Where the blueprint declares containers the NGC PyTorch image is made available instead of the venv: imported
    into enroot (Slurm with pyxis) or pulled into containerd. enroot and ctr are stand-ins that record their arguments
    (the real ones need a registry); what is proven is the role's call, its file name and that a rerun calls nothing."""
    from blueprints.software_stack import software_stack

    root: Path = converged["root"]
    image = software_stack(load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml").blueprint).container_image
    assert image and image.startswith("nvcr.io/nvidia/pytorch:")
    tag = image.rsplit(":", 1)[1]
    calls = _record_tool(root, "enroot", 'while [ $# -gt 0 ]; do [ "$1" = -o ] && echo sqsh > "$2"; shift; done\n')
    vars_ = {**converged["vars"], "nccl_stack_container_image": image, "nccl_stack_enroot_import": True}
    failures, _ = role_run(root, converged["work"] / "run8", "nccl_stack", "all", vars_)
    assert failures == []
    sqsh = root / f"var/lib/clusterforge/containers/nvidia+pytorch+{tag}.sqsh"
    assert sqsh.read_text() == "sqsh\n" and (sqsh.stat().st_mode & 0o777) == 0o644
    assert calls.read_text().splitlines() == [
        f"import -o /var/lib/clusterforge/containers/nvidia+pytorch+{tag}.sqsh.part docker://nvcr.io#nvidia/pytorch:{tag}"]
    failures, tasks = role_run(root, converged["work"] / "run9", "nccl_stack", "all", vars_)
    assert failures == [] and _changed(tasks) == [] and len(calls.read_text().splitlines()) == 1
    # containerd: ctr lists what it pulled (the stand-in keeps the list in a file)
    pulls = _record_tool(root, "ctr", 'case "$*" in *"images ls -q"*) cat /var/lib/ctr-images 2>/dev/null;; '
                                      '*"images pull"*) for a; do last=$a; done; echo "$last" >> /var/lib/ctr-images;; esac\n')
    ctr_vars = {**vars_, "nccl_stack_enroot_import": False}
    failures, _ = role_run(root, converged["work"] / "run10", "nccl_stack", "all", ctr_vars)
    assert failures == []
    assert f"-n k8s.io images pull {image}" in pulls.read_text().splitlines()
    failures, tasks = role_run(root, converged["work"] / "run11", "nccl_stack", "all", ctr_vars)
    assert failures == [] and _changed(tasks) == []
