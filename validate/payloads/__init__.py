"""Payloads: the programs that run ON the cluster nodes during validation.

Every module here uses the Python standard library (Python >= 3.9) and torch only (no
clusterforge or blueprints import), so each file can be copied to a node on its own and run as
``python3 collectives.py ...`` as well as ``python3 -m validate.payloads.collectives ...``.

* :mod:`.node_health`: node health collector (standard library only) printing one JSON document per node.
* :mod:`.collectives`: torch.distributed collective benchmark printing the nccl-tests table.
* :mod:`.nccl_tests`: runs the nccl-tests binaries (``all_reduce_perf`` ...) directly or via mpirun.
* :mod:`.fio_bench`: fio profiles (1 MiB sequential read/write, 4 KiB random read) on one directory.
* :mod:`.amp_bench`: GPT-style synthetic training benchmark (bf16/fp16 autocast, fp32 baseline, MFU).
* :mod:`.profile_bench`: the AMP step under ``torch.profiler`` on every rank, a Chrome trace per rank and each
  rank's breakdown; it imports :mod:`.amp_bench` and :mod:`.trace_breakdown` from its own folder (the profile
  suite names all three, so they are copied together).
* :mod:`.trace_breakdown`: a PyTorch profiler trace's step time by category, after Holistic Trace Analysis
  (standard library only; the judge imports it too).

Each suite names its own payload files (``Suite.payloads``); the launchers (:mod:`validate.launchers`)
and ``clusterforge render`` copy the registered suites' files (:func:`validate.suites.payload_files`).
"""

from __future__ import annotations

from pathlib import Path

PAYLOAD_DIR = Path(__file__).resolve().parent
"""Directory that holds the payload files."""
