"""``simulate(scenario) -> Result``: one simulation as a pure function.

Resolution order: scenario -> deployment (``servesim.deployment``: model and GPU specs,
engine, memory plan, engine checks, links, perf model; the same function for each pool of
a cluster) -> workload -> engine run -> records -> summary. Nothing here touches files
except reading the scenario's inputs; outputs are written by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.config import EngineConfig, Scenario, load_scenario, resolve_engine, scenario_from_dict
from servesim.deployment import check_budget  # noqa: F401 (re-exported: its old home)
from servesim.engine.arrivals import (
    ArrivalFeeder,
    ClosedLoopFeeder,
    done_when_seen,
    iter_requests,
    rejection_reason,
)
from servesim.engine.build import build_replica, closed_loop_feeder
from servesim.engine.dependencies import DependencyFeeder
from servesim.engine.events import EventLoop
from servesim.engine.lazy import LazyScheduler
from servesim.engine.policy_base import PolicyScheduler
from servesim.engine.request import ReqStatus, Request
from servesim.engine.tenants import TenantGate, TenantSetup, resolve_tenants
from servesim.metrics.progress import progress_bar, run_in_slices
from servesim.metrics.records import ItlSamples, ReplicaTotals, RequestRecords, Result, StepSeries
from servesim.metrics.writer import RecordWriter, write_record
from servesim.perf.base import PerfModel
from servesim.workload.base import Workload, workload_stats


@dataclass(slots=True)
class EngineRun:
    """The raw outcome of running one replica over a workload."""

    records: RequestRecords
    steps: StepSeries
    itl: ItlSamples
    totals: ReplicaTotals
    end_s: float
    tenants: TenantRun | None = None


@dataclass(slots=True)
class TenantRun:
    """What a run with tenants measured besides the records: the scheduler's counters
    (``engine.tenants.TenantCounters``) and the gate's rejections by (tenant, reason)."""

    scheduler: Any
    rejected: dict[tuple[int, str], int]


def make_requests(wl: Workload) -> list[Request]:
    return list(iter_requests(wl))


