"""Vendor software of a bare-metal node: which packages, from which repository, at which exact version.

Every name, version and URL comes from the ``bare_metal`` section of ``blueprints/data/catalog-extras.yaml``
(each entry with its ``source``); this module only combines them with the blueprint:

* :func:`driver_packages` — NVIDIA driver, Fabric Manager, NSCQ, NVSDM, NVLSM and DCGM 4 from NVIDIA's CUDA
  repository at one exact version (Debian/Ubuntu ``apt`` specs ``name=version``), the packages to hold, and
  the Ubuntu Secure Boot variant (Canonical-signed precompiled modules from the Ubuntu archive);
* :func:`container_toolkit_packages` — the four NVIDIA Container Toolkit packages pinned to one version;
* :func:`kata_tarball` — the Kata static release file name for a version (``.tar.xz`` / ``.tar.zst``).

Which exact driver release a branch resolves to and which releases a sandbox runtime accepts are
:meth:`blueprints.catalog.Catalog.driver_release` and :meth:`~blueprints.catalog.Catalog.runtime_release`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .catalog import catalog
from .versions import version as parse_version

__all__ = [
    "DocaRepository",
    "DriverPackages",
    "bare_metal",
    "container_toolkit_packages",
    "doca_repository",
    "driver_packages",
    "kata_tarball",
]


def bare_metal() -> dict[str, Any]:
    """The catalog's ``bare_metal`` section (:attr:`blueprints.catalog.Catalog.bare_metal`)."""
    return catalog().bare_metal


class DriverPackages(BaseModel):
    """The NVIDIA GPU stack of one node group (Debian/Ubuntu apt specs ``name=version``).

    ``packages``: driver meta-package plus the NVSwitch packages of the GPU's NVLink generation and DCGM 4,
    every NVIDIA-versioned one pinned to ``version``; ``hold``: package names to ``apt-mark hold``;
    ``secure_boot_packages`` / ``secure_boot_hold``: the Ubuntu Secure Boot set (signed precompiled modules,
    Fabric Manager and NSCQ from the Ubuntu archive, pinned to the same upstream version; empty elsewhere);
    ``services``: systemd units to enable; ``repo_dist``: the CUDA repository directory of the OS.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    branch: str
    version: str
    repo_base_url: str
    repo_dist: str
    repo_arch: dict[str, str]
    repo_key_file: str
    packages: list[str]
    hold: list[str]
    apt_pin_packages: list[str]
    """Package-name globs pinned to ``<version>-*`` in apt preferences (dependencies follow the pin)."""
    secure_boot_packages: list[str]
    secure_boot_hold: list[str]
    services: list[str]
    fabricmanager_config: str | None = None
    """Fabric Manager's configuration file (NVSwitch hosts; ``None`` without Fabric Manager)."""
    fabric_mode: tuple[str, int] | None = None
    """``(key, value)`` of Fabric Manager's operating mode in that file: ``("FABRIC_MODE", 0)`` bare metal,
    ``1`` Shared NVSwitch multitenancy (guests get GPU partitions)."""


