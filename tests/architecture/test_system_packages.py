"""The Debian packages the tests need are one list (``tests/system-packages.txt``), installed by
``make test`` itself through ``tools/ensure-system-packages.sh``; ``.ci/run`` and the README keep no copy.

The installer runs here against stand-ins for ``dpkg-query``, ``apt-get``, ``id`` and ``sleep`` on PATH
(a package database in a text file, a log of apt-get's calls), so no test changes this machine's packages.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

LIST = REPO / "tests" / "system-packages.txt"
INSTALLER = REPO / "tools" / "ensure-system-packages.sh"
DEBIAN_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
"""Debian policy 5.6.1: lower case letters, digits, + - . ; at least two characters, alphanumeric first."""


def _entries() -> list[tuple[str, str]]:
    """(package, why) for every line of the list that names a package."""
    out = []
    for line in LIST.read_text().splitlines():
        body, _, why = line.partition("#")
        if body.strip():
            out.append((body.strip(), why.strip()))
    return out


def test_the_list_names_debian_packages_each_with_its_reason() -> None:
    entries = _entries()
    names = [n for n, _ in entries]
    assert len(names) >= 10 and len(set(names)) == len(names), names
    bad = [n for n in names if not DEBIAN_NAME.fullmatch(n)]
    assert not bad, f"not a Debian package name: {bad}"
    assert all(why for _, why in entries), "every package says what needs it"
    for must in ("debootstrap", "fio", "lvm2", "cryptsetup-bin", "fdisk", "zstd", "dpkg-dev", "gnupg"):
        assert must in names


def test_ci_and_the_readme_keep_no_list_of_their_own() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci and "make test" in ci and "make lint" in ci
    assert "apt-get" not in ci and "dpkg" not in ci
    named = sorted(n for n, _ in _entries() if n != "make" and re.search(rf"(?<![\w/-]){re.escape(n)}(?![\w-])", ci))
    assert not named, f".ci/run names packages of the list: {named}"
    readme = (REPO / "README.md").read_text()
    assert "tests/system-packages.txt" in readme
    assert not re.search(r"apt-get install [a-z0-9+.-]+ [a-z0-9+.-]+", readme.split("## Writing a blueprint")[0]), \
        "the README's set-up section copies a package list"
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^test: system-packages\b", make, re.MULTILINE)
    assert re.search(r"^system-packages:.*\n\ttools/ensure-system-packages\.sh$", make, re.MULTILINE)


class _Machine:
    """A package database (``installed``: one name a line; ``removed``: known, config files only) and
    stand-ins that read and change it; ``log`` holds apt-get's calls, ``sleeps`` the sleeps."""

    def __init__(self, tmp: Path, installed: list[str], removed: tuple[str, ...] = (), uid: int = 0,
                 locked_updates: int = 0, apt_installs: bool = True) -> None:
        self.tmp, self.bin = tmp, tmp / "bin"
        self.bin.mkdir()
        self.installed, self.removed, self.log = tmp / "installed", tmp / "removed", tmp / "apt.log"
        self.installed.write_text("".join(f"{p}\n" for p in installed))
        self.removed.write_text("".join(f"{p}\n" for p in removed))
        (tmp / "locked").write_text(str(locked_updates))
        self.uid, self.apt_installs = uid, apt_installs
        self._stub("dpkg-query", f"""
            [ "$1" = -W ] && [ "${{2#-f=}}" != "$2" ] || {{ echo "unexpected: $*" >&2; exit 9; }}
            shift 2; rc=0
            for p in "$@"; do
              if grep -qxF -- "$p" {self.installed}; then echo "$p installed"
              elif grep -qxF -- "$p" {self.removed}; then echo "$p config-files"
              else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
            done
            exit $rc""")
        self._stub("apt-get", f"""
            echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> {self.log}
            case " $* " in
              *" update "*)
                n=$(cat {tmp}/locked)
                if [ "$n" -gt 0 ]; then
                  echo $((n - 1)) > {tmp}/locked
                  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
                  exit 100
                fi ;;
              *" install "*)
                {"" if apt_installs else "exit 0"}
                seen=; for a in "$@"; do
                  [ -n "$seen" ] && [ "${{a#-}}" = "$a" ] && echo "$a" >> {self.installed}
                  [ "$a" = install ] && seen=1
                done ;;
            esac
            exit 0""")
        self._stub("id", f'[ "$1" = -u ] && echo {uid}')
        self._stub("sleep", f'echo "sleep $*" >> {tmp}/sleeps')

    def _stub(self, name: str, body: str) -> None:
        p = self.bin / name
        p.write_text("#!/bin/bash\n" + "\n".join(line.strip() for line in body.strip().splitlines()) + "\n")
        p.chmod(0o755)

    def run(self, packages: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        args = [str(INSTALLER)]
        if packages is not None:
            lst = self.tmp / "packages.txt"
            lst.write_text("# a list\n\n" + "".join(f"{p}   # needed by a test\n" for p in packages))
            args.append(str(lst))
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}
        env.pop("DEBIAN_FRONTEND", None)
        return subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=60)

    def apt_calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def sleeps(self) -> list[str]:
        p = self.tmp / "sleeps"
        return p.read_text().splitlines() if p.exists() else []


