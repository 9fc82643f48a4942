"""Imports every rule module so their rules register (keep this list in sync with the folder)."""

from . import aws, fabric, general, hardware, sandbox, software, storage, validation, workload  # noqa: F401
