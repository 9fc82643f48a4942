"""Vendor software of a bare-metal node: which packages, from which repository, at which exact version.

Every name, version and URL comes from the ``bare_metal`` section of ``blueprints/data/catalog-extras.yaml``
(each entry with its ``source``); this module only combines them with the blueprint:

* :func:`driver_packages` — NVIDIA driver, Fabric Manager, NSCQ, NVSDM and DCGM 4 from NVIDIA's CUDA
  repository at one exact version, NVLSM at its own catalogued release (Debian/Ubuntu ``apt`` specs
  ``name=version``), the packages to hold, and the Ubuntu Secure Boot variant (Canonical-signed precompiled
  modules, driver, Fabric Manager and NSCQ from the Ubuntu archive at the archive's build);
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
    "AptPin",
    "DocaRepository",
    "DriverPackages",
    "EfaInstallerPins",
    "apt_key_fingerprints",
    "bare_metal",
    "compute_only_packages",
    "container_engine_units",
    "container_toolkit_packages",
    "doca_repository",
    "driver_cuda_major",
    "driver_packages",
    "efa_installer_pins",
    "fsx_csi_chart",
    "gpu_operator_for_kubernetes",
    "gpu_operator_release",
    "gpu_operator_rows",
    "gpu_operator_supports",
    "gvisor_sha512",
    "kata_sha256",
    "kata_tarball",
    "mpi_operator_manifest_ref",
    "nvlsm_version",
    "nvswitch_management_vpd",
    "pins_word",
    "vendor_units",
    "version_pattern",
]


def bare_metal() -> dict[str, Any]:
    """The catalog's ``bare_metal`` section (:attr:`blueprints.catalog.Catalog.bare_metal`)."""
    return catalog().bare_metal


def nvidia_services() -> dict[str, str]:
    """systemd unit names (without ``.service``) of NVIDIA's host daemons, from the catalog's ``bare_metal.nvidia_driver``:
    ``{"persistenced": "nvidia-persistenced", "fabricmanager": "nvidia-fabricmanager", "dcgm": "nvidia-dcgm"}``
    (sources: the catalog entries' ``source`` / ``field_sources``). NVLSM has no unit: Fabric Manager's unit starts it
    (catalog ``nvswitch.nvlink5_fabricmanager``). Roles that order their own units around these daemons take the names
    from here, so each name is spelled once."""
    nd = bare_metal()["nvidia_driver"]
    return {"persistenced": nd["packages"]["persistenced_service"], **nd["nvswitch"]["services"],
            "dcgm": nd["dcgm"]["service"]}


def vendor_units() -> dict[str, str]:
    """systemd unit names (without ``.service``) of every vendor daemon a bare-metal node may run, keyed by role
    in the node: NVIDIA's (:func:`nvidia_services`: ``persistenced``, ``fabricmanager``, ``dcgm``),
    Lustre's ``lnet`` (catalog ``bare_metal.lustre_client.services``) and DOCA-OFED's ``openibd``
    (``bare_metal.doca_ofed.services``); sources: those entries' ``field_sources.services``. Roles and the node
    checks take every vendor unit name from here, so each is spelled once, in the catalog."""
    bm = bare_metal()
    return {**nvidia_services(), **bm["lustre_client"]["services"], **bm["doca_ofed"]["services"]}


def nvswitch_management_vpd() -> str:
    """The VPD marker of an NVSwitch management port (``SW_MNG``: the CX7 bridge's limited PFs on NVLink 5 baseboards,
    which Fabric Manager and the NVLSM it starts own; catalog ``nvswitch.nvlink5_fabricmanager.management_port_vpd``,
    from NVIDIA's Fabric Manager user guide). No other subnet manager may run on such a port."""
    return str(bare_metal()["nvidia_driver"]["nvswitch"]["nvlink5_fabricmanager"]["management_port_vpd"])


def container_engine_units() -> dict[str, str]:
    """systemd unit names (without ``.service``) of the container engines a node may run, ``{"containerd":
    "containerd", "docker": "docker"}`` (catalog ``node_checks.container_engines``, with its sources)."""
    return dict(catalog().extras["node_checks"]["container_engines"]["services"])


