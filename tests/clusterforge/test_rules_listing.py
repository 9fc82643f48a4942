"""`clusterforge rules` lists every finding id `check`, `plan`, `render` and `up` can print: the rules, the loader's
findings (file, YAML and schema errors, before any rule) and each target's preflight checks. An id a user sees in
a finding line is always one `rules` explains."""

from __future__ import annotations

import json
import re
from pathlib import Path

from blueprints import all_rules
from blueprints.loader import LOADER_FINDINGS
from clusterforge.cli import main
from clusterforge.targets import TARGETS

REPO = Path(__file__).resolve().parents[2]


def test_every_loader_finding_id_is_listed_and_every_listed_id_is_reported():
    source = (REPO / "blueprints" / "loader.py").read_text()
    body = source.split("LOADER_FINDINGS", 2)[2]  # the code after the table's definition and docstring
    used = set(re.findall(r'"((?:file|yaml|blueprint|schema|value)-[a-z-]+)"', body))
    assert used, "the loader reports no finding ids?"
    assert used == set(LOADER_FINDINGS), (used ^ set(LOADER_FINDINGS))


def test_every_preflight_finding_id_is_listed_by_its_target():
    for target in TARGETS.values():
        source = Path(__import__(type(target).__module__, fromlist=["_"]).__file__).read_text()
        used = set(re.findall(r'\.finding\(\s*"([a-z0-9-]+)"', source))
        assert used == set(target.preflight_checks), (target.provider, used ^ set(target.preflight_checks))


def test_rules_json_lists_rules_loader_findings_and_preflight_checks(capsys):
    assert main(["rules", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc["rules"]] == [r.id for r in all_rules()]
    assert {f["id"] for f in doc["loader"]} >= {"file-not-found", "yaml-syntax", "schema-unknown-key"}
    assert {(f["id"], f["provider"]) for f in doc["preflight"]} >= {("user-data-size", "aws")}
    ids = [r["id"] for r in doc["rules"]] + [f["id"] for f in doc["loader"]] + [f["id"] for f in doc["preflight"]]
    assert len(ids) == len(set(ids)), "an id means one thing"
