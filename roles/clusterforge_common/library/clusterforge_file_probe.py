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
With ``packages`` it also returns ``installed`` and ``held`` as ``clusterforge_package_probe`` does (one module run
for a role's files and packages where nothing changes the node in between). The reading is
``module_utils/clusterforge_probe.py``'s.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.clusterforge_probe import probe, read_packages, unit_enabled

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
  packages:
    description:
      - Debian package names (as M(clusterforge_package_probe) takes them) read in the same run into RV(installed)
        and RV(held), for a role that reads its files and its packages where nothing changes the node in between.
    type: list
    elements: str
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
installed:
  description: As M(clusterforge_package_probe) returns it, for O(packages).
  returned: when O(packages) is given
  type: list
  elements: str
held:
  description: As M(clusterforge_package_probe) returns it, for O(packages).
  returned: when O(packages) is given
  type: list
  elements: str
<path>:
  description: C(<sha1> <mode> <owner> <group>) of a regular file, C(dir|link|special <mode> <owner> <group>) otherwise.
  returned: for each path of O(paths) that exists
  type: str
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"paths": {"type": "list", "elements": "str", "required": True},
                                          "units": {"type": "list", "elements": "str", "default": []},
                                          "packages": {"type": "list", "elements": "str"}},
                           supports_check_mode=True)
    relative = [p for p in module.params["paths"] if p and not p.startswith("/")]
    if relative:
        module.fail_json(msg=f"clusterforge_file_probe: paths must be absolute, not {', '.join(relative)}")
    found: dict[str, object] = {}
    for path in module.params["paths"]:
        if path and path not in found:
            state = probe(path)
            if state is not None:
                found[path] = state
    found["enabled"] = [u for u in module.params["units"] if unit_enabled(module, u)]
    if module.params["packages"] is not None:
        found["installed"], found["held"] = read_packages(module, module.params["packages"])
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
