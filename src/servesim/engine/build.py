"""Building one replica's engine from its resolved config: KV cache, scheduler, perf model.

The one place that decides which engine runs: the lazy vLLM V1 engine where it applies
(``uses_lazy_engine``), the step-by-step reference scheduler when asked for, and each
other policy's own scheduler class otherwise. Every replica of the one driver
(``servesim.cluster``; a plain scenario is a pool of one) is built by ``build_replica``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servesim.config import EngineConfig, ResolvedEngine
from servesim.engine.arrivals import ClosedLoopFeeder
from servesim.engine.batch_queue import BatchQueue
from servesim.engine.events import WAKE, EventLoop
from servesim.engine.frontend import Frontend
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig
from servesim.errors import ConfigError
from servesim.metrics.records import ItlSamples, OffloadTotals, ReplicaTotals, StepSeries
from servesim.perf.base import PerfModel
from servesim.perf.pipelined import pipeline_stages
from servesim.workload.base import Workload

if TYPE_CHECKING:  # features a plain run does not use, imported where they run
    from servesim.engine.dependencies import DependencyFeeder
    from servesim.engine.kv_offload import OffloadScheduler
    from servesim.perf.lora import LoraCosts


def uses_lazy_engine(engine: EngineConfig, wl: Workload | None, tenant_counters: bool = False) -> bool:
    """The lazy engine implements plain vLLM V1: FCFS, recompute, no spec decode, n = 1, no
    tenant counters (``tenant_counters``: a run with tenants keeps VTC's counters, step by
    step, ``engine.tenants``; without them tenants change nothing in FCFS).

    ``wl`` None (a cluster built without its workload, in tests) is taken as n = 1 and V1.
    """
    if wl is None:
        return True
    return (
        engine.policy == "vllm_v1"
        and engine.scheduling_policy == "fcfs"
        and engine.preemption_mode == "recompute"
        and not engine.memory_aware_admission
        and not engine.watermark
        and not engine.speculative.num_speculative_tokens
        and not engine.lora.enabled
        and not (tenant_counters and wl.tenant is not None)
        and (wl.num_samples is None or int(wl.num_samples.max(initial=1)) <= 1)
        and not engine.kv_offload.enabled
    )


def scheduler_config(engine: ResolvedEngine, max_model_len: int) -> SchedulerConfig:
    """The scheduler's knobs from a resolved ``engine`` (no None batch knobs left)."""
    assert engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None  # resolved
    return SchedulerConfig(
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        enable_chunked_prefill=engine.enable_chunked_prefill,
        long_prefill_token_threshold=engine.long_prefill_token_threshold,
        max_model_len=max_model_len,
        scheduler_reserve_full_isl=engine.scheduler_reserve_full_isl,
    )


def make_kv_cache(
    engine: EngineConfig, num_gpu_blocks: int, max_model_len: int, lazy: bool
) -> KVCacheManager | CountingKVCache:
    """The KV cache for a replica: block counts for the lazy engine, block objects otherwise."""
    cls = CountingKVCache if lazy else KVCacheManager
    return cls(num_gpu_blocks, engine.block_size, engine.enable_prefix_caching, max_model_len)


def make_scheduler(
    engine: EngineConfig,
    cfg: SchedulerConfig,
    kv: Any,
    wl: Workload | None,
    reference: bool = False,
    kv_bytes_per_block: float = 0.0,
    tenant_weights: list[float] | None = None,
    lora_costs: LoraCosts | None = None,
) -> Scheduler:
    """The scheduler for ``engine``: lazy V1 where it applies, else the policy's class.

    ``tenant_weights``: each tenant's weight (VTC's share), one per name of
    ``wl.meta["tenant_names"]``, given when the run keeps the tenants' counters (None: 1
    for each, and plain FCFS V1 keeps none). ``lora_costs``: the deployment's adapter
    figures (``perf.lora``), needed with ``engine.lora``."""
    if uses_lazy_engine(engine, wl, tenant_weights is not None):
        return Scheduler(cfg, kv) if reference else LazyScheduler(cfg, kv)
    assert wl is not None  # uses_lazy_engine without a workload
    from servesim.engine.policies import SCHEDULERS
    from servesim.engine.policy_base import PolicyOptions

    if engine.preemption_mode == "swap" and kv_bytes_per_block <= 0:
        raise ValueError(
            "preemption_mode=swap needs kv_bytes_per_block (the memory plan's) to size swap space"
        )
    samples = wl.num_samples
    num_samples = {i: int(n) for i, n in enumerate(samples.tolist()) if n > 1} if samples is not None else {}
    if wl.tenant is not None:
        num_tenants = len(wl.meta.get("tenant_names") or []) or int(wl.tenant.max(initial=0)) + 1
        weights = list(tenant_weights) if tenant_weights is not None else [1.0] * num_tenants
    else:
        weights = [1.0] if engine.scheduling_policy == "vtc" else []  # one tenant: VTC is FCFS
    host_bytes = engine.swap_space_gib * (1 << 30)  # GiB, as vLLM's --swap-space
    opts = PolicyOptions(
        scheduling_policy=engine.scheduling_policy,
        preemption_mode=engine.preemption_mode,
        num_host_blocks=int(host_bytes / kv_bytes_per_block) if kv_bytes_per_block else 0,
        kv_bytes_per_block=kv_bytes_per_block,
        watermark=engine.watermark or 0.0,
        orca_reservation=engine.orca_reservation,
        memory_aware_admission=engine.memory_aware_admission,
        output_len_prediction_error=engine.output_len_prediction_error,
        admission_order=engine.admission_order,
        speculative=engine.speculative,
        num_samples=num_samples,
        first_free_idx=len(wl),
        prune_at_token=wl.prune_at_token,
        num_kept_samples=wl.num_kept_samples,
        tenant_weights=weights,
        vtc_input_weight=engine.vtc_input_weight,
        vtc_output_weight=engine.vtc_output_weight,
    )
    if engine.lora.enabled:
        from servesim.engine.lora import lora_scheduler

        return lora_scheduler(cfg, kv, opts, engine.lora, lora_costs, wl)
    return SCHEDULERS[engine.policy](cfg, kv, opts)


