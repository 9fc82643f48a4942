"""Ubuntu under Secure Boot: Canonical's signed modules are those of the kernel the host runs (issue 28 kind 4).

A user declares a Ubuntu Secure Boot host; the host runs some kernel flavour: the NVIDIA-optimised ``-nvidia``
kernel of NVIDIA-tuned Ubuntu images, Grace's ``-generic-64k``, ``-lowlatency``, a cloud flavour, or the GA /
HWE ``-generic``. The Ubuntu archive ships one signed-module meta-package per flavour
(``linux-modules-nvidia-<branch>-server[-open]-<flavour>``, e.g.
https://packages.ubuntu.com/noble/linux-modules-nvidia-580-server-open-nvidia,
https://packages.ubuntu.com/noble/linux-modules-nvidia-580-server-open-generic-64k) and each depends on its own
flavour's kernel image: the package of another flavour installs a foreign kernel beside the running one. These
tests template the ``nvidia_driver`` role's package set (its own ``vars/main.yml``, with Ansible's templar) from
the variables ``clusterforge render`` writes for the DGX example on Ubuntu, for a host with the given kernel.
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


def _vars(tmp: Path, os_name: str) -> dict[str, Any]:
    bp = load_blueprint(dgx_variant(tmp, "sb", os_name)).blueprint
    s = next(r.settings for r in resolve(bp).groups if r.settings.group == "dgx")
    return node_role_vars(s, "nvidia_driver")


def _install_set(rendered: dict[str, Any], release: str, kernel: str, installed: list[str]) -> list[str]:
    facts = {"distribution": "Ubuntu", "distribution_version": release, "kernel": kernel, "os_family": "Debian",
             "architecture": "x86_64"}
    return list(role_value("nvidia_driver", "__nvidia_driver_install_set", rendered, facts,
                           __nvidia_driver_secure_boot_state=True, __nvidia_driver_image_mode=False,
                           __nvidia_driver_on_disk={"installed": installed, "held": []}))


# (running kernel release as `uname -r` prints it, the kernel image meta-package the host tracks, the flavour
# whose signed modules it needs). Ubuntu kernel releases are <upstream>-<ABI>-<flavour>.
KERNELS = [
    ("ubuntu-24.04", "6.8.0-1028-nvidia", "linux-image-nvidia", "nvidia"),
    ("ubuntu-22.04", "6.8.0-1028-nvidia", "linux-image-nvidia-hwe-22.04", "nvidia-hwe-22.04"),
    ("ubuntu-24.04", "6.8.0-60-generic-64k", "linux-image-generic-64k", "generic-64k"),
    ("ubuntu-24.04", "6.8.0-60-lowlatency", "linux-image-lowlatency", "lowlatency"),
    ("ubuntu-24.04", "6.8.0-1029-aws", "linux-image-aws", "aws"),
    ("ubuntu-22.04", "6.8.0-60-generic", "linux-image-generic-hwe-22.04", "generic-hwe-22.04"),
    ("ubuntu-22.04", "5.15.0-140-generic", "linux-image-generic", "generic"),
]


@pytest.mark.parametrize(("os_name", "kernel", "meta", "flavour"), KERNELS)
def test_signed_modules_follow_the_running_kernels_flavour(tmp_path, os_name, kernel, meta, flavour):
    rendered = _vars(tmp_path, os_name)
    got = _install_set(rendered, os_name.split("-")[1], kernel, [meta])
    modules = [p for p in got if p.startswith("linux-modules-nvidia-")]
    assert modules == [f"linux-modules-nvidia-580-server-open-{flavour}"], got


def test_a_kernel_without_a_flavour_is_refused(tmp_path):
    """A kernel release that names no Ubuntu flavour (a custom build) gets no signed-module package at all: the
    preflight refuses it instead of installing the generic kernel's modules (and the generic kernel)."""
    rendered = _vars(tmp_path, "ubuntu-24.04")
    facts = {"distribution": "Ubuntu", "distribution_version": "24.04", "kernel": "6.18.2-custom+", "os_family": "Debian"}
    assert role_value("nvidia_driver", "__nvidia_driver_kernel_flavour", rendered, facts,
                      __nvidia_driver_on_disk={"installed": [], "held": []}) == ""
