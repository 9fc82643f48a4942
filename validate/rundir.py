"""The results folder of a validation run under faults: one run at a time, damaged lines, safe writes.

* :class:`RunLock`: an exclusive ``fcntl.flock`` on ``DIR/.clusterforge.lock`` (created with
  ``O_NOFOLLOW``, never inherited by the payloads), holding the holder's pid, host and start time. A
  second run on the folder stops with one line naming the holder (:class:`FolderBusy`); the kernel
  drops the lock of a process that died, however it died, so a stale lock file is simply taken over.
* :func:`read_results` reads ``results.jsonl`` line by line within the bounds of
  :mod:`validate.parsers.bounds` and returns the intact lines and the damaged ones (:class:`Damaged`:
  line number, reason, the test it covered when that can be told); :func:`quarantine` moves the
  damaged lines out of ``results.jsonl`` into ``results.quarantine.jsonl`` (atomically, nothing lost).
* :func:`append_lines` appends with ``O_APPEND | O_NOFOLLOW`` and fsyncs; :func:`remove_stale_temps`
  removes the temporary files a killed writer left (``.NAME.XXXX.tmp`` of
  :func:`validate.untrusted.write_atomic`).
* :func:`disk_error_message`: the one line for a full disk or a folder that cannot be written, naming
  the path and how to continue.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from blueprints.errors import UsageError

from .parsers.bounds import MAX_INPUT_CHARS, MAX_LINE_CHARS
from .parsers.bounds import loads as bounded_loads
from .untrusted import open_nofollow, read_nofollow, write_atomic

__all__ = [
    "DISK_ERRNOS",
    "LOCK_NAME",
    "QUARANTINE",
    "Damaged",
    "FolderBusy",
    "RunLock",
    "append_lines",
    "disk_error_message",
    "line_test_id",
    "quarantine",
    "read_results",
    "remove_stale_temps",
]

LOCK_NAME = ".clusterforge.lock"
"""The lock file in a results folder (hidden: a folder holding only it counts as empty)."""
QUARANTINE = "results.quarantine.jsonl"
"""Where damaged ``results.jsonl`` lines go: one JSON object per line ``{"line", "reason", "test_id", "text"}``."""
HIDDEN = (LOCK_NAME,)
"""Files of the run machinery that do not make a folder non-empty."""
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)
"""Errors of a folder that cannot take more data (full, over quota, read-only, not writable)."""


class FolderBusy(UsageError):
    """Another run holds the folder's lock. ``str``: one line naming the holder."""


class RunLock:
    """Exclusive lock of a results folder for one run (``with RunLock(dir, "validate"):``).

    :meth:`acquire` creates the folder's lock file without following a symbolic link
    (``O_NOFOLLOW``; a link there is refused), takes ``flock(LOCK_EX | LOCK_NB)`` and writes
    ``{"pid", "host", "started", "command"}`` into it; when another process holds it, raises
    :class:`FolderBusy` naming that holder. The descriptor is close-on-exec, so payloads never hold it;
    the lock ends with the process (a kill included), so a lock file left by a dead run is taken over.
    The file stays after :meth:`release` (removing it would let two runs lock different files).
    """

    def __init__(self, folder: Path, command: str = "validate") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command
        self.fd: int | None = None

    def holder(self) -> str:
        """Who holds the lock, as the lock file says (``pid N on HOST since T``)."""
        try:
            info = bounded_loads(read_nofollow(self.path, 4096).decode("utf-8", errors="replace"))
            return (f"`clusterforge {info.get('command', '?')}` pid {info.get('pid', '?')} on {info.get('host', '?')} "
                    f"since {info.get('started', '?')}")
        except (OSError, ValueError, AttributeError):
            return "another process (its lock file says no more)"

    def acquire(self, *, wait: bool = False) -> Self:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UsageError(f"{self.path}: is a symbolic link; remove it (the lock file of a results folder is "
                                 "never followed)") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderBusy(f"{self.folder}: in use by {self.holder()}; wait for it to end or stop it, then run "
                             "again (one run per results folder)") from None
        except BaseException:
            os.close(fd)
            raise
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its description is missing
        self.fd = fd
        return self

    def try_acquire(self) -> bool:
        """:meth:`acquire` without raising when the folder is busy: False then."""
        try:
            self.acquire()
        except FolderBusy:
            return False
        return True

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------------------------------------
# damaged lines
# ---------------------------------------------------------------------------------------------


@dataclass
class Damaged:
    """A ``results.jsonl`` line that is not a result: ``line`` (1-based), ``reason``, ``test_id`` (the
    test it covered, from its text or its neighbours; ``None`` when it cannot be told), ``text`` (the
    line, cut at 64 Ki characters) and ``last`` (it is the file's last line and has no newline: a
    write cut off)."""

    line: int
    reason: str
    text: str
    test_id: str | None = None
    last: bool = False
    neighbours: tuple[str, ...] = ()

    def describe(self) -> str:
        what = "cut-off last line" if self.last else "damaged line"
        test = f" (test {self.test_id})" if self.test_id else (
            f" (its test is not named; next to {' and '.join(self.neighbours)})" if self.neighbours else "")
        return f"results.jsonl:{self.line}: {what}{test}: {self.reason}"

    def covers(self) -> set[str]:
        """The tests this line may have recorded a result of: its own, else its neighbours'."""
        return {self.test_id} if self.test_id else set(self.neighbours)

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason, "test_id": self.test_id,
                "neighbours": list(self.neighbours), "cut_off": self.last, "text": self.text[:65536]}