def offload_scheduler(
    engine: EngineConfig,
    cfg: SchedulerConfig,
    kv: KVCacheManager,
    wl: Workload | None,
    loop: EventLoop,
    kv_bytes_per_block: float,
    totals: ReplicaTotals,
) -> OffloadScheduler:
    """vLLM V1's scheduler with the KV connector of ``engine.kv_offload`` (``engine/kv_offload.py``)."""
    from servesim.engine.kv_offload import OffloadScheduler

    if kv_bytes_per_block <= 0:
        raise ValueError("kv_offload needs kv_bytes_per_block (the memory plan's) to size its tiers")
    if engine.kv_offload.host_gb_per_s is None:
        raise ValueError("kv_offload needs host_gb_per_s (resolve_kv_offload sets the GPU's host link)")
    if wl is not None and wl.num_samples is not None and int(wl.num_samples.max(initial=1)) > 1:
        raise ConfigError(
            f"workload.n: {int(wl.num_samples.max())} parallel samples per request are not modelled "
            "with engine.kv_offload (its stores follow one sequence per request); expected n: 1, or "
            "kv_offload.backend: none"
        )
    totals.offload = OffloadTotals()
    return OffloadScheduler(
        cfg, kv, engine.kv_offload, loop, kv_bytes_per_block, totals.num_gpus, totals.offload
    )


def policy_perf_model(engine: EngineConfig, perf: PerfModel) -> PerfModel:
    """``perf`` plus swap copies and draft-model steps when the engine makes them."""
    if engine.preemption_mode != "swap" and not engine.speculative.num_speculative_tokens:
        return perf
    from servesim.perf.policy_costs import PolicyCostModel

    return PolicyCostModel(perf, engine.pcie_gb_per_s * 1e9, engine.speculative.draft_cost_ratio)


def _lora_costs(engine: EngineConfig, perf: PerfModel) -> LoraCosts | None:
    """The adapter figures of ``perf`` when ``engine.lora`` wraps it (``perf.lora.lora_perf_model``)."""
    if not engine.lora.enabled:
        return None
    from servesim.perf.lora import LoraCostModel

    return perf.costs if isinstance(perf, LoraCostModel) else None


def build_replica(
    replica_id: int,
    loop: EventLoop,
    engine: ResolvedEngine,
    perf: PerfModel,
    num_gpu_blocks: int,
    max_model_len: int,
    wl: Workload | None,
    steps: StepSeries | None,
    itl: ItlSamples,
    totals: ReplicaTotals,
    *,
    reference: bool = False,
    kv_bytes_per_block: float = 0.0,
    check_invariants: bool = False,
    on_finish: Callable[[Request], None] | None = None,
    finishes_in_runs: bool = False,
    tenant_weights: list[float] | None = None,
) -> Replica:
    """One replica of a resolved ``engine`` on ``loop``: its KV cache of ``num_gpu_blocks``,
    its scheduler (``make_scheduler``; ``reference`` picks the step-by-step one) and
    ``perf`` with the policy's extra costs (``policy_perf_model``).

    ``wl`` is the workload the replica will serve (parallel sampling and the policies'
    options read it); ``kv_bytes_per_block`` (the memory plan's) sizes swap space;
    ``tenant_weights``: the weight of each of the workload's tenants (None: 1 each).
    """
    # Pipeline stages: the batch queue runs one batch at a time, on the reference scheduler
    # (no decode runs; ``engine.replica``).
    pp = pipeline_stages(perf)
    reference = reference or pp > 1
    lazy = not reference and uses_lazy_engine(engine, wl, tenant_weights is not None)
    kv = make_kv_cache(engine, num_gpu_blocks, max_model_len, lazy)
    scheduler = _replica_scheduler(
        engine, kv, max_model_len, wl, loop, perf, totals, reference, kv_bytes_per_block, tenant_weights
    )
    replica = Replica(
        replica_id,
        loop,
        scheduler,
        policy_perf_model(engine, perf),
        engine.cpu_overhead_s,
        steps,
        itl,
        totals,
        check_invariants=check_invariants,
        on_finish=on_finish,
        finishes_in_runs=finishes_in_runs,
        async_scheduling=bool(engine.async_scheduling),
        frontend=_frontend(engine),
        cpu_per_req_s=engine.cpu_overhead_per_req_s or 0.0,
        batches=_batch_queue(engine, pp),
    )
    if engine.kv_offload.enabled:
        _wake_on_loads(scheduler, replica, loop)
    return replica


