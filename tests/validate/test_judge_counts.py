"""Counts that contradict each other (issue 29, kind 2): the ranks the device lines list, the highest ``Rank N``
they name, the rank count the table's busbw / algbw ratio is the bus factor of, and the explicit ``--nodes`` /
``--gpus-per-node``. The judge names a contradiction and never judges bandwidth on a count it cannot trust. Real
public outputs from ``tests/fixtures`` (origins in ``tests/fixtures/README.md``)."""

from __future__ import annotations

import json

from clusterforge.cli import main
from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text


def _cli(capsys, *argv) -> tuple[int, dict]:
    rc = main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, json.loads(out)


def test_excerpt_with_one_device_line_is_not_one_rank(fixtures_dir, capsys):
    # coreweave/nccl-tests GB200 rack: only "Rank 71" is left of the device lines; busbw / algbw = 586.06 / 297.16
    # = 1.9722 = 2(n-1)/n for n = 72 (nccl-tests doc/PERFORMANCE.md), not one rank
    rc, doc = _cli(capsys, "judge", fixtures_dir / "nccl-tests" / "nccl-14-gb200-graphics-device.txt", "--gpu", "gb200")
    (r,) = doc["results"]
    assert r["metrics"]["ranks"] == 72 and r["metrics"]["nodes"] is None
    assert r["verdict"] == "warn" and rc == 0  # no bandwidth verdict without the node count, not "one rank: invalid"
    assert not any("one rank" in x for x in r["reasons"])
    assert any("go up to 'Rank 71'" in n and "72 ranks" in n for n in r["notes"])
    assert "nodes" in r["reasons"][0]


def test_flags_that_contradict_an_excerpt_are_named(fixtures_dir):
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-14-gb200-graphics-device.txt",
                      context_from_flags(gpu="gb200", nodes=2, gpus_per_node=4))
    assert r.verdict == "invalid"
    assert "--nodes 2 x --gpus-per-node 4 = 8 ranks, but the log has 72" in r.reasons[0]
    assert "busbw_gbps" not in r.expected


def test_flags_against_complete_device_lines(fixtures_dir):
    # OCI A100 2 x 8 (nccl-09): 16 device lines on node-1 and node-2
    path = fixtures_dir / "nccl-tests" / "nccl-09.txt"
    (one,) = judge_file(path, context_from_flags(nodes=1, gpus_per_node=8, gpu="a100-40gb-sxm"))
    assert one.verdict == "invalid" and "= 8 ranks, but the log's device lines list 16" in one.reasons[0]
    (four,) = judge_file(path, context_from_flags(nodes=4, gpu="a100-40gb-sxm"))
    assert four.verdict == "invalid" and "--nodes 4, but the log's 16 ranks ran on 2 host(s) (node-1, node-2)" in four.reasons[0]
    # the run's own counts: no contradiction (the fixture's verdict, pass, is kept)
    (ok,) = judge_file(path, context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm", fabric="roce",
                                                nic_gbps=100, nics_per_node=16))
    assert ok.verdict == "pass", ok.reasons


def test_host_names_that_do_not_tell_nodes_apart_yield_to_nodes(fixtures_dir):
    # superbenchmark 8 x A100 (nccl-04) prints "on localhost": --nodes is then the only word on the node count
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", context_from_flags(nodes=2, gpu="A100-SXM4-40GB"))
    assert not any("contradict" in x for x in r.reasons)
    assert any("'localhost'" in n for n in r.notes)


def test_table_that_contradicts_complete_device_lines(fixtures_dir):
    # nccl-04's 8 device lines with the table of the 16-rank run nccl-09 under them: two logs pasted together
    head = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text().split("#                                ")[0]
    table = (fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text()
    table = table[table.index("#                                                              out-of-place"):]
    (r,) = judge_text(head + table, context_from_flags(gpu="A100-SXM4-40GB"), source="pasted.txt")
    assert r.verdict == "invalid"
    assert "the device lines list 8 ranks on 1 host(s) but busbw / algbw in the table is the bus factor of 16 ranks" \
        in r.reasons[0]
