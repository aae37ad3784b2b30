"""The configuration search: space -> cheap bounds -> cache -> simulations -> ranked answer.

::

    candidates = enumerate_candidates(base, plan)       # planner.space
    pruning    = prune(candidates, demand, tpot limit)  # planner.bounds: no simulation
    cached     = cache.get(keys of the survivors)       # planner.cache: done before
    outcomes   = evaluate(the rest, backend)            # planner.backends: simulate()
    ranked     = meeting the SLOs, by the objective     # planner.output shows and writes

Each survivor is one pure ``simulate()`` of its scenario, stored in the cache as it
finishes, so a sweep stopped half way resumes where it stopped; results are sorted by
candidate id, so they do not depend on the backend or the order tasks finished in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.catalog.gpus import get_gpu
from servesim.config import Scenario
from servesim.config.plan import PlanConfig
from servesim.errors import ConfigError
from servesim.planner.backends import Backend, evaluate
from servesim.planner.bounds import Pruning, prune, workload_demand
from servesim.planner.cache import ResultCache, scenario_key
from servesim.planner.space import Candidate, enumerate_candidates


@dataclass(slots=True)
class Evaluated:
    """One simulated candidate: its summary (or the error it stopped on) and the verdict."""

    candidate: Candidate
    summary: dict[str, Any] | None
    error: str | None
    wall_s: float
    cached: bool
    meets: bool = False
    margin: float = float("-inf")  # planner.targets' margin (negative: short of the targets)
    verdict: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class PlanResult:
    """Everything the search found, in candidate-id order."""

    base: Scenario
    plan: PlanConfig
    candidates: list[Candidate]
    pruning: Pruning
    evaluated: list[Evaluated]
    wall_s: float
    backend: str

    def counts(self) -> dict[str, Any]:
        return {
            "candidates": len(self.candidates),
            "pruned": len(self.pruning.pruned),
            "pruned_by": self.pruning.counts(),
            "simulated": sum(not e.cached for e in self.evaluated),
            "cached": sum(e.cached for e in self.evaluated),
            "failed": sum(e.error is not None for e in self.evaluated),
            "meeting_slo": sum(e.meets for e in self.evaluated),
        }

    def ranked(self) -> list[Evaluated]:
        """Candidates meeting the SLOs, best first by the plan's objective."""
        return sorted(
            (e for e in self.evaluated if e.meets), key=lambda e: objective_key(e, self.plan.objective)
        )

    def closest(self, n: int = 5) -> list[Evaluated]:
        """The candidates nearest to meeting the SLOs (largest margin first)."""
        ok = [e for e in self.evaluated if e.summary is not None]
        return sorted(ok, key=lambda e: (-e.margin, e.candidate.id))[:n]


def objective_key(e: Evaluated, objective: str) -> tuple[float, ...]:
    """Sort key of a candidate meeting the SLOs: the objective, then cost, then latency, then id."""
    m = e.metrics
    first = {
        "cost": m["usd_per_hour"],
        "gpus": float(m["num_gpus"]),
        "energy": _or_inf(m["j_per_output_token"]),
    }[objective]
    return first, m["usd_per_hour"], _or_inf(m["e2e_p90_s"]), float(e.candidate.id)


def _or_inf(x: float | None) -> float:
    return float("inf") if x is None else float(x)


def candidate_metrics(c: Candidate, summary: dict[str, Any]) -> dict[str, Any]:
    """The figures a plan ranks and shows, from one run's summary (docs/metrics.md names)."""
    lat, thr, slo = summary["latency"], summary["throughput"], summary["slo"]

    def pct(metric: str, p: str) -> float | None:
        d = lat.get(metric) or {}
        return d.get(p) if isinstance(d, dict) else None

    out_tps = thr.get("output_tokens_per_s")
    tpot_mean = pct("tpot_s", "mean")
    return {
        "usd_per_hour": get_gpu(c.gpu).usd_per_hour * c.num_gpus,
        "num_gpus": c.num_gpus,
        "attainment": slo["attainment"].get("all"),
        "ttft_p90_s": pct("ttft_s", "p90"),
        "tpot_p90_s": pct("tpot_s", "p90"),
        "e2e_p90_s": pct("e2e_s", "p90"),
        "output_tokens_per_s": out_tps,
        "tokens_per_s_per_gpu": None if out_tps is None else out_tps / c.num_gpus,
        "tokens_per_s_per_user": None if not tpot_mean else 1.0 / tpot_mean,
        "goodput_rps": slo.get("goodput_rps"),
        "j_per_output_token": summary["energy"].get("j_per_output_token"),
        "usd_per_million_output_tokens": summary["cost"].get("usd_per_million_output_tokens"),
        "saturated": bool((summary.get("saturation") or {}).get("saturated")),
    }