def driver_packages(*, os: str, branch: str, version: str, open_modules: bool, nvlink_gen: int | None,
                    fabric_manager: bool, dcgm: bool, cuda: str,
                    fabric_manager_mode: str = "default") -> DriverPackages:
    """The pinned NVIDIA packages for one node group.

    ``os`` is the blueprint's on-prem OS (``debian-12``, ``ubuntu-22.04`` ...); ``nvlink_gen`` the GPU's
    NVLink generation from the hardware catalog (``None`` without NVLink); ``fabric_manager`` whether the
    group has NVSwitches; ``cuda`` the CUDA version (DCGM 4 ships one package per CUDA major);
    ``fabric_manager_mode`` ``default`` or ``shared-nvswitch`` (catalog ``nvswitch.fabric_modes``).
    Raises ``KeyError`` for an OS without a CUDA repository in the catalog.
    """
    nd = bare_metal()["nvidia_driver"]
    repo = nd["cuda_repo"]
    rev = nd["packages"]["debian_revision"]
    pinned = f"{version}-{rev}"
    driver = nd["packages"]["open" if open_modules else "proprietary"]
    packages = [f"{driver}={pinned}"]
    hold = [driver]
    services = ["nvidia-persistenced"]
    sb_packages: list[str] = []
    sb_hold: list[str] = []
    sw = nd["nvswitch"]
    unversioned = int(branch.split(".")[0]) >= int(sw["unversioned_names_from_branch"])
    ubuntu = os.startswith("ubuntu")
    signed = nd["ubuntu_signed_precompiled"]
    if ubuntu:
        sb_names = [signed["modules"].format(branch=branch), *(p.format(branch=branch) for p in signed["userspace"])]
        sb_packages = [f"{n}={version}-*" for n in sb_names]
        sb_hold = list(sb_names)
    if fabric_manager and nvlink_gen:
        for part in sw["by_nvlink_gen"].get(nvlink_gen, sw["by_nvlink_gen"][max(sw["by_nvlink_gen"])]):
            name = sw[part] if (unversioned or part == "nvlsm") else f"{sw[part]}-{branch}"
            if part == "nvlsm":
                packages.append(name)  # NVLSM is versioned on its own; the repository's current release
            else:
                packages.append(f"{name}={pinned}")
                hold.append(name)
            if part in sw["services"]:
                services.append(sw["services"][part])
            if ubuntu and part in signed:
                sb_name = signed[part].format(branch=branch)
                sb_packages.append(f"{sb_name}={version}-*")
                sb_hold.append(sb_name)
            elif ubuntu and part == "nvlsm":
                sb_packages.append(name)
    if dcgm:
        dc = nd["dcgm"]
        dver = f"{dc['epoch']}:{dc['version']}-{dc['debian_revision']}"
        for p in dc["packages"]:
            spec = f"{p.format(cuda_major=cuda.split('.')[0])}={dver}"
            packages.append(spec)
            if ubuntu:
                sb_packages.append(spec)
        services.append(dc["service"])
    return DriverPackages(
        branch=branch, version=version, repo_base_url=repo["base_url"], repo_dist=repo["dists"][os],
        repo_arch=dict(repo["arch"]), repo_key_file=repo["key_file"], packages=packages, hold=hold,
        apt_pin_packages=list(nd["apt_pin_packages"]),
        secure_boot_packages=sb_packages, secure_boot_hold=sb_hold, services=services,
        fabricmanager_config=sw["fabricmanager_config"] if fabric_manager and nvlink_gen else None,
        fabric_mode=((sw["fabric_mode_key"], int(sw["fabric_modes"][fabric_manager_mode]))
                     if fabric_manager and nvlink_gen else None))


def container_toolkit_packages(version: str) -> list[str]:
    """The four NVIDIA Container Toolkit packages pinned to ``version`` (apt specs ``name=version-rev``)."""
    ct = bare_metal()["container_toolkit"]
    return [f"{p}={version}-{ct['debian_revision']}" for p in ct["packages"]]


class DocaRepository(BaseModel):
    """Where a host of one OS installs DOCA-OFED from (catalog ``bare_metal.doca_ofed``).

    ``url``: the flat apt repository of ``release`` for the host's distribution and architecture
    (``https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu22.04/x86_64/``); ``key_file``: the signing
    key's file name in that directory; ``packages``: the DOCA-Host profile meta-packages to install.
    Source: https://docs.nvidia.com/doca/sdk/doca-host+installation+and+upgrade/index.html
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str
    base_url: str
    dist: str
    arch: str
    key_file: str
    packages: list[str]


def doca_repository(release: str, os: str) -> DocaRepository | None:
    """DOCA-OFED ``release``'s repository for operating system ``os`` (``ubuntu-22.04``); ``None`` when the
    catalog knows no DOCA distribution directory for ``os`` (the ``doca-ofed-os`` rule reports it)."""
    d = bare_metal()["doca_ofed"]
    dist = d["dists"].get(os)
    if dist is None:
        return None
    return DocaRepository(release=release, base_url=d["repo_base_url"], dist=dist, arch=d["arch"],
                          key_file=d["key_file"], packages=list(d["packages"]))


def kata_tarball(version: str, arch: str = "amd64") -> str:
    """File name of Kata's static release for ``version``: ``.tar.zst`` from the catalog's ``zstd_from``
    release on, ``.tar.xz`` before (``kata-static-3.23.0-amd64.tar.zst``)."""
    zst = (parse_version(version) or ()) >= (parse_version(bare_metal()["kata"]["zstd_from"]) or ())
    return f"kata-static-{version}-{arch}.tar.{'zst' if zst else 'xz'}"
