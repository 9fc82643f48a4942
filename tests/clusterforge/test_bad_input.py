"""Nothing a user types breaks the CLI: every verb given a missing file, a directory, an empty
file, binary data, a YAML document of the wrong kind or bad flags prints one clear line and
exits 2 (no readable file, or bad input to `validate` and `judge`) or 1 (an
invalid blueprint) — never a traceback. ``--debug`` shows the traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterforge.cli import main

WRONG_KIND = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 1}
"""


@pytest.fixture()
def bad_inputs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "wrong-kind.yaml").write_text(WRONG_KIND)
    (tmp_path / "a-directory").mkdir()
    return {
        "missing": tmp_path / "does-not-exist.yaml",
        "directory": tmp_path / "a-directory",
        "empty": tmp_path / "empty.yaml",
        "binary": tmp_path / "binary.yaml",
        "wrong-kind": tmp_path / "wrong-kind.yaml",
    }


def _argv(verb: str, path: Path, tmp_path: Path) -> list[str]:
    out = str(tmp_path / "out")
    return {
        "check": ["check", str(path)],
        "plan": ["plan", str(path)],
        "cost": ["cost", str(path)],
        "render": ["render", str(path), "-o", out],
        "up": ["up", str(path)],
        "down": ["down", str(path)],
        "validate": ["validate", str(path), "--launcher", "local", "-o", out],
        "judge": ["judge", str(path)],
        "judge-blueprint": ["judge", str(Path(__file__)), "--blueprint", str(path)],
        "report": ["report", str(path)],
    }[verb]


VERBS = ["check", "plan", "cost", "render", "up", "down", "validate", "judge", "judge-blueprint", "report"]
KINDS = ["missing", "directory", "empty", "binary", "wrong-kind"]


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("✗")]


def _expected_exit(verb: str, kind: str) -> int:
    """README, "CLI summary": a path that names no readable file is a usage error (2) for every verb; a file that
    is not a valid blueprint is 1 ("invalid") where 1 means that, and 2 for `validate` and `judge --blueprint`,
    whose 1 is the cluster's verdict; `judge` and `report` take no blueprint, so any such file is bad input (2).
    `down` reads the deployment record, never the blueprint (README "Teardown"): whatever it is given, nothing
    recorded under it is exit 1, "nothing was destroyed"."""
    if verb == "down":  # BLUEPRINT|NAME, looked up in the deployment records: nothing recorded under it is 1
        return 1
    if kind in ("missing", "directory") or verb in ("validate", "judge", "judge-blueprint", "report"):
        return 2
    return 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("verb", VERBS)
def test_bad_input_gives_one_line_and_the_documented_exit(verb, kind, bad_inputs, tmp_path, capsys):
    rc = main(_argv(verb, bad_inputs[kind], tmp_path))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert rc == _expected_exit(verb, kind), f"{verb} {kind}: exit {rc}\n{out}\n{err}"
    lines = _error_lines(out if verb == "check" else err)  # check prints its findings on stdout, like linters
    assert len(lines) == 1, f"{verb} {kind}: expected one error line, got:\n{out}\n{err}"
    assert len(lines[0]) < 400


@pytest.mark.parametrize("verb", ["check", "plan", "cost", "render", "up", "down", "validate", "judge", "report", "schema",
                                  "rules"])
def test_bad_flag_is_a_usage_error(verb, capsys):
    rc = main([verb, "--no-such-flag"])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out + err
    assert "--no-such-flag" in err or "No such option" in err


def test_unknown_verb_suggests_the_right_one(capsys):
    assert main(["chek", "x.yaml"]) == 2
    assert "Did you mean 'check'" in capsys.readouterr().err


def test_debug_flag_shows_the_traceback(tmp_path):
    from blueprints import BlueprintInvalid

    (tmp_path / "b.yaml").write_text("- a list\n")
    with pytest.raises(BlueprintInvalid):
        main(["--debug", "render", str(tmp_path / "b.yaml"), "-o", str(tmp_path / "out")])


def test_up_never_configures_this_machine_without_an_explicit_yes(capsys, monkeypatch):
    import io

    from ..conftest import EXAMPLES

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: no prompt possible
    assert main(["up", str(EXAMPLES / "local-workstation.yaml")]) == 2
    err = capsys.readouterr().err
    assert "is this machine" in err and "--yes" in err and "Traceback" not in err


def test_plan_json_of_an_invalid_blueprint_prints_the_findings_as_check_json_does(bad_inputs, tmp_path, capsys):
    import json

    for kind, code in (("wrong-kind", 1), ("missing", 2)):
        assert main(["plan", str(bad_inputs[kind]), "--json"]) == code
        out, err = capsys.readouterr()
        doc = json.loads(out)
        assert doc["ok"] is False and doc["file"] == str(bad_inputs[kind]), doc
        assert [f["rule_id"] for f in doc["findings"]] == [{"wrong-kind": "blueprint-wrong-kind",
                                                             "missing": "file-not-found"}[kind]]
        assert len(_error_lines(err)) == 1, err  # the human line stays on stderr
