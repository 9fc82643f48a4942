"""``clusterforge judge`` and ``clusterforge report`` as a user calls them: exit codes, the JSON
shape scripts rely on, flags, blueprints, and one clear line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterforge.cli import main

from ..conftest import EXAMPLES


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _nt(fixtures_dir: Path, name: str) -> Path:
    return fixtures_dir / "nccl-tests" / name


def test_pass_exit_0_with_flags(fixtures_dir, capsys):
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-02.txt"), "--instance-type", "p5.48xlarge", "--nodes", "2")
    assert rc == 0
    assert "pass" in out and "peak busbw 487.3 GB/s at 16 GiB" in out and "verdict: pass" in out


def test_json_shape(fixtures_dir, capsys):
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-09.txt"), fixtures_dir / "fio" / "fio-01.json",
                      "--nodes", "2", "--gpus-per-node", "8", "--gpu", "A100-SXM4-40GB", "--fabric", "roce",
                      "--nic-gbps", "100", "--nics-per-node", "16", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["verdict"] == "pass" and len(doc["results"]) == 2
    nccl, fio = doc["results"]
    assert nccl["kind"] == "nccl" and nccl["source"].endswith("nccl-09.txt")
    m = nccl["metrics"]
    assert (m["collective"], m["ranks"], m["nodes"]) == ("all_reduce", 16, 2)
    assert m["peak_busbw_gbps"] == 237.94 and m["size_at_peak_bytes"] == 8589934592
    assert m["avg_busbw_gbps"] == 66.4834 and m["wrong"] == 0
    assert nccl["expected"]["busbw_gbps"] == 240.0 and any("512 MiB" in n for n in nccl["notes"])
    fm = fio["metrics"]
    assert fm["read_bw_bytes_per_s"] == 348743777 and fm["write_bw_bytes_per_s"] == 348450387
    assert fm["read_iops"] == pytest.approx(85138.890741) and fm["write_iops"] == pytest.approx(85066.128925)


def test_fail_beats_invalid_and_invalid_alone_exits_3(fixtures_dir, capsys):
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-13.txt"), _nt(fixtures_dir, "nccl-12.txt"), "--json")
    assert rc == 1 and json.loads(out)["verdict"] == "fail"
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-13.txt"))
    assert rc == 3 and "invalid" in out and "one rank" in out
    rc, _, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-11.txt"))
    assert rc == 1


def test_warn_exits_0_and_another_gpu_exits_3(fixtures_dir, capsys, tmp_path):
    # the A100 log with every busbw at 70%: 165 GB/s of 240 expected is a warn, still exit 0
    log = tmp_path / "slow.txt"
    lines = []
    for ln in _nt(fixtures_dir, "nccl-04.txt").read_text().splitlines():
        toks = ln.split()
        if len(toks) == 12 and toks[0].isdigit():  # pre-2.13 row: size count type redop, 2 x (time algbw busbw error)
            for i in (5, 6, 9, 10):
                toks[i] = f"{float(toks[i]) * 0.7:.2f}"
            ln = "  ".join(toks)
        lines.append(ln)
    log.write_text("\n".join(lines) + "\n")
    rc, out, _ = _run(capsys, "judge", log, "--gpu", "a100-40gb-sxm", "--nodes", "1")
    assert rc == 0 and "warn" in out and "below the warn ratio" in out
    # judged as if the GPUs were H100: not this hardware, exit 3
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-04.txt"), "--gpu", "h100-sxm")
    assert rc == 3 and "not this hardware" in out


def test_blueprint_gives_the_context(fixtures_dir, capsys, tmp_path):
    bp = tmp_path / "nvme8.yaml"
    bp.write_text("""apiVersion: clusterforge/v1
kind: Blueprint
name: nvme-box
target: {provider: onprem, os: ubuntu-22.04}
node_groups:
  - name: gpu
    hosts: [{name: n1, address: 10.0.0.1}]
    hardware: {gpu: h100-sxm:8, nvme: {count: 8, model: samsung-pm1743}}
    local_nvme: {raid: raid0, mount: /scratch}
