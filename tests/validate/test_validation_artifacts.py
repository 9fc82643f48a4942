"""Golden files for the validation generators: Slurm batch scripts, Kubernetes manifests and the
Markdown / JUnit reports. ``CLUSTERFORGE_UPDATE_GOLDEN=1 make test`` rewrites them; review the diff."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blueprints import load_blueprint
from validate.expectations import context_from_blueprint
from validate.judge import judge_file
from validate.launchers import render_artifacts
from validate.report import write_reports

from ..conftest import EXAMPLES
from ..golden_files import assert_golden, golden_dir

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?")


def _compare(actual: dict[str, str], folder: Path) -> None:
    assert_golden({k: TIMESTAMP.sub("<TIMESTAMP>", v) for k, v in actual.items()}, folder)  # volatile fields removed


@pytest.mark.parametrize("example", ["onprem-dgx-h100-ib", "aws-eks-p4d", "onprem-sandbox-kata"])
def test_validation_artifacts_match_golden(example, tmp_path):
    out = tmp_path / "validation"
    files = render_artifacts(load_blueprint(EXAMPLES / f"{example}.yaml"), out)
    actual = {str(f.relative_to(out)): f.read_text() for f in files
              if f.suffix in (".sbatch", ".yaml", ".yml", ".sh")}
    assert actual, "no artefacts rendered"
    _compare(actual, golden_dir("validation") / example)


def test_reports_match_golden(tmp_path, fixtures_dir):
    bp = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").blueprint
    ctx = context_from_blueprint(bp)
    results = []
    for name in ("nccl-02.txt", "nccl-11.txt", "nccl-13.txt"):
        results += judge_file(fixtures_dir / "nccl-tests" / name, ctx, label=name)
    for r in results:
        r.source = Path(r.source).name  # machine-independent
    paths = write_reports(results, tmp_path, title="golden", blueprint="p5-train", raw_dir=None)
    actual = {name: Path(paths[name]).read_text() for name in paths if Path(paths[name]).suffix in (".md", ".xml")}
    assert actual
    _compare({Path(paths[k]).name: v for k, v in actual.items()}, golden_dir("reports"))
