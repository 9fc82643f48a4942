"""The Ansible roles' own templates, rendered outside Ansible: how a cloud node gets the files a
bare-metal node gets from the same role.

A role's template task (``ansible.builtin.template`` in ``roles/<role>/tasks/*.yml``) is the one
definition of a node file: its source template, its destination path and its mode. On bare metal
Ansible renders it; the cloud path calls :func:`role_file`, which reads the same task, renders the
same template with the same variables (:func:`blueprints.role_vars.node_role_vars` over the role's
``defaults/main.yml`` and ``vars/``) and returns path, mode and content for cloud-init
``write_files``.

Rendering follows Ansible's template action (ansible-core 2.16-2.18,
https://docs.ansible.com/ansible/latest/collections/ansible/builtin/template_module.html):
``trim_blocks`` on, ``lstrip_blocks`` off, trailing newlines kept, ``ansible_managed`` set to
:data:`ANSIBLE_MANAGED` (the ``ansible.cfg`` value clusterforge writes). Undefined variables raise,
and only the few Ansible filters and tests the shared templates use are provided (``quote``,
``bool``, ``version``, the roles' own encoders, ``clusterforge_*``, and the ``file`` lookup of files inside the
roles); a template that needs another one fails to compile here instead of
rendering something Ansible would not.

Blueprint values are data (``docs/security.md``): the variables handed in are never evaluated as
templates, even when they hold ``{{ ... }}`` (only the roles' own ``defaults/`` and ``vars/`` are,
as Ansible does with them), and every template renders in Jinja's immutable sandbox
(https://jinja.palletsprojects.com/en/3.1.x/sandbox/), so a template can call no Python beyond the
filters above even if a value reached one as source.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jinja2
from jinja2.nativetypes import NativeEnvironment
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .datacache import parse_yaml
from .values import AnsibleExpression
from .versions import version

__all__ = [
    "ANSIBLE_MANAGED",
    "ROLES_DIR",
    "AnsibleExpression",
    "OsFamily",
    "RoleFile",
    "RoleTemplateError",
    "each_task",
    "encoder",
    "render_role_template",
    "role_file",
    "role_variables",
    "template_task",
]

ROLES_DIR = Path(os.environ.get("CLUSTERFORGE_ROLES_DIR", Path(__file__).resolve().parents[1] / "roles"))
"""The repository's ``roles/`` directory (``CLUSTERFORGE_ROLES_DIR`` overrides it)."""

ANSIBLE_MANAGED = "Managed by clusterforge; local changes are overwritten."
"""``ansible_managed`` of every clusterforge ``ansible.cfg`` and of the cloud rendering (no ``%``:
Ansible passes the value through ``time.strftime``)."""

OsFamily = Literal["Debian", "RedHat"]
"""Ansible's ``os_family`` fact: which ``vars/<family>.yml`` of a role applies."""


class RoleTemplateError(RuntimeError):
    """A role has no (or more than one) plain template task for a template, or a template cannot render."""


@dataclass(frozen=True)
class RoleFile:
    """One file a role writes: absolute ``path``, octal ``mode`` string (``"0644"``) and ``content``."""

    path: str
    mode: str
    content: str


def _ansible_version_test(value: Any, other: str, op: str = "eq") -> bool:
    """Ansible's ``version`` test for the comparison operators its templates use."""
    a, b = version(str(value)), version(str(other))
    if a is None or b is None:
        raise RoleTemplateError(f"version test: {value!r} or {other!r} is not a version")
    ops = {"eq": a == b, "==": a == b, "ne": a != b, "!=": a != b, "lt": a < b, "<": a < b,
           "le": a <= b, "<=": a <= b, "gt": a > b, ">": a > b, "ge": a >= b, ">=": a >= b}
    if op not in ops:
        raise RoleTemplateError(f"version test operator {op!r} is not supported")
    return ops[op]


