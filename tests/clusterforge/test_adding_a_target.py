"""Adding a target is one module plus its registration: this module is that module.

``CsvTarget`` below is a complete target written the way ``docs/adding-a-target.md`` tells a
newcomer: a :class:`Target` subclass with its own :class:`Plan`, registered with
:func:`clusterforge.targets.register`. Nothing else in the project changes, and the CLI verbs
``plan`` (text and ``--json``), ``render``, ``up`` and ``down`` reach it, called as a user calls
them (typer's ``CliRunner``). The blueprint model accepts ``aws`` and ``onprem`` only (a new
provider name also needs its ``target:`` settings model in ``blueprints/models.py``, see the doc),
so the test target serves ``onprem`` blueprints in place of the Ansible one for the length of a test.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from blueprints import LoadedBlueprint
from clusterforge.cli import app
from clusterforge.targets import TARGETS, DeployOptions, Plan, Target, register, target_for
from tests.conftest import EXAMPLES

BLUEPRINT = EXAMPLES / "onprem-dgx-h100-ib.yaml"


@dataclass
class CsvPlan(Plan):
    """The hosts the CSV target would list: ``[(group, host, address)]``."""

    blueprint: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    provider: str = "onprem"

    def to_json(self) -> dict[str, Any]:
        return {"hosts": [{"group": g, "name": h, "address": a} for g, h, a in self.rows]}

    def show(self, console: Console, *, show_all: bool = False) -> None:
        console.print(f"csv plan {self.blueprint}: {len(self.rows)} host(s)", markup=False)
        for g, h, a in self.rows:
            console.print(f"  {g} {h} {a}", markup=False)


class CsvTarget(Target):
    """A hosts-as-CSV target: ``render`` writes ``hosts.csv``; ``up`` / ``down`` record what they were asked."""

    provider = "onprem"
    render_dir = "csv"

    def __init__(self) -> None:
        self.calls: list[tuple[str, DeployOptions]] = []

    def plan(self, loaded: LoadedBlueprint) -> CsvPlan:
        rows = [(g.name, h.name, h.address) for g in loaded.blueprint.node_groups for h in g.hosts]
        return CsvPlan(blueprint=loaded.blueprint.name, rows=rows)

    def render(self, loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "hosts.csv"
        with path.open("w", newline="") as f:
            csv.writer(f).writerows([("group", "name", "address"), *self.plan(loaded).rows])
        return [path]

    def up(self, loaded: LoadedBlueprint, options: DeployOptions) -> None:
        self.calls.append(("up", options))

    def down(self, what: str, options: DeployOptions) -> None:
        self.calls.append(("down", options))


@pytest.fixture
def csv_target() -> Iterator[CsvTarget]:
    """``CsvTarget`` registered for ``onprem`` (the built-in target is put back afterwards)."""
    builtin = TARGETS["onprem"]
    target = register(CsvTarget(), replace=True)
    try:
        yield target
    finally:
        register(builtin, replace=True)


def _hosts() -> list[tuple[str, str, str]]:
    from blueprints import load_blueprint

    bp = load_blueprint(BLUEPRINT).blueprint
    return [(g.name, h.name, h.address) for g in bp.node_groups for h in g.hosts]


def test_plan_json_comes_from_the_registered_target(csv_target: CsvTarget) -> None:
    res = CliRunner().invoke(app, ["plan", str(BLUEPRINT), "--json"])
    assert res.exit_code == 0, res.output
    hosts = json.loads(res.stdout)["hosts"]
    assert [(h["group"], h["name"], h["address"]) for h in hosts] == _hosts()
    assert len(hosts) >= 2


def test_plan_text_is_the_targets_show(csv_target: CsvTarget) -> None:
    res = CliRunner().invoke(app, ["plan", str(BLUEPRINT)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("csv plan "))
    assert lines[title] == f"csv plan dgx-h100: {len(_hosts())} host(s)"
    assert lines[title + 1:title + 1 + len(_hosts())] == [f"  {g} {h} {a}" for g, h, a in _hosts()]
    assert "ansible plan" not in res.stdout  # the built-in on-prem target was not asked


def test_render_writes_into_the_targets_render_dir(csv_target: CsvTarget, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["render", str(BLUEPRINT), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    with (tmp_path / "csv" / "hosts.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["group", "name", "address"], *[list(r) for r in _hosts()]]
    assert not (tmp_path / "ansible").exists()  # the Ansible renderer did not run
    assert (tmp_path / "validation").is_dir()  # the target-independent part still did


def test_up_and_down_reach_the_target_with_the_users_options(csv_target: CsvTarget, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["up", str(BLUEPRINT), "--check", "--tags", "rdma, nvme", "--limit", "gpu",
                                   "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["down", str(BLUEPRINT), "--state-dir", str(tmp_path / "state")])
    assert res.exit_code == 0, res.output
    (verb_up, up), (verb_down, down) = csv_target.calls
    assert (verb_up, verb_down) == ("up", "down")
    assert up.check and up.tags == ("rdma", "nvme") and up.limit == "gpu" and up.output == tmp_path / "out"
    assert down.state_dir == tmp_path / "state"
    assert not (tmp_path / "out").exists()  # nothing of the Ansible target ran


def test_the_builtin_target_is_back_after_the_test() -> None:
    from clusterforge.targets.onprem import OnpremTarget

    assert isinstance(target_for("onprem"), OnpremTarget)


@pytest.mark.parametrize(("attrs", "error", "match"), [
    ({"provider": "onprem"}, ValueError, "already registered"),
    ({"provider": "On Prem"}, ValueError, "lower-case word"),
    ({"provider": ""}, ValueError, "lower-case word"),
    ({"provider": "lab", "render_dir": "a/b"}, ValueError, "one directory name"),
    ({"provider": "lab", "render_dir": ".."}, ValueError, "one directory name"),
])
def test_register_refuses_a_taken_provider_or_a_bad_name(attrs: dict[str, str], error: type[Exception],
                                                          match: str) -> None:
    target = CsvTarget()
    for k, v in attrs.items():
        setattr(target, k, v)
    with pytest.raises(error, match=match):
        register(target)
    assert "lab" not in TARGETS and "" not in TARGETS


def test_register_refuses_what_is_not_a_target() -> None:
    with pytest.raises(TypeError, match="not a clusterforge.targets.Target"):
        register(object())  # type: ignore[arg-type]
