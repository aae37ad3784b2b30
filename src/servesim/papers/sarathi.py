"""Sarathi-Serve (Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
Sarathi-Serve", OSDI'24), Sec. 5.1 and Fig. 10: Mistral-7B on one A100, Sarathi-Serve (chunk
512) serves 2.6x the load of vLLM under the strict SLO, because vLLM's prefill-only
iterations stall every running decode.

The setup follows the paper's artifact (microsoft/sarathi-serve, osdi-experiments/figure-5-6/
mistral7b_strict.yml and sarathi/benchmark/capacity_search): capacity = the largest Poisson
rate with P99 TBT <= 100 ms (Table 3's strict SLO) and median scheduling delay <= 2 s; vLLM
(servesim's ``vllm_v0``, the loop of sarathi's vllm_scheduler.py) with batch size 128 and
max_num_batched_tokens = max_seq_len 8192; Sarathi-Serve chunk 512, batch 128. Lengths:
lognormal with Table 2's median and P90 for openchat_sharegpt4 (prompts 1730 / 5696, outputs
415 / 834), trimmed to max_seq_len. The paper runs 2,048 requests; --quick runs 1,000 (with
400 the throughput-bound Sarathi-Serve overruns its service rate too briefly to show it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.papers.base import Outcome
from servesim.papers.common import capacity, p99_tbt_s, trace_like_lengths


def run(quick: bool) -> Outcome:
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import EngineConfig, ParallelConfig
    from servesim.perf.memory import plan_memory
    from servesim.perf.roofline import RooflinePerfModel
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    model, gpu = load_model("Mistral-7B"), get_gpu("A100-80GB")
    perf = RooflinePerfModel(model, gpu)
    mml = 8192
    n = 1000 if quick else 2048
    rng = np.random.default_rng(2)
    unit_arrivals = np.cumsum(rng.exponential(1.0, n))
    prompt, output = trace_like_lengths(rng, n, (1730, 5696), (415, 834), mml)
    engines = {
        "vllm": EngineConfig(policy="vllm_v0", max_num_seqs=128, max_num_batched_tokens=mml,
                             max_model_len=mml),
        "sarathi": EngineConfig(policy="sarathi", max_num_seqs=128, max_num_batched_tokens=512,
                                max_model_len=mml),
    }
    blocks = {k: plan_memory(model, gpu, e, ParallelConfig()).num_gpu_blocks for k, e in engines.items()}
    rows = []

    def meets(system: str) -> Callable[[float], bool]:
        def ok(rate: float) -> bool:
            r = run_engine(Workload(unit_arrivals / rate, prompt, output), engines[system], perf,
                           blocks[system], mml, record_steps=False)
            tbt, delay = p99_tbt_s(r), float(np.nanmedian(r.records.queue_s))
            rows.append({"system": system, "rate_req_s": rate, "p99_tbt_s": tbt,
                         "median_scheduling_delay_s": delay, "meets": tbt <= 0.1 and delay <= 2.0})
            return tbt <= 0.1 and delay <= 2.0

        return ok

    iters = 5 if quick else 7
    cap = {k: capacity(meets(k), 0.25, 8.0, iters) for k in engines}
    for k, v in cap.items():
        rows.append({"system": k, "capacity_req_s": v})
    return Outcome({"capacity": cap["sarathi"] / cap["vllm"]}, rows,
                   [f"capacity at P99 TBT <= 100 ms (req/s): vLLM {cap['vllm']:.2f}, "
                    f"Sarathi-Serve {cap['sarathi']:.2f}"])
