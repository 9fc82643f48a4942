"""What a CLI start imports. Every verb imports its dependencies when it runs, so `clusterforge --help`
loads only typer and the error classes, and `check` loads the blueprint models and rules but never
the deploy, validation, plotting or ML stacks. Each case runs in a fresh interpreter and lists
``sys.modules`` after the command (a module imported once stays there, so nothing can hide).

Start-up times are measured in ``bench/bench_cli_startup.py``, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, FIXTURES, REPO

# Top-level packages that are heavy (hundreds of ms to import) and that no start of these
# commands needs.
DEPLOY_AND_ML = ("pulumi", "pulumi_aws", "pulumi_kubernetes", "ansible_runner", "ansible", "torch", "matplotlib",
                 "numpy", "jinja2", "grpc")
PROJECT_ABOVE_GROUND = ("stacks", "validate", "clusterforge.ansible", "clusterforge.plan", "clusterforge.targets")

PROBE = """
import json, sys
from clusterforge.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print("\\n" + json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def _modules_after(*args: str) -> tuple[int, set[str]]:
    """``(exit code, modules loaded)`` after ``clusterforge ARGS`` in a fresh interpreter."""
    res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO,
                         timeout=120, check=False)
    assert res.stdout.strip(), res.stderr
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    return doc["rc"], set(doc["modules"])


def _loaded(modules: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


def test_importing_the_cli_app_loads_no_model_rich_or_deploy_module() -> None:
    res = subprocess.run([sys.executable, "-c", "import json, sys, clusterforge.cli; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    modules = set(json.loads(res.stdout))
    heavy = ("pydantic", "pydantic_core", "rich", "yaml", "blueprints.models", "blueprints.rules", "blueprints.loader",
             "clusterforge.blueprint_io", "clusterforge.console")
    assert not _loaded(modules, DEPLOY_AND_ML + PROJECT_ABOVE_GROUND + heavy)


@pytest.mark.parametrize("verb", ["", "check", "plan", "up", "validate", "judge"])
def test_help_loads_no_model_or_deploy_module(verb: str) -> None:
    rc, modules = _modules_after(*([verb] if verb else []), "--help")
    assert rc == 0
    assert not _loaded(modules, DEPLOY_AND_ML + PROJECT_ABOVE_GROUND + ("blueprints.models", "blueprints.rules"))


# What `check` prints is written by clusterforge.console's line helpers, which need rich only for
# markup, emoji codes or an unusual terminal; the catalog comes from the parse cache or libyaml.
CHECK_NEEDS_NOT = ("rich", "ruamel", "yamllint")


@pytest.mark.parametrize("example", ["aws-p5-efa-lustre", "aws-eks-p4d", "onprem-dgx-h100-ib", "local-workstation"])
def test_check_loads_the_rules_but_no_deploy_validation_or_ml_module(example: str) -> None:
    """`check` of an AWS blueprint checks EC2 instance type names without importing the provider SDK."""
    rc, modules = _modules_after("check", str(EXAMPLES / f"{example}.yaml"))
    assert rc == 0
    assert {"blueprints.models", "blueprints.rules", "blueprints.resolved"} <= modules  # the probe did run the rules
    assert not _loaded(modules, DEPLOY_AND_ML + PROJECT_ABOVE_GROUND + CHECK_NEEDS_NOT)


@pytest.mark.parametrize("args", [("--strict",), ("--json",), ()])
def test_check_with_findings_loads_no_rich(args: tuple[str, ...]) -> None:
    """Errors and warnings are printed without rich too (a finding is one printable line)."""
    rc, modules = _modules_after("check", str(FIXTURES / "field" / "01-kata-hgx-nvswitch.yaml"), *args)
    assert rc == 1
    assert not _loaded(modules, DEPLOY_AND_ML + PROJECT_ABOVE_GROUND + CHECK_NEEDS_NOT)


@pytest.mark.parametrize("verb", [["plan", "--json"], ["render", "-o", "{tmp}"]])
def test_an_on_prem_verb_never_loads_the_cloud_targets_sdk(verb: list[str], tmp_path: object) -> None:
    """The target registry holds every target, but a target imports what it drives inside its methods:
    planning or rendering an on-prem blueprint loads no Pulumi SDK and not the stack program."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in verb]
    rc, modules = _modules_after(args[0], str(EXAMPLES / "onprem-dgx-h100-ib.yaml"), *args[1:])
    assert rc == 0
    assert "clusterforge.targets" in modules  # the registry was used
    assert not _loaded(modules, ("pulumi", "pulumi_aws", "pulumi_kubernetes", "stacks", "clusterforge.plan"))
