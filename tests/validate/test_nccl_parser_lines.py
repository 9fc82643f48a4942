"""The nccl-tests text parser on each kind of line it reads, and what the judge makes of it (issue 35).

Line kinds, as nccl-tests prints them (NVIDIA/nccl-tests src/common.cu and src/util.cu: the table rows, ``# Out of
bounds values : %d %s`` with ``OK``/``FAILED``, ``# Avg bus bandwidth    : %g`` and the ``NCCL_TESTS_MIN_BW`` check,
``Test NCCL failure`` / ``Test CUDA failure`` on an error): a row's busbw is the better of its two placements (max,
not min); ``#wrong`` counts add up over both placements and any count above 0 fails, ``N/A`` means not checked; the
out-of-bounds footer fails from 1 value (or the word FAILED); a fatal line fails the run, an ``NCCL WARN`` or an
``NCCL INFO`` line that merely mentions a timeout setting does not.

The base log is the real public ``tests/fixtures/nccl-tests/nccl-04.txt`` (8 x A100-SXM4-40GB all_reduce, peak busbw
235.26 GB/s out-of-place at 8 GiB, run with ``-c 0``: N/A), its pre-2.13 ``error`` column headed ``#wrong`` as
nccl-tests 2.13 and later print it; each test rewrites the one line it is about.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from validate.expectations import context_from_flags
from validate.judge import JudgeResult, judge_text
from validate.parsers.nccl import NcclRun, parse_nccl

A100_NODE: dict[str, Any] = {"nodes": 1, "gpus_per_node": 8, "gpu": "A100-SXM4-40GB"}
_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]")
LAST = "  8589934592    2147483648   float     sum    63896  134.44  235.26    N/A    63959  134.30  235.03    N/A"


@pytest.fixture()
def base(fixtures_dir: Path) -> str:
    text = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    assert LAST in text
    header = "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error"
    assert header in text
    return text.replace(header, header.replace("  error", " #wrong"))


def _checked(text: str) -> str:
    """The log as if run with ``-c 1``: every row's ``#wrong`` printed 0 (nccl-tests prints ``%g``)."""
    return "\n".join(ln.replace("N/A", "0") if _ROW.match(ln) else ln for ln in text.splitlines()) + "\n"


def _run(text: str) -> NcclRun:
    (run,) = parse_nccl(text)
    return run


def _judge(text: str) -> JudgeResult:
    (r,) = judge_text(text, context_from_flags(**A100_NODE), source="nccl.log", kind="nccl")
    return r


def test_a_row_reads_both_placements_and_its_busbw_is_the_max(base):
    row = _run(base).rows[-1]
    assert row.size_bytes == 8589934592 and row.count == 2147483648 and row.dtype == "float" and row.redop == "sum"
    assert row.out_of_place is not None and row.in_place is not None
    assert (row.out_of_place.time_us, row.out_of_place.algbw_gbps, row.out_of_place.busbw_gbps) == (63896, 134.44, 235.26)
    assert (row.in_place.time_us, row.in_place.algbw_gbps, row.in_place.busbw_gbps) == (63959, 134.30, 235.03)
    assert row.busbw_gbps == 235.26 and row.algbw_gbps == 134.44  # the better placement
    checked = _run(_checked(base)).rows[-1]  # #wrong printed 0: a count, not the pre-2.13 `error` (max deviation)
    assert checked.out_of_place.wrong == 0 and checked.out_of_place.max_error is None and checked.in_place.max_error is None
    swapped = base.replace(LAST, LAST.replace("235.26", "235.00").replace("235.03", "235.30"))
    assert _run(swapped).rows[-1].busbw_gbps == 235.30
    assert _run(swapped).peak() == (235.30, 8589934592, "in-place")


def test_rows_keep_their_line_number_in_the_log(base):
    run = _run(base)
    assert run.rows[-1].line == base.splitlines().index(LAST) + 1  # 1-based, as an editor shows it


