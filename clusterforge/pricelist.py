"""``clusterforge cost --refresh``: today's prices from the AWS Price List Query API, written as an overlay.

The Price List Query API (``boto3.client("pricing")``, ``GetProducts``) serves current public prices to any
AWS credentials (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-price-list-query-api.html).
:func:`refresh` asks it for exactly what a cost report needs (the instance types and capacity types of the
plan's lines and gp3 storage) in one region and returns the entries in the price
catalog's shape, each with ``source`` (the API and the filters used) and ``as_of`` (the term's effective date);
:func:`write_overlay` stores them where :func:`clusterforge.cost.load_prices` lays them over the catalog.

Each answer's ``PriceList`` holds one JSON document per product (the documented product/terms shape:
``product.attributes``, ``terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD``, ``unit``,
``effectiveDate``; https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html).
A query whose products disagree on the price, or that matches none, leaves the catalog's value in place and
is reported. Spot prices are not in the Price List (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/price-changes.html)
FSx for Lustre, NAT gateways and EKS are not refreshed (their Price List attribute names were not established
here): their catalog values stay.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["API_SOURCE", "PRICING_REGION", "RefreshResult", "parse_products", "refresh", "refresh_for_plan",
           "write_overlay"]

PRICING_REGION = "us-east-1"
"""A region that serves the Price List Query API (it is offered from us-east-1, eu-central-1 and ap-south-1)."""

API_SOURCE = "https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html"
"""The ``source`` of every refreshed price (the filters used are in its ``note``)."""

_MARKET = {"on-demand": "OnDemand", "capacity-block": "CapacityBlock"}


@dataclass
class RefreshResult:
    """``overlay``: refreshed entries in the price catalog's shape; ``found``: one line per price read;
    ``missed``: one line per query that gave no single price (why)."""

    overlay: dict[str, Any] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def parse_products(price_list: Iterable[Any]) -> list[tuple[dict[str, Any], float, str, str]]:
    """``[(product attributes, USD per unit, unit, effective date)]`` of the on-demand price dimensions of a
    ``GetProducts`` answer's ``PriceList`` (items as JSON text, or already decoded). Dimensions priced $0
    (a range's free tier) are skipped. Raises ``ValueError`` for an item that is not a product document."""
    out = []
    for item in price_list:
        doc = json.loads(item) if isinstance(item, str) else item
        if not isinstance(doc, dict) or "product" not in doc:
            raise ValueError("a PriceList item is not a product document")
        attrs = dict((doc.get("product") or {}).get("attributes") or {})
        for offer in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
            eff = str(offer.get("effectiveDate") or "")[:10]
            for dim in (offer.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if usd is None or float(usd) == 0.0:
                    continue
                out.append((attrs, float(usd), str(dim.get("unit") or ""), eff))
    return out


def _query(client: Any, service: str, filters: Mapping[str, str]) -> list[tuple[dict[str, Any], float, str, str]]:
    """All products of ``service`` matching ``filters`` (TERM_MATCH each), every page."""
    args: dict[str, Any] = {"ServiceCode": service, "FormatVersion": "aws_v1",
                            "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()]}
    rows = []
    while True:
        page = client.get_products(**args)
        rows += parse_products(page.get("PriceList") or [])
        token = page.get("NextToken")
        if not token:
            return rows
        args["NextToken"] = token


def _one(result: RefreshResult, what: str, rows: list[tuple[dict[str, Any], float, str, str]], unit: str,
         filters: Mapping[str, str], today: _dt.date) -> dict[str, Any] | None:
    prices = {round(v, 8) for _a, v, u, _e in rows if u.lower() == unit.lower()}
    if len(prices) != 1:
        result.missed.append(f"{what}: {'no product' if not prices else f'{len(prices)} different prices'} "
                             f"for {', '.join(f'{k}={v}' for k, v in filters.items())}; the catalog's value stays")
        return None
    value = prices.pop()
    eff = max((e for _a, v, u, e in rows if round(v, 8) == value and e), default="")
    result.found.append(f"{what}: ${value:g} per {unit}")
    return {"value": value, "as_of": eff or today.isoformat(), "source": API_SOURCE,
            "note": "refreshed " + today.isoformat() + " from the Price List Query API: "
                    + ", ".join(f"{k}={v}" for k, v in filters.items())}


def refresh(client: Any, region: str, instances: Iterable[tuple[str, str]], *, gp3: bool = True,
            today: _dt.date | None = None) -> RefreshResult:
    """Read the prices of ``instances`` (``(instance type, capacity type)`` pairs: ``on-demand``, ``reservation``
    (read as on-demand), ``capacity-block``; ``spot`` is not in the Price List and is reported as missed),
    and gp3 storage (``gp3``) in ``region`` with ``client`` (a boto3 ``pricing`` client). Errors of the client
    (no credentials, access denied) propagate."""
    today = today or _dt.date.today()
    res = RefreshResult()
    seen: set[tuple[str, str]] = set()
    for itype, cap in instances:
        cap = "on-demand" if cap == "reservation" else cap
        if (itype, cap) in seen:
            continue
        seen.add((itype, cap))
        if cap not in _MARKET:
            res.missed.append(f"{itype} {cap}: not in the Price List (Spot prices are published apart)")
            continue
        f = {"instanceType": itype, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
             "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": _MARKET[cap]}
        e = _one(res, f"{itype} {cap}", _query(client, "AmazonEC2", f), "Hrs", f, today)
        if e:
            res.overlay.setdefault("ec2", {}).setdefault(itype, {})[cap] = {"regions": {region: e["value"]},
                                                                          **{k: e[k] for k in ("as_of", "source", "note")}}
    if gp3:
        f = {"productFamily": "Storage", "volumeApiName": "gp3", "regionCode": region}
        e = _one(res, "EBS gp3 storage", _query(client, "AmazonEC2", f), "GB-Mo", f, today)
        if e:
            res.overlay.setdefault("ebs", {}).setdefault("gp3", {})["gib_month"] = {
                "regions": {region: e["value"]}, **{k: e[k] for k in ("as_of", "source", "note")}}
    return res


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for k, v in new.items():
        if k == "regions" and isinstance(v, dict):
            into.setdefault("regions", {}).update(v)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def write_overlay(path: Path, overlay: Mapping[str, Any]) -> Path:
    """Merge ``overlay`` into the YAML overlay file at ``path`` (created with its folder; other regions'
    refreshed prices kept) and return the path. The file is written whole to a temporary name, then renamed."""
    import os

    import yaml

    current: dict[str, Any] = {}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        current = loaded if isinstance(loaded, dict) else {}
    _merge(current, overlay)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("# prices refreshed by `clusterforge cost --refresh` (AWS Price List Query API)\n"
                   + yaml.safe_dump(current, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


def refresh_for_plan(loaded: Any, result: Any) -> tuple[list[str], list[str], Path]:
    """``clusterforge cost --refresh`` of an AWS blueprint: the instance types and capacity types of the priced
    resources ``result`` (the stack's inventory or a plan: :func:`clusterforge.cost.price_plan`) and gp3 storage, read in the blueprint's region with a boto3 ``pricing`` client and merged into
    the overlay (:func:`clusterforge.cost.overlay_path`). Returns (prices read, prices not read, overlay path).
    Raises :class:`~blueprints.errors.UsageError` without boto3 or when the API cannot be read (no credentials,
    no network, access denied), before anything is written."""
    from blueprints.errors import UsageError

    from .cost import overlay_path, price_plan

    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        raise UsageError("--refresh needs boto3: `pip install boto3`") from None
    region = str(loaded.blueprint.target.region)
    draft = price_plan(result, loaded)
    wanted = sorted({(i.spec[0], i.spec[1]) for i in draft.items if i.type == "ec2-instance"})
    try:
        res = refresh(boto3.client("pricing", region_name=PRICING_REGION), region, wanted)
    except (BotoCoreError, ClientError) as e:
        raise UsageError(f"the AWS Price List API could not be read: {e} — configure AWS credentials "
                         "(any account can read public prices) or run without --refresh") from None
    return res.found, res.missed, write_overlay(overlay_path(), res.overlay)