def judge(slo: Any, summary: dict[str, Any]) -> tuple[bool, float, str]:
    """(meets, margin, verdict line) of one run: the scenario's SLO targets
    (``planner.targets.check_summary``), and a queue that kept up with the arrivals.

    A saturated run (its queue grew all run) misses whatever its attainment says, since
    a longer run would miss more; its margin is lowered by one so that it ranks after
    every run that kept up.
    """
    from servesim.planner.targets import check_summary

    verdict = check_summary(slo, summary)
    saturated = bool((summary.get("saturation") or {}).get("saturated"))
    line = verdict.describe() + ("; saturated: the queue grew all run" if saturated else "")
    return verdict.meets and not saturated, verdict.margin - (1.0 if saturated else 0.0), line


ProgressFn = Callable[[int, int, int], None]  # (done, total, cached)


def run_plan(
    base: Scenario,
    plan: PlanConfig,
    *,
    backend: Backend = "process",
    workers: int | None = None,
    address: str | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[Pruning, int], ProgressFn] | None = None,
) -> PlanResult:
    """Search ``plan``'s space around ``base``: prune, reuse the cache, simulate the rest.

    ``progress(pruning, num_to_simulate)`` returns a callback told (done, total, cached)
    as results arrive. ``cache_dir`` None keeps no cache.
    """
    from servesim.planner.targets import has_slo

    if not has_slo(base.slo):
        raise ConfigError(
            "plan: the scenario sets no SLO (slo.ttft_s, slo.tpot_s, slo.e2e_s or "
            "slo.percentiles); a plan ranks the deployments that meet one"
        )
    t0 = time.perf_counter()
    candidates = enumerate_candidates(base, plan)
    pruning = prune(candidates, workload_demand(base), base.slo.tpot_s)
    keys = {c.id: scenario_key(c.scenario) for c in pruning.survivors}
    cache = ResultCache(cache_dir) if cache_dir is not None else None
    found = cache.get(list(keys.values())) if cache is not None else {}
    by_id = {c.id: c for c in pruning.survivors}
    rows: dict[int, Evaluated] = {}
    for c in pruning.survivors:
        hit = found.get(keys[c.id])
        if hit is not None:
            rows[c.id] = Evaluated(c, hit["summary"], hit["error"], hit["wall_s"], cached=True)
    todo = [(c.id, c.scenario.model_dump_json()) for c in pruning.survivors if c.id not in rows]
    tick = progress(pruning, len(pruning.survivors)) if progress else None
    if tick:
        tick(len(rows), len(pruning.survivors), len(rows))
    try:
        for cid, summary, error, wall in evaluate(todo, backend, workers, address):
            c = by_id[cid]
            if cache is not None:
                cache.put(keys[cid], c.label(), summary, error, wall)
            rows[cid] = Evaluated(c, summary, error, wall, cached=False)
            if tick:
                tick(len(rows), len(pruning.survivors), len(found))
    finally:
        if cache is not None:
            cache.close()
    evaluated = [rows[cid] for cid in sorted(rows)]
    for e in evaluated:
        if e.summary is not None:
            e.metrics = candidate_metrics(e.candidate, e.summary)
            e.meets, e.margin, e.verdict = judge(base.slo, e.summary)
    return PlanResult(base, plan, candidates, pruning, evaluated, time.perf_counter() - t0, backend)
