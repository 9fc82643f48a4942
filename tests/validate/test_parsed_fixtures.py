"""Every recorded output of ``tests/fixtures``, parsed, as reviewed JSON in ``tests/golden/parsed/`` (issue 35).

The parser tests assert the fields a judge reads (busbw, ``#wrong``, p99, the GPU model); a change to any other
field the parsers fill (a row's count or data type, the column groups, the NCCL version from the banner, a fio job's
options, a node's parsed PCI tree) passed them. Here each public nccl-tests / rccl-tests / fio output and each node
fixture is parsed the way ``clusterforge validate`` parses it (``detect_kind``, then the kind's parser; node
documents through ``parse_document``) and the whole result, every dataclass field and every derived property the
judge uses (``peak()``, ``busbw_gbps`` of each row, a fio job's effective rw and block size), plus the notes the
parsers leave about what they could not read, is compared with ``tests/golden/parsed/<folder>/<file>.json``
(``CLUSTERFORGE_UPDATE_GOLDEN=1`` rewrites them; review the diff).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.golden_files import assert_golden, golden_dir
from validate.parsers.bounds import collecting_unread
from validate.parsers.detect import read_text
from validate.parsers.fio import parse_fio
from validate.parsers.nccl import parse_nccl
from validate.parsers.node import (
    NodeFacts,
    parse_containerd_runtimes,
    parse_document,
    parse_limits,
    parse_lspci,
    parse_mdstat,
    parse_mlnx_qos,
    parse_nvlink_status,
)
from validate.suites import detect_kind

from .node_fixtures import RecordedNode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = sorted(str(p.relative_to(FIXTURES)) for folder in ("nccl-tests", "rccl-tests", "fio", "field")
             for p in (FIXTURES / folder).iterdir() if p.suffix in (".txt", ".log", ".json"))
NODES = sorted(str(p.relative_to(FIXTURES)) for p in (FIXTURES / "node").glob("*/*") if p.is_dir())
FOLDER = golden_dir("parsed")

_DERIVED = {
    "NcclRun": ("checked", "device_name", "hosts", "is_cpu", "label", "nodes", "ranks", "wrong_total"),
    "Row": ("algbw_gbps", "busbw_gbps", "wrong"),
    "FioJob": ("block_size", "block_size_effective", "buffered", "direct", "paths", "random", "random_effective",
               "rw", "rw_effective"),
    "FioIo": ("active",),
    "FioReport": ("empty",),
}
"""Properties computed from the fields that the judge reads, per class."""


def plain(o: Any) -> Any:
    """``o`` as JSON data: dataclasses as their fields plus :data:`_DERIVED`, sequences as lists, non-finite floats
    as their ``repr``."""
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        out = {f.name: plain(getattr(o, f.name)) for f in dataclasses.fields(o)}
        out.update({name: plain(getattr(o, name)) for name in _DERIVED.get(type(o).__name__, ())})
        return out
    if isinstance(o, dict):
        return {str(k): plain(v) for k, v in o.items()}
    if isinstance(o, float):
        return o if math.isfinite(o) else repr(o)
    if isinstance(o, (str, int, bool)) or o is None:
        return o
    if isinstance(o, (list, tuple, set, frozenset)) or hasattr(o, "__iter__"):
        items = [plain(x) for x in o]
        return sorted(items, key=json.dumps) if isinstance(o, (set, frozenset)) else items
    return repr(o)


def _parsed_raw(path: Path) -> dict[str, Any]:
    text = read_text(path)
    kind = detect_kind(text, path.name)
    with collecting_unread() as notes:
        if kind == "nccl":
            runs = parse_nccl(text)
            got: Any = [{**plain(r), "peak()": plain(r.peak())} for r in runs]
        elif kind == "fio":
            got = plain(parse_fio(text))
        else:
            raise AssertionError(f"{path}: detected as {kind!r}, a kind this test has no parser for")
    return {"kind": kind, "parsed": got, "notes": list(notes)}


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("rel", RAW)
def test_a_recorded_output_parses_to_the_reviewed_result(rel: str) -> None:
    assert_golden({f"{rel}.json": _json(_parsed_raw(FIXTURES / rel))}, FOLDER, complete=False)


def node_views(f: NodeFacts) -> dict[str, Any]:
    """The parsed views of one node's document that the node checks read (``validate/node_checks.py``), by the
    command or file each is parsed from; the raw texts themselves are the fixture."""
    qos = {name: parse_mlnx_qos(c.stdout) for name, c in sorted(f.commands.items()) if name.startswith("mlnx_qos -i ")}
    return plain({
        "host": f.host, "kernel": f.kernel, "uid": f.uid, "processes": f.processes,
        "commands ran/rc": {name: [c.ran, c.rc] for name, c in sorted(f.commands.items())},
        "nvidia-smi -q -x": f.smi, "nvidia-smi nvlink -s": parse_nvlink_status(f.cmd("nvidia-smi nvlink -s").stdout),
        "lspci -vvv": parse_lspci(f.cmd("lspci -vvv").stdout), "findmnt": f.mounts, "ip addr": f.addresses,
        **qos, "/proc/modules": f.modules_loaded, "/proc/self/limits": parse_limits(f.file("/proc/self/limits") or ""),
        "/proc/mdstat": parse_mdstat(f.file("/proc/mdstat") or ""),
        "/etc/containerd/config.toml": parse_containerd_runtimes(f.file("/etc/containerd/config.toml")),
    })


@pytest.mark.parametrize("rel", NODES)
def test_a_node_fixture_parses_to_the_reviewed_facts(rel: str) -> None:
    doc = RecordedNode.load(FIXTURES / rel).doc()
    with collecting_unread() as notes:
        views = node_views(parse_document(doc))
    assert_golden({f"{rel}.json": _json({"parsed": views, "notes": list(notes)})}, FOLDER, complete=False)


def test_every_parsed_golden_has_its_fixture() -> None:
    """A fixture removed or renamed leaves no stale reviewed result behind."""
    files = {str(p.relative_to(FOLDER))[:-len(".json")] for p in FOLDER.rglob("*.json")}
    assert files == set(RAW) | set(NODES), sorted(files ^ (set(RAW) | set(NODES)))