class AptPin(BaseModel):
    """One apt preferences stanza: ``packages`` (names or globs) pinned to ``version`` (an apt version
    pattern, ``580.126.20-*`` or an exact ``2025.10.11-1``) at priority 1000, so dependencies follow it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    packages: list[str]
    version: str


class DriverPackages(BaseModel):
    """The NVIDIA GPU stack of one node group (Debian/Ubuntu apt specs ``name=version``).

    ``packages``: driver meta-package plus the NVSwitch packages of the GPU's NVLink generation and DCGM 4,
    every one pinned to an exact version (the NVIDIA-versioned ones to ``version``, NVLSM to ``nvlsm_version``);
    ``hold``: package names to ``apt-mark hold`` (also kept out of unattended-upgrades); ``apt_pins``: the apt
    preferences stanzas. ``secure_boot_*``: the Ubuntu Secure Boot set, everything from the Ubuntu archive at
    ``secure_boot_version`` (the archive's own driver build, e.g. ``580.173.02-0ubuntu0.22.04.1``: not
    ``version``), NVSDM/NVLSM/DCGM from the CUDA repository; empty elsewhere, and empty with
    ``secure_boot_unavailable`` (the reason, one sentence) where the catalog cannot pin a consistent set.
    ``services``: systemd units to enable; ``repo_dist``: the CUDA repository directory of the OS.
    Every CUDA-repository version is an apt version pattern (``580.173.02-*``, :func:`version_pattern`): each
    distribution directory revisions a release its own way. ``dcgm_packages``: the DCGM specs of ``packages`` (and of
    ``secure_boot_packages``), which the role installs with their recommends after purging ``dcgm_legacy`` (DCGM 3).
    Source of the rules: ``bare_metal.nvidia_driver`` in ``blueprints/data/catalog-extras.yaml``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    branch: str
    version: str
    repo_base_url: str
    repo_dist: str
    repo_arch: dict[str, str]
    repo_key_file: str
    repo_key_fingerprints: str = ""
    """Primary key fingerprints ``repo_key_file`` must have (space-separated upper-case hex; catalog
    ``bare_metal.nvidia_driver.cuda_repo.key_fingerprints``)."""
    packages: list[str]
    hold: list[str]
    apt_pins: list[AptPin]
    nvlsm_version: str | None = None
    """NVLSM's own pinned release on NVLink 5 hosts (``2025.10.11-1``); ``None`` elsewhere."""
    secure_boot_version: str | None = None
    secure_boot_packages: list[str]
    secure_boot_hold: list[str]
    secure_boot_apt_pins: list[AptPin]
    secure_boot_unavailable: str | None = None
    services: list[str]
    persistenced_service: str
    """The persistence daemon's unit name (without ``.service``)."""
    fabricmanager_service: str | None = None
    """Fabric Manager's unit name (NVSwitch hosts; ``None`` without Fabric Manager)."""
    fabricmanager_config: str | None = None
    """Fabric Manager's configuration file (NVSwitch hosts; ``None`` without Fabric Manager)."""
    fabric_mode: tuple[str, int] | None = None
    """``(key, value)`` of Fabric Manager's operating mode in that file: ``("FABRIC_MODE", 0)`` bare metal,
    ``1`` Shared NVSwitch multitenancy (guests get GPU partitions)."""
    fabricmanager_modules: list[str] = []
    imex_service: str | None = None
    """IMEX's unit on multi-node NVLink nodes (``nvidia-imex``; ``None`` elsewhere)."""
    imex_config: str | None = None
    """IMEX's configuration file (``/etc/nvidia-imex/config.cfg``) on multi-node NVLink nodes."""
    imex_node_config_key: str | None = None
    """The key of that file naming the node list (``IMEX_NODE_CONFIG_FILE``)."""
    imex_nodes_config: str | None = None
    """The node list file (``/etc/nvidia-imex/nodes_config.cfg``: one IP address per line)."""
    dcgm_packages: list[str] = []
    """DCGM 4's apt specs (``datacenter-gpu-manager-4-core=1:4.5.2-*``, ``...-4-cuda13=...``); empty without DCGM."""
    dcgm_legacy: list[str] = []
    """DCGM 3 packages NVIDIA's procedure purges before DCGM 4 is installed (empty without DCGM)."""
    """Kernel modules Fabric Manager's start check needs loaded (NVLink 5: ``["mlx5_core", "ib_umad"]``, whatever the
    data fabric; catalog ``nvswitch.nvlink5_fabricmanager.modules``); empty elsewhere."""


