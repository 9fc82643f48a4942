"""Rendering again into the same folder leaves exactly the new render there: what the previous render wrote and
this one does not (another target's folder, a suite's script the blueprint no longer asks for) is removed, so
Ansible or Pulumi never read a stale file; files clusterforge did not write are kept and named."""

from __future__ import annotations

import json
from pathlib import Path

from clusterforge.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_a_second_render_replaces_the_first_and_keeps_the_users_files(tmp_path, capsys):
    out = tmp_path / "render"
    assert main(["render", str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), "-o", str(out)]) == 0
    dgx = _files(out) - {".clusterforge-render.json"}
    assert any(f.startswith("ansible/") for f in dgx) and "validation/slurm/fio-lustre.sbatch" in dgx
    (out / "pulumi").mkdir()
    (out / "pulumi" / "NOTES.md").write_text("mine\n")
    capsys.readouterr()

    assert main(["render", str(EXAMPLES / "aws-p5-efa-lustre.yaml"), "-o", str(out)]) == 0
    text = "".join(capsys.readouterr())  # the kept files are a warning, on stderr
    p5 = set(json.loads((out / ".clusterforge-render.json").read_text())["files"])
    assert _files(out) == p5 | {".clusterforge-render.json", "pulumi/NOTES.md"}
    assert not (out / "ansible").exists()  # the on-prem render's folder went with its files
    assert "validation/slurm/fio-lustre.sbatch" not in p5 and not (out / "validation/slurm/fio-lustre.sbatch").exists()
    gone = dgx - p5
    assert f"removed {len(gone)} file(s)" in text
    assert "were not written by clusterforge render" in text and "NOTES.md" in text

    assert main(["render", str(EXAMPLES / "aws-p5-efa-lustre.yaml"), "-o", str(out)]) == 0
    assert "removed" not in "".join(capsys.readouterr())  # the same blueprint again: nothing stale
    assert _files(out) == p5 | {".clusterforge-render.json", "pulumi/NOTES.md"}


def test_a_manifest_cannot_make_render_delete_outside_its_folder(tmp_path, capsys):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep\n")
    out = tmp_path / "render"
    out.mkdir()
    (out / ".clusterforge-render.json").write_text(json.dumps({"files": ["../precious.txt", str(outside)]}))
    assert main(["render", str(EXAMPLES / "local-workstation.yaml"), "-o", str(out)]) == 0
    assert outside.read_text() == "keep\n"


def test_render_never_writes_into_a_roles_folder_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "out"
    mine = out / "ansible" / "roles" / "myrole"
    mine.mkdir(parents=True)
    (mine / "tasks.yml").write_text("mine\n")
    assert main(["render", str(EXAMPLES / "local-workstation.yaml"), "-o", str(out)]) == 2
    assert "was not written by clusterforge" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "ansible" / "roles").iterdir()) == ["myrole"], "nothing was added"
    assert not (out / "ansible" / "inventory.yml").exists(), "nothing was moved into place"
