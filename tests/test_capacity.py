"""The capacity search (servesim.planner.capacity): against M/D/1 queueing theory, its
bracket and precision as properties, its early stop, and the default deployment on the
bundled Azure trace."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from servesim import simulate
from servesim.config import load_scenario, scenario_from_dict
from servesim.deployment import resolve_deployment
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats, step_wall_s
from servesim.planner import capacity as cap_mod
from servesim.planner import rate_knob as rate_knob_mod
from servesim.planner import spread as spread_mod
from servesim.planner.capacity import CapacityNotFound, find_capacity
from servesim.planner.probe import SCREEN_FRACTION, Probe, probe_metrics, run_probe
from servesim.planner.rate_knob import rate_knob
from servesim.planner.targets import TargetCheck, Verdict

PROMPT = 512


def md1(rate: float, n: int = 3000, ttft_s: float = 1.0, **slo: object) -> dict:
    """One replica, one request at a time (max_num_seqs 1), fixed 512-token prompts and one
    output token: every request is one prefill step of the same length, so the replica is
    an M/D/1 queue (Poisson arrivals, deterministic service, FIFO) and TTFT = wait + D
    (the engine alone: no API-server front end, which is a second queue before it)."""
    return {
        "workload": {
            "type": "synthetic",
            "num_requests": n,
            "arrival": {"rate": rate},
            "prompt_len": {"value": PROMPT},
            "output_len": {"value": 1},
        },
        "engine": {"max_num_seqs": 1, "frontend": {"enabled": False}},
        "slo": {"ttft_s": ttft_s, **slo},
    }


def service_s() -> float:
    """D from the step model: one prefill of 512 tokens (async scheduling overlaps the CPU)."""
    dep = resolve_deployment(scenario_from_dict(md1(1.0)))
    stats = BatchStats(
        num_prefill_tokens=PROMPT,
        prefill_attn_work=PROMPT * PROMPT / 2,
        num_prefill_reqs=1,
        num_decode_reqs=0,
        sum_decode_context=0,
        sum_prefill_context=0,
    )
    return step_wall_s(dep.perf.batch_time(stats), dep.engine.cpu_overhead_s, dep.engine.async_scheduling)


def md1_wait_cdf(rate: float, d: float, t: float) -> float:
    """P(W <= t) of the M/D/1 queue (Erlang; Franx, Queueing Systems 2001):
    (1 - rho) * sum_{k=0}^{floor(t/D)} (lambda (kD - t))^k / k! * exp(-lambda (kD - t))."""
    rho = rate * d
    return (1 - rho) * sum(
        (rate * (k * d - t)) ** k / math.factorial(k) * math.exp(-rate * (k * d - t))
        for k in range(int(t // d) + 1)
    )


def test_capacity_under_a_ttft_target_is_m_d_1_theory() -> None:
    d = service_s()
    lone = simulate(scenario_from_dict(md1(0.01, n=5)))
    assert lone.records.ttft_s[0] == pytest.approx(d, rel=1e-9)  # an idle server: TTFT = D
    limit, target = 4 * d, 0.9
    # The theory's capacity: the rate at which P(TTFT <= 4D) = P(W <= 3D) = 0.9 (rho ~ 0.7).
    theory = brentq(lambda lam: md1_wait_cdf(lam, d, limit - d) - target, 0.01 / d, 0.99 / d)
    sc = scenario_from_dict(md1(0.15 / d, ttft_s=limit, attainment={"ttft_s": target}))
    cap = find_capacity(sc, precision=0.05)
    lo, hi = cap.lo.rate_rps, cap.hi.rate_rps  # type: ignore[union-attr]
    assert hi / lo - 1 <= 0.05
    # Sampling error of the attainment of 3000 correlated requests: batch means of the run at lo.
    rec = simulate(rate_knob(sc).at(sc, lo)).records
    hits = (rec.ttft_s <= limit).astype(float)
    sigma = float(np.std(hits.reshape(20, -1).mean(axis=1), ddof=1) / math.sqrt(20))
    assert sigma < 0.02  # small enough for the bound below to pin the rate to a few percent
    # lo met 0.9 and hi missed it in the simulation; the theory agrees within 3 sigma.
    assert md1_wait_cdf(lo, d, limit - d) >= target - 3 * sigma
    assert md1_wait_cdf(hi, d, limit - d) <= target + 3 * sigma
    assert lo * 0.9 < theory < hi * 1.1
    # Scaling the same arrivals up only lengthens each wait (Lindley's recursion), so the
    # verdicts are monotone in the rate: every probe at or below lo meets, every one above misses.
    for p in cap.probes:
        assert p.meets == (p.rate_rps <= lo)
    assert len(cap.probes) <= 12


def _fake_probe(threshold: float, seen: list[float]):  # type: ignore[no-untyped-def]
    def run(scenario, knob, rate, *, screen):  # type: ignore[no-untyped-def]
        seen.append(rate)
        ok = rate <= threshold
        check = TargetCheck("attainment", "all", 0.9, 0.95 if ok else 0.5, ok, 0.05 if ok else -0.4)
        verdict = Verdict(ok, check.margin, (check,), 100, 100)
        return Probe(rate, knob.value_for(rate), verdict, None, 100, defaultdict(lambda: None))

    return run


@settings(max_examples=60, deadline=None)
@given(threshold=st.floats(0.05, 500.0), start=st.floats(0.5, 50.0), precision=st.floats(0.01, 0.5))
def test_the_bracket_holds_the_threshold_to_the_precision(
    threshold: float, start: float, precision: float
) -> None:
    seen: list[float] = []
    sc = scenario_from_dict(md1(start, n=10))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cap_mod, "run_probe", _fake_probe(threshold, seen))
        cap = find_capacity(sc, precision=precision)
    lo, hi = cap.lo.rate_rps, cap.hi.rate_rps  # type: ignore[union-attr]
    assert lo <= threshold < hi and hi / lo - 1 <= precision * (1 + 1e-12)
    assert cap.probes[0].rate_rps == pytest.approx(start)
    # Bracketing doubles or halves (log2 of the distance, plus one), bisection halves log(hi/lo).
    bracket = math.ceil(abs(math.log2(threshold / start))) + 1
    assert len(seen) <= bracket + math.ceil(math.log2(math.log(2) / math.log1p(precision))) + 1


def test_max_rate_met_is_a_lower_bound_and_the_lowest_rate_missed_is_an_error() -> None:
    sc = scenario_from_dict(md1(1.0, n=10))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cap_mod, "run_probe", _fake_probe(1e9, []))
        cap = find_capacity(sc, max_rate=6.0)
        assert cap.hi is None and cap.lo.rate_rps == 6.0 and cap.figures()["limited_by_max_rate"]
        mp.setattr(cap_mod, "run_probe", _fake_probe(1e-9, seen := []))
        with pytest.raises(
            CapacityNotFound,
            match=r"missed even at 0\.01562 req/s, the lowest rate tried "
            r"\(min rate 0\.01 req/s\); closest probe: 1 req/s",
        ):
            find_capacity(sc, min_rate=0.01)
        assert seen[-1] == pytest.approx(0.015625) and len(seen) == 7  # 1, 1/2, ..., 1/64


def test_a_clear_miss_is_cut_short_on_its_prefix_and_agrees_with_the_whole_run() -> None:
    d = service_s()
    sc = scenario_from_dict(md1(1.0, n=1000, ttft_s=4 * d))
    knob = rate_knob(sc)
    short = run_probe(sc, knob, 2.0 / d, screen=True)  # rho = 2: the queue grows without bound
    assert short.cut_short and "miss already" in short.cut_short and not short.meets
    assert short.num_requests == math.ceil(1000 * SCREEN_FRACTION)
    whole = run_probe(sc, knob, 2.0 / d, screen=False)
    assert whole.num_requests == 1000 and not whole.meets and whole.cut_short is None
    # The prefix's misses are misses of the whole run too: more requests only add load.
    prefix_missed = short.verdict.checks[0].num_total - short.verdict.checks[0].num_met
    full = simulate(knob.at(sc, 2.0 / d)).records
    assert int((full.ttft_s[:250] > 4 * d).sum()) >= prefix_missed > 100
    # Near capacity nothing is cut: the prefix alone cannot prove a miss.
    assert run_probe(sc, knob, 0.7 / d, screen=True).cut_short is None


def test_a_finite_run_that_meets_its_slo_only_by_ending_is_not_sustained() -> None:
    d = service_s()
    sc = scenario_from_dict(md1(1.0, n=400, ttft_s=1000 * d))  # a limit the queue never reaches
    p = run_probe(sc, rate_knob(sc), 1.5 / d, screen=False)
    assert p.verdict.meets and p.metrics["saturated"] and not p.meets


def test_the_rate_knob_of_each_workload() -> None:
    trace = load_scenario(None, ["workload.rate_scale=2", "workload.limit=500"])
    knob = rate_knob(trace)
    assert knob.field == "workload.rate_scale" and knob.value_for(knob.base_rps) == pytest.approx(2.0)
    assert knob.at(trace, knob.base_rps / 2).workload.rate_scale == pytest.approx(1.0)
    synth = scenario_from_dict(md1(3.0))
    assert rate_knob(synth).at(synth, 7.0).workload.arrival.rate == 7.0
    bench = scenario_from_dict({"workload": {"type": "benchmark", "request_rate": 4}})
    assert rate_knob(bench).at(bench, 8.0).workload.request_rate == 8.0
    with pytest.raises(ConfigError, match="request_rate: inf"):
        rate_knob(scenario_from_dict({"workload": {"type": "benchmark"}}))
    with pytest.raises(ConfigError, match="no SLO"):
        find_capacity(scenario_from_dict({**md1(1.0), "slo": {}}))


def test_probe_metrics_read_the_summary() -> None:
    result = simulate(scenario_from_dict(md1(10.0, n=50)))
    m = probe_metrics(result.summary)
    assert m["usd_per_hour"] == pytest.approx(result.gpu.usd_per_hour)  # one GPU
    assert m["ttft_p99_s"] == result.summary["latency"]["ttft_s"]["p99"] and m["num_gpus"] == 1


@pytest.mark.slow
def test_the_default_deployment_on_the_azure_trace() -> None:
    """Llama-3.1-8B on one H100 serving the first 20 minutes of the bundled Azure trace,
    TTFT <= 2 s and TPOT <= 100 ms for 90% of requests."""
    sc = load_scenario(None, ["workload.end_s=1200"])
    cap = find_capacity(sc, precision=0.1)
    lo, hi = cap.lo, cap.hi
    assert hi is not None and hi.rate_rps / lo.rate_rps - 1 <= 0.1
    assert lo.verdict.checks[0].value >= 0.9 and not hi.meets
    # The trace as recorded is served (its attainment is ~1), so capacity is above its rate;
    # and no rate beyond the engine's full-batch throughput is sustained (metrics.headroom).
    assert lo.knob_value >= 1.0
    assert lo.rate_rps <= lo.metrics["headroom_capacity_rps"]
    f = cap.figures()
    assert f["good_requests_per_usd"] == pytest.approx(f["goodput_rps"] * 3600 / f["usd_per_hour"])


@pytest.mark.parametrize(
    "workload",
    [
        {
            "type": "synthetic",
            "num_requests": None,
            "duration_s": 100,
            "arrival": {"rate": 5},
            "prompt_len": {"kind": "uniform", "low": 1, "high": 999},
        },
        {
            "type": "synthetic",
            "num_requests": 400,
            "arrival": {"process": "gamma", "rate": 5, "cv": 3},
            "prompt_len": {"kind": "lognormal"},
        },
        {"type": "trace", "path": "builtin:azure_conv", "limit": 800, "rate_scale": 3},
    ],
)
def test_the_early_stop_prefix_is_the_first_requests_of_the_whole_run(workload: dict) -> None:
    from servesim.planner.rate_knob import prefix_scenario
    from servesim.workload import load_workload

    sc = scenario_from_dict({"workload": workload})
    full = load_workload(sc.workload, 0)
    head = load_workload(prefix_scenario(sc, SCREEN_FRACTION, len(full)).workload, 0)
    k = len(head)
    assert k == math.ceil(len(full) * SCREEN_FRACTION)
    assert np.array_equal(full.arrival_s[:k], head.arrival_s)
    assert np.array_equal(full.num_prompt_tokens[:k], head.num_prompt_tokens)
    assert np.array_equal(full.num_output_tokens[:k], head.num_output_tokens)


# --------------------------------------------------------------------------- the answer's uncertainty

SPREAD = {
    "workload": {
        "type": "synthetic",
        "num_requests": 150,
        "arrival": {"rate": 4.0},
        "prompt_len": {"kind": "lognormal", "mean": 1000, "std": 900, "max": 6000},
        "output_len": {"kind": "lognormal", "mean": 100, "std": 100, "max": 600},
    },
    "slo": {"ttft_s": 0.3, "attainment": {"all": 0.9}},
}


def test_the_t_quantiles_are_students() -> None:
    from scipy.stats import t

    assert spread_mod._T975 == pytest.approx([t.ppf(0.975, df) for df in range(1, 31)], abs=6e-4)


def test_the_prediction_interval_is_the_t_interval_of_the_answers() -> None:
    sp = spread_mod.SeedSpread(100, [0, 1, 2, 3], [10.0, 12.0, 11.0, 13.0], varies=True)
    s = math.sqrt(((1.5**2) * 2 + 0.5**2 * 2) / 3)  # mean 11.5
    half = 3.182 * s * math.sqrt(1 + 1 / 4)
    assert sp.interval == pytest.approx((11.5 - half, 11.5 + half))
    assert sp.relative_half_width == pytest.approx(half / 11.5)
    assert sp.is_within(0.4) and not sp.is_within(0.2)


def test_the_interval_holds_the_answers_at_other_seeds() -> None:
    """Five seeds' answers give the interval (about +-26% of the mean at 600 requests); the
    searches at three further seeds, not used to build it, land inside it."""
    sc = scenario_from_dict({**SPREAD, "workload": {**SPREAD["workload"], "num_requests": 600}})
    cap = find_capacity(sc, precision=0.05)
    spread = cap_mod.seed_spread(cap, 5)
    assert spread.varies and spread.seeds == [0, 1, 2, 3, 4] and spread.answers[0] == cap.capacity_rps
    assert len(set(spread.answers)) > 1  # the seed moves the answer
    assert spread.relative_half_width < 0.35
    lo, hi = spread.interval
    for seed in (5, 6, 7):
        other = find_capacity(cap_mod._with_seed(sc, seed), precision=0.05).capacity_rps
        assert lo <= other <= hi, (seed, other, spread.interval)


def test_the_interval_narrows_as_the_run_grows() -> None:
    cap = cap_mod.stabilize(scenario_from_dict(SPREAD), width=0.1, seeds=5, precision=0.05, max_requests=600)
    sizes = [r.num_requests for r in cap.rounds]
    widths = [r.relative_half_width for r in cap.rounds]
    assert sizes == [150 * 2**i for i in range(len(sizes))] and len(sizes) >= 2
    assert widths[-1] < widths[0]
    stable = cap.uncertainty()["stable"]
    assert stable == (widths[-1] <= 0.1) and (stable or sizes[-1] * 2 > 600)
    assert cap.spread is cap.rounds[-1]
    assert cap.scenario.workload.num_requests == sizes[-1]


def test_a_trace_has_no_seed_spread_and_says_so() -> None:
    sc = load_scenario(None, ["workload.limit=300"])
    cap = find_capacity(sc, precision=0.3, max_rate=float(rate_knob(sc).base_rps))
    spread = cap_mod.seed_spread(cap, 5)
    assert not spread.varies and spread.answers == [cap.capacity_rps] and spread.num_probes == 0
    assert spread.is_within(0.01)


# --------------------------------------------------------------------------- sessions, agents, reasoning


def test_sessions_are_searched_on_the_rate_they_start() -> None:
    """The bundled chat sessions: the knob is the session start rate, and the window the
    starts span (300 sessions at 0.5/s: 600 s) is held, so twice the rate, twice the sessions."""
    from servesim.workload import load_workload

    sc = load_scenario("examples/chat_sessions.yaml")
    knob = rate_knob(sc)
    assert (knob.field, knob.unit, knob.base_rps) == ("workload.arrival.rate", "sessions/s", 0.5)
    assert knob.requests_per_start == len(load_workload(sc.workload, 0)) / 300
    wl = knob.at(sc, 1.0).workload
    assert (wl.arrival.rate, wl.num_sessions) == (1.0, 600)
    assert knob.at(sc, 0.1).workload.num_sessions == 60


@pytest.mark.parametrize(
    ("example", "sets"),
    [
        ("chat_sessions.yaml", ["workload.num_sessions=20"]),
        ("agent_tasks.yaml", ["workload.num_tasks=40"]),
        ("reasoning_dynasor.yaml", ["workload.num_questions=10"]),
    ],
)
def test_capacity_of_the_bundled_session_agent_and_reasoning_examples(example: str, sets: list) -> None:
    sc = load_scenario(f"examples/{example}", sets)
    cap = find_capacity(sc, precision=0.2)
    assert cap.knob.unit.endswith("s/s") and cap.knob.unit != "req/s"
    assert cap.lo.meets and cap.hi is not None and not cap.hi.meets
    assert cap.hi.rate_rps / cap.lo.rate_rps - 1 <= 0.2
    # the probe at the answer ran its share of starts: the window held
    count = {"chat_sessions.yaml": 20 / 0.5, "agent_tasks.yaml": 40 / 0.5}
    if example in count:
        field = rate_knob_mod.STARTS[sc.workload.type][0]
        assert getattr(cap.knob.at(sc, cap.capacity_rps).workload, field) == round(
            count[example] * cap.capacity_rps
        )
