"""Stand-in vendor repositories for the real converges, built at test time and served on 127.0.0.1.

The roles install NVIDIA's driver stack, the NVIDIA Container Toolkit, Kata and runsc from their vendors'
repositories. Those cannot be reached from CI, so the converge tests point the roles (through the same
mirror variables a site with an air-gapped mirror sets) at stand-ins that have the vendors' layout:

* ``cuda/<dist>/<arch>/`` — NVIDIA's CUDA repository (flat apt repository, ``Suites: /``, signed
  ``InRelease``, key at ``<dir>/<key_file>``), one directory per distribution and architecture, each built from the
  index metadata recorded in ``tests/fixtures/cuda-repos/`` (:mod:`tests.roles.cuda_repos`): that directory's
  driver package names, relations and Debian revision (``-1`` on debian12, ``-0ubuntu1`` / ``-1ubuntu1`` on
  ubuntu2204 and ubuntu2404), Fabric Manager, NSCQ, NVSDM at the same release, NVLSM, DCGM 4 as NVIDIA's DCGM
  packaging relates its packages, the recorded DCGM 3 package — plus an older and a newer release of every
  NVIDIA-versioned package, so a converge that does not pin would visibly take the wrong one; also Ubuntu's
  ``linux-headers-generic`` (the DKMS path of a Ubuntu host installs it).
* ``ubuntu/<release>/`` (and ``ubuntu-moved/<release>/``) — the Ubuntu archive's NVIDIA packages for the
  Secure Boot path, with the archive's real names, ``-0ubuntu0.<release>.<n>`` versions and relations (the
  catalogued build; ``-moved`` only a later one, as the archive looks once Canonical moved on).
* ``libnvidia-container/stable/deb/<arch>/`` and ``libnvidia-container/gpgkey`` — the Container Toolkit's
  four packages at 1.16.2 (affected by CVE-2025-23266) and at the pinned release.
* ``kata/<version>/kata-static-<version>-<arch>.tar.zst`` — a Kata static release with ``/opt/kata``.
* ``gvisor/<release>/<arch>/{runsc,containerd-shim-runsc-v1}`` with ``.sha512`` files.

Every name and version is read from the hardware catalog (``blueprints.vendor``) or the recorded index metadata
(``tests/fixtures/cuda-repos``), never spelled here.
Installed files are honest stand-ins: ``nvidia-smi`` prints a recorded real output of the pinned driver
(``tests/fixtures/nvidia-smi``), daemons are shell scripts that say they are stand-ins, and units are
the vendors' unit names.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import http.server
import itertools
import os
import shutil
import socketserver
import subprocess
import tarfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from blueprints.catalog import catalog
from blueprints.settings import NcclStackSettings
from blueprints.vendor import bare_metal, kata_tarball

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@dataclass
class Deb:
    """One stand-in Debian package: ``files`` maps absolute paths to (content, mode): text or bytes, or with a
    negative mode a symbolic link whose target is ``content``."""

    name: str
    version: str
    depends: list[str] = field(default_factory=list)
    files: Mapping[str, tuple[str | bytes, int]] = field(default_factory=dict)
    description: str = "clusterforge test stand-in"
    provides: list[str] = field(default_factory=list)
    recommends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    replaces: list[str] = field(default_factory=list)
    pre_depends: list[str] = field(default_factory=list)
    arch: str = "amd64"
    """Debian architecture (``amd64``, ``arm64``, ``all``)."""


def _script(text: str) -> tuple[str, int]:
    return ("#!/bin/sh\n" + text, 0o755)


def _unit(description: str, exec_start: str) -> tuple[str, int]:
    text = (f"[Unit]\nDescription={description}\n\n[Service]\nExecStart={exec_start}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
    return (text, 0o644)


def fabricmanager_files(version: str, cfg_text: str) -> dict[str, tuple[str | bytes, int]]:
    """Fabric Manager's daemon, unit, start script and configuration as NVIDIA's package ships them from R570: the unit
    runs ``nvidia-fabricmanager-start.sh --mode precheck`` (ExecStartPre), then ``--mode start`` (ExecStart), which on
    NVLink 5 starts NVLSM before Fabric Manager. The stand-in start script enforces the documented start check: on a
    system whose InfiniBand devices include an NVSwitch management port (VPD with the catalog's ``management_port_vpd``)
    it refuses to start while ``ib_umad`` is not loaded ("Kernel module "ib_umad" has not been loaded, fabric manager
    cannot be started", NVIDIA's message quoted in https://github.com/spectrocloud/CanvOS/pull/700) or NVLSM is not
    installed (NV_WARN_NOTHING_TO_DO, https://github.com/siderolabs/extensions/pull/717). ``CLUSTERFORGE_STANDIN_SYSFS``
    names the sysfs tree it reads (a test's boot simulation; ``/sys`` otherwise)."""
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    nvl5, cfg = sw["nvlink5_fabricmanager"], sw["fabricmanager_config"]
    vpd, lsm, lsm_cfg, start = (nvl5["management_port_vpd"], nvl5["nvlsm_binary"], nvl5["nvlsm_config"],
                                nvl5["start_script"])
    script = (f'SYSFS="${{CLUSTERFORGE_STANDIN_SYSFS:-/sys}}"\nmode=precheck\n'
              'while [ $# -gt 0 ]; do case "$1" in --mode) mode=$2; shift;; esac; shift; done\n'
              f'nvl5=; for v in "$SYSFS"/class/infiniband/*/device/vpd; do grep -qs "{vpd}" "$v" && nvl5=1; done\n'
              'if [ -n "$nvl5" ]; then\n  echo "Detected NVL5+ system"\n'
              '  [ -d "$SYSFS/module/ib_umad" ] || { echo \'Kernel module "ib_umad" has not been loaded, fabric manager cannot '
              'be started\' >&2; exit 1; }\n'
              f'  [ -x "{lsm}" ] || {{ echo "NVLSM is not installed: NV_WARN_NOTHING_TO_DO" >&2; exit 1; }}\n'
              f'  [ "$mode" = start ] && "{lsm}" --config "{lsm_cfg}"\nfi\n'
              f'[ "$mode" = start ] && exec /usr/bin/nv-fabricmanager -c {cfg}\nexit 0\n')
    unit = (f"[Unit]\nDescription=NVIDIA fabric manager service\n\n[Service]\nType=forking\n"
            f"ExecStartPre={start} --mode precheck\nExecStart={start} --mode start\n\n"
            "[Install]\nWantedBy=multi-user.target\n")
    return {"/usr/bin/nv-fabricmanager": _script(f"echo 'clusterforge stand-in for nv-fabricmanager {version}'\n"),
            start: _script(script),
            f"/usr/lib/systemd/system/{sw['services']['fabricmanager']}.service": (unit, 0o644),
            cfg: (cfg_text, 0o644)}


def imex_files(version: str) -> dict[str, tuple[str | bytes, int]]:
    """IMEX as NVIDIA's package installs it (IMEX guide: the systemd service ``nvidia-imex``, ``nvidia-imex-ctl``; the
    configuration file whose IMEX_NODE_CONFIG_FILE names the node list, defaults from the guide's config options). The
    stand-in daemon does what the real one checks when it starts: it reads its configuration and the node list and
    refuses to start when the list is missing, empty, holds a line that is not an IP address, or does not hold an
    address of this node (with BIND_INTERFACE_IP empty it binds the listed address found on a local interface).
    ``CLUSTERFORGE_STANDIN_IPS`` names this node's addresses (a test's boot simulation; ``hostname -I`` otherwise)."""
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    im = sw["imex_service"]
    cfg, key, nodes = im["config"], im["node_config_key"], im["nodes_config"]
    daemon = ('cfg=/dev/null; while [ $# -gt 0 ]; do case "$1" in -c) cfg=$2; shift;; esac; shift; done\n'
              f'list=$(sed -n "s/^{key}=//p" "$cfg"); list=${{list:-{nodes}}}\n'
              '[ -s "$list" ] || { echo "IMEX: node configuration file $list is missing or empty" >&2; exit 1; }\n'
              'ips="${CLUSTERFORGE_STANDIN_IPS:-$(hostname -I 2>/dev/null)}"; mine=\n'
              'while read -r ip; do case "$ip" in ""|\\#*) continue;; esac\n'
              '  echo "$ip" | grep -Eq "^[0-9]+([.][0-9]+){3}$|:" || { echo "IMEX: $list: not an IP address: $ip" >&2; exit 1; }\n'
              '  for l in $ips; do [ "$l" = "$ip" ] && mine=$ip; done\ndone < "$list"\n'
              '[ -n "$mine" ] || { echo "IMEX: no address of this node in $list" >&2; exit 1; }\n'
              f'echo "clusterforge stand-in for nvidia-imex {version}: bound to $mine"\n')
    unit = ("[Unit]\nDescription=NVIDIA IMEX service\nAfter=network-online.target\nRequires=network-online.target\n\n"
            f"[Service]\nType=forking\nExecStart=/usr/bin/nvidia-imex -c {cfg}\n\n[Install]\nWantedBy=multi-user.target\n")
    return {"/usr/bin/nvidia-imex": _script(daemon),
            "/usr/bin/nvidia-imex-ctl": _script(f"echo 'clusterforge stand-in for nvidia-imex-ctl {version}'\n"),
            f"/usr/lib/systemd/system/{sw['services']['imex']}.service": (unit, 0o644),
            cfg: (f"DAEMONIZE=1\nBIND_INTERFACE_IP=\nSERVER_PORT=50000\n{key}={nodes}\n", 0o644)}


def build_deb(pkg: Deb, out: Path) -> Path:
    """Build ``pkg`` with ``dpkg-deb --build`` into ``out``; returns the ``.deb`` path."""
    root = out / f".build-{pkg.name}-{pkg.version.replace(':', '_')}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {pkg.name}", f"Version: {pkg.version}", f"Architecture: {pkg.arch}",
               "Maintainer: clusterforge tests <tests@clusterforge.invalid>", f"Description: {pkg.description}"]
    for key, rel in (("Depends", pkg.depends), ("Provides", pkg.provides), ("Pre-Depends", pkg.pre_depends),
                     ("Recommends", pkg.recommends), ("Conflicts", pkg.conflicts), ("Replaces", pkg.replaces)):
        if rel:
            control.insert(3, f"{key}: " + ", ".join(rel))
    (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
    for path, (content, mode) in pkg.files.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        if mode < 0:  # a symbolic link to `content`
            p.symlink_to(content)
            continue
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        p.chmod(mode)
    deb = out / f"{pkg.name}_{pkg.version.split(':')[-1]}_{pkg.arch}.deb"  # Debian file names drop the epoch
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return deb


class Signer:
    """A throwaway GnuPG home with one signing key (the stand-ins' repository key)."""

    def __init__(self, home: Path):
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        home.chmod(0o700)
        if not (home / "pubring.kbx").exists():
            self._gpg("--batch", "--passphrase", "", "--quick-gen-key", "clusterforge stand-in <tests@clusterforge.invalid>",
                      "rsa2048", "sign", "never")

    def _gpg(self, *args: str) -> str:
        return subprocess.run(["gpg", "--homedir", str(self.home), *args], check=True, capture_output=True,
                              text=True).stdout

    def public_key(self) -> str:
        """The ASCII-armoured public key (what apt's ``Signed-By`` reads)."""
        return self._gpg("--armor", "--export")

    def sign_repo(self, d: Path, arch: str = "amd64") -> None:
        """Write ``Packages``, ``Release`` and a clear-signed ``InRelease`` for the flat repository ``d`` of
        Debian architecture ``arch``."""
        pkgs = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=d, check=True, capture_output=True,
                              text=True).stdout
        (d / "Packages").write_text(pkgs)
        lines = ["Origin: clusterforge stand-in", "Label: clusterforge stand-in", f"Architectures: {arch}",
                 "Date: " + email.utils.formatdate(usegmt=True), "SHA256:"]
        data = (d / "Packages").read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} Packages")
        (d / "Release").write_text("\n".join(lines) + "\n")
        inrelease = d / "InRelease"
        inrelease.unlink(missing_ok=True)
        self._gpg("--batch", "--yes", "--clearsign", "-o", str(inrelease), str(d / "Release"))


def nvidia_packages(version: str, branch: str, dist: str = "debian12", arch: str = "x86_64") -> list[Deb]:
    """The packages of one driver release in CUDA repository directory ``<dist>/<arch>``: the driver's own, with that
    directory's names, relations and revision (recorded index metadata, :mod:`tests.roles.cuda_repos`), and the
    NVSwitch packages at the same version (names from the catalog)."""
    from .cuda_repos import ARCHITECTURES, driver_debs, revision

    nd = bare_metal()["nvidia_driver"]
    v = f"{version}-{revision(dist, version)}"
    sw = nd["nvswitch"]
    pkgs = driver_debs(dist, version, arch)
    unversioned = int(branch) >= int(sw["unversioned_names_from_branch"])
    for part in ("fabricmanager", "nscq", "nvsdm", "imex"):
        name = sw[part] if unversioned else f"{sw[part]}-{branch}"
        files: dict[str, tuple[str | bytes, int]] = {f"/usr/share/doc/{name}/VERSION": (version + "\n", 0o644)}
        if part == "imex":
            files.update(imex_files(version))
        if part == "fabricmanager":
            # the package's default configuration (keys of NVIDIA's fabricmanager.cfg; bare-metal mode)
            files.update(fabricmanager_files(version, (
                "LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nLOG_APPEND_TO_LOG=1\n"
                "DAEMONIZE=1\nBIND_INTERFACE_IP=127.0.0.1\nSTARTING_TCP_PORT=16000\n"
                "FABRIC_MODE=0\nFABRIC_MODE_RESTART=0\nSTATE_FILE_NAME=/var/tmp/fabricmanager.state\n")))
        pkgs.append(Deb(name, v, files=files))
    for pkg in pkgs:
        pkg.arch = ARCHITECTURES[arch]
    return pkgs


def ubuntu_headers() -> Deb:
    """Ubuntu's kernel headers meta-package (the DKMS path of a Ubuntu host installs it)."""
    return Deb("linux-headers-generic", "6.8.0.1", description="stand-in for Ubuntu's kernel headers meta-package")


UBUNTU_KERNELS = {"ubuntu-22.04": ("5.15.0-163", "5.15.0-163.173"), "ubuntu-24.04": ("6.8.0-90", "6.8.0-90.91")}
"""Kernel ABI and version of the stand-in Ubuntu archive's GA kernel per release (linux-restricted-modules builds
its signed NVIDIA module packages per kernel ABI, versioned like the kernel)."""

UBUNTU_HWE_KERNELS = {"ubuntu-22.04": ("6.8.0-90", "6.8.0-90.91~22.04.1"),
                      "ubuntu-24.04": ("6.14.0-37", "6.14.0-37.37~24.04.1")}
"""Kernel ABI and version of the stand-in archive's HWE kernel per release (the next LTS's kernel backported,
``~<release>.1`` versions; its signed modules come from linux-restricted-modules-hwe-<version>)."""


def ubuntu_driver_packages(os_name: str, branch: str, driver: str, fabricmanager: str, nscq: str,
                           kernel: tuple[str, str], hwe_kernel: tuple[str, str] | None = None) -> list[Deb]:
    """One Ubuntu-archive build of driver ``branch`` (``-server`` flavour) with the archive's real names and
    relations: nvidia-graphics-drivers-<branch>-server (``driver``, e.g. ``580.173.02-0ubuntu0.22.04.1``),
    fabric-manager-<branch> and libnvidia-nscq-<branch> (their own archive versions; both depend on the virtual
    ``nvidia-kernel-common-<branch>-server-<upstream>``, so they install only beside the driver's exact upstream
    release), and linux-restricted-modules' Canonical-signed modules for the ``kernel`` (ABI, version): the
    per-ABI module package and the kernel-flavour meta-package, both versioned by the kernel, for the GA kernel
    and (``hwe_kernel``) the HWE kernel, with the kernel image meta-packages that select each flavour. Names come
    from the catalog (``ubuntu_signed_precompiled``), open and proprietary flavours."""
    nd = bare_metal()["nvidia_driver"]
    signed = nd["ubuntu_signed_precompiled"]
    up = driver.rsplit("-", 1)[0]
    common = f"nvidia-kernel-common-{branch}-server"
    virtual = f"{common}-{up}"
    compute, cutils = f"libnvidia-compute-{branch}-server", f"nvidia-compute-utils-{branch}-server"
    persistenced = nd["packages"]["persistenced_service"]
    headless, utils = signed["userspace"]
    out = [
        Deb(common, driver, provides=[virtual], files={f"/usr/share/doc/{common}/VERSION": (up + "\n", 0o644)}),
        Deb(compute, driver, depends=[virtual]),
        Deb(cutils, driver, depends=[virtual], files={
            f"/usr/bin/{persistenced}": _script(f"echo 'clusterforge stand-in for {persistenced} {up}'\n"),
            f"/usr/lib/systemd/system/{persistenced}.service": _unit(
                "NVIDIA Persistence Daemon", f"/usr/bin/{persistenced} --verbose")}),
        Deb(utils.format(branch=branch, open=""), driver, depends=[f"{compute} (>= {up})", virtual], files={
            "/usr/bin/nvidia-smi": _script(f"echo 'NVIDIA-SMI {up} (Ubuntu archive stand-in {driver})'\n")}),
    ]
    ga = "generic"  # the flavour of these stand-in kernels (<ABI>-generic), GA and its HWE series
    k = bare_metal()["kernel"]
    kernels = [(ga, kernel)] + ([(k["hwe_flavour"][os_name].format(flavour=ga), hwe_kernel)]
                                if hwe_kernel else [])
    for flavour, (kabi, kv) in kernels:
        out.append(Deb(f"linux-image-{kabi}-generic", kv, description="stand-in for a Ubuntu kernel image"))
        out.append(Deb(k["image_meta"].format(flavour=flavour), kv, depends=[f"linux-image-{kabi}-generic"],
                       description=f"stand-in for Ubuntu's {flavour} kernel image meta-package"))
    for o in ("-open", ""):
        out.append(Deb(headless.format(branch=branch, open=o), driver,
                       depends=[f"{cutils} (= {driver})", f"{common} (= {driver})", f"{compute} (= {driver})"]))
        for flavour, (kabi, kv) in kernels:
            per_abi = f"linux-modules-nvidia-{branch}-server{o}-{kabi}-generic"
            out.append(Deb(per_abi, kv, depends=[f"linux-image-{kabi}-generic", f"{common} (>= {up})"], files={
                f"/lib/modules/{kabi}-generic/kernel/nvidia-{branch}srv{o}/nvidia.ko": (f"signed stand-in {up}\n", 0o644)}))
            out.append(Deb(signed["modules"].format(branch=branch, open=o, flavour=flavour), kv,
                           depends=[f"{per_abi} (= {kv})", f"{common} (>= {up})"]))
    fm_name = signed["fabricmanager"].format(branch=branch)
    out.append(Deb(fm_name, fabricmanager, depends=[virtual],
                   files=fabricmanager_files(up, "FABRIC_MODE=0\nFABRIC_MODE_RESTART=0\n")))
    out.append(Deb(signed["nscq"].format(branch=branch), nscq, depends=[virtual]))
    return out


UBUNTU_MOVED_ON = "580.178.04"
"""A later upstream release of branch 580 that Canonical published after the catalogued build (the
``ubuntu-moved`` stand-in carries only it, as the archive's -updates pocket does once it moves on)."""


def _ubuntu_archive(root: Path, signer: Signer, key: str) -> None:
    """The Ubuntu archive stand-ins: ``ubuntu/<release>/`` carries the catalogued build of every branch the
    catalog lists for that release (plus an older build, as the release pocket keeps one), ``ubuntu-moved/
    <release>/`` only a later build (the archive after Canonical moved on). Flat, signed repositories."""
    archive = bare_metal()["nvidia_driver"]["ubuntu_signed_precompiled"].get("archive", {})
    for branch, rows in archive.items():
        for os_name, row in rows.items():
            abi, kver = UBUNTU_KERNELS[os_name]
            rel = row["driver"].rsplit("-", 1)[1]
            d = root / "ubuntu" / os_name
            d.mkdir(parents=True, exist_ok=True)
            builds = [(row["driver"], row["fabricmanager"], row["nscq"], (abi, kver), UBUNTU_HWE_KERNELS[os_name])]
            older_abi = f"{abi.rsplit('-', 1)[0]}-{int(abi.rsplit('-', 1)[1]) - 5}"
            older = f"{catalog().driver_releases(branch)[0]}-{rel}"
            builds.append((older, older, older, (older_abi, kver.replace(abi, older_abi).rsplit(".", 1)[0] + ".1"), None))
            for drv, fm, nscq, kernel, hwe in builds:
                for pkg in ubuntu_driver_packages(os_name, branch, drv, fm, nscq, kernel, hwe):
                    build_deb(pkg, d)
            signer.sign_repo(d)
            (d / "archive.asc").write_text(key)
            moved = root / "ubuntu-moved" / os_name
            moved.mkdir(parents=True, exist_ok=True)
            if branch == UBUNTU_MOVED_ON.split(".")[0]:
                new = f"{UBUNTU_MOVED_ON}-{rel}"
                new_abi = f"{abi.rsplit('-', 1)[0]}-{int(abi.rsplit('-', 1)[1]) + 3}"
                for pkg in ubuntu_driver_packages(os_name, branch, new, new, new,
                                                  (new_abi, kver.replace(abi, new_abi))):
                    build_deb(pkg, moved)
            signer.sign_repo(moved)
            (moved / "archive.asc").write_text(key)


NVLSM_NEWER = "2026.02.1-1"
"""An NVLSM release newer than every catalogued one: the stand-in CUDA repository carries it, so an unpinned
install would visibly take it."""


def nvlsm_packages() -> list[Deb]:
    """NVLSM at every catalogued release and at :data:`NVLSM_NEWER`: the binary and its configuration where NVIDIA's
    redistributable puts them (``/opt/nvidia/nvlsm/sbin/nvlsm``, ``/usr/share/nvidia/nvlsm/nvlsm.conf``) and no unit of
    its own (Fabric Manager's unit starts it)."""
    sw = bare_metal()["nvidia_driver"]["nvswitch"]
    nvl5 = sw["nvlink5_fabricmanager"]
    return [Deb(sw["nvlsm"], v, files={
        nvl5["nvlsm_binary"]: _script(f"echo 'clusterforge stand-in for nvlsm {v}'\n"),
        nvl5["nvlsm_config"]: ("log_file /var/log/nvlsm.log\n", 0o644)})
        for v in sorted({*map(str, sw["nvlsm_versions"].values()), NVLSM_NEWER})]


TOOLKIT_REVISION = "1"
"""Debian revision of the NVIDIA Container Toolkit's packages: one build for every distribution, ``-1``
(``libnvidia-container1_1.17.3-1_amd64.deb``, ``nvidia-container-toolkit_1.19.0-1_amd64.deb`` in the CUDA repository's
debian12 and ubuntu2204 directories; tests/fixtures/cuda-repos/README.md). The roles pin ``<version>-*``."""


def toolkit_packages(version: str) -> list[Deb]:
    """The Container Toolkit's four packages of one release with their dependency relations."""
    ct = bare_metal()["container_toolkit"]
    v = f"{version}-{TOOLKIT_REVISION}"
    toolkit, base, tools, lib = ct["packages"]
    return [
        Deb(lib, v, files={f"/usr/share/doc/{lib}/VERSION": (version + "\n", 0o644)}),
        Deb(tools, v, depends=[f"{lib} (>= {v})"], files={
            "/usr/bin/nvidia-container-cli": _script(f"echo 'cli-version: {version} (stand-in)'\n")}),
        Deb(base, v, files={"/usr/bin/nvidia-ctk": _script(
            f'case "$1" in --version) echo "NVIDIA Container Toolkit CLI version {version}";; '
             f'cdi) for a; do case "$a" in --output=*) echo "cdiVersion: 0.5.0" > "${{a#--output=}}";; esac; done;; esac\n')}),
        Deb(toolkit, v, depends=[f"{base} (= {v})", f"{tools} (>= {v})"], files={
            "/usr/bin/nvidia-container-runtime": _script(f"echo 'runc wrapper (stand-in) {version}'\n"),
            "/usr/bin/nvidia-container-runtime-hook": _script("exit 0\n")}),
    ]


@dataclass
class VendorMirror:
    """The built stand-in tree (``root``) and the URLs the roles' mirror variables take."""

    root: Path
    base_url: str = ""
    server: socketserver.TCPServer | None = None

    def extravars(self) -> dict[str, str]:
        """Mirror variables pointing every vendor install at the stand-ins (the Lustre client's site repository is
        a blueprint field instead: :meth:`lustre_client_repo`)."""
        return {
            "nvidia_driver_cuda_repo_base_url": f"{self.base_url}/cuda",
            "container_runtime_nvidia_toolkit_repo_url": f"{self.base_url}/libnvidia-container",
            "sandbox_kata_release_url": f"{self.base_url}/kata",
            "sandbox_gvisor_release_url": f"{self.base_url}/gvisor",
            "rdma_doca_repo_base_url": f"{self.base_url}/doca",
            **self.nccl_stack_vars(),
            **self.integrity_pins(),
            **self.key_pins(),
        }

    def nccl_stack_vars(self) -> dict[str, str]:
        """The nccl_stack role's download variables for the stand-ins, as a site mirror would set them: the nccl-tests
        release served here with its SHA-256 (the role checks the stand-in against it exactly as against the catalog's
        pin) and the stand-in wheel index of the examples' CUDA (every on-prem example declares the same stack)."""
        stacks = example_nccl_stacks()
        if not stacks:
            return {}
        s = stacks[0]
        tarball = self.root / "nccl-tests" / "archive" / "refs" / "tags" / f"v{s.tests_version}.tar.gz"
        local = s.torch_index_url.rstrip("/").rsplit("/", 1)[1]
        return {"nccl_stack_tests_url": f"{self.base_url}/nccl-tests/archive/refs/tags/v{s.tests_version}.tar.gz",
                "nccl_stack_tests_sha256": hashlib.sha256(tarball.read_bytes()).hexdigest(),
                "nccl_stack_torch_index_url": f"{self.base_url}/pytorch/whl/{local}"}

    def key_fingerprint(self) -> str:
        """The primary key fingerprint of the stand-ins' repository key (every stand-in repository is signed with
        it), read with ``gpg --with-colons --show-keys`` from the key file the roles download."""
        out = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(self.root / "libnvidia-container" / "gpgkey")],
                             check=True, capture_output=True, text=True).stdout.splitlines()
        return next(line.split(":")[9] for prev, line in itertools.pairwise(out)
                    if prev.startswith("pub:") and line.startswith("fpr:"))

    def key_pins(self) -> dict[str, str]:
        """The roles' APT key fingerprint pins for the stand-ins, as the catalog pins the vendors' keys
        (``bare_metal.nvidia_driver.cuda_repo.key_fingerprints``, ``bare_metal.container_toolkit.key_fingerprints``,
        ``bare_metal.doca_ofed.key_fingerprints``): the roles check the stand-in key exactly as they check the
        vendors', so another key fails the converge."""
        fpr = self.key_fingerprint()
        return {"nvidia_driver_cuda_repo_key_fingerprints": fpr, "container_runtime_nvidia_toolkit_key_fingerprints": fpr,
                "rdma_doca_key_fingerprints": fpr}

    def integrity_pins(self) -> dict[str, str]:
        """The sandbox role's integrity pins for the stand-in release files, as the catalog would pin the real
        ones (``bare_metal.kata.sha256``, ``bare_metal.gvisor.sha512``): the role checks the stand-ins exactly as
        it checks the vendors' files, so a stand-in that does not match its pin fails the converge."""
        kata = {p.name.rsplit("-", 1)[1].split(".", 1)[0]: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted((self.root / "kata").glob("*/kata-static-*"))}
        runsc = {f"{p.parent.name}/{p.name}": hashlib.sha512(p.read_bytes()).hexdigest()
                 for p in sorted((self.root / "gvisor").glob("*/*/*")) if not p.name.endswith(".sha512")}
        return {"sandbox_kata_sha256": " ".join(f"{k}={v}" for k, v in kata.items()),
                "sandbox_gvisor_sha512": " ".join(f"{k}={v}" for k, v in runsc.items())}

    def lustre_client_repo(self) -> dict[str, str]:
        """The stand-in site repository of the Lustre client as a ``software.lustre_client_repos`` entry (the
        blueprint field a site fills in; the converges write it into the example blueprint)."""
        return {"url": f"{self.base_url}/lustre/", "key_url": f"{self.base_url}/lustre/gpgkey"}

    def start(self) -> VendorMirror:
        """Serve ``root`` on 127.0.0.1 (an ephemeral port) from a daemon thread."""
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def example_driver_versions() -> set[str]:
    """The exact driver releases the example blueprints install on their GPU hosts (``gpu_packages``)."""
    from blueprints import load_blueprint
    from blueprints.resolved import resolve
    from tests.conftest import EXAMPLES

    out: set[str] = set()
    for path in sorted(EXAMPLES.glob("onprem-*.yaml")):
        bp = load_blueprint(path).blueprint
        out |= {r.settings.gpu_packages.version for r in resolve(bp).groups if r.settings.gpu_packages}
    return out


