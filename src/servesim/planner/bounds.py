"""Cheap bounds first: candidates that cannot work are pruned before any simulation.

Each candidate's pools are resolved as ``simulate`` would resolve them
(``deployment.resolve_deployment``: the layout checks vLLM refuses to start on, the memory
plan), then bounded with the pool's own perf model, in this order:

``parallel``
    a TP/PP/EP layout vLLM refuses (heads not divisible, EP without experts, ...);
``memory``
    the weights and one ``max_model_len`` sequence's KV cache do not fit a GPU;
``latency``
    the TPOT limit is below the time of one decode step with a single request on a
    one-token context: no batch, and no request, can beat that step (step time grows with
    the batch and the context; mixed steps are longer still);
``throughput``
    the target rate's token demand exceeds what the deployment can serve at best.
    Decode: a replica produces at most ``B / t(B)`` tokens/s, ``B`` = min(max_num_seqs,
    KV tokens / mean prompt) requests each on the workload's mean prompt as context (a
    request's context is never shorter than its prompt) and ``t(B)`` their decode step.
    Prefill: at most ``budget / t(budget)`` tokens/s, the token budget as one chunk on an
    empty context, against the prompt tokens no prefix-cache hit can cover
    (``Demand.mean_uncached_prompt``; with caching off, every prompt token). A colocated
    pool needs max(decode time, prefill time) <= 1 s per second, not their sum: chunked
    prefill mixes decodes into prefill steps, which share one read of the weights, so the
    sum would overstate the time needed; a disaggregated pool needs its own part <= 1.
    A deployment over this bound cannot keep up: its queue grows for as long as the
    traffic lasts, whatever a short run's attainment says.

The deployments are resolved once per distinct (GPU, layout, engine) and reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servesim.config import Scenario
from servesim.deployment import Deployment, resolve_deployment
from servesim.errors import ConfigError, DoesNotFitError
from servesim.perf.base import BatchStats
from servesim.planner.space import Candidate

#: Prune reasons, in the order they are checked.
REASONS = ("parallel", "memory", "latency", "throughput")


@dataclass(frozen=True, slots=True)
class Demand:
    """The workload's load: arrivals per second and mean token counts per request."""

    rate: float
    mean_prompt: float
    mean_output: float
    #: Prompt tokens per request no prefix-cache hit can cover: the whole prompt when the
    #: workload shares no prefixes, the prompt less the shared prefix for prefix groups,
    #: 0 for traces of block hashes (a hit might cover any prompt).
    mean_uncached_prompt: float
    #: The shortest prompt: at or above a candidate's max_model_len, every request is rejected.
    min_prompt: float = 1.0


@dataclass(slots=True)
class Pruning:
    """What the bounds decided: survivors, and each pruned candidate's reason and why."""

    survivors: list[Candidate] = field(default_factory=list)
    pruned: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (reason, message)
    bounds: dict[int, dict[str, float]] = field(default_factory=dict)  # id -> the figures

    def counts(self) -> dict[str, int]:
        out = {r: 0 for r in REASONS}
        for reason, _ in self.pruned.values():
            out[reason] += 1
        return out


def workload_demand(base: Scenario) -> Demand:
    """The base workload's rate (arrivals over their span) and mean lengths."""
    import numpy as np

    from servesim.workload import load_workload

    wl = load_workload(base.workload, base.run.seed)
    n = len(wl)
    arrivals = np.asarray(wl.arrival_s, dtype=float)
    span = float(arrivals[-1] - arrivals[0]) if n > 1 else 0.0
    rate = (n - 1) / span if span > 0 else float("inf")
    prompt = np.asarray(wl.num_prompt_tokens, dtype=float)
    if wl.hash_ids is not None:
        uncached = np.zeros_like(prompt)
    elif wl.prefix_group is not None and wl.prefix_len > 0:
        shared = np.asarray(wl.prefix_group) >= 0
        uncached = np.where(shared, np.maximum(prompt - wl.prefix_len, 1.0), prompt)
    else:
        uncached = prompt
    return Demand(
        rate,
        float(prompt.mean()),
        float(np.mean(wl.num_output_tokens)),
        float(uncached.mean()),
        float(prompt.min()),
    )


