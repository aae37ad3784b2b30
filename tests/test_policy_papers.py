"""Characterization tests: the papers' headline effects, in small, as servesim measured them.

Each test states the paper's setup, the scaled-down setup here (a modelled A100 or H100,
a short synthetic workload with the paper's kind of length distribution, fixed seeds), and
asserts what the paper or the arithmetic says: the mechanism (what fails the SLO, what is
avoided), the direction of the effect, or a bound derived by hand (the docstrings derive
each). No bound is built around servesim's own earlier output; the figures servesim
measured are printed and quoted in the docstrings, and the papers' headline figures are held
in their own setups by ``servesim reproduce`` (tests/test_reproduce.py, docs/papers.md).
Capacities are found by a geometric bisection over the arrival rate with the arrival pattern
held fixed (common random numbers).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig, ParallelConfig, SpeculativeConfig
from servesim.deployment import resolved_engine
from servesim.papers.common import capacity as papers_capacity
from servesim.papers.common import p99_tbt_s
from servesim.perf.memory import plan_memory
from servesim.perf.roofline import RooflinePerfModel
from servesim.sim import run_engine
from servesim.workload.base import Workload


def lognormal_lengths(
    rng: np.random.Generator, n: int, median: float, sigma: float, lo: int, hi: int
) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(median), sigma, n), lo, hi).astype(np.int64)


def capacity(meets_slo: Callable[[float], bool], lo: float, hi: float, iters: int = 6) -> float:
    """``servesim reproduce``'s search (``papers.common.capacity``); ``lo`` must meet the SLO."""
    got = papers_capacity(meets_slo, lo, hi, iters)
    assert got > 0, f"the SLO is not met even at {lo} req/s"
    return got


# --------------------------------------------------------------------------- vLLM vs Orca


# vLLM's paper (SOSP'23, Fig. 12: 1.7-2.7x Orca (Oracle)'s rate, 2.7-8x Orca (Max)'s) is held to
# its ranges in its own setup by tests/test_reproduce.py (servesim reproduce vllm: Table 1's KV
# slots, the artifact's buddy-allocated Orca baselines, 1,000 requests); tests/test_policies.py
# checks the buddy allocator block by block. A 200-request run with today's memory plan, which
# this file held before, measures a transient (docs/papers.md).


# --------------------------------------------------------------------------- Orca vs static


def test_iteration_level_batching_beats_static_batching():
    """Orca (Yu et al., OSDI'22), Fig. 10: against FasterTransformer's request-level (static)
    batching, Orca's iteration-level scheduling reaches up to 36.9x the throughput at the
    same latency (GPT-3 175B); the gain comes from not waiting for a batch's longest request.

    Here: OPT-13B on one A100-80GB, 200 requests (lognormal lengths, median 160 in, 250 out),
    Poisson at 4 req/s (beyond both capacities, so throughput is the service rate), both
    with batches of 16 and KV reserved for max_model_len (2048) per request, so only the
    batching differs. Throughput = output tokens / time to finish them all.

    Measured 2.7x. At saturation a static batch takes as many steps as its longest output and
    an iteration-level batch about as many as its mean output, so the gain is E[max of 16
    outputs] / E[output] = 2.74 for this length distribution (the paper's 36.9x is latency at
    equal load for GPT-3 with far wider length spreads, not this throughput ratio).
    """
    model = load_model("OPT-13B")
    gpu = get_gpu("A100-80GB")
    perf = RooflinePerfModel(model, gpu)
    rng = np.random.default_rng(2)
    n = 200
    wl = Workload(
        np.cumsum(rng.exponential(1 / 4, n)),
        lognormal_lengths(rng, n, 160, 0.9, 4, 1024),
        lognormal_lengths(rng, n, 250, 0.9, 4, 1024),
    )
    thr = {}
    for policy in ("orca", "static"):
        rec = run_engine(
            wl, EngineConfig(policy=policy, max_num_seqs=16, max_model_len=2048), perf, 3000, 2048
        ).records
        assert (rec.status == 0).all()
        thr[policy] = rec.num_output_tokens.sum() / (np.nanmax(rec.finished_s) - rec.arrival_s[0])
    print(
        f"throughput iteration-level {thr['orca']:.0f} tok/s, static {thr['static']:.0f} tok/s: "
        f"{thr['orca'] / thr['static']:.1f}x"
    )
    assert 2.74 / 1.15 <= thr["orca"] / thr["static"] <= 2.74 * 1.15  # the E[max]/E[mean] bound


