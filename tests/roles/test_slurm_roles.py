"""The Slurm roles (munge, slurm_dbd, slurm_controller, slurm_node, slurm_login) converge for real, as a user runs them.

``clusterforge``'s own path: the example blueprint is rendered (inventory, group_vars from ``blueprints/role_vars.py``,
``site.yml``) and ``site.yml`` runs with the Slurm roles' tags into root filesystems, one per host, through the chroot
connection (``tests/roles/conftest.py``: cached Debian 12 debootstrap root, ``.deb`` cache, Ubuntu-shaped copies).

* Debian 12: the L40S example (controller with slurmdbd + MariaDB, a configless compute node, a login host), whose
  whole-site converge and rerun the converge tests run anyway: this module reads that shared converge (every role,
  the Slurm ones included) and runs its check run on copies of its roots;
* Ubuntu 22.04 (the DGX example's own release): the DGX example with ``configless: false`` and an external accounting
  database whose password file the site put on the controller. The root is Debian's with Ubuntu's os-release, so
  Ansible selects the Ubuntu paths while apt still installs Debian bookworm's packages (Slurm 22.05.8, not the 21.08.5
  Ubuntu 22.04 ships): the roles pin no Slurm version, so this proves the roles' steps on Ubuntu, not Ubuntu's builds.

Asserted: the files with their owners and modes, the slurmd unit drop-in against the Debian unit it overrides
(``/lib/systemd/system/slurmd.service``: ``ConditionPathExists=/etc/slurm/slurm.conf``), the munge key identical on
every host and never in any log, rendered file or ``--check --diff`` output (nor is the database password), and a
rerun with changed=0. Image mode: nothing is started in a chroot, so MariaDB, slurmdbd and sacctmgr are not run here
(the database script runs against a private MariaDB in ``test_the_database_script_creates_the_database_and_user``).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from blueprints import load_blueprint
from clusterforge.ansible.render import ROLES_DIR
from clusterforge.ansible.runner import chroot_connection, load_summary, run_site
from tests.conftest import EXAMPLES

from .conftest import (
    blueprint_for,
    copy_rootfs,
    harvest_debs,
    installed_packages,
    remove_tree,
    rewritten_files,
    shape_as,
    snapshot_root,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the chroot connection needs root (CI runs as root)")]

TAGS = ["munge", "slurm_dbd", "slurm_controller", "slurm_node", "slurm_login"]
SITE_PASSWORD = "site-secret-Xq7pZr2m9Lw4Tn8v"
"""The external database's password the site puts on the controller (Ubuntu case)."""


