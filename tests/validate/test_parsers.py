"""Parsers read every real output in tests/fixtures and the format variations launchers and
nccl-tests versions produce (prefixes, header lines without '#', NCCL INFO inside the table,
exponent numbers, several runs, -J JSON), fio JSON/text with its quirks, and the AMP JSON."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from validate.parsers.amp import parse_amp
from validate.parsers.fio import parse_fio, parse_fio_json, parse_fio_text, parse_size
from validate.parsers.nccl import (
    bus_factor,
    net_usage,
    normalize_collective,
    parse_nccl,
    parse_nccl_json,
    parse_nccl_text,
)
from validate.suites import detect_kind


def _nccl(fixtures_dir, name: str) -> str:
    return (fixtures_dir / "nccl-tests" / name).read_text()


# ---- nccl-tests text: the fixtures as they are ----------------------------------------------

FIXTURE_FACTS = {
    # name: (collective, ranks from header, ranks inferred, nodes, gpu, rows, peak busbw, size at peak, checked)
    "nccl-01.txt": ("all_reduce", None, 16, None, None, 29, 78.33, 2**31, True),
    "nccl-02.txt": ("all_reduce", None, 16, None, None, 32, 487.26, 2**34, True),
    "nccl-04.txt": ("all_reduce", 8, 8, 1, "A100-SXM4-40GB", 34, 235.26, 2**33, False),
    "nccl-05.txt": ("all_gather", 8, 8, 1, "A100-SXM4-40GB", 34, 230.07, 2**33, False),
    "nccl-07.txt": ("alltoall", 8, 8, 1, "A100-SXM4-40GB", 34, 226.16, 2**33, False),
    "nccl-09.txt": ("all_reduce", 16, 16, 2, "NVIDIA A100-SXM4-40GB", 31, 237.94, 2**33, True),
    "nccl-11.txt": ("all_reduce", 2, 2, 2, "NVIDIA GH200 120GB", 25, 22.87, 2**27, True),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_FACTS))
def test_fixture_tables_parse_completely(fixtures_dir, name):
    coll, ranks, inferred, nodes, gpu, nrows, peak, at, checked = FIXTURE_FACTS[name]
    runs = parse_nccl(_nccl(fixtures_dir, name), name)
    assert len(runs) == 1
    run = runs[0]
    assert run.collective == coll
    assert run.ranks == ranks and run.inferred_ranks() == inferred and run.nodes == nodes
    assert run.device_name == gpu
    assert len(run.rows) == nrows
    assert run.peak()[:2] == (peak, at)
    assert run.checked is checked
    # every row has both placements with numbers
    assert all(r.out_of_place and r.in_place and r.out_of_place.busbw_gbps is not None for r in run.rows)


def test_old_format_columns_and_quirks(fixtures_dir):
    ag = parse_nccl(_nccl(fixtures_dir, "nccl-05.txt"))[0]
    assert ag.collective_from == "columns" and all(r.redop is None and r.root is None for r in ag.rows)
    a2a = parse_nccl(_nccl(fixtures_dir, "nccl-07.txt"))[0]
    assert all(r.redop == "" for r in a2a.rows), "old alltoall prints a blank redop field"
    assert any("blank redop" in n for n in a2a.format_notes)
    assert "no redop column (pre-2.13 table)" in ag.format_notes and not any("blank redop" in n for n in ag.format_notes)
    ar = parse_nccl(_nccl(fixtures_dir, "nccl-04.txt"))[0]
    assert not any("redop" in n for n in ar.format_notes)
    assert ar.rows[0].size_bytes == 0 and ar.rows[0].out_of_place.wrong is None  # N/A = unchecked
    assert ar.avg_busbw_gbps == pytest.approx(68.4048) and ar.out_of_bounds == 0 and ar.out_of_bounds_ok
    assert ar.config["validation"] == 0 and ar.config["nGpus"] == 8


def test_avg_bus_bandwidth_is_the_mean_of_every_row(fixtures_dir):
    """validation.md: the Avg line is the arithmetic mean over every row and both placements."""
    run = parse_nccl(_nccl(fixtures_dir, "nccl-09.txt"))[0]
    vals = [p.busbw_gbps for r in run.rows for _, p in r.placements]
    assert len(vals) == 62
    assert sum(vals) / len(vals) == pytest.approx(run.avg_busbw_gbps, abs=0.01)


def test_wrong_counts_and_crash_lines(fixtures_dir):
    run = parse_nccl(_nccl(fixtures_dir, "nccl-11.txt"))[0]
    bad = [(r.size_bytes, r.out_of_place.wrong, r.in_place.wrong) for r in run.rows if r.wrong]
    assert bad == [(1048576, 96, 32)]
    assert run.out_of_bounds == 4 and run.out_of_bounds_ok is False and run.wrong_total == 128
    assert run.version == "2.17.8" and run.concluded
    assert any("Test failure common.cu:1189" in e for e in run.errors)
    crash = parse_nccl(_nccl(fixtures_dir, "nccl-12.txt"))[0]
    assert crash.rows == [] and crash.ranks == 8 and crash.nodes == 2
    assert any("CUDA-capable device(s) is/are busy or unavailable" in e for e in crash.errors)


def test_command_line_names_the_collective_and_one_rank(fixtures_dir):
    run = parse_nccl(_nccl(fixtures_dir, "nccl-13.txt"))[0]
    assert run.collective == "alltoall" and run.collective_from == "command line"
    # the command line echoed after the run's version line names that run too
    run = parse_nccl("# nccl-tests version 2.17.8 nccl-headers=22606 nccl-library=22606\n"
                     + _nccl(fixtures_dir, "nccl-13.txt"))[0]
    assert run.version == "2.17.8" and run.collective == "alltoall" and run.collective_from == "command line"
    assert run.ranks == 1 and run.rows[0].in_place.wrong is None  # in-place #wrong printed N/A


# ---- variations produced by launchers and versions -----------------------------------------


def test_launcher_prefixes_are_stripped(fixtures_dir):
    text = _nccl(fixtures_dir, "nccl-09.txt")
    base = parse_nccl(text)[0]
    for prefix in ("0: ", "[1,0]<stdout>: ", "[0] ", "[pod/mpijob-launcher-abc/launcher] ",
                   "2025-01-02T03:04:05.123456Z "):
        run = parse_nccl("".join(prefix + ln + "\n" for ln in text.splitlines()))[0]
        assert (run.ranks, run.nodes, len(run.rows), run.peak()) == (base.ranks, base.nodes, len(base.rows), base.peak())


def test_header_lines_without_hash(fixtures_dir):
    text = "\n".join(re.sub(r"^#\s?", "", ln) for ln in _nccl(fixtures_dir, "nccl-11.txt").splitlines())
    run = parse_nccl(text)[0]
    assert run.ranks == 2 and run.collective == "all_reduce" and run.out_of_bounds == 4 and len(run.rows) == 25


def test_nccl_info_lines_inside_the_table_and_transport(fixtures_dir):
    lines = _nccl(fixtures_dir, "nccl-09.txt").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("1048576"))
    lines[at:at] = [
        "node-1:43:120 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
        "node-1:43:120 [0] NCCL INFO NET/Plugin: no plugin library found, using internal implementation",
        "node-2:44:121 [1] NCCL WARN NET/Socket : message truncated",
    ]
    run = parse_nccl("\n".join(lines))[0]
    assert len(run.rows) == 31 and "Socket" in run.networks and run.net_plugin_missing
    assert run.warnings == ["NET/Socket : message truncated"]


def test_exponent_numbers_and_large_wrong_counts():
    text = """# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1 on     node-a device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   2 on     node-a device  1 [0000:2b:00] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1  1.2e+04    0.00    0.00 1.04858e+06  1.1e+04    0.00    0.00      0
          16             4     float     sum      -1    12.00  1.0e+03 1.0e+03      0    11.00  1.0e+03 1.0e+03      0
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 500
"""
    run = parse_nccl(text)[0]
    assert run.rows[0].out_of_place.time_us == 12000 and run.rows[0].out_of_place.wrong == 1048580
    assert run.rows[1].out_of_place.busbw_gbps == 1000.0 and run.ranks == 2


def test_several_runs_in_one_file(fixtures_dir):
    text = _nccl(fixtures_dir, "nccl-11.txt") + "\n" + _nccl(fixtures_dir, "nccl-13.txt") + _nccl(fixtures_dir, "nccl-04.txt")
    runs = parse_nccl(text)
    assert [r.collective for r in runs] == ["all_reduce", "alltoall", "all_reduce"]
    assert [r.ranks for r in runs] == [2, 1, 8]
    assert [len(r.rows) for r in runs] == [25, 1, 34]
    assert [r.index for r in runs] == [0, 1, 2]


def test_two_tables_without_headers_are_two_runs(fixtures_dir):
    text = _nccl(fixtures_dir, "nccl-01.txt") + _nccl(fixtures_dir, "nccl-02.txt")
    runs = parse_nccl(text)
    assert [len(r.rows) for r in runs] == [29, 32]


def test_per_iteration_columns_and_timestamps():
    text = """# nThread 1 nGpus 2 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Using devices
