"""From a scenario's ``cluster`` section to resolved pools, and the cluster's ``simulate``.

Each pool resolves like the single-replica scenario (GPU from the catalog, vLLM's batch
defaults for that GPU, memory plan, roofline perf model, calibrated by the scenario's
``hardware.profile`` when it names one), with its own GPU, parallelism
and engine (None falls back to the scenario's ``hardware``/``parallel``/``engine``), and
with the catalog's links (``catalog.gpus.link_spec``, overridable per pool): a TP group or
pipeline that spans nodes communicates over the network, and KV transfers use the
per-GPU network bandwidth.
"""

from __future__ import annotations

import time

from servesim.catalog.gpus import get_gpu, link_spec
from servesim.catalog.models import ModelSpec, load_model, resolve_kv_dtype_bytes
from servesim.catalog.parallel import check_parallel
from servesim.cluster.cluster import PoolSpec, run_cluster
from servesim.config import PoolConfig, Scenario, resolve_engine
from servesim.metrics.records import Result
from servesim.perf.profiled import HardwareProfile


def build_pool(sc: Scenario, pool: PoolConfig, model: ModelSpec,
               hw: HardwareProfile | None = None) -> PoolSpec:
    """One pool, resolved; ``hw`` (the scenario's ``hardware.profile``) calibrates every pool."""
    from servesim.perf.factory import build_step_model
    from servesim.perf.memory import plan_memory

    name = pool.gpu if pool.gpu is not None else sc.hardware.gpu
    gpu = hw.resolve_gpu(name) if hw else get_gpu(name)
    par = pool.parallel or sc.parallel
    check_parallel(model, par, f"cluster.pools[{pool.name}].parallel" if pool.parallel else "parallel")
    eng = pool.engine or sc.engine
    if hw is not None:
        eng = hw.adjust_engine(eng)
    max_len = eng.max_model_len or model.max_position_embeddings
    engine = resolve_engine(eng, gpu.mem_bytes, gpu.name, max_len,
                            pipeline_parallel_size=par.pipeline_parallel_size)
    kv_b = resolve_kv_dtype_bytes(sc.model.kv_cache_dtype, model)
    plan = plan_memory(model, gpu, engine, par, kv_dtype_bytes=kv_b)
    lk = pool.links

    def us(x: float | None) -> float | None:
        return None if x is None else x * 1e-6

    def bytes_per_s(gb_per_s: float | None) -> float | None:
        return None if gb_per_s is None else gb_per_s * 1e9

    links = link_spec(gpu, bytes_per_s(lk.intra_node_gb_per_s), us(lk.intra_node_latency_us),
                      bytes_per_s(lk.inter_node_gb_per_s),
                      us(lk.inter_node_latency_us), lk.gpus_per_node)
    return PoolSpec(
        name=pool.name, role=pool.role, num_replicas=pool.num_replicas, engine=engine,
        perf=(hw.perf_model(model, gpu, par, sc.model, links=links) if hw
              else build_step_model(model, gpu, par, sc.hardware, sc.model, links=links, engine=engine)),
        num_gpu_blocks=plan.num_gpu_blocks, max_model_len=plan.max_model_len,
        num_gpus=par.tensor_parallel_size * par.pipeline_parallel_size,
        kv_bytes_per_token=model.kv_bytes_per_token(1, kv_b, 1), net_bw=links.inter_bw,
        net_latency_s=links.inter_latency_s, gpu=gpu, reference=sc.run.reference,
        kv_bytes_per_block=plan.kv_bytes_per_block)


def simulate_cluster(sc: Scenario, t0: float | None = None) -> Result:
    """``simulate`` for a scenario with a ``cluster`` section (records, steps, summary)."""
    from servesim.metrics.summary import summarize
    from servesim.workload import load_workload

    t0 = time.perf_counter() if t0 is None else t0
    assert sc.cluster is not None
    model = load_model(sc.model.name, sc.model.dtype)
    hw = HardwareProfile.load(sc.hardware.profile) if sc.hardware.profile else None
    pools = [build_pool(sc, p, model, hw) for p in sc.cluster.pools]
    wl = load_workload(sc.workload, sc.run.seed)
    run = run_cluster(wl, pools, sc.cluster, seed=sc.run.seed, check_invariants=sc.run.check_invariants)
    result = Result(scenario=sc, records=run.records, steps=run.steps, itl=run.itl, replicas=run.totals,
                    end_s=run.end_s, gpu=pools[0].gpu)
    result.wall_s = time.perf_counter() - t0
    result.summary = summarize(result)
    return result
