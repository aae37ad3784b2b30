"""The engine against queueing theory and hand-computed batches (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scheduler, make_workload, req

from servesim.config import EngineConfig
from servesim.metrics.records import RequestStatus
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine

ENGINES = pytest.mark.parametrize("reference", [True, False], ids=["reference", "lazy"])


def poisson_arrivals(rate: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n))


# --------------------------------------------------------------------------- M/D/1


def lindley_waits(arrivals: np.ndarray, d: float) -> np.ndarray:
    """Exact FCFS single-server waits for deterministic service: W' = max(0, W + D - gap)."""
    w = np.zeros(len(arrivals))
    gaps = np.diff(arrivals)
    for i in range(1, len(arrivals)):
        w[i] = max(0.0, w[i - 1] + d - gaps[i - 1])
    return w


@pytest.mark.parametrize("rho, n", [(0.5, 40_000), (0.8, 100_000)])
def test_md1_waiting_time_matches_pollaczek_khinchine(rho, n):
    # One-token prompts and one output token: every request is served in exactly one
    # step of D seconds, one at a time, FCFS: an M/D/1 queue.
    d = 1.0
    arrivals = poisson_arrivals(rho / d, n, seed=7)
    wl = make_workload(arrivals, 1, 1)
    eng = EngineConfig(max_num_seqs=1, cpu_overhead_s=0.0, enable_prefix_caching=False)
    run = run_engine(wl, eng, ConstantPerfModel(step_s=d), num_gpu_blocks=16, max_model_len=64)
    rec = run.records
    assert np.all(rec.status == RequestStatus.FINISHED)
    np.testing.assert_allclose(rec.finished_s - rec.first_scheduled_s, d)  # service time D
    np.testing.assert_array_equal(rec.first_token_s, rec.finished_s)
    assert len(run.steps) == n
    wq = rec.queue_s
    # Sample path: exactly the Lindley recursion on the same arrivals.
    np.testing.assert_allclose(wq, lindley_waits(arrivals, d), atol=1e-6)
    # Mean: Pollaczek-Khinchine (the sampling error at rho 0.8 is ~2.5% for 100k requests).
    wq_theory = rho * d / (2 * (1 - rho))
    assert wq.mean() == pytest.approx(wq_theory, rel=0.05)
    # An arrival finds the server idle with probability 1 - rho (PASTA).
    assert np.mean(wq == 0) == pytest.approx(1 - rho, abs=0.015)
    # Utilization: busy fraction of the run = rho.
    assert run.totals.busy_s / run.end_s == pytest.approx(rho, rel=0.02)


# --------------------------------------------------------------------------- Little's law


def time_average_in_system(arrival: np.ndarray, finish: np.ndarray, t0: float, t1: float) -> float:
    """Time-average number of requests with arrival <= t < finish over [t0, t1]."""
    overlap = np.clip(np.minimum(finish, t1) - np.maximum(arrival, t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0))


