"""Benchmark: a long synthetic run in bounded memory (no per-step series).

Llama-3.1-8B on one H100 (vLLM 0.32 defaults), Poisson arrivals at 5 req/s with lengths
shaped like the Azure conversation trace (lognormal, mean 1,155 / 211 tokens), N requests.
Prints wall time, simulated requests per wall second and peak RSS (this process).

    python benchmarks/bench_streaming.py --num-requests 1000000
"""

from __future__ import annotations

import argparse
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=5.0)
    a = ap.parse_args()

    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import EngineConfig, LengthDist, ParallelConfig, SyntheticWorkload, resolve_engine
    from servesim.perf.memory import plan_memory
    from servesim.perf.roofline import RooflinePerfModel
    from servesim.sim import run_engine
    from servesim.workload import load_workload

    t0 = time.perf_counter()
    wl = load_workload(
        SyntheticWorkload(
            num_requests=a.num_requests,
            arrival={"process": "poisson", "rate": a.rate},
            prompt_len=LengthDist(kind="lognormal", mean=1155, std=1100, max=7000),
            output_len=LengthDist(kind="lognormal", mean=211, std=250, max=1500),
        )
    )
    model, gpu = load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM")
    engine = resolve_engine(EngineConfig(max_model_len=8192), gpu.mem_bytes, gpu.name, 8192)
    plan = plan_memory(model, gpu, engine, ParallelConfig())
    t1 = time.perf_counter()
    run = run_engine(
        wl, engine, RooflinePerfModel(model, gpu), plan.num_gpu_blocks, plan.max_model_len, record_steps=False
    )
    wall = time.perf_counter() - t1
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    done = int((run.records.status == 0).sum())
    import servesim

    print(f"servesim {servesim.__version__}, {'compiled' if servesim.compiled() else 'pure-Python'} engine")
    print(
        f"{a.num_requests:,} requests ({done:,} finished), {run.end_s / 3600:.1f} simulated hours: "
        f"workload {t1 - t0:.1f} s, simulation {wall:.1f} s, {a.num_requests / wall:,.0f} req/s, "
        f"peak RSS {rss_mb:,.0f} MB, {run.totals.num_steps:,} steps"
    )


if __name__ == "__main__":
    main()