#  Rank  0 Group  0 Pid   1 on     node-a device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1 on     node-a device  1 [0000:2b:00] NVIDIA H100 80GB HBM3
#
#                                                   out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) %Y-%m-%d %H:%M:%S
     1048576        262144     float     sum      -1    20.10   52.17   52.17       0    19.00    22.00    21.90     2.10    20.00   52.43   52.43       0    19.10    21.00    20.90     1.90  2025-10-01 12:00:01
     2097152        524288     float     sum      -1    30.00   69.91   69.91       0    29.00    33.00    32.90     2.00    29.80   70.37   70.37       0    29.10    31.00    30.90     1.50  2025-10-01 12:00:02
"""
    run = parse_nccl(text)[0]
    assert len(run.rows) == 2
    r = run.rows[1]
    assert (r.out_of_place.time_us, r.out_of_place.busbw_gbps, r.in_place.busbw_gbps) == (30.0, 69.91, 70.37)
    assert r.out_of_place.wrong == 0 and r.redop == "sum" and r.root == -1


def test_torch_benchmark_output_reads_as_a_cpu_run():
    """The built-in torch benchmark (validate/payloads/collectives.py) prints nccl-tests' table."""
    text = """# clusterforge torch.distributed collective benchmark version 1 (nccl-tests table format) torch 2.13.0 backend gloo
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41001 on  workstation device  0 [cpu] cpu (gloo)
#  Rank  1 Group  0 Pid  41002 on  workstation device  1 [cpu] cpu (gloo)
#  Rank  2 Group  0 Pid  41003 on  workstation device  2 [cpu] cpu (gloo)
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1536           128     float    none      -1   210.50    0.01    0.00      0   205.10    0.01    0.00      0
        3072           256     float    none      -1   220.00    0.01    0.01      0   230.00    0.01    0.01      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.005
#
# Collective test concluded: all_gather_perf
#
"""
    run = parse_nccl(text)[0]
    assert run.tool == "torch" and run.backend == "gloo" and run.is_cpu
    assert run.collective == "all_gather" and run.ranks == 3 and run.nodes == 1 and run.concluded
    # a banner without "backend gloo": the devices named "cpu (gloo)" give the backend
    run = parse_nccl(text.replace(" backend gloo", ""))[0]
    assert run.backend == "gloo" and run.is_cpu


def test_non_mpi_build_duplicates_rank0_per_launcher_stream(fixtures_dir):
    one = _nccl(fixtures_dir, "nccl-13.txt")
    text = "".join(f"{i}: {ln}\n" for i in (0, 1) for ln in one.splitlines())
    runs = parse_nccl(text)
    assert len(runs) == 2 and all(r.duplicated_rank0 and r.duplicate_streams == 2 for r in runs)


def test_non_mpi_build_sequential_rank0_headers(fixtures_dir):
    one = _nccl(fixtures_dir, "nccl-13.txt")
    runs = parse_nccl(one + one)
    assert len(runs) == 2 and all(r.duplicated_rank0 for r in runs)


def test_one_single_gpu_run_is_not_a_duplicated_rank0(fixtures_dir):
    # one process on one GPU prints "Rank 0" once: a real single-GPU measurement, not N copies of a non-MPI build
    (run,) = parse_nccl(_nccl(fixtures_dir, "nccl-13.txt"))
    assert run.ranks == 1 and not run.duplicated_rank0


def test_rank_lines_repeated_in_one_stream(fixtures_dir):
    # the Rank lines of nccl-04 printed twice in one stream (merged output of processes): Rank 0 twice means copies of
    # a non-MPI build; a repeated other rank alone does not
    text = _nccl(fixtures_dir, "nccl-04.txt")
    ranks = [ln for ln in text.splitlines() if ln.lstrip("# ").startswith("Rank ")]
    twice = text.replace(ranks[-1], ranks[-1] + "\n" + "\n".join(ranks), 1)
    assert parse_nccl(twice)[0].duplicated_rank0
    again = text.replace(ranks[-1], ranks[-1] + "\n" + ranks[3], 1)
    assert not parse_nccl(again)[0].duplicated_rank0 and parse_nccl(again)[0].ranks == 8


def test_a_log_line_starting_size_and_type_is_not_a_table_header(fixtures_dir):
    text = _nccl(fixtures_dir, "nccl-04.txt").replace("# Out of bounds values", "size and type of the buffer: float\n"
                                                       "# Out of bounds values", 1)
    (run,) = parse_nccl(text)
    assert len(run.rows) == 34 and run.out_of_bounds == 0


def test_table_rows_are_stored_compactly():
    # Rows keeps a row in some 110 bytes (two 64-bit ints and ten floats a row, the shapes shared), not as Row
    # objects of some 700: a linear sweep of 100,000 sizes must not cost a Row per size
    import tracemalloc

    from validate.parsers.nccl import Rows

    tracemalloc.start()
    rows = Rows()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(20000):
        rows.add(1024 * (k + 1), 256 * (k + 1), "float", "sum", -1, (10.0, 1.0, 1.75, 0.0, None), (10.0, 1.0, 1.75, 0.0, None), k + 1)
    per_row = (tracemalloc.get_traced_memory()[0] - before) / 20000
    tracemalloc.stop()
    assert per_row < 250, per_row
    assert rows[19999].size_bytes == 1024 * 20000 and rows[19999].line == 20000


def test_unrecognisable_text_gives_no_runs():
    assert parse_nccl("") == []
    assert parse_nccl("apiVersion: v1\nkind: Pod\n") == []


def test_collective_helpers():
    assert normalize_collective("./build/all_reduce_perf") == "all_reduce"
    assert normalize_collective("allgather") == "all_gather"
    assert normalize_collective("frobnicate") is None
    assert bus_factor("all_reduce", 16) == pytest.approx(1.875)
    assert bus_factor("alltoall", 8) == pytest.approx(0.875)
    assert bus_factor("sendrecv", 8) == 1.0 and bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        bus_factor("nope", 2)


# ---- nccl-tests -J JSON ---------------------------------------------------------------------

def _json_doc() -> dict:
    dev = [{"rank": i, "group": 0, "pid": 100 + i, "hostname": f"node-{1 + i // 8}", "device": i % 8,
            "device_hex": "0000:1b:00", "device_info": "NVIDIA H100 80GB HBM3"} for i in range(16)]
    res = []
    for k, (t, alg) in enumerate([(400.0, 2.6), (1200.0, 111.8), (33600.0, 255.6)]):
        size = 2 ** (20 + 6 * k)
        res.append({"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": "    -1",
                    "out_of_place": {"time": t, "alg_bw": alg, "bus_bw": alg * 1.875, "nwrong": 0.0},
                    "in_place": {"time": t, "alg_bw": alg, "bus_bw": "nan", "nwrong": None},
                    "actual_iterations": 20, "experiment_name": ""})
    return {"version": 3, "start_time": "2025-10-01 12:00:00", "args": ["./build/all_reduce_perf", "-b", "1M"],
            "env": [], "nccl_version": 22703,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1048576, "maximum_bytes": 17179869184,
                       "step_factor": 64, "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1,
                       "validation": 1, "graph": 0, "blocking_collectives": "false", "per_iter_timing": "false",
                       "parallel_init": "false", "devices": dev},
            "results": res, "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": 231.2, "okay": "unchecked"}, "errors": [],
            "end_time": "2025-10-01 12:01:00"}