def run_engine(
    wl: Workload,
    engine: EngineConfig,
    perf: PerfModel,
    num_gpu_blocks: int,
    max_model_len: int,
    *,
    num_gpus: int = 1,
    check_invariants: bool = False,
    reference: bool = False,
    until_s: float = float("inf"),
    progress: Callable[[int], None] | None = None,
    record_steps: bool = True,
    kv_bytes_per_block: float = 0.0,
    tenants: TenantSetup | None = None,
) -> EngineRun:
    """Run one replica of the engine over ``wl`` (no catalog needed: tests use this).

    ``reference`` selects the step-by-step reference scheduler instead of the lazy one;
    both make the same decisions (tests/test_differential.py holds them to it). Policies
    and options the lazy engine lacks always run step by step (``engine.build``).
    ``kv_bytes_per_block`` (the memory plan's) sizes swap space and swap copies.
    ``progress(num_done)`` is called about 200 times over the run when given.
    Memory is bounded by the requests in flight plus the record columns (about 80 bytes
    a request); ``record_steps=False`` also drops the per-step series (streaming runs).
    ``tenants``: the weights and admission control of ``wl``'s tenants (None: weight 1 each,
    no limits, and no counters under plain FCFS); requests its gate refuses are rejected
    with the reason, and the scheduler keeps the tenants' counters (step by step).
    """
    engine = resolve_engine(engine, max_model_len=max_model_len)
    loop = EventLoop()
    steps = StepSeries() if record_steps else None
    # The ITL pairs (one a step) are bounded on their own: past a million they go into a
    # quantile sketch (engine.itl), with or without the step series.
    itl = ItlSamples()
    totals = ReplicaTotals(num_gpus=num_gpus, num_gpu_blocks=num_gpu_blocks)
    records = RequestRecords.empty(len(wl))
    closed = wl.is_closed_loop  # arrivals are the send times of closed-loop clients
    if not closed:
        records.arrival_s = np.asarray(wl.arrival_s, dtype=np.float64).copy()
    records.num_prompt_tokens = np.asarray(wl.num_prompt_tokens, dtype=np.int64).copy()
    writer = RecordWriter(records)
    # A finish inside a run of decode steps is reported at the run's end, which is exact
    # only when nothing reacts to finishes: closed-loop clients send at each finish.
    replica = build_replica(
        0,
        loop,
        engine,
        perf,
        num_gpu_blocks,
        max_model_len,
        wl,
        steps,
        itl,
        totals,
        reference=reference,
        kv_bytes_per_block=kv_bytes_per_block,
        check_invariants=check_invariants,
        on_finish=writer.add,
        finishes_in_runs=not closed,
        tenant_weights=None if tenants is None else tenants.weights,
    )
    scheduler, kv = replica.scheduler, replica.kv
    usable_tokens = (num_gpu_blocks - 1) * engine.block_size

    def reject(r: Request, why: str) -> None:
        write_record(records, r, why)

    gate = TenantGate(tenants.limits) if tenants is not None and tenants.has_limits else None
    if gate is not None and closed:
        raise ValueError(
            "tenants: rate limits and queue caps apply to open-loop arrivals; "
            "this workload's clients send as requests finish"
        )

    def through_gate(r: Request) -> None:
        assert gate is not None
        kind, why = gate.refusal(r, loop.now)
        if kind:
            gate.reject(r, kind)
            write_record(records, r, why)
        else:
            replica.on_arrival(r)

    deliver: Callable[[Request], None] = replica.on_arrival if gate is None else through_gate

    feeder: ArrivalFeeder | ClosedLoopFeeder | DependencyFeeder
    if closed:
        feeder = closed_loop_feeder(
            wl,
            loop,
            replica.on_arrival,
            reject,
            lambda r: rejection_reason(r, max_model_len, usable_tokens),
            itl,
        )

        def finish(r: Request) -> None:
            writer.add(r)
            done_when_seen(loop, feeder.on_request_done, r)  # type: ignore[union-attr]

        replica.on_finish = finish
    else:
        feeder = ArrivalFeeder(wl, loop, deliver, reject, max_model_len, usable_tokens)
    feeder.start()
    horizon = float(wl.arrival_s[-1]) if len(wl) else 0.0
    end = run_in_slices(
        loop,
        horizon,
        until_s,
        progress,
        lambda: replica.num_finished + feeder.num_rejected + (gate.num_rejected if gate is not None else 0),
        grows=closed,
    )
    writer.flush()
    totals.num_prefix_query_tokens = kv.num_query_tokens
    if replica.frontend is not None:
        totals.frontend_busy_s = replica.frontend.busy_s
    totals.num_prefix_hit_tokens = kv.num_hit_tokens
    if isinstance(scheduler, LazyScheduler):
        scheduler.materialize_all()  # exact counts for requests still running at the end
    for r in list(scheduler.running) + list(scheduler.waiting):
        if r.idx >= len(wl):  # a forked sample of a parallel-sampling request
            continue
        where = "running" if r.status == ReqStatus.RUNNING else "waiting"
        write_record(records, r, f"still {where} when the run ended")
    tenant_run = None
    if wl.tenant is not None or tenants is not None:
        counters = scheduler.tenants if isinstance(scheduler, PolicyScheduler) else None
        tenant_run = TenantRun(scheduler=counters, rejected=dict(gate.rejected) if gate is not None else {})
    return EngineRun(records, steps if steps is not None else StepSeries(), itl, totals, end, tenant_run)


def tenant_record(
    wl: Workload, tenants: TenantSetup, run: TenantRun | None, engine: EngineConfig
) -> dict[str, Any]:
    """What the summary needs of a run with tenants (``metrics.tenants``)."""
    counters = run.scheduler if run is not None else None
    return {
        "names": tenants.names,
        "tenant": np.zeros(len(wl), np.int64) if wl.tenant is None else np.asarray(wl.tenant, np.int64),
        "weights": tenants.weights,
        "slos": tenants.slos,
        "limits": tenants.limits,
        "rejected": dict(run.rejected) if run is not None else {},
        "counters": None if counters is None else list(counters.counters),
        "max_counter_spread": None if counters is None else counters.max_spread,
        "vtc_weights": (engine.vtc_input_weight, engine.vtc_output_weight),
        "policy": engine.scheduling_policy,
    }