def nvlsm_version(branch: str) -> str | None:
    """NVLSM's pinned release for driver ``branch`` (``"580"`` -> ``"2025.10.11-1"``), or ``None`` when the
    catalog lists none (the ``nvlsm-release`` rule reports NVLink 5 groups on such a branch)."""
    versions = bare_metal()["nvidia_driver"]["nvswitch"].get("nvlsm_versions", {})
    v = versions.get(str(branch).split(".")[0])
    return str(v) if v is not None else None


def version_pattern(version: str) -> str:
    """The apt version pattern a CUDA-repository package of ``version`` is pinned with: ``580.173.02`` ->
    ``580.173.02-*`` (catalog ``bare_metal.nvidia_driver.packages.version_pattern``). NVIDIA's directories revision one
    release differently (debian12 ``-1``, ubuntu2204 ``-0ubuntu1`` / ``-1ubuntu1``), so the revision is never spelled;
    apt and the roles' package probe match the glob."""
    return str(bare_metal()["nvidia_driver"]["packages"]["version_pattern"]).format(version=version)


def compute_only_packages(*, os: str, branch: str, open_modules: bool) -> list[str]:
    """NVIDIA's compute-only ("headless") driver packages for ``os`` (``debian-12``, ``ubuntu-24.04``) and driver
    ``branch``: Debian ``nvidia-driver-cuda`` + ``nvidia-kernel-open-dkms`` (``nvidia-kernel-dkms`` with the
    proprietary modules), Ubuntu ``libnvidia-compute-<branch>`` + ``nvidia-dkms-<branch>-open`` (branch-less names
    from the catalog's ``ubuntu_unversioned_from_branch``, 590), each with the persistence daemon and nvidia-smi
    (catalog ``bare_metal.nvidia_driver.packages.compute_only``, NVIDIA's driver installation guide)."""
    pk = bare_metal()["nvidia_driver"]["packages"]
    family = "ubuntu" if os.startswith("ubuntu") else "debian"
    suffix = "" if int(branch.split(".")[0]) >= int(pk["ubuntu_unversioned_from_branch"]) else f"-{branch.split('.')[0]}"
    return [str(n).format(branch=suffix) for n in pk["compute_only"][family]["open" if open_modules else "proprietary"]]


def driver_cuda_major(branch: str) -> str:
    """The CUDA major a driver ``branch`` reports (nvidia-smi's "CUDA Version"): the major of the newest toolkit in
    the catalog's ``cuda_driver_minimums`` whose minimum branch the driver meets (``580`` -> ``13``, ``570`` -> ``12``).
    DCGM 4 is installed for it (``datacenter-gpu-manager-4-cuda<major>``). Raises ``KeyError`` for a branch older than
    every catalogued toolkit."""
    toolkits = catalog().extras["cuda_driver_minimums"]["toolkit"]
    fits = [t for t, b in toolkits.items() if int(b) <= int(branch.split(".")[0])]
    if not fits:
        raise KeyError(f"driver branch {branch}: no toolkit of catalog cuda_driver_minimums runs on it")
    return str(max(fits, key=lambda t: parse_version(str(t)) or ())).split(".")[0]


def _upstream(debian_version: str) -> str:
    """``580.173.02`` of ``580.173.02-0ubuntu0.22.04.1`` (the upstream part of a Debian version)."""
    return debian_version.split(":")[-1].rsplit("-", 1)[0]


