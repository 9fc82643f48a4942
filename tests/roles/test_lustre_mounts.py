"""The lustre_client role's mount script, the one both bare metal (the role runs it) and cloud nodes
(cloud-init runs it) use, really runs here against a fake node: ``mount``, ``mountpoint`` and
``lfs`` are stubs on ``PATH`` that keep their state in files; ``/etc/fstab`` is a file in the test
directory. Generated mount sets (several file systems, options or none, stripe layouts) cover the
kind, not one example."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from blueprints import load_blueprint
from blueprints.role_templates import render_role_template, role_file
from blueprints.role_vars import node_role_vars
from blueprints.settings import node_settings
from stacks.cloud_init import cloud_role_vars, placeholder_endpoints
from tests.conftest import EXAMPLES

BASH = shutil.which("bash") or "/bin/bash"


def _stubs(tmp: Path, mount_rc: int = 0) -> Path:
    """``mount DIR`` records DIR as mounted (or fails with ``mount_rc``), ``mountpoint -q DIR`` reads
    that record, ``lfs getstripe/setstripe`` keep ``count size`` per directory in ``stripes/``."""
    bindir = tmp / "bin"
    bindir.mkdir()
    state = tmp / "state"
    (state / "stripes").mkdir(parents=True)
    (state / "mounted").touch()
    scripts = {
        "mount": f'echo "mount $*" >> {state}/calls\n[ {mount_rc} = 0 ] || exit {mount_rc}\necho "$1" >> {state}/mounted\n',
        "mountpoint": f'grep -qxF -- "${{@: -1}}" {state}/mounted\n',
        "lfs": (f'echo "lfs $*" >> {state}/calls\n'
                f'key=$(echo "${{@: -1}}" | tr / _)\n'
                f'case "$1" in\n'
                f'  getstripe) [ -f {state}/stripes/$key ] && printf "stripe_count:  %s stripe_size:   %s\\n" '
                f'$(cat {state}/stripes/$key) || echo "stripe_count:  1 stripe_size:   1048576";;\n'
                f'  setstripe) echo "$3 $(numfmt --from=iec $5)" > {state}/stripes/$key;;\n'
                f'esac\n'),
    }
    for name, body in scripts.items():
        (bindir / name).write_text("#!/bin/bash\n" + body)
        (bindir / name).chmod(0o755)
    return bindir


def _run(script: str, tmp: Path, bindir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "lustre-mounts.sh"
    path.write_text(script)
    full = {"PATH": f"{bindir}:/usr/bin:/bin", "FSTAB": str(tmp / "fstab"), "WAIT": "0", **env}
    return subprocess.run([BASH, str(path), *args], capture_output=True, text=True, env=full, check=False)


def _mounts(tmp: Path, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for i in range(rnd.randint(1, 3)):
        out.append({
            "name": f"fs{i}", "mount": str(tmp / rnd.choice([f"lustre{i}", f"mnt/lustre-{i}", f"fsx{i}/"])).rstrip("/"),
            "source": rnd.choice([f"10.0.0.{i + 1}@o2ib:/fs{i}", f"fs-{i}.fsx.us-east-1.amazonaws.com@tcp:/m{i}x"]),
            "options": rnd.choice([[], ["noatime", "flock", "_netdev"], ["ro", "_netdev"]]),
            "stripes": [{"path": f"d{j}", "count": rnd.choice([-1, 1, 4, 16]), "size": rnd.choice(["1M", "4M", "1G", "65536"])}
                        for j in range(rnd.randint(0, 3))],
        })
    return out


def _fstab_lines(tmp: Path) -> list[str]:
    return (tmp / "fstab").read_text().splitlines()


@pytest.mark.parametrize("seed", range(6))
def test_mounts_fstab_and_stripes_converge_and_a_rerun_changes_nothing(seed: int, tmp_path: Path) -> None:
    mounts = _mounts(tmp_path, seed)
    script = render_role_template("lustre_client", "lustre-mounts.sh.j2", {"lustre_client_mounts": mounts})
    bindir = _stubs(tmp_path)
    stale = f"old-mgs@tcp:/old {mounts[0]['mount']} lustre defaults 0 0"
    (tmp_path / "fstab").write_text(f"# a comment naming {mounts[0]['mount']}\nUUID=1 / ext4 defaults 0 1\n{stale}\n")
    first = _run(script, tmp_path, bindir)
    assert first.returncode == 0, first.stderr
    lines = _fstab_lines(tmp_path)
    assert lines[:2] == [f"# a comment naming {mounts[0]['mount']}", "UUID=1 / ext4 defaults 0 1"], "other entries kept"
    assert stale not in lines, "the stale entry of the mount point is replaced"
    for m in mounts:
        opts = ",".join(m["options"]) or "defaults"
        assert f"{m['source']} {m['mount']} lustre {opts} 0 0" in lines
        assert Path(m["mount"]).is_dir()
        assert f"mount {m['mount']}" in (tmp_path / "state/calls").read_text()
        for st in m["stripes"]:
            d = f"{m['mount']}/{st['path']}"
            key = d.replace("/", "_")
            bytes_ = int(subprocess.run(["numfmt", "--from=iec", st["size"]], capture_output=True, text=True,
                                        check=True).stdout)
            state = tmp_path / "state/stripes" / key
            have = state.read_text().split() if state.exists() else ["1", "1048576"]  # the stub's default layout
            assert have == [str(st["count"]), str(bytes_)]
    assert "changed:" in first.stdout
    again = _run(script, tmp_path, bindir)
    assert again.returncode == 0 and "changed:" not in again.stdout, again.stdout
    assert _fstab_lines(tmp_path) == lines


def test_fstab_only_mounts_nothing_and_a_failed_mount_fails_the_script(tmp_path: Path) -> None:
    mounts = _mounts(tmp_path, 1)
    script = render_role_template("lustre_client", "lustre-mounts.sh.j2", {"lustre_client_mounts": mounts})
    bindir = _stubs(tmp_path, mount_rc=32)
    image = _run(script, tmp_path, bindir, "--fstab-only")
    assert image.returncode == 0, image.stderr
    assert not (tmp_path / "state/calls").exists(), "an image build mounts nothing and sets no stripes"
    assert len(_fstab_lines(tmp_path)) == len(mounts)
    live = _run(script, tmp_path, bindir, TRIES="2")
    assert live.returncode == 1
    assert f"{mounts[0]['mount']} is not mounted after 2 tries" in live.stderr
    calls = (tmp_path / "state/calls").read_text()
    assert calls.count(f"mount {mounts[0]['mount']}\n") == 2 and "lfs " not in calls


@pytest.mark.parametrize("example", ["aws-p5-efa-lustre", "onprem-dgx-h100-ib"])
def test_both_paths_render_the_same_script_for_their_mounts(example: str) -> None:
    """Bare metal renders the role's script from the group_vars, the cloud from the same variables
    plus the FSx sources known at deploy time."""
    bp = load_blueprint(EXAMPLES / f"{example}.yaml").blueprint
    for g in bp.node_groups:
        s = node_settings(bp, g)
        if not s.lustre:
            continue
        cloud = cloud_role_vars(s, "lustre_client", placeholder_endpoints(s))
        assert [m["source"] for m in cloud["lustre_client_mounts"]] == [
            m.source or f"{placeholder_endpoints(s)[m.name].dns_name}@tcp:/{placeholder_endpoints(s)[m.name].mount_name}"
            for m in s.lustre]
        metal = node_role_vars(s, "lustre_client")
        if all(m.source for m in s.lustre):
            assert cloud == metal
            f = role_file("lustre_client", "lustre-mounts.sh.j2", metal)
            assert f is not None and f.path == "/usr/local/sbin/clusterforge-lustre-mounts" and f.mode == "0755"
