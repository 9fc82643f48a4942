"""The cost of measured work: dollars per million training tokens (AMP results) and per TB read (fio results).

The prices come in as plain data (``cost basis``: what :func:`clusterforge.cost.cost_basis` makes from the
blueprint's plan and the price catalog), so this module needs nothing of clusterforge:

* ``$ per 1M tokens = (node $/h / GPUs per node) / (measured tokens/s per GPU x 3600) x 1e6`` — the AMP
  suite measures one GPU (``tokens_per_s`` over ``gpu_count``), so this is the cost of a GPU-hour of the
  node group over what one of its GPUs trained in that hour (the formula of the reference's cost model:
  node $/h / (tokens/s x 3600) x 1e6);
* ``$ per TB read = node $/h / (measured read bytes/s x 3600 / 1e12)`` — what the node's time costs while it
  reads one TB (1e12 bytes) at the rate fio measured.

A result is matched to its node group by its test id (``amp-gpu`` -> group ``gpu``); with one priced group
that group is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["work_costs"]


def _number(v: Any) -> float | None:
    """``v`` when it is a finite positive number (a cost basis read back from a results folder is untrusted)."""
    import math

    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def _groups(basis: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The basis's groups with a usable node price: ``{name: {"node_per_hour_usd", "gpus_per_node"}}``."""
    raw = basis.get("groups")
    out: dict[str, dict[str, float]] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, info in raw.items():
        if not isinstance(name, str) or not isinstance(info, Mapping):
            continue
        price = _number(info.get("node_per_hour_usd"))
        if price is not None:
            out[name] = {"node_per_hour_usd": price, "gpus_per_node": _number(info.get("gpus_per_node")) or 0.0}
    return out


def _group_for(r: Any, groups: Mapping[str, Any]) -> str | None:
    test = (r.label or r.source or "").split(": ", 1)[0]
    parts = test.split("-")
    for i in range(1, len(parts)):
        name = "-".join(parts[i:])
        if name in groups:
            return name
    return next(iter(groups)) if len(groups) == 1 else None


def work_costs(results: Iterable[Any], basis: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"test", "kind", "group", "metric", "value", "unit", "measured", "node_per_hour_usd"}]``: one entry per
    AMP result with ``tokens_per_s`` (``metric`` ``usd_per_million_tokens``) and per fio result with a read
    rate (``usd_per_tb_read``), priced with ``basis`` (``{"groups": {group: {"node_per_hour_usd",
    "gpus_per_node"}}}``). Results that are ``invalid``, unmatched to a priced group or without the figure are
    left out. Empty when ``basis`` is None; groups whose figures are not positive numbers are ignored."""
    if not isinstance(basis, Mapping):
        return []
    groups = _groups(basis)
    out: list[dict[str, Any]] = []
    for r in results:
        if getattr(r.verdict, "value", r.verdict) == "invalid" or r.kind not in ("amp", "fio"):
            continue
        g = _group_for(r, groups)
        info = groups.get(g) if g else None
        price = (info or {}).get("node_per_hour_usd")
        if not price:
            continue
        m = r.metrics
        test = (r.label or r.source or "").split(": ", 1)[0]
        if r.kind == "amp":
            tps, n, gpus = m.get("tokens_per_s"), m.get("gpu_count") or 1, (info or {}).get("gpus_per_node") or 0
            if not tps or not gpus or m.get("device") == "cpu":
                continue
            per_gpu = float(tps) / float(n)
            value = (price / gpus) / (per_gpu * 3600) * 1e6
            out.append({"test": test, "kind": "amp", "group": g, "metric": "usd_per_million_tokens",
                        "value": round(value, 6), "unit": "USD per 1M training tokens",
                        "measured": f"{per_gpu:,.0f} tokens/s per GPU", "node_per_hour_usd": price})
        else:
            bw = m.get("read_bw_bytes_per_s")
            if not bw:
                continue
            value = price / (float(bw) * 3600 / 1e12)
            out.append({"test": test, "kind": "fio", "group": g, "metric": "usd_per_tb_read", "value": round(value, 6),
                        "unit": "USD per TB read", "measured": f"{float(bw) / 1e6:,.0f} MB/s read",
                        "node_per_hour_usd": price})
    return out