@pytest.mark.parametrize("cut_at", ["end", "float"])
def test_a_row_cut_by_another_ranks_line_keeps_the_line_it_started_on(base, cut_at):
    # `mpirun --tag-output`: rank 1's line glued after rank 0's last row (and the log ends there), or cutting the row
    # before its data type with the rest on the next line: the row is counted on the line where it starts (it was
    # reported one past the end of the log)
    lines = base.splitlines()
    at = lines.index(LAST)
    other = "[1,1]<stdout>:node-2:7:7 [1] NCCL INFO Channel 02/0 : 9[1] -> 1[1] via NET/IB/1/GDRDMA"
    cut = len(LAST) if cut_at == "end" else LAST.index("float")
    tagged = [f"[1,0]<stdout>:{ln}" for ln in lines[:at]] + [f"[1,0]<stdout>:{LAST[:cut]}{other}"]
    if cut_at != "end":
        tagged.append(f"[1,0]<stdout>:{LAST[cut:]}")
    (run,) = [r for r in parse_nccl("\n".join(tagged)) if r.rows]
    assert (run.rows[-1].size_bytes, run.rows[-1].busbw_gbps, run.rows[-1].line) == (8589934592, 235.26, at + 1)


def test_a_row_cut_after_its_first_field_is_not_read(base):
    # the log of a job killed while printing: the last row stops after the redop column
    cut = LAST[: LAST.index("sum") + 3]
    run = _run(base.replace(LAST, cut))
    assert len(run.rows) == len(_run(base).rows) - 1 and run.rows[-1].size_bytes == 4294967296


def test_a_torch_benchmark_banner_on_another_stream_does_not_change_the_tool(base):
    # srun --label: rank 0 printed the nccl-tests table, rank 1 only the torch benchmark's version banner; only an
    # rccl-tests banner makes a table rccl-tests (AMD expectations), never another tool's line
    text = "\n".join("0: " + ln for ln in base.splitlines())
    text += ("\n1: # clusterforge torch.distributed collective benchmark version 1 (nccl-tests table format) "
             "torch 2.7.0 backend nccl\n")
    (run,) = [r for r in parse_nccl(text) if r.rows]
    assert run.tool == "nccl-tests"


def test_an_error_from_another_rank_after_every_run_finished_goes_to_the_last_run(base):
    # srun --label: rank 0 printed two complete runs (each with its footer); rank 1 then printed a failure
    text = "\n".join("0: " + ln for ln in (base + base).splitlines())
    text += "\n1: node-2: Test NCCL failure common.cu:1019 'unhandled system error'\n"
    first, second = [r for r in parse_nccl(text) if r.rows]
    assert first.errors == [] and any("unhandled system error" in e for e in second.errors)


def test_the_network_another_rank_names_belongs_to_the_runs(base):
    # srun --label: rank 0 printed the table; rank 8 on the second node printed NCCL's "Using network IB" line
    text = "\n".join("0: " + ln for ln in base.splitlines())
    text += "\n8: node-2:7:7 [0] NCCL INFO Using network IB\n"
    (run,) = [r for r in parse_nccl(text) if r.rows]
    assert "IB" in run.networks


def test_log_lines_before_the_first_run_stay_within_the_cap(base):
    # MAX_LOG_LINES (20000) other lines are kept per run; lines printed before the first header go to the first run
    # and share its cap
    from validate.parsers.nccl import MAX_LOG_LINES

    info = "".join(f"node-1:1:1 [0] NCCL INFO NET/IB : note {i}\n" for i in range(MAX_LOG_LINES + 10))
    run = _run(info + base)
    assert len(run.log_lines) == MAX_LOG_LINES and run.log_lines[0] == "node-1:1:1 [0] NCCL INFO NET/IB : note 0"


def test_wrong_counts_na_is_unchecked_zero_passes(base):
    run = _run(base)
    assert run.checked is False and run.wrong_total is None and run.rows[-1].wrong is None
    r = _judge(base)
    assert r.verdict == "pass" and any("correctness not checked" in n for n in r.notes)
    run = _run(_checked(base))
    assert run.checked is True and run.wrong_total == 0
    assert _judge(_checked(base)).verdict == "pass"


