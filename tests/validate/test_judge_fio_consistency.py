"""fio without a blueprint (issue 29, kind 4): a result that contradicts itself says nothing, whatever the cluster.
Bytes per I/O against the block size, IOPS x block size against the bandwidth, a runtime too short to mean anything,
a synchronous engine given iodepth > 1, buffered reads of a file smaller than the node's memory, bandwidth beyond the
device class: each makes the result ``invalid`` with its reason. fio's single-dash option spellings are read too.

The real public output is ``tests/fixtures/fio/fio-01.json`` (fio 3.16, 4 jobs x iodepth 64 of 4 KiB random
read/write on /dev/nvme0n1 for 30 s; origin in ``tests/fixtures/README.md``): consistent as published; each test
changes the one field the check reads, and says which."""

from __future__ import annotations

import json

import pytest

from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.parsers.fio import command_line_options, parse_fio


def _fio01(fixtures_dir) -> dict:
    return json.loads((fixtures_dir / "fio" / "fio-01.json").read_text())


def _judge(doc: dict, **flags):
    (r,) = judge_text(json.dumps(doc), context_from_flags(**flags), source="fio.json", kind="fio")
    return r


def test_the_published_output_is_consistent(fixtures_dir):
    # 10,463,010,816 bytes / 2,554,337 I/Os = 4096.1 bytes; 85,138.9 IOPS x 4 KiB = 348.7 MB/s = bw_bytes; 30.0 s
    (r,) = judge_file(fixtures_dir / "fio" / "fio-01.json", context_from_flags())
    assert r.verdict == "pass", r.reasons


def test_bytes_per_io_against_the_block_size(fixtures_dir):
    doc = _fio01(fixtures_dir)
    doc["jobs"][0]["read"]["total_ios"] //= 4  # 16 KiB per I/O (16,385 bytes) for a 4 KiB job
    r = _judge(doc)
    assert r.verdict == "invalid"
    assert "16,385 bytes per I/O, not the job's block size 4 KiB" in r.reasons[0]


def test_iops_times_block_size_against_the_bandwidth(fixtures_dir):
    doc = _fio01(fixtures_dir)
    doc["jobs"][0]["write"]["bw_bytes"] *= 2  # 697 MB/s printed for 85,066 IOPS of 4 KiB (348 MB/s)
    r = _judge(doc)
    assert r.verdict == "invalid" and any("IOPS x 4 KiB = 348.43 MB/s, but the bandwidth is 696.9 MB/s" in x
                                          for x in r.reasons), r.reasons


def test_runtime_too_short(fixtures_dir):
    doc = _fio01(fixtures_dir)
    for d in ("read", "write"):
        doc["jobs"][0][d]["runtime"] = 250  # ms
    r = _judge(doc)
    assert r.verdict == "invalid" and "read ran 250 ms, under 1 s" in r.reasons[0]


def test_synchronous_engine_with_a_queue_depth(fixtures_dir):
    doc = _fio01(fixtures_dir)
    doc["global options"]["ioengine"] = "psync"  # iodepth 64 stays: fio ignores it for psync
    r = _judge(doc)
    assert r.verdict == "invalid"
    assert "ioengine=psync is synchronous: fio ignores iodepth=64" in r.reasons[0]
    doc["global options"]["iodepth"] = "1"
    assert _judge(doc).verdict == "pass"


def test_bandwidth_beyond_the_device_class(fixtures_dir):
    # one NVMe namespace cannot move more than a PCIe x4 link: the catalog's newest generation, gen6, 121 GB/s x16 / 4
    # (ml-engineering network/README.md PCIe table, "PCIe 6 ... 121 GBps" for x16)
    doc = _fio01(fixtures_dir)
    job = doc["jobs"][0]
    job["global options"] = None
    for d in ("read", "write"):
        job[d]["bw_bytes"] = 40e9
        job[d]["iops"] = 40e9 / 4096
        job[d]["total_ios"] = job[d]["io_bytes"] // 4096
    r = _judge(doc)
    assert r.verdict == "invalid"
    assert any("from one NVMe namespace (/dev/nvme0n1) is beyond what any NVMe drive's link can move (30,250 MB/s" in x
               for x in r.reasons), r.reasons


def test_buffered_read_smaller_than_memory(fixtures_dir):
    doc = _fio01(fixtures_dir)
    g = doc["global options"]
    g.update({"direct": "0", "size": "4G", "filename": "/scratch/fio.dat"})
    # AWS p5.48xlarge: 2048 GiB of memory (catalog); a 4 GiB file is read from the page cache
    r = _judge(doc, instance_type="p5.48xlarge")
    assert r.verdict == "invalid" and any("buffered read of 4 GiB, less than the 2048 GiB of memory" in x for x in r.reasons)


