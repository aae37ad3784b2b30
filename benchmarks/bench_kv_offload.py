"""Benchmark: what KV offloading costs the simulator. The bundled first 1,000 requests of the
Mooncake conversation trace (examples/mooncake_prefix_cache.yaml: Llama-3.1-70B, TP 4 on
H100s) run four ways in one process: the lazy engine (offloading off), the step-by-step
reference engine (off), and offloading with the native and LMCache backends (1 TiB), which
run on the reference engine. Prints each one's median CPU seconds (``time.process_time``)
over ``--repeat`` runs and its ratio to the lazy engine's.

    python benchmarks/bench_kv_offload.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_1000.jsonl.gz"
WAYS = {
    "lazy (off)": [],
    "reference (off)": ["run.reference=true"],
    "native 1 TiB": ["engine.kv_offload.backend=native", "engine.kv_offload.cpu_size_gib=1024"],
    "lmcache 1 TiB": ["engine.kv_offload.backend=lmcache", "engine.kv_offload.cpu_size_gib=1024"],
}


def main() -> None:
    from servesim import simulate
    from servesim.config import load_scenario

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    example = ROOT / "examples" / "mooncake_prefix_cache.yaml"
    cpu: dict[str, list[float]] = {k: [] for k in WAYS}
    for _ in range(args.repeat):
        for name, sets in WAYS.items():
            sc = load_scenario(example, [f"workload.path={TRACE}", *sets])
            t0 = time.process_time()
            simulate(sc)
            cpu[name].append(time.process_time() - t0)
    base = statistics.median(cpu["lazy (off)"])
    for name, times in cpu.items():
        med = statistics.median(times)
        print(f"{name:16s} {med:7.2f} s CPU (median of {len(times)})  {med / base:5.2f}x")


if __name__ == "__main__":
    main()