def test_nccl_json():
    run = parse_nccl(json.dumps(_json_doc()))[0]
    assert run.fmt == "json" and run.collective == "all_reduce" and run.collective_from == "json args"
    assert run.nccl_version == "2.27.3"  # NCCL_VERSION_CODE 22703
    assert run.rows[0].redop == "sum" and run.rows[0].dtype == "float"
    assert run.ranks == 16 and run.nodes == 2 and run.device_name == "NVIDIA H100 80GB HBM3"
    assert run.rows[0].root == -1 and run.rows[2].in_place.busbw_gbps is None  # "nan"
    # the config block, under nccl-tests' text names (nThread ... as the text header prints them)
    assert run.config == {"nThread": 1, "nGpus": 1, "minBytes": 1048576, "maxBytes": 17179869184, "step_factor": 64,
                          "warmup_iters": 1, "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0}
    # out-of-place checked (0 wrong), in-place not (null): the unchecked placement adds nothing to the total
    assert run.checked is True and run.wrong_total == 0 and run.rows[0].wrong == 0
    assert [r.line for r in run.rows] == [0, 0, 0]  # JSON rows come from no text line
    assert run.peak()[0] == pytest.approx(255.6 * 1.875)
    assert run.out_of_bounds == 0 and run.out_of_bounds_ok is True and run.avg_busbw_check is None
    assert run.concluded and not run.errors


@pytest.mark.parametrize(("okay", "check"), [("unchecked", None), ("true", "OK"), ("false", "FAILED"), (True, "OK"),
                                            (False, "FAILED")])
def test_nccl_json_average_bus_bandwidth_check(okay, check):
    # writeResultFooter: "okay" is "unchecked" without NCCL_TESTS_MIN_BW, else whether the average met it
    doc = _json_doc()
    doc["average_bus_bandwidth"] = {"bandwidth": 231.2, "okay": okay}
    assert parse_nccl(json.dumps(doc))[0].avg_busbw_check == check


def test_nccl_json_version_string_with_its_cuda_build():
    doc = dict(_json_doc(), nccl_version="2.27.3+cuda12.9")
    run = parse_nccl(json.dumps(doc))[0]
    assert (run.nccl_version, run.nccl_cuda) == ("2.27.3", "12.9")


def test_nccl_json_in_place_checked_alone_adds_nothing_for_out_of_place():
    doc = _json_doc()
    for res in doc["results"]:
        res["out_of_place"]["nwrong"], res["in_place"]["nwrong"] = None, 0.0
    run = parse_nccl(json.dumps(doc))[0]
    assert run.checked is True and run.wrong_total == 0


def test_nccl_json_of_a_long_sweep_cut_short_is_repaired():
    # a linear sweep of 2000 sizes (-i): some 500 KB of JSON, cut by a crash after the last result's placements
    doc = _json_doc()
    doc["results"] = [dict(doc["results"][0], size=1024 * (k + 1), count=256 * (k + 1)) for k in range(2000)]
    text = json.dumps(doc)
    assert len(text) > 400_000
    cut = text[: text.index('"out_of_bounds"') - 40]
    run = parse_nccl_json(cut)[0]
    assert run.truncated and len(run.rows) == 2000 and run.rows[-1].size_bytes == 1024 * 2000


@pytest.mark.parametrize("keep", [1, 5, 12])  # '{', '{"siz', '{"size": 671'
def test_nccl_json_cut_inside_a_results_first_field_drops_that_result(keep):
    # the repair closes the brackets after the last complete element; a result cut before its size was printed holds
    # nothing (it read as a row of 0 bytes)
    text = json.dumps(_json_doc())
    i = text.index('{"size": 67108864')
    run = parse_nccl_json(text[: i + keep])[0]
    assert run.truncated and [r.size_bytes for r in run.rows] == [1048576]


@pytest.mark.parametrize("doc", [{"results": [], "config": ["nThread", 1]}, {"results": [], "config": "nThread 1"}])
def test_nccl_json_with_a_field_of_the_wrong_shape_is_refused_in_one_line(doc):
    with pytest.raises(ValueError, match="a field of the wrong type"):
        parse_nccl_json(json.dumps(doc))
    assert parse_nccl(json.dumps(doc)) == []  # parse_nccl never raises: not a run either way


def test_nccl_json_repair_is_not_misled_by_brackets_inside_strings():
    # JSON strings hold any character: an environment value with an unbalanced bracket must not count as nesting
    doc = _json_doc()
    doc["env"] = ["PS1=[\\u@\\h \\W", "NCCL_IB_HCA=mlx5_0,mlx5_1"]
    text = json.dumps(doc)
    run = parse_nccl_json(text[: text.index('"out_of_bounds"') - 40])[0]
    assert run.truncated and len(run.rows) == 3 and run.collective == "all_reduce"


def test_nccl_json_cut_short_by_a_crash_is_repaired():
    text = json.dumps(_json_doc())
    cut = text[: text.index('"out_of_bounds"') - 40]
    run = parse_nccl_json(cut)[0]
    assert run.truncated and run.rows and any("cut short" in e for e in run.errors)
    with pytest.raises(ValueError):
        parse_nccl_json('{"jobs": []}')


# ---- fio ------------------------------------------------------------------------------------


def test_fio_json_fixture_with_lat_percentiles_and_group_reporting(fixtures_dir):
    rep = parse_fio((fixtures_dir / "fio" / "fio-01.json").read_text())
    assert rep.fmt == "json" and rep.version == "fio-3.16" and rep.group_reporting
    (job,) = rep.jobs
    assert job.name == "rand_read_write" and job.rw == "randrw" and job.block_size == 4096 and job.random
    assert job.option("numjobs") == "4" and job.direct is True and job.paths == ["/dev/nvme0n1"]
    assert job.read.bw_bytes_per_s == 348743777 and job.read.iops == pytest.approx(85138.890741)
    assert job.read.p99_ns == 2244608 and job.read.p99_source == "lat_ns"


def test_fio_json_group_reporting_set_in_a_job_section_only(fixtures_dir):
    # `group_reporting` in one job's section (not the global one) still makes fio report group totals: the report
    # says so, as it does for the global option
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    assert not parse_fio_json(json.dumps(doc)).group_reporting
    doc.setdefault("global options", {}).pop("group_reporting", None)
    doc["jobs"][0].setdefault("job options", {})["group_reporting"] = "0"
    assert not parse_fio_json(json.dumps(doc)).group_reporting
    doc["jobs"][0]["job options"]["group_reporting"] = "1"  # as fio writes a set flag (fio-01.json's global options)
    assert parse_fio_json(json.dumps(doc)).group_reporting


def test_fio_json_duplicate_keys_kept(fixtures_dir):
    rep = parse_fio((fixtures_dir / "fio" / "fio-02.json").read_text())
    (job,) = rep.jobs
    assert job.paths == ["/home/user/VirtualClient/linux-x64/remote_disk_1_0/fio-test.dat",
                         "/home/user/VirtualClient/linux-x64/remote_disk_1_1/fio-test.dat"]
    assert job.option("filename").endswith("remote_disk_1_1/fio-test.dat")  # fio: the last one wins
    assert job.write.bw_bytes_per_s == 192599430 and job.write.p99_source == "clat_ns" and not job.read.active
    assert [d["name"] for d in rep.disk_util] == ["sdd", "sdc"]


def test_fio_text_before_json_and_clones_merged(fixtures_dir):
    doc = json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())
    clone = json.loads(json.dumps(doc["jobs"][0]))
    doc["jobs"].append(clone)  # numjobs=2 without group_reporting: two entries, same name
    text = ("seq-write: (g=0): rw=write, bs=(R) 256KiB-256KiB, (W) 256KiB-256KiB, ioengine=libaio, iodepth=64\n"
            "fio-3.26\nStarting 2 processes\n" + json.dumps(doc, indent=1) + "\n")
    rep = parse_fio_json(text)
    (job,) = rep.jobs
    assert job.clones == 2 and job.write.bw_bytes_per_s == 2 * 192599430
    assert job.write.iops == pytest.approx(2 * 734.70852)
    # the clones' mean latency is weighted by their I/Os: 4096 at 87.06 ms and 12288 at 20 ms
    clone["write"]["total_ios"] = 12288
    clone["write"]["lat_ns"]["mean"] = 20e6
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert job.write.total_ios == 16384
    assert job.write.lat_mean_ns == pytest.approx((87058217.758301 * 4096 + 20e6 * 12288) / 16384)


