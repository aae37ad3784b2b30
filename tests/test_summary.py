"""summarize() against values computed by hand on a five-request Result.

The fixture (times in seconds):

    req  arrival  sched  first  finish  prompt  out  status
    0    0.0      0.5    1.0    3.0     100     5    finished   ttft 1.0  tpot 0.5   e2e 3.0  queue 0.5
    1    1.0      1.0    1.5    2.0     200     3    finished   ttft 0.5  tpot 0.25  e2e 1.0  queue 0.0
    2    2.0      2.2    2.4    2.4     50      1    finished   ttft 0.4  tpot NaN   e2e 0.4  queue 0.2
    3    3.0      3.05   3.1    NaN     300     2    unfinished (its TTFT 0.1 would meet the SLO)
    4    4.0      NaN    NaN    NaN     9999    0    rejected

span = 3.0 (first arrival 0 -> last finish 3); the run ends at 6.0, so window = 6.0.
Two replicas: 2 GPUs and 1 GPU. SLO: ttft 0.8, tpot 0.4, e2e 0.5.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from servesim.config import Scenario, SloConfig
from servesim.metrics.records import (
    ItlSamples,
    ReplicaTotals,
    RequestRecords,
    RequestStatus,
    Result,
    StepSeries,
)
from servesim.metrics.stats import distribution, weighted_percentile
from servesim.metrics.summary import summarize

NAN = math.nan


@dataclass
class FakeGpu:
    name: str = "FakeGPU"
    mem_bw: float = 2e12  # bytes/s
    idle_power_w: float = 100.0
    max_power_w: float = 700.0
    usd_per_hour: float = 3.6

    def flops_for(self, dtype: str) -> float:
        return {"bfloat16": 1e15, "float16": 1e15, "fp8": 2e15}[dtype]


def make_result(
    slo: SloConfig | None = None, dtype: str = "auto", gpu: object | None = None, with_gpu: bool = True
) -> Result:
    F, U, R = RequestStatus.FINISHED, RequestStatus.UNFINISHED, RequestStatus.REJECTED
    records = RequestRecords(
        arrival_s=np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        first_scheduled_s=np.array([0.5, 1.0, 2.2, 3.05, NAN]),
        first_token_s=np.array([1.0, 1.5, 2.4, 3.1, NAN]),
        finished_s=np.array([3.0, 2.0, 2.4, NAN, NAN]),
        num_prompt_tokens=np.array([100, 200, 50, 300, 9999]),
        num_output_tokens=np.array([5, 3, 1, 2, 0]),
        num_cached_tokens=np.array([0, 16, 0, 0, 0]),
        num_preemptions=np.array([1, 0, 0, 0, 0]),
        replica=np.array([0, 1, 0, 1, 0]),
        status=np.array([F, F, F, U, R], np.int8),
        reasons={3: "still running at end", 4: "prompt longer than max_model_len"},
    )
    steps = StepSeries(
        replica=[0, 0, 1],
        start_s=[0.5, 1.0, 1.0],
        duration_s=[0.5, 0.5, 0.5],
        num_prefill_tokens=[100, 0, 200],
        num_decode_reqs=[0, 1, 0],
        num_running=[1, 1, 1],
        num_waiting=[0, 0, 0],
        kv_blocks_used=[7, 7, 13],
        num_preempted=[0, 1, 0],
    )
    itl = ItlSamples(gap_s=[0.5, 0.25, 0.1, 9.0], count=[3, 1, 2, 0])  # a zero count is ignored
    replicas = [
        ReplicaTotals(
            num_gpus=2,
            num_gpu_blocks=100,
            busy_s=3.0,
            gpu_s=2.4,
            flops=6e14,
            bytes=6e12,
            num_steps=10,
            num_preemptions=1,
            kv_block_s=150.0,
            peak_kv_blocks=40,
            num_prefix_query_tokens=400,
            num_prefix_hit_tokens=100,
        ),
        ReplicaTotals(
            num_gpus=1,
            num_gpu_blocks=50,
            busy_s=1.2,
            gpu_s=0.6,
            flops=0.0,
            bytes=3e12,
            num_steps=4,
            num_preemptions=0,
            kv_block_s=30.0,
            peak_kv_blocks=50,
        ),
    ]
    scenario = Scenario(slo=slo or SloConfig(ttft_s=0.8, tpot_s=0.4, e2e_s=0.5), model={"dtype": dtype})
    return Result(
        scenario=scenario,
        records=records,
        steps=steps,
        itl=itl,
        replicas=replicas,
        end_s=6.0,
        gpu=(gpu or FakeGpu()) if with_gpu else None,
        wall_s=0.5,
    )


approx = pytest.approx


def test_counts_and_windows() -> None:
    c = summarize(make_result())["counts"]
    assert c == {
        "num_requests": 5,
        "num_finished": 3,
        "num_finished_length": 0,
        "num_unfinished": 1,
        "num_rejected": 1,
        "first_arrival_s": 0.0,
        "last_finish_s": 3.0,
        "end_s": 6.0,
        "span_s": 3.0,
        "window_s": 6.0,
    }


def test_latency_over_finished_requests() -> None:
    lat = summarize(make_result())["latency"]
    assert lat["ttft_s"] == approx(
        {"count": 3, "mean": 1.9 / 3, "p50": 0.5, "p90": 1.0, "p95": 1.0, "p99": 1.0, "max": 1.0}
    )
    assert lat["e2e_s"] == approx(
        {"count": 3, "mean": 4.4 / 3, "p50": 1.0, "p90": 3.0, "p95": 3.0, "p99": 3.0, "max": 3.0}
    )
    assert lat["queue_s"] == approx(
        {"count": 3, "mean": 0.7 / 3, "p50": 0.2, "p90": 0.5, "p95": 0.5, "p99": 0.5, "max": 0.5}
    )
    # Request 2 has one output token: no TPOT (NaN is skipped, not counted as 0).
    assert lat["tpot_s"] == approx(
        {"count": 2, "mean": 0.375, "p50": 0.25, "p90": 0.5, "p95": 0.5, "p99": 0.5, "max": 0.5}
    )


def test_itl_weighted_percentiles() -> None:
    # Sorted gaps 0.1 x2, 0.25 x1, 0.5 x3 -> cumulative 2, 3, 6 of 6.
    itl = summarize(make_result())["latency"]["itl_s"]
    assert itl == approx(
        {"count": 6, "mean": 1.95 / 6, "p50": 0.25, "p90": 0.5, "p95": 0.5, "p99": 0.5, "max": 0.5}
    )


def test_weighted_percentile_matches_numpy_inverted_cdf() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 100, 101):
        x = rng.exponential(size=n)
        for p in (0, 1, 50, 90, 95, 99, 100):
            expected = np.percentile(x, p, method="inverted_cdf")
            assert weighted_percentile(x, np.ones(n, np.int64), p) == expected
        # Integer weights are the same as repeating the samples.
        w = rng.integers(1, 5, size=n)
        for p in (50, 90, 99):
            assert weighted_percentile(x, w, p) == np.percentile(np.repeat(x, w), p, method="inverted_cdf")


def test_p99_of_100_samples_is_exact() -> None:
    x = np.arange(1, 101, dtype=float)
    assert weighted_percentile(x, np.ones(100, np.int64), 99) == 99.0
    assert weighted_percentile(x, np.ones(100, np.int64), 50) == 50.0


def test_throughput_over_span() -> None:
    t = summarize(make_result())["throughput"]
    assert t == approx(
        {
            "num_input_tokens": 350,
            "num_output_tokens": 9,
            "requests_per_s": 1.0,
            "input_tokens_per_s": 350 / 3,
            "output_tokens_per_s": 3.0,
            "total_tokens_per_s": 359 / 3,
        }
    )


def test_slo_attainment_counts_unfinished_and_rejected_as_misses() -> None:
    s = summarize(make_result())["slo"]
    assert s["limits"] == {"ttft_s": 0.8, "tpot_s": 0.4, "e2e_s": 0.5}
    # ttft: reqs 1, 2 (req 3 has TTFT 0.1 but is unfinished: a miss); tpot: 1 and 2 (no TPOT
    # counts as met); e2e: only 2.
    assert s["attainment"] == approx({"ttft_s": 0.4, "tpot_s": 0.4, "e2e_s": 0.2, "all": 0.2})
    assert s["num_good"] == 1
    assert s["goodput_rps"] == approx(1 / 3)
    assert s["goodput_rps_per_gpu"] == approx(1 / 9)


def test_slo_partial_and_none() -> None:
    s = summarize(make_result(slo=SloConfig(ttft_s=0.8)))["slo"]
    assert s["attainment"] == approx({"ttft_s": 0.4, "tpot_s": None, "e2e_s": None, "all": 0.4})
    s = summarize(make_result(slo=SloConfig()))["slo"]
    # No SLO: every finished request is good.
    assert s["attainment"]["all"] == approx(0.6)
    assert s["goodput_rps"] == approx(1.0)


def test_utilization() -> None:
    u = summarize(make_result())["utilization"]
    r0, r1 = u["replicas"]
    assert r0 == approx(
        {
            "num_gpus": 2,
            "num_steps": 10,
            "held_s": 6.0,
            "busy_fraction": 0.5,
            "gpu_fraction": 0.4,
            "mfu": 0.1,
            "mbu": 0.5,
            "kv_mean": 0.25,
            "kv_peak": 0.4,
            "num_preemptions": 1,
            "prefix_hit_rate": 0.25,
            "pipeline_bubble_fraction": 0.0,
        }
    )
    assert r1 == approx(
        {
            "num_gpus": 1,
            "num_steps": 4,
            "held_s": 6.0,
            "busy_fraction": 0.2,
            "gpu_fraction": 0.1,
            "mfu": 0.0,
            "mbu": 0.25,
            "kv_mean": 0.1,
            "kv_peak": 1.0,
            "num_preemptions": 0,
            "prefix_hit_rate": None,
            "pipeline_bubble_fraction": 0.0,
        }
    )
    assert u["overall"] == approx(
        {
            "num_replicas": 2,
            "num_gpus": 3,
            "num_steps": 14,
            # A fixed fleet: every replica held over the whole window (6 s).
            "num_replicas_run": 2,
            "mean_replicas": 2.0,
            "mean_gpus": 3.0,
            "gpu_hours": 3 * 6 / 3600,
            "busy_fraction": 4.2 / 12,
            "gpu_fraction": (2.4 * 2 + 0.6) / 18,
            "mfu": 1.2e15 / 1.8e16,
            "mbu": 1.5e13 / 3.6e13,
            "kv_mean": 180 / 900,
            "kv_peak": 1.0,
            "num_preemptions": 1,
            "prefix_hit_rate": 0.25,
            "pipeline_bubble_fraction": 0.0,
        }
    )


def test_mfu_uses_model_dtype() -> None:
    u = summarize(make_result(dtype="fp8"))["utilization"]
    assert u["replicas"][0]["mfu"] == approx(0.05)


def test_energy_and_cost() -> None:
    s = summarize(make_result())
    # Per GPU: idle 100 W * 6 s + 600 W * gpu_s. r0: 2 * (600 + 1440); r1: 600 + 360.
    assert s["energy"] == approx(
        {"energy_j": 5040.0, "avg_power_w": 840.0, "j_per_output_token": 560.0, "j_per_token": 5040 / 359}
    )
    # 3.6 $/h * 3 GPUs * 6 s / 3600 s.
    assert s["cost"] == approx(
        {"usd": 0.018, "usd_per_million_output_tokens": 2000.0, "usd_per_million_tokens": 18000 / 359}
    )


def test_without_gpu_spec() -> None:
    s = summarize(make_result(with_gpu=False))
    assert s["utilization"]["overall"]["mfu"] is None
    assert s["utilization"]["overall"]["mbu"] is None
    assert s["utilization"]["overall"]["busy_fraction"] == approx(0.35)
    assert all(v is None for v in s["energy"].values())
    assert all(v is None for v in s["cost"].values())


def test_json_serialisable_without_nan() -> None:
    s = summarize(make_result())
    text = json.dumps(s, allow_nan=False)
    assert json.loads(text) == s


def test_empty_result() -> None:
    res = Result(
        scenario=Scenario(),
        records=RequestRecords.empty(0),
        steps=StepSeries(),
        itl=ItlSamples(),
        replicas=[ReplicaTotals()],
        end_s=0.0,
        gpu=FakeGpu(),
    )
    s = summarize(res)
    json.dumps(s, allow_nan=False)
    assert s["counts"]["num_requests"] == 0
    assert s["counts"]["span_s"] is None
    assert s["latency"]["ttft_s"] == {
        "count": 0,
        "mean": None,
        "p50": None,
        "p90": None,
        "p95": None,
        "p99": None,
        "max": None,
    }
    assert s["throughput"]["requests_per_s"] is None
    assert s["slo"]["attainment"]["all"] is None
    assert s["energy"]["energy_j"] is None


def test_nothing_finished() -> None:
    res = make_result()
    res.records.status[:] = RequestStatus.UNFINISHED
    s = summarize(res)
    json.dumps(s, allow_nan=False)
    assert s["counts"]["num_finished"] == 0
    assert s["counts"]["span_s"] is None
    assert s["counts"]["window_s"] == 6.0
    assert s["latency"]["e2e_s"]["mean"] is None
    assert s["slo"]["attainment"] == {"ttft_s": 0.0, "tpot_s": 0.0, "e2e_s": 0.0, "all": 0.0}
    assert s["slo"]["goodput_rps"] is None
    assert s["energy"]["energy_j"] == approx(5040.0)
    assert s["energy"]["j_per_output_token"] is None


def test_distribution_selects_the_inverted_cdf_percentiles() -> None:
    """Unit weights take the percentiles by selection, weights by an unstable sort: both are
    the inverted CDF of the samples (ties and NaNs included), as a stable sort gives it."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 100, 101, 1000):
        x = np.round(rng.exponential(size=n), 1)  # many ties
        x[rng.random(n) < 0.1] = np.nan
        kept = x[~np.isnan(x)]
        if not kept.size:
            continue
        d = distribution(x)
        assert d["count"] == kept.size
        for p in (50, 90, 95, 99):
            assert d[f"p{p}"] == np.percentile(kept, p, method="inverted_cdf")
        w = rng.integers(0, 5, size=n)
        dw = distribution(x, w)
        keep = ~np.isnan(x) & (w > 0)
        for p in (50, 90, 95, 99):
            expected = (
                np.percentile(np.repeat(x[keep], w[keep]), p, method="inverted_cdf") if keep.any() else None
            )
            assert dw[f"p{p}"] == expected
