"""``simulate(scenario) -> Result``: one simulation as a pure function.

Resolution order: scenario -> model spec and GPU spec (catalog) -> memory plan (number of
KV blocks) -> perf model -> workload -> engine run -> records -> summary. Nothing here
touches files except reading the scenario's inputs; outputs are written by the caller.
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.config import EngineConfig, Scenario, load_scenario, resolve_engine, scenario_from_dict
from servesim.engine.arrivals import ArrivalFeeder, iter_requests
from servesim.engine.events import EventLoop
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig
from servesim.errors import ConfigError
from servesim.metrics.records import (
    ItlSamples,
    ReplicaTotals,
    RequestRecords,
    RequestStatus,
    Result,
    StepSeries,
)
from servesim.perf.base import PerfModel
from servesim.workload.base import Workload


@dataclass(slots=True)
class EngineRun:
    """The raw outcome of running one replica over a workload."""

    records: RequestRecords
    steps: StepSeries
    itl: ItlSamples
    totals: ReplicaTotals
    end_s: float


def make_requests(wl: Workload) -> list[Request]:
    return list(iter_requests(wl))


def run_engine(wl: Workload, engine: EngineConfig, perf: PerfModel, num_gpu_blocks: int,
               max_model_len: int, *, num_gpus: int = 1, check_invariants: bool = False,
               reference: bool = False, until_s: float = float("inf"),
               progress: Callable[[int], None] | None = None, record_steps: bool = True,
               kv_bytes_per_block: float = 0.0) -> EngineRun:
    """Run one replica of the engine over ``wl`` (no catalog needed: tests use this).

    ``reference`` selects the step-by-step reference scheduler instead of the lazy one;
    both make the same decisions (tests/test_differential.py holds them to it). Policies
    and options the lazy engine lacks always run step by step (``make_scheduler``).
    ``kv_bytes_per_block`` (the memory plan's) sizes swap space and swap copies.
    ``progress(num_done)`` is called about 200 times over the run when given.
    Memory is bounded by the requests in flight plus the record columns (about 80 bytes
    a request); ``record_steps=False`` also drops the per-step series (streaming runs).
    """
    engine = resolve_engine(engine, max_model_len=max_model_len)
    assert engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None  # resolved
    loop = EventLoop()
    lazy = not reference and uses_lazy_engine(engine, wl)
    kv = make_kv_cache(engine, num_gpu_blocks, max_model_len, lazy)
    cfg = SchedulerConfig(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        enable_chunked_prefill=engine.enable_chunked_prefill,
        long_prefill_token_threshold=engine.long_prefill_token_threshold,
        max_model_len=max_model_len,
        scheduler_reserve_full_isl=engine.scheduler_reserve_full_isl)
    steps = StepSeries() if record_steps else None
    # Streaming runs keep one ITL pair a step in typed arrays: float32 gaps (7 significant
    # digits, ~0.1 us at 1 s) and int32 counts, 8 bytes a step instead of a list's ~40.
    itl = ItlSamples() if record_steps else ItlSamples(gap_s=array("f"), count=array("i"))  # type: ignore[arg-type]
    totals = ReplicaTotals(num_gpus=num_gpus, num_gpu_blocks=num_gpu_blocks)
    records = RequestRecords.empty(len(wl))
    records.arrival_s = np.asarray(wl.arrival_s, dtype=np.float64).copy()
    records.num_prompt_tokens = np.asarray(wl.num_prompt_tokens, dtype=np.int64).copy()
    scheduler = make_scheduler(engine, cfg, kv, wl, reference, kv_bytes_per_block)
    perf = policy_perf_model(engine, perf)
    writer = RecordWriter(records)
    replica = Replica(0, loop, scheduler, perf, engine.cpu_overhead_s, steps, itl, totals,
                      check_invariants=check_invariants, on_finish=writer.add,
                      finishes_in_runs=True)
    def reject(r: Request, why: str) -> None:
        write_record(records, r)
        records.reasons[r.idx] = why

    feeder = ArrivalFeeder(wl, loop, replica.on_arrival, reject, max_model_len,
                           (num_gpu_blocks - 1) * engine.block_size)
    feeder.start()
    if progress is None:
        end = loop.run(until_s)
    else:  # run in slices of simulated time, reporting between them (no cost in the hot loop)
        horizon = float(wl.arrival_s[-1]) if len(wl) else 0.0
        dt = max(horizon / 200, 1e-3)
        t = 0.0
        while len(loop) and loop.now < until_s:
            t = max(t + dt, loop.next_time())
            loop.run(min(t, until_s))
            progress(replica.num_finished + feeder.num_rejected)
        end = loop.now
    writer.flush()
    totals.num_prefix_query_tokens = kv.num_query_tokens
    totals.num_prefix_hit_tokens = kv.num_hit_tokens
    if isinstance(scheduler, LazyScheduler):
        scheduler.materialize_all()  # exact counts for requests still running at the end
    for r in list(scheduler.running) + list(scheduler.waiting):
        if r.idx >= len(wl):  # a forked sample of a parallel-sampling request
            continue
        write_record(records, r)
        records.reasons[r.idx] = "still " + ("running" if r.status == ReqStatus.RUNNING else "waiting") \
            + " when the run ended"
    return EngineRun(records, steps if steps is not None else StepSeries(), itl, totals, end)


def make_kv_cache(engine: EngineConfig, num_gpu_blocks: int, max_model_len: int,
                  lazy: bool) -> KVCacheManager | CountingKVCache:
    """The KV cache for a replica: block counts for the lazy engine, block objects otherwise."""
    cls = CountingKVCache if lazy else KVCacheManager
    return cls(num_gpu_blocks, engine.block_size, engine.enable_prefix_caching, max_model_len)


def uses_lazy_engine(engine: EngineConfig, wl: Workload) -> bool:
    """The lazy engine implements plain vLLM V1: FCFS, recompute, no spec decode, n = 1."""
    return (engine.policy == "vllm_v1" and engine.scheduling_policy == "fcfs"
            and engine.preemption_mode == "recompute" and not engine.memory_aware_admission
            and not engine.watermark and not engine.speculative.num_speculative_tokens
            and (wl.num_samples is None or int(wl.num_samples.max(initial=1)) <= 1))


def make_scheduler(engine: EngineConfig, cfg: SchedulerConfig, kv: Any, wl: Workload,
                   reference: bool = False, kv_bytes_per_block: float = 0.0) -> Scheduler:
    """The scheduler for ``engine``: lazy V1 where it applies, else the policy's class."""
    if uses_lazy_engine(engine, wl):
        return Scheduler(cfg, kv) if reference else LazyScheduler(cfg, kv)
    from servesim.engine.policies import SCHEDULERS
    from servesim.engine.policy_base import PolicyOptions

    if engine.preemption_mode == "swap" and kv_bytes_per_block <= 0:
        raise ValueError("preemption_mode=swap needs kv_bytes_per_block (the memory plan's) "
                         "to size swap space")
    samples = wl.num_samples
    num_samples = {i: int(n) for i, n in enumerate(samples.tolist()) if n > 1} if samples is not None else {}
    host_bytes = engine.swap_space_gib * (1 << 30)  # GiB, as vLLM's --swap-space
    opts = PolicyOptions(
        scheduling_policy=engine.scheduling_policy, preemption_mode=engine.preemption_mode,
        num_host_blocks=int(host_bytes / kv_bytes_per_block) if kv_bytes_per_block else 0,
        kv_bytes_per_block=kv_bytes_per_block, watermark=engine.watermark or 0.0,
        orca_reservation=engine.orca_reservation, memory_aware_admission=engine.memory_aware_admission,
        output_len_prediction_error=engine.output_len_prediction_error,
        admission_order=engine.admission_order, speculative=engine.speculative,
        num_samples=num_samples, first_free_idx=len(wl), prune_at_token=wl.prune_at_token,
        num_kept_samples=wl.num_kept_samples)
    return SCHEDULERS[engine.policy](cfg, kv, opts)


def policy_perf_model(engine: EngineConfig, perf: PerfModel) -> PerfModel:
    """``perf`` plus swap copies and draft-model steps when the engine makes them."""
    if engine.preemption_mode != "swap" and not engine.speculative.num_speculative_tokens:
        return perf
    from servesim.perf.policy_costs import PolicyCostModel

    return PolicyCostModel(perf, engine.pcie_gbps * 1e9, engine.speculative.draft_cost_ratio)


class RecordWriter:
    """Writes finished requests' records in batches (numpy columns are slow to set one
    element at a time); holds at most ``batch`` requests. ``flush`` before reading."""

    def __init__(self, records: RequestRecords, batch: int = 4096) -> None:
        self.records = records
        self.batch = batch
        self.buf: list[Request] = []

    def add(self, r: Request) -> None:
        self.buf.append(r)
        if len(self.buf) >= self.batch:
            self.flush()

    def flush(self) -> None:
        buf = self.buf
        if not buf:
            return
        self.buf = []
        rec = self.records
        n = len(buf)
        idx = np.fromiter([r.idx for r in buf], np.int64, n)

        def times(values: list[float]) -> np.ndarray:
            a = np.array(values, np.float64)
            a[a < 0] = np.nan
            return a

        rec.first_scheduled_s[idx] = times([r.first_scheduled_s for r in buf])
        rec.first_token_s[idx] = times([r.first_token_s for r in buf])
        rec.finished_s[idx] = times([r.finished_s for r in buf])
        rec.num_output_tokens[idx] = [r.num_output_tokens for r in buf]
        rec.num_cached_tokens[idx] = [max(r.num_cached_tokens, 0) for r in buf]
        rec.num_preemptions[idx] = [r.num_preemptions for r in buf]
        rec.replica[idx] = [r.replica for r in buf]
        rec.status[idx] = [_record_status(r) for r in buf]


def _record_status(r: Request) -> int:
    return (RequestStatus.FINISHED if r.status == ReqStatus.FINISHED else
            RequestStatus.REJECTED if r.status == ReqStatus.REJECTED else RequestStatus.UNFINISHED)


def write_record(rec: RequestRecords, r: Request) -> None:
    """Store ``r``'s outcome in row ``r.idx`` (called when it finishes or the run ends)."""
    i = r.idx
    rec.first_scheduled_s[i] = r.first_scheduled_s if r.first_scheduled_s >= 0 else np.nan
    rec.first_token_s[i] = r.first_token_s if r.first_token_s >= 0 else np.nan
    rec.finished_s[i] = r.finished_s if r.finished_s >= 0 else np.nan
    rec.num_output_tokens[i] = r.num_output_tokens
    rec.num_cached_tokens[i] = max(r.num_cached_tokens, 0)
    rec.num_preemptions[i] = r.num_preemptions
    rec.replica[i] = r.replica
    rec.status[i] = _record_status(r)


def check_budget(engine: EngineConfig, max_model_len: int) -> None:
    """vLLM refuses to start when chunked prefill is off and one step cannot hold a
    max-length prompt (such a prompt would block the FCFS queue for ever)."""
    budget = engine.max_num_batched_tokens
    if not engine.enable_chunked_prefill and budget is not None and budget < max_model_len:
        raise ConfigError(
            f"engine.max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}) "
            "with chunked prefill off: raise it, lower engine.max_model_len, or enable chunked prefill")


# --------------------------------------------------------------------------- scenario level


def _resolve(scenario: Scenario | dict | str | Path | None) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario is None or isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    return scenario_from_dict(scenario)


def simulate(scenario: Scenario | dict[str, Any] | str | Path | None = None, *,
             progress: bool = False) -> Result:
    """Run the scenario and return its Result with ``summary`` filled."""
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.models import load_model, resolve_kv_dtype_bytes
    from servesim.metrics.summary import summarize
    from servesim.perf.memory import plan_memory
    from servesim.perf.roofline import build_perf_model
    from servesim.workload import load_workload

    t0 = time.perf_counter()
    sc = _resolve(scenario)
    if sc.cluster is not None:  # pools, routers, disaggregation: servesim.cluster
        from servesim.cluster.pools import simulate_cluster

        return simulate_cluster(sc, t0)
    model = load_model(sc.model.name, sc.model.dtype)
    hw = None
    if sc.hardware.profile:  # (the profile machinery is imported only when used)
        from servesim.perf.profiled import HardwareProfile

        hw = HardwareProfile.load(sc.hardware.profile)
    gpu = hw.resolve_gpu(sc.hardware.gpu) if hw else get_gpu(sc.hardware.gpu)
    engine = resolve_engine(hw.adjust_engine(sc.engine) if hw else sc.engine, gpu.mem_bytes, gpu.name,
                            sc.engine.max_model_len or model.max_position_embeddings)
    plan = plan_memory(model, gpu, engine, sc.parallel,
                       kv_dtype_bytes=resolve_kv_dtype_bytes(sc.model.kv_cache_dtype, model))
    check_budget(engine, plan.max_model_len)
    perf = (hw.perf_model(model, gpu, sc.parallel, sc.model) if hw
            else build_perf_model(model, gpu, sc.parallel, sc.model))
    wl = load_workload(sc.workload, sc.run.seed)
    num_gpus = sc.parallel.tensor_parallel_size * sc.parallel.pipeline_parallel_size
    with _progress_bar(progress, len(wl), t0) as report:
        run = run_engine(wl, engine, perf, plan.num_gpu_blocks, plan.max_model_len,
                         num_gpus=num_gpus, check_invariants=sc.run.check_invariants,
                         reference=sc.run.reference, progress=report,
                         record_steps=sc.run.record_steps,
                         kv_bytes_per_block=plan.kv_bytes_per_block)
    result = Result(scenario=sc.model_copy(update={"engine": engine}), records=run.records,
                    steps=run.steps, itl=run.itl,
                    replicas=[run.totals], end_s=run.end_s, gpu=gpu)
    result.wall_s = time.perf_counter() - t0
    result.summary = summarize(result)
    return result


@contextmanager
def _progress_bar(enabled: bool, total: int, t0: float) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr, shown only on a terminal and once a run passes 1 s."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress("simulating", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("requests", total=total)
    started = False

    def report(done: int) -> None:
        nonlocal started
        if not started and time.perf_counter() - t0 > 1.0:
            bar.start()
            started = True
        if started:
            bar.update(task, completed=done)

    try:
        yield report
    finally:
        if started:
            bar.stop()
