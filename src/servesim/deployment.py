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
pool (``Deployment.engine``), and ``resolved_scenario`` is the scenario as it ran.

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
    budget_refusal,
    resolve_engine,
    resolve_kv_offload,
)
from servesim.config.vllm_version import version_notice
from servesim.errors import CatalogError, ConfigError, DoesNotFitError, ServesimError
from servesim.perf.base import PerfModel
from servesim.perf.memory import MemoryPlan, plan_memory

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


def check_starts(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float,
    parallel_field: str = "parallel",
    engine_field: str = "engine",
) -> MemoryPlan:
    """vLLM's start-up refusals, in one check, and the memory plan they leave: the layout
    (``catalog.parallel.check_parallel``), the memory fit (``perf.memory.plan_memory``:
    the weights, one ``max_model_len`` sequence in the KV cache, ``max_model_len`` within
    the model's positions, a block override) and the token budget (``check_budget``).
    ``*_field`` name the scenario's fields in the messages (a pool's own, or the scenario's)."""
    from servesim.catalog.parallel import check_parallel

    check_parallel(model, parallel, parallel_field)
    plan = plan_memory(model, gpu, engine, parallel, kv_dtype_bytes=kv_dtype_bytes)
    check_budget(engine, plan.max_model_len, engine_field)
    return plan


def check_budget(engine: EngineConfig, max_model_len: int, field: str = "engine") -> None:
    """vLLM's start-up refusals of a resolved engine (``field`` names it in the message):
    with chunked prefill off, one step must hold a max-length prompt
    (``config.engine.budget_refusal``)."""
    why = budget_refusal(engine.enable_chunked_prefill, engine.max_num_batched_tokens, max_model_len)
    if why:
        raise ConfigError(f"{field}.{why}: raise it, lower {field}.max_model_len, or enable chunked prefill")


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
    from servesim.perf.factory import build_step_model

    model = model or scenario_model(sc)
    if profile is None:
        profile = load_profile(sc)
    if pool is None:
        pool = as_cluster(sc).pools[0]
    gpu_name = pool.gpu if pool.gpu is not None else sc.hardware.gpu
    if profile:
        gpu = profile.resolve_gpu(gpu_name)
    else:
        try:
            gpu = get_gpu(gpu_name)
        except CatalogError as err:
            field = f"cluster.pools[{pool.name}].gpu" if pool.gpu is not None else "hardware.gpu"
            raise ConfigError(f"{field}: {err}") from None
    par = pool.parallel or sc.parallel
    eng = pool.engine or sc.engine
    found = []
    if profile is not None:
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
        eng = adjusted
    engine = resolved_engine(eng, model, gpu, par)
    engine = resolve_kv_offload(engine, gpu.host_bw)  # offload tiers: the GPU's host link
    kv_b = resolve_kv_dtype_bytes(sc.model.kv_cache_dtype, model)
    plan = check_starts(
        model,
        gpu,
        engine,
        par,
        kv_b,
        f"cluster.pools[{pool.name}].parallel" if pool.parallel else "parallel",
        f"cluster.pools[{pool.name}].engine" if pool.engine else "engine",
    )
    check_moe_backend(model, gpu, engine, f"cluster.pools[{pool.name}].engine" if pool.engine else "engine")
    check_offload_tier(
        engine,
        plan.kv_bytes_per_block,
        par.tensor_parallel_size * par.pipeline_parallel_size,
        f"cluster.pools[{pool.name}].engine" if pool.engine else "engine",
    )
    check_offload_host_memory(
        engine,
        gpu,
        sc.hardware.host_mem_gib_per_gpu,
        par.tensor_parallel_size * par.pipeline_parallel_size,
        f"cluster.pools[{pool.name}].engine" if pool.engine else "engine",
    )
    links = pool_links(gpu, pool.links)
    perf: PerfModel = (
        profile.perf_model(model, gpu, par, sc.model, links=links)
        if profile
        else build_step_model(model, gpu, par, sc.hardware, sc.model, links=links, engine=engine)
    )
    if engine.lora.enabled:  # the LoRA kernels and loads on top
        from servesim.perf.lora import lora_perf_model

        perf = lora_perf_model(engine, model, gpu, par, perf)
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
        perf=perf,
        kv_dtype_bytes=kv_b,
        profile=profile,
        notices=found,
        served_model=served_model(sc, pool),
    )