def driver_packages(*, os: str, branch: str, version: str, open_modules: bool, nvlink_gen: int | None,
                    fabric_manager: bool, dcgm: bool, cuda: str,
                    fabric_manager_mode: str = "default", mnnvl: bool = False) -> DriverPackages:
    """The pinned NVIDIA packages for one node group.

    ``os`` is the blueprint's on-prem OS (``debian-12``, ``ubuntu-22.04`` ...); ``nvlink_gen`` the GPU's
    NVLink generation from the hardware catalog (``None`` without NVLink); ``fabric_manager`` whether the
    group has NVSwitches; ``cuda`` the stack's CUDA version (not what DCGM follows: DCGM 4 ships one package per CUDA
    major and is installed for the driver's, :func:`driver_cuda_major`); the driver packages are NVIDIA's compute-only
    set for ``os`` (:func:`compute_only_packages`), every CUDA-repository package pinned to a version pattern;
    ``fabric_manager_mode`` ``default`` or ``shared-nvswitch`` (catalog ``nvswitch.fabric_modes``); ``mnnvl`` whether
    the GPUs join a multi-node NVLink domain (GB200 NVL72 trays: IMEX at the driver version, its service enabled,
    catalog ``nvswitch.imex``/``imex_service``).
    Raises ``KeyError`` for an OS without a CUDA repository in the catalog.
    """
    nd = bare_metal()["nvidia_driver"]
    repo = nd["cuda_repo"]
    pinned = version_pattern(version)
    drivers = compute_only_packages(os=os, branch=branch, open_modules=open_modules)
    persistenced = nd["packages"]["persistenced_service"]
    packages = [f"{name}={pinned}" for name in drivers]
    hold = list(drivers)
    services = [persistenced]
    sw = nd["nvswitch"]
    unversioned = int(branch.split(".")[0]) >= int(sw["unversioned_names_from_branch"])
    nvswitch = fabric_manager and bool(nvlink_gen)
    parts: list[str] = (list(sw["by_nvlink_gen"].get(nvlink_gen, sw["by_nvlink_gen"][max(sw["by_nvlink_gen"])]))
                        if nvswitch else []) + (["imex"] if mnnvl else [])
    lsm = nvlsm_version(branch) if "nvlsm" in parts else None
    pins = [AptPin(packages=list(nd["apt_pin_packages"]), version=pinned)]
    for part in parts:
        if part == "nvlsm":
            # NVLSM is versioned on its own: pinned to the catalog's release of the branch (the nvlsm-release
            # rule stops a blueprint whose branch has none before anything is rendered)
            packages.append(f"{sw['nvlsm']}={lsm}" if lsm else sw["nvlsm"])
            if lsm:
                pins.append(AptPin(packages=[sw["nvlsm"]], version=lsm))
        else:
            name = sw[part] if unversioned else f"{sw[part]}-{branch}"
            packages.append(f"{name}={pinned}")
        hold.append(sw[part] if (unversioned or part == "nvlsm") else f"{sw[part]}-{branch}")
        if part in sw["services"]:
            services.append(sw["services"][part])
    # NVLink 5: Fabric Manager's start check needs the InfiniBand management modules whatever the data fabric, and
    # NVIDIA installs infiniband-diags with NVLSM (from the distribution's archive, not pinned to the driver)
    nvl5 = sw.get("nvlink5_fabricmanager", {}) if "nvlsm" in parts else {}
    packages.extend(nvl5.get("packages", []))
    dcgm_specs: list[str] = []
    dc = nd["dcgm"]
    if dcgm:
        dver = version_pattern(f"{dc['epoch']}:{dc['version']}")
        dcgm_specs = [f"{p.format(cuda_major=driver_cuda_major(branch))}={dver}" for p in dc["packages"]]
        packages.extend(dcgm_specs)
        services.append(dc["service"])
    sb = _secure_boot_set(os=os, branch=branch.split(".")[0], open_modules=open_modules, parts=parts,
                          nvlsm=lsm, dcgm_specs=dcgm_specs)
    return DriverPackages(
        branch=branch, version=version, repo_base_url=repo["base_url"], repo_dist=repo["dists"][os],
        repo_arch=dict(repo["arch"]), repo_key_file=repo["key_file"],
        repo_key_fingerprints=apt_key_fingerprints(CUDA_KEY_FINGERPRINTS), packages=packages, hold=hold,
        apt_pins=pins, nvlsm_version=lsm, services=services, persistenced_service=persistenced,
        fabricmanager_service=sw["services"]["fabricmanager"] if nvswitch else None,
        fabricmanager_config=sw["fabricmanager_config"] if nvswitch else None,
        fabric_mode=(sw["fabric_mode_key"], int(sw["fabric_modes"][fabric_manager_mode])) if nvswitch else None,
        fabricmanager_modules=list(nvl5.get("modules", [])), **_imex_fields(sw, mnnvl), dcgm_packages=dcgm_specs,
        dcgm_legacy=list(dc["legacy_packages"]) if dcgm else [], **sb)


