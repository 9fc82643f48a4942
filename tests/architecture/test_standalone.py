"""The repository stands alone: no tracked file points at internal bug numbers or at notes outside the
repository, and every id the field-failure table names is one the project defines."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO

INTERNAL_BUG_ID = re.compile(r"bug-?[0-9]{2}", re.IGNORECASE)
OUTSIDE_NOTES = re.compile(r"\.\./shared|shared/reference|/work/shared")


def _tracked_text_files() -> list[str]:
    """Tracked files (``git ls-files``) plus untracked ones not ignored, as text; binaries skipped."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return [p for p in out if (REPO / p).is_file()]


def _hits(pattern: re.Pattern[str]) -> list[str]:
    hits = []
    for rel in _tracked_text_files():
        if rel == "tests/architecture/test_standalone.py":  # the patterns themselves
            continue
        try:
            text = (REPO / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:120]}")
    return hits


def test_no_internal_bug_numbers() -> None:
    """Knowledge is keyed by public ids (rule, node check, diagnosis) and public reports, never by an
    internal row number like the ones this project's notes once used."""
    hits = _hits(INTERNAL_BUG_ID)
    assert not hits, "internal bug numbers:\n" + "\n".join(hits)


def test_no_reference_to_notes_outside_the_repository() -> None:
    hits = _hits(OUTSIDE_NOTES)
    if not (REPO / "DESIGN.md").exists():
        hits += _hits(re.compile(r"\bDESIGN\.md\b"))
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_field_failure_table_names_only_ids_that_exist() -> None:
    """Every id the "caught by" column lists after `rule(s)`, `node check(s)`, `diagnosis/diagnoses` or
    `role` is one the project defines (`clusterforge rules`, the node suite's checks, the judge's
    diagnoses, a role directory), and every repository file it names exists."""
    from blueprints import all_rules
    from validate.node_checks import CHECKS, CROSS_CHECKS
    from validate.signatures import SIGNATURES

    rules, checks, diagnoses = {r.id for r in all_rules()}, set(CHECKS) | set(CROSS_CHECKS), {s.id for s in SIGNATURES}
    known = {"rule": rules, "rules": rules, "node check": checks, "node checks": checks,
             "diagnosis": diagnoses, "diagnoses": diagnoses,
             "role": {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}}
    listing = re.compile(r"^(rules?|node checks?|diagnosis|diagnoses|role)\s+((?:`[^`]+`(?:,\s*)?)+)")
    rows = [line for line in (REPO / "docs" / "field-failures.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| caught by")]
    assert len(rows) >= 15
    bad, named = [], 0
    for row in rows:
        caught = row.split("|")[1]
        for part in caught.split(";"):
            m = listing.match(part.strip())
            if m:
                for i in re.findall(r"`([^`]+)`", m.group(2)):
                    named += 1
                    if i not in known[m.group(1)]:
                        bad.append(f"{m.group(1)} `{i}` is not defined (row: {caught.strip()})")
            for path in re.findall(r"`((?:stacks|roles|validate|blueprints|clusterforge)/[^`]+)`", part):
                if not (REPO / path).exists():
                    bad.append(f"`{path}` does not exist (row: {caught.strip()})")
    assert named >= 30
    assert not bad, "\n".join(bad)
