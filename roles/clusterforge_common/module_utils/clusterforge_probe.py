"""What the roles' probe modules read from a node (``clusterforge_file_probe``, ``clusterforge_package_probe``):
the checksum, mode and owner of paths, the enablement of systemd units, and which Debian packages dpkg has installed.

The roles look before they write and hand apt only what is missing (roles/README.md, "Reruns"); a module run costs a
few tenths of a second on every rerun, so a role reads files, units and packages in one run where nothing changes
the node in between. Ansible ships this file with each module that imports it (``ansible.module_utils.clusterforge_probe``,
from the clusterforge_common role's ``module_utils``).
"""

from __future__ import annotations

import fnmatch
import grp
import hashlib
import os
import pwd
import re
import stat
from typing import Any

FORMAT = "${db:Status-Abbrev}|${Package}|${Version}\n"
"""One line per package: three status letters, name and version (dpkg-query(1), --showformat)."""

_SUFFIX = re.compile(r"[=:<>].*$")


def _name(lookup, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return "UNKNOWN"


def probe(path: str) -> str | None:
    """``"<sha1> <mode> <owner> <group>"`` of a regular file, ``"dir|link|special <mode> <owner> <group>"`` of a
    directory, a symbolic link (not followed) or anything else; ``None`` for a missing or unreadable path."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            digest = hashlib.sha1()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            kind = digest.hexdigest()
        elif stat.S_ISDIR(st.st_mode):
            kind = "dir"
        elif stat.S_ISLNK(st.st_mode):
            kind = "link"
        else:
            kind = "special"
    except OSError:
        return None
    return f"{kind} {stat.S_IMODE(st.st_mode):o} {_name(pwd.getpwuid, st.st_uid)} {_name(grp.getgrgid, st.st_gid)}"


def unit_enabled(module: Any, unit: str) -> bool:
    """Whether ``systemctl is-enabled UNIT`` says enabled: exit 0 and a state other than ``indirect``/``alias``
    (``enabled``, ``enabled-runtime``, ``static``, ``generated`` ...), as Ansible's ``systemd_service`` module
    decides before it enables a unit. A missing unit or systemctl reads as not enabled. ``module``: the
    AnsibleModule (its ``get_bin_path`` and ``run_command``)."""
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return False
    rc, out, _ = module.run_command([systemctl, "is-enabled", unit])
    return rc == 0 and out.strip() not in ("indirect", "alias")


def package_names(names: list[str]) -> list[str]:
    """The package names of ``names`` in order, once each: versions, architectures and comparisons stripped
    (``nvidia-driver-570=570.1`` -> ``nvidia-driver-570``), empty ones skipped."""
    out: list[str] = []
    for name in names:
        bare = _SUFFIX.sub("", name.strip())
        if bare and bare not in out:
            out.append(bare)
    return out


def parse(stdout: str) -> tuple[list[str], list[str]]:
    """``(installed, held)`` from ``dpkg-query -W -f=FORMAT`` output: ``installed`` holds ``NAME`` and
    ``NAME=VERSION`` of every line whose package status is installed without an error flag (``ii``, ``hi``, ...);
    ``held`` the names of the installed ones whose desired action is hold (``hi``)."""
    installed: list[str] = []
    held: list[str] = []
    for line in stdout.splitlines():
        status, _, rest = line.partition("|")
        name, _, version = rest.partition("|")
        if len(status) < 2 or status[1] != "i" or status[2:3] not in ("", " ") or not name:
            continue
        installed += [name, f"{name}={version}"]
        if status[0] == "h":
            held.append(name)
    return installed, held


def satisfied_patterns(names: list[str], installed: list[str]) -> list[str]:
    """The ``NAME=PATTERN`` entries of ``names`` (a version glob with ``*``, ``?`` or ``[``, as apt accepts
    ``nvidia-utils-580=580.173.02-*``) whose package ``installed`` lists at a version matching the pattern, as given."""
    versions = dict(i.split("=", 1) for i in installed if "=" in i)
    out = []
    for spec in names:
        name, sep, pattern = spec.strip().partition("=")
        if sep and any(c in pattern for c in "*?[") and name in versions and fnmatch.fnmatchcase(versions[name], pattern):
            out.append(spec.strip())
    return out


def read_packages(module: Any, names: list[str]) -> tuple[list[str], list[str]]:
    """``(installed, held)`` of ``names`` (see :func:`parse`, plus the ``NAME=PATTERN`` entries that
    :func:`satisfied_patterns` finds), read with one ``dpkg-query -W`` run. dpkg-query exits 1 when a name matches no
    package (not installed yet); anything above fails the module with dpkg-query's message."""
    bare = package_names(names)
    if not bare:
        return [], []
    dpkg_query = module.get_bin_path("dpkg-query", required=True)
    rc, out, err = module.run_command([dpkg_query, "-W", f"-f={FORMAT}", *bare])
    if rc > 1:
        module.fail_json(msg=f"dpkg-query failed (exit {rc}): {err.strip()}", rc=rc)
    installed, held = parse(out)
    return installed + satisfied_patterns(names, installed), held
