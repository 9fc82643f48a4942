"""The blueprint models as a user meets them: examples load and pass check, shorthands become
canonical, the committed JSON Schema and reference docs are current."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from blueprints import check, load_blueprint, parse_blueprint
from blueprints.catalog import catalog
from blueprints.findings import BlueprintInvalid
from blueprints.reference import REFERENCE_PATH, reference_markdown
from blueprints.schema import SCHEMA_PATH, schema_json
from clusterforge.cli import main

from ..conftest import EXAMPLES

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
REQUIRED_EXAMPLES = {
    "aws-p5-efa-lustre.yaml", "aws-p5-capacity-block.yaml", "aws-eks-p4d.yaml", "onprem-dgx-h100-ib.yaml",
    "onprem-l40s-roce.yaml", "onprem-sandbox-kata.yaml", "local-workstation.yaml",
}


def test_all_required_examples_exist():
    assert REQUIRED_EXAMPLES <= {p.name for p in EXAMPLE_FILES}


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_passes_check_without_errors(path, capsys):
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    findings = check(load_blueprint(path))
    assert [f.format() for f in findings if f.severity == "error"] == []


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_starts_with_schema_comment(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=") and first.endswith("blueprint.schema.json")


def test_committed_schema_is_current():
    assert SCHEMA_PATH.read_text() == schema_json(), "run `make schema` (clusterforge schema -o ...)"


def test_committed_reference_is_current():
    assert REFERENCE_PATH.read_text() == reference_markdown(), "run `python -m blueprints.reference`"


def test_schema_cli_prints_valid_json(capsys):
    assert main(["schema"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["properties"]["apiVersion"]["const"] == "clusterforge/v1"
    assert "node_groups" in s["required"]


BASE = """apiVersion: clusterforge/v1
kind: Blueprint
name: t
target: {provider: onprem}
node_groups:
  - name: g
    hosts: [{name: h1, address: 10.0.0.1}]
    hardware: {gpu: "h100-sxm:8"}
    sandbox: kata
"""


def test_shorthands_are_stored_in_canonical_form():
    bp = parse_blueprint(BASE + "network: roce\norchestrator: slurm\n").blueprint
    g = bp.node_groups[0]
    assert (g.hardware.gpu.model, g.hardware.gpu.count) == ("h100-sxm", 8)
    assert g.sandbox.runtime == "kata" and g.sandbox.passthrough
    assert bp.network.fabric == "roce" and bp.orchestrator.kind == "slurm"
    dumped = bp.model_dump(by_alias=True)
    assert dumped["node_groups"][0]["hardware"]["gpu"] == {"model": "h100-sxm", "count": 8, "nvswitch": None}


def test_capacity_shorthand():
    text = """apiVersion: clusterforge/v1
kind: Blueprint
name: t
target: {provider: aws, region: us-east-1, availability_zone: us-east-1a, capacity: spot}
node_groups: [{name: g, count: 1, instance_type: p5.48xlarge}]
"""
    assert parse_blueprint(text).blueprint.target.capacity.type == "spot"


def test_models_are_frozen():
    bp = parse_blueprint(BASE).blueprint
    with pytest.raises(ValidationError, match="frozen"):
        bp.name = "x"  # type: ignore[misc]


def test_discriminated_union_error_names_the_chosen_member_only():
    with pytest.raises(BlueprintInvalid) as e:
        parse_blueprint(BASE.replace("target: {provider: onprem}", "target: {provider: onprem, region: us-east-1}"), "bp.yaml")
    lines = str(e.value).splitlines()
    assert lines == ["bp.yaml:4:28: schema-unknown-key: unknown key `target.region` — remove it or fix the spelling (allowed keys: provider, os, ssh)"]


def test_catalog_resolves_nvidia_smi_names_and_short_names():
    cat = catalog()
    assert cat.gpu("NVIDIA A100-SXM4-40GB").key == "a100-40gb-sxm"
    assert cat.gpu("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert cat.gpu("h100").bf16_dense_tflops == 989
    p5 = cat.instance_type("p5.48xlarge")
    assert (p5.max_efa_interfaces, p5.network_cards, p5.gpu_count, p5.gpu_key) == (32, 32, 8, "h100-sxm")
    assert p5.instance_store.count == 8
    with pytest.raises(KeyError, match="unknown instance type 'p9.xlarge'"):
        cat.instance_type("p9.xlarge")


def test_every_catalog_entry_has_a_source():
    cat = catalog()
    for key in cat.gpu_keys:
        assert cat.gpu(key).source.startswith("http"), key
    for name in cat.instance_type_names:
        assert cat.instance_type(name).source.startswith("http"), name


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_editor_schema_accepts_every_example_including_shorthands(path):
    import jsonschema
    from ruamel.yaml import YAML

    schema = json.loads(SCHEMA_PATH.read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(YAML(typ="safe").load(path.read_text())))
    assert [e.message for e in errors] == []


def test_editor_schema_still_rejects_unknown_keys():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    doc = {"apiVersion": "clusterforge/v1", "kind": "Blueprint", "name": "x", "target": {"provider": "onprem"},
           "node_groups": [{"name": "g", "hosts": [], "sandbox": "kata", "bogus": 1}]}
    assert any("bogus" in e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc))


def test_catalog_ignores_a_vendor_prefix_before_a_key():
    assert catalog().resolve_gpu_key("NVIDIA h100-sxm") == "h100-sxm"
    assert catalog().resolve_gpu_key("nvidia  H100") == "h100-sxm"
    assert catalog().resolve_gpu_key("NVIDIA Quadro 9000") is None


def _model_defaults():
    """Every (model, field, default) whose default is itself a model instance, over all blueprint models."""
    import inspect

    from pydantic import BaseModel

    from blueprints import models

    for cls in vars(models).values():
        if inspect.isclass(cls) and issubclass(cls, BaseModel) and cls.__module__ == models.__name__:
            for name, info in cls.model_fields.items():
                if isinstance(info.default, BaseModel):
                    yield cls, name, info.default


def test_model_defaults_equal_validated_instances():
    """Defaults built with ``model_construct()`` (no validators, for a fast import) equal the validated ones."""
    seen = list(_model_defaults())
    assert len(seen) >= 20
    for cls, name, default in seen:
        given = {k: getattr(default, k) for k in default.model_fields_set}
        validated = type(default).model_validate(given)
        assert default == validated, f"{cls.__name__}.{name}"
        assert default.model_fields_set == validated.model_fields_set, f"{cls.__name__}.{name}"
