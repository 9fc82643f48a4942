"""``clusterforge render`` for the cloud path: the Pulumi stack config and each group's user data.

Writes into ``out_dir``:

* ``Pulumi.<blueprint>.yaml`` — the stack settings (``clusterforge:blueprint`` = the blueprint's
  absolute path); copy it next to ``Pulumi.yaml`` and run ``pulumi up`` with stack ``<blueprint>``;
* ``cloud-init/<group>.yaml`` (EC2) or ``cloud-init/<group>.mime`` (EKS managed node groups) —
  the user data each node group's launch template carries, rendered from the same
  ``NodeSettings``; FSx endpoints, known only after deploy, appear as ``FSX_<NAME>_DNS_NAME`` /
  ``FSX_<NAME>_MOUNT_NAME`` placeholders.

On-prem blueprints have no Pulumi stack: nothing is written and ``[]`` is returned.
"""

from __future__ import annotations

from pathlib import Path

from blueprints import LoadedBlueprint
from blueprints.models import KubernetesOrchestrator
from blueprints.settings import node_settings

from .cloud_init import placeholder_endpoints, render_user_data
from .config import CONFIG_NAMESPACE, PROJECT_ROOT

__all__ = ["render_stack_config"]


def render_stack_config(loaded: LoadedBlueprint, out_dir: Path) -> list[Path]:
    """Write the stack config and per-group user data for an AWS blueprint; returns the files written.

    Raises ``OSError`` when ``out_dir`` cannot be written.
    """
    bp = loaded.blueprint
    if not bp.is_aws:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    blueprint_path = Path(loaded.file).resolve()
    stack_file = out_dir / f"Pulumi.{bp.name}.yaml"
    stack_file.write_text(
        f"# Pulumi stack settings for blueprint `{bp.name}` (written by `clusterforge render`).\n"
        f"# Copy this file next to {PROJECT_ROOT / 'Pulumi.yaml'}, then:\n"
        f"#   export PULUMI_CONFIG_PASSPHRASE=...   # encrypts the stack's secrets\n"
        f"#   pulumi stack select --create {bp.name} && pulumi up\n"
        f"# or simply run: clusterforge up {blueprint_path}\n"
        "config:\n"
        f"  {CONFIG_NAMESPACE}:blueprint: {_yaml_str(str(blueprint_path))}\n",
        encoding="utf-8",
    )
    written = [stack_file]
    eks = isinstance(bp.orchestrator, KubernetesOrchestrator)
    ci_dir = out_dir / "cloud-init"
    ci_dir.mkdir(exist_ok=True)
    for g in bp.node_groups:
        settings = node_settings(bp, g)
        text = render_user_data(settings, placeholder_endpoints(settings), eks=eks,
                                kata_version=bp.software.kata, gvisor_version=bp.software.gvisor)
        path = ci_dir / f"{g.name}.{'mime' if eks else 'yaml'}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _yaml_str(s: str) -> str:
    """A double-quoted YAML scalar for ``s``."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
