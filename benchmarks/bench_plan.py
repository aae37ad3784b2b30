"""Benchmark: `servesim plan` over several hundred candidate deployments of Llama-3.1-70B on
H100/H200/B200 (up to 16 GPUs, colocated and disaggregated) serving the bundled Azure 2023
conversation trace at a target rate, on the local process pool and on a local Ray cluster.

The trace is cut to its first ``--requests`` requests (500 by default: about two minutes of
traffic at 4x its recorded rate) so that one candidate's simulation takes well under a
second; the rate is set by scaling the trace's timestamps. Each repeat starts without a
cache, so every surviving candidate is simulated; "wall" is the whole plan (enumeration,
pruning, simulations, verdicts), the median of ``--repeats`` runs. The Ray run must give
the same summaries, candidate by candidate, as the process pool.

    python benchmarks/bench_plan.py                  # process pool, then Ray
    python benchmarks/bench_plan.py --no-ray --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
import time


def plan_once(backend: str, requests: int, rate: float, workers: int | None):
    from servesim.planner.search import run_plan
    from servesim.planner.space import plan_from_options

    base, plan = plan_from_options(
        "Llama-3.1-70B",
        ["H100-SXM", "H200", "B200"],
        16,
        rate=rate,
        trace="builtin:azure_conv",
        ttft_s=2.0,
        tpot_s=0.05,
        num_requests=requests,
    )
    t0 = time.perf_counter()
    result = run_plan(base, plan, backend=backend, workers=workers)  # type: ignore[arg-type]
    return time.perf_counter() - t0, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500, help="first N requests of the trace")
    ap.add_argument("--rate", type=float, default=24.0, help="target arrival rate, requests/s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="processes / Ray CPUs (default: all cores)")
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    backends = ["process"] + ([] if args.no_ray else ["ray"])
    results = {}
    for backend in backends:
        walls = []
        for _ in range(args.repeats):
            wall, result = plan_once(backend, args.requests, args.rate, args.workers)
            walls.append(wall)
        results[backend] = result
        c = result.counts()
        print(
            f"{backend:8s} wall median {statistics.median(walls):6.1f} s (runs: "
            f"{', '.join(f'{w:.1f}' for w in walls)}); {c['candidates']} candidates, {c['pruned']} pruned "
            f"{c['pruned_by']}, {c['simulated']} simulated, {c['meeting_slo']} meet the SLOs"
        )
    best = results["process"].ranked()
    print(
        "best:",
        best[0].candidate.label() if best else "none",
        f"({best[0].metrics['usd_per_hour']:.2f} $/h)" if best else "",
    )
    if "ray" in results:
        same = [(e.candidate.id, e.summary) for e in results["ray"].evaluated] == [
            (e.candidate.id, e.summary) for e in results["process"].evaluated
        ]
        print("ray results identical to the process pool's:", same)


if __name__ == "__main__":
    main()
