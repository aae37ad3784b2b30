"""Block (Da and Kalyvianaki, "Block: Balancing Load in LLM Serving with Context, Knowledge and
Predictive Scheduling", arXiv 2508.03611): routing each request to the instance with the least
predicted latency gives up to 16.7% more serving capacity (and up to 49.5% lower P99 latency)
than heuristic schedulers, on a 12-GPU cluster.

The paper's setup, from its artifact's end-to-end experiment script (vidur_opt_scheduler,
``vidur/prediction/exp/end_to_end_exp_scripts/all_experiment.sh`` at e1db3ed): Llama-2-7B, 12
instances of one GPU each (CloudLab d7525 nodes, one NVIDIA A30 24 GB each), vLLM with chunked
prefill (chunk 512) and at most 48 sequences a batch, ShareGPT prompts, 10,000 requests per
run (``NUM_REQUEST``) at a fixed QPS swept over 20-36; Block's ``min_new_request_latency``
(with RoBERTa-predicted and with oracle response lengths, Block and Block*) against the
heuristics ``min_lunmnix_load`` (Llumnix-), ``min_infass_load`` (INFaaS++), ``round_robin``,
``request_per_seconds`` (Min QPM) and ``random``. Block's metric is the new request's
end-to-end latency (``vidur/request_timeline_predictor/base_request_timeline_predictor.py``:
``predict_waiting_and_ending_time``, the simulation's ``target_request_end_to_end``). Capacity
is where a scheduler's P99 TTFT over the QPS sweep crosses an SLO (the artifact's
``experiments_analysis/experiment_plot.py`` in AKafakA/Block at 7e2a323, ``--ttft-p99-slo``,
3 s by default). The artifact's vLLM is its fork of 0.7.2, run as V0 with chunked prefill;
servesim's engine schedules as V1 does (decodes first, prompts in the rest of the budget).

Here: the A30 as a custom GPU from its spec sheet (165 dense BF16 TFLOP/s, 933 GB/s, 24 GB);
lognormal ShareGPT-like lengths (the vLLM paper's means, 161 in and 338 out); Poisson arrivals,
10,000 requests per run, as the artifact's; servesim's ``predicted_latency`` router (the new
request's end-to-end latency from a step-by-segment simulation of the replica's running and
queued requests, response lengths known: Block*, ``cluster.loads.predict_latency``) against
the artifact's heuristics: ``llumnix`` (Llumnix-: freeness; the artifact subtracts every
queued prompt's blocks, servesim's freeness the head of line's), ``infaas``, ``round_robin``
and ``random``. Min QPM is ``random`` as the artifact runs it: its ``get_current_qpm``
(``vidur/prediction/global_scheduler/instance.py``) subtracts request times kept relative to
the scheduler's start from the absolute clock, so no request is ever within the last minute,
every instance counts 0 and the tie is drawn at random. Capacity: the highest QPS whose P99
TTFT is at most 3 s (the artifact's SLO), by bisection; the gain is Block's capacity over
the best heuristic's; the P99 cut is Block's P99 TTFT against that heuristic's at the
heuristic's capacity. The search runs in 12-48 QPS, about the artifact's sweep: --quick 5
bisection steps (a resolution of 4.4%), full 7 (1.1%).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.papers.base import Curve, Outcome, Paper, around
from servesim.papers.common import capacity

A30 = {
    "name": "A30",
    "bf16_tflops": 165.0,
    "mem_gb": 24.0,
    "mem_bw_tb_per_s": 0.933,
    "interconnect_gb_per_s": 100.0,
    "idle_power_w": 30.0,
    "max_power_w": 165.0,
}
MODEL = "meta-llama/Llama-2-7b-hf"
#: Block's router and the artifact's heuristics (Min QPM runs as random there: see above).
BLOCK = "predicted_latency"
HEURISTICS = ("llumnix", "infaas", "round_robin", "random")
#: P99 TTFT bound of the capacity search (seconds): the artifact's ``--ttft-p99-slo`` default.
TTFT_SLO_S = 3.0
NUM_REQUESTS = 10_000


def cluster(router: str) -> tuple[Any, list[Any]]:
    from servesim.catalog.hf_config import load_model
    from servesim.cluster.pools import build_pool
    from servesim.config import Scenario

    sc = Scenario.model_validate(
        {
            "model": {"name": MODEL},
            "hardware": {"gpu": A30},
            "engine": {"max_num_seqs": 48, "max_num_batched_tokens": 512, "max_model_len": 4096},
            "cluster": {"pools": [{"name": "instances", "num_replicas": 12}], "router": router},
        }
    )
    assert sc.cluster is not None
    model = load_model(MODEL)
    return sc.cluster, [build_pool(sc, p, model) for p in sc.cluster.pools]


def run(quick: bool) -> Outcome:
    from servesim.cluster.run import run_cluster
    from servesim.workload.base import Workload

    iters = 5 if quick else 7
    rng = np.random.default_rng(0)
    n = NUM_REQUESTS
    # Lognormal with the vLLM paper's ShareGPT means (161 in, 338 out): median = mean / e^(s^2/2).
    prompt = np.clip(rng.lognormal(np.log(161) - 0.5, 1.0, n), 4, 2048).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(338) - 0.5, 1.0, n), 4, 2048).astype(np.int64)
    unit = np.cumsum(rng.exponential(1.0, n))
    rows: list[dict[str, Any]] = []

    def search(router: str) -> float:
        cfg, pools = cluster(router)

        def ok(qps: float) -> bool:
            return p99_ttft(router, qps, cfg, pools) <= TTFT_SLO_S

        return capacity(ok, 12.0, 48.0, iters)

    def p99_ttft(router: str, qps: float, cfg: Any, pools: list[Any]) -> float:
        rec = run_cluster(Workload(unit / qps, prompt, output), pools, cfg, record_steps=False).records
        p99 = float(np.nanpercentile(rec.ttft_s, 99))
        rows.append({"router": router, "qps": qps, "p99_ttft_s": p99, "meets": p99 <= TTFT_SLO_S})
        return p99

    caps = {r: search(r) for r in (BLOCK, *HEURISTICS)}
    best = max(HEURISTICS, key=lambda r: caps[r])
    at = caps[best]
    p99_best = p99_ttft(best, at, *cluster(best))
    p99_block = p99_ttft(BLOCK, at, *cluster(BLOCK))
    for r, c in caps.items():
        rows.append({"router": r, "capacity_qps": c})
    notes = [
        f"capacity (QPS at P99 TTFT <= {TTFT_SLO_S:g} s): "
        + ", ".join(f"{r} {c:.1f}" for r, c in caps.items())
        + f"; best heuristic {best}",
        f"P99 TTFT at {at:.1f} QPS: {best} {p99_best:.2f} s, {BLOCK} {p99_block:.2f} s",
    ]
    return Outcome(
        {
            "capacity_gain": 100.0 * (caps[BLOCK] / caps[best] - 1.0),
            # Not held to the paper's 49.5%: one run's P99 at one rate, where the paper's is its
            # largest over its runs.
            "p99_cut": 100.0 * (1.0 - p99_block / p99_best),
        },
        rows,
        notes,
    )


#: The paper's headline, setup and figures (``servesim reproduce block``).
PAPER = Paper(
    "block",
    "Block",
    "Da and Kalyvianaki, Block: Balancing Load in LLM Serving with Context, Knowledge and Predictive "
    "Scheduling, arXiv 2508.03611 (2025); artifact vidur_opt_scheduler, vidur/prediction/exp",
    "up to 16.7% more serving capacity (and 49.5% lower P99 latency) than heuristic schedulers, by "
    "routing on predicted metrics",
    {
        "model": "Llama-2-7B (also Qwen-7B)",
        "gpus": "12 instances of one GPU (CloudLab d7525: one A30 24 GB each)",
        "workload": "ShareGPT (also LMSYS), 10,000 requests at a fixed QPS in 20-36",
        "slo": "capacity: the QPS where P99 TTFT crosses 3 s (the artifact's plot script)",
        "baseline": "heuristic schedulers: Llumnix-, INFaaS++, round robin, Min QPM, random",
        "metric": "serving capacity gain, %",
    },
    (around("capacity_gain", "capacity gain over the best heuristic", "+16.7%", 16.7, "%"),),
    "The artifact's cluster: Llama-2-7B on 12 A30s (a custom GPU from the spec sheet), vLLM with "
    "512-token chunks and 48 sequences, ShareGPT-like lengths (lognormal, means 161 and 338), 10,000 "
    "Poisson requests per run (the artifact's); predicted_latency routing (Block's new-request "
    "end-to-end latency, oracle lengths: Block*) against the artifact's heuristics llumnix "
    "(Llumnix-), infaas (INFaaS++), round_robin and random (Min QPM runs as random there); "
    "capacity at P99 TTFT <= 3 s (the artifact's SLO), bisection in 12-48 QPS (--quick: 5 steps, "
    "full: 7).",
    run,
    "Block's router against the artifact's own heuristics and SLO gains about 1% of capacity: P99 "
    "TTFT climbs from 0.3 s to past 3 s between 28 and 30 QPS under Block's router and Llumnix-'s "
    "alike, so routing moves the knee little (it cuts the tail there: 1.71 s against 2.74 s). The "
    "artifact's own summaries read the same at this setup: +1.3% for Block and +4.6% for Block* "
    "over Llumnix- at P99 TTFT <= 3 s (31.1 and 32.0 against 30.6-30.7 QPS; 13.8% at 24 sequences "
    "a batch): the paper's up to 16.7% is not this setup's gain over its best heuristic in the "
    "artifact's data either.",
    curve=Curve(
        "P99 TTFT against the load (the capacity search's probes)",
        "qps",
        "p99_ttft_s",
        ("router",),
        "load (QPS)",
        "P99 TTFT (s)",
        log_y=True,
    ),
)
