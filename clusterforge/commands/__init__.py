"""One module per CLI verb; each exposes ``register(app: typer.Typer)``."""
