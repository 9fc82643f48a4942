"""The roles' shared file probe (``roles/clusterforge_common/library/clusterforge_file_probe.py``) reads exactly what
``sha1sum`` and ``stat -c '%a %U %G'`` print, for every kind of path a role may find where it writes: a file, a
directory, a missing path, a symbolic link (``link``, not followed, so a role writes a real file in its place),
a FIFO, an owner with no name. The roles compare these strings with what they would write (tests/roles/test_apt_fast_path.py restores
tampered files through it on a converged root filesystem)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from clusterforge.ansible.render import ROLES_DIR

MODULE = ROLES_DIR / "clusterforge_common" / "module_utils" / "clusterforge_probe.py"  # the module's reading


def _probe():
    spec = importlib.util.spec_from_file_location("clusterforge_probe", MODULE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.probe


def _coreutils(path: Path) -> str:
    st = subprocess.run(["stat", "-c", "%a %U %G", str(path)], check=True, capture_output=True, text=True).stdout.strip()
    if path.is_dir():
        return f"dir {st}"
    sha = subprocess.run(["sha1sum", str(path)], check=True, capture_output=True, text=True).stdout.split()[0]
    return f"{sha} {st}"


def test_probe_reads_what_sha1sum_and_stat_print(tmp_path):
    probe = _probe()
    f = tmp_path / "nccl.conf"
    f.write_text("NCCL_IB_HCA=mlx5\n")
    f.chmod(0o640)
    big = tmp_path / "payload.bin"
    big.write_bytes(os.urandom(3 << 20))  # read in chunks
    d = tmp_path / "conf.d"
    d.mkdir(mode=0o750)
    d.chmod(0o1750)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path in (f, big, d, empty):
        assert probe(str(path)) == _coreutils(path), path
    assert probe(str(f)).split(" ")[1] == "640" and probe(str(d)).split(" ")[:2] == ["dir", "1750"]


def test_links_and_special_files_are_never_taken_for_what_a_role_writes(tmp_path):
    probe = _probe()
    target = tmp_path / "real"
    target.write_text("x\n")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dirlink").symlink_to(tmp_path)
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    for name in ("link", "dirlink", "broken"):
        assert probe(str(tmp_path / name)).split(" ")[0] == "link", name
    assert probe(str(tmp_path / "fifo")).split(" ")[0] == "special"
    for name in ("missing", "real/below-a-file"):
        assert probe(str(tmp_path / name)) is None, name


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root (CI runs as root)")
def test_an_owner_without_a_name_reads_unknown_like_stat(tmp_path):
    probe = _probe()
    f = tmp_path / "orphan"
    f.write_text("x\n")
    os.chown(f, 4_000_123, 4_000_321)  # ids with no passwd/group entry
    assert probe(str(f)) == _coreutils(f)
    assert probe(str(f)).endswith(" UNKNOWN UNKNOWN")
