"""The replicas' time-averaged figures (busy, GPU time, MFU/MBU, KV, preemptions, prefix
hits, pipeline bubbles) and the GPUs they held, by one function (``replica_figures``) for a
replica, a pool and the run; the summary's ``utilization`` and ``pools`` sections.

Each time-average is over the time each replica's GPUs were held: the run's window, or with
``cluster.operations`` each replica's lifetime (a replica stopped at night is not idle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.config import Scenario
from servesim.metrics.records import Result
from servesim.metrics.stats import ratio


def model_dtype(scenario: Scenario) -> str:
    dtype = scenario.model.dtype
    return "bfloat16" if dtype in (None, "auto") else str(dtype)


def _peaks(result: Result, r: Any) -> tuple[float | None, float | None]:
    """(peak FLOP/s, HBM bytes/s) of one GPU of replica ``r`` (a cluster pool's GPU, else the run's)."""
    gpu = r.gpu if getattr(r, "gpu", None) is not None else result.gpu
    if gpu is None:
        return None, None
    return gpu.flops_for(model_dtype(result.scenario)), getattr(gpu, "mem_bw", None)


def _held_s(r: Any, window_s: float | None) -> float | None:
    """Seconds replica ``r``'s GPUs were held: the window, or with ``cluster.operations`` its
    lifetime (``provisioned_s``: from its start, loading included, to its stop or failure)."""
    return window_s if r.provisioned_s < 0 else r.provisioned_s


def held_fleet(reps: list[Any], window_s: float | None, end_s: float) -> dict[str, Any]:
    """GPU-hours held by replicas ``reps``, and how many replicas and GPUs were held at most
    and on average at once over [0, ``end_s``] (all of them all along without
    ``cluster.operations``)."""
    if not any(r.provisioned_s >= 0 for r in reps):
        n, g = len(reps), sum(r.num_gpus for r in reps)
        hours = None if window_s is None else g * window_s / 3600
        return {
            "gpu_hours": hours,
            "peak_replicas": n,
            "mean_replicas": float(n),
            "peak_gpus": g,
            "mean_gpus": float(g),
        }
    # Sweep the lifetimes [start, start + provisioned_s): at equal times an end before a start.
    alive = [r for r in reps if r.provisioned_s > 0]
    edges = sorted(
        [(r.provisioned_from_s, 1, r.num_gpus) for r in alive]
        + [(r.provisioned_from_s + r.provisioned_s, 0, r.num_gpus) for r in alive]
    )
    n = g = peak_n = peak_g = 0
    for _, up, k in edges:
        n, g = (n + 1, g + k) if up else (n - 1, g - k)
        peak_n, peak_g = max(peak_n, n), max(peak_g, g)
    span = end_s
    return {
        "gpu_hours": sum(r.provisioned_s * r.num_gpus for r in reps) / 3600,
        "peak_replicas": peak_n,
        "mean_replicas": ratio(sum(r.provisioned_s for r in reps), span),
        "peak_gpus": peak_g,
        "mean_gpus": ratio(sum(r.provisioned_s * r.num_gpus for r in reps), span),
    }


def replica_figures(
    reps: list[Any], held: list[float | None], peaks: list[tuple[float | None, float | None]]
) -> dict[str, Any]:
    """The time-averaged figures of replicas ``reps`` together: one function for a replica,
    a pool and the run. ``held``: seconds each replica's GPUs were held (None: unknown);
    ``peaks``: (peak FLOP/s, HBM bytes/s) of one of its GPUs. Busy and KV: the mean over
    replicas (engines); GPU time, MFU, MBU and pipeline bubbles: the mean over GPUs; each
    weighted by the time it was held."""
    known = all(h is not None for h in held)
    hs = [h or 0.0 for h in held]

    def over_held(num: float, den: list[float]) -> float | None:
        return ratio(num, sum(d * h for d, h in zip(den, hs))) if known else None

    gpus = [r.num_gpus for r in reps]
    return {
        "num_steps": sum(r.num_steps for r in reps),
        "busy_fraction": over_held(sum(r.busy_s for r in reps), [1.0] * len(reps)),
        "gpu_fraction": over_held(sum(r.gpu_s * g for r, g in zip(reps, gpus)), gpus),
        "mfu": None
        if any(f is None for f, _ in peaks)
        else over_held(
            sum(r.flops * g for r, g in zip(reps, gpus)), [(f or 0.0) * g for (f, _), g in zip(peaks, gpus)]
        ),
        "mbu": None
        if any(b is None for _, b in peaks)
        else over_held(
            sum(r.bytes * g for r, g in zip(reps, gpus)), [(b or 0.0) * g for (_, b), g in zip(peaks, gpus)]
        ),
        "kv_mean": over_held(sum(r.kv_block_s for r in reps), [r.num_gpu_blocks for r in reps]),
        "kv_peak": max(
            (x for r in reps if (x := ratio(r.peak_kv_blocks, r.num_gpu_blocks)) is not None), default=None
        ),
        "num_preemptions": sum(r.num_preemptions for r in reps),
        "prefix_hit_rate": ratio(
            sum(r.num_prefix_hit_tokens for r in reps), sum(r.num_prefix_query_tokens for r in reps)
        ),
        "pipeline_bubble_fraction": ratio(
            sum(r.bubble_s * g for r, g in zip(reps, gpus)), sum(r.gpu_s * g for r, g in zip(reps, gpus))
        )
        or 0.0,
    }


def utilization(result: Result, window_s: float | None) -> dict[str, Any]:
    """Time-averages over the time each replica's GPUs were held (the window, or with
    ``cluster.operations`` each replica's lifetime: a replica stopped at night is not idle),
    for each replica and over the run (``replica_figures``)."""
    reps = result.replicas
    peaks = [_peaks(result, r) for r in reps]
    held = [_held_s(r, window_s) for r in reps]
    fleet = held_fleet(reps, window_s, result.end_s)
    tot = {
        # With cluster.operations: the most held at once (num_replicas_run: every one that ran).
        "num_replicas": fleet["peak_replicas"],
        "num_gpus": fleet["peak_gpus"],
        "num_replicas_run": len(reps),
        "mean_replicas": fleet["mean_replicas"],
        "mean_gpus": fleet["mean_gpus"],
        "gpu_hours": fleet["gpu_hours"],
        **replica_figures(reps, held if window_s is not None else [None] * len(reps), peaks),
    }
    one = [
        {"num_gpus": r.num_gpus, "held_s": h, **replica_figures([r], [h], [p])}
        for r, h, p in zip(reps, held, peaks)
    ]
    return {"overall": tot, "replicas": one}


def pool_figures(result: Result, window_s: float | None) -> list[dict[str, Any]]:
    """Per-pool figures (a plain scenario's one pool too, ``deployment.SINGLE_POOL``): utilization, queueing
    (time-averaged waiting requests, and the mean wait by Little's law), KV transfers in."""
    reps = result.replicas
    names = list(dict.fromkeys(r.pool for r in reps if r.pool))
    if not names:
        return []
    waiting_by_rep = np.array([r.waiting_s for r in reps])  # as steps.waiting_s_by_replica
    out = []
    for name in names:
        idx = [i for i, r in enumerate(reps) if r.pool == name]
        rs = [reps[i] for i in idx]
        routed = sum(r.num_routed for r in rs)
        num_waiting = None if window_s is None else ratio(float(waiting_by_rep[idx].sum()), window_s)
        n_tr = sum(r.num_kv_transfers for r in rs)
        gpu = rs[0].gpu if rs[0].gpu is not None else result.gpu
        held = [_held_s(r, window_s) for r in rs]
        fig = replica_figures(
            rs, held if window_s is not None else [None] * len(rs), [_peaks(result, r) for r in rs]
        )
        fleet = held_fleet(rs, window_s, result.end_s)
        out.append(
            {
                "name": name,
                "role": rs[0].role,
                "num_replicas": fleet["peak_replicas"],
                "num_gpus": fleet["peak_gpus"],
                "num_replicas_run": len(rs),
                "mean_replicas": fleet["mean_replicas"],
                "gpu_hours": fleet["gpu_hours"],
                "gpu": getattr(gpu, "name", None),
                "busy_fraction": fig["busy_fraction"],
                "mfu": fig["mfu"],
                "kv_mean": fig["kv_mean"],
                "pipeline_bubble_fraction": fig["pipeline_bubble_fraction"],
                "num_routed": routed,
                "mean_num_waiting": num_waiting,
                "mean_wait_s": None
                if num_waiting is None or window_s is None
                else ratio(num_waiting * window_s, routed),
                "num_preemptions": fig["num_preemptions"],
                "prefix_hit_rate": fig["prefix_hit_rate"],
                "num_kv_transfers_in": n_tr,
                "kv_transfer_bytes_in": sum(r.kv_transfer_bytes for r in rs),
                "mean_kv_transfer_s": ratio(sum(r.kv_transfer_s for r in rs), n_tr),
                "num_migrations_out": sum(r.num_migrations_out for r in rs),
            }
        )
    return out
