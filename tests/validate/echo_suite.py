"""A validation suite written the way a newcomer writes ``validate/suites/<name>.py``: one module with
its params dataclass, its typed result keys, its thresholds model and its
:class:`~validate.suites.Suite` subclass (its
payload, ``echo_payload/echo_bench.py``, stands for ``validate/payloads/echo_bench.py``).

Nothing else in the project knows it: ``tests/validate/test_adding_a_suite.py`` registers it with
:func:`validate.suites.register` (the one line a real suite adds to ``validate/suites/__init__.py``)
and shows the planner, runner, launchers, detection, judge, CLI, reports and ``clusterforge render``
pick it up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, cast

from pydantic import BaseModel, ConfigDict, Field

from validate.expectations import JudgeContext
from validate.plan import PlannedTest, TestParams
from validate.results import Expected, JudgeResult, Metrics, Verdict
from validate.suites import GroupPlan, HtmlSection, Suite
from validate.suites.base import nothing, png

PAYLOAD_DIR = Path(__file__).resolve().parent / "echo_payload"
"""Where the suite's payload file lies (a real suite's is ``validate/payloads/``)."""


@dataclass(frozen=True)
class EchoParams(TestParams):
    """``value``: what the payload reports (echo units)."""

    value: float


class EchoMetrics(Metrics, total=False):
    """``value``: what the payload reported (echo units)."""

    value: float


class EchoExpected(Expected, total=False):
    """``floor``: the least value that passes (echo units, ``validation.echo.thresholds``)."""

    floor: float


def echo_metrics(r: JudgeResult) -> EchoMetrics:
    """``r.metrics`` as the echo suite's keys."""
    return cast(EchoMetrics, r.metrics)


def echo_expected(r: JudgeResult) -> EchoExpected:
    """``r.expected`` as the echo suite's keys."""
    return cast(EchoExpected, r.expected)


class EchoThresholds(BaseModel):
    """``floor``: the least echo value that passes (echo units); a real suite's model sits in
    ``blueprints/models.py`` under ``validation.<name>.thresholds``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    floor: float = Field(3.0, description="Least value that passes.", gt=0)


class EchoSuite(Suite):
    """A suite of one ``one-node`` payload whose figure is judged against a floor."""

    name = "echo"
    title = "Echo"
    payloads = ("echo_bench.py",)
    payload_dir = PAYLOAD_DIR
    params_type = EchoParams
    thresholds_type = EchoThresholds
    value: ClassVar[float] = 5.0

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        return [PlannedTest(id=gp.test_id(self.name), kind=self.name, group=gp.group.name, nodes=1, ranks_per_node=1,
                            device="cpu", params=EchoParams(value=self.value),
                            description=f"echo {self.value:g} on one node of {gp.group.name}")], ["echo planned"]

    def payload_args(self, test: PlannedTest) -> list[str]:
        return ["--value", f"{test.params_as(EchoParams).value:g}"]

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        m, e = EchoMetrics(), EchoExpected()
        r = JudgeResult(source=source, kind=self.name, label=label, metrics=m, expected=e)
        try:
            doc = json.loads(text)
        except ValueError:
            return [nothing(r, text, "no echo document")]
        floor = ctx.thresholds_for(self.name, EchoThresholds).floor
        m["value"] = doc["value"]
        e.update({"floor": floor, "ratio": round(doc["value"] / floor, 4)})
        if doc["value"] < floor:
            r.degrade(Verdict.FAIL, f"echo {doc['value']:g} is below the floor {floor:g}")
        return [r]

    def summary(self, r: JudgeResult) -> str | None:
        value = echo_metrics(r).get("value")
        return f"echo value {value:g}" if value is not None else None

    def expected_text(self, r: JudgeResult) -> str | None:
        floor = echo_expected(r).get("floor")
        return f"echo ≥ {floor:g}" if floor is not None else None

    def markdown_section(self, results: list[JudgeResult]) -> list[str]:
        mine = [r for r in results if r.kind == self.name]
        return ["", "## Echo", "", f"{len(mine)} echo result(s)"] if mine else []

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        mine = [r for r in results if r.kind == self.name]
        if not mine:
            return None
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(3, 2))
        ax.bar([r.title for r in mine], [echo_metrics(r).get("value", 0.0) for r in mine])
        return HtmlSection(heading="Echo <values>", png=png(fig), alt="echo values")
