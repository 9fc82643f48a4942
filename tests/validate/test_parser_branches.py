"""Every branch of ``validate/parsers`` reached from the parsers' public entry points, with its outcome asserted
(issue 35: a mutant on any of these lines, a comparison flipped, a number changed, ``continue`` made ``break``,
``and`` made ``or``, an index moved, must fail a test).

Each test feeds input shaped like the real tool's output (nccl-tests' ``#`` header lines, table rows and footer
lines, its ``-J`` JSON as ``src/util.cu`` writes it, fio's JSON and normal text, NVSMI XML, ``nvidia-smi nvlink
-s``, ``lspci -vvv``, ``mlnx_qos``, ``/proc/self/limits``, containerd's ``config.toml``) and asserts what the line
does: the value read (GB/s are 1e9 bytes/s, busbw is not algbw, a row's busbw is the better placement), the failure
line kept, what is skipped and the note that says so. Where sensible the neighbouring input that takes the other
branch is asserted too. The branches were found by branch coverage of the "parsers" area's tests
(``tools/mutate.py``). Two tests pin fixes made on the way: SRAM uncorrectable ECC counters of the split
(``_parity``/``_secded``) NVSMI schema count, and a crash printed before a rerun is kept when every launcher
stream prints its own table.
"""

from __future__ import annotations

import json
import pickle

import pytest

from validate.parsers import bounds, nccl
from validate.parsers.amp import parse_amp
from validate.parsers.bounds import (
    MAX_JSON_DEPTH,
    JsonLimitError,
    clip_input,
    collecting_unread,
    loads,
    nesting_depth,
)
from validate.parsers.detect import open_raw
from validate.parsers.fio import command_line_options, parse_fio, parse_fio_json, parse_fio_text, parse_size
from validate.parsers.nccl import (
    Row,
    Rows,
    iter_curve,
    net_usage,
    normalize_collective,
    parse_nccl,
    parse_nccl_json,
    parse_nccl_text,
)
from validate.parsers.node import (
    parse_containerd_runtimes,
    parse_document,
    parse_findmnt,
    parse_ip_addr,
    parse_limits,
    parse_lspci,
    parse_mlnx_qos,
    parse_nvidia_smi_xml,
    parse_nvlink_status,
)

from .test_parsers import AMP_DOC, FIO_TEXT, _json_doc

# ---- nccl-tests text, as src/util.cu prints it ------------------------------------------------------------------

VERSION = "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703\n"
STARTING = "# Collective test starting: all_reduce_perf\n"
NTHREAD = ("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 1024(factor) warmup iters: 5 iters: 20 "
           "agg iters: 1 validation: 1 graph: 0\n")
DEVICES = "#\n# Using devices\n" + "".join(
    f"#  Rank {r:2d} Group  0 Pid {43 + r:6d} on     node-1 device {r:2d} [0000:{0x18 + r:02x}:00] NVIDIA H100 80GB HBM3\n"
    for r in range(8))
