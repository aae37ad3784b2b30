"""Distributions of a run's samples (count, mean, percentiles, max) and safe ratios, as the
summary reports them.

Percentiles use one definition for every metric, the inverted CDF (numpy's
``method="inverted_cdf"``): the p-th percentile is the smallest sample x such that at
least p% of the samples (by weight) are <= x. It always returns an observed value and
extends exactly to weighted samples such as the ITL (gap, count) pairs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servesim.metrics.records import RequestStatus

PERCENTILES = (50, 90, 95, 99)


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


def ratio(num: float, den: float | None) -> float | None:
    """num / den, or None when the denominator is missing, zero or not finite."""
    if den is None or not math.isfinite(den) or den <= 0 or not math.isfinite(num):
        return None
    return num / den


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