def test_nothing_missing_runs_no_apt_get(tmp_path: Path) -> None:
    """The real list, every package installed: exit 0, silent, no apt-get update."""
    m = _Machine(tmp_path, [n for n, _ in _entries()])
    res = m.run()
    assert (res.returncode, res.stdout, res.stderr) == (0, "", ""), res
    assert m.apt_calls() == []


def test_root_installs_exactly_the_missing_ones(tmp_path: Path) -> None:
    """lvm2 never installed, cryptsetup-bin removed (config files left): those two, in the list's order."""
    m = _Machine(tmp_path, ["make", "fio", "zstd"], removed=("cryptsetup-bin",))
    res = m.run(["make", "lvm2", "fio", "cryptsetup-bin", "zstd"])
    assert res.returncode == 0, res.stderr
    apt = "DEBIAN_FRONTEND=noninteractive -q -o DPkg::Lock::Timeout=600"
    assert m.apt_calls() == [f"{apt} update", f"{apt} install -y --no-install-recommends lvm2 cryptsetup-bin"]
    assert "lvm2 cryptsetup-bin" in res.stdout
    assert m.run(["make", "lvm2", "fio", "cryptsetup-bin", "zstd"]).returncode == 0
    assert len(m.apt_calls()) == 2, "a second run finds nothing missing"


def test_not_root_says_what_to_run_in_one_line_and_stops(tmp_path: Path) -> None:
    m = _Machine(tmp_path, ["make"], uid=1000)
    res = m.run(["make", "lvm2", "fdisk"])
    assert res.returncode == 1 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert "(lvm2 fdisk)" in lines[0]
    assert lines[0].endswith("run as root: apt-get update && apt-get install -y --no-install-recommends lvm2 fdisk")
    assert m.apt_calls() == []


def test_update_waits_while_another_apt_holds_the_lists_lock(tmp_path: Path) -> None:
    m = _Machine(tmp_path, [], locked_updates=2)
    res = m.run(["fio"])
    assert res.returncode == 0, res.stderr
    assert [c.split()[-1] for c in m.apt_calls()] == ["update", "update", "update", "fio"]
    assert m.sleeps() == ["sleep 5", "sleep 5"]
    assert res.stderr.count("waiting") == 1, res.stderr


def test_a_package_apt_did_not_install_is_an_error(tmp_path: Path) -> None:
    m = _Machine(tmp_path, [], apt_installs=False)
    res = m.run(["fio"])
    assert res.returncode == 1 and "still not installed after apt-get install: fio" in res.stderr
