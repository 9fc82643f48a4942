#!/usr/bin/python3
"""Ansible module: which of a role's Debian packages dpkg has installed, at which version, and which are held,
read with one ``dpkg-query`` run.

apt opens its whole package cache for every task (1-2.5 s each, even when nothing is to do); ``dpkg-query``
answers in milliseconds. So every role reads its package set with this module first and hands apt only what is
missing: a package that is not fully installed, or is installed at another version than the one pinned
(roles/README.md, "Reruns"). It returns::

    installed: [NAME, NAME=VERSION, ...]   each package dpkg reports installed (status ``?i`` without an error
                                           flag), once bare and once with its version, so a role tests a bare
                                           name or a pin with ``'nfs-common' in ...`` / ``'fio=3.33-3' in ...``;
                                           and each asked ``NAME=PATTERN`` whose installed version matches the
                                           apt version glob (``nvidia-utils-580=580.173.02-*``), as asked, so a
                                           pin by pattern is tested the same way
    held:      [NAME, ...]                 the installed packages marked ``hold`` (status ``hi``)

Names may carry a version or an architecture (``nvidia-driver-570=570.172.08-0ubuntu1``, ``libc6:amd64``); only the
package name is asked for. A name may be a dpkg-query pattern (``linux-image-*``); a name or pattern that matches no
package is simply not listed. Status letters: dpkg-query(1), ``${db:Status-Abbrev}``
(https://man7.org/linux/man-pages/man1/dpkg-query.1.html): desired action (``u``nknown, ``i``nstall, ``h``old,
``r``emove, ``p``urge), package status (``n``ot-installed, ``c``onfig-files, ``H``alf-installed, ``U``npacked,
``F``ailed-config, ``W``ait, ``t``rigger-pending, ``i``nstalled) and an error flag (``R`` reinstall required, or a
space). It never changes anything (``changed`` is always false) and runs in check mode too. The reading is
``module_utils/clusterforge_probe.py``'s, shared with ``clusterforge_file_probe`` (its ``packages`` option reads the
same in the run that reads a role's files, where nothing changes the node in between).
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.clusterforge_probe import read_packages

DOCUMENTATION = r"""
module: clusterforge_package_probe
short_description: Read which of the given Debian packages are installed, at which version, and which are held.
description:
  - Runs one C(dpkg-query -W) for the names of O(names) (versions and architectures stripped).
  - Returns RV(installed) (each installed package as C(NAME) and C(NAME=VERSION)) and RV(held).
  - Never changes the node; supports check mode.
options:
  names:
    description:
      - Package names, optionally with C(=VERSION), C(:ARCH) or a comparison, or dpkg-query patterns (C(linux-image-*)).
      - Empty strings are skipped; a name that matches no package is not an error.
    type: list
    elements: str
    required: true
author: clusterforge
"""

EXAMPLES = r"""
- name: Read which NFS client packages dpkg has installed, and at which version.
  clusterforge_package_probe:
    names: [nfs-common]
  register: __nfs_client_dpkg

- name: Install the NFS client with apt.
  ansible.builtin.apt:
    name: [nfs-common]
  when: ['nfs-common'] | reject('in', __nfs_client_dpkg.installed) | list | length > 0
"""

RETURN = r"""
installed:
  description: Every package of O(names) that dpkg reports installed, as C(NAME) and as C(NAME=VERSION).
  returned: always
  type: list
  elements: str
held:
  description: The installed packages of O(names) marked hold (C(apt-mark hold)).
  returned: always
  type: list
  elements: str
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
                           supports_check_mode=True)
    installed, held = read_packages(module, module.params["names"])
    module.exit_json(changed=False, installed=installed, held=held)


if __name__ == "__main__":
    main()
