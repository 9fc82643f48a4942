"""The validation suites, registered in one place: :data:`REGISTRY`.

Each suite is one module here (:mod:`.node`, :mod:`.nccl`, :mod:`.fio`, :mod:`.amp`, :mod:`.profile`) holding one
:class:`~validate.suites.base.Suite` subclass that plans its tests, builds its payload's arguments,
judges its raw outputs and describes and plots its results. The runner, the judge, the reports,
the launchers and the CLI find a suite by its name here and know none by name themselves.

Every list that depends on the suites is derived from the registry: the payload files launchers
and ``clusterforge render`` copy (:func:`payload_files`), the kind of a raw output
(:func:`detect_kind`, from each suite's markers), the thresholds each suite judges with (its
``thresholds_type``, read from the blueprint's ``validation.<name>.thresholds``).

Adding a suite: write ``validate/suites/<name>.py`` (a :class:`Suite` subclass and its
:class:`~validate.plan.TestParams` dataclass; its payload file under ``validate/payloads/``) and
register an instance below (``docs/adding-a-suite.md`` lists every file a newcomer touches).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from blueprints.errors import UsageError

from ..expectations import register_source, unregister_source
from ..parsers.detect import window
from ..results import JudgeResult, Verdict
from .amp import AmpSuite
from .base import DETECT_MIN_POINTS, GroupPlan, HtmlSection, Placement, RanksSuite, Suite
from .fio import FioSuite
from .nccl import NcclSuite
from .node import NodeSuite
from .profile import ProfileSuite

__all__ = [
    "REGISTRY",
    "GroupPlan",
    "HtmlSection",
    "Placement",
    "RanksSuite",
    "Suite",
    "compared",
    "detect_kind",
    "detect_suite",
    "find_suite",
    "get_suite",
    "payload_files",
    "register",
    "suite_names",
    "summary",
    "unregister",
]

REGISTRY: dict[str, Suite] = {}
"""Suite name -> suite, in run order (suites with ``runs_first`` run before the others whatever their place)."""


def register(suite: Suite) -> Suite:
    """Add ``suite`` under ``suite.name`` (after the ones registered before); returns it. The judge
    context asks it for its expectations from then on (:func:`validate.expectations.register_source`).

    Raises ``ValueError`` when the name is taken or is not a lower-case word (``[a-z][a-z0-9_]*``: it
    becomes a test-id prefix, a file name and a JUnit suite name)."""
    import re

    if not re.fullmatch(r"[a-z][a-z0-9_]*", suite.name):
        raise ValueError(f"suite name {suite.name!r}: use a lower-case word ([a-z][a-z0-9_]*)")
    if suite.name in REGISTRY:
        raise ValueError(f"suite {suite.name!r} is already registered")
    REGISTRY[suite.name] = suite
    register_source(suite)
    return suite


def unregister(name: str) -> None:
    """Remove suite ``name`` (tests that register a suite of their own clean up with this)."""
    REGISTRY.pop(name, None)
    unregister_source(name)


def suite_names() -> tuple[str, ...]:
    """Registered suite names in run order."""
    return tuple(REGISTRY)


def find_suite(name: str) -> Suite | None:
    """The suite called ``name``, or ``None``."""
    return REGISTRY.get(name)


def get_suite(name: str) -> Suite:
    """The suite called ``name``. Raises :class:`~blueprints.errors.UsageError` naming the known suites."""
    suite = REGISTRY.get(name)
    if suite is None:
        raise UsageError(f"unknown suite {name!r}; choose from {', '.join(REGISTRY)}")
    return suite


def payload_files() -> dict[str, Path]:
    """``{file name: path}`` of every registered suite's payload files, in registry order: what the
    launchers stage next to their scripts and ``clusterforge render`` copies beside the Ansible roles."""
    out: dict[str, Path] = {}
    for suite in REGISTRY.values():
        out.update(suite.payload_files())
    return out


def detect_suite(text: str, filename: str | None = None) -> Suite | None:
    """The registered suite whose raw output ``text`` is, or ``None``; never raises.

    Looks at :func:`~validate.parsers.detect.window` of the text, asking the suites in registry
    order: first a JSON document naming its kind (:meth:`Suite.names_itself`), then a format
    signature (:meth:`Suite.recognises`), then the most marker points (:meth:`Suite.marker_points`,
    ``filename`` breaking ties; the earlier suite on a tie) when they reach
    :data:`~validate.suites.base.DETECT_MIN_POINTS`."""
    win = window(text)
    suites = list(REGISTRY.values())
    for ask in (lambda s: s.names_itself(win), lambda s: s.recognises(win)):
        hit = next((s for s in suites if ask(s)), None)
        if hit is not None:
            return hit
    if not suites:
        return None
    name = filename or ""
    points = {s.name: s.marker_points(win, name) for s in suites}
    best = max(suites, key=lambda s: points[s.name])  # the earlier suite on a tie
    return best if points[best.name] >= DETECT_MIN_POINTS else None


def detect_kind(text: str, filename: str | None = None) -> str | None:
    """The name of :func:`detect_suite`'s suite (``nccl``, ``fio``, ``amp``, ``node`` ...) or ``None``."""
    suite = detect_suite(text, filename)
    return suite.name if suite is not None else None


def compared(r: JudgeResult) -> bool:
    """Whether ``r`` was held against an expectation (a ratio to a derived or declared figure), as its
    suite judges (:meth:`Suite.compared`; without a suite: a ``ratio`` or ``busbw_gbps`` was recorded).
    A ``pass`` that was not compared only says the test ran correctly; :func:`summary` says so."""
    suite = REGISTRY.get(r.kind)
    if suite is not None:
        return suite.compared(r)
    expected: Mapping[str, object] = r.expected  # a result of an unknown kind: its keys are not typed
    return any(expected.get(k) is not None for k in ("ratio", "busbw_gbps"))


def summary(r: JudgeResult) -> str:
    """One line for the console and the reports: ``r``'s key figure and its ratio to the expectation
    (its suite's :meth:`Suite.summary`), else its first reason or note; a ``pass`` that was not
    compared with an expectation says so."""
    suite = REGISTRY.get(r.kind)
    s = (suite.summary(r) if suite is not None else None) or (r.reasons[0] if r.reasons else (r.notes[0] if r.notes else ""))
    if r.verdict == Verdict.PASS and not compared(r) and s:
        s += " [not compared with an expectation: correctness only]"
    return s


for _suite in (NodeSuite(), NcclSuite(), FioSuite(), AmpSuite(), ProfileSuite()):
    register(_suite)
