"""Where clusterforge keeps a cloud deployment's state, how a stack is named, and what it records.

**Location.** One directory per user, the same whatever the current directory is:
``$CLUSTERFORGE_STATE_DIR``, else ``$XDG_STATE_HOME/clusterforge``, else ``~/.local/state/clusterforge``
(the XDG base directory specification's place for state that outlives a run:
https://specifications.freedesktop.org/basedir-spec/latest/). ``--state-dir`` overrides it per call.
Inside it:

* ``pulumi/`` — Pulumi's local file backend (``file://…/pulumi``; ``PULUMI_BACKEND_URL`` in the
  environment wins, the records stay here);
* ``deployments/<stack>.json`` — one :class:`Deployment` record per deployed stack.

**Stack identity.** A stack is named ``<blueprint name>-<region>`` (:func:`stack_name`), and its
record names the blueprint *file* that owns it (absolute path). ``up`` of another file with the
same name and region is refused (:class:`StackTakenError`: "stack X belongs to FILE — rename
`name:` or move it with `up --adopt`"); it never selects and re-points the first cluster's stack.

**Records.** ``up`` writes the record after Pulumi succeeds: the owner file, the blueprint as it
was deployed (canonical JSON, so a later ``up`` / ``plan`` can say what changed without the old
file), the node images each EC2 group was given (``images``: resolved once, reused until
``up --refresh-ami``), and the time. ``down`` finds the record by blueprint path or stack name
without loading the blueprint, destroys the stack the record names, and removes the record.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from blueprints.errors import UsageError

__all__ = [
    "RECORD_FORMAT",
    "STATE_DIR_ENV",
    "Deployment",
    "StackTakenError",
    "StateDir",
    "default_state_dir",
    "stack_name",
]

STATE_DIR_ENV = "CLUSTERFORGE_STATE_DIR"
"""Environment variable naming the state directory (wins over the XDG default)."""

RECORD_FORMAT = 1
"""Version of the ``deployments/<stack>.json`` layout."""


def default_state_dir(env: dict[str, str] | None = None) -> Path:
    """The state directory when ``--state-dir`` is not given: ``$CLUSTERFORGE_STATE_DIR``, else
    ``$XDG_STATE_HOME/clusterforge``, else ``~/.local/state/clusterforge`` — never relative to the
    current directory (a relative ``$XDG_STATE_HOME`` is ignored, as the XDG specification says:
    https://specifications.freedesktop.org/basedir-spec/latest/)."""
    env = dict(os.environ) if env is None else env
    explicit = env.get(STATE_DIR_ENV, "")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "clusterforge"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "state" / "clusterforge"


_STACK_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def stack_name(blueprint_name: str, region: str) -> str:
    """The Pulumi stack of a blueprint: ``<name>-<region>`` (``p5-train-us-east-1``). Two blueprints
    share it only with the same name *and* region; the record's owner file tells them apart."""
    return _STACK_UNSAFE.sub("-", f"{blueprint_name}-{region}")


class StackTakenError(UsageError):
    """``up`` of a blueprint file whose stack is owned by another file (exit 1)."""

    exit_code = 1


@dataclass
class Deployment:
    """The record of one deployed stack (``deployments/<stack>.json``).

    ``stack``: Pulumi stack name; ``blueprint_file``: absolute path of the owning blueprint;
    ``name`` / ``region``: the blueprint's; ``blueprint``: the deployed blueprint as canonical JSON
    data (``Blueprint.model_dump(mode="json")``); ``images``: node group -> AMI id it was deployed
    with (EC2 groups); ``resources``: number of resources Pulumi reported; ``deployed_at``: UTC ISO time;
    ``node_status_path``: the SSM path of the nodes' status records (:mod:`clusterforge.readiness`; ``""`` for a
    stack deployed without them), which ``down`` empties after the stack is gone.
    """

    stack: str
    blueprint_file: str
    name: str
    region: str
    blueprint: dict[str, Any]
    images: dict[str, str] = field(default_factory=dict)
    resources: int = 0
    deployed_at: str = ""
    node_status_path: str = ""
    format: int = RECORD_FORMAT

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Deployment:
        """Read a record; raises ``ValueError`` for another format or missing keys."""
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"record format {data.get('format')!r}, expected {RECORD_FORMAT}")
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in keys})