# --------------------------------------------------------------------------- scenario level


def _resolve(scenario: Scenario | dict | str | Path | None) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario is None or isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    return scenario_from_dict(scenario)


def data_parallel_cluster(sc: Scenario) -> Scenario:
    """A single server of ``parallel.data_parallel_size`` DP ranks, as the cluster it runs as:
    one pool of that many engines behind vLLM's own balancing (router ``vllm_dp``).

    A simplification of vLLM's DP: each rank is an engine of its own (scheduler, KV cache,
    steps), and an MoE model's ranks are timed as if the others held a batch like theirs
    (``perf.kernel_model``); vLLM steps them in lockstep, padding every rank's batch to the
    largest, which balanced ranks make the same."""
    from servesim.config import ClusterConfig, PoolConfig

    cluster = ClusterConfig(pools=[PoolConfig(name="dp")], router="vllm_dp")
    return sc.model_copy(update={"cluster": cluster})


def simulate(
    scenario: Scenario | dict[str, Any] | str | Path | None = None, *, progress: bool = False
) -> Result:
    """Run the scenario and return its Result with ``summary`` filled.

    The deployment (GPU, engine, memory plan, perf model) is resolved by
    ``servesim.deployment`` for one replica and for each pool of a cluster alike.
    """
    from servesim.deployment import resolve_deployment, run_notices
    from servesim.metrics.summary import summarize
    from servesim.workload import load_workload

    t0 = time.perf_counter()
    sc = _resolve(scenario)
    if sc.cluster is None and sc.parallel.data_parallel_size > 1:
        sc = data_parallel_cluster(sc)
    if sc.cluster is not None:  # pools, routers, disaggregation: servesim.cluster
        from servesim.cluster.pools import simulate_cluster

        return simulate_cluster(sc, t0, progress=progress)
    dep = resolve_deployment(sc)
    engine, plan = dep.engine, dep.plan
    wl = load_workload(sc.workload, sc.run.seed)
    tenants = None
    if wl.tenant is not None or sc.tenants:
        from servesim.errors import ConfigError
        from servesim.workload.tenants import tenant_names

        try:
            tenants = resolve_tenants(tenant_names(wl), sc.tenants)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if tenants.has_limits and wl.is_closed_loop:
            raise ConfigError(
                "tenants: rate limits and queue caps apply to open-loop arrivals; "
                "this workload's requests are sent as others finish"
            )
    with progress_bar(progress, len(wl), t0) as report:
        run = run_engine(
            wl,
            engine,
            dep.perf,
            plan.num_gpu_blocks,
            plan.max_model_len,
            num_gpus=dep.num_gpus,
            check_invariants=sc.run.check_invariants,
            reference=sc.run.reference,
            progress=report,
            record_steps=sc.run.record_steps,
            kv_bytes_per_block=plan.kv_bytes_per_block,
            tenants=tenants if sc.tenants or engine.scheduling_policy == "vtc" else None,
        )
    result = Result(
        scenario=sc.model_copy(update={"engine": engine}),
        records=run.records,
        steps=run.steps,
        itl=run.itl,
        replicas=[run.totals],
        end_s=run.end_s,
        gpu=dep.gpu,
        deployments=[dep],
        notices=run_notices(wl.meta, [dep]),
        workload_stats=workload_stats(wl, plan.max_model_len),
        tasks=None if wl.after is None else (wl.after.task, wl.after.task_start_s),
    )
    if tenants is not None:
        result.tenants = tenant_record(wl, tenants, run.tenants, engine)
    result.wall_s = time.perf_counter() - t0
    result.summary = summarize(result)
    return result
