"""Synthetic workloads: checks against theory with fixed seeds, exact small cases, determinism."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from servesim.config import ArrivalConfig, LengthDist, SyntheticWorkload
from servesim.errors import WorkloadError
from servesim.workload import load_workload, sample_lengths

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
N = 200_000


def cfg(**kw) -> SyntheticWorkload:
    return SyntheticWorkload(**kw)


def gaps(wl) -> np.ndarray:
    return np.diff(np.concatenate([[0.0], wl.arrival_s]))


def cv(x: np.ndarray) -> float:
    return float(x.std() / x.mean())


# --------------------------------------------------------------------------- arrivals


def test_poisson_interarrival_mean_and_cv():
    wl = load_workload(cfg(arrival=ArrivalConfig(process="poisson", rate=10.0), num_requests=N), seed=1)
    wl.validate()
    g = gaps(wl)
    assert g.mean() == pytest.approx(0.1, rel=0.01)
    assert cv(g) == pytest.approx(1.0, rel=0.02)
    assert len(wl) == N and wl.arrival_s[0] > 0  # first arrival one gap after t=0


@pytest.mark.parametrize("target_cv", [0.5, 3.0])
def test_gamma_interarrival_cv(target_cv):
    wl = load_workload(cfg(arrival=ArrivalConfig(process="gamma", rate=4.0, cv=target_cv), num_requests=N))
    g = gaps(wl)
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert cv(g) == pytest.approx(target_cv, rel=0.10)


def test_constant_and_burst_exact():
    wl = load_workload(cfg(arrival=ArrivalConfig(process="constant", rate=4.0), num_requests=5))
    np.testing.assert_array_equal(wl.arrival_s, [0.25, 0.5, 0.75, 1.0, 1.25])
    wl = load_workload(cfg(arrival=ArrivalConfig(process="burst"), num_requests=3))
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 0.0, 0.0])


def test_duration_bounds_arrivals():
    wl = load_workload(cfg(arrival=ArrivalConfig(rate=50.0), num_requests=None, duration_s=200.0), seed=3)
    wl.validate()
    assert wl.arrival_s[-1] < 200.0
    # Poisson count over 200 s at 50/s: mean 10,000, std 100.
    assert abs(len(wl) - 10_000) < 500
    const = load_workload(
        cfg(arrival=ArrivalConfig(process="constant", rate=2.0), num_requests=None, duration_s=3.0)
    )
    np.testing.assert_array_equal(const.arrival_s, [0.5, 1.0, 1.5, 2.0, 2.5])  # 3.0 is not < 3.0


def test_duration_and_count_stop_at_first():
    by_count = load_workload(cfg(arrival=ArrivalConfig(rate=10.0), num_requests=100, duration_s=1e6))
    assert len(by_count) == 100
    by_time = load_workload(cfg(arrival=ArrivalConfig(rate=10.0), num_requests=100_000, duration_s=5.0))
    assert 20 < len(by_time) < 100 and by_time.arrival_s[-1] < 5.0


def test_no_arrival_in_duration_is_an_error():
    with pytest.raises(WorkloadError, match="no arrival before duration_s=0.001"):
        load_workload(
            cfg(arrival=ArrivalConfig(process="constant", rate=1.0), num_requests=None, duration_s=0.001)
        )


def test_burst_needs_a_count():
    with pytest.raises(WorkloadError, match="burst puts every request at t=0"):
        load_workload(cfg(arrival=ArrivalConfig(process="burst"), num_requests=None, duration_s=10.0))


# --------------------------------------------------------------------------- lengths


def lengths(dist: LengthDist, n: int = N, seed: int = 0) -> np.ndarray:
    return sample_lengths(dist, n, np.random.default_rng(seed))


def test_lognormal_matches_requested_mean_and_std():
    x = lengths(LengthDist(kind="lognormal", mean=1000.0, std=500.0))
    assert x.mean() == pytest.approx(1000.0, rel=0.02)
    assert x.std() == pytest.approx(500.0, rel=0.03)


def test_normal_rounded_and_clipped():
    x = lengths(LengthDist(kind="normal", mean=10.0, std=20.0, min=2, max=40))
    assert x.dtype == np.int64 and x.min() == 2 and x.max() == 40


def test_uniform_is_inclusive():
    x = lengths(LengthDist(kind="uniform", low=3, high=5), n=3000)
    assert set(x.tolist()) == {3, 4, 5}


def test_pareto_minimum_and_mean():
    x = lengths(LengthDist(kind="pareto", scale=64.0, alpha=3.0))
    assert x.min() == 64
    assert x.mean() == pytest.approx(3.0 * 64.0 / 2.0, rel=0.03)  # alpha x_m / (alpha - 1)


def test_constant_and_trace_lengths():
    np.testing.assert_array_equal(lengths(LengthDist(kind="constant", value=7), n=3), [7, 7, 7])
    src = str(FIXTURES / "lengths_only.csv")
    x = lengths(LengthDist(kind="trace", trace=src, column="output"), n=3000)
    assert set(x.tolist()) == {10, 20, 30}
    x = lengths(LengthDist(kind="trace", trace=str(FIXTURES / "mooncake.jsonl"), max=700), n=3000)
    assert set(x.tolist()) == {512, 600, 700}  # 1000 clipped to max


def test_bad_length_configs():
    # Refused when the config is validated, before any workload is drawn.
    with pytest.raises(ValidationError, match=r"expected low <= high, found low=9 > high=3"):
        LengthDist(kind="uniform", low=9, high=3)
    with pytest.raises(ValidationError, match=r"expected min <= max, found min=9 > max=3"):
        LengthDist(min=9, max=3)
    with pytest.raises(ValidationError, match="kind: trace needs trace"):
        LengthDist(kind="trace")
    # A bound of the other kinds is not checked (uniform's low/high mean nothing to normal).
    assert lengths(LengthDist(kind="constant", value=5, low=9, high=3), n=1).tolist() == [5]


# --------------------------------------------------------------------------- determinism, prefixes


def test_deterministic_under_seed():
    c = cfg(
        arrival=ArrivalConfig(process="gamma", cv=2.0),
        num_requests=500,
        prompt_len=LengthDist(kind="lognormal", mean=300, std=200),
        prefix_groups=4,
        prefix_len=64,
    )
    a, b = load_workload(c, seed=7), load_workload(c, seed=7)
    for col in ("arrival_s", "num_prompt_tokens", "num_output_tokens", "prefix_group"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    assert not np.array_equal(a.arrival_s, load_workload(c, seed=8).arrival_s)
    # The run seed adds to the workload seed.
    shifted = load_workload(c.model_copy(update={"seed": 5}), seed=2)
    np.testing.assert_array_equal(shifted.arrival_s, a.arrival_s)


def test_arrivals_do_not_depend_on_length_distribution():
    a = load_workload(cfg(num_requests=100))
    b = load_workload(cfg(num_requests=100, prompt_len=LengthDist(kind="pareto")))
    assert not np.array_equal(a.num_prompt_tokens, b.num_prompt_tokens)  # the lengths did change
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)


def test_prefix_groups_uniform():
    wl = load_workload(cfg(num_requests=40_000, prefix_groups=4, prefix_len=128))
    assert wl.prefix_len == 128 and wl.prefix_group.dtype == np.int64
    counts = np.bincount(wl.prefix_group, minlength=4)
    assert len(counts) == 4
    assert np.all(np.abs(counts - 10_000) < 4 * math.sqrt(10_000 * 0.75))
    assert wl.num_prompt_tokens.min() >= 1


def test_no_prefix_groups_without_length():
    wl = load_workload(cfg(num_requests=10, prefix_groups=4, prefix_len=0))
    assert wl.prefix_group is None and wl.prefix_len == 0
