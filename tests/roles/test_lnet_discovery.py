"""LNet's interface, when the blueprint declares none, is found on the node (the interface it routes the MGS
address through), never on an image build host: ``clusterforge-lnet-networks`` (the lustre_client role's script)
runs here for real against this machine's routing table, and the role runs for real into a Debian root
filesystem (image mode), where it must leave the discovery to the boot-time unit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from blueprints.role_templates import render_role_template
from blueprints.vendor import vendor_units

from .conftest import copy_rootfs, role_failures, role_run

BASH = shutil.which("bash") or "/bin/bash"


def _route_dev(address: str) -> str:
    out = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True, check=True).stdout
    return out.split(" dev ", 1)[1].split()[0]


def _script(tmp: Path, networks: str, route_to: str) -> Path:
    p = tmp / "clusterforge-lnet-networks"
    p.write_text(render_role_template("lustre_client", "lnet-networks.sh.j2", {
        "lustre_client_lnet_networks": networks, "lustre_client_lnet_route_to": route_to}))
    p.chmod(0o755)
    return p


def _run(script: Path, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BASH, str(script)], env={"PATH": os.environ["PATH"], "CONF": str(conf)},
                          capture_output=True, text=True, check=False)


needs_ip = pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 is not installed here")


@needs_ip
@pytest.mark.parametrize(("networks", "route_to", "want"), [
    ("tcp0", "127.0.0.1", "tcp0({lo})"),
    ("tcp0", "127.0.0.53", "tcp0({lo})"),
    ("tcp1", "127.0.0.1", "tcp1({lo})"),
    ("o2ib0(ibp24s0)", "", "o2ib0(ibp24s0)"),
    ("tcp0(ens1f0np0,ens2f0np0)", "", "tcp0(ens1f0np0,ens2f0np0)"),
    ("o2ib0(ibp24s0),tcp0", "127.0.0.1", "o2ib0(ibp24s0),tcp0({lo})"),
])
def test_the_script_writes_the_networks_from_this_nodes_routes(tmp_path, networks, route_to, want):
    want = want.format(lo=_route_dev("127.0.0.1"))
    conf = tmp_path / "modprobe.d" / "lustre.conf"
    r = _run(_script(tmp_path, networks, route_to), conf)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("changed: ")
    assert f'options lnet networks="{want}"\n' in conf.read_text()
    assert _run(_script(tmp_path, networks, route_to), conf).stdout == ""  # unchanged: says nothing
    conf.write_text('options lnet networks="tcp0(eth9)"\n')  # a stale file is replaced
    assert _run(_script(tmp_path, networks, route_to), conf).stdout.startswith("changed: ")
    assert f'networks="{want}"' in conf.read_text()


@pytest.mark.parametrize("networks", ["o2ib0(ibp24s0)", "tcp0(ens1f0np0,ens2f0np0)", "o2ib0(ibp24s0),o2ib1(ibp64s0)"])
def test_declared_networks_are_the_same_file_from_the_template_and_the_script(tmp_path, networks):
    """``lustre.conf`` has two writers, the role's template (declared interfaces) and the discovery script: for the
    same networks both write the same bytes, so switching between them never leaves a different file behind."""
    conf = tmp_path / "lustre.conf"
    r = _run(_script(tmp_path, networks, ""), conf)
    assert r.returncode == 0, r.stderr
    templated = render_role_template("lustre_client", "lustre.conf.j2", {"lustre_client_lnet_networks": networks})
    assert conf.read_text() == templated
    assert templated.startswith("# Managed by clusterforge") and f'options lnet networks="{networks}"\n' in templated


@needs_ip
def test_an_address_without_a_route_fails_naming_it_and_writes_nothing(tmp_path):
    conf = tmp_path / "lustre.conf"
    r = _run(_script(tmp_path, "tcp0", "300.1.2.3"), conf)
    assert r.returncode == 1 and "300.1.2.3" in r.stderr and "declare the LNet interface" in r.stderr
    assert not conf.exists()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
@needs_ip
def test_image_build_leaves_discovery_to_the_node_at_boot(tmp_path):
    root = copy_rootfs(tmp_path / "root")
    mount = {"name": "lustre", "mount": "/lustre", "source": "127.0.0.1@tcp:/lustre1", "options": ["flock", "_netdev"],
             "stripes": []}
    extravars = {"lustre_client_mounts": [mount], "lustre_client_lnet_networks": "tcp0",
                 "lustre_client_lnet_route_to": "127.0.0.1", "lustre_client_install_packages": False,
                 "lustre_client_lnet_service": vendor_units()["lnet"]}
    tags = "lustre_client_preflight,lustre_client_configure"
    assert role_failures(root, tmp_path / "run", "lustre_client", tags, extravars) == []
    # the build host's routes never reach the image: no LNet interface was written at build time
    assert not (root / "etc/modprobe.d/lustre.conf").exists()
    unit = (root / "etc/systemd/system/clusterforge-lnet-networks.service").read_text()
    assert "ExecStart=/usr/local/sbin/clusterforge-lnet-networks" in unit
    assert f"Before=remote-fs-pre.target {vendor_units()['lnet']}.service" in unit and "After=network-online.target" in unit
    assert (root / "etc/systemd/system/multi-user.target.wants/clusterforge-lnet-networks.service").is_symlink()
    assert (root / "usr/bin/ip").exists() or (root / "sbin/ip").exists() or (root / "usr/sbin/ip").exists()
    assert "127.0.0.1@tcp:/lustre1 /lustre lustre flock,_netdev" in (root / "etc/fstab").read_text()
    # boot: the unit's command on the node (the chroot shares this machine's network, which plays the node)
    boot = subprocess.run(["chroot", str(root), "/usr/local/sbin/clusterforge-lnet-networks"], capture_output=True,
                          text=True, check=False)
    assert boot.returncode == 0, boot.stderr
    assert f'options lnet networks="tcp0({_route_dev("127.0.0.1")})"' in (root / "etc/modprobe.d/lustre.conf").read_text()
    # the role's second run keeps the file the node wrote (it does not rediscover in the image)
    assert role_failures(root, tmp_path / "run2", "lustre_client", tags, extravars) == []
    assert f'tcp0({_route_dev("127.0.0.1")})' in (root / "etc/modprobe.d/lustre.conf").read_text()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_declared_interfaces_are_written_in_the_image_and_no_unit_is_installed(tmp_path):
    root = copy_rootfs(tmp_path / "root")
    mount = {"name": "lustre", "mount": "/lustre", "source": "192.168.100.2@o2ib:/lustre1", "options": ["_netdev"],
             "stripes": []}
    extravars = {"lustre_client_mounts": [mount], "lustre_client_lnet_networks": "o2ib0(ibp24s0)",
                 "lustre_client_install_packages": False}
    assert role_failures(root, tmp_path / "run", "lustre_client", "lustre_client_preflight,lustre_client_configure",
                         extravars) == []
    assert 'options lnet networks="o2ib0(ibp24s0)"' in (root / "etc/modprobe.d/lustre.conf").read_text()
    assert not (root / "etc/systemd/system/clusterforge-lnet-networks.service").exists()


DISCOVERY = ("etc/systemd/system/clusterforge-lnet-networks.service", "usr/local/sbin/clusterforge-lnet-networks",
             "etc/systemd/system/multi-user.target.wants/clusterforge-lnet-networks.service")
"""The boot-time discovery's unit file, script and enablement link, relative to the root."""
APT = "Install iproute2 with apt (the LNet interface is found with `ip route get`)."
STALE = ("Disable the boot-time LNet networks unit that is no longer wanted.",
         "Remove the LNet networks unit and script that are no longer wanted.")


