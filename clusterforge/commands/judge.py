"""``clusterforge judge FILE... [--blueprint B] [hardware flags] [--json] [-o DIR]``.

Judges existing raw outputs (nccl-tests text or ``-J`` JSON, the torch collective benchmark,
fio JSON or text, AMP JSON) against the blueprint and/or flags. Flags override what a log
says, which overrides the blueprint. Exit 0 when every result is pass or warn, 1 when any is
fail, 3 when any is invalid and none failed; 2 for usage errors (missing file, directory,
binary or unrecognised content, unknown GPU or instance type, a ``--blueprint`` that ``check`` refuses).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "invalid": "magenta"}
_MARK = {"pass": "✓", "warn": "!", "fail": "✗", "invalid": "?"}


def print_results(results: list, header: str | None = None) -> None:
    """Human output: one line per result (verdict, name, key figure), then its reasons and notes."""
    from rich.markup import escape

    from validate.suites import summary as result_summary

    from ..console import console

    if header:
        console.print(escape(header), style="dim")
    for r in results:
        style = VERDICT_STYLE.get(r.verdict, "white")
        summary = result_summary(r)
        console.print(f"[{style}]{_MARK.get(r.verdict, '?')} {r.verdict:<7}[/{style}] [bold]{escape(r.title)}[/bold]"
                      f"  {escape(summary)}")
        for reason in r.reasons:
            if reason == summary:  # the summary already is the reason (no figure to show)
                continue
            console.print(f"    [{style}]→[/{style}] {escape(reason)}")
        for note in r.notes:
            console.print(f"    [dim]· {escape(note)}[/dim]")


def _warn_short_gpu_name(gpu: str) -> None:
    """Warn (stderr) when ``--gpu`` is a short name that stands for several catalog parts (``h100``:
    ``h100-pcie`` or ``h100-sxm``), as the ``gpu-short-name-ambiguous`` rule does for blueprints: the
    expected busbw follows the part it is read as."""
    from blueprints.catalog import catalog

    from ..console import warn

    cat = catalog()
    parts = cat.gpu_parts(gpu)
    if len(parts) > 1:
        warn(f"--gpu {gpu} is read as {cat.resolve_gpu_key(gpu)}, but the catalog has {len(parts)} parts of that name "
             f"({', '.join(parts)}) with different NVLink and expected busbw: pass the part, e.g. --gpu {parts[0]}")


def register(app: typer.Typer) -> None:
    """Add the ``judge`` verb to ``app``."""

    @app.command("judge")
    def judge_cmd(
        files: list[Path] = typer.Argument(
            ..., help="Raw outputs: nccl-tests text/JSON, fio JSON/text, AMP JSON, node health JSON (needs --blueprint)."),
        blueprint: Path | None = typer.Option(None, "--blueprint", "-b", help="Blueprint the outputs came from."),
        group: str | None = typer.Option(None, "--group", help="Node group of the blueprint (default: first GPU group)."),
        nodes: int | None = typer.Option(None, "--nodes", help="Nodes in the run (overrides log and blueprint)."),
        gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per node."),
        gpu: str | None = typer.Option(None, "--gpu", help="GPU model: catalog key (h100-sxm) or nvidia-smi name."),
        instance_type: str | None = typer.Option(None, "--instance-type", help="AWS instance type (p5.48xlarge)."),
        fabric: str | None = typer.Option(None, "--fabric", help="GPU fabric: efa, infiniband, roce or ethernet."),
        nic_gbps: float | None = typer.Option(None, "--nic-gbps", help="Line rate of one fabric NIC in Gbit/s."),
        nics_per_node: int | None = typer.Option(None, "--nics-per-node", help="Fabric NICs per node."),
        memory_gib: float | None = typer.Option(None, "--memory-gib", help="Installed memory of one host in GiB (a "
                                                "buffered fio read of a smaller file measured the page cache)."),
        target: str | None = typer.Option(None, "--target", help="Storage mount fio jobs tested (when their paths do not say)."),
        kind: str | None = typer.Option(None, "--kind", help="Judge every file as the output of this suite, "
                                        "skipping detection: nccl, fio or amp."),
        as_json: bool = typer.Option(False, "--json", help='Print {"results": [...], "verdict": worst} as JSON.'),
        output: Path | None = typer.Option(None, "--output", "-o", help="Also write report.json/.md/.html and junit.xml here."),
    ) -> None:
        """Judge raw benchmark outputs against the declared hardware. Exit 0 pass/warn, 1 fail, 3 invalid, 2 bad input (a --blueprint that check refuses)."""
        from validate.expectations import context_from_flags
        from validate.judge import exit_code_for, file_kinds, file_suite, judge_file, worst

        from ..blueprint_io import load_checked
        from ..console import console, fail
        from ..errors import UsageError

        if kind is not None and kind not in file_kinds():
            raise UsageError(f"--kind {kind}: choose from {', '.join(file_kinds())}")
        loaded = load_checked(blueprint, invalid_exit=2) if blueprint is not None else None
        bp = loaded.blueprint if loaded is not None else None
        if gpu is not None:
            _warn_short_gpu_name(gpu)
        ctx = context_from_flags(
            bp, group, nodes=nodes, gpus_per_node=gpus_per_node, gpu=gpu, instance_type=instance_type,
            fabric=fabric, nic_gbps=nic_gbps, nics_per_node=nics_per_node, memory_gib=memory_gib, target=target,
        )
        results = []
        for f in files:
            suite = file_suite(f) if kind is None else None
            if suite is not None and not suite.judges_files:  # e.g. node health documents: judged against a node group
                if loaded is None:
                    fail(f"{f}: {suite.name} documents are judged against a blueprint's node group — pass --blueprint "
                         "(and --group)")
                    raise typer.Exit(2)
                default = (loaded.cluster.compute_groups or loaded.cluster.groups)[0].name
                results += suite.judge_group_file(f, loaded, group or default, label=f.stem)
                continue
            results += judge_file(f, ctx, kind=kind)
        verdict = worst(r.verdict for r in results)
        if as_json:
            print(json.dumps({"results": [r.to_json() for r in results], "verdict": verdict,
                              "context": ctx.to_json()}, indent=2))
        else:
            print_results(results, header=f"context: {ctx.describe()}")
            style = VERDICT_STYLE.get(verdict, "white")
            counts = {v: sum(r.verdict == v for r in results) for v in ("pass", "warn", "fail", "invalid")}
            console.print(f"[{style}]verdict: {verdict}[/{style}] ("
                          + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ")")
        if output is not None:
            from validate.report import write_reports

            try:
                paths = write_reports(results, output, title="clusterforge judge", blueprint=bp.name if bp else None,
                                      raw_dir=None)
            except OSError as e:
                fail(f"cannot write the report to {output}: {e.strerror or e}")
                raise typer.Exit(2) from None
            if not as_json:
                console.print(f"report: {paths['html']}", style="dim")
        raise typer.Exit(exit_code_for(r.verdict for r in results))
