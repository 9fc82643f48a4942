"""Bounds on what the parsers read from an untrusted raw output or results file.

Raw outputs come from nodes and programs that may be broken or hostile, and results files may be
edited by hand, so every parser reads them within fixed bounds:

* :data:`MAX_INPUT_CHARS`: an input longer than this is cut (:func:`clip_input`);
* :data:`MAX_LINE_CHARS`: a line longer than this is skipped by the line parsers (:func:`too_long`)
  and never handed to a regular expression (every pattern then costs at most time linear in
  :data:`MAX_LINE_CHARS` per line, whatever the line holds); :func:`iter_lines` reads a file's lines
  in chunks and never holds more of a line than that (a file is parsed in memory flat in its size);
* :data:`MAX_JSON_DEPTH`: a JSON document nested deeper than this is refused (:func:`loads`,
  :func:`decode_at`, :class:`JsonLimitError`) instead of exhausting the interpreter's stack;
* :func:`decode_at` and :class:`ScanBudget`: the work spent on attempts to decode JSON documents
  in mixed text is at most a fixed multiple of the text's length.

What a parser leaves unread is recorded with :func:`note_unread`; :func:`collecting_unread` collects
those notes (the judge adds them to its results), outside it they are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_LINE_CHARS",
    "JsonLimitError",
    "ScanBudget",
    "clip_input",
    "collecting_unread",
    "decode_at",
    "iter_lines",
    "loads",
    "nesting_depth",
    "note_unread",
    "too_long",
]

MAX_INPUT_CHARS = 256 * 1024 * 1024
"""Most characters of one raw output or results file that are read (256 Mi). A full
``NCCL_DEBUG=INFO`` log of a thousand-GPU job stays below it; beyond it the rest is not read."""

MAX_LINE_CHARS = 16384
"""Longest line (characters) the line parsers read (16 Ki). nccl-tests, fio and tool output lines
are at most a few hundred characters; a longer line is skipped, with a note, and never reaches a
regular expression. JSON documents are decoded whole, whatever their line lengths."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a JSON document (fio, nccl-tests ``-J``, AMP,
node-health and results documents nest at most 8 deep). Deeper documents are refused with
:class:`JsonLimitError` rather than exhausting the interpreter's recursion limit."""

_SCAN_FACTOR = 16
_SCAN_FLOOR = 4 << 20


class JsonLimitError(json.JSONDecodeError):
    """A JSON document over a bound (nesting deeper than :data:`MAX_JSON_DEPTH`, or longer than
    :data:`MAX_INPUT_CHARS`). A :class:`json.JSONDecodeError` (so a ``ValueError``): callers that skip
    undecodable documents skip it; ``str(e)`` is one line naming the bound."""

    def __init__(self, msg: str, doc: str, pos: int) -> None:
        super().__init__(msg, doc, pos)
        self.reason = msg

    def __str__(self) -> str:
        return f"{self.reason} (line {self.lineno})"

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.reason, self.doc, self.pos)


_UNREAD: ContextVar[list[str] | None] = ContextVar("clusterforge_unread", default=None)
_MAX_NOTES = 20


def note_unread(message: str) -> None:
    """Record that a parser left part of its input unread (``message``: one line, for a person).
    Kept only inside :func:`collecting_unread`; at most 20 distinct messages."""
    notes = _UNREAD.get()
    if notes is not None and message not in notes and len(notes) < _MAX_NOTES:
        notes.append(message)


@contextmanager
def collecting_unread() -> Iterator[list[str]]:
    """Collect the :func:`note_unread` messages of the parsers run inside the ``with`` block into the
    list it yields (nested blocks collect separately)."""
    notes: list[str] = []
    token = _UNREAD.set(notes)
    try:
        yield notes
    finally:
        _UNREAD.reset(token)


def clip_input(text: str) -> str:
    """``text``, or its first :data:`MAX_INPUT_CHARS` characters (cut after the last whole line) with a
    :func:`note_unread` note when it is longer."""
    if len(text) <= MAX_INPUT_CHARS:
        return text
    cut = text.rfind("\n", 0, MAX_INPUT_CHARS)
    note_unread(f"the output is {len(text):,} characters long: only the first {MAX_INPUT_CHARS:,} were read")
    return text[: cut + 1 if cut > 0 else MAX_INPUT_CHARS]


def too_long(line: str) -> bool:
    """True when ``line`` is longer than :data:`MAX_LINE_CHARS` (the caller skips it)."""
    return len(line) > MAX_LINE_CHARS


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""The characters :meth:`str.splitlines` ends a line at (``\\r\\n`` counts as one break)."""

CHUNK_CHARS = 1 << 16
"""Characters :func:`iter_lines` reads at a time (64 Ki)."""


def iter_lines(read: Callable[[int], str], *, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines of a text read in chunks by ``read(n)`` (a text file's ``read``, opened with ``newline=""``;
    ``""`` at the end), without their line breaks: exactly the lines :meth:`str.splitlines` gives of the
    whole text, in order.

    A line over ``limit`` characters is yielded cut to ``limit + 1`` characters (so :func:`too_long` is
    true of it and the caller skips it); the rest of it is read and dropped. Memory: one chunk
    (:data:`CHUNK_CHARS`) and one line of at most ``limit + 1`` characters, whatever the text's size; time
    linear in it. Raises what ``read`` raises (``OSError``, ``UnicodeDecodeError``)."""
    pending = ""  # the start of a line the chunks read so far have not ended (at most limit + 1 characters)
    cap = limit + 1
    while True:
        chunk = read(CHUNK_CHARS)
        if not chunk:
            break
        parts = (pending + chunk).splitlines(keepends=True)
        last = parts.pop()
        # a line ends at its break; a "\r" at the end of a chunk may be the first half of "\r\n"
        if last[-1] in LINE_BREAKS and last[-1] != "\r":
            parts.append(last)
            pending = ""
        else:
            pending = last if len(last) <= cap else last[:cap] + ("\r" if last[-1] == "\r" else "")
        for part in parts:
            yield (part if len(part) <= cap + 2 else part[:cap]).rstrip(LINE_BREAKS)[:cap]
    if pending:
        yield pending.rstrip(LINE_BREAKS)


