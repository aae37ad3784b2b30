"""``vllm bench serve`` workloads: vLLM's random lengths, closed-loop clients, warm-ups,
and the benchmark section's definitions.

The clients are checked from the records alone: with N clients at most N requests are
ever in flight ([sent, finished) intervals), exactly N while requests remain to be sent,
and Little's law ties the mean number in flight to throughput x mean E2E.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

import servesim
from servesim.cluster.cluster import PoolSpec
from servesim.cluster.run import run_cluster
from servesim.config import BenchmarkWorkload, ClusterConfig, EngineConfig, PoolConfig, resolve_engine
from servesim.errors import ConfigError
from servesim.metrics.benchmark import weighted_stats
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload import load_workload
from servesim.workload.benchmark import due_times, length_bounds

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENGINE = EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024)
PERF = ConstantPerfModel(0.01, 2e-5)


def bench(**kw: object) -> BenchmarkWorkload:
    base: dict[str, object] = {
        "num_prompts": 300,
        "input_len": 512,
        "output_len": 64,
        "max_concurrency": 8,
        "random_range_ratio": 0.5,
    }
    return BenchmarkWorkload(**{**base, **kw})  # type: ignore[arg-type]


def in_flight(arrival: np.ndarray, finish: np.ndarray, t: np.ndarray) -> np.ndarray:
    """#(arrival <= t < finish) at each instant of ``t``."""
    a, f = np.sort(arrival), np.sort(finish)
    return np.searchsorted(a, t, side="right") - np.searchsorted(f, t, side="right")


def check_clients(arrival: np.ndarray, finish: np.ndarray, n: int, start_s: float = 0.0) -> None:
    """At most n in flight at every instant, and n from the start until the last is sent."""
    events = np.unique(np.concatenate([arrival, finish]))
    count = in_flight(arrival, finish, events)
    assert count.max() == n
    busy = (events >= start_s) & (events < arrival.max())
    assert (count[busy] == n).all()


# --------------------------------------------------------------------------- lengths


def test_lengths_follow_vllm_random_dataset_ranges() -> None:
    assert length_bounds(999, 0.5) == (499, 1499)  # floor(999 x 0.5), ceil(999 x 1.5)
    assert length_bounds(1, 0.9, 1) == (1, 2)  # output: at least 1
    wl = load_workload(
        bench(num_prompts=5000, input_len=1000, output_len=100, num_special_tokens=1, ready_check=False)
    )
    # 999 sampled tokens around the mean, plus the special token the server adds
    assert (wl.num_prompt_tokens.min(), wl.num_prompt_tokens.max()) == (500, 1500)
    assert (wl.num_output_tokens.min(), wl.num_output_tokens.max()) == (50, 150)
    fixed = load_workload(bench(random_range_ratio=0.0, ready_check=False))
    assert (fixed.num_prompt_tokens == 512).all() and (fixed.num_output_tokens == 64).all()
    # the same draws as vLLM's RandomDataset: one default_rng, prompts first, high + 1
    rng = np.random.default_rng(7)
    lo, hi = length_bounds(512, 0.5)
    ref = rng.integers(lo, hi + 1, size=300)
    np.testing.assert_array_equal(load_workload(bench(seed=7, ready_check=False)).num_prompt_tokens, ref)


