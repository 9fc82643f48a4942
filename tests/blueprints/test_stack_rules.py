"""The software-stack compatibility model, per GPU architecture and per edge, from the user's side: a
blueprint is checked and the findings are read. Each vendor figure is typed here with its source, and
the catalog entry is compared with it (so the catalog cannot drift from the vendor silently); then both
sides of every boundary are checked. The one-trip / one-pass case of every rule lives in
``test_rules.CASES``; this file covers every architecture and the defaults.
"""

from __future__ import annotations

from typing import Any

import pytest

from blueprints import load_blueprint, parse_blueprint
from blueprints.catalog import catalog
from blueprints.rules import check
from blueprints.software_stack import arch_first_cuda, arch_last_cuda_major, driver_runs_cuda, software_stack

from .rule_cases.emit import emit
from .test_rules import EXAMPLES, S

# GPU architecture -> (a GPU of the catalog with it, its first CUDA toolkit, a CUDA just before it, the last CUDA
# major that builds for it or None). First CUDA per architecture
# (https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html): Volta 9.0,
# Ampere 11.0, Ada 11.8, Hopper 11.8, Blackwell 12.8 (https://docs.nvidia.com/cuda/blackwell-compatibility-guide);
# CUDA 13.0 dropped Maxwell, Pascal and Volta (https://docs.nvidia.com/cuda/archive/13.0.0/cuda-toolkit-release-notes/index.html).
# Grace-Hopper (GH200) and Grace-Blackwell (GB200) are the Hopper and Blackwell GPUs on a Grace host.
ARCHS = {
    "volta": ("v100-sxm", "9.0", "8.0", 12),
    "ampere": ("a100-80gb-sxm", "11.0", "10.2", None),
    "ada": ("l40s", "11.8", "11.7", None),
    "hopper": ("h100-sxm", "11.8", "11.7", None),
    "grace-hopper": ("gh200", "11.8", "11.7", None),
    "blackwell": ("b200", "12.8", "12.6", None),
    "grace-blackwell": ("gb200-per-gpu", "12.8", "12.6", None),
}
# the catalog's EFA GPU instance types, for the defaults on AWS
INSTANCES = ["p4d.24xlarge", "g6e.48xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6e-gb200.36xlarge"]
STACK_RULES = {"cuda-gpu-architecture", "cuda-driver-compat", "cuda-forward-compat", "nccl-cuda-build",
               "nccl-gpu-support", "nccl-nvls", "aws-ofi-nccl-instance-type", "aws-ofi-nccl-nccl", "pytorch-cuda-tag",
               "pytorch-cuda-driver", "pytorch-gpu-architecture", "container-image-driver", "efa-software-versions",
               "container-toolkit-driver", "nccl-net-plugin-api", "nccl-net-plugin-api-older", "cuda-driver-minor"}
DGX = "onprem-dgx-h100-ib"


def _gpu(key: str) -> Any:
    """The DGX example's compute group (node_groups.1) with 8 GPUs ``key`` and no system model."""
    def op(doc: dict[str, Any]) -> None:
        hw = doc["node_groups"][1]["hardware"]
        hw.pop("system", None)
        hw["gpu"] = f"{key}:8"
    return op


def _findings(ops: list[Any], base: str = "aws-p5-efa-lustre") -> list[Any]:
    doc = load_blueprint(EXAMPLES / f"{base}.yaml").data
    for op in ops:
        op(doc)
    text, _ = emit(doc)
    return check(parse_blueprint(text, "case.yaml"))


def _ids(ops: list[Any], rule: str, base: str = "aws-p5-efa-lustre") -> list[str]:
    return [f.format() for f in _findings(ops, base) if f.rule_id == rule]


def test_every_catalog_architecture_is_covered() -> None:
    cat = catalog()
    nvidia = {cat.gpu(k).architecture for k in cat.gpu_keys if cat.gpu(k).vendor == "nvidia"}
    assert nvidia == {cat.gpu(k).architecture for k, *_ in ARCHS.values()}, "a GPU architecture of the catalog has no case"


@pytest.mark.parametrize("arch", ARCHS)
def test_catalog_first_cuda_is_the_vendor_figure(arch: str) -> None:
    key, first, _, last = ARCHS[arch]
    cat = catalog()
    assert arch_first_cuda(cat, cat.gpu(key).architecture) == first
    assert arch_last_cuda_major(cat, cat.gpu(key).architecture) == last


@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_against_the_architecture(arch: str) -> None:
    key, first, before, last = ARCHS[arch]
    hits = _ids([_gpu(key), S("software.cuda", before)], "cuda-gpu-architecture", DGX)
    assert len(hits) == 1 and f"needs CUDA {first} or newer" in hits[0], hits
    assert _ids([_gpu(key), S("software.cuda", first)], "cuda-gpu-architecture", DGX) == []
    if last is not None:  # the other side: a CUDA major past the last one that builds for it
        hits = _ids([_gpu(key), S("software.cuda", f"{last + 1}.0")], "cuda-gpu-architecture", DGX)
        assert len(hits) == 1 and f"CUDA {last}.x is the last" in hits[0], hits
        assert _ids([_gpu(key), S("software.cuda", f"{last}.8")], "cuda-gpu-architecture", DGX) == []