def _imex_fields(sw: dict[str, Any], mnnvl: bool) -> dict[str, Any]:
    """The IMEX fields of :class:`DriverPackages` (catalog ``nvswitch.imex_service``); empty without multi-node NVLink."""
    if not mnnvl:
        return {}
    im = sw["imex_service"]
    return {"imex_service": sw["services"]["imex"], "imex_config": im["config"],
            "imex_node_config_key": im["node_config_key"], "imex_nodes_config": im["nodes_config"]}


def _secure_boot_set(*, os: str, branch: str, open_modules: bool, parts: list[str], nvlsm: str | None,
                     dcgm_specs: list[str]) -> dict[str, Any]:
    """The Ubuntu Secure Boot fields of :class:`DriverPackages` (see the catalog's ``ubuntu_signed_precompiled``)."""
    empty: dict[str, Any] = {"secure_boot_packages": [], "secure_boot_hold": [], "secure_boot_apt_pins": []}
    if not os.startswith("ubuntu"):
        return empty
    nd = bare_metal()["nvidia_driver"]
    signed, sw = nd["ubuntu_signed_precompiled"], nd["nvswitch"]
    row = signed.get("archive", {}).get(branch, {}).get(os)
    if row is None:
        return {**empty, "secure_boot_unavailable": (
            f"the hardware catalog lists no Ubuntu-archive build of driver branch {branch} for {os} "
            "(bare_metal.nvidia_driver.ubuntu_signed_precompiled.archive), so no consistent set of "
            "Canonical-signed modules, driver, Fabric Manager and NSCQ can be pinned")}
    driver_v = str(row["driver"])
    upstream = _upstream(driver_v)
    fmt = {"branch": branch, "open": "-open" if open_modules else ""}
    modules = signed["modules"].format(**fmt, flavour="{flavour}")  # the flavour is the node's kernel's
    userspace = [p.format(**fmt) for p in signed["userspace"]]
    packages = [modules, *(f"{n}={driver_v}" for n in userspace)]
    hold = [modules, *userspace]
    for part in parts:
        if part in ("fabricmanager", "nscq"):
            name, v = signed[part].format(**fmt), str(row[part])
            if _upstream(v) != upstream:
                return {**empty, "secure_boot_unavailable": (
                    f"the catalog's Ubuntu-archive {name} {v} is not at the archive driver's release {upstream} "
                    "(Fabric Manager and NSCQ must match the driver exactly)")}
            packages.append(f"{name}={v}")
            hold.append(name)
        elif part in ("nvsdm", "imex"):
            from .catalog import catalog

            name = sw[part] if int(branch) >= int(sw["unversioned_names_from_branch"]) else f"{sw[part]}-{branch}"
            if upstream not in catalog().driver_releases(branch):
                return {**empty, "secure_boot_unavailable": (
                    f"{'NVSDM' if part == 'nvsdm' else 'IMEX'} ({name}) is not in the Ubuntu archive and NVIDIA's CUDA "
                    f"repository carries it per driver release, but the catalog lists no CUDA-repository release "
                    f"{upstream} to match the archive's driver {driver_v}; "
                    f"{'NVLink 5' if part == 'nvsdm' else 'multi-node NVLink'} hosts cannot take the Secure Boot path "
                    f"on branch {branch}")}
            packages.append(f"{name}={version_pattern(upstream)}")
            hold.append(name)
        elif part == "nvlsm":
            packages.append(f"{sw['nvlsm']}={nvlsm}" if nvlsm else sw["nvlsm"])
            hold.append(sw["nvlsm"])
            packages.extend(sw.get("nvlink5_fabricmanager", {}).get("packages", []))
    pins = [AptPin(packages=list(nd["apt_pin_packages"]), version=f"{upstream}-*")]
    if nvlsm and "nvlsm" in parts:
        pins.append(AptPin(packages=[sw["nvlsm"]], version=nvlsm))
    return {"secure_boot_version": driver_v, "secure_boot_packages": [*packages, *dcgm_specs],
            "secure_boot_hold": hold, "secure_boot_apt_pins": pins}