def _replica_scheduler(
    engine: ResolvedEngine,
    kv: KVCacheManager | CountingKVCache,
    max_model_len: int,
    wl: Workload | None,
    loop: EventLoop,
    perf: PerfModel,
    totals: ReplicaTotals,
    reference: bool,
    kv_bytes_per_block: float,
    tenant_weights: list[float] | None,
) -> Scheduler:
    """``build_replica``'s scheduler on ``kv``: the offloading one where KV offload is on,
    else ``make_scheduler``'s; a LoRA scheduler's adapter figures go into ``totals``."""
    scheduler: Scheduler
    if engine.kv_offload.enabled:
        if tenant_weights is not None and wl is not None and wl.tenant is not None:
            raise ValueError("kv_offload is not modelled with tenants' fair-share counters")
        assert isinstance(kv, KVCacheManager)  # not the lazy engine's
        cfg = scheduler_config(engine, max_model_len)
        scheduler = offload_scheduler(engine, cfg, kv, wl, loop, kv_bytes_per_block, totals)
    else:
        scheduler = make_scheduler(
            engine,
            scheduler_config(engine, max_model_len),
            kv,
            wl,
            reference,
            kv_bytes_per_block,
            tenant_weights,
            _lora_costs(engine, perf),
        )
    if engine.lora.enabled:
        from servesim.engine.lora import LoraScheduler

        assert isinstance(scheduler, LoraScheduler)
        totals.lora = scheduler.totals  # its adapters' figures, for the summary
    return scheduler


def _frontend(engine: ResolvedEngine) -> Frontend | None:
    """vLLM's API server in front of the engine, where ``engine.frontend`` is on."""
    fe = engine.frontend
    if not fe.enabled:
        return None
    return Frontend(
        fe.per_request_s,
        fe.per_prompt_token_s,
        fe.per_output_token_s,
        fe.per_chunk_s,
        engine.stream_interval,
    )


def _batch_queue(engine: ResolvedEngine, pp: int) -> BatchQueue | None:
    """Pipeline parallelism's batch queue for ``pp`` > 1 stages (``engine.batch_queue``), None
    for one. ``chunks``: whether a prompt's next chunk may be scheduled while its previous one
    is in flight (vLLM V1), or a request in flight is not scheduled at all (the Sarathi-Serve
    artifact's scheduler, the ``sarathi`` policy: ``BatchQueue.hide_in_flight``); the other
    policies run whole prompts or vLLM V1's chunks. ``wakes``: Orca's loop takes new work
    while it waits, unless ``engine.pipeline_wakes`` says otherwise."""
    if pp <= 1:
        return None
    wakes = engine.pipeline_wakes if engine.pipeline_wakes is not None else engine.policy == "orca"
    return BatchQueue(pp, engine.policy != "sarathi", wakes)


def _wake_on_loads(scheduler: Scheduler, replica: Replica, loop: EventLoop) -> None:
    """An idle engine polls for the end of a load (``OffloadScheduler.wake``)."""
    from servesim.engine.kv_offload import OffloadScheduler

    assert isinstance(scheduler, OffloadScheduler)

    def wake(at_s: float) -> None:
        loop.at(at_s, replica.on_wake, None, WAKE)

    scheduler.wake = wake


def closed_loop_feeder(
    wl: Workload,
    loop: EventLoop,
    deliver: Callable[[Request], None],
    on_reject: Callable[[Request, str], None],
    rejection: Callable[[Request], str],
    itl: ItlSamples,
) -> ClosedLoopFeeder | DependencyFeeder:
    """The clients of a benchmark workload (``itl`` learns where the measured run starts),
    or the feeder of a workload whose requests release each other (``Workload.after``)."""
    if wl.after is not None:
        from servesim.engine.dependencies import DependencyFeeder

        return DependencyFeeder(wl, loop, deliver, on_reject, rejection)

    def measured_run_starts() -> None:
        itl.measured_from = len(itl.gap_s)

    return ClosedLoopFeeder(wl, loop, deliver, on_reject, rejection, measured_run_starts)
