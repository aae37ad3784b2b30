"""From a scenario's ``cluster`` section to resolved pools, and the cluster's ``simulate``.

Each pool is resolved by ``servesim.deployment.resolve_deployment``, the function that
resolves a single-replica run too (GPU, vLLM's batch defaults for it, memory plan, engine
checks, the catalog's links overridable per pool, perf model calibrated by the scenario's
``hardware.profile`` when it names one); None fields of a pool fall back to the scenario's
``hardware``/``parallel``/``engine``. A TP group or pipeline that spans nodes communicates
over the network, and KV transfers use the per-GPU network bandwidth.
"""

from __future__ import annotations

import time

from servesim.catalog.models import ModelSpec
from servesim.cluster.cluster import PoolSpec, run_cluster
from servesim.config import PoolConfig, Scenario
from servesim.deployment import Deployment, resolve_deployment, resolve_deployments, run_notices
from servesim.metrics.records import Result
from servesim.workload.base import workload_stats


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
    )


def build_pool(sc: Scenario, pool: PoolConfig, model: ModelSpec, hw: object = None) -> PoolSpec:
    """One pool, resolved; ``hw`` (the scenario's ``hardware.profile``) calibrates every pool."""
    return pool_spec(resolve_deployment(sc, pool, model=model, profile=hw), sc.run.reference)


def simulate_cluster(sc: Scenario, t0: float | None = None, *, progress: bool = False) -> Result:
    """``simulate`` for a scenario with a ``cluster`` section (records, steps, summary)."""
    from servesim.metrics.progress import progress_bar
    from servesim.metrics.summary import summarize
    from servesim.workload import load_workload

    t0 = time.perf_counter() if t0 is None else t0
    assert sc.cluster is not None
    deps = resolve_deployments(sc)
    pools = [pool_spec(d, sc.run.reference) for d in deps]
    wl = load_workload(sc.workload, sc.run.seed)
    with progress_bar(progress, len(wl), t0) as report:
        run = run_cluster(
            wl,
            pools,
            sc.cluster,
            seed=sc.run.seed,
            check_invariants=sc.run.check_invariants,
            record_steps=sc.run.record_steps,
            progress=report,
            slo=sc.slo,
        )
    result = Result(
        scenario=sc,
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
    result.wall_s = time.perf_counter() - t0
    result.summary = summarize(result)
    return result
