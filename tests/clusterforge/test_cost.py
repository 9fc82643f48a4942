"""`clusterforge cost` from the user's side: the JSON of every example, a Capacity Block, spot and reservation
variant, on-prem blueprints with the break-even, the plan's summary line, the Price List refresh path (a real
boto3 `pricing` client under botocore's Stubber answering with the GetProducts documents of
tests/fixtures/pricelist) and the cost of measured work in the validation report.

Every expected price is read from the price catalog file (blueprints/data/prices.yaml, each with its source
URL) or from a Price List answer; quantities come from the blueprint files and the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.cli import main
from tests.validate.test_report import AMP  # an AMP payload's output on one H100 (the report tests' input)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
PRICES = yaml.safe_load((REPO / "blueprints" / "data" / "prices.yaml").read_text())
HARDWARE = yaml.safe_load((REPO / "blueprints" / "data" / "hardware-catalog.yaml").read_text())
HPM = PRICES["meta"]["hours_per_month"]
AWS_EXAMPLES = ["aws-p5-efa-lustre", "aws-p5-capacity-block", "aws-eks-p4d", "aws-p5-slurm"]
ONPREM_EXAMPLES = ["onprem-dgx-h100-ib", "onprem-l40s-roce", "onprem-sandbox-kata", "local-workstation"]
CONTRACT = {"name", "type", "count", "unit_price_usd", "per_hour_usd", "source", "as_of"}


@pytest.fixture(autouse=True)
def _no_user_overlay(tmp_path, monkeypatch):
    """No refreshed prices of the machine running the tests."""
    monkeypatch.setenv("CLUSTERFORGE_PRICES", str(tmp_path / "no-overlay.yaml"))


def cost_json(capsys, path: Path, *args: str) -> dict[str, Any]:
    code = main(["cost", str(path), "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def catalog_price(section: str, *keys: str, region: str) -> float:
    entry: Any = PRICES[section]
    for k in keys:
        entry = entry[k]
    return float(entry["regions"][region])


def blueprint_yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def write_variant(tmp_path: Path, base: str, edit) -> Path:
    doc = blueprint_yaml(base)
    edit(doc)
    path = tmp_path / f"{base}-variant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check_totals(doc: dict[str, Any]) -> None:
    """The contract and the arithmetic: totals are the priced lines' sum, unpriced lines say why, no $0 line."""
    assert doc["currency"] == "USD"
    for item in doc["items"]:
        assert CONTRACT <= set(item), item
        if item["per_hour_usd"] is None:
            assert item["unit_price_usd"] is None and not item["priced"] and item["note"], item
        else:
            assert item["source"].startswith(("http", "blueprint:")), item
            # $0 only where the user declared it (a zero in the blueprint's cost section), never by default
            assert item["per_hour_usd"] > 0 or item["source"].startswith("blueprint:"), item
    priced = [i["per_hour_usd"] for i in doc["items"] if i["per_hour_usd"] is not None]
    assert doc["per_hour_usd"] == pytest.approx(sum(priced), rel=1e-6)
    assert doc["per_month_usd"] == pytest.approx(doc["per_hour_usd"] * HPM, rel=1e-6)
    assert doc["unpriced"] == sum(1 for i in doc["items"] if i["per_hour_usd"] is None)


def monthly_factor(unit: str) -> float:
    return 1 / HPM if unit.endswith("-month") else 1.0


