"""Metrics computed after the run from a ``Result``: latency, throughput, SLOs, utilization,
energy and cost (definitions and units in ``docs/metrics.md``).

``summarize`` is pure and returns a JSON-serialisable nested dict of floats, ints and
None (None where a metric is undefined, NaN never appears).

Two time windows are used, and they coincide when every request finishes:

    span_s    first arrival -> last finish   rates: throughput, goodput
    window_s  first arrival -> result.end_s  time-averages: busy, MFU/MBU, KV, energy, cost

Rates use ``span_s`` so that the idle tail of a run does not dilute them; averages of
engine activity use ``window_s`` because ``busy_s``, ``flops`` and the rest are accumulated
until the last event, which may come after the last finish when requests are left over.

Percentiles use one definition for every metric, the inverted CDF (numpy's
``method="inverted_cdf"``): the p-th percentile is the smallest sample x such that at
least p% of the samples (by weight) are <= x. It always returns an observed value and
extends exactly to weighted samples such as the ITL (gap, count) pairs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servesim.config import Scenario
from servesim.metrics.benchmark import benchmark_section, measured_run
from servesim.metrics.records import RequestStatus, Result
from servesim.perf.power import replica_energy_j

PERCENTILES = (50, 90, 95, 99)
LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")
SLO_METRICS = ("ttft_s", "tpot_s", "e2e_s")


# --------------------------------------------------------------------------- helpers


def weighted_percentile(values: np.ndarray, weights: np.ndarray, p: float) -> float:
    """Inverted-CDF percentile: the smallest value whose cumulative weight is >= p% of the total.

    ``p`` is in percent (0..100). With unit weights this equals
    ``np.percentile(values, p, method="inverted_cdf")``. Comparing ``100 * cum >= p * total``
    keeps integer weights and integer ``p`` exact (no rounding at p99 of 100 samples).
    """
    order = np.argsort(values, kind="stable")
    return _sorted_percentiles(
        np.asarray(values, np.float64)[order], np.cumsum(np.asarray(weights)[order]), (p,)
    )[0]


def _sorted_percentiles(v: np.ndarray, cum: np.ndarray, ps: tuple[float, ...]) -> list[float]:
    """``weighted_percentile`` for each of ``ps``, given sorted values and cumulative weights."""
    if v.size == 0 or cum[-1] <= 0:
        return [math.nan] * len(ps)
    return [float(v[int(np.argmax(100 * cum >= p * cum[-1]))]) for p in ps]


def distribution(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, Any]:
    """count, mean, p50, p90, p95, p99, max of the non-NaN values (optionally weighted)."""
    values = np.asarray(values, np.float64)
    if weights is None:  # unit weights: the percentiles by selection, no sort
        values = values[~np.isnan(values)]
        w = None
        total = int(values.size)
    else:
        w = np.asarray(weights)
        keep = ~np.isnan(values) & (w > 0)
        values, w = values[keep], w[keep]
        total = int(w.sum()) if w.size else 0
    out: dict[str, Any] = {"count": total}
    if total == 0:
        out.update({"mean": None, **{f"p{p}": None for p in PERCENTILES}, "max": None})
        return out
    # fsum: exactly rounded, so the mean does not depend on how many threads BLAS's dot
    # product used (a Ray worker runs with one, a process-pool worker with all). Over a
    # memoryview: the same floats without building a list of them.
    terms = np.ascontiguousarray(values if w is None else values * w)
    out["mean"] = math.fsum(terms.data) / total
    if w is None:
        pct = _selected_percentiles(values, PERCENTILES)
    else:
        # Once for all the percentiles. Equal values may come in any order: the value where
        # the cumulative weight crosses p% is the same whichever of them comes first.
        order = np.argsort(values)
        pct = _sorted_percentiles(values[order], np.cumsum(w[order]), tuple(PERCENTILES))
    out.update({f"p{p}": x for p, x in zip(PERCENTILES, pct)})
    out["max"] = float(values.max())
    return out


def _selected_percentiles(values: np.ndarray, ps: tuple[int, ...]) -> list[float]:
    """``weighted_percentile`` with unit weights for each integer ``p`` of ``ps``: the value
    of rank ceil(p n / 100) (1-based), found by selection (``np.partition``), not a sort."""
    n = int(values.size)
    ranks = [max(-(-p * n // 100) - 1, 0) for p in ps]
    picked = np.partition(values, ranks)
    return [float(picked[k]) for k in ranks]


def _ratio(num: float, den: float | None) -> float | None:
    """num / den, or None when the denominator is missing, zero or not finite."""
    if den is None or not math.isfinite(den) or den <= 0 or not math.isfinite(num):
        return None
    return num / den


def _clean(x: Any) -> Any:
    """Numpy scalars -> Python; NaN/inf -> None, recursively."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.integer | np.bool_):
        return x.item()
    if isinstance(x, float | np.floating):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def _model_dtype(scenario: Scenario) -> str:
    dtype = scenario.model.dtype
    return "bfloat16" if dtype in (None, "auto") else str(dtype)


