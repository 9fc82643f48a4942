"""The bare-metal path: blueprint -> Ansible inventory, group_vars and site.yml -> ansible-runner.

* :mod:`.render`: :func:`~.render.render_ansible` writes what ``ansible-playbook -i inventory.yml site.yml``
  needs (group_vars rendered from the resolved cluster's node settings, :mod:`blueprints.resolved`); :func:`~.render.plan_ansible`
  lists every host, its groups, roles and variables (``clusterforge plan`` for on-prem blueprints).
* :mod:`.runner`: :func:`~.runner.run_site` drives ``ansible_runner.run`` with a live progress display and
  keeps every run's artefacts under ``<out_dir>/runs/<timestamp>``.

The roles themselves are pure Ansible content in ``roles/`` at the repository root.
"""

from __future__ import annotations

from .render import ROLE_ORDER, plan_ansible, render_ansible

__all__ = ["ROLE_ORDER", "plan_ansible", "render_ansible"]