def check_moe_backend(model: ModelSpec, gpu: GpuSpec, engine: ResolvedEngine, where: str) -> None:
    """Refuse an ``engine.moe_backend`` forced where vLLM has no such kernel: FlashInfer's
    TRTLLM-gen MoE on a GPU other than Blackwell (SM 10.x, ``fused_moe/oracle``'s
    ``is_device_capability_family(100)``), its MXFP8-activation variant for experts that are
    not MXFP4, DeepGEMM's grouped GEMM for experts that are not block-FP8 or off SM 9.0/10.0
    (``_valid_deep_gemm``), FlashInfer's CUTLASS MoE below SM 9.0. A dense model has no
    routed experts: the setting does nothing there, as vLLM's."""
    from servesim.perf.execution_path import sm_of, weight_format

    backend = engine.moe_backend
    if backend == "auto" or not model.is_moe:
        return
    sm, fmt = sm_of(gpu), weight_format(model)
    on = f"{gpu.name} (SM {sm / 10:.1f})" if sm is not None else f"{gpu.name} (not an NVIDIA GPU)"
    why = ""
    # per-tensor FP8 on SM 9.0 keeps it: the FP8 selection before vLLM 0.16 sends
    # VLLM_USE_FLASHINFER_MOE_FP8=1 with the latency backend there (execution_path._fp8)
    hopper_fp8 = backend == "flashinfer_trtllm" and fmt == "fp8" and sm == 90
    if (
        backend in ("flashinfer_trtllm", "flashinfer_mxfp4_mxfp8")
        and not (sm and 100 <= sm < 110)
        and not hopper_fp8
    ):
        why = f"FlashInfer's TRTLLM-gen MoE runs on Blackwell (SM 10.x) only, not on {on}"
    elif backend == "flashinfer_mxfp4_mxfp8" and fmt != "mxfp4":
        why = f"MXFP8 activations are for MXFP4 experts; {model.name}'s experts are {fmt}"
    elif backend == "deep_gemm" and (fmt != "fp8_block" or sm not in (90, 100)):
        why = f"DeepGEMM's MoE runs block-FP8 experts on SM 9.0 or 10.0; here {fmt} experts on {on}"
    elif backend == "flashinfer_cutlass" and not (sm and sm >= 90):
        why = f"FlashInfer's CUTLASS MoE needs SM 9.0 or newer, not {on}"
    if why:
        raise ConfigError(f"{where}.moe_backend: {backend}: {why}; expected auto or a kernel vLLM runs there")


