"""GPU peak TFLOP/s in the hardware catalog: the figures the sources publish, and one peak per GPU.

The AMP judge divides by ``gpus.<key>.bf16_dense_tflops`` and scales its MFU floor by the measured
matmul efficiency of ``reference_benchmarks.max_achievable_matmul_tflops`` (MAMF / peak): both must
use the same peak, or a GPU's MFU and its floor disagree.
"""

from __future__ import annotations

import pytest

from blueprints.catalog import catalog

MAMF_TO_GPU = {"a100-sxm": "a100-80gb-sxm", "h100-sxm": "h100-sxm", "h200-sxm": "h200-sxm", "b200": "b200",
               "gb200": "gb200-per-gpu", "mi300x": "mi300x"}


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_one_peak_per_gpu(precision: str) -> None:
    table = catalog().reference_benchmarks["max_achievable_matmul_tflops"][precision]
    checked = 0
    for key, row in table.items():
        gpu = MAMF_TO_GPU.get(key)
        if gpu is None:
            continue
        assert row["peak"] == catalog().gpu(gpu).peak_tflops(precision), (key, precision)
        assert row["efficiency"] == pytest.approx(row["mamf"] / row["peak"], abs=0.001), key
        checked += 1
    assert checked >= 4


def test_mi300x_dense_peaks() -> None:
    """AMD's dense figures: 1307.4 TFLOP/s FP16/BF16, 2614.9 FP8, 653.7 TF32, 163.4 FP32
    (https://raw.githubusercontent.com/alpharomercoma/MI300X-vs-H200/6077fdc7bfc215171c33435b7cd76ca4c5f2b236/METHODOLOGY.md);
    2615 is the with-sparsity FP16 figure, not a dense one."""
    g = catalog().gpu("mi300x")
    assert (g.bf16_dense_tflops, g.fp16_dense_tflops, g.fp8_dense_tflops) == (1307.4, 1307.4, 2614.9)


def test_blackwell_peaks() -> None:
    """NVIDIA's per-GPU table (https://zdszero.github.io/Computer/Artificial_Intelligence/Hardware.html):
    HGX B200 TF32 2.2 PFLOPS with sparsity (1.1 dense), FP32 75 TFLOPS; GB200 FP16/BF16 5 PFLOPS and FP8
    10 PFLOPS with sparsity (2.5 and 5 dense)."""
    b200, gb200 = catalog().gpu("b200"), catalog().gpu("gb200-per-gpu")
    assert (b200.tf32_dense_tflops, b200.fp32_tflops) == (1100, 75)
    assert (gb200.bf16_dense_tflops, gb200.fp8_dense_tflops) == (2500, 5000)


def test_mi325x_figures_are_amds() -> None:
    """AMD CDNA 3 white paper (April 2025): one table for "MI300X | MI325X" (FP16/BF16 1307.4, FP8 2614.9, FP32 163.4
    TFLOP/s), MI325X 256 GB HBM3E at 6.0 TB/s, seven Infinity Fabric links at up to 32 Gbit/s x 16 lanes (64 GB/s a
    direction); MI325X data sheet: 1000 W TBP."""
    g = catalog().gpu("mi325x")
    assert (g.vendor, g.memory_gb, g.hbm_tbps, g.tdp_w) == ("amd", 256, 6.0, 1000)
    assert (g.bf16_dense_tflops, g.fp16_dense_tflops, g.fp8_dense_tflops, g.fp32_tflops) == (1307.4, 1307.4, 2614.9, 163.4)
    assert (g.raw["xgmi_links"], g.raw["xgmi_link_gbytes_s"]) == (7, 32 * 16 / 8)
    assert g.raw["xgmi_unidir_gbytes_s"] == 7 * g.raw["xgmi_link_gbytes_s"]
    assert g.source.startswith("https://www.amd.com/")


def test_mi355x_figures_are_amds() -> None:
    """AMD MI355X brochure: FP16/BF16 2.5166 PF and OCP-FP8 5.0332 PF dense, 288 GB HBM3E, 8 TB/s, 1400 W, 7 x 153.6 GB/s
    Infinity Fabric (76.8 a direction). FP16 agrees with 256 CUs x 4096 FLOPS/clock/CU x 2.4 GHz."""
    g = catalog().gpu("mi355x")
    assert (g.vendor, g.memory_gb, g.hbm_tbps, g.tdp_w) == ("amd", 288, 8.0, 1400)
    assert (g.bf16_dense_tflops, g.fp16_dense_tflops, g.fp8_dense_tflops) == (2516.6, 2516.6, 5033.2)
    assert g.fp16_dense_tflops == pytest.approx(256 * 4096 * 2.4e9 / 1e12, abs=0.1)
    assert (g.raw["xgmi_links"], g.raw["xgmi_link_gbytes_s"], g.raw["xgmi_bidir_gbytes_s"]) == (7, 153.6 / 2, 7 * 153.6)
    assert g.source.startswith("https://www.amd.com/") and g.raw["uncertain"]  # read through copies: marked


@pytest.mark.parametrize(("name", "key"), [("AMD Instinct MI325X", "mi325x"), ("AMD Instinct MI355X", "mi355x"),
                                           ("Instinct mi355x", "mi355x"), ("NVIDIA h100-sxm", "h100-sxm")])
def test_device_names_with_vendor_words_resolve(name: str, key: str) -> None:
    # rocm-smi / rccl-tests print "AMD Instinct <part>": the vendor words (gpu_aliases.vendor_words) are skipped
    assert catalog().resolve_gpu_key(name) == key
    assert catalog().resolve_gpu_key("AMD Instinct") is None