def _dgx_external_db(tmp: Path) -> Path:
    """The DGX example with the files written on the nodes (not configless) and an external accounting database."""
    yaml = YAML()
    doc = yaml.load((EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text())
    doc["orchestrator"]["configless"] = False
    doc["orchestrator"]["accounting"] = {"database_host": "10.0.0.5", "password_file": "/etc/slurm/site-dbpass"}
    path = tmp / "dgx-slurm-external-db.yaml"
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path


SHARED = {"debian-12"}
"""Cases whose converge is the example's whole-site converge of the converge tests (shared through ConvergeCache)."""

CASES = {
    "debian-12": ("onprem-l40s-roce", {"controller": "ctl-01", "node": "l40s-01", "login": "login-01"}),
    "ubuntu-22.04": ("dgx-external-db", {"controller": "mgmt-01", "node": "dgx-01"}),
}


def _secrets(root: Path) -> dict[str, bytes]:
    """The secrets a converge leaves on the controller: the munge key (raw, base64, hex) and the database password."""
    key = (root / "etc/munge/munge.key").read_bytes()
    out = {"munge key (base64)": base64.b64encode(key), "munge key (hex)": key.hex().encode(),
           "munge key (raw, first 32 bytes)": key[:32]}
    for rel in ("etc/slurm/slurmdbd.dbpass", "etc/slurm/site-dbpass"):
        if (root / rel).exists():
            out[f"/{rel}"] = (root / rel).read_text().strip().encode()
    return out


def _log_dir(slurm: dict[str, Any], path: Path) -> Path:
    """The folder of ``slurm["logs"]`` that holds ``path`` (the fixture's own, or the shared converge's runs)."""
    return next(d for d in slurm["logs"] if path.is_relative_to(d))


def _changed(summary: dict[str, Any]) -> list[str]:
    return [f"{r['host']}: {r['task']}" for r in summary["results"] if r["status"] == "changed"]


@pytest.fixture(scope="module", params=sorted(CASES))
def slurm(request, tmp_path_factory):
    """One converge, its rerun and a ``--check --diff`` run after the secret files were altered, for one OS.

    The Debian case is the L40S example's whole-site converge, which the converge tests run anyway (:data:`SHARED`,
    from the run's ConvergeCache); its check run works on copies of those roots, so the shared roots stay as
    converged. The Ubuntu case converges the Slurm roles alone (its blueprint differs from the example's)."""
    os_name = request.param
    example, hosts = CASES[os_name]
    tmp = tmp_path_factory.mktemp(f"slurm-{os_name}")
    seconds: dict[str, float] = {}
    logs = [tmp]
    runs = []
    try:
        if os_name in SHARED:
            c = request.getfixturevalue("converges").get(example, os_name)
            loaded = load_blueprint(blueprint_for(example, os_name, tmp / "bp"))
            roots = {h: c.roots[h] for h in hosts.values()}
            runs += [(c.rc, c.first), (c.rerun_rc, c.rerun)]
            seconds.update({k: c.seconds[k] for k in ("converge", "rerun")})
            logs.append(c.out)
            t0 = time.perf_counter()
            check_roots = {}
            for h, r in roots.items():
                check_roots[h] = snapshot_root(r, tmp / f"root-{h}")
            seconds["copy"] = time.perf_counter() - t0
        else:
            source = _dgx_external_db(tmp) if example == "dgx-external-db" else blueprint_for(example, os_name, tmp / "bp")
            loaded = load_blueprint(source)
            t0 = time.perf_counter()
            roots = {h: copy_rootfs(tmp / f"root-{h}") for h in hosts.values()}
            for r in roots.values():
                shape_as(r, os_name)
            ctl = roots[hosts["controller"]]
            if example == "dgx-external-db":  # the site's secret store put the external database's password there
                (ctl / "etc/slurm").mkdir(parents=True, exist_ok=True)
                pw = ctl / "etc/slurm/site-dbpass"
                pw.write_text(SITE_PASSWORD + "\n")
                pw.chmod(0o600)
            seconds["copy"] = time.perf_counter() - t0
            for name in ("converge", "rerun"):
                t0 = time.perf_counter()
                rc = run_site(loaded, tmp / f"ansible-{name}", tags=TAGS, connection_override=chroot_connection(roots))
                seconds[name] = time.perf_counter() - t0
                runs.append((rc, load_summary(tmp / f"ansible-{name}")))
                if name == "converge":
                    for r in roots.values():
                        harvest_debs(r)
            check_roots = roots
        # alter the files that hold secrets, then ask what would change, with diffs: nothing secret may be shown
        # (check mode changes nothing; the converged files are put back afterwards for the other tests)
        dbd_conf = check_roots[hosts["controller"]] / "etc/slurm/slurmdbd.conf"
        node_key = check_roots[hosts["node"]] / "etc/munge/munge.key"
        converged = {p: p.read_bytes() for p in (dbd_conf, node_key)}
        dbd_conf.write_bytes(converged[dbd_conf] + b"DebugLevel=debug5\n")
        node_key.chmod(0o600)
        node_key.write_bytes(os.urandom(1024))
        t0 = time.perf_counter()
        rc = run_site(loaded, tmp / "ansible-check", check=True, verbosity=2, tags=TAGS,
                      connection_override=chroot_connection(check_roots))
        seconds["check"] = time.perf_counter() - t0
        runs.append((rc, load_summary(tmp / "ansible-check")))
        for p, data in converged.items():
            p.write_bytes(data)
        node_key.chmod(0o400)
        print(f"\nslurm roles on {os_name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
        yield {"os": os_name, "hosts": hosts, "roots": roots, "runs": runs, "tmp": tmp, "logs": logs,
               "seconds": seconds}
    finally:
        remove_tree(tmp)


def _root_mode(root: Path, rel: str) -> tuple[int, str, str]:
    """Mode, owner and group of ``rel`` in ``root``, with names read from the root's own passwd and group files."""
    st = (root / rel).stat()
    users = {int(f[2]): f[0] for f in (line.split(":") for line in (root / "etc/passwd").read_text().splitlines())}
    groups = {int(f[2]): f[0] for f in (line.split(":") for line in (root / "etc/group").read_text().splitlines())}
    return st.st_mode & 0o7777, users.get(st.st_uid, str(st.st_uid)), groups.get(st.st_gid, str(st.st_gid))


def test_the_roles_converge_and_rerun_with_nothing_changed(slurm):
    (rc, first), (rc2, rerun), _ = slurm["runs"]
    assert rc == 0, first["failures"]
    assert rc2 == 0, rerun["failures"]
    ran = {r["role"] for r in first["results"] if r["status"] != "skipped"}
    assert set(TAGS) - ({"slurm_login"} if "login" not in slurm["hosts"] else set()) <= ran, ran
    assert _changed(rerun) == []
    assert rewritten_files(rerun) == []
    assert slurm["seconds"]["rerun"] < slurm["seconds"]["converge"]


def test_packages_come_from_the_catalog_names(slurm):
    hosts, roots = slurm["hosts"], slurm["roots"]
    want = {"controller": {"munge", "slurmctld", "slurm-client", "slurmdbd"}, "node": {"munge", "slurmd"},
            "login": {"munge", "slurm-client"}}
    for part, host in hosts.items():
        have = installed_packages(roots[host])
        assert want[part] <= set(have), (host, sorted(want[part] - set(have)))
    ctl = installed_packages(roots[hosts["controller"]])
    assert ("mariadb-server" in ctl) == (slurm["os"] == "debian-12")  # local database only


def test_one_munge_key_on_every_host(slurm):
    roots = slurm["roots"]
    keys = {h: (r / "etc/munge/munge.key").read_bytes() for h, r in roots.items()}
    ctl_key = keys[slurm["hosts"]["controller"]]
    assert len(ctl_key) == 1024  # generated by the role (the package's own key is 128 bytes)
    assert all(k == ctl_key for k in keys.values()), {h: len(k) for h, k in keys.items()}
    for h, r in roots.items():
        assert _root_mode(r, "etc/munge/munge.key") == (0o400, "munge", "munge"), h
    # the check run after the node's key was replaced reports that it would write it again
    _, _, (rc, check) = slurm["runs"]
    node = slurm["hosts"]["node"]
    assert rc == 0, check["failures"]
    assert f"{node}: Write the cluster key on this host (0400 munge:munge)." in _changed(check)


def test_no_secret_in_logs_rendered_files_or_diffs(slurm):
    """Every file the three runs left (rendered inventory and group_vars, ansible-runner's stdout and job events,
    summaries; the check run at verbosity 2 with --diff over an altered slurmdbd.conf) is searched for the munge key and
    the database password."""
    ctl = slurm["roots"][slurm["hosts"]["controller"]]
    secrets = _secrets(ctl)
    assert len(secrets) == 4
    searched = 0
    for path in (p for d in slurm["logs"] for p in d.rglob("*")):
        if not path.is_file() or path.is_symlink() or "root-" in path.relative_to(_log_dir(slurm, path)).parts[0]:
            continue
        data = path.read_bytes()
        searched += 1
        for what, secret in secrets.items():
            assert secret not in data, f"{what} found in {path}"
    assert searched > 20
    # the check run did see the altered slurmdbd.conf (so a diff would have been shown)
    _, _, (_, check) = slurm["runs"]
    assert f"{slurm['hosts']['controller']}: Write slurmdbd.conf with the database password appended (0600 slurm)." in _changed(check)


def test_slurmdbd_conf_carries_the_password_and_only_there(slurm):
    ctl = slurm["roots"][slurm["hosts"]["controller"]]
    conf = (ctl / "etc/slurm/slurmdbd.conf").read_text()
    assert _root_mode(ctl, "etc/slurm/slurmdbd.conf") == (0o600, "slurm", "slurm")
    lines = [line for line in conf.splitlines() if line.startswith("StoragePass=")]
    if slurm["os"] == "debian-12":
        pw = (ctl / "etc/slurm/slurmdbd.dbpass").read_text().strip()
        assert _root_mode(ctl, "etc/slurm/slurmdbd.dbpass") == (0o600, "root", "root")
        assert len(pw) >= 40
        cnf = (ctl / "etc/mysql/mariadb.conf.d/60-clusterforge-slurmdbd.cnf").read_text()
        # https://slurm.schedmd.com/accounting.html, "MySQL Configuration"
        assert "innodb_buffer_pool_size=4096M" in cnf and "innodb_lock_wait_timeout=900" in cnf
        assert (ctl / "usr/local/sbin/clusterforge-slurmdbd-db").stat().st_mode & 0o777 == 0o755
        unit = (ctl / "etc/systemd/system/clusterforge-slurmdbd-db.service").read_text()
        assert "Before=slurmdbd.service" in unit and "After=mariadb.service" in unit
        assert (ctl / "etc/systemd/system/multi-user.target.wants/clusterforge-slurmdbd-db.service").is_symlink()
    else:
        pw = SITE_PASSWORD
        assert not (ctl / "etc/slurm/slurmdbd.dbpass").exists()
        assert not (ctl / "etc/mysql/mariadb.conf.d/60-clusterforge-slurmdbd.cnf").exists()
        assert "StorageHost=10.0.0.5" in conf
    assert lines == [f"StoragePass={pw}"]
    assert conf.endswith(f"StoragePass={pw}\n")
    # the rendered slurmdbd.conf (clusterforge render) never holds it
    for rendered in (p for d in slurm["logs"] for p in d.rglob("slurmdbd.conf")):
        if "root-" not in str(rendered.relative_to(_log_dir(slurm, rendered))):
            assert "StoragePass" not in rendered.read_text()


def test_controller_files_state_and_units(slurm):
    ctl = slurm["roots"][slurm["hosts"]["controller"]]
    assert (ctl / "etc/slurm/slurm.conf").read_text().count("SlurmctldHost=") == 1
    for rel in ("etc/slurm/slurm.conf", "etc/slurm/gres.conf", "etc/slurm/cgroup.conf"):
        assert _root_mode(ctl, rel) == (0o644, "root", "root"), rel
    assert _root_mode(ctl, "var/spool/slurmctld") == (0o700, "slurm", "slurm")
    assert _root_mode(ctl, "var/log/slurm") == (0o755, "slurm", "slurm")
    wants = ctl / "etc/systemd/system/multi-user.target.wants"
    assert (wants / "slurmctld.service").is_symlink() and (wants / "munge.service").is_symlink()
    assert (wants / "slurmdbd.service").is_symlink()
    assert "After=slurmdbd.service" in (ctl / "etc/systemd/system/slurmctld.service.d/clusterforge.conf").read_text()
    assert not (ctl / "run/munge/munged.pid").exists()  # image mode: nothing started


def test_compute_node_unit_dropin_and_health(slurm):
    node = slurm["roots"][slurm["hosts"]["node"]]
    unit = (node / "lib/systemd/system/slurmd.service").read_text()
    assert "ConditionPathExists=/etc/slurm/slurm.conf" in unit  # what the drop-in must clear on configless nodes
    dropin = (node / "etc/systemd/system/slurmd.service.d/clusterforge.conf").read_text()
    default = (node / "etc/default/slurmd").read_text()
    assert "Delegate=yes" in dropin
    devices = [f"/dev/nvidia{i}" for i in range(4 if slurm["os"] == "debian-12" else 8)]
    assert f"ExecStartPre=/usr/local/sbin/clusterforge-wait-devices 300 {' '.join(devices)}\n" in dropin
    assert "TimeoutStartSec=330" in dropin
    if slurm["os"] == "debian-12":  # configless
        assert "[Unit]\nConditionPathExists=\n" in dropin
        assert 'SLURMD_OPTIONS="--conf-server ctl-01:6817"' in default
        assert not (node / "etc/slurm/slurm.conf").exists()
    else:
        assert "ConditionPathExists=" not in dropin
        assert 'SLURMD_OPTIONS=""' in default
        ctl = slurm["roots"][slurm["hosts"]["controller"]]
        for rel in ("etc/slurm/slurm.conf", "etc/slurm/gres.conf", "etc/slurm/cgroup.conf"):
            assert (node / rel).read_bytes() == (ctl / rel).read_bytes(), rel
            assert _root_mode(node, rel) == (0o644, "root", "root"), rel
    assert (node / "etc/systemd/system/multi-user.target.wants/slurmd.service").is_symlink()
    assert _root_mode(node, "var/spool/slurmd") == (0o755, "root", "root")
    assert _root_mode(node, "usr/sbin/clusterforge-slurm-health") == (0o755, "root", "root")
    import json

    health = json.loads((node / "etc/clusterforge/slurm-health.json").read_text())
    assert health["gpu_devices"] == devices and health["gpu_count"] == len(devices)
    assert health["reason_prefix"] == "cf-health"
    for name in ("prolog", "epilog"):
        assert _root_mode(node, f"etc/slurm/{name}.sh") == (0o755, "root", "root")
        assert _root_mode(node, f"etc/slurm/{name}.d") == (0o755, "root", "root")
        role_hooks = sorted(p.name.removesuffix(".j2") for p in (ROLES_DIR / "slurm_node/templates" / f"{name}.d").glob("*"))
        assert sorted(p.name for p in (node / f"etc/slurm/{name}.d").iterdir()) == role_hooks


@pytest.mark.parametrize("slurm", sorted(c for c, (_, hosts) in CASES.items() if "login" in hosts), indirect=True)
def test_login_host_gets_the_client_and_the_files(slurm):
    """Only the cases with a login group (the Debian one) are asked; the fixture's converge is shared, not rerun."""
    login = slurm["roots"][slurm["hosts"]["login"]]
    ctl = slurm["roots"][slurm["hosts"]["controller"]]
    assert (login / "usr/bin/sbatch").exists()
    for rel in ("etc/slurm/slurm.conf", "etc/slurm/gres.conf"):
        assert (login / rel).read_bytes() == (ctl / rel).read_bytes()
    assert not (login / "etc/slurm/slurmdbd.conf").exists()


def test_the_gpu_wait_is_bounded_and_lets_slurmd_start(tmp_path):
    """ExecStartPre of slurmd: returns at once when the devices exist, and after the bound (exit 0, the missing ones
    named) when they do not, so slurmd starts and Slurm reports the GPU count it finds."""
    script = str(ROLES_DIR / "slurm_node/files/clusterforge-wait-devices")
    t0 = time.perf_counter()
    ok = subprocess.run([script, "5", "/dev/null"], check=False, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and time.perf_counter() - t0 < 2
    t0 = time.perf_counter()
    late = subprocess.run([script, "2", "/dev/null", str(tmp_path / "nvidia0")], check=False, capture_output=True,
                          text=True, timeout=30)
    took = time.perf_counter() - t0
    assert late.returncode == 0 and 2 <= took < 5, took
    assert f"still missing: {tmp_path / 'nvidia0'}" in late.stderr
    # a regular file is not a device
    (tmp_path / "nvidia1").write_text("")
    assert "nvidia1" in subprocess.run([script, "1", str(tmp_path / "nvidia1")], check=False, capture_output=True,
                                       text=True, timeout=30).stderr


@pytest.fixture
def private_mariadb(tmp_path):
    """A MariaDB server of this test's own (data directory, socket, no network), stopped on teardown."""
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        pytest.fail("mariadb-server is not installed: `apt-get install mariadb-server` (tests/system-packages.txt)")
    data, sock, pid = tmp_path / "data", tmp_path / "mysqld.sock", tmp_path / "mysqld.pid"
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
                    "--auth-root-authentication-method=socket"], check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}", "--skip-networking",
                             "--user=root", f"--pid-file={pid}", f"--log-error={tmp_path / 'error.log'}",
                             "--innodb-buffer-pool-size=16M"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["mariadb", f"--socket={sock}", "-e", "SELECT 1"], check=False,
                             capture_output=True).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "error.log").read_text()[-2000:]
            time.sleep(0.3)
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_the_database_script_creates_the_database_and_user(private_mariadb, tmp_path):
    """clusterforge-slurmdbd-db (the boot-time unit's script, rendered by the role) against a real MariaDB: creates
    the database and the user for both host names with the file's password, reports nothing to do on a second run,
    follows a changed password, and refuses a password it cannot carry unquoted."""
    from blueprints.role_templates import render_role_template

    pwfile = tmp_path / "dbpass"
    pwfile.write_text("first-Password-0123456789\n")
    script = tmp_path / "clusterforge-slurmdbd-db"
    script.write_text(render_role_template("slurm_dbd", "slurmdbd-db.sh.j2", {"slurm_dbd_password_file": str(pwfile)}))
    script.chmod(0o755)
    sock = f"--socket={private_mariadb}"

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), sock], check=False, capture_output=True, text=True, timeout=60)

    def login(pw: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["mariadb", sock, "-u", "slurm", "--batch", "--skip-column-names", "-e",
                               "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME='slurm_acct_db'"],
                              check=False, capture_output=True, text=True, env={**os.environ, "MYSQL_PWD": pw},
                              timeout=30)

    first = run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("changed: database slurm_acct_db and user slurm")
    assert login("first-Password-0123456789").stdout.strip() == "1"
    assert login("wrong-Password-0123456789").returncode != 0
    grants = subprocess.run(["mariadb", sock, "--batch", "-e", "SHOW GRANTS FOR 'slurm'@'127.0.0.1'"],
                            check=True, capture_output=True, text=True, timeout=30).stdout
    assert "ALL PRIVILEGES ON `slurm_acct_db`.*" in grants
    assert run().stdout.strip() == "ok"
    pwfile.write_text("second-Password-0123456789\n")
    assert run().stdout.startswith("changed:")
    assert login("second-Password-0123456789").stdout.strip() == "1"
    assert login("first-Password-0123456789").returncode != 0
    pwfile.write_text("it's-quoted-0123456789\n")
    bad = run()
    assert bad.returncode == 2 and "must be 16 or more of" in bad.stderr and "it's" not in bad.stderr
