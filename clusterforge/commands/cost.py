"""``clusterforge cost BLUEPRINT [--json] [--hours N] [--utilization U] [--results DIR] [--refresh]``.

What the blueprint's cluster costs, offline: AWS blueprints price every resource of the offline plan (the
same resources ``plan`` lists) from the price catalog; on-prem blueprints price their hosts (capital written
off, power, space, facility, support) and compare them with the nearest catalogued cloud instance (cost at
``--utilization`` and the break-even utilisation). Every line names its price's source and date; a resource
without a price is a line that says so and is left out of the totals (never $0). ``--results DIR`` adds the
cost of the measured work (dollars per million training tokens, per TB read) and uses the measured MFU for
the workload estimate. ``--refresh`` first reads today's prices for the plan's instance types from the AWS
Price List API (needs AWS credentials; :mod:`clusterforge.pricelist`). Exit 0; 1 for an invalid blueprint;
2 for a usage error.

``--json`` prints ``{"currency", "per_hour_usd", "per_month_usd", "items": [{"name", "type", "count",
"unit_price_usd", "per_hour_usd", "source", "as_of", ...}], ...}`` (:meth:`clusterforge.cost.CostReport.to_json`;
on-prem adds ``capital_usd``, ``cloud_equivalent`` and ``breakeven_utilization``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def compute(loaded: Any, *, utilization: float = 1.0, plan: Any = None, prices: dict[str, Any] | None = None) -> Any:
    """The :class:`~clusterforge.cost.CostReport` of ``loaded`` from its target
    (:meth:`clusterforge.targets.Target.cost`): what it creates, priced; ``plan`` hands over a plan already made
    (the cloud target prices its stack's inventory and needs none). ``None`` for a target without prices."""
    from ..targets import checked_target

    return checked_target(loaded).cost(loaded, plan, utilization=utilization, prices=prices)


def _priced(loaded: Any, **kw: Any) -> Any:
    """:func:`compute`, or :class:`~clusterforge.errors.UsageError` for a target without prices."""
    from ..errors import UsageError

    report = compute(loaded, **kw)
    if report is None:
        raise UsageError(f"target `{loaded.blueprint.target.provider}` has no prices: `clusterforge cost` cannot "
                         "price it")
    return report


def _measured(results_dir: Path) -> tuple[list[Any], float | None, str]:
    """The results of ``results_dir`` and the mean MFU of its GPU AMP results (``None`` without one)."""
    from validate.report import load_results

    results = load_results(results_dir)
    from validate.suites.amp import amp_metrics

    mfus = [float(m["mfu"] or 0) for r in results if r.kind == "amp" and getattr(r.verdict, "value", r.verdict) != "invalid"
            for m in [amp_metrics(r)] if m.get("mfu") and m.get("device") != "cpu"]
    if not mfus:
        return results, None, ""
    return results, sum(mfus) / len(mfus), f"measured: mean MFU of {len(mfus)} AMP result(s) in {results_dir}"


def _refresh(loaded: Any) -> None:
    """``--refresh``: the target reads today's prices into the user's overlay (:meth:`Target.refresh_prices`)."""
    from ..console import ok, warn
    from ..targets import target_for

    found, missed, path = target_for(loaded.blueprint.target.provider).refresh_prices(loaded)
    for line in found:
        ok(line)
    for line in missed:
        warn(line)
    ok(f"refreshed prices written to {path}")


def _show(report: Any, hours: float | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..console import console

    # on premises the lines are the site's own: the only cloud region is the comparison's, said on its line
    where = f"{report.provider}, {report.region}" if report.region else "on premises"
    table = Table(title=f"cost of {report.blueprint} ({where})", show_lines=False)
    for col, just in (("line", "left"), ("count", "right"), ("unit price", "right"), ("$/h", "right"),
                      ("source, as of", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for i in report.items:
        if i.priced:
            price = _unit_price(i.unit_price_usd or 0.0, i.unit)
            per_h = f"${i.per_hour_usd:,.2f}"
            src = f"{i.source} ({i.as_of or 'your figure'})" + (" [yellow]stale[/yellow]" if i.stale else "")
        else:
            price, per_h, src = "—", "[red]unpriced[/red]", escape(i.note)
        table.add_row(escape(i.name), f"{i.count:,.6g}", price, per_h, src if not i.priced else escape(src).replace(
            "\\[yellow]stale\\[/yellow]", "[yellow]stale[/yellow]"))
    console.print(table)
    if report.no_charge:
        n = sum(c for c, _s in report.no_charge.values())
        console.print(f"[dim]{n} resources with no charge of their own ({len(report.no_charge)} types; --json lists "
                      "them with sources)[/dim]")
    total = f"[bold]total ${report.per_hour_usd:,.2f}/h, ${report.per_month_usd:,.0f}/month[/bold] " \
            f"({report.hours_per_month:g} h/month)"
    if hours is not None:
        total += f"; {hours:g} h: ${report.per_hour_usd * hours:,.2f}"
    console.print(total)
    if report.unpriced:
        console.print(f"[red]{len(report.unpriced)} unpriced line(s) are not in the total[/red] (their notes say why)")
    if report.stale:
        fix = ("set your own figures in the blueprint's `cost` section" if report.onprem is not None
               else "check them or run `clusterforge cost --refresh`")
        console.print(f"[yellow]{len(report.stale)} price(s) older than the catalog's stale_after_days[/yellow]: {fix}")
    o = report.onprem
    if o is not None:
        console.print(f"capital ${o.capital_usd:,.0f} written off over {o.amortization_years:g} years; "
                      f"at {o.utilization:.0%} utilisation: ${report.per_hour_usd:,.2f}/h owned")
        if o.facility_not_charged:
            console.print(f"facility and operations not charged for {', '.join(o.facility_not_charged)}: none "
                          "declared, and the catalog's figure is for a data-centre 8 x H100 node — set "
                          "`cost.facility_usd_per_node` to charge one", markup=False, highlight=False)
        if o.cloud_per_hour_usd is not None:
            eq = ", ".join(f"{e.count} x {e.instance_type} at ${e.unit_price_usd:,.2f}/h (as of {e.as_of}"
                           f"{', stale' if e.stale else ''})" for e in o.equivalents)
            console.print(f"cloud equivalent of the GPU groups, on demand in {o.compare_region}: {escape(eq)} = "
                          f"${o.cloud_per_hour_usd:,.2f}/h full time, ${o.cloud_per_hour_usd * o.utilization:,.2f}/h "
                          f"at {o.utilization:.0%} utilisation")
        be = f"{o.breakeven_utilization:.1%}" if o.breakeven_utilization is not None else "none"
        console.print(f"break-even utilisation: [bold]{be}[/bold] — {escape(o.breakeven_note)}")
    w = report.workload
    if w:
        if "hours" in w:
            console.print(f"training estimate: {w['tokens_b']:g}B tokens of a {w['parameters_b']:g}B model on "
                          f"{w['gpus']} x {w['gpu']}: {w['days']:.1f} days, ${w['cost_usd']:,.0f} "
                          f"(MFU {w['mfu']:.1%}, {escape(w['mfu_source'])})")
        else:
            console.print(f"training estimate: {escape(w['note'])}")
    for c in report.work:
        console.print(f"{escape(c['test'])}: ${c['value']:,.4g} {c['unit'][4:]} ({escape(c['measured'])}, "
                      f"node ${c['node_per_hour_usd']:,.2f}/h)")


def register(app: typer.Typer) -> None:
    """Add the ``cost`` verb to ``app``."""

    @app.command("cost")
    def cost_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        as_json: bool = typer.Option(False, "--json", help="Print the cost as JSON."),
        hours: float | None = typer.Option(None, "--hours", min=0, help="Also give the total for this many hours."),
        utilization: float = typer.Option(1.0, "--utilization", min=0.01, max=1.0,
                                          help="Share of hours the on-prem cluster does useful work (0.01-1)."),
        results: Path | None = typer.Option(None, "--results", help="A validation results folder: cost per "
                                            "unit of measured work and the measured MFU for the workload estimate."),
        refresh: bool = typer.Option(False, "--refresh", help="First read today's prices of the plan's instance "
                                     "types from the AWS Price List API (AWS credentials needed)."),
    ) -> None:
        """Price what `up` would create (cloud) or the hosts (on-prem), every line with its source and date."""
        from blueprints.findings import BlueprintInvalid

        from ..blueprint_io import findings_document, load_checked
        from ..cost import cost_basis, workload_estimate

        try:
            loaded = load_checked(blueprint, show_warnings=not as_json)
        except BlueprintInvalid as e:
            if as_json:
                print(json.dumps(findings_document(blueprint, False, e.findings), indent=2))
            raise
        if refresh:
            _refresh(loaded)
        report = _priced(loaded, utilization=utilization)
        measured: list[Any] = []
        mfu, how = None, ""
        if results is not None:
            from validate.costs import work_costs

            measured, mfu, how = _measured(results)
            report.work = work_costs(measured, cost_basis(report, loaded))
        report.workload = workload_estimate(report, loaded, mfu, how)
        if as_json:
            print(json.dumps(report.to_json(hours), indent=2))
            return
        _show(report, hours)


def _unit_price(usd: float, unit: str) -> str:
    """``$50,000`` (a one-off amount, unit ``USD``), ``$98.32/instance-hour``, ``$0.0800/GiB-month``: whole dollars
    from 1,000 up, cents from 1, four significant digits below (never an exponent)."""
    amount = f"{usd:,.0f}" if usd >= 1000 else f"{usd:,.2f}" if usd >= 1 else f"{usd:.4g}"
    return f"${amount}" if unit == "USD" else f"${amount}/{unit}"
