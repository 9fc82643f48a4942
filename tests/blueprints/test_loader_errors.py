"""Loader error messages, end to end through ``clusterforge check``.

Each case writes a file, runs the CLI in-process and compares the one-line findings with a
snapshot of the exact form ``FILE:LINE:COL: rule-id: message — fix``; the exit code must be 1
and no traceback may appear.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from blueprints import BlueprintInvalid, load_blueprint, parse_blueprint
from clusterforge.cli import main

HEAD = "apiVersion: clusterforge/v1\nkind: Blueprint\nname: t\n"
ONPREM = HEAD + "target: {provider: onprem}\nnode_groups:\n  - name: gpu\n    hosts: [{name: h1, address: 10.0.0.1}]\n"

BOMB = "\n".join(
    [f'a: &a [{",".join(["lol"] * 9)}]']
    + [f"{c}: &{c} [{','.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
) + "\n"


def _check(path: Path, capsys: pytest.CaptureFixture[str], exit_code: int = 1) -> list[str]:
    """Run ``clusterforge check PATH``; return the finding lines printed on stdout (``exit_code`` asserted: 1 for a
    file that is not a valid blueprint, 2 for a path that names no readable file)."""
    rc = main(["check", str(path)])
    out = capsys.readouterr()
    assert rc == exit_code, out
    assert "Traceback" not in out.err + out.out
    return [line[2:] for line in out.out.splitlines() if line.startswith("✗ ")]


def _write(tmp_path: Path, text: str | bytes, name: str = "bp.yaml") -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


SNAPSHOTS: list[tuple[str, str | bytes, list[str]]] = [
    ("not-a-mapping-list", "- a\n- b\n",
     [("{f}:1:1: yaml-not-mapping: the document is a list, not a mapping — a blueprint is a mapping that starts with "
       "`apiVersion: clusterforge/v1`")]),
    ("not-a-mapping-scalar", "just text\n",
     [("{f}:1:1: yaml-not-mapping: the document is a string, not a mapping — a blueprint is a mapping that starts with "
       "`apiVersion: clusterforge/v1`")]),
    ("duplicate-keys", HEAD + "target: {provider: onprem}\nname: u\n",
     ["{f}:5:1: yaml-duplicate-key: duplicate key `name` (first defined on line 3) — remove one of the two entries"]),
    ("duplicate-keys-nested", HEAD + "target:\n  provider: onprem\n  os: debian-12\n  os: rocky-9\n",
     ["{f}:7:3: yaml-duplicate-key: duplicate key `os` (first defined on line 6) — remove one of the two entries"]),
    ("anchor-bomb", BOMB,
     [("{f}:1:1: yaml-too-large: the document expands to more than 200000 nodes (aliases that multiply?) — remove the "
       "nested anchors/aliases")]),
    ("recursive-alias", "a: &x [1, *x]\n",
     ["{f}:1:4: yaml-recursive-alias: an alias refers to the node that contains it — remove the recursive anchor/alias"]),
    ("unknown-key-did-you-mean", ONPREM.replace("target: {provider: onprem}", "target: {provider: onprem, sshh: {user: a}}"),
     ["{f}:4:28: schema-unknown-key: unknown key `target.sshh` — remove it or fix the spelling (did you mean `ssh`?)"]),
    ("unknown-key-lists-union-member-keys", ONPREM.replace("target: {provider: onprem}", "target: {provider: onprem, regoin: x}"),
     [("{f}:4:28: schema-unknown-key: unknown key `target.regoin` — remove it or fix the spelling (allowed keys: provider, "
       "os, ssh)")]),
    ("unknown-key-inside-tagged-union", ONPREM + "network:\n  fabric: infiniband\n  infiniband:\n    subnet_manager: {knd: opensm}\n",
     [("{f}:11:22: schema-unknown-key: unknown key `network.infiniband.subnet_manager.knd` — remove it or fix the spelling "
       "(did you mean `kind`?)")]),
    ("unknown-key-in-list-item", ONPREM.replace("address: 10.0.0.1", "adress: 10.0.0.1"),
     ["{f}:7:13: schema-missing-key: `node_groups.0.hosts.0.address` is required — add `address:` here",
      ("{f}:7:24: schema-unknown-key: unknown key `node_groups.0.hosts.0.adress` — remove it or fix the spelling (did you "
        "mean `address`?)")]),
    ("wrong-type-int", ONPREM.replace("  - name: gpu\n", "  - name: gpu\n    count: two\n"),
     [("{f}:7:5: schema-wrong-type: `node_groups.0.count`: input should be a valid integer, unable to parse string as an "
       "integer (got 'two') — write an integer here")]),
    ("wrong-type-list", ONPREM.replace("hosts: [{name: h1, address: 10.0.0.1}]", "hosts: {name: h1, address: 10.0.0.1}"),
     ["{f}:7:5: schema-wrong-type: `node_groups.0.hosts` must be a list, got a mapping — write `node_groups.0.hosts` as a list"]),
    ("wrong-type-plain-union", ONPREM.replace("target: {provider: onprem}", "target: {provider: aws, region: us-east-1, "
                                                "availability_zone: us-east-1a}").replace(
        "    hosts: [{name: h1, address: 10.0.0.1}]\n", "    instance_type: p5.48xlarge\n    count: 1\n") + "network: {fabric: efa, efa: {interfaces: lots}}\n",
     [("{f}:9:30: schema-wrong-type: `network.efa.interfaces` is 'lots': expected an integer or 'max' — write `interfaces` "
       "as an integer or 'max'")]),
    ("bad-enum", ONPREM + "network: {fabric: myrinet}\n",
     [("{f}:8:11: schema-invalid-value: `network.fabric` is 'myrinet', not one of the allowed values — use one of 'efa', "
       "'infiniband', 'roce', 'ethernet'")]),
    ("bad-union-tag", ONPREM + "storage:\n  - {kind: ceph, name: c, mount: /c}\n",
     ["{f}:9:6: schema-invalid-value: `storage.0.kind` is 'ceph', not one of the allowed values — use one of 'lustre', 'nfs'"]),
    ("missing-union-tag", ONPREM + "storage:\n  - {name: c, mount: /c}\n",
     [("{f}:9:5: schema-missing-key: `storage.0` needs its `kind` key — add `kind:` with one of the allowed values (see "
       "`clusterforge schema`)")]),
    ("bound-inside-union", HEAD + "target: {provider: aws, region: us-east-1, availability_zone: us-east-1a}\n"
     "node_groups: [{name: g, instance_type: p5.48xlarge, count: 1}]\n"
     "storage:\n  - kind: lustre\n    name: fs\n    mount: /fs\n    fsx: {storage_capacity_gib: 600}\n",
     ["{f}:10:11: schema-invalid-value: `storage.0.fsx.storage_capacity_gib` is 600, must be >= 1200 — use a value >= 1200"]),
    ("missing-keys", "apiVersion: clusterforge/v1\nkind: Blueprint\ntarget: {provider: aws, region: us-east-1}\nnode_groups: []\n",
     ["{f}:1:1: schema-missing-key: `name` is required — add `name:` here",
      "{f}:3:1: schema-missing-key: `target.availability_zone` is required — add `availability_zone:` here",
      "{f}:4:1: schema-invalid-value: `node_groups` needs at least 1 item (got 0) — add a `node_groups` entry"]),
    ("wrong-kind", "apiVersion: clusterforge/v1\nkind: Deployment\nmetadata: {name: x}\n",
     [("{f}:2:1: blueprint-wrong-kind: this is not a clusterforge blueprint (`kind: Deployment`) — set `apiVersion: "
       "clusterforge/v1` and `kind: Blueprint`")]),
    ("wrong-api-version", "apiVersion: apps/v1\nkind: Deployment\n",
     [("{f}:1:1: blueprint-wrong-kind: this is not a clusterforge blueprint (`apiVersion: apps/v1`) — set `apiVersion: "
       "clusterforge/v1` and `kind: Blueprint`")]),
    ("empty-file", "",
     ["{f}:1:1: blueprint-empty: the file is empty — write a blueprint (see blueprints/examples/ or `clusterforge schema`)"]),
    ("only-comments", "# a blueprint will go here\n---\n",
     [("{f}:1:1: blueprint-empty: the file has no YAML content (only comments or `---`) — write a blueprint (see "
       "blueprints/examples/ or `clusterforge schema`)")]),
    ("binary-file", b"apiVersion: x\n\x7fELF\x02\x01\x01\x00\x00",
     ["{f}:2:8: file-not-text: the file holds binary data (a NUL byte) — pass a YAML text file"]),
    ("not-utf8", "name: café\n".encode("latin-1"),
     ["{f}:1:10: file-not-text: byte 0xe9 is not UTF-8 text — save the blueprint as UTF-8"]),
    ("control-character", 'name: "a\x07b"\n',
     [("{f}:1:9: file-not-text: control character U+0007 is not allowed in YAML — remove control characters; save the "
       "blueprint as UTF-8 text")]),
    ("syntax-error", "name: [a, b\n",
     [("{f}:2:1: yaml-syntax: did not find expected ',' or ']' (while parsing a flow sequence) — fix the YAML syntax at "
       "this position")]),
    ("tab-indent", "target:\n\tprovider: onprem\n",
     ["{f}:2:1: yaml-syntax: a tab character where YAML expects indentation or a value — indent with spaces, not tabs"]),
    ("two-documents", "---\na: 1\n---\nb: 2\n",
     [("{f}:3:1: yaml-multiple-documents: a second YAML document starts here: a blueprint file holds exactly one "
       "blueprint — put each blueprint in its own file, or remove this `---` and what follows it")]),
]


@pytest.mark.parametrize(("name", "text", "expected"), SNAPSHOTS, ids=[s[0] for s in SNAPSHOTS])
def test_error_snapshot(name: str, text: str | bytes, expected: list[str], tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    f = _write(tmp_path, text)
    assert _check(f, capsys) == [e.format(f=f) for e in expected]


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _check(tmp_path, capsys, 2) == [(f"{tmp_path}:1:1: file-is-directory: this is a directory, not a blueprint file — "
                                         "pass a .yaml file, e.g. blueprints/examples/local-workstation.yaml")]


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "nope.yaml"
    assert _check(f, capsys, 2) == [f"{f}:1:1: file-not-found: no such file — check the path"]


def test_device_is_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    """A character device (endless data) is refused without reading it."""
    assert _check(Path("/dev/zero"), capsys, 2) == [
        "/dev/zero:1:1: file-not-regular: this is not a regular file (a device, socket or pipe?) — pass a .yaml file"]


def test_oversized_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _write(tmp_path, b"# " + b"x" * (16 * 1024 * 1024) + b"\n")
    assert _check(f, capsys) == [(f"{f}:1:1: file-too-large: the file is larger than 16777216 bytes — a blueprint is a "
                                  "small YAML file")]


def test_anchor_bomb_is_rejected_fast(tmp_path: Path) -> None:
    """The loader refuses the alias expansion instead of building it: 9**9 expanded nodes would need
    gigabytes, so a peak of a few MiB proves nothing was expanded (memory, not wall time: machines are noisy)."""
    f = _write(tmp_path, BOMB)
    tracemalloc.start()
    try:
        with pytest.raises(BlueprintInvalid) as e:
            load_blueprint(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB: the aliases were expanded"
    assert [x.rule_id for x in e.value.findings] == ["yaml-too-large"]


def test_json_output_for_invalid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _write(tmp_path, HEAD + "target: {provider: onprem}\nname: u\n")
    assert main(["check", "--json", str(f)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert [(x["rule_id"], x["line"], x["col"], x["severity"]) for x in doc["findings"]] == [("yaml-duplicate-key", 5, 1, "error")]


def test_anchors_aliases_and_merge_keys_load() -> None:
    """Aliases and `<<` merge keys are ordinary YAML: they load, and positions point at the written keys."""
    text = HEAD + (
        "target: {provider: onprem}\n"
        "node_groups:\n"
        "  - name: a\n"
        "    hosts:\n"
        "      - &h1 {name: h1, address: 10.0.0.1}\n"
        "      - <<: *h1\n"
        "        name: h2\n"
        "        address: 10.0.0.2\n"
    )
    loaded = parse_blueprint(text, "m.yaml")
    hosts = loaded.blueprint.node_groups[0].hosts
    assert [(h.name, h.address) for h in hosts] == [("h1", "10.0.0.1"), ("h2", "10.0.0.2")]
    assert loaded.locate(("node_groups", 0, "hosts", 1, "name")) == (10, 9)


def test_yaml_1_2_scalars() -> None:
    """Blueprints follow YAML 1.2 (as editors and the JSON Schema do): `yes`, `on`, `1:20` and dates stay strings."""
    loaded = parse_blueprint(HEAD + "description: on\ntarget: {provider: onprem, ssh: {user: yes}}\n"
                             "node_groups: [{name: g, hosts: [{name: h, address: 2024-01-01}]}]\n", "s.yaml")
    bp = loaded.blueprint
    assert bp.description == "on"
    assert bp.target.ssh.user == "yes"  # type: ignore[union-attr]
    assert bp.node_groups[0].hosts[0].address == "2024-01-01"


def test_every_problem_is_reported_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several schema errors in one file all come out, sorted by position, one line each."""
    f = _write(tmp_path, ONPREM.replace("  - name: gpu\n", "  - name: GPU\n    role: gpu\n") + "network: {fabric: roce, mtu: 100000}\n")
    lines = _check(f, capsys)
    assert [line.split(": ")[1] for line in lines] == ["schema-invalid-value"] * 3
    assert [int(line.split(":")[1]) for line in lines] == [6, 7, 9]
    assert "use lower-case letters, digits and `-`, starting with a letter" in lines[0]
