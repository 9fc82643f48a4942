"""``clusterforge schema [-o FILE]``: the blueprint JSON Schema."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``schema`` verb to ``app``."""

    @app.command("schema")
    def schema_cmd(
        output: Path | None = typer.Option(None, "-o", "--output", help="Write to FILE instead of stdout."),
    ) -> None:
        """Print (or write) the JSON Schema of the blueprint, for editor completion."""
        from blueprints.schema import schema_json

        from ..console import ok

        text = schema_json()
        if output is None:
            print(text, end="")
        else:
            output.write_text(text, encoding="utf-8")
            ok(f"wrote {output}")
