"""What a blueprint's cluster costs: every priced resource of its plan as a line, totals per hour and month.

Cloud (``target.provider: aws``): :func:`price_plan` walks the resources the stack creates — the stack's
inventory (:func:`stacks.inventory.inventory`, derived from the resolved cluster, the same decisions the Pulumi
components take; a test requires it to equal the registrations of the offline plan that ``clusterforge plan``
prints, so pricing it needs no Pulumi run) — and prices each from the
price catalog (:func:`blueprints.catalog.prices`, every number with ``source`` and ``as_of``): EC2 instances
and EKS managed node groups by capacity type (on-demand, spot, reservation at the on-demand rate, Capacity
Block at its own rate), their root volumes, EBS volumes, FSx for Lustre by deployment type, storage type and
throughput tier, NAT gateways and the data through them, public IPv4 addresses, the EKS control plane, and the
resources with a monthly charge of their own (``per_resource``: Route 53 zones, Secrets Manager secrets, KMS
keys). A resource type the catalog lists as free with its source (VPC, subnets, security groups, IAM, volume
attachments, DNS records, S3 buckets ...) is counted under ``no_charge``; a usage-based one (``usage_based``: S3
objects) is an unpriced line that says so; anything else, and any price the catalog lacks for the region or
option, is an **unpriced** line: never a silent $0 (the failure mode
https://github.com/infracost/infracost/issues/3397 reports). A price older than the catalog's
``stale_after_days`` is flagged stale, cloud and on-prem alike; the blueprint's own figures never are.

On premises (``target.provider: onprem``): :func:`price_onprem` prices the resolved cluster's hosts (the
hosts the on-prem plan configures): server capital, fabric switch ports and cabling per declared NIC and
shared-storage capital, written off over ``cost.amortization_years``; power (full-load kW x PUE x $/kWh x
utilisation), space (colocation $/kW-month), facility (the catalog's figure only for the data-centre node its
source models, else only when declared) and support per hour; and compares the GPU groups with
the cheapest catalogued cloud instance of the same GPU and count: cloud cost at the utilisation and the
break-even utilisation ``u* = fixed/h / (P - power/h)`` (P: the cloud price per hour of the same nodes, paid
only when used; https://ai-infrastructure.net/build-vs-rent-gpu-cost-model/).

Prices a user refreshed from the AWS Price List API (:mod:`clusterforge.pricelist`) are laid over the catalog
(:func:`load_prices`). Units: USD; hours per month from the catalog (730); GB-month prices are per GB of
provisioned capacity as AWS bills it.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from blueprints import LoadedBlueprint
    from blueprints.resolved import ResolvedGroup
    from stacks.inventory import Resource

    from .plan import PlannedResource, PlanResult

__all__ = [
    "CloudEquivalent",
    "CostItem",
    "CostReport",
    "OnpremSummary",
    "cost_basis",
    "load_prices",
    "overlay_path",
    "price_onprem",
    "price_plan",
    "workload_estimate",
]

HOURS_PER_YEAR = 8760
"""Hours in a (non-leap) year: on-prem capital per hour = price / (years x 8760)."""

BLUEPRINT_SOURCE = "blueprint:"
"""How the ``source`` of a figure the blueprint's ``cost`` section states begins (``blueprint: cost.pue``)."""


def overlay_path() -> Path:
    """Where ``clusterforge cost --refresh`` writes refreshed prices: ``$CLUSTERFORGE_PRICES`` when set, else
    ``$XDG_CACHE_HOME/clusterforge/prices.yaml`` (``~/.cache/...``)."""
    env = os.environ.get("CLUSTERFORGE_PRICES")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clusterforge" / "prices.yaml"


def load_prices(overlay: Path | None = None) -> dict[str, Any]:
    """The price catalog with the refreshed prices of ``overlay`` (default :func:`overlay_path`, when it exists)
    laid over it: an overlay entry (``ec2``/``fsx_lustre``/... in the catalog's shape) replaces the catalog's
    value for each region it names, with its own ``source`` and ``as_of``. Returns plain data; the catalog
    itself is never modified. Raises :class:`~blueprints.errors.UsageError` for an overlay that is not YAML
    of that shape."""
    import copy

    from blueprints.catalog import prices

    data = prices()
    path = overlay if overlay is not None else overlay_path()
    if not path.is_file():
        return data
    import yaml

    from blueprints.errors import UsageError

    try:
        extra = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"{path}: refreshed prices cannot be read ({e}) — delete the file or run "
                         "`clusterforge cost --refresh` again") from None
    if not isinstance(extra, dict):
        raise UsageError(f"{path}: refreshed prices must be a mapping — delete the file or refresh again")
    merged = copy.deepcopy(data)
    for section in ("ec2", "ebs", "fsx_lustre"):
        for key, options in (extra.get(section) or {}).items():
            for option, entry in (options or {}).items():
                _lay_over(merged.setdefault(section, {}).setdefault(key, {}), option, entry, path)
    for section in ("nat_gateway", "public_ipv4", "eks_cluster"):
        for option, entry in (extra.get(section) or {}).items():
            _lay_over(merged.setdefault(section, {}), option, entry, path)
    return merged


def _lay_over(into: dict[str, Any], option: str, entry: Any, path: Path) -> None:
    """Merge one refreshed price entry (``{regions, as_of, source}``) into ``into[option]`` region by region:
    the regions it names get its ``source``/``as_of`` through ``region_sources``."""
    from blueprints.errors import UsageError

    if not isinstance(entry, dict) or not isinstance(entry.get("regions"), dict):
        raise UsageError(f"{path}: entry `{option}` needs `regions`, `source` and `as_of` — refresh again")
    cur = into.setdefault(option, {"regions": {}, "source": entry.get("source"), "as_of": entry.get("as_of")})
    cur.setdefault("regions", {})
    rs = cur.setdefault("region_sources", {})
    for region, value in entry["regions"].items():
        cur["regions"][region] = float(value)
        rs[region] = {"source": str(entry.get("source", "")), "as_of": str(entry.get("as_of", "")),
                      "note": str(entry.get("note", "refreshed from the AWS Price List API"))}