@pytest.mark.parametrize("arch", ARCHS)
def test_default_stack_fits_every_architecture(arch: str) -> None:
    """No CUDA / NCCL / PyTorch stated: the resolved defaults trip none of the stack rules on any architecture."""
    key, first, _, last = ARCHS[arch]
    hits = [f.format() for f in _findings([_gpu(key)], DGX) if f.rule_id in STACK_RULES]
    assert hits == []
    doc = load_blueprint(EXAMPLES / f"{DGX}.yaml").data
    _gpu(key)(doc)
    st = software_stack(parse_blueprint(emit(doc)[0], "x.yaml").blueprint)
    v = tuple(map(int, st.cuda.split(".")))
    assert v >= tuple(map(int, first.split("."))) and (last is None or v[0] <= last)


@pytest.mark.parametrize("it", INSTANCES)
def test_default_stack_fits_every_efa_instance_type(it: str) -> None:
    hits = [f.format() for f in _findings([S("node_groups.0.instance_type", it)]) if f.rule_id in STACK_RULES]
    assert hits == []


@pytest.mark.parametrize("arch", ARCHS)
def test_pytorch_wheel_against_the_architecture(arch: str) -> None:
    # PyTorch 2.12 wheels: cu126 (CUDA 12.6), cu130 (13.0, Turing and newer), cu132 (13.2)
    # (https://dev-discuss.pytorch.org/t/introducing-cuda-13-2-and-deprecating-cuda-12-8-release-2-12/3337,
    #  https://github.com/pytorch/pytorch/pull/164471)
    key, first, _, last = ARCHS[arch]
    at = [_gpu(key), S("software.pytorch", "2.12.0")]
    for tag, cuda in (("cu126", (12, 6)), ("cu130", (13, 0))):
        hits = _ids(at + [S("software.pytorch_cuda", tag)], "pytorch-gpu-architecture", DGX)
        fits = cuda >= tuple(map(int, first.split("."))) and (last is None or cuda[0] <= last)
        assert (hits == []) == fits, (tag, hits)


def test_gb200_needs_nccl_2_27_5_for_multi_node_nvlink() -> None:
    # "GB200 support is available from NCCL 2.27.5" (https://docs.nvidia.com/dgx/dgxgb200nvl72-release-notes/nvonline-ids.html)
    assert catalog().software["nccl_features"]["mnnvl"]["min_nccl"] == "2.27.5"
    at = [S("node_groups.0.instance_type", "p6e-gb200.36xlarge"), S("software.cuda", "12.8")]
    hits = _ids(at + [S("software.nccl", "2.26.5")], "nccl-gpu-support")
    assert len(hits) == 1 and "multi-node NVLink" in hits[0] and "2.27.5" in hits[0], hits
    assert _ids(at + [S("software.nccl", "2.27.7")], "nccl-gpu-support") == []


@pytest.mark.parametrize(("it", "first"), [
    # aws-ofi-nccl release notes (https://github.com/aws/aws-ofi-nccl/blob/v1.21.1/RELEASENOTES.md):
    # P5e 1.11.0-aws, P5en 1.13.0-aws, P6-B200 1.15.0. (P6e-GB200, 1.16.1, is not here: the hardware catalog
    # knows no EFA interface count for it, so its groups get no EFA and need no plugin.)
    ("p5e.48xlarge", "1.11.0"), ("p5en.48xlarge", "1.13.0"), ("p6-b200.48xlarge", "1.15.0"),
])
def test_aws_ofi_nccl_per_instance_family(it: str, first: str) -> None:
    fam = it.split(".")[0]
    assert catalog().software["aws_ofi_nccl"]["instance_families"][fam]["min_version"] == first
    major, minor, patch = map(int, first.split("."))
    before = f"{major}.{minor - 1}.0" if patch == 0 else f"{major}.{minor}.{patch - 1}"
    at = [S("node_groups.0.instance_type", it)]
    assert len(_ids(at + [S("software.aws_ofi_nccl", before)], "aws-ofi-nccl-instance-type")) == 1
    assert _ids(at + [S("software.aws_ofi_nccl", first)], "aws-ofi-nccl-instance-type") == []


@pytest.mark.parametrize(("it", "var", "trips"), [
    # EFA RDMA per instance type (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types):
    # p4d: read only; g5: neither; p5: read and write
    ("p4d.24xlarge", "FI_EFA_USE_DEVICE_RDMA_WRITE", True),
    ("p4d.24xlarge", "FI_EFA_USE_DEVICE_RDMA", False),
    ("g5.48xlarge", "FI_EFA_USE_DEVICE_RDMA", True),
    ("p5.48xlarge", "FI_EFA_USE_DEVICE_RDMA_WRITE", False),
])
def test_efa_env_asks_for_what_the_instance_has(it: str, var: str, trips: bool) -> None:
    hits = _ids([S("node_groups.0.instance_type", it), S("network.nccl", {"env": {var: "1"}})], "efa-env-capability")
    assert len(hits) == (1 if trips else 0), hits
    # `0` asks for nothing
    assert _ids([S("node_groups.0.instance_type", it), S("network.nccl", {"env": {var: "0"}})], "efa-env-capability") == []


