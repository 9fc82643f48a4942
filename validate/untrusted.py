"""Writing what untrusted outputs say: Markdown escaping, HTML links and files written into an output folder.

Benchmark outputs and results files are data from machines and people the reader of a report does not
control, so a value from them

* is escaped before it goes into Markdown (:func:`md_text`, :func:`md_code`): it can neither format
  the page nor carry raw HTML;
* becomes a link only when it is an ``http(s)`` URL or a file inside the results folder
  (:func:`safe_href`); anything else (``javascript:``, ``data:``, a path outside) is shown as text;

and the report and render writers never write through a symbolic link (:func:`write_atomic`): each file
is written to a temporary file in the same folder and moved over the old one with :func:`os.replace`,
which replaces a link instead of following it, and a folder on the way that leads out of the output
folder is refused (:class:`UnsafeOutputPath`).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit

__all__ = ["UnsafeOutputPath", "md_code", "md_text", "open_nofollow", "read_nofollow", "safe_href", "write_atomic"]

_UNSAFE_URL_CHARS = re.compile(r"[\s\x00-\x1f\x7f\\\"'<>`]")
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~<>&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_text(value: object) -> str:
    """``value`` as inline Markdown text that renders as itself: the characters that start Markdown or
    HTML inside a line (``\\ ` * [ ] | ~ < > &``, and ``_`` except between letters or digits, where it
    cannot start emphasis: ``all_reduce`` stays as it is) backslash-escaped (CommonMark renders an escaped
    punctuation character literally, so no tag, entity, link, image, emphasis, code span or table cell
    can start), line breaks and other control characters as spaces."""
    text = "".join(" " if (ord(c) < 32 or ord(c) == 127) else c for c in str(value))
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: object) -> str:
    """``value`` as a Markdown code span (rendered verbatim, never as HTML): fenced with one backtick more
    than its longest run of backticks, line breaks as spaces."""
    text = "".join(" " if (ord(c) < 32 or ord(c) == 127) else c for c in str(value))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def safe_href(target: str | os.PathLike[str] | None, *, base: Path | None = None,
              inside: tuple[Path, ...] = ()) -> str | None:
    """An ``href`` for ``target`` when it may be one, else ``None`` (the caller shows it as text).

    An absolute ``http://`` or ``https://`` URL with a host is returned as it is. A local path (a
    ``Path``, or a string without a URL scheme) is accepted when it names an existing file that resolves
    inside one of the ``inside`` folders; it is then written relative to ``base`` (the folder of the page),
    percent-encoded and starting with ``./`` or ``../``, so no part of it can read as a scheme. Anything
    else (``javascript:``, ``data:``, ``file:``, a file outside the folders) is ``None``.
    """
    if target is None:
        return None
    if isinstance(target, str):
        parts = urlsplit(target)
        if parts.scheme:
            if parts.scheme.lower() in ("http", "https") and parts.netloc and not _UNSAFE_URL_CHARS.search(target):
                return target
            return None
    if base is None or not inside:
        return None
    try:
        path = Path(target).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    roots = [r.resolve() for r in inside]
    if not path.is_file() or not any(path == r or r in path.parents for r in roots):
        return None
    rel = os.path.relpath(path, base.resolve())
    rel_url = "/".join(quote(part, safe="") for part in Path(rel).parts)
    return rel_url if rel_url.startswith("../") else "./" + rel_url


class UnsafeOutputPath(OSError):
    """A write would go through a symbolic link (or ``..``) to a place outside its output folder. An
    ``OSError`` whose ``str`` is one line naming the path and the folder."""


def _check_inside(path: Path, root: Path) -> None:
    """Raise :class:`UnsafeOutputPath` when ``path``'s folder does not resolve to ``root`` or below it."""
    real_root = root.resolve()
    parent = path.parent.resolve()
    if parent != real_root and real_root not in parent.parents:
        raise UnsafeOutputPath(f"{path}: its folder leads to {parent}, outside the output folder {root} "
                               "(a symbolic link or ..); not written — remove the link or choose another folder")


def open_nofollow(path: Path, mode: str = "wb") -> IO[Any]:
    """``open(path, mode)`` (``"wb"`` or ``"ab"``) that refuses a symbolic link at ``path`` (``O_NOFOLLOW``:
    ``OSError`` ELOOP) instead of writing through it; close-on-exec, so only the caller holds it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if mode == "ab" else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o644), mode)


def read_nofollow(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` (so a caller sees that a file is over ``limit``), refusing a
    symbolic link there (``O_NOFOLLOW``: ``OSError`` ELOOP). Raises ``OSError`` when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


def write_atomic(path: Path, data: str | bytes, *, root: Path | None = None, mode: int | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` without ever writing through a symbolic link.

    The data goes to a new temporary file in ``path``'s folder, which then replaces ``path`` with
    :func:`os.replace`: a reader sees the old file or the new one, and a symbolic link at ``path`` is
    replaced, never followed. ``root`` (optional): the output folder; ``path``'s folder must resolve
    inside it, else :class:`UnsafeOutputPath` is raised and nothing is written. ``mode``: the file's
    permission bits (default ``0o666`` less the umask, as ``open`` would). Creates no folder. Raises
    ``OSError`` when the folder cannot be written. Returns ``path``.
    """
    path = Path(path)
    if root is not None:
        _check_inside(path, Path(root))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