@dataclass(frozen=True)
class Price:
    """One catalogued number: ``value`` (USD per ``unit``), its ``source`` URL, ``as_of`` date and a ``note``."""

    value: float
    source: str
    as_of: str
    note: str = ""


def _lookup(entry: Mapping[str, Any] | None, region: str) -> Price | None:
    """The price of ``region`` in a catalog entry ``{regions: {...}, source, as_of[, region_sources]}``."""
    if not entry:
        return None
    regions = entry.get("regions") or {}
    if region not in regions or regions[region] is None:
        return None
    own = (entry.get("region_sources") or {}).get(region) or {}
    return Price(float(regions[region]), str(own.get("source") or entry.get("source", "")),
                 str(own.get("as_of") or entry.get("as_of", "")), str(own.get("note") or entry.get("note", "")))


@dataclass
class CostItem:
    """One line of the bill.

    ``name``: what it is (``p5.48xlarge on-demand (gpu)``); ``type``: the line's kind (``ec2-instance``,
    ``ebs-gp3``, ``fsx-lustre``, ``nat-gateway``, ``onprem-server`` ...); ``count``: how many units run at
    once (instances, GB, gateways); ``unit``: what ``unit_price_usd`` is per (``instance-hour``,
    ``GB-month``, ``hour``, ``USD`` for on-prem capital); ``per_hour_usd``: what the line costs per hour
    (``None`` when unpriced); ``source`` / ``as_of`` of the price; ``priced``: False for an unpriced line
    (``note`` says why and how to fix it); ``stale``: the price is older than the catalog's
    ``stale_after_days``; ``group``: the node group it belongs to, if any.
    """

    name: str
    type: str
    count: float
    unit: str
    unit_price_usd: float | None
    per_hour_usd: float | None
    source: str = ""
    as_of: str = ""
    note: str = ""
    group: str | None = None
    stale: bool = False
    spec: tuple[str, ...] = ()
    """What was priced, for programs: ``(instance type, capacity type)`` of an ``ec2-instance`` line."""

    @property
    def priced(self) -> bool:
        """True when the line has a price."""
        return self.per_hour_usd is not None

    def to_json(self) -> dict[str, Any]:
        """The ``items[]`` entry of ``cost --json``: ``name``, ``type``, ``count``, ``unit``,
        ``unit_price_usd``, ``per_hour_usd`` (``null`` when unpriced), ``source``, ``as_of``, ``priced``,
        ``stale``, ``note``, ``group``."""
        return {"name": self.name, "type": self.type, "count": self.count, "unit": self.unit,
                "unit_price_usd": self.unit_price_usd, "per_hour_usd": _r(self.per_hour_usd),
                "source": self.source, "as_of": self.as_of, "priced": self.priced, "stale": self.stale,
                "note": self.note, "group": self.group}


@dataclass
class CloudEquivalent:
    """The cloud nodes an on-prem GPU group is compared with: ``instance_type`` x ``count`` in ``region``
    on demand at ``unit_price_usd`` per instance-hour (``source``, ``as_of``; ``stale``: older than the catalog's
    ``stale_after_days``); ``group``: the on-prem group."""

    group: str
    instance_type: str
    count: int
    region: str
    unit_price_usd: float
    source: str
    as_of: str
    stale: bool = False


@dataclass
class OnpremSummary:
    """The on-prem view: ``capital_usd`` (servers, fabric ports and cabling, storage; priced parts only),
    ``fixed_per_hour_usd`` / ``power_per_hour_usd`` (at full load) of the GPU groups compared with the cloud,
    ``equivalents`` (the cloud nodes), ``cloud_per_hour_usd`` (all of them, full time),
    ``breakeven_utilization`` (0-1; ``None`` when it cannot be computed or owning never pays off) with
    ``breakeven_note``, the sentence that says against which instances at which price, ``utilization`` the
    figures are given at, ``facility_not_charged`` (node groups without a facility figure: neither declared nor
    catalogued for their node) and ``compare_region`` (the cloud comparison's region, ``cost.compare_region``)."""

    capital_usd: float
    amortization_years: float
    utilization: float
    fixed_per_hour_usd: float | None = None
    power_per_hour_usd: float | None = None
    equivalents: list[CloudEquivalent] = field(default_factory=list)
    cloud_per_hour_usd: float | None = None
    breakeven_utilization: float | None = None
    breakeven_note: str = ""
    facility_not_charged: list[str] = field(default_factory=list)
    compare_region: str = ""

    def to_json(self, per_hour_usd: float | None) -> dict[str, Any]:
        """The on-prem keys of ``cost --json``: ``capital_usd``, ``amortization_years``, ``utilization``,
        ``owned_per_used_hour_usd`` (cost per hour of use at the utilisation), ``cloud_equivalent``
        (``instances``: ``[{group, instance_type, count, region, unit_price_usd, source, as_of, stale}]``,
        ``per_hour_usd`` full time, ``per_hour_at_utilization_usd``; ``null`` without a comparison),
        ``compare_region``, ``breakeven_utilization``, ``breakeven_note``, ``facility_not_charged``."""
        u = self.utilization
        cloud = None
        if self.equivalents and self.cloud_per_hour_usd is not None:
            cloud = {"instances": [e.__dict__ for e in self.equivalents], "per_hour_usd": _r(self.cloud_per_hour_usd),
                     "per_hour_at_utilization_usd": _r(self.cloud_per_hour_usd * u)}
        return {"capital_usd": _r(self.capital_usd), "amortization_years": self.amortization_years,
                "utilization": u,
                "owned_per_used_hour_usd": _r(per_hour_usd / u) if per_hour_usd is not None and u > 0 else None,
                "cloud_equivalent": cloud, "compare_region": self.compare_region,
                "breakeven_utilization": _r(self.breakeven_utilization, 4), "breakeven_note": self.breakeven_note,
                "facility_not_charged": list(self.facility_not_charged)}


