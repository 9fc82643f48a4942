"""``clusterforge render BLUEPRINT -o DIR``: the artefacts a user can run by hand.

Writes, for the blueprint's target:

* ``DIR/ansible/``: inventory.yml, group_vars/, site.yml (on-prem; ``ansible-playbook -i inventory.yml site.yml``);
* ``DIR/pulumi/``: the stack config ``Pulumi.<name>.yaml`` and each node group's cloud-init (AWS);
* ``DIR/validation/``: Slurm batch scripts and Kubernetes manifests for the validation suites.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from pathlib import Path

import typer

from blueprints import LoadedBlueprint

from ..blueprint_io import load_checked
from ..console import console, ok
from ..errors import UsageError

RENDERERS: list[tuple[str, str, str]] = [
    ("ansible", "clusterforge.ansible.render", "render_ansible"),
    ("pulumi", "stacks.render", "render_stack_config"),
    ("validation", "validate.launchers", "render_artifacts"),
]
"""(sub-directory, module, function): each function is ``f(loaded, out_dir) -> list[Path]``."""


def render_all(loaded: LoadedBlueprint, out: Path) -> dict[str, list[Path]]:
    """Run every renderer into ``out/<sub-directory>``; returns the files written per renderer."""
    written: dict[str, list[Path]] = {}
    for sub, module, func in RENDERERS:
        fn: Callable[[LoadedBlueprint, Path], list[Path]] = getattr(import_module(module), func)
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
        if output.exists() and not output.is_dir():
            raise UsageError(f"{output}: exists and is not a directory — pass a directory for -o")
        loaded = load_checked(blueprint)
        output.mkdir(parents=True, exist_ok=True)
        written = render_all(loaded, output)
        for sub, files in written.items():
            ok(f"{sub}: {len(files)} file(s) in {output / sub}")
            for f in files:
                console.print(f"    {f}", markup=False)
