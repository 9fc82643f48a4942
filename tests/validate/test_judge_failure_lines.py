"""NCCL failure lines of current releases (issue 29, kind 5): IB completion errors that no longer say "error" (status
and vendor error codes), DMA-BUF registration refused, a per-task GPU binding that hides a job's GPUs from each other,
excerpts whose rows carry the launcher's tags glued inside them; and no fix text recommends a setting that causes a
failure. The log lines are quoted from public NCCL issues (each test names its issue)."""

from __future__ import annotations

import re

import pytest

from blueprints.catalog import catalog
from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.signatures import SIGNATURES, diagnose


@pytest.mark.parametrize("line", [
    # NVIDIA/nccl issue #1405 (NCCL 2.2x, ib_plugin)
    ("kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 "
    "remoteGidsfd00:1148:9000:5000:4:200:3:ff1f"),
    # NVIDIA/nccl issue #1664 (title)
    "NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)",
])
def test_ib_completion_status_without_the_word_error(line):
    assert "error" not in line.lower()
    found = diagnose([line], multi=True, fabric="infiniband")
    assert found and found[0][0].id == "ib-transport-errors"


def test_dmabuf_refusal_is_not_a_memlock_limit():
    # NVIDIA/nccl issue #778: nccl-tests on two nodes, NCCL 2.13
    line = "misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported"
    ids = [s.id for s, _ in diagnose([line], multi=True, fabric="infiniband")]
    assert ids[0] == "dmabuf-registration-refused" and "memlock-too-small" not in ids
    # the classic registration failure is still the locked-memory limit
    old = "NET/IB : Call to ibv_reg_mr failed with error Cannot allocate memory"
    assert diagnose([old], multi=True, fabric="infiniband")[0][0].id == "memlock-too-small"


def test_tags_glued_inside_rows_are_read(fixtures_dir):
    # NVIDIA/nccl issue #1453: "-1[0]    1626.5 ... 0[0]    2302.3": the rows of one rank's stream, tags inside
    (r,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-15-tags-joined.txt", context_from_flags())
    assert r.metrics["rows"] == 10 and r.metrics["collective"] == "all_reduce"
    assert r.metrics["peak_busbw_gbps"] == 29.5 and r.metrics["size_at_peak_bytes"] == 33554432


def test_ranks_that_each_see_only_their_own_gpu(fixtures_dir):
    # OCI A100 2 x 8 (nccl-09) as a per-task GPU binding prints it: every rank of a node on "device 0"
    text = re.sub(r"(on node-\d device) +\d", r"\1  0", (fixtures_dir / "nccl-tests" / "nccl-09.txt").read_text())
    ctx = context_from_flags(nodes=2, gpus_per_node=8, gpu="a100-40gb-sxm", fabric="roce", nic_gbps=100,
                             nics_per_node=16)
    (r,) = judge_text(text, ctx, source="per-task.txt")
    assert r.verdict == "warn"
    assert any("all 8 ranks of node-1 (and 1 more host(s)) on 'device 0'" in x and "--gpu-bind=none" in x
               for x in r.reasons), r.reasons
    # the published log (device 0..7 on each node) is not flagged
    (ok,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-09.txt", ctx)
    assert ok.verdict == "pass"


def test_no_fix_recommends_a_setting_that_causes_a_failure():
    cat = catalog()
    for s in SIGNATURES:
        for name, value in re.findall(r"\b((?:NCCL|FI)_[A-Z0-9_]+)=([\w^,.:-]+)", s.fix):
            assert not cat.fast_paths_switched_off(name, value), (s.id, name, value)
        # a per-task GPU binding hides GPUs from each other (gpus-hidden-per-task): no fix may ask for one
        recommends = s.fix.split(" instead")[0] if s.id == "duplicate-gpu" else s.fix
        assert "--gpus-per-task=1" not in recommends, s.id
