"""Stack configuration: read once, validated, turned into a checked blueprint.

The stack file ``Pulumi.<stack>.yaml`` holds one required setting::

    config:
      clusterforge:blueprint: blueprints/examples/aws-p5-efa-lustre.yaml

A relative path is resolved against the project root (the directory of ``Pulumi.yaml``), then
against the working directory. ``clusterforge:strict: true`` also stops on rule warnings.

Errors stop the Pulumi run with :class:`pulumi.RunError`, whose message Pulumi prints without a
traceback: one ``FILE:LINE:COL: rule-id: message — fix`` line per blueprint problem.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    """Validated stack settings: ``blueprint`` (absolute path), ``strict`` (warnings are errors)."""

    blueprint: Path
    strict: bool = False


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
    return StackConfig(blueprint=path, strict=bool(cfg.get_bool("strict") or False))


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