def long_lines_note(count: int, first: int) -> str:
    """The note for ``count`` skipped over-long lines, the first at line ``first`` (1-based)."""
    return (f"{count} line(s) longer than {MAX_LINE_CHARS:,} characters not read (the first is line {first}): "
            "no benchmark prints such lines")


def nesting_depth(obj: Any) -> int:
    """Deepest nesting of lists and dicts in ``obj`` (a scalar is 0, ``[]`` is 1); iterative, so any
    depth is measured without recursion. Time linear in the number of containers and items."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        cur, d = stack.pop()
        if isinstance(cur, dict):
            items: Any = cur.values()
        elif isinstance(cur, (list, tuple)):
            items = cur
        else:
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in items if isinstance(x, (dict, list, tuple)))
    return deepest


def _may_nest_deeper(text: str, max_depth: int) -> bool:
    """False when ``text`` (a JSON document) holds at most ``max_depth`` opening brackets, so it cannot nest
    deeper: the walk of :func:`nesting_depth` is then skipped (counting is some 50x faster)."""
    return text.count("[") + text.count("{") > max_depth


def _too_deep(doc: str, pos: int, max_depth: int) -> JsonLimitError:
    return JsonLimitError(f"JSON nested deeper than {max_depth} levels: not read", doc, pos)


_FIRST_SLICE = 256


def decode_at(decoder: json.JSONDecoder, text: str, start: int, budget: ScanBudget, *, what: str = "JSON",
              max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, int] | None:
    """The JSON document that starts at ``text[start]``, as ``(document, end index)``; ``None`` when none
    does. Never raises.

    Decodes growing slices of ``text`` (256 characters, then doubled while the document runs past the
    slice), so a failed attempt costs time in what it read rather than in the text's length, and
    charges what it read to ``budget`` (``None`` once it is spent). A document nested deeper than
    ``max_depth`` is ``None`` too, with a :func:`note_unread` note naming ``what``.
    """
    size = _FIRST_SLICE
    n = len(text)
    while budget.left > 0:
        stop = min(n, start + size)
        piece = text[start:stop]
        budget.charge(len(piece))
        try:
            doc, end = decoder.raw_decode(piece)
        except RecursionError:
            note_unread(f"{what}: a document nested deeper than {max_depth} levels was not read")
            return None
        except json.JSONDecodeError as e:
            # a slice that cut a token reports the error at the token's start: at most 8 characters back, for
            # "-Infinity" (9 characters, the longest token Python's decoder reads whole) cut after its 8th
            if stop < n and (e.pos >= len(piece) - 8 or e.msg.startswith("Unterminated string")):
                size *= 2  # the slice cut the document: read more of it
                continue
            return None
        except ValueError as e:  # an integer over Python's digit limit
            note_unread(f"{what}: a document with a number too long to read was not read ({e})")
            return None
        if isinstance(doc, (dict, list)) and _may_nest_deeper(piece[:end], max_depth) and nesting_depth(doc) > max_depth:
            note_unread(f"{what}: a document nested deeper than {max_depth} levels was not read")
            return None
        return doc, start + end
    return None


def loads(text: str, *, max_depth: int = MAX_JSON_DEPTH, max_chars: int = MAX_INPUT_CHARS, **kwargs: Any) -> Any:
    """``json.loads(text, **kwargs)`` within the bounds.

    Raises :class:`json.JSONDecodeError` for text that is not one JSON document, and its subclass
    :class:`JsonLimitError` for a text longer than ``max_chars`` characters or a document nested
    deeper than ``max_depth`` (both ``ValueError``; the message is one line).
    """
    if len(text) > max_chars:
        raise JsonLimitError(f"JSON document of {len(text):,} characters, over the {max_chars:,} read", text[:0], 0)
    try:
        doc = json.loads(text, **kwargs)
    except RecursionError:
        raise _too_deep(text, 0, max_depth) from None
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # an integer over Python's digit limit
        raise JsonLimitError(f"JSON number too long to read ({e})", text, 0) from None
    if isinstance(doc, (dict, list)) and _may_nest_deeper(text, max_depth) and nesting_depth(doc) > max_depth:
        raise _too_deep(text, 0, max_depth)
    return doc


class ScanBudget:
    """How many characters the JSON decode attempts in one text may read in all:
    ``16 x len(text) + 4 Mi``. A parser that tries a decode at every candidate start would otherwise
    take time quadratic in the text (``[1,[1,[1,...`` fails at the end, from every start). Once it is
    spent, :func:`decode_at` finds nothing more and a :func:`note_unread` note says so."""

    def __init__(self, text: str) -> None:
        self.left = _SCAN_FACTOR * len(text) + _SCAN_FLOOR

    @property
    def exhausted(self) -> bool:
        """True once the attempts have read the budget."""
        return self.left <= 0

    def charge(self, chars: int) -> None:
        """Count ``chars`` characters read by an attempt."""
        was = self.left > 0
        self.left -= max(chars, 1)
        if was and self.left <= 0:
            note_unread("the output holds too much text that starts like JSON but does not decode: the rest of "
                        "it was not searched for documents")