@pytest.mark.parametrize(("line", "expected"), [
    # arthur657834/linux-command fio.md: single-dash options, "-iodepth 1" with a space
    (("fio -filename=/dev/sdb1 -direct=1 -iodepth 1 -thread -rw=randread -ioengine=psync -bs=16k -size=200G "
     "-numjobs=10 -runtime=1000 -group_reporting -name=mytest"),
     {"filename": "/dev/sdb1", "direct": "1", "iodepth": "1", "thread": "1", "rw": "randread", "ioengine": "psync",
      "bs": "16k", "size": "200G", "numjobs": "10", "runtime": "1000", "group_reporting": "1", "name": "mytest"}),
    # UnsignedNAND/ParallelClassifier benchmarks/fio.sh: double-dash
    (("fio --randrepeat=1 --ioengine=libaio --direct=1 --gtod_reduce=1 --name=randrw --filename=test.fio --bs=4k "
     "--iodepth=64 --size=1G --readwrite=randrw --rwmixread=75"),
     {"randrepeat": "1", "ioengine": "libaio", "direct": "1", "gtod_reduce": "1", "name": "randrw",
      "filename": "test.fio", "bs": "4k", "iodepth": "64", "size": "1G", "readwrite": "randrw", "rwmixread": "75"}),
])
def test_single_and_double_dash_options(line, expected):
    assert command_line_options("$ " + line) == expected


def test_text_output_reads_direct_from_the_command_line():
    # fio's normal output shows rw, bs, ioengine and iodepth only; direct comes from the command line printed above it
    # (the job lines in fio 3's normal format; figures consistent: 2694 IOPS x 16 KiB = 44.1 MB/s)
    text = ("$ fio -filename=/dev/sdb1 -direct=1 -iodepth 1 -thread -rw=randread -ioengine=psync -bs=16k -size=200G "
            "-numjobs=10 -runtime=1000 -group_reporting -name=mytest\n"
            "mytest: (g=0): rw=randread, bs=(R) 16.0KiB-16.0KiB, (W) 16.0KiB-16.0KiB, (T) 16.0KiB-16.0KiB, "
            "ioengine=psync, iodepth=1\n"
            "mytest: (groupid=0, jobs=10): err= 0: pid=1234: Thu Feb 22 07:07:44 2024\n"
            "  read: IOPS=2694, BW=42.1MiB/s (44.1MB/s)(41.1GiB/1000001msec)\n")
    (job,) = parse_fio(text).jobs
    assert job.direct is True and job.buffered is False and job.option("size") == "200G"
    (r,) = judge_text(text, context_from_flags(), source="fio.txt", kind="fio")
    assert r.verdict == "pass" and r.metrics["direct"] is True
    # without the command line the text cannot say whether the job was buffered
    (bare,) = parse_fio(text.split("\n", 1)[1]).jobs
    assert bare.buffered is None


@pytest.mark.parametrize(("memory", "invalid"), [(4, False), (5, True)])
def test_buffered_read_against_memory_given_on_the_command_line(tmp_path, fixtures_dir, memory, invalid):
    # an on-premises host has no instance type: `judge --memory-gib` states its memory. A buffered read of a 4 GiB file
    # on a 5 GiB host came (partly) from the page cache; on a 4 GiB host it cannot have fitted with the OS beside it
    from tests.clusterforge.test_first_hour import cf

    doc = _fio01(fixtures_dir)
    doc["global options"].update({"direct": "0", "size": "4G", "filename": "/scratch/fio.dat"})
    (tmp_path / "fio.json").write_text(json.dumps(doc))
    p = cf("judge", str(tmp_path / "fio.json"), "--memory-gib", str(memory), "--json")
    reasons = [x for r in json.loads(p.stdout)["results"] for x in r["reasons"]]
    hit = f"buffered read of 4 GiB, less than the {memory} GiB of memory of the host" in " ".join(reasons)
    assert hit is invalid, reasons
    assert (p.returncode == 3) is invalid, p.stdout


def test_buffered_read_against_the_blueprints_declared_memory(tmp_path, fixtures_dir):
    # the field case 10 blueprint (one NVMe host as /scratch) with hardware.memory_gib declared: the judge reads it
    from tests.clusterforge.test_first_hour import cf

    bp = (fixtures_dir / "field" / "10-fio-buffered-bp.yaml").read_text().replace(
        "      gpu: a100-80gb-sxm:8\n", "      gpu: a100-80gb-sxm:8\n      memory_gib: 512\n")
    assert "memory_gib: 512" in bp
    (tmp_path / "bp.yaml").write_text(bp)
    doc = _fio01(fixtures_dir)
    doc["global options"].update({"direct": "0", "size": "64G", "filename": "/scratch/fio.dat"})
    (tmp_path / "fio.json").write_text(json.dumps(doc))
    p = cf("judge", str(tmp_path / "fio.json"), "--blueprint", str(tmp_path / "bp.yaml"), "--json")
    out = json.loads(p.stdout)
    assert out["context"]["memory_gib"] == 512
    assert any("buffered read of 64 GiB, less than the 512 GiB of memory of the host" in x
               for r in out["results"] for x in r["reasons"]), out["results"]


def test_memory_gib_must_be_positive(tmp_path, fixtures_dir):
    from tests.clusterforge.test_first_hour import cf

    p = cf("judge", str(fixtures_dir / "fio" / "fio-01.json"), "--memory-gib", "0")
    assert p.returncode == 2 and "memory-gib must be a positive number" in p.stderr + p.stdout