# --------------------------------------------------------------------------- sections


def _counts(result: Result) -> dict[str, Any]:
    rec = result.records
    n = len(rec)
    finished = rec.status == RequestStatus.FINISHED
    first_arrival = float(np.nanmin(rec.arrival_s)) if n and not np.isnan(rec.arrival_s).all() else None
    last_finish = float(rec.finished_s[finished].max()) if finished.any() else None
    span = last_finish - first_arrival if first_arrival is not None and last_finish is not None else None
    window = result.end_s - first_arrival if first_arrival is not None else None
    return {
        "num_requests": n,
        "num_finished": int(finished.sum()),
        # Of those, stopped at max_model_len before their requested output (vLLM's
        # finish_reason "length"); the others produced all of it.
        "num_finished_length": int((finished & rec.finished_length).sum()),
        "num_unfinished": int((rec.status == RequestStatus.UNFINISHED).sum()),
        "num_rejected": int((rec.status == RequestStatus.REJECTED).sum()),
        "first_arrival_s": first_arrival,
        "last_finish_s": last_finish,
        "end_s": float(result.end_s),
        "span_s": span,
        "window_s": window,
    }


def sketch_distribution(sk: Any) -> dict[str, Any]:
    """``distribution``'s fields from a ``metrics.sketch.Sketch``: the count, mean and max
    exact, the percentiles within the sketch's relative accuracy of the exact ones."""
    total = int(round(sk.count))
    out: dict[str, Any] = {"count": total}
    if total == 0:
        out.update({"mean": None, **{f"p{p}": None for p in PERCENTILES}, "max": None})
        return out
    out["mean"] = sk.sum / sk.count
    out.update({f"p{p}": x for p, x in zip(PERCENTILES, sk.percentiles(PERCENTILES))})
    out["max"] = float(sk.max)
    return out


def _latency(result: Result) -> dict[str, Any]:
    """The latency distributions, exact up to ``EXACT_MAX_SAMPLES`` samples of a metric
    (requests, or ITL pairs), from a quantile sketch past it; ``method`` names which."""
    from servesim.metrics.sketch import EXACT_MAX_SAMPLES, Sketch

    rec = result.records
    finished = rec.status == RequestStatus.FINISHED
    out: dict[str, Any] = {}
    methods: dict[str, str] = {}
    for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
        values = getattr(rec, name)[finished]
        if values.size > EXACT_MAX_SAMPLES:
            sk = Sketch()
            sk.add_array(values)
            out[name], methods[name] = sketch_distribution(sk), sk.method
        else:
            out[name], methods[name] = distribution(values), "exact"
    sk = result.itl.sketched()
    if sk is None:
        out["itl_s"] = distribution(
            np.asarray(result.itl.gap_s, np.float64), np.asarray(result.itl.count, np.int64)
        )
        methods["itl_s"] = "exact"
    else:
        out["itl_s"], methods["itl_s"] = sketch_distribution(sk), sk.method
    latency: dict[str, Any] = {name: out[name] for name in LATENCY_METRICS}
    kinds = set(methods.values())
    latency["method"] = kinds.pop() if len(kinds) == 1 else "; ".join(f"{k}: {v}" for k, v in methods.items())
    return latency


def _throughput(result: Result, span_s: float | None) -> dict[str, Any]:
    rec = result.records
    finished = rec.status == RequestStatus.FINISHED
    num_in = int(rec.num_prompt_tokens[finished].sum())
    num_out = int(rec.num_output_tokens[finished].sum())
    return {
        "num_input_tokens": num_in,
        "num_output_tokens": num_out,
        "requests_per_s": _ratio(int(finished.sum()), span_s),
        "input_tokens_per_s": _ratio(num_in, span_s),
        "output_tokens_per_s": _ratio(num_out, span_s),
        "total_tokens_per_s": _ratio(num_in + num_out, span_s),
    }


