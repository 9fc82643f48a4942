"""Behaviour added while integrating the validation parts: fio payload errors and render output."""

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
