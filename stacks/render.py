"""``clusterforge render`` for the cloud path: a Pulumi project directory that works on its own.

Writes into ``out_dir`` (``DIR/pulumi``):

* ``Pulumi.yaml`` — the project (name ``clusterforge``, Python runtime, the ``clusterforge:*``
  settings it takes);
* ``__main__.py`` — the program: it runs the stack program of the *installed* clusterforge package
  (``stacks``), so the directory needs no copy of the clusterforge checkout;
* ``blueprint.yaml`` — a copy of the blueprint, named by the stack setting with a relative path;
* ``Pulumi.<blueprint>.yaml`` — the stack settings (``clusterforge:blueprint: blueprint.yaml``);
* ``cloud-init/<group>.yaml`` (EC2) or ``cloud-init/<group>.mime`` (EKS managed node groups) —
  the user data each node group's launch template carries, rendered from the same
  ``NodeSettings`` (the resolved cluster's, ``loaded.cluster``); FSx endpoints, known only after deploy, appear as ``FSX_<NAME>_DNS_NAME`` /
  ``FSX_<NAME>_MOUNT_NAME`` placeholders (for reading; the program renders its own);
* ``cloud-init/<group>.slurm-files.json`` — a Slurm node group's file bundle
  (:func:`stacks.slurm_boot.slurm_bundle`), the object the stack stores for that group; in its user data the
  munge key secret, the bucket and the controller's state volume appear as ``MUNGE_SECRET_ARN``, ``BUCKET`` and
  ``STATE_VOLUME_ID``.

No file holds an absolute path, so the directory can be moved or committed. Pulumi runs the
program with the ``python3`` on ``PATH`` (or ``PULUMI_PYTHON_CMD``): that interpreter needs
clusterforge installed (``pip install`` of this project, which pulls in the Pulumi SDKs).
"""

from __future__ import annotations

from pathlib import Path

from blueprints import LoadedBlueprint
from blueprints.models import KubernetesOrchestrator

from .cloud_init import placeholder_endpoints, render_user_data
from .config import CONFIG_NAMESPACE
from .slurm_boot import placeholder_boot, slurm_bundle

__all__ = ["BLUEPRINT_COPY", "render_stack_config"]

BLUEPRINT_COPY = "blueprint.yaml"
"""Name of the blueprint copy in the rendered project (the stack setting names it relative)."""

PROGRAM = '''"""Pulumi program of this project: the clusterforge stack program from the installed package.

Pulumi runs this file with the `python3` on PATH (or PULUMI_PYTHON_CMD); that Python needs
clusterforge installed. The program reads `clusterforge:blueprint` from the stack settings; a
relative path is found next to this file.
"""

import os
import runpy

os.chdir(os.path.dirname(os.path.abspath(__file__)))
runpy.run_module("stacks", run_name="__main__", alter_sys=True)
'''


def _project_yaml(name: str) -> str:
    return (
        f"# Pulumi project for blueprint `{name}` (written by `clusterforge render`; self-contained).\n"
        "# Needs: the Pulumi CLI, and clusterforge installed in the python3 on PATH (or PULUMI_PYTHON_CMD).\n"
        "#   pulumi login --local                  # or your backend\n"
        "#   export PULUMI_CONFIG_PASSPHRASE=...   # encrypts the stack's secrets (kubeconfig)\n"
        f"#   pulumi stack select --create {name} && pulumi up\n"
        f"name: {CONFIG_NAMESPACE}\n"
        "description: GPU cluster on AWS from a clusterforge blueprint\n"
        "runtime:\n"
        "  name: python\n"
        "config:\n"
        "  blueprint:\n"
        "    type: string\n"
        f"    description: Path of the blueprint YAML (relative to this directory; `{BLUEPRINT_COPY}` is the copy).\n"
        "  strict:\n"
        "    type: boolean\n"
        "    default: false\n"
        "    description: Stop on blueprint rule warnings too, not only on errors.\n"
    )


def render_stack_config(loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
    """Write the Pulumi project directory for an AWS blueprint (see the module docstring); returns
    the files written. The AWS target (:class:`clusterforge.targets.aws.AwsTarget`) calls it: the
    registry hands it AWS blueprints only.

    Raises ``OSError`` when ``out_dir`` cannot be written.
    """
    bp = loaded.blueprint
    out_dir.mkdir(parents=True, exist_ok=True)
    project = out_dir / "Pulumi.yaml"
    project.write_text(_project_yaml(bp.name), encoding="utf-8")
    program = out_dir / "__main__.py"
    program.write_text(PROGRAM, encoding="utf-8")
    copy = out_dir / BLUEPRINT_COPY
    copy.write_bytes(Path(loaded.file).read_bytes())
    stack_file = out_dir / f"Pulumi.{bp.name}.yaml"
    stack_file.write_text(
        f"# Pulumi stack settings for blueprint `{bp.name}` (written by `clusterforge render`).\n"
        f"#   pulumi stack select --create {bp.name} && pulumi up\n"
        "config:\n"
        f"  {CONFIG_NAMESPACE}:blueprint: {_yaml_str(BLUEPRINT_COPY)}\n",
        encoding="utf-8",
    )
    written = [project, program, copy, stack_file]
    eks = isinstance(bp.orchestrator, KubernetesOrchestrator)
    ci_dir = out_dir / "cloud-init"
    ci_dir.mkdir(exist_ok=True)
    for r in loaded.cluster.groups:
        settings = r.settings
        boot = placeholder_boot(settings, str(getattr(bp.target, "region", "REGION"))) if settings.slurm else None
        text = render_user_data(settings, placeholder_endpoints(settings), eks=eks, slurm=boot)
        path = ci_dir / f"{r.name}.{'mime' if eks else 'yaml'}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
        bundle = slurm_bundle(settings)
        if bundle is not None:
            path = ci_dir / f"{r.name}.slurm-files.json"
            path.write_text(bundle, encoding="utf-8")
            written.append(path)
    return written


def _yaml_str(s: str) -> str:
    """A double-quoted YAML scalar for ``s``."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
