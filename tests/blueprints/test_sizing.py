"""Workload sizing: each formula against the figures its source publishes, then the verdicts of
`clusterforge check` on realistic workloads.

The formula tests type the paper's own numbers (URL next to each); they never compare with a
constant of ``blueprints.sizing``. The table of realistic workloads gives, per row, the verdict the
published arithmetic gives; the comment of each row shows that arithmetic by hand.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from blueprints import check, load_blueprint, parse_blueprint
from blueprints.models import Workload
from blueprints.sizing import (
    activation_bytes_per_layer,
    adapter_parameters,
    flops_per_token,
    kv_bytes_per_token,
    logits_bytes,
    model_state_bytes_per_param,
    spec,
)
from clusterforge.cli import main

from .rule_cases.emit import emit

EXAMPLES = Path(__file__).resolve().parents[2] / "blueprints" / "examples"
GIB = 2**30


# ---- formulas against their sources ------------------------------------------------------------------


def test_zero_model_states_match_the_papers_7_5b_example() -> None:
    """ZeRO (https://arxiv.org/abs/1910.02054) Figure 1: a 7.5B model, N_d = 64, K = 12, per GPU:
    baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB."""
    psi, nd = 7.5e9, 64
    got = [psi * model_state_bytes_per_param("adam", stage, nd) / 1e9 for stage in (0, 1, 2, 3)]
    assert [round(g, 1) for g in got] == [120.0, 31.4, 16.6, 1.9]


def test_zero_mixed_precision_adam_is_16_bytes_per_parameter() -> None:
    """ZeRO section 3.1: 'a model with Psi parameters ... requires 16 Psi bytes of memory' (2+2+12);
    GPT-2 1.5B: 'at least 24 GB'."""
    assert 1.5e9 * model_state_bytes_per_param("adam") / 1e9 == 24.0


def test_korthikanti_attention_term_for_gpt3() -> None:
    """Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198) section 4.1: for GPT-3 (a = 96,
    s = 2048, h = 12288) 5as/h = 80, against 34 for the rest of the layer; selective recomputation
    stores 34 of the 114 units, saving 70 %."""
    s, b, h, a = 2048, 1, 12288, 96
    unit = s * b * h
    assert activation_bytes_per_layer(s, b, h, a) / unit == 34 + 80
    saved = 1 - activation_bytes_per_layer(s, b, h, a, recompute="selective") / activation_bytes_per_layer(s, b, h, a)
    assert round(saved, 2) == 0.70
    # MT-NLG 530B (a = 128, h = 20480): 5as/h = 64, the paper's second example
    assert activation_bytes_per_layer(s, 1, 20480, 128) / (s * 20480) == 34 + 64


def test_korthikanti_table_2_rows_at_t_8() -> None:
    """Table 2 with t = 8 (GPT-3's tensor parallelism in Table 3): TP alone 10 + 24/t + 5as/(ht),
    TP + SP (34 + 5as/h)/t, TP + selective 10 + 24/t, TP + SP + selective 34/t, full recompute 2."""
    s, h, a, t = 2048, 12288, 96, 8
    unit = s * h
    assert activation_bytes_per_layer(s, 1, h, a, t=t, sequence_parallel=False) / unit == 10 + 3 + 10
    assert activation_bytes_per_layer(s, 1, h, a, t=t) / unit == (34 + 80) / 8
    assert activation_bytes_per_layer(s, 1, h, a, t=t, sequence_parallel=False, recompute="selective") / unit == 13
    assert activation_bytes_per_layer(s, 1, h, a, t=t, recompute="selective") / unit == 34 / 8
    assert activation_bytes_per_layer(s, 1, h, a, t=t, recompute="full") / unit == 2


def test_logits_are_fp32() -> None:
    """Korthikanti section 4.3: the cross-entropy logits take 4*s*b*v/t bytes."""
    assert logits_bytes(2048, 1, 51200, 8) == 4 * 2048 * 51200 / 8


def test_palm_flops_reproduce_the_papers_mfu() -> None:
    """PaLM (https://arxiv.org/abs/2204.02311): 540.35B parameters, L = 118, H = 48, Q = 256, T = 2048
    (Table 1); 238.3K tokens/s on 6144 TPU v4 chips of 275 TFLOP/s is 46.2 % MFU (Table 3)."""
    per_token = flops_per_token(540.35e9, 118, 48, 256, 2048)
    mfu = 238.3e3 * per_token / (6144 * 275e12)
    assert round(mfu, 3) == 0.462


def test_kv_cache_gqa_and_mla() -> None:
    """GQA: 2 x layers x kv_heads x head_dim x bytes; Llama 3.1 70B (config.json: 80 layers, 8 KV heads
    of 128) in bf16 is 327,680 bytes per token. MLA (DeepSeek-V2, https://arxiv.org/abs/2405.04434,
    Table 1): (d_c + d_h^R) x l = 4.5 d_h x l elements per token, d_h = 128; DeepSeek-V3 has l = 61."""
    llama = spec(Workload(model="llama-3.1-70b")).shape  # type: ignore[union-attr]
    assert llama is not None and kv_bytes_per_token(llama, 2) == 2 * 80 * 8 * 128 * 2 == 327_680
    ds = spec(Workload(model="deepseek-v3", architecture="moe")).shape  # type: ignore[union-attr]
    assert ds is not None and kv_bytes_per_token(ds, 1) == 4.5 * 128 * 61


def test_lora_adapter_count() -> None:
    """LoRA (https://arxiv.org/abs/2106.09685) Table 5: on GPT-3 175B, 18M trainable parameters are r = 8 on
    W_q alone, r = 4 on W_q and W_v, or r = 2 on W_q, W_k, W_v, W_o (r x (d + k) per matrix, 96 layers)."""
    gpt3 = spec(Workload(model="gpt-3-175b")).shape  # type: ignore[union-attr]
    assert gpt3 is not None
    for rank, targets in ((8, ("q",)), (4, ("q", "v")), (2, ("q", "k", "v", "o"))):
        assert int(adapter_parameters(gpt3, rank, targets=targets) / 1e6) == 18  # 18.87M
    # every linear layer (QLoRA): the four attention matrices and the three MLP matrices of width 4h
    h = 12288
    assert adapter_parameters(gpt3, 1) == 96 * (4 * 2 * h + 3 * (h + 4 * h))


# ---- realistic workloads through `clusterforge check` --------------------------------------------------

WORKLOAD_RULES = {"training-memory-fit", "training-memory-headroom", "inference-memory-fit", "inference-kv-concurrency",
                  "inference-memory-per-node", "moe-fabric-bandwidth", "parallel-fabric-demand", "workload-shape"}


def _p5(nodes: int, instance: str = "p5.48xlarge") -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        doc["node_groups"][0]["count"] = nodes
        doc["node_groups"][0]["instance_type"] = instance
    return mutate


def _one_gpu(model: str) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        doc["node_groups"][0]["hardware"] = {"gpu": f"{model}:1"}
    return mutate


def _nothing(doc: dict[str, Any]) -> None:
    return None


P5 = "aws-p5-efa-lustre"  # p5.48xlarge: 8 x H100, 80 GiB each (85.9 GB; usable 0.9 x 85.9 = 77.3 GB), 3200 Gbit/s EFA
# Each row: (name, example, change, workload, {rule: severity} expected from the workload rules).
ROWS: list[tuple[str, str, Any, dict[str, Any], dict[str, str]]] = [
    # 8.03B x 16 / 8 = 16.1 GB states + 34*8192*4096*32 = 36.5 GB activations + 4*8192*128256 = 4.2 GB logits = 56.8 GB
    ("llama-3.1-8b 8k, 1 x p5", P5, _p5(1), {"model": "llama-3.1-8b", "sequence_length": 8192}, {}),
    # 128k: activations 34*131072*4096*32 = 584 GB per GPU: cannot fit without splitting the sequence
    ("llama-3.1-8b 128k, 1 x p5", P5, _p5(1), {"model": "llama-3.1-8b", "sequence_length": 131072},
     {"training-memory-fit": "error"}),
    # tp8 + full recompute: 16.1 states (dp=1) + 2*131072*4096*32 = 34.4 + live layer 2.3 + logits 8.4 = 61 GB
    ("llama-3.1-8b 128k, 1 x p5, TP8, full recompute", P5, _p5(1),
     {"model": "llama-3.1-8b", "sequence_length": 131072, "tensor_parallel": 8, "recompute": "full"}, {}),
    # 70.6/8 x 16/8 = 17.7 GB + 34*8192*8192*80/8 = 22.8 GB + 0.5 GB = 41 GB
    ("llama-3.1-70b 8k, 8 x p5, TP8", P5, _p5(8), {"model": "llama-3.1-70b", "sequence_length": 8192, "tensor_parallel": 8}, {}),
    # 128k, TP8 alone: 34*131072*8192*80/8 = 365 GB of activations
    ("llama-3.1-70b 128k, 8 x p5, TP8", P5, _p5(8),
     {"model": "llama-3.1-70b", "sequence_length": 131072, "tensor_parallel": 8}, {"training-memory-fit": "error"}),
    # CP8 puts 16384 tokens on a GPU: 17.7 + 34*16384*8192*80/8 = 45.6 + 1.1 = 64.3 GB; TP8 x CP8 spans nodes:
    # ring KV passes 3*7*2*16384*8*128*2/8*80 = 2.8 GB at 50 GB/s = 56 ms < 2.2 s of compute
    ("llama-3.1-70b 128k, 8 x p5, TP8 CP8", P5, _p5(8),
     {"model": "llama-3.1-70b", "sequence_length": 131072, "tensor_parallel": 8, "context_parallel": 8}, {}),
    # Llama 3 paper's 405B layout (section 3.3.2): TP8 PP16, DP128 on 16,384 H100: 405.9/128 x 16/128 = 0.4 GB +
    # 34*8192*16384*126/8 = 71.9 GB + 0.5 GB = 72.8 GB < 77.3
    ("llama-3.1-405b 8k, 2048 x p5, TP8 PP16", P5, _p5(2048),
     {"model": "llama-3.1-405b", "sequence_length": 8192, "tensor_parallel": 8, "pipeline_parallel": 16}, {}),
    # Llama 3 paper's 128k layout (Table 4): TP8 CP16 PP16 on 16,384 GPUs: 8192 tokens per GPU, as above
    ("llama-3.1-405b 128k, 2048 x p5, TP8 CP16 PP16", P5, _p5(2048),
     {"model": "llama-3.1-405b", "sequence_length": 131072, "tensor_parallel": 8, "context_parallel": 16,
      "pipeline_parallel": 16}, {}),
    # 4 DGX H100 (80 GB vendor GB, usable 72 GB): 72.7/8 x 16/4 = 36.4 GB + 34*16384*8192*80/8 = 45.6 GB +
    # 4*16384*152064/8 = 1.2 GB = 83.2 GB > 80 GB
    ("qwen2.5-72b 32k, 4 x DGX H100, TP8 CP2", "onprem-dgx-h100-ib", _nothing,
     {"model": "qwen2.5-72b", "sequence_length": 32768, "tensor_parallel": 8, "context_parallel": 2},
     {"training-memory-fit": "error"}),
    # 405.9B x 16 bytes = 6.5 TB of model states on 16 GPUs of 85.9 GB
    ("llama-3.1-405b 8k, 2 x p5", P5, _p5(2), {"model": "llama-3.1-405b", "sequence_length": 8192, "tensor_parallel": 8},
     {"training-memory-fit": "error"}),
    # 46.7 x 16/16 = 46.7 GB + 34*8192*4096*32 = 36.5 GB + 1.05 GB = 84.3 GB: above 77.3, below 85.9
    ("mixtral-8x7b 8k, 2 x p5, EP8", P5, _p5(2), {"model": "mixtral-8x7b", "architecture": "moe", "sequence_length": 8192},
     {"training-memory-headroom": "warning"}),
    # EP16 across the two p4d nodes: 4 x 4096 tokens x top-2 x 4096 x 2 bytes x 15/16 x 32 layers = 8.1 GB at
    # 400 Gbit/s / 8 GPUs = 6.25 GB/s (1.29 s) vs 4096 x (6 x 12.9e9 + 12*32*32*128*4096) / 312e12 = 1.10 s;
    # memory: 46.7 GB of states alone exceed an A100's 40 GiB
    ("mixtral-8x7b 4k, 2 x p4d, EP16", "aws-eks-p4d", _nothing,
     {"model": "mixtral-8x7b", "architecture": "moe", "expert_parallel": 16},
     {"training-memory-fit": "error", "moe-fabric-bandwidth": "warning"}),
    # weights 141.2 GB; KV 327,680 B/token x 131072 = 42.9 GB; (8 x 77.3 - 141.2) / 42.9 = 11 requests
    ("serve llama-3.1-70b bf16 128k x 32, 1 x p5", P5, _p5(1),
     {"purpose": "inference", "model": "llama-3.1-70b", "sequence_length": 131072, "concurrency": 32},
     {"inference-kv-concurrency": "warning"}),
    # fp8 405.9 GB; KV 2*126*8*128*2 = 516 KB/token x 131072 = 67.6 GB; (618.5 - 405.9) / 67.6 = 3 requests
    ("serve llama-3.1-405b fp8 128k, 1 x p5", P5, _p5(1),
     {"purpose": "inference", "model": "llama-3.1-405b", "quantization": "fp8", "sequence_length": 131072}, {}),
    # bf16 811.8 GB of weights > 8 x 77.3 = 618.5 GB (16 GPUs hold them: two nodes, so also the per-node warning)
    ("serve llama-3.1-405b bf16, 2 x p5", P5, _p5(2),
     {"purpose": "inference", "model": "llama-3.1-405b", "sequence_length": 8192},
     {"inference-memory-per-node": "warning"}),
    ("serve llama-3.1-405b bf16, 1 x p5", P5, _p5(1),
     {"purpose": "inference", "model": "llama-3.1-405b", "sequence_length": 8192}, {"inference-memory-fit": "error"}),
    # fp8 671 GB; MLA KV 576 x 61 x 2 bytes = 70 KB/token x 131072 = 9.2 GB; p5e 8 x 141 GiB x 0.9 = 1090 GB: 45 fit
    ("serve deepseek-v3 fp8 128k x 16, 1 x p5e", P5, _p5(1, "p5e.48xlarge"),
     {"purpose": "inference", "model": "deepseek-v3", "architecture": "moe", "quantization": "fp8",
      "sequence_length": 131072, "concurrency": 16}, {}),
    # LoRA r=16: 16.1 GB frozen bf16 + 41.9M adapters x 16 = 0.7 GB + 34*4096*4096*32 = 18.3 GB + 2.1 GB = 37 GB < 43.2
    ("LoRA llama-3.1-8b 4k, 1 x L40S", "local-workstation", _one_gpu("l40s"),
     {"model": "llama-3.1-8b", "finetuning": "lora"}, {}),
    # full fine-tuning: 8.03B x 16 = 128 GB of model states on one 48 GB GPU
    ("full fine-tune llama-3.1-8b, 1 x L40S", "local-workstation", _one_gpu("l40s"),
     {"model": "llama-3.1-8b"}, {"training-memory-fit": "error"}),
    # QLoRA abstract: a 65B model fine-tunes on one 48 GB GPU. LLaMA-65B shape; 65.2B x 4.127/8 = 33.6 GB + adapters
    # r=16 (0.2B x 16 = 3.2 GB) + full recompute at 512 tokens (0.7 GB) + logits 0.07 GB = 37.6 GB < 43.2
    ("QLoRA 65B 512 tokens, 1 x L40S", "local-workstation", _one_gpu("l40s"),
     {"parameters_b": 65.2, "shape": {"layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 22016, "vocab": 32000},
      "finetuning": "qlora", "sequence_length": 512, "recompute": "full"}, {}),
]


def _verdicts(base: str, change: Any, workload: dict[str, Any], tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    doc = copy.deepcopy(load_blueprint(EXAMPLES / f"{base}.yaml").data)
    change(doc)
    doc["workload"] = workload
    if workload.get("architecture") == "moe":
        doc.setdefault("validation", {}).setdefault("nccl", {})["collectives"] = ["all_reduce", "alltoall"]
    text, _ = emit(doc)
    findings = [f for f in check(parse_blueprint(text, "w.yaml")) if f.rule_id in WORKLOAD_RULES]
    return {f.rule_id: f.severity for f in findings}, [f.format() for f in findings]


@pytest.mark.parametrize(("name", "base", "change", "workload", "want"), ROWS, ids=[r[0] for r in ROWS])
def test_realistic_workloads(name: str, base: str, change: Any, workload: dict[str, Any], want: dict[str, str],
                             tmp_path: Path) -> None:
    got, lines = _verdicts(base, change, workload, tmp_path)
    assert got == want, "\n".join(lines)


def test_long_context_serving_names_the_requests_that_fit(tmp_path: Path) -> None:
    """(8 x 0.9 x 80 GiB - 141.2 GB) / (327,680 B x 131072) = 11.07: 11 full-context requests."""
    _, lines = _verdicts(P5, _p5(1), {"purpose": "inference", "model": "llama-3.1-70b", "sequence_length": 131072,
                                      "concurrency": 32}, tmp_path)
    assert any("11 full-context requests of 131072 tokens fit" in line for line in lines), lines


def test_kv_cache_boundary_one_request(tmp_path: Path) -> None:
    """One 8 x H100 node, bf16 Llama 3.1 70B: 477 GB left for the KV cache holds 1,455,000 tokens
    (477.3e9 / 327,680); a single request longer than that is an error, one shorter is not."""
    usable = 8 * 0.9 * 80 * GIB - 70.6e9 * 2
    tokens = int(usable // 327_680)
    wl = {"purpose": "inference", "model": "llama-3.1-70b"}
    over, _ = _verdicts(P5, _p5(1), wl | {"sequence_length": tokens + 1}, tmp_path)
    under, _ = _verdicts(P5, _p5(1), wl | {"sequence_length": tokens}, tmp_path)
    assert over == {"inference-memory-fit": "error"} and under == {}


def test_training_error_names_the_layout_that_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """8B at 128k on one p5: selective recompute alone stores 584 GB per GPU; halving the tokens per GPU
    (CP2) and keeping only layer inputs (2*65536*4096*32 = 17.2 GB + live layer 9.1 + logits 33.6 + 16.1)
    fits in 77.3 GB."""
    doc = copy.deepcopy(load_blueprint(EXAMPLES / f"{P5}.yaml").data)
    _p5(1)(doc)
    doc["workload"] = {"model": "llama-3.1-8b", "sequence_length": 131072}
    text, _ = emit(doc)
    f = tmp_path / "w.yaml"
    f.write_text(text)
    assert main(["check", str(f)]) == 1
    out = capsys.readouterr().out
    assert "training-memory-fit" in out and "use context parallelism 2, full recompute" in out, out


def test_activation_boundary_in_sequence_length(tmp_path: Path) -> None:
    """Llama 3.1 8B (config.json: L = 32, h = 4096, v = 128256) on one p5 with TP8 and full recompute.
    Per GPU: states 8.03e9 / 8 x 16 = 16.06 GB (ZeRO: 16 bytes per parameter, N_d = 1); per token 2*h*L
    (full recompute, Korthikanti Table 2) + 34*h/8 (the layer being recomputed) + 4*v/8 (fp32 logits)
    = 262,144 + 17,408 + 64,128 = 343,680 bytes. Usable 0.9 x 80 GiB: (77.31e9 - 16.06e9) / 343,680 =
    178,216 tokens; the whole GPU: (85.90e9 - 16.06e9) / 343,680 = 203,210 tokens."""
    per_token = 2 * 4096 * 32 + 34 * 4096 / 8 + 4 * 128256 / 8
    states = 8.03e9 / 8 * 16
    fits = int((0.9 * 80 * GIB - states) // per_token)
    whole = int((80 * GIB - states) // per_token)
    assert (fits, whole) == (178_216, 203_210)
    wl = {"model": "llama-3.1-8b", "tensor_parallel": 8, "recompute": "full"}
    verdict = {s: _verdicts(P5, _p5(1), wl | {"sequence_length": s}, tmp_path)[0] for s in (fits, fits + 8, whole + 8)}
    assert verdict == {fits: {}, fits + 8: {"training-memory-headroom": "warning"},
                       whole + 8: {"training-memory-fit": "error"}}


def test_moe_all_to_all_boundary(tmp_path: Path) -> None:
    """Mixtral 8x7B (config.json: L = 32, h = 4096, a = 32, head_dim 128, top-2; 12.9B active, paper) with
    EP16 over two p4d (400 Gbit/s for 8 A100 = 6.25 GB/s per GPU; A100 bf16 312 TFLOP/s). Per token:
    all-to-all 4 x 2 x 4096 x 2 x 15/16 x 32 = 1,966,080 bytes = 314.6 us; compute (6 x 12.9e9 +
    12 x 32 x 32 x 128 x T) / 312e12 (PaLM). They cross at T = 13,190 tokens: shorter sequences are
    communication-bound, longer ones hide the all-to-all behind attention's compute."""
    comm = 4 * 2 * 4096 * 2 * 15 / 16 * 32 / 6.25e9
    cross = (comm * 312e12 - 6 * 12.9e9) / (12 * 32 * 32 * 128)
    assert int(cross) == 13_190
    wl = {"model": "mixtral-8x7b", "architecture": "moe", "expert_parallel": 16}
    near = {t: _verdicts("aws-eks-p4d", _nothing, wl | {"sequence_length": t}, tmp_path)[0].get("moe-fabric-bandwidth")
            for t in (13_100, 13_300)}
    assert near == {13_100: "warning", 13_300: None}


def test_suggestion_prefers_tensor_parallelism_to_full_recompute(tmp_path: Path) -> None:
    """Llama 3.1 70B at 8k on 8 p5 (64 GPUs) without tensor parallelism stores 34*8192*8192*80 = 182.5 GB of
    activations per GPU. TP2 halves it (91 GB, too much); TP4: 70.6e9/4 x 16/16 = 17.7 GB + 45.6 GB + 4*8192*
    128256/4 = 1.05 GB = 64.3 GB fits, without the extra forward pass of full recomputation."""
    _, lines = _verdicts(P5, _p5(8), {"model": "llama-3.1-70b", "sequence_length": 8192}, tmp_path)
    assert len(lines) == 1 and "training-memory-fit" in lines[0], lines
    assert lines[0].endswith("— use tensor parallelism 4, selective recompute (64 GB per GPU)"), lines[0]


def test_korthikanti_counts_what_pytorch_saves_for_backward() -> None:
    """The paper's per-layer count (34*s*b*h + 5*a*s^2*b bytes, 16-bit activations, 1-byte dropout masks)
    against the tensors PyTorch's autograd really keeps for the backward pass of the paper's GPT layer
    (layer norm, QKV, softmax, attention dropout, projection, 4h GeLU MLP, dropouts), in bf16 on this CPU.
    Autograd's saved-tensor hooks see every saved tensor; storages are counted once, weights not at all.
    Where PyTorch keeps a dropout mask wider than a byte (the CPU kernel keeps it in the input's type),
    the three masks (2*s*b*h + a*s^2*b elements) count the extra bytes; the layer norms' per-token
    statistics (4*s*b values), which the paper leaves out, are added."""
    import torch
    from torch import nn
    from torch.nn import functional as fn

    s, b, h, a = 256, 2, 512, 8

    class GptLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.qkv, self.proj = nn.LayerNorm(h), nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.ln2, self.fc1, self.fc2 = nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x: Any) -> Any:
            q, k, v = self.qkv(self.ln1(x)).view(s, b, 3, a, h // a).permute(2, 1, 3, 0, 4)
            p = fn.dropout(torch.softmax(q @ k.transpose(-1, -2) / (h // a) ** 0.5, -1), 0.1, True)
            x = x + fn.dropout(self.proj((p @ v).permute(2, 0, 1, 3).reshape(s, b, h)), 0.1, True)
            return x + fn.dropout(self.fc2(fn.gelu(self.fc1(self.ln2(x)))), 0.1, True)

    torch.manual_seed(0)
    layer = GptLayer().to(torch.bfloat16)
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    saved: dict[int, int] = {}
    mask_bytes: list[int] = []

    def keep(t: Any) -> Any:
        if t.untyped_storage().data_ptr() not in weights:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        layer(torch.randn(s, b, h, dtype=torch.bfloat16, requires_grad=True))
    probe = torch.ones(8, dtype=torch.bfloat16, requires_grad=True)
    def width(t: Any) -> Any:
        mask_bytes.append(t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(width, lambda t: t):
        fn.dropout(probe, 0.5, True)
    extra_per_mask_element = max(mask_bytes) - 1
    paper = activation_bytes_per_layer(s, b, h, a)
    assert paper == s * b * h * (34 + 5 * a * s / h)
    layer_norm_stats = 2 * 2 * s * b * 2  # two layer norms' per-token mean and 1/std in bf16: left out by the paper
    assert sum(saved.values()) == paper + (2 * s * b * h + a * s * s * b) * extra_per_mask_element + layer_norm_stats


@pytest.mark.parametrize(("model", "active"), [("llama-3.1-8b", False), ("llama-3.1-70b", False), ("llama-3.1-405b", False),
                                               ("qwen2.5-7b", False), ("qwen2.5-72b", False), ("mixtral-8x7b", False),
                                               ("mixtral-8x7b", True), ("mixtral-8x22b", False), ("mixtral-8x22b", True)])
def test_catalog_shapes_add_up_to_the_published_parameter_counts(model: str, active: bool) -> None:
    """A shape typo would size everything wrong: the parameters a catalog shape implies (SwiGLU decoder:
    q, k, v, o projections, three MLP matrices per expert, untied input and output embeddings) must be
    within 1.5 % of the count its paper publishes (catalog ``parameters_b`` / ``active_parameters_b``)."""
    kind = "moe" if "mixtral" in model else "dense"
    sp = spec(Workload(model=model, architecture=kind))  # type: ignore[arg-type]
    assert sp is not None and sp.shape is not None
    sh = sp.shape
    attn = sh.hidden * sh.heads * sh.head_dim * 2 + sh.hidden * sh.kv_heads * sh.head_dim * 2
    experts = (sh.experts_per_token if active else sp.experts) or 1
    mlp = 3 * sh.hidden * (sh.expert_ffn_hidden or sh.ffn_hidden) * experts
    implied = sh.layers * (attn + mlp) + 2 * sh.vocab * sh.hidden
    published = sp.active if active else sp.parameters
    assert implied == pytest.approx(published, rel=0.015), (implied / 1e9, published / 1e9)


def test_workload_without_model_or_parameters_is_a_one_line_error(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(load_blueprint(EXAMPLES / f"{P5}.yaml").data)
    doc["workload"] = {"sequence_length": 8192}
    text, lines = emit(doc)
    f = tmp_path / "w.yaml"
    f.write_text(text)
    assert main(["check", str(f)]) == 1
    out = capsys.readouterr().out
    hit = [ln for ln in out.splitlines() if "`workload`: neither `model` nor `parameters_b` is set" in ln]
    assert hit and f"{f}:{lines[('workload',)]}:" in hit[0], out
    assert hit[0].endswith("add `model:` (e.g. `llama-3.1-70b`) or `parameters_b:`"), hit[0]
