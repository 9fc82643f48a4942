"""What ``up`` on a deployed cluster would do to it: the changed blueprint fields, each classified by
the catalog's update policy (``aws-catalog.yaml`` ``update_policy``, one table with sources).

:func:`changes` compares the blueprint recorded at the last ``up`` (:class:`clusterforge.state.Deployment`)
with the one given now, field by field (list entries that have a ``name`` are matched by it, so
``node_groups.gpu.count`` names the same group after a reorder), plus the node images when
``up --refresh-ami`` asks for new ones. :func:`classify` gives each change its policy:

* ``in-place`` — running nodes keep running;
* ``replace-nodes`` — the affected node groups' instances are replaced;
* ``delete`` — resources go away with their data;
* ``refused`` — ``up`` stops (``down`` then ``up``, or a new ``name:``).

:func:`show` prints them and :func:`report` gives the same as data (``plan --json``); :func:`confirm` asks
before anything is replaced or deleted (``--yes`` for scripts) and refuses a refused change. ``plan`` prints the
same list offline.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from blueprints.errors import UsageError

__all__ = ["POLICIES", "Change", "UpdateRefused", "ask", "changes", "classify", "confirm", "policy_table", "report",
           "show", "stdin_is_terminal"]

Policy = Literal["in-place", "replace-nodes", "delete", "refused"]
POLICIES: tuple[Policy, ...] = ("in-place", "replace-nodes", "delete", "refused")
"""Policies, mildest first."""

_MISSING = object()


class UpdateRefused(UsageError):
    """A change ``up`` will not make, or one the user did not confirm (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Change:
    """One changed field: ``path`` (dotted, named list entries by name), ``old`` / ``new`` values
    (``None`` when the entry was added / removed), ``kind`` (``changed``, ``added``, ``removed``,
    ``decreased``), its ``policy``, ``why`` and ``source`` (URL or ``""``) from the table."""

    path: str
    old: Any
    new: Any
    kind: str
    policy: Policy
    why: str
    source: str = ""

    @property
    def group(self) -> str | None:
        """The node group the change is about (``node_groups.<name>…`` or ``images.<name>``), else ``None``."""
        parts = self.path.split(".")
        return parts[1] if parts[0] in ("node_groups", "images") and len(parts) > 1 else None

    @property
    def resource(self) -> tuple[str, str]:
        """``(resource, type)``: the deployed thing the change is about and its kind. A named entry is
        ``node_groups.<name>`` / ``storage.<name>`` (types ``node-group``, ``file-system``), a group's image
        ``images.<group>`` (``image``); any other field belongs to its top-level section (``target``, ``network``,
        ``orchestrator``, ``software`` …, the type being the section's name)."""
        parts = self.path.split(".")
        kinds = {"node_groups": "node-group", "storage": "file-system", "images": "image"}
        if parts[0] in kinds and len(parts) > 1:
            return f"{parts[0]}.{parts[1]}", kinds[parts[0]]
        return parts[0], parts[0]

    def to_json(self) -> dict[str, Any]:
        """The change as ``plan --json`` gives it: ``field`` (dotted path), ``resource`` and ``type``
        (:attr:`resource`), ``action`` (``changed`` / ``added`` / ``removed`` / ``decreased``), ``old`` / ``new``
        (JSON values; ``null`` for an added / removed entry's missing side), ``policy`` (``in-place``,
        ``replace-nodes``, ``delete``, ``refused``), ``why`` and ``source`` (URL or ``""``) from the policy table."""
        resource, kind = self.resource
        return {"field": self.path, "resource": resource, "type": kind, "action": self.kind, "old": self.old,
                "new": self.new, "policy": self.policy, "why": self.why, "source": self.source}


ENTRY_KEYS = frozenset({"path", "policy", "decreased", "added", "removed", "why", "source"})
"""The keys of an ``update_policy.fields`` entry."""


def policy_table() -> list[dict[str, Any]]:
    """The catalog's ``update_policy.fields`` entries, in match order.

    Raises ``ValueError`` naming the entry when one has a key outside :data:`ENTRY_KEYS` or no ``why`` text: an
    unquoted comma inside a YAML flow mapping (``{why: a, b}``) silently cuts the text and makes ``b`` a key."""
    from blueprints.catalog import catalog

    entries = list(catalog().aws["update_policy"]["fields"])
    for e in entries:
        extra = sorted(map(str, set(e) - ENTRY_KEYS))
        if extra or not isinstance(e.get("why"), str) or not e["why"]:
            raise ValueError(f"aws-catalog.yaml update_policy entry {e.get('path')!r}: unknown keys {extra} or no "
                             "`why` text (quote a `why` that holds a comma)")
    return entries


def _matches(pattern: str, path: list[str]) -> bool:
    pat = pattern.split(".")
    return len(pat) <= len(path) and all(p in ("*", s) for p, s in zip(pat, path, strict=False))


def classify(path: str, old: Any, new: Any, kind: str) -> Change:
    """The :class:`Change` of one field: the first table entry matching ``path`` (``added`` /
    ``removed`` / ``decreased`` override its ``policy`` for that kind). A path no entry matches is
    ``refused`` ("not classified"), so an unknown change never goes through silently."""
    segments = path.split(".")
    for entry in policy_table():
        if _matches(str(entry["path"]), segments):
            policy = entry.get(kind, entry["policy"])
            return Change(path, old, new, kind, policy, str(entry.get("why", "")), str(entry.get("source", "")))
    return Change(path, old, new, kind, "refused", "this field has no update policy (catalog update_policy)")


def _named(items: list[Any]) -> dict[str, Any] | None:
    if items and all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in items):
        names = [x["name"] for x in items]
        if len(set(names)) == len(names):
            return {x["name"]: x for x in items}
    return None


