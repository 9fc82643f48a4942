"""tests/conftest.py's LONGEST_FIRST names test modules that exist: a renamed module would silently fall back to
collection order and the run would again end on one worker's long module."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, REPO


def test_every_module_of_the_longest_first_order_exists() -> None:
    missing = [m for m in LONGEST_FIRST if not (REPO / m).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names modules that are gone: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
