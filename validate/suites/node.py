"""The node suite: health checks of every node against what its node group declares.

Plan: one test per node group (``node[-group]``), first in the run, on every node of the group.
Payload: ``node_health.py`` (standard library only) printing one JSON document per node (``raw/<id>.json``,
one line per node). Judge: :mod:`validate.node_checks` runs every check of
:data:`~validate.node_checks.CHECKS` against the blueprint (GPU count, driver, ECC, NVLink, Fabric
Manager, GPUDirect RDMA, RDMA ports, MTU, RoCE GID and QoS, IPoIB, PCIe ACS, IOMMU, memlock, /dev/shm,
scratch, RAID, shared mounts, runtimes, kernel modules) and the cross-node checks; one result per node
(``metrics["checks"]``), a failed *blocking* check explains the later suites' results on that node.
Reports: the node x check table (:func:`~validate.node_checks.node_table`).

Node documents are judged against a blueprint and node group, not a hardware context alone: the
runner passes them; ``clusterforge judge`` needs ``--blueprint``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from blueprints import LoadedBlueprint

from ..expectations import JudgeContext
from ..node_checks import (
    CHECKS,
    CROSS_EXPLAINS,
    blocking_failures,
    judge_node_file,
    node_metrics,
    node_table,
    recorded_units,
)
from ..plan import PlannedTest, TestParams
from ..results import VERDICT_ICONS, JudgeResult, Verdict
from ..untrusted import md_text, safe_href
from .base import Explanation, GroupPlan, HtmlSection, Placement, Suite

__all__ = ["NodeParams", "NodeSuite"]

_ICON = VERDICT_ICONS

_TABLE_HTML = """\
{% if t.columns %}
<table class="nodes">
  <thead><tr><th>node</th>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
  <tbody>
  {% for name, cells in t.rows %}
    <tr><td>{{ name }}</td>{% for c in t.columns %}{% if c in cells %}<td title="{{ cells[c].measured }} (expected {{ cells[c].expected }})"><span class="badge {{ 'invalid' if cells[c].verdict == 'n/a' else cells[c].verdict }}">{{ cells[c].verdict }}</span></td>{% else %}<td>–</td>{% endif %}{% endfor %}</tr>
  {% endfor %}
  </tbody>
