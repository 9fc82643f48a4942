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
        if os.geteuid() == 0 and os.path.exists("/proc/self/mountinfo"):
            # root copies are overlay mounts: a run that was killed left its mounted; unmount and remove them
            from tests.roles.conftest import remove_stale_overlays

            remove_stale_overlays()


LONGEST_FIRST = (
    "tests/roles/test_converge.py", "tests/roles/test_slurm_roles.py", "tests/roles/test_nvidia_driver_paths.py",
    "tests/validate/test_faults.py", "tests/validate/test_first_run.py", "tests/roles/test_one_definition.py",
    "tests/validate/test_runner.py", "tests/roles/test_doca_ofed.py", "tests/stacks/test_day_two.py",
    "tests/roles/test_lnet_discovery.py", "tests/validate/test_payloads.py", "tests/roles/test_lustre_preflight.py",
    "tests/roles/test_apt_fast_path.py", "tests/roles/test_dcgm_install.py", "tests/validate/test_slurm_launcher.py",
    "tests/roles/test_nccl_stack.py", "tests/validate/test_profile.py", "tests/stacks/test_download_integrity.py",
    "tests/roles/test_host_tuning_units.py", "tests/clusterforge/ansible/test_runner.py",
)
"""The test modules that take longest (``--durations`` of a whole run, longest first): collected first, so that
``--dist loadscope`` hands them out before the short ones and the run does not end on one worker's long module while
the others idle. Only the order changes; a module missing from the list runs after these, in collection order."""


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the collected tests as :data:`LONGEST_FIRST` says (a stable sort: each module's tests keep their order,
    and every xdist worker computes the same order, as xdist requires)."""
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.nodeid.split("::", 1)[0], len(rank)))


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