def example_nccl_stacks() -> list[NcclStackSettings]:
    """The collective stacks (:attr:`NodeSettings.nccl_stack`) the example blueprints give their on-prem training
    nodes, one per distinct stack."""
    from blueprints import load_blueprint
    from blueprints.resolved import resolve
    from tests.conftest import EXAMPLES

    out: dict[str, NcclStackSettings] = {}
    for path in sorted(EXAMPLES.glob("onprem-*.yaml")):
        for r in resolve(load_blueprint(path).blueprint).groups:
            if r.settings.nccl_stack is not None:
                out.setdefault(r.settings.nccl_stack.model_dump_json(), r.settings.nccl_stack)
    return list(out.values())


def build_mirror(root: Path) -> VendorMirror:
    """Build every stand-in under ``root`` (idempotent: a finished tree is reused)."""
    if (root / "ready").exists():
        return VendorMirror(root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    bm = bare_metal()
    signer = Signer(root.parent / f"{root.name}-gnupg")
    nd = bm["nvidia_driver"]
    # NVIDIA's CUDA repository: one directory per distribution and architecture, each with its own driver package
    # names, relations and revisions (tests/roles/cuda_repos.py, from the recorded indexes in tests/fixtures/cuda-repos).
    # Every release a GPU example installs, plus the catalogued releases just before and after each (apt would pick
    # the newest without the pin).
    used = sorted(example_driver_versions())
    built: set[str] = set()
    for v in used:
        releases = catalog().driver_releases(v)
        i = releases.index(v)
        built.update(releases[max(0, i - 1):i + 2])
    from .cuda_repos import dcgm_debs, legacy_dcgm_debs
    from .nccl_stack_standins import build_nccl_stack  # NCCL, CUDA compiler, nccl-tests release, torch wheels

    common = root / "cuda-common"  # packages every x86_64 directory carries alike (built once, linked into each)
    common.mkdir()
    build_deb(ubuntu_headers(), common)
    for pkg in nvlsm_packages():
        build_deb(pkg, common)
    build_nccl_stack(root, common, example_nccl_stacks())
    key = signer.public_key()
    dc = nd["dcgm"]
    for dist in nd["cuda_repo"]["dists"].values():
        for arch, deb_arch in (("x86_64", "amd64"), ("sbsa", "arm64")):
            d = root / "cuda" / dist / arch
            d.mkdir(parents=True)
            pkgs = [p for version in sorted(built) for p in nvidia_packages(version, version.split(".")[0], dist, arch)]
            pkgs += dcgm_debs(f"{dc['epoch']}:{dc['version']}", arch) + legacy_dcgm_debs(dist, arch)
            for pkg in pkgs:
                build_deb(pkg, d)
            if arch == "x86_64":
                for deb in common.glob("*.deb"):
                    os.link(deb, d / deb.name)
            signer.sign_repo(d, deb_arch)
            (d / nd["cuda_repo"]["key_file"]).write_text(key)
    ct = bm["container_toolkit"]
    tk = root / "libnvidia-container" / "stable" / "deb" / "amd64"
    tk.mkdir(parents=True)
    # the pinned release between an older one and a newer one (1.20.0: NVIDIA/nvidia-container-toolkit PR #1977)
    for version in ("1.17.8", ct["default_version"], "1.20.0"):
        for pkg in toolkit_packages(version):
            build_deb(pkg, tk)
    signer.sign_repo(tk)
    (root / "libnvidia-container" / "gpgkey").write_text(key)
    # Lustre client: the site repository the role is pointed at (flat, signed), with the packages of
    # Lustre's Debian packaging; the DKMS package carries its dkms.conf, the utilities mount.lustre.
    lustre = root / "lustre"
    lustre.mkdir()
    lv = "2.15.7-1"  # a Lustre 2.15 LTS client build
    for name in bm["lustre_client"]["packages"]:
        files = ({"/usr/src/lustre-client-modules-2.15.7/dkms.conf": ('PACKAGE_NAME="lustre-client-modules"\n', 0o644)}
                 if name.endswith("-dkms") else
                 {"/sbin/mount.lustre": _script("echo 'clusterforge stand-in for mount.lustre' >&2; exit 1\n")})
        build_deb(Deb(name, lv, files=files), lustre)
    signer.sign_repo(lustre)
    (lustre / "gpgkey").write_text(key)
    _doca(root / "doca", signer, key)
    _ubuntu_archive(root, signer, key)
    # Ubuntu's main archive as far as the roles need what Debian's lacks (the Ubuntu-shaped roots read Debian's
    # archive): the kernel headers meta-package a DKMS host gets (nvidia_driver, and lustre_client on hosts without
    # a GPU, which have no CUDA repository). The converges add it to every Ubuntu-shaped root.
    for os_name in UBUNTU_KERNELS:
        base = root / "ubuntu-base" / os_name
        base.mkdir(parents=True)
        build_deb(ubuntu_headers(), base)
        signer.sign_repo(base)
        (base / "archive.asc").write_text(key)
    _kata(root / "kata")
    _runsc(root / "gvisor" / bm["gvisor"]["default_release"] / "x86_64", bm["gvisor"]["default_release"])
    (root / "ready").write_text("ok\n")
    return VendorMirror(root)


DOCA_RELEASE = "3.2.1"
"""The DOCA-Host release the stand-in DOCA repository carries (the tests set ``software.doca_ofed`` to it)."""

DOCA_OFED_VERSION = "25.10.OFED.25.10.1.0.1"
"""Version of the stand-in OFED packages (an OFED 25.10 build, the stack DOCA-Host 3.2 ships)."""


def doca_packages() -> list[Deb]:
    """DOCA-OFED's profile meta-package and what it pulls in: the OFED kernel drivers as a DKMS package (with the
    ``openibd`` unit that reloads them), OFED's scripts (``ofed_info``) and mlnx-tools, which carries ``mlnx_qos``
    (https://github.com/Mellanox/mlnx-tools). Like DOCA's DKMS package from 3.2.0, the kernel drivers' configure step
    fails when no kernel headers are installed (DOCA-Host guide: headers of the running kernel before the install)."""
    doca = bare_metal()["doca_ofed"]
    postinst = ("#!/bin/sh\nset -e\n[ \"$1\" = configure ] || exit 0\n"
                "dpkg-query -W -f='${Package} ${Status}\\n' 'linux-headers-*' 2>/dev/null | grep -q ' install ok installed' || "
                "{ echo 'Error! Your kernel headers for kernel cannot be found: DKMS cannot build mlnx-ofed-kernel' >&2; "
                "exit 1; }\n")
    kernel = Deb("mlnx-ofed-kernel-dkms", DOCA_OFED_VERSION, files={
        "/usr/src/mlnx-ofed-kernel-25.10/dkms.conf": ('PACKAGE_NAME="mlnx-ofed-kernel"\nPACKAGE_VERSION="25.10"\n', 0o644),
        f"/usr/lib/systemd/system/{doca['services']['openibd']}.service": _unit(
            "openibd - configure Mellanox devices", "/etc/init.d/openibd start"),
        "/DEBIAN/postinst": (postinst, 0o755)})
    scripts = Deb("ofed-scripts", DOCA_OFED_VERSION, files={
        doca["previous_ofed"]["marker"]: _script(f"echo 'OFED-internal-{DOCA_OFED_VERSION}:'\n"),
        doca["previous_ofed"]["uninstall"]: _script("echo 'clusterforge stand-in for ofed_uninstall.sh'\n")})
    tools = Deb("mlnx-tools", DOCA_OFED_VERSION, files={
        "/usr/bin/mlnx_qos": _script("echo 'clusterforge stand-in for mlnx_qos' >&2; exit 1\n")})
    metas = [Deb(name, f"{DOCA_RELEASE}-1", depends=[kernel.name, scripts.name, tools.name])
             for name in doca["packages"]]
    return [kernel, scripts, tools, *metas]


def _doca(base: Path, signer: Signer, key: str) -> None:
    """NVIDIA's DOCA repository layout for :data:`DOCA_RELEASE`: one signed flat repository per catalogued
    distribution (``<base>/<release>/<dist>/x86_64/``; the catalog's other architecture directories exist as NVIDIA's
    do, unpopulated here) and the signing key at the repository root, where NVIDIA's instructions fetch it
    (``<base>/GPG-KEY-Mellanox.pub``), not beside each index."""
    doca = bare_metal()["doca_ofed"]
    for dist in doca["dists"].values():
        for arch in doca["arch"].values():
            (base / DOCA_RELEASE / dist / arch).mkdir(parents=True)
        d = base / DOCA_RELEASE / dist / doca["arch"]["x86_64"]
        for pkg in doca_packages():
            build_deb(pkg, d)
        signer.sign_repo(d)
    (base / doca["key_file"]).write_text(key)


def _kata(base: Path) -> None:
    from blueprints.models import Software

    version = Software().kata
    d = base / version
    d.mkdir(parents=True)
    stage = base / ".stage"
    files = {
        "opt/kata/bin/containerd-shim-kata-v2": _script(f"echo 'kata shim stand-in {version}'\n"),
        "opt/kata/bin/kata-runtime": _script(f"echo 'kata-runtime stand-in {version}'\n"),
        "opt/kata/share/defaults/kata-containers/configuration-qemu-nvidia-gpu.toml": (
            "[hypervisor.qemu]\npath = \"/opt/kata/bin/qemu-system-x86_64\"\n", 0o644),
    }
    for path, (content, mode) in files.items():
        p = stage / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        p.chmod(mode)
    name = kata_tarball(version)
    tar = base / "kata.tar"
    with tarfile.open(tar, "w") as t:
        t.add(stage / "opt", arcname="./opt")
    if name.endswith(".zst"):
        subprocess.run(["zstd", "-q", "-f", str(tar), "-o", str(d / name)], check=True)
    else:
        subprocess.run(["xz", "-c", str(tar)], check=True, stdout=(d / name).open("wb"))
    tar.unlink()
    shutil.rmtree(stage)


def _runsc(d: Path, release: str) -> None:
    d.mkdir(parents=True)
    for name in ("runsc", "containerd-shim-runsc-v1"):
        body = f"#!/bin/sh\necho '{name} stand-in release-{release}'\n"
        (d / name).write_text(body)
        digest = hashlib.sha512(body.encode()).hexdigest()
        (d / f"{name}.sha512").write_text(f"{digest}  {name}\n")
