"""From a scenario's cluster (``deployment.as_cluster``) to resolved pools, and ``simulate``.

Each pool is resolved by ``servesim.deployment.resolve_deployment``, the function that
resolves a single-replica run too (GPU, vLLM's batch defaults for it, memory plan, engine
checks, the catalog's links overridable per pool, perf model calibrated by the scenario's
``hardware.profile`` when it names one); None fields of a pool fall back to the scenario's
``hardware``/``parallel``/``engine``. A TP group or pipeline that spans nodes communicates
over the network, and KV transfers use the per-GPU network bandwidth.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from servesim.catalog.models import ModelSpec
from servesim.cluster.cluster import PoolSpec
from servesim.cluster.models import check_adapters
from servesim.cluster.run import run_cluster
from servesim.cluster.spec import TenantRun
from servesim.config import EngineConfig, PoolConfig, Scenario
from servesim.deployment import (
    Deployment,
    as_cluster,
    default_model_name,
    resolve_deployment,
    resolve_deployments,
    resolved_scenario,
    run_notices,
)
from servesim.errors import ConfigError
from servesim.metrics.records import Result
from servesim.workload.base import Workload, workload_stats

if TYPE_CHECKING:
    from servesim.engine.tenants import TenantSetup
    from servesim.metrics.step_stream import StreamedStepSeries
    from servesim.metrics.timeseries import StreamedTimeSeries
    from servesim.perf.profiled import HardwareProfile


def pool_spec(dep: Deployment, reference: bool = False) -> PoolSpec:
    """The cluster's view of one resolved pool."""
    return PoolSpec(
        name=dep.name,
        role=dep.role,
        num_replicas=dep.num_replicas,
        engine=dep.engine,
        perf=dep.perf,
        num_gpu_blocks=dep.plan.num_gpu_blocks,
        max_model_len=dep.plan.max_model_len,
        num_gpus=dep.num_gpus,
        kv_bytes_per_token=dep.model.kv_bytes_per_token(1, dep.kv_dtype_bytes, 1),
        net_bw=dep.links.inter_bw,
        net_latency_s=dep.links.inter_latency_s,
        gpu=dep.gpu,
        reference=reference,
        kv_bytes_per_block=dep.plan.kv_bytes_per_block,
        weights_bytes_per_gpu=dep.plan.weights_bytes,
        dp=dep.parallel.data_parallel_size if dep.model.is_moe else 1,
        served_model=dep.served_model,
    )


def build_pool(
    sc: Scenario, pool: PoolConfig, model: ModelSpec, hw: HardwareProfile | None = None
) -> PoolSpec:
    """One pool, resolved; ``hw`` (the scenario's ``hardware.profile``) calibrates every pool."""
    return pool_spec(resolve_deployment(sc, pool, model=model, profile=hw), sc.run.reference)


#: From this many requests on, ``simulate(..., stream_steps_to=DIR)`` writes the per-step
#: series to a file in DIR as the run goes (``metrics.step_stream``) instead of holding it:
#: about 2.6 GB for a million requests in memory, a few hundred MB streamed, at about twice
#: the CPU time of the in-memory series (docs/speed.md). Below it the series stays in memory.
STREAM_STEPS_FROM_REQUESTS = 200_000


def simulate_cluster(
    sc: Scenario,
    t0: float | None = None,
    *,
    progress: bool = False,
    stream_steps_to: Path | None = None,
    steps_format: str = "parquet",
) -> Result:
    """``simulate``: the one driver of every scenario (``deployment.as_cluster``: a plain one
    is a pool of one replica). Resolves each pool once, loads the workload and its tenants,
    runs ``run_cluster`` and builds the Result (records, steps, totals, summary).

    ``stream_steps_to``: an existing directory on the output's filesystem; a run of at least
    ``STREAM_STEPS_FROM_REQUESTS`` requests (with ``run.record_steps``) streams its step
    series to a temporary file there, in ``steps_format`` (parquet or csv), which
    ``metrics.output.write_outputs`` moves into place; a run that fails removes it."""
    from servesim.metrics.progress import progress_bar
    from servesim.metrics.summary import summarize
    from servesim.workload import load_workload

    t0 = time.perf_counter() if t0 is None else t0
    deps = resolve_deployments(sc)
    cluster = as_cluster(sc)
    pools = [pool_spec(d, sc.run.reference) for d in deps]
    wl = load_workload(sc.workload, sc.run.seed)
    note_adapters_without_lora(wl, deps)
    check_adapters(pools, wl, default_model_name(sc, deps))
    tenants = scenario_tenants(sc, wl)
    # The engine the tenants' figures name (VTC's weights, the policy): the first pool's.
    engine = deps[0].engine
    vtc = any(d.engine.scheduling_policy == "vtc" for d in deps)
    series = _streamed_series(sc, len(wl), stream_steps_to, steps_format)
    timeseries = None
    if cluster.operations is not None:
        timeseries = _streamed_timeseries(len(wl), len(pools), stream_steps_to, steps_format)
    try:
        with progress_bar(progress, len(wl), t0) as report:
            run = run_cluster(
                wl,
                pools,
                cluster,
                seed=sc.run.seed,
                check_invariants=sc.run.check_invariants,
                record_steps=sc.run.record_steps,
                progress=report,
                slo=sc.slo,
                tenants=tenants if tenants is not None and (sc.tenants or vtc) else None,
                step_series=series,
                default_model=default_model_name(sc, deps),
                timeseries=timeseries,
            )
    except BaseException:
        for stream in (series, timeseries):
            if stream is not None:
                stream.discard()
        raise
    result = Result(
        scenario=resolved_scenario(sc, deps),
        records=run.records,
        steps=run.steps,
        itl=run.itl,
        replicas=run.totals,
        end_s=run.end_s,
        gpu=pools[0].gpu,
        deployments=deps,
        notices=run_notices(wl.meta, deps) + run.notices,
        workload_stats=workload_stats(wl, min(p.max_model_len for p in pools)),
        tasks=None if wl.after is None else (wl.after.task, wl.after.task_start_s),
        timeseries=run.timeseries,
        operations=run.operations,
    )
    if tenants is not None:
        result.tenants = tenant_record(wl, tenants, run.tenants, engine)
    result.models = model_record(sc, wl, deps)
    result.wall_s = time.perf_counter() - t0
    result.summary = summarize(result)
    return result


