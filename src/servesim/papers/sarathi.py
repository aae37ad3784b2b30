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

The full run adds the artifact's Yi-34B (yi34_strict.yml): TP2 on two A100s, strict P99 TBT
<= 200 ms, the same schedulers and trace; the paper: up to 3.7x. (The artifact's A100s are
80 GB PCIe cards, pairwise NVLinked; servesim's catalog A100-80GB is the SXM card.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.papers.base import Outcome
from servesim.papers.common import capacity, p99_tbt_s, trace_like_lengths

#: 01-ai/Yi-34B's config.json (the architecture; servesim has no preset of it), but with
#: max_position_embeddings 8192 instead of 4096: the artifact runs it at max_seq_len 8192
#: (sarathi's engine does not check), which servesim, like vLLM, would refuse.
YI_34B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 7168,
    "intermediate_size": 20480,
    "num_attention_heads": 56,
    "num_hidden_layers": 60,
    "num_key_value_heads": 8,
    "vocab_size": 64000,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 5000000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}

#: The artifact's runs (osdi-experiments/figure-5-6/*_strict.yml and its README): model, TP
#: degree, the strict P99 TBT SLO, and the rates the capacity search brackets.
RUNS = {"Mistral-7B": (1, 0.1, 0.25, 8.0), "Yi-34B": (2, 0.2, 0.1, 4.0)}


def capacities(name: str, n: int, iters: int, rows: list[dict]) -> dict[str, float]:
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import from_hf_config, load_model
    from servesim.config import EngineConfig, ParallelConfig
    from servesim.deployment import resolved_engine
    from servesim.perf.memory import plan_memory
    from servesim.perf.roofline import RooflinePerfModel
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    tp, tbt_slo, lo, hi = RUNS[name]
    model = from_hf_config(YI_34B, "01-ai/Yi-34B") if name == "Yi-34B" else load_model(name)
    gpu = get_gpu("A100-80GB")
    perf = RooflinePerfModel(model, gpu, tp=tp)
    mml = 8192
    rng = np.random.default_rng(2)
    unit_arrivals = np.cumsum(rng.exponential(1.0, n))
    prompt, output = trace_like_lengths(rng, n, (1730, 5696), (415, 834), mml)
    engines = {
        "vllm": EngineConfig(
            policy="vllm_v0", max_num_seqs=128, max_num_batched_tokens=mml, max_model_len=mml
        ),
        "sarathi": EngineConfig(
            policy="sarathi", max_num_seqs=128, max_num_batched_tokens=512, max_model_len=mml
        ),
    }
    par = ParallelConfig(tensor_parallel_size=tp)
    blocks = {
        k: plan_memory(model, gpu, resolved_engine(e, model, gpu, par), par).num_gpu_blocks
        for k, e in engines.items()
    }

    def meets(system: str) -> Callable[[float], bool]:
        def ok(rate: float) -> bool:
            r = run_engine(
                Workload(unit_arrivals / rate, prompt, output),
                engines[system],
                perf,
                blocks[system],
                mml,
                num_gpus=tp,
                record_steps=False,
            )
            tbt, delay = p99_tbt_s(r), float(np.nanmedian(r.records.queue_s))
            good = tbt <= tbt_slo and delay <= 2.0
            rows.append(
                {
                    "model": name,
                    "system": system,
                    "rate_req_s": rate,
                    "p99_tbt_s": tbt,
                    "median_scheduling_delay_s": delay,
                    "meets": good,
                }
            )
            return good

        return ok

    cap = {k: capacity(meets(k), lo, hi, iters) for k in engines}
    for k, v in cap.items():
        rows.append({"model": name, "system": k, "capacity_req_s": v})
    return cap


def run(quick: bool) -> Outcome:
    """Mistral-7B (--quick: 1,000 requests, a coarser search); the full run adds Yi-34B on two A100s."""
    rows: list[dict] = []
    values, notes = {}, []
    for name in ("Mistral-7B",) if quick else tuple(RUNS):
        cap = capacities(name, 1000 if quick else 2048, 5 if quick else 7, rows)
        key = "capacity" if name == "Mistral-7B" else "capacity_yi34b"
        values[key] = cap["sarathi"] / cap["vllm"] if cap["vllm"] else float("inf")
        notes.append(
            f"{name}: capacity at P99 TBT <= {RUNS[name][1] * 1e3:.0f} ms (req/s): "
            f"vLLM {cap['vllm']:.2f}, Sarathi-Serve {cap['sarathi']:.2f}"
        )
    return Outcome(values, rows, notes)
