"""``clusterforge render BLUEPRINT -o DIR``: the artefacts a user can run by hand.

Writes, for the blueprint's target (:mod:`clusterforge.targets`, by ``target.provider``):

* ``DIR/ansible/``: inventory.yml, group_vars/, site.yml (on-prem; ``ansible-playbook -i inventory.yml site.yml``);
* ``DIR/pulumi/``: the Pulumi project, the stack config ``Pulumi.<name>.yaml`` and each node group's cloud-init (AWS);

and for every blueprint ``DIR/validation/``: Slurm batch scripts and Kubernetes manifests for the
validation suites.
"""

from __future__ import annotations

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


def register(app: typer.Typer) -> None:
    """Add the ``render`` verb to ``app``."""

    @app.command("render")
    def render_cmd(
        blueprint: Path = typer.Argument(..., help="Blueprint YAML file."),
        output: Path = typer.Option(..., "-o", "--output", help="Directory to write the artefacts to."),
    ) -> None:
        """Write the Ansible inventory/group_vars/site.yml, Pulumi stack config, Slurm and Kubernetes artefacts."""
        from ..blueprint_io import load_checked
        from ..console import console, ok
        from ..errors import UsageError

        if output.exists() and not output.is_dir():
            raise UsageError(f"{output}: exists and is not a directory — pass a directory for -o")
        loaded = load_checked(blueprint)
        output.mkdir(parents=True, exist_ok=True)
        written = render_all(loaded, output)
        for sub, files in written.items():
            ok(f"{sub}: {len(files)} file(s) in {output / sub}")
            for f in files:
                console.print(f"    {f}", markup=False)
