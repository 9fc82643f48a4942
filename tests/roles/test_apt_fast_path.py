"""The roles skip apt when dpkg already has their packages, and only then.

Every role reads its packages with one ``dpkg-query`` and hands apt only what is missing: a package not
fully installed, or installed at another version than the blueprint pins (apt opens its whole package cache
for every task, 1-2.5 s each, which dominated the idempotent rerun). The rerun-side of that is covered by the
converge tests (``changed=0``; the pinned driver install is skipped). Here, the other side, as a user meets it:

* a blueprint that moves the pinned driver to a newer release gets the new release on a host that has the
  old one, held, with a reboot requested — the fast path never keeps an installed package at the wrong version;
* a package dpkg lists but that is not fully installed (unpacked, configuration interrupted) is handed to apt again.

Both run the ``nvidia_driver`` role with ``run_site`` on a root filesystem against the stand-in CUDA repository.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from blueprints.catalog import catalog
from blueprints.resolved import resolve
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked
from tests.conftest import EXAMPLES

from .conftest import copy_rootfs, shape_as, vendor_mirror

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

HOST = "dgx-01"
OS = "debian-12"
INSTALL = "Install the pinned NVIDIA driver packages."


def _blueprint(tmp: Path, driver_version: str | None) -> Path:
    yaml = YAML()
    doc = yaml.load((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    doc["target"]["os"] = OS
    if driver_version:
        doc["software"]["driver_version"] = driver_version
    buf = io.StringIO()
    yaml.dump(doc, buf)
    path = tmp / f"dgx-{driver_version or 'default'}.yaml"
    path.write_text(buf.getvalue())
    return path


def _dpkg(root: Path) -> dict[str, tuple[str, str]]:
    """``{package: (version, db:Status-Abbrev)}`` of every package dpkg knows in ``root``."""
    out = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f=${Package}|${Version}|${db:Status-Abbrev}\n"],
                         check=True, capture_output=True, text=True).stdout
    return {p: (v, st) for p, v, st in (line.split("|") for line in out.splitlines())}


def _install_status(summary: dict) -> list[str]:
    return [r["status"] for r in summary["results"] if r["host"] == HOST and r["task"] == INSTALL]


@pytest.fixture(scope="module")
def driver_runs(tmp_path_factory):
    """The DGX host converged (nvidia_driver only) at the release before the pinned one, then at the pinned one,
    then once more after dpkg was told a package is only half configured."""
    tmp = tmp_path_factory.mktemp("apt-fast-path")
    pinned = load_checked(_blueprint(tmp, None))
    new = next(r.settings.gpu_packages for r in resolve(pinned.blueprint).groups if r.settings.gpu_packages)
    releases = catalog().driver_releases(new.version)
    old_version = releases[releases.index(new.version) - 1]
    older = load_checked(_blueprint(tmp, old_version))
    root = copy_rootfs(tmp / "root")
    shape_as(root, OS)
    mirror = vendor_mirror()
    runs = []
    try:
        run = {"tags": ["nvidia_driver"], "extravars": mirror.extravars(),
               "connection_override": chroot_connection({HOST: root})}
        for loaded, name in ((older, "older"), (pinned, "pinned")):
            out = tmp / f"ansible-{name}"
            rc = run_site(loaded, out, **run)
            runs.append((rc, load_summary(out), _dpkg(root)))
        # interrupt the configuration of one pinned package: dpkg lists it at the right version, "iU"
        victim = new.hold[0]
        status = root / "var/lib/dpkg/status"
        text = status.read_text()
        block = f"Package: {victim}\nStatus: hold ok installed\n"
        assert block in text, f"{victim} is not held and installed"
        status.write_text(text.replace(block, f"Package: {victim}\nStatus: hold ok unpacked\n"))
        out = tmp / "ansible-repair"
        rc = run_site(pinned, out, **run)
        runs.append((rc, load_summary(out), _dpkg(root)))
    finally:
        mirror.stop()
    return new, old_version, victim, root, runs


def test_a_moved_driver_pin_installs_the_new_release_over_the_old_one(driver_runs):
    new, old_version, _, root, runs = driver_runs
    (rc1, first, dpkg1), (rc2, second, dpkg2) = runs[0], runs[1]
    assert rc1 == 0, first["failures"]
    assert rc2 == 0, second["failures"]
    assert dpkg1[new.hold[0]][0] == f"{old_version}-1", "the first run installed the older release"
    # dpkg had every package, at the older release: apt still ran and moved all of them to the pin
    assert _install_status(second) == ["changed"]
    for spec in new.packages:
        name, _, version = spec.partition("=")
        assert dpkg2[name][0] == version, (name, dpkg2[name], version)
    # apt dropped the holds of what it upgraded; the role held them again
    assert all(dpkg2[name][1] == "hi " for name in new.hold), {n: dpkg2[n] for n in new.hold}
    assert new.version in (root / "run/reboot-required").read_text()


def test_a_package_not_fully_installed_goes_to_apt_again(driver_runs):
    new, _, victim, _, runs = driver_runs
    rc, repair, dpkg = runs[2]
    assert rc == 0, repair["failures"]
    # the fast path handed the pinned set to apt (the task was not skipped); apt decides what to do with it
    assert _install_status(repair) in (["ok"], ["changed"]), _install_status(repair)
    assert dpkg[victim][0] == f"{new.version}-1", dpkg[victim]