@pytest.mark.parametrize("name", AWS_EXAMPLES)
def test_every_aws_example_prices_its_plan(capsys, name):
    bp = blueprint_yaml(name)
    region = bp["target"]["region"]
    doc = cost_json(capsys, EXAMPLES / f"{name}.yaml", "--hours", "24")
    check_totals(doc)
    assert doc["total_usd"] == pytest.approx(doc["per_hour_usd"] * 24, rel=1e-6)
    items = doc["items"]
    # every instance the blueprint declares is on a line, priced or not
    instances = [i for i in items if i["type"] == "ec2-instance"]
    assert sum(i["count"] for i in instances) == sum(g["count"] for g in bp["node_groups"])
    declared = bp["target"].get("capacity", "on-demand")  # shorthand or mapping
    declared = declared["type"] if isinstance(declared, dict) else declared
    for g in bp["node_groups"]:
        lines = [i for i in instances if i["group"] == g["name"]]
        assert len(lines) == 1 and lines[0]["count"] == g["count"]
        line = lines[0]
        in_block = declared in ("capacity-block", "reservation") and g.get("role", "compute") == "compute"
        capacity = declared if in_block or declared == "spot" else "on-demand"
        option = {"reservation": "on-demand"}.get(capacity, capacity)
        entry = PRICES["ec2"].get(g["instance_type"], {}).get(option, {}).get("regions", {})
        if region in entry:
            assert line["unit_price_usd"] == entry[region]
            assert line["per_hour_usd"] == pytest.approx(g["count"] * entry[region])
        else:  # not catalogued for this region: said so, never $0
            assert line["per_hour_usd"] is None and g["instance_type"] in line["note"]
    # the other priced lines against the catalog
    for i in items:
        if i["per_hour_usd"] is None:
            continue
        expected = {"ebs-gp3": lambda: catalog_price("ebs", "gp3", "gib_month", region=region),
                    "nat-gateway": lambda: catalog_price("nat_gateway", "hour", region=region),
                    "public-ipv4": lambda: catalog_price("public_ipv4", "hour", region=region),
                    "eks-cluster": lambda: catalog_price("eks_cluster", "hour", region=region),
                    **{t: (lambda t=t: catalog_price("per_resource", t, "month", region=region))
                       for t in PRICES["per_resource"]}}.get(i["type"])
        if expected is not None:
            assert i["unit_price_usd"] == expected(), i
        assert i["per_hour_usd"] == pytest.approx(i["count"] * i["unit_price_usd"] * monthly_factor(i["unit"]), rel=1e-6)
    # FSx: one line per file system, priced from its deployment type, storage type and tier when catalogued
    for s in bp.get("storage", []):
        fsx = s.get("fsx")
        if not fsx:
            continue
        line = next(i for i in items if i["type"] == "fsx-lustre" and s["name"] in i["name"])
        assert line["count"] == fsx["storage_capacity_gib"]
        key = f"{fsx['deployment_type']}/SSD/{fsx['throughput_per_tib_mbps']}"
        entry = PRICES["fsx_lustre"]["storage_gb_month"].get(key, {}).get("regions", {})
        assert (line["unit_price_usd"] == entry[region]) if region in entry else line["per_hour_usd"] is None
    # the NAT gateway's data is an unpriced line until the blueprint states a volume
    assert any(i["type"] == "nat-gateway-data" and i["per_hour_usd"] is None for i in items)


def test_capacity_block_is_priced_at_its_own_rate(capsys):
    doc = cost_json(capsys, EXAMPLES / "aws-p5-capacity-block.yaml")
    line = next(i for i in doc["items"] if i["type"] == "ec2-instance")
    entry = PRICES["ec2"]["p5.48xlarge"]["capacity-block"]
    assert line["unit_price_usd"] == entry["regions"]["us-east-1"] != PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]
    assert line["source"] == entry["source"] and line["as_of"] == entry["as_of"]
    assert "up front" in line["note"]
    # its as_of is older than the catalog's stale_after_days: flagged, counted
    assert line["stale"] and doc["stale"] >= 1


def test_spot_variant(capsys, tmp_path):
    def spot(doc, itype):
        doc["target"]["capacity"] = {"type": "spot"}
        doc["node_groups"][0]["instance_type"] = itype
    priced = write_variant(tmp_path, "aws-p5-efa-lustre", lambda d: spot(d, "p5en.48xlarge"))
    doc = cost_json(capsys, priced)
    line = next(i for i in doc["items"] if i["type"] == "ec2-instance")
    assert line["unit_price_usd"] == PRICES["ec2"]["p5en.48xlarge"]["spot"]["regions"]["us-east-1"]
    assert "indicative" in line["note"]
    check_totals(doc)
    # p5.48xlarge has no catalogued spot price: an unpriced line, left out of the total
    unpriced = write_variant(tmp_path, "aws-p5-efa-lustre", lambda d: spot(d, "p5.48xlarge"))
    doc = cost_json(capsys, unpriced)
    line = next(i for i in doc["items"] if i["type"] == "ec2-instance")
    assert line["per_hour_usd"] is None and "no spot price for p5.48xlarge in us-east-1" in line["note"]
    check_totals(doc)
    assert doc["per_hour_usd"] < PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]


def test_reservation_bills_the_on_demand_rate(capsys, tmp_path):
    def odcr(doc):
        doc["target"]["capacity"] = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}
        doc["network"]["placement"] = "none"
    doc = cost_json(capsys, write_variant(tmp_path, "aws-p5-efa-lustre", odcr))
    line = next(i for i in doc["items"] if i["type"] == "ec2-instance")
    assert line["name"].startswith("p5.48xlarge reservation")
    assert line["unit_price_usd"] == PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]
    assert "whether used or not" in line["note"]


