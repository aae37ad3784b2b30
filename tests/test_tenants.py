"""Tenants: VTC's admission order by hand, its fairness bound, the rate limit and queue cap
counted exactly, no request lost, and tenants read from traces, mixtures and shares."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from servesim.config import (
    EngineConfig,
    MixtureWorkload,
    SyntheticWorkload,
    TraceWorkload,
    scenario_from_dict,
)
from servesim.engine.tenants import TenantLimits, TenantSetup
from servesim.errors import ConfigError
from servesim.metrics.records import RequestStatus
from servesim.metrics.tenants import jain_index
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload import load_workload, read_trace
from servesim.workload.base import Workload

PERF = ConstantPerfModel(0.01, 1e-5)


def two_tenants(arrival: list[float], prompt: list[int], output: list[int], tenant: list[int]) -> Workload:
    return Workload(
        np.asarray(arrival, np.float64),
        np.asarray(prompt, np.int64),
        np.asarray(output, np.int64),
        tenant=np.asarray(tenant, np.int64),
        meta={"tenant_names": ["A", "B"]},
    )


def setup(weights: list[float], limits: list[TenantLimits] | None = None) -> TenantSetup:
    return TenantSetup(["A", "B"], weights, limits or [TenantLimits(), TenantLimits()], [None, None])


def admission_order(run) -> list[int]:
    return [int(i) for i in np.argsort(run.records.first_scheduled_s, kind="stable")]


# --------------------------------------------------------------------------- VTC by hand

# A sends three prompts of 100 tokens, B three of 10, all at t = 0 (A's first), every
# request 10 output tokens; one request runs at a time (max_num_seqs 1).
CASE = two_tenants([0.0] * 6, [100, 100, 100, 10, 10, 10], [10] * 6, [0, 0, 0, 1, 1, 1])
ONE_AT_A_TIME = EngineConfig(max_num_seqs=1, max_num_batched_tokens=512, enable_prefix_caching=False)


def test_fcfs_admits_in_arrival_order() -> None:
    run = run_engine(CASE, ONE_AT_A_TIME, PERF, 200, 1024, tenants=setup([1.0, 1.0]))
    assert admission_order(run) == [0, 1, 2, 3, 4, 5]


def test_vtc_admission_order_by_hand() -> None:
    """w_p = 1, w_q = 2. Counters start at 0; ties go to the earlier request.

    A1 (tie, earlier): c_A = 100 + 2 x 10 = 120.  B1, B2, B3 (c_B < 120 each time):
    c_B = 30, 60, 90.  A2, A3: c_A = 240, 360.
    """
    eng = ONE_AT_A_TIME.model_copy(update={"scheduling_policy": "vtc"})
    run = run_engine(CASE, eng, PERF, 200, 1024, tenants=setup([1.0, 1.0]))
    assert admission_order(run) == [0, 3, 4, 5, 1, 2]
    assert run.tenants.scheduler.counters == [360.0, 90.0]
    assert run.tenants.scheduler.served_input == [300, 30]


def test_weighted_vtc_by_hand() -> None:
    """A's weight 4: each of its requests adds (100 + 20) / 4 = 30, as much as B's (10 + 20).

    A1 (tie) 30; B1 30; tie again, A2 (earlier) 60; B2 60; A3 90; B3 90.
    """
    eng = ONE_AT_A_TIME.model_copy(update={"scheduling_policy": "vtc"})
    run = run_engine(CASE, eng, PERF, 200, 1024, tenants=setup([4.0, 1.0]))
    assert admission_order(run) == [0, 3, 1, 4, 2, 5]
    assert run.tenants.scheduler.counters == [90.0, 90.0]


def test_a_tenant_back_from_idle_is_lifted() -> None:
    """B arrives after A's three requests left the queue: no credit for its idle time, its
    counter starts at A's (360, the last tenant to leave the queue), then + 10 + 20."""
    wl = two_tenants([0.0, 0.0, 0.0, 100.0], [100, 100, 100, 10], [10] * 4, [0, 0, 0, 1])
    eng = ONE_AT_A_TIME.model_copy(update={"scheduling_policy": "vtc"})
    run = run_engine(wl, eng, PERF, 200, 1024, tenants=setup([1.0, 1.0]))
    assert run.tenants.scheduler.counters == [360.0, 390.0]


# --------------------------------------------------------------------------- the fairness bound


