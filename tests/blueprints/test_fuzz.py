"""Property test: whatever a user feeds ``clusterforge check``, the answer is findings, never a crash.

Hypothesis mutates the example blueprints as data (wrong types, deleted and unknown keys, bad
enum values, huge and non-finite numbers, unicode, plausible-but-wrong catalog values), writes
them as YAML, optionally corrupts the text or replaces it with arbitrary bytes, and then runs
``load_blueprint`` + ``check``. The only allowed outcomes are a :class:`BlueprintInvalid` with
well-formed findings, or a loaded blueprint whose rules return findings; a rule that raises
(``internal-rule-error``) fails the test.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blueprints import BlueprintInvalid, check, load_blueprint
from blueprints.catalog import catalog
from blueprints.findings import Finding

from .rule_cases.emit import emit

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "blueprints" / "examples").glob("*.yaml"))
DOCS = [load_blueprint(p).data for p in EXAMPLES]

_cat = catalog()
VOCAB = sorted(
    set(_cat.instance_type_names) | set(_cat.gpu_keys)
    | {"efa", "infiniband", "roce", "ethernet", "aws", "onprem", "kata", "gvisor", "vm", "container", "compute",
       "login", "controller", "storage", "SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2", "HDD", "SSD", "READ",
       "NONE", "2.10", "2.12", "2.15", "USER_PROVISIONED", "AUTOMATIC", "capacity-block", "reservation", "spot",
       "on-demand", "cluster", "spread", "partition", "none", "max", "pfc", "global-pause", "opensm", "ufm", "switch",
       "dmabuf", "nvidia-peermem", "moe", "dense", "training", "inference", "int4", "fp8", "kubernetes", "slurm",
       "alltoall", "nccl", "fio", "amp", "h100-sxm:8", "l40s:0", "mi300x:8", "b200:72", "/", "/fsx", "/scratch",
       "/fsx/x", "../x", "0.0.0.0/0", "::/0", "10.0.0.0/8", "192.168.100.0/33", "cr-0abc", "10.0.0.5@o2ib",
       "10.0.0.5@efa", "mgmt-01", "dgx-01", "us-east-1", "us-east-1a", "v0.4.4", "470", "999", "12.4", "13.0",
       "-----BEGIN RSA PRIVATE KEY-----\nabc", "AKIAABCDEFGHIJKLMNOP", "ünïcødé ☃", "\t", "\u202e", "\x85", "", " "}
)

scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2, 7, 8, 64, 65, 1200, 2400, 4096, 4097, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=24),
    st.sampled_from(VOCAB),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(VOCAB)), scalars, max_size=3),
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, path + (i,))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    log: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        kind = draw(st.sampled_from(["replace", "replace", "vocab", "delete", "unknown-key", "duplicate-item"]))
        if kind == "replace":
            parent[path[-1]] = draw(values)
        elif kind == "vocab":
            parent[path[-1]] = draw(st.sampled_from(VOCAB))
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "unknown-key" and isinstance(parent, dict):
            parent[draw(st.one_of(st.text(min_size=1, max_size=10), st.sampled_from(VOCAB)))] = draw(values)
        elif kind == "duplicate-item" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        log.append(f"{kind} {path}")
    return doc, log


@st.composite
def plausible(draw: st.DrawFn) -> dict[str, Any]:
    """Type-preserving mutations (ints stay ints, strings become other known values): most of these
    blueprints load, so the rules see many valid-but-odd combinations."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        path = draw(st.sampled_from([p for p in _paths(doc) if p]))
        parent = _parent(doc, path)
        old = parent[path[-1]]
        if isinstance(old, bool):
            parent[path[-1]] = draw(st.booleans())
        elif isinstance(old, int):
            parent[path[-1]] = draw(st.one_of(st.integers(min_value=0, max_value=5000),
                                              st.sampled_from([1, 2, 3, 4, 7, 8, 12, 40, 64, 65, 125, 1200, 3600, 4096])))
        elif isinstance(old, str):
            parent[path[-1]] = draw(st.sampled_from(VOCAB))
        elif isinstance(old, list) and old:
            if draw(st.booleans()):
                parent[path[-1]] = old + [copy.deepcopy(draw(st.sampled_from(old)))]
            else:
                parent[path[-1]] = old[1:]
        elif isinstance(old, dict) and old:
            del old[draw(st.sampled_from(sorted(old, key=str)))]
    return doc


def _assert_findings(findings: list[Finding]) -> None:
    for f in findings:
        assert isinstance(f, Finding)
        assert f.rule_id and f.severity in ("error", "warning")
        assert f.line >= 1 and f.col >= 1
        line = f.format()
        assert "\n" not in line and "\r" not in line, line
        assert f" — {f.fix}" in line
    internal = [f.format() for f in findings if f.rule_id == "internal-rule-error"]
    assert not internal, internal


def _run(path: Path) -> None:
    try:
        loaded = load_blueprint(path)
    except BlueprintInvalid as e:
        assert e.findings
        _assert_findings(e.findings)
        return
    _assert_findings(check(loaded))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "bp.yaml"


COMMON: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,  # the same examples every run: CI failures reproduce; explore with a random seed locally
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
}


@settings(max_examples=400, **COMMON)
@given(case=mutated())
def test_mutated_blueprints_only_produce_findings(case: tuple[dict[str, Any], list[str]], work: Path) -> None:
    doc, _log = case
    text, _ = emit(doc)
    work.write_text(text, encoding="utf-8")
    _run(work)


@settings(max_examples=400, **COMMON)
@given(doc=plausible())
def test_plausible_blueprints_never_crash_a_rule(doc: dict[str, Any], work: Path) -> None:
    text, _ = emit(doc)
    work.write_text(text, encoding="utf-8")
    _run(work)


@settings(max_examples=150, **COMMON)
@given(case=mutated(), cut=st.integers(min_value=0, max_value=4000),
       junk=st.one_of(st.text(min_size=1, max_size=6), st.sampled_from([":", "- ", "{", "]", "&a ", "*a", "!!python/object:os.system ", "<<: ", "\t", "\"", "'", "%YAML 1.1\n", "---\n", "? "])))
def test_corrupted_yaml_text_only_produces_findings(case: tuple[dict[str, Any], list[str]], cut: int, junk: str,
                                                    work: Path) -> None:
    text, _ = emit(case[0])
    at = cut % (len(text) + 1)
    work.write_text(text[:at] + junk + text[at:], encoding="utf-8")
    _run(work)


@settings(max_examples=150, **COMMON)
@given(raw=st.one_of(st.binary(max_size=400), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_arbitrary_bytes_only_produce_findings(raw: bytes, work: Path) -> None:
    work.write_bytes(raw)
    _run(work)