@pytest.mark.parametrize(("oop", "ip"), [("1", "0"), ("0", "1")])
def test_one_wrong_element_in_either_placement_fails(base, oop, ip):
    last = LAST.replace("N/A", "{}", 2).format(oop, ip)
    text = _checked(base).replace(LAST.replace("N/A", "0"), last)
    run = _run(text)
    assert run.rows[-1].wrong == 1 and run.wrong_total == 1
    r = _judge(text)
    assert r.verdict == "fail" and r.reasons[0].startswith("wrong results: #wrong = 1 element(s) at 8 GiB")
    assert ("out-of-place" if oop == "1" else "in-place") in r.reasons[0]


def test_wrong_counts_of_both_placements_add_up(base):
    text = _checked(base).replace(LAST.replace("N/A", "0"), LAST.replace("N/A", "2", 1).replace("N/A", "3", 1))
    assert _run(text).rows[-1].wrong == 5 and _run(text).wrong_total == 5
    assert "#wrong = 5 element(s)" in _judge(text).reasons[0]


@pytest.mark.parametrize(("footer", "count", "ok", "verdict"), [
    ("# Out of bounds values : 0 OK", 0, True, "pass"),
    ("# Out of bounds values : 1 FAILED", 1, False, "fail"),
    ("# Out of bounds values : 0 FAILED", 0, False, "fail"),   # the word alone fails
    ("# Out of bounds values : 1", 1, None, "fail"),           # the count alone fails
])
def test_out_of_bounds_footer(base, footer, count, ok, verdict):
    text = base.replace("# Out of bounds values : 0 OK", footer)
    run = _run(text)
    assert (run.out_of_bounds, run.out_of_bounds_ok) == (count, ok)
    assert _judge(text).verdict == verdict


@pytest.mark.parametrize(("footer", "value", "check", "verdict"), [
    ("# Avg bus bandwidth    : 68.4048", 68.4048, None, "pass"),
    ("# Avg bus bandwidth    : 68.4048 OK", 68.4048, "OK", "pass"),
    ("# Avg bus bandwidth    : 68.4048 FAILED", 68.4048, "FAILED", "warn"),  # NCCL_TESTS_MIN_BW not met
    ("# Avg bus bandwidth    : inf", None, None, "pass"),  # not a figure (a run of zero-time rows)
    ("# Avg bus bandwidth    : nan", None, None, "pass"),
])
def test_avg_bus_bandwidth_footer(base, footer, value, check, verdict):
    text = base.replace("# Avg bus bandwidth    : 68.4048", footer)
    run = _run(text)
    assert (run.avg_busbw_gbps, run.avg_busbw_check) == (value, check)
    r = _judge(text)
    assert r.verdict == verdict, r.reasons
    if verdict == "warn":
        assert "NCCL_TESTS_MIN_BW check FAILED (Avg bus bandwidth 68.4048 GB/s)" in r.reasons[0]


@pytest.mark.parametrize("line", [
    "node-1: Test NCCL failure common.cu:1019 'unhandled system error'",
    "node-1: Test CUDA failure common.cu:892 'an illegal memory access was encountered'",
    "# error: wrong number of GPUs",
    "Segmentation fault (core dumped)",
    "srun: error: node-2: task 3: Exited with exit code 1",
])
def test_fatal_lines_fail_the_run(base, line):
    text = base.replace("# Out of bounds values", line + "\n# Out of bounds values", 1)
    run = _run(text)
    assert line.split(": ", 1)[-1] in " ".join(run.errors) or line in run.errors, run.errors
    r = _judge(text)
    assert r.verdict == "fail", r.reasons


@pytest.mark.parametrize("line", [
    "hostname:3442:3442 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22",
    "hostname:3442:3442 [0] NCCL WARN Could not find real path of /sys/class/net/eth0",
    "hostname:3442:3442 [0] NCCL INFO comm 0x5569 rank 0 nranks 8 - Init COMPLETE",
])
def test_info_and_warn_lines_do_not_fail_the_run(base, line):
    text = base.replace("hostname:3442:3442 [0] NCCL INFO Launch mode Parallel", line, 1)
    run = _run(text)
    assert run.errors == []
    assert _judge(text).verdict == "pass"


