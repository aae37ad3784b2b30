"""Benchmark: the full Azure 2023 conversation trace (19,366 requests, one hour) on one
Llama-3.1-8B / H100 replica, at 1x and 10x the recorded rate, fast engine vs reference.

Each measurement runs in a fresh subprocess (so peak RSS is that run's own), repeated
``--repeats`` times; the table shows medians. "wall" is ``servesim.simulate`` end to end
(trace parse, memory plan, engine, summary); "parse" is the trace parse alone, timed
before it, and "engine" the difference. The fast/reference ratio compares runs made
by this same script in the same session, on the same machine state.

    python benchmarks/bench_azure.py                 # fast and reference, 1x and 10x
    python benchmarks/bench_azure.py --no-reference  # fast only
    # the roofline step times (default: the scenario's, measured kernels on the H100)
    python benchmarks/bench_azure.py --perf-model roofline
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def one(engine: str, rate_scale: float, perf_model: str = "default") -> dict:
    import servesim
    from servesim.config import load_scenario
    from servesim.workload import load_workload

    chosen = [] if perf_model == "default" else [f"hardware.perf_model={perf_model}"]
    sc = load_scenario(
        None,
        [
            f"workload.rate_scale={rate_scale}",
            *chosen,
            f"run.reference={'true' if engine == 'reference' else 'false'}",
        ],
    )
    t0 = time.perf_counter()
    load_workload(sc.workload)  # the trace parse alone (simulate parses it again)
    parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = servesim.simulate(sc)
    wall = time.perf_counter() - t0
    n = len(result.records)
    return {
        "engine": engine,
        "rate_scale": rate_scale,
        "wall_s": wall,
        "parse_s": parse,
        "engine_s": wall - parse,
        "requests": n,
        "steps": len(result.steps),
        "sim_req_per_s": n / wall,
        "simulated_s": result.end_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ttft_p99_s": result.summary["latency"]["ttft_s"]["p99"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--rates", default="1,10")
    ap.add_argument("--perf-model", choices=("default", "roofline", "kernels"), default="default")
    ap.add_argument("--one", nargs=2, metavar=("ENGINE", "RATE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], float(a.one[1]), a.perf_model)))
        return
    engines = ["fast"] + ([] if a.no_reference else ["reference"])
    rows = []
    for rate in [float(x) for x in a.rates.split(",")]:
        med = {}
        for engine in engines:
            runs = []
            for _ in range(a.repeats if engine == "fast" else max(1, a.repeats // 3)):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", engine, str(rate), "--perf-model", a.perf_model],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            m = {
                k: statistics.median(r[k] for r in runs)
                for k in ("wall_s", "parse_s", "engine_s", "sim_req_per_s", "peak_rss_mb")
            }
            m.update(steps=runs[0]["steps"], requests=runs[0]["requests"], n=len(runs))
            med[engine] = m
            rows.append((rate, engine, m))
        if "reference" in med:
            ref, fast = med["reference"], med["fast"]
            print(
                f"rate x{rate:g}: reference/fast ratio {ref['wall_s'] / fast['wall_s']:.1f}x "
                f"(without the trace parse: {ref['engine_s'] / fast['engine_s']:.1f}x)"
            )
    import servesim

    print(f"servesim {servesim.__version__}, {'compiled' if servesim.compiled() else 'pure-Python'} engine")
    print(
        f"{'rate':>5} {'engine':>9} {'runs':>4} {'wall s':>7} {'parse s':>7} {'engine s':>8} "
        f"{'sim req/s':>10} {'steps':>8} {'peak MB':>8}"
    )
    for rate, engine, m in rows:
        print(
            f"{rate:>5g} {engine:>9} {m['n']:>4} {m['wall_s']:>7.2f} {m['parse_s']:>7.2f} "
            f"{m['engine_s']:>8.2f} {m['sim_req_per_s']:>10,.0f} {m['steps']:>8,} {m['peak_rss_mb']:>8.0f}"
        )


if __name__ == "__main__":
    main()
