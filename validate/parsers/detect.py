"""Reading a raw validation output as text, and the window that kind detection looks at.

:func:`open_raw` opens a file as text (refusing binary data) for reading it whole
(:meth:`RawText.read`, :func:`read_text`) or streaming its lines (:meth:`RawText.lines`: memory flat in
the file's size); :func:`window` is the part of a (possibly huge) output that detection searches, and
:meth:`RawText.window` the same part read from the file's head and tail only. Which suite an output belongs to is each suite's
own business (its markers, :class:`validate.suites.Suite`); :func:`validate.suites.detect_kind`
asks every registered suite.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .bounds import MAX_INPUT_CHARS, MAX_LINE_CHARS, iter_lines

__all__ = ["MAX_INPUT_BYTES", "WINDOW_BYTES", "NotText", "RawText", "open_raw", "read_text", "window"]

WINDOW_BYTES = 262144
"""Detection looks at the first and the last this many characters of an output (256 Ki) when it is
longer than twice that: headers and footers say what an output is, the middle is repeated rows."""


MAX_INPUT_BYTES = MAX_INPUT_CHARS
"""Largest raw output file read (bytes, 256 MiB; :data:`validate.parsers.bounds.MAX_INPUT_CHARS`): a
bigger file is refused by :func:`read_text` before it is read."""


class NotText(ValueError):
    """The file is binary (NUL bytes or not decodable as UTF-8/Latin-1 text), or over :data:`MAX_INPUT_BYTES`."""


_HEAD_BYTES = 65536
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class RawText:
    """A raw output file checked to be text (:func:`open_raw`): ``path``, its ``size`` in bytes and the
    ``encoding`` it is read with (``utf-8``, or ``latin-1`` when it is not valid UTF-8)."""

    path: Path
    size: int
    encoding: str

    def read(self) -> str:
        """The whole text (memory: the file's size, 1-4 bytes per character). Raises ``OSError``."""
        with open(self.path, encoding=self.encoding, newline="") as f:
            return f.read()

    def lines(self) -> Iterator[str]:
        """The text's lines, read in chunks: those of ``read().splitlines()``, a line over
        :data:`~validate.parsers.bounds.MAX_LINE_CHARS` cut to one character more
        (:func:`~validate.parsers.bounds.iter_lines`). Memory flat in the file's size. Raises ``OSError``."""
        with open(self.path, encoding=self.encoding, newline="") as f:
            yield from iter_lines(f.read)

    def first_char(self) -> str:
        """The first character that is not white space (``""`` for a blank file): ``{`` or ``[`` starts a
        JSON document. Reads only as far as that character. Raises ``OSError``."""
        with open(self.path, encoding=self.encoding, newline="") as f:
            while chunk := f.read(_HEAD_BYTES):
                if stripped := chunk.lstrip():
                    return stripped[0]
        return ""

    def excerpt(self) -> str:
        """The whole text when the file is at most twice :data:`WINDOW_BYTES` bytes, else its first and last
        :data:`WINDOW_BYTES` bytes joined by a newline (headers and footers: what says what an output is, or
        that the payload died). Raises ``OSError``."""
        with open(self.path, "rb") as f:
            if self.size <= 2 * WINDOW_BYTES:
                return f.read().decode(self.encoding)
            head = f.read(WINDOW_BYTES)
            f.seek(self.size - WINDOW_BYTES)
            tail = f.read(WINDOW_BYTES)
        # a character cut at either edge is dropped, not misread
        return head.decode(self.encoding, errors="ignore") + "\n" + tail.decode(self.encoding, errors="ignore")

    def window(self) -> str:
        """:func:`window` of the text, read from :meth:`excerpt` only. Raises ``OSError``."""
        return window(self.excerpt())


def open_raw(path: Path) -> RawText:
    """``path`` checked to be a text file no bigger than :data:`MAX_INPUT_BYTES`, and how to decode it.

    Reads the file once, in 1 MiB pieces, to tell UTF-8 from Latin-1 (memory flat in its size). Raises
    ``NotText`` for binary content (NUL bytes in the first 64 KiB; or not UTF-8 and more than 1% control
    characters there) or a file over :data:`MAX_INPUT_BYTES` (one-line messages), ``OSError`` when unreadable.
    """
    p = Path(path)
    with open(p, "rb") as f:
        size = f.seek(0, 2)
        if size > MAX_INPUT_BYTES:
            raise NotText(f"{p}: over {MAX_INPUT_BYTES // (1024 * 1024)} MiB, more than a raw benchmark output holds; "
                          "cut it to the run you want judged (e.g. with `tail -c 100M`)")
        f.seek(0)
        head = f.read(_HEAD_BYTES)
        if b"\x00" in head:
            raise NotText(f"{p}: binary data (NUL bytes), not a benchmark output")
        decoder = codecs.getincrementaldecoder("utf-8")()
        piece = head
        encoding = "utf-8"
        try:
            while piece:
                decoder.decode(piece)
                piece = f.read(_READ_BYTES)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            encoding = "latin-1"
    if encoding != "utf-8":
        ctrl = sum(1 for b in head if b < 9 or 13 < b < 32)
        if ctrl > len(head) // 100 + 1:
            raise NotText(f"{p}: binary data, not a benchmark output")
    return RawText(p, size, encoding)


def read_text(path: Path) -> str:
    """The text of ``path`` (:func:`open_raw`, then :meth:`RawText.read`). Raises ``NotText`` for binary
    content or a file over :data:`MAX_INPUT_BYTES` (one-line messages), ``OSError`` when unreadable."""
    return open_raw(path).read()


_LONG_OR_BLANK = re.compile(rf"(?m)^(?:[^\n]{{{MAX_LINE_CHARS + 1}}}[^\n]*+|(?:[^\S\n]*+\n)++)")


def window(text: str) -> str:
    """What detection searches: ``text``, or its first and last :data:`WINDOW_BYTES` characters joined by a
    newline when it is longer than twice that; lines over :data:`~validate.parsers.bounds.MAX_LINE_CHARS`
    are cut to that length and blank lines are left out, so that the suites' markers (searched with
    ``(?m)^``) cost time linear in the window. Linear in the length of ``text``."""
    if len(text) > 2 * WINDOW_BYTES:
        text = text[:WINDOW_BYTES] + "\n" + text[-WINDOW_BYTES:]
    return _LONG_OR_BLANK.sub(lambda m: "" if m.group().endswith("\n") else m.group()[:MAX_LINE_CHARS], text)
