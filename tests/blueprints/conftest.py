"""Fixtures shared by the rule tests of this folder.

Nothing is imported from the code under test at module level: pytest loads this file before its plugins start
(``tools/mutate.py``'s line tracer among them), and the rules package must be imported while they watch.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def docs() -> dict[str, dict[str, Any]]:
    """The example blueprints of ``test_rules.BASES`` as plain data (short name -> document), for tests to change."""
    from blueprints import load_blueprint

    from .test_rules import BASES, EXAMPLES

    return {k: load_blueprint(EXAMPLES / f"{v}.yaml").data for k, v in BASES.items()}
