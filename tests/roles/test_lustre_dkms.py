"""Lustre's DKMS client (issue 28 kind 5): headers on every host that builds it, and a run that fails when the build
left no module instead of staying green with nothing mounted.

Lustre's Debian packaging builds the client modules through DKMS when ``lustre-client-modules-dkms`` is configured,
against the running kernel's headers (``debian/dkms.conf.in`` configures against ``$kernel_source_dir``), and its
postinst ends the build with ``|| true``
(https://github.com/lustre/lustre-release/blob/master/debian/lustre-client-modules-dkms.postinst): apt succeeds
with no module. In the DGX example ``mgmt-01`` mounts ``/lustre`` but has no GPU, so nothing else installs headers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from blueprints import load_blueprint
from blueprints.resolved import resolve
from blueprints.role_vars import node_role_vars

from .conftest import copy_rootfs, dgx_variant, installed_packages, role_run, shape_as, vendor_mirror
from .role_eval import role_value


def _rendered(tmp: Path, os_name: str, group: str, lustre_repo: dict[str, str] | None = None) -> dict[str, Any]:
    path = dgx_variant(tmp, "lustre", os_name)
    if lustre_repo:  # the site's Lustre client repository: the stand-in mirror's
        doc = yaml.safe_load(path.read_text())
        doc["software"]["lustre_client_repos"] = {os_name: lustre_repo}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    bp = load_blueprint(path).blueprint
    s = next(r.settings for r in resolve(bp).groups if r.settings.group == group)
    return node_role_vars(s, "lustre_client")


@pytest.mark.parametrize(("os_name", "kernel", "headers"), [
    ("ubuntu-22.04", "5.15.0-140-generic", ["linux-headers-5.15.0-140-generic", "linux-headers-generic"]),
    ("debian-12", "6.1.0-18-amd64", ["linux-headers-6.1.0-18-amd64", "linux-headers-amd64"])])
def test_a_host_without_gpus_gets_headers_for_the_dkms_client(tmp_path, os_name, kernel, headers):
    rendered = _rendered(tmp_path, os_name, "mgmt")
    assert any(p.endswith("-dkms") for p in rendered["lustre_client_packages"])  # the catalog's DKMS client
    facts = {"distribution": os_name.split("-")[0].capitalize(), "kernel": kernel, "os_family": "Debian",
             "architecture": "x86_64"}
    got = role_value("lustre_client", "__lustre_client_headers", rendered, facts, __lustre_client_image_mode=False,
                     __lustre_client_headers_probe={"installed": [], "held": []})
    assert list(got) == headers


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_a_dkms_build_that_left_no_module_fails_the_run(tmp_path):
    """A live host (the root filesystem told it is one) installs the client from the stand-in site repository,
    whose DKMS package, like the real one with a failed build, leaves no lustre module: the run fails and says
    where to look; it does not report the mount as skipped."""
    root = copy_rootfs(tmp_path / "root")
    shape_as(root, "debian-12")
    mirror = vendor_mirror()
    try:
        rendered = _rendered(tmp_path, "debian-12", "mgmt", mirror.lustre_client_repo())
        failures, tasks = role_run(root, tmp_path / "run", "lustre_client",
                                  "lustre_client_preflight,lustre_client_install,lustre_client_configure", {
            **rendered, **mirror.extravars(),
            # a live host (a chroot is taken for an image build); the headers are this test's to leave out
            "__lustre_client_image_mode": False, "lustre_client_kernel": {}})
    finally:
        mirror.stop()
    assert any(n.startswith("lustre-client-modules-dkms") for n in installed_packages(root))
    assert len(failures) == 1 and "has no lustre module" in failures[0] and "DKMS build failed" in failures[0], failures
    assert ("Add the Lustre file systems to fstab, mount them and set the declared stripe layouts.", "ok") not in tasks


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_the_run_that_installs_the_client_mounts_it(tmp_path):
    """A live host without the client: the run installs it, the DKMS build succeeds, and the same run mounts
    ``/lustre`` (no rerun, no reboot). In the root filesystem ``modinfo`` answers for the module once the DKMS
    package is installed (a successful build) and ``mount`` records its calls; both sit in ``/usr/local/sbin``,
    ahead of the real ones on the path."""
    root = copy_rootfs(tmp_path / "root")
    shape_as(root, "debian-12")
    calls = root / "run/mount-calls"
    for name, body in {
        "modinfo": "dpkg-query -W -f='${Status}' lustre-client-modules-dkms 2>/dev/null | grep -q 'ok installed' "
                   "|| { echo \"modinfo: ERROR: Module $3 not found.\" >&2; exit 1; }\n"
                   "echo /lib/modules/$(uname -r)/updates/dkms/lustre.ko\n",
        "mount": 'echo "mount $*" >> /run/mount-calls\n',
    }.items():
        path = root / "usr/local/sbin" / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    mirror = vendor_mirror()
    try:
        rendered = _rendered(tmp_path, "debian-12", "mgmt", mirror.lustre_client_repo())
        failures, tasks = role_run(root, tmp_path / "run", "lustre_client",
                                   "lustre_client_preflight,lustre_client_install,lustre_client_configure", {
                                       **rendered, **mirror.extravars(),
                                       "__lustre_client_image_mode": False, "lustre_client_kernel": {}})
    finally:
        mirror.stop()
    assert failures == [], failures
    assert calls.read_text().split("\n")[0] == "mount /lustre"
    assert ("Add the Lustre file systems to fstab, mount them and set the declared stripe layouts.", "changed") in tasks