_TEST_ID = re.compile(r'"test_id":\s?"([A-Za-z0-9_.:@-]{1,200})"')
_LABEL = re.compile(r'"label":\s?"([A-Za-z0-9_.:@-]{1,200}?)(?::\s|")')


def line_test_id(d: dict[str, Any]) -> str | None:
    """The test id a results.jsonl line belongs to: ``test_id``, else the label before ``": "``."""
    if isinstance(d.get("test_id"), str):
        return str(d["test_id"])
    if isinstance(d.get("label"), str):
        return str(d["label"]).split(": ", 1)[0]
    return None


def _guess_test(text: str) -> str | None:
    head = text[:MAX_LINE_CHARS * 4]
    m = _TEST_ID.search(head) or _LABEL.search(head)
    return m.group(1) if m else None


def read_results(path: Path, *, valid: Any = None) -> tuple[list[dict[str, Any]], list[Damaged]]:
    """``(lines, damaged)`` of a ``results.jsonl``: the JSON objects, and every line that is not one
    (undecodable, over the bounds, not an object, or refused by ``valid(obj)`` which returns a reason or
    ``None``), each named with the test it covered when its text or its neighbours tell. Never raises for
    the content; ``OSError`` when the file cannot be read. Reads at most ``MAX_INPUT_CHARS`` bytes."""
    if not path.exists():
        return [], []
    data = read_nofollow(path, MAX_INPUT_CHARS)
    over = len(data) > MAX_INPUT_CHARS
    data = data[:MAX_INPUT_CHARS]
    raw_lines = data.split(b"\n")
    ends_clean = data.endswith(b"\n") and not over
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    out: list[dict[str, Any]] = []
    damaged: list[Damaged] = []
    order: list[tuple[str, Any]] = []  # ("ok", test) or ("bad", Damaged), for neighbours
    for i, bline in enumerate(raw_lines):
        text = bline.decode("utf-8", errors="replace")
        if not text.strip():
            continue
        last = i == len(raw_lines) - 1 and not ends_clean
        reason: str | None = None
        d: Any = None
        try:
            d = bounded_loads(text)
        except ValueError as e:
            reason = f"not JSON ({str(e).splitlines()[0][:200]})"
        if reason is None and not isinstance(d, dict):
            reason = "not a JSON object"
        if reason is None and valid is not None:
            reason = valid(d)
        if reason is not None and last:
            reason = f"the last line is cut off (a write was interrupted): {reason}"
        if reason is not None:
            dmg = Damaged(line=i + 1, reason=reason, text=text, test_id=_guess_test(text), last=last)
            damaged.append(dmg)
            order.append(("bad", dmg))
        else:
            out.append(d)
            order.append(("ok", line_test_id(d)))
    if over:
        damaged.append(Damaged(line=len(raw_lines) + 1, reason=f"the file is over {MAX_INPUT_CHARS:,} bytes: the rest "
                                                             "was not read", text="", last=True))
    for k, (kind, item) in enumerate(order):
        if kind != "bad" or item.test_id:
            continue
        near = [t for j in (k - 1, k + 1) if 0 <= j < len(order) and order[j][0] == "ok" and (t := order[j][1])]
        item.neighbours = tuple(dict.fromkeys(near))
    return out, damaged


def append_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """Append JSON lines to ``path`` (created) with ``O_APPEND | O_NOFOLLOW`` (a symbolic link there is
    refused, never followed) and fsync, so a kill right after keeps them."""
    data = "".join(json.dumps(d) + "\n" for d in lines).encode("utf-8")
    with open_nofollow(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def quarantine(path: Path, lines: list[dict[str, Any]], damaged: list[Damaged]) -> Path | None:
    """Move ``damaged`` lines out of ``path`` (a ``results.jsonl`` read by :func:`read_results` into
    ``lines``): they are appended to ``results.quarantine.jsonl`` next to it first (fsynced), then
    ``path`` is rewritten atomically with ``lines`` alone, so a kill between the two loses nothing.
    Returns the quarantine file, or ``None`` when there was nothing to move."""
    if not damaged:
        return None
    q = path.parent / QUARANTINE
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    append_lines(q, [{**d.to_json(), "moved": now} for d in damaged])
    write_atomic(path, "".join(json.dumps(d) + "\n" for d in lines), root=path.parent)
    return q


def remove_stale_temps(folder: Path) -> list[Path]:
    """Remove the temporary files killed writers left in ``folder`` (``.NAME.XXXX.tmp``, and the old
    ``NAME.tmp`` names); call it holding the folder's :class:`RunLock`. Returns what was removed."""
    gone: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return gone
    for e in entries:
        if e.name.endswith(".tmp") and (e.name.startswith(".") or e.name in ("run.json.tmp", "results.jsonl.tmp")):
            try:
                if e.is_file() or e.is_symlink():
                    e.unlink()
                    gone.append(e)
            except OSError:
                pass
    return gone


def is_disk_error(e: BaseException) -> bool:
    """True for an ``OSError`` of a folder that cannot take more data (:data:`DISK_ERRNOS`)."""
    return isinstance(e, OSError) and e.errno in DISK_ERRNOS


def disk_error_message(e: OSError, *, where: Path, resume: str) -> str:
    """One line: what could not be written (the path), why, and ``resume`` (the command to continue)."""
    path = e.filename or where
    why = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exhausted",
           errno.EROFS: "the file system is read-only", errno.EFBIG: "the file is over the size limit"}.get(
        e.errno or 0, e.strerror or str(e))
    fix = ("free space there" if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
           else "make it writable")
    return f"cannot write {path}: {why}; {fix}, then continue with `{resume}` (the finished results are kept)"
