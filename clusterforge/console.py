"""The CLI's terminal output: one rich console for stdout and its stderr twin, and one-line status
helpers (:func:`ok`, :func:`warn`, :func:`fail`, :func:`marked`, :func:`line`).

``console`` and ``err_console`` are :class:`rich.console.Console` objects created on first use
(importing rich costs about 20 ms of a cold start). The status helpers write a line themselves
when the result is certain to be byte-for-byte what rich would print, and hand it to rich
otherwise, so ``clusterforge check`` never imports rich in the common cases:

* the text is printable (no control characters, tabs or newlines, which rich strips or expands),
  holds no ``[`` where markup is interpreted and nothing shaped like an emoji code (``:name:``);
* no rich console has been created in this process (a live display or a capture may be active on
  it), and the stream is not rich's proxy of a live display;
* the stream is not a terminal (rich then prints plain text), or it is a POSIX terminal that is not
  ``dumb``, with ``NO_COLOR`` unset: rich then wraps each coloured part in the standard SGR
  foreground code (``red`` 31, ``green`` 32, ``yellow`` 33) and the reset ``ESC[0m``, whatever its
  colour system (standard colours are not downgraded). "Terminal" follows rich's own test:
  ``TTY_COMPATIBLE`` (``0``/``1``), else ``FORCE_COLOR`` (set and non-empty), else ``isatty()``;
  IDLE and Jupyter always go through rich.

Sources: rich's ``Console.is_terminal`` / ``_detect_color_system`` and ``Style.render``
(https://github.com/Textualize/rich/blob/master/rich/console.py), ECMA-48 SGR colour codes
(https://ecma-international.org/publications-and-standards/standards/ecma-48/), the NO_COLOR
convention (https://no-color.org/) and FORCE_COLOR (https://force-color.org/).
``tests/clusterforge/test_console.py`` compares every helper with rich over these cases.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console

__all__ = ["console", "err_console", "fail", "line", "marked", "ok", "warn"]

_SGR = {"red": "31", "green": "32", "yellow": "33"}
"""SGR foreground codes rich writes for these standard colours."""

_EMOJI_LIKE = re.compile(r":\S*?:")
"""Anything rich's emoji replacement (``:name:``, ``:name-emoji:``) could act on."""

_CONSOLES: dict[bool, Console] = {}


def _rich_console(stderr: bool) -> Console:
    con = _CONSOLES.get(stderr)
    if con is None:
        from rich.console import Console

        con = _CONSOLES[stderr] = Console(stderr=stderr, highlight=False, soft_wrap=True)
    return con


def __getattr__(name: str) -> Any:
    if name == "console":
        return _rich_console(False)
    if name == "err_console":
        return _rich_console(True)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_terminal(stream: IO[str]) -> bool:
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _direct_mode(stream: IO[str]) -> bool | None:
    """``False``: write plain text; ``True``: write standard SGR colours; ``None``: leave it to rich."""
    if _CONSOLES or sys.platform == "win32" or hasattr(stream, "rich_proxied_file"):
        return None
    if hasattr(builtins, "get_ipython"):  # IPython or Jupyter
        return None
    stdin_module = getattr(sys.stdin, "__module__", "") or ""
    if stdin_module.startswith("idlelib"):
        return None
    if not _is_terminal(stream):
        return False
    if os.environ.get("TERM", "").lower() in ("dumb", "unknown") or os.environ.get("NO_COLOR", "") != "":
        return None
    return True


def _write(parts: list[tuple[str, str | None]], *, stderr: bool, markup: bool, emoji: bool) -> bool:
    """Write ``parts`` (text, colour) as one line when that is exactly what rich would print;
    returns False (nothing written) when rich must print it."""
    for text, style in parts:
        if not text.isprintable() or (style is not None and style not in _SGR):
            return False
        if (markup and "[" in text) or (emoji and _EMOJI_LIKE.search(text)):
            return False
    stream = sys.stderr if stderr else sys.stdout
    mode = _direct_mode(stream)
    if mode is None:
        return False
    out = "".join(f"\x1b[{_SGR[style]}m{text}\x1b[0m" if mode and style and text else text for text, style in parts)
    stream.write(out + "\n")
    stream.flush()
    return True


def marked(mark: str, style: str, text: str, *, stderr: bool = False) -> None:
    """Print ``mark`` in colour ``style`` followed by ``text`` taken literally (no markup, no emoji
    codes), as rich prints ``Text.assemble((mark, style), text)``."""
    if not _write([(mark, style), (text, None)], stderr=stderr, markup=False, emoji=False):
        from rich.text import Text

        _rich_console(stderr).print(Text.assemble((mark, style), text))


def line(text: str, style: str | None = None, *, stderr: bool = False) -> None:
    """Print ``text`` (markup not interpreted) in colour ``style`` (``red``, ``green``, ``yellow``)."""
    if not _write([(text, style)], stderr=stderr, markup=False, emoji=True):
        _rich_console(stderr).print(text, style=style, markup=False)


def ok(msg: str) -> None:
    """Print a green check line to stdout (rich markup in ``msg`` is interpreted)."""
    if not _write([("✓", "green"), (f" {msg}", None)], stderr=False, markup=True, emoji=True):
        _rich_console(False).print(f"[green]✓[/green] {msg}")


def warn(msg: str) -> None:
    """Print a yellow warning line to stderr (rich markup in ``msg`` is interpreted)."""
    if not _write([("!", "yellow"), (f" {msg}", None)], stderr=True, markup=True, emoji=True):
        _rich_console(True).print(f"[yellow]![/yellow] {msg}", markup=True)


def fail(msg: str) -> None:
    """Print a red error line to stderr (markup in ``msg`` is not interpreted)."""
    if not _write([("✗", "red"), (" ", None), (msg, None)], stderr=True, markup=False, emoji=True):
        con = _rich_console(True)
        con.print("[red]✗[/red] ", end="")
        con.print(msg, markup=False)
