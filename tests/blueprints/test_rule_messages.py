"""Every rule's finding text as a user reads it, reviewed in ``tests/golden/rules/`` (issue 35).

``test_rules.py`` checks that each rule fires at the right line with the right fix; it reads the
message only for backticks. A change to a message's figures or wording (a count that is off, a
"did you mean" naming the wrong field, a limit quoted from the wrong catalog row) then passed
every test. Here each rule's firing case (``test_rules.CASES``) is checked and the rule's findings,
formatted as ``clusterforge check`` prints them (``FILE:LINE:COL: rule-id: message — fix``), are
compared with ``tests/golden/rules/<rule-id>.txt``: a changed message is a visible diff to review
(``CLUSTERFORGE_UPDATE_GOLDEN=1`` rewrites the files).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.golden_files import assert_golden, golden_dir

from .test_rules import CASES, Case, _build, _check

FOLDER = golden_dir("rules")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_message_is_the_reviewed_text(case: Case, docs: dict[str, dict[str, Any]],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    text, _ = _build(docs, case.base, case.bad)
    found = [f.format() for f in _check(text, case, monkeypatch) if f.rule_id == case.rule]
    assert found, f"{case.rule} did not fire"
    assert_golden({f"{case.rule}.txt": "\n".join(found) + "\n"}, FOLDER, complete=False)


def test_every_golden_message_file_has_a_case() -> None:
    """A rule removed (or renamed) leaves no stale reviewed text behind (delete its file)."""
    files = {p.stem for p in FOLDER.glob("*.txt")}
    assert files == {c.rule for c in CASES}, sorted(files ^ {c.rule for c in CASES})
