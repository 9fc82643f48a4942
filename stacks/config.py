"""Stack configuration: read once, validated, turned into a checked blueprint.

The stack file ``Pulumi.<stack>.yaml`` holds one required setting::

    config:
      clusterforge:blueprint: blueprints/examples/aws-p5-efa-lustre.yaml

A relative path is resolved against the project root (the directory of ``Pulumi.yaml``), then
against the working directory. ``clusterforge:strict: true`` also stops on rule warnings.
``clusterforge:images`` (JSON object, node group -> AMI id; written by ``clusterforge up`` from its
record) gives EC2 node groups the image they were deployed with, so a newer AMI behind the SSM
parameter does not replace them (``target.ami_id`` still wins; ``up --refresh-ami`` leaves it empty).

Errors stop the Pulumi run with :class:`pulumi.RunError`, whose message Pulumi prints without a
traceback: one ``FILE:LINE:COL: rule-id: message — fix`` line per blueprint problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from blueprints import BlueprintInvalid, LoadedBlueprint, check, load_blueprint

__all__ = ["CONFIG_NAMESPACE", "PROJECT_ROOT", "StackConfig", "load_stack_blueprint", "read_stack_config"]

CONFIG_NAMESPACE = "clusterforge"
"""Config namespace (the Pulumi project name in ``Pulumi.yaml``)."""

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding ``Pulumi.yaml`` (``stacks/`` is its ``main``)."""


@dataclass(frozen=True)
class StackConfig:
    """Validated stack settings: ``blueprint`` (absolute path), ``strict`` (warnings are errors),
    ``images`` (node group -> recorded AMI id)."""

    blueprint: Path
    strict: bool = False
    images: dict[str, str] = field(default_factory=dict)


def _resolve(raw: str) -> Path:
    p = Path(raw).expanduser()
    if p.is_absolute():
        return p
    for base in (PROJECT_ROOT, Path.cwd()):
        if (base / p).exists():
            return (base / p).resolve()
    return (PROJECT_ROOT / p).resolve()


def read_stack_config() -> StackConfig:
    """Read ``clusterforge:*`` from the current stack.

    Raises :class:`pulumi.RunError` when ``clusterforge:blueprint`` is missing or names no file.
    """
    cfg = pulumi.Config(CONFIG_NAMESPACE)
    raw = cfg.get("blueprint")
    if not raw:
        raise pulumi.RunError(
            "stack setting `clusterforge:blueprint` is not set — run "
            "`pulumi config set clusterforge:blueprint blueprints/examples/aws-p5-efa-lustre.yaml` "
            "(see Pulumi.example.yaml)"
        )
    path = _resolve(raw)
    if not path.is_file():
        raise pulumi.RunError(
            f"stack setting `clusterforge:blueprint` names {raw!r}, which is not a file "
            f"(looked in {PROJECT_ROOT} and {Path.cwd()}) — set it to a blueprint YAML path"
        )
    images: dict[str, str] = {}
    raw_images = cfg.get("images")
    if raw_images:
        try:
            data = json.loads(raw_images)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and _AMI.fullmatch(v) for k, v in data.items()):
            raise pulumi.RunError("stack setting `clusterforge:images` must be a JSON object of node group -> "
                                  "AMI id (ami-…); `clusterforge up` writes it — remove it to look the images up")
        images = dict(data)
    return StackConfig(blueprint=path, strict=bool(cfg.get_bool("strict") or False), images=images)


_AMI = re.compile(r"ami-[0-9a-f]{8,17}")


def load_stack_blueprint(config: StackConfig) -> LoadedBlueprint:
    """Load and check the configured blueprint (the program then refuses one of another
    ``target.provider``: :func:`stacks.translate.aws_target`).

    Rule warnings are logged with :func:`pulumi.log.warn` (errors with ``strict``). Raises
    :class:`pulumi.RunError` whose message is one ``FILE:LINE:COL: rule-id: message — fix`` line
    per error.
    """
    try:
        loaded = load_blueprint(config.blueprint)
    except BlueprintInvalid as e:
        raise pulumi.RunError("\n".join(f.format() for f in e.findings)) from None
    findings = check(loaded)
    errors = [f for f in findings if f.severity == "error" or config.strict]
    if errors:
        raise pulumi.RunError("\n".join(f.format() for f in errors))
    for f in findings:
        pulumi.log.warn(f.format())
    return loaded
