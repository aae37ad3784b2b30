"""Bounded-memory latency statistics: a DDSketch (the ``ddsketch`` library) fed from numpy.

A DDSketch maps every positive value ``x`` to the bucket ``ceil(log_gamma(x))`` with
``gamma = (1 + a) / (1 - a)`` and counts the samples (or their weights) per bucket; the
bucket's representative value is within a relative error ``a`` of every value in it
(``a = RELATIVE_ACCURACY``, 1%). Values at most ``min_possible`` (about 2e-308) count as
zero, negative values go to a mirrored store.

``Sketch`` adds what the summary needs on top of the library's ``DDSketch``:

- ``add_array(values, weights)``: the bucket keys of a whole array computed with numpy and
  added once per distinct key (the library's ``add`` is one Python call per sample);
- ``percentiles``: the **inverted CDF** of docs/metrics.md (the smallest bucket whose
  cumulative weight reaches p% of the total), not the library's interpolated rank, so the
  answer is the representative of the bucket holding the exact percentile: within ``a`` of
  it, relative, and clamped to the observed minimum and maximum;
- the sum (numpy's pairwise sum of each array added), a sum of squares (vllm bench's
  standard deviation), the exact minimum and maximum.

Sketches of the same accuracy merge by adding their buckets (``merge``): merging the
sketches of several replicas gives the buckets of one sketch fed all their samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from ddsketch import DDSketch

RELATIVE_ACCURACY = 0.01
# Runs with at most this many samples of a metric (requests, or ITL (gap, count) pairs)
# keep exact percentiles; above it the summary reads them from a sketch.
EXACT_MAX_SAMPLES = 1 << 20  # as metrics.itl.EXACT_MAX_PAIRS


def log_multiplier(relative_accuracy: float) -> float:
    """``1 / ln(gamma)``: the library's LogarithmicMapping puts ``x`` in bucket
    ``ceil(log_gamma(x))``, computed here (and in ``metrics.itl``) as ``ceil(ln(x) * this)``."""
    return 1.0 / math.log1p(2.0 * relative_accuracy / (1.0 - relative_accuracy))


def method_name(relative_accuracy: float = RELATIVE_ACCURACY) -> str:
    """How summary.json names the sketch's percentiles."""
    return f"ddsketch(relative_accuracy={relative_accuracy:g})"


class Sketch:
    """A ``ddsketch.DDSketch`` with vectorized, weighted ingestion and inverted-CDF percentiles."""

    __slots__ = ("dd", "sum", "sum_sq", "max", "min", "_log_mult")

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        self.dd = DDSketch(relative_accuracy)
        self.sum = 0.0
        self.sum_sq = 0.0
        self.max = -math.inf
        self.min = math.inf
        self._log_mult = log_multiplier(relative_accuracy)

    @property
    def relative_accuracy(self) -> float:
        return float(self.dd._mapping.relative_accuracy)

    @property
    def method(self) -> str:
        return method_name(self.relative_accuracy)

    @property
    def count(self) -> float:
        """Total weight added."""
        return float(self.dd._count)

    def add_array(self, values: Any, weights: Any = None) -> None:
        """Add every value of ``values`` (with its weight, default 1); NaNs and weights <= 0 are skipped."""
        v = np.asarray(values, np.float64).ravel()
        if weights is None:
            keep = ~np.isnan(v)
            w = None
        else:
            w = np.asarray(weights, np.float64).ravel()
            keep = ~np.isnan(v) & (w > 0)
        if not keep.all():
            v = v[keep]
            w = None if w is None else w[keep]
        if not v.size:
            return
        dd = self.dd
        tiny = dd._mapping.min_possible
        pos, neg = v > tiny, v < -tiny
        for mask, store, sign in ((pos, dd._store, 1.0), (neg, dd._negative_store, -1.0)):
            if not mask.any():
                continue
            keys = np.ceil(np.log(sign * v[mask]) * self._log_mult).astype(np.int64)
            lo = int(keys.min())
            per_key = np.bincount(keys - lo, weights=None if w is None else w[mask])
            for i in np.flatnonzero(per_key):
                store.add(lo + int(i), float(per_key[i]))
        # numpy's sums (pairwise, no BLAS: the same whatever the thread count) of each array.
        total = float(v.size) if w is None else float(w.sum())
        nonzero = pos | neg
        dd._zero_count += total - (float(np.count_nonzero(nonzero)) if w is None else float(w[nonzero].sum()))
        dd._count += total
        vw = v if w is None else v * w
        self.sum += float(vw.sum())
        self.sum_sq += float((vw * v).sum())
        self.max = max(self.max, float(v.max()))
        self.min = min(self.min, float(v.min()))

    def add_buckets(
        self,
        bins: dict[int, float],
        neg_bins: dict[int, float],
        zeros: float,
        total: float,
        sum_: float,
        sum_sq: float,
        min_: float,
        max_: float,
    ) -> None:
        """Add samples already counted by bucket key (``metrics.itl``, with this sketch's
        mapping): positive and negative values' buckets, the zeros, and their totals."""
        dd = self.dd
        for store, by_key in ((dd._store, bins), (dd._negative_store, neg_bins)):
            for key in sorted(by_key):
                store.add(key, by_key[key])
        dd._zero_count += zeros
        dd._count += total
        self.sum += sum_
        self.sum_sq += sum_sq
        self.min = min(self.min, min_)
        self.max = max(self.max, max_)

    def merge(self, other: Sketch) -> None:
        """Add ``other``'s samples to this sketch (same relative accuracy)."""
        self.dd.merge(other.dd)
        self.sum += other.sum
        self.sum_sq += other.sum_sq
        self.max = max(self.max, other.max)
        self.min = min(self.min, other.min)

    def _buckets(self) -> tuple[np.ndarray, np.ndarray]:
        """(representative value, weight) of every non-empty bucket, in increasing value."""
        dd = self.dd
        vals: list[float] = []
        wts: list[float] = []
        value = dd._mapping.value
        neg = dd._negative_store
        if neg.count:
            for key in range(neg.max_key, neg.min_key - 1, -1):
                c = neg.bins[key - neg.offset]
                if c:
                    vals.append(-value(key))
                    wts.append(c)
        if dd._zero_count:
            vals.append(0.0)
            wts.append(dd._zero_count)
        pos = dd._store
        if pos.count:
            for key in range(pos.min_key, pos.max_key + 1):
                c = pos.bins[key - pos.offset]
                if c:
                    vals.append(value(key))
                    wts.append(c)
        return np.asarray(vals, np.float64), np.asarray(wts, np.float64)

    def percentiles(self, ps: tuple[float, ...]) -> list[float]:
        """The inverted-CDF percentile (p in percent) of each of ``ps``: the representative of
        the first bucket whose cumulative weight reaches p% of the total, clamped to [min, max]."""
        v, w = self._buckets()
        if not v.size:
            return [math.nan] * len(ps)
        cum = np.cumsum(w)
        out = []
        for p in ps:
            x = float(v[min(int(np.argmax(100 * cum >= p * cum[-1])), v.size - 1)])
            out.append(min(max(x, self.min), self.max))
        return out