def backlogged(seed: int, n: int = 300) -> Workload:
    """Three tenants with every request at t = 0 (all backlogged), tenant 0 with long prompts."""
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 3, n)
    prompt = np.where(tenant == 0, rng.integers(500, 2000, n), rng.integers(10, 400, n))
    return Workload(
        np.zeros(n),
        prompt.astype(np.int64),
        rng.integers(1, 300, n).astype(np.int64),
        tenant=tenant.astype(np.int64),
        meta={"tenant_names": ["a", "b", "c"]},
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vtc_counter_spread_of_backlogged_tenants_is_bounded(seed: int) -> None:
    """Sheng et al. (OSDI'24), Sec. 4: for backlogged clients, |c_f - c_g| <= U =
    max(w_p L_input, w_q M) at all times, L_input the longest prompt, M the most tokens a
    running batch holds (here the KV cache's). FCFS has no such bound."""
    wl = backlogged(seed)
    blocks, block_size = 400, 16
    weights = TenantSetup(["a", "b", "c"], [1.0] * 3, [TenantLimits()] * 3, [None] * 3)
    eng = EngineConfig(
        max_num_seqs=32,
        max_num_batched_tokens=1024,
        block_size=block_size,
        enable_prefix_caching=False,
        scheduling_policy="vtc",
    )
    vtc = run_engine(wl, eng, PERF, blocks, 4096, tenants=weights)
    m = (blocks - 1) * block_size
    bound = max(1.0 * int(wl.num_prompt_tokens.max()), 2.0 * m)
    assert 0 < vtc.tenants.scheduler.max_spread <= bound
    fcfs = run_engine(
        wl, eng.model_copy(update={"scheduling_policy": "fcfs"}), PERF, blocks, 4096, tenants=weights
    )
    assert fcfs.tenants.scheduler.max_spread > 2 * vtc.tenants.scheduler.max_spread


# --------------------------------------------------------------------------- admission control


def test_rate_limit_counts_on_a_constructed_stream() -> None:
    """Bucket of 2 at 1 request/s for A. Arrivals 0, 0, 0, 0.5, 1.0, 1.5, 3.0:
    levels 2 -> take, 1 -> take, 0 -> refuse, 0.5 -> refuse, 1.0 -> take, 0.5 -> refuse,
    0 + 1.5 = 1.5 -> take: 3 refused. B (no limit) sends at the same instants: none refused."""
    times = [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 3.0]
    arrival = sorted(times * 2)
    tenant = [0, 1] * len(times)
    wl = two_tenants(arrival, [16] * 14, [2] * 14, tenant)
    limits = [TenantLimits(rate_limit_rps=1.0, burst=2.0), TenantLimits()]
    run = run_engine(wl, EngineConfig(), PERF, 500, 1024, tenants=setup([1.0, 1.0], limits))
    status = run.records.status
    refused = [i for i in range(14) if status[i] == RequestStatus.REJECTED]
    assert refused == [4, 6, 10]  # A's third at t=0, its t=0.5 and its t=1.5
    assert run.tenants.rejected == {(0, "rate_limited"): 3}
    assert all("rate limit" in run.records.reasons[i] for i in refused)


def test_queue_cap_counts_requests_never_scheduled() -> None:
    """One seat (max_num_seqs 1): A's first request runs from t = 0 for a long while, its
    second (t = 0.1) waits, its third and fourth find 1 waiting = max_queued and are refused."""
    wl = two_tenants([0.0, 0.1, 0.2, 0.3], [16] * 4, [500, 2, 2, 2], [0, 0, 0, 0])
    limits = [TenantLimits(max_queued=1), TenantLimits()]
    run = run_engine(wl, EngineConfig(max_num_seqs=1), PERF, 500, 1024, tenants=setup([1.0, 1.0], limits))
    assert run.records.status.tolist() == [
        RequestStatus.FINISHED,
        RequestStatus.FINISHED,
        RequestStatus.REJECTED,
        RequestStatus.REJECTED,
    ]
    assert run.tenants.rejected == {(0, "queue_full"): 2}


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["fcfs", "vtc", "priority"]),
    rate=st.one_of(st.none(), st.floats(0.5, 50)),
    cap=st.one_of(st.none(), st.integers(0, 8)),
    blocks=st.integers(40, 300),
)
@example(
    seed=9318,
    policy="priority",
    rate=None,
    cap=1,
    blocks=40,
).via("discovered failure")
def test_no_request_is_lost(seed: int, policy: str, rate: float | None, cap: int | None, blocks: int) -> None:
    """Every request finishes or is rejected, and the rejections add up per tenant."""
    rng = np.random.default_rng(seed)
    n = 60
    wl = Workload(
        np.sort(rng.uniform(0, 3, n)),
        rng.integers(1, 400, n),
        rng.integers(1, 60, n),
        priority=rng.integers(0, 3, n),
        tenant=rng.integers(0, 2, n),
        meta={"tenant_names": ["A", "B"]},
    )
    limits = [TenantLimits(rate, max(1.0, rate or 1.0), cap), TenantLimits(max_queued=cap)]
    eng = EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, block_size=16, scheduling_policy=policy)
    run = run_engine(wl, eng, PERF, blocks, 1024, tenants=setup([1.0, 2.0], limits))
    status = run.records.status
    assert np.isin(status, [RequestStatus.FINISHED, RequestStatus.REJECTED]).all()
    gated = sum(run.tenants.rejected.values())
    engine_refused = sum(
        1 for i in range(n) if status[i] == RequestStatus.REJECTED and "tenant" not in run.records.reasons[i]
    )
    assert gated + engine_refused == int((status == RequestStatus.REJECTED).sum())
    done = status == RequestStatus.FINISHED
    np.testing.assert_array_equal(run.records.num_output_tokens[done], wl.num_output_tokens[done])


