"""Reading a raw validation output as text, and the window that kind detection looks at.

:func:`read_text` reads a file as text and refuses binary data; :func:`window` is the part of a
(possibly huge) output that detection searches. Which suite an output belongs to is each suite's
own business (its markers, :class:`validate.suites.Suite`); :func:`validate.suites.detect_kind`
asks every registered suite.
"""

from __future__ import annotations

import re
from pathlib import Path

from .bounds import MAX_INPUT_CHARS, MAX_LINE_CHARS

__all__ = ["MAX_INPUT_BYTES", "WINDOW_BYTES", "NotText", "read_text", "window"]

WINDOW_BYTES = 262144
"""Detection looks at the first and the last this many characters of an output (256 Ki) when it is
longer than twice that: headers and footers say what an output is, the middle is repeated rows."""


MAX_INPUT_BYTES = MAX_INPUT_CHARS
"""Largest raw output file read (bytes, 256 MiB; :data:`validate.parsers.bounds.MAX_INPUT_CHARS`): a
bigger file is refused by :func:`read_text` before it is read."""


class NotText(ValueError):
    """The file is binary (NUL bytes or not decodable as UTF-8/Latin-1 text), or over :data:`MAX_INPUT_BYTES`."""


def read_text(path: Path) -> str:
    """The text of ``path``. Raises ``NotText`` for binary content or a file over :data:`MAX_INPUT_BYTES`
    (one-line messages), ``OSError`` when unreadable."""
    with open(path, "rb") as f:
        data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise NotText(f"{path}: over {MAX_INPUT_BYTES // (1024 * 1024)} MiB, more than a raw benchmark output holds; "
                      "cut it to the run you want judged (e.g. with `tail -c 100M`)")
    head = data[:65536]
    if b"\x00" in head:
        raise NotText(f"{path}: binary data (NUL bytes), not a benchmark output")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        ctrl = sum(1 for b in head if b < 9 or 13 < b < 32)
        if ctrl > len(head) // 100 + 1:
            raise NotText(f"{path}: binary data, not a benchmark output") from None
        return data.decode("latin-1")


_LONG_OR_BLANK = re.compile(rf"(?m)^(?:[^\n]{{{MAX_LINE_CHARS + 1}}}[^\n]*+|(?:[^\S\n]*+\n)++)")


def window(text: str) -> str:
    """What detection searches: ``text``, or its first and last :data:`WINDOW_BYTES` characters joined by a
    newline when it is longer than twice that; lines over :data:`~validate.parsers.bounds.MAX_LINE_CHARS`
    are cut to that length and blank lines are left out, so that the suites' markers (searched with
    ``(?m)^``) cost time linear in the window. Linear in the length of ``text``."""
    if len(text) > 2 * WINDOW_BYTES:
        text = text[:WINDOW_BYTES] + "\n" + text[-WINDOW_BYTES:]
    return _LONG_OR_BLANK.sub(lambda m: "" if m.group().endswith("\n") else m.group()[:MAX_LINE_CHARS], text)
