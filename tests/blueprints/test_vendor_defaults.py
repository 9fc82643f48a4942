"""Vendor defaults a user gets without asking (issue 28 kind 8): what `clusterforge check` says and what `render`
pins, against the vendors' own figures typed here with their sources."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from clusterforge.cli import app
from tests.ansible_vars import load_vars
from tests.conftest import EXAMPLES

# NVIDIA security bulletin (June 2026, https://nvidia.custhelp.com/app/answers/detail/a_id/5850): CVE-2026-24260,
# a TOCTOU race in the NVIDIA Container Toolkit for Linux (CVSS 8.5), fixed in 1.19.1.
TOOLKIT_FIXED = "1.19.1"
TOOLKIT_CVE = "CVE-2026-24260"
TOOLKIT_PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1"]  # https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html


def _example(tmp: Path, name: str, **software: object) -> Path:
    yaml = YAML()
    doc = yaml.load((EXAMPLES / name).read_text())
    for k, v in software.items():
        doc["software"][k] = v
    buf = io.StringIO()
    yaml.dump(doc, buf)
    path = tmp / name
    path.write_text(buf.getvalue())
    return path


def test_the_default_toolkit_is_the_release_that_fixes_the_latest_bulletin(tmp_path):
    res = CliRunner().invoke(app, ["render", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    gv = load_vars(tmp_path / "ansible/group_vars/dgx.yml")
    # pinned as a version pattern, like every NVIDIA package (issue 28 kind 1); the toolkit repository's revision is -1
    assert sorted(gv["container_runtime_nvidia_toolkit_packages"]) == sorted(f"{p}={TOOLKIT_FIXED}-*" for p in TOOLKIT_PACKAGES)


def test_check_refuses_a_toolkit_before_the_fix_and_names_the_cve(tmp_path):
    res = CliRunner().invoke(app, ["check", str(_example(tmp_path, "onprem-dgx-h100-ib.yaml", container_toolkit="1.19.0"))])
    assert res.exit_code == 1, res.output
    assert "container-toolkit-cve" in res.output and TOOLKIT_CVE in " ".join(res.output.split())
    ok = CliRunner().invoke(app, ["check", str(_example(tmp_path, "onprem-dgx-h100-ib.yaml", container_toolkit=TOOLKIT_FIXED))])
    assert "container-toolkit-cve" not in ok.output


def test_ecn_without_doca_ofed_is_an_error_since_the_converge_always_fails(tmp_path):
    """RoCE per-priority ECN needs the MLNX_OFED / DOCA-OFED sysfs tree (``/sys/class/net/<if>/ecn/roce_np/enable/<prio>``,
    https://docs.nvidia.com/networking/display/mlnxenv23106161lts/quality-of-service-(qos)); the inbox driver has none, so the rdma role's
    QoS unit can never apply it: `check` must stop the blueprint, not let it through with a warning."""
    path = tmp_path / "l40s.yaml"
    yaml = YAML()
    doc = yaml.load((EXAMPLES / "onprem-l40s-roce.yaml").read_text())
    doc["network"]["roce"]["ecn"] = True
    buf = io.StringIO()
    yaml.dump(doc, buf)
    path.write_text(buf.getvalue())
    res = CliRunner().invoke(app, ["check", str(path)])
    assert res.exit_code == 1 and "roce-ecn-needs-ofed" in res.output, res.output


# The R580 release every list that applies to a default names (issue 28 kind 8): the Ubuntu archive's build for
# Secure Boot hosts, 580.173.02-0ubuntu0.22.04.1 / -0ubuntu0.24.04.1 (https://packages.ubuntu.com/jammy-updates/nvidia-driver-580,
# https://packages.ubuntu.com/noble-updates/libs/nvidia-driver-580), and the nvproxy list of gVisor release-20260721.0
# (https://github.com/google/gvisor/blob/release-20260721.0/pkg/sentry/devices/nvproxy/version.go registers 580.173.02).
R580_SECURE_BOOT_BUILD = {"ubuntu-22.04": "580.173.02-0ubuntu0.22.04.1", "ubuntu-24.04": "580.173.02-0ubuntu0.24.04.1"}
GVISOR_RELEASE_WITH_IT = "20260721.0"


def _dgx_on(tmp: Path, os_name: str) -> Path:
    """The DGX example (default driver branch and release) on ``os_name``, with the site's Lustre client build for it."""
    doc = YAML().load((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    doc["target"]["os"] = os_name
    repos = doc["software"].get("lustre_client_repos") or {}
    repos.setdefault(os_name, dict(next(iter(repos.values()))))
    buf = io.StringIO()
    YAML().dump(doc, buf)
    path = tmp / f"dgx-{os_name}.yaml"
    path.write_text(buf.getvalue())
    return path


@pytest.mark.parametrize("os_name", ["ubuntu-22.04", "ubuntu-24.04"])
def test_the_default_driver_is_the_secure_boot_build(tmp_path, os_name):
    """Secure Boot hosts get the Ubuntu archive's build; every other node the CUDA repository's default release: the
    same upstream release, so one cluster never runs two drivers."""
    res = CliRunner().invoke(app, ["render", str(_dgx_on(tmp_path, os_name)), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    gv = load_vars(tmp_path / "out/ansible/group_vars/dgx.yml")
    assert gv["nvidia_driver_secure_boot_version"] == R580_SECURE_BOOT_BUILD[os_name]
    assert gv["nvidia_driver_version"] == R580_SECURE_BOOT_BUILD[os_name].split("-")[0]


def test_the_default_gvisor_release_proxies_the_default_driver(tmp_path):
    """GPU hosts running gVisor sandboxes on the default driver and the default runsc: check lets them through; the
    release before (20260504.0, whose nvproxy list stops at 580.126.20) would not proxy that driver."""
    doc = YAML().load((EXAMPLES / "onprem-sandbox-kata.yaml").read_text())
    kata = next(g for g in doc["node_groups"] if g["name"] == "kata")
    kata["sandbox"] = {"runtime": "gvisor"}
    for key in ("driver_branch", "driver_version", "kata"):  # the example pins Kata's guest driver: take the defaults
        doc["software"].pop(key, None)
    for gvisor, refused in ((None, False), ("20260504.0", True)):
        if gvisor:
            doc["software"]["gvisor"] = gvisor
        buf = io.StringIO()
        YAML().dump(doc, buf)
        path = tmp_path / f"gvisor-{gvisor}.yaml"
        path.write_text(buf.getvalue())
        res = CliRunner().invoke(app, ["check", str(path)])
        assert ("sandbox-driver-allow-list" in res.output) == refused, res.output
    render = CliRunner().invoke(app, ["render", str(tmp_path / "gvisor-None.yaml"), "-o", str(tmp_path / "out")])
    assert render.exit_code == 0, render.output
    assert load_vars(tmp_path / "out/ansible/group_vars/kata.yml")["sandbox_gvisor_release"] == GVISOR_RELEASE_WITH_IT


# NVIDIA's compute-only ("headless") set: Debian `nvidia-driver-cuda nvidia-kernel-open-dkms`, Ubuntu
# `libnvidia-compute-580 nvidia-dkms-580-open` (driver installation guide, compute-only-and-desktop-installation.html
# and ubuntu.html); the desktop-and-compute meta-packages `nvidia-open` / `cuda-drivers` pull X and GL stacks.
@pytest.mark.parametrize("os_name,compute", [
    ("debian-12", {"nvidia-driver-cuda", "nvidia-kernel-open-dkms"}),
    ("ubuntu-22.04", {"libnvidia-compute-580", "nvidia-dkms-580-open"}),
    ("ubuntu-24.04", {"libnvidia-compute-580", "nvidia-dkms-580-open"}),
])
def test_gpu_nodes_get_the_compute_only_driver_and_dcgm_for_the_drivers_cuda(tmp_path, os_name, compute):
    res = CliRunner().invoke(app, ["render", str(_dgx_on(tmp_path, os_name)), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    gv = load_vars(tmp_path / "out/ansible/group_vars/dgx.yml")
    names = {p.split("=")[0]: p.split("=", 1)[1] for p in gv["nvidia_driver_packages"]}
    assert compute <= set(names) and not {"nvidia-open", "cuda-drivers"} & set(names), sorted(names)
    # every NVIDIA package pinned to the release as a version pattern (never one distribution's revision)
    assert all(v.endswith("-*") for v in names.values() if v), names
    # DCGM 4 for the CUDA major R580 reports (CUDA 13.0 needs R580: CUDA toolkit release notes), not the stack's 12.x;
    # installed with recommends after DCGM 3 is purged (https://docs.nvidia.com/datacenter/dcgm/latest/installation.html)
    assert sorted(gv["nvidia_driver_dcgm_packages"]) == ["datacenter-gpu-manager-4-core=1:4.5.2-*",
                                                         "datacenter-gpu-manager-4-cuda13=1:4.5.2-*"]
    assert gv["nvidia_driver_dcgm_legacy"] == ["datacenter-gpu-manager", "datacenter-gpu-manager-config"]
