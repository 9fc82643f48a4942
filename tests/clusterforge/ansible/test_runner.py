"""``run_site``: failures reported as one line per host, artefacts per run, a rerun that resumes, bad input.

The run tests use the local-workstation example on a private copy of the Debian 12 root filesystem.
"""

from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from blueprints import load_blueprint
from clusterforge.ansible.runner import RunDisplay, chroot_connection, failed_hosts, load_summary, run_site
from clusterforge.errors import ProvisionError
from tests.conftest import EXAMPLES
from tests.roles.conftest import VENDOR_OFF, copy_rootfs


def _console() -> Console:
    return Console(record=True, width=300, force_terminal=False, color_system=None)


def test_display_counts_results_and_prints_one_line_per_failure():
    con = _console()
    d = RunDisplay(console=con)
    events = [
        {"event": "playbook_on_play_start", "event_data": {"play": "Tune the hosts."}},
        {"event": "runner_on_start", "event_data": {"host": "n1", "task": "Write sysctls."}},
        {"event": "runner_on_ok", "event_data": {"host": "n1", "task": "Write sysctls.", "role": "host_tuning",
                                                 "task_action": "ansible.builtin.template", "res": {"changed": True}}},
        {"event": "runner_on_skipped", "event_data": {"host": "n1", "task": "Start irqbalance."}},
        {"event": "runner_on_failed", "event_data": {"host": "n2", "task": "Download the key.", "ignore_errors": True,
                                                     "res": {"msg": "no network"}}},
        {"event": "runner_on_failed", "event_data": {
            "host": "n2", "task": "Write the IPoIB configuration.", "role": "rdma", "task_action": "ansible.builtin.template",
            "res": {"msg": "One or more items failed", "results": [
                {"failed": False, "item": "a"}, {"failed": True, "_ansible_item_label": "ibp24s0", "msg": "dir\nmissing"}]}}},
        {"event": "runner_on_unreachable", "event_data": {"host": "n3", "task": "Gathering Facts",
                                                          "res": {"msg": "ssh: connect to host 10.0.0.3 port 22: timed out"}}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"n1": 1}, "failures": {"n2": 1}, "dark": {"n3": 1}}},
        {"event": "bogus"},
    ]
    for e in events:
        assert d.on_event(e) is True
    assert (d.hosts["n1"].ok, d.hosts["n1"].changed, d.hosts["n1"].skipped) == (1, 1, 1)
    assert (d.hosts["n2"].failed, d.hosts["n2"].ignored) == (1, 1)
    assert d.hosts["n3"].unreachable == 1
    assert [(f.host, f.status) for f in d.failures] == [("n2", "failed"), ("n3", "unreachable")]
    text = con.export_text()
    assert 'n2: task "rdma : Write the IPoIB configuration." failed: item ibp24s0: dir missing' in text
    assert 'n3: task "Gathering Facts" unreachable: ssh: connect to host 10.0.0.3 port 22: timed out' in text
    assert "no network" not in text  # an ignored failure is not reported as a failure
    assert d.stats and d.stats["failures"] == {"n2": 1}


def test_a_limit_that_matches_no_host_is_one_clear_error(tmp_path):
    loaded = load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml")
    with pytest.raises(ProvisionError, match=r"stopped before running any task .*no hosts|stopped before running any task"):
        run_site(loaded, tmp_path / "out", limit="no-such-host", console=_console())
    summary = load_summary(tmp_path / "out")
    assert summary["rc"] != 0 and summary["results"] == []


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_failed_run_is_reported_and_a_rerun_resumes(tmp_path):
    """A run that fails in its last role reports the host, task and reason; the rerun finishes the job and
    the roles that had already converged report no change."""
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    root = copy_rootfs(tmp_path / "root")
    out = tmp_path / "out"
    override = chroot_connection({"localhost": root})
    con = _console()
    broken = {**VENDOR_OFF, "validation_tools_payload_src": str(tmp_path / "missing-payloads")}
    assert run_site(loaded, out, extravars=broken, connection_override=override, console=con) == 1
    text = con.export_text()
    assert 'localhost: task "validation_tools : Copy the validation payloads." failed:' in text
    assert "missing-payloads" in text
    first = load_summary(out)
    assert [f["task"] for f in first["failures"]] == ["Copy the validation payloads."]
    assert failed_hosts(out) == ["localhost"]
    assert (root / "etc/security/limits.d/90-clusterforge-memlock.conf").is_file()  # earlier roles did their work

    con2 = _console()
    assert run_site(loaded, out, extravars=VENDOR_OFF, connection_override=override, limit=",".join(failed_hosts(out)),
                    console=con2) == 0
    second = load_summary(out)
    assert failed_hosts(out) == []
    changed = {(r["role"], r["task"]) for r in second["results"] if r["status"] == "changed"}
    assert changed == {("validation_tools", "Copy the validation payloads.")}, changed
    assert (root / "opt/clusterforge/validate/collectives.py").is_file()
    # every run keeps its own artefacts
    runs = sorted(p for p in (out / "runs").iterdir() if p.is_dir())
    assert len(runs) == 2 and all((r / "summary.json").is_file() and (r / "stdout").is_file() for r in runs)
    assert (out / "runs" / "latest").read_text().strip() == runs[-1].name
    assert json.loads((runs[0] / "summary.json").read_text())["rc"] != 0


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")
def test_invalid_role_variable_fails_at_role_entry_with_the_argument_spec_message(tmp_path):
    loaded = load_blueprint(EXAMPLES / "local-workstation.yaml")
    root = copy_rootfs(tmp_path / "root")
    con = _console()
    rc = run_site(loaded, tmp_path / "out", extravars={**VENDOR_OFF, "host_tuning_cpu_governor": "turbo"},
                  connection_override=chroot_connection({"localhost": root}), console=con)
    assert rc == 1
    failure = load_summary(tmp_path / "out")["failures"][0]
    assert failure["role"] == "host_tuning" and "turbo" in failure["message"]
    assert not (root / "etc/sysctl.d/90-clusterforge.conf").exists(), "nothing ran after the argument check failed"


def test_missing_collections_are_one_clear_error_with_the_install_command(tmp_path, monkeypatch):
    from clusterforge.ansible import runner
    from clusterforge.errors import ToolMissingError

    assert runner.missing_collections() == []  # the venv's `ansible` package bundles them
    monkeypatch.setattr(runner, "REQUIRED_COLLECTIONS", ("community.general", "acme.nonexistent"))
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(tmp_path / "none"))
    assert runner.missing_collections() == ["acme.nonexistent"]
    with pytest.raises(ToolMissingError, match=r"acme\.nonexistent .*ansible-galaxy collection install -r .*requirements\.yml"):
        run_site(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml"), tmp_path / "out", console=_console())
