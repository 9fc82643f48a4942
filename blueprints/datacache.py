"""A cache of the parsed hardware-catalog YAML files under the user's cache directory.

Parsing the catalog's ~100 kB of YAML (``blueprints/data/*.yaml``) with libyaml costs about 20 ms
of every ``clusterforge`` start that reads the catalog (``check``, ``plan``, ``render`` ...); reading
the parsed result back with :mod:`pickle` costs well under 1 ms (``bench/bench_cli_startup.py``).

Correctness:

* **Key.** One cache file per set of inputs (``<label>.pickle``) holds ``(key, data)``. The key is a
  SHA-256 over a format number, the Python version, the parser (PyYAML's version and whether its
  libyaml binding is used) and the name and every byte of every input file. An entry is used only
  when the key recomputed from the files read now matches it, so an edited, replaced or
  reinstalled catalog file, or another parser, always means a fresh parse (the entry is then
  overwritten). Nothing depends on modification times.
* **Safety.** Entries are read with an unpickler that builds only the types safe YAML produces
  (plain containers and scalars, and ``datetime`` dates and times): a planted or corrupt file
  cannot run code; it is ignored (and replaced) like a missing one.
* **Concurrency.** Entries are written to a temporary file in the same directory and moved into
  place with :func:`os.replace`, so a reader sees the old entry or the new one, never half of one.
* **Failure.** The cache only ever saves time: an unreadable or unwritable directory, a full disk
  or a corrupt entry falls back to parsing, silently.

Directory: ``$CLUSTERFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/clusterforge``, else
``~/.cache/clusterforge`` (XDG Base Directory spec,
https://specifications.freedesktop.org/basedir-spec/latest/). ``CLUSTERFORGE_NO_CACHE=1`` turns the
cache off (every start parses).
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "cache_dir", "cache_key", "parse_yaml", "parsed_yaml_files"]

FORMAT = 1
"""Version of the entry layout; part of every key, so a new layout never reads an old entry."""

_SAFE_GLOBALS = frozenset({
    ("datetime", "date"),
    ("datetime", "datetime"),
    ("datetime", "time"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
})
"""The only classes an entry may name: what PyYAML's safe loader builds besides plain containers and
scalars (``!!timestamp`` values; a timestamp with an offset carries a ``timezone``)."""


def cache_dir() -> Path | None:
    """The cache directory (see the module docstring), or ``None`` when ``CLUSTERFORGE_NO_CACHE`` is
    set to anything but ``""``/``0``. The directory may not exist yet."""
    if os.environ.get("CLUSTERFORGE_NO_CACHE", "") not in ("", "0"):
        return None
    explicit = os.environ.get("CLUSTERFORGE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "clusterforge"


def _parser_id() -> str:
    import yaml

    return f"pyyaml {yaml.__version__} libyaml={bool(getattr(yaml, '__with_libyaml__', False))}"


def cache_key(files: Mapping[str, bytes]) -> str:
    """Hex SHA-256 over the entry format, the Python version, the YAML parser and, in order, the name,
    length and bytes of every file in ``files`` (name -> content)."""
    h = hashlib.sha256(f"clusterforge-datacache {FORMAT} py{sys.version_info[0]}.{sys.version_info[1]} "
                       f"{_parser_id()}\n".encode())
    for name, blob in files.items():
        h.update(f"{name}\0{len(blob)}\0".encode())
        h.update(blob)
    return h.hexdigest()


def parse_yaml(blob: bytes) -> Any:
    """``blob`` (UTF-8 YAML) parsed with PyYAML's safe loader on libyaml when available. Line ends are
    read as in a text-mode file (``\\r\\n`` and ``\\r`` become ``\\n``)."""
    import yaml

    text = blob.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    # libyaml's safe loader: ~15x faster than a pure-Python parser; the catalog uses no YAML 1.1-only forms
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _restricted_loads(raw: bytes) -> Any:
    import pickle

    class _SafeUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _SAFE_GLOBALS:
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a cache entry")

    return _SafeUnpickler(io.BytesIO(raw)).load()


def _read_entry(path: Path, key: str) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
        entry = _restricted_loads(raw)
    except Exception:  # noqa: BLE001 - missing, unreadable, truncated, planted (unpickling raises many types): parse again
        return None
    if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] == key and isinstance(entry[1], dict)):
        return None
    return entry[1]


def _write_entry(path: Path, key: str, data: dict[str, Any]) -> None:
    import pickle
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((key, data), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only home, a full disk: the next start parses again


def parsed_yaml_files(label: str, files: Mapping[str, bytes]) -> dict[str, Any]:
    """``{name: parsed YAML}`` for every ``name -> content`` in ``files``, from the cache entry
    ``<cache dir>/<label>.pickle`` when its key (:func:`cache_key`) matches these exact contents,
    else parsed with :func:`parse_yaml` and stored there for the next start.

    ``label`` names the entry (a file-name-safe word such as ``catalog``). Raises what
    :func:`parse_yaml` raises for a file that is not valid YAML; never raises for cache trouble.
    """
    directory = cache_dir()
    key = cache_key(files)
    path = directory / f"{label}.pickle" if directory is not None else None
    if path is not None:
        cached = _read_entry(path, key)
        if cached is not None and list(cached) == list(files):
            return cached
    data = {name: parse_yaml(blob) for name, blob in files.items()}
    if path is not None:
        _write_entry(path, key, data)
    return data
