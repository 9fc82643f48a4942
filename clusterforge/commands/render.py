"""``clusterforge render BLUEPRINT -o DIR``: the artefacts a user can run by hand.

Writes, for the blueprint's target (:mod:`clusterforge.targets`, by ``target.provider``):

* ``DIR/ansible/``: inventory.yml, group_vars/, site.yml (on-prem; ``ansible-playbook -i inventory.yml site.yml``);
* ``DIR/pulumi/``: the Pulumi project, the stack config ``Pulumi.<name>.yaml`` and each node group's cloud-init (AWS);

and for every blueprint ``DIR/validation/``: Slurm batch scripts and Kubernetes manifests for the
validation suites.

Rendering again into the same ``DIR`` replaces the previous render: ``DIR/.clusterforge-render.json`` lists the files
each render wrote, and a file the previous render wrote that this one does not (a node group, suite or target the
blueprint no longer has) is removed, so Ansible or Pulumi never pick up a stale one. Files no render wrote are left
alone and named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from blueprints import LoadedBlueprint


def render_all(loaded: LoadedBlueprint, out: Path) -> dict[str, list[Path]]:
    """Run the target's renderer into ``out/<its render_dir>`` and the validation renderer into
    ``out/validation``; returns the files written per sub-directory (empty ones left out)."""
    from validate.launchers import render_artifacts

    from ..targets import checked_target

    target = checked_target(loaded)
    written: dict[str, list[Path]] = {}
    for sub, fn in ((target.render_dir, target.render), ("validation", render_artifacts)):
        files = fn(loaded, out / sub)
        if files:
            written[sub] = files
    return written


RENDER_MANIFEST = ".clusterforge-render.json"
"""The file in a render's output folder that lists what that render wrote: ``{"files": [relative POSIX paths]}``."""


def replace_previous_render(out: Path, written: dict[str, list[Path]]) -> tuple[list[Path], list[Path]]:
    """Make ``out`` hold this render only: remove each file the previous render's manifest lists that ``written``
    (the files and folders this render wrote, per sub-directory) does not hold, with the folders that leaves empty, and write
    the new manifest. Returns ``(removed, foreign)``: the files removed, and the files under this render's
    sub-directories that no render wrote (left in place). A missing or unreadable manifest removes nothing."""
    out = out.resolve()
    paths = [f.resolve() for files in written.values() for f in files]  # a renderer may name a folder it copied
    now = {g.relative_to(out).as_posix() for f in paths for g in ([f] if f.is_file() else f.rglob("*"))
           if g.is_file()}
    manifest = out / RENDER_MANIFEST
    try:
        before = {str(x) for x in json.loads(manifest.read_text(encoding="utf-8"))["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        before = set()
    removed: list[Path] = []
    for rel in sorted(before - now):
        path = (out / rel).resolve()
        if out not in path.parents or not path.is_file():  # only files inside out, as the manifest named them
            continue
        path.unlink()
        removed.append(path)
        for parent in path.parents:
            if parent == out or any(parent.iterdir()):
                break
            parent.rmdir()
    foreign = sorted(f for sub in written for f in (out / sub).rglob("*")
                     if f.is_file() and f.relative_to(out).as_posix() not in now)
    manifest.write_text(json.dumps({"files": sorted(now)}, indent=1) + "\n", encoding="utf-8")
    return removed, foreign


def register(app: typer.Typer) -> None:
    """Add the ``render`` verb to ``app``."""

    @app.command("render")
    def render_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        output: Path = typer.Option(..., "-o", "--output", help="Directory to write the artefacts to."),
    ) -> None:
        """Write the Ansible inventory/group_vars/site.yml, Pulumi stack config, Slurm and Kubernetes artefacts."""
        from ..blueprint_io import load_checked
        from ..console import console, ok, warn
        from ..errors import UsageError

        if output.exists() and not output.is_dir():
            raise UsageError(f"{output}: exists and is not a directory — pass a directory for -o")
        loaded = load_checked(blueprint)
        output.mkdir(parents=True, exist_ok=True)
        written = render_all(loaded, output)
        removed, foreign = replace_previous_render(output, written)
        for sub, files in written.items():
            ok(f"{sub}: {len(files)} file(s) in {output / sub}")
            for f in files:
                console.print(f"    {f}", markup=False)
        if removed:
            ok(f"removed {len(removed)} file(s) the previous render in {output} wrote and this one does not")
            for f in removed:
                console.print(f"    {f}", markup=False)
        if foreign:
            warn(f"{len(foreign)} file(s) in {output} were not written by clusterforge render; left as they are:")
            for f in foreign:
                console.print(f"    {f}", markup=False)
