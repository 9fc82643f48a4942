"""The status-line helpers of clusterforge/console.py print exactly what rich prints.

Each case runs in a fresh interpreter with the output on a pipe or on a pseudo-terminal and a given
environment, once through the helpers and once through the rich calls they stand for; the bytes
must be equal. The helpers must also skip rich in the common cases (a pipe; a colour terminal),
which is their point: `clusterforge check` then does not import it.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MESSAGES = [
    "blueprints/examples/a.yaml:3:5: rule-id: message — set `x: 1`",
    "unicode ✓ ✗ é 漢字 → ok",
    "markup [red]red[/red] and [bold]",
    "an emoji :smile: code",
    "not an emoji :no_such_emoji_here: but shaped like one",
    "path a:b:c and url https://example.com:443/x",
    "tab\there",
    "escape \x1b[31m inside",
    "",
]

SCRIPT = r"""
import json, sys
impl, which, side = sys.argv[1], sys.argv[2], sys.argv[3]
msgs = json.loads(sys.stdin.read())
from clusterforge import console as c
direct = []
def ref(name, msg):
    from rich.console import Console
    from rich.text import Text
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if name == "marked":
        out.print(Text.assemble(("! ", "yellow"), msg))
    elif name == "line":
        out.print(msg, style="red", markup=False)
    elif name == "ok":
        out.print(f"[green]✓[/green] {msg}")
    elif name == "warn":
        err.print(f"[yellow]![/yellow] {msg}", markup=True)
    elif name == "fail":
        err.print("[red]✗[/red] ", end="")
        err.print(msg, markup=False)
def new(name, msg):
    c._CONSOLES.clear()
    {"marked": lambda: c.marked("! ", "yellow", msg), "line": lambda: c.line(msg, "red"), "ok": lambda: c.ok(msg),
     "warn": lambda: c.warn(msg), "fail": lambda: c.fail(msg)}[name]()
    direct.append(not c._CONSOLES)
names = ["marked", "line", "ok"] if which == "out" else ["warn", "fail"]
for name in names:
    for msg in msgs:
        (ref if impl == "ref" else new)(name, msg)
open(side, "w").write(json.dumps(direct))
"""

ENVS = [
    {},
    {"FORCE_COLOR": "1"},
    {"FORCE_COLOR": ""},
    {"NO_COLOR": "1", "FORCE_COLOR": "1"},
    {"TERM": "dumb"},
    {"TTY_COMPATIBLE": "0"},
    {"TTY_COMPATIBLE": "1"},
    {"COLORTERM": "truecolor"},
    {"TERM": "xterm-256color"},
    {"TERM": "xterm-16color", "COLUMNS": "20"},
]


def _run(impl: str, which: str, tty: bool, env_extra: dict[str, str], side: Path) -> bytes:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLORTERM", "COLUMNS")}
    env["TERM"] = "xterm"
    env.update(env_extra)
    args = [sys.executable, "-c", SCRIPT, impl, which, str(side)]
    stream = "stdout" if which == "out" else "stderr"
    if not tty:
        res = subprocess.run(args, input=json.dumps(MESSAGES).encode(), capture_output=True, cwd=REPO, env=env,
                             timeout=120, check=True)
        return getattr(res, stream)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, cwd=REPO, env=env,
                                **{stream: slave}, **({"stderr": subprocess.DEVNULL} if stream == "stdout" else {}))
        os.close(slave)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(MESSAGES).encode())
        proc.stdin.close()
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(master)
    return b"".join(chunks).replace(b"\r\n", b"\n")  # the terminal's output processing (onlcr)


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize("env", ENVS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "plain")
@pytest.mark.parametrize("which", ["out", "err"])
def test_helpers_print_what_rich_prints(tmp_path: Path, tty: bool, env: dict[str, str], which: str) -> None:
    ref = _run("ref", which, tty, env, tmp_path / "ref.json")
    new = _run("new", which, tty, env, tmp_path / "new.json")
    assert new == ref
    direct = json.loads((tmp_path / "new.json").read_text())
    plain = [m.isprintable() and "[" not in m and ":" not in m for m in MESSAGES]
    n = len(direct) // len(MESSAGES)
    if not env or env.get("TERM") == "xterm-256color" or env == {"COLORTERM": "truecolor"}:
        # the common cases: a pipe or a colour terminal; plain messages skip rich
        assert all(d for d, p in zip(direct, plain * n, strict=True) if p), direct
    if tty and not env:
        assert b"\x1b[" in ref  # the terminal case really printed colours


def test_main_pauses_the_collector_only_while_a_short_verb_runs() -> None:
    import gc

    from clusterforge.cli import _short_run, main

    assert _short_run(["check", "x.yaml"]) and _short_run(["--help"]) and _short_run([]) and _short_run(["plan", "--help"])
    assert not _short_run(["plan", "x.yaml"]) and not _short_run(["validate", "x.yaml"])
    assert gc.isenabled()
    assert main(["rules"]) == 0
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that turned it off keeps it off
        assert main(["rules"]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