def test_fio_verify_failure_text(fixtures_dir):
    rep = parse_fio((fixtures_dir / "fio" / "fio-04.txt").read_text())
    assert rep.fmt == "text" and not rep.jobs
    (v,) = rep.verify_failures
    assert (v.kind, v.file, v.offset, v.length) == ("sha256", "fio_randwrite_1GB_32k_d1_th1_direct.0.0", 668565504, 32768)


FIO_TEXT = """seq-read: (g=0): rw=read, bs=(R) 1024KiB-1024KiB, (W) 1024KiB-1024KiB, (T) 1024KiB-1024KiB, ioengine=libaio, iodepth=32
fio-3.33
Starting 1 process
seq-read: Laying out IO file (1 file / 4096MiB)

seq-read: (groupid=0, jobs=1): err= 0: pid=4242: Mon Jan  6 10:00:00 2025
  read: IOPS=2694, BW=2694MiB/s (2825MB/s)(15.8GiB/6001msec)
    slat (usec): min=10, max=200, avg=20.50, stdev=5.10
    clat (usec): min=900, max=25000, avg=11850.00, stdev=800.00
     lat (usec): min=920, max=25010, avg=11870.40, stdev=801.00
  cpu          : usr=0.50%, sys=10.00%, ctx=16000, majf=0, minf=8200

Run status group 0 (all jobs):
   READ: bw=2694MiB/s (2825MB/s), 2694MiB/s-2694MiB/s (2825MB/s-2825MB/s), io=15.8GiB (16.9GB), run=6001-6001msec

Disk stats (read/write):
  nvme0n1: ios=16100/0, sectors=32972800/0, merge=0/0, ticks=190000/0, in_queue=190000, util=99.50%
"""


def test_fio_text_reads_past_a_line_too_long_to_parse():
    # a line over MAX_LINE_CHARS (16384) is skipped and named, and the job after it still read
    from validate.parsers.bounds import collecting_unread

    with collecting_unread() as notes:
        (job,) = parse_fio_text("x" * 20000 + "\n" + FIO_TEXT).jobs
    assert job.read.iops == 2694
    assert notes == [("1 line(s) longer than 16,384 characters not read (the first is line 1): no benchmark prints "
                      "such lines")]


def test_fio_normal_text_output():
    rep = parse_fio_text(FIO_TEXT)
    (job,) = rep.jobs
    assert job.name == "seq-read" and job.rw == "read" and job.block_size == 1024**2
    assert job.read.bw_bytes_per_s == 2825e6 and job.read.iops == 2694
    assert job.read.lat_mean_ns == pytest.approx(11870.4e3) and not job.write.active
    assert parse_fio(FIO_TEXT).jobs[0].read.bw_bytes_per_s == 2825e6


def test_fio_group_status_only_and_units():
    text = "Run status group 0 (all jobs):\n  WRITE: bw=1953MiB/s (2048MB/s), io=10GiB, run=5000-5000msec\n"
    rep = parse_fio_text(text)
    (job,) = rep.jobs
    assert job.write.bw_bytes_per_s == 2048e6
    # only group totals: the report reads as group reporting (its job is the group, not one of fio's jobs)
    assert rep.group_reporting and job.name == "group 0"
    # a group line with one rate only (no decimal rate in parentheses): that rate in its own unit
    text = "Run status group 0 (all jobs):\n   READ: bw=1953MiB/s, 1953MiB/s-1953MiB/s, io=10GiB, run=5000-5000msec\n"
    (job,) = parse_fio_text(text).jobs
    assert job.read.bw_bytes_per_s == 1953 * 1024**2
    assert parse_size("4k") == 4096 and parse_size("1M") == 1024**2 and parse_size("256KiB") == 262144
    assert parse_size("4k,1m") == 4096 and parse_size("junk") is None
    # fio's size suffixes are powers of 1024 by default (kb_base=1024), up to peta: every one at its own power
    assert [parse_size(f"3{u}") for u in "bkmgtp"] == [3] + [3 * 1024**i for i in range(1, 6)]


# ---- AMP ------------------------------------------------------------------------------------

AMP_DOC = {
    "kind": "amp", "version": 1, "device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
    "precision": "bf16", "compile": True,
    "model": {"layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 50304, "parameters": 1313873920},
    "batch_size": 8, "steps": 30, "tokens_per_s": 63900.0, "step_time_s": 0.2564, "model_tflops": 580.0,
    "peak_tflops": 989.0, "mfu": 0.586, "peak_memory_bytes": 54 * 10**9, "loss_start": 10.9, "loss_end": 7.2,
    "losses": [10.9, 9.1, 8.0, 7.2], "fp32_baseline": {"tokens_per_s": 9000.0, "step_time_s": 1.8,
                                                       "loss_start": 10.9, "loss_end": 7.3}, "error": None,
}


def test_amp_json_with_text_around_and_non_finite_values():
    doc = dict(AMP_DOC, losses=[10.9, float("nan")], loss_end="nan")
    text = "UserWarning: something\n" + json.dumps(doc) + "\n" + json.dumps(dict(AMP_DOC, host="node-2")) + "\n"
    a, b = parse_amp(text)
    assert a.precision == "bf16" and a.model.parameters == 1313873920 and math.isnan(a.losses[1])
    assert math.isnan(a.loss_end) and b.host == "node-2"
    assert a.speedup_vs_fp32 == pytest.approx(63900 / 9000)
    assert a.model.flops_per_token == 6 * 1313873920 + 12 * 24 * 2048 * 2048
    with pytest.raises(ValueError):
        parse_amp('{"kind": "other"}')


@pytest.mark.parametrize(("run", "baseline"), [(63900.0, 0.0), (None, 9000.0), (63900.0, None)])
def test_amp_speedup_needs_both_rates(run, baseline):
    # no speed-up from a baseline that measured nothing (0 tokens/s: a division by zero) or a run without a rate
    # (kills `... or self.tokens_per_s is None` -> `and`)
    (a,) = parse_amp(json.dumps(dict(AMP_DOC, tokens_per_s=run, fp32_baseline=dict(AMP_DOC["fp32_baseline"],
                                                                                   tokens_per_s=baseline))))
    assert a.speedup_vs_fp32 is None


# ---- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,kind", [
    ("nccl-tests/nccl-01.txt", "nccl"), ("nccl-tests/nccl-04.txt", "nccl"), ("nccl-tests/nccl-12.txt", "nccl"),
    ("nccl-tests/nccl-13.txt", "nccl"), ("fio/fio-01.json", "fio"), ("fio/fio-02.json", "fio"),
    ("fio/fio-04.txt", "fio"),
])
def test_detect_fixture_kinds(fixtures_dir, name, kind):
    assert detect_kind((fixtures_dir / name).read_text(), name) == kind


def test_detect_other_kinds():
    assert detect_kind(json.dumps(AMP_DOC)) == "amp"
    assert detect_kind(json.dumps(_json_doc())) == "nccl"
    assert detect_kind(FIO_TEXT) == "fio"
    assert detect_kind("apiVersion: apps/v1\nkind: Deployment\n") is None
    assert detect_kind("") is None