def meets_limit(rec: Any, metric: str, limit: float) -> np.ndarray:
    """Which requests of ``rec`` (``RequestRecords``) meet one SLO limit: finished, with
    ``metric`` at most ``limit``; a finished request with one output token has no TPOT and
    meets a TPOT limit. Unfinished and rejected requests miss."""
    finished = rec.status == RequestStatus.FINISHED
    value = getattr(rec, metric)
    ok = finished & (value <= limit)  # NaN compares False: a miss
    if metric == "tpot_s":
        ok |= finished & np.isnan(value)
    return np.asarray(ok)


def _slo(result: Result, span_s: float | None, num_gpus: float) -> dict[str, Any]:
    """Attainment is over ALL requests: unfinished and rejected ones miss every SLO.

    A finished request with one output token has no TPOT and meets a TPOT limit.
    """
    rec = result.records
    n = len(rec)
    finished = rec.status == RequestStatus.FINISHED
    slo = result.scenario.slo
    limits = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s}  # SLO_METRICS
    meets_all = finished.copy()
    attainment: dict[str, float | None] = {}
    for metric, limit in limits.items():
        if limit is None:
            attainment[metric] = None
            continue
        ok = meets_limit(rec, metric, limit)
        attainment[metric] = _ratio(int(ok.sum()), n)
        meets_all &= ok
    num_good = int(meets_all.sum())
    attainment["all"] = _ratio(num_good, n)
    goodput = _ratio(num_good, span_s)
    return {
        "limits": limits,
        "attainment": attainment,
        "num_good": num_good,
        "goodput_rps": goodput,
        "goodput_rps_per_gpu": None if goodput is None else _ratio(goodput, num_gpus),
    }


def _peaks(result: Result, r: Any) -> tuple[float | None, float | None]:
    """(peak FLOP/s, HBM bytes/s) of one GPU of replica ``r`` (a cluster pool's GPU, else the run's)."""
    gpu = r.gpu if getattr(r, "gpu", None) is not None else result.gpu
    if gpu is None:
        return None, None
    return gpu.flops_for(_model_dtype(result.scenario)), getattr(gpu, "mem_bw", None)


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
        "mean_replicas": _ratio(sum(r.provisioned_s for r in reps), span),
        "peak_gpus": peak_g,
        "mean_gpus": _ratio(sum(r.provisioned_s * r.num_gpus for r in reps), span),
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
        return _ratio(num, sum(d * h for d, h in zip(den, hs))) if known else None

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
            (x for r in reps if (x := _ratio(r.peak_kv_blocks, r.num_gpu_blocks)) is not None), default=None
        ),
        "num_preemptions": sum(r.num_preemptions for r in reps),
        "prefix_hit_rate": _ratio(
            sum(r.num_prefix_hit_tokens for r in reps), sum(r.num_prefix_query_tokens for r in reps)
        ),
        "pipeline_bubble_fraction": _ratio(
            sum(r.bubble_s * g for r, g in zip(reps, gpus)), sum(r.gpu_s * g for r, g in zip(reps, gpus))
        )
        or 0.0,
    }


def _utilization(result: Result, window_s: float | None) -> dict[str, Any]:
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


def _lora(result: Result) -> dict[str, Any] | None:
    """engine.lora's figures summed over the replicas (``engine.lora.LoraTotals``), or None."""
    per = [r.lora.as_dict() for r in result.replicas if r.lora is not None]
    if not per:
        return None
    out: dict[str, Any] = {k: sum(d[k] for d in per) for k in per[0]}
    out["max_loras_in_step"] = max(d["max_loras_in_step"] for d in per)
    out["buffer_bytes"] = max(d["buffer_bytes"] for d in per)  # per GPU
    out["delayed_fraction"] = _ratio(out["num_delayed"], len(result.records.arrival_s))
    return out


def _pools(result: Result, window_s: float | None) -> list[dict[str, Any]]:
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
        num_waiting = None if window_s is None else _ratio(float(waiting_by_rep[idx].sum()), window_s)
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
                else _ratio(num_waiting * window_s, routed),
                "num_preemptions": fig["num_preemptions"],
                "prefix_hit_rate": fig["prefix_hit_rate"],
                "num_kv_transfers_in": n_tr,
                "kv_transfer_bytes_in": sum(r.kv_transfer_bytes for r in rs),
                "mean_kv_transfer_s": _ratio(sum(r.kv_transfer_s for r in rs), n_tr),
                "num_migrations_out": sum(r.num_migrations_out for r in rs),
            }
        )
    return out