def decode_capacity(dep: Deployment, demand: Demand) -> float:
    """Upper bound of one replica's decode tokens/s (see the module docstring)."""
    ctx = max(1, int(demand.mean_prompt))
    batch = max(1, min(dep.engine.max_num_seqs or 1, dep.plan.kv_capacity_tokens // ctx))
    step_s = dep.perf.batch_time(BatchStats(num_decode_reqs=batch, sum_decode_context=batch * ctx))
    return batch / step_s


def prefill_capacity(dep: Deployment) -> float:
    """Upper bound of one replica's prefill tokens/s: a full token budget on an empty context."""
    n = dep.engine.max_num_batched_tokens or 1
    stats = BatchStats()
    stats.add_chunk(n, 0)
    return n / dep.perf.batch_time(stats)


def min_itl(dep: Deployment) -> float:
    """The shortest decode step there is: one request on a one-token context."""
    return dep.perf.batch_time(BatchStats(num_decode_reqs=1, sum_decode_context=1))


def _resolve_pools(c: Candidate, memo: dict[str, Any]) -> list[tuple[Deployment, str, int]]:
    """(deployment, role, replicas) of each of the candidate's pools, raising the user errors
    vLLM would refuse to start on. A deployment is memoised on what resolves it (GPU,
    layout, engine); the role and replica count come from the candidate's shape."""
    sc = c.scenario
    pools = sc.cluster.pools if sc.cluster is not None else [None]
    out = []
    for pool in pools:
        par = pool.parallel if pool is not None and pool.parallel else sc.parallel
        key = f"{sc.hardware.model_dump_json()}|{par.model_dump_json()}|{sc.engine.model_dump_json()}"
        if key not in memo:
            try:
                memo[key] = resolve_deployment(sc, pool)
            except (ConfigError, DoesNotFitError) as err:
                memo[key] = err
        if isinstance(memo[key], Exception):
            raise memo[key]
        out.append(memo[key])
    return [(d, shape.role, shape.num_replicas * shape.dp) for d, shape in zip(out, c.pools)]


def bound_candidate(
    c: Candidate, demand: Demand, tpot_s: float | None, memo: dict[str, Any]
) -> tuple[str | None, str, dict[str, float]]:
    """(reason or None, message, figures) of one candidate."""
    try:
        deps = _resolve_pools(c, memo)
    except DoesNotFitError as err:
        return "memory", str(err), {}
    except ConfigError as err:
        return "parallel", str(err), {}
    max_len = min(d.plan.max_model_len for d, _, _ in deps)
    if demand.min_prompt >= max_len:  # the engine rejects a prompt of max_model_len or more
        return (
            "memory",
            f"every prompt has at least {demand.min_prompt:,.0f} tokens, not below max_model_len "
            f"({max_len:,}): every request would be rejected",
            {},
        )
    itl = min(min_itl(d) for d, role, _ in deps if role != "prefill")
    figures = {"min_itl_s": itl}
    if tpot_s is not None and itl > tpot_s:
        return (
            "latency",
            f"one decode step takes at least {itl * 1e3:.1f} ms > TPOT limit {tpot_s * 1e3:.1f} ms",
            figures,
        )
    load = {}
    for role in ("colocated", "prefill", "decode"):
        group = [(d, n) for d, r, n in deps if r == role]
        if not group:
            continue
        need = 0.0  # busy seconds per second at best: the larger part (see the module docstring)
        if role != "prefill":
            cap = sum(decode_capacity(d, demand) * n for d, n in group)
            figures[f"{role}_decode_tokens_per_s_max"] = cap
            need = max(need, demand.rate * demand.mean_output / cap)
        if role != "decode":
            cap = sum(prefill_capacity(d) * n for d, n in group)
            figures[f"{role}_prefill_tokens_per_s_max"] = cap
            cached = any(d.engine.enable_prefix_caching for d, _ in group)
            need = max(
                need, demand.rate * (demand.mean_uncached_prompt if cached else demand.mean_prompt) / cap
            )
        load[role] = need
    figures["load_bound"] = max(load.values())
    if figures["load_bound"] > 1.0:
        worst = max(load, key=load.__getitem__)
        return (
            "throughput",
            (
                f"{worst} pool busy at least {figures['load_bound']:.2f} s per second at "
                f"{demand.rate:.2f} requests/s: it cannot keep up"
            ),
            figures,
        )
    return None, "", figures


def prune(candidates: list[Candidate], demand: Demand, tpot_s: float | None) -> Pruning:
    """Apply the bounds to every candidate; survivors keep their order (ids ascending)."""
    out = Pruning()
    memo: dict[str, Any] = {}
    for c in candidates:
        reason, message, figures = bound_candidate(c, demand, tpot_s, memo)
        out.bounds[c.id] = figures
        if reason is None:
            out.survivors.append(c)
        else:
            out.pruned[c.id] = (reason, message)
    return out