def test_stated_nat_data_volume_is_priced(capsys, tmp_path):
    doc = cost_json(capsys, write_variant(tmp_path, "aws-p5-efa-lustre",
                                          lambda d: d.update(cost={"nat_data_gb_per_month": 500})))
    line = next(i for i in doc["items"] if i["type"] == "nat-gateway-data")
    assert line["count"] == 500 and line["unit_price_usd"] == catalog_price("nat_gateway", "gb_processed", region="us-east-1")
    assert line["per_hour_usd"] == pytest.approx(500 * line["unit_price_usd"] / HPM)


def onprem(PRICES_key: str) -> float:
    return float(PRICES["onprem"][PRICES_key]["value"])


def test_onprem_dgx_capital_power_and_breakeven(capsys):
    bp = blueprint_yaml("onprem-dgx-h100-ib")
    doc = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    check_totals(doc)
    op = PRICES["onprem"]
    dgx = next(g for g in bp["node_groups"] if g["name"] == "dgx")
    n = len(dgx["hosts"])
    nics = sum(len(g.get("hardware", {}).get("nics", [])) * len(g["hosts"]) for g in bp["node_groups"])
    port = op["switch_port_usd"]["infiniband/NDR"]["value"] + op["cabling_usd_per_port"]["infiniband/NDR"]["value"]
    server = op["servers"]["system/dgx-h100"]["value"]
    assert doc["capital_usd"] == pytest.approx(n * server + nics * port)  # mgmt server and storage: unpriced lines
    assert {i["name"] for i in doc["items"] if i["per_hour_usd"] is None} == {
        "servers (mgmt)", "power (mgmt)", "shared storage (lustre)"}
    years = onprem("amortization_years")
    servers = next(i for i in doc["items"] if i["name"] == "servers (dgx)")
    assert servers["per_hour_usd"] == pytest.approx(n * server / (years * 8760))
    power = next(i for i in doc["items"] if i["type"] == "onprem-power" and i["group"] == "dgx")
    kw = op["node_power_kw"]["system/dgx-h100"]["value"]
    assert power["unit_price_usd"] == pytest.approx(kw * onprem("pue") * onprem("power_usd_per_kwh"))
    # the cloud equivalent: the same GPU and count, catalogued on demand
    eq = doc["cloud_equivalent"]["instances"]
    p5 = PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]
    assert [(e["instance_type"], e["count"], e["unit_price_usd"]) for e in eq] == [("p5.48xlarge", n, p5)]
    acc = HARDWARE["aws_instance_types"]["p5.48xlarge"]["accelerators"]
    assert f"{acc['type']}:{acc['count']}" == dgx["hardware"]["gpu"]  # the same GPU and count per node
    # break-even: owned cost of the GPU group at u* equals renting the same nodes for the used hours
    fixed = sum(i["per_hour_usd"] for i in doc["items"] if i["group"] == "dgx" and i["type"] != "onprem-power")
    power_full = n * power["unit_price_usd"]
    u = doc["breakeven_utilization"]
    assert 0 < u < 1
    assert fixed + power_full * u == pytest.approx(n * p5 * u, rel=1e-3)


def test_onprem_utilization_scales_power_only(capsys):
    full = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    half = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml", "--utilization", "0.5")
    by = {i["name"].split(",")[0]: i for i in full["items"]}
    for i in half["items"]:
        j = by[i["name"].split(",")[0]]
        if i["type"] == "onprem-power" and i["per_hour_usd"] is not None:
            assert i["per_hour_usd"] == pytest.approx(j["per_hour_usd"] / 2)
        else:
            assert i["per_hour_usd"] == j["per_hour_usd"]
    assert half["breakeven_utilization"] == full["breakeven_utilization"]
    assert half["cloud_equivalent"]["per_hour_at_utilization_usd"] == pytest.approx(
        full["cloud_equivalent"]["per_hour_usd"] / 2)