@dataclass
class CostReport:
    """The cost of one blueprint: ``items`` (priced and unpriced lines), ``no_charge`` (``{type: (count,
    source)}`` of the planned resources with no charge of their own), totals over the priced lines
    (``per_hour_usd``, ``per_month_usd`` = per hour x ``hours_per_month``), ``region`` (the cloud region the
    lines are priced in; ``""`` on premises, whose cloud comparison names its own), ``onprem`` (on-prem
    blueprints), ``workload`` (:func:`workload_estimate`) and ``work`` (cost of measured work, ``--results``)."""

    blueprint: str
    provider: str
    region: str
    hours_per_month: float
    items: list[CostItem]
    no_charge: dict[str, tuple[int, str]] = field(default_factory=dict)
    onprem: OnpremSummary | None = None
    workload: dict[str, Any] | None = None
    work: list[dict[str, Any]] = field(default_factory=list)
    currency: str = "USD"

    @property
    def per_hour_usd(self) -> float:
        """Sum of the priced lines per hour (unpriced lines are not in it: see :attr:`unpriced`)."""
        return sum(i.per_hour_usd for i in self.items if i.per_hour_usd is not None)

    @property
    def per_month_usd(self) -> float:
        """:attr:`per_hour_usd` x the catalog's hours per month (730)."""
        return self.per_hour_usd * self.hours_per_month

    @property
    def unpriced(self) -> list[CostItem]:
        """The lines without a price."""
        return [i for i in self.items if not i.priced]

    @property
    def stale(self) -> list[CostItem]:
        """The priced lines whose price is older than the catalog's ``stale_after_days``."""
        return [i for i in self.items if i.stale]

    def summary(self) -> str:
        """One line for ``plan``'s summary: ``$X/h, $Y/month (N unpriced)``."""
        text = f"${self.per_hour_usd:,.2f}/h, ${self.per_month_usd:,.0f}/month"
        if self.unpriced:
            text += f" + {len(self.unpriced)} unpriced line{'s' if len(self.unpriced) != 1 else ''}"
        return text

    def to_json(self, hours: float | None = None) -> dict[str, Any]:
        """The ``cost --json`` document: ``currency``, ``per_hour_usd``, ``per_month_usd``, ``items``
        (:meth:`CostItem.to_json`), ``unpriced`` (count), ``stale`` (count), ``no_charge``
        (``[{type, count, source}]``), ``hours_per_month``; with ``hours``: ``hours`` and ``total_usd`` for that
        many hours; on-prem: :meth:`OnpremSummary.to_json`'s keys; ``workload`` and ``work`` when computed."""
        doc: dict[str, Any] = {
            "blueprint": self.blueprint, "provider": self.provider, "region": self.region or None,
            "currency": self.currency, "per_hour_usd": _r(self.per_hour_usd), "per_month_usd": _r(self.per_month_usd),
            "hours_per_month": self.hours_per_month,
            "items": [i.to_json() for i in self.items], "unpriced": len(self.unpriced), "stale": len(self.stale),
            "no_charge": [{"type": t, "count": n, "source": s} for t, (n, s) in sorted(self.no_charge.items())],
        }
        if hours is not None:
            doc["hours"] = hours
            doc["total_usd"] = _r(self.per_hour_usd * hours)
        if self.onprem is not None:
            doc.update(self.onprem.to_json(self.per_hour_usd))
        if self.workload is not None:
            doc["workload"] = self.workload
        if self.work:
            doc["work"] = self.work
        return doc

    def group_node_hour(self) -> dict[str, float]:
        """``{group: USD per node-hour}`` from the priced lines of each node group (instances, root volumes,
        on-prem server lines), divided by the group's node count."""
        sums: dict[str, float] = defaultdict(float)
        nodes: dict[str, float] = {}
        for i in self.items:
            if i.group is None or i.per_hour_usd is None:
                continue
            sums[i.group] += i.per_hour_usd
            if i.type in ("ec2-instance", "onprem-server"):
                nodes[i.group] = nodes.get(i.group, 0) + i.count
        return {g: sums[g] / nodes[g] for g in sums if nodes.get(g)}


def _r(v: float | None, nd: int = 10) -> float | None:
    return None if v is None else round(v, nd)


def _is_stale(as_of: str, max_days: int, today: _dt.date | None = None) -> bool:
    try:
        d = _dt.date.fromisoformat(as_of[:10])
    except ValueError:
        return True  # a price without a readable date cannot be called current
    return ((today or _dt.date.today()) - d).days > max_days


class _Pricer:
    """Builds the lines of one report from the price catalog (region, staleness, unpriced lines)."""

    def __init__(self, data: Mapping[str, Any], region: str, today: _dt.date | None = None):
        self.data = data
        self.region = region
        self.hpm = float(data["meta"]["hours_per_month"])
        self.stale_days = int(data["meta"]["stale_after_days"])
        self.today = today
        self.items: list[CostItem] = []

    def add(self, name: str, typ: str, count: float, unit: str, price: Price | None, *, per_hour_factor: float,
            group: str | None = None, missing: str = "", note: str = "", spec: tuple[str, ...] = ()) -> CostItem:
        """Add a line of ``count`` units at ``price`` (per ``unit``); ``per_hour_factor`` turns one unit's price
        into USD per hour (1 for hourly prices, 1/hours-per-month for monthly ones). ``price`` None: an unpriced
        line whose note is ``missing``."""
        if price is None:
            item = CostItem(name, typ, count, unit, None, None, note=missing, group=group, spec=spec)
        else:
            notes = "; ".join(n for n in (note, price.note) if n)
            item = CostItem(name, typ, count, unit, price.value, count * price.value * per_hour_factor,
                            source=price.source, as_of=price.as_of, note=notes, group=group,
                            stale=self.stale(price), spec=spec)
        self.items.append(item)
        return item

    def stale(self, price: Price) -> bool:
        """A catalogued price older than the catalog's ``stale_after_days`` (or without a readable date) — judged
        alike for cloud prices and on-prem defaults; a figure the blueprint states is the user's own, never stale."""
        return not price.source.startswith(BLUEPRINT_SOURCE) and _is_stale(price.as_of, self.stale_days, self.today)


# ---------------------------------------------------------------------------------------------
# cloud: the plan's resources
# ---------------------------------------------------------------------------------------------

