"""Issue #33, kind 1, on premises: a value that holds a template reaches Ansible as data.

The loader refuses template delimiters in every blueprint string (``value-template-syntax``, tested in
``test_values_are_data.py``). This tests the layer behind it, as if that check had missed a value: every
string of every rendered ``group_vars`` file carries a ``lookup('pipe', 'touch CANARY')`` expression, written by
the real renderer (``clusterforge render``'s :func:`~clusterforge.ansible.render.render_ansible`), and a real
``ansible-playbook`` run in check mode on this machine templates every one of those variables on every host
(``lookup('ansible.builtin.vars', ...)``). The canary file must not appear. The same run with the values
written as plain strings (the renderer before this fix) creates it, so the test can fail.

The rendered ``site.yml`` itself is not run here: its first role asserts a systemd host, which a build
container is not; the roles run for real against a Debian root filesystem in ``tests/roles``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blueprints import load_blueprint
from clusterforge.ansible import render
from tests.ansible_vars import load_vars

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"

PROBE = """\
- name: Template every variable clusterforge rendered for the host.
  hosts: all
  gather_facts: false
  tasks:
    - name: Read each variable through Ansible's templating.
      ansible.builtin.debug:
        msg: "{{ lookup('ansible.builtin.vars', item, default='') }}"  # other groups' variables: undefined here
      loop: "{{ probe_names }}"
"""


def _poison(node: Any, expr: str) -> Any:
    if isinstance(node, str):
        return node + expr
    if isinstance(node, dict):
        return {k: _poison(v, expr) for k, v in node.items()}
    if isinstance(node, list):
        return [_poison(v, expr) for v in node]
    return node


def _run(out: Path, canary: Path, monkeypatch: pytest.MonkeyPatch, *, unsafe: bool) -> subprocess.CompletedProcess[str]:
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")
    expr = "{{ lookup('pipe', 'touch " + str(canary) + "') }}"
    real = render.inventory_data

    def poisoned(lb: Any) -> Any:  # a value no validator caught, in every group variable
        inventory, group_vars = real(lb)
        return inventory, {g: _poison(v, expr) for g, v in group_vars.items()}

    monkeypatch.setattr(render, "inventory_data", poisoned)
    if not unsafe:
        monkeypatch.setattr(render, "as_data", lambda v: v)
    render.render_ansible(loaded, out)
    names = sorted({n for f in (out / "group_vars").glob("*.yml") for n in load_vars(f)})
    (out / "probe.yml").write_text(PROBE)
    env = {**os.environ, "ANSIBLE_CONFIG": str(out / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    extra = {"probe_names": names, "ansible_connection": "local", "ansible_become": False,
             "ansible_python_interpreter": sys.executable}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory.yml", "probe.yml",
                           "--check", "-e", json.dumps(extra)],
                          cwd=out, env=env, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.slow
def test_a_template_in_a_rendered_variable_never_runs_in_ansible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    res = _run(tmp_path / "out", canary, monkeypatch, unsafe=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "touch " + str(canary) in res.stdout, "the probe read the values as they were written"
    assert not canary.exists(), "Ansible evaluated a blueprint value"


@pytest.mark.slow
def test_the_same_values_written_plainly_would_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    _run(tmp_path / "out", canary, monkeypatch, unsafe=False)
    assert canary.exists(), "the probe does not template the variables: the test above proves nothing"