def test_benchmark_serving_lengths_lie_below_the_mean_length() -> None:
    """The older benchmark_serving.py (InferenceMAX's client): uniform in [int(L r), L], the
    legacy global generator (np.random.seed), prompts then outputs; r = 1 is fixed."""
    wl = load_workload(
        bench(
            client="benchmark_serving",
            random_range_ratio=0.8,
            num_prompts=4000,
            input_len=1024,
            output_len=1024,
            num_special_tokens=1,
            ready_check=False,
        )
    )
    # int(0.8 x 1024) = 819 sampled tokens at least, 1024 at most, plus the server's BOS
    assert (wl.num_prompt_tokens.min(), wl.num_prompt_tokens.max()) == (820, 1025)
    assert (wl.num_output_tokens.min(), wl.num_output_tokens.max()) == (819, 1024)
    assert wl.num_output_tokens.mean() == pytest.approx((819 + 1024) / 2, abs=5)  # not the vllm_bench mean
    legacy = np.random.RandomState(3)
    ref_in = legacy.randint(409, 512 + 1, size=300)
    ref_out = legacy.randint(51, 64 + 1, size=300)
    got = load_workload(bench(client="benchmark_serving", random_range_ratio=0.8, seed=3, ready_check=False))
    np.testing.assert_array_equal(got.num_prompt_tokens, ref_in)
    np.testing.assert_array_equal(got.num_output_tokens, ref_out)
    fixed = load_workload(bench(client="benchmark_serving", random_range_ratio=1.0, ready_check=False))
    assert (fixed.num_prompt_tokens == 512).all() and (fixed.num_output_tokens == 64).all()
    tiny = load_workload(
        bench(client="benchmark_serving", random_range_ratio=0.5, output_len=1, ready_check=False)
    )
    assert tiny.num_output_tokens.min() == 1  # int(0.5) = 0 tokens raised to one


def test_benchmark_serving_refuses_what_that_script_lacks() -> None:
    with pytest.raises(ValidationError, match="no warm-ups"):
        bench(client="benchmark_serving", random_range_ratio=0.8, num_warmups=2)
    with pytest.raises(ValidationError, match=r"in \[0, 1\] for client benchmark_serving"):
        bench(client="benchmark_serving", random_range_ratio=1.2)
    with pytest.raises(ValidationError, match="may have no token"):
        bench(client="benchmark_serving", random_range_ratio=0.0)


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5])
def test_range_ratio_outside_zero_one_is_a_clean_error(ratio: float) -> None:
    with pytest.raises(ValidationError, match="random_range_ratio"):
        bench(random_range_ratio=ratio)
    with pytest.raises(ConfigError, match=r"random_range_ratio must be in \[0, 1\)"):
        servesim.simulate({"workload": {"type": "benchmark", "random_range_ratio": ratio}})


def test_due_times_are_rescaled_to_num_prompts_over_rate() -> None:
    rng = np.random.default_rng(0)
    t = due_times(1000, 20.0, 0.5, rng)
    assert t[-1] == pytest.approx(1000 / 20.0) and (np.diff(t) >= 0).all()
    np.testing.assert_allclose(due_times(4, 2.0, float("inf"), rng), [0.5, 1.0, 1.5, 2.0])
    assert not due_times(5, float("inf"), 1.0, rng).any()


# --------------------------------------------------------------------------- clients


def test_closed_loop_keeps_exactly_n_in_flight() -> None:
    wl = load_workload(bench(ready_check=False))
    rec = run_engine(wl, ENGINE, PERF, 4000, 4096).records
    assert (rec.status == 0).all()
    check_clients(rec.arrival_s, rec.finished_s, 8)
    # every send but the first eight is a finish's instant
    assert np.isin(np.sort(rec.arrival_s)[8:], rec.finished_s).all()


def test_littles_law_over_the_measured_run() -> None:
    wl = bench(num_prompts=400, max_concurrency=12, num_warmups=3)
    res = servesim.simulate({"model": {"name": "Llama-3.1-8B"}, "workload": wl.model_dump()})
    b = res.summary["benchmark"]
    k = 4  # ready check + warm-ups
    a, f = res.records.arrival_s[k:], res.records.finished_s[k:]
    events = np.unique(np.concatenate([a, f]))
    count = in_flight(a, f, events[:-1])
    mean_in_flight = float(np.dot(count, np.diff(events))) / b["duration"]
    little = b["request_throughput"] * b["mean_e2el_ms"] / 1000
    assert mean_in_flight == pytest.approx(little, rel=1e-9)
    assert 0.9 * 12 < mean_in_flight <= 12  # N clients, less the tail after the last send


