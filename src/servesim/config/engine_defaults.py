"""An engine section's defaults filled in: vLLM's per-GPU batch knobs, per-version execution
defaults (async scheduling, memory utilization, the API server), per-policy defaults; the
result is a ``ResolvedEngine``. Pure functions: the config is never written back."""

from __future__ import annotations

from typing import Any, NewType

from servesim.config.engine import EngineConfig, budget_refusal
from servesim.config.vllm_version import version_tuple
from servesim.errors import ConfigError

#: vLLM turned async scheduling on by default in 0.14 (vllm-project/vllm#27614: "Enable
#: async scheduling unless there is an incompatible option" in ``vllm/config/vllm.py``);
#: pipeline parallelism and EAGLE/MTP speculative decoding joined in 0.15 (#32359, #31998).
ASYNC_DEFAULT_FROM = (0, 14)
ASYNC_PP_SPEC_FROM = (0, 15)
#: vLLM's ``get_batch_defaults`` gave GPUs of >= 160 GiB (B200, B300, GB200, MI300X) a
#: 16384-token budget from vllm-project/vllm#51726 (merged 2026-08; in v0.28.0's
#: ``vllm/engine/arg_utils.py``); before it every GPU of >= 70 GiB but the A100 had 8192.
LARGE_GPU_BUDGET_FROM = (0, 28)
#: vLLM's default ``--gpu-memory-utilization`` was 0.9 until v0.21.0 turned CUDA-graph memory
#: profiling (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``) on by default and raised it to 0.92
#: (vllm-project/vllm#38284: the graphs' estimated memory is taken from the KV cache's budget
#: and the 0.02 makes up for it).
GPU_MEMORY_UTILIZATION_092_FROM = (0, 21)

GIB = 1 << 30

#: Per-policy defaults of the knobs left ``None`` (see docs/policies.md).
POLICY_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm_v1": {"watermark": 0.0},
    "vllm_v0": {
        "max_num_seqs": 256,
        "watermark": 0.01,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
    },
    "sarathi": {
        "max_num_seqs": 128,
        "max_num_batched_tokens": 512,
        "watermark": 0.01,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": False,
    },
    "orca": {
        "max_num_seqs": 256,
        "watermark": 0.0,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
    },
    "static": {
        "max_num_seqs": 256,
        "watermark": 0.0,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
    },
}
#: Policies that cannot use prefix caching (no paged, shared blocks).
_NO_PREFIX_CACHING = ("orca", "static")


def resolve_policy(engine: EngineConfig, max_model_len: int | None = None) -> EngineConfig:
    """Fill the knobs a policy defaults differently from vLLM V1 (a pure function).

    vllm_v0: max_num_seqs 256, watermark 0.01, no chunked prefill, budget
    max(max_model_len, 2048) (vLLM V0's SchedulerConfig). sarathi: max_num_seqs 128, chunk
    budget 512, watermark 0.01 (Sarathi-Serve's defaults). orca and static: no chunking and
    a loose budget, max(max_model_len, 16384) tokens (they have none; it bounds the prompts
    that join one iteration and sizes the activation memory). Chunked prefill is a property of the
    policy, so it is set here whatever the input said; prefix caching is off unless set
    (vLLM V0's default), and always off for orca and static.
    """
    d = POLICY_DEFAULTS[engine.policy]
    upd: dict[str, Any] = {}
    if engine.watermark is None:
        upd["watermark"] = d["watermark"]
    if engine.policy == "vllm_v1":
        return engine.model_copy(update=upd) if upd else engine
    upd["enable_chunked_prefill"] = d["enable_chunked_prefill"]
    if engine.policy in _NO_PREFIX_CACHING or "enable_prefix_caching" not in engine.model_fields_set:
        upd["enable_prefix_caching"] = d["enable_prefix_caching"]
    seqs = engine.max_num_seqs if engine.max_num_seqs is not None else d["max_num_seqs"]
    upd["max_num_seqs"] = seqs
    tokens = engine.max_num_batched_tokens
    mml = max_model_len or engine.max_model_len
    if tokens is None:
        if engine.policy == "vllm_v0":
            tokens = max(mml or 2048, 2048)
        else:
            # orca/static have no token budget; this bounds the prompts joining one iteration
            # (and sizes the activation memory, as vLLM's profiling run does).
            tokens = d.get("max_num_batched_tokens") or max(mml or 2048, 16384)
        upd["max_num_batched_tokens"] = tokens
    else:
        why = budget_refusal(d["enable_chunked_prefill"], tokens, mml)
        if why:
            raise ConfigError(f"engine.{why} (policy {engine.policy} does not chunk prompts)")
    return engine.model_copy(update=upd)


#: The engine's host time per scheduled request and step (``cpu_overhead_per_req_s``),
#: measured on vLLM 0.32's V1 engine (its CPU build, the same scheduler code, a 4-layer
#: model, decode-only steps of 8 to 128 requests, median step of each size, on this project's
#: 2-core development machine): ``Scheduler.schedule`` 17.7 us, ``update_from_output`` 11.2 us,
#: the model runner's ``_bookkeeping_sync`` 4.0 us per request (slopes from 8 to 128 requests).
#: The detokenizer's 9.6 us runs in the API-server process, beside the engine: not in it.
CPU_PER_REQ_S = 33e-6