def kernel_spec(os: str) -> dict[str, Any]:
    """How a role reads the node's kernel (catalog ``bare_metal.kernel``) for ``os`` (``debian-12``, ``ubuntu-22.04``):
    ``release_pattern`` (regular expression, group 1 the flavour of a kernel release: ``6.8.0-1028-nvidia`` ->
    ``nvidia``), ``image_meta`` / ``headers_meta`` (a flavour's kernel image / headers meta-package,
    ``linux-image-{flavour}``), ``headers_running`` (``linux-headers-{release}``), ``hwe_flavour`` (Ubuntu's HWE
    series of a flavour, ``{flavour}-hwe-22.04``; empty on Debian) and ``image_flavour`` (architecture fact ->
    flavour an image build takes; empty for an OS the catalog lists none for)."""
    k = bare_metal()["kernel"]
    return {"release_pattern": str(k["release_pattern"]), "image_meta": str(k["image_meta"]),
            "headers_meta": str(k["headers_meta"]), "headers_running": str(k["headers_running"]),
            "hwe_flavour": str(k["hwe_flavour"].get(os, "")), "image_flavour": dict(k["image_flavour"].get(os, {}))}


def container_toolkit_packages(version: str) -> list[str]:
    """The four NVIDIA Container Toolkit packages pinned to ``version`` (apt specs ``name=<version>-*``: a version
    pattern, catalog ``bare_metal.container_toolkit.version_pattern``)."""
    ct = bare_metal()["container_toolkit"]
    return [f"{p}={str(ct['version_pattern']).format(version=version)}" for p in ct["packages"]]


class DocaRepository(BaseModel):
    """Where a host of one OS installs DOCA-OFED from (catalog ``bare_metal.doca_ofed``).

    The flat apt repository of ``release`` is ``<base_url>/<release>/<dist>/<arch[uname -m]>/``
    (``https://linux.mellanox.com/public/repo/doca/3.2.1/ubuntu22.04/x86_64/``, ``.../arm64-sbsa/`` on Grace hosts);
    ``key_file``: the signing key's file name at ``base_url`` (the repository root); ``packages``: the DOCA-Host profile
    meta-packages to install; ``previous_ofed``: the marker of an installed OFED and its uninstall script
    (``{"marker": "/usr/bin/ofed_info", "uninstall": "/usr/sbin/ofed_uninstall.sh"}``); ``dkms``: whether the release
    builds its kernel drivers by DKMS (unsigned: Secure Boot needs an enrolled MOK); ``rebuild_dkms``: DKMS modules
    to rebuild against OFED's ib_core (``["nvidia"]``); ``openibd_service``: the unit that reloads the drivers.
    Source: https://docs.nvidia.com/doca/sdk/doca-host+installation+and+upgrade/index.html
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    release: str
    base_url: str
    dist: str
    arch: dict[str, str]
    key_file: str
    key_fingerprints: str = ""
    """Primary key fingerprints ``key_file`` must have (space-separated; catalog ``bare_metal.doca_ofed``); empty
    while the catalog pins none (the key is then installed unchecked)."""
    packages: list[str]
    previous_ofed: dict[str, str] = {}
    dkms: bool = False
    rebuild_dkms: list[str] = []
    openibd_service: str = ""


def doca_repository(release: str, os: str) -> DocaRepository | None:
    """DOCA-OFED ``release``'s repository for operating system ``os`` (``ubuntu-22.04``); ``None`` when the
    catalog knows no DOCA distribution directory for ``os`` (the ``doca-ofed-os`` rule reports it)."""
    d = bare_metal()["doca_ofed"]
    dist = d["dists"].get(os)
    if dist is None:
        return None
    return DocaRepository(release=release, base_url=d["repo_base_url"], dist=dist, arch=dict(d["arch"]),
                          key_file=d["key_file"], key_fingerprints=apt_key_fingerprints(DOCA_KEY_FINGERPRINTS),
                          packages=list(d["packages"]), previous_ofed=dict(d["previous_ofed"]),
                          dkms=(parse_version(release) or ()) >= (parse_version(str(d["dkms_from"])) or ()),
                          rebuild_dkms=list(d["rebuild_dkms"]), openibd_service=d["services"]["openibd"])


def kata_tarball(version: str, arch: str = "amd64") -> str:
    """File name of Kata's static release for ``version``: ``.tar.zst`` from the catalog's ``zstd_from``
    release on, ``.tar.xz`` before (``kata-static-3.23.0-amd64.tar.zst``)."""
    zst = (parse_version(version) or ()) >= (parse_version(bare_metal()["kata"]["zstd_from"]) or ())
    return f"kata-static-{version}-{arch}.tar.{'zst' if zst else 'xz'}"


# ---------------------------------------------------------------------------------------------
# Integrity pins of what nodes download and run as root (each value in the catalog with its source)
# ---------------------------------------------------------------------------------------------

KATA_SHA256_KEY = "bare_metal.kata.sha256"
"""Catalog key (``blueprints/data/catalog-extras.yaml``) of the Kata release files' SHA-256 pins."""
GVISOR_SHA512_KEY = "bare_metal.gvisor.sha512"
"""Catalog key (``blueprints/data/catalog-extras.yaml``) of the gVisor binaries' SHA-512 pins."""
EFA_SHA256_KEY = "aws.efa_software.installer_sha256"
"""Catalog key (``blueprints/data/aws-catalog.yaml``) of the EFA installer tarballs' SHA-256 pins."""
MPI_OPERATOR_KEY = "kubernetes_addons.mpi_operator.releases"
"""Catalog key (``blueprints/data/catalog-extras.yaml``) of the MPI operator manifests' commits."""


