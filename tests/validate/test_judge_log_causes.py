"""Causes written in the log itself (issue 29, kind 3): the command line, ``mpirun -x`` / ``export`` settings and
NCCL's own "set by environment" INFO lines are read before any bandwidth heuristic; a setting that switches off a
fast path the run would use is named with its fix (the catalog's ``nccl_env_fast_paths`` table, the one the
blueprint rule ``nccl-env-disables-fabric`` reads). Real public outputs from ``tests/fixtures`` (origins in
``tests/fixtures/README.md``); where a test adds a setting line to one, the line is the form NCCL or mpirun prints
and the comment says so."""

from __future__ import annotations

import pytest

from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.parsers.nccl import parse_nccl_text

ROCE_8X400 = {"fabric": "roce", "nic_gbps": 400, "nics_per_node": 8}
# NVIDIA/nccl issue #428 and the NCCL_SHM/P2P logs: NCCL prints every variable it reads as
# "<host>:<pid>:<tid> [<dev>] NCCL INFO <NAME> set by environment to <value>."
NCCL_ENV_LINE = "node-1:43:43 [0] NCCL INFO {name} set by environment to {value}."


def _with_line(text: str, line: str, before: str = "#  Rank  0 ") -> str:
    i = text.index(before)
    return text[:i] + line + "\n" + text[i:]


def test_settings_of_the_command_line_are_read(fixtures_dir):
    # hisohara/ai-scripts MI300X 2-node run: mpirun -x settings across continuation lines
    (run,) = parse_nccl_text((fixtures_dir / "rccl-tests" / "rccl-02-mi300x-2node.txt").read_text())
    assert run.settings == {"NCCL_DEBUG": "WARN", "NCCL_IB_GID_INDEX": "3", "NCCL_NET_GDR_LEVEL": "3",
                            "NCCL_SOCKET_IFNAME": "ens", "NCCL_IB_HCA": "^mlx5_bond_0"}


def test_harmless_settings_cause_nothing(fixtures_dir):
    # GDR level 3 (PHB) keeps GPUDirect RDMA; excluding the bond device keeps the 8 HCAs
    (r,) = judge_file(fixtures_dir / "rccl-tests" / "rccl-02-mi300x-2node.txt", context_from_flags(**ROCE_8X400))
    assert r.verdict == "pass", r.reasons


def test_ib_disabled_on_the_command_line_is_named(fixtures_dir):
    # the same real log, its `-x NCCL_NET_GDR_LEVEL=3` replaced by `-x NCCL_IB_DISABLE=1`
    text = (fixtures_dir / "rccl-tests" / "rccl-02-mi300x-2node.txt").read_text()
    text = text.replace("-x NCCL_NET_GDR_LEVEL=3", "-x NCCL_IB_DISABLE=1")
    (r,) = judge_text(text, context_from_flags(**ROCE_8X400), source="rccl-ibdisabled.txt")
    assert r.verdict == "warn"
    (reason,) = r.reasons
    assert "NCCL_IB_DISABLE=1" in reason and "TCP sockets" in reason and "unset NCCL_IB_DISABLE" in reason
    # on EFA the OFI plugin carries the traffic: NCCL_IB_DISABLE switches nothing off there
    (efa,) = judge_text(text, context_from_flags(fabric="efa", nic_gbps=400, nics_per_node=8), source="x.txt")
    assert not any("NCCL_IB_DISABLE" in x for x in efa.reasons)


def test_nccl_info_setting_line_explains_low_bandwidth_first(fixtures_dir):
    # p4de 2-node (nccl-01, 78.33 GB/s peak, srun --label) judged against 4 x 200 Gbit/s: below the expectation; the
    # NCCL INFO line in the log (rank 0's stream) is the cause named, not the generic list of network guesses
    text = (fixtures_dir / "nccl-tests" / "nccl-01.txt").read_text()
    text = "0: " + NCCL_ENV_LINE.format(name="NCCL_NET_GDR_LEVEL", value="LOC") + "\n" + text
    ctx = context_from_flags(instance_type="p4de.24xlarge", nodes=2, nic_gbps=200)
    (r,) = judge_text(text, ctx, source="nccl-01-gdr-off.txt")
    assert r.verdict == "warn"
    assert any("NCCL_NET_GDR_LEVEL=LOC" in x and "GPUDirect RDMA" in x for x in r.reasons), r.reasons
    (low,) = [x for x in r.reasons if "of the expected" in x]
    assert "Likely cause: NCCL_NET_GDR_LEVEL=LOC in the log" in low and "Possible causes" not in low


def test_p2p_disabled_on_one_node(fixtures_dir):
    # 8 x A100 on one node (nccl-04) with NCCL_P2P_DISABLE=1 read by NCCL: NVLink was not measured
    text = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    text = _with_line(text, NCCL_ENV_LINE.format(name="NCCL_P2P_DISABLE", value="1"), before="#   Rank  0 ")
    (r,) = judge_text(text, context_from_flags(nodes=1, gpus_per_node=8, gpu="A100-SXM4-40GB"), source="p2p.txt")
    assert r.verdict == "warn"
    assert any("NCCL_P2P_DISABLE=1" in x and "peer-to-peer" in x for x in r.reasons)


@pytest.mark.parametrize(("algo", "expected_algorithm"), [(None, "tree"), ("Ring", "ring"), ("^Tree", "ring"),
                                                          ("Tree,Ring", "tree")])
def test_pinned_algorithm_sets_the_expectation(fixtures_dir, algo, expected_algorithm):
    # p5 2-node (nccl-02): NCCL picks the tree on two nodes unless NCCL_ALGO leaves it out
    text = (fixtures_dir / "nccl-tests" / "nccl-02.txt").read_text()
    if algo:
        text = f"+ export NCCL_ALGO={algo}\n" + text
    (r,) = judge_text(text, context_from_flags(instance_type="p5.48xlarge", nodes=2), source="nccl-02.txt")
    assert r.expected["algorithm"] == expected_algorithm
    if algo:
        assert any(f"NCCL_ALGO={algo}" in n for n in r.notes)
