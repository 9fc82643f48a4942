"""DKMS across kernel updates (issue 28 kind 6): a DKMS host gets the headers of the kernel it runs AND its kernel
flavour's headers meta-package, so the next kernel an update installs comes with its headers and DKMS rebuilds the
NVIDIA modules for it. Neither distribution's kernel image meta-package pulls headers (Debian's linux-image-amd64
depends on the image only: https://packages.debian.org/bookworm/linux-image-amd64; the headers come with
linux-headers-amd64: https://packages.debian.org/bookworm/linux-headers-amd64; Ubuntu's HWE series has its own,
https://packages.ubuntu.com/jammy-updates/linux-headers-generic-hwe-22.04). DKMS builds a module for a kernel only
where that kernel's headers are installed (https://github.com/dell/dkms/blob/master/README.md).

The ``nvidia_driver`` role's header set is templated with Ansible's templar from its own variables and the
variables ``clusterforge render`` writes for the DGX example, on a host with the given kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from blueprints.resolved import resolve
from blueprints.role_vars import node_role_vars

from .conftest import dgx_variant
from .role_eval import role_value


def _rendered(tmp: Path, os_name: str, group: str = "dgx", role: str = "nvidia_driver") -> dict[str, Any]:
    bp = load_blueprint(dgx_variant(tmp, "k", os_name)).blueprint
    s = next(r.settings for r in resolve(bp).groups if r.settings.group == group)
    return node_role_vars(s, role)


def _facts(os_name: str, kernel: str, arch: str = "x86_64") -> dict[str, Any]:
    dist, version = os_name.split("-")
    return {"distribution": dist.capitalize(), "distribution_version": version, "distribution_major_version":
            version.split(".")[0], "kernel": kernel, "os_family": "Debian", "architecture": arch}


# (target.os, running kernel, kernel image meta-packages installed, the headers the node must get)
LIVE = [
    ("debian-12", "6.1.0-18-amd64", ["linux-image-amd64"], ["linux-headers-6.1.0-18-amd64", "linux-headers-amd64"]),
    ("debian-12", "6.1.0-18-cloud-amd64", ["linux-image-cloud-amd64"],
     ["linux-headers-6.1.0-18-cloud-amd64", "linux-headers-cloud-amd64"]),
    ("debian-12", "6.1.0-18-arm64", ["linux-image-arm64"], ["linux-headers-6.1.0-18-arm64", "linux-headers-arm64"]),
    ("ubuntu-22.04", "5.15.0-140-generic", ["linux-image-generic"],
     ["linux-headers-5.15.0-140-generic", "linux-headers-generic"]),
    ("ubuntu-22.04", "6.8.0-60-generic", ["linux-image-generic-hwe-22.04"],
     ["linux-headers-6.8.0-60-generic", "linux-headers-generic-hwe-22.04"]),
    ("ubuntu-24.04", "6.8.0-1028-nvidia", ["linux-image-nvidia"],
     ["linux-headers-6.8.0-1028-nvidia", "linux-headers-nvidia"]),
]


@pytest.mark.parametrize(("os_name", "kernel", "installed", "headers"), LIVE)
def test_a_dkms_host_gets_its_flavours_headers_meta_package(tmp_path, os_name, kernel, installed, headers):
    rendered = _rendered(tmp_path, os_name)
    got = role_value("nvidia_driver", "__nvidia_driver_headers", rendered, _facts(os_name, kernel, "aarch64"
                     if kernel.endswith("arm64") else "x86_64"),
                     __nvidia_driver_image_mode=False, __nvidia_driver_on_disk={"installed": installed, "held": []})
    assert list(got) == headers


@pytest.mark.parametrize(("os_name", "arch", "headers"), [
    ("debian-12", "x86_64", ["linux-headers-amd64"]), ("debian-12", "aarch64", ["linux-headers-arm64"]),
    ("ubuntu-24.04", "x86_64", ["linux-headers-generic"])])
def test_an_image_build_gets_the_headers_meta_package_of_its_architecture(tmp_path, os_name, arch, headers):
    """An image build (the running kernel is the build host's) takes the distribution's meta-package for the
    image's architecture: Debian arm64 images get linux-headers-arm64, not amd64's."""
    rendered = _rendered(tmp_path, os_name)
    got = role_value("nvidia_driver", "__nvidia_driver_headers", rendered, _facts(os_name, "6.18.2-build-host", arch),
                     __nvidia_driver_image_mode=True, __nvidia_driver_on_disk={"installed": [], "held": []})
    assert list(got) == headers
