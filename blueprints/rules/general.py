"""Rules about the blueprint as a whole: names, node group shape, mount points."""

from __future__ import annotations

from collections.abc import Iterator

from .registry import Hit, RuleContext, rule


@rule(
    id="node-group-names-unique",
    severity="error",
    summary="Node group names must be unique (they prefix resource and inventory group names).",
    fix="rename one of the node groups",
    source="https://www.pulumi.com/docs/iac/concepts/resources/names/",
)
def node_group_names_unique(ctx: RuleContext) -> Iterator[Hit]:
    seen: set[str] = set()
    for i, g in enumerate(ctx.bp.node_groups):
        if g.name in seen:
            yield Hit(("node_groups", i, "name"), f"node group name `{g.name}` is used twice")
        seen.add(g.name)