def _energy_cost(result: Result, window_s: float | None, num_out: int, num_in: int) -> dict[str, Any]:
    """Per GPU, the power model of ``servesim.perf.power`` (fitted to the Splitwise
    measurements) over its busy time and idle power for the rest of the time it is
    provisioned: the whole window, or ``provisioned_s`` for replicas an autoscaler started
    or stopped. Cost is the provisioned GPU-hours at the GPU's price."""
    gpu = result.gpu
    none_e = {"energy_j": None, "avg_power_w": None, "j_per_output_token": None, "j_per_token": None}
    none_c = {"usd": None, "usd_per_million_output_tokens": None, "usd_per_million_tokens": None}
    if gpu is None or window_s is None or window_s <= 0:
        return {"energy": none_e, "cost": none_c}

    def g(r: Any) -> Any:  # a cluster pool's GPU, else the run's
        return r.gpu if getattr(r, "gpu", None) is not None else gpu

    dtype = _model_dtype(result.scenario)

    def held(r: Any) -> float:  # seconds the replica's GPUs were provisioned
        return window_s if r.provisioned_s < 0 else r.provisioned_s

    energy_j = sum(
        r.energy_j
        if r.energy_j >= 0
        else replica_energy_j(g(r), r.num_gpus, held(r), r.gpu_s, r.flops, r.bytes, dtype)
        for r in result.replicas
    )
    usd = sum(g(r).usd_per_hour * r.num_gpus * held(r) for r in result.replicas) / 3600.0
    energy = {
        "energy_j": energy_j,
        "avg_power_w": energy_j / window_s,
        "j_per_output_token": _ratio(energy_j, num_out),
        "j_per_token": _ratio(energy_j, num_out + num_in),
    }
    cost = {
        "usd": usd,
        "usd_per_million_output_tokens": _ratio(usd * 1e6, num_out),
        "usd_per_million_tokens": _ratio(usd * 1e6, num_out + num_in),
    }
    return {"energy": energy, "cost": cost}


# --------------------------------------------------------------------------- entry point


def summarize(result: Result) -> dict[str, Any]:
    """Every metric of one run as a nested, JSON-serialisable dict (see docs/metrics.md).

    A benchmark workload's ready check and warm-ups are left out of the request metrics
    (counts, latency, throughput, SLOs) but count in the run: utilization, energy and
    cost cover the whole of it.
    """
    run = measured_run(result)
    counts = _counts(run)
    span_s, window_s = counts["span_s"], _counts(result)["window_s"]
    counts["window_s"] = window_s
    throughput = _throughput(run, span_s)
    whole = throughput if run is result else _throughput(result, span_s)
    # GPUs held on average (all of them without cluster.operations: their sum)
    num_gpus = held_fleet(result.replicas, window_s, result.end_s)["mean_gpus"] or 0.0
    summary = {
        "counts": counts,
        "latency": _latency(run),
        "throughput": throughput,
        "slo": _slo(run, span_s, num_gpus),
        "utilization": _utilization(result, window_s),
        **_energy_cost(result, window_s, whole["num_output_tokens"], whole["num_input_tokens"]),
        "wall_s": float(result.wall_s),
    }
    offload = _kv_offload(result)
    if offload is not None:  # engine.kv_offload: hits per tier, KV moved
        summary["kv_offload"] = offload
    pools = _pools(result, window_s)
    if pools:
        summary["pools"] = pools
    if result.operations:  # autoscaling, failures, power capping (servesim.cluster.operations)
        summary["operations"] = result.operations
    bench = benchmark_section(result)
    if bench is not None:
        summary["benchmark"] = bench
    if result.tenants is not None:  # per-tenant counts, service, SLOs and fairness
        from servesim.metrics.tenants import tenant_summary

        summary["tenants"] = tenant_summary(run, span_s, distribution, meets_limit)
    if result.models is not None:  # several models: per-model counts, latency, SLOs, GPUs
        from servesim.metrics.models import model_summary

        summary["models"] = model_summary(run, span_s, distribution, meets_limit)
    lora = _lora(result)
    if lora is not None:  # engine.lora: adapter loads, the max_loras limit, LoRA memory
        summary["lora"] = lora
    if result.tasks is not None:  # sessions, agent runs: end-to-end task latency
        from servesim.metrics.tasks import task_summary

        summary["tasks"] = task_summary(result.records, *result.tasks)
    reasoning = {
        k.removeprefix("reasoning_"): v
        for k, v in result.workload_stats.items()
        if k.startswith("reasoning_")
    }
    if reasoning:  # tokens generated (reasoning + probes) against fixed-length reasoning
        summary["reasoning"] = reasoning
    summary.update(_trust(result, window_s, throughput))
    summary.update(_intervals(summary, result))
    return _clean(summary)