def test_a_header_of_one_placement_reads_rows_of_one_placement(base):
    # The parser reads the column groups the header prints (each starts at `time`); a table cut to its out-of-place
    # columns (a wrapper that keeps only those) has rows of one placement: busbw is read from that group, and no
    # in-place values are invented from the default column order
    header = "#       size         count    type   redop     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    assert header in base
    one = base.replace(header, "#       size         count    type   redop     time   algbw   busbw #wrong")
    one = "\n".join(" ".join(ln.split()[:8]) if _ROW.match(ln) else ln for ln in one.splitlines()) + "\n"
    row = _run(one).rows[-1]
    assert (row.out_of_place.time_us, row.out_of_place.busbw_gbps) == (63896, 235.26) and row.in_place is None
    assert row.busbw_gbps == 235.26
    # a wrapper that also dropped the busbw column: busbw is unknown, never read from the column beside it
    nobus = _checked(one).replace("   algbw   busbw #wrong", "   algbw #wrong")  # #wrong printed 0: a number
    nobus = "\n".join(" ".join(ln.split()[:6] + ln.split()[7:8]) if _ROW.match(ln) else ln
                      for ln in nobus.splitlines()) + "\n"
    row = _run(nobus).rows[-1]
    assert row.out_of_place.time_us == 63896 and row.out_of_place.busbw_gbps is None


def test_inferred_ranks_takes_only_a_whole_size_to_count_ratio(fixtures_dir):
    # all_gather prints size = count x type size x ranks (nccl-tests src/all_gather.cu): nccl-05 is 8 x A100, so each
    # row's size / (count x 4 bytes) is 8. A row whose ratio is 2.5 (a corrupted or edited line) says nothing about
    # the rank count; the row before it does
    text = (fixtures_dir / "nccl-tests" / "nccl-05.txt").read_text()
    (run,) = parse_nccl(text)
    assert run.collective == "all_gather" and run.inferred_ranks() == 8
    last = next(ln for ln in reversed(text.splitlines()) if _ROW.match(ln))
    size, count = last.split()[:2]
    assert int(size) == 8 * int(count) * 4
    odd = last.replace(size, str(int(int(count) * 4 * 2.5)), 1)
    (run,) = parse_nccl(text.replace(last, odd))
    assert run.inferred_ranks() == 8


def test_a_run_built_from_a_list_of_rows_reads_them_as_rows():
    # NcclRun(rows=[...]) (a program building a run, as the JSON parser does) gets the compact Rows with its column
    # reads, and a Rows passed in is kept as it is
    from validate.parsers.nccl import Placement, Row, Rows

    row = Row(size_bytes=1024, count=256, dtype="float", redop="sum", root=-1,
              out_of_place=Placement(time_us=10.0, algbw_gbps=0.1, busbw_gbps=0.18, wrong=0.0),
              in_place=None, line=7)
    run = NcclRun(index=0, rows=[row])
    assert isinstance(run.rows, Rows) and run.rows.values("busbw_gbps", "out-of-place") == [0.18]
    rows = Rows([row])
    assert NcclRun(index=0, rows=rows).rows is rows


def test_each_launcher_stream_of_a_duplicated_run_keeps_its_log_lines(base):
    # a non-MPI build under srun: every rank ran the whole test alone and printed its own table (srun --label `0: `,
    # `1: `); each stream's run keeps the NCCL lines it printed (the second and later streams share a budget of
    # 3 x MAX_LOG_LINES lines, so many streams cannot hold more than that together)
    text = "".join(f"{k}: {ln}\n" for k in (0, 1) for ln in base.splitlines())
    runs = [r for r in parse_nccl(text) if r.rows]
    assert len(runs) == 2 and all(r.duplicated_rank0 for r in runs)
    assert [r.log_lines for r in runs] == [["hostname:3442:3442 [0] NCCL INFO Launch mode Parallel"]] * 2
