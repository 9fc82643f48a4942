"""Reading a raw validation output as text, and the window that kind detection looks at.

:func:`read_text` reads a file as text and refuses binary data; :func:`window` is the part of a
(possibly huge) output that detection searches. Which suite an output belongs to is each suite's
own business (its markers, :class:`validate.suites.Suite`); :func:`validate.suites.detect_kind`
asks every registered suite.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["WINDOW_BYTES", "NotText", "read_text", "window"]

WINDOW_BYTES = 262144
"""Detection looks at the first and the last this many characters of an output (256 Ki) when it is
longer than twice that: headers and footers say what an output is, the middle is repeated rows."""


class NotText(ValueError):
    """The file is binary (NUL bytes or not decodable as UTF-8/Latin-1 text)."""


def read_text(path: Path) -> str:
    """The text of ``path``. Raises ``NotText`` for binary content, ``OSError`` when unreadable."""
    data = path.read_bytes()
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


def window(text: str) -> str:
    """``text``, or its first and last :data:`WINDOW_BYTES` characters joined by a newline when it is
    longer than twice that."""
    if len(text) <= 2 * WINDOW_BYTES:
        return text
    return text[:WINDOW_BYTES] + "\n" + text[-WINDOW_BYTES:]
