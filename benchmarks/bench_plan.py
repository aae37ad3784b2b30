"""Benchmark: `servesim plan` over 200+ simulated deployments of Llama-3.1-70B on H100/H200/B200
(up to 32 GPUs, colocated and disaggregated) serving the bundled Azure 2023 conversation
trace at a target rate, in this process, on a local process pool of 1 and 2 workers, and on
a local Ray cluster; with the per-candidate overhead broken down.

The trace is cut to its first ``--requests`` requests (500 by default) and its timestamps
scaled to ``--rate`` (16 requests/s: 217 of 792 candidates survive the bounds and are
simulated). Each plan starts without a result cache, so every survivor is simulated; each
measurement is the median of ``--repeats`` plans.

- **wall**: the whole plan (enumeration, pruning, simulations, verdicts); **cpu**: this
  process's and its workers' (the pool's processes, or every process of the Ray cluster,
  read from ``/proc`` before it stops).
- **per candidate**, measured in this process (``inprocess``, one plan with timers around
  the stages ``simulate`` calls): reading the scenario's JSON, resolving the deployments
  (of which building the step models), loading the workload, the engine, the summary; and
  the cache's key and SQLite write (a plan with ``cache_dir``).
- **start**: a fresh pool's workers (fork) until each has run one task, and ``ray.init``
  until a task on each CPU has returned (Ray's start is not in its plans' wall: the cluster
  is started once and the plans run on it, as ``--address`` does).
- **overhead**: what a pool adds per candidate, ``workers x wall`` less the time its
  workers spent in ``run_candidate``, over the candidates.

    python benchmarks/bench_plan.py                      # inprocess, 1 and 2 workers, Ray
    python benchmarks/bench_plan.py --backends process --workers 2 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

MODEL, GPUS = "Llama-3.1-70B", ["H100-SXM", "H200", "B200"]


def _plan_inputs(requests: int, rate: float, max_gpus: int):  # noqa: ANN202
    from servesim.planner.space import plan_from_options

    return plan_from_options(
        MODEL,
        GPUS,
        max_gpus,
        rate=rate,
        trace="builtin:azure_conv",
        ttft_s=2.0,
        tpot_s=0.05,
        num_requests=requests,
    )


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped workers
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def _descendants_cpu_s() -> float:
    """CPU seconds of the live processes below this one (Linux ``/proc``; 0 elsewhere)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parent: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parent[int(d)] = int(fields[1])
                cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError):
        return 0.0
    me, total = os.getpid(), 0.0
    for pid in cpu:
        p = parent.get(pid, 0)
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += cpu[pid]
    return total


def plan_once(backend: str, workers: int, args: argparse.Namespace, cache_dir: str | None = None):  # noqa: ANN201
    from servesim.planner.search import run_plan

    base, plan = _plan_inputs(args.requests, args.rate, args.max_gpus)
    t0, c0, d0 = time.perf_counter(), _own_cpu_s(), _descendants_cpu_s()
    result = run_plan(base, plan, backend=backend, workers=workers, cache_dir=cache_dir)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    cpu = _own_cpu_s() - c0 + max(0.0, _descendants_cpu_s() - d0)
    return wall, cpu, result


