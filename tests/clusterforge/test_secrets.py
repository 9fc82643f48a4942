"""Secrets never reach rendered files, plans, reports or logs.

A marker secret is planted where users keep secrets — the SSH private key file a blueprint
points at, the Pulumi passphrase and AWS credentials in the environment — and every output of
every command is searched for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterforge.cli import main

from ..conftest import EXAMPLES

MARKER = "CF-SECRET-MARKER-7f3a9c1e"


@pytest.fixture()
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    key = tmp_path / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{MARKER}\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", MARKER)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MARKER)
    monkeypatch.setenv("AWS_SESSION_TOKEN", MARKER)
    text = (EXAMPLES / "onprem-dgx-h100-ib.yaml").read_text().replace("~/.ssh/id_ed25519", str(key))
    assert str(key) in text
    bp = tmp_path / "dgx.yaml"
    bp.write_text(text)
    return bp


def _scan(root: Path) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file() and MARKER.encode() in p.read_bytes():
            hits.append(str(p))
    return hits


def test_marker_secret_never_appears_in_any_output(planted: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    assert main(["check", str(planted), "--json"]) == 0
    assert main(["plan", str(planted), "--json"]) == 0
    assert main(["plan", str(EXAMPLES / "aws-eks-p4d.yaml"), "--json"]) == 0
    assert main(["render", str(planted), "-o", str(out / "dgx")]) == 0
    assert main(["render", str(EXAMPLES / "aws-eks-p4d.yaml"), "-o", str(out / "eks")]) == 0
    printed = capsys.readouterr()
    assert MARKER not in printed.out + printed.err
    assert (out / "dgx").is_dir() and any((out / "dgx").rglob("*.yml"))
    assert _scan(out) == []
    # the key is referenced by path only
    inventory = next((out / "dgx").rglob("inventory.yml")).read_text()
    assert str(planted.parent / "id_ed25519") in inventory
