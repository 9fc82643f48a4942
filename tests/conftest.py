"""Shared test fixtures: paths to the repo, the examples and the public fixtures folder (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "blueprints" / "examples"
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
