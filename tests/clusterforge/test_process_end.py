"""How the console script's process ends after a short verb (``clusterforge.cli._end_process``).

The process skips the interpreter's teardown once the output is written; these tests run a fresh
interpreter the way the console script does (``sys.exit(main())`` with ``argv`` None) and check what
a user depends on: every byte of the output arrives, the exit status is the command's, registered
exit handlers still run, a live thread is still waited for, and a closed pipe is reported as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterforge.cli import main
from tests.conftest import EXAMPLES

SCRIPT = "import sys; from clusterforge.cli import main; sys.exit(main())"
"""What the console-script wrapper runs."""


def run_cli(*args: str, prelude: str = "", **kw) -> subprocess.CompletedProcess[bytes]:
    """``clusterforge ARGS`` in a fresh interpreter, with ``prelude`` run first in the same process."""
    code = (prelude + "\n" if prelude else "") + SCRIPT
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=120, check=False, **kw)


def test_a_large_output_arrives_whole_and_the_exit_status_is_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    expected = capsys.readouterr().out.encode()
    assert len(expected) > 65536  # more than one pipe buffer: the last writes must be flushed before the end
    out = run_cli("schema")
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected
    assert json.loads(out.stdout)["title"]


def test_check_keeps_its_exit_status_and_its_lines(tmp_path: Path) -> None:
    ok = run_cli("check", str(EXAMPLES / "aws-p5-efa-lustre.yaml"))
    assert ok.returncode == 0 and ok.stdout.decode().startswith("✓ ") and ok.stdout.endswith(b"\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: clusterforge/v1\nkind: Blueprint\nname: x\n")
    failed = run_cli("check", str(bad))
    assert failed.returncode == 1, failed
    assert f"{bad}:".encode() in failed.stdout and failed.stdout.endswith(b"\n")


def test_exit_handlers_still_run() -> None:
    out = run_cli("rules", prelude="import atexit; atexit.register(lambda: print('exit handler ran', file=sys.stderr))")
    assert out.returncode == 0
    assert b"exit handler ran" in out.stderr


def test_a_live_thread_is_waited_for() -> None:
    # the thread waits for the main thread to finish the command (a fixed sleep raced a slow start under load:
    # the thread printed before the command did); it prints only if the process waits for live threads
    prelude = ("import sys, threading\n"
               "def late():\n    threading.main_thread().join(); print('thread finished', flush=True)\n"
               "threading.Thread(target=late).start()")
    out = run_cli("rules", prelude=prelude)
    assert out.returncode == 0
    assert out.stdout.rstrip().endswith(b"thread finished")


def test_a_failed_flush_falls_back_to_the_normal_exit() -> None:
    """When stdout cannot be flushed for another reason than a reader that went away (here a full disk),
    the process ends the normal way, which reports the unwritable stream as any Python program does
    (status 120). The prelude's exit handler breaks stdout's flush after the command has written."""
    prelude = ("import atexit, io, sys\n"
               "class Full(io.StringIO):\n"
               "    def flush(self):\n        raise OSError(28, 'No space left on device')\n"
               "def swap():\n    sys.stdout.flush(); sys.stdout = Full()\n"
               "atexit.register(swap)")
    out = run_cli("rules", prelude=prelude)
    assert out.returncode == 120, out
    assert b"No space left on device" in out.stderr
    assert b"lustre" in out.stdout.lower()  # what the command printed before was written


@pytest.mark.parametrize("args", [
    ["check", str(EXAMPLES / "aws-p5-efa-lustre.yaml")],  # one status line, written by the console helper
    ["check", "--json", str(EXAMPLES / "aws-p5-efa-lustre.yaml")],  # buffered until the process ends
    ["plan", str(EXAMPLES / "aws-p5-efa-lustre.yaml")],  # rich's table
    ["rules"],
], ids=["check", "check-json", "plan", "rules"])
def test_a_reader_that_went_away_is_status_141_not_a_verdict(args: list[str]) -> None:
    """`clusterforge check X | head`: the reader closes the pipe early. The exit status is 141, as for a
    command that SIGPIPE ends, never `check`'s 1 ("invalid"), and nothing is printed about it."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        out = subprocess.run([sys.executable, "-c", SCRIPT, *args], stdout=write_end, stderr=subprocess.PIPE,
                             timeout=120, check=False)
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert out.stderr == b""


def test_a_plan_leaves_no_thread_behind() -> None:
    """The mock engine's worker threads end with the plan run, so the console script's process can end
    as soon as `plan` has printed (a 4,096-instance plan's teardown took about 5 s)."""
    import threading

    from blueprints import load_blueprint
    from clusterforge.plan import plan_aws

    before = set(threading.enumerate())
    for _ in range(2):  # a second run in the same process gets a loop of its own
        result = plan_aws(load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml"))
        assert result.resources
        assert set(threading.enumerate()) <= before