# ---- robustness: odd input never raises -----------------------------------------------------

_FRAGMENTS = [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
    "# Using devices", "#  Rank  0 Group  0 Pid 1 on node-1 device  0 [0x0f] NVIDIA A100-SXM4-40GB",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "           8             2     float     sum      -1    36.47    0.00    0.00      0    34.74    0.00    0.00      0",
    "     1048576        262144     float     sum      -1   1.0e+04   N/A    nan   1.04858e+06    99.1  12.41  23.27    N/A",
    "# Out of bounds values : 4 FAILED", "# Avg bus bandwidth    : nan", "# Collective test concluded: all_reduce_perf",
    " .. node-1 pid 1: Test failure common.cu:1189", "0: ", "[1,0]<stdout>: ", "{", '"jobs": [', "}",
    "sha256: verify failed at file f.0.0 offset 12, length 4096", "read: IOPS=1.2k, BW=4MiB/s (4.2MB/s)",
    "seq: (groupid=0, jobs=1): err= 0: pid=1", "Run status group 0 (all jobs):",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=40)), max_size=30),
       st.sampled_from(["", "0: ", "[0] "]))
def test_parsers_never_raise_on_odd_text(lines, prefix):
    from validate.expectations import JudgeContext
    from validate.judge import judge_text

    text = "\n".join(prefix + ln for ln in lines)
    parse_nccl(text)
    parse_fio(text)
    detect_kind(text)
    for kind in ("nccl", "fio", "amp"):
        for r in judge_text(text, JudgeContext(), source="fuzz.txt", kind=kind):
            assert r.verdict in ("pass", "warn", "fail", "invalid")
            json.dumps(r.to_json())


# ---- NCCL INFO lines, interleaved launcher output, excerpts ----------------------------------

INFO = """node-1:11:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [2]mlx5_2:1/IB [RO]; OOB ib0:10.0.0.1<0>
node-1:11:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
node-1:11:40 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/2
node-2:12:41 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [send] via NET/IB/1/GDRDMA/Shared
node-1:11:40 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read
node-1:11:40 [0] NCCL INFO Channel 02 : 0[0] -> 1[1] via SHM/direct/direct
gpu2:2144:2556 [2] NCCL INFO Ring 00 : 2[3d000] -> 3[3e000] via direct shared memory
node-3:13:13 [0] NCCL INFO Channel 00/0 : 16[0] -> 0[0] [receive] via NET/Socket/0
node-4:14:14 [0] NCCL INFO Channel 00/0 : 24[0] -> 0[0] [send] via NET/AWS Libfabric/3/GDRDMA
node-4:14:14 [0] NCCL INFO NET/OFI Selected Provider is efa, fabric is efa-direct (found 32 nics)
node-1:11:11 [0] NCCL INFO comm 0x55 rank 0 nranks 16 cudaDev 0 busId 1c000 - Init COMPLETE
"""


