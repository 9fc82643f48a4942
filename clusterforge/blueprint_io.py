"""Loading a blueprint for a command: load, run the rules, stop on errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blueprints import BlueprintInvalid, LoadedBlueprint, check, load_blueprint
from blueprints.findings import Finding

from .console import warn


def load_checked(path: str | Path, show_warnings: bool = True, invalid_exit: int = 1) -> LoadedBlueprint:
    """Load ``path`` and run every pre-deploy rule.

    Returns the loaded blueprint when no rule reports an error, with its resolved cluster built
    (``loaded.cluster``, :mod:`blueprints.resolved`: the one every verb's consumers read); warnings
    are printed to stderr (unless ``show_warnings`` is false). Raises :class:`BlueprintInvalid`
    with every error finding otherwise; its exit code is 2 when ``path`` names no readable file and
    ``invalid_exit`` for an invalid blueprint (``validate`` and ``judge`` pass 2: their 1 means the
    cluster fell short).
    """
    loaded, findings = findings_for(path)
    if loaded is None:
        raise BlueprintInvalid(findings, invalid_exit)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise BlueprintInvalid(errors, invalid_exit)
    if show_warnings:
        for f in findings:
            warn(f.format())
    loaded.cluster  # noqa: B018 - resolve once, after check; consumers get this cached object
    return loaded


def findings_for(path: str | Path) -> tuple[LoadedBlueprint | None, list[Finding]]:
    """Load and check ``path``; returns ``(loaded or None, findings)`` and never raises for bad input."""
    try:
        loaded = load_blueprint(path)
    except BlueprintInvalid as e:
        return None, e.findings
    return loaded, check(loaded)


def findings_document(path: str | Path, ok: bool, findings: list[Finding]) -> dict[str, Any]:
    """The JSON document of ``check --json`` (and of ``plan --json`` for a blueprint check refuses):
    ``{"file", "ok", "findings": [Finding.to_json() ...]}``."""
    return {"file": str(path), "ok": ok, "findings": [f.to_json() for f in findings]}