_MARKET = {"spot": "spot", "capacity-block": "capacity-block"}
_EKS_CAPACITY = {"ON_DEMAND": "on-demand", "SPOT": "spot", "CAPACITY_BLOCK": "capacity-block"}
_REFRESH_HINT = "add it to blueprints/data/prices.yaml with its source, or run `clusterforge cost --refresh` with AWS credentials"
_CATALOG_HINT = "add it to blueprints/data/prices.yaml with its source (`--refresh` covers instances and gp3 only)"


def _group_of(inputs: Mapping[str, Any]) -> str | None:
    tags = inputs.get("tags") or {}
    return tags.get("clusterforge:node-group") if isinstance(tags, dict) else None


def _capacity_of(lt: Mapping[str, Any], instance: Mapping[str, Any]) -> str:
    """Capacity type of an instance from its launch template (or its own inputs): the market type
    (``spot``, ``capacity-block``), else a targeted capacity reservation (``reservation``), else on-demand."""
    for src in (instance, lt):
        market = ((src.get("instanceMarketOptions") or {}).get("marketType") or "").lower()
        if market in _MARKET:
            return _MARKET[market]
    for src in (instance, lt):
        target = (src.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}
        if target.get("capacityReservationId") or target.get("capacityReservationResourceGroupArn"):
            return "reservation"
    return "on-demand"


def _instance_price(p: _Pricer, itype: str, capacity: str) -> tuple[Price | None, str, str]:
    """(price, note, why-missing) of one instance-hour of ``itype`` bought as ``capacity``."""
    options = p.data.get("ec2", {}).get(itype) or {}
    if capacity == "reservation":  # an ODCR bills the on-demand rate whether used or not
        return (_lookup(options.get("on-demand"), p.region),
                ("On-Demand Capacity Reservation: billed at the on-demand rate whether used or not "
                 "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-pricing-billing.html)"),
                f"no on-demand price for {itype} in {p.region} (a reservation bills at it)")
    note = {"spot": "Spot: indicative, not in the Price List, changes every few minutes",
            "capacity-block": "Capacity Block: paid up front for the whole block, independent of use; the "
                              "exact price is quoted at purchase (DescribeCapacityBlockOfferings)"}.get(capacity, "")
    return _lookup(options.get(capacity), p.region), note, f"no {capacity} price for {itype} in {p.region}"


def _root_volumes(p: _Pricer, lt: Mapping[str, Any], count: int, owner: str, group: str | None) -> None:
    """Lines for the EBS volumes each instance launched from ``lt`` gets (``blockDeviceMappings``: the root volume;
    its device name depends on the AMI, so the line says ``root``)."""
    for bdm in lt.get("blockDeviceMappings") or []:
        ebs = bdm.get("ebs") or {}
        if not ebs.get("volumeSize"):
            continue
        _ebs_lines(p, f"root volumes of {owner}", str(ebs.get("volumeType") or "gp3"),
                   float(ebs["volumeSize"]) * count, ebs.get("throughput"), ebs.get("iops"), count, group)


def _ebs_lines(p: _Pricer, name: str, vtype: str, gib: float, throughput: Any, iops: Any, volumes: int,
               group: str | None) -> None:
    entry = p.data.get("ebs", {}).get(vtype) or {}
    p.add(f"{name} ({vtype}, {gib:g} GiB)", f"ebs-{vtype}", gib, "GiB-month", _lookup(entry.get("gib_month"), p.region),
          per_hour_factor=1 / p.hpm, group=group,
          missing=f"no EBS {vtype} price per GiB-month in {p.region}: {_REFRESH_HINT}")
    if throughput and float(throughput) > 125 and vtype == "gp3":
        extra = (float(throughput) - 125) * volumes
        p.add(f"{name} throughput above 125 MiB/s", "ebs-gp3-throughput", extra, "MiB/s-month",
              _lookup(entry.get("mibps_month_above_125"), p.region), per_hour_factor=1 / p.hpm, group=group,
              missing=f"no gp3 throughput price in {p.region}: {_REFRESH_HINT}")
    if iops and float(iops) > 3000 and vtype == "gp3":
        p.add(f"{name} IOPS above 3,000", "ebs-gp3-iops", (float(iops) - 3000) * volumes, "IOPS-month",
              _lookup(entry.get("iops_month_above_3000"), p.region), per_hour_factor=1 / p.hpm, group=group,
              missing=f"no gp3 IOPS price in {p.region}: {_REFRESH_HINT}")


def _fsx_lines(p: _Pricer, r: PlannedResource | Resource) -> None:
    i = r.inputs
    dep, stype = str(i.get("deploymentType") or "SCRATCH_1"), str(i.get("storageType") or "SSD")
    tier = i.get("perUnitStorageThroughput")
    key = f"{dep}/{stype}" + (f"/{tier}" if tier else "")
    gb = float(i.get("storageCapacity") or 0)
    entry = (p.data.get("fsx_lustre", {}).get("storage_gb_month") or {}).get(key)
    p.add(f"FSx for Lustre {r.name} ({key.replace('/', ' ')} MB/s/TiB, {gb:g} GB)" if tier else
          f"FSx for Lustre {r.name} ({dep} {stype}, {gb:g} GB)", "fsx-lustre", gb, "GB-month",
          _lookup(entry, p.region), per_hour_factor=1 / p.hpm,
          missing=f"no FSx for Lustre {key} price per GB-month in {p.region} is catalogued (no dated public source was "
                  f"found for it): {_CATALOG_HINT}")
    days = int(i.get("automaticBackupRetentionDays") or 0)
    if days > 0:
        p.add(f"FSx for Lustre {r.name} backups ({days} days kept)", "fsx-lustre-backup", 0, "GB-month", None,
              per_hour_factor=1 / p.hpm, missing="backup storage is billed per GB-month of incremental backup data, "
              "which depends on how much the data changes: not estimated (and no backup price is catalogued)")
    meta = i.get("metadataConfiguration") or {}
    if str(meta.get("mode", "")).upper() == "USER_PROVISIONED":
        p.add(f"FSx for Lustre {r.name} metadata IOPS ({meta.get('iops')})", "fsx-lustre-metadata",
              float(meta.get("iops") or 0), "IOPS-month", None, per_hour_factor=1 / p.hpm,
              missing="user-provisioned metadata IOPS have no catalogued price")