def async_default(engine: EngineConfig, on_gpu: bool, pipeline_parallel_size: int = 1) -> bool:
    """vLLM's default for ``async_scheduling`` (``VllmConfig``'s check when it is None).

    On from ``ASYNC_DEFAULT_FROM`` for the V1 engine on a GPU; before ``ASYNC_PP_SPEC_FROM``
    it stays off with pipeline parallelism or speculative decoding. Off for the other
    policies (vLLM V0, Sarathi, Orca, static batching have no async scheduler) and for the
    CPU backend, whose recordings servesim replays in sync mode.
    """
    v = version_tuple(engine.version)
    if not on_gpu or engine.policy != "vllm_v1" or v < ASYNC_DEFAULT_FROM:
        return False
    if v < ASYNC_PP_SPEC_FROM and (pipeline_parallel_size > 1 or engine.speculative.num_speculative_tokens):
        return False
    return True


def default_gpu_memory_utilization(version: str) -> float:
    """vLLM's default ``--gpu-memory-utilization`` in ``version`` (``GPU_MEMORY_UTILIZATION_092_FROM``)."""
    return 0.92 if version_tuple(version) >= GPU_MEMORY_UTILIZATION_092_FROM else 0.9


def resolve_execution(engine: EngineConfig, gpu_name: str, pipeline_parallel_size: int = 1) -> EngineConfig:
    """Fill ``async_scheduling`` with the version's default for this device (``async_default``),
    ``gpu_memory_utilization`` with the version's (``default_gpu_memory_utilization``)
    and ``frontend.enabled`` (on for vLLM's policies on a GPU); a device whose name starts
    with 'cpu' (vLLM's CPU backend) is not a GPU."""
    on_gpu = bool(gpu_name) and not gpu_name.lower().startswith("cpu")
    upd: dict[str, Any] = {}
    if engine.async_scheduling is None:
        upd["async_scheduling"] = async_default(engine, on_gpu, pipeline_parallel_size)
    if engine.frontend.enabled is None:
        on = on_gpu and engine.policy in ("vllm_v1", "vllm_v0")
        upd["frontend"] = engine.frontend.model_copy(update={"enabled": on})
    if engine.gpu_memory_utilization is None:
        upd["gpu_memory_utilization"] = default_gpu_memory_utilization(engine.version)
    if engine.cpu_overhead_per_req_s is None:
        upd["cpu_overhead_per_req_s"] = (
            CPU_PER_REQ_S if on_gpu and engine.policy in ("vllm_v1", "vllm_v0") else 0.0
        )
    return engine.model_copy(update=upd) if upd else engine


#: An engine configuration ``resolve_engine`` returned: no None batch knobs, the policy's
#: and the version's defaults filled. What a replica is built from (``engine.build``,
#: ``cluster.spec.PoolSpec``, ``deployment.Deployment``); a type, so that an unresolved
#: ``EngineConfig`` passed there is a mypy error.
ResolvedEngine = NewType("ResolvedEngine", EngineConfig)


def resolve_engine(
    engine: EngineConfig,
    gpu_mem_bytes: float | None = None,
    gpu_name: str = "",
    max_model_len: int | None = None,
    world_size: int = 1,
    pipeline_parallel_size: int = 1,
) -> ResolvedEngine:
    """Fill ``None`` batch knobs with vLLM 0.32's `vllm serve` defaults for this GPU.

    ``engine/arg_utils.py:get_batch_defaults``: >= 160 GiB: 16384 tokens / 1024 seqs
    (from vLLM 0.28, ``LARGE_GPU_BUDGET_FROM``; 8192 before); >= 70 GiB and not an A100:
    8192 / 1024; otherwise 2048 / 256. With chunked prefill
    off, an unset budget is raised to max(max_model_len, default). Policies other than
    vllm_v1 take their own defaults first (``resolve_policy``); ``async_scheduling`` takes
    the version's default for this device (``resolve_execution``; no GPU name: off).
    """
    engine = resolve_execution(resolve_policy(engine, max_model_len), gpu_name, pipeline_parallel_size)
    if engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None:
        return ResolvedEngine(engine)
    mem = gpu_mem_bytes or 0
    if mem >= 160 * GIB and version_tuple(engine.version) >= LARGE_GPU_BUDGET_FROM:
        tokens, seqs = 16384, 1024
    elif mem >= 70 * GIB and "a100" not in gpu_name.lower():
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    upd: dict[str, int] = {}
    if engine.max_num_seqs is None:
        upd["max_num_seqs"] = seqs
    if engine.max_num_batched_tokens is None:
        if not engine.enable_chunked_prefill and max_model_len:
            tokens = max(tokens, max_model_len)
        upd["max_num_batched_tokens"] = tokens
    return ResolvedEngine(engine.model_copy(update=upd))


def resolve_kv_offload(engine: ResolvedEngine, host_bw: float) -> ResolvedEngine:
    """``engine`` with its offload tiers' host link set: the GPU's ``host_bw`` (bytes/s) unless given."""
    off = engine.kv_offload
    if not off.enabled or off.host_gb_per_s is not None:
        return engine
    return ResolvedEngine(
        engine.model_copy(update={"kv_offload": off.model_copy(update={"host_gb_per_s": host_bw / 1e9})})
    )