def _discovery(root: Path) -> tuple[bool, ...]:
    return tuple((root / p).exists() or (root / p).is_symlink() for p in DISCOVERY)


def _changed(tasks: list[tuple[str, str]]) -> list[str]:
    return [t for t, status in tasks if status == "changed"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_discovery_unit_follows_the_blueprint_and_reruns_touch_apt_zero_times(tmp_path):
    """The boot-time LNet discovery (script, unit, enablement) exists exactly while the blueprint asks for it: a
    netdev declared instead, or no Lustre file system left, disables and removes it on the next run; iproute2 goes
    through one dpkg-query, so a rerun runs apt zero times and changes nothing."""
    root = copy_rootfs(tmp_path / "root")
    mount = {"name": "lustre", "mount": "/lustre", "source": "127.0.0.1@tcp:/lustre1", "options": ["_netdev"],
             "stripes": []}
    discover = {"lustre_client_mounts": [mount], "lustre_client_lnet_networks": "tcp0",
                "lustre_client_lnet_route_to": "127.0.0.1", "lustre_client_install_packages": False,
                "lustre_client_lnet_service": vendor_units()["lnet"]}
    declared = {**discover, "lustre_client_lnet_networks": "o2ib0(ibp24s0)", "lustre_client_lnet_route_to": ""}
    no_lustre = {**discover, "lustre_client_mounts": []}
    tags = "lustre_client_preflight,lustre_client_configure"

    def run(name: str, extravars: dict) -> list[tuple[str, str]]:
        failures, tasks = role_run(root, tmp_path / name, "lustre_client", tags, extravars)
        assert failures == [], failures
        return tasks

    tasks = run("discover", discover)
    assert _discovery(root) == (True, True, True)
    assert (APT, "skipped") in tasks or (APT, "changed") in tasks
    rerun = run("discover-again", discover)
    assert _changed(rerun) == [] and (APT, "skipped") in rerun, rerun  # no apt: dpkg-query found iproute2
    assert [t for t, _ in rerun if "with apt" in t] == [APT]  # the role's only apt task

    # a netdev declared instead: the networks are written as declared, the discovery is disabled and removed
    tasks = run("declared", declared)
    assert _discovery(root) == (False, False, False)
    assert {t for t in _changed(tasks)} >= set(STALE)
    assert 'options lnet networks="o2ib0(ibp24s0)"' in (root / "etc/modprobe.d/lustre.conf").read_text()
    rerun = run("declared-again", declared)
    assert _changed(rerun) == [] and all((t, "skipped") in rerun for t in STALE), rerun
    # declared interfaces need no iproute2: the discovery section (lnet-discovery.yml) is not even included, so its
    # tasks, apt among them, are never started
    assert APT not in [t for t, _ in rerun] and ("Find the LNet interface to the MGS on the node, now and at every boot.",
                                                 "skipped") in rerun, rerun

    # discovery asked for again, then no Lustre file system left: the discovery goes with it
    run("discover-back", discover)
    assert _discovery(root) == (True, True, True)
    tasks = run("no-lustre", no_lustre)
    assert _discovery(root) == (False, False, False) and set(STALE) <= set(_changed(tasks))
    assert _changed(run("no-lustre-again", no_lustre)) == []



TUNING = ("etc/modprobe.d/clusterforge-lustre-tuning.conf", "usr/local/sbin/clusterforge-lustre-tuning",
          "etc/systemd/system/clusterforge-lustre-tuning.service",
          "etc/systemd/system/multi-user.target.wants/clusterforge-lustre-tuning.service")
"""AWS's FSx client tunings on a node: module options, the lctl script, its boot-time unit and the unit's link."""


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_client_tunings_are_written_enabled_and_removed_with_the_settings(tmp_path):
    """A p5.48xlarge's tunings (``NodeSettings.lustre_tuning`` of the aws-p5-efa-lustre example, the role variables
    ``clusterforge render`` writes) run through the role for real: the modprobe options, the lctl script and its unit
    (enabled: ``lctl set_param`` does not persist over a reboot), a rerun changes nothing, and settings without
    tunings disable the unit and remove every file."""
    from blueprints import load_blueprint
    from blueprints.role_vars import node_role_vars
    from blueprints.settings import node_settings
    from tests.conftest import EXAMPLES

    s = node_settings(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint, "gpu")
    assert s.lustre_tuning is not None
    rv = node_role_vars(s, "lustre_client")
    root = copy_rootfs(tmp_path / "root")
    mount = {"name": "shared", "mount": "/fsx", "source": "192.168.100.2@tcp:/abcdefgh", "options": ["_netdev"],
             "stripes": []}
    base = {"lustre_client_mounts": [mount], "lustre_client_lnet_networks": "tcp0(ens32)",
            "lustre_client_install_packages": False}
    tuned = {**base, "lustre_client_module_options": rv["lustre_client_module_options"],
             "lustre_client_params": rv["lustre_client_params"]}
    tags = "lustre_client_preflight,lustre_client_configure"

    def run(name: str, extravars: dict) -> list[tuple[str, str]]:
        failures, tasks = role_run(root, tmp_path / name, "lustre_client", tags, extravars)
        assert failures == [], failures
        return tasks

    run("tuned", tuned)
    assert all((root / p).exists() or (root / p).is_symlink() for p in TUNING)
    conf = (root / TUNING[0]).read_text()
    assert "options ksocklnd credits=2560" in conf and "options ptlrpc ptlrpcd_per_cpt_max=32" in conf
    script = (root / TUNING[1]).read_text()
    assert "'ldlm.namespaces.*.lru_size=19200'" in script and "'mdc.*.max_mod_rpcs_in_flight=50'" in script
    unit = (root / TUNING[2]).read_text()
    assert "ExecStart=/usr/local/sbin/clusterforge-lustre-tuning" in unit and "After=remote-fs.target" in unit
    assert _changed(run("tuned-again", tuned)) == []
    run("untuned", base)
    assert not any((root / p).exists() or (root / p).is_symlink() for p in TUNING)
    assert _changed(run("untuned-again", base)) == []
