#!/usr/bin/python3
"""Ansible module: checksum, mode and owner of the files and directories a role writes (and which of its systemd
units are enabled), read in one run.

The roles look before they write: a ``template``/``copy``/``file`` task runs only when what is on the node
differs from what it would write (roles/README.md, "Reruns"). This module reads every path in ``paths`` and
returns one key per path that exists (``path in registered`` is the existence test)::

    "<path>": "<sha1 hex of the content> <mode in octal, e.g. 644> <owner name> <group name>"   (regular file)
    "<path>": "dir <mode> <owner name> <group name>"                                          (directory)
    "<path>": "link <mode> <owner name> <group name>"                   (symbolic link, not followed)
    "<path>": "special <mode> <owner name> <group name>"                (device, FIFO, socket)

the same text as ``sha1sum`` and ``stat -c '%a %U %G'`` print (an id without a name reads ``UNKNOWN``), so a
role compares ``(lookup('ansible.builtin.template', SRC) | hash('sha1')) ~ ' 644 root root'`` with
``registered[path] | default('')``. It also returns ``enabled``: the units of that list that
``systemctl is-enabled`` reports enabled (exit 0, and not only ``indirect`` or ``alias``, as Ansible's
``systemd_service`` module decides), so a role hands the systemd module only the others. It never changes
anything (``changed`` is always false) and runs in check mode too. A path that cannot be read is reported as missing (the role then writes it).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: clusterforge_file_probe
short_description: Read checksum, mode and owner of the paths a role writes, in one module run.
description:
  - Returns one key per existing path of O(paths) (symbolic links are not followed).
  - A file reads C(<sha1> <mode> <owner> <group>), a directory C(dir <mode> <owner> <group>), a symbolic link
    C(link ...), anything else C(special ...), with the mode in octal without leading zeros (C(644)), as C(sha1sum)
    and C(stat -c '%a %U %G') print it.
  - Never changes the node; supports check mode.
options:
  paths:
    description: Absolute paths to read; empty strings are skipped.
    type: list
    elements: str
    required: true
  units:
    description: systemd unit names (C(opensm.service)) whose enablement is read into RV(enabled).
    type: list
    elements: str
    default: []
author: clusterforge
"""

EXAMPLES = r"""
- name: Read the checksum, mode and owner of the files the role writes.
  clusterforge_file_probe:
    paths: [/etc/modprobe.d/nvidia.conf, /etc/modprobe.d]
  register: __nvidia_driver_on_disk
"""

RETURN = r"""
enabled:
  description: The units of O(units) that C(systemctl is-enabled) reports enabled (not only indirect or alias).
  returned: always (empty without O(units))
  type: list
  elements: str
<path>:
  description: C(<sha1> <mode> <owner> <group>) of a regular file, C(dir|link|special <mode> <owner> <group>) otherwise.
  returned: for each path of O(paths) that exists
  type: str
"""


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


def unit_enabled(module: AnsibleModule, unit: str) -> bool:
    """Whether ``systemctl is-enabled UNIT`` says enabled: exit 0 and a state other than ``indirect``/``alias``
    (``enabled``, ``enabled-runtime``, ``static``, ``generated`` ...), as Ansible's ``systemd_service`` module
    decides before it enables a unit. A missing unit or systemctl reads as not enabled."""
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        return False
    rc, out, _ = module.run_command([systemctl, "is-enabled", unit])
    return rc == 0 and out.strip() not in ("indirect", "alias")


def main() -> None:
    module = AnsibleModule(argument_spec={"paths": {"type": "list", "elements": "str", "required": True},
                                          "units": {"type": "list", "elements": "str", "default": []}},
                           supports_check_mode=True)
    relative = [p for p in module.params["paths"] if p and not p.startswith("/")]
    if relative:
        module.fail_json(msg=f"clusterforge_file_probe: paths must be absolute, not {', '.join(relative)}")
    found = {}
    for path in module.params["paths"]:
        if path and path not in found:
            state = probe(path)
            if state is not None:
                found[path] = state
    found["enabled"] = [u for u in module.params["units"] if unit_enabled(module, u)]
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
