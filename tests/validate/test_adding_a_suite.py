"""Adding a suite touches one new module plus its registration.

``echo_suite.py`` (beside this file) is a suite written the way a newcomer writes
``validate/suites/<name>.py``; its payload ``echo_payload/echo_bench.py`` stands for
``validate/payloads/echo_bench.py``. The tests below register it with the same public call the real
suites use (:func:`validate.suites.register`, the one line added to ``validate/suites/__init__.py``)
and show, from the user's side, that nothing else has to change: ``clusterforge validate``'s planner,
runner and local launcher run it, the Slurm and Kubernetes launchers render it, ``clusterforge
judge`` detects its raw output without ``--kind`` and judges it against its thresholds, the
Markdown, HTML and JUnit reports show it, and ``clusterforge render`` ships its payload beside the
Ansible roles.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from blueprints import load_blueprint
from clusterforge.ansible.render import render_ansible
from clusterforge.cli import main
from validate.expectations import JudgeContext
from validate.judge import file_kinds, judge_file
from validate.launchers import make_launcher
from validate.launchers.kubernetes import manifest
from validate.launchers.slurm import sbatch_script
from validate.report import load_results
from validate.runner import plan_tests, read_results_lines, run_validation
from validate.suites import REGISTRY, detect_kind, payload_files, register, suite_names, summary, unregister

from .echo_suite import PAYLOAD_DIR, EchoSuite, EchoThresholds

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "blueprints" / "examples"
PAYLOAD = (PAYLOAD_DIR / "echo_bench.py").read_text()


@pytest.fixture
def echo() -> Iterator[EchoSuite]:
    suite = register(EchoSuite())
    try:
        yield suite
    finally:
        unregister("echo")
    assert "echo" not in REGISTRY


def _echo_output(tmp_path: Path, value: float, name: str = "result.json") -> Path:
    """Run the echo payload as a node would and return its raw output."""
    out = tmp_path / name
    subprocess.run([sys.executable, str(PAYLOAD_DIR / "echo_bench.py"), "--value", f"{value:g}", "--output", str(out)],
                   check=True)
    return out


@pytest.mark.parametrize("value,verdict,code", [(5.0, "pass", 0), (1.5, "fail", 1), (3.0, "pass", 0)])
def test_a_new_suite_is_planned_run_judged_and_reported(tmp_path: Path, echo: EchoSuite, value: float,
                                                          verdict: str, code: int) -> None:
    echo.value = value  # type: ignore[misc]
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    assert suite_names()[-1] == "echo"
    tests, notes = plan_tests(loaded, launcher="local", suites=["echo", "node"], local_gpus=0)
    assert [t.id for t in tests] == ["node", "echo"] and "echo planned" in notes  # node still runs first
    tests = tests[1:]
    out = tmp_path / "run"
    launcher = make_launcher("local", loaded, out, timeout_s=120, python=sys.executable)
    run = run_validation(loaded, out, launcher, tests, notes=notes)
    # the local launcher staged and ran the suite's own payload with its arguments
    assert (out / "payloads" / "echo_bench.py").read_text() == PAYLOAD
    assert f"echo_bench.py --value {value:g} --output" in (out / "launch" / "echo.sh").read_text()
    assert run.exit_code == code and run.verdicts == {"echo": verdict}
    (line,) = read_results_lines(out / "results.jsonl")
    assert (line["kind"], line["verdict"], line["metrics"]["value"]) == ("echo", verdict, value)
    assert line["run_with"]["params"] == {"value": value}
    assert line["expected"]["floor"] == EchoThresholds().floor  # the thresholds model's default
    (r,) = load_results(out)
    assert r.verdict == verdict and summary(r) == f"echo value {value:g}"
    # reports: Markdown row and section, JUnit suite, HTML section (escaped heading, embedded plot)
    md = (out / "report.md").read_text()
    assert f"| echo | echo | echo value {value:g} | echo ≥ 3 |" in md and "## Echo\n\n1 echo result(s)" in md
    junit = ET.parse(out / "junit.xml").getroot()
    (ts,) = junit.findall("testsuite")
    assert ts.get("name") == "clusterforge.validate.echo" and ts.get("failures") == ("1" if verdict == "fail" else "0")
    html = (out / "report.html").read_text()
    assert "<h2>Echo &lt;values&gt;</h2>" in html and 'alt="echo values" src="data:image/png;base64,' in html
    # the judge entry point finds it by name, and by its output alone
    (again,) = judge_file(Path(line["source"]), JudgeContext(), kind="echo", label="echo")
    assert again.verdict == verdict
    (detected,) = judge_file(Path(line["source"]), JudgeContext())
    assert (detected.kind, detected.verdict) == ("echo", verdict)


def test_a_new_suite_renders_for_slurm_and_kubernetes(echo: EchoSuite) -> None:
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    tests, _ = plan_tests(loaded, launcher="slurm", suites=["echo"])
    (t,) = tests
    script = sbatch_script(loaded, t)
    assert "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --partition" in script  # no GPU asked: device cpu
    assert 'srun --nodes=1 --ntasks=1 "$PY" "$CF_DIR/payloads/echo_bench.py" --value 5 --output "$CF_DIR/raw/echo.json"' \
        in script
    job = manifest(loaded, t)
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert job["kind"] == "Job" and c["name"] == "echo"
    # the output goes into the job's private run directory (mktemp -d), never a fixed /tmp name
    assert 'python3 /opt/clusterforge/payloads/echo_bench.py --value 5 --output "$CF_RUN_DIR"/echo.json' in c["command"][-1]
    assert "resources" not in c  # no GPU for a cpu test


@pytest.mark.parametrize("value,verdict,rc", [(7.0, "pass", 0), (0.5, "fail", 1)])
def test_clusterforge_judge_detects_and_judges_a_new_suites_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   value: float, verdict: str, rc: int) -> None:
    """`clusterforge judge FILE` (no `--kind`) knows the new suite's output once the suite is registered,
    and not before: detection asks the registered suites."""
    raw = _echo_output(tmp_path, value)
    assert detect_kind(raw.read_text(), raw.name) is None
    assert main(["judge", str(raw), "--json"]) == 2  # unknown kind: a usage error
    capsys.readouterr()
    register(EchoSuite())
    try:
        assert detect_kind(raw.read_text(), raw.name) == "echo" and "echo" in file_kinds()
        assert main(["judge", str(raw), "--json"]) == rc
        doc = json.loads(capsys.readouterr().out)
        (res,) = doc["results"]
        assert (res["kind"], res["verdict"], res["metrics"]["value"]) == ("echo", verdict, value)
        # no `validation.echo` in the blueprint models: its thresholds model's defaults apply
        assert "echo" not in doc["context"] and res["expected"]["floor"] == EchoThresholds().floor
        assert main(["judge", str(raw), "--kind", "echo"]) == rc
        assert "echo value" in capsys.readouterr().out
    finally:
        unregister("echo")


@pytest.mark.parametrize("floor,verdict", [(1.0, "pass"), (4.9, "pass"), (5.1, "fail"), (50.0, "fail")])
def test_a_new_suites_thresholds_come_from_its_model(tmp_path: Path, echo: EchoSuite, floor: float, verdict: str) -> None:
    raw = _echo_output(tmp_path, 5.0)
    ctx = JudgeContext(thresholds={"echo": EchoThresholds(floor=floor)})
    (r,) = judge_file(raw, ctx)
    assert (r.kind, r.verdict, r.expected["floor"]) == ("echo", verdict, floor)
    assert echo.thresholds(ctx) == EchoThresholds(floor=floor) and echo.thresholds(JudgeContext()) == EchoThresholds()


def test_clusterforge_render_ships_a_new_suites_payload(tmp_path: Path, echo: EchoSuite) -> None:
    """The payload files `clusterforge render` copies next to the roles are the registered suites'."""
    loaded = load_blueprint(EXAMPLES / "onprem-dgx-h100-ib.yaml")
    render_ansible(loaded, tmp_path / "with")
    copied = sorted(p.name for p in (tmp_path / "with" / "files" / "validate").iterdir())
    assert copied == sorted(payload_files()) and "echo_bench.py" in copied
    assert (tmp_path / "with" / "files" / "validate" / "echo_bench.py").read_text() == PAYLOAD
    unregister("echo")
    render_ansible(loaded, tmp_path / "without")
    assert "echo_bench.py" not in {p.name for p in (tmp_path / "without" / "files" / "validate").iterdir()}
    register(echo)


def test_an_unknown_or_clashing_suite_name_is_refused(echo: EchoSuite) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(echo)
    bad = EchoSuite()
    bad.name = "Echo Suite"  # type: ignore[misc]
    with pytest.raises(ValueError, match="lower-case word"):
        register(bad)
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    with pytest.raises(Exception, match="unknown suite"):
        plan_tests(loaded, launcher="local", suites=["ping"], local_gpus=0)
