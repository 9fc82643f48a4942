"""The ``clusterforge`` command line.

Verbs live one per module in :mod:`clusterforge.commands`; each module has ``register(app)``.
Errors are reported in two tiers: a :class:`~clusterforge.errors.ClusterforgeError` or an
invalid blueprint prints one line per problem (exit 1, 2 or 3), anything else prints one
"internal error" line; ``--debug`` (anywhere on the line) or ``CLUSTERFORGE_DEBUG=1`` shows
the traceback instead.
"""

from __future__ import annotations

import atexit
import errno
import gc
import os
import sys
import threading
import typing
from importlib import import_module
from typing import Any

import typer

from blueprints.findings import BlueprintInvalid

from .errors import ClusterforgeError

# Only typer and the error classes are imported here: each verb imports what it needs when it runs,
# so `clusterforge --help` and `check` start fast (bench/bench_cli_startup.py;
# tests/architecture/test_cli_imports.py keeps heavy modules out of this import).

COMMAND_MODULES = ["check", "schema", "rules", "plan", "cost", "render", "up", "validate", "judge", "report"]
"""Modules under clusterforge.commands that register verbs (missing ones are skipped)."""

def _click_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """ClickException / Abort classes of the click that typer uses: its vendored copy
    (``typer._click`` in recent releases) or else the ``click`` package."""
    errors: list[type[BaseException]] = []
    aborts: list[type[BaseException]] = []
    for modname in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = import_module(modname)
        except ImportError:
            continue
        errors.append(mod.ClickException)
        if hasattr(mod, "Abort"):
            aborts.append(mod.Abort)
        break  # typer uses one of them; importing the other click would only cost start-up time
    aborts.append(typer.Abort)
    aborts.append(EOFError)
    return tuple(errors), tuple(aborts)


_CLICK_ERRORS, _CLICK_ABORT = _click_classes()