# --------------------------------------------------------------------------- workloads and config


def test_generic_trace_tenant_column(tmp_path) -> None:
    p = tmp_path / "t.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write(
            "arrived_at_s,num_prompt_tokens,num_output_tokens,tenant\n"
            "0,10,2,acme\n0.5,10,2,globex\n1,10,2,acme\n"
        )
    wl = read_trace(str(p))
    assert wl.tenant.tolist() == [0, 1, 0]
    assert wl.meta["tenant_names"] == ["acme", "globex"]
    with pytest.raises(Exception, match="tenant column already"):
        load_workload(TraceWorkload(path=str(p), tenant_shares={"x": 1}))


def test_mixture_clients_are_tenants_and_shares_draw_tenants() -> None:
    mix = MixtureWorkload.model_validate(
        {
            "num_requests": 50,
            "clients": [{"name": "chat", "arrival": {"rate": 3}}, {"name": "batch", "arrival": {"rate": 1}}],
        }
    )
    wl = load_workload(mix)
    assert wl.meta["tenant_names"] == ["chat", "batch"]
    np.testing.assert_array_equal(wl.tenant, wl.meta["client"])
    syn = load_workload(SyntheticWorkload(num_requests=4000, tenant_shares={"h": 3, "l": 1}))
    assert syn.meta["tenant_names"] == ["h", "l"]
    assert abs(float((syn.tenant == 1).mean()) - 0.25) < 0.03
    plain = load_workload(SyntheticWorkload(num_requests=4000))
    np.testing.assert_array_equal(plain.num_prompt_tokens, syn.num_prompt_tokens)  # same other draws


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        scenario_from_dict({"tenants": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ConfigError, match="needs rate_limit_rps"):
        scenario_from_dict({"tenants": [{"name": "a", "burst": 3}]})
    with pytest.raises(ConfigError, match="positive share"):
        scenario_from_dict({"workload": {"type": "synthetic", "tenant_shares": {"a": 0}}})
    with pytest.raises(ConfigError, match="colocated pools without migration"):
        disagg = [{"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}]
        scenario_from_dict({"tenants": [{"name": "a"}], "cluster": {"pools": disagg}})
    # A cluster of colocated pools takes them (tests/test_one_driver.py).
    assert scenario_from_dict({"tenants": [{"name": "a"}], "cluster": {"pools": [{"name": "p"}]}}).tenants
    with pytest.raises(ConfigError, match="attainment and percentiles"):
        scenario_from_dict({"tenants": [{"name": "a", "slo": {"ttft_s": 1, "attainment": {"all": 0.9}}}]})
    with pytest.raises(ConfigError, match="static"):
        scenario_from_dict({"engine": {"policy": "static", "scheduling_policy": "vtc"}})


def test_jain_index() -> None:
    assert jain_index([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0]) == pytest.approx(0.5)
    assert jain_index([]) is None


def test_summary_section_adds_up() -> None:
    """simulate() with tenant shares and limits: the per-tenant figures add up to the run's."""
    from servesim.sim import simulate

    sc = scenario_from_dict(
        {
            "workload": {
                "type": "synthetic",
                "num_requests": 300,
                "arrival": {"rate": 40},
                "tenant_shares": {"big": 4, "small": 1},
            },
            "engine": {"scheduling_policy": "vtc"},
            "tenants": [
                {"name": "big", "rate_limit_rps": 20, "burst": 5},
                {"name": "small", "max_queued": 2, "slo": {"ttft_s": 0.5}},
            ],
        }
    )
    s = simulate(sc).summary
    t = s["tenants"]
    per = t["per_tenant"]
    assert sum(d["num_requests"] for d in per.values()) == s["counts"]["num_requests"] == 300
    assert sum(d["num_rejected"] for d in per.values()) == s["counts"]["num_rejected"]
    assert per["big"]["rejected"]["rate_limited"] == per["big"]["num_rejected"] > 0
    assert per["small"]["slo_limits"] == {"ttft_s": 0.5}
    assert per["big"]["slo_limits"] == {"ttft_s": 2.0, "tpot_s": 0.1}
    assert t["max_counter_spread"] is not None and 0 < t["jain_index"] <= 1
    assert sum(d["served_output_tokens"] for d in per.values()) == s["throughput"]["num_output_tokens"]
    with pytest.raises(ConfigError, match="not in the workload"):
        simulate(sc.model_copy(update={"tenants": [sc.tenants[0].model_copy(update={"name": "nobody"})]}))