def test_onprem_inputs_from_the_blueprint(capsys, tmp_path):
    inputs = {"server_price_usd": {"ctl": 12000, "login": 9000, "l40s": 95000},
              "node_power_kw": {"ctl": 0.6, "login": 0.5, "l40s": 4.2},
              "switch_port_usd": 700, "cabling_usd_per_port": 250, "storage_capital_usd": 40000,
              "power_usd_per_kwh": 0.21, "pue": 1.5, "colo_usd_per_kw_month": 0, "amortization_years": 5,
              "facility_usd_per_node": 0, "support_usd_per_node_year": 1500}
    path = write_variant(tmp_path, "onprem-l40s-roce", lambda d: d.update(cost=inputs))
    bp = yaml.safe_load(path.read_text())
    doc = cost_json(capsys, path)
    check_totals(doc)
    assert doc["unpriced"] == 0
    hosts = {g["name"]: len(g["hosts"]) for g in bp["node_groups"]}
    nics = sum(len(g.get("hardware", {}).get("nics", [])) * len(g["hosts"]) for g in bp["node_groups"])
    capital = (sum(hosts[g] * p for g, p in inputs["server_price_usd"].items())
               + nics * (inputs["switch_port_usd"] + inputs["cabling_usd_per_port"]) + inputs["storage_capital_usd"])
    assert doc["capital_usd"] == pytest.approx(capital)
    power = sum(hosts[g] * kw for g, kw in inputs["node_power_kw"].items()) * inputs["pue"] * inputs["power_usd_per_kwh"]
    support = sum(hosts.values()) * inputs["support_usd_per_node_year"] / 8760
    assert doc["per_hour_usd"] == pytest.approx(capital / (inputs["amortization_years"] * 8760) + power + support)
    assert {i["source"] for i in doc["items"] if i["type"] == "onprem-server"} == {
        f"blueprint: cost.server_price_usd.{g}" for g in hosts}
    # no catalogued cloud price for 8 x L40S: said, no break-even invented
    assert doc["breakeven_utilization"] is None and "l40s" in doc["breakeven_note"]


@pytest.mark.parametrize("name", ONPREM_EXAMPLES)
def test_every_onprem_example_answers(capsys, name):
    doc = cost_json(capsys, EXAMPLES / f"{name}.yaml")
    check_totals(doc)
    assert {"capital_usd", "breakeven_utilization", "cloud_equivalent"} <= set(doc)
    assert 0 <= (doc["breakeven_utilization"] or 0) <= 1
    assert doc["breakeven_utilization"] is not None or doc["breakeven_note"]


def test_plan_prints_the_cost_summary(capsys):
    path = EXAMPLES / "aws-p5-capacity-block.yaml"
    doc = cost_json(capsys, path)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("cost: "))
    assert f"${doc['per_hour_usd']:,.2f}/h" in line and f"${doc['per_month_usd']:,.0f}/month" in line
    assert f"{doc['unpriced']} unpriced" in line


def test_workload_estimate_assumed_and_measured_mfu(capsys, tmp_path):
    from validate.judge import judge_text
    from validate.report import write_reports

    def workload(d):
        d["workload"] = {"parameters_b": 8, "precision": "bf16"}
        d["cost"] = {"training_tokens_b": 1000}
    path = write_variant(tmp_path, "aws-p5-efa-lustre", workload)
    doc = cost_json(capsys, path)
    w = doc["workload"]
    peak = HARDWARE["gpus"]["h100-sxm"]["bf16_dense_tflops"]
    gpus = 2 * HARDWARE["aws_instance_types"]["p5.48xlarge"]["accelerators"]["count"]
    assert w["peak_tflops_per_gpu"] == peak and w["gpus"] == gpus and w["mfu_source"].startswith("assumed")
    hours = 6 * 8e9 * 1000e9 / (gpus * peak * 1e12 * w["mfu"]) / 3600
    assert w["hours"] == pytest.approx(hours, rel=1e-3)
    assert w["cost_usd"] == pytest.approx(hours * doc["per_hour_usd"], rel=1e-3)
    # a validation result's measured MFU replaces the assumption
    amp = AMP
    results = judge_text(json.dumps(amp), _ctx("p5.48xlarge"), source="amp-gpu.json", kind="amp")
    write_reports(results, tmp_path / "run", title="t", blueprint=None, raw_dir=None)
    doc = cost_json(capsys, path, "--results", str(tmp_path / "run"))
    assert doc["workload"]["mfu"] == pytest.approx(results[0].metrics["mfu"], abs=1e-4)
    assert doc["workload"]["mfu_source"].startswith("measured")
    assert [c["metric"] for c in doc["work"]] == ["usd_per_million_tokens"]