def _streamed_series(
    sc: Scenario, num_requests: int, stream_steps_to: Path | None, steps_format: str
) -> StreamedStepSeries | None:
    """The step series streamed to a temporary file in ``stream_steps_to``, for a run long
    enough (``STREAM_STEPS_FROM_REQUESTS``) that keeps its steps; None: kept in memory."""
    if (
        stream_steps_to is None
        or not sc.run.record_steps
        or steps_format not in ("parquet", "csv")
        or num_requests < STREAM_STEPS_FROM_REQUESTS
    ):
        return None
    from servesim.metrics.step_stream import StreamedStepSeries

    return StreamedStepSeries(
        Path(stream_steps_to) / f".steps.{os.getpid()}.{steps_format}.tmp", format=steps_format
    )


def _streamed_timeseries(
    num_requests: int, num_pools: int, stream_to: Path | None, fmt: str
) -> StreamedTimeSeries | None:
    """The operations' time series streamed to a temporary file in ``stream_to``, as the step
    series is, for a run of ``STREAM_STEPS_FROM_REQUESTS`` requests or more (None: in memory)."""
    if stream_to is None or fmt not in ("parquet", "csv") or num_requests < STREAM_STEPS_FROM_REQUESTS:
        return None
    from servesim.metrics.timeseries import StreamedTimeSeries

    path = Path(stream_to) / f".timeseries.{os.getpid()}.{fmt}.tmp"
    return StreamedTimeSeries(path, format=fmt, keep=num_pools)


def note_adapters_without_lora(wl: Workload, deps: list[Deployment]) -> None:
    """A notice when the trace's requests name LoRA adapters (its ``adapter`` or ``lora``
    column) and no pool serves any (``engine.lora`` off): they run on the base model, where
    a vLLM server without ``--enable-lora`` would answer 404 to a request naming one."""
    if wl.adapter is None or any(d.engine.lora.enabled for d in deps):
        return
    count = int((np.asarray(wl.adapter) >= 0).sum())
    if count == 0:
        return
    names = list(wl.meta.get("adapter_names") or [])
    wl.meta.setdefault("notices", []).append(
        {
            "code": "adapters_without_lora",
            "source": wl.source or "workload",
            "count": count,
            "message": f"{count:,} of {len(wl):,} requests name a LoRA adapter "
            f"({', '.join(map(repr, names[:3]))}{', ...' if len(names) > 3 else ''}) but engine.lora "
            "is off: they run on the base model (set engine.lora.enabled with the adapters to "
            "serve them)",
        }
    )


def model_record(sc: Scenario, wl: Workload, deps: list[Deployment]) -> dict[str, Any] | None:
    """What the summary needs of a run of several models (``metrics.models``; None: the
    cluster serves one model and no request names one): each row's model name id (-1: it
    gave none: ``deployment.default_model_name``), the names, and each served model's pools."""
    served = list(dict.fromkeys(d.served_model for d in deps))
    if len(served) < 2 and wl.model is None:
        return None
    pools: dict[str, list[dict[str, Any]]] = {}
    for d in deps:
        pools.setdefault(d.served_model, []).append(
            {"name": d.name, "num_replicas": d.num_replicas, "num_gpus": d.num_replicas * d.num_gpus}
        )
    return {
        "name_id": np.full(len(wl), -1, np.int64) if wl.model is None else np.asarray(wl.model, np.int64),
        "names": [*map(str, wl.meta.get("model_names", [])), default_model_name(sc, deps)],
        "served": served,
        "model": {d.served_model: d.model.name for d in deps},
        "pools": pools,
    }


def scenario_tenants(sc: Scenario, wl: Workload) -> TenantSetup | None:
    """The workload's tenants with the scenario's ``tenants`` section (None: no tenants)."""
    if wl.tenant is None and not sc.tenants:
        return None
    from servesim.engine.tenants import resolve_tenants
    from servesim.workload.tenants import tenant_names

    try:
        return resolve_tenants(tenant_names(wl), sc.tenants)
    except ValueError as err:
        raise ConfigError(str(err)) from None


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
