"""Benchmark: a fleet's day at scale. The default scenario (Llama-3.1-8B on one H100, the
bundled Azure conversation hour, 19,366 requests) with the hour repeated back to back
until N requests, and the hour at R times its rate on a pool of R replicas (round-robin).

Each measurement runs in a fresh subprocess (peak RSS, ``resource.getrusage``, is its own),
repeated ``--repeats`` times; the table shows medians. Before the large runs the script
times a baseline, the plain hour at 1x (``--baseline-repeats`` runs), in the same session:
the ratio of each run's CPU time to its ("x base") is what compares across machines and
loads. "wall" and "cpu" are the simulation (engine and summary), after the workload is built.

    python benchmarks/bench_scale.py --requests 1000000              # 1M requests
    python benchmarks/bench_scale.py --requests 10000000 --repeats 1 # 10M requests
    python benchmarks/bench_scale.py --replicas 16,64                 # pools of 16 and 64
    python benchmarks/bench_scale.py --replicas 16,64 --without-cut-runs  # and as before cut runs
    python benchmarks/bench_scale.py --replicas 16,64 --router random  # routed at random
    python benchmarks/bench_scale.py --requests 1000000 --steps      # keep the step series
    python benchmarks/bench_scale.py --requests 1000000 --stream-steps  # write it to Parquet

Without ``--steps`` the runs keep no per-step series (``run.record_steps=false``), as a long
run should; the latency percentiles then come from the summary's sketch past 2M samples.
``--stream-steps`` records the series and writes it to a Parquet file in a temporary
directory in row groups as the run goes (``metrics.step_stream.StreamedStepSeries``, what a
run with an output directory does), the file finished within the timed part.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

HOUR_S = 3600.0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def repeated_hour(wl, num_requests: int):  # noqa: ANN001, ANN201
    """The hour's requests repeated back to back (hour k shifted by k * 3600 s), cut at N."""
    import numpy as np

    from servesim.workload.base import Workload

    n = len(wl)
    k = -(-num_requests // n)
    arrival = (wl.arrival_s[None, :] + HOUR_S * np.arange(k)[:, None]).ravel()[:num_requests]
    return Workload(
        arrival_s=arrival,
        num_prompt_tokens=np.tile(wl.num_prompt_tokens, k)[:num_requests],
        num_output_tokens=np.tile(wl.num_output_tokens, k)[:num_requests],
        source=f"{wl.source} x{k}",
        meta=wl.meta,
    )


def one_replica(num_requests: int, steps: bool, stream: bool = False) -> dict:
    import servesim
    from servesim.config import load_scenario
    from servesim.deployment import resolve_deployment
    from servesim.metrics.records import Result
    from servesim.metrics.summary import summarize
    from servesim.sim import run_engine
    from servesim.workload import load_workload

    steps = steps or stream
    sc = load_scenario(None, [f"run.record_steps={'true' if steps else 'false'}"])
    tmp = series = None
    if stream:
        import tempfile

        from servesim.metrics.step_stream import StreamedStepSeries

        tmp = tempfile.TemporaryDirectory()
        series = StreamedStepSeries(f"{tmp.name}/steps.parquet")
    dep = resolve_deployment(sc)
    wl = load_workload(sc.workload, sc.run.seed)
    if num_requests != len(wl):
        wl = repeated_hour(wl, num_requests)
    t0, c0 = time.perf_counter(), _cpu_s()
    run = run_engine(
        wl,
        dep.engine,
        dep.perf,
        dep.plan.num_gpu_blocks,
        dep.plan.max_model_len,
        num_gpus=dep.num_gpus,
        record_steps=steps,
        kv_bytes_per_block=dep.plan.kv_bytes_per_block,
        step_series=series,
    )
    t1, c1 = time.perf_counter(), _cpu_s()
    rss_engine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = Result(
        scenario=sc,
        records=run.records,
        steps=run.steps,
        itl=run.itl,
        replicas=[run.totals],
        end_s=run.end_s,
        gpu=dep.gpu,
        deployments=[dep],
    )
    summary = summarize(result)
    file_mb = 0.0
    if series is not None:
        import os

        file_mb = os.path.getsize(series.finish()) / 1e6
    t2 = time.perf_counter()
    if tmp is not None:
        tmp.cleanup()
    return {
        "steps_file_mb": file_mb,
        "requests": len(wl),
        "wall_s": t2 - t0,
        "cpu_s": _cpu_s() - c0,
        "engine_s": t1 - t0,
        "engine_cpu_s": c1 - c0,
        "summary_s": t2 - t1,
        "steps": run.totals.num_steps,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_engine_mb": rss_engine,
        "method": summary["latency"].get("method", "exact"),
        "itl_p99_s": summary["latency"]["itl_s"]["p99"],
        "compiled": servesim.compiled(),
    }


def pool(
    replicas: int, rate_scale: float, steps: bool, cut_runs: bool = True, router: str = "round_robin"
) -> dict:
    """The hour at ``rate_scale`` x (0: ``replicas`` x) on a pool of ``replicas`` engines.
    As for the baseline, the trace is read and the deployment resolved before the timed part
    (both are cached: ``servesim.simulate`` then finds them). ``cut_runs=False``: the loop
    as before cut runs (``cluster.CUT_RUNS``), every arrival ending every replica's run."""
    import servesim
    import servesim.cluster.cluster as cluster_mod
    from servesim.config import load_scenario, scenario_from_dict
    from servesim.deployment import resolve_deployment
    from servesim.workload import load_workload

    cluster_mod.CUT_RUNS = cut_runs
    sc = load_scenario(
        None,
        [f"workload.rate_scale={rate_scale or replicas}", f"run.record_steps={'true' if steps else 'false'}"],
    )
    d = sc.model_dump(exclude_unset=True)
    d["cluster"] = {"pools": [{"name": "p", "num_replicas": replicas}], "router": router}
    sc = scenario_from_dict(d)
    resolve_deployment(sc)
    load_workload(sc.workload, sc.run.seed)
    t0, c0 = time.perf_counter(), _cpu_s()
    result = servesim.simulate(sc)
    return {
        "requests": len(result.records),
        "wall_s": time.perf_counter() - t0,
        "cpu_s": _cpu_s() - c0,
        "steps": sum(r.num_steps for r in result.replicas),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "method": result.summary["latency"].get("method", "exact"),
        "compiled": servesim.compiled(),
    }


def _run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", default="", help="comma-separated request counts (one replica)")
    ap.add_argument("--replicas", default="", help="comma-separated pool sizes")
    ap.add_argument(
        "--rate-scale",
        type=float,
        default=0.0,
        help="the pools' rate scale (default: the number of replicas)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-repeats", type=int, default=3)
    ap.add_argument("--steps", action="store_true", help="keep the per-step series")
    ap.add_argument("--stream-steps", action="store_true", help="write the step series to Parquet as it goes")
    ap.add_argument(
        "--without-cut-runs",
        action="store_true",
        help="also time the pools as before cut runs (every arrival ends every replica's run)",
    )
    ap.add_argument("--router", default="round_robin", help="the pools' router (round_robin, random, ...)")
    ap.add_argument("--no-cut", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        kind, n = a.one[0], int(a.one[1])
        res = (
            one_replica(n, a.steps, a.stream_steps)
            if kind == "requests"
            else pool(n, a.rate_scale, a.steps, not a.no_cut, a.router)
        )
        print(json.dumps(res))
        return
    flags = (["--steps"] if a.steps else []) + (["--stream-steps"] if a.stream_steps else [])
    jobs = [("requests", int(float(x))) for x in a.requests.split(",") if x] + [
        ("replicas", int(x)) for x in a.replicas.split(",") if x
    ]
    base = [_run(["--one", "requests", "19366", *flags]) for _ in range(a.baseline_repeats)]
    base_cpu = statistics.median(r["cpu_s"] for r in base)
    rows = [("baseline: the hour", 19366, base)]
    for kind, n in jobs:
        for cut in (True, False) if kind == "replicas" and a.without_cut_runs else (True,):
            extra = [] if cut else ["--no-cut"]
            runs = [
                _run(
                    [
                        "--one",
                        kind,
                        str(n),
                        "--rate-scale",
                        str(a.rate_scale),
                        "--router",
                        a.router,
                        *flags,
                        *extra,
                    ]
                )
                for _ in range(a.repeats)
            ]
            name = (
                f"{n:,} requests"
                if kind == "requests"
                else f"pool of {n} (hour x{a.rate_scale or n:g}, {a.router})"
            )
            rows.append((name if cut else f"{name}, no cut", n, runs))
    print(
        f"servesim, {'compiled' if base[0]['compiled'] else 'pure-Python'} engine; step series "
        f"{'streamed to Parquet' if a.stream_steps else 'kept' if a.steps else 'off'}; medians"
    )
    print(
        f"{'run':>28} {'runs':>4} {'requests':>10} {'wall s':>7} {'cpu s':>7} {'x base':>7} "
        f"{'steps':>11} {'peak MB':>8}  method"
    )
    for name, _, runs in rows:
        m = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
        print(
            f"{name:>28} {len(runs):>4} {runs[0]['requests']:>10,} {m['wall_s']:>7.2f} {m['cpu_s']:>7.2f} "
            f"{m['cpu_s'] / base_cpu:>7.2f} {runs[0]['steps']:>11,} {m['peak_rss_mb']:>8.0f}  "
            f"{runs[0]['method']}"
        )


if __name__ == "__main__":
    main()