def test_workload_estimate_from_a_catalog_model(capsys, tmp_path):
    """`workload.model` alone: the shape catalog's parameters (Llama 3.1 8B: 8.03B, Llama 3 herd paper) and,
    for MoE, its active parameters (Mixtral 8x7B: 12.9B of 46.7B, https://arxiv.org/abs/2401.04088)."""
    for model, extra, want in (("llama-3.1-8b", {}, 8.03), ("mixtral-8x7b", {"architecture": "moe"}, 12.9)):
        def workload(d, model=model, extra=extra):
            d["workload"] = {"model": model, **extra}
            d["cost"] = {"training_tokens_b": 1000}
            d.setdefault("validation", {}).setdefault("nccl", {})["collectives"] = ["all_reduce", "alltoall"]
        doc = cost_json(capsys, write_variant(tmp_path, "aws-p5-efa-lustre", workload))
        assert doc["workload"]["parameters_b"] == pytest.approx(want)


def _ctx(instance_type: str):
    from validate.expectations import context_from_flags

    return context_from_flags(instance_type=instance_type)


def test_report_shows_cost_of_measured_work(tmp_path, fixtures_dir):
    from blueprints import load_blueprint
    from clusterforge.commands.cost import compute
    from clusterforge.cost import cost_basis
    from validate.judge import judge_file, judge_text
    from validate.report import write_reports

    loaded = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml")
    basis = cost_basis(compute(loaded), loaded)
    # the node price: the instance and its root volume (size from the plan's launch template), from the catalog
    golden = json.loads((REPO / "tests" / "golden" / "stacks" / "aws-p5-efa-lustre.json").read_text())
    lt = next(r for r in golden["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate")
    root_gib = lt["inputs"]["blockDeviceMappings"][0]["ebs"]["volumeSize"]
    node = (PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]
            + root_gib * catalog_price("ebs", "gp3", "gib_month", region="us-east-1") / HPM)
    assert basis["groups"]["gpu"]["node_per_hour_usd"] == pytest.approx(node, rel=1e-6)
    gpus = HARDWARE["aws_instance_types"]["p5.48xlarge"]["accelerators"]["count"]

    amp = AMP
    results = judge_text(json.dumps(amp), _ctx("p5.48xlarge"), source="amp-gpu.json", kind="amp")
    results += judge_file(fixtures_dir / "fio" / "fio-01.json", _ctx("p5.48xlarge"))
    paths = write_reports(results, tmp_path / "out", title="t", blueprint="p5-train", raw_dir=None, cost=basis)
    doc = json.loads(paths["json"].read_text())
    by = {c["metric"]: c for c in doc["work_costs"]}
    per_gpu = amp["tokens_per_s"] / amp["gpu_count"]
    assert by["usd_per_million_tokens"]["value"] == pytest.approx((node / gpus) / (per_gpu * 3600) * 1e6, rel=1e-5)
    bw = next(r for r in results if r.kind == "fio").metrics["read_bw_bytes_per_s"]
    assert by["usd_per_tb_read"]["value"] == pytest.approx(node / (bw * 3600 / 1e12), rel=1e-5)
    html = paths["html"].read_text()
    assert "Cost of measured work" in html and "per 1M training tokens" in html and "per TB read" in html
    assert "## Cost of measured work" in paths["markdown"].read_text()
    # `clusterforge report DIR` keeps the cost basis it finds in report.json
    assert main(["report", str(tmp_path / "out")]) == 0
    again = json.loads(paths["json"].read_text())
    assert again["cost"] == doc["cost"] and again["work_costs"] == doc["work_costs"]


def test_report_cost_basis_from_a_results_folder_is_untrusted(tmp_path):
    from validate.costs import work_costs
    from validate.judge import judge_text

    amp = AMP
    results = judge_text(json.dumps(amp), _ctx("p5.48xlarge"), source="amp-gpu.json", kind="amp")
    for bad in ({"groups": {"gpu": {"node_per_hour_usd": "1e9", "gpus_per_node": 8}}},
                {"groups": {"gpu": {"node_per_hour_usd": float("nan"), "gpus_per_node": 8}}},
                {"groups": ["gpu"]}, {"groups": {"gpu": {"node_per_hour_usd": True, "gpus_per_node": 8}}}, "x"):
        assert work_costs(results, bad) == []  # type: ignore[arg-type]


# ---- the refresh path: a real boto3 pricing client, answers from tests/fixtures/pricelist -------------------

def _stubbed(responses: list[tuple[str, dict[str, Any]]]):
    boto3 = pytest.importorskip("boto3")
    from botocore.stub import Stubber

    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    stub = Stubber(client)
    for name, expected in responses:
        answer = json.loads((REPO / "tests" / "fixtures" / "pricelist" / name).read_text())
        stub.add_response("get_products", answer, expected)
    return client, stub


