"""The roles' shared package probe (``roles/clusterforge_common/library/clusterforge_package_probe.py``) reads what
``dpkg-query`` reports, for every status a package can be in: installed, held, only its config files left,
half-installed with a reinstall required, unpacked, never installed. Roles hand apt exactly the packages the probe
does not list (tests/roles/test_apt_fast_path.py converges with it), so a package that is not fully installed
must never be listed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from clusterforge.ansible.render import ROLES_DIR

LIBRARY = ROLES_DIR / "clusterforge_common" / "library"
MODULE_UTILS = ROLES_DIR / "clusterforge_common" / "module_utils"
MODULE = MODULE_UTILS / "clusterforge_probe.py"  # the reading both probe modules import

_STATUS = {  # package -> (dpkg Status field, Version)
    "alpha": ("install ok installed", "1.0-1"),
    "beta": ("hold ok installed", "2:3.4-5"),
    "gamma": ("deinstall ok config-files", "1.0"),
    "delta": ("install reinstreq half-installed", "1.0"),
    "epsilon": ("install ok unpacked", "1.0"),
    "zeta": ("hold ok unpacked", "7.0"),
    "eta": ("install reinstreq installed", "1.0"),  # installed, but dpkg wants it reinstalled ("iiR")
}


def _module():
    spec = importlib.util.spec_from_file_location("clusterforge_probe", MODULE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _admindir(tmp_path: Path) -> Path:
    """A dpkg database (``--admindir``) holding one package in each status of :data:`_STATUS`."""
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    stanzas = [f"Package: {name}\nStatus: {status}\nPriority: optional\nSection: misc\n"
               f"Maintainer: Test <test@example.org>\nArchitecture: all\nVersion: {version}\nDescription: {name}\n"
               for name, (status, version) in _STATUS.items()]
    (admin / "status").write_text("\n".join(stanzas))
    return admin


def _dpkg_query(admin: Path, names: list[str]) -> subprocess.CompletedProcess[str]:
    mod = _module()
    return subprocess.run(["dpkg-query", f"--admindir={admin}", "-W", f"-f={mod.FORMAT}", *names],
                          capture_output=True, text=True, check=False)


def test_only_fully_installed_packages_are_listed_with_and_without_their_version(tmp_path):
    mod = _module()
    out = _dpkg_query(_admindir(tmp_path), [*_STATUS, "never-installed"])
    assert out.returncode == 1, out  # a name that matches no package: exit 1, the others still printed
    installed, held = mod.parse(out.stdout)
    assert installed == ["alpha", "alpha=1.0-1", "beta", "beta=2:3.4-5"]
    assert held == ["beta"]
    # what a role asks: a bare name or an exact pin
    assert "alpha=1.0-1" in installed and "alpha=1.0-2" not in installed
    for name in ("gamma", "delta", "epsilon", "zeta", "eta", "never-installed"):
        assert name not in installed, name


def test_names_are_asked_once_without_version_architecture_or_comparison():
    mod = _module()
    assert mod.package_names(["nvidia-driver-570=570.172.08-0ubuntu1", "libc6:amd64", "fio>=3.30", "",
                              "nvidia-driver-570", " kmod "]) == ["nvidia-driver-570", "libc6", "fio", "kmod"]


def _run_module(args: dict[str, object], tmp_path: Path, path: str,
                module: str = "clusterforge_package_probe") -> dict[str, object]:
    """Run ``module`` as Ansible does (``ansible localhost -m``, the support role's library and module_utils) with
    ``PATH`` = ``path``; returns its result."""
    env = {**os.environ, "PATH": path, "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible"),
           "ANSIBLE_MODULE_UTILS": str(MODULE_UTILS), "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-M", str(LIBRARY), "-m", module, "-a", json.dumps(args)],
                          capture_output=True, text=True, env=env, check=False)
    result: dict[str, object] = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


def test_the_module_reads_this_hosts_dpkg_and_never_reports_a_change(tmp_path):
    result = _run_module({"names": ["dpkg=0.0", "no-such-package-clusterforge"]}, tmp_path, os.environ["PATH"])
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True,
                             check=True).stdout
    assert result["changed"] is False and not result.get("failed"), result
    assert result["installed"] == ["dpkg", f"dpkg={version}"], result
    assert result["held"] == []


def test_the_file_probe_reads_the_packages_in_the_same_run_as_the_package_probe(tmp_path):
    """A role that reads its files and its packages where nothing changes the node in between does it in one module
    run: the file probe's ``packages`` gives what the package probe gives, beside the paths; without it, no package
    keys (a role that asks for none never reads a stale list)."""
    names = ["dpkg=0.0", "no-such-package-clusterforge", ""]
    alone = _run_module({"names": names}, tmp_path, os.environ["PATH"])
    both = _run_module({"paths": ["/var/lib/dpkg/status", "/no/such/path"], "packages": names}, tmp_path,
                       os.environ["PATH"], module="clusterforge_file_probe")
    assert not both.get("failed") and both["changed"] is False, both
    assert (both["installed"], both["held"]) == (alone["installed"], alone["held"]) and alone["installed"]
    assert "/var/lib/dpkg/status" in both and "/no/such/path" not in both
    none_asked = _run_module({"packages": [""], "paths": []}, tmp_path, os.environ["PATH"], module="clusterforge_file_probe")
    assert none_asked["installed"] == [] and none_asked["held"] == []  # asked for an empty list: empty lists
    files_only = _run_module({"paths": ["/var/lib/dpkg/status"]}, tmp_path, os.environ["PATH"],
                             module="clusterforge_file_probe")
    assert "installed" not in files_only and "held" not in files_only


def test_a_failing_dpkg_query_fails_the_task_with_its_message(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "dpkg-query"
    fake.write_text("#!/bin/sh\necho 'dpkg-query: error: parsing file /var/lib/dpkg/status' >&2\nexit 2\n")
    fake.chmod(0o755)
    result = _run_module({"names": ["fio"]}, tmp_path, f"{bindir}:{os.environ['PATH']}")
    assert result.get("failed") is True, result
    assert "exit 2" in str(result["msg"]) and "parsing file" in str(result["msg"]), result


def test_a_pin_by_version_pattern_is_listed_as_asked_when_the_installed_version_matches(tmp_path):
    """The roles pin NVIDIA's packages with apt version globs (``580.173.02-*``: each CUDA repository directory
    revisions a release its own way, ``-1`` on debian12, ``-1ubuntu1`` on ubuntu2204), and test the probe's answer
    with ``spec in installed``: a matching installed version lists the spec as asked, another version does not."""
    mod = _module()
    out = _dpkg_query(_admindir(tmp_path), ["alpha", "beta", "gamma"])
    installed, _ = mod.parse(out.stdout)
    asked = ["alpha=1.0-*", "beta=2:3.4-*", "alpha=1.1-*", "gamma=1.0*", "beta=2:3.4-5", "alpha"]
    assert mod.satisfied_patterns(asked, installed) == ["alpha=1.0-*", "beta=2:3.4-*"]
    result = _run_module({"names": ["dpkg=*", "dpkg=0.0-*"]}, tmp_path, os.environ["PATH"])
    assert "dpkg=*" in result["installed"] and "dpkg=0.0-*" not in result["installed"], result