def price_plan(result: PlanResult | Iterable[PlannedResource | Resource], loaded: LoadedBlueprint,
               prices: Mapping[str, Any] | None = None, *, today: _dt.date | None = None) -> CostReport:
    """Price every resource the AWS stack of ``loaded`` creates, in the blueprint's region: ``result`` is the
    stack's inventory (:attr:`stacks.inventory.Inventory.resources`, what ``clusterforge cost`` prices) or an
    offline plan (:class:`~clusterforge.plan.PlanResult`); each resource has ``type``, ``name``, ``custom``,
    ``id`` and the engine ``inputs`` read here (an instance's ``launchTemplate.id`` is its template's ``id``).

    Instances (``aws:ec2/instance:Instance``) and EKS node groups are grouped by launch template and
    capacity type into one line per group of identical instances; their launch templates' block devices give
    the root-volume lines. ``prices`` defaults to :func:`load_prices`. ``today`` (tests) fixes the date
    staleness is judged against. Never raises for a resource it does not know: that is an unpriced line.
    """
    planned = getattr(result, "resources", None)  # a PlanResult; else the resources themselves
    resources: list[Any] = list(planned) if planned is not None else list(cast("Iterable[Any]", result))
    data = prices if prices is not None else load_prices()
    bp = loaded.blueprint
    region = str(getattr(bp.target, "region", "us-east-1"))
    p = _Pricer(data, region, today)
    by_id = {r.id: r for r in resources if r.id}
    free: dict[str, str] = {}
    for entry in data.get("no_charge") or []:
        for t in entry.get("types") or []:
            free[t] = str(entry.get("source", ""))
    usage: dict[str, Mapping[str, Any]] = {t: entry for entry in data.get("usage_based") or []
                                           for t in entry.get("types") or []}
    per_resource: Mapping[str, Any] = data.get("per_resource") or {}
    no_charge: dict[str, tuple[int, str]] = {}
    instances: dict[tuple[str, str, str, str | None], int] = defaultdict(int)
    lts: dict[str, Mapping[str, Any]] = {}
    unknown: dict[str, int] = defaultdict(int)
    n_used: dict[str, int] = defaultdict(int)
    for r in resources:
        if not r.custom or r.type.startswith("pulumi:"):  # components and providers are not cloud resources
            continue
        t = r.type
        if t == "aws:ec2/instance:Instance":
            lt_res = by_id.get(str((r.inputs.get("launchTemplate") or {}).get("id")))
            lt = lt_res.inputs if lt_res is not None else {}
            itype = str(r.inputs.get("instanceType") or lt.get("instanceType") or "?")
            owner = lt_res.name if lt_res is not None else r.name
            lts[owner] = lt
            group = _group_of(r.inputs) or _group_of(lt)
            instances[(itype, _capacity_of(lt, r.inputs), owner, group)] += 1
        elif t == "aws:eks/nodeGroup:NodeGroup":
            lt_res = by_id.get(str((r.inputs.get("launchTemplate") or {}).get("id")))
            lt = lt_res.inputs if lt_res is not None else {}
            types = r.inputs.get("instanceTypes") or [lt.get("instanceType") or "?"]
            n = int((r.inputs.get("scalingConfig") or {}).get("desiredSize") or 0)
            cap = _EKS_CAPACITY.get(str(r.inputs.get("capacityType") or "ON_DEMAND"), "on-demand")
            owner = lt_res.name if lt_res is not None else r.name
            lts[owner] = lt
            instances[(str(types[0]), cap, owner, _group_of(r.inputs))] += n
        elif t == "aws:fsx/lustreFileSystem:LustreFileSystem":
            _fsx_lines(p, r)
        elif t == "aws:ebs/volume:Volume":
            _ebs_lines(p, f"EBS volume {r.name}", str(r.inputs.get("type") or "gp2"), float(r.inputs.get("size") or 0),
                       r.inputs.get("throughput"), r.inputs.get("iops"), 1, None)
        elif t == "aws:ec2/natGateway:NatGateway":
            nat = data.get("nat_gateway") or {}
            p.add(f"NAT gateway {r.name}", "nat-gateway", 1, "hour", _lookup(nat.get("hour"), region),
                  per_hour_factor=1, missing=f"no NAT gateway hourly price in {region}: {_CATALOG_HINT}")
            gb = bp.cost.nat_data_gb_per_month
            if gb is None:
                p.add(f"NAT gateway {r.name} data processed", "nat-gateway-data", 0, "GB", None, per_hour_factor=0,
                      missing="usage-based (per GB through the gateway): state it as `cost.nat_data_gb_per_month`")
            else:
                p.add(f"NAT gateway {r.name} data processed ({gb:g} GB/month, cost.nat_data_gb_per_month)",
                      "nat-gateway-data", gb, "GB", _lookup(nat.get("gb_processed"), region), per_hour_factor=1 / p.hpm,
                      missing=f"no NAT data-processing price in {region}: {_CATALOG_HINT}",
                      note="assumed volume from the blueprint")
        elif t == "aws:ec2/eip:Eip":
            p.add(f"public IPv4 address {r.name}", "public-ipv4", 1, "hour",
                  _lookup((data.get("public_ipv4") or {}).get("hour"), region), per_hour_factor=1,
                  missing=f"no public IPv4 price in {region}: {_CATALOG_HINT}")
        elif t == "aws:eks/cluster:Cluster":
            p.add(f"EKS control plane {r.name}", "eks-cluster", 1, "hour",
                  _lookup((data.get("eks_cluster") or {}).get("hour"), region), per_hour_factor=1,
                  missing=f"no EKS cluster price in {region}: {_CATALOG_HINT}")
        elif t in per_resource:
            own = per_resource[t]
            label = str(own.get("name") or t.rsplit(":", 1)[-1])
            p.add(f"{label} {r.name}", t, 1, "resource-month", _lookup(own.get("month"), region), per_hour_factor=1 / p.hpm,
                  missing=f"no {label} price in {region}: {_CATALOG_HINT}")
        elif t in usage:
            n_used[t] += 1
        elif t in free:
            n, src = no_charge.get(t, (0, free[t]))
            no_charge[t] = (n + 1, src)
        elif t.startswith("kubernetes:"):
            n, _ = no_charge.get(t, (0, ""))
            no_charge[t] = (n + 1, "an object inside the Kubernetes cluster: it runs on the priced nodes")
        else:
            unknown[t] += 1
    for (itype, cap, owner, group), n in instances.items():
        price, note, missing = _instance_price(p, itype, cap)
        p.add(f"{itype} {cap}" + (f" ({group})" if group else ""), "ec2-instance", n, "instance-hour", price,
              per_hour_factor=1, group=group, note=note, missing=f"{missing}: {_REFRESH_HINT}", spec=(itype, cap))
        _root_volumes(p, lts.get(owner) or {}, n, group or owner, group)
    for t, n in sorted(n_used.items()):
        p.add(f"{t.rsplit(':', 1)[-1]} x{n}", t, n, "resource", None, per_hour_factor=0,
              missing=f"usage-based, not estimated: {usage[t].get('basis', '')} ({usage[t].get('source', '')})")
    for t, n in sorted(unknown.items()):
        p.add(f"{t.rsplit(':', 1)[-1]} x{n}", t, n, "resource", None, per_hour_factor=0,
              missing="no price in the catalog for this resource type (it may be usage-based or free): "
                      "not included in the total")
    order = {"ec2-instance": 0}
    p.items.sort(key=lambda i: (order.get(i.type, 1), i.group or "~", i.type))
    return CostReport(bp.name, "aws", region, p.hpm, p.items, no_charge)


