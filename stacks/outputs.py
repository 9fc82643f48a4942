"""Shapes of the stack outputs that are more than a plain value (the Ansible inventory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ansible_inventory"]


def ansible_inventory(blueprint: str, groups: Mapping[str, tuple[str, Sequence[str], Sequence[str]]],
                      ssh_user: str = "ubuntu") -> dict[str, Any]:
    """An Ansible YAML inventory (as a dict) for the EC2 nodes.

    ``groups`` maps a node group name to ``(role, host names, private IPs)``. Hosts are reached
    on their private IPs (from inside the VPC, or through SSM). Returns
    ``{"all": {"vars": {...}, "children": {group: {"hosts": {name: {"ansible_host": ip}}, "vars": {...}}}}}``.
    """
    children: dict[str, Any] = {}
    for name, (role, hosts, ips) in groups.items():
        children[name] = {
            "hosts": {h: {"ansible_host": ip} for h, ip in zip(hosts, ips, strict=True)},
            "vars": {"clusterforge_node_group": name, "clusterforge_role": role},
        }
    return {"all": {"vars": {"ansible_user": ssh_user, "clusterforge_blueprint": blueprint}, "children": children}}
