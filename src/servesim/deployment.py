"""A scenario's deployment, resolved once: the one function a replica and a cluster share.

``resolve_deployment(scenario, pool)`` turns the scenario (and, for a cluster, one of its
pools) into everything a replica is built from and a report describes::

    scenario ─► model spec ─► GPU (catalog, or the profile's own) ─► layout (TP/PP/EP)
             ─► engine (vLLM's batch defaults for that GPU; the profile's CPU time)
             ─► memory plan (KV blocks) ─► engine checks ─► links ─► perf model

Every scenario runs as a cluster (``as_cluster``): a scenario without a ``cluster``
section is one colocated pool of one replica (``SINGLE_POOL``), or with data parallelism one
pool of its DP ranks behind vLLM's own balancing; its pool takes the scenario's own
``hardware``/``parallel``/``engine`` and the catalog's links, so every check (the token
budget with chunked prefill off, the memory fit), every report section (memory plan,
step-time model) and every option reads the same for a plain scenario and for the same
deployment written as a cluster. The engine configuration is resolved here only, once per
pool (``Deployment.engine``), and ``resolved_scenario`` is the scenario as it ran. The
refusals (vLLM's start-up checks, and those of the pools together) are ``deployment_checks``.

Links: both use ``catalog.gpus.link_spec`` (a cluster pool may override it). Inside one
node that is exactly the GPU's interconnect, which the single-replica run used alone
before; a layout spanning nodes (more than ``gpus_per_node`` GPUs) now pays the network
between them on one replica as it did in a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servesim.catalog.gpus import GpuSpec, LinkSpec, get_gpu, link_spec
from servesim.catalog.hf_config import load_model
from servesim.catalog.models import ModelSpec, resolve_kv_dtype_bytes
from servesim.config import (
    ClusterConfig,
    EngineConfig,
    LinksConfig,
    ParallelConfig,
    PoolConfig,
    ResolvedEngine,
    Scenario,
    resolve_engine,
    resolve_kv_offload,
)
from servesim.config.vllm_version import version_notice
from servesim.deployment_checks import (  # noqa: F401 (check_budget re-exported: its old home)
    check_budget,
    check_data_parallel,
    check_fleet_size,
    check_models,
    check_moe_backend,
    check_offload_host_memory,
    check_offload_tier,
    check_starts,
)
from servesim.errors import CatalogError, ConfigError, ServesimError
from servesim.perf.base import PerfModel
from servesim.perf.linear_attention import hybrid_engine, running_cap
from servesim.perf.memory import NON_TORCH_RESERVE_BYTES, MemoryPlan

if TYPE_CHECKING:
    from servesim.perf.profiled import HardwareProfile


@dataclass(slots=True)
class Deployment:
    """One pool of identical replicas (a plain scenario: one pool of one), resolved once:
    everything a replica is built from (``cluster.pools.pool_spec``) and a report describes."""

    name: str  # the pool's name (``SINGLE_POOL`` for a scenario without a cluster section)
    role: str  # colocated | prefill | decode
    num_replicas: int  # engines: the pool's replicas x their data-parallel ranks
    model: ModelSpec
    gpu: GpuSpec
    parallel: ParallelConfig
    engine: ResolvedEngine  # resolved here, once: no None batch knobs
    plan: MemoryPlan
    links: LinkSpec
    perf: PerfModel
    kv_dtype_bytes: float
    profile: HardwareProfile | None = None  # the one applied, if any
    # Changes made to the config, as ``workload.notices`` records the workload's.
    notices: list[dict[str, Any]] = field(default_factory=list)
    # The name requests give to reach this pool (``served_model``): a multi-model cluster
    # routes each request to the pools of the model it names.
    served_model: str = ""

    @property
    def num_gpus(self) -> int:
        """GPUs of one engine (TP x PP; a DP rank's with data parallelism)."""
        return self.parallel.tensor_parallel_size * self.parallel.pipeline_parallel_size

    def step_time_model(self) -> dict[str, Any]:
        """Which step-time model answers, on what data it stands (``perf.describe``)."""
        from servesim.perf.describe import describe_perf_model

        return describe_perf_model(self.perf, self.gpu.name, self.profile)


def resolved_engine(
    engine: EngineConfig, model: ModelSpec, gpu: GpuSpec, parallel: ParallelConfig
) -> ResolvedEngine:
    """``engine`` with vLLM's batch defaults for this GPU and layout filled in
    (``config.engine_defaults.resolve_engine``; ``max_model_len`` unset: the model's positions): the
    one resolution of a deployment's engine, which ``check_starts`` and
    ``perf.memory.plan_memory`` take resolved."""
    return resolve_engine(
        engine,
        gpu.mem_bytes,
        gpu.name,
        engine.max_model_len or model.max_position_embeddings,
        pipeline_parallel_size=parallel.pipeline_parallel_size,
    )


#: The pool a scenario without a ``cluster`` section runs as (one replica).
SINGLE_POOL = "engine"
#: The pool of a scenario without a ``cluster`` section whose ``data_parallel_size`` > 1.
DP_POOL = "dp"


def as_cluster(sc: Scenario) -> ClusterConfig:
    """The cluster ``sc`` runs as: its own ``cluster`` section, else one colocated pool of
    one replica (``SINGLE_POOL``), or with ``parallel.data_parallel_size`` > 1 one pool of
    that many engines behind vLLM's own balancing (router ``vllm_dp``, pool ``DP_POOL``).

    A simplification of vLLM's DP: each rank is an engine of its own (scheduler, KV cache,
    steps), and an MoE model's ranks are timed as if the others held a batch like theirs
    (``perf.kernel_model``); vLLM steps them in lockstep, padding every rank's batch to the
    largest, which balanced ranks make the same."""
    if sc.cluster is not None:
        return sc.cluster
    if sc.parallel.data_parallel_size > 1:
        return ClusterConfig(pools=[PoolConfig(name=DP_POOL)], router="vllm_dp")
    return ClusterConfig(pools=[PoolConfig(name=SINGLE_POOL)])


def resolved_scenario(sc: Scenario, deps: list[Deployment]) -> Scenario:
    """``sc`` as it ran: its cluster (``as_cluster``), each pool's own engine and the
    scenario's engine resolved (no None batch knobs; the scenario's as its first pool
    that inherits it resolved it)."""
    cluster = as_cluster(sc)
    pools = [
        p.model_copy(update={"engine": d.engine}) if p.engine is not None else p
        for p, d in zip(cluster.pools, deps, strict=True)
    ]
    update: dict[str, Any] = {"cluster": cluster.model_copy(update={"pools": pools})}
    inherited = [d.engine for p, d in zip(cluster.pools, deps) if p.engine is None]
    if inherited:
        update["engine"] = inherited[0]
    return sc.model_copy(update=update)


def pool_links(gpu: GpuSpec, lk: LinksConfig | None) -> LinkSpec:
    """The catalog links of ``gpu`` with a pool's overrides (GB/s and microseconds)."""
    if lk is None:
        return link_spec(gpu)

    def us(x: float | None) -> float | None:
        return None if x is None else x * 1e-6

    def bytes_per_s(gb_per_s: float | None) -> float | None:
        return None if gb_per_s is None else gb_per_s * 1e9

    return link_spec(
        gpu,
        bytes_per_s(lk.intra_node_gb_per_s),
        us(lk.intra_node_latency_us),
        bytes_per_s(lk.inter_node_gb_per_s),
        us(lk.inter_node_latency_us),
        lk.gpus_per_node,
    )


def load_profile(sc: Scenario) -> HardwareProfile | None:
    """The scenario's ``hardware.profile`` (imported only when one is named), or None."""
    if not sc.hardware.profile:
        return None
    from servesim.perf.profiled import HardwareProfile

    return HardwareProfile.load(sc.hardware.profile)


def resolve_deployment(
    sc: Scenario,
    pool: PoolConfig | None = None,
    *,
    model: ModelSpec | None = None,
    profile: HardwareProfile | None = None,
) -> Deployment:
    """The deployment of one pool (``pool`` None: the first of ``as_cluster(sc)``).

    A pool's None fields fall back to the scenario's ``hardware``/``parallel``/``engine``.
    ``model`` and ``profile`` may be passed in when already loaded (a cluster loads them
    once for all its pools). Raises the user errors vLLM would refuse to start with.
    """
    model = model or scenario_model(sc)
    if profile is None:
        profile = load_profile(sc)
    if pool is None:
        pool = as_cluster(sc).pools[0]
    gpu = pool_gpu(sc, pool, profile)
    par = pool.parallel or sc.parallel
    eng, notices = profiled_engine(sc, pool, pool.engine or sc.engine, profile)
    engine = resolved_engine(eng, model, gpu, par)
    engine = resolve_kv_offload(engine, gpu.host_bw)  # offload tiers: the GPU's host link
    kv_b = resolve_kv_dtype_bytes(sc.model.kv_cache_dtype, model)
    engine, hybrid = hybrid_engine(engine, model, par.tensor_parallel_size, kv_b)  # Qwen3.5
    plan = check_pool_starts(sc, pool, model, gpu, engine, par, kv_b)
    states = plan.reserve_bytes - NON_TORCH_RESERVE_BYTES  # Qwen3.5: the running requests' states
    tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
    engine, capped = running_cap(
        engine, model, states, plan.num_gpu_blocks, plan.kv_bytes_per_block, tp, pp, kv_b
    )
    links = pool_links(gpu, pool.links)
    return Deployment(
        name=pool.name,
        role=pool.role,
        num_replicas=pool.num_replicas * par.data_parallel_size,
        model=model,
        gpu=gpu,
        parallel=par,
        engine=engine,
        plan=plan,
        links=links,
        perf=step_model(sc, model, gpu, par, engine, links, profile),
        kv_dtype_bytes=kv_b,
        profile=profile,
        notices=notices + hybrid + capped,
        served_model=served_model(sc, pool),
    )


def pool_gpu(sc: Scenario, pool: PoolConfig, profile: HardwareProfile | None) -> GpuSpec:
    """The pool's GPU (its own ``gpu``, else ``hardware.gpu``): the profile's, else the
    catalog's; an unknown name is an error naming the field."""
    gpu_name = pool.gpu if pool.gpu is not None else sc.hardware.gpu
    if profile:
        return profile.resolve_gpu(gpu_name)
    try:
        return get_gpu(gpu_name)
    except CatalogError as err:
        field = f"cluster.pools[{pool.name}].gpu" if pool.gpu is not None else "hardware.gpu"
        raise ConfigError(f"{field}: {err}") from None


def profiled_engine(
    sc: Scenario, pool: PoolConfig, eng: EngineConfig, profile: HardwareProfile | None
) -> tuple[EngineConfig, list[dict[str, Any]]]:
    """``eng`` with the profile's fitted CPU time (``HardwareProfile.adjust_engine``), and
    the notice of the change when it changed the scenario's."""
    found: list[dict[str, Any]] = []
    if profile is None:
        return eng, found
    adjusted = profile.adjust_engine(eng)
    if adjusted.cpu_overhead_s != eng.cpu_overhead_s:
        where = f"pool {pool.name}: " if sc.cluster is not None else ""
        found.append(
            {
                "code": "profile_cpu_overhead",
                "source": str(sc.hardware.profile),
                "count": None,
                "message": f"{where}engine.cpu_overhead_s {eng.cpu_overhead_s:g} s replaced by "
                f"the profile's {adjusted.cpu_overhead_s:g} s (set it in the scenario "
                "to keep it)",
            }
        )
    return adjusted, found


def check_pool_starts(
    sc: Scenario,
    pool: PoolConfig,
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    par: ParallelConfig,
    kv_dtype_bytes: float,
) -> MemoryPlan:
    """vLLM's start-up refusals of the pool (``deployment_checks``), each naming the pool's
    own field or the scenario's, and the memory plan they leave."""
    engine_field = f"cluster.pools[{pool.name}].engine" if pool.engine else "engine"
    plan = check_starts(
        model,
        gpu,
        engine,
        par,
        kv_dtype_bytes,
        f"cluster.pools[{pool.name}].parallel" if pool.parallel else "parallel",
        engine_field,
    )
    check_moe_backend(model, gpu, engine, engine_field)
    num_gpus = par.tensor_parallel_size * par.pipeline_parallel_size
    check_offload_tier(engine, plan.kv_bytes_per_block, num_gpus, engine_field)
    check_offload_host_memory(engine, gpu, sc.hardware.host_mem_gib_per_gpu, num_gpus, engine_field)
    return plan


def step_model(
    sc: Scenario,
    model: ModelSpec,
    gpu: GpuSpec,
    par: ParallelConfig,
    engine: ResolvedEngine,
    links: LinkSpec,
    profile: HardwareProfile | None,
) -> PerfModel:
    """The pool's step-time model: the profile's, else the one ``hardware.perf_model``
    names (``perf.factory``); with LoRA adapters, their kernels and loads on top."""
    from servesim.perf.factory import build_step_model

    perf: PerfModel = (
        profile.perf_model(model, gpu, par, sc.model, links=links)
        if profile
        else build_step_model(model, gpu, par, sc.hardware, sc.model, links=links, engine=engine)
    )
    if model.index_topk:  # DeepSeek sparse attention: the indexer, sparse attention
        from servesim.perf.execution_path import sm_of
        from servesim.perf.sparse_attention import sparse_attention_perf_model

        kv_b = resolve_kv_dtype_bytes(sc.model.kv_cache_dtype, model)
        tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
        perf = sparse_attention_perf_model(model, gpu, perf, sm_of(gpu), engine.version, tp, pp, kv_b)
    if engine.lora.enabled:  # the LoRA kernels and loads on top
        from servesim.perf.lora import lora_perf_model

        perf = lora_perf_model(engine, model, gpu, par, perf)
    return perf


def scenario_model(sc: Scenario) -> ModelSpec:
    """The scenario's ``model.name``, loaded; an unknown name or unreadable config.json is
    an error naming the field."""
    try:
        return load_model(sc.model.name, sc.model.dtype)
    except CatalogError as err:
        raise ConfigError(f"model.name: {err}") from None


def default_model_name(sc: Scenario, deps: list[Deployment]) -> str:
    """The served name a request that names no model goes to: ``model.name`` when a pool
    serves that name, else the one served name of the pools that load the same base model
    (``model.name: meta-llama/Llama-3.1-8B`` beside a pool written ``model: Llama-3.1-8B``),
    else ``model.name`` (such requests are rejected: no pool serves it)."""
    name = sc.model.name
    if any(d.served_model == name for d in deps):
        return name
    try:
        base = load_model(name, sc.model.dtype).name
    except ServesimError:
        return name
    same = list(dict.fromkeys(d.served_model for d in deps if d.model.name == base))
    return same[0] if len(same) == 1 else name


def served_model(sc: Scenario, pool: PoolConfig) -> str:
    """The name requests give to reach ``pool`` (the OpenAI API's ``model`` field): its
    ``served_model_name``, else its model as written, else the scenario's ``model.name``, as
    ``vllm serve MODEL`` answers to MODEL unless ``--served-model-name`` is given."""
    return pool.served_model_name or pool.model or sc.model.name


def run_notices(wl_meta: dict[str, Any], deps: list[Deployment]) -> list[dict[str, Any]]:
    """Every change made to the input: the workload's (``workload.notices``), then the config's,
    then one line per ``engine.version`` outside the versions servesim knows."""
    versions = dict.fromkeys(d.engine.version for d in deps)
    found = [(v, version_notice(v)) for v in versions]
    return [
        *wl_meta.get("notices", []),
        *(n for d in deps for n in d.notices),
        *(
            {"code": "version_outside", "source": "engine.version", "count": None, "message": m}
            for v, m in found
            if m
        ),
    ]


def resolve_deployments(sc: Scenario) -> list[Deployment]:
    """One deployment per pool of the cluster the scenario runs as (``as_cluster``)."""
    cluster = as_cluster(sc)
    profile = load_profile(sc)
    models: dict[str, ModelSpec] = {}  # each base model loaded once, for all its pools
    deps = []
    for p in cluster.pools:
        name = p.model or sc.model.name
        if name not in models:
            if p.model is None:
                models[name] = scenario_model(sc)
            else:
                try:
                    models[name] = load_model(name, sc.model.dtype)
                except ServesimError as err:
                    raise ConfigError(f"cluster.pools[{p.name}].model: {err}") from None
        deps.append(resolve_deployment(sc, p, model=models[name], profile=profile))
    check_models(cluster, deps)
    check_data_parallel(cluster, deps)
    check_fleet_size(cluster, deps)
    return deps
