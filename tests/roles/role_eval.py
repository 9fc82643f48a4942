"""A role's own variables evaluated the way Ansible evaluates them, without a host or a playbook run.

``role_value`` loads a role's ``defaults/main.yml``, the variables ``clusterforge render`` writes for it, and its
``vars/main.yml`` (+ ``vars/<distribution>.yml``), then templates one expression with Ansible's own templar against
the given facts: what the role would install or refuse on a host with those facts, in a fraction of a second.
"""

from __future__ import annotations

from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader
from ansible.template import Templar

from clusterforge.ansible.render import ROLES_DIR
from tests.ansible_vars import load_vars


def role_value(role: str, expr: str, rendered: dict[str, Any], facts: dict[str, Any], **extra: Any) -> Any:
    """``{{ expr }}`` templated in ``role``'s variable scope on a host with ``facts`` (``ansible_facts``).

    ``rendered``: the role's variables as ``clusterforge render`` writes them (``node_role_vars``); ``extra``: other
    variables the role registers before ``expr`` is read (a probe's result) or play variables. Precedence is
    Ansible's: role defaults < rendered (group_vars) < role vars < ``extra``."""
    filter_loader.add_directory(str(ROLES_DIR / "clusterforge_common" / "filter_plugins"))  # the roles' dependency
    variables: dict[str, Any] = {}
    for part in ("defaults/main.yml",):
        path = ROLES_DIR / role / part
        if path.exists():
            variables.update(load_vars(path) or {})
    variables.update(rendered)
    for part in ("vars/main.yml", f"vars/{facts.get('os_family', '')}.yml", f"vars/{facts.get('distribution', '')}.yml"):
        path = ROLES_DIR / role / part
        if path.exists():
            variables.update(load_vars(path) or {})
    variables.update({"ansible_facts": facts, "ansible_check_mode": False, **extra})
    return Templar(loader=DataLoader(), variables=variables).template("{{ " + expr + " }}")
