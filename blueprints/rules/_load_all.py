"""Imports every rule module so their rules register (keep this list in sync with the folder)."""

from . import general  # noqa: F401
