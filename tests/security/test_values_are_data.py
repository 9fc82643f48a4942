"""Property test of issue #33: a blueprint value is data wherever it goes, never a template, shell or config.

For every string a user can write in a blueprint (every field, list item, mapping key and value of the JSON
Schema: :func:`tests.security.hostile.string_fields`) and every hostile value of
:data:`tests.security.hostile.HOSTILE` (template expressions, ``$(…)``, backticks, ``;``, newlines, quotes,
a leading ``-``, ``]``, a new config section), either

* ``check`` refuses the blueprint with an error located at the field (file, line, column and the field's
  path), or
* ``render`` (on premises: inventory, group_vars, roles, scripts) and ``plan`` (AWS: the Pulumi program
  under its mock engine) and the cloud user data of every node group produce files in which the value is
  inert: the canary command never ran (a marker file), every shell file passes ``bash -n`` and has no line
  where ``touch`` is a word of its own, YAML / TOML / JSON files parse, Ansible variable files hold the
  value as one ``!unsafe`` string, and no other file has more lines than the same render without the value.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from blueprints import BlueprintInvalid, check, parse_blueprint
from blueprints.role_templates import RoleTemplateError, role_file
from blueprints.role_vars import node_role_vars, roles_for
from blueprints.settings import node_settings
from clusterforge.cli import main
from stacks.cloud_init import SHARED_TEMPLATES, placeholder_endpoints, render_cloud_config
from tests.ansible_vars import is_unsafe, load_vars
from tests.blueprints.rule_cases.emit import emit

from .hostile import BASES, HOSTILE, Path_, locate, string_fields, value_at, with_value

FIELDS = string_fields()


def _base_for(field: Path_) -> tuple[str, Path_]:
    for name, doc in BASES.items():
        path = locate(doc, field)
        if path is not None:
            return name, path
    raise AssertionError(f"no base document holds {field}")


def _concrete(path: Path_) -> Path_:
    """The document path a finding names for a ``locate`` path (markers resolved to what the loader sees)."""
    out: list[Any] = []
    for p in path:
        if p == ("<new-list>",):
            out.append(0)
        elif isinstance(p, tuple):
            break  # a mapping key: findings name the mapping or the key
        else:
            out.append(p)
    return tuple(out)


def _files(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix not in (".pyc",) and "roles" not in p.relative_to(root).parts:
            try:
                out[str(p.relative_to(root))] = p.read_text()
            except UnicodeDecodeError:
                continue
    return out


def _node_files(text: str, aws: bool) -> dict[str, str]:
    """Every node file of every node group, by group and path: AWS, what the cloud user data writes; on
    premises, what the roles' templates write with the group's variables (rendered outside Ansible, by the
    same templates; a template that needs a host fact is left out, and one whose encoder refuses the value
    writes nothing, which is a refusal)."""
    loaded = parse_blueprint(text, "bp.yaml")
    out = {}
    for g in loaded.blueprint.node_groups:
        s = node_settings(loaded.blueprint, g.name)
        if aws:
            doc = YAML(typ="safe", pure=True).load(render_cloud_config(s, placeholder_endpoints(s), platform="ubuntu"))
            for f in doc.get("write_files", []):
                out[f"{g.name}:{f['path']}"] = f["content"]
            continue
        roles = roles_for(loaded.blueprint, s)
        for role, template, _ in SHARED_TEMPLATES:  # the templates rendered off the node (the cloud path's)
            if role not in roles:
                continue
            try:
                f = role_file(role, template, node_role_vars(s, role))
            except RoleTemplateError:
                continue  # an encoder refused the value: nothing is written
            if f is not None:
                out[f"{g.name}:{f.path}"] = f.content
    return out


def _outputs(text: str, work: Path, aws: bool) -> dict[str, str]:
    """Every file ``render`` writes for the blueprint ``text`` (and the AWS user data); ``plan`` runs too."""
    bp = work / "bp.yaml"
    bp.write_text(text)
    out = work / "render"
    assert main(["render", str(bp), "-o", str(out)]) == 0
    files = _files(out)
    if aws:
        assert main(["plan", str(bp), "--json"]) == 0
    files.update({f"node/{k}": v for k, v in _node_files(text, aws).items()})
    return files


def _is_shell(name: str, text: str) -> bool:
    return name.endswith(".sh") or text.startswith(("#!/bin/bash", "#!/bin/sh"))


def _assert_inert(name: str, text: str, baseline: str | None, value: str, tmp: Path) -> None:
    where = f"{name} with {value!r}"
    if name.endswith((".yml", ".yaml")):
        data = load_vars(text)
        if "group_vars" in name or name.endswith("inventory.yml"):
            leaves: list[Any] = []

            def walk(n: Any) -> None:
                if isinstance(n, dict):
                    for v in n.values():
                        walk(v)
                elif isinstance(n, list):
                    for v in n:
                        walk(v)
                elif isinstance(n, str):
                    leaves.append(n)

            walk(data)
            hits = [v for v in leaves if "CANARY" in v or value.strip() in v]
            assert all(is_unsafe(v) for v in hits), f"{where}: a value reaches Ansible templatable"
        return
    if name.endswith(".toml"):
        tomllib.loads(text)
    elif name.endswith(".json"):
        json.loads(text)
    if _is_shell(name, text):
        script = tmp / "check.sh"
        script.write_text(text)
        res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert res.returncode == 0, f"{where}: bash -n: {res.stderr}"
        for line in text.splitlines():
            if "touch" not in line:
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue  # a line inside a multi-line quoted word: bash -n already read it as one
            assert "touch" not in words, f"{where}: `touch` is a command word in: {line}"
    if baseline is not None:
        assert len(text.splitlines()) <= len(baseline.splitlines()) + text.count("\\n"), \
            f"{where}: the value added lines to {name}"


_BASELINES: dict[str, dict[str, str]] = {}


def _baseline(name: str, work: Path) -> dict[str, str]:
    if name not in _BASELINES:
        text, _ = emit(BASES[name])
        d = work / f"baseline-{name}"
        d.mkdir()
        _BASELINES[name] = _outputs(text, d, BASES[name]["target"]["provider"] == "aws")
    return _BASELINES[name]


@pytest.mark.slow
@pytest.mark.parametrize("field", FIELDS, ids=[".".join(f) for f in FIELDS])
def test_a_hostile_value_is_refused_at_its_field_or_stays_inert_data(field: Path_, tmp_path: Path) -> None:
    base, path = _base_for(field)
    canary = tmp_path / "canary"
    accepted = []
    valid = value_at(BASES[base], path)
    # each hostile value alone, and after the field's valid value (a pattern that only checks how a value starts
    # would let `1.11.0$(...)` through)
    tries = [raw for raw in HOSTILE] + ([valid + raw for raw in HOSTILE] if valid else [])
    for n, raw in enumerate(tries):
        value = raw.replace("CANARY", str(canary))
        doc = with_value(BASES[base], path, value)
        text, _ = emit(doc)
        try:
            loaded = parse_blueprint(text, "bp.yaml")
            findings = [f for f in check(loaded) if f.severity == "error"]
        except BlueprintInvalid as e:
            findings = [f for f in e.findings if f.severity == "error"]
        assert not canary.exists(), f"{field}: loading {raw!r} ran it"
        if findings:
            parent = _concrete(path)[:-1]
            located = [f for f in findings if tuple(f.path[: len(parent)]) == parent and f.line >= 1]
            assert located, f"{field} = {raw!r}: refused, but not at the field: {[str(f) for f in findings]}"
            continue
        accepted.append((n, raw, value, text))
    for n, raw, value, text in accepted:
        work = tmp_path / f"accepted-{n}"
        work.mkdir()
        aws = BASES[base]["target"]["provider"] == "aws"
        files = _outputs(text, work, aws)
        assert not canary.exists(), f"{field} = {raw!r}: render or plan ran the value"
        baseline = _baseline(base, tmp_path)
        for name, content in files.items():
            if "CANARY" in raw and str(canary) not in content and value not in content:
                continue
            _assert_inert(name, content, baseline.get(name), value, tmp_path)


def test_every_string_field_of_the_schema_is_tried() -> None:
    """The walk finds the fields a reviewer would try first, and a base document holds each of them."""
    names = {".".join(f) for f in FIELDS}
    for want in ("network.nccl.env.<key>", "network.nccl.env.*", "node_groups.[].hardware.nics.[].netdev",
                 "node_groups.[].sandbox.runtime_class", "software.lustre_client_repos.*.suite",
                 "storage.[].mount_options.[]", "orchestrator.account", "target.ssh.user", "description"):
        assert want in names, want
    for f in FIELDS:
        _base_for(f)
    for name, doc in BASES.items():  # a refusal must come from the hostile value, never from the base
        text, _ = emit(doc)
        assert not [str(f) for f in check(parse_blueprint(text, name)) if f.severity == "error"], name
