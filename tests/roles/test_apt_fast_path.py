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

import fnmatch
import os
from pathlib import Path

import pytest

from blueprints.catalog import catalog
from blueprints.resolved import resolve
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from clusterforge.blueprint_io import load_checked

from .conftest import copy_rootfs, dgx_variant, dpkg_packages, shape_as, vendor_mirror
from .cuda_repos import revision

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

HOST = "dgx-01"
OS = "debian-12"
INSTALL = "Install the pinned NVIDIA driver packages."


TAMPERED = {
    "etc/modprobe.d/blacklist-nouveau.conf": "Blacklist the nouveau driver.",  # content
    "etc/apt/preferences.d/clusterforge-nvidia-driver.pref": "Pin every NVIDIA driver package to the driver version.",  # mode
    "etc/apt/sources.list.d/nvidia-cuda.sources": "Add the NVIDIA CUDA repository.",  # owner
    "etc/apt/apt.conf.d/51clusterforge-nvidia": "Keep unattended-upgrades away from the NVIDIA packages.",  # removed
}
"""Files of the nvidia_driver role (from both of its file probes) that the repair run finds altered or removed,
with the task that writes each."""


def _files(root: Path) -> dict[str, tuple[bytes, int, int, int] | None]:
    """``{path: (content, mode, uid, gid)}`` of the :data:`TAMPERED` files (``None`` when missing)."""
    out: dict[str, tuple[bytes, int, int, int] | None] = {}
    for rel in TAMPERED:
        p = root / rel
        st = p.stat() if p.exists() else None
        out[rel] = (p.read_bytes(), st.st_mode & 0o7777, st.st_uid, st.st_gid) if st else None
    return out


def _install_status(summary: dict) -> list[str]:
    return [r["status"] for r in summary["results"] if r["host"] == HOST and r["task"] == INSTALL]


@pytest.fixture(scope="module")
def driver_runs(tmp_path_factory):
    """The DGX host converged (nvidia_driver only) at the release before the pinned one, then at the pinned one,
    then once more after dpkg was told a package is only half configured."""
    tmp = tmp_path_factory.mktemp("apt-fast-path")
    pinned = load_checked(dgx_variant(tmp, "dgx-default", OS))
    new = next(r.settings.gpu_packages for r in resolve(pinned.blueprint).groups if r.settings.gpu_packages)
    releases = catalog().driver_releases(new.version)
    old_version = releases[releases.index(new.version) - 1]
    older = load_checked(dgx_variant(tmp, f"dgx-{old_version}", OS, driver_version=old_version))
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
            runs.append((rc, load_summary(out), dpkg_packages(root)))
        # interrupt the configuration of one pinned package: dpkg lists it at the right version, "iU"
        victim = new.hold[0]
        status = root / "var/lib/dpkg/status"
        text = status.read_text()
        block = f"Package: {victim}\nStatus: hold ok installed\n"
        assert block in text, f"{victim} is not held and installed"
        status.write_text(text.replace(block, f"Package: {victim}\nStatus: hold ok unpacked\n"))
        # and tamper with files the role wrote (content, mode, owner, one removed): the file probe sees each
        wrote = _files(root)
        content, mode, owner, removed = (root / rel for rel in TAMPERED)
        content.write_text(content.read_text() + "options nouveau modeset=1\n")
        mode.chmod(0o600)
        os.chown(owner, 65534, 0)
        removed.unlink()
        out = tmp / "ansible-repair"
        rc = run_site(pinned, out, **run)
        runs.append((rc, load_summary(out), dpkg_packages(root)))
    finally:
        mirror.stop()
    return new, old_version, victim, root, runs, (wrote, _files(root))


def test_a_moved_driver_pin_installs_the_new_release_over_the_old_one(driver_runs):
    new, old_version, _, root, runs, _ = driver_runs
    (rc1, first, dpkg1), (rc2, second, dpkg2) = runs[0], runs[1]
    assert rc1 == 0, first["failures"]
    assert rc2 == 0, second["failures"]
    # debian12's revision of each release (tests/fixtures/cuda-repos: -1)
    assert dpkg1[new.hold[0]][0] == f"{old_version}-{revision('debian12', old_version)}", "the older release first"
    # dpkg had every package, at the older release: apt still ran and moved all of them to the pin
    assert _install_status(second) == ["changed"]
    for spec in new.packages:
        name, _, version = spec.partition("=")
        assert fnmatch.fnmatchcase(dpkg2[name][0], version), (name, dpkg2[name], version)  # an apt version pattern
    # apt dropped the holds of what it upgraded; the role held them again
    assert all(dpkg2[name][1:] == ("hold", "installed") for name in new.hold), {n: dpkg2[n] for n in new.hold}
    assert new.version in (root / "run/reboot-required").read_text()


def test_a_package_not_fully_installed_goes_to_apt_again(driver_runs):
    new, _, victim, _, runs, _ = driver_runs
    rc, repair, dpkg = runs[2]
    assert rc == 0, repair["failures"]
    # the fast path handed the pinned set to apt (the task was not skipped); apt decides what to do with it
    assert _install_status(repair) in (["ok"], ["changed"]), _install_status(repair)
    assert dpkg[victim][0] == f"{new.version}-{revision('debian12', new.version)}", dpkg[victim]


def test_files_altered_on_the_node_are_written_again(driver_runs):
    """The rerun writes only what differs from what the role renders: a changed content, mode or owner, or a missing
    file is restored to exactly what the converge wrote, by the file's own write task."""
    *_, runs, (wrote, after) = driver_runs
    rc, repair, _ = runs[2]
    assert rc == 0, repair["failures"]
    assert all(wrote.values()), {k: v is not None for k, v in wrote.items()}
    assert after == wrote, [rel for rel in TAMPERED if after[rel] != wrote[rel]]
    changed = {r["task"] for r in repair["results"] if r["host"] == HOST and r["status"] == "changed"}
    assert set(TAMPERED.values()) <= changed, sorted(changed)