class Stages:
    """Wall and CPU seconds spent in the functions a plan calls, by stage (wrapped in this
    process); a stage inside another is counted in both, named after its parent."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[str] = []
        self._undo: list[Callable[[], None]] = []

    def wrap(self, module: Any, name: str, stage: str) -> None:
        fn = getattr(module, name)

        def timed(*a: Any, **k: Any) -> Any:
            key = f"{self._stack[-1]}: {stage}" if self._stack else stage
            self._stack.append(stage)
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                self._stack.pop()
                self.wall[key] += time.perf_counter() - t
                self.cpu[key] += time.process_time() - c
                self.calls[key] += 1

        own = name in vars(module)  # else inherited (a pydantic classmethod): delete the wrapper
        setattr(module, name, timed)
        self._undo.append(lambda: setattr(module, name, fn) if own else delattr(module, name))

    def __enter__(self) -> Stages:
        import servesim.config as config
        import servesim.deployment as deployment
        import servesim.metrics.summary as summary
        import servesim.perf.factory as factory
        import servesim.planner.backends as backends
        import servesim.planner.cache as cache
        import servesim.planner.search as search
        import servesim.workload as workload

        self.wrap(backends, "run_candidate", "candidate")
        self.wrap(config.Scenario, "model_validate_json", "scenario JSON")
        self.wrap(deployment, "resolve_deployment", "deployments")
        self.wrap(factory, "build_step_model", "step models")
        self.wrap(workload, "load_workload", "workload")
        self.wrap(summary, "summarize", "summary")
        self.wrap(search, "prune", "pruning")
        self.wrap(search, "scenario_key", "cache key")
        self.wrap(cache.ResultCache, "put", "cache write")
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()


def _noop(_: int) -> int:
    import servesim.sim  # noqa: F401 (what a worker imports for its first candidate)

    return os.getpid()


def pool_start_s(workers: int) -> float:
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_noop, range(workers)))
    return time.perf_counter() - t0


def ray_start(workers: int) -> float:
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(_noop)
    ray.get([remote.remote(i) for i in range(workers)])
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=500, help="first N requests of the trace")
    ap.add_argument("--rate", type=float, default=16.0, help="target arrival rate, requests/s")
    ap.add_argument("--max-gpus", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="processes / Ray CPUs of the parallel runs")
    ap.add_argument(
        "--backends",
        default="inprocess,process1,process,ray",
        help="comma-separated: inprocess (with the breakdown), process1 (a pool of 1), process, ray",
    )
    ap.add_argument("--no-ray", action="store_true", help="leave Ray out of --backends")
    args = ap.parse_args()
    todo = [b for b in args.backends.split(",") if not (args.no_ray and b == "ray")]
    import servesim

    print(
        f"servesim {'compiled' if servesim.compiled() else 'pure-Python'} engine; {MODEL} on "
        f"{'/'.join(GPUS)}, up to {args.max_gpus} GPUs, {args.requests} requests at {args.rate:g}/s; "
        f"medians of {args.repeats}"
    )
    rows: list[tuple[str, list[float], list[float], Any]] = []
    results: dict[str, Any] = {}
    st = Stages()
    task_s: dict[str, float] = {}
    for name in todo:
        backend = {"process1": "process"}.get(name, name)
        workers = {"inprocess": 1, "process1": 1}.get(name, args.workers)
        walls, cpus = [], []
        if name == "ray":
            print(f"ray start ({workers} CPUs, one task each): {ray_start(workers):.2f} s")
        elif name == "process":
            print(f"process pool start ({workers} workers, one task each): {pool_start_s(workers):.2f} s")
        for i in range(args.repeats):
            if name == "inprocess" and i == 0:
                with tempfile.TemporaryDirectory() as d, st:
                    wall, cpu, result = plan_once(backend, workers, args, cache_dir=d)
            else:
                wall, cpu, result = plan_once(backend, workers, args)
            walls.append(wall)
            cpus.append(cpu)
        if name == "ray":
            import ray

            ray.shutdown()
        results[name] = result
        task_s[name] = sum(e.wall_s for e in result.evaluated)
        rows.append((name, walls, cpus, result))
    print(
        f"{'backend':>10} {'workers':>7} {'simulated':>9} {'wall s':>7} {'cpu s':>7} {'runs (wall)':>24} "
        f"{'overhead ms/cand':>16}"
    )
    for name, walls, cpus, result in rows:
        workers = {"inprocess": 1, "process1": 1}.get(name, args.workers)
        n = result.counts()["simulated"]
        wall = statistics.median(walls)
        over = (workers * wall - task_s[name]) / n * 1e3
        print(
            f"{name:>10} {workers:>7} {n:>9} {wall:>7.1f} {statistics.median(cpus):>7.1f} "
            f"{', '.join(f'{w:.1f}' for w in walls):>24} {over:>16.0f}"
        )
    if "inprocess" in results:
        n = results["inprocess"].counts()["simulated"]
        inner = (
            "candidate: scenario JSON",
            "candidate: deployments",
            "candidate: workload",
            "candidate: summary",
        )
        engine_wall = st.wall["candidate"] - sum(st.wall[k] for k in inner)
        engine_cpu = st.cpu["candidate"] - sum(st.cpu[k] for k in inner)
        print(f"per candidate (inprocess, first plan, with a cache, {n} candidates): ms wall, ms CPU, calls")
        for k in sorted(st.wall, key=lambda k: (not k.startswith("candidate"), k)):
            print(f"  {k:<42} {st.wall[k] / n * 1e3:8.1f} {st.cpu[k] / n * 1e3:8.1f} {st.calls[k]:6}")
        print(
            f"  {'candidate: engine (the rest)':<42} {engine_wall / n * 1e3:8.1f} {engine_cpu / n * 1e3:8.1f}"
        )
    c = results[todo[0]].counts()
    print(
        f"{c['candidates']} candidates, {c['pruned']} pruned {c['pruned_by']}, {c['simulated']} simulated, "
        f"{c['meeting_slo']} meet the SLOs"
    )
    first = results[todo[0]]
    for name, r in results.items():
        same = [(e.candidate.id, e.summary) for e in r.evaluated] == [
            (e.candidate.id, e.summary) for e in first.evaluated
        ]
        print(f"{name}: summaries identical to {todo[0]}'s: {same}")


if __name__ == "__main__":
    main()
