"""The node's kernel as out-of-tree modules need it: its flavour, and the headers DKMS builds against.

Debian and Ubuntu kernel releases are ``<upstream>-<ABI>-<flavour>`` (``6.1.0-18-amd64``, ``6.8.0-1028-nvidia``,
``6.8.0-60-generic-64k``). ``spec`` is the catalog's ``bare_metal.kernel`` as ``clusterforge render`` writes it
(``<role>_kernel``): ``release_pattern`` (group 1: the flavour), ``image_meta`` / ``headers_meta`` (a flavour's
kernel image / headers meta-package, ``linux-image-{flavour}``), ``headers_running`` (``linux-headers-{release}``),
``hwe_flavour`` (Ubuntu's HWE series of a flavour, ``{flavour}-hwe-22.04``; empty on Debian) and ``image_flavour``
(architecture fact -> the flavour an image build takes). Ansible loads this file as a filter plugin of the
``clusterforge_common`` role (a dependency of the roles that use it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


def _flavour(release: str, spec: Mapping[str, Any]) -> str:
    m = re.match(str(spec.get("release_pattern") or "(?!)"), str(release))
    return m.group(1) if m else ""


def kernel_hwe_meta(release: str, spec: Mapping[str, Any]) -> list[str]:
    """The kernel image meta-package of the HWE series of ``release``'s flavour (``["linux-image-generic-hwe-22.04"]``
    for ``6.8.0-60-generic`` on Ubuntu 22.04); ``[]`` on Debian or for a release that names no flavour. The role
    asks dpkg whether it is installed (:func:`kernel_flavour`'s ``installed``)."""
    flavour, hwe = _flavour(release, spec), str(spec.get("hwe_flavour") or "")
    if not flavour or not hwe:
        return []
    return [str(spec["image_meta"]).replace("{flavour}", hwe.replace("{flavour}", flavour))]


def kernel_flavour(release: str, spec: Mapping[str, Any], installed: Iterable[str] = ()) -> str:
    """The flavour whose meta-packages track kernel ``release``: its HWE series' (``generic-hwe-22.04``) when that
    kernel image meta-package is in ``installed``, else the release's own (``nvidia``); ``""`` when the release
    names no flavour (a custom build)."""
    flavour = _flavour(release, spec)
    hwe = kernel_hwe_meta(release, spec)
    if hwe and hwe[0] in set(installed):
        return str(spec["hwe_flavour"]).replace("{flavour}", flavour)
    return flavour


def kernel_headers(release: str, spec: Mapping[str, Any], installed: Iterable[str] = (), image_mode: bool = False,
                   arch: str = "x86_64") -> list[str]:
    """The headers packages DKMS needs on a node running ``release``: the running kernel's
    (``linux-headers-6.8.0-60-generic``) and its flavour's headers meta-package (``linux-headers-generic``, or the
    HWE one), which brings the headers of every kernel an update installs, so DKMS rebuilds the modules for it. An
    image build (``image_mode``: the running kernel is the build host's) gets the meta-package of
    ``image_flavour[arch]`` only (none for an architecture the catalog lists none for). A release that names no
    flavour gets its own headers only; an empty ``spec`` none."""
    if not spec:
        return []
    if image_mode:
        flavour = (spec.get("image_flavour") or {}).get(arch)
        return [str(spec["headers_meta"]).replace("{flavour}", str(flavour))] if flavour else []
    out = [str(spec["headers_running"]).replace("{release}", str(release))]
    flavour = kernel_flavour(release, spec, installed)
    if flavour:
        out.append(str(spec["headers_meta"]).replace("{flavour}", flavour))
    return out


FILTERS = {"clusterforge_kernel_flavour": kernel_flavour, "clusterforge_kernel_hwe_meta": kernel_hwe_meta,
           "clusterforge_kernel_headers": kernel_headers}


class FilterModule:
    """Ansible's entry point for a filter plugin file."""

    def filters(self) -> dict[str, Any]:
        """The filters of this file (:data:`FILTERS`)."""
        return dict(FILTERS)