COLUMNS = ("#\n#                                                              out-of-place                       in-place\n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
           " #wrong\n"
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
ROW_1M = "     1048576        262144     float     sum      -1    28.41   36.91   64.59      0    27.95   37.52   65.66      0\n"
ROW_1G = "  1073741824     268435456     float     sum      -1   3976.5  270.02  472.53      0   3978.1  269.91  472.35      0\n"
FOOTER = ("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 268.783 \n#\n"
          "# Collective test concluded: all_reduce_perf\n")
LOG = VERSION + STARTING + NTHREAD + DEVICES + COLUMNS + ROW_1M + ROW_1G + FOOTER
"""An 8 x H100 all_reduce log of two sizes (1 MiB, 1 GiB), busbw = algbw x 2(8-1)/8 = 1.75 x algbw."""


def _one(text: str, filename: str | None = None) -> nccl.NcclRun:
    (run,) = parse_nccl_text(text, filename)
    return run


def _tag(text: str, stream: int | str) -> str:
    """``text`` as ``srun --label`` prints the lines of process ``stream``."""
    return "".join(f"{stream}: {line}\n" for line in text.splitlines())


# ---- AMP ----------------------------------------------------------------------------------------------------------


def test_amp_a_rate_written_as_a_word_a_list_or_a_number_too_large_for_a_float_is_not_a_number():
    # a string that is no number and an integer over float range (OverflowError) are None, a list is None; a
    # numeric string is the number, its blanks stripped
    doc = dict(AMP_DOC, tokens_per_s="fast", step_time_s=" 0.2564 ", gpu_count=10**400, steps=[30],
               peak_memory_bytes="54000000000")
    (run,) = parse_amp(json.dumps(doc))
    assert run.tokens_per_s is None and run.gpu_count is None and run.steps is None
    assert run.step_time_s == 0.2564 and run.peak_memory_bytes == 54 * 10**9
    assert run.speedup_vs_fp32 is None  # no AMP rate: nothing to compare with the fp32 baseline


def test_amp_flops_per_token_needs_every_term_of_6n_plus_12_l_d_t():
    (run,) = parse_amp(json.dumps(AMP_DOC))
    assert run.model.flops_per_token == 6.0 * 1313873920 + 12.0 * 24 * 2048 * 2048
    for missing in ("parameters", "layers", "hidden", "seq_len"):
        model = {k: v for k, v in AMP_DOC["model"].items() if k != missing}
        (run,) = parse_amp(json.dumps(dict(AMP_DOC, model=model)))
        assert run.model.flops_per_token is None, missing
    model = {k: v for k, v in AMP_DOC["model"].items() if k != "vocab"}  # not a term: still counted
    (run,) = parse_amp(json.dumps(dict(AMP_DOC, model=model)))
    assert run.model.flops_per_token == 6.0 * 1313873920 + 12.0 * 24 * 2048 * 2048


@pytest.mark.parametrize(("rate", "baseline"), [("NaN", 9000.0), (63900.0, "Infinity"), ("-Infinity", 9000.0)])
def test_amp_speedup_of_a_non_finite_rate_is_none(rate, baseline):
    doc = dict(AMP_DOC, tokens_per_s=rate, fp32_baseline=dict(AMP_DOC["fp32_baseline"], tokens_per_s=baseline))
    (run,) = parse_amp(json.dumps(doc))
    assert run.speedup_vs_fp32 is None
    (finite,) = parse_amp(json.dumps(AMP_DOC))
    assert finite.speedup_vs_fp32 == pytest.approx(63900.0 / 9000.0)  # AMP over fp32, not the inverse


def test_amp_a_list_of_documents_printed_with_indent_is_read_once():
    # the lines inside the list that start with `{` lie inside the document already read: not read again
    text = "rank 0 results:\n" + json.dumps([AMP_DOC, dict(AMP_DOC, host="node-2")], indent=2) + "\n"
    assert "\n  {\n" in text
    runs = parse_amp(text)
    assert [r.host for r in runs] == [None, "node-2"]


# ---- bounds -------------------------------------------------------------------------------------------------------


def test_a_json_limit_error_survives_pickling_with_its_one_line_message():
    with pytest.raises(JsonLimitError) as got:
        loads("[" * 70 + "]" * 70)
    back = pickle.loads(pickle.dumps(got.value))
    assert type(back) is JsonLimitError and back.reason == got.value.reason and str(back) == str(got.value)
    assert str(back) == f"JSON nested deeper than {MAX_JSON_DEPTH} levels: not read (line 1)"


def test_an_input_over_the_read_bound_is_cut_after_its_last_whole_line(monkeypatch):
    monkeypatch.setattr(bounds, "MAX_INPUT_CHARS", 20)
    text = "line one\nline two\nline three\n"  # 29 characters; the 20 read end inside "line three"
    with collecting_unread() as notes:
        assert clip_input(text) == "line one\nline two\n"
    assert notes == ["the output is 29 characters long: only the first 20 were read"]
    with collecting_unread() as notes:
        assert clip_input("x" * 30) == "x" * 20  # one line longer than the bound: its first 20 characters
        assert clip_input("y" * 20) == "y" * 20  # exactly the bound: whole, without a note
    assert notes == ["the output is 30 characters long: only the first 20 were read"]
    # a parser reads only what is kept: the 1 GiB row past the bound is not a row
    monkeypatch.setattr(bounds, "MAX_INPUT_CHARS", LOG.index(ROW_1G) + 10)
    assert [r.size_bytes for r in _one(LOG).rows] == [1048576]


@pytest.mark.parametrize(("left", "read"), [(256 + 512, False), (256 + 512 + 1, True)])
def test_an_attempt_that_spends_the_last_of_the_scan_budget_reads_no_further(left, read):
    # a 905-character document needs a third slice (256, 512, then 1024 characters); with exactly the first two
    # left in the budget the attempt ends there (None, budget spent, noted), with one character more it is read
    doc = "[" + "1, " * 300 + "1]"
    text = doc + " " * 2000
    budget = bounds.ScanBudget("")
    budget.left = left
    with collecting_unread() as notes:
        got = bounds.decode_at(json.JSONDecoder(), text, 0, budget)
    if read:
        assert got == ([1] * 301, len(doc)) and budget.left == left - 256 - 512 - 1024
    else:
        assert got is None and budget.left == 0 and budget.exhausted
    assert any("was not searched for documents" in n for n in notes)


def test_nesting_depth_counts_containers_and_a_scalar_is_zero():
    assert nesting_depth(5) == 0 and nesting_depth("x") == 0 and nesting_depth(None) == 0
    assert nesting_depth([]) == 1 and nesting_depth({"a": [1, {"b": []}]}) == 4


def test_a_document_with_a_number_too_long_to_read_is_skipped_with_a_note():
    # Python refuses integers of more than 4300 digits: that document is skipped (noted), the next one still read
    bad = json.dumps(dict(AMP_DOC, host="node-1"))[:-1] + ', "steps_total": 1' + "0" * 5000 + "}"
    with collecting_unread() as notes:
        (run,) = parse_amp(bad + "\n" + json.dumps(dict(AMP_DOC, host="node-2")) + "\n")
    assert run.host == "node-2"
    assert len(notes) == 1 and notes[0].startswith("AMP JSON: a document with a number too long to read was not read")


@pytest.mark.parametrize(("lists", "read"), [(MAX_JSON_DEPTH - 1, True), (MAX_JSON_DEPTH, False)])
def test_a_document_nested_one_level_over_the_bound_is_not_read(lists, read):
    # the document object is level 1: with 63 lists inside it nests 64 deep (read), with 64 lists 65 (not read)
    text = json.dumps(AMP_DOC)[:-1] + ', "trace": ' + "[" * lists + "]" * lists + "}\n"
    with collecting_unread() as notes:
        if read:
            assert parse_amp(text)[0].tokens_per_s == 63900.0
        else:
            with pytest.raises(ValueError):
                parse_amp(text)
    assert notes == ([] if read else [f"AMP JSON: a document nested deeper than {MAX_JSON_DEPTH} levels was not read"])


def test_a_json_text_with_a_number_too_long_to_read_is_refused_in_one_line():
    text = '{"version": 2, "config": {"nthreads": 1' + "0" * 5000 + "}, \"results\": []}"
    with collecting_unread() as notes, pytest.raises(ValueError, match="JSON number too long to read"):
        parse_nccl_json(text)
    assert len(notes) == 1 and notes[0].startswith("nccl-tests JSON: JSON number too long to read")
    with pytest.raises(JsonLimitError, match="JSON number too long to read"):
        loads(text)
    assert parse_nccl(text) == []  # read as text instead: nothing there
    assert parse_findmnt('{"filesystems": [{"target": "/", "size": 1' + "0" * 5000 + "}]}") == []


# ---- detect -------------------------------------------------------------------------------------------------------


def test_first_character_reads_past_a_blank_first_chunk_and_is_empty_for_a_blank_file(tmp_path):
    padded = tmp_path / "padded.json"
    padded.write_text(" " * 70_000 + "\n" + json.dumps(AMP_DOC))  # the first 64 KiB read are blanks only
    assert open_raw(padded).first_char() == "{"
    blank = tmp_path / "blank.log"
    blank.write_text(" \n\t\n" * 20_000)
    assert open_raw(blank).first_char() == ""
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert open_raw(empty).first_char() == ""


# ---- fio ----------------------------------------------------------------------------------------------------------


def test_fio_size_given_as_a_json_number_is_that_many_bytes():
    assert parse_size(4096) == 4096 and parse_size(1048576.0) == 1048576 and parse_size(None) is None
    assert parse_size("4096") == 4096


VERIFY_MAGIC = ("verify: bad magic header 0, wanted acca at file /mnt/nvme/verify.0.0 offset 1048576, length 4096 "
                "(requested block: offset=1048576, length=4096)")
VERIFY_CRC = "crc32c: verify failed at file /mnt/nvme/verify.0.0 offset 2097152, length 4096 (requested block: offset=2097152, length=4096, flags=88)"


def test_fio_other_verify_errors_are_failures_without_a_file_and_the_lines_after_them_are_read():
    rep = parse_fio_text(VERIFY_MAGIC + "\n" + VERIFY_CRC + "\n")
    first, second = rep.verify_failures
    assert (first.kind, first.file, first.offset, first.length, first.line) == ("verify", None, None, None, 1)
    assert first.text == VERIFY_MAGIC
    assert (second.kind, second.file, second.offset, second.length, second.line) == (
        "crc32c", "/mnt/nvme/verify.0.0", 2097152, 4096, 2)
    assert rep.errors == []  # a verify line is a verify failure, not also an error line


def test_fio_the_same_error_line_from_two_jobs_is_reported_once(fixtures_dir):
    err = "fio: pid=4242, err=5/file:io_u.c:1889, func=io_u error, error=Input/output error"
    text = err + "\n" + err + "\nfio: io_u error on file /mnt/nvme/fio.0.0: No space left on device: write offset=0\n"
    rep = parse_fio_text(text)
    assert rep.errors == ["err=5 in io_u error: Input/output error",
                          "io_u error on file /mnt/nvme/fio.0.0: No space left on device: write offset=0"]
    doc = (fixtures_dir / "fio" / "fio-02.json").read_text()
    assert parse_fio_json(text + doc).errors == rep.errors  # the same, read around a JSON document


def test_fio_json_an_option_repeated_three_times_keeps_every_value(fixtures_dir):
    text = (fixtures_dir / "fio" / "fio-02.json").read_text()
    second = '"filename" : "/home/user/VirtualClient/linux-x64/remote_disk_1_1/fio-test.dat"'
    assert second in text
    text = text.replace(second, second + ',\n        "filename" : "/mnt/disk2/fio-test.dat"')
    (job,) = parse_fio_json(text).jobs
    assert job.paths == ["/home/user/VirtualClient/linux-x64/remote_disk_1_0/fio-test.dat",
                         "/home/user/VirtualClient/linux-x64/remote_disk_1_1/fio-test.dat", "/mnt/disk2/fio-test.dat"]
    assert job.option("filename") == "/mnt/disk2/fio-test.dat"  # fio: the last one given wins


def _fio_doc(fixtures_dir) -> dict:
    return json.loads((fixtures_dir / "fio" / "fio-02.json").read_text())


def test_fio_json_a_direction_that_is_not_an_object_did_no_io(fixtures_dir):
    doc = _fio_doc(fixtures_dir)
    doc["jobs"][0]["trim"] = None
    doc["jobs"][0]["read"] = 0
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert not job.trim.active and job.trim.bw_bytes_per_s == 0.0 and not job.read.active
    assert job.write.bw_bytes_per_s == 192599430  # bytes/s, the direction that is an object


def test_fio_json_p99_comes_from_the_first_latency_block_that_has_a_99th_percentile(fixtures_dir):
    doc = _fio_doc(fixtures_dir)
    w = doc["jobs"][0]["write"]
    # --percentile_list=50:90 for completion latency; the total latency block (lat_percentiles=1) has the 99th
    w["clat_ns"]["percentile"] = {"50.000000": 100139008, "90.000000": 102236160}
    w["lat_ns"]["percentile"] = {"99.000000": 115000000}
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert (job.write.p99_ns, job.write.p99_source) == (115000000.0, "lat_ns")
    w["clat_ns"]["percentile"]["99.000000"] = 114819072  # both have one: the first (completion latency) wins
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert (job.write.p99_ns, job.write.p99_source) == (114819072.0, "clat_ns")
    del w["clat_ns"]["percentile"]["99.000000"], w["lat_ns"]["percentile"]
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert (job.write.p99_ns, job.write.p99_source) == (None, None)


def test_fio_json_entries_that_are_not_objects_are_skipped(fixtures_dir):
    doc = _fio_doc(fixtures_dir)
    doc["jobs"].insert(0, "disk_fill")
    doc["disk_util"].insert(0, None)
    rep = parse_fio_json(json.dumps(doc))
    assert [j.name for j in rep.jobs] == ["disk_fill"] and rep.jobs[0].write.bw_bytes_per_s == 192599430
    assert [d["name"] for d in rep.disk_util] == ["sdd", "sdc"]


def test_fio_json_a_json_log_line_before_the_fio_document_is_not_taken_for_it(fixtures_dir):
    # a structured log line (JSON, not fio's) starts a line before fio's document: the search goes on to the next
    text = '{"level": "info", "msg": "starting fio"}\n' + (fixtures_dir / "fio" / "fio-02.json").read_text()
    rep = parse_fio_json(text)
    assert rep.version == "fio-3.26-19-ge7e53" and [j.name for j in rep.jobs] == ["disk_fill"]
    with pytest.raises(ValueError, match="no fio JSON document found"):
        parse_fio_json('{"level": "info", "msg": "starting fio"}\n')


def test_fio_json_a_job_field_of_the_wrong_type_is_refused_in_one_line(fixtures_dir):
    doc = _fio_doc(fixtures_dir)
    doc["jobs"][0]["groupid"] = "zero"
    with pytest.raises(ValueError, match=r"^fio JSON with a field of the wrong type \(invalid literal"):
        parse_fio_json(json.dumps(doc))
    assert parse_fio(json.dumps(doc)).jobs == []  # read as text instead: no job line there


def test_fio_command_line_options_skip_job_files_separators_and_output_options():
    assert command_line_options("ls -l /mnt/nvme") == {}
    assert command_line_options("myfio --direct=1") == {}  # another program's name ending in fio
    line = "$ fio --output-format=json --output=/tmp/r.json seq-read.fio -- --direct=1 --size=4g"
    assert command_line_options(line) == {"direct": "1", "size": "4g"}
    # printed with the text output: the options the text does not show, and none of the output options
    (job,) = parse_fio_text(line + "\n" + FIO_TEXT).jobs
    assert job.command_line and job.direct is True and job.option("size") == "4g"
    assert job.option("output") is None and job.option("output_format") is None
    assert job.read.bw_bytes_per_s == 2825e6  # the decimal MB/s figure, 1e6 bytes/s


def test_fio_text_a_job_definition_cut_before_its_engine_gives_rw_and_bs_only():
    full = FIO_TEXT.splitlines()[0]
    cut = full[: full.index(", ioengine")]
    (job,) = parse_fio_text(FIO_TEXT.replace(full, cut)).jobs
    assert job.options == {"rw": "read", "bs": "1024KiB"} and job.block_size == 1024**2
    (job,) = parse_fio_text(FIO_TEXT).jobs
    assert job.options == {"rw": "read", "bs": "1024KiB", "ioengine": "libaio", "iodepth": "32"}


# ---- node-health tools ------------------------------------------------------------------------------------------

SMI_GPU = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<driver_version>550.90.07</driver_version>
	<cuda_version>12.4</cuda_version>
	<attached_gpus>1</attached_gpus>
	<gpu id="00000000:18:00.0">
		<product_name>NVIDIA H100 80GB HBM3</product_name>
		<persistence_mode>Enabled</persistence_mode>
		{ecc}
	</gpu>
</nvidia_smi_log>
"""
ECC = """<ecc_errors>
			<volatile>
				<sram_correctable>0</sram_correctable>
				<sram_uncorrectable_parity>1</sram_uncorrectable_parity>
				<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
				<dram_correctable>0</dram_correctable>
				<dram_uncorrectable>2</dram_uncorrectable>
			</volatile>
		</ecc_errors>"""


ECC_OLDER = {
    # before the SRAM counter was split by error kind
    "sram": "<sram_correctable>4</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>"
            "<dram_correctable>0</dram_correctable><dram_uncorrectable>2</dram_uncorrectable>",
    # pre-Ampere: single_bit (corrected) and double_bit (uncorrectable) blocks with their totals
    "double_bit": "<single_bit><device_memory>5</device_memory><total>5</total></single_bit>"
                  "<double_bit><device_memory>3</device_memory><register_file>0</register_file><total>3</total></double_bit>",
}


@pytest.mark.parametrize("schema", ["sram_parity_secded", "sram", "double_bit"])
def test_nvidia_smi_xml_uncorrectable_ecc_counts_every_uncorrectable_counter(schema):
    # nvidia-smi of the 550 driver (tests/fixtures/node/*/nvidia-smi-q-x.xml) splits SRAM uncorrectable errors into
    # sram_uncorrectable_parity and sram_uncorrectable_secded: both count, with dram_uncorrectable (1 + 0 + 2 here);
    # correctable ones never do
    ecc = ECC if schema == "sram_parity_secded" else f"<ecc_errors><volatile>{ECC_OLDER[schema]}</volatile></ecc_errors>"
    (gpu,) = parse_nvidia_smi_xml(SMI_GPU.replace("{ecc}", ecc))["gpus"]
    assert gpu["ecc_uncorrectable_volatile"] == 3


def test_nvidia_smi_xml_cut_short_is_not_read_and_a_gpu_without_ecc_counters_has_none():
    whole = SMI_GPU.replace("{ecc}", ECC)
    smi = parse_nvidia_smi_xml(whole)
    assert smi is not None and smi["driver_version"] == "550.90.07"
    (gpu,) = smi["gpus"]
    assert gpu["ecc_uncorrectable_volatile"] == 3 and gpu["ecc_uncorrectable_aggregate"] is None  # no aggregate block
    assert parse_nvidia_smi_xml(whole[: whole.index("</gpu>")]) is None  # output cut short: not well-formed
    (gpu,) = parse_nvidia_smi_xml(SMI_GPU.replace("{ecc}", ""))["gpus"]
    assert gpu["ecc_uncorrectable_volatile"] is None and gpu["bus_id"] == "00000000:18:00.0"


def test_nvlink_status_skips_over_long_lines_and_links_before_any_gpu():
    text = ("\t Link 0: 26.562 GB/s\n"  # no GPU line yet: belongs to none
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
            "\t Link 0: 26.562 GB/s\n"
            "\t Link 1: " + "x" * 20_000 + "\n"
            "\t Link 2: <inactive>\n"
            "\t Link 3: 26.562 GB/s\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n"
            "\t Link 0: <inactive>\n")
    assert parse_nvlink_status(text) == {0: {"up": 2, "inactive": 1}, 1: {"up": 0, "inactive": 1}}


def test_lspci_skips_over_long_lines_and_lines_before_the_first_device():
    text = ("pcilib: sysfs_read_vpd: read failed: Input/output error\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
            "0000:17:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)\n"
            "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ " + "x" * 20_000 + "\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n")
    (dev,) = parse_lspci(text).values()
    assert dev["acs_cap"]["ReqRedir"] is True and dev["acs_ctl"] == {
        "SrcValid": True, "TransBlk": False, "ReqRedir": False, "CmpltRedir": False, "UpstreamFwd": False,
        "EgressCtrl": False, "DirectTrans": False}


def test_findmnt_and_ip_addr_of_an_empty_or_broken_output_give_nothing():
    assert parse_findmnt("") == [] and parse_findmnt("findmnt: can't read /proc/self/mountinfo") == []
    assert parse_ip_addr("") == {} and parse_ip_addr('[{"ifname": "eth0", ') == {}
    assert parse_ip_addr('[{"ifname": "eth0", "addr_info": [{"local": "10.0.0.11", "prefixlen": 24}]}]') == {
        "eth0": ["10.0.0.11/24"]}


def test_mlnx_qos_skips_over_long_lines_and_is_none_without_any_setting():
    text = ("DCBX mode: OS controlled\n" + "Priority trust state: pcp " + "x" * 20_000 + "\n"
            "Priority trust state: dscp\n"
            "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\tenabled     0   0   0   1   0   0   0   0   \n")
    assert parse_mlnx_qos(text) == {"trust": "dscp", "pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp2prio": {}}
    assert parse_mlnx_qos("Netlink error: Operation not supported\n") is None
    assert parse_mlnx_qos("") is None


def test_limits_line_without_both_values_is_not_read():
    head = "Limit                     Soft Limit           Hard Limit           Units     \n"
    assert parse_limits(head + "Max locked memory         65536                65536                bytes     \n") == {
        "memlock_soft": 65536, "memlock_hard": 65536}
    assert parse_limits(head + "Max locked memory         unlimited\n") == {"memlock_soft": None, "memlock_hard": None}


CONTAINERD_V3 = """version = 3

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "nvidia"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
"""


def test_containerd_config_version_3_size_bound_and_broken_toml():
    assert parse_containerd_runtimes(CONTAINERD_V3) == {"default": "nvidia",
                                                        "runtimes": {"nvidia": "io.containerd.runc.v2"}}
    assert parse_containerd_runtimes('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n') == {
        "default": None, "runtimes": {}}
    assert parse_containerd_runtimes("version = 2\n[plugins\n") is None
    limit = 1024 * 1024
    padded = CONTAINERD_V3 + "#" * (limit - len(CONTAINERD_V3) - 1) + "\n"
    assert len(padded) == limit and parse_containerd_runtimes(padded)["default"] == "nvidia"
    assert parse_containerd_runtimes(padded + "\n") is None  # one character over 1 MiB: not read


def test_node_document_of_another_kind_is_refused_and_commands_not_objects_are_skipped():
    with pytest.raises(ValueError, match="not a node-health document"):
        parse_document({"kind": "amp"})
    facts = parse_document({"kind": "node-health", "host": "gpu-01", "commands": {
        "lspci": "not recorded", "findmnt": {"rc": 0, "stdout": '{"filesystems": []}'}}})
    assert list(facts.commands) == ["findmnt"] and facts.cmd("findmnt").ok and not facts.cmd("lspci").ran


# ---- nccl-tests: rows and the Rows sequence ---------------------------------------------------------------------

NULL_BODY = " " * 32  # writeBenchMarkLineNullBody: the out-of-place half printed blank (trace replay)


def test_an_in_place_only_row_has_one_placement_and_no_out_of_place_values():
    row_ip = "     2097152        524288     float     sum      -1" + NULL_BODY + "    49.86   42.06   73.61      0\n"
    run = _one(VERSION + NTHREAD + DEVICES + COLUMNS + ROW_1M + row_ip)
    full, ip_only = run.rows
    assert ip_only.out_of_place is None and [name for name, _ in ip_only.placements] == ["in-place"]
    assert ip_only.busbw_gbps == 73.61 and ip_only.algbw_gbps == 42.06 and ip_only.wrong == 0
    assert [name for name, _ in full.placements] == ["out-of-place", "in-place"]
    assert run.rows.values("busbw_gbps", "out-of-place") == [64.59, None]
    assert run.rows.values("busbw_gbps", "in-place") == [65.66, 73.61]
    assert list(iter_curve(run, "out-of-place")) == [(1048576, 64.59)]


def _row(size: int, busbw: float) -> Row:
    return Row(size, size // 4, "float", "sum", -1, nccl.Placement(10.0, busbw / 1.75, busbw, 0),
               nccl.Placement(10.0, busbw / 1.75, busbw, 0))


def test_rows_index_compare_and_repr_like_a_list():
    rows = Rows([_row(1024 * 2**k, 10.0 + k) for k in range(3)])
    assert rows[2].size_bytes == 4096 and rows[-3].size_bytes == 1024
    for bad in (3, -4):
        with pytest.raises(IndexError, match="row index out of range"):
            rows[bad]
    assert rows == list(rows) and rows == tuple(rows) and rows != list(rows)[:2]
    assert rows != "rows" and rows != 3 and (rows == {"a": 1}) is False
    assert repr(rows).startswith("Rows([Row(size_bytes=1024,")
    assert repr(Rows([_row(1024 * 2**k, 10.0) for k in range(9)])) == "Rows(<9 rows>)"
    assert repr(Rows([_row(1024 * 2**k, 10.0) for k in range(8)])).startswith("Rows([Row(")


def test_rows_sizes_keep_a_size_over_64_bits():
    rows = Rows([_row(1024, 10.0), _row(2**64, 20.0), _row(4096, 30.0)])
    assert rows.sizes() == [1024, 2**64, 4096]
    assert rows.peak() == (30.0, 4096, "out-of-place")


# ---- nccl-tests: lines of the text output -----------------------------------------------------------------------


def test_normalize_collective_of_nothing_is_none():
    assert normalize_collective("") is None and normalize_collective(None) is None
    assert normalize_collective("./build/all_reduce_perf") == "all_reduce"


@pytest.mark.parametrize("bad", [
    "     1048576        262144     float     sum     prod       -1    28.41   36.91   64.59      0    27.95   37.52   65.66      0",
    "     1048576        262144     float     sum      -1    28.41   36.91   6x.59      0    27.95   37.52   65.66      0",
    "     1048576        262144     float     sum     N/A    28.41   36.91   64.59      0    27.95   37.52   65.66      0",
], ids=["two-words-before-the-numbers", "garbled-busbw", "root-not-a-number"])
def test_a_line_shaped_like_a_row_that_is_not_one_is_kept_as_a_log_line(bad):
    run = _one(LOG.replace(ROW_1M, bad + "\n"))
    assert [r.size_bytes for r in run.rows] == [1073741824]
    assert bad.strip() in run.log_lines


def test_collective_test_starting_with_an_unknown_program_does_not_name_the_collective():
    run = _one(LOG.replace(STARTING, "# Collective test starting: my_bench\n").replace("all_reduce_perf", "my_bench"))
    assert run.collective == "all_reduce" and run.collective_from == "columns"  # busbw/algbw 1.75 > 1
    assert _one(LOG).collective_from == "header"
    crashed = _one(VERSION + "# Collective test starting: my_bench\n" + NTHREAD + DEVICES +
                   "Test CUDA failure common.cu:891 'out of memory'\n")
    assert (crashed.collective, crashed.collective_from, crashed.errors) == (
        None, None, ["Test CUDA failure common.cu:891 'out of memory'"])


def test_nthread_line_without_its_step_has_no_step_setting():
    cut = NTHREAD[: NTHREAD.index(" step:")] + "\n"
    run = _one(LOG.replace(NTHREAD, cut))
    assert run.config == {"nThread": 1, "nGpus": 1, "minBytes": 1048576, "maxBytes": 1073741824}
    assert _one(LOG).config["step_factor"] == 1024


@pytest.mark.parametrize(("line", "gbps", "check"), [
    ("# Avg bus bandwidth    : 268.783 \n", 268.783, None),
    ("# Avg bus bandwidth    : 268.783 OK\n", 268.783, "OK"),
    ("# Avg bus bandwidth    : -nan \n", None, None),  # %g of NaN (no row measured)
    ("# Avg bus bandwidth    : N/A \n", None, None),
    ("# Avg bus bandwidth    : n/a FAILED\n", None, "FAILED"),
    ("# Avg bus bandwidth    : 268,783 \n", None, None),
])
def test_avg_bus_bandwidth_that_is_not_a_number_is_none(line, gbps, check):
    run = _one(LOG.replace("# Avg bus bandwidth    : 268.783 \n", line))
    assert (run.avg_busbw_gbps, run.avg_busbw_check) == (gbps, check)
    assert run.stage == 6 and len(run.rows) == 2  # the footer line ends the table either way


def test_nccl_version_lines_inside_the_run_name_the_library_and_its_cuda():
    text = LOG.replace(DEVICES, DEVICES + "node-1:43:43 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                                          "node-1:44:44 [1] NCCL INFO NCCL version 2.21.5\n")
    run = _one(text)
    assert (run.nccl_version, run.nccl_cuda) == ("2.21.5", "12.4")  # a line without +cuda keeps the CUDA named
    assert _one(LOG).nccl_version == "2.27.3"  # nccl-library=22703
    old = _one(LOG.replace("nccl-library=22703", "nccl-library=2708"))
    assert old.nccl_version == "2.7.8"  # a code below 10000: X*1000 + Y*100 + Z


PROVIDER = "node-1:43:43 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n"
PLUGIN = "node-1:43:43 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"


@pytest.mark.parametrize("where", ["before-the-header", "inside-the-run"])
def test_ofi_provider_and_missing_net_plugin_lines_belong_to_the_run(where):
    text = PROVIDER + PLUGIN + LOG if where == "before-the-header" else LOG.replace(DEVICES, DEVICES + PROVIDER + PLUGIN)
    run = _one(text)
    assert run.net_provider == "efa" and run.net_plugin_missing is True
    plain = _one(LOG)
    assert plain.net_provider is None and plain.net_plugin_missing is False


@pytest.mark.parametrize("where", ["before-the-header", "inside-the-run"])
def test_a_repeated_fatal_nccl_warn_is_one_warning_and_one_error(where):
    warn = ("node-1:43:43 [0] init.cc:1141 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device "
            "18000\n")
    text = warn + warn + LOG if where == "before-the-header" else LOG.replace(DEVICES, DEVICES + warn + warn)
    run = _one(text)
    msg = "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 18000"
    assert run.warnings == [msg] and run.errors == [msg]


def test_the_other_streams_share_a_bounded_number_of_log_lines(monkeypatch):
    # five processes each print a table and 6 launcher lines; the first stream keeps MAX_LOG_LINES of its own, the
    # other four share 3 x MAX_LOG_LINES (here 5 and 15): the fifth stream's lines come after the shared ones are spent
    monkeypatch.setattr(nccl, "MAX_LOG_LINES", 5)
    body = NTHREAD + DEVICES.splitlines(keepends=True)[1] + DEVICES.splitlines(keepends=True)[2] + COLUMNS + ROW_1M
    text = "".join(_tag(body + "".join(f"launcher: step {k}\n" for k in range(6)), s) for s in range(5))
    runs = parse_nccl_text(text)
    assert len(runs) == 5 and all(r.duplicated_rank0 and r.duplicate_streams == 5 for r in runs)
    assert [len(r.log_lines) for r in runs] == [5, 5, 5, 5, 0]
    assert runs[0].log_lines == [f"launcher: step {k}" for k in range(5)]


def test_a_line_continued_past_the_length_bound_is_skipped_with_a_note():
    # rank 0's line cut by rank 1's tag (mpirun --tag-output) and continued on the next line: together over 16 Ki
    # characters, so the joined line is skipped and counted on the line where it started
    fatal = "Test NCCL failure common.cu:1005 'unhandled system error' "
    text = _tag(LOG, 0) + f"0: {fatal}{'a' * 10_000}[1,1]<stdout>:node-2 ready\n0: {'b' * 10_000}\n"
    with collecting_unread() as notes:
        run = _one(text)
    first = len(LOG.splitlines()) + 1
    note = f"1 line(s) longer than 16,384 characters not read (the first is line {first}): no benchmark prints such lines"
    assert notes == [note] and note in run.format_notes and run.errors == []
    short = _tag(LOG, 0) + f"0: {fatal}[1,1]<stdout>:node-2 ready\n0: {'b' * 10}\n"
    assert _one(short).errors == [fatal + "b" * 10]


def test_a_cut_line_still_open_when_the_log_ends_is_read_unless_over_the_length_bound():
    a = "Test NCCL failure common.cu:1005 'unhandled system error' "
    long_open = _tag(LOG, 0) + f"0: {a}{'a' * 10_000}[1,1]<stdout>:x\n0: {'b' * 10_000}[1,1]<stdout>:y\n"
    assert _one(long_open).errors == []
    short_open = _tag(LOG, 0) + f"0: {a}[1,1]<stdout>:x\n0: bb[1,1]<stdout>:y\n"
    assert _one(short_open).errors == [a + "bb"]


def test_a_crash_before_a_rerun_is_kept_when_every_process_prints_its_own_table():
    # a non-MPI build launched as two processes (srun --label): process 0 crashed once (its version line and the
    # failure), then both ran; the crash is a run of its own, as it is with one process
    fatal = "Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'"
    crash = VERSION + fatal + "\n"
    table = VERSION + NTHREAD + DEVICES.splitlines(keepends=True)[1] + DEVICES.splitlines(keepends=True)[2] + COLUMNS
    table += ROW_1M + FOOTER
    for text in (_tag(crash + table, 0), _tag(crash + table, 0) + _tag(table, 1)):
        runs = parse_nccl_text(text)
        assert [len(r.rows) for r in runs][:2] == [0, 1]
        assert runs[0].errors == [fatal]
        assert all(not r.errors for r in runs[1:])
    runs = parse_nccl_text(_tag(crash + table, 0) + _tag(table, 1))
    assert [(len(r.rows), r.duplicated_rank0) for r in runs] == [(0, False), (1, True), (1, True)]


def test_a_launcher_line_naming_rccl_tests_names_the_ranks_runs():
    # the unprefixed lines (the launcher's own stream) say rccl-tests; the table is in process 0's stream
    text = "# Collective test starting: all_reduce_perf\nrccl-tests: Version develop:a7809b3\n" + _tag(
        NTHREAD + DEVICES + COLUMNS + ROW_1M + FOOTER, 0)
    run = _one(text)
    assert run.tool == "rccl-tests" and len(run.rows) == 1
    assert _one(_tag(NTHREAD + DEVICES + COLUMNS + ROW_1M + FOOTER, 0)).tool == "nccl-tests"
    alone = "rccl-tests: Version develop:a7809b3\n" + _tag(NTHREAD + DEVICES + COLUMNS + ROW_1M + FOOTER, 0)
    assert _one(alone).tool == "rccl-tests"


def test_a_network_named_by_another_stream_is_added_once():
    ib = "node-1:43:43 [0] NCCL INFO Using network IB\n"
    socket = "node-2:50:50 [8] NCCL INFO Using network Socket\n"
    text = _tag(LOG.replace(DEVICES, DEVICES + ib), 0) + _tag(ib + socket, 8)
    assert _one(text).networks == ["IB", "Socket"]


def test_single_rank_runs_of_different_collectives_are_not_a_duplicated_rank0():
    one_rank = NTHREAD + DEVICES.splitlines(keepends=True)[1] + DEVICES.splitlines(keepends=True)[2] + COLUMNS + ROW_1M
    same = [STARTING + one_rank + FOOTER, STARTING + one_rank + FOOTER]
    other = [STARTING + one_rank + FOOTER, STARTING.replace("all_reduce", "all_gather") + one_rank + FOOTER]
    assert [r.duplicated_rank0 for r in parse_nccl_text("".join(same))] == [True, True]
    runs = parse_nccl_text("".join(other))
    assert [r.collective for r in runs] == ["all_reduce", "all_gather"]
    assert [(r.duplicated_rank0, r.duplicate_streams) for r in runs] == [(False, 0), (False, 0)]


def test_a_file_name_the_aliases_do_not_know_does_not_name_the_collective():
    headerless = COLUMNS + ROW_1M + ROW_1G
    assert _one(headerless, "all_toall-8gpu.log").collective_from == "columns"
    run = _one(headerless, "all_to_all-8gpu.log")
    assert (run.collective, run.collective_from) == ("alltoall", "filename")


BROADCAST_OLD = ("#                                             out-of-place                       in-place\n"
                 "#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error\n"
                 "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
                 "     1048576        262144   float       0    10.50   99.86   99.86  0e+00    10.41  100.73  100.73  0e+00\n")


def test_a_pre_2_13_table_with_a_root_column_and_no_redop_is_a_broadcast():
    run = _one(BROADCAST_OLD)
    assert (run.collective, run.collective_from) == ("broadcast", "columns")
    assert run.rows[0].root == 0 and run.rows[0].out_of_place.max_error == 0.0
    assert _one(BROADCAST_OLD.replace("    root", "        ").replace("   float       0", "   float")).collective == (
        "all_gather")


@pytest.mark.parametrize(("redop", "root", "coll", "cands"), [
    ("none", "0", "broadcast", []), ("sum", "0", "reduce", []), ("sum", "3", "reduce", []),
    ("sum", "-1", "sendrecv", ["sendrecv", "reduce"]),
])
def test_a_current_table_with_busbw_equal_to_algbw_is_named_by_its_redop_and_root(redop, root, coll, cands):
    row = f"     1048576        262144     float  {redop:>6s}  {root:>6s}    10.50   99.86   99.86      0    10.41  100.73  100.73      0\n"
    run = _one(COLUMNS + row)
    assert (run.collective, run.candidates) == (coll, cands)


@pytest.mark.parametrize(("busbw", "coll"), [
    ("51.50", "all_reduce"), ("51.00", "sendrecv"), ("49.00", "sendrecv"), ("48.50", "reduce_scatter"),
])
def test_the_ratio_band_of_one_includes_its_edges(busbw, coll):
    # busbw / algbw within 2 % of 1 is a collective whose bus factor is 1: 51.00 / 50.00 and 49.00 / 50.00 are its
    # edges (the band was `abs(ratio - 1.0) <= 0.02`, which a float 1.02 misses); above it all-reduce, below it
    # reduce-scatter for a reduction with no root
    row = f"     1048576        262144     float     sum      -1    20.97   50.00   {busbw}      0    20.97   50.00   {busbw}      0\n"
    assert _one(COLUMNS + row).collective == coll


# ---- nccl-tests -J JSON -----------------------------------------------------------------------------------------


def test_nccl_json_values_that_are_not_numbers_or_booleans_are_none():
    doc = _json_doc()
    doc["average_bus_bandwidth"] = {"bandwidth": "fast", "okay": "unchecked"}
    doc["out_of_bounds"] = {"count": 0, "okay": "maybe"}
    doc["results"][0]["root"] = "N/A"
    run = parse_nccl_json(json.dumps(doc))[0]
    assert run.avg_busbw_gbps is None and run.avg_busbw_check is None
    assert run.out_of_bounds == 0 and run.out_of_bounds_ok is None
    assert run.rows[0].root is None and run.rows[1].root == -1


def test_nccl_json_cut_short_over_4_mib_is_not_repaired():
    doc = _json_doc()
    doc["results"] = [dict(doc["results"][0], size=1024 * (k + 1), count=256 * (k + 1)) for k in range(20_000)]
    text = json.dumps(doc)
    cut = text[: text.index('"out_of_bounds"') - 40]
    assert len(cut) > 4 * 1024 * 1024
    with pytest.raises(ValueError, match="^not an nccl-tests JSON document$"):
        parse_nccl_json(cut)
    small = json.dumps(_json_doc())
    assert parse_nccl_json(small[: small.index('"out_of_bounds"') - 40])[0].truncated


def test_nccl_json_cut_inside_an_error_message_is_repaired_before_it():
    # the commas inside the cut string are no place to close the document; the list's bracket before it is
    doc = _json_doc()
    doc["errors"] = ["NCCL failure common.cu:1005 'unhandled system error', rank 3, host node-2, device 3"]
    del doc["end_time"]
    text = json.dumps(doc)
    cut = text[: text.index("host node-2")]
    run = parse_nccl_json(cut)[0]
    assert run.truncated and len(run.rows) == 3 and run.avg_busbw_gbps == 231.2
    assert run.errors == ["JSON output cut short: the run crashed or was killed before it finished"]


def test_nccl_json_cut_short_whose_every_repair_nests_too_deep_is_refused():
    doc = _json_doc()
    doc["env"] = [json.loads("[" * 70 + "]" * 70)]
    text = json.dumps(doc)
    with pytest.raises(ValueError, match="^not an nccl-tests JSON document$"):
        parse_nccl_json(text[: text.index('"out_of_bounds"') - 40])
    assert parse_nccl(text[: text.index('"out_of_bounds"') - 40]) == []


def test_nccl_json_decoded_document_reads_as_its_text():
    doc = _json_doc()
    assert parse_nccl_json(doc) == parse_nccl_json(json.dumps(doc))
    with pytest.raises(ValueError, match="not an nccl-tests JSON document"):
        parse_nccl_json({"jobs": []})


def test_nccl_json_trace_replay_names_the_collective_from_the_experiment_and_has_no_out_of_place():
    # a trace replay (-R): args[0] is no collective binary, each result names its collective, out_of_place is null
    doc = _json_doc()
    doc["args"] = ["./build/replay_perf", "-R", "trace.json"]
    for res in doc["results"]:
        res["out_of_place"], res["experiment_name"] = None, "AllGather"
    doc["config"]["devices"].insert(0, "#  Rank  0 Group  0 Pid 43 on node-1 device 0 [0000:18:00] NVIDIA H100")
    run = parse_nccl_json(json.dumps(doc))[0]
    assert (run.collective, run.collective_from) == ("all_gather", "json args")
    assert all(r.out_of_place is None and r.in_place is not None for r in run.rows)
    assert run.rows[0].busbw_gbps == run.rows[0].in_place.busbw_gbps
    assert run.ranks == 16  # the string in the device list is skipped
    # the first result that names a known collective names the run; later ones do not rename it
    for res, name in zip(doc["results"], ["my_bench", "AllGather", "AllReduce"]):
        res["experiment_name"] = name
    assert parse_nccl_json(json.dumps(doc))[0].collective == "all_gather"


def test_nccl_json_error_strings_are_the_runs_errors():
    doc = _json_doc()
    doc["errors"] = ["  unhandled cuda error (run with NCCL_DEBUG=INFO for details)  ", "", "   ", 5]
    run = parse_nccl_json(json.dumps(doc))[0]
    assert run.errors == ["unhandled cuda error (run with NCCL_DEBUG=INFO for details)"]


def test_net_usage_counts_a_transport_without_a_nic_by_its_name():
    lines = ["node-1:43:43 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NVLS",
             "node-1:43:43 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via NVLS",
             "node-1:43:43 [0] NCCL INFO Channel 00/1 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA"]
    u = net_usage(lines)
    assert u.transports == {"NVLS": 2, "NET/IB": 1} and u.channel_lines == 3
    assert u.nics_used == {"node-1": {1}} and u.gdr == {"node-1": [1, 0]} and u.net_transports == ["NET/IB"]



@pytest.mark.parametrize("cut", range(1, 10))
def test_a_first_slice_that_cuts_a_token_reads_on(cut):
    """decode_at reads 256 characters first: a document whose slice ends inside its last token is read whole, up to
    "-Infinity" (9 characters, the longest token Python's decoder reads) cut after any of its characters, where the
    decoder reports the error at the token's start, 8 characters back."""
    head, token = '{"a": "', "-Infinity"
    text = head + "x" * (256 - len(head) - len('", "b": ') - cut) + '", "b": ' + token + "}"
    assert text[256 - cut:256] == token[:cut]
    got = bounds.decode_at(json.JSONDecoder(), text, 0, bounds.ScanBudget(text))
    assert got is not None and got[0]["b"] == float("-inf") and got[1] == len(text)
