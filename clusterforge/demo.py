"""``make demo``: the main job on the example blueprints, on this machine, offline.

1. ``clusterforge check`` every example blueprint;
2. ``clusterforge plan`` the AWS p5 example (Pulumi program under the mock engine, no credentials);
3. ``clusterforge render`` the on-prem DGX example (Ansible, Slurm and Kubernetes artefacts);
4. ``clusterforge validate`` the local-workstation example with the local launcher (real fio, the
   collective benchmark on gloo processes, the AMP benchmark on a tiny GPT on CPU);

and prints where the HTML report is. Output goes under ``out/demo`` (``CLUSTERFORGE_DEMO_OUT`` overrides).
Exit code: 0 when every step succeeded, else the first failing step's code. A validation suite
whose tool is not installed here (fio) does not fail the demo: its results are ``invalid`` and the
demo's last lines say which suite could not run and how to install the tool.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from .cli import main as cli_main
from .console import console

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "blueprints" / "examples"


def _step(title: str, args: list[str], ok_codes: tuple[int, ...] = (0,)) -> tuple[int, float]:
    console.rule(f"[bold]{title}")
    console.print(f"$ clusterforge {' '.join(args)}", style="dim", markup=False)
    t0 = time.perf_counter()
    rc = cli_main(args)
    dt = time.perf_counter() - t0
    status = ("[green]ok[/green]" if rc == 0 else f"[yellow]exit {rc}: see below[/yellow]" if rc in ok_codes
              else f"[red]exit {rc}[/red]")
    console.print(f"{status} ({dt:.1f} s)")
    return (0 if rc in ok_codes else rc), dt


def _validate_outcome(results: Path) -> tuple[int, list[str]]:
    """``(exit code, lines)`` of the demo's validate step from its ``run.json`` and ``results.jsonl``.

    A suite whose tool is not installed on this machine (fio on a fresh machine) is not a fault:
    its results are ``invalid`` and the demo says which suite could not run and how to get the
    tool (exit 0). Any other ``invalid`` result, or none at all, is the validate exit code 3.
    """
    from validate.runner import MANIFEST, RESULTS, read_results_lines

    try:
        manifest = json.loads((results / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 3, []
    missing = manifest.get("missing_tools") or {}
    lines = read_results_lines(results / RESULTS)
    explained = {t for rec in missing.values() for t in rec.get("tests", [])}
    other = [d for d in lines if d.get("verdict") not in ("pass", "warn") and d.get("test_id") not in explained]
    if not lines or other:
        return 3, []
    return 0, [str(rec.get("reason", "")) for rec in missing.values()]


def main() -> int:
    """Run the demo; returns the exit code."""
    out = Path(os.environ.get("CLUSTERFORGE_DEMO_OUT", REPO / "out" / "demo"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    first_error = 0
    could_not_run: list[str] = []
    for bp in sorted(EXAMPLES.glob("*.yaml")):
        rc, _ = _step(f"check {bp.name}", ["check", str(bp.relative_to(REPO))])
        first_error = first_error or rc
    rc, _ = _step("plan (AWS, offline mock engine)", ["plan", str((EXAMPLES / "aws-p5-efa-lustre.yaml").relative_to(REPO))])
    first_error = first_error or rc
    rc, _ = _step("render (on-prem DGX H100)", ["render", str((EXAMPLES / "onprem-dgx-h100-ib.yaml").relative_to(REPO)),
                                                 "-o", str(out / "render-dgx-h100")])
    first_error = first_error or rc
    results = out / "validate-local"
    # validate exits 1 when a test fails; the demo still shows the report, then reports the failure
    rc, _ = _step("validate (local launcher, this machine)", ["validate", str((EXAMPLES / "local-workstation.yaml").relative_to(REPO)),
                                                                "--launcher", "local", "-o", str(results)], ok_codes=(0, 3))
    if rc == 0:
        rc, could_not_run = _validate_outcome(results)
    first_error = first_error or rc
    total = time.perf_counter() - t0
    console.rule("[bold]done")
    html = results / "report.html"
    if html.exists():
        console.print(f"HTML report: {html}", markup=False)
    console.print(f"rendered artefacts: {out / 'render-dgx-h100'}", markup=False)
    for line in could_not_run:
        console.print(line, style="yellow", markup=False)
    console.print(f"demo wall time: {total:.1f} s", markup=False)
    return first_error


if __name__ == "__main__":
    sys.exit(main())
