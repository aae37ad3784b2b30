"""Helpers the papers' experiments share: length draws, a capacity bisection, P99 TBT."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.metrics.stats import weighted_percentile
from servesim.sim import EngineRun


def lognormal_lengths(
    rng: np.random.Generator, n: int, median: float, sigma: float, lo: int, hi: int
) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(median), sigma, n), lo, hi).astype(np.int64)


def trace_like_lengths(
    rng: np.random.Generator, n: int, prompt_q: tuple[int, int], output_q: tuple[int, int], max_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal prompt and output lengths with a trace's (median, P90), trimmed as sarathi's
    TraceRequestLengthGenerator trims them: a request longer than ``max_tokens`` loses the
    excess from its prompt and output in proportion."""
    z90 = 1.2816  # standard normal P90
    p = rng.lognormal(np.log(prompt_q[0]), np.log(prompt_q[1] / prompt_q[0]) / z90, n).astype(np.int64)
    d = rng.lognormal(np.log(output_q[0]), np.log(output_q[1] / output_q[0]) / z90, n).astype(np.int64)
    p, d = np.maximum(p, 1), np.maximum(d, 1)
    total = p + d
    excess = np.maximum(total - max_tokens, 0)
    p = np.maximum(p - np.ceil(excess * p / total).astype(np.int64), 1)
    d = np.maximum(d - np.ceil(excess * d / total).astype(np.int64), 1)
    return p, d


def capacity(meets_slo: Callable[[float], bool], lo: float, hi: float, iters: int = 6) -> float:
    """Largest rate in [lo, hi] that meets the SLO (geometric bisection; ``lo`` must meet it,
    else 0.0 is returned)."""
    if not meets_slo(lo):
        return 0.0
    if meets_slo(hi):
        return hi
    for _ in range(iters):
        mid = (lo * hi) ** 0.5
        if meets_slo(mid):
            lo = mid
        else:
            hi = mid
    return lo


def p99_tbt_s(run: EngineRun) -> float:
    return weighted_percentile(np.asarray(run.itl.gap_s, np.float64), np.asarray(run.itl.count, np.int64), 99)
