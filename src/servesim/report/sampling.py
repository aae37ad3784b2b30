"""Reducing a run's records to what a plot needs: a few hundred points, whatever the run's size.

A CDF is drawn at fixed probabilities (``CDF_PROBS``: evenly spaced, plus the tail), a time
series in at most ``MAX_BINS`` bins. A report of a million requests is therefore as large as
one of a thousand.
"""

from __future__ import annotations

import numpy as np

#: Probabilities a CDF is drawn at: 400 evenly spaced, then the tail up to p99.99.
CDF_PROBS = np.unique(
    np.concatenate([np.linspace(0.0025, 1.0, 400), [0.991, 0.993, 0.995, 0.997, 0.999, 0.9995, 0.9999]])
)
MAX_BINS = 300


def cdf(
    values: np.ndarray, weights: np.ndarray | None = None, probs: np.ndarray = CDF_PROBS
) -> tuple[np.ndarray, np.ndarray]:
    """(value, probability) pairs of the empirical CDF of the non-NaN ``values``.

    The value at probability p is the inverted-CDF quantile (the smallest value whose
    cumulative weight reaches p of the total), as ``servesim.metrics.summary`` computes its
    percentiles, so the curve passes through the summary's p50/p90/p99.
    """
    v = np.asarray(values, np.float64)
    w = np.ones(v.shape) if weights is None else np.asarray(weights, np.float64)
    keep = ~np.isnan(v) & (w > 0)
    v, w = v[keep], w[keep]
    if v.size == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(w[order])
    idx = np.minimum(np.searchsorted(cum, probs * cum[-1] * (1 - 1e-12), side="left"), v.size - 1)
    return v[idx], probs.copy()


def itl_from_steps(steps: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Inter-token latencies as (gap, count) pairs rebuilt from the step records.

    Each step of a replica ends with one token for each request it decodes; those requests
    also produced a token at the end of the replica's previous step (the step that finished
    their prompt, or a decode). So the gap between two consecutive step ends of a replica
    counts once per decode request of the later step: the same pairs the engine records
    (``metrics.records.ItlSamples``), except for a request's first decode step on a
    disaggregated decode replica, whose previous token came from the prefill replica: those are
    left out where the replica sat idle before the step or its previous step ran fewer requests.
    """
    replica = np.asarray(steps["replica"])
    end = np.asarray(steps["start_s"], np.float64) + np.asarray(steps["duration_s"], np.float64)
    decodes = np.asarray(steps["num_decode_reqs"], np.float64)
    start = np.asarray(steps["start_s"], np.float64)
    running = np.asarray(steps["num_running"], np.float64)
    order = np.lexsort((end, replica))
    replica, start, end, decodes, running = (a[order] for a in (replica, start, end, decodes, running))
    same = replica[1:] == replica[:-1]
    # A decode of step i ran in step i - 1 too, unless it just arrived from elsewhere (a KV
    # transfer): so at most as many as step i - 1 ran, and none after the replica sat idle
    # (a running request is scheduled every step: idle means none was left running).
    back_to_back = start[1:] <= end[:-1] + 1e-9 * np.maximum(1.0, end[:-1])
    count = np.where(back_to_back, np.minimum(decodes[1:], running[:-1]), 0.0)
    return np.diff(end)[same], count[same]


def bin_edges(t_end_s: float, t_start_s: float = 0.0, max_bins: int = MAX_BINS) -> np.ndarray:
    """Edges of at most ``max_bins`` equal bins covering [start, end] (a round width)."""
    span = max(t_end_s - t_start_s, 1e-9)
    raw = span / max_bins
    mag = 10 ** np.floor(np.log10(raw))
    width = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    n = int(np.ceil(span / width))
    return t_start_s + width * np.arange(n + 1)


def rate(times_s: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Events per second in each bin."""
    t = np.asarray(times_s, np.float64)
    counts, _ = np.histogram(t[~np.isnan(t)], bins=edges)
    return counts / np.diff(edges)


def time_mean(
    start_s: np.ndarray, duration_s: np.ndarray, value: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """Busy-time-weighted mean of ``value`` over the steps starting in each bin (NaN: no step)."""
    k = np.clip(np.searchsorted(edges, start_s, side="right") - 1, 0, len(edges) - 2)
    w = np.maximum(np.asarray(duration_s, np.float64), 1e-12)
    num = np.bincount(k, weights=np.asarray(value, np.float64) * w, minlength=len(edges) - 1)
    den = np.bincount(k, weights=w, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def bin_mean(t_s: np.ndarray, value: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Plain mean of ``value`` over the rows in each bin (NaN: no row)."""
    k = np.clip(np.searchsorted(edges, t_s, side="right") - 1, 0, len(edges) - 2)
    v = np.asarray(value, np.float64)
    ok = ~np.isnan(v)
    num = np.bincount(k[ok], weights=v[ok], minlength=len(edges) - 1)
    den = np.bincount(k[ok], minlength=len(edges) - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def centers(edges: np.ndarray) -> np.ndarray:
    return (edges[:-1] + edges[1:]) / 2
