"""Sniff what a raw validation output is: nccl-tests (text or JSON), fio (JSON or text) or AMP JSON.

:func:`detect_kind` looks at the text only (plus the file name as a tie-breaker); it is cheap
(regular expressions over the first and last 256 KiB) and never raises. :func:`read_text`
reads a file as text and refuses binary data.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["KINDS", "NotText", "detect_kind", "read_text"]

KINDS = ("nccl", "fio", "amp")
"""Result kinds: collective benchmarks, storage benchmarks, AMP training benchmark."""


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


_MARKERS: dict[str, list[tuple[re.Pattern[str], int]]] = {}
"""Weighted text markers per kind; the best-scoring kind wins (nccl on a tie), at 4 points or more."""
_NAME_HINTS = {"nccl": ("nccl", "_perf", "collective"), "fio": ("fio",)}
"""File-name parts worth one point (the tie-breaker)."""

_MARKERS["nccl"] = [
    (re.compile(r"nThread\s+\d+\s+nGpus\s+\d+"), 5),
    (re.compile(r"Using devices"), 2),
    (re.compile(r"Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+\S+\s+device"), 4),
    (re.compile(r"size\s+count\s+type"), 4),
    (re.compile(r"Avg bus bandwidth\s*:"), 5),
    (re.compile(r"Out of bounds values\s*:"), 5),
    (re.compile(r"Collective test (?:starting|concluded)"), 5),
    (re.compile(r"nccl-tests version"), 5),
    (re.compile(r"Test (?:CUDA |NCCL )?failure \S+\.cu:\d+"), 5),
    (re.compile(r"(?m)^(?:\S*\s)?\s*\d+\s+\d+\s+(?:float|double|half|bfloat16|int8|uint8|int32|uint32|int64|uint64)"
                r"\s+(?:\w+\s+)?(?:-?\d+\s+)?[\d.eE+-]+\s+[\d.eE+-]+\s+[\d.eE+-]+\s+(?:\d\S*|N/A)"), 4),
    (re.compile(r"\b(?:all_reduce|all_gather|alltoall|reduce_scatter|sendrecv|broadcast)_perf\b"), 2),
]
_MARKERS["fio"] = [
    (re.compile(r"\(groupid=\d+, jobs=\d+\): err="), 5),
    (re.compile(r"\(g=\d+\): rw=\w+"), 5),
    (re.compile(r"Run status group \d+"), 5),
    (re.compile(r"\b(?:read|write)\s*:\s*IOPS="), 4),
    (re.compile(r"verify failed at file"), 5),
    (re.compile(r"(?m)^fio-\d"), 4),
    (re.compile(r"fio: pid=\d+, err=\d+"), 5),
    (re.compile(r"verify: bad magic header"), 5),
]


def _window(text: str) -> str:
    if len(text) <= 524288:
        return text
    return text[:262144] + "\n" + text[-262144:]


def detect_kind(text: str, filename: str | None = None) -> str | None:
    """``"nccl"``, ``"fio"``, ``"amp"`` or ``None`` for ``text`` (a raw output).

    JSON documents are recognised by their keys (``"kind": "amp"``; ``"fio version"``/``"jobs"``;
    nccl-tests ``-J``: ``"results"`` with ``"config"``/``"nccl_version"``). Text by weighted markers
    (nccl-tests header, table and footer lines; fio job, IO and verify lines); the file name
    (``*nccl*``, ``*fio*``, ``*amp*``) breaks ties.
    """
    win = _window(text)
    if re.search(r'"kind"\s*:\s*"amp"', win):
        return "amp"
    if re.search(r'"fio version"\s*:', win) or (re.search(r'"jobs"\s*:', win) and '"jobname"' in win):
        return "fio"
    if re.search(r'"results"\s*:', win) and re.search(r'"(?:nccl_version|config|out_of_bounds)"\s*:', win):
        return "nccl"
    name = (filename or "").lower()
    scores = {kind: sum(w for rx, w in markers if rx.search(win))
              + any(part in name for part in _NAME_HINTS[kind]) for kind, markers in _MARKERS.items()}
    best = max(scores, key=scores.__getitem__)  # the first kind (nccl) on a tie
    return best if scores[best] >= 4 else None
