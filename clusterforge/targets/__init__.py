"""Deploy targets as plug-ins, registered by ``target.provider`` in one place: :data:`TARGETS`.

:data:`TARGETS` maps a provider name (a blueprint's ``target.provider``) to the
:class:`~clusterforge.targets.base.Target` that serves it. Each target is one module of this
package holding one ``Target`` subclass; the two built-in ones are registered at the bottom of
this file, another one with :func:`register`. A target module imports what it drives (Pulumi,
ansible-runner) inside its methods, so importing this package costs a few standard-library
modules, and ``clusterforge --help`` / ``check`` never import it at all (``tests/architecture``).
Adding a target: ``docs/adding-a-target.md``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from blueprints.errors import UsageError

from .aws import AwsTarget
from .base import DeployOptions, Plan, Target
from .onprem import OnpremTarget

if TYPE_CHECKING:
    from blueprints import LoadedBlueprint

__all__ = [
    "TARGETS",
    "DeployOptions",
    "Plan",
    "Target",
    "checked_target",
    "plan",
    "register",
    "target_for",
    "unregister",
]

TARGETS: dict[str, Target] = {}
"""``target.provider`` -> the target serving it (the registry; filled by :func:`register`)."""


def register(target: Target, *, replace: bool = False) -> Target:
    """Serve blueprints whose ``target.provider`` is ``target.provider`` with ``target``; returns it.

    Raises ``TypeError`` when ``target`` is not a :class:`Target`, ``ValueError`` when its
    ``provider`` is not a lower-case word (``[a-z][a-z0-9_-]*``), its ``render_dir`` is not one
    path component, or the provider is taken (unless ``replace``).
    """
    if not isinstance(target, Target):
        raise TypeError(f"{target!r} is not a clusterforge.targets.Target")
    provider = getattr(target, "provider", "")
    if not isinstance(provider, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", provider):
        raise ValueError(f"target provider {provider!r}: use a lower-case word ([a-z][a-z0-9_-]*)")
    render_dir = getattr(target, "render_dir", "")
    if not isinstance(render_dir, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", render_dir):
        raise ValueError(f"target {provider!r}: render_dir {render_dir!r} must be one directory name")
    if provider in TARGETS and not replace:
        raise ValueError(f"target provider {provider!r} is already registered ({type(TARGETS[provider]).__name__})")
    TARGETS[provider] = target
    return target


def unregister(provider: str) -> None:
    """Remove the target of ``provider`` (tests that register a target of their own clean up with this)."""
    TARGETS.pop(provider, None)


def target_for(provider: str) -> Target:
    """The registered target of ``provider`` (a blueprint's ``target.provider``).

    Raises :class:`UsageError` for a provider no target is registered for.
    """
    target = TARGETS.get(provider)
    if target is None:
        raise UsageError(f"target.provider `{provider}` has no registered target — "
                         f"use one of {', '.join(sorted(TARGETS))}")
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


# ---- the registered targets (one line each) -------------------------------------------------
register(AwsTarget())
register(OnpremTarget())