def _ec2_query(itype: str, market: str) -> dict[str, Any]:
    f = {"instanceType": itype, "regionCode": "us-east-1", "operatingSystem": "Linux", "tenancy": "Shared",
         "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": market}
    return {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1",
            "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in f.items()]}


GP3_QUERY = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "Filters": [
    {"Type": "TERM_MATCH", "Field": k, "Value": v}
    for k, v in {"productFamily": "Storage", "volumeApiName": "gp3", "regionCode": "us-east-1"}.items()]}


def _fixture_price(name: str) -> tuple[float, str]:
    doc = json.loads(json.loads((REPO / "tests" / "fixtures" / "pricelist" / name).read_text())["PriceList"][0])
    term = next(iter(doc["terms"]["OnDemand"].values()))
    dim = next(iter(term["priceDimensions"].values()))
    return float(dim["pricePerUnit"]["USD"]), term["effectiveDate"][:10]


def test_refresh_overlays_price_list_answers(capsys, tmp_path, monkeypatch):
    from clusterforge.pricelist import API_SOURCE, refresh, write_overlay

    client, stub = _stubbed([("get-products-p5-on-demand.json", _ec2_query("p5.48xlarge", "OnDemand")),
                             ("get-products-gp3.json", GP3_QUERY)])
    with stub:
        res = refresh(client, "us-east-1", [("p5.48xlarge", "on-demand"), ("p5.48xlarge", "spot")])
        stub.assert_no_pending_responses()
    assert any("spot" in m and "not in the Price List" in m for m in res.missed)
    overlay = write_overlay(tmp_path / "prices.yaml", res.overlay)
    monkeypatch.setenv("CLUSTERFORGE_PRICES", str(overlay))
    doc = cost_json(capsys, EXAMPLES / "aws-p5-efa-lustre.yaml")
    price, effective = _fixture_price("get-products-p5-on-demand.json")
    line = next(i for i in doc["items"] if i["type"] == "ec2-instance")
    assert line["unit_price_usd"] == price and line["source"] == API_SOURCE and line["as_of"] == effective
    assert price != PRICES["ec2"]["p5.48xlarge"]["on-demand"]["regions"]["us-east-1"]
    gp3_price, _ = _fixture_price("get-products-gp3.json")
    root = next(i for i in doc["items"] if i["type"] == "ebs-gp3")
    assert root["unit_price_usd"] == gp3_price and root["source"] == API_SOURCE
    # prices the overlay does not name stay the catalog's (the NAT gateway)
    nat = next(i for i in doc["items"] if i["type"] == "nat-gateway")
    assert nat["source"] == PRICES["nat_gateway"]["hour"]["source"]
    check_totals(doc)


def test_refresh_refuses_an_ambiguous_answer():
    from clusterforge.pricelist import refresh

    client, stub = _stubbed([("get-products-p5-two-prices.json", _ec2_query("p5.48xlarge", "OnDemand"))])
    with stub:
        res = refresh(client, "us-east-1", [("p5.48xlarge", "reservation")], gp3=False)
    assert res.overlay == {} and res.found == []
    assert res.missed and "2 different prices" in res.missed[0]


def test_refresh_without_credentials_is_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("boto3")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["cost", str(EXAMPLES / "aws-p5-efa-lustre.yaml"), "--refresh"])
    err = capsys.readouterr().err
    assert code == 2 and "Price List API could not be read" in err and "Traceback" not in err
    assert not (tmp_path / "no-overlay.yaml").exists()


# ---- the cost is the stack's inventory priced: no Pulumi run -----------------------------------------------------

def test_cost_runs_no_pulumi_program(capsys, monkeypatch):
    """`cost` prices the stack's inventory (tests/stacks/test_inventory.py holds it equal to the plan): the offline
    plan under Pulumi's mock engine is never run, yet every instance of the blueprint is on a line."""
    import clusterforge.plan

    def no_plan(*_a, **_k):
        raise AssertionError("cost ran the Pulumi program")
    monkeypatch.setattr(clusterforge.plan, "run_program", no_plan)
    bp = blueprint_yaml("aws-p5-slurm")
    doc = cost_json(capsys, EXAMPLES / "aws-p5-slurm.yaml")
    check_totals(doc)
    lines = {i["group"]: i for i in doc["items"] if i["type"] == "ec2-instance"}
    assert {g["name"]: g["count"] for g in bp["node_groups"]} == {g: i["count"] for g, i in lines.items()}


