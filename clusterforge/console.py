"""The one rich console of the CLI (stdout) and its stderr twin, with status helpers."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def ok(msg: str) -> None:
    """Print a green check line to stdout."""
    console.print(f"[green]✓[/green] {msg}")


def warn(msg: str) -> None:
    """Print a yellow warning line to stderr."""
    err_console.print(f"[yellow]![/yellow] {msg}", markup=True)


def fail(msg: str) -> None:
    """Print a red error line to stderr (markup in ``msg`` is not interpreted)."""
    err_console.print("[red]✗[/red] ", end="")
    err_console.print(msg, markup=False)
