"""Verdicts and artefacts as the CLI gives them: a fio payload that could not run, the validation
artefacts `render` writes, a GPU blueprint run on a CPU machine, busbw above the physical bound, a
truncated NCCL log."""

from __future__ import annotations

import json

from clusterforge.cli import main

from ..conftest import EXAMPLES


def test_fio_payload_that_could_not_run_fails_quoting_its_error(tmp_path, capsys):
    raw = tmp_path / "fio-scratch.json"
    raw.write_text(json.dumps({"clusterforge": {"version": 1, "target": "/scratch", "kind": "nvme",
                                                "error": "fio: command not found"}}))
    assert main(["judge", str(raw), "--kind", "fio", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "fail"
    assert "fio: command not found" in doc["results"][0]["reasons"][0]


def test_render_writes_slurm_and_kubernetes_validation_artefacts_for_the_dgx_example(tmp_path, capsys):
    out = tmp_path / "dgx"
    assert main(["render", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "-o", str(out)]) == 0
    assert (out / "ansible" / "inventory.yml").is_file() and (out / "ansible" / "site.yml").is_file()
    sbatch = (out / "validation" / "slurm" / "nccl-all_reduce.sbatch").read_text()
    assert "#SBATCH --nodes=4" in sbatch and "#SBATCH --gpus-per-node=8" in sbatch
    mpijob = (out / "validation" / "kubernetes" / "nccl-all_reduce.yaml").read_text()
    assert "kind: MPIJob" in mpijob and "=mlx5_0:1" in mpijob


def test_local_run_of_a_gpu_blueprint_on_a_cpu_machine_is_invalid_not_pass(tmp_path, capsys, monkeypatch):
    from validate.launchers import local as local_launcher

    monkeypatch.setattr(local_launcher, "local_gpu_count", lambda: 0)
    out = tmp_path / "run"
    # the p5 example with one short NCCL sweep (its own three sweeps up to 8 GiB take minutes on CPU processes)
    text = (EXAMPLES / "aws-p5-efa-lustre.yaml").read_text()
    assert "\nvalidation:\n" in text
    blueprint = tmp_path / "aws-p5-efa-lustre.yaml"
    blueprint.write_text(text.replace("\nvalidation:\n", "\nvalidation:\n  nccl: {collectives: [all_reduce], max_bytes: 1048576, iters: 2, warmup_iters: 1}\n"))
    # without --run-anyway the run stops before starting (exit 3, nothing written)
    assert main(["validate", str(blueprint), "--launcher", "local", "--suites", "nccl", "-o", str(out)]) == 3
    assert not out.exists()
    rc = main(["validate", str(blueprint), "--launcher", "local", "--suites", "nccl", "-o", str(out), "--run-anyway",
               "--gpus", "2"])
    assert rc == 3, capsys.readouterr()
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert lines and all(r["verdict"] == "invalid" for r in lines)
    assert "hardware mismatch" in lines[0]["reasons"][0] and "8 x h100-sxm" in lines[0]["reasons"][0]
    # the top of the report says why (issue 29 kind 6)
    first = (out / "report.md").read_text().splitlines()[0]
    assert "--run-anyway" in first and "every affected result is invalid" in first
    # JUnit carries the wall time the tests took
    import xml.etree.ElementTree as ET

    suite = ET.parse(out / "junit.xml").getroot()
    assert float(suite.get("time")) > 0
    assert all(float(c.get("time")) > 0 for c in suite.iter("testcase"))


def test_busbw_above_the_physical_bound_is_invalid(fixtures_dir, capsys):
    log = fixtures_dir / "nccl-tests" / "nccl-09.txt"  # 2 x 8 A100 on RoCE, judged as if on p4d EFA
    assert main(["judge", str(log), "--instance-type", "p4d.24xlarge", "--fabric", "efa", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "invalid"
    # p4d: 4 x 100 Gbit/s / 8 GPUs = 6.25 GB/s per GPU; all_reduce bound B x (n-1)/(k-1) = 93.75 GB/s < 237.9
    assert "not produced by the hardware it is judged against" in " ".join(doc["results"][0]["reasons"])
    assert doc["results"][0]["expected"]["upper_gbps"] == 93.75


def test_truncated_nccl_log_warns_without_blaming_the_fabric(fixtures_dir, tmp_path, capsys):
    lines = (fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.split()[:1] == ["33554432"])
    log = tmp_path / "truncated.txt"
    log.write_text("".join(lines[: cut + 1]))
    assert main(["judge", str(log), "--nodes", "2", "--gpus-per-node", "8", "--gpu", "a100-40gb-sxm",
                 "--fabric", "roce", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"][0]
    assert res["verdict"] == "warn"
    assert res["reasons"] == [r for r in res["reasons"] if "without its footer" in r]
    assert any("bandwidth not judged" in n for n in res["notes"])
