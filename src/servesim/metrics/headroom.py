"""Headroom: how much more load the deployment could take (``docs/metrics.md``).

"busy" (a batch in flight) reads ~100% at 1x and at 5x the load of a V1 engine, since a
running decode keeps the engine stepping; it says nothing about room to grow. Two figures do:

* **time shares** of the window: ``gpu_fraction`` (the GPU doing model work),
  ``cpu_fraction`` (per-step CPU overhead with the GPU waiting), ``idle_fraction``;
* ``api_server_fraction``: the busiest API server's work (``engine.frontend``: requests'
  handling and tokenization, outputs' detokenizing and streaming) over the window; near 1
  its queue, not the GPU, sets TTFT;
* **load against capacity**: the served output-token rate against what this batch mix
  could sustain with the engine full. With ``B`` requests running at once (the smaller of
  ``max_num_seqs``, the requests of mean length the KV cache holds, and what the token
  budget allows at this mix), each step decodes ``B`` tokens and, to keep ``B`` running,
  computes ``B x P / O`` prompt tokens (mean prompt ``P`` over mean output ``O``):

      step_s       = perf.batch_time(B decodes at mean context P + O/2, B*P/O prefill tokens)
                     and the host's cpu_overhead_s + cpu_overhead_per_req_s x B, one after
                     the other, or the larger of the two with async scheduling (as the
                     engine times a step)
      capacity     = B / step_s output tokens per second, per replica
      load_fraction = served output tokens per second / capacity (summed over replicas)

  ``load_fraction`` near 1 means no headroom; 0.2 means about five times the load would
  still be served, at longer batches' latency. It is an estimate of the steady state at the
  run's prefix-cache hits (each request computes its prompt less the run's mean cached
  tokens, on top of them; ``P`` above is that remainder), without preemption, for colocated
  pools; a disaggregated cluster gets None.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servesim.metrics.records import PoolDeployment, RequestRecords, RequestStatus, Result
from servesim.perf.base import BatchStats, step_wall_s


def sustainable_rate(
    dep: PoolDeployment, mean_prompt: float, mean_output: float, mean_cached: float = 0.0
) -> dict[str, Any] | None:
    """The steady state of one replica of ``dep`` (a ``deployment.Deployment``) at full load;
    None when it has no meaning: no mean lengths, or a request of the mean length would not
    fit the KV cache (an outlier prompt far longer than any the engine can hold).
    ``mean_cached``: prompt tokens a request takes from the prefix cache (the run's mean):
    only the rest is computed, on top of them. Its blocks are counted whole (shared blocks
    once per request: a lower bound on the requests the cache holds)."""
    eng, plan = dep.engine, dep.plan
    if mean_output < 1 or mean_prompt < 1 or eng.max_num_seqs is None or eng.max_num_batched_tokens is None:
        return None
    blocks_per_req = math.ceil((mean_prompt + mean_output) / plan.block_size)
    fit = plan.num_gpu_blocks // max(1, blocks_per_req)
    if fit < 1:
        return None
    cached = min(max(mean_cached, 0.0), mean_prompt - 1.0) if mean_prompt > 1 else 0.0
    computed = mean_prompt - cached
    per_step = 1.0 + computed / mean_output  # tokens a running request costs per step
    budget_cap = int(eng.max_num_batched_tokens / per_step)
    b = max(1, min(eng.max_num_seqs, fit, budget_cap))
    pf = b * computed / mean_output
    stats = BatchStats(
        num_prefill_tokens=int(round(pf)),
        prefill_attn_work=pf * (cached + computed / 2),
        num_prefill_reqs=max(1, int(round(b / mean_output))),
        num_decode_reqs=b,
        sum_decode_context=int(b * (mean_prompt + mean_output / 2)),
        sum_prefill_context=int(round(cached * max(1, int(round(b / mean_output))))),
    )
    cpu_s = eng.cpu_overhead_s + (eng.cpu_overhead_per_req_s or 0.0) * b
    step_s = step_wall_s(float(dep.perf.batch_time(stats)), cpu_s, bool(eng.async_scheduling))
    limit = "max_num_seqs" if b == eng.max_num_seqs else "kv_cache" if b == fit else "token_budget"
    return {
        "num_running": b,
        "limited_by": limit,
        "step_s": step_s,
        "output_tokens_per_s": b / step_s,
        "requests_per_s": b / step_s / mean_output,
    }


def headroom(
    result: Result,
    window_s: float | None,
    mean_prompt: float,
    mean_output: float,
    served_output_tps: float | None,
) -> dict[str, Any]:
    reps = result.replicas
    busy = sum(r.busy_s for r in reps)
    gpu = sum(r.gpu_s for r in reps)
    # Over the time each replica's GPUs were held (with cluster.operations, its lifetime).
    den = sum(window_s if r.provisioned_s < 0 else r.provisioned_s for r in reps) if window_s else None
    servers = [r.frontend_busy_s for r in reps if r.frontend_busy_s >= 0]
    out: dict[str, Any] = {
        "gpu_fraction": gpu / den if den else None,
        "cpu_fraction": (busy - gpu) / den if den else None,
        "idle_fraction": 1 - busy / den if den else None,
        "api_server_fraction": max(servers) / window_s if servers and window_s else None,
        "capacity_output_tokens_per_s": None,
        "capacity_requests_per_s": None,
        "load_fraction": None,
        "capacity_note": None,
        "per_replica": [],
    }
    deps = result.deployments
    if not deps or any(d.role != "colocated" for d in deps):
        return out
    share = _largest_share(result.records)
    if share > OUTLIER_SHARE:
        out["capacity_note"] = (
            f"no capacity estimate: one request holds {share:.0%} of the tokens served, "
            "so a request of the mean length is not a typical one"
        )
        return out
    rec = result.records
    done = rec.status == RequestStatus.FINISHED
    cached = float(rec.num_cached_tokens[done].mean()) if done.any() else 0.0
    if result.models is not None and len(result.models["served"]) > 1:
        return {**out, **_per_model(result, served_output_tps)}
    per = [sustainable_rate(d, mean_prompt, mean_output, cached) for d in deps]
    if any(p is None for p in per):
        tokens = mean_prompt + mean_output
        if any(tokens > d.plan.num_gpu_blocks * d.plan.block_size for d in deps):
            out["capacity_note"] = (
                f"no capacity estimate: a request of the mean length ({tokens:,.0f} "
                "tokens, outliers included) does not fit a replica's KV cache"
            )
        return out
    rates = [p for p in per if p is not None]
    out["per_replica"] = [{"pool": d.name, **p} for d, p in zip(deps, rates, strict=True)]
    cap = sum(p["output_tokens_per_s"] * _replicas_held(result, d) for d, p in zip(deps, rates, strict=True))
    out["capacity_output_tokens_per_s"] = cap
    out["capacity_requests_per_s"] = cap / mean_output
    out["load_fraction"] = served_output_tps / cap if served_output_tps is not None and cap else None
    return out


def _per_model(result: Result, served_output_tps: float | None) -> dict[str, Any]:
    """Headroom of a cluster of several models: a model's requests run on its own pools only,
    so the load of one is not carried by another's idle replicas, and one capacity for the
    mix would be the sum of rates no request can move between. Each model gets the steady
    state of its pools at its own requests' mean lengths and its share of the served output
    tokens; the run's ``load_fraction`` is the busiest model's (where headroom ends first)."""
    m = result.models
    assert m is not None
    rec = result.records
    ids = np.asarray(m["name_id"], np.int64)[len(m["name_id"]) - len(rec) :]
    names: list[str] = m["names"]
    done = rec.status == RequestStatus.FINISHED
    served = rec.status != RequestStatus.REJECTED
    total_out = float(rec.num_output_tokens[done].sum())
    by_pool = {d.name: d for d in result.deployments}
    per_replica: list[dict[str, Any]] = []
    per_model: list[dict[str, Any]] = []
    for name in m["served"]:
        mine = np.isin(ids, [k if k < len(names) - 1 else -1 for k, n in enumerate(names) if n == name])
        row: dict[str, Any] = {
            "model": name,
            "capacity_requests_per_s": None,
            "capacity_output_tokens_per_s": None,
            "load_fraction": None,
        }
        per_model.append(row)
        if not (mine & done).any():
            continue
        prompt = float(rec.num_prompt_tokens[mine & served].mean())
        output = float(rec.num_output_tokens[mine & done].mean())
        cached = float(rec.num_cached_tokens[mine & done].mean())
        deps = [by_pool[p["name"]] for p in m["pools"].get(name, [])]
        rates = [sustainable_rate(d, prompt, output, cached) for d in deps]
        if not deps or any(r is None for r in rates):
            continue
        per_replica += [{"pool": d.name, "model": name, **r} for d, r in zip(deps, rates) if r is not None]
        cap = sum(r["output_tokens_per_s"] * _replicas_held(result, d) for d, r in zip(deps, rates) if r)
        tps = (
            None
            if served_output_tps is None or total_out <= 0
            else (served_output_tps * float(rec.num_output_tokens[mine & done].sum()) / total_out)
        )
        row.update(
            capacity_requests_per_s=cap / output,
            capacity_output_tokens_per_s=cap,
            load_fraction=tps / cap if tps is not None and cap else None,
        )
    loads = [r["load_fraction"] for r in per_model if r["load_fraction"] is not None]
    return {
        "load_fraction": max(loads) if loads else None,
        "capacity_note": "several models: capacity is per model (a model's requests run on its own "
        "pools only); the load is the busiest model's",
        "per_replica": per_replica,
        "per_model": per_model,
    }


def _replicas_held(result: Result, dep: PoolDeployment) -> float:
    """The deployment's replicas: its count, or with cluster.operations (autoscaling, failures)
    the mean held over the run."""
    mine = [r for r in result.replicas if r.pool == dep.name]
    if not any(r.provisioned_s >= 0 for r in mine) or result.end_s <= 0:
        return float(dep.num_replicas)
    return sum(r.provisioned_s for r in mine) / result.end_s


#: A request holding more than this share of the run's tokens makes the mean-length steady
#: state meaningless (it would price the whole mix as that outlier's long decode).
OUTLIER_SHARE = 0.5


def _largest_share(records: RequestRecords) -> float:
    """The largest share of the served tokens (prompt + output of the requests not rejected)
    that one request holds; 0 with fewer than 2 such requests."""
    served = records.status != RequestStatus.REJECTED
    tokens = (records.num_prompt_tokens[served] + records.num_output_tokens[served]).astype(float)
    total = float(tokens.sum())
    return float(tokens.max()) / total if tokens.size >= 2 and total > 0 else 0.0


#: An API server busier than this over the run is named in a notice.
API_SERVER_BUSY = 0.8


def api_server_notices(room: dict[str, Any]) -> list[dict[str, Any]]:
    """A notice where the busiest API server works most of the run (``room``, the
    ``headroom``): its queue, not the GPU, then sets TTFT and the delivery of tokens."""
    fraction = room.get("api_server_fraction")
    if fraction is None or fraction < API_SERVER_BUSY:
        return []
    return [
        {
            "code": "api_server_busy",
            "source": "engine.frontend",
            "count": None,
            "message": f"the API server is busy {fraction:.0%} of the run (requests' handling and "
            "tokenization, every token's detokenizing and streaming): its queue adds to TTFT "
            "and ITL; a larger engine.stream_interval (vLLM --stream-interval) cuts its "
            "per-chunk work (more API-server processes, vLLM's --api-server-count, are "
            "modelled only as one per data-parallel rank, its default from vLLM 0.16)",
        }
    ]
