"""Rate profiles: exact small cases of Lambda and its inverse, and arrival counts per window
against rate x integral of m(t) with bounds from the Poisson (or renewal) count variance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy import stats

from servesim.config import ArrivalConfig, RateProfileConfig, SyntheticWorkload
from servesim.workload import load_workload
from servesim.workload.rate_profile import RateProfile
from servesim.workload.synthetic import weibull_shape

DAY = [[0, 0.3], ["6h", 0.3], ["9h", 1.0], ["18h", 1.0], ["22h", 0.5]]


def profile(**kw) -> RateProfile:
    return RateProfile.from_config(RateProfileConfig(**kw))


def test_points_exact_integral_and_inverse():
    p = profile(points=[[0, 0.0], [10, 1.0]])  # ramp 0 -> 1 over 10 s, then 1 forever
    np.testing.assert_allclose(p.cumulative([0, 5, 10, 20]), [0.0, 1.25, 5.0, 15.0])
    np.testing.assert_allclose(p.inverse([0.0, 1.25, 5.0, 15.0]), [0.0, 5.0, 10.0, 20.0])
    np.testing.assert_allclose(p.multiplier([0, 5, 30]), [0.0, 0.5, 1.0])


def test_step_and_period_exact():
    p = profile(points=[[0, 2.0], [10, 0.0], [20, 1.0]], interpolation="step", period_s=30)
    # One period: 2*10 + 0*10 + 1*10 = 30; two and a half periods: 30+30+20.
    np.testing.assert_allclose(p.cumulative([10, 20, 30, 75]), [20.0, 20.0, 30.0, 80.0])
    # Lambda is flat over the m = 0 stretch [10, 20): its inverse is the end of the stretch.
    np.testing.assert_allclose(p.inverse([20.0, 20.5, 80.0, 80.5]), [20.0, 20.5, 80.0, 80.5])


def test_durations_with_units():
    cfg = RateProfileConfig(points=DAY, period_s="1d")
    assert cfg.period_s == 86400.0 and cfg.points[2][0] == 9 * 3600.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.just(0.0) | st.floats(0.01, 5.0), min_size=1, max_size=6),
    st.booleans(),
    st.booleans(),
    st.floats(0.0, 1e6),
)
def test_inverse_undoes_cumulative(ms, step, periodic, t):
    if not any(ms):
        ms = [*ms[:-1], 1.0]
    pts = [[10.0 * i, m] for i, m in enumerate(ms)]
    p = profile(
        points=pts, interpolation="step" if step else "linear", period_s=10.0 * len(ms) if periodic else None
    )
    tau = float(p.cumulative(t))
    if ms[-1] == 0 and not periodic and t > 10.0 * (len(ms) - 1):
        return  # past the end of a profile that ends at 0, Lambda is flat
    back = float(p.inverse(tau))
    assert p.cumulative(back) == pytest.approx(tau, rel=1e-9, abs=1e-9)
    if min(ms) > 0:  # Lambda strictly increasing: the inverse is t itself
        assert back == pytest.approx(t, rel=1e-7, abs=1e-6)


def test_diurnal_integral_and_inverse():
    p = profile(shape="diurnal", peak=1.0, trough=0.2, peak_at_s="14h")
    assert float(p.cumulative(86400.0)) == pytest.approx(0.6 * 86400.0)
    assert float(p.multiplier(14 * 3600.0)) == pytest.approx(1.0)
    assert float(p.multiplier(2 * 3600.0)) == pytest.approx(0.2)
    t = np.linspace(0, 3 * 86400.0, 1001)
    np.testing.assert_allclose(p.inverse(p.cumulative(t)), t, atol=1e-6)


def window_counts(wl, edges: np.ndarray) -> np.ndarray:
    return np.histogram(wl.arrival_s, bins=edges)[0]


@pytest.mark.parametrize("process,cv", [("poisson", 1.0), ("gamma", 2.0), ("weibull", 0.5)])
@pytest.mark.parametrize("shape", ["points", "diurnal"])
def test_window_counts_match_the_integral(process, cv, shape):
    """Counts in 48 half-hour windows of a day: each within 4.5 sigma of rate x integral,
    and the sum of squared z-scores within the chi-square 0.1%..99.9% range.

    sigma^2 = cv^2 x mean: a renewal process's count variance (cv = 1: Poisson).
    """
    rp = (
        RateProfileConfig(points=DAY, period_s="1d")
        if shape == "points"
        else RateProfileConfig(shape="diurnal", peak=1.0, trough=0.3)
    )
    rate = 0.5
    cfg = SyntheticWorkload(
        arrival=ArrivalConfig(process=process, rate=rate, cv=cv, rate_profile=rp),
        num_requests=None,
        duration_s="1d",
    )
    wl = load_workload(cfg, seed=7)
    wl.validate()
    edges = np.arange(0, 86400.0 + 1, 1800.0)
    prof = RateProfile.from_config(rp)
    expected = rate * np.diff(prof.cumulative(edges))
    z = (window_counts(wl, edges) - expected) / np.sqrt(cv**2 * expected)
    assert np.abs(z).max() < 4.5
    dof = len(expected)
    assert stats.chi2.ppf(0.001, dof) < float((z**2).sum()) < stats.chi2.ppf(0.999, dof)
    assert wl.arrival_s.max() < 86400.0


def test_num_requests_follow_the_profile():
    """A ramp from 0 to 1 over 1000 s: the i-th of n arrivals sits where Lambda = i/rate."""
    rp = RateProfileConfig(points=[[0, 0.0], [1000, 1.0]])
    wl = load_workload(
        SyntheticWorkload(
            arrival=ArrivalConfig(process="constant", rate=2.0, rate_profile=rp), num_requests=4
        )
    )
    np.testing.assert_allclose(wl.arrival_s, np.sqrt(2 * 1000 * np.arange(1, 5) / 2.0))


def test_local_cv_kept_where_the_rate_is_flat():
    """Gamma gaps inside the flat peak (9h-18h) keep their CV: the rescaled clock runs at
    a constant speed there. Bound: the CV of 4000+ gaps has a standard error under 3%."""
    rp = RateProfileConfig(points=DAY, period_s="1d")
    wl = load_workload(
        SyntheticWorkload(
            arrival=ArrivalConfig(process="gamma", rate=0.5, cv=2.0, rate_profile=rp),
            num_requests=None,
            duration_s="1d",
        ),
        seed=3,
    )
    t = wl.arrival_s[(wl.arrival_s > 9.5 * 3600) & (wl.arrival_s < 17.5 * 3600)]
    g = np.diff(t)
    assert g.mean() == pytest.approx(1 / 0.5, rel=0.08)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.12)


@pytest.mark.parametrize("target", [0.3, 1.0, 2.5])
def test_weibull_gaps_mean_and_cv(target):
    k = weibull_shape(target)
    cv2 = math.exp(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k)) - 1
    assert math.sqrt(cv2) == pytest.approx(target, rel=1e-9)
    wl = load_workload(
        SyntheticWorkload(
            arrival=ArrivalConfig(process="weibull", rate=4.0, cv=target), num_requests=200_000
        ),
        seed=2,
    )
    g = np.diff(np.concatenate([[0.0], wl.arrival_s]))
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(target, rel=0.10)


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"points": [[5, 1.0]]}, "first point must be at t=0"),
        ({"points": [[0, 1.0], [0, 2.0]]}, "increase strictly"),
        ({"points": [[0, -1.0]]}, ">= 0"),
        ({"points": [[0, 0.0]]}, "every multiplier is 0"),
        ({"points": [[0, 1.0], [10, 1.0]], "period_s": 10}, "before it"),
        ({"points": [[0, 1.0], ["8x", 1.0]]}, "duration such as"),
        ({"shape": "diurnal", "peak": 0.5, "trough": 0.8}, "trough <= peak"),
    ],
)
def test_bad_profiles(kw, needle):
    with pytest.raises(ValidationError, match=needle):
        RateProfileConfig(**kw)


def test_profile_ending_at_zero_needs_a_duration():
    from servesim.errors import WorkloadError

    rp = RateProfileConfig(points=[[0, 1.0], [10, 0.0]], interpolation="step")
    with pytest.raises(WorkloadError, match="ends at multiplier 0"):
        load_workload(SyntheticWorkload(arrival=ArrivalConfig(rate=10.0, rate_profile=rp), num_requests=500))