# --------------------------------------------------------------------------- Sarathi vs V0

#: Sarathi-Serve (arXiv 2403.02310), Table 2: prompt and output tokens, (median, P90), and
#: the max_seq_len its capacity search gives each trace (osdi-experiments/figure-5-6/
#: mistral7b_strict.yml in microsoft/sarathi-serve).
SARATHI_TRACES = {
    "openchat_sharegpt4": ((1730, 5696), (415, 834), 8192),
    "arxiv_summarization": ((7059, 12985), (208, 371), 16384),
}


def trace_like_lengths(
    rng: np.random.Generator, n: int, prompt_q: tuple[int, int], output_q: tuple[int, int], max_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal prompt and output lengths with a trace's median and P90, trimmed as
    sarathi's TraceRequestLengthGenerator trims them: a request longer than ``max_tokens``
    loses the excess from its prompt and output in proportion."""
    z90 = 1.2816  # standard normal P90
    p = rng.lognormal(np.log(prompt_q[0]), np.log(prompt_q[1] / prompt_q[0]) / z90, n).astype(np.int64)
    d = rng.lognormal(np.log(output_q[0]), np.log(output_q[1] / output_q[0]) / z90, n).astype(np.int64)
    p, d = np.maximum(p, 1), np.maximum(d, 1)
    total = p + d
    excess = np.maximum(total - max_tokens, 0)
    p = np.maximum(p - np.ceil(excess * p / total).astype(np.int64), 1)
    d = np.maximum(d - np.ceil(excess * d / total).astype(np.int64), 1)
    return p, d


@pytest.mark.parametrize(
    ("trace", "n", "lo", "hi"),
    [
        ("openchat_sharegpt4", 400, 0.25, 8.0),  # measured 3.3x; the paper 2.6x (its own setup: reproduce)
        ("arxiv_summarization", 200, 0.1, 4.0),  # measured 1.8x
    ],
)
def test_chunked_prefill_raises_capacity_under_strict_tbt_slo(trace, n, lo, hi):
    """Sarathi-Serve (Agrawal et al., OSDI'24), Sec. 5.1 and Fig. 10: Mistral-7B on one
    A100, Sarathi-Serve (token budget 512) serves ~2.6x the load of vLLM (prefill-
    prioritizing) under the strict SLO, because vLLM's prefill-only iterations stall every
    running decode ("generation stalls").

    The setup follows the paper's artifact (microsoft/sarathi-serve, osdi-experiments/
    figure-5-6 and sarathi/benchmark/capacity_search): capacity = the largest Poisson rate
    with P99 TBT <= 100 ms (the strict SLO of Table 3) and median scheduling delay <= 2 s;
    vLLM with batch size 128 and max_num_batched_tokens = max_seq_len (8192 / 16384), the
    loop of sarathi's vllm_scheduler.py (our vllm_v0); Sarathi-Serve chunk 512, batch 128.
    Lengths: lognormal with Table 2's medians and P90s, trimmed to max_seq_len. Here: a
    modelled A100-80GB and 400 / 200 requests (the paper: 2,048), capacity to ~12%.

    Measured (test's seeds): openchat 3.3x, arxiv 1.8x; with 1,000-2,048 requests openchat
    converges to 2.8x and arxiv to 1.9-2.0x (a short run lets Sarathi-Serve, whose
    capacity is throughput-bound, overrun its service rate longer before the median
    scheduling delay passes 2 s; vLLM's is bound by P99 TBT and does not move). The
    assertions are the paper's mechanism, not these figures: at Sarathi-Serve's capacity
    vLLM misses the P99 TBT SLO (generation stalls) while Sarathi-Serve meets it, so
    Sarathi-Serve's capacity is the higher. The paper's 2.6x is held in the paper's own setup
    (the artifact's trace, search and time limit) by ``servesim reproduce sarathi-serve``
    (tests/test_reproduce.py).
    """
    prompt_q, output_q, mml = SARATHI_TRACES[trace]
    model = load_model("Mistral-7B")
    gpu = get_gpu("A100-80GB")
    perf = RooflinePerfModel(model, gpu)
    rng = np.random.default_rng(2)
    unit_arrivals = np.cumsum(rng.exponential(1.0, n))
    prompt, output = trace_like_lengths(rng, n, prompt_q, output_q, mml)
    engines = {
        "vllm_v0": EngineConfig(
            policy="vllm_v0", max_num_seqs=128, max_num_batched_tokens=mml, max_model_len=mml
        ),
        "sarathi": EngineConfig(
            policy="sarathi", max_num_seqs=128, max_num_batched_tokens=512, max_model_len=mml
        ),
    }
    blocks = {
        p: plan_memory(
            model, gpu, resolved_engine(e, model, gpu, ParallelConfig()), ParallelConfig()
        ).num_gpu_blocks
        for p, e in engines.items()
    }
    seen: dict[tuple[str, float], tuple[float, float]] = {}

    def slo_metrics(policy: str, rate: float) -> tuple[float, float]:
        if (policy, rate) not in seen:
            wl = Workload(unit_arrivals / rate, prompt, output)
            r = run_engine(wl, engines[policy], perf, blocks[policy], mml)
            seen[policy, rate] = (p99_tbt_s(r), float(np.nanmedian(r.records.queue_s)))
        return seen[policy, rate]

    def meets(policy: str) -> Callable[[float], bool]:
        def ok(rate: float) -> bool:
            tbt, delay = slo_metrics(policy, rate)
            return tbt <= 0.1 and delay <= 2.0

        return ok

    v0 = capacity(meets("vllm_v0"), lo, hi, iters=5)
    sarathi = capacity(meets("sarathi"), lo, hi, iters=5)
    tbt = {p: slo_metrics(p, sarathi)[0] for p in engines}
    print(
        f"{trace}: capacity at P99 TBT <= 100 ms: vllm_v0 {v0:.2f} req/s, sarathi {sarathi:.2f} req/s: "
        f"{sarathi / v0:.1f}x; P99 TBT at {sarathi:.2f} req/s: vllm_v0 {tbt['vllm_v0'] * 1e3:.0f} ms, "
        f"sarathi {tbt['sarathi'] * 1e3:.0f} ms"
    )
    assert tbt["sarathi"] <= 0.1 < tbt["vllm_v0"]  # V0 fails the SLO on stalls, not on queueing
    assert sarathi > v0


# --------------------------------------------------------------------------- BurstGPT


def test_burstgpt_gamma_arrivals_keep_the_rate_and_raise_the_tail():
    """BurstGPT (Wang et al., 2024): LLM request inter-arrivals fit a Gamma whose CV is well
    above 1 (its artifact's generator, example/profile_server/server.py, draws gaps from
    Gamma(shape 0.25, scale 2): CV 1/sqrt(0.25) = 2), and at the same mean rate the bursts
    inflate tail latency and KV pressure over the Poisson arrivals most benchmarks assume.

    Checked against the distribution's own figures, not servesim's earlier output: servesim's
    gamma gaps have mean 1/rate and CV 1/sqrt(shape) (the sample's within 10%, hand-computable),
    and on one engine at the same mean rate the CV-2 arrivals give a higher P99 TTFT and more
    preemptions than Poisson's. Llama-3.1-8B on one H100 (vLLM V1 defaults), a KV cache cut to
    2,000 blocks (32k tokens) for pressure, 600 requests (prompt 100-1500, output 50-500,
    uniform) at 6 req/s.
    """
    from servesim.config.arrival import ArrivalConfig
    from servesim.workload.synthetic import inter_arrival_gaps

    def gamma_gaps(rng: np.random.Generator, n: int, rate: float, cv: float) -> np.ndarray:
        return inter_arrival_gaps(ArrivalConfig(process="gamma", rate=rate, cv=cv), n, rng)

    rng = np.random.default_rng(5)
    gaps = gamma_gaps(rng, 20_000, rate=6.0, cv=2.0)
    assert np.mean(gaps) == pytest.approx(1 / 6.0, rel=0.05)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.10)

    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    n, rate = 600, 6.0
    rng = np.random.default_rng(4)
    prompt, output = rng.integers(100, 1500, n), rng.integers(50, 500, n)
    res = {}
    for cv in (1.0, 2.0):
        gaps = gamma_gaps(np.random.default_rng(5), n, rate=rate, cv=cv)
        rec = run_engine(Workload(np.cumsum(gaps), prompt, output), EngineConfig(), perf, 2000, 8192).records
        res[cv] = (float(np.nanpercentile(rec.ttft_s, 99)), int(rec.num_preemptions.sum()))
    print(
        f"P99 TTFT / preemptions: Poisson {res[1.0][0]:.2f} s / {res[1.0][1]}, "
        f"Gamma CV 2 {res[2.0][0]:.2f} s / {res[2.0][1]}"
    )
    assert res[2.0][0] > res[1.0][0]
    assert res[2.0][1] > res[1.0][1]


# --------------------------------------------------------------------------- memory-aware admission


def test_mcsf_memory_aware_admission_avoids_preemptions():
    """Memory-constrained scheduling (Jaillet et al. 2025, "Online Scheduling for LLM
    Inference with KV Cache Constraints", arXiv 2502.07115): MC-SF admits, shortest
    predicted output first, only what the KV cache can hold until the batch's predicted
    completions. That avoids the preemptions (and recomputation) of greedy admission, and
    the shortest-first order cuts mean latency further; the paper reports MC-SF's average
    latency ~30% below its benchmark algorithms' (Llama2-70B, LMSYS-Chat-1M, simulated).

    Here: Llama-3.1-8B on one A100-80GB with the KV cache cut to 1,500 blocks (24k tokens),
    200 requests (prompt 100-1000, output 300-1500, uniform: outputs grow the KV a lot after
    admission), Poisson at 2 req/s; vLLM V1 (budget 2048) against V1 with memory-aware
    admission (FCFS) using the true output length or a lognormal prediction error (sigma
    0.3), and full MC-SF: memory-aware admission with the waiting queue ordered by the
    predicted output length, shortest first (``admission_order: shortest_predicted_first``),
    with the true length and with the noisy prediction.
    Measured: the projection alone removes the preemptions but cuts mean latency only ~6%
    (at this load latency is mostly service time, and FCFS order is kept); adding the
    shortest-first order gives ~16% (a 200-request transient: ``servesim reproduce mc-sf``
    runs 1,000 and is held to the paper's 31% +-25%, tests/test_reproduce.py). The assertions
    are the mechanism the paper argues, not these figures: admission that projects the true
    lengths never overflows the cache (no preemption), greedy admission does, a noisy
    projection overflows less often than greedy, and each step (projection, then the
    shortest-first order) lowers the mean latency.
    """
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("A100-80GB"))
    rng = np.random.default_rng(3)
    n = 200
    arrival = np.cumsum(rng.exponential(1 / 2, n))
    prompt, output = rng.integers(100, 1000, n), rng.integers(300, 1500, n)
    res = {}
    for name, kw in (
        ("v1", {}),
        ("exact", {"memory_aware_admission": True}),
        ("noisy", {"memory_aware_admission": True, "output_len_prediction_error": 0.3}),
        ("mc-sf", {"memory_aware_admission": True, "admission_order": "shortest_predicted_first"}),
        (
            "mc-sf noisy",
            {
                "memory_aware_admission": True,
                "admission_order": "shortest_predicted_first",
                "output_len_prediction_error": 0.3,
            },
        ),
    ):
        wl = Workload(arrival, prompt, output)
        rec = run_engine(
            wl, EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048, **kw), perf, 1500, 4096
        ).records
        res[name] = (int(rec.num_preemptions.sum()), float(np.nanmean(rec.e2e_s)))
    print("preemptions / mean e2e: " + ", ".join(f"{k} {p} / {e:.2f} s" for k, (p, e) in res.items()))
    # Measured: preemptions v1 240, exact 0, noisy 149 (0.62x); mean e2e against v1: exact
    # 0.935, noisy 0.976, MC-SF 0.839, MC-SF noisy 0.963 (0.987 of noisy FCFS).
    assert res["exact"][0] == 0 and res["mc-sf"][0] == 0  # true lengths: the projection never overflows
    assert 0 < res["noisy"][0] < res["v1"][0]  # under-predicted outputs overflow, less than greedy
    assert res["exact"][1] < res["v1"][1]  # no recomputation
    assert res["mc-sf"][1] < res["exact"][1]  # the order, not only the projection
    assert res["mc-sf noisy"][1] < res["noisy"][1]


# --------------------------------------------------------------------------- speculative decoding


def test_speculative_decoding_helps_at_low_load_less_at_high_load():
    """Speculative decoding (Leviathan et al. 2023; Liu et al. 2024, "Optimizing Speculative
    Decoding for Serving", and vLLM's spec-decode benchmarks): at low load decoding is
    memory-bound and verifying k + 1 tokens costs about one step, so TPOT falls by about the
    tokens accepted per step; at high load the batch is compute-bound and the verification
    tokens cost real time, so the gain shrinks.

    Here: Llama-3.1-8B on one H100, k = 4 draft tokens, acceptance 0.7 per token (2.8
    tokens per step expected), a draft step at 5% of the target's; 40 requests at 0.5 req/s
    (low) and 200 at 40 req/s (high), prompt 100-1000, output 100-400.

    Measured: 2.42x at low load, 1.62x at high load. Leviathan et al.'s Theorem 3.8 gives the
    expected walltime improvement of a lone request, when verifying k + 1 tokens costs one
    target step: (1 - a^(k+1)) / ((1 - a)(k c + 1)) = (1 - 0.7^5) / (0.3 x 1.2) = 2.31 (a = 0.7,
    k = 4, c = 0.05); at low load the gain is held to it (+-10%: requests overlap a little, and
    a faster request leaves a smaller batch); at high load it must fall below it.
    """
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    rng = np.random.default_rng(3)
    prompt, output = rng.integers(100, 1000, 200), rng.integers(100, 400, 200)
    gain = {}
    for load, rate, n in (("low", 0.5, 40), ("high", 40.0, 200)):
        wl = Workload(np.cumsum(np.random.default_rng(5).exponential(1 / rate, n)), prompt[:n], output[:n])
        tpot = []
        for k in (0, 4):
            spec = SpeculativeConfig(num_speculative_tokens=k, acceptance_rate=0.7)
            rec = run_engine(
                wl,
                EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, speculative=spec),
                perf,
                30000,
                4096,
            ).records
            tpot.append(float(np.nanmean(rec.tpot_s)))
        gain[load] = tpot[0] / tpot[1]
        print(
            f"{load} load: TPOT {tpot[0] * 1e3:.1f} ms -> {tpot[1] * 1e3:.1f} ms with k=4 ({gain[load]:.2f}x)"
        )
    a, k, c = 0.7, 4, 0.05
    theorem = (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))  # 2.311
    assert gain["low"] == pytest.approx(theorem, rel=0.10)
    assert 1.0 < gain["high"] < gain["low"]