def _ansible_bool(value: Any) -> bool:
    """Ansible's ``bool`` filter: yes/on/true/1 (any case) are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "true", "1", "y", "t")


@cache
def _encoders(name: str = "clusterforge_encode") -> dict[str, Any]:
    """The roles' own filters (``roles/clusterforge_common/filter_plugins/<name>.py``: the encoders, the kernel
    filters), loaded from the file Ansible loads them from: one definition for both paths."""
    path = ROLES_DIR / "clusterforge_common" / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RoleTemplateError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.FILTERS)


def encoder(name: str) -> Any:
    """One of the roles' encoding filters by its template name (``clusterforge_one_line``, ...), for Python
    code that writes the same kinds of files (sbatch scripts); ``KeyError`` for an unknown name. The
    function raises ``ValueError`` for a value its format cannot hold."""
    return _encoders()[name]


def _lookup(plugin: str, path: str) -> str:
    """Ansible's ``file`` lookup (``lookup('ansible.builtin.file', PATH)``: the file's text, trailing whitespace
    stripped), for files inside the roles only; any other lookup or path raises :class:`RoleTemplateError`.
    https://docs.ansible.com/ansible/latest/collections/ansible/builtin/file_lookup.html"""
    if plugin not in ("ansible.builtin.file", "file"):
        raise RoleTemplateError(f"lookup {plugin!r} is not available outside Ansible")
    target = Path(path).resolve()
    if ROLES_DIR.resolve() not in target.parents:
        raise RoleTemplateError(f"lookup('file', {path!r}): only files of the roles are read")
    return target.read_text().rstrip()


def _configure(env: jinja2.Environment) -> jinja2.Environment:
    env.globals["lookup"] = _lookup
    env.filters.update(_encoders())
    env.filters.update(_encoders("clusterforge_kernel"))
    # Ansible's `search` test (re.search on the value): https://docs.ansible.com/ansible/latest/collections/ansible/builtin/search_test.html
    env.tests["search"] = lambda value, pattern: re.search(pattern, str(value)) is not None
    env.filters["quote"] = lambda s: shlex.quote(str(s))
    env.filters["bool"] = _ansible_bool
    env.tests["version"] = _ansible_version_test
    return env


class _NativeSandbox(NativeEnvironment, ImmutableSandboxedEnvironment):
    """Ansible's native evaluation of a variable (a list stays a list) inside Jinja's immutable sandbox."""


@cache
def _env() -> jinja2.Environment:
    return _configure(ImmutableSandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(ROLES_DIR)),
        trim_blocks=True, lstrip_blocks=False, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False,
    ))


@cache
def _native() -> NativeEnvironment:
    env = _NativeSandbox(undefined=jinja2.StrictUndefined)
    _configure(env)
    return env


@cache
def _parsed(path: Path) -> Any:
    """A role file's YAML, parsed once per process (roles are part of the installed package) with
    libyaml when present, as Ansible's own loader does (:func:`blueprints.datacache.parse_yaml`).
    Callers must not change what it returns."""
    return parse_yaml(path.read_bytes()) if path.is_file() else None


def _load(path: Path) -> dict[str, Any]:
    return dict(_parsed(path) or {})


@cache
def _expression(source: str) -> jinja2.Template:
    """``source`` compiled once by the native environment (a template is reusable; compiling is most of
    the cost of evaluating one)."""
    return _native().from_string(source)


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def role_variables(role: str, variables: Mapping[str, Any], os_family: OsFamily = "Debian") -> dict[str, Any]:
    """The variables a template of ``role`` sees: ``defaults/main.yml`` under ``variables`` (the
    group_vars), then ``vars/main.yml`` and ``vars/<os_family>.yml`` over them (Ansible's
    precedence), plus ``ansible_managed``.

    Values of the role's own files that are themselves templates (``"{{ ... }}"``) are evaluated the
    way Ansible does, to native types; one that needs a host fact cannot be known off the node and is
    left out, so a template that uses it fails with an undefined variable. ``variables`` are data: a
    value there is never evaluated, whatever it holds (on bare metal they reach Ansible marked
    ``!unsafe``, :mod:`clusterforge.ansible.render`). Raises ``KeyError`` for an unknown role.
    """
    d = ROLES_DIR / role
    if not d.is_dir():
        raise KeyError(role)
    role_vars = {**_load(d / "vars" / "main.yml"), **_load(d / "vars" / f"{os_family}.yml")}
    merged: dict[str, Any] = {
        **_load(d / "defaults" / "main.yml"),
        **dict(variables),
        **role_vars,
        "ansible_managed": ANSIBLE_MANAGED,
        "role_path": str(d),
    }
    data = {k for k, v in variables.items() if not isinstance(v, AnsibleExpression)} - set(role_vars)  # never evaluated
    pending = {k for k, v in merged.items() if k not in data and _templated(v)}
    for _ in range(len(pending) + 1):
        progress = False
        for k in sorted(pending):
            ctx = {n: v for n, v in merged.items() if n not in pending}
            try:
                merged[k] = _expression(merged[k]).render(ctx)
            except jinja2.UndefinedError:
                continue
            pending.discard(k)
            progress = True
        if not progress:
            break
    for k in pending:
        del merged[k]
    return merged


