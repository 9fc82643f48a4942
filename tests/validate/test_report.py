"""Reports: report.json round-trips, JUnit XML a CI system reads, Markdown, and an HTML page with
embedded plots that escapes what it shows; results.jsonl as the runner appends it."""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET

import pytest

from validate.expectations import context_from_flags
from validate.judge import JudgeResult, judge_file, judge_text
from validate.report import NoResults, load_results, load_results_damaged, write_reports

AMP = {
    "kind": "amp", "version": 1, "device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
    "precision": "bf16", "compile": True,
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 50304, "parameters": 1313873920},
    "batch_size": 8, "steps": 30, "tokens_per_s": 63900.0, "step_time_s": 0.2564, "model_tflops": 580.0,
    "peak_tflops": 989.0, "mfu": 0.586, "peak_memory_bytes": 54 * 10**9, "loss_start": 10.9, "loss_end": 7.2,
    "losses": [10.9, 9.1, 8.0, 7.2],
    "fp32_baseline": {"tokens_per_s": 20000.0, "step_time_s": 0.82, "loss_start": 10.9, "loss_end": 7.3},
    "error": None,
}


@pytest.fixture(scope="module")
def results(fixtures_dir) -> list[JudgeResult]:
    nt = fixtures_dir / "nccl-tests"
    out = judge_file(nt / "nccl-01.txt", context_from_flags(instance_type="p4de.24xlarge", nodes=2))
    out += judge_file(nt / "nccl-11.txt", context_from_flags())
    out += judge_file(nt / "nccl-13.txt", context_from_flags())
    out += judge_file(fixtures_dir / "fio" / "fio-02.json", context_from_flags())
    out += judge_file(fixtures_dir / "fio" / "fio-04.txt", context_from_flags())
    out += judge_text(json.dumps(AMP), context_from_flags(), source="amp<script>.json", kind="amp")
    return out


def test_write_reports_all_formats(results, tmp_path, fixtures_dir):
    paths = write_reports(results, tmp_path / "out", title="Validation <of> p4de", blueprint="p4de-train",
                          raw_dir=fixtures_dir)
    assert set(paths) == {"json", "markdown", "junit", "html"} and all(p.is_file() for p in paths.values())

    doc = json.loads(paths["json"].read_text())
    assert doc["verdict"] == "fail" and doc["blueprint"] == "p4de-train"
    assert doc["counts"] == {"pass": 3, "warn": 0, "invalid": 1, "fail": 2}
    assert [r["verdict"] for r in doc["results"]] == [r.verdict for r in results]
    assert [JudgeResult.from_json(r) for r in doc["results"]] == results

    junit = ET.parse(paths["junit"]).getroot()
    assert junit.tag == "testsuites" and junit.get("tests") == "6" and junit.get("failures") == "2"
    assert junit.get("errors") == "1"
    suites = {s.get("name"): s for s in junit.findall("testsuite")}
    assert set(suites) == {"clusterforge.validate.nccl", "clusterforge.validate.fio", "clusterforge.validate.amp"}
    nccl = suites["clusterforge.validate.nccl"]
    cases = nccl.findall("testcase")
    assert [c.get("name") for c in cases] == ["nccl-01.txt: all_reduce", "nccl-11.txt: all_reduce", "nccl-13.txt: alltoall"]
    assert cases[0].find("failure") is None and cases[0].find("error") is None
    assert "wrong results" in cases[1].find("failure").get("message")
    assert "one rank" in cases[2].find("error").get("message")

    md = paths["markdown"].read_text()
    assert md.startswith("# Validation \\<of\\> p4de") and "Overall verdict: **FAIL**" in md
    assert "| ✅ pass | nccl-01.txt: all_reduce | nccl |" in md
    assert "[nccl-01.txt](" in md  # linked raw output

    html = paths["html"].read_text()
    assert "<script>" not in html and "amp&lt;script&gt;.json" in html
    assert "Validation &lt;of&gt; p4de" in html
    pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    # busbw plots for the two nccl runs with a curve, the fio bars, the AMP bars/loss
    assert len(pngs) == 4
    assert all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_load_results_from_jsonl_and_report(results, tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    lines = [json.dumps({**r.to_json(), "test_id": f"t{i}"}) for i, r in enumerate(results)]
    (d / "results.jsonl").write_text("\n".join(lines) + "\n" + lines[0][:40])  # interrupted while appending
    assert load_results(d) == results
    assert load_results(d / "results.jsonl") == results
    (d / "results.jsonl").write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    # a damaged line is skipped and named (issue 34), never a reason to stop
    got, damaged = load_results_damaged(d)
    assert got == results[:2] and [x.line for x in damaged] == [2]
    (d / "results.jsonl").write_text("not json\n")
    with pytest.raises(NoResults, match=r"results.jsonl:1"):
        load_results(d)
    (d / "results.jsonl").unlink()
    write_reports(results[:2], d, title="t", blueprint=None, raw_dir=None)
    assert load_results(d) == results[:2]


def test_load_results_refuses_what_is_not_results(tmp_path):
    with pytest.raises(NoResults, match="no such file"):
        load_results(tmp_path / "nope")
    with pytest.raises(NoResults, match="no results.jsonl or report.json"):
        load_results(tmp_path)
    (tmp_path / "x.yaml").write_text("a: 1\n")
    with pytest.raises(NoResults, match="not a results folder"):
        load_results(tmp_path / "x.yaml")
    (tmp_path / "report.json").write_text('{"title": "x"}')
    with pytest.raises(NoResults, match="not a clusterforge report"):
        load_results(tmp_path)


def test_blueprint_object_is_accepted_for_the_name(results, tmp_path):
    from blueprints import load_blueprint

    from ..conftest import EXAMPLES

    bp = load_blueprint(EXAMPLES / "local-workstation.yaml").blueprint
    paths = write_reports(results[:1], tmp_path, title="t", blueprint=bp, raw_dir=None)
    assert json.loads(paths["json"].read_text())["blueprint"] == "workstation"
