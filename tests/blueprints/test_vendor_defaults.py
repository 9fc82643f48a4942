"""Vendor defaults a user gets without asking (issue 28 kind 8): what `clusterforge check` says and what `render`
pins, against the vendors' own figures typed here with their sources."""

from __future__ import annotations

import io
from pathlib import Path

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
    assert sorted(gv["container_runtime_nvidia_toolkit_packages"]) == sorted(f"{p}={TOOLKIT_FIXED}-1" for p in TOOLKIT_PACKAGES)


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