def _kv_offload(result: Result) -> dict[str, Any] | None:
    """The KV offload tiers over all replicas that have them: prompt tokens found per tier
    (fractions of the tokens looked up), bytes and seconds moved per GPU, evictions."""
    tiers = [r.offload for r in result.replicas if r.offload is not None]
    if not tiers:
        return None

    def total(name: str) -> Any:
        return sum(getattr(t, name) for t in tiers)

    query = total("num_query_tokens")
    return {
        "backend": tiers[0].backend,
        "block_size": tiers[0].block_size,
        "cpu_blocks": total("num_cpu_blocks"),
        "disk_blocks": total("num_disk_blocks"),
        "hit_rate": {
            "gpu": _ratio(total("num_gpu_hit_tokens"), query),
            "cpu": _ratio(total("num_cpu_hit_tokens"), query),
            "disk": _ratio(total("num_disk_hit_tokens"), query),
        },
        "num_query_tokens": query,
        "num_loads": total("num_loads"),
        "load_bytes": total("load_bytes"),
        "load_s": total("load_s"),
        "load_wait_s": total("load_wait_s"),
        "num_stored_blocks": total("num_stored_blocks"),
        "store_bytes": total("store_bytes"),
        "store_s": total("store_s"),
        "num_store_skips": total("num_store_skips"),
        "step_transfer_s": total("step_transfer_s"),
        "evictions": {"cpu": total("num_cpu_evictions"), "disk": total("num_disk_evictions")},
    }


def _intervals(summary: dict[str, Any], result: Result) -> dict[str, Any]:
    """``intervals`` and ``benchmark_intervals``: calibrated 80% intervals (``metrics.intervals``)."""
    from servesim.metrics.intervals import interval_sections

    return interval_sections(summary, result.scenario)


def _mean_lengths(result: Result) -> tuple[float, float]:
    """The mean prompt and output lengths of what the engine runs: the workload's targets
    without the requests it rejects and with outputs cut at max_model_len (an outlier the
    engine stops at its context limit is not a mean request), else the targets as given."""
    w = result.workload_stats
    if w and "served_mean_prompt_tokens" in w:
        return float(w["served_mean_prompt_tokens"]), float(w["served_mean_output_tokens"])
    if w:
        return float(w["mean_prompt_tokens"]), float(w["mean_output_tokens"])
    rec = result.records
    done = rec.status == RequestStatus.FINISHED
    prompt = float(rec.num_prompt_tokens.mean()) if len(rec) else 0.0
    return prompt, float(rec.num_output_tokens[done].mean()) if done.any() else 0.0


def _trust(result: Result, window_s: float | None, throughput: dict[str, Any]) -> dict[str, Any]:
    """What a user needs to trust the numbers: headroom, saturation, memory plan, step-time
    model, notices (``metrics.headroom``, ``metrics.saturation``, ``metrics.deployment_report``)."""
    from servesim.metrics.deployment_report import deployment_sections
    from servesim.metrics.headroom import api_server_notices, headroom
    from servesim.metrics.saturation import saturation

    prompt, output = _mean_lengths(result)
    room = headroom(result, window_s, prompt, output, throughput.get("output_tokens_per_s"))
    rec = result.records
    out = {
        "headroom": room,
        "saturation": saturation(
            rec.arrival_s,
            rec.first_scheduled_s,
            rec.finished_s,
            room["capacity_requests_per_s"],
            rec.status,
            rec.reasons,
            int((result.operations or {}).get("num_failures") or 0),
        ),
        "notices": list(result.notices) + api_server_notices(room),
    }
    if result.deployments:
        out.update(deployment_sections(result, prompt + output if prompt else None))
    return out
