"""APEX (Lin et al., "APEX: An Extensible and Dynamism-Aware Simulator for Automated Parallel
Execution in LLM Serving", arXiv 2411.17651): searching parallel execution plans by
simulation, the energy-optimal plan meeting the SLO uses up to 45% less energy than the
latency-optimal one.

Here (servesim's plan search as APEX's; the paper's exact models and traces are not encoded):
Llama-3.1-70B on one node of up to 8 H100s, plans of TP 2/4/8 x PP 1/2 x 1-4 replicas
(colocated), chat-like lengths (lognormal, prompt mean 1000, output mean 250), Poisson at
2 req/s, SLO TTFT <= 2 s and TPOT <= 100 ms at 90% attainment. Among the plans meeting it,
the one with the least energy per output token against the one with the lowest P90 end-to-end
latency.
"""

from __future__ import annotations

from typing import Any

from servesim.papers.base import Outcome, Paper, around

PLAN = {
    "gpus": ["H100-SXM"],
    "max_total_gpus": 8,
    "tensor_parallel_sizes": [2, 4, 8],
    "pipeline_parallel_sizes": [1, 2],
    "replicas": [1, 2, 3, 4],
    "modes": ["colocated"],
}


def scenario(n: int) -> dict[str, Any]:
    return {
        "name": "apex",
        "model": {"name": "meta-llama/Llama-3.1-70B"},
        "engine": {"max_model_len": 16384},
        "workload": {
            "type": "synthetic",
            "num_requests": n,
            "seed": 1,
            "arrival": {"rate": 2.0},
            "prompt_len": {"kind": "lognormal", "mean": 1000, "std": 1000, "max": 8000},
            "output_len": {"kind": "lognormal", "mean": 250, "std": 250, "max": 2000},
        },
        "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        "run": {"record_steps": False},
    }


def run(quick: bool) -> Outcome:
    from servesim.config import scenario_from_dict
    from servesim.planner.search import run_plan
    from servesim.planner.space import plan_config

    res = run_plan(
        scenario_from_dict(scenario(200 if quick else 1000)),
        plan_config(PLAN, "apex"),
        backend="inprocess",
        workers=1,
    )
    rows = [
        {
            "plan": e.candidate.id,
            "num_gpus": e.candidate.num_gpus,
            "pools": ";".join(f"tp{p.tp}pp{p.pp}x{p.num_replicas}" for p in e.candidate.pools),
            "meets": e.meets,
            "j_per_output_token": e.metrics.get("j_per_output_token"),
            "e2e_p90_s": e.metrics.get("e2e_p90_s"),
        }
        for e in res.evaluated
    ]
    ok = res.ranked()
    if not ok:
        return Outcome({"energy_cut": float("nan")}, rows, ["no plan meets the SLO"])
    by_energy = min(ok, key=lambda e: e.metrics["j_per_output_token"])
    by_latency = min(ok, key=lambda e: e.metrics["e2e_p90_s"])
    cut = 100 * (1 - by_energy.metrics["j_per_output_token"] / by_latency.metrics["j_per_output_token"])
    return Outcome(
        {"energy_cut": cut},
        rows,
        [
            f"{len(ok)} of {len(res.evaluated)} plans meet the SLO; energy-optimal "
            f"{by_energy.metrics['j_per_output_token']:.2f} J/token on "
            f"{by_energy.candidate.num_gpus} GPUs, "
            f"latency-optimal {by_latency.metrics['j_per_output_token']:.2f} J/token on "
            f"{by_latency.candidate.num_gpus} GPUs (P90 E2E {by_latency.metrics['e2e_p90_s']:.2f} "
            f"s)"
        ],
    )


#: The paper's headline, setup and figures (``servesim reproduce apex``).
PAPER = Paper(
    "apex",
    "APEX",
    "Lin et al., APEX: An Extensible and Dynamism-Aware Simulator for Automated Parallel Execution in "
    "LLM Serving, arXiv 2411.17651 (2024)",
    "energy-optimal parallel plans use up to 45% less energy than latency-optimal ones",
    {
        "model": "diverse LLMs, up to trillion scale (see paper)",
        "gpus": "various device clusters",
        "workload": "long-prompt and long-generation workloads",
        "slo": "-",
        "baseline": "the latency-optimal plan",
        "metric": "energy per request",
    },
    (
        around(
            "energy_cut",
            "energy per token, energy-optimal below latency-optimal plan",
            "up to 45%",
            45.0,
            "%",
        ),
    ),
    "servesim's plan search as a stand-in for the paper's: Llama-3.1-70B on up to 8 H100s, TP 2/4/8 x "
    "PP 1/2 x "
    "1-4 replicas, chat-like lengths, Poisson at 2 req/s, TTFT <= 2 s and TPOT <= 100 ms; 1,000 requests "
    "per plan (--quick: 200).",
    run,
    "The model, node, traffic and SLO are servesim's choice, not the paper's (not encoded here); the "
    "saving depends on how far the SLO lets the energy-optimal plan shrink the GPU count.",
)
