"""The CLI's error hierarchy is the ground floor's: :mod:`blueprints.errors` (re-exported here)."""

from blueprints.errors import (
    ClusterforgeError,
    InvalidRunError,
    ProvisionError,
    ToolMissingError,
    UsageError,
)

__all__ = ["ClusterforgeError", "InvalidRunError", "ProvisionError", "ToolMissingError", "UsageError"]
