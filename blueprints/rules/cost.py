"""Cost rules: the blueprint's `cost` section names node groups that exist."""

from __future__ import annotations

from collections.abc import Iterator

from .registry import Hit, RuleContext, rule


@rule(
    id="cost-node-group-unknown",
    severity="error",
    summary="`cost.server_price_usd` and `cost.node_power_kw` are keyed by node group names; a key that names no "
            "node group would leave that group on the catalog's default price without a word.",
    fix="use the name of one of the blueprint's node groups, or remove the key",
    source="https://github.com/infracost/infracost/issues/3397",
)
def cost_node_group_unknown(ctx: RuleContext) -> Iterator[Hit]:
    names = {g.name for g in ctx.bp.node_groups}
    for table in ("server_price_usd", "node_power_kw"):
        for key in getattr(ctx.bp.cost, table):
            if key not in names:
                yield Hit(("cost", table, key), f"`cost.{table}.{key}` names no node group (node groups: "
                          f"{', '.join(sorted(names))})")