network: {fabric: ethernet}
""")
    rc, out, _ = _run(capsys, "judge", fixtures_dir / "fio" / "fio-02.json", "--blueprint", bp, "--target", "/scratch",
                      "--json")
    assert rc == 1
    (res,) = json.loads(out)["results"]
    assert res["verdict"] == "fail" and res["expected"]["write_mb_s"] == 52800
    rc, out, _ = _run(capsys, "judge", fixtures_dir / "fio" / "fio-04.txt")
    assert rc == 1 and "data verification failed" in out
    rc, out, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-02.txt"), "-b", EXAMPLES / "aws-p5-efa-lustre.yaml")
    assert rc == 0 and "p5.48xlarge" in out


def test_output_dir_writes_reports_and_report_verb_rebuilds_them(fixtures_dir, capsys, tmp_path):
    out_dir = tmp_path / "out"
    rc, _, _ = _run(capsys, "judge", _nt(fixtures_dir, "nccl-01.txt"), _nt(fixtures_dir, "nccl-12.txt"),
                    "--instance-type", "p4de.24xlarge", "--nodes", "2", "-o", out_dir)
    assert rc == 1
    assert {p.name for p in out_dir.iterdir()} == {"report.json", "report.md", "junit.xml", "report.html"}
    # `report DIR` from a results.jsonl the runner appended
    run = tmp_path / "run"
    run.mkdir()
    results = json.loads((out_dir / "report.json").read_text())["results"]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    rc, out, _ = _run(capsys, "report", run, "-o", tmp_path / "page.html", "--title", "nightly")
    assert rc == 0 and "2 result(s), verdict fail" in out
    assert (tmp_path / "page.html").read_text().count("data:image/png;base64,") == 1
    assert json.loads((run / "report.json").read_text())["title"] == "nightly"
    assert (run / "junit.xml").is_file() and (run / "report.md").is_file()


@pytest.mark.parametrize("what", ["missing", "directory", "binary", "empty", "unknown"])
def test_bad_inputs_one_line_exit_2(what, capsys, tmp_path):
    paths = {"missing": tmp_path / "nope.txt", "directory": tmp_path, "binary": tmp_path / "b.bin",
             "empty": tmp_path / "e.txt", "unknown": tmp_path / "u.txt"}
    (tmp_path / "b.bin").write_bytes(bytes(range(256)))
    (tmp_path / "e.txt").write_text("")
    (tmp_path / "u.txt").write_text("hello\nworld\n")
    rc, _, err = _run(capsys, "judge", paths[what])
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("✗")]
    assert len(lines) == 1 and str(paths[what]) in lines[0]


def test_forced_kind_judges_unknown_content_as_invalid(capsys, tmp_path):
    (tmp_path / "u.txt").write_text("hello\n")
    rc, out, _ = _run(capsys, "judge", tmp_path / "u.txt", "--kind", "nccl")
    assert rc == 3 and "no nccl-tests output" in out


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "h999"], "unknown GPU model 'h999'"),
    (["--instance-type", "p9.huge"], "unknown instance type 'p9.huge'"),
    (["--fabric", "token-ring"], "token-ring"),
    (["--group", "gpu"], "--group needs --blueprint"),
])
def test_bad_flags_exit_2(fixtures_dir, capsys, argv, needle):
    rc, _, err = _run(capsys, "judge", _nt(fixtures_dir, "nccl-01.txt"), *argv)
    assert rc == 2 and needle in err


def test_report_bad_inputs(capsys, tmp_path):
    rc, _, err = _run(capsys, "report", tmp_path)
    assert rc == 2 and "no results.jsonl or report.json" in err
    rc, _, err = _run(capsys, "report", tmp_path / "missing")
    assert rc == 2 and "no such file" in err


def test_an_ambiguous_gpu_short_name_is_named_with_its_parts(fixtures_dir, capsys):
    """`--gpu h100` stands for two catalog parts with different NVLink: the judge says which it read and
    how to name the part; a part's key is taken silently."""
    _, out, err = _run(capsys, "judge", _nt(fixtures_dir, "nccl-02.txt"), "--gpu", "h100", "--gpus-per-node", "8")
    assert "--gpu h100 is read as h100-sxm" in err and "h100-pcie, h100-sxm" in err
    assert "x 8 h100-sxm" in out  # the context it judged with
    _, _, err = _run(capsys, "judge", _nt(fixtures_dir, "nccl-02.txt"), "--gpu", "h100-sxm", "--gpus-per-node", "8")
    assert "read as" not in err