app = typer.Typer(
    name="clusterforge",
    help="Declarative infrastructure-as-code for AI clusters: check, plan, render, deploy and validate GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from blueprints.version import __version__

        print(f"clusterforge {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error instead of its one-line "
                               "message (anywhere on the line, any verb; or CLUSTERFORGE_DEBUG=1)."),
) -> None:
    """clusterforge: one typed blueprint for cloud and bare-metal GPU clusters."""


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            mod = import_module(f"clusterforge.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"clusterforge.commands.{name}":
                continue
            raise
        mod.register(app)


_register()


def _plain_help_types(cmd: Any) -> Any:
    """Show a list-valued parameter's type in ``--help`` as its element (``files... <path>``), not as the
    Python annotation typer prints (``<list[Path]>``). Returns ``cmd``."""
    for sub in [cmd, *getattr(cmd, "commands", {}).values()]:
        for param in getattr(sub, "params", []):
            desc = getattr(param, "type_descriptor", None)
            if desc is None or not getattr(desc, "is_list", False) or getattr(desc, "is_choice", False):
                continue
            args = typing.get_args(getattr(desc, "annotation", None))
            label = args[0].__name__.lower() if args and isinstance(args[0], type) else "value"
            label = {"str": "text", "int": "integer", "float": "number"}.get(label, label)
            param.display_type = lambda ctx, _label=label: f"<{_label}>"
    return cmd


def fail(msg: str) -> None:
    """:func:`clusterforge.console.fail`, imported when there is an error to print (rich is not free)."""
    from .console import fail as _fail

    _fail(msg)


SHORT_VERBS = frozenset({"check", "rules", "schema"})
"""Verbs that run in bounded time and memory (read one blueprint, print text): the cyclic garbage
collector is paused while they run (see :func:`main`)."""


UNCOLLECTED_VERBS = frozenset({"plan"})
"""Verbs whose console-script process ends without a cyclic garbage collection: ``plan`` leaves
about 900 objects of cyclic garbage per planned resource (the mock engine's outputs and tasks), and
collecting them (whenever the collector next runs, and once more in the interpreter's teardown,
which collects even with the collector disabled) costs about a quarter of the plan's CPU: 0.57 of
1.79 CPU s at 512 instances (``bench/bench_plan.py --cli``). The process ends right after printing
(:func:`_end_process`; the plan run leaves no thread behind), so the memory goes back to the OS either way."""


EXIT_BROKEN_PIPE = 141
"""Exit status when the program reading the output closed it early (``clusterforge check X | head``):
128 + SIGPIPE, what a command the signal ends reports, so a ``pipefail`` script can tell it from a
verb's own 1 ("invalid", "failed"). Python ignores SIGPIPE and raises :class:`BrokenPipeError`
instead, and click turns that into exit 1; see https://docs.python.org/3/library/signal.html#note-on-sigpipe."""


def _broken_pipe(exc: BaseException | None) -> bool:
    """True for the error of writing to a pipe whose reader is gone (``EPIPE``)."""
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def _verb(args: list[str]) -> str | None:
    """The first argument that is not an option (the verb), or None."""
    return next((a for a in args if not a.startswith("-")), None)


def _short_run(args: list[str]) -> bool:
    """True for ``--help``, ``--version`` and the :data:`SHORT_VERBS`."""
    verb = _verb(args)
    return verb is None or verb in SHORT_VERBS or "--help" in args or "--version" in args


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code.

    For a short run (:func:`_short_run`) the cyclic garbage collector is paused until the command
    returns: such a start mostly builds long-lived objects (modules, pydantic schemas and
    validators, the catalog) and leaves little cyclic garbage, and the collector's ~100 passes over
    the young objects cost ~5 % of a cold ``check`` (``bench/bench_cli_startup.py``). Memory stays
    bounded because the input is bounded (``blueprints.loader.MAX_BYTES``); objects are still freed
    by reference counting. Long verbs (``up``, ``validate`` ...) run with it as usual, except that
    the console script's own process (``argv`` None) runs the :data:`UNCOLLECTED_VERBS` with the
    collector off to the end: in-process callers that pass ``argv`` (tests) keep collecting.

    ``argv`` None means "this is the console script": after a short verb or ``plan`` the process then
    ends inside this call (:func:`_end_process`). A program that calls the CLI and goes on passes
    ``argv`` (a list), and always gets the exit code back.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("CLUSTERFORGE_DEBUG", "") not in ("", "0")
    if "--debug" in args:
        args.remove("--debug")
        debug = True
    if argv is None and gc.isenabled() and _verb(args) in UNCOLLECTED_VERBS:
        gc.disable()  # never re-enabled: this process ends after the command (UNCOLLECTED_VERBS)
        return _end_process(_run(args, debug))
    pause_gc = gc.isenabled() and _short_run(args)
    if pause_gc:
        gc.disable()
    try:
        code = _run(args, debug)
    finally:
        if pause_gc and argv is not None:
            gc.enable()
    return _end_process(code) if argv is None and _short_run(args) else code


def _end_process(code: int) -> int:
    """End the console script's process now, with exit status ``code``, skipping the interpreter's
    teardown; returns ``code`` (for the normal exit) when that is not safe.

    After a short verb (:func:`_short_run`) or an :data:`UNCOLLECTED_VERBS` verb has printed its
    output, what the interpreter would still do is free every module and object one by one and run
    a last full garbage collection (it runs even with the collector disabled): 35-70 ms of a cold
    ``check`` on the 2-core development machine (``bench/bench_cli_startup.py``), for memory the
    operating system takes back anyway. The registered exit handlers (:mod:`atexit`: logging's
    flush, temporary-file finalizers) still run, and stdout and stderr are flushed first. It returns
    instead when another thread is alive (the normal exit waits for non-daemon threads) or when a
    flush fails for another reason than a reader that went away (the normal exit reports it, status
    120); a reader that went away ends it with :data:`EXIT_BROKEN_PIPE`.
    """
    if threading.active_count() > 1:
        return code
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError as e:
        if not _broken_pipe(e):
            return code
        code = EXIT_BROKEN_PIPE  # the reader left before the last buffered output: nothing more can reach it
    except ValueError:
        return code
    os._exit(code & 0xFF)


def _run(args: list[str], debug: bool) -> int:
    try:
        rv = _plain_help_types(typer.main.get_command(app)).main(args=args, prog_name="clusterforge",
                                                                   standalone_mode=False)
        return int(rv or 0) if isinstance(rv, int) else 0
    except SystemExit as e:
        if _broken_pipe(e.__context__):
            return EXIT_BROKEN_PIPE  # click's answer to EPIPE: sys.exit(1), with stdout and stderr made quiet
        raise
    except typer.Exit as e:
        if e.exit_code == 130 and isinstance(e.__cause__, KeyboardInterrupt):
            fail("interrupted; results written so far are kept (rerun with --resume where supported)")
        return e.exit_code
    except _CLICK_ABORT:
        fail("aborted")
        return 130
    except _CLICK_ERRORS as exc:
        click_error: Any = exc  # a click ClickException: format_message(), ctx, exit_code
        if type(click_error).__name__.startswith("NoArgsIsHelp"):
            from .console import err_console

            err_console.print(click_error.format_message(), markup=False)
            return 2
        hint = ""
        ctx = getattr(click_error, "ctx", None)
        if ctx is not None:
            hint = f" (see `{ctx.command_path} --help`)"
        fail(f"usage: {click_error.format_message()}{hint}")
        return int(getattr(click_error, "exit_code", 2) or 2)
    except BlueprintInvalid as e:
        if debug:
            raise
        for f in e.findings:
            fail(f.format())
        return e.exit_code
    except ClusterforgeError as e:
        if debug:
            raise
        fail(str(e))
        return e.exit_code
    except OSError as e:
        # a path the user gave cannot be read or written (read-only, not a directory, missing parent)
        if debug:
            raise
        if e.filename:
            fail(f"{e.filename}: {e.strerror or e} — check that the path exists, is of the right kind and is writable")
        else:  # no path to name: a stream or a device (stdout on a full disk, a closed terminal)
            fail(f"output could not be written: {e.strerror or e}")
        return 2
    except KeyboardInterrupt:
        fail("interrupted; results written so far are kept (rerun with --resume where supported)")
        return 130
    except Exception as e:
        if debug:
            raise
        fail(f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