def kata_sha256(version: str) -> dict[str, str]:
    """``{Debian architecture: SHA-256}`` of Kata ``version``'s static release files (catalog
    ``bare_metal.kata.sha256``); empty when the catalog pins none (the sandbox script then refuses to install)."""
    pins = bare_metal()["kata"].get("sha256") or {}
    return {str(a): str(h).lower() for a, h in (pins.get(str(version)) or {}).items()}


def gvisor_sha512(release: str) -> dict[str, dict[str, str]]:
    """``{machine: {file: SHA-512}}`` of gVisor ``release``'s ``runsc`` and ``containerd-shim-runsc-v1`` (catalog
    ``bare_metal.gvisor.sha512``); empty when the catalog pins none (the sandbox script then refuses to install)."""
    pins = bare_metal()["gvisor"].get("sha512") or {}
    return {str(m): {str(f): str(h).lower() for f, h in files.items()}
            for m, files in (pins.get(str(release)) or {}).items()}


def pins_word(pins: dict[str, str]) -> str:
    """``{"amd64": "ab..", ...}`` as one shell word ``amd64=ab.. arm64=cd..`` (sorted), read by the node scripts."""
    return " ".join(f"{k}={v}" for k, v in sorted(pins.items()))


class EfaInstallerPins(BaseModel):
    """How a node checks the EFA installer before running it as root (catalog ``aws.efa_software``): ``url`` of
    the tarball, of its detached signature ``sig_url`` and of AWS's public key ``key_url``, the key's
    ``key_fingerprint`` (AWS's documented value, never read from the key's own origin) and the tarball's
    ``sha256`` where the catalog pins one for the version (``None`` otherwise: the signature alone then)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    version: str
    url: str
    sig_url: str
    key_url: str
    key_fingerprint: str
    sha256: str | None = None


def efa_installer_pins(version: str) -> EfaInstallerPins:
    """The download and integrity pins of EFA installer ``version``."""
    from .catalog import catalog

    sw = catalog().aws["efa_software"]
    base = str(sw["installer_url"]).rstrip("/")
    url = f"{base}/aws-efa-installer-{version}.tar.gz"
    digest = (sw.get("installer_sha256") or {}).get(str(version))
    return EfaInstallerPins(version=str(version), url=url, sig_url=f"{url}.sig",
                            key_url=f"{base}/aws-efa-installer.key",
                            key_fingerprint=str(sw["installer_key_fingerprint"]).replace(" ", "").upper(),
                            sha256=str(digest).lower() if digest else None)


def mpi_operator_manifest_ref(version: str) -> tuple[str, str]:
    """``(url, sha256)`` of the Kubeflow MPI operator manifest of release ``version`` at its pinned commit (an
    immutable reference; catalog ``kubernetes_addons.mpi_operator``). Raises ``KeyError`` naming the catalog key
    to fill for a release the catalog does not pin."""
    from .catalog import catalog

    mo = catalog().extras["kubernetes_addons"]["mpi_operator"]
    rel = (mo.get("releases") or {}).get(str(version))
    if not rel:
        raise KeyError(f"MPI operator {version}: no pinned commit in the catalog; add {MPI_OPERATOR_KEY}.{version} "
                       "(commit and sha256 of deploy/v2beta1/mpi-operator.yaml) to blueprints/data/catalog-extras.yaml")
    return str(mo["manifest_url"]).format(commit=rel["commit"]), str(rel["sha256"])


GPU_OPERATOR_KEY = "kubernetes_addons.gpu_operator.releases"
"""Catalog key (``blueprints/data/catalog-extras.yaml``) of the NVIDIA GPU Operator platform-support matrix."""

_MINOR = (0, 0)


def _minor(text: str | None) -> tuple[int, ...]:
    return (parse_version(text) or _MINOR)[:2]


def gpu_operator_rows(releases: dict[str, Any] | None = None) -> dict[str, Any]:
    """The GPU Operator platform-support rows (``releases``, else the catalog's ``kubernetes_addons.gpu_operator``)."""
    return releases if releases is not None else catalog().extras["kubernetes_addons"]["gpu_operator"]["releases"]


def gpu_operator_release(chart_version: str, releases: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]] | None:
    """``(major, row)`` of the GPU Operator release a chart version belongs to (``"v25.10.1"`` -> ``"25.10"`` and its
    row ``{latest, status, eks_kubernetes: [lowest, highest]}``, from ``releases`` or the catalog's
    ``kubernetes_addons.gpu_operator``, NVIDIA's platform-support page), or ``None`` when there is no row for that
    major release."""
    want = _minor(chart_version)
    for major, row in gpu_operator_rows(releases).items():
        if _minor(str(major)) == want:
            return str(major), dict(row)
    return None