# ---------------------------------------------------------------------------------------------
# on premises
# ---------------------------------------------------------------------------------------------

def _default(data: Mapping[str, Any], key: str) -> Price | None:
    e = (data.get("onprem") or {}).get(key)
    if not isinstance(e, dict) or "value" not in e:
        return None
    return Price(float(e["value"]), str(e.get("source", "")), str(e.get("as_of", "")), str(e.get("note", "")))


def _keyed(data: Mapping[str, Any], table: str, keys: Iterable[str]) -> Price | None:
    t = (data.get("onprem") or {}).get(table) or {}
    for k in keys:
        e = t.get(k)
        if isinstance(e, dict) and "value" in e:
            return Price(float(e["value"]), str(e.get("source", "")), str(e.get("as_of", "")), str(e.get("note", "")))
    return None


def _mine(value: float | None, what: str) -> Price | None:
    return None if value is None else Price(float(value), f"{BLUEPRINT_SOURCE} cost.{what}", "", "your figure")


def _node_keys(rg: ResolvedGroup) -> list[str]:
    hw = rg.group.hardware
    keys = []
    if hw is not None and getattr(hw, "system", None):
        keys.append(f"system/{hw.system}")
    if rg.hardware.gpu_key:
        keys.append(f"gpu/{rg.hardware.gpu_key}/{rg.gpus}")
    return keys


def _fabric_key(bp: Any) -> str:
    net = bp.network
    gen = getattr(getattr(net, "infiniband", None), "generation", None)
    return f"{net.fabric}/{gen}" if gen else str(net.fabric)


