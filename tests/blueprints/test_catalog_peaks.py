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
