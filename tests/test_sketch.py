"""Bounded-memory latency statistics (metrics/sketch.py): the sketch's percentiles against the
exact ones, merging, the ITL pairs moved into a sketch, and summary.json naming the method."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import servesim
import servesim.metrics.sketch as sketch_mod
from servesim.metrics.records import ItlSamples
from servesim.metrics.sketch import RELATIVE_ACCURACY, Sketch
from servesim.metrics.stats import PERCENTILES, distribution
from servesim.metrics.summary import LATENCY_METRICS, summarize

# The sketch's representative of a bucket is within RELATIVE_ACCURACY of every value in it;
# the log's rounding can put a value on a bucket's edge, hence the 1e-9.
TOL = RELATIVE_ACCURACY + 1e-9


def _within(approx: float, exact: float) -> bool:
    return abs(approx - exact) <= TOL * abs(exact)


def test_weighted_percentiles_within_the_relative_accuracy() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.lognormal(-4, 1.5, 20_000), np.zeros(300), [np.nan]])
    weights = rng.integers(0, 50, values.size)
    sk = Sketch()
    sk.add_array(values, weights)
    exact = distribution(values, weights)
    got = sk.percentiles(tuple(float(p) for p in PERCENTILES))
    for p, a in zip(PERCENTILES, got):
        assert _within(a, exact[f"p{p}"])
    assert round(sk.count) == exact["count"]
    assert sk.max == exact["max"]
    assert sk.sum / sk.count == pytest.approx(exact["mean"], rel=1e-12)


def test_merging_replica_sketches_equals_one_sketch_over_all() -> None:
    rng = np.random.default_rng(3)
    parts = [rng.lognormal(m, 1.0, n) for m, n in ((-5, 4000), (-3, 7000), (-1, 300))]
    whole = Sketch()
    whole.add_array(np.concatenate(parts))
    merged = Sketch()
    for p in parts:
        one = Sketch()
        one.add_array(p)
        merged.merge(one)
    for a, b in zip(merged._buckets(), whole._buckets()):
        assert np.array_equal(a, b)
    assert merged.count == whole.count and merged.max == whole.max and merged.min == whole.min
    ps = tuple(float(p) for p in PERCENTILES)
    assert merged.percentiles(ps) == whole.percentiles(ps)


def test_itl_pairs_move_into_a_sketch_past_the_limit() -> None:
    """Past the limit the engine counts the pairs into the sketch's buckets itself: the same
    buckets as the sketch fed every pair at once."""
    itl = ItlSamples(exact_max_pairs=100)
    rng = np.random.default_rng(1)
    gaps = rng.lognormal(-4, 0.5, 5000)
    for i in range(0, 5000, 10):
        itl.extend(list(gaps[i : i + 10]), 3)
        itl.add(float(gaps[i]), 2)
        itl.add(0.0, 1)
        assert len(itl.gap_s) <= 101
    assert not itl.is_exact and not itl.gap_s
    sk = itl.sketched()
    ref = Sketch()
    ref.add_array(
        np.concatenate([gaps, gaps[::10], np.zeros(500)]),
        np.concatenate([np.full(5000, 3), np.full(500, 2), np.ones(500)]),
    )
    for a, b in zip(sk._buckets(), ref._buckets()):
        assert np.array_equal(a, b)
    assert sk.count == ref.count == 16500 and sk.max == ref.max
    assert sk.sum == pytest.approx(ref.sum, rel=1e-12)
    itl.clear()
    assert itl.sketched().count == 0


def test_itl_gaps_on_bucket_edges_get_the_sketchs_keys() -> None:
    """The engine skips the logarithm for a gap inside the current bucket's interval: gaps
    just inside and just outside each bucket's edges (gamma^k), rising as a run's step times
    do and falling, land in the buckets the sketch's own mapping gives them."""
    itl = ItlSamples(exact_max_pairs=0)
    gamma = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
    edges = gamma ** np.arange(-260, -150, dtype=np.float64)  # about 6 us to 1.4 s
    gaps = np.concatenate([edges * f for f in (1 - 1e-15, 1.0, 1 + 1e-15, 1 + 1e-10, 1 - 1e-10)])
    gaps = np.concatenate([np.sort(gaps), np.sort(gaps)[::-1], np.linspace(0.004, 0.09, 20_000)])
    itl.extend([float(g) for g in gaps], 1)
    sk = itl.sketched()
    ref = Sketch()
    ref.add_array(gaps)
    for a, b in zip(sk._buckets(), ref._buckets()):
        assert np.array_equal(a, b)
    assert sk.count == ref.count == gaps.size