def test_littles_law_with_batching():
    rng = np.random.default_rng(11)
    n = 10_000
    rate = 20.0  # requests/s
    arrivals = poisson_arrivals(rate, n, seed=12)
    prompts = rng.integers(16, 257, n)
    outputs = rng.integers(2, 41, n)
    wl = make_workload(arrivals, prompts, outputs)
    eng = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=512, cpu_overhead_s=0.001, enable_prefix_caching=False
    )
    perf = ConstantPerfModel(step_s=0.004, per_token_s=2e-5)
    run = run_engine(wl, eng, perf, num_gpu_blocks=200, max_model_len=1024)
    rec = run.records
    assert np.all(rec.status == RequestStatus.FINISHED)
    assert np.max(run.steps.num_running) == 8  # real batching happened
    busy = run.totals.busy_s / run.end_s
    assert 0.5 < busy < 0.95  # loaded, not saturated
    # Steady-state window away from the empty start and the drain at the end.
    t0, t1 = arrivals[n // 10], arrivals[9 * n // 10]
    in_window = (arrivals >= t0) & (arrivals < t1)
    lam = in_window.sum() / (t1 - t0)
    w = float(np.mean(rec.e2e_s[in_window]))
    big_l = time_average_in_system(arrivals, rec.finished_s, t0, t1)
    assert big_l == pytest.approx(lam * w, rel=0.02)
    # The same for the queue alone (arrival to first schedule).
    lq = time_average_in_system(arrivals, rec.first_scheduled_s, t0, t1)
    wq = float(np.mean(rec.queue_s[in_window]))
    assert lq == pytest.approx(lam * wq, rel=0.03)


# --------------------------------------------------------------------------- batching by hand


def test_scheduler_batch_of_identical_requests_by_hand():
    # 4 requests, prompt 32, output 10, budget 128, max_num_seqs 4: one prefill step
    # (which samples the first token) and 9 decode steps.
    s = make_scheduler(101, 16, max_num_batched_tokens=128, max_num_seqs=4)
    rs = [req(i, 32, 10) for i in range(4)]
    for r in rs:
        s.add_request(r)
    batches = []
    while s.has_work():
        out = s.schedule()
        s.update_from_output(out, 0.0)
        batches.append(out.num_tokens)
    assert batches == [[32] * 4] + [[1] * 4] * 9


def test_scheduler_two_waves_by_hand():
    s = make_scheduler(101, 16, max_num_batched_tokens=128, max_num_seqs=2)
    rs = [req(i, 32, 10) for i in range(4)]
    for r in rs:
        s.add_request(r)
    batches = []
    while s.has_work():
        out = s.schedule()
        s.update_from_output(out, 0.0)
        batches.append(([r.idx for r in out.reqs], out.num_tokens))
    wave = lambda a, b: [([a, b], [32, 32])] + [([a, b], [1, 1])] * 9  # noqa: E731
    assert batches == wave(0, 1) + wave(2, 3)


@ENGINES
def test_single_request_steps_and_makespan(reference):
    d, o, p = 0.01, 0.002, 1e-4
    wl = make_workload([0.0], 32, 10)
    eng = EngineConfig(cpu_overhead_s=o, max_num_batched_tokens=128)
    run = run_engine(
        wl,
        eng,
        ConstantPerfModel(step_s=d, per_token_s=p),
        101,
        1024,
        check_invariants=True,
        reference=reference,
    )
    assert len(run.steps) == 10
    assert run.steps.num_prefill_tokens == [32] + [0] * 9
    assert run.steps.num_decode_reqs == [0] + [1] * 9
    # Step 1 computes 32 tokens, each later step one.
    assert run.end_s == pytest.approx(10 * (d + o) + 41 * p)
    assert run.records.ttft_s[0] == pytest.approx(d + o + 32 * p)
    assert run.records.tpot_s[0] == pytest.approx(d + o + p)


@ENGINES
def test_late_joiners_wait_for_the_next_step(reference):
    # Requests 1..3 arrive while request 0's first step runs: they join at step 2.
    d, o = 0.01, 0.001
    wl = make_workload([0.0, 0.001, 0.002, 0.003], 32, 10)
    eng = EngineConfig(cpu_overhead_s=o, max_num_seqs=4, max_num_batched_tokens=128)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=d), 101, 1024, check_invariants=True, reference=reference
    )
    t = d + o
    assert len(run.steps) == 11
    assert run.steps.num_prefill_tokens == [32, 96] + [0] * 9
    assert run.steps.num_decode_reqs == [0, 1] + [4] * 8 + [3]
    np.testing.assert_allclose(run.records.first_scheduled_s, [0, t, t, t])
    np.testing.assert_allclose(run.records.first_token_s, [t, 2 * t, 2 * t, 2 * t])
    np.testing.assert_allclose(run.records.finished_s, [10 * t, 11 * t, 11 * t, 11 * t])
    assert run.end_s == pytest.approx(11 * t)


@ENGINES
def test_burst_at_t0_one_wave_by_hand(reference):
    # Same-instant arrivals are all queued before the first step (vLLM drains its input
    # queue first): one prefill step for all four, then 9 decode steps.
    d, o = 0.01, 0.001
    t = d + o
    wl = make_workload([0.0] * 4, 32, 10)
    eng = EngineConfig(cpu_overhead_s=o, max_num_seqs=4, max_num_batched_tokens=128)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=d), 101, 1024, check_invariants=True, reference=reference
    )
    assert run.steps.num_prefill_tokens == [128] + [0] * 9
    assert len(run.steps) == 10
    assert run.end_s == pytest.approx(10 * t)
    np.testing.assert_allclose(run.records.ttft_s, t)
    np.testing.assert_allclose(run.records.finished_s, 10 * t)


