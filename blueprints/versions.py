"""Version strings as comparable tuples: the one parser rules, settings and renderers share."""

from __future__ import annotations

import re

__all__ = ["version", "vstr"]


def version(text: str | None) -> tuple[int, ...] | None:
    """``"v0.5.6"`` / ``"2.21.5-1"`` / ``"550.54.14"`` -> ``(0, 5, 6)`` etc.; ``None`` if no number."""
    if not text:
        return None
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", str(text))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def vstr(v: tuple[int, ...]) -> str:
    """``(2, 18, 0)`` -> ``"2.18.0"``."""
    return ".".join(str(x) for x in v)
