"""``clusterforge render BLUEPRINT -o DIR``: the artefacts a user can run by hand.

Writes, for the blueprint's target (:mod:`clusterforge.targets`, by ``target.provider``):

* ``DIR/ansible/``: inventory.yml, group_vars/, site.yml (on-prem; ``ansible-playbook -i inventory.yml site.yml``);
* ``DIR/pulumi/``: the Pulumi project, the stack config ``Pulumi.<name>.yaml`` and each node group's cloud-init (AWS);
* ``DIR/slurm/``: with ``orchestrator: slurm``, the cluster's Slurm files at their node paths
  (``DIR/slurm/etc/slurm/slurm.conf``, ``gres.conf``, ``cgroup.conf``, ``topology.conf``, ``slurmdbd.conf`` without its
  password), the texts the nodes get;

and for every blueprint ``DIR/validation/``: Slurm batch scripts and Kubernetes manifests for the
validation suites.

Rendering again into the same ``DIR`` replaces the previous render: ``DIR/.clusterforge-render.json`` lists the files
each render wrote, and a file the previous render wrote that this one does not (a node group, suite or target the
blueprint no longer has) is removed, so Ansible or Pulumi never pick up a stale one. Files no render wrote are left
alone and named.

No write follows a symbolic link out of ``DIR``: the renderers write into a private staging folder inside ``DIR``
(:func:`render_into`), and each file is then moved into place with :func:`os.replace`, which replaces a link at its
path instead of writing through it; a folder on the way that is a link leading outside ``DIR`` stops the render with
one line, before anything is moved. The manifest is written the same way (:func:`validate.untrusted.write_atomic`).
"""

from __future__ import annotations

import json
import os
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
    for sub, fn in ((target.render_dir, target.render), ("slurm", render_slurm), ("validation", render_artifacts)):
        files = fn(loaded, out / sub)
        if files:
            written[sub] = files
    return written


def render_slurm(loaded: LoadedBlueprint, out: Path) -> list[Path]:
    """The Slurm cluster's configuration files for review, at their node paths under ``out``
    (``out/etc/slurm/slurm.conf``, ``gres.conf``, ``cgroup.conf``, ...; :func:`blueprints.slurm.slurm_files`); nothing
    when the orchestrator is not Slurm. These are the very texts the roles and the cloud user data install."""
    from blueprints.slurm import slurm_files
    from validate.untrusted import write_atomic

    s = loaded.cluster.slurm
    if s is None:
        return []
    written = []
    for node_path, text in slurm_files(s).items():
        dest = out / node_path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, text, root=out)
        written.append(dest)
    return written


def render_into(loaded: LoadedBlueprint, out: Path) -> dict[str, list[Path]]:
    """:func:`render_all` into a staging folder inside ``out``, then every file moved to its place under ``out``
    (:func:`os.replace`: a symbolic link there is replaced, never written through). Returns the files written per
    sub-directory, as paths under ``out``. Raises :class:`~validate.untrusted.UnsafeOutputPath` (an ``OSError``,
    nothing moved) when a folder on the way is a symbolic link, or a file, that leads outside ``out``."""
    import shutil
    import tempfile

    from validate.untrusted import UnsafeOutputPath

    real_out = out.resolve()
    staging = Path(tempfile.mkdtemp(prefix=".clusterforge-render-", dir=out))
    try:
        staged = render_all(loaded, staging)
        files = sorted({g for fs in staged.values() for f in fs for g in ([f] if f.is_file() else f.rglob("*"))
                        if g.is_file() and not g.is_symlink()})
        moves = [(f, out / f.relative_to(staging)) for f in files]
        # folders a renderer made empty on purpose (validation/slurm/logs: sbatch opens --output there)
        folders = [out / d.relative_to(staging) for d in staging.rglob("*") if d.is_dir() and not d.is_symlink()
                   and not any(d.iterdir())]
        from ..ansible.render import RENDERED_MARKER
        from ..errors import UsageError

        for marker in staging.rglob(RENDERED_MARKER):  # a folder clusterforge replaces whole (ansible/roles)
            dest = out / marker.parent.relative_to(staging)
            if dest.exists() and not (dest / RENDERED_MARKER).exists():
                raise UsageError(f"{dest} exists and was not written by clusterforge — choose another output directory")
        for dest in [d for _, d in moves] + [f / "." for f in folders]:  # every destination, before anything moves
            parent = dest.parent
            while parent != out and not (parent.exists() or parent.is_symlink()):
                parent = parent.parent  # the nearest folder on the way that exists: what mkdir would go through
            real = parent.resolve()
            if real != real_out and real_out not in real.parents:
                raise UnsafeOutputPath(f"{parent}: a symbolic link leading to {real}, outside the output folder {out}; "
                                       "nothing was written — remove the link or choose another folder")
            if not parent.is_dir():
                raise UnsafeOutputPath(f"{parent}: not a folder; nothing was written — remove it or choose another folder")
        for src, dest in moves:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        return {sub: [out / f.relative_to(staging) for f in fs] for sub, fs in staged.items()}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


RENDER_MANIFEST = ".clusterforge-render.json"
"""The file in a render's output folder that lists what that render wrote: ``{"files": [relative POSIX paths]}``."""


def replace_previous_render(out: Path, written: dict[str, list[Path]]) -> tuple[list[Path], list[Path]]:
    """Make ``out`` hold this render only: remove each file the previous render's manifest lists that ``written``
    (the files and folders this render wrote, per sub-directory) does not hold, with the folders that leaves empty, and write
    the new manifest. Returns ``(removed, foreign)``: the files removed, and the files under this render's
    sub-directories that no render wrote (left in place). A missing or unreadable manifest removes nothing. The
    manifest is written atomically (a symbolic link in its place is replaced, not followed)."""
    from validate.parsers.bounds import loads as bounded_loads
    from validate.untrusted import write_atomic

    out = out.resolve()
    paths = [f.resolve() for files in written.values() for f in files]  # a renderer may name a folder it copied
    now = {g.relative_to(out).as_posix() for f in paths for g in ([f] if f.is_file() else f.rglob("*"))
           if g.is_file()}
    manifest = out / RENDER_MANIFEST
    try:
        before = {str(x) for x in bounded_loads(manifest.read_text(encoding="utf-8"))["files"]}
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
    write_atomic(manifest, json.dumps({"files": sorted(now)}, indent=1) + "\n", root=out)
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
        try:
            written = render_into(loaded, output)
            removed, foreign = replace_previous_render(output, written)
        except OSError as e:
            raise UsageError(str(e) if e.filename is None else f"{e.filename}: {e.strerror or e}") from None
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
