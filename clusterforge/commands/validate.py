"""``clusterforge validate BLUEPRINT [--launcher local|ssh|slurm|kubernetes] [-o DIR] [--resume]``.

Plans the validation tests of the blueprint (:func:`validate.runner.plan_tests`), runs them through
the chosen launcher, judges each result as it finishes, and writes the reports. Live progress goes
to the terminal (a table that updates in place; one line per event when stdout is not a terminal).

Exit status: 0 every result pass or warn, 1 any fail, 2 usage error (also a blueprint
``check`` refuses: 1 is kept for the cluster), 3 the run said nothing
(no result, or invalid results and no fail: a suite whose tool is not installed, or a local run
on a machine without the declared hardware, which stops before running unless ``--run-anyway``;
or the launcher could not reach the cluster: its tool, ``sbatch``, ``kubectl`` or ``ssh``, is missing,
or the cluster or a host does not answer), 130 interrupted by Ctrl-C, 143 by SIGTERM (results so far are kept: rerun with
``--resume``).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .judge import VERDICT_STYLE

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table


class _Progress:
    """Renders :class:`validate.runner.RunEvents`: a live table on a terminal, plain lines otherwise."""

    HEARTBEAT_S = 30.0
    """Without a live table (output to a file or a CI log), a running test prints a line this often (seconds), so a
    test that runs for minutes shows it is still going."""

    def __init__(self, live: bool, job_lines: Any = None, heartbeat_s: float | None = None):
        """``live``: draw a table (a terminal); ``job_lines``: what prints a job's state as a line when there is no
        table (the launcher's own reporter); ``heartbeat_s``: seconds between the still-running lines
        (:attr:`HEARTBEAT_S`)."""
        self.live_enabled = live
        self.rows: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.live: Live | None = None
        self.t_start: dict[str, float] = {}
        self._lines: Any = job_lines or (lambda test, progress: None)
        self.heartbeat_s = self.HEARTBEAT_S if heartbeat_s is None else heartbeat_s
        self._beat_stop: threading.Event | None = None

    def _heartbeat(self, test: Any) -> None:
        """Print ``  ... <test> still running (N s)`` every :attr:`heartbeat_s` until the test finishes."""
        from ..console import console

        self._stop_heartbeat()
        stop = self._beat_stop = threading.Event()
        t0 = self.t_start[test.id]

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                job = self.rows.get(test.id, {}).get("job")
                console.print(f"  ... {test.id} still running ({time.monotonic() - t0:.0f} s)"
                              + (f": {job}" if job else ""), markup=False)

        threading.Thread(target=beat, name=f"heartbeat-{test.id}", daemon=True).start()

    def _stop_heartbeat(self) -> None:
        if self._beat_stop is not None:
            self._beat_stop.set()
            self._beat_stop = None

    # -- rendering ----------------------------------------------------------------------------
    def table(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        t.add_column("test")
        t.add_column("status")
        t.add_column("verdict")
        t.add_column("time", justify="right")
        t.add_column("what")
        for tid in self.order:
            r = self.rows[tid]
            v = r.get("verdict") or ""
            status = r["status"]
            if status == "running":
                status = r.get("job") or f"running {time.monotonic() - self.t_start.get(tid, time.monotonic()):.0f} s"
            t.add_row(tid, status, Text(v, style=VERDICT_STYLE.get(v, "")), r.get("time", ""),
                      Text(r.get("what", ""), overflow="ellipsis", no_wrap=True))
        return t

    def __rich__(self) -> Table:
        return self.table()

    # -- events ------------------------------------------------------------------------------
    def planned(self, tests: list[Any], done: set[str], notes: list[str]) -> None:
        from rich.live import Live
        from rich.markup import escape

        from ..console import console, warn

        for n in notes:
            warn(escape(n))
        for t in tests:
            self.order.append(t.id)
            self.rows[t.id] = {"status": "done (resumed)" if t.id in done else "queued", "what": t.description}
        if done:
            again = len(tests) - len(done)
            console.print(f"resuming: {len(done)} of {len(tests)} planned test(s) passed or warned before with the same "
                          f"parameters and are kept; {again} run{'s' if again == 1 else ''} now", markup=False)
        if self.live_enabled:
            self.live = Live(self, console=console, refresh_per_second=4, transient=False)
            self.live.start()

    def started(self, test: Any) -> None:
        from ..console import console

        self.t_start[test.id] = time.monotonic()
        self.rows[test.id]["status"] = "running"
        if self.live is None:
            console.print(f"▶ {test.id}: {test.description}", markup=False)
            self._heartbeat(test)

    def job(self, test: Any, progress: Any) -> None:
        """A scheduler's word on the test's job (``validate.launchers.slurm.JobProgress``): shown in the status column
        of the live table (``job 42 pending (Resources) 12 s``), or as a line when there is no table."""
        row = self.rows.get(test.id)
        if row is None:
            return
        row["job"] = str(progress)
        if self.live is None:
            self._lines(test, progress)

    def finished(self, test: Any, verdicts: list[str], launch: Any, seconds: float) -> None:
        from rich.text import Text

        from validate.judge import worst

        from ..console import console

        self._stop_heartbeat()
        v = worst(verdicts)
        row = self.rows[test.id]
        row.update(status="done", verdict=v, time=f"{seconds:.1f} s")
        if launch.returncode not in (0,):
            row["what"] = f"{test.description} (payload exit {launch.returncode})"
        if self.live is None:
            console.print(Text.assemble("  ", (v, VERDICT_STYLE.get(v, "")), f"  {test.id} ({seconds:.1f} s)"))

    def stop(self) -> None:
        self._stop_heartbeat()
        if self.live is not None:
            self.live.stop()
            self.live = None


class _Terminated(KeyboardInterrupt):
    """SIGTERM during a run: stops it the way Ctrl-C does (results kept), and exits 143 (128 + SIGTERM)."""


def _sigterm(signum: int, frame: Any) -> None:
    raise _Terminated


def _cost_basis(loaded: Any) -> dict[str, Any] | None:
    """The cluster's cost basis for the report's cost of measured work (:func:`clusterforge.cost.cost_basis`),
    or ``None`` with a warning when it cannot be priced (the validation runs either way)."""
    from blueprints.findings import BlueprintInvalid

    from ..console import warn
    from ..cost import cost_basis
    from ..errors import ClusterforgeError
    from .cost import compute

    try:
        report = compute(loaded)
    except (ClusterforgeError, BlueprintInvalid) as e:
        warn(f"no cost of measured work in the report: the cluster could not be priced ({e})")
        return None
    return None if report is None else cost_basis(report, loaded)


def resume_command(blueprint: Path, out: Path, *, launcher: str, suites: str | None, gpus: int | None,
                   inventory: Path | None, remote_python: str, image: str | None, timeout: float | None,
                   run_anyway: bool) -> str:
    """The ``clusterforge validate ... --resume`` command that continues an interrupted run with every option it was
    started with (launcher, suites, ranks per node, inventory, remote Python, image, timeout, --run-anyway; the
    defaults left out), each argument quoted for a POSIX shell."""
    import shlex

    argv = ["clusterforge", "validate", str(blueprint), "-o", str(out), "--resume"]
    if launcher != "local":
        argv += ["--launcher", launcher]
    if suites:
        argv += ["--suites", suites]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    if inventory is not None:
        argv += ["--inventory", str(inventory)]
    if remote_python != "python3":
        argv += ["--remote-python", remote_python]
    if image:
        argv += ["--image", image]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    if run_anyway:
        argv.append("--run-anyway")
    return shlex.join(argv)


def register(app: typer.Typer) -> None:
    """Add the ``validate`` verb to ``app``."""

    @app.command("validate")
    def validate_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        launcher: str = typer.Option("local", "--launcher", "-l",
                                     help="local (this machine), ssh (inventory hosts), slurm (sbatch) or kubernetes (kubectl)."),
        output: Path = typer.Option(None, "-o", "--output",
                                    help="Run directory: raw outputs, results.jsonl, run.json, reports. Default: results/<blueprint name>."),
        resume: bool = typer.Option(False, "--resume", help="Continue a run in DIR: keep the tests that passed with the same "
                                    "parameters, run the failed, invalid, interrupted and changed ones again."),
        force: bool = typer.Option(False, "--force", help="Replace a previous run in DIR (with --suites: only those suites' results)."),
        run_anyway: bool = typer.Option(False, "--run-anyway", help="local: run even when this machine lacks the "
                                        "blueprint's GPUs or mounts (the results are then invalid)."),
        suites: str = typer.Option(None, "--suites", help="Comma-separated suites to run (node,nccl,fio,amp,profile; node, when chosen, runs before the others); overrides validation.suites."),
        gpus: int = typer.Option(None, "--gpus", help="Ranks per node: GPUs, or gloo processes on a CPU-only machine."),
        inventory: Path = typer.Option(None, "--inventory", help="ssh: Ansible inventory (default: the blueprint's on-prem hosts)."),
        remote_python: str = typer.Option("python3", "--remote-python", help="ssh/slurm: Python with torch on the nodes."),
        image: str = typer.Option(None, "--image", help="kubernetes: container image with Python, torch, Open MPI and sshd."),
        timeout: float = typer.Option(None, "--timeout", help="Seconds one test may run before it is stopped."),
    ) -> None:
        """Run the validation suites (node checks, NCCL, fio, AMP), judge every result and write the reports."""
        from rich.text import Text

        from validate.launchers import LAUNCHERS, make_launcher
        from validate.runner import MISMATCH, plan_tests, run_validation
        from validate.suites import summary as result_summary

        from ..blueprint_io import load_checked
        from ..console import console, fail, ok, warn
        from ..errors import InvalidRunError, ProvisionError, ToolMissingError, UsageError

        if launcher not in LAUNCHERS:
            raise UsageError(f"--launcher {launcher}: choose from {', '.join(LAUNCHERS)}")
        if timeout is not None and timeout <= 0:
            raise UsageError("--timeout must be a positive number of seconds")
        loaded = load_checked(blueprint, invalid_exit=2)
        out = output or Path("results") / loaded.blueprint.name
        chosen = [s.strip() for s in suites.split(",") if s.strip()] if suites else None
        tests, notes = plan_tests(loaded, launcher=launcher, suites=chosen, gpus=gpus)
        if not tests:
            raise UsageError(f"{blueprint}: nothing to run (suites {', '.join(chosen or loaded.blueprint.validation.suites) or 'none'})")
        mismatch = list(dict.fromkeys(n for n in [*notes, *(x for t in tests for x in t.notes)]
                                      if n.startswith(MISMATCH)))
        if mismatch and not run_anyway:
            for n in mismatch:
                warn(n)
            fail(f"{blueprint}: this machine lacks the hardware the blueprint declares, so every affected result would be "
                 "`invalid`; nothing was run. Validate the cluster itself (--launcher ssh, slurm or kubernetes), or pass "
                 "--run-anyway to run here all the same")
            raise typer.Exit(3)
        runner = make_launcher(launcher, loaded, out, timeout_s=timeout, inventory=inventory,
                               remote_python=remote_python, image=image)
        progress = _Progress(live=console.is_terminal, job_lines=getattr(runner, "report", None))
        if hasattr(runner, "report"):  # the Slurm launcher: job states go to the status column
            runner.report = progress.job
        cost = _cost_basis(loaded)
        resume_cmd = resume_command(blueprint, out, launcher=launcher, suites=suites, gpus=gpus, inventory=inventory,
                                    remote_python=remote_python, image=image, timeout=timeout, run_anyway=run_anyway)
        old = signal.signal(signal.SIGTERM, _sigterm)
        try:
            summary = run_validation(loaded, out, runner, tests, resume=resume, force=force,
                                     keep_unplanned=chosen is not None, notes=notes, events=progress, cost=cost)
        except (ToolMissingError, ProvisionError) as e:
            # the launcher's own tool (sbatch, kubectl, ssh) is missing or the cluster cannot be reached: nothing about
            # the cluster was measured, so the run is invalid (exit 3), not failed (exit 1 says the cluster fell short)
            raise InvalidRunError(str(e)) from e
        except OSError as e:
            from validate.rundir import disk_error_message, is_disk_error

            if not is_disk_error(e):
                raise
            progress.stop()
            fail(disk_error_message(e, where=out, resume=resume_cmd))
            raise typer.Exit(2) from None
        except KeyboardInterrupt as e:
            # typer turns KeyboardInterrupt into a silent exit 130: say what was kept and how to go on
            progress.stop()
            from validate.runner import RESULTS, read_results_lines

            kept = {d.get("test_id") for d in read_results_lines(out / RESULTS)}
            report = out / "report.html"
            fail(f"interrupted: {len(kept)} finished test(s) kept in {out}"
                 + (f" (report: {report})" if kept and report.exists() else "")
                 + f"; continue with `{resume_cmd}`")
            raise typer.Exit(128 + signal.SIGTERM if isinstance(e, _Terminated) else 130) from None
        finally:
            progress.stop()
            signal.signal(signal.SIGTERM, old)
        for r in summary.results:
            v = r.verdict
            # a tool that is not installed is explained once, after the verdict, for all its tests
            tool = r.metrics.get("missing_tool")
            text = (f"the suite could not run: `{tool}` is not installed on the node (how to install it: below)" if tool
                    else result_summary(r))
            console.print(Text.assemble((f"{v:7s}", VERDICT_STYLE.get(v, "")), f" {r.title}: {text}"))
            for reason in [] if tool else r.reasons:
                if reason not in text:  # already on the result's line
                    console.print(f"        {reason}", markup=False, style="dim")
        from validate.judge import worst

        overall = worst([r.verdict for r in summary.results])
        ran_now = sum(1 for t in tests if t.id not in summary.skipped)
        kept_tests = len(summary.verdicts) - ran_now  # resumed, and with --force --suites the other suites' tests
        console.print(Text.assemble("verdict: ", (overall, VERDICT_STYLE.get(overall, "bold")),
                                    f" ({len(summary.results)} result(s) of {len(summary.verdicts)} test(s)"
                                    + (f"; {kept_tests} test(s) kept from the earlier run)" if kept_tests > 0 else ")")))
        for rec in summary.missing_tools.values():
            console.print(f"{rec['reason']} (invalid: {', '.join(rec['tests'])})", style="yellow", markup=False)
        html = summary.reports.get("html") or next((p for p in summary.reports.values() if str(p).endswith(".html")), None)
        if html is not None:
            ok(f"HTML report: {html}")
        else:
            ok(f"results: {out / 'results.jsonl'}")
        raise typer.Exit(summary.exit_code)
