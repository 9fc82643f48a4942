"""``make demo``: the main job on the example blueprints, on this machine, offline.

1. ``clusterforge check`` every example blueprint;
2. ``clusterforge plan`` the AWS p5 example (Pulumi program under the mock engine, no credentials);
3. ``clusterforge render`` the on-prem DGX example (Ansible, Slurm and Kubernetes artefacts);
4. ``clusterforge validate`` the local-workstation example with the local launcher (real fio, the
   collective benchmark on gloo processes, the AMP benchmark on a tiny GPT on CPU);

and prints where the HTML report is. Output goes under ``out/demo`` (``CLUSTERFORGE_DEMO_OUT`` overrides).
Exit code: 0 when every step succeeded, else the first failing step's code.
"""

from __future__ import annotations

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
    status = "[green]ok[/green]" if rc in ok_codes else f"[red]exit {rc}[/red]"
    console.print(f"{status} ({dt:.1f} s)")
    return (0 if rc in ok_codes else rc), dt


def main() -> int:
    """Run the demo; returns the exit code."""
    out = Path(os.environ.get("CLUSTERFORGE_DEMO_OUT", REPO / "out" / "demo"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    first_error = 0
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
                                                                "--launcher", "local", "-o", str(results)])
    first_error = first_error or rc
    total = time.perf_counter() - t0
    console.rule("[bold]done")
    html = results / "report.html"
    if html.exists():
        console.print(f"HTML report: {html}", markup=False)
    console.print(f"rendered artefacts: {out / 'render-dgx-h100'}", markup=False)
    console.print(f"demo wall time: {total:.1f} s", markup=False)
    return first_error


if __name__ == "__main__":
    sys.exit(main())