def test_net_usage_reads_transport_nic_and_gdr_per_channel():
    u = net_usage(INFO.splitlines())
    assert u.channel_lines == 8
    assert u.transports == {"NET/IB": 3, "P2P": 1, "SHM": 2, "NET/Socket": 1, "NET/AWS Libfabric": 1}
    assert u.nics_used == {"node-1": {0, 2}, "node-2": {1}, "node-3": {0}, "node-4": {3}}
    assert u.gdr["node-1"] == [1, 1] and u.gdr["node-2"] == [1, 0]
    assert u.nics_listed == 3 and u.nic_names == {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_2"} and u.nics_found == 32
    assert u.net_transports[0] == "NET/IB"
    assert net_usage(["no nccl here", "# Avg bus bandwidth : 1"]).channel_lines == 0
    # a launcher's line and an INFO line that says " via " but is no channel line are passed over, not the end of
    # the reading
    odd = "node-1:11:11 [0] NCCL INFO Connected all rings via a path no channel regex knows"
    assert net_usage(["srun: launching", odd, *INFO.splitlines()]).channel_lines == 8
    # NCCL lists the socket interfaces too (its bootstrap and the Socket transport); the IB list names the NICs
    sock = "node-1:11:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"
    for lines in ([INFO.splitlines()[0], sock], [sock, INFO.splitlines()[0]]):
        u = net_usage(lines)
        assert u.nics_listed == 3 and u.nic_names == {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_2"}, lines


def test_every_non_table_line_is_kept_for_the_judge(fixtures_dir):
    text = _nccl(fixtures_dir, "nccl-09.txt")
    text = text.replace("# Using devices", "node-1:1:1 [0] misc/shmutils.cc:71 NCCL WARN Error: failed to extend "
                        "/dev/shm/nccl-x to 9637892 bytes\nsome launcher message\n# Using devices", 1)
    (run,) = parse_nccl(text)
    assert any("failed to extend /dev/shm" in ln for ln in run.log_lines)
    assert "some launcher message" in run.log_lines and len(run.rows) == 31
    # the table's heading lines (placements, units) are the table, not log output
    assert not any(ln.split()[0] in ("(B)", "out-of-place") for ln in run.log_lines if ln.split())


@pytest.mark.parametrize("tag", ["[1,{r}]<stdout>:", "{r}: ", "[{r}] "])
@pytest.mark.parametrize("seed", range(4))
def test_launcher_tags_inside_a_line(fixtures_dir, tag, seed):
    """Rows cut at a random place by another rank's line parse as if the output were clean."""
    import random

    clean = parse_nccl(_nccl(fixtures_dir, "nccl-09.txt"))[0]
    rnd = random.Random(seed)
    out = []
    for ln in _nccl(fixtures_dir, "nccl-09.txt").splitlines():
        if re.match(r"^\s*\d+\s+\d+\s+float", ln) and rnd.random() < 0.6:
            cut = rnd.choice([m.start() for m in re.finditer(r"\s\S", ln)][1:])
            other = rnd.choice(["node-2:7:7 [1] NCCL INFO Channel 02/0 : 9[1] -> 1[1] via NET/IB/1/GDRDMA",
                                "#  Rank 12 Group  0 Pid 99 on node-2 device  4 [0x07] NVIDIA A100-SXM4-40GB"])
            out.append(tag.format(r=0) + ln[:cut] + tag.format(r=1) + other)
            out.append(tag.format(r=0) + ln[cut:])
        else:
            out.append(tag.format(r=0) + ln)
    (run,) = [r for r in parse_nccl("\n".join(out)) if r.rows]
    assert [(r.size_bytes, r.busbw_gbps) for r in run.rows] == [(r.size_bytes, r.busbw_gbps) for r in clean.rows]
    assert run.ranks == 16 and run.collective == "all_reduce"


@pytest.mark.parametrize("n", [3, 4, 8, 12, 16, 24, 32, 64, 128])  # 2 ranks: busbw = algbw, the table says sendrecv
def test_all_reduce_ranks_follow_from_busbw_over_algbw(n):
    f = 2 * (n - 1) / n
    rows = []
    for i, alg in enumerate((0.5, 3.1, 17.25, 64.4, 121.77, 190.02)):
        size = 2 ** (20 + i)
        rows.append(f"{size:12d} {size // 4:12d}    float    sum    -1   {size / alg / 1e3:8.1f}  {alg:6.2f}  {alg * f:6.2f}"
                    f"      0   {size / alg / 1e3:8.1f}  {alg:6.2f}  {alg * f:6.2f}      0")
    (run,) = parse_nccl_text("\n".join(rows))
    assert run.collective == "all_reduce" and run.inferred_ranks() == n


def test_rank_count_is_not_guessed_when_the_precision_does_not_allow_it():
    # algbw 0.05 GB/s printed with two decimals cannot tell 16 from 17 ranks
    rows = "   1048576  262144  float  sum  -1  20000.0  0.05  0.09  0  20000.0  0.05  0.09  0\n"
    (run,) = parse_nccl_text(rows)
    assert run.inferred_ranks() is None


# nccl-tests' data types and their element sizes in bytes (src/common.cu test_typenames, nccl.h ncclDataType_t: int8/char,
# uint8 1; int32/int, uint32 4; int64, uint64 8; half/float16 2; float/float32 4; double/float64 8; bfloat16 2; f8e4m3,
# f8e5m2 1), and the short names the torch benchmark and users print (fp16, bf16, fp8_e4m3, fp8_e5m2)
TYPE_SIZES = {"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float": 4, "float32": 4, "double": 8,
              "float64": 8, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@pytest.mark.parametrize(("dtype", "size"), sorted(TYPE_SIZES.items()))
def test_all_gather_sizes_give_the_ranks_for_every_data_type(dtype, size):
    # an all_gather row's size is count x element size x ranks (nccl-tests src/all_gather.cc); the bandwidths are
    # too small for busbw / algbw, so only the element size can give the 4 ranks
    rows = "".join(f"{count * size * 4:10d} {count:8d} {dtype:>9} none -1  30.0  0.01  0.01  0  30.0  0.01  0.01  0\n"
                   for count in (8, 16, 32))
    (run,) = parse_nccl_text("# Collective test starting: all_gather_perf\n" + rows)
    assert run.inferred_ranks() == 4


def test_sendrecv_and_reduce_are_not_told_apart_without_a_root_column():
    # busbw = algbw and no root printed (a pre-2.13 table without header): read as sendrecv, reduce left as the other
    # candidate (a root >= 0 would make it reduce)
    rows = "".join(f"{n * 4:10d} {n:8d} float sum  {t:.1f}  {n * 4 / t / 1e3:.2f}  {n * 4 / t / 1e3:.2f}  0  "
                   f"{t:.1f}  {n * 4 / t / 1e3:.2f}  {n * 4 / t / 1e3:.2f}  0\n"
                   for n, t in ((262144, 40.0), (1048576, 90.0), (4194304, 260.0)))
    (run,) = parse_nccl_text(rows)
    assert run.collective == "sendrecv" and run.candidates == ["sendrecv", "reduce"]


def _headerless(rows: list[tuple[int, int, str, float, float]]) -> str:
    """Table rows (size, count, redop, algbw, busbw) with both placements equal and no header: the collective must
    come from the table itself."""
    return "".join(f"{size:12d} {count:12d}  float  {op}  -1  100.0  {alg:.2f}  {bus:.2f}  0  100.0  {alg:.2f}  {bus:.2f}  0\n"
                   for size, count, op, alg, bus in rows)


def test_a_large_all_gather_is_not_taken_for_sendrecv():
    # all_gather on 64 ranks: busbw / algbw = 63/64 = 0.984, within 2 % of sendrecv's 1, but each row's size is
    # count x 4 B x 64 (the per-rank relation), so it is an all_gather or alltoall
    rows = [(c * 4 * 64, c, "none", alg, alg * 63 / 64) for c, alg in ((4096, 20.0), (65536, 120.0), (1048576, 180.0))]
    (run,) = parse_nccl_text(_headerless(rows))
    assert run.collective is None and run.candidates == ["all_gather", "alltoall"]
    assert run.inferred_ranks() == 64


def test_a_reduce_scatter_follows_from_its_reduction_and_ratio():
    # reduce_scatter on 8 ranks: busbw / algbw = 7/8 with a reduction op (sum)
    rows = [(c * 4 * 8, c, "sum", alg, alg * 7 / 8) for c, alg in ((4096, 20.0), (65536, 120.0), (1048576, 180.0))]
    (run,) = parse_nccl_text(_headerless(rows))
    assert run.collective == "reduce_scatter" and run.collective_from == "columns"


def test_rank_count_at_1000_gbps_allows_the_one_decimal_printed_there():
    # nccl-tests prints 6 characters (getFloatStr): 2 decimals below 1000 GB/s, 1 decimal from 1000 on. An all_reduce
    # on 8 ranks (busbw = 1.75 x algbw) whose top row printed algbw 1000.0 and busbw 1750.1 (true 1000.04, 1750.07)
    # is 8 ranks within that precision
    rows = [(2 ** 24, 2 ** 22, "sum", 400.0, 700.0), (2 ** 26, 2 ** 24, "sum", 800.0, 1400.0)]
    text = _headerless(rows) + (f"{2 ** 28:12d} {2 ** 26:12d}  float  sum  -1  100.0  1000.0  1750.1  0  "
                                "100.0  1000.0  1750.1  0\n")
    (run,) = parse_nccl_text(text)
    assert run.collective == "all_reduce" and run.inferred_ranks() == 8


def test_a_row_too_large_for_64_bits_keeps_each_placement(fixtures_dir):
    # a size of 2**64 bytes (a corrupted or hostile log) is kept apart from the 64-bit columns, placements intact
    rows = _headerless([(2 ** 20, 2 ** 18, "sum", 10.0, 17.5)])
    rows += f"{2 ** 64:12d} {2 ** 62:12d}  float  sum  -1  100.0  20.00  35.00  0  100.0  21.00  36.75  0\n"
    (run,) = parse_nccl_text(rows)
    assert run.rows[-1].size_bytes == 2 ** 64
    assert run.rows.values("busbw_gbps", "out-of-place") == [17.5, 35.0]
    assert run.rows.values("busbw_gbps", "in-place") == [17.5, 36.75]
    assert run.peak() == (36.75, 2 ** 64, "in-place")


@pytest.mark.parametrize("size", [2 ** 63 - 1, 2 ** 63])  # the largest int64, and one above it
def test_a_row_at_the_64_bit_limit_reads_back_whole(size):
    rows = _headerless([(2 ** 20, 2 ** 18, "sum", 10.0, 17.5)])
    rows += f"{size:12d} {2 ** 40:12d}  float  sum  -1  100.0  20.00  35.00  0  100.0  21.00  36.75  0\n"
    (run,) = parse_nccl_text(rows)
    assert run.rows[-1].size_bytes == size and run.rows[-1].busbw_gbps == 36.75


def test_rank_count_from_1000_gbps_on_tells_64_from_65_ranks():
    # from 1000 GB/s nccl-tests prints one decimal (tolerance 0.05 GB/s, not the 0.5 of 10000 GB/s and more):
    # enough to tell 2*63/64 = 1.96875 from 2*64/65 = 1.96923 at algbw 1000 and 1500 GB/s
    rows = [(2 ** 20, 2 ** 18, "sum", 10.0, 19.69), (2 ** 28, 2 ** 26, "sum", 1000.0, 1968.75), (2 ** 30, 2 ** 28, "sum", 1500.0, 2953.13)]
    text = "".join(f"{size:12d} {count:12d}  float  {op}  -1  100.0  {alg:.1f}  {bus:.1f}  0  100.0  {alg:.1f}  {bus:.1f}  0\n"
                   if alg >= 1000 else
                   f"{size:12d} {count:12d}  float  {op}  -1  100.0  {alg:.2f}  {bus:.2f}  0  100.0  {alg:.2f}  {bus:.2f}  0\n"
                   for size, count, op, alg, bus in rows)
    (run,) = parse_nccl_text(text)
    assert run.collective == "all_reduce" and run.inferred_ranks() == 64


def _nccl_tests_float(v: float) -> str:
    """How nccl-tests prints a bandwidth: getFloatStr(value, 6) in src/common.cu, six characters, as many decimals
    as fit (2 below 1000, 1 below 10000, none above)."""
    power = 1
    while v >= 10 ** power:
        power += 1
    return f"{v:.{max(0, 6 - power - 1)}f}"


@pytest.mark.parametrize(("algs", "ranks"), [
    ((9999.5,), 105),           # algbw printed with one decimal, busbw (19809) with none
    ((10000.0, 12000.0), 72),   # both printed without decimals: each within 0.5 GB/s
])
def test_rank_count_near_10000_gbps_uses_the_printed_precision(algs, ranks):
    # an all_reduce's busbw = algbw x 2(n-1)/n; a looser tolerance than the printing allows makes neighbouring rank
    # counts fit as well and the count unknown
    f = 2 * (ranks - 1) / ranks
    text = "".join(f"{2 ** (20 + i):12d} {2 ** (18 + i):12d}  float  sum  -1  100.0  {_nccl_tests_float(a)}  "
                   f"{_nccl_tests_float(a * f)}  0  100.0  {_nccl_tests_float(a)}  {_nccl_tests_float(a * f)}  0\n"
                   for i, a in enumerate(algs))
    (run,) = parse_nccl_text(text)
    assert run.collective == "all_reduce" and run.inferred_ranks() == ranks


def test_a_header_cut_after_its_root_column_is_not_a_crash():
    text = "#       size         count      type   redop    root\n" + _headerless([(2 ** 20, 2 ** 18, "sum", 10.0, 17.5)])
    runs = parse_nccl_text(text)
    assert runs and runs[0].columns == ["redop", "root"]


def test_in_place_only_rows_without_a_header_read_their_root():
    # rows that print the in-place half only (the out-of-place columns blank): root, then time algbw busbw #wrong
    rows = "".join(f"{c * 4:12d} {c:12d}  float  sum  -1  {c * 4 / alg / 1e3:.1f}  {alg:.2f}  {alg * 1.75:.2f}  0\n"
                   for c, alg in ((262144, 40.0), (1048576, 90.0)))
    (run,) = parse_nccl_text(rows)
    assert [(r.root, r.out_of_place, r.in_place.busbw_gbps) for r in run.rows] == [(-1, None, 70.0), (-1, None, 157.5)]


def test_a_headerless_table_of_an_unknown_type_is_named_from_its_ratio(fixtures_dir):
    # no element size for the type: the per-rank size relation cannot be checked, busbw / algbw = 1.75 still says
    # all_reduce
    rows = [(2 ** 20, 2 ** 18, "sum", 10.0, 17.5), (2 ** 22, 2 ** 20, "sum", 40.0, 70.0)]
    (run,) = parse_nccl_text(_headerless(rows).replace(" float ", " mystery8 "))
    assert run.rows[0].dtype == "mystery8" and run.collective == "all_reduce"


@pytest.mark.parametrize(("name", "coll"), [("all_gather_perf.log", "all_gather"), ("allgather-16gpu.txt", "all_gather"),
                                          ("results/reduce_scatter.out", "reduce_scatter"), ("bcast.log", None)])
def test_the_file_name_names_a_headerless_table(name, coll):
    # rows alone (busbw = algbw x 7/8 fits all_gather, alltoall and reduce_scatter alike): the file name decides
    rows = [(c * 4 * 8, c, "none", alg, alg * 7 / 8) for c, alg in ((4096, 20.0), (65536, 120.0))]
    (run,) = parse_nccl(_headerless(rows), name)
    assert run.collective == coll and (coll is None or run.collective_from == "filename")


def test_a_tie_of_busbw_across_rows_names_the_first(fixtures_dir):
    rows = [(2 ** 20, 2 ** 18, "sum", 10.0, 17.5), (2 ** 22, 2 ** 20, "sum", 40.0, 70.0),
            (2 ** 24, 2 ** 22, "sum", 80.0, 140.0), (2 ** 26, 2 ** 24, "sum", 80.0, 140.0), (2 ** 28, 2 ** 26, "sum", 80.0, 140.0)]
    (run,) = parse_nccl_text(_headerless(rows))
    assert run.peak() == (140.0, 2 ** 24, "out-of-place")


def test_a_tie_of_busbw_names_the_out_of_place_placement_printed_first(fixtures_dir):
    last = "  8589934592    2147483648   float     sum    63896  134.44  235.26    N/A    63959  134.30  235.03    N/A"
    text = _nccl(fixtures_dir, "nccl-04.txt")
    assert last in text
    (run,) = parse_nccl(text.replace(last, last.replace("235.03", "235.26")))
    assert run.peak() == (235.26, 8589934592, "out-of-place")


def _nccl05_rows(fixtures_dir, max_size: int | None = None, dtype: str = "float") -> str:
    """nccl-05.txt's table rows alone (no header: the ranks must come from the table), up to ``max_size`` bytes."""
    rows = [ln for ln in _nccl(fixtures_dir, "nccl-05.txt").splitlines() if re.match(r"^\s*\d+\s+\d+\s+float\s", ln)]
    rows = [ln for ln in rows if max_size is None or int(ln.split()[0]) <= max_size]
    return "\n".join(ln.replace(" float ", f" {dtype} ") for ln in rows) + "\n"


def test_all_gather_ranks_follow_from_the_sizes_when_bandwidths_are_too_small(fixtures_dir):
    # a small-message sweep (-e 1K): algbw at most 0.03 GB/s, too coarse for busbw / algbw, but nccl-tests prints an
    # all_gather's size as count x 4 B x ranks (src/all_gather.cc): 32 B for 1 float on 8 GPUs
    (run,) = parse_nccl_text(_nccl05_rows(fixtures_dir, max_size=1024))
    assert max(r.algbw_gbps or 0 for r in run.rows) < 0.05
    (run,) = parse_nccl_text("# Collective test starting: all_gather_perf\n" + _nccl05_rows(fixtures_dir, 1024))
    assert run.collective == "all_gather" and run.inferred_ranks() == 8


def test_all_gather_ranks_follow_from_busbw_when_the_type_size_is_unknown(fixtures_dir):
    # no element size for the type: the (n-1)/n bus factor of all_gather (nccl-tests doc/PERFORMANCE.md) is left
    (run,) = parse_nccl_text("# Collective test starting: all_gather_perf\n"
                             + _nccl05_rows(fixtures_dir, dtype="mystery8"))
    assert run.collective == "all_gather" and run.rows[-1].dtype == "mystery8"
    assert run.inferred_ranks() == 8


def test_fio_defaults_and_buffered(fixtures_dir):
    doc = json.loads((fixtures_dir / "field" / "10-fio-buffered-read.json").read_text())
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert job.rw is None and job.rw_effective == "read" and job.block_size_effective == 4096
    assert job.buffered is True and job.direct is None and not job.random_effective
    doc["jobs"][0]["job options"].update({"direct": "1", "rw": "randread", "bs": "4k"})
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert job.buffered is False and job.random_effective
    doc["jobs"][0]["job options"]["buffered"] = "1"
    assert parse_fio_json(json.dumps(doc)).jobs[0].buffered is True
    # the text output lists no direct option: buffered is unknown, not assumed
    text = ("seq: (g=0): rw=read, bs=(R) 1024KiB-1024KiB, (W) 1024KiB-1024KiB, ioengine=libaio, iodepth=32\n"
            "seq: (groupid=0, jobs=1): err= 0: pid=42: Mon Apr  3 12:00:00 2017\n"
            "  read: IOPS=2861, BW=2861MiB/s (3000MB/s)(168GiB/60001msec)\n")
    (job,) = parse_fio_text(text).jobs
    assert job.buffered is None and job.rw == "read" and job.block_size == 2**20


def test_fio_job_line_without_the_decimal_rate_reads_the_binary_one():
    # fio prints the decimal rate in parentheses after BW=; without it (a cut or edited line) the binary one counts
    rep = parse_fio_text(FIO_TEXT.replace("BW=2694MiB/s (2825MB/s)(15.8GiB/6001msec)", "BW=2694MiB/s"))
    assert rep.jobs[0].read.bw_bytes_per_s == 2694 * 2**20


def test_detection_window_keeps_texts_up_to_twice_its_size_whole():
    # outputs longer than twice WINDOW_BYTES (256 Ki characters) are cut to their first and last WINDOW_BYTES; up to
    # that, whole. The one character at index WINDOW_BYTES is the first a cut drops.
    from validate.parsers.detect import WINDOW_BYTES, window

    assert WINDOW_BYTES == 256 * 1024
    for length, whole in ((2 * WINDOW_BYTES, True), (2 * WINDOW_BYTES + 1, False)):
        text = list(("x" * 79 + "\n") * (length // 80 + 1))[:length]
        text[WINDOW_BYTES] = "Z"
        assert ("Z" in window("".join(text))) == whole, length


def test_an_excerpt_of_a_file_up_to_two_windows_is_the_whole_text(tmp_path):
    # a file of at most 2 x WINDOW_BYTES is read whole; a bigger one as its first and last window joined by a newline
    from validate.parsers.detect import WINDOW_BYTES, open_raw

    p = tmp_path / "out.log"
    lines = [f"line {i:07d}\n" for i in range(2 * WINDOW_BYTES // 13)]
    text = "".join(lines)
    assert WINDOW_BYTES + 2 < len(text) <= 2 * WINDOW_BYTES
    p.write_text(text)
    assert open_raw(p).excerpt() == text
    exact = "x" * (2 * WINDOW_BYTES - 1) + "\n"  # the edge: exactly two windows is still whole (no newline added)
    p.write_text(exact)
    assert open_raw(p).excerpt() == exact
    p.write_text(text + "tail\n" * 1000)
    big = open_raw(p).excerpt()
    assert len(big) == 2 * WINDOW_BYTES + 1 and big.endswith("tail\n") and big.startswith("line 0000000\n")


def test_a_non_utf8_file_of_backspaces_is_binary(tmp_path):
    # control characters other than tab, newline, vertical tab, form feed and carriage return (9-13) mark binary
    # data in a file that is not UTF-8; backspace (8) is one of them
    from validate.parsers.detect import NotText, open_raw

    p = tmp_path / "out.log"
    p.write_bytes(b"\xff header\n" + b"\x08" * 20 + b"a" * 980)
    with pytest.raises(NotText, match="binary data"):
        open_raw(p)
    p.write_bytes(b"\xff header\n" + b"\t\n\x0b\x0c\r" * 4 + b"a" * 980)
    assert open_raw(p).encoding == "latin-1"
    # the edges of the allowed run: shift out (14) and unit separator (31) are control characters, as backspace is
    for ctrl in (b"\x0e", b"\x1f"):
        p.write_bytes(b"\xff header\n" + ctrl * 20 + b"a" * 980)
        with pytest.raises(NotText, match="binary data"):
            open_raw(p)


def test_fio2_job_line_rates_are_binary_units():
    # fio 2 prints `read : io=..., bw=...KB/s, iops=...` with KB meaning 1024 bytes (fio's HOWTO, kb_base: 1024 is
    # the default; fio 3 prints KiB for those and kB for 1000)
    for bw, unit, factor in (("2758656", "KB/s", 1024), ("2694.0", "MB/s", 1024**2), ("2825000000", "B/s", 1)):
        text = FIO_TEXT.replace("  read: IOPS=2694, BW=2694MiB/s (2825MB/s)(15.8GiB/6001msec)",
                                f"  read : io=15.8GB, bw={bw}{unit}, iops=2694")
        (job,) = parse_fio_text(text).jobs
        assert (job.read.bw_bytes_per_s, job.read.iops) == (float(bw) * factor, 2694), unit


def test_a_latin1_byte_past_the_first_64_kib_makes_the_file_latin1(tmp_path):
    # the UTF-8 check reads the whole file (in 1 MiB pieces after the first 64 KiB), not only its head: a log whose
    # one Latin-1 byte (`\xb5s`, a microsecond unit some tools print in ISO-8859-1) comes after 100 KiB of ASCII is read
    # as Latin-1, so the character survives instead of failing the decode later
    from validate.parsers.detect import open_raw, read_text

    p = tmp_path / "out.log"
    p.write_bytes((b"x" * 79 + b"\n") * 1280 + b"avg lat 12 \xb5s\n")
    assert open_raw(p).encoding == "latin-1"
    assert read_text(p).endswith("avg lat 12 \u00b5s\n")


@pytest.mark.parametrize("extra, says", [(0, "binary data (NUL bytes)"), (1, "over 256 MiB")])
def test_an_input_over_256_mib_is_refused_by_its_size(tmp_path, extra, says):
    # the raw-output limit is 256 MiB (MAX_INPUT_CHARS, "Most characters of one raw output ... that are read (256 Mi)");
    # the size is read from the file system before any byte is (a sparse file of zeros: NUL bytes when read)
    from validate.parsers.detect import NotText, open_raw

    p = tmp_path / "big.log"
    with open(p, "wb") as f:
        f.truncate(256 * 1024 * 1024 + extra)
    with pytest.raises(NotText) as e:
        open_raw(p)
    assert says in str(e.value) and str(e.value).startswith(f"{p}: ")


@pytest.mark.parametrize("key, p99", [("clat_us", 2244.608), ("lat_us", 2244.608), ("clat_ms", 2.244608)])
def test_fio_json_p99_in_microseconds_or_milliseconds_is_read_in_nanoseconds(fixtures_dir, key, p99):
    # fio's JSON names each latency block by its unit (`clat_ns` since fio 3.0; `clat_us` / `lat_ms` blocks in older
    # output and in --output-format=json+ of some builds): 2,244.608 us and 2.244608 ms are both 2,244,608 ns
    doc = json.loads((fixtures_dir / "fio" / "fio-01.json").read_text())
    for d in ("read", "write"):
        io = doc["jobs"][0][d]
        for k in ("clat_ns", "lat_ns", "slat_ns"):
            io.pop(k, None)
        io[key] = {"percentile": {"99.000000": p99}}
    (job,) = parse_fio(json.dumps(doc)).jobs
    assert job.read.p99_source == key and job.read.p99_ns == pytest.approx(2244608)


def test_fio_text_job_header_group_id_is_the_groupid_not_the_job_count():
    # `name: (groupid=G, jobs=N): err= E: pid=P`: the job's reporting group is G (fio's HOWTO, "Interpreting the output")
    text = FIO_TEXT.replace("seq-read: (groupid=0, jobs=1): err= 0:", "seq-read: (groupid=2, jobs=4): err= 0:")
    (job,) = parse_fio_text(text).jobs
    assert job.groupid == 2 and job.error == 0


def test_amp_true_or_false_is_not_a_number():
    # JSON booleans are not numbers (Python's bool is an int: float(True) == 1.0): a document that says `"mfu": true`
    # has no MFU figure rather than an MFU of 100 %
    (run,) = parse_amp(json.dumps(dict(AMP_DOC, mfu=True, tokens_per_s=False)))
    assert run.mfu is None and run.tokens_per_s is None


def test_the_detection_window_of_a_short_text_is_the_text():
    # texts up to twice WINDOW_BYTES are searched whole, once (blank lines aside): nothing is repeated
    from validate.parsers.detect import window

    text = "# nccl-tests\n#  Rank  0 Group  0 Pid 1 on node-1 device  0 [0x1b] NVIDIA H100 80GB HBM3\n"
    assert window(text) == text
    assert window("a\n\n\nb\n") == "a\nb\n"


def test_fio_json_without_bw_bytes_reads_bw_in_kib(fixtures_dir):
    # before `bw_bytes` (fio 3.x JSON), a direction's `bw` was the only rate, in KiB/s (fio HOWTO, "bw" in the JSON
    # output is KiB/s): 340,570 KiB/s are 348,743,680 bytes/s
    doc = json.loads((fixtures_dir / "fio" / "fio-01.json").read_text())
    read = doc["jobs"][0]["read"]
    read.pop("bw_bytes")
    read["bw"] = 340570
    (job,) = parse_fio(json.dumps(doc)).jobs
    assert job.read.bw_bytes_per_s == 340570 * 1024


def test_lspci_without_the_domain_is_read_in_domain_0000():
    # `lspci -vvv` without `-D` prints `1b:00.0`; the devices are keyed as sysfs names them, `0000:1b:00.0`
    from validate.parsers.node import parse_lspci

    text = ("1b:00.0 PCI bridge: PLX Technology, Inc. PEX 890xx PCIe Gen 5 Switch (rev b0)\n"
            "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n")
    dev = parse_lspci(text)
    assert list(dev) == ["0000:1b:00.0"] and dev["0000:1b:00.0"]["acs_ctl"]["SrcValid"] is True
