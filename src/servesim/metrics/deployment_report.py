"""What a report says about the deployment itself: its memory plan and its step-time model,
one entry per pool (a single-replica run has one), from ``Result.deployments``
(``servesim.deployment.Deployment``, read through ``metrics.records.PoolDeployment``)."""

from __future__ import annotations

import math
from typing import Any

from servesim.metrics.records import PoolDeployment, Result


def memory_plan(dep: PoolDeployment, mean_request_tokens: float | None) -> dict[str, Any]:
    """One GPU's memory: where it goes, and how many mean-length requests the KV cache holds."""
    p, eng = dep.plan, dep.engine
    mem = float(dep.gpu.mem_bytes)
    fit = None
    if mean_request_tokens and mean_request_tokens > 0:
        fit = p.num_gpu_blocks // max(1, math.ceil(mean_request_tokens / p.block_size))
        if dep.model.linear_attention is not None and eng.max_num_seqs:  # as many as hold states
            fit = min(fit, eng.max_num_seqs)
    return {
        "pool": dep.name,
        "gpu": dep.gpu.name,
        "tensor_parallel_size": dep.parallel.tensor_parallel_size,
        "pipeline_parallel_size": dep.parallel.pipeline_parallel_size,
        "gpu_mem_bytes": mem,
        "gpu_memory_utilization": eng.gpu_memory_utilization,
        "usable_bytes": p.usable_bytes,
        "weights_bytes_per_gpu": p.weights_bytes,
        "activation_bytes": p.activation_bytes,
        "lora_bytes": p.lora_bytes,
        "non_torch_reserve_bytes": p.reserve_bytes,
        "outside_utilization_bytes": mem - p.usable_bytes,  # CUDA context and graphs live here
        "kv_cache_bytes": p.kv_cache_bytes,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "block_size": p.block_size,
        "num_gpu_blocks": p.num_gpu_blocks,
        "kv_capacity_tokens": p.kv_capacity_tokens,
        "max_model_len": p.max_model_len,
        "mean_request_tokens": mean_request_tokens,
        "num_mean_requests_fit": fit,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
    }


def execution_path(dep: PoolDeployment) -> dict[str, Any] | None:
    """What the deployment's vLLM version runs by default on its GPU, and why
    (``perf.execution_path``); None for a deployment without one (a replayed CPU profile)."""
    from servesim.perf.execution_path import execution_path as path

    eng, par = dep.engine, dep.parallel
    if dep.profile is not None or dep.gpu.name.lower().startswith("cpu"):
        return None
    tp = par.tensor_parallel_size * par.data_parallel_size
    p = path(dep.model, dep.gpu, eng, tp, par.expert_parallel_size, par.pipeline_parallel_size)
    return {"pool": dep.name, "gpu": dep.gpu.name, **p.as_dict()}


def deployment_sections(result: Result, mean_request_tokens: float | None) -> dict[str, Any]:
    """``memory``, ``step_time_model`` and ``vllm_execution_path``: lists with one entry per pool."""
    deps = result.deployments
    return {
        "memory": [memory_plan(d, mean_request_tokens) for d in deps],
        "step_time_model": [{"pool": d.name, **d.step_time_model()} for d in deps],
        "vllm_execution_path": [p for p in (execution_path(d) for d in deps) if p is not None],
    }
