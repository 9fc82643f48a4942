"""The secret scan (rule ``secret-in-blueprint``) at its shortest secrets (issue 35).

The scan skips strings too short to hold a secret; the shortest it recognises are a Slack token (the prefix and 10
characters: 15), an AWS access key id (exactly 20 characters) and a GitHub classic token (``ghp_`` + 36 = 40). Each
is tested as a whole value at its published length
(must be found) and one character shorter (must not: it is not that kind of secret), so a longer skip length or a
looser pattern fails here. Figures are the vendors' own documented examples, typed here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from blueprints import check, load_blueprint, parse_blueprint

from .rule_cases.emit import emit
from .test_rules import EXAMPLES

# https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds.html: example access key id, 20 characters
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
# https://docs.github.com/en/rest/authentication/authenticating-to-the-rest-api: example token, ghp_ + 36 characters
GITHUB_TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
# https://api.slack.com/authentication/token-types: a bot token starts with xoxb- (user tokens xoxp-); Slack states no
# minimum length ("up to 255 characters"). Issued bot tokens have the shape xoxb-<digits>-<digits>-<24 alphanumerics>
# (the published examples in gitleaks' slack-bot-token rule, cmd/generate/config/rules/slack.go); built from parts so
# the file itself holds no token. The scan's own shortest Slack match is the prefix and 10 characters: 15 in all.
_SLACK_PARTS = ("xoxb", "7812365427", "2364535789652", "GkwFDQoHqzXDVsC6GzqYUypD")
SLACK_BOT_TOKEN = "-".join(_SLACK_PARTS)
SLACK_SHORTEST = "xoxb-" + "A1b2C3d4E5"


@pytest.fixture(scope="module")
def p5() -> dict[str, Any]:
    return load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").data


def _hits(doc: dict[str, Any], value: str) -> list[str]:
    d = copy.deepcopy(doc)
    d["description"] = value
    text, _ = emit(d)
    return [f.format() for f in check(parse_blueprint(text, "case.yaml"), only=["secret-in-blueprint"])]


def test_the_documented_examples_have_their_published_lengths():
    assert len(AWS_KEY_ID) == 20 and len(GITHUB_TOKEN) == 40 and len(SLACK_SHORTEST) == 15


@pytest.mark.parametrize(("value", "found"), [
    (AWS_KEY_ID, True),                 # the whole value, 20 characters: the shortest secret the scan knows
    (AWS_KEY_ID[:-1], False),           # 19: not an access key id
    ("ASIA" + AWS_KEY_ID[4:], True),    # temporary (STS) key ids start with ASIA
    (GITHUB_TOKEN, True),               # 40 characters
    (GITHUB_TOKEN[:-1], False),         # 39
    (SLACK_BOT_TOKEN, True),            # an issued bot token's shape
    ("xoxp-" + SLACK_BOT_TOKEN[5:], True),  # user token prefix
    (SLACK_SHORTEST, True),             # 15: the shortest value the Slack pattern matches is scanned (the scan
                                        # skipped values below 16 characters, so this one went unreported)
    (SLACK_SHORTEST[:-1], False),       # 14: prefix and 9 characters is not a token
])
def test_shortest_secrets_as_whole_values(p5, value, found):
    hits = _hits(p5, value)
    assert bool(hits) is found, hits
    if found:
        assert "secret-in-blueprint" in hits[0] and "`description` contains what looks like" in hits[0]


def test_secrets_anywhere_but_the_key_path_field(p5):
    # the one skipped path is target.ssh.private_key_file (ssh-key-material reports it); a tag value sorts after it
    # and is still scanned (kills `path == skip` -> `path > skip`)
    d = copy.deepcopy(p5)
    d.setdefault("target", {}).setdefault("tags", {})["owner"] = AWS_KEY_ID
    text, _ = emit(d)
    hits = [f.format() for f in check(parse_blueprint(text, "case.yaml"), only=["secret-in-blueprint"])]
    assert len(hits) == 1 and "`target.tags.owner` contains what looks like an AWS access key id" in hits[0]


def test_secrets_in_mapping_keys(p5):
    # keys are scanned as well as values (kills `isinstance(k, str)` -> `not isinstance(k, str)`)
    d = copy.deepcopy(p5)
    d.setdefault("target", {})["tags"] = {AWS_KEY_ID: "owner"}
    text, _ = emit(d)
    hits = [f.format() for f in check(parse_blueprint(text, "case.yaml"), only=["secret-in-blueprint"])]
    assert len(hits) == 1 and f"`target.tags.{AWS_KEY_ID}` contains what looks like an AWS access key id" in hits[0]
