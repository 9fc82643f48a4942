"""Resource names and tags: the one place that decides how clusterforge resources are called.

Every logical resource name starts with the blueprint name (``p5-train-vpc``,
``p5-train-gpu-lt``), so several blueprints can share one Pulumi project and one AWS account
without clashing, and every AWS resource carries the same three tags:

* ``clusterforge:blueprint`` — the blueprint name;
* ``clusterforge:node-group`` — the node group (``-`` for cluster-wide resources);
* ``clusterforge:role`` — the node role (``compute``, ``login`` ...) or, for cluster-wide
  resources, what the resource is for (``network``, ``storage``, ``control-plane``, ``iam``).

plus ``Name`` and the blueprint's own ``target.tags``. Kubernetes objects get the matching
``clusterforge.io/*`` labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "INVENTORY_DEFAULT_GROUPS",
    "LABEL_BLUEPRINT",
    "LABEL_EFA",
    "LABEL_NODE_GROUP",
    "LABEL_SANDBOX",
    "TAG_BLUEPRINT",
    "TAG_NODE_GROUP",
    "TAG_ROLE",
    "Naming",
    "generated_inventory_groups",
    "inventory_group",
]

TAG_BLUEPRINT = "clusterforge:blueprint"
TAG_NODE_GROUP = "clusterforge:node-group"
TAG_ROLE = "clusterforge:role"
TAG_MANAGED_BY = "managed-by"

LABEL_BLUEPRINT = "clusterforge.io/blueprint"
LABEL_NODE_GROUP = "clusterforge.io/node-group"
LABEL_EFA = "clusterforge.io/efa"
"""Node label set to ``"true"`` only on node groups that really have EFA interfaces attached; the
EFA device plugin is scheduled by it (scheduling by instance type lands the
plugin on nodes without EFA, where it crash-loops)."""
LABEL_SANDBOX = "clusterforge.io/sandbox"
"""Node label naming the sandbox runtime a node group is configured for (RuntimeClass scheduling)."""

_NO_GROUP = "-"

INVENTORY_DEFAULT_GROUPS = ("all", "ungrouped")
"""The groups every Ansible inventory has (https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#default-groups)."""


def inventory_group(node_group: str) -> str:
    """Ansible inventory group of a node group: its DNS-label name with ``-`` replaced by ``_``
    (a valid Ansible group name)."""
    return node_group.replace("-", "_")


def generated_inventory_groups(node_roles: Iterable[str], ansible_roles: Iterable[str]) -> frozenset[str]:
    """The inventory groups the on-prem renderer writes besides the node groups: ``role_<role>`` per
    node role, ``with_<role>`` per Ansible role, and Ansible's own ``all`` and ``ungrouped``. A node
    group whose :func:`inventory_group` is one of them would merge with it."""
    return frozenset({f"role_{r}" for r in node_roles} | {f"with_{r}" for r in ansible_roles}
                     | set(INVENTORY_DEFAULT_GROUPS))


@dataclass(frozen=True)
class Naming:
    """Names and tags for one blueprint.

    ``blueprint`` is the DNS-safe blueprint name (at most 40 characters, checked by the model);
    ``extra_tags`` are the blueprint's ``target.tags`` (they never override the three
    ``clusterforge:*`` tags).
    """

    blueprint: str
    extra_tags: Mapping[str, str] = field(default_factory=dict)

    def name(self, *parts: str) -> str:
        """Logical resource name: ``<blueprint>-<part>-<part>`` (empty parts skipped)."""
        return "-".join([self.blueprint, *[p for p in parts if p]])

    def tags(self, *, role: str, group: str | None = None, name: str | None = None) -> dict[str, str]:
        """AWS tags for a resource.

        ``role`` is the node role or the cluster-wide purpose, ``group`` the node group name
        (``None`` for cluster-wide resources), ``name`` the ``Name`` tag (defaults to the
        blueprint name plus the group). Returns a new dict: ``{"Name", "clusterforge:blueprint",
        "clusterforge:node-group", "clusterforge:role", "managed-by", **target.tags}``.
        """
        tags = dict(self.extra_tags)
        tags.update({
            "Name": name or self.name(group or ""),
            TAG_BLUEPRINT: self.blueprint,
            TAG_NODE_GROUP: group or _NO_GROUP,
            TAG_ROLE: role,
            TAG_MANAGED_BY: "clusterforge",
        })
        return tags

    def labels(self, *, group: str | None = None) -> dict[str, str]:
        """Kubernetes labels for objects created for this blueprint (and node group)."""
        labels = {LABEL_BLUEPRINT: self.blueprint, "app.kubernetes.io/managed-by": "clusterforge"}
        if group:
            labels[LABEL_NODE_GROUP] = group
        return labels