def render_role_template(role: str, template: str, variables: Mapping[str, Any],
                         os_family: OsFamily = "Debian") -> str:
    """``roles/<role>/templates/<template>`` rendered with ``variables`` (the role's prefixed
    variables, e.g. from :func:`blueprints.role_vars.node_role_vars`) over the role's defaults.

    Returns the file text exactly as Ansible's template module writes it. Raises
    :class:`RoleTemplateError` when the template is missing or uses a variable, filter or test
    that is not available here.
    """
    ctx = role_variables(role, variables, os_family)
    try:
        return _env().get_template(f"{role}/templates/{template}").render(ctx)
    except jinja2.TemplateNotFound as e:
        raise RoleTemplateError(f"roles/{role}/templates/{template} does not exist") from e
    except (jinja2.UndefinedError, jinja2.TemplateSyntaxError, ValueError) as e:  # ValueError: an encoder refused a value
        raise RoleTemplateError(f"roles/{role}/templates/{template}: {e}") from e


def each_task(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task file's YAML data ``node``, the tasks inside ``block`` / ``rescue`` / ``always`` included
    (the block itself too), in file order."""
    if isinstance(node, list):
        for item in node:
            yield from each_task(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            if key in node:
                yield from each_task(node[key])


@cache
def _template_tasks(role: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((ROLES_DIR / role / "tasks").glob("*.yml")):
        for task in each_task(_parsed(path)):
            args = task.get("ansible.builtin.template", task.get("template"))
            if isinstance(args, dict) and "loop" not in task and "with_items" not in task:
                out.setdefault(str(args.get("src")), []).append(task)
    return out


def template_task(role: str, template: str) -> dict[str, Any]:
    """The one ``ansible.builtin.template`` task of ``role`` that renders ``template`` (the task as
    YAML data). Raises :class:`RoleTemplateError` when there is none or more than one (a looped
    task has no single destination and does not count)."""
    tasks = _template_tasks(role).get(template, [])
    if len(tasks) != 1:
        raise RoleTemplateError(f"roles/{role}/tasks: {len(tasks)} template tasks render {template}; "
                                "a shared node file needs exactly one")
    return tasks[0]


NODE_STATE = "_on_disk["
"""Marks a role's "the file on the node differs" condition: a write task runs only when the checksum, mode or
owner that the role's file probe read on the node differ from what it would write (``__<role>_on_disk[dest]``).
A cloud node gets the file from cloud-init at first boot, when nothing is on its disk yet, so the condition
holds there and :func:`role_file` does not evaluate it."""


def _when(task: Mapping[str, Any], ctx: Mapping[str, Any], where: str) -> bool:
    conds = task.get("when", [])
    for cond in conds if isinstance(conds, list) else [conds]:
        if NODE_STATE in str(cond):
            continue
        try:
            value = _expression("{{ (" + str(cond) + ") | bool }}").render(ctx)
        except jinja2.UndefinedError as e:
            raise RoleTemplateError(f"{where}: `when: {cond}` needs a value known only on the node ({e})") from e
        if not value:
            return False
    return True


def role_file(role: str, template: str, variables: Mapping[str, Any], os_family: OsFamily = "Debian") -> RoleFile | None:
    """The file the role's task for ``template`` writes on a node with ``variables``, or ``None``
    when that task's ``when`` is false for them.

    Destination, mode and condition come from the role's ``ansible.builtin.template`` task
    (:func:`template_task`), evaluated with the same variables; the content from
    :func:`render_role_template`. Raises :class:`RoleTemplateError` when the role has no single
    such task or its condition needs a host fact.
    """
    task = template_task(role, template)
    args = task.get("ansible.builtin.template", task.get("template")) or {}
    ctx = role_variables(role, variables, os_family)
    if not _when(task, ctx, f"roles/{role} task {task.get('name')!r}"):
        return None
    dest = _expression(str(args["dest"])).render(ctx)
    return RoleFile(path=str(dest), mode=str(args.get("mode", "0644")),
                    content=render_role_template(role, template, variables, os_family))
