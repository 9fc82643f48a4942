"""The clusterforge error hierarchy.

Every error a user can cause is a :class:`ClusterforgeError`; the CLI catches it once and
prints one line (``--debug`` shows the traceback). Exit codes follow the design: 1 for an
invalid blueprint or a failed operation, 2 for usage errors, 3 for an invalid validation run.
"""

from __future__ import annotations


class ClusterforgeError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; ``str(err)`` is the one-line message."""

    exit_code = 1


class UsageError(ClusterforgeError):
    """Bad command-line usage (missing or conflicting flags, unreadable input path)."""

    exit_code = 2


class ProvisionError(ClusterforgeError):
    """Pulumi or ansible-runner reported a failure (message names the host/resource and the cause)."""


class ToolMissingError(ClusterforgeError):
    """An external tool (Pulumi CLI, ansible-playbook, fio) is not installed; the message says how to install it."""


class InvalidRunError(ClusterforgeError):
    """A validation run could not say anything (no results, unknown format)."""

    exit_code = 3