def price_onprem(loaded: LoadedBlueprint, prices: Mapping[str, Any] | None = None, *, utilization: float = 1.0,
                 today: _dt.date | None = None, hosts: Mapping[str, int] | None = None) -> CostReport:
    """Price an on-prem blueprint's hosts (per node group of the resolved cluster) at ``utilization`` (0-1]:
    capital (servers, one switch port and its cabling per declared NIC, shared storage) written off over the
    amortisation period, power x utilisation, space, facility and support per hour; and the comparison with
    the cheapest catalogued cloud instance of each GPU group's GPU and count in ``cost.compare_region``.

    Inputs: the blueprint's ``cost`` section, else the catalog's ``onprem`` defaults (each with its source);
    a value with neither gives an unpriced line. Power: ``cost.node_power_kw``, else the catalog's system
    figure, else the GPUs' TDP x count (hardware catalog ``tdp_w``; CPUs and fans not counted, said in the line).
    Facility: ``cost.facility_usd_per_node``, else the catalog's figure for the node's system or GPU key and count
    (the data-centre 8 x H100 node its source models); a group with neither gets no facility line and is named in
    :attr:`OnpremSummary.facility_not_charged` (a workstation has no facility to charge). Catalog defaults older
    than ``stale_after_days`` are flagged stale as cloud prices are. ``hosts``: ``{node group: hosts}`` of the
    on-prem plan (the hosts it configures); unset = the resolved cluster's node counts.
    """
    from blueprints.catalog import catalog

    data = prices if prices is not None else load_prices()
    bp, cost = loaded.blueprint, loaded.blueprint.cost
    p = _Pricer(data, cost.compare_region, today)
    years_p = _mine(cost.amortization_years, "amortization_years") or _default(data, "amortization_years")
    years = years_p.value if years_p else 4.0
    amort = 1 / (years * HOURS_PER_YEAR)
    kwh = _mine(cost.power_usd_per_kwh, "power_usd_per_kwh") or _default(data, "power_usd_per_kwh")
    pue = _mine(cost.pue, "pue") or _default(data, "pue")
    colo = _mine(cost.colo_usd_per_kw_month, "colo_usd_per_kw_month") or _default(data, "colo_usd_per_kw_month")
    facility_mine = _mine(cost.facility_usd_per_node, "facility_usd_per_node")
    no_facility: list[str] = []
    fabric = _fabric_key(bp)
    port = _mine(cost.switch_port_usd, "switch_port_usd") or _keyed(data, "switch_port_usd", [fabric])
    cable = _mine(cost.cabling_usd_per_port, "cabling_usd_per_port") or _keyed(data, "cabling_usd_per_port", [fabric])
    yrs = f"/ ({years:g} years x 8760 h)"
    capital = 0.0
    fixed_gpu = power_gpu = 0.0
    compare_ok = True
    compare_note = ""
    equivalents: list[CloudEquivalent] = []
    cat = catalog()
    for rg in loaded.cluster.groups:
        g = rg.name
        n = rg.nodes if hosts is None else int(hosts.get(g, 0))
        server = _mine(cost.server_price_usd.get(g), f"server_price_usd.{g}") or _keyed(data, "servers", _node_keys(rg))
        s_item = p.add(f"servers ({g})", "onprem-server", n, "USD", server, per_hour_factor=amort, group=g,
                       note=f"capital {yrs}",
                       missing=f"no price for a server of group `{g}`: set `cost.server_price_usd.{g}` (your quote)")
        nics = len(rg.group.hardware.nics) if rg.group.hardware is not None else 0
        fab_items = []
        if nics:
            fab_items.append(p.add(f"fabric switch ports ({g}: {nics} per node)", "onprem-switch-port", n * nics, "USD",
                                   port, per_hour_factor=amort, group=g, note=f"capital {yrs}",
                                   missing=f"no {fabric} switch port price: set `cost.switch_port_usd`"))
            fab_items.append(p.add(f"fabric cables and transceivers ({g})", "onprem-cabling", n * nics, "USD", cable,
                                   per_hour_factor=amort, group=g, note=f"capital {yrs}",
                                   missing=f"no {fabric} cabling price: set `cost.cabling_usd_per_port`"))
        # power at full load, kW per node
        kw = _mine(cost.node_power_kw.get(g), f"node_power_kw.{g}") or _keyed(data, "node_power_kw", _node_keys(rg))
        if kw is None and rg.hardware.gpu is not None and rg.hardware.gpu.tdp_w and rg.gpus:
            kw = Price(rg.hardware.gpu.tdp_w * rg.gpus / 1000, rg.hardware.gpu.source, "",
                       f"GPUs only: {rg.gpus} x {rg.hardware.gpu.tdp_w:g} W TDP (hardware catalog); CPUs, NICs and "
                       "fans not counted — set `cost.node_power_kw`")
        power_item = space_item = None
        if kw is not None and kwh is not None and pue is not None:
            unit = Price(kw.value * pue.value * kwh.value, kwh.source, kwh.as_of,
                         f"{kw.value:g} kW x PUE {pue.value:g} x ${kwh.value:g}/kWh at full load ({kw.note or kw.source}; "
                         f"PUE: {pue.source})")
            power_item = p.add(f"power ({g}, at {utilization:.0%} utilisation)", "onprem-power", n, "node-hour", unit,
                               per_hour_factor=utilization, group=g)
        else:
            power_item = p.add(f"power ({g})", "onprem-power", n, "node-hour", None, per_hour_factor=0, group=g,
                               missing=f"no power figure for a node of `{g}`: set `cost.node_power_kw.{g}`")
        if kw is not None and colo is not None:
            space_item = p.add(f"space ({g}, {kw.value:g} kW per node)", "onprem-space", n, "node-hour",
                               Price(kw.value * colo.value * 12 / HOURS_PER_YEAR, colo.source, colo.as_of,
                                     f"${colo.value:g}/kW-month x {kw.value:g} kW x 12 / 8760; {colo.note}".rstrip("; ")),
                               per_hour_factor=1, group=g)
        # the catalog's facility figure is for the node its source models (a data-centre 8 x H100 node): other
        # nodes (a workstation, a CPU server) are charged a facility only when the blueprint declares one
        facility = facility_mine or _keyed(data, "facility_usd_per_node", _node_keys(rg))
        fac_item = None
        if facility is None:
            no_facility.append(g)
        else:
            fac_item = p.add(f"facility and operations ({g})", "onprem-facility", n, "USD", facility,
                             per_hour_factor=amort, group=g, note=f"over the node's life {yrs}")
        sup_item = None
        if cost.support_usd_per_node_year:
            sup_item = p.add(f"support ({g})", "onprem-support", n, "USD per node-year",
                             Price(cost.support_usd_per_node_year, f"{BLUEPRINT_SOURCE} cost.support_usd_per_node_year", ""),
                             per_hour_factor=1 / HOURS_PER_YEAR, group=g)
        capital += sum(i.count * (i.unit_price_usd or 0) for i in [s_item, *fab_items] if i.priced)
        if not rg.has_gpus:
            continue
        fixed = [s_item, *fab_items, *(x for x in (fac_item, space_item, sup_item) if x is not None)]
        if any(not i.priced for i in fixed) or power_item is None or not power_item.priced:
            compare_ok = False
            compare_note = f"group `{g}` has unpriced lines: no break-even"
            continue
        fixed_gpu += sum(i.per_hour_usd or 0 for i in fixed)
        power_gpu += n * (power_item.unit_price_usd or 0)
        eq = _cloud_equivalent(p, cat, rg, n)
        if eq is None:
            compare_ok = False
            compare_note = (f"no catalogued on-demand price in {cost.compare_region} for a cloud instance with "
                            f"{rg.gpus} x {rg.hardware.gpu_key} (group `{g}`)")
        else:
            equivalents.append(eq)
    if bp.storage:
        capital_storage = _mine(cost.storage_capital_usd, "storage_capital_usd")
        st = p.add("shared storage (" + ", ".join(s.name for s in bp.storage) + ")", "onprem-storage", 1, "USD",
                   capital_storage, per_hour_factor=amort, note=f"capital {yrs}",
                   missing="the declared storage's servers: set `cost.storage_capital_usd` (0 if it exists already "
                           "and is paid elsewhere)")
        if st.priced:
            capital += st.unit_price_usd or 0
    summary = OnpremSummary(capital_usd=capital, amortization_years=years, utilization=utilization,
                            facility_not_charged=no_facility, compare_region=cost.compare_region)
    summary.equivalents = equivalents
    if equivalents and compare_ok:
        cloud = sum(e.count * e.unit_price_usd for e in equivalents)
        summary.fixed_per_hour_usd, summary.power_per_hour_usd = fixed_gpu, power_gpu
        summary.cloud_per_hour_usd = cloud
        rent = f"renting {_equivalents_text(equivalents)}"
        if cloud <= power_gpu:
            summary.breakeven_note = f"owning never pays off: {rent} costs less than their power alone"
        else:
            u = fixed_gpu / (cloud - power_gpu)
            formula = (f"fixed ${fixed_gpu:,.2f}/h / (cloud ${cloud:,.2f}/h - power ${power_gpu:,.2f}/h at full "
                       "load)")
            if u > 1:
                summary.breakeven_note = (f"owning the GPU nodes costs more than {rent} even when they work every "
                                          f"hour (break-even would need {u:.0%}: {formula})")
            else:
                summary.breakeven_utilization = u
                summary.breakeven_note = (f"owning the GPU nodes costs less than {rent} once they do useful work "
                                          f"more than {u:.1%} of the hours ({formula})")
    else:
        summary.breakeven_note = compare_note or "no GPU group to compare with a cloud instance"
    return CostReport(bp.name, "onprem", "", p.hpm, p.items, {}, onprem=summary)


