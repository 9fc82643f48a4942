"""InfiniBand partition keys (issue 29, kind 5), on the lines of a public field report: amd-agi/maxtext-slurm
``docs/ib-pkey-fix-report-en.md`` (B200 nodes, ConnectX-7 native IB, NCCL 2.29.7), whose subnet manager made the
default key (index 0) a limited member, ``0x7fff``, and the full-member key ``0xf0dc`` index 1. Fixture
``field/11-ib-pkey-report-lines.txt`` holds its two error signatures as the report quotes them."""

from __future__ import annotations

import pytest

from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.signatures import by_id, diagnose
from validate.suites.nccl import PKEY_FULL_MEMBER_BIT

REPORT = "field/11-ib-pkey-report-lines.txt"


def _lines(fixtures_dir) -> list[str]:
    return (fixtures_dir / REPORT).read_text().splitlines()


def test_limited_member_retry_error_of_current_nccl_format(fixtures_dir):
    # NCCL 2.29's format: status=IBV_WC_RETRY_EXC_ERR(12) vendor_err=129 (no "error", no "vendor err")
    retry = _lines(fixtures_dir)[0]
    assert "status=IBV_WC_RETRY_EXC_ERR(12)" in retry and "error" not in retry.lower().replace("_err", "")
    (sig, _), *_ = diagnose([retry], multi=True, fabric="infiniband")
    assert sig.id == "ib-transport-errors"
    assert "limited members" in sig.cause and "full-member bit (0x8000" in sig.fix
    assert "the index, not the key" in sig.fix


def test_the_report_lines_alone_are_a_crash_with_the_partition_cause(fixtures_dir):
    ctx = context_from_flags(nodes=2, gpus_per_node=8, fabric="infiniband")
    (r,) = judge_file(fixtures_dir / REPORT, ctx)
    assert r.verdict == "fail"
    assert r.reasons[0].startswith("crashed before printing a result: 'ibv_modify_qp failed with 22")
    assert "docs/troubleshooting.md#ib-transport-errors" in r.reasons[0]


def test_a_key_given_as_nccl_ib_pkey_is_named_before_any_guess(fixtures_dir):
    # the report's job 1119 ran with NCCL_IB_PKEY=0xf0dc and failed in ibv_modify_qp; NCCL takes NCCL_IB_PKEY as the
    # P_Key table index (connect.cc: pkeyIndex = ncclParamIbPkey()). Composed here: the job's setting, then its error
    text = "mpirun -x NCCL_IB_PKEY=0xf0dc ./all_reduce_perf -b 8 -e 16G -f 2 -g 1\n" + _lines(fixtures_dir)[1] + "\n"
    (r,) = judge_text(text, context_from_flags(nodes=2, gpus_per_node=8, fabric="infiniband"), source="job-1119.txt")
    assert r.verdict == "fail"
    cause = r.reasons[0].split("'. ", 1)[1]
    assert cause.startswith("the log sets NCCL_IB_PKEY=0xf0dc. Likely cause: NCCL_IB_PKEY is an index")
    fix = cause.split("Fix: ", 1)[1]
    assert "index of the full-member key" in fix and "e.g. 1 where pkeys/1 holds 0xf0dc" in fix
    assert "NCCL_IB_PKEY=0xf0dc" not in fix  # never the setting that failed


@pytest.mark.parametrize(("value", "named"), [
    ("0xf0dc", True), ("0x8000", True), ("32768", True),  # full-member bit set: a key
    ("0x7fff", False), ("1", False), ("0", False), ("x", False),  # an index, or nothing NCCL would read as one
])
def test_only_a_value_with_the_full_member_bit_is_taken_for_a_key(fixtures_dir, value, named):
    assert PKEY_FULL_MEMBER_BIT == 0x8000  # IB bit 15 (the report: "pkeys/1 -> 0xf0dc (bit 15 = 1 -> full member)")
    text = f"export NCCL_IB_PKEY={value}\n" + _lines(fixtures_dir)[1] + "\n"
    (r,) = judge_text(text, context_from_flags(nodes=2, gpus_per_node=8, fabric="infiniband"), source="k.txt")
    assert ("#ib-pkey-value-not-index" in r.reasons[0]) is named, r.reasons[0]


def test_efa_has_no_partition_keys(fixtures_dir):
    text = "export NCCL_IB_PKEY=0xf0dc\n" + _lines(fixtures_dir)[1] + "\n"
    (r,) = judge_text(text, context_from_flags(nodes=2, gpus_per_node=8, fabric="efa"), source="k.txt")
    assert "#ib-pkey-value-not-index" not in r.reasons[0]
    assert by_id("ib-pkey-value-not-index").fabrics == ("infiniband", "roce")
