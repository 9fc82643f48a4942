"""The floor under ``clusterforge check``: a typer app with nothing of clusterforge in it.

It has the same shape as the real command line where start-up is spent: a root callback with the
``--version`` and ``--debug`` options and a ``check`` verb with a ``Path`` argument and two ``bool``
options, so typer imports, builds its app and coerces the same parameters (typer 0.29 and later do
this with a pydantic ``TypeAdapter`` per parameter, which imports pydantic). Its verb then imports
PyYAML, parses one line and validates it with a one-field pydantic model, so the libraries
clusterforge's ``check`` stands on are all loaded.

Run by ``bench/bench_cli_startup.py`` as ``python bench/typer_floor.py check FILE``; it prints ``ok``.
"""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.callback()
def _root(version: bool = typer.Option(False, "--version"), debug: bool = typer.Option(False, "--debug")) -> None:
    """Root options, as clusterforge has."""


@app.command("check")
def check_cmd(
    blueprint: Path = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json"),
    strict: bool = typer.Option(False, "--strict"),
) -> None:
    """Import the libraries ``check`` uses and validate one tiny document."""
    import yaml
    from pydantic import BaseModel

    class Doc(BaseModel):
        name: str

    Doc.model_validate(yaml.safe_load("name: floor"))
    print("ok")


if __name__ == "__main__":
    app()