def _equivalents_text(equivalents: Iterable[CloudEquivalent]) -> str:
    """``4 x p5.48xlarge on demand in us-east-1 at $55.04/h each (as of 2026-08-26)`` for each equivalent."""
    return " and ".join(
        f"{e.count} x {e.instance_type} on demand in {e.region} at ${e.unit_price_usd:,.2f}/h each (as of "
        f"{e.as_of}{', stale' if e.stale else ''})" for e in equivalents)


def _cloud_equivalent(p: _Pricer, cat: Any, rg: ResolvedGroup, nodes: int) -> CloudEquivalent | None:
    """The cheapest catalogued on-demand instance type with ``rg``'s GPU model and count per node, in ``p``'s
    region (``cost.compare_region``); its price is judged stale as every other."""
    best: CloudEquivalent | None = None
    for name, raw in cat.data["aws_instance_types"].items():
        acc = raw.get("accelerators") or {}
        if acc.get("type") != rg.hardware.gpu_key or int(acc.get("count") or 0) != rg.gpus:
            continue
        price = _lookup((p.data.get("ec2", {}).get(name) or {}).get("on-demand"), p.region)
        if price is None:
            continue
        if best is None or price.value < best.unit_price_usd:
            best = CloudEquivalent(rg.name, name, nodes, p.region, price.value, price.source, price.as_of,
                                   p.stale(price))
    return best


# ---------------------------------------------------------------------------------------------
# cost of work: a training run, measured tokens and reads
# ---------------------------------------------------------------------------------------------

def cost_basis(report: CostReport, loaded: LoadedBlueprint) -> dict[str, Any]:
    """What the validation report needs to price measured work: ``{"currency", "per_hour_usd",
    "groups": {group: {"node_per_hour_usd", "gpus_per_node"}}, "as_of" (the oldest price used), "unpriced"
    (lines left out), "source"}`` — plain data, so :mod:`validate` reads it without importing clusterforge."""
    per_node = report.group_node_hour()
    gpus = {rg.name: rg.gpus for rg in loaded.cluster.groups}
    dates = sorted(i.as_of for i in report.items if i.priced and i.as_of)
    return {"currency": report.currency, "per_hour_usd": _r(report.per_hour_usd),
            "groups": {g: {"node_per_hour_usd": _r(v), "gpus_per_node": gpus.get(g, 0)} for g, v in per_node.items()},
            "as_of": dates[0] if dates else "", "unpriced": len(report.unpriced),
            "source": "clusterforge cost (blueprints/data/prices.yaml and the blueprint's cost section)"}


def workload_estimate(report: CostReport, loaded: LoadedBlueprint, measured_mfu: float | None = None,
                      mfu_source: str = "") -> dict[str, Any] | None:
    """Training time and cost of ``cost.training_tokens_b`` tokens of the blueprint's ``workload`` on its
    training groups: FLOPs = 6 x parameters (active parameters for MoE) x tokens (the dense-transformer
    estimate of https://arxiv.org/abs/2001.08361), time = FLOPs / (GPUs x peak FLOP/s at the workload's
    precision x MFU), cost = time x the cluster's cost per hour. MFU: ``measured_mfu`` (the AMP suite's result,
    ``--results``), else the AMP suite's floor for the GPU (:func:`validate.suites.amp.mfu_floor`, an assumed
    value, said so). Returns ``None`` without a ``workload`` section; a dict with ``note`` when a figure is
    missing."""
    bp = loaded.blueprint
    w = bp.workload
    if w is None:
        return None
    tokens_b = bp.cost.training_tokens_b
    from blueprints.sizing import spec

    model = spec(w)  # declared parameters over the shape catalog's `workload.model`; active ones for MoE
    params_b = model.active / 1e9 if model is not None else None
    if tokens_b is None or params_b is None:
        return {"note": "set `cost.training_tokens_b` and `workload.model` or `workload.parameters_b` for a training "
                        "estimate"}
    groups = [rg for rg in loaded.cluster.groups if rg.training and rg.hardware.gpu is not None]
    if not groups:
        return {"note": "no training group with a catalogued GPU"}
    gpu = groups[0].hardware.gpu
    peak = gpu.peak_tflops(w.precision) if gpu is not None else None
    if not peak:
        return {"note": f"no {w.precision} peak for {groups[0].hardware.gpu_key} in the hardware catalog"}
    n_gpus = sum(rg.nodes * rg.gpus for rg in groups)
    if measured_mfu is not None:
        mfu, how = measured_mfu, mfu_source or "measured (AMP suite)"
    else:
        from validate.suites.amp import mfu_floor

        mfu, _deriv, src = mfu_floor(groups[0].hardware.gpu_key)
        how = f"assumed: the AMP suite's MFU floor for {groups[0].hardware.gpu_key} ({src})"
    flops = 6 * params_b * 1e9 * tokens_b * 1e9
    seconds = flops / (n_gpus * peak * 1e12 * mfu)
    hours = seconds / 3600
    return {"parameters_b": params_b, "tokens_b": tokens_b, "gpus": n_gpus, "gpu": groups[0].hardware.gpu_key,
            "precision": w.precision, "peak_tflops_per_gpu": peak, "peak_source": gpu.source if gpu else "", "mfu": round(mfu, 4),
            "mfu_source": how, "flops": flops, "hours": round(hours, 3), "days": round(hours / 24, 3),
            "cost_usd": _r(hours * report.per_hour_usd, 2),
            "formula": "6 x parameters x tokens / (GPUs x peak x MFU) (https://arxiv.org/abs/2001.08361)",
            "unpriced_lines": len(report.unpriced)}
