"""Judge raw validation outputs against what the declared hardware should deliver.

Entry points: :func:`judge_file` and :func:`judge_text` (a file may hold several nccl-tests runs,
several fio jobs, several AMP results: one :class:`~validate.results.JudgeResult` each), plus
:func:`worst` and :func:`exit_code_for` over verdicts.

The kind of an output (``nccl``, ``fio``, ``amp``, ...) is detected from its text by the
registered suites' own markers (:func:`validate.suites.detect_kind`) unless given; the suite of that name
(:data:`validate.suites.REGISTRY`) judges it. What each suite checks, and in which order, is in
its module's docstring (:mod:`validate.suites.nccl`, :mod:`validate.suites.fio`,
:mod:`validate.suites.amp`, :mod:`validate.suites.node`).

Verdicts (:class:`~validate.results.Verdict`): ``pass``; ``warn`` (works, degraded or anomalous);
``fail`` (wrong data, far below expectation, crashed); ``invalid`` (the test cannot say anything:
one rank, duplicated rank 0, no result table, unknown content). Every non-pass reason names what
was measured, what was expected and why, and the likely cause and fix when one is known.

A file is judged as it is streamed where its format allows (:meth:`~validate.suites.Suite.judge_raw`: the
nccl-tests text parser reads it line by line, never whole), so judging a log of tens of megabytes takes
memory flat in its size; its kind is detected from its first and last 256 KiB.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .expectations import JudgeContext
from .parsers.bounds import MAX_INPUT_CHARS, collecting_unread
from .results import VERDICTS, JudgeResult, Verdict, exit_code_for, fmt_bytes, worst
from .suites import REGISTRY, Suite, detect_kind, detect_suite, find_suite
from .suites.base import UnreadableInput, open_raw_input

__all__ = [
    "VERDICTS",
    "JudgeResult",
    "UnreadableInput",
    "Verdict",
    "detect_kind",
    "exit_code_for",
    "file_kinds",
    "file_suite",
    "fmt_bytes",
    "judge_file",
    "judge_text",
    "worst",
]


def file_kinds() -> tuple[str, ...]:
    """Names of the registered suites whose raw outputs can be judged with a hardware context alone
    (``clusterforge judge --kind``): ``nccl``, ``fio``, ``amp``."""
    return tuple(name for name, s in REGISTRY.items() if s.judges_files)


def file_suite(path: Path) -> Suite | None:
    """The registered suite whose raw output ``path`` holds (:func:`~validate.suites.detect_suite`), or
    ``None`` for anything unreadable or unrecognised (the judge then says why). Never raises."""
    p = Path(path)
    try:
        return detect_suite(open_raw_input(p).window(), p.name)
    except (UnreadableInput, OSError):
        return None


def judge_file(path: Path, ctx: JudgeContext, *, kind: str | None = None, label: str | None = None) -> list[JudgeResult]:
    """Judge the raw output at ``path``: one :class:`JudgeResult` per run / job / AMP result.

    ``kind`` (a suite of :func:`file_kinds`) skips detection: content that does not parse as that
    kind gives one ``invalid`` result. Without ``kind``, undetectable content raises. ``label``
    prefixes each result's label. Raises :class:`UnreadableInput` (a usage error, exit 2) for a
    missing path, a directory, binary data, a file over 256 MiB, or (without ``kind``) content of
    unknown kind.

    The file is read by its suite (:meth:`~validate.suites.Suite.judge_raw`): streamed line by line where
    the format allows, so memory stays flat in its size; detection reads its first and last 256 KiB.
    """
    p = Path(path)
    raw = open_raw_input(p)
    try:
        if kind is None:
            if not raw.first_char():
                raise UnreadableInput(f"{p}: empty file; nothing to judge (pass --kind to judge it as a run that printed "
                                      "nothing)")
            kind = detect_kind(raw.window(), p.name)
            if kind is None:
                raise UnreadableInput(
                    f"{p}: not a nccl-tests, fio or AMP benchmark output (no table, job or result found); "
                    f"pass --kind {'|'.join(file_kinds())} to judge it anyway")
        suite = find_suite(kind)
        if suite is None:
            raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(file_kinds())}")
        return _judged(kind, lambda: suite.judge_raw(raw, ctx, source=str(p), label=label),
                       source=str(p), label=label)
    except OSError as e:  # removed or made unreadable while it was read
        raise UnreadableInput(f"{p}: cannot read: {e.strerror or e}") from None


def judge_text(text: str, ctx: JudgeContext, *, source: str, kind: str | None = None,
               label: str | None = None) -> list[JudgeResult]:
    """Judge raw output ``text`` (named ``source`` in the results). ``kind`` as in :func:`judge_file`;
    without it the kind is detected, and undetectable text gives one ``invalid`` result of kind
    ``unknown``. Raises ``ValueError`` for a ``kind`` that is no registered suite; never raises for
    bad content.

    Untrusted content is read within the bounds of :mod:`validate.parsers.bounds`: a text over
    ``MAX_INPUT_CHARS`` characters gives one ``invalid`` result; what the parsers leave unread (lines
    over ``MAX_LINE_CHARS``, JSON nested deeper than ``MAX_JSON_DEPTH``) is a reason of the ``invalid``
    results and a note on the others. Time is linear in the length of ``text``."""
    name = Path(source).name
    if len(text) > MAX_INPUT_CHARS:
        r = JudgeResult(source=source, kind=kind or "unknown", label=label or name)
        r.degrade(Verdict.INVALID, f"the output is {len(text):,} characters long, over the {MAX_INPUT_CHARS:,} a raw "
                                   "benchmark output may have: not read")
        return [r]
    if kind is None:
        kind = detect_kind(text, name)
    if kind is None:
        r = JudgeResult(source=source, kind="unknown", label=label or name)
        r.degrade(Verdict.INVALID, "no recognisable benchmark output (nccl-tests table, fio job or AMP result)")
        return [r]
    suite = find_suite(kind)
    if suite is None:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(file_kinds())}")
    return _judged(kind, lambda: suite.judge_text(text, ctx, source=source, label=label),
                   source=source, label=label)


def _judged(kind: str, judge: Callable[[], list[JudgeResult]], *, source: str,
            label: str | None) -> list[JudgeResult]:
    """``judge()`` (the suite ``kind`` judging one output), with what its parsers left unread as reasons of the
    ``invalid`` results and notes on the others; a parser that recursed too deep gives one ``invalid`` result."""
    with collecting_unread() as unread:
        try:
            results = judge()
        except RecursionError:  # a parser that recursed into hostile nesting: the bounds should prevent it
            r = JudgeResult(source=source, kind=kind, label=label or Path(source).name)
            r.degrade(Verdict.INVALID, "the output nests its data too deeply to be read")
            return [r]
    for r in results:
        for note in unread:
            if r.verdict == Verdict.INVALID:
                r.degrade(Verdict.INVALID, f"not read: {note}")
            else:
                r.note(f"not read: {note}")
    return results