@ENGINES
def test_burst_at_t0_two_waves_by_hand(reference):
    d, o = 0.01, 0.001
    t = d + o
    wl = make_workload([0.0] * 4, 32, 10)
    eng = EngineConfig(cpu_overhead_s=o, max_num_seqs=2, max_num_batched_tokens=128)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=d), 101, 1024, check_invariants=True, reference=reference
    )
    assert len(run.steps) == 20
    assert run.end_s == pytest.approx(20 * t)
    np.testing.assert_allclose(run.records.first_scheduled_s, [0, 0, 10 * t, 10 * t])
    np.testing.assert_allclose(run.records.ttft_s, [t, t, 11 * t, 11 * t])
    np.testing.assert_allclose(run.records.finished_s, [10 * t, 10 * t, 20 * t, 20 * t])


# --------------------------------------------------------------------------- saturation


def test_overload_queue_grows_linearly():
    # Capacity: 4 slots, each request holds a slot for 8 steps (prompt step + 7 decodes)
    # of 10 ms: 50 requests/s. Offer 100/s: the queue grows at about 50/s.
    d = 0.01
    n = 4000
    arrivals = poisson_arrivals(100.0, n, seed=3)
    wl = make_workload(arrivals, 32, 8)
    eng = EngineConfig(
        max_num_seqs=4, max_num_batched_tokens=256, cpu_overhead_s=0.0, enable_prefix_caching=False
    )
    run = run_engine(wl, eng, ConstantPerfModel(step_s=d), 101, 1024)
    s = run.steps.columns()
    during = s["start_s"] < arrivals[-1]
    t, q = s["start_s"][during], s["num_waiting"][during]
    slope, intercept = np.polyfit(t, q, 1)
    assert slope == pytest.approx(50.0, rel=0.1)
    resid = q - (slope * t + intercept)
    assert np.sqrt(np.mean(resid**2)) < 0.05 * q.max()  # close to a straight line
    # Served at capacity throughout: the replica never idles and finishes 50 per second.
    assert run.totals.busy_s == pytest.approx(run.end_s - arrivals[0], rel=1e-9)
    done = np.sort(run.records.finished_s)
    rate = (len(done) // 2) / (done[3 * len(done) // 4] - done[len(done) // 4])
    assert rate == pytest.approx(50.0, rel=0.02)
    # Late arrivals wait far longer than early ones.
    q_s = run.records.queue_s
    assert q_s[-100:].mean() > 10 * max(q_s[:100].mean(), d)


# --------------------------------------------------------------------------- event order


@ENGINES
def test_arrival_at_batch_end_joins_the_next_step(reference):
    # Arrivals run before batch completions at the same instant, so the schedule that
    # the completion triggers sees the new request.
    wl = make_workload([0.0, 1.0], 1, [3, 1])
    eng = EngineConfig(cpu_overhead_s=0.0)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=1.0), 11, 64, check_invariants=True, reference=reference
    )
    np.testing.assert_array_equal(run.records.first_scheduled_s, [0.0, 1.0])
    np.testing.assert_array_equal(run.records.finished_s, [3.0, 2.0])
    assert run.steps.start_s == [0.0, 1.0, 2.0]
    assert run.steps.num_prefill_tokens == [1, 1, 0]
    assert run.steps.num_decode_reqs == [0, 1, 1]


@ENGINES
def test_arrival_while_idle_starts_a_step_at_once(reference):
    wl = make_workload([0.0, 5.5], 1, 2)
    eng = EngineConfig(cpu_overhead_s=0.0)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=1.0), 11, 64, check_invariants=True, reference=reference
    )
    assert run.steps.start_s == [0.0, 1.0, 5.5, 6.5]
    np.testing.assert_array_equal(run.records.queue_s, [0.0, 0.0])
    assert run.totals.busy_s == 4.0 and run.end_s == 7.5
