#!/usr/bin/env python3
"""Profile the AMP suite's training step on every rank and say where each rank's step time goes.

Every rank trains the AMP payload's GPT (``amp_bench.build_model``, beside this file) with
DistributedDataParallel (NCCL on GPUs, gloo on CPUs) on batches from a real
``torch.utils.data.DataLoader``, under ``torch.profiler`` with a ``wait`` / ``warmup`` / ``active``
schedule (https://docs.pytorch.org/docs/2.13/profiler.html): CPU activity, plus CUDA on GPUs.
The active steps are exported as a Chrome trace per rank (``<trace-dir>/rank<N>.json``, opens in
Perfetto or ``chrome://tracing``), which each rank then breaks down with ``trace_breakdown.py``
(beside this file; categories and their HTA source there). Rank 0 gathers the ranks' breakdowns
and writes one JSON document.

Each step is annotated (``record_function``): ``clusterforge:data`` (the next batch from the
loader and its copy to the device), ``clusterforge:forward``, ``clusterforge:backward``,
``clusterforge:optimizer``.

Induced bounds (for testing the verdicts; every one 0 by default; applied on ``--slow-rank`` only
when it is given): ``--loader-sleep-ms`` (the loader's collate sleeps this long per batch: an
input-bound step), ``--tiny-ops N`` (N elementwise operators on a 16-element tensor per step: a
host / launch-bound step), ``--comm-mb M`` (an extra all_reduce of M MiB per step after backward:
a communication-bound step).

Ranks: under torchrun (``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` set) this process is one rank;
else ``--ranks N`` starts N local ranks itself (spawn start method, rendezvous on a free
127.0.0.1 port; on GPUs rank i uses GPU i mod count).

Output: one JSON document::

    {"kind": "profile", "version": 1, "device": "cpu"|"cuda", "gpu_name": str|null, "world_size": int,
     "precision": "bf16"|"fp16"|"fp32", "model": {...}, "batch_size": int, "num_workers": int,
     "schedule": {"wait", "warmup", "active"}, "induced": {"loader_sleep_ms", "tiny_ops", "comm_mb",
     "slow_rank"}, "step_time_s": float (mean active step, slowest rank),
     "ranks": [{"rank", "host", "trace" (relative to the output's folder), "trace_bytes",
                "step_times_s" (every step, host wall clock: no synchronisation inside the profiled loop,
                which would idle the GPU during the next batch's loading), **trace_breakdown.analyze(...)}],
     "error": str|null}

Example::

    python3 profile_bench.py --ranks 2 --layers 2 --hidden 128 --heads 4 --seq-len 64 --vocab 512 \\
        --batch-size 4 --precision fp32 --device cpu --output profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import amp_bench
import collectives
import trace_breakdown

VERSION = 1


def _trace_dir(args: argparse.Namespace) -> str:
    if args.trace_dir:
        return os.path.abspath(args.trace_dir)
    base = args.output or "profile.json"
    stem = base.removesuffix(".json")
    return os.path.abspath(stem + ".traces")


def _rel(path: str, args: argparse.Namespace) -> str:
    start = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
    return os.path.relpath(path, start)


def run_rank(args: argparse.Namespace, rank: int, world: int, local_rank: int, init_method: str | None) -> dict[str, Any] | None:
    """Train and profile one rank; returns the document on rank 0 (``None`` on the others)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch sees no CUDA device")
    if use_cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    dist: Any = None
    if world > 1:
        import torch.distributed as tdist

        dist = tdist
        kw: dict[str, Any] = {"rank": rank, "world_size": world}
        if init_method:
            kw["init_method"] = init_method
        dist.init_process_group("nccl" if use_cuda else "gloo", **kw)
    precision = args.precision
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if use_cuda else "fp32"
    slow = args.slow_rank is None or args.slow_rank == rank
    sleep_s = args.loader_sleep_ms / 1000.0 if slow else 0.0
    tiny = args.tiny_ops if slow else 0
    comm_mb = args.comm_mb if slow or dist is not None else 0.0  # a collective needs every rank

    torch.manual_seed(args.seed)
    model = amp_bench.build_model(args.layers, args.hidden, args.heads, args.seq_len, args.vocab).to(device)
    net: Any = model
    if dist is not None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[device.index] if use_cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True if use_cuda else None)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    total = args.wait + args.warmup + args.active
    g = torch.Generator().manual_seed(args.seed + 1 + rank)
    tokens = torch.randint(0, args.vocab, (total * args.batch_size, args.seq_len + 1), generator=g)

    def collate(items: list[Any]) -> Any:
        if sleep_s:
            time.sleep(sleep_s)  # induced: a slow loader (decode, augmentation, storage)
        return torch.stack(items)

    rows: Any = list(tokens)  # a list of tensors is a map-style dataset
    loader: Any = torch.utils.data.DataLoader(rows, batch_size=args.batch_size, collate_fn=collate,
                                              num_workers=args.num_workers, pin_memory=use_cuda)
    extra = torch.ones(int(comm_mb * (1 << 20)) // 4, device=device) if comm_mb and dist is not None else None
    small = torch.ones(16, device=device)
    trace_dir = _trace_dir(args)
    os.makedirs(trace_dir, exist_ok=True)
    trace_path = os.path.join(trace_dir, f"rank{rank}.json")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
    times: list[float] = []

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    with profile(activities=activities, schedule=schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(trace_path)) as prof:
        it = iter(loader)
        for i in range(total):
            t0 = time.perf_counter()
            with record_function("clusterforge:data"):
                batch = next(it).to(device, non_blocking=True)
                x, y = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
            with record_function("clusterforge:forward"):
                if dtype is not None:
                    with torch.autocast(device_type=device.type, dtype=dtype):
                        loss = net(x, y)
                else:
                    loss = net(x, y)
            with record_function("clusterforge:backward"):
                (scaler.scale(loss) if scaler is not None else loss).backward()
            if extra is not None and dist is not None:
                with record_function("clusterforge:extra_comm"):
                    dist.all_reduce(extra)  # induced: a communication-heavy step
            if tiny:
                with record_function("clusterforge:tiny_ops"):
                    t = small
                    for _ in range(tiny):
                        t = t + 1.0  # induced: many operators too small to keep the device busy
            with record_function("clusterforge:optimizer"):
                if scaler is not None:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad(set_to_none=True)
            if i == total - 1:
                sync()  # the last active step's kernels are finished before the trace is collected
            times.append(time.perf_counter() - t0)  # host side: no synchronisation between steps
            prof.step()
    if not os.path.exists(trace_path):
        raise RuntimeError(f"the profiler wrote no trace to {trace_path}")
    mine = trace_breakdown.analyze(trace_breakdown.load_trace(trace_path))
    mine.update({"rank": rank, "host": socket.gethostname(), "trace": _rel(trace_path, args),
                 "trace_bytes": os.path.getsize(trace_path), "step_times_s": times})
    everyone: list[Any] = [mine]
    if dist is not None:
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        dist.barrier()
        dist.destroy_process_group()
    if rank != 0:
        return None
    doc = _empty_doc(args)
    active = [sum(r["step_times_s"][-args.active:]) / args.active for r in everyone]
    doc.update({"device": device.type, "gpu_name": torch.cuda.get_device_name(device) if use_cuda else None,
                "world_size": world, "precision": precision, "step_time_s": max(active),
                "ranks": sorted(everyone, key=lambda r: r["rank"])})
    doc["model"]["parameters"] = model.count_params()
    return doc


def _empty_doc(args: argparse.Namespace) -> dict[str, Any]:
    return {"kind": "profile", "version": VERSION, "device": args.device if args.device != "auto" else None,
            "gpu_name": None, "world_size": args.ranks or 1, "precision": args.precision,
            "model": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": args.seq_len,
                      "vocab": args.vocab, "parameters": 0},
            "batch_size": args.batch_size, "num_workers": args.num_workers,
            "schedule": {"wait": args.wait, "warmup": args.warmup, "active": args.active},
            "induced": {"loader_sleep_ms": args.loader_sleep_ms, "tiny_ops": args.tiny_ops, "comm_mb": args.comm_mb,
                        "slow_rank": args.slow_rank},
            "step_time_s": None, "ranks": [], "error": None}