def test_services_the_slurm_stack_creates_are_priced_or_free_with_a_source(capsys):
    """The Slurm stack's zone, secret and KMS-free S3 bundle bucket: the zone and the secret at the catalog's monthly
    rate, the records, the state volume's attachment and the bucket with its settings as no-charge types with their
    source (not unpriced lines), the bundle objects as usage-based lines that say so."""
    doc = cost_json(capsys, EXAMPLES / "aws-p5-slurm.yaml")
    free = {e["type"]: e for e in doc["no_charge"]}
    catalogued = {t: e["source"] for e in PRICES["no_charge"] for t in e["types"]}
    for t in ("aws:ec2/volumeAttachment:VolumeAttachment", "aws:route53/record:Record", "aws:s3/bucket:Bucket",
              "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"):
        assert free[t]["source"] == catalogued[t] and catalogued[t].startswith("https://"), t
        assert not [i for i in doc["items"] if i["type"] == t], f"{t} is a line, not a no-charge type"
    bp = blueprint_yaml("aws-p5-slurm")
    nodes = sum(g["count"] for g in bp["node_groups"])
    assert free["aws:route53/record:Record"]["count"] == nodes  # one A record per instance
    for t in ("aws:route53/zone:Zone", "aws:secretsmanager/secret:Secret"):
        (line,) = [i for i in doc["items"] if i["type"] == t]
        entry = PRICES["per_resource"][t]["month"]
        assert line["unit_price_usd"] == entry["regions"][bp["target"]["region"]]
        assert (line["source"], line["as_of"]) == (entry["source"], entry["as_of"])
        assert line["per_hour_usd"] == pytest.approx(line["unit_price_usd"] / HPM)
    (objects,) = [i for i in doc["items"] if i["type"] == "aws:s3/bucketObjectv2:BucketObjectv2"]
    assert objects["per_hour_usd"] is None and objects["note"].startswith("usage-based")


def test_eks_kms_key_is_priced_from_the_catalog(capsys):
    doc = cost_json(capsys, EXAMPLES / "aws-eks-p4d.yaml")
    (key,) = [i for i in doc["items"] if i["type"] == "aws:kms/key:Key"]
    entry = PRICES["per_resource"]["aws:kms/key:Key"]["month"]
    assert key["unit_price_usd"] == entry["regions"][blueprint_yaml("aws-eks-p4d")["target"]["region"]]
    assert key["source"] == entry["source"]