@dataclass(frozen=True)
class StateDir:
    """One state directory (:func:`default_state_dir` or ``--state-dir``), absolute."""

    root: Path

    @classmethod
    def of(cls, path: Path | None) -> StateDir:
        """``path`` (expanded, absolute) or the default location."""
        return cls((path.expanduser().resolve()) if path is not None else default_state_dir())

    @property
    def backend_dir(self) -> Path:
        """Pulumi's local file backend directory."""
        return self.root / "pulumi"

    @property
    def backend_url(self) -> str:
        """``PULUMI_BACKEND_URL`` from the environment, else ``file://<backend_dir>``."""
        return os.environ.get("PULUMI_BACKEND_URL") or f"file://{self.backend_dir}"

    def _records(self) -> Path:
        return self.root / "deployments"

    def record_path(self, stack: str) -> Path:
        """Where the record of ``stack`` lives."""
        return self._records() / f"{stack}.json"

    def load(self, stack: str) -> Deployment | None:
        """The record of ``stack``, or ``None``. Raises :class:`UsageError` for an unreadable record."""
        path = self.record_path(stack)
        if not path.is_file():
            return None
        try:
            return Deployment.from_json(json.loads(path.read_text()))
        except (ValueError, TypeError) as e:
            raise UsageError(f"{path}: not a clusterforge deployment record ({e}) — move it away to start over") from None

    def records(self) -> list[Deployment]:
        """Every record, by stack name."""
        out = []
        for p in sorted(self._records().glob("*.json")) if self._records().is_dir() else []:
            rec = self.load(p.stem)
            if rec is not None:
                out.append(rec)
        return out

    def save(self, rec: Deployment) -> Path:
        """Write ``rec`` atomically (a crash leaves the old record or the new one); returns its path."""
        if not rec.deployed_at:
            rec.deployed_at = datetime.now(UTC).isoformat(timespec="seconds")
        path = self.record_path(rec.stack)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{rec.stack}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(rec), f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return path

    def remove(self, stack: str) -> None:
        """Forget the record of ``stack`` (after ``down`` destroyed it)."""
        self.record_path(stack).unlink(missing_ok=True)

    def owner_check(self, stack: str, blueprint_file: Path, *, adopt: bool = False) -> Deployment | None:
        """The record of ``stack`` when ``blueprint_file`` owns it (or none exists); with ``adopt``
        the record moves to ``blueprint_file``. Raises :class:`StackTakenError` when another file owns it."""
        rec = self.load(stack)
        here = str(blueprint_file.resolve())
        if rec is None or rec.blueprint_file == here:
            return rec
        if adopt:
            rec.blueprint_file = here
            return rec
        raise StackTakenError(
            f"{blueprint_file}: stack `{stack}` belongs to {rec.blueprint_file} (deployed {rec.deployed_at}); a "
            "second blueprint with the same name and region would take that cluster over — give this one "
            "another `name:`, or, if it is the same cluster moved to a new file, run `up --adopt`")

    def find(self, what: str) -> Deployment:
        """The record ``down`` acts on: ``what`` is a blueprint path (the record it owns), a stack name
        or a blueprint name (when exactly one record has it). The blueprint is not read.

        Raises :class:`UsageError` (exit 1) when nothing or more than one record matches — never a
        silent success: nothing was destroyed then.
        """
        records = self.records()
        p = Path(what).expanduser()
        if p.exists() or p.suffix in (".yaml", ".yml"):
            here = str(p.resolve())
            hits = [r for r in records if r.blueprint_file == here]
        else:
            hits = [r for r in records if r.stack == what] or [r for r in records if r.name == what]
        if len(hits) == 1:
            return hits[0]
        known = ", ".join(f"{r.stack} ({r.blueprint_file})" for r in records) or "none"
        if not hits:
            raise _NothingRecorded(f"{what}: no deployment recorded under {self.root} — nothing was destroyed "
                                   f"(recorded: {known}; pass --state-dir if it was deployed with another one)")
        raise _NothingRecorded(f"{what}: {len(hits)} deployments match ({known}) — name the stack instead")


class _NothingRecorded(UsageError):
    exit_code = 1
