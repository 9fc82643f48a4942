"""The on-prem Lustre client's package source is a blueprint field (``software.lustre_client_repos``, per
``target.os``): ``check`` stops a blueprint whose hosts mount a Lustre server without a source for their OS
(rule ``lustre-client-source``, at the line that needs it), and the rendered role variables carry the
declared repository, so ``up`` installs the client from it."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, get_args

import pytest

from blueprints import load_blueprint, parse_blueprint
from blueprints.models import OnpremOs
from blueprints.rules import check
from clusterforge.ansible.render import inventory_data
from clusterforge.cli import main
from tests.ansible_vars import load_vars

from .rule_cases.emit import emit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "blueprints" / "examples"
REPO = {"url": "https://repo.example.com/lustre/2.15.7/{dist}/", "key_url": "https://repo.example.com/lustre/key.asc"}


def _lustre_docs() -> list[tuple[str, dict[str, Any]]]:
    """On-prem blueprints that mount a Lustre server: the DGX example (o2ib over IPoIB) and the field input
    with tcp LNet over RoCE ports (declared netdevs), each without any client source."""
    out = []
    for name, path in (("dgx", EXAMPLES / "onprem-dgx-h100-ib.yaml"),
                       ("field-07", ROOT / "tests/fixtures/field/07-lustre-tcp-lnet-ifname.yaml")):
        doc = copy.deepcopy(load_blueprint(path).data)
        doc.setdefault("software", {}).pop("lustre_client_repos", None)
        if name == "field-07":  # its RoCE ECN needs DOCA-OFED (roce-ecn-needs-ofed), beside what this test is about
            doc["network"]["roce"]["ecn"] = False
        out.append((name, doc))
    return out


def _repo(os_name: str, **extra: Any) -> dict[str, Any]:
    return {k: v.format(dist=os_name.replace("-", "").replace(".", "")) for k, v in REPO.items()} | extra


VARIANTS = [pytest.param(name, doc, os_name, id=f"{name}-{os_name}")
            for name, doc in _lustre_docs() for os_name in get_args(OnpremOs)]


def _write(tmp_path: Path, doc: dict[str, Any]) -> tuple[Path, dict[tuple[Any, ...], int]]:
    text, lines = emit(doc)
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p, lines


def _errors(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    main(["check", str(path)])
    return [ln for ln in capsys.readouterr().out.splitlines() if ": lustre-client-source: " in ln]


@pytest.mark.parametrize(("name", "doc", "os_name"), VARIANTS)
def test_no_source_for_the_os_is_an_error_at_the_lustre_server(tmp_path, capsys, name, doc, os_name):
    doc = copy.deepcopy(doc)
    doc["target"]["os"] = os_name
    path, lines = _write(tmp_path, doc)
    [err] = _errors(path, capsys)
    i = next(k for k, s in enumerate(doc["storage"]) if s.get("server"))
    m = re.match(rf"^✗ {re.escape(str(path))}:(\d+):(\d+): lustre-client-source: (.*) — (.*)$", err)
    assert m, err
    assert int(m.group(1)) == lines[("storage", i, "server")]
    assert f"no package source for `target.os` `{os_name}`" in m.group(3)
    assert m.group(4).startswith(f"add `software.lustre_client_repos.{os_name}: ")
    assert main(["check", str(path)]) == 1


@pytest.mark.parametrize(("name", "doc", "os_name"), VARIANTS)
def test_a_source_for_another_os_points_at_the_field(tmp_path, capsys, name, doc, os_name):
    others = [o for o in get_args(OnpremOs) if o != os_name]
    doc = copy.deepcopy(doc)
    doc["target"]["os"] = os_name
    doc.setdefault("software", {})["lustre_client_repos"] = {o: _repo(o) for o in others}
    path, lines = _write(tmp_path, doc)
    [err] = _errors(path, capsys)
    assert f":{lines[('software', 'lustre_client_repos')]}:" in err.split(" lustre-client-source")[0]
    assert "declared only for " + ", ".join(f"`{o}`" for o in sorted(others)) in err


@pytest.mark.parametrize(("name", "doc", "os_name"), VARIANTS)
def test_a_source_for_the_os_passes_and_reaches_the_role_vars(tmp_path, capsys, name, doc, os_name):
    doc = copy.deepcopy(doc)
    doc["target"]["os"] = os_name
    repo = _repo(os_name, suite="{codename}", components=["main"])
    doc.setdefault("software", {})["lustre_client_repos"] = {os_name: repo}
    path, _ = _write(tmp_path, doc)
    assert _errors(path, capsys) == []
    loaded = load_blueprint(path)
    assert "lustre-client-source" not in {f.rule_id for f in check(loaded)}
    # what `clusterforge render` writes (and `up` runs): every host's group_vars name the declared repository
    out = tmp_path / "out"
    assert main(["render", str(path), "-o", str(out)]) == 0
    for gv in sorted((out / "ansible/group_vars").glob("*.yml")):
        v = load_vars(gv)
        assert v["lustre_client_apt_repo_url"] == repo["url"], gv.name
        assert v["lustre_client_apt_repo_key_url"] == repo["key_url"]
        assert v["lustre_client_apt_repo_suite"] == "{codename}" and v["lustre_client_apt_repo_components"] == ["main"]
        assert v["lustre_client_packages"] == ["lustre-client-utils", "lustre-client-modules-dkms"]


def test_declared_packages_replace_the_catalog_dkms_client():
    doc = copy.deepcopy(_lustre_docs()[0][1])
    os_name = doc["target"]["os"]
    doc["software"]["lustre_client_repos"] = {
        os_name: _repo(os_name, packages=["lustre-client-utils", "lustre-client-modules-{kernel}"])}
    _, group_vars = inventory_data(parse_blueprint(emit(doc)[0], "variant.yaml"))
    assert all(v["lustre_client_packages"] == ["lustre-client-utils", "lustre-client-modules-{kernel}"]
               for v in group_vars.values())


def test_without_lustre_or_on_aws_nothing_is_asked(capsys):
    # no Lustre server mounted: no source needed
    doc = copy.deepcopy(load_blueprint(EXAMPLES / "onprem-l40s-roce.yaml").data)
    assert "lustre-client-source" not in {f.rule_id for f in check(parse_blueprint(emit(doc)[0], "v.yaml"))}
    # AWS FSx clients use Amazon's repository (catalog), not the field
    for ex in ("aws-p5-efa-lustre", "aws-eks-p4d"):
        assert "lustre-client-source" not in {f.rule_id for f in check(load_blueprint(EXAMPLES / f"{ex}.yaml"))}


def test_the_example_declares_its_source_and_the_rule_is_listed(capsys):
    assert main(["check", str(EXAMPLES / "onprem-dgx-h100-ib.yaml")]) == 0
    capsys.readouterr()
    main(["rules"])
    out = capsys.readouterr().out
    assert "lustre-client-source" in out and "https://downloads.whamcloud.com/public/lustre/" in out


@pytest.mark.parametrize("bad", [{"url": "repo.example.com/lustre"}, {"key_url": ""}])
def test_a_malformed_source_is_a_load_error(tmp_path, capsys, bad):
    doc = copy.deepcopy(_lustre_docs()[0][1])
    os_name = doc["target"]["os"]
    doc["software"]["lustre_client_repos"] = {os_name: _repo(os_name) | bad}
    path, lines = _write(tmp_path, doc)
    assert main(["check", str(path)]) != 0
    out = capsys.readouterr()
    text = out.out + out.err
    key = next(iter(bad))
    assert f":{lines[('software', 'lustre_client_repos', os_name, key)]}:" in text, text
