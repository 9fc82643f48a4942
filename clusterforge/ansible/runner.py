"""Run the rendered site playbook through ansible-runner, with a live progress display.

:func:`run_site` renders the blueprint (:func:`~clusterforge.ansible.render.render_ansible`) into
``out_dir`` and runs ``site.yml`` with ``ansible_runner.run``. Every run keeps its artefacts under
``out_dir/runs/<timestamp>/`` (ansible-runner's ``stdout``, ``job_events/``, ``rc``, ``status``) plus
``summary.json`` written here: the recap per host, every task result and every failure. ``runs/latest``
names the newest run. Roles are idempotent, so a rerun after a failure resumes safely: finished
hosts report ``ok``, the failed host continues where it stopped.

The display is built from runner events (``playbook_on_play_start``, ``playbook_on_task_start``,
``runner_on_*``, ``playbook_on_stats``; https://github.com/ansible/ansible-runner/blob/2.3.6/docs/intro.rst):
one row per host with its current task and ok / changed / failed / skipped counts, live on a
terminal and as plain lines otherwise. A failed host is reported as one line: host, task, message.

Hosts can be redirected for a run without touching the rendered inventory (``connection_override``),
e.g. onto root filesystems with :func:`chroot_connection` (image builds, the test suite).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from blueprints import LoadedBlueprint

from ..console import console as default_console
from ..errors import ProvisionError, ToolMissingError
from .render import render_ansible

__all__ = ["HostProgress", "RunDisplay", "TaskResult", "ansible_path", "chroot_connection", "failed_hosts", "load_summary",
           "missing_collections", "run_site"]

CHROOT_CONNECTION = "community.general.chroot"
_log = logging.getLogger(__name__)


@dataclass
class HostProgress:
    """Counts for one host during a run (``failed`` excludes ignored failures, counted in ``ignored``)."""

    name: str
    task: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: int = 0
    ignored: int = 0


@dataclass
class TaskResult:
    """One task on one host: ``status`` is ok, changed, failed, ignored (failed with ignore_errors), skipped or unreachable."""

    host: str
    play: str
    role: str
    task: str
    action: str
    status: str
    message: str = ""


@dataclass
class RunDisplay:
    """Turns ansible-runner events into host progress, task results and failure lines.

    ``on_event`` is the ``event_handler`` given to ``ansible_runner.run``; it never raises.
    """

    console: Console
    hosts: dict[str, HostProgress] = field(default_factory=dict)
    results: list[TaskResult] = field(default_factory=list)
    failures: list[TaskResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    play: str = ""
    stats: dict[str, Any] | None = None
    live: Live | None = None

    def host(self, name: str) -> HostProgress:
        """The progress row of ``name`` (created on first use)."""
        if name not in self.hosts:
            self.hosts[name] = HostProgress(name)
        return self.hosts[name]

    def table(self) -> Table:
        """The progress table: one row per host."""
        t = Table(title=f"ansible: {self.play}" if self.play else "ansible", title_justify="left", expand=False)
        for col in ("host", "current task", "ok", "changed", "failed", "skipped", "unreachable"):
            t.add_column(col, justify="right" if col not in ("host", "current task") else "left",
                         overflow="ellipsis", no_wrap=True, max_width=60 if col == "current task" else None)
        for h in self.hosts.values():
            t.add_row(h.name, h.task, str(h.ok), str(h.changed),
                      f"[red]{h.failed}[/red]" if h.failed else "0", str(h.skipped),
                      f"[red]{h.unreachable}[/red]" if h.unreachable else "0")
        return t

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self.table())

    def on_event(self, event: dict[str, Any]) -> bool:
        """Handle one runner event; returns True so runner keeps it in ``job_events/``."""
        try:
            self._handle(event)
        except Exception:  # noqa: BLE001 - a display problem must never stop a provisioning run
            _log.debug("could not display runner event %s", event.get("event"), exc_info=True)
        return True

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "") or data.get("name", "")
            if self.live is None:
                self.console.print(f"▶ {self.play}", markup=False, highlight=False)
        elif kind == "runner_on_start":
            self.host(data.get("host", "?")).task = data.get("task", "")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            self._result(kind, data)
        elif kind == "playbook_on_stats":
            self.stats = {k: data.get(k) or {} for k in ("ok", "changed", "failures", "dark", "skipped", "ignored",
                                                          "rescued", "processed")}
        self._refresh()

    def _result(self, kind: str, data: dict[str, Any]) -> None:
        res = data.get("res") or {}
        name = data.get("host", "?")
        h = self.host(name)
        if kind == "runner_on_ok":
            status = "changed" if res.get("changed") else "ok"
        elif kind == "runner_on_failed":
            status = "ignored" if data.get("ignore_errors") else "failed"
        elif kind == "runner_on_skipped":
            status = "skipped"
        else:
            status = "unreachable"
        setattr(h, status, getattr(h, status) + 1)
        if status == "changed":
            h.ok += 1  # Ansible's recap counts a changed task as ok too
        if status == "ok" and data.get("task_action", "").endswith("debug") and isinstance(res.get("msg"), str):
            self._note(name, res["msg"])
        r = TaskResult(host=name, play=data.get("play", self.play), role=data.get("role", "") or "",
                       task=data.get("task", ""), action=data.get("task_action", ""), status=status,
                       message=_message(res) if status in ("failed", "ignored", "unreachable") else "")
        self.results.append(r)
        if status in ("failed", "unreachable"):
            self.failures.append(r)
            where = f"{r.role} : {r.task}" if r.role else r.task
            line = f"✗ {name}: task \"{where}\" {status}: {r.message}"
            (self.live.console if self.live is not None else self.console).print(
                f"[red]{_escape(line)}[/red]", highlight=False)


    def _note(self, host: str, msg: str) -> None:
        """Print what a role skipped and why (its ``debug`` messages), once per host and message."""
        for part in re.sub(r"\s+", " ", msg).split("; "):
            part = part.strip(" ;")
            if not part:
                continue
            line = f"{host}: {part}"
            if line not in self.notes:
                self.notes.append(line)
                (self.live.console if self.live is not None else self.console).print(
                    f"  ↷ {line}", markup=False, highlight=False, style="dim")


def _escape(text: str) -> str:
    return text.replace("[", "\\[")


def _message(res: dict[str, Any]) -> str:
    """One line saying why a task failed: msg, stderr or the first failed loop item."""
    msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or ""
    if (not msg or msg == "One or more items failed") and isinstance(res.get("results"), list):
        for item in res["results"]:
            if isinstance(item, dict) and item.get("failed"):
                label = item.get("_ansible_item_label", item.get("item", ""))
                text = item.get("msg") or item.get("stderr") or ""
                if text:
                    msg = f"item {label}: {text}" if label != "" else text
                    break
    if not msg and res.get("rc") not in (None, 0):
        msg = f"exit status {res.get('rc')}"
    text = re.sub(r"\s+", " ", str(msg)).strip()
    return text[:400] + ("…" if len(text) > 400 else "")


def chroot_connection(roots: Mapping[str, Path | str]) -> dict[str, dict[str, Any]]:
    """Connection override that maps each host to a root filesystem: ``{host: root directory}``.

    The run reaches the host through ``community.general.chroot`` (the control machine must run
    as root); the roles detect the chroot and write files without starting services.
    """
    return {
        host: {
            "ansible_connection": CHROOT_CONNECTION,
            "ansible_host": str(Path(root).resolve()),
            "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        for host, root in roots.items()
    }


def _ident(runs: Path) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    ident, n = stamp, 1
    while (runs / ident).exists():
        n += 1
        ident = f"{stamp}-{n}"
    return ident


def ansible_path() -> str:
    """``PATH`` for ansible-runner: this interpreter's scripts directory first, so the ansible-playbook
    installed next to clusterforge (the venv's) is used even when the venv is not activated."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    return bindir + os.pathsep + path if bindir not in path.split(os.pathsep) else path


REQUIRED_COLLECTIONS = ("community.general", "ansible.posix")
"""Collections the roles need beyond ansible-core (roles/requirements.yml)."""


def missing_collections() -> list[str]:
    """The :data:`REQUIRED_COLLECTIONS` Ansible cannot find: not importable from this Python's site-packages
    (where the ``ansible`` package puts them) nor present in ``ANSIBLE_COLLECTIONS_PATH`` or the default
    collection paths (``~/.ansible/collections``, ``/usr/share/ansible/collections``)."""
    import importlib.util

    paths = os.environ.get("ANSIBLE_COLLECTIONS_PATH", os.environ.get("ANSIBLE_COLLECTIONS_PATHS", ""))
    roots = [Path(p).expanduser() for p in paths.split(os.pathsep) if p]
    roots += [Path.home() / ".ansible/collections", Path("/usr/share/ansible/collections")]
    missing = []
    for name in REQUIRED_COLLECTIONS:
        ns, coll = name.split(".")
        try:
            found = importlib.util.find_spec(f"ansible_collections.{ns}.{coll}") is not None
        except (ImportError, ValueError):
            found = False
        if not found and not any((r / "ansible_collections" / ns / coll).is_dir() for r in roots):
            missing.append(name)
    return missing


def run_site(
    loaded: LoadedBlueprint,
    out_dir: Path,
    *,
    check: bool = False,
    tags: list[str] | None = None,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    connection_override: Mapping[str, Mapping[str, Any]] | None = None,
    console: Console | None = None,
    verbosity: int = 0,
) -> int:
    """Render ``loaded`` into ``out_dir`` and run ``site.yml`` with ansible-runner; returns 0 or 1.

    ``check`` runs in check mode (``--check --diff``); ``tags`` and ``limit`` are Ansible's
    ``--tags`` and ``--limit``; ``extravars`` are passed with ``-e`` (they win over group_vars).
    ``connection_override`` maps host names to inventory variables that replace their connection for
    this run only (see :func:`chroot_connection`); when given without ``limit``, the run is limited
    to those hosts. The run's artefacts and ``summary.json`` go to ``out_dir/runs/<timestamp>``.

    Returns 0 when every host finished without a failed or unreachable task, 1 otherwise (each
    failure was printed as one line). Raises :class:`ToolMissingError` without ansible-playbook or the
    collections of ``roles/requirements.yml``, and
    :class:`ProvisionError` when Ansible stops before running any task (bad ``--limit``, syntax error).
    """
    out = Path(out_dir).resolve()
    render_ansible(loaded, out)
    con = console or default_console
    env_path = ansible_path()
    if shutil.which("ansible-playbook", path=env_path) is None:
        raise ToolMissingError("ansible-playbook is not installed: `pip install ansible-core` (clusterforge's "
                               "dependencies include it) and put it on PATH")
    missing = missing_collections()
    if missing:
        raise ToolMissingError(f"Ansible collections {', '.join(missing)} are not installed: "
                               f"`ansible-galaxy collection install -r {out / 'roles' / 'requirements.yml'}`")
    import ansible_runner

    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    (out / ".runner").mkdir(exist_ok=True)
    ident = _ident(runs)
    inventories = [str(out / "inventory.yml")]
    if connection_override:
        override = {"all": {"hosts": {h: dict(v) for h, v in connection_override.items()}}}
        (runs / ident).mkdir()
        path = runs / ident / "override-inventory.yml"
        path.write_text(json.dumps(override, indent=2))
        inventories.append(str(path))
        if limit is None:
            limit = ",".join(connection_override)
    cmdline = "--check --diff" if check else None
    display = RunDisplay(console=con)
    envvars = {
        "ANSIBLE_CONFIG": str(out / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(out / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PATH": env_path,
    }
    started = time.time()
    live = Live(display.table(), console=con, refresh_per_second=4, transient=False) if con.is_terminal else None
    display.live = live
    try:
        if live is not None:
            live.start()
        runner = ansible_runner.run(
            private_data_dir=str(out / ".runner"),
            project_dir=str(out),
            artifact_dir=str(runs),
            ident=ident,
            playbook="site.yml",
            inventory=inventories,
            extravars=dict(extravars or {}),
            tags=",".join(tags) if tags else None,
            limit=limit,
            cmdline=cmdline,
            envvars=envvars,
            verbosity=verbosity or None,
            quiet=True,
            suppress_env_files=True,
            rotate_artifacts=0,
            event_handler=display.on_event,
        )
    finally:
        if live is not None:
            live.stop()
    duration = time.time() - started
    run_dir = runs / ident
    events = len(display.results)
    rc = int(runner.rc if runner.rc is not None else 1)
    status = str(runner.status)
    _write_summary(run_dir, loaded, ident, check, tags, limit, rc, status, duration, display)
    if events == 0 and rc != 0:
        raise ProvisionError(f"ansible-playbook stopped before running any task (exit {rc}): {_stdout_tail(run_dir)} "
                             f"— full output in {run_dir / 'stdout'}")
    failed = rc != 0 or status != "successful" or bool(display.failures)
    if live is None:  # plain output (CI logs, pipes): the recap, one line per host
        for h in display.hosts.values():
            con.print(f"  {h.name}: ok={h.ok} changed={h.changed} failed={h.failed} skipped={h.skipped} "
                      f"unreachable={h.unreachable} ignored={h.ignored}", markup=False, highlight=False)
    con.print(f"{'✗' if failed else '✓'} {len(display.results)} task results on {len(display.hosts)} host(s) "
              f"in {duration:.1f} s{' (check mode)' if check else ''}; artefacts in {run_dir}",
              markup=False, highlight=False)
    return 1 if failed else 0


def _stdout_tail(run_dir: Path) -> str:
    try:
        lines = [ln.strip() for ln in (run_dir / "stdout").read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith(("ERROR!", "[ERROR]", "FATAL"))]
    return re.sub(r"\s+", " ", (errors or lines or ["no output"])[-1])[:400]


def _write_summary(run_dir: Path, loaded: LoadedBlueprint, ident: str, check: bool, tags: list[str] | None,
                   limit: str | None, rc: int, status: str, duration: float, display: RunDisplay) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "ident": ident,
        "blueprint": loaded.blueprint.name,
        "check": check,
        "tags": tags or [],
        "limit": limit,
        "rc": rc,
        "status": status,
        "duration_s": round(duration, 3),
        "hosts": {h.name: {k: v for k, v in asdict(h).items() if k not in ("name", "task")}
                  for h in display.hosts.values()},
        "stats": display.stats,
        "failures": [asdict(f) for f in display.failures],
        "notes": display.notes,
        "results": [asdict(r) for r in display.results],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    tmp.write_text(ident + "\n")
    tmp.replace(latest)


def load_summary(out_dir: Path, ident: str | None = None) -> dict[str, Any]:
    """The ``summary.json`` of run ``ident`` (default: the latest) under ``out_dir/runs``.

    Raises :class:`FileNotFoundError` when there is no such run.
    """
    runs = Path(out_dir) / "runs"
    if ident is None:
        ident = (runs / "latest").read_text().strip()
    return json.loads((runs / ident / "summary.json").read_text())


def failed_hosts(out_dir: Path) -> list[str]:
    """Hosts with a failed or unreachable task in the latest run (``[]`` if none or no run yet);
    pass them as ``limit`` to rerun only those hosts."""
    try:
        summary = load_summary(out_dir)
    except FileNotFoundError:
        return []
    return sorted({f["host"] for f in summary["failures"]})