def _prices_in(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every catalogued number of the price catalog: ``(path, entry)`` of each mapping with ``regions`` or ``value``."""
    if not isinstance(node, dict):
        return []
    if "regions" in node or "value" in node:
        return [(path, node)]
    return [hit for k, v in node.items() for hit in _prices_in(v, f"{path}.{k}" if path else str(k))]


def test_every_catalogued_price_has_a_source_and_a_date():
    import datetime as dt

    found = _prices_in({k: v for k, v in PRICES.items() if k != "meta"})
    assert len(found) > 20
    for path, entry in found:
        assert str(entry.get("source", "")).startswith("https://"), path
        dt.date.fromisoformat(str(entry["as_of"]))  # raises for a missing or unreadable date
    for entry in PRICES["no_charge"] + PRICES["usage_based"]:
        assert entry["source"].startswith("https://"), entry


def test_unsourced_options_are_unpriced_lines_never_zero(capsys):
    """The catalog has no source for FSx PERSISTENT_2 at 250 MB/s/TiB in us-east-1 (the example's tier) nor for
    FSx backups: both are unpriced lines that say so, and the total leaves them out."""
    key = "PERSISTENT_2/SSD/250"
    assert "us-east-1" not in PRICES["fsx_lustre"]["storage_gb_month"].get(key, {}).get("regions", {})
    doc = cost_json(capsys, EXAMPLES / "aws-p5-efa-lustre.yaml")
    fsx = next(i for i in doc["items"] if i["type"] == "fsx-lustre")
    assert fsx["per_hour_usd"] is None and key in fsx["note"] and "no dated public source" in fsx["note"]
    backups = next(i for i in doc["items"] if i["type"] == "fsx-lustre-backup")
    assert backups["per_hour_usd"] is None and "not estimated" in backups["note"]
    check_totals(doc)


# ---- on premises: staleness, the header, the break-even sentence, the facility ----------------------------------

def _stale(as_of: str) -> bool:
    import datetime as dt

    return (dt.date.today() - dt.date.fromisoformat(as_of)).days > PRICES["meta"]["stale_after_days"]


def test_onprem_defaults_are_judged_stale_like_cloud_prices(capsys, tmp_path):
    doc = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    catalogued = [i for i in doc["items"] if i["priced"] and i["source"].startswith("https://")]
    assert catalogued
    for i in catalogued:
        assert i["stale"] == _stale(i["as_of"]), i
    server = next(i for i in doc["items"] if i["name"] == "servers (dgx)")
    assert server["as_of"] == PRICES["onprem"]["servers"]["system/dgx-h100"]["as_of"]
    assert doc["stale"] == sum(1 for i in doc["items"] if i["stale"])
    (eq,) = doc["cloud_equivalent"]["instances"]
    assert eq["stale"] == _stale(eq["as_of"])
    # the blueprint's own figures are the user's: never stale
    mine = cost_json(capsys, write_variant(tmp_path, "onprem-dgx-h100-ib", lambda d: d.update(cost={
        "server_price_usd": {"dgx": 250000}, "power_usd_per_kwh": 0.2})))
    stated = [i for i in mine["items"] if i["source"].startswith("blueprint:")]
    assert stated and not any(i["stale"] for i in stated)


def test_onprem_text_names_no_cloud_region_but_the_comparison(capsys):
    code = main(["cost", str(EXAMPLES / "onprem-dgx-h100-ib.yaml")])
    out = capsys.readouterr().out
    assert code == 0
    region = blueprint_yaml("onprem-dgx-h100-ib").get("cost", {}).get("compare_region", "us-east-1")
    title = next(ln for ln in out.splitlines() if ln.strip().startswith("cost of "))
    assert title.strip() == "cost of dgx-h100 (on premises)"
    with_region = [ln for ln in out.splitlines() if region in ln]
    assert with_region and all(ln.startswith(("cloud equivalent", "break-even")) for ln in with_region), with_region
    doc = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    assert doc["region"] is None and doc["compare_region"] == region


def test_breakeven_sentence_says_what_against_which_instance_at_which_price(capsys):
    doc = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    (eq,) = doc["cloud_equivalent"]["instances"]
    price = PRICES["ec2"][eq["instance_type"]]["on-demand"]
    assert eq["unit_price_usd"] == price["regions"][eq["region"]] and eq["as_of"] == price["as_of"]
    main(["cost", str(EXAMPLES / "onprem-dgx-h100-ib.yaml")])
    out = capsys.readouterr().out
    line = " ".join(ln.strip() for ln in out[out.index("break-even utilisation:"):].splitlines())
    u = doc["breakeven_utilization"]
    assert line.startswith(f"break-even utilisation: {u:.1%} — ")
    for part in (f"{eq['count']} x {eq['instance_type']} on demand in {eq['region']}",
                 f"${eq['unit_price_usd']:,.2f}/h each (as of {eq['as_of']}", f"more than {u:.1%} of the hours"):
        assert part in line, (part, line)
    assert doc["breakeven_note"] in line


def test_a_workstation_is_charged_no_facility_unless_declared(capsys, tmp_path):
    """The catalog's facility figure is for a data-centre 8 x H100 node (its source's model): the workstation gets
    no facility line, the report names the group; declared, it is charged at the declared amount."""
    facility = PRICES["onprem"]["facility_usd_per_node"]
    assert list(facility) == ["gpu/h100-sxm/8"]
    doc = cost_json(capsys, EXAMPLES / "local-workstation.yaml")
    assert not [i for i in doc["items"] if i["type"] == "onprem-facility"]
    assert doc["facility_not_charged"] == ["local"]
    main(["cost", str(EXAMPLES / "local-workstation.yaml")])
    assert "facility and operations not charged for local" in capsys.readouterr().out
    declared = cost_json(capsys, write_variant(tmp_path, "local-workstation",
                                               lambda d: d.update(cost={"facility_usd_per_node": 1200})))
    (line,) = [i for i in declared["items"] if i["type"] == "onprem-facility"]
    years = PRICES["onprem"]["amortization_years"]["value"]
    assert line["unit_price_usd"] == 1200 and line["per_hour_usd"] == pytest.approx(1200 / (years * 8760))
    assert declared["facility_not_charged"] == []
    # the DGX group is charged the catalog's figure; its management server is not
    dgx = cost_json(capsys, EXAMPLES / "onprem-dgx-h100-ib.yaml")
    (fac,) = [i for i in dgx["items"] if i["type"] == "onprem-facility"]
    assert fac["group"] == "dgx" and fac["unit_price_usd"] == facility["gpu/h100-sxm/8"]["value"]
    assert dgx["facility_not_charged"] == ["mgmt"]
