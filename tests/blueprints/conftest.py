"""Fixtures shared by the rule tests of this folder."""

from __future__ import annotations

from typing import Any

import pytest

from blueprints import load_blueprint

from .test_rules import BASES, EXAMPLES


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    """The example blueprints of ``test_rules.BASES`` as plain data (short name -> document), for tests to change."""
    return {k: load_blueprint(EXAMPLES / f"{v}.yaml").data for k, v in BASES.items()}
