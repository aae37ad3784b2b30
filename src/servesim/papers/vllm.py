"""vLLM (Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP'23), Sec. 6.2 and Fig. 12: on ShareGPT, vLLM sustains 1.7-2.7x the
request rate of Orca (Oracle) and 2.7-8x that of Orca (Max) at the same normalized latency
(mean end-to-end latency / output tokens), over OPT-13B/66B/175B.

Here: the paper's Table 1 models and GPUs: OPT-13B on one A100-40GB (the A100-80GB with 40 GB),
OPT-66B on 4 A100-40GB (TP4), OPT-175B on 8 A100-80GB (TP8); --quick runs OPT-13B only.
max_model_len 2048, ShareGPT's mean lengths (Fig. 11: 161 in, 338 out; lognormal, sigma 0.9,
clipped to 1024), Poisson arrivals; capacity = the largest rate with mean normalized latency
<= 0.1 s/token (Fig. 12's knee). vLLM (paged, preemption) against Orca reserving
max_model_len (Max) or prompt + true output (Oracle) per request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from servesim.papers.base import Outcome
from servesim.papers.common import capacity, lognormal_lengths

if TYPE_CHECKING:
    from servesim.config.engine import OrcaReservation, Policy

#: The paper's Table 1: each model's GPUs (TP degree, memory per GPU), and the rates (req/s)
#: the capacity search brackets.
MODELS = {"OPT-13B": (1, 40e9, 0.2, 16.0), "OPT-66B": (4, 40e9, 0.05, 8.0), "OPT-175B": (8, 80e9, 0.05, 8.0)}


def capacities(model_name: str, quick: bool, rows: list[dict]) -> dict[str, float]:
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import EngineConfig, ParallelConfig, resolve_engine
    from servesim.perf.memory import plan_memory
    from servesim.perf.roofline import RooflinePerfModel
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    tp, mem, lo, hi = MODELS[model_name]
    model = load_model(model_name)
    gpu = dataclasses.replace(get_gpu("A100-80GB"), name=f"A100-{mem / 1e9:.0f}GB", mem_bytes=mem)
    mml = 2048
    engine = resolve_engine(EngineConfig(max_model_len=mml), gpu.mem_bytes, gpu.name, mml)
    blocks = plan_memory(model, gpu, engine, ParallelConfig(tensor_parallel_size=tp)).num_gpu_blocks
    perf = RooflinePerfModel(model, gpu, tp=tp)
    rng = np.random.default_rng(1)
    n = 200 if quick else 1000
    unit_arrivals = np.cumsum(rng.exponential(1.0, n))
    prompt = lognormal_lengths(rng, n, 107, 0.9, 4, 1024)
    output = lognormal_lengths(rng, n, 225, 0.9, 4, 1024)

    def meets(system: str, policy: Policy, reservation: OrcaReservation = "max") -> Callable[[float], bool]:
        def ok(rate: float) -> bool:
            wl = Workload(unit_arrivals / rate, prompt, output)
            cfg = EngineConfig(
                policy=policy,
                max_num_seqs=256,
                max_model_len=mml,
                orca_reservation=reservation,
            )
            rec = run_engine(wl, cfg, perf, blocks, mml, num_gpus=tp, record_steps=False).records
            norm = float(np.nanmean(rec.e2e_s / rec.num_output_tokens))
            rows.append(
                {
                    "model": model_name,
                    "system": system,
                    "rate_req_s": rate,
                    "normalized_latency_s_per_token": norm,
                    "meets": norm <= 0.1,
                }
            )
            return norm <= 0.1

        return ok

    iters = 5 if quick else 7
    cap = {
        "vllm": capacity(meets("vllm", "vllm_v1"), lo, hi, iters),
        "orca_max": capacity(meets("orca_max", "orca"), lo, hi, iters),
        "orca_oracle": capacity(meets("orca_oracle", "orca", "oracle"), lo, hi, iters),
    }
    for k, v in cap.items():
        rows.append({"model": model_name, "system": k, "capacity_req_s": v})
    return cap


def run(quick: bool) -> Outcome:
    """OPT-13B (--quick: OPT-13B only, 200 requests); the full run adds OPT-66B and OPT-175B."""
    rows: list[dict] = []
    values, notes = {}, []
    for name in ("OPT-13B",) if quick else tuple(MODELS):
        cap = capacities(name, quick, rows)
        suffix = "" if name == "OPT-13B" else "_" + name.split("-")[1].lower()
        for key in ("orca_oracle", "orca_max"):
            values[f"vs_{key}{suffix}"] = cap["vllm"] / cap[key] if cap[key] else float("inf")
        notes.append(
            f"{name} capacity (req/s): vLLM {cap['vllm']:.2f}, Orca (Max) {cap['orca_max']:.2f}, "
            f"Orca (Oracle) {cap['orca_oracle']:.2f}"
        )
    return Outcome(values, rows, notes)
