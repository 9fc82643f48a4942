"""Shared test fixtures: paths to the repo, the examples and the public fixtures folder (tests/fixtures)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
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


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Give the run one identifier before xdist starts its workers (they inherit the environment): the converges the
    workers share live under ``.cache/rootfs/converge/<it>`` (tests/roles/conftest.py)."""
    if _is_controller(config):
        os.environ.setdefault("CLUSTERFORGE_TEST_RUN_UID", uuid.uuid4().hex)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """When the whole run is over (in the controlling process, after every worker), remove its converge copies."""
    if _is_controller(session.config):
        from tests.roles.conftest import remove_run

        remove_run(os.environ["CLUSTERFORGE_TEST_RUN_UID"])


@pytest.fixture(scope="module", autouse=True)
def _module_root_copies() -> Iterator[None]:
    """Remove the root filesystem copies a test module made once its fixtures are torn down (autouse module
    fixtures are set up before, so torn down after, the module's own). Copies are about 0.3-1.5 GB each."""
    roles = sys.modules.get("tests.roles.conftest")
    start = len(roles.COPIES) if roles else 0
    yield
    roles = sys.modules.get("tests.roles.conftest")
    if roles:
        roles.remove_copies(start)