def test_warmups_run_first_and_are_left_out() -> None:
    cfg = bench(num_prompts=100, num_warmups=5)
    res = servesim.simulate({"model": {"name": "Llama-3.1-8B"}, "workload": cfg.model_dump()})
    rec, s = res.records, res.summary
    k = 6
    assert len(rec) == 100 + k and (rec.num_prompt_tokens[: k + 1] == rec.num_prompt_tokens[k]).all()
    ready_end = rec.finished_s[0]
    assert (rec.arrival_s[1:k] == ready_end).all()  # the warm-ups go out when the ready check is done
    start = rec.finished_s[:k].max()
    b = s["benchmark"]
    assert b["start_s"] == start and rec.arrival_s[k:].min() == start
    assert b["completed"] == 100 and s["counts"]["num_requests"] == 100
    assert s["counts"]["first_arrival_s"] == start
    assert b["duration"] == pytest.approx(rec.finished_s.max() - start)
    # the ITL pairs of the measured run: one gap per token after the first
    assert s["latency"]["itl_s"]["count"] == int((rec.num_output_tokens[k:] - 1).sum())
    assert rec.num_cached_tokens[k] > 0  # the first measured prompt was cached by its copies
    # TTFT/TPOT/E2EL as vllm bench: over the measured requests, numpy's percentiles
    ttft = rec.first_token_s[k:] - rec.arrival_s[k:]
    assert b["mean_ttft_ms"] == pytest.approx(1000 * ttft.mean())
    assert b["p99_ttft_ms"] == pytest.approx(1000 * np.percentile(ttft, 99))
    e2e = rec.finished_s[k:] - rec.arrival_s[k:]
    tpot = (e2e - ttft) / (rec.num_output_tokens[k:] - 1)
    assert b["median_tpot_ms"] == pytest.approx(1000 * np.median(tpot))
    assert b["std_e2el_ms"] == pytest.approx(1000 * np.std(e2e))
    assert b["total_output_tokens"] == int(rec.num_output_tokens[k:].sum())


def test_rejected_requests_free_their_slot() -> None:
    # prompts of 512 +- 50% against max_model_len 600: the long ones can never be served
    wl = load_workload(bench(ready_check=False, max_concurrency=4))
    rec = run_engine(wl, ENGINE, PERF, 4000, 600).records
    rejected = rec.status == 2
    assert rejected.any() and (rec.status[~rejected] == 0).all()
    ok = ~rejected
    check_clients(rec.arrival_s[ok], rec.finished_s[ok], 4)


def test_finite_rate_sends_when_due_or_when_a_slot_frees() -> None:
    wl = load_workload(bench(ready_check=False, request_rate=20.0, max_concurrency=4))
    rec = run_engine(wl, ENGINE, PERF, 4000, 4096).records
    due = wl.arrival_s
    assert (rec.arrival_s >= due).all() and (rec.arrival_s == due).any() and (rec.arrival_s > due).any()
    late = rec.arrival_s > due
    assert np.isin(rec.arrival_s[late], rec.finished_s).all()  # sent when a slot freed
    assert in_flight(rec.arrival_s, rec.finished_s, np.unique(rec.arrival_s)).max() <= 4


