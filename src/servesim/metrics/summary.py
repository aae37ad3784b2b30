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

The distributions (one definition of a percentile for every metric, the inverted CDF) are
``metrics.stats``'s; the replicas' time-averages, for a replica, a pool and the run,
``metrics.fleet_figures``'s.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servesim.metrics.benchmark import benchmark_section, measured_run
from servesim.metrics.fleet_figures import held_fleet, model_dtype, pool_figures, utilization
from servesim.metrics.records import RequestStatus, Result
from servesim.metrics.stats import distribution, meets_limit, ratio, sketch_distribution
from servesim.perf.power import replica_energy_j

LATENCY_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s")
SLO_METRICS = ("ttft_s", "tpot_s", "e2e_s")


# --------------------------------------------------------------------------- helpers


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
        "requests_per_s": ratio(int(finished.sum()), span_s),
        "input_tokens_per_s": ratio(num_in, span_s),
        "output_tokens_per_s": ratio(num_out, span_s),
        "total_tokens_per_s": ratio(num_in + num_out, span_s),
    }


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
        attainment[metric] = ratio(int(ok.sum()), n)
        meets_all &= ok
    num_good = int(meets_all.sum())
    attainment["all"] = ratio(num_good, n)
    goodput = ratio(num_good, span_s)
    return {
        "limits": limits,
        "attainment": attainment,
        "num_good": num_good,
        "goodput_rps": goodput,
        "goodput_rps_per_gpu": None if goodput is None else ratio(goodput, num_gpus),
    }


def _lora(result: Result) -> dict[str, Any] | None:
    """engine.lora's figures summed over the replicas (``engine.lora.LoraTotals``), or None."""
    per = [r.lora.as_dict() for r in result.replicas if r.lora is not None]
    if not per:
        return None
    out: dict[str, Any] = {k: sum(d[k] for d in per) for k in per[0]}
    out["max_loras_in_step"] = max(d["max_loras_in_step"] for d in per)
    out["buffer_bytes"] = max(d["buffer_bytes"] for d in per)  # per GPU
    out["delayed_fraction"] = ratio(out["num_delayed"], len(result.records.arrival_s))
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

    dtype = model_dtype(result.scenario)

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
        "j_per_output_token": ratio(energy_j, num_out),
        "j_per_token": ratio(energy_j, num_out + num_in),
    }
    cost = {
        "usd": usd,
        "usd_per_million_output_tokens": ratio(usd * 1e6, num_out),
        "usd_per_million_tokens": ratio(usd * 1e6, num_out + num_in),
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
        "utilization": utilization(result, window_s),
        **_energy_cost(result, window_s, whole["num_output_tokens"], whole["num_input_tokens"]),
        "wall_s": float(result.wall_s),
    }
    offload = _kv_offload(result)
    if offload is not None:  # engine.kv_offload: hits per tier, KV moved
        summary["kv_offload"] = offload
    pools = pool_figures(result, window_s)
    if pools:
        summary["pools"] = pools
    if result.operations:  # autoscaling, failures, power capping (servesim.cluster.operations)
        summary["operations"] = result.operations
    bench = benchmark_section(result)
    if bench is not None:
        summary["benchmark"] = bench
    if result.tenants is not None:  # per-tenant counts, service, SLOs and fairness
        from servesim.metrics.tenants import tenant_summary

        summary["tenants"] = tenant_summary(run, span_s)
    if result.models is not None:  # several models: per-model counts, latency, SLOs, GPUs
        from servesim.metrics.models import model_summary

        summary["models"] = model_summary(run, span_s)
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
            "gpu": ratio(total("num_gpu_hit_tokens"), query),
            "cpu": ratio(total("num_cpu_hit_tokens"), query),
            "disk": ratio(total("num_disk_hit_tokens"), query),
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
