"""Runs on MIG instances (issue 29, kind 5). The log lines are quoted from NVIDIA/nccl issue #1716 ("Please add MIG
support"), where four ranks ran on four 1g.35gb instances of one H200 with NCCL 2.31.2 and 2.27.7 (fixtures
``nccl-tests/nccl-16..18``, origins in ``tests/fixtures/README.md``). The rule: NVIDIA's NCCL guide, "Using MIG
instances" (MIG has no CUDA peer-to-peer over PCIe or NVLink, so no NVLink SHARP either; instances talk through shared
memory, GPUs through the NICs)."""

from __future__ import annotations

import json
import re

import pytest

from clusterforge.cli import main
from validate.expectations import context_from_flags
from validate.judge import judge_file, judge_text
from validate.parsers.nccl import parse_nccl
from validate.signatures import by_id
from validate.suites.base import mig_profile, resolve_gpu

MIG_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/communicators.html#using-mig-instances"


def _judge_cli(capsys, path, *flags) -> tuple[int, dict]:
    rc = main(["judge", str(path), *flags, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, json.loads(out)["results"][0]


def test_multi_rank_refusal_names_mig_and_the_flag_nccl_asks_for(fixtures_dir, capsys):
    # NCCL 2.31.2, four ranks on four MIG instances, no flag: init stops with this WARN (NVIDIA/nccl #1716)
    rc, r = _judge_cli(capsys, fixtures_dir / "nccl-tests" / "nccl-16-mig-multi-rank.txt")
    assert rc == 1 and r["verdict"] == "fail"
    reason = r["reasons"][0]
    assert reason.startswith("crashed before printing a result: 'Multiple Ranks are using the same GPU/Partition.")
    assert "MIG instances" in reason and "NCCL_MULTI_RANK_GPU_ENABLE=1" in reason and "2.31" in reason
    assert "docs/troubleshooting.md#mig-multi-rank-gpu" in reason


def test_the_warn_line_quotes_a_setting_it_does_not_set(fixtures_dir):
    # "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this" is NCCL's advice, not the run's environment
    (run,) = parse_nccl((fixtures_dir / "nccl-tests" / "nccl-16-mig-multi-rank.txt").read_text())
    assert "NCCL_MULTI_RANK_GPU_ENABLE" not in run.settings
    message = ("Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this "
               "configuration.")
    assert run.errors == [message]


def test_forced_nvls_on_shared_gpu_is_named_and_never_recommended(fixtures_dir, capsys):
    # NCCL 2.31.2 with the flag set but NCCL_NVLS_ENABLE=1 exported by the pod spec (NVIDIA/nccl #1716)
    rc, r = _judge_cli(capsys, fixtures_dir / "nccl-tests" / "nccl-17-mig-nvls-forced.txt")
    assert rc == 1 and r["verdict"] == "fail"
    reason = r["reasons"][0]
    assert "docs/troubleshooting.md#nvls-forced-shared-gpu" in reason
    fix = reason.split("Fix: ", 1)[1]
    assert "unset NCCL_NVLS_ENABLE" in fix and "default, 2" in fix
    assert "NCCL_NVLS_ENABLE=1" not in fix  # the setting that caused the failure
    assert "NCCL_NVLS_ENABLE" not in parse_nccl((fixtures_dir / "nccl-tests" / "nccl-17-mig-nvls-forced.txt")
                                                 .read_text())[0].settings


def test_duplicate_gpu_of_an_older_nccl_mentions_mig(fixtures_dir, capsys):
    # the same launch on NCCL 2.27.7 (the one PyTorch 2.9.1 bundles) fails with the older message
    rc, r = _judge_cli(capsys, fixtures_dir / "nccl-tests" / "nccl-18-mig-duplicate-gpu.txt")
    assert rc == 1 and "docs/troubleshooting.md#duplicate-gpu" in r["reasons"][0]
    assert "MIG instances" in r["reasons"][0] and "NCCL 2.31 or later" in r["reasons"][0]


def test_mig_rules_cite_nvidias_mig_section():
    for sig_id in ("mig-multi-rank-gpu", "nvls-forced-shared-gpu", "mig-instances"):
        assert by_id(sig_id).source == MIG_DOC


@pytest.mark.parametrize(("name", "parent", "profile"), [
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-40GB", "1g.5gb"),  # the name CUDA gives an instance
    ("NVIDIA H200 MIG 1g.35gb", "NVIDIA H200", "1g.35gb"),
    ("A100-SXM4-40GB MIG 3g.20gb", "A100-SXM4-40GB", "3g.20gb"),
])
def test_mig_instance_names_are_placed_by_their_parent(name, parent, profile):
    assert mig_profile(name) == (parent, profile)
    assert resolve_gpu(name) == resolve_gpu(parent) is not None
    assert mig_profile(parent) is None


def _mig_log(fixtures_dir) -> str:
    # nccl-04 (8 x A100-SXM4-40GB, one node) as MIG prints it: every rank sees its one instance as CUDA device 0 and
    # CUDA names it "<parent> MIG <profile>"; the numbers are the real run's
    text = (fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    mig = re.sub(r"device +\d+ \[0x00\] A100-SXM4-40GB", "device  0 [0x00] A100-SXM4-40GB MIG 1g.5gb", text)
    assert mig != text
    return mig


def test_a_finished_mig_run_gets_no_nvlink_verdict(fixtures_dir):
    ctx = context_from_flags(gpu="a100-40gb-sxm", nodes=1, gpus_per_node=8)
    (r,) = judge_text(_mig_log(fixtures_dir), ctx, source="mig.txt")
    assert r.verdict == "warn" and len(r.reasons) == 1, r.reasons
    reason = r.reasons[0]
    assert reason.startswith("no bandwidth verdict: the ranks ran on MIG instances (1g.5gb of A100-SXM4-40GB")
    assert "docs/troubleshooting.md#mig-instances" in reason
    assert "busbw_gbps" not in r.expected  # never held against the whole GPU's NVLink
    assert "device 0" not in reason and "--gpu-bind" not in reason  # device 0 everywhere is MIG, not a task binding
    # the same log with whole GPUs is judged against NVLink (A100: 300 GB/s x 0.8)
    (whole,) = judge_file(fixtures_dir / "nccl-tests" / "nccl-04.txt", ctx)
    assert whole.expected["busbw_gbps"] == pytest.approx(240.0)


def test_mig_uuids_in_the_environment_mark_a_mig_run(fixtures_dir):
    # a command line as in stas00/ml-engineering's MIG recipe (one instance's UUID per rank), then the real table
    text = "CUDA_VISIBLE_DEVICES=MIG-e26b1e11-8424-5ef0-97a8-d87e519f7824 ./all_reduce_perf -b 1 -e 8G -f 2\n" + (
        fixtures_dir / "nccl-tests" / "nccl-04.txt").read_text()
    (r,) = judge_text(text, context_from_flags(gpu="a100-40gb-sxm", nodes=1, gpus_per_node=8), source="mig.txt")
    assert r.verdict == "warn" and "CUDA_VISIBLE_DEVICES lists MIG UUIDs" in r.reasons[0]