def _write(doc: dict[str, Any], output: str | None) -> None:
    text = json.dumps(doc, indent=1)
    if not output:
        print(text)
        return
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    os.replace(tmp, output)


def _error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def _spawned(local_rank: int, args: argparse.Namespace, world: int, init: str) -> None:
    """Body of one ``--ranks`` process: run the rank, rank 0 writes the document."""
    amp_bench._die_with_parent()
    try:
        doc = run_rank(args, local_rank, world, local_rank, init)
    except Exception as e:  # noqa: BLE001 - one line per rank, not a traceback
        print(f"profile_bench: rank {local_rank} failed: {_error(e)}", file=sys.stderr, flush=True)
        if local_rank == 0:
            doc = _empty_doc(args)
            doc["error"] = _error(e)
            _write(doc, args.output)
        sys.exit(1)
    if doc is not None:
        _write(doc, args.output)


def spawn(args: argparse.Namespace, nprocs: int, grace_s: float = 10.0) -> int:
    """Run ``nprocs`` ranks as local processes (:func:`collectives.spawn` with this payload's rank function);
    returns the worst exit status."""
    return collectives.spawn(args, nprocs, grace_s, target=_spawned)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="profile_bench.py", description="Profile the AMP training step on every rank.")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=4, help="micro-batch per rank (sequences)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: bf16 (fp16 without bf16) on GPUs, fp32 on CPUs")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--wait", type=int, default=1, help="profiler schedule: steps skipped")
    p.add_argument("--warmup", type=int, default=1, help="profiler schedule: steps traced and discarded")
    p.add_argument("--active", type=int, default=3, help="profiler schedule: steps recorded")
    p.add_argument("--ranks", type=int, default=0, metavar="N", help="start N local ranks (without torchrun)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--trace-dir", help="folder of the rank<N>.json traces (default: <output without .json>.traces)")
    p.add_argument("--loader-sleep-ms", type=float, default=0.0, help="induce: the loader sleeps this long per batch")
    p.add_argument("--tiny-ops", type=int, default=0, help="induce: this many tiny operators per step")
    p.add_argument("--comm-mb", type=float, default=0.0, help="induce: an extra all_reduce of this many MiB per step")
    p.add_argument("--slow-rank", type=int, default=None, help="induce the above on this rank only")
    p.add_argument("--output", help="write the JSON here (default stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: 0, 1 when a rank failed (the document then carries ``error``), 127 without torch."""
    parser = build_parser()
    args = parser.parse_args(argv)
    rc = amp_bench.missing_torch(args.output)
    if rc is not None:
        return rc
    if args.active < 1 or args.wait < 0 or args.warmup < 0 or args.batch_size < 1 or args.ranks < 0:
        parser.error("--active >= 1, --wait/--warmup >= 0, --batch-size >= 1, --ranks >= 0")
    env = os.environ
    if "WORLD_SIZE" in env and "RANK" in env:
        amp_bench._die_with_parent()
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        try:
            doc = run_rank(args, rank, world, int(env.get("LOCAL_RANK", "0")), None)
        except Exception as e:  # noqa: BLE001 - the document carries the error to the judge
            doc = _empty_doc(args) if rank == 0 else None
            if doc is not None:
                doc["error"] = _error(e)
            print(f"profile_bench: rank {rank} failed: {_error(e)}", file=sys.stderr)
            if doc is not None:
                _write(doc, args.output)
            return 1
        if doc is not None:
            _write(doc, args.output)
        return 0
    if args.ranks > 1:
        return spawn(args, args.ranks)
    try:
        doc = run_rank(args, 0, 1, 0, None)
    except Exception as e:  # noqa: BLE001
        doc = _empty_doc(args)
        doc["error"] = _error(e)
        _write(doc, args.output)
        print(f"profile_bench: {doc['error']}", file=sys.stderr)
        return 1
    assert doc is not None
    _write(doc, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
