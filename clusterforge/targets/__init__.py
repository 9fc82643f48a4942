"""Deploy targets as plug-ins, registered by ``target.provider``.

:data:`TARGETS` is the one place a target is registered: provider name -> module path. The module
defines ``TARGET``, an instance of a :class:`~clusterforge.targets.base.Target` subclass. Modules
are imported on first use, so ``clusterforge --help`` and ``check`` never pay for a target's
dependencies (Pulumi, Ansible). Adding a target: docs/architecture.md, "Adding a target".
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from blueprints.errors import UsageError

from .base import DeployOptions, Plan, Target

if TYPE_CHECKING:
    from blueprints import LoadedBlueprint

__all__ = ["TARGETS", "DeployOptions", "Plan", "Target", "checked_target", "plan", "target_for"]

TARGETS: dict[str, str] = {
    "aws": "clusterforge.targets.aws",
    "onprem": "clusterforge.targets.onprem",
}
"""``target.provider`` -> module that defines ``TARGET`` (the registry)."""


def target_for(provider: str) -> Target:
    """The registered target of ``provider`` (a blueprint's ``target.provider``).

    Raises :class:`UsageError` for a provider no module is registered for.
    """
    module = TARGETS.get(provider)
    if module is None:
        raise UsageError(f"target.provider `{provider}` has no registered target — "
                         f"use one of {', '.join(sorted(TARGETS))}")
    target: Target = import_module(module).TARGET
    return target


def checked_target(loaded: LoadedBlueprint) -> Target:
    """The target of ``loaded`` after its :meth:`Target.preflight` found no error.

    Raises :class:`blueprints.findings.BlueprintInvalid` with the preflight's findings (printed like
    ``check``'s, ``FILE:LINE:COL: rule-id: message — fix``) when one is an error.
    """
    from blueprints.findings import BlueprintInvalid

    target = target_for(loaded.blueprint.target.provider)
    findings = target.preflight(loaded)
    if any(f.severity == "error" for f in findings):
        raise BlueprintInvalid(findings)
    return target


def plan(loaded: LoadedBlueprint) -> Plan:
    """Plan ``loaded`` with its target (:meth:`Target.plan`): what ``up`` would do, offline.
    Raises :class:`blueprints.findings.BlueprintInvalid` when the target's preflight fails."""
    return checked_target(loaded).plan(loaded)