def test_no_limit_no_warmups_is_the_open_loop_run() -> None:
    wl = load_workload(bench(ready_check=False, request_rate=10.0, max_concurrency=None))
    closed = run_engine(wl, ENGINE, PERF, 4000, 4096).records
    wl.clients = None
    open_ = run_engine(wl, ENGINE, PERF, 4000, 4096).records
    for col in ("arrival_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(getattr(closed, col), getattr(open_, col), rtol=1e-12, err_msg=col)


def test_cluster_of_two_replicas_obeys_the_limit() -> None:
    eng = resolve_engine(EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024), max_model_len=4096)
    pool = PoolSpec("c", "colocated", 2, eng, PERF, num_gpu_blocks=2000, max_model_len=4096)
    cfg = ClusterConfig(pools=[PoolConfig(name="c", num_replicas=2)], router="least_outstanding")
    wl = load_workload(bench(num_warmups=2, max_concurrency=10))
    run = run_cluster(wl, [pool], cfg)
    rec = run.records
    k = 3
    assert (rec.status == 0).all() and set(rec.replica.tolist()) == {0, 1}
    check_clients(rec.arrival_s[k:], rec.finished_s[k:], 10, rec.finished_s[:k].max())
    assert rec.arrival_s[k:].min() == rec.finished_s[:k].max()
    assert run.itl.measured_from > 0
    with pytest.raises(ConfigError, match="staleness_s"):
        run_cluster(wl, [pool], cfg.model_copy(update={"staleness_s": 0.01}))


def test_lazy_engine_matches_the_reference_under_closed_loop() -> None:
    # KV pressure (preemptions), prefix caching, ranged lengths, finite rate and warm-ups
    wl = load_workload(
        bench(num_prompts=400, max_concurrency=24, request_rate=40.0, num_warmups=4, burstiness=0.3)
    )
    eng = EngineConfig(max_num_seqs=32, max_num_batched_tokens=512, enable_prefix_caching=True)
    ref = run_engine(wl, eng, PERF, 600, 4096, reference=True)
    fast = run_engine(wl, eng, PERF, 600, 4096)
    assert ref.records.num_preemptions.sum() > 0
    for col in ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(
            getattr(fast.records, col), getattr(ref.records, col), rtol=1e-9, atol=1e-9, err_msg=col
        )
    np.testing.assert_array_equal(fast.records.num_cached_tokens, ref.records.num_cached_tokens)
    assert sum(fast.itl.count[: fast.itl.measured_from]) == sum(ref.itl.count[: ref.itl.measured_from]) > 0
    assert fast.totals.num_run_steps > 0  # the lazy engine really skipped ahead


# --------------------------------------------------------------------------- metrics, example


def test_weighted_stats_are_numpy_on_the_repeated_samples() -> None:
    rng = np.random.default_rng(3)
    v, w = rng.random(50), rng.integers(0, 5, 50)
    full = np.repeat(v, w)
    got = weighted_stats(v, w)
    assert got["mean"] == pytest.approx(full.mean()) and got["std"] == pytest.approx(full.std())
    assert got["median"] == pytest.approx(np.median(full))
    for p in (90, 95, 99):
        assert got[f"p{p}"] == pytest.approx(np.percentile(full, p))
    assert weighted_stats(np.array([]))["mean"] is None


def test_example_scenario_runs() -> None:
    res = servesim.simulate(EXAMPLES / "vllm_bench_closed_loop.yaml")
    b = res.summary["benchmark"]
    assert b["completed"] == res.scenario.workload.num_prompts and b["failed"] == 0
    assert b["max_concurrent_requests"] == res.scenario.workload.max_concurrency


def test_disaggregated_cluster_frees_a_slot_when_the_decode_replica_finishes() -> None:
    sc = servesim.load_scenario(EXAMPLES / "disaggregated.yaml")
    assert sc.cluster is not None
    wl = bench(num_prompts=150, input_len=2000, output_len=100, max_concurrency=12, num_warmups=2)
    res = servesim.simulate(
        sc.model_copy(update={"workload": wl, "cluster": sc.cluster.model_copy(update={"staleness_s": 0.0})})
    )
    rec, k = res.records, 3
    assert (rec.status == 0).all()
    # the prefill's first token is not the end: a slot frees at the decode replica's finish
    check_clients(rec.arrival_s[k:], rec.finished_s[k:], 12, rec.finished_s[:k].max())
