"""Findings: what the loader and the pre-deploy rules report about a blueprint.

A finding prints as one line, ``FILE:LINE:COL: rule-id: message — fix``, the format every
clusterforge command uses for blueprint problems.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]

__all__ = ["BlueprintInvalid", "Finding", "Severity"]


@dataclass(frozen=True)
class Finding:
    """One problem in a blueprint.

    ``path`` is the location inside the document as a tuple of keys and list indexes, e.g.
    ``("node_groups", 0, "instance_type")``; ``line``/``col`` are 1-based (0 when unknown).
    ``source`` is the URL of the fact the rule enforces (empty for schema errors).
    """

    rule_id: str
    severity: Severity
    message: str
    fix: str
    source: str = ""
    file: str = ""
    line: int = 0
    col: int = 0
    path: tuple[Any, ...] = field(default_factory=tuple)

    def format(self) -> str:
        """``FILE:LINE:COL: rule-id: message — fix`` (the severity is implied by the command's output)."""
        where = f"{self.file}:{self.line}:{self.col}"
        prefix = "" if self.severity == "error" else "warning: "
        return f"{where}: {prefix}{self.rule_id}: {self.message} — {self.fix}"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: rule_id, severity, message, fix, source, file, line, col, path."""
        d = asdict(self)
        d["path"] = ".".join(str(p) for p in self.path)
        return d


class BlueprintInvalid(Exception):
    """Raised by :func:`blueprints.load_blueprint` when a blueprint cannot be loaded or checked.

    ``findings`` holds every error found (at least one); ``str(err)`` is their one-line forms.
    """

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("\n".join(f.format() for f in findings))