def test_forward_compat_runs_a_newer_cuda_on_a_listed_base_branch() -> None:
    """CUDA 12.8 on R470 through cuda-compat: allowed (R470 is a listed base for 12.x, the GPUs are data-centre
    parts); without `cuda_compat` the same pair is `cuda-driver-compat`'s error (CUDA 12.x needs R525+)."""
    cat = catalog()
    assert 470 in cat.software["cuda_compat"]["forward"]["base_branches"]["12"]
    assert driver_runs_cuda(cat, 470, "12.8", compat=True, gpus=("a100-80gb-sxm",)) == "forward"
    assert driver_runs_cuda(cat, 470, "12.8", compat=False, gpus=("a100-80gb-sxm",)) is None
    assert driver_runs_cuda(cat, 560, "12.8") == "minor-version"   # 12.8 shipped with R570
    assert driver_runs_cuda(cat, 570, "12.8") == "native"
    base = [S("node_groups.0.instance_type", "p4d.24xlarge"), S("software.driver_branch", "470"), S("software.cuda", "12.8")]
    assert len(_ids(base, "cuda-driver-compat")) == 1
    assert _ids(base + [S("software.cuda_compat", True)], "cuda-driver-compat") == []
    assert _ids(base + [S("software.cuda_compat", True)], "cuda-forward-compat") == []


def test_container_image_not_in_the_catalog() -> None:
    hits = _ids([S("software.container_image", "nvcr.io/nvidia/pytorch:24.01-py3")], "container-image-driver")
    assert len(hits) == 1 and "26.03" in hits[0], hits


def test_stated_software_is_kept_and_the_rest_resolved() -> None:
    doc = load_blueprint(EXAMPLES / "aws-p5-efa-lustre.yaml").data
    S("software", {"cuda": "12.8"})(doc)
    st = software_stack(parse_blueprint(emit(doc)[0], "x.yaml").blueprint)
    assert st.cuda == "12.8" and st.stated == frozenset({"cuda"})
    # the NCCL default for CUDA 12 is built for CUDA 12, the wheel tag is a 12.x one the release publishes
    assert st.nccl_cuda is not None and st.nccl_cuda.startswith("12.")
    assert st.nccl_package_version == f"{st.nccl}-1+cuda{st.nccl_cuda}"
    assert st.pytorch_cuda.startswith("cu12")
    assert st.pytorch_index_url.endswith("/" + st.pytorch_cuda)


def test_committed_compatibility_doc_is_current() -> None:
    """docs/software-compatibility.md is what `python -m blueprints.compatibility` writes from the catalog."""
    from blueprints.compatibility import COMPATIBILITY_PATH, compatibility_markdown

    assert COMPATIBILITY_PATH.read_text(encoding="utf-8") == compatibility_markdown(), (
        "docs/software-compatibility.md is stale: run `python -m blueprints.compatibility`")


def test_compatibility_doc_names_a_source_for_every_edge() -> None:
    """Every table row of the generated document carries an https source, or sits under a heading that names one."""
    from blueprints.compatibility import compatibility_markdown

    section_has_source = False
    lines = compatibility_markdown().splitlines()
    for n, line in enumerate(lines):
        if n + 1 < len(lines) and lines[n + 1].startswith("|---"):
            continue  # a table's header row
        if line.startswith("## Defaults"):
            break  # clusterforge's choice among the sourced releases: checked below
        if line.startswith("#"):
            section_has_source = False
        elif not line.startswith("|") and "https://" in line:
            section_has_source = True
        elif line.startswith("| ") and not line.startswith("|---"):
            assert section_has_source or "https://" in line, line
    sw = catalog().software
    for row in sw["defaults"]:
        assert row["nccl"] in sw["nccl_releases"]["releases"]
        assert row["aws_ofi_nccl"] in sw["aws_ofi_nccl"]["releases"]
        assert row["pytorch_cuda"] in sw["pytorch"]["releases"][row["pytorch"]]["cuda_tags"]
        assert row["cuda"] in catalog().extras["cuda_driver_minimums"]["toolkit"]


def test_older_driver_branch_gets_a_cuda_it_runs_natively() -> None:
    """R550 (CUDA 12.4 shipped with it, per https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html): no
    default row's CUDA runs natively there, so the default CUDA is 12.4 and no CUDA or wheel rule fires; no catalogued
    NGC container runs on it (26.03 is CUDA 13.2), so there is no default container."""
    doc = load_blueprint(EXAMPLES / f"{DGX}.yaml").data
    S("software.driver_branch", "550")(doc)
    st = software_stack(parse_blueprint(emit(doc)[0], "x.yaml").blueprint)
    assert st.cuda == "12.4" and st.container_image is None
    assert st.pytorch_cuda.startswith("cu12")
    hits = [f.format() for f in _findings([S("software.driver_branch", "550")], DGX) if f.rule_id in STACK_RULES]
    assert hits == []
