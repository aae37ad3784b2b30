"""The refusals of a deployment, before any replica is built.

vLLM's start-up refusals of one pool, in the order ``deployment.resolve_deployment`` runs
them: the layout, the memory fit and the token budget (``check_starts``), a forced MoE
kernel vLLM has not got on this GPU (``check_moe_backend``), and KV offload tiers that hold
no block or do not fit the host (``check_offload_tier``, ``check_offload_host_memory``).
Then those of the pools together (``deployment.resolve_deployments``): several served
models (``check_models``), DP ranks (``check_data_parallel``) and a fleet too large to
simulate (``check_fleet_size``). Each raises a user error naming the scenario's field
(``where``/``*_field``: a pool's own, or the scenario's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config import ClusterConfig, EngineConfig, ParallelConfig, ResolvedEngine, budget_refusal
from servesim.errors import ConfigError, DoesNotFitError
from servesim.perf.memory import MemoryPlan, plan_memory


class PoolFacts(Protocol):
    """What the checks of the pools together read of each pool's ``deployment.Deployment``
    (a Protocol: ``deployment`` imports this module)."""

    role: str
    num_replicas: int
    model: ModelSpec
    parallel: ParallelConfig
    served_model: str


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
    # VLLM_USE_FLASHINFER_MOE_FP8=1 with the latency backend there (moe_backend._fp8_switches)
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


def check_data_parallel(cluster: ClusterConfig, deps: Sequence[PoolFacts]) -> None:
    """Refuse DP ranks where they are not modelled: in a prefill or decode pool, under
    ``cluster.operations`` or with migration (a fixed fleet of colocated pools only)."""
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


def check_fleet_size(cluster: ClusterConfig, deps: Sequence[PoolFacts]) -> None:
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


def check_models(cluster: ClusterConfig, deps: Sequence[PoolFacts]) -> None:
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
