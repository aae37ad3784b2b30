"""The kernel model's collectives: tensor-parallel all-reduce and the token exchange of
data-parallel ranks around an MoE layer.

The all-reduce follows vLLM (0.14-0.19): its custom all-reduce for messages below 8 MiB
(``CustomAllreduce.max_size``) on 2, 4, 6 or 8 GPUs of one node (off for more than two
PCIe-only GPUs, L40S), from the CUDA-graph table for steps that replay a graph (at most
``graph_max_tokens`` tokens) and the eager table above, NCCL for larger messages, and the
ring roofline where no table covers the TP size or the group spans nodes. Expert
parallelism inside one TP group exchanges no tokens (vLLM's FusedMoE runs each rank's
experts on the whole batch and the all-reduce sums them); data-parallel ranks gather and
scatter theirs with NCCL's all-gather and reduce-scatter (the packed NCCL tables).
"""

from __future__ import annotations

from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import MAX_TOKENS, LogCurve, extended_axis, log_curve
from servesim.perf.kernels import KernelDatabase

#: vLLM's custom all-reduce handles messages below this size (``CustomAllreduce.max_size``);
#: larger ones go to NCCL.
CUSTOM_AR_MAX_BYTES = 8 * 2**20


def allreduce_curve(
    gpu: GpuSpec, db: KernelDatabase | None, tp: int, width: int, eff: Efficiencies, graph_max_tokens: int
) -> tuple[LogCurve, str]:
    """(seconds of one all-reduce of T x ``width`` bf16 elements vs T, where it comes from);
    ``db`` None: the ring roofline (no tables, or a group across nodes)."""
    ts = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
    link = gpu.interconnect_bw * eff.comm
    lat_s = eff.allreduce_latency_s

    def roof(size: np.ndarray) -> np.ndarray:
        return 2.0 * (tp - 1) / tp * size * 2.0 / link + lat_s

    custom_ok = tp in (2, 4, 6, 8) and (tp == 2 or gpu.name != "L40S")
    graph = db.allreduce(tp, True) if db is not None and custom_ok else None
    eager = db.allreduce(tp, False) if db is not None and custom_ok else None
    nccl = db.nccl("all_reduce", tp) if db is not None else None
    size = ts * width
    out = np.log(roof(size))
    if nccl is not None:
        out = log_curve(nccl[0].astype(float), nccl[1], size, roof) + log(1e-3)
    small = size * 2.0 < CUSTOM_AR_MAX_BYTES
    for table, sel in ((graph, small & (ts <= graph_max_tokens)), (eager, small & (ts > graph_max_tokens))):
        if table is not None and sel.any():
            out[sel] = log_curve(table[0].astype(float), table[1], size[sel], roof) + log(1e-3)
    if nccl is None and graph is None:
        source = "roofline (ring; no all-reduce table for this TP size or link)"
    else:
        parts = (
            [f"custom (CUDA graph <= {graph_max_tokens} tokens, else eager) below 8 MiB"]
            if graph is not None
            else []
        ) + (["NCCL"] if nccl is not None else [])
        source = "table " + ", ".join(parts)
    return LogCurve(ts, out), source


def gather_scatter_curve(
    gpu: GpuSpec, db: KernelDatabase | None, num_gpus: int, width: int, eff: Efficiencies
) -> tuple[LogCurve, str]:
    """(seconds of an all-gather and a reduce-scatter of T x ``width`` bf16 elements over
    ``num_gpus`` GPUs vs the gathered tokens T, where it comes from): the token exchange of
    an MoE layer between vLLM's data-parallel ranks (its default ``allgather_reducescatter``
    backend, NCCL collectives). ``db`` None or no table for ``num_gpus``: the ring roofline."""
    ts = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
    size = ts * width
    link = gpu.interconnect_bw * eff.comm

    def roof(n: np.ndarray) -> np.ndarray:
        return (num_gpus - 1) / num_gpus * n * 2.0 / link + eff.allreduce_latency_s

    tables = [db.nccl(op, num_gpus) for op in ("all_gather", "reduce_scatter")] if db is not None else []
    if not tables or any(t is None for t in tables):
        return LogCurve(ts, np.log(2.0 * roof(size))), "roofline (ring all-gather and reduce-scatter)"
    sec = sum(np.exp(log_curve(t[0].astype(float), t[1], size, roof)) * 1e-3 for t in tables if t is not None)
    return LogCurve(ts, np.log(sec)), "table NCCL all_gather + reduce_scatter"
