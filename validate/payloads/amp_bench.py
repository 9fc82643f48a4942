#!/usr/bin/env python3
"""GPT-style synthetic training benchmark: mixed precision (AMP) throughput, MFU and a falling loss.

The model is a plain pre-LayerNorm GPT (token + position embeddings, ``layers`` blocks of causal
``scaled_dot_product_attention`` and a 4x GELU MLP, final LayerNorm, output head tied to the token
embedding), trained with AdamW on ONE fixed random batch repeated every step: a learnable task
(memorisation), so a healthy run's loss starts near ln(vocab) and falls.

Precision: ``bf16`` runs forward and loss under ``torch.autocast(dtype=torch.bfloat16)``;
``fp16`` adds ``torch.amp.GradScaler`` (PyTorch AMP docs,
https://docs.pytorch.org/docs/stable/amp.html); ``auto`` picks bf16 where the device supports it,
else fp16. ``--fp32-baseline`` trains a fresh copy of the same model for the same steps in fp32
(``torch.backends.cuda.matmul.allow_tf32`` left at its default, off) to measure the AMP speed-up.
``--compile`` wraps the model in ``torch.compile`` (falls back to eager with a warning on stderr
when compilation is unavailable, and reports ``"compile": false``).

FLOPs: model FLOPs per token = 6·N + 12·L·d·T (N = parameters without the position embedding,
tied embedding counted once; L layers, d hidden, T sequence length), as in karpathy/nanoGPT
``estimate_mfu`` and pytorch/torchtitan. ``model_tflops`` is the achieved model TFLOP/s
(1e12 FLOP/s) PER DEVICE; ``mfu = model_tflops / peak_tflops``, where ``--peak-tflops`` is the
device's dense peak for the precision (the node has no catalog: the caller passes it).

Under torchrun (WORLD_SIZE > 1) every rank trains with DistributedDataParallel (NCCL on GPUs,
gloo on CPUs) and rank 0 writes the result; ``tokens_per_s`` is then the total over ranks.

Output: one JSON document, exactly these keys::

    {"kind": "amp", "version": 1, "device": "cpu"|"cuda", "gpu_name": str|null, "gpu_count": int,
     "precision": "bf16"|"fp16"|"fp32", "compile": bool,
     "model": {"layers", "hidden", "heads", "seq_len", "vocab", "parameters"},
     "batch_size": int, "steps": int, "tokens_per_s": float, "step_time_s": float,
     "model_tflops": float, "peak_tflops": float|null, "mfu": float|null,
     "peak_memory_bytes": int, "loss_start": float, "loss_end": float, "losses": [float],
     "fp32_baseline": {"tokens_per_s", "step_time_s", "loss_start", "loss_end"}|null,
     "software": {"torch": str|null, "cuda": str|null, "nccl": str|null, "python": str},
     "error": str|null}

``software`` is what the run itself used: ``torch.__version__``, ``torch.version.cuda`` (the CUDA the
wheel was built for; ``null`` for a CPU build) and ``torch.cuda.nccl.version()`` as ``X.Y.Z`` (the
NCCL the wheel carries; ``null`` without CUDA), and the interpreter's version.

``steps`` counts the timed steps; ``losses`` holds every step's loss, warm-up included;
``batch_size`` is per device; ``peak_memory_bytes`` is ``torch.cuda.max_memory_allocated`` on GPUs
and the process's peak resident set size on CPUs. On an error (e.g. CUDA out of memory) the
document still has every key, with ``error`` set, and the exit status is 1. A non-finite loss
is written as JSON ``NaN``/``Infinity`` (what Python's ``json`` reads back as a float).

Example (a GPT of about 1.3B parameters on one H100/H200)::

    python3 amp_bench.py --layers 24 --hidden 2048 --heads 16 --seq-len 2048 --vocab 50304 \\
        --batch-size 8 --steps 20 --compile --fp32-baseline --peak-tflops 989 --output amp.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

VERSION = 1


def _die_with_parent() -> None:
    """With ``CLUSTERFORGE_DIE_WITH_PARENT=1`` (set by clusterforge's launchers), get SIGTERM when the
    launching process dies, so a killed validation run leaves no benchmark running (Linux only)."""
    if os.environ.get("CLUSTERFORGE_DIE_WITH_PARENT") != "1" or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before prctl
        sys.exit(143)


def flops_per_token(params_no_pos: int, layers: int, hidden: int, seq_len: int) -> int:
    """Model FLOPs per token for one forward+backward: ``6*N + 12*L*d*T`` (nanoGPT/torchtitan)."""
    return 6 * params_no_pos + 12 * layers * hidden * seq_len


def build_model(layers: int, hidden: int, heads: int, seq_len: int, vocab: int) -> Any:
    """The GPT ``torch.nn.Module``; ``.count_params()`` returns N without the position embedding."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc = nn.Linear(hidden, 4 * hidden)
            self.out = nn.Linear(4 * hidden, hidden)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q = q.view(b, t, heads, c // heads).transpose(1, 2)
            k = k.view(b, t, heads, c // heads).transpose(1, 2)
            v = v.view(b, t, heads, c // heads).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(seq_len, hidden)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
            self.head.weight = self.wte.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def count_params(self) -> int:
            return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

        def forward(self, idx: Any, targets: Any) -> Any:
            t = idx.shape[1]
            pos = torch.arange(t, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def _peak_rss_bytes() -> int:
    try:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)
    except (ImportError, OSError):
        return 0


class _Run:
    """Shared state of one benchmark process (device, distributed setup)."""

    def __init__(self, args: argparse.Namespace):
        import torch

        self.torch = torch
        self.args = args
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        if args.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch sees no CUDA device")
        if use_cuda:
            torch.cuda.set_device(local % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.dist = None
        if self.world > 1:
            import torch.distributed as dist

            dist.init_process_group("nccl" if use_cuda else "gloo")
            self.dist = dist

    def precision(self) -> str:
        p = self.args.precision
        if p != "auto":
            return p
        if self.device.type == "cuda":
            return "bf16" if self.torch.cuda.is_bf16_supported() else "fp16"
        return "bf16"

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def train(self, precision: str, compile_model: bool) -> dict[str, Any]:
        """Train a fresh model; returns step times (timed steps), losses (all steps), params, compiled."""
        torch, args = self.torch, self.args
        torch.manual_seed(args.seed)
        model = build_model(args.layers, args.hidden, args.heads, args.seq_len, args.vocab).to(self.device)
        params = model.count_params()
        g = torch.Generator(device="cpu").manual_seed(args.seed + 1 + self.rank)
        data = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=g).to(self.device)
        x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        net: Any = model
        if self.dist is not None:
            from torch.nn.parallel import DistributedDataParallel as DDP

            net = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        compiled = False
        if compile_model:
            try:
                net = torch.compile(net)
                compiled = True
            except Exception as e:  # noqa: BLE001 - compile is optional: report and run eager
                print(f"amp_bench: torch.compile unavailable ({type(e).__name__}: {e}); running eager", file=sys.stderr)
        fused = self.device.type == "cuda"
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0,
                                **({"fused": True} if fused else {}))
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        losses: list[float] = []
        times: list[float] = []
        total = args.warmup_steps + args.steps

        def step() -> float:
            opt.zero_grad(set_to_none=True)
            if dtype is not None:
                with torch.autocast(device_type=self.device.type, dtype=dtype):
                    loss = net(x, y)
            else:
                loss = net(x, y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            return float(loss.detach().float().item())

        for i in range(total):
            self._sync()
            t0 = time.perf_counter()
            try:
                loss = step()
            except Exception as e:
                if compiled and i == 0 and "OutOfMemory" not in type(e).__name__:
                    print(f"amp_bench: torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                          "running eager", file=sys.stderr)
                    net = model if self.dist is None else net._orig_mod  # type: ignore[attr-defined]
                    compiled = False
                    loss = step()
                else:
                    raise
            self._sync()
            dt = time.perf_counter() - t0
            losses.append(loss)
            if i >= args.warmup_steps:
                times.append(dt)
        step_time = sum(times) / len(times)
        if self.dist is not None:
            t = torch.tensor([step_time], dtype=torch.float64, device=self.device)
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
            step_time = float(t.item())
        return {"step_time_s": step_time, "losses": losses, "params": params, "compiled": compiled}


def _empty_doc(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kind": "amp", "version": VERSION, "device": "cpu", "gpu_name": None, "gpu_count": 0,
        "precision": args.precision if args.precision != "auto" else "bf16", "compile": bool(args.compile),
        "model": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": args.seq_len,
                  "vocab": args.vocab, "parameters": 0},
        "batch_size": args.batch_size, "steps": args.steps, "tokens_per_s": 0.0, "step_time_s": 0.0,
        "model_tflops": 0.0, "peak_tflops": args.peak_tflops, "mfu": None, "peak_memory_bytes": 0,
        "loss_start": 0.0, "loss_end": 0.0, "losses": [], "fp32_baseline": None,
        "software": software_versions(), "error": None,
    }


def software_versions() -> dict[str, str | None]:
    """The versions this process runs: torch, the CUDA its wheel was built for, the NCCL it carries (``None`` where
    torch is missing or has no CUDA), and Python. Never raises."""
    out: dict[str, str | None] = {"torch": None, "cuda": None, "nccl": None,
                                  "python": ".".join(str(p) for p in sys.version_info[:3])}
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch: the error is reported by the run itself
        return out
    out["torch"] = str(torch.__version__)
    out["cuda"] = getattr(torch.version, "cuda", None)
    try:
        if out["cuda"] and torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - a build without NCCL: its NCCL stays unknown
        out["nccl"] = None
    return out


def run(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """Run the benchmark; returns ``(document, rank)``. Errors end up in ``document["error"]``."""
    doc = _empty_doc(args)
    rank = 0
    try:
        r = _Run(args)
        rank = r.rank
        torch = r.torch
        doc["device"] = r.device.type
        if r.device.type == "cuda":
            doc["gpu_name"] = torch.cuda.get_device_name(r.device)
            doc["gpu_count"] = r.world
            torch.cuda.reset_peak_memory_stats(r.device)
        precision = r.precision()
        doc["precision"] = precision
        res = r.train(precision, args.compile)
        doc["compile"] = res["compiled"]
        if r.device.type == "cuda":
            doc["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(r.device))
        else:
            doc["peak_memory_bytes"] = _peak_rss_bytes()
        n = res["params"]
        fpt = flops_per_token(n, args.layers, args.hidden, args.seq_len)
        tokens_per_s = args.batch_size * args.seq_len * r.world / res["step_time_s"]
        per_device_tflops = fpt * tokens_per_s / r.world / 1e12
        doc["model"]["parameters"] = n
        doc["tokens_per_s"] = tokens_per_s
        doc["step_time_s"] = res["step_time_s"]
        doc["model_tflops"] = per_device_tflops
        doc["mfu"] = per_device_tflops / args.peak_tflops if args.peak_tflops else None
        doc["losses"] = res["losses"]
        doc["loss_start"] = res["losses"][0]
        doc["loss_end"] = res["losses"][-1]
        if args.fp32_baseline and precision != "fp32":
            if r.device.type == "cuda":
                torch.cuda.empty_cache()
            base = r.train("fp32", args.compile)
            doc["fp32_baseline"] = {
                "tokens_per_s": args.batch_size * args.seq_len * r.world / base["step_time_s"],
                "step_time_s": base["step_time_s"],
                "loss_start": base["losses"][0],
                "loss_end": base["losses"][-1],
            }
        if r.dist is not None:
            r.dist.barrier()
            r.dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - the document carries the error to the judge
        name = type(e).__name__
        msg = str(e).splitlines()[0] if str(e) else name
        if "OutOfMemory" in name:
            msg = (f"CUDA out of memory at batch_size {args.batch_size}, seq_len {args.seq_len}: "
                   f"lower validation.amp.batch_size or the model size ({msg})")
        doc["error"] = f"{name}: {msg}"
    return doc, rank


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="amp_bench.py", description="GPT-style synthetic AMP training benchmark.")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--batch-size", type=int, default=8, help="micro-batch per device")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (compilation happens here)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--fp32-baseline", action="store_true", help="also train in fp32 for the speed-up")
    p.add_argument("--peak-tflops", type=float, default=None, help="device dense peak TFLOP/s for the precision")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--output", help="write the JSON here (default stdout)")
    return p

MISSING_TOOL = "clusterforge: missing tool:"
"""Start of the line a payload prints (stderr and ``--output``) when a tool it needs is not installed;
it then exits 127 and the runner makes the test's result ``invalid`` with the line's advice."""


def missing_torch(output: str | None) -> int | None:
    """127 after printing the missing-tool line when torch cannot be imported here, else ``None``."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return None
    line = (f"{MISSING_TOOL} torch (PyTorch) is not installed for {sys.executable}: install it with "
            "`pip install torch` (https://pytorch.org/get-started/locally/)")
    print(line, file=sys.stderr)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(f"# {line}\n")
    return 127


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns 0, or 1 when the document carries an error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    rc = missing_torch(args.output)
    if rc is not None:
        return rc
    _die_with_parent()
    if args.steps < 1 or args.warmup_steps < 0 or args.batch_size < 1:
        parser.error("--steps >= 1, --warmup-steps >= 0 and --batch-size >= 1")
    doc, rank = run(args)
    if rank == 0:
        text = json.dumps(doc, indent=2)
        if args.output:
            tmp = args.output + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            os.replace(tmp, args.output)
        else:
            print(text)
    if doc["error"]:
        print(f"amp_bench: {doc['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