def check_offload_tier(engine: ResolvedEngine, kv_bytes_per_block: float, num_gpus: int, where: str) -> None:
    """Refuse an offload tier too small for one offloaded block of the replica (every GPU's
    shard of it, as ``engine.kv_offload`` sizes the tier): it would offload nothing."""
    off = engine.kv_offload
    if not off.enabled or kv_bytes_per_block <= 0:
        return
    tokens = off.tier_block_size(engine.block_size)
    whole = kv_bytes_per_block * (tokens // engine.block_size) * num_gpus
    for tier, gib in (("cpu_size_gib", off.cpu_size_gib), ("disk_size_gib", off.disk_size_gib)):
        if 0 < gib * (1 << 30) < whole:
            raise ConfigError(
                f"{where}.kv_offload.{tier}: {gib:g} GiB holds no offloaded block of {tokens} tokens "
                f"({whole / (1 << 20):,.1f} MiB over the replica's {num_gpus} GPU(s)); expected at "
                f"least {whole / (1 << 30):.3g} GiB"
            )


def check_offload_host_memory(
    engine: ResolvedEngine, gpu: GpuSpec, gib_per_gpu: float | None, num_gpus: int, where: str
) -> None:
    """Refuse a CPU offload tier larger than the replica's host memory (``hardware.host_mem_gib_per_gpu``,
    else the GPU catalog's reference node, ``GpuSpec.host_mem_bytes``; unknown: not checked).

    vLLM does not clamp it: its ``CPUOffloadingSpec`` (``vllm/v1/kv_offload/cpu.py``, v0.11 on)
    sizes the tier as ``cpu_bytes_to_use // kv_bytes_per_offloaded_block`` blocks and maps all
    ``cpu_bytes_to_use`` bytes of pinned host memory at start-up (LMCache's
    ``max_local_cpu_size`` likewise allocates its buffer), which fails on a host without them.
    Simplified: the rest of the host's use (the weights' staging, the API server) is not counted."""
    off = engine.kv_offload
    per_gpu = gib_per_gpu * (1 << 30) if gib_per_gpu is not None else gpu.host_mem_bytes
    if not off.enabled or per_gpu <= 0:
        return
    host = per_gpu * num_gpus
    if off.cpu_size_gib * (1 << 30) > host:
        source = (
            "hardware.host_mem_gib_per_gpu" if gib_per_gpu is not None else f"the catalog's {gpu.name} node"
        )
        raise DoesNotFitError(  # the tier does not fit the host (a plan prunes it for memory)
            f"{where}.kv_offload.cpu_size_gib: {off.cpu_size_gib:g} GiB exceeds the host memory of the "
            f"replica's {num_gpus} GPU(s): {host / (1 << 30):,.4g} GiB "
            f"({per_gpu / (1 << 30):,.4g} GiB per GPU, {source}); vLLM allocates the whole tier in pinned "
            "host memory at start-up"
        )


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
    for pool, d in zip(cluster.pools, deps):
        if d.parallel.data_parallel_size > 1 and (
            d.role != "colocated" or cluster.operations is not None or cluster.migration.enabled
        ):
            field = f"cluster.pools[{pool.name}].parallel" if pool.parallel else "parallel"
            raise ConfigError(
                f"{field}.data_parallel_size: {d.parallel.data_parallel_size} DP ranks run in "
                "colocated pools of a fixed fleet only (not in prefill/decode pools, under "
                "cluster.operations or with migration); expected 1 there"
            )
    check_fleet_size(cluster, deps)
    return deps


def check_fleet_size(cluster: ClusterConfig, deps: list[Deployment]) -> None:
    """Refuse a fleet (its pools' replicas, or the autoscaler's most) that this machine's
    memory cannot simulate, naming the field, before any replica is built."""
    from servesim.workload.limits import check_replicas

    most = {p.name: d.num_replicas for p, d in zip(cluster.pools, deps, strict=True)}
    scaled = cluster.operations.autoscaling if cluster.operations is not None else None
    for a in scaled.pools if scaled is not None else []:
        most[a.pool] = max(most.get(a.pool, 0), a.max_replicas)
    biggest = max(most, key=lambda name: most[name])
    check_replicas(
        sum(most.values()), f"cluster.pools[{biggest}]: num_replicas (or autoscaling max_replicas)"
    )


def check_models(cluster: ClusterConfig, deps: list[Deployment]) -> None:
    """A cluster of several served models (``served_model``) runs a fixed fleet, colocated or
    with a prefill and a decode pool per model: the refusals of what it does not model, and
    of one name given to two models."""
    served: dict[str, str] = {}
    for p, d in zip(cluster.pools, deps, strict=True):
        other = served.setdefault(d.served_model, d.model.name)
        if other != d.model.name:
            raise ConfigError(
                f"cluster.pools[{p.name}].served_model_name: {d.served_model!r} names two models "
                f"({other} and {d.model.name}); expected one model per served name"
            )
    if len(served) < 2:
        return
    if any(d.role != "colocated" for d in deps):  # disaggregated: a prefill/decode pair per model
        for name in served:
            roles = {d.role for d in deps if d.served_model == name}
            missing = [r for r in ("prefill", "decode") if r not in roles]
            if missing:
                raise ConfigError(
                    f"cluster.pools: model {name!r} has no {' and no '.join(missing)} pool; with "
                    f"prefill/decode pools, each of the {len(served)} models ({', '.join(served)}) "
                    "needs a prefill pool and a decode pool of its own"
                )
    if cluster.operations is not None:
        raise ConfigError(
            f"cluster.operations: pools serve {len(served)} models ({', '.join(served)}); "
            "operations run a cluster of one model: remove cluster.operations, or serve one model"
        )
