"""The pre-deploy rule registry.

A rule is a function ``check(ctx) -> Iterable[Hit]`` registered with :func:`rule`, carrying a
stable id, a severity, a default one-line fix and the URL of the fact it enforces. Rules never
raise for bad input: the registry turns an exception inside a rule into an internal-error
finding, so ``check`` always returns findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..catalog import Catalog, catalog
from ..findings import Finding, Severity
from ..loader import LoadedBlueprint
from ..models import Blueprint
from ..resolved import ResolvedCluster, resolve

__all__ = ["Hit", "Rule", "RuleContext", "all_rules", "check", "rule"]


@dataclass(frozen=True)
class Hit:
    """One violation found by a rule: where (document path), what, and optionally a specific fix."""

    path: tuple[Any, ...]
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class RuleContext:
    """What a rule sees: the blueprint, its positions, the hardware catalog and the resolved cluster."""

    loaded: LoadedBlueprint
    catalog: Catalog

    @property
    def bp(self) -> Blueprint:
        """The validated blueprint."""
        return self.loaded.blueprint

    @property
    def cluster(self) -> ResolvedCluster:
        """The resolved cluster (node groups with hardware, node settings and predicates; cached)."""
        return resolve(self.loaded.blueprint, self.catalog)


@dataclass(frozen=True)
class Rule:
    """A registered pre-deploy rule: ``id`` (stable, kebab-case), ``severity``, ``summary``,
    ``fix`` (default one-line fix), ``source`` (URL of the fact), ``check`` (the function)."""

    id: str
    severity: Severity
    summary: str
    fix: str
    source: str
    check: Callable[[RuleContext], Iterable[Hit]]

    def to_json(self) -> dict[str, str]:
        """``{"id", "severity", "summary", "fix", "source"}``."""
        return {"id": self.id, "severity": self.severity, "summary": self.summary, "fix": self.fix, "source": self.source}


_RULES: dict[str, Rule] = {}


def rule(id: str, severity: Severity, summary: str, fix: str, source: str) -> Callable[[Callable[[RuleContext], Iterable[Hit]]], Callable[[RuleContext], Iterable[Hit]]]:
    """Decorator registering a rule. Raises ``ValueError`` on a duplicate id or missing source.

    A rule function without a docstring gets one built from the metadata (what it checks, the
    fix, the source), so ``help()`` and generated docs describe every rule.
    """

    def deco(fn: Callable[[RuleContext], Iterable[Hit]]) -> Callable[[RuleContext], Iterable[Hit]]:
        if id in _RULES:
            raise ValueError(f"duplicate rule id {id}")
        if not source.startswith("http"):
            raise ValueError(f"rule {id} needs a source URL")
        _RULES[id] = Rule(id, severity, summary, fix, source, fn)
        if not fn.__doc__:
            fn.__doc__ = (f"Rule ``{id}`` ({severity}): {summary}\n\nYields a :class:`Hit` per violation (document "
                          f"path, message naming the fields, optional specific fix).\n\nFix: {fix}\n\nSource: {source}")
        return fn

    return deco


def all_rules() -> list[Rule]:
    """Every registered rule, sorted by id (the rule modules register when :mod:`blueprints.rules` is imported)."""
    return sorted(_RULES.values(), key=lambda r: r.id)


def check(loaded: LoadedBlueprint, only: Iterable[str] | None = None) -> list[Finding]:
    """Run every rule (or the ids in ``only``) on ``loaded``; findings sorted by position."""
    ctx = RuleContext(loaded, catalog())
    wanted = set(only) if only is not None else None
    findings: list[Finding] = []
    for r in all_rules():
        if wanted is not None and r.id not in wanted:
            continue
        try:
            for hit in r.check(ctx):
                findings.append(loaded.finding(r.id, r.severity, hit.message, hit.fix or r.fix, r.source, hit.path))
        except Exception as e:  # noqa: BLE001 - a rule bug must not hide the other findings or crash the CLI
            findings.append(loaded.finding("internal-rule-error", "error", f"rule {r.id} failed: {type(e).__name__}: {e}",
                                           "report this as a clusterforge bug; rerun with --debug", r.source, ()))
    findings.sort(key=lambda f: (f.line, f.col, f.rule_id))
    return findings
