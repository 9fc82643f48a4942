"""Rendered Ansible variable files (inventory, group_vars) read the way Ansible reads them.

clusterforge writes every blueprint string as ``!unsafe`` (``docs/security.md``), a tag only
Ansible's own YAML loader knows; tests read those files with that loader
(``ansible.parsing.utils.yaml.from_yaml``), so a file Ansible could not read fails here too. Unsafe
strings come back as ``AnsibleUnsafeText``, a ``str`` that compares equal to the plain value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.parsing.utils.yaml import from_yaml


def load_vars(source: str | Path) -> Any:
    """The data of a rendered variable file: ``source`` is its text or its path."""
    text = source.read_text() if isinstance(source, Path) else source
    return from_yaml(text, json_only=False)


def is_unsafe(value: Any) -> bool:
    """Whether Ansible will never template ``value`` (an ``!unsafe`` string)."""
    from ansible.utils.unsafe_proxy import AnsibleUnsafe

    return isinstance(value, AnsibleUnsafe)