</table>
{% endif %}
{% if t.not_applicable %}<p class="meta">Not applicable on every node: {{ t.not_applicable|join(", ") }}</p>{% endif %}
{% if t.failing %}
<ul class="reasons">
{% for name, c in t.failing %}
  <li><strong>{{ name }} / {{ c.id }}</strong> ({{ c.verdict }}{% if c.blocking %}, blocking{% endif %}): measured {{ c.measured }}; expected {{ c.expected }}{% if c.cause %}. Cause: {{ c.cause }}{% endif %}{% if c.fix %}. Fix: {{ c.fix }}{% endif %}{% if c.source %} (<a href="{{ c.source }}">source</a>){% endif %}</li>
{% endfor %}
</ul>
{% endif %}
"""
"""The HTML of the node x check table (jinja2, autoescaped)."""


@dataclass(frozen=True)
class NodeParams(TestParams):
    """The node checks take no settings: what they expect comes from the node group."""


class NodeSuite(Suite):
    """The node suite (see the module docstring)."""

    name = "node"
    title = "Node health checks"
    placement = Placement.EVERY_NODE
    payloads = ("node_health.py",)
    params_type = NodeParams
    runs_first = True
    judges_files = False
    wants_runtime_classes = True
    document_kinds = ("node-health",)

    def plan(self, gp: GroupPlan) -> tuple[list[PlannedTest], list[str]]:
        """One test on every node of the group (on a local run: this machine)."""
        return [PlannedTest(
            id=gp.test_id(self.name), kind=self.name, group=gp.group.name, nodes=gp.nodes, ranks_per_node=1,
            device="cpu", params=NodeParams(), description=f"node health checks on {gp.nodes} node(s) of {gp.group.name}",
            notes=(gp.mismatch,) if gp.mismatch else ())], []

    def payload_args(self, test: PlannedTest) -> list[str]:
        """``--services UNIT,...``: the systemd units whose state the payload records, from the catalog
        (:func:`~validate.node_checks.recorded_units`); the launchers add ``--node-name``, ``--host-root`` or
        ``--output`` as :class:`Placement` says."""
        return ["--services", ",".join(recorded_units())]

    def gpus(self, test: PlannedTest) -> int:
        """The checks take no GPU from the scheduler (they only look at them)."""
        return 0

    def judge_text(self, text: str, ctx: JudgeContext, *, source: str, label: str | None) -> list[JudgeResult]:
        """Node documents need the blueprint's node group (:meth:`judge_test`), not a hardware context:
        one ``invalid`` result saying so."""
        r = JudgeResult(source=source, kind=self.name, label=label or Path(source).name)
        r.degrade(Verdict.INVALID, "node health documents are judged against a blueprint's node group: pass "
                                   "--blueprint (and --group)")
        return [r]

    def judge_group_file(self, path: Path, loaded: LoadedBlueprint, group: str, *, label: str | None = None) -> list[JudgeResult]:
        """Every check on every node of ``group`` whose document ``path`` holds (plus the cross-node result)."""
        return judge_node_file(path, loaded.blueprint, group, label=label or "node")

    def judge_test(self, raw: Path, test: PlannedTest, loaded: LoadedBlueprint, launcher: str) -> list[JudgeResult]:
        """Every check on every node of ``test``'s group (one result per node, plus the cross-node result)."""
        return judge_node_file(raw, loaded.blueprint, test.group, label=test.id, expected_nodes=test.nodes)

    def explanations(self, results: list[JudgeResult]) -> list[Explanation]:
        """The failed blocking checks of the node results, each with the suites it explains
        (:data:`~validate.node_checks.CHECKS`' ``explains``; the cross-node checks' in ``CROSS_EXPLAINS``)."""
        out = []
        for (group, host), checks in blocking_failures(results).items():
            for c in checks:
                cid = str(c.get("id"))
                spec = CHECKS.get(cid)
                out.append(Explanation(
                    suite=self.name, group=group, host=host, check=cid, measured=str(c.get("measured")),
                    expected=str(c.get("expected")), fix=c.get("fix") or None,
                    explains=tuple(spec.explains) if spec is not None else tuple(CROSS_EXPLAINS.get(cid, ()))))
        return out

    def summary(self, r: JudgeResult) -> str | None:
        """``20 pass, 3 n/a, 1 fail``: the checks of one node by verdict."""
        summary = node_metrics(r).get("summary")
        return str(summary) if summary else None

    def compared(self, r: JudgeResult) -> bool:
        """Always: every check compares a measurement with the blueprint."""
        return True

    def markdown_section(self, results: list[JudgeResult]) -> list[str]:
        """The "Node checks" section: a node x check table, then every failing cell explained, then the
        results a failed blocking check explains."""
        t = node_table(results)
        if t is None:
            return []
        out = ["", "## Node checks", ""]
        if t.columns:
            out += ["| node | " + " | ".join(_md(c) for c in t.columns) + " |", "|---|" + "---|" * len(t.columns)]
            for name, cells in t.rows:
                out.append(f"| {_md(name)} | " + " | ".join(
                    f"{_ICON.get(cells[c]['verdict'], '')} {_md(cells[c]['verdict'])}" if c in cells else "–"
                    for c in t.columns) + " |")
        if t.not_applicable:
            out += ["", "Not applicable on every node: " + ", ".join(_md(x) for x in t.not_applicable)]
        if t.failing:
            out += ["", "Failing cells:", ""]
            for name, c in t.failing:
                s = f"- **{_md(name)} / {_md(c['id'])}** ({_md(c['verdict'])}{', blocking' if c.get('blocking') else ''}): " \
                    f"measured {_md(c['measured'])}; expected {_md(c['expected'])}"
                if c.get("cause"):
                    s += f". Cause: {_md(c['cause'])}"
                if c.get("fix"):
                    s += f". Fix: {_md(c['fix'])}"
                href = safe_href(str(c["source"])) if c.get("source") else None
                out.append(s + (f" ([source]({href}))" if href else f" (source: {_md(c['source'])})" if c.get("source") else ""))
        explained = [(r, r.metrics.get("explained_by")) for r in results]
        if any(why for _, why in explained):
            out += ["", "Results explained by a failed blocking node check:", ""]
            out += [f"- {_md(r.title)}: {_md(', '.join(map(str, why)))}" for r, why in explained if why]
        return out

    def html_section(self, results: list[JudgeResult], plotted: int) -> HtmlSection | None:
        """The node x check table."""
        t = node_table(results)
        if t is None:
            return None
        from jinja2 import Environment

        html = Environment(autoescape=True).from_string(_TABLE_HTML).render(t=t)
        return HtmlSection(heading="Node checks", html=html)


def _md(text: object) -> str:
    """A value from the results as Markdown text (escaped: :func:`validate.untrusted.md_text`)."""
    return md_text(text)
