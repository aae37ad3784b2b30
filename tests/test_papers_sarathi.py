"""The Sarathi-Serve reproduction reads its capacities as the paper's artifact does
(microsoft/sarathi-serve, branch osdi-sarathi-serve): its capacity search and its metrics
store's P99 TBT and median scheduling delay, figures traced by hand from that code."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from servesim.papers.sarathi import a100_pcie, artifact_requests, artifact_search, artifact_slo_metrics


def test_the_search_walks_the_artifacts_rates_and_keeps_the_highest_that_met_the_slo():
    """capacity_search.py's ``search`` from start_qps 1.6 (bracket [0, 3.2]) on a system that
    meets the SLO up to 0.155 req/s, with a delay of 1,000 s above 1 req/s and 10 ms below:
    1.6 fails past 500 s (right = 0.8); 0.4 and 0.2 fail (right = the rate); 0.1 and 0.15 pass
    with a small delay (right = min(4 x right, lowest failure 0.2) = 0.2); round(0.175, 2) =
    0.17 and 0.16 fail; round(0.155, 2) = 0.15 is read back, not run again; the next midpoint
    repeats it and the search stops: 0.15."""
    tried: list[float] = []

    def probe(rate: float) -> tuple[bool, float]:
        tried.append(rate)
        return rate <= 0.155, 1000.0 if rate > 1 else 0.01

    assert artifact_search(probe, 1.6, 2.5) == 0.15
    assert tried == [1.6, 0.4, 0.2, 0.1, 0.15, 0.17, 0.16]


def test_the_search_reports_zero_when_no_rate_meets_the_slo():
    """Every trial fails with a small delay: 0.04, 0.02, 0.01, then round(0.005, 2) = 0.01
    repeats and the search stops with no rate that met the SLO."""
    assert artifact_search(lambda rate: (False, 0.01), 0.04, 2.5) == 0.0


def test_slo_metrics_count_the_artifacts_zero_gaps_and_completed_requests_only():
    """P99 TBT: 197 gaps of 50 ms and 3 of 1.5 s read 1.5 s (197 < 99% of 200); the 50
    requests whose first token came by the limit add two zero samples each (the prompt's last
    chunk and the first decode log 0), and 97 + 200 = 297 >= 99% of 300: 50 ms. The median
    scheduling delay is over the requests finished by the limit (delays 1, 2, 3 s), not one
    finished after it (50 s) nor the unfinished (100 s)."""
    n = 60
    first_token = np.full(n, np.nan)
    first_token[:50] = 100.0
    finished = np.full(n, np.nan)
    finished[:3] = 500.0
    finished[3] = 1900.0
    queue = np.full(n, 100.0)
    queue[:4] = [1.0, 2.0, 3.0, 50.0]
    run = SimpleNamespace(
        records=SimpleNamespace(first_token_s=first_token, finished_s=finished, queue_s=queue),
        itl=SimpleNamespace(gap_s=[0.05, 1.5], count=[197, 3]),
    )
    tbt, delay = artifact_slo_metrics(run, 1800.0)
    assert tbt == pytest.approx(0.05)
    assert delay == pytest.approx(2.0)
    first_token[:] = np.nan  # no first token yet: no zeros, the 1.5 s gaps are the P99
    assert artifact_slo_metrics(run, 1800.0)[0] == pytest.approx(1.5)


def test_the_artifacts_gpu_is_the_pcie_a100():
    """NVIDIA's A100 datasheet: the 80GB PCIe card's HBM2e runs at 1,935 GB/s, the SXM card's
    at 2,039; the same 312 TFLOP/s of BF16."""
    gpu = a100_pcie()
    assert gpu.mem_bw == 1.935e12
    assert gpu.flops_for("bfloat16") == 312e12


def test_the_bundled_trace_is_table_2s_openchat_sharegpt4():
    """The paper's Table 2 for openchat_sharegpt4: prompt tokens median 1730 and P90 5696,
    output tokens 415 and 834, over the trace's 30,731 requests (all within 8,192 tokens,
    the "8k filtered" of its name, so the trimming leaves them as they are)."""
    arrivals, prompt, output = artifact_requests(30_731, 8192)
    assert len(prompt) == 30_731
    assert np.median(prompt) == 1730 and np.percentile(prompt, 90) == 5696
    assert np.median(output) == 415 and np.percentile(output, 90) == 834
    assert (prompt + output).max() <= 8192


def test_the_arrivals_are_the_artifacts_capped_poisson_draws():
    """PoissonRequestIntervalGenerator at 1 req/s with Python's random seeded 42: the first
    interval is -ln(1 - 0.6394267984578837) (random.Random(42)'s first draw) = 1.0201 s, and
    no interval is longer than 3 / qps; a trimmed request loses its excess in proportion."""
    arrivals, prompt, output = artifact_requests(2048, 8192)
    assert arrivals[0] == pytest.approx(-math.log(1 - 0.6394267984578837))
    assert np.diff(arrivals).max() <= 3.0
    _, short_p, short_d = artifact_requests(2048, 1000)
    assert (short_p + short_d).max() <= 1000 and short_p.min() >= 1 and short_d.min() >= 1
