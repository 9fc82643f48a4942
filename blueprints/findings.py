"""Findings: what the loader and the pre-deploy rules report about a blueprint.

A finding prints as one line, ``FILE:LINE:COL: rule-id: message — fix``, the format every
clusterforge command uses for blueprint problems.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]

__all__ = ["UNREADABLE_PATH_RULES", "BlueprintInvalid", "Finding", "Severity", "names_no_readable_file"]


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


UNREADABLE_PATH_RULES = frozenset({"file-not-found", "file-is-directory", "file-not-regular", "file-unreadable"})
"""Loader findings that mean the path given names no readable file: nothing was read, so the command line is at
fault (a usage error, exit 2), not the blueprint."""


def names_no_readable_file(findings: list[Finding]) -> bool:
    """True when ``findings`` (at least one) all say the path given names no readable file
    (:data:`UNREADABLE_PATH_RULES`): a usage error, exit 2, not an invalid blueprint."""
    return bool(findings) and all(f.rule_id in UNREADABLE_PATH_RULES for f in findings)


class BlueprintInvalid(Exception):
    """Raised by :func:`blueprints.load_blueprint` when a blueprint cannot be loaded or checked.

    ``findings`` holds every error found (at least one); ``str(err)`` is their one-line forms.
    ``exit_code`` is what the command line exits with: 2 when the path names no readable file
    (:data:`UNREADABLE_PATH_RULES`), else ``invalid_exit`` (1, the code of an invalid blueprint; ``validate``
    and ``judge`` pass 2, since 1 is the cluster's verdict there).
    """

    def __init__(self, findings: list[Finding], invalid_exit: int = 1):
        self.findings = findings
        self.exit_code = 2 if names_no_readable_file(findings) else invalid_exit
        super().__init__("\n".join(f.format() for f in findings))