def test_itl_gaps_counted_in_bulk_as_one_by_one() -> None:
    """A run's gaps counted into the buckets in one pass (``extend``) give the buckets and
    the sums, to the last bit, of the same gaps counted one at a time (``add``): zeros,
    negative gaps, runs of gaps in one bucket and jumps between buckets."""
    rng = np.random.default_rng(5)
    gaps = np.concatenate(
        [rng.lognormal(-4, 0.3, 3000), [0.0, -0.002, 1e-310, 0.5], rng.normal(0.02, 1e-4, 500)]
    )
    bulk, single = ItlSamples(exact_max_pairs=0), ItlSamples(exact_max_pairs=0)
    for i in range(0, len(gaps), 97):
        part = [float(g) for g in gaps[i : i + 97]]
        bulk.extend(part, 5)
        for g in part:
            single.add(g, 5)
    a, b = bulk.sketched(), single.sketched()
    for x, y in zip(a._buckets(), b._buckets()):
        assert np.array_equal(x, y)
    assert (a.count, a.sum, a.min, a.max) == (b.count, b.sum, b.min, b.max)
    assert (bulk._sum_sq, bulk._zeros, bulk._neg_bins) == (single._sum_sq, single._zeros, single._neg_bins)


@pytest.fixture(scope="module")
def small_run() -> servesim.Result:
    return servesim.simulate(
        {
            "workload": {
                "type": "synthetic",
                "num_requests": 3000,
                "arrival": {"process": "poisson", "rate": 20},
            }
        }
    )


def test_a_small_run_is_exact_and_says_so(small_run) -> None:
    assert small_run.summary["latency"]["method"] == "exact"
    assert small_run.itl.is_exact


def test_sketched_summary_within_the_relative_accuracy_of_the_exact_one(small_run, monkeypatch) -> None:
    """The same run summarized exactly and from sketches (every metric forced past the limit)."""
    exact = small_run.summary["latency"]
    itl = ItlSamples(exact_max_pairs=500)
    for g, c in zip(small_run.itl.gap_s, small_run.itl.count):
        itl.add(g, c)
    assert not itl.is_exact
    monkeypatch.setattr(sketch_mod, "EXACT_MAX_SAMPLES", 10)
    sketched = summarize(dataclasses.replace(small_run, itl=itl))["latency"]
    assert sketched["method"] == f"ddsketch(relative_accuracy={RELATIVE_ACCURACY:g})"
    for name in LATENCY_METRICS:
        a, b = sketched[name], exact[name]
        assert a["count"] == b["count"] > 0
        assert a["max"] == b["max"]
        assert a["mean"] == pytest.approx(b["mean"], rel=1e-9)
        for p in PERCENTILES:
            assert _within(a[f"p{p}"], b[f"p{p}"]), (name, p, a[f"p{p}"], b[f"p{p}"])
    # Only the ITL past its limit: the method is named per metric.
    monkeypatch.setattr(sketch_mod, "EXACT_MAX_SAMPLES", 1 << 20)
    mixed = summarize(dataclasses.replace(small_run, itl=itl))["latency"]
    assert mixed["method"].startswith("ttft_s: exact;") and "itl_s: ddsketch(" in mixed["method"]
    assert mixed["ttft_s"] == exact["ttft_s"]