def gpu_operator_supports(row: dict[str, Any], kubernetes: str) -> bool:
    """Whether a GPU Operator release row lists Kubernetes minor ``kubernetes`` (``"1.35"``) on Amazon EKS."""
    lo, hi = (_minor(str(v)) for v in row["eks_kubernetes"])
    return lo <= _minor(kubernetes) <= hi


def gpu_operator_for_kubernetes(kubernetes: str, releases: dict[str, Any] | None = None) -> str | None:
    """The chart version the EKS stack installs for Kubernetes ``kubernetes`` when the blueprint pins none: the newest
    patch (``latest``) of the newest release NVIDIA lists for that version on Amazon EKS, among the ``supported`` ones,
    else the ``deprecated`` ones (critical fixes only); ``None`` when no such release covers it (an end-of-support
    release is never chosen). Rows from ``releases`` or the catalog's ``kubernetes_addons.gpu_operator``."""
    rows = gpu_operator_rows(releases)
    for status in ("supported", "deprecated"):
        fits = [r for r in rows.values() if r["status"] == status and gpu_operator_supports(r, kubernetes)]
        if fits:
            return str(max(fits, key=lambda r: parse_version(str(r["latest"])) or ())["latest"])
    return None


def fsx_csi_chart() -> str:
    """The aws-fsx-csi-driver Helm chart version the EKS stack installs (catalog ``kubernetes_addons.fsx_csi_driver``)."""
    return str(catalog().extras["kubernetes_addons"]["fsx_csi_driver"]["chart_version"])


# APT signing keys: the primary key fingerprints a downloaded key file must have before a role installs it into the
# APT keyring (the key file comes from the repository it signs, so it proves nothing by itself).
CUDA_KEY_FINGERPRINTS = "bare_metal.nvidia_driver.cuda_repo.key_fingerprints"
"""Catalog key of the CUDA repository key's fingerprints (``nvidia_driver`` role; required)."""
TOOLKIT_KEY_FINGERPRINTS = "bare_metal.container_toolkit.key_fingerprints"
"""Catalog key of the libnvidia-container repository key's fingerprints (``container_runtime`` role; required)."""
DOCA_KEY_FINGERPRINTS = "bare_metal.doca_ofed.key_fingerprints"
"""Catalog key of the DOCA repository key's fingerprints (``rdma`` role; optional while empty)."""
FSX_KEY_FINGERPRINTS = "aws.fsx_client.apt.key_fingerprints"
"""Catalog key of Amazon's FSx Lustre client repository key's fingerprints (``lustre_client`` script; optional
while empty)."""


def apt_key_fingerprints(key: str) -> str:
    """The fingerprints the catalog pins at ``key`` (one of the ``*_KEY_FINGERPRINTS`` constants) as one
    space-separated word of upper-case hex, the roles' ``*_key_fingerprints`` variable; empty when none is pinned."""
    from .catalog import catalog

    root, *path = key.split(".")
    node: Any = getattr(catalog(), root)
    for part in path:
        node = (node or {}).get(part)
    return " ".join(str(f).replace(" ", "").upper() for f in (node or []))
