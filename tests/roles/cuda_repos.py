"""Stand-ins of NVIDIA's CUDA repository per distribution and architecture, built from recorded index metadata.

NVIDIA publishes one CUDA repository directory per distribution (``debian12``, ``ubuntu2204``, ``ubuntu2404``) and
architecture (``x86_64``, ``sbsa``), and the directories differ in what the roles depend on: the driver packages'
names (Debian's ``nvidia-driver-cuda`` / ``nvidia-kernel-open-dkms``, Ubuntu's ``libnvidia-compute-580`` /
``nvidia-dkms-580-open``), their relations, and the Debian revision of every release (``-1`` on Debian 12;
``-0ubuntu1``, later ``-1ubuntu1``, on Ubuntu). A single Debian-shaped pool served for every distribution hides a
role that pins one distribution's revision on another. The stand-ins here are built from the trimmed ``Packages``
stanzas recorded in ``tests/fixtures/cuda-repos/`` (each with its source and date, see the README there): the
template release's stanzas are copied to every release a test installs, with the index's own revision for it.

:func:`driver_debs` gives one release's driver packages of a directory, :func:`revision` the directory's revision of
a release (Fabric Manager, NSCQ, NVSDM and IMEX follow it too), :func:`dcgm_debs` DCGM 4 as NVIDIA's build packages
it, :func:`legacy_dcgm_debs` the recorded DCGM 3 package of a directory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from blueprints.versions import version as parse_version

from .vendor_repo import FIXTURES, Deb

CUDA_REPO_FIXTURES = FIXTURES / "cuda-repos"
"""The recorded index metadata (``<dist>-<arch>.Packages``, ``dcgm4.Packages``) and its README with the sources."""

ARCHITECTURES = {"x86_64": "amd64", "sbsa": "arm64"}
"""CUDA repository architecture directory -> Debian architecture of its packages."""

_RELATIONS = ("Pre-Depends", "Depends", "Recommends", "Provides", "Conflicts", "Replaces")


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """``Packages`` text as a list of stanzas (field -> value; continuation lines joined; ``#`` lines skipped)."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    last = ""
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                out.append(cur)
            cur, last = {}, ""
            continue
        if line[0] in " \t" and last:
            cur[last] += " " + line.strip()
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        # a header field given more than once (X-Revision-From) keeps every value, one per line
        cur[key] = f"{cur[key]}\n{value}" if key in cur else value
        last = key
    return out


@dataclass
class RecordedIndex:
    """One recorded ``<dist>-<arch>.Packages`` file: its header (first stanza without ``Package``) and stanzas."""

    name: str
    header: dict[str, str]
    stanzas: list[dict[str, str]] = field(default_factory=list)

    @property
    def revisions(self) -> list[tuple[tuple[int, ...], str]]:
        """``[(first release, revision)]`` of ``X-Revision-From``, oldest first."""
        rows = []
        for line in self.header.get("X-Revision-From", "").splitlines():
            release, revision = line.split()
            rows.append((_release_key(release), revision))
        return sorted(rows)

    def revision(self, release: str) -> str:
        """The Debian revision this index gives ``release`` (``580.126.20`` -> ``1ubuntu1`` on ubuntu2204). Raises
        ``KeyError`` for a release older than every recorded revision rule (nothing is known about it)."""
        key = _release_key(release)
        found = [rev for first, rev in self.revisions if first <= key]
        if not found:
            raise KeyError(f"{self.name}: no recorded revision for release {release} (tests/fixtures/cuda-repos)")
        return found[-1]

    @property
    def drops(self) -> set[str]:
        """Package names whose relations the stand-in leaves out (``X-Standin-Drops``)."""
        return {n.strip() for n in self.header.get("X-Standin-Drops", "").split(",") if n.strip()}

    def template(self) -> tuple[str, list[dict[str, str]]]:
        """``(template release, its stanzas)``: this file's, or those of ``X-Structure-From``."""
        source = load_index(self.header["X-Structure-From"]) if "X-Structure-From" in self.header else self
        release = source.header["X-Template-Release"]
        return release, [s for s in source.stanzas if _upstream(s["Version"]) == release]


def _release_key(release: str) -> tuple[int, ...]:
    return parse_version(release.split(":")[-1]) or ()


def _upstream(version: str) -> str:
    """``1:4.5.2`` of ``1:4.5.2-1``; ``580.65.06`` of ``580.65.06-0ubuntu1`` (the epoch is kept)."""
    return version.rsplit("-", 1)[0] if "-" in version else version


@functools.cache
def load_index(name: str) -> RecordedIndex:
    """The recorded index ``tests/fixtures/cuda-repos/<name>.Packages`` (``ubuntu2204-x86_64``, ``dcgm4``)."""
    stanzas = parse_stanzas((CUDA_REPO_FIXTURES / f"{name}.Packages").read_text())
    header = next((s for s in stanzas if "Package" not in s), {})
    return RecordedIndex(name, header, [s for s in stanzas if "Package" in s])


def revision(dist: str, release: str) -> str:
    """The Debian revision of driver ``release`` in CUDA repository directory ``dist`` (x86_64 index)."""
    return load_index(f"{dist}-x86_64").revision(release)


def _relations(value: str, drops: set[str]) -> list[str]:
    """The comma-separated relations of a field, those naming a dropped package left out."""
    out = []
    for rel in (r.strip() for r in value.split(",")):
        if rel and not any(alt.strip().split(" ")[0] in drops for alt in rel.split("|")):
            out.append(rel)
    return out


def _standin_file(path: str, package: str, version: str) -> tuple[str | bytes, int]:
    """An honest stand-in for ``path`` of ``package`` at driver ``version``."""
    upstream = _upstream(version).split(":")[-1]
    if path.endswith("/nvidia-smi"):
        smi = FIXTURES / "nvidia-smi" / f"nvidia-smi-{upstream}.txt"
        text = smi.read_text() if smi.exists() else f"NVIDIA-SMI {upstream} (no recorded output)\n"
        return ("#!/bin/sh\n" + f"cat <<'SMI'\n{text}SMI\n", 0o755)
    if path.endswith(".service"):
        daemon = {"nvidia-persistenced": "/usr/bin/nvidia-persistenced --verbose",
                  "nvidia-dcgm": "/usr/bin/nv-hostengine -n"}[Path(path).stem]
        unit = (f"[Unit]\nDescription=clusterforge stand-in of {Path(path).name} ({package})\n\n[Service]\n"
                f"ExecStart={daemon}\n\n[Install]\nWantedBy=multi-user.target\n")
        return (unit, 0o644)
    if path.endswith("/dkms.conf"):
        return (f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{upstream}"\n', 0o644)
    if path.startswith(("/usr/bin/", "/usr/sbin/")):
        return ("#!/bin/sh\n" + f"echo 'clusterforge stand-in for {Path(path).name} {upstream} ({package})'\n", 0o755)
    return (f"clusterforge stand-in for {path} of {package} {version}\n", 0o644)


def _rename(text: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        text = text.replace(old, new)
    return text


def _debs(stanzas: list[dict[str, str]], subs: list[tuple[str, str]], drops: set[str], arch: str) -> list[Deb]:
    out = []
    for s in stanzas:
        name, version = _rename(s["Package"], subs), _rename(s["Version"], subs)
        rel = {k: _relations(_rename(s.get(k, ""), subs), drops) for k in _RELATIONS}
        files = {_rename(p.strip(), subs): _standin_file(_rename(p.strip(), subs), name, version)
                 for p in s.get("X-Standin-Files", "").split(",") if p.strip()}
        files = files or {f"/usr/share/doc/{name}/VERSION": (version + "\n", 0o644)}
        out.append(Deb(name, version, depends=rel["Depends"], provides=rel["Provides"], files=files,
                       recommends=rel["Recommends"], conflicts=rel["Conflicts"], replaces=rel["Replaces"],
                       pre_depends=rel["Pre-Depends"], arch=arch,
                       description=f"clusterforge stand-in built from tests/fixtures/cuda-repos ({name})"))
    return out


def driver_debs(dist: str, release: str, arch: str = "x86_64") -> list[Deb]:
    """The driver packages of ``release`` in CUDA repository directory ``<dist>/<arch>``: the recorded template
    release's stanzas (names, relations, stand-in files) at ``release`` with the directory's revision for it
    (``580.173.02-1ubuntu1`` on ubuntu2204, ``580.173.02-1`` on debian12). Only the template's branch is built (a
    branch's package names carry it on Ubuntu before 590; raises ``ValueError`` for another branch)."""
    index = load_index(f"{dist}-x86_64")
    template, stanzas = index.template()
    if release.split(".")[0] != template.split(".")[0]:
        raise ValueError(f"{dist}: the recorded stanzas are of branch {template.split('.')[0]}, not {release}")
    t_version = next(s["Version"] for s in stanzas)
    subs = [(t_version, f"{release}-{index.revision(release)}"), (template, release)]
    return _debs(stanzas, subs, index.drops, ARCHITECTURES[arch])


def dcgm_debs(version: str, arch: str = "x86_64") -> list[Deb]:
    """DCGM 4 at ``version`` (``1:4.5.2``, epoch included) as NVIDIA's build packages it for every directory:
    ``core`` and one package per CUDA major (``tests/fixtures/cuda-repos/dcgm4.Packages``)."""
    index = load_index("dcgm4")
    template, stanzas = index.template()
    subs = [(template, version)]  # one revision for every directory (X-Revision-From)
    return _debs(stanzas, subs, index.drops, ARCHITECTURES[arch])


def legacy_dcgm_debs(dist: str, arch: str = "x86_64") -> list[Deb]:
    """The DCGM 3 package (``datacenter-gpu-manager``) recorded for directory ``<dist>/<arch>``, as recorded (its
    ``Conflicts``, ``Provides``, version; the stand-in files of the DCGM host engine and its unit)."""
    index = load_index(f"{dist}-{arch}") if (CUDA_REPO_FIXTURES / f"{dist}-{arch}.Packages").exists() else None
    if index is None:
        return []
    return _debs([s for s in index.stanzas if s["Package"] == "datacenter-gpu-manager"], [], index.drops,
                 ARCHITECTURES[arch])
