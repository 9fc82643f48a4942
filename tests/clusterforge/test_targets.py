"""Targets as plug-ins: every provider a blueprint may name has one registered target, the CLI verbs
reach a target only through the registry, and every target's plan is the one typed :class:`Plan`."""

from __future__ import annotations

import io
import json
import re
import typing

import pytest
from rich.console import Console

from blueprints import load_blueprint
from blueprints.errors import UsageError
from blueprints.models import Blueprint
from clusterforge.targets import TARGETS, Plan, Target, plan, target_for
from tests.conftest import EXAMPLES, REPO

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def _providers() -> set[str]:
    """Every ``target.provider`` value the blueprint model accepts (the tags of its target union)."""
    union = typing.get_args(Blueprint.model_fields["target"].annotation)
    out: set[str] = set()
    for model in union:
        out.update(typing.get_args(model.model_fields["provider"].annotation))
    return out


def test_every_provider_the_model_accepts_has_exactly_its_target() -> None:
    assert _providers() == set(TARGETS)
    for provider in TARGETS:
        target = target_for(provider)
        assert isinstance(target, Target) and target.provider == provider
        assert target.render_dir and "/" not in target.render_dir


def test_an_unregistered_provider_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no registered target"):
        target_for("gcp")


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_every_example_plans_to_one_typed_plan(example: str) -> None:
    loaded = load_blueprint(EXAMPLES / f"{example}.yaml")
    result = plan(loaded)
    assert isinstance(result, Plan)
    assert result.provider == loaded.blueprint.target.provider and result.blueprint == loaded.blueprint.name
    doc = result.to_json()
    assert json.loads(json.dumps(doc)) == doc  # plain JSON data
    assert doc.get("resources") or doc.get("hosts")
    buf = io.StringIO()
    result.show(Console(file=buf, width=120, highlight=False), show_all=False)
    assert loaded.blueprint.name in buf.getvalue().splitlines()[0]


def test_cli_verbs_never_branch_on_the_provider() -> None:
    """The verbs and the CLI glue ask the registry; provider-specific code lives in the target modules."""
    pattern = re.compile(r"is_aws|\.provider\s*[!=]=|target\.provider\s+in\b|isinstance\([^)]*(Aws|Onprem)Target")
    files = [REPO / "clusterforge" / "cli.py", REPO / "clusterforge" / "blueprint_io.py",
             *sorted((REPO / "clusterforge" / "commands").glob("*.py"))]
    bad = [f"{f.relative_to(REPO)}:{n}: {line.strip()}" for f in files
           for n, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)]
    assert not bad, "provider branches outside clusterforge/targets:\n" + "\n".join(bad)


@pytest.mark.parametrize("option", [["--check"], ["--tags", "rdma"], ["--limit", "gpu-0"], ["-o", "out"]])
def test_aws_up_refuses_the_ansible_options_before_touching_pulumi(option: list[str],
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from clusterforge.cli import main

    rc = main(["up", str(EXAMPLES / "aws-p5-efa-lustre.yaml"), *option])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "apply to on-prem blueprints" in err and "--preview" in err
    assert "Pulumi CLI" not in err  # refused before the deploy tool is looked for
