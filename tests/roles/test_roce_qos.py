"""The RoCE QoS script and unit as a user's host runs them: rendered from the role's templates, executed with
the netdevs in a sysfs tree and the QoS tools (`dcb`, `mlnx_qos`, `ip`, `ethtool`) as recording stand-ins.

Inbox mlx5 (no OFED tools): PFC and the DSCP -> priority app entry go through `dcb` (mlx5 implements both;
the first DSCP entry switches the port to DSCP trust), `dcb apptrust` is never used, and ECN, whose
per-priority switches exist only in the OFED sysfs tree, is reported as not applied (exit 2), never as success.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest

from blueprints.role_templates import _env
from clusterforge.ansible.render import ROLES_DIR

TEMPLATES = ROLES_DIR / "rdma" / "templates"


def _render(name: str, **variables) -> str:
    """The rdma role's template ``name`` as the roles render it (the cloud renderer's sandboxed environment, with
    Ansible's ``quote`` and the roles' own encoders)."""
    return _env().get_template(f"rdma/templates/{name}").render(ansible_managed="Ansible managed", **variables)


def _host(tmp: Path, netdevs: list[str], *, mlnx_qos: bool, ofed_ecn: bool) -> tuple[Path, dict[str, str], Path]:
    sysfs, bin_dir, calls = tmp / "sys", tmp / "bin", tmp / "calls.log"
    for dev in netdevs:
        (sysfs / "class/net" / dev).mkdir(parents=True)
        if ofed_ecn:
            for point in ("roce_np", "roce_rp"):
                d = sysfs / "class/net" / dev / "ecn" / point / "enable"
                d.mkdir(parents=True)
                for prio in range(8):
                    (d / str(prio)).write_text("0\n")
    bin_dir.mkdir()
    tools = ["dcb", "ip", "ethtool"] + (["mlnx_qos"] if mlnx_qos else [])
    for tool in tools:
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        (bin_dir / tool).chmod(0o755)
    script = tmp / "clusterforge-roce-qos"
    script.write_text(_render("roce-qos.sh.j2"))
    script.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLUSTERFORGE_SYSFS": str(sysfs),
           "CLUSTERFORGE_STATUS_DIR": str(tmp / "run")}
    return script, env, calls


def _conf(tmp: Path, interfaces: list[str], *, trust="dscp", flow="pfc", ecn=True, mtu=9000) -> Path:
    conf = tmp / "roce-qos.conf"
    conf.write_text(_render("roce-qos.conf.j2", rdma_roce_interfaces=interfaces, rdma_roce_trust=trust,
                            rdma_roce_flow_control=flow, rdma_roce_pfc_priority=3,
                            rdma_roce_pfc_vector="0,0,0,1,0,0,0,0", rdma_roce_dscp=26, rdma_roce_ecn=ecn,
                            rdma_roce_mtu=mtu))
    return conf


CASES = list(itertools.product([False, True], [False, True], ["dscp", "pcp"], ["pfc", "global-pause", "none"],
                               [True, False]))


@pytest.mark.parametrize(("mlnx_qos", "ofed_ecn", "trust", "flow", "ecn"), CASES)
def test_every_setting_is_applied_or_reported(tmp_path, mlnx_qos, ofed_ecn, trust, flow, ecn):
    devs = ["ens1f0np0", "ens1f1np1"]
    script, env, calls = _host(tmp_path, devs, mlnx_qos=mlnx_qos, ofed_ecn=ofed_ecn)
    res = subprocess.run([str(script), str(_conf(tmp_path, devs, trust=trust, flow=flow, ecn=ecn))], env=env,
                         capture_output=True, text=True, check=False)
    log = calls.read_text() if calls.exists() else ""
    status = (tmp_path / "run/roce-qos.status").read_text().splitlines()
    assert "apptrust" not in log, "mlx5 does not implement dcb apptrust"
    unapplied = [s for s in status if s.startswith("not-applied")]
    if ecn and not ofed_ecn:
        # no per-priority ECN switch without OFED: reported on stderr and in the status file, exit 2
        assert res.returncode == 2, res.stderr
        assert len(unapplied) == 2 * len(devs) and all("ecn" in s for s in unapplied)
        assert res.stderr.count("not applied: ecn") == 2 * len(devs)
    else:
        assert res.returncode == 0, res.stderr
        assert not unapplied
    for dev in devs:
        if mlnx_qos:
            assert f"mlnx_qos -i {dev} --trust {trust}" in log
        if flow == "pfc":
            want = f"mlnx_qos -i {dev} --pfc 0,0,0,1,0,0,0,0" if mlnx_qos else \
                f"dcb pfc set dev {dev} prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
            assert want in log
            assert f"applied {dev} pfc=0,0,0,1,0,0,0,0" in status
        if trust == "dscp":
            want = f"mlnx_qos -i {dev} --dscp2prio set,26,3" if mlnx_qos else f"dcb app replace dev {dev} dscp-prio 26:3"
            assert want in log
        if flow == "global-pause":
            assert f"ethtool -A {dev} rx on tx on" in log
        assert f"ip link set dev {dev} mtu 9000" in log
        if ecn and ofed_ecn:
            for point in ("roce_np", "roce_rp"):
                assert (tmp_path / f"sys/class/net/{dev}/ecn/{point}/enable/3").read_text().strip() == "1"


def test_a_missing_interface_fails(tmp_path):
    script, env, _ = _host(tmp_path, ["ens1f0np0"], mlnx_qos=False, ofed_ecn=True)
    res = subprocess.run([str(script), str(_conf(tmp_path, ["ens1f0np0", "ens2f0np0"]))], env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "ens2f0np0: failed: interface not found" in res.stderr


def test_a_failing_tool_fails_even_when_ecn_is_unapplied(tmp_path):
    script, env, _ = _host(tmp_path, ["ens1f0np0"], mlnx_qos=False, ofed_ecn=False)
    (Path(env["PATH"].split(":")[0]) / "dcb").write_text("#!/bin/sh\nexit 1\n")
    res = subprocess.run([str(script), str(_conf(tmp_path, ["ens1f0np0"]))], env=env, capture_output=True, text=True,
                         check=False)
    assert res.returncode == 1


@pytest.mark.parametrize("devs", [["ens1f0np0"], ["ens1f0np0", "ens1f1np1", "enp65s0f0np0"], ["eth-roce0"]])
def test_unit_waits_for_each_netdev(devs):
    unit = _render("roce-qos.service.j2", rdma_roce_interfaces=devs)
    assert "udev-settle" not in unit
    for dev in devs:
        name = dev.replace("-", "\\x2d")
        assert f"Wants=sys-subsystem-net-devices-{name}.device" in unit
        assert f"After=sys-subsystem-net-devices-{name}.device" in unit


def test_no_shell_errors_in_the_script(tmp_path):
    script = tmp_path / "s.sh"
    script.write_text(_render("roce-qos.sh.j2"))
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
    assert os.access(script, os.R_OK)
