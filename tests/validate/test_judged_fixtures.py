"""Every recorded output of ``tests/fixtures`` judged by ``clusterforge judge --json``, compared whole with
``tests/golden/judged/`` (issue 35).

The judge tests assert each fixture's verdict and the figures the issue at hand was about; the rest of what a
user reads (every metric, the expected figure and its derivation, the warn / fail ratios, the notes, the
reasons, the exit status, the one-line summary the report shows) was pinned nowhere, so a changed threshold, bound or wording that left the verdict
alone passed. Each public output is judged as a user would run it: with nothing declared (what the log itself
says), and, where ``test_judge.FLAGS`` declares the hardware a run came from, with those flags too. The
per-size series are left out (``tests/golden/parsed`` holds the rows). ``CLUSTERFORGE_UPDATE_GOLDEN=1``
rewrites the files; review the diff.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from blueprints import load_blueprint
from clusterforge.cli import main
from tests.golden_files import assert_golden, golden_dir
from validate.node_checks import judge_node_documents
from validate.results import JudgeResult
from validate.suites import summary

from ..conftest import EXAMPLES
from .node_fixtures import RecordedNode, as_recorded
from .test_judge import FLAGS
from .test_parsed_fixtures import FIXTURES, RAW

FOLDER = golden_dir("judged")


def _argv(flags: dict[str, Any]) -> list[str]:
    return [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _golden_name(rel: str, flags: dict[str, Any]) -> str:
    """The golden file of fixture ``rel`` judged with ``flags``: ``<rel>.json``, or ``<rel>.<flag values>.json``."""
    return f"{rel}.json" if not flags else f"{rel}.{'-'.join(str(v) for v in flags.values())}.json"


CASES = [(rel, {}) for rel in RAW] + [(f"nccl-tests/{name}", flags) for name, flags in FLAGS.items() if flags]


@pytest.mark.parametrize("rel, flags", CASES, ids=[f"{r}{' ' + ' '.join(_argv(f)) if f else ''}" for r, f in CASES])
def test_a_recorded_output_is_judged_as_reviewed(rel: str, flags: dict[str, Any], capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)  # the results name their source relative to where the user ran the judge
    rc = main(["judge", rel, *_argv(flags), "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    doc = json.loads(out)
    for r in doc["results"]:
        r.pop("series", None)
        r["summary (the report's line)"] = summary(JudgeResult.from_json(r))
    text = json.dumps({"exit": rc, **doc}, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert_golden({_golden_name(rel, flags): text}, FOLDER, complete=False)


NODE_SYSTEMS = {  # recorded system -> (example blueprint, node group, as_recorded options), as test_node_checks judges them
    "dgx-h100": ("onprem-dgx-h100-ib", "dgx", {"gpudirect": "nvidia-peermem"}),
    "l40s-roce": ("onprem-l40s-roce", "l40s", {}),
}


@pytest.mark.parametrize("system", sorted(NODE_SYSTEMS))
def test_the_healthy_node_fixtures_are_judged_as_reviewed(system: str) -> None:
    # every node check's status, figures, expectation and fix on the recorded healthy nodes of one system, both
    # hosts and the cross-node comparison
    example, group, opts = NODE_SYSTEMS[system]
    bp = as_recorded(load_blueprint(EXAMPLES / f"{example}.yaml").blueprint, **opts)
    hosts = sorted(p for p in (FIXTURES / "node" / system).iterdir() if p.is_dir())
    results = judge_node_documents([RecordedNode.load(h).doc() for h in hosts], bp, group, source="node.json")
    docs = [{**r.to_json(), "summary (the report's line)": summary(r)} for r in results]
    text = json.dumps(docs, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert_golden({f"node/{system}.json": text}, FOLDER, complete=False)


def test_every_judged_golden_has_its_case() -> None:
    """A fixture removed or its flags changed leaves no stale reviewed result behind."""
    want = {_golden_name(rel, flags) for rel, flags in CASES}
    want |= {f"node/{system}.json" for system in NODE_SYSTEMS}
    have = {str(p.relative_to(FOLDER)) for p in FOLDER.rglob("*.json")}
    assert have == want, sorted(have ^ want)
