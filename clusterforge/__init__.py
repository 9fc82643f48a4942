"""clusterforge: declarative infrastructure-as-code for AI clusters (CLI and glue)."""

__version__ = "0.1.0"