def _walk(prefix: str, old: Any, new: Any, out: list[tuple[str, Any, Any, str]]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            _walk(f"{prefix}.{k}" if prefix else k, old.get(k), new.get(k), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        a, b = _named(old), _named(new)
        if a is not None and b is not None or (a is not None and not new) or (b is not None and not old):
            a, b = a or {}, b or {}
            for k in [*a, *[k for k in b if k not in a]]:
                if k not in b:
                    out.append((f"{prefix}.{k}", a[k], None, "removed"))
                elif k not in a:
                    out.append((f"{prefix}.{k}", None, b[k], "added"))
                else:
                    _walk(f"{prefix}.{k}", a[k], b[k], out)
            return
    kind = "decreased" if (isinstance(old, (int, float)) and isinstance(new, (int, float))
                           and not isinstance(old, bool) and not isinstance(new, bool) and new < old) else "changed"
    out.append((prefix, old, new, kind))


def changes(old_blueprint: Mapping[str, Any], new_blueprint: Mapping[str, Any], *,
            old_images: Mapping[str, str] | None = None, refresh_ami: bool = False,
            image_groups: Iterable[str] = ()) -> list[Change]:
    """Every change from the recorded blueprint to the new one (canonical JSON data of
    ``Blueprint.model_dump(mode="json")``), classified; with ``refresh_ami`` one ``images.<group>``
    change per group in ``image_groups`` that had a recorded image (the new id is only known once
    AWS's SSM parameter is read: shown as ``latest``)."""
    raw: list[tuple[str, Any, Any, str]] = []
    _walk("", dict(old_blueprint), dict(new_blueprint), raw)
    out = [classify(*r) for r in raw]
    if refresh_ami:
        for g in image_groups:
            if old_images and g in old_images:
                out.append(classify(f"images.{g}", old_images[g], "latest", "changed"))
    return out


def _value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, dict):
        return "{…}"
    text = str(v)
    return text if len(text) <= 40 else text[:37] + "…"


def show(found: list[Change], *, stack: str, deployed_from: str, deployed_at: str,
         group_counts: Mapping[str, int], reserved: Iterable[str] = (), out: TextIO | None = None) -> None:
    """Print ``found`` for a person: one line per change (path, old → new, policy, why), then what it
    does to running nodes (groups replaced with their node counts; reserved groups' nodes stopped first)."""
    out = out or sys.stdout
    if not found:
        print(f"{stack}: no changes against the deployment of {deployed_at} ({deployed_from})", file=out)
        return
    print(f"{stack}: {len(found)} change(s) against the deployment of {deployed_at} ({deployed_from}):", file=out)
    for c in found:
        print(f"  {c.policy:<13} {c.path}: {_value(c.old)} → {_value(c.new)} — {c.why}", file=out)
    groups = _replaced_groups(found, group_counts)
    if groups:
        nodes = sum(group_counts.get(g, 0) for g in groups)
        print(f"  running nodes: {nodes} node(s) of {', '.join(groups)} will be replaced", file=out)
        held = [g for g in groups if g in set(reserved)]
        if held:
            print(f"  {', '.join(held)}: in a Capacity Block or reservation — their nodes are stopped before the "
                  "new ones launch (no spare capacity)", file=out)
    for c in found:
        if c.policy == "delete":
            print(f"  deleted: {c.path} ({c.why})", file=out)


def report(found: list[Change], *, stack: str, deployed_from: str, deployed_at: str,
           group_counts: Mapping[str, int], reserved: Iterable[str] = ()) -> dict[str, Any]:
    """What :func:`show` prints, as data (``plan --json``'s ``changes``): ``stack``, ``deployed_from``,
    ``deployed_at``, ``changes`` (each :meth:`Change.to_json`), ``replaced`` (per node group whose instances are
    replaced: ``group``, ``nodes`` and ``stopped_first``, true in a Capacity Block or reservation), ``deleted``
    (the fields whose change deletes resources) and ``up``: what ``up`` does with them (``nothing`` to change,
    ``proceeds`` with in-place changes only, ``asks`` before replacing or deleting, ``refuses``)."""
    held = set(reserved)
    policies = {c.policy for c in found}
    up = ("refuses" if "refused" in policies else "asks" if policies & {"replace-nodes", "delete"}
          else "proceeds" if found else "nothing")
    return {
        "stack": stack, "deployed_from": deployed_from, "deployed_at": deployed_at,
        "changes": [c.to_json() for c in found],
        "replaced": [{"group": g, "nodes": int(group_counts.get(g, 0)), "stopped_first": g in held}
                     for g in _replaced_groups(found, group_counts)],
        "deleted": [c.path for c in found if c.policy == "delete"],
        "up": up,
    }


def _replaced_groups(found: list[Change], group_counts: Mapping[str, int]) -> list[str]:
    groups: list[str] = []
    for c in found:
        if c.policy != "replace-nodes":
            continue
        for g in ([c.group] if c.group else list(group_counts)):
            if g in group_counts and g not in groups:
                groups.append(g)
    return groups


def confirm(found: list[Change], *, yes: bool, interactive: bool | None = None) -> None:
    """Stop on a ``refused`` change; ask before ``replace-nodes`` / ``delete`` unless ``yes``.

    Raises :class:`UpdateRefused` (exit 1) for a refused change, a "no" answer, or no terminal to
    ask on without ``yes``. Nothing to ask (only ``in-place``) returns at once."""
    refused = [c for c in found if c.policy == "refused"]
    if refused:
        c = refused[0]
        raise UpdateRefused(f"`{c.path}` changed ({_value(c.old)} → {_value(c.new)}): {c.why} — `up` does not do "
                            "this to a running cluster; put the value back, or `down` and `up` again")
    risky = [c for c in found if c.policy in ("replace-nodes", "delete")]
    if not risky:
        return
    ask("Replace or delete as listed above?", yes=yes,
        no_terminal=f"{len(risky)} change(s) replace or delete resources and there is no terminal to ask on: "
                    "rerun with --yes to apply them (`plan` shows them)",
        declined="not confirmed; nothing was changed", interactive=interactive)


def stdin_is_terminal() -> bool:
    """Whether a person can answer a question on stdin."""
    return sys.stdin.isatty()


def ask(question: str, *, yes: bool, no_terminal: str, declined: str, interactive: bool | None = None) -> None:
    """Ask ``question`` (default no) unless ``yes``. Raises :class:`UpdateRefused` with ``no_terminal``
    when stdin is no terminal (a script must say ``--yes``) and with ``declined`` on a no."""
    if yes:
        return
    if not (stdin_is_terminal() if interactive is None else interactive):
        raise UpdateRefused(no_terminal)
    import typer

    if not typer.confirm(question, default=False):
        raise UpdateRefused(declined)
