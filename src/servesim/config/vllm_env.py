"""The environment variables of vLLM's server that ``engine.vllm_env`` may set (the ones that
change its default kernels) and the values vLLM reads for each."""

from __future__ import annotations

from typing import Any

#: The environment variables of vLLM that ``engine.vllm_env`` may set: the ones that change the
#: default kernels (``perf.execution_path``).
VLLM_ENV_VARS = (
    "VLLM_MXFP4_USE_MARLIN",
    "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8",
    "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS",
    "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16",
    "VLLM_USE_FLASHINFER_MOE_FP8",
    "VLLM_FLASHINFER_MOE_BACKEND",
    "VLLM_USE_DEEP_GEMM",
    "VLLM_MOE_USE_DEEP_GEMM",
    "VLLM_USE_DEEP_GEMM_E8M0",
    "VLLM_USE_DEEP_GEMM_E8M0_HOPPER",
    "VLLM_ATTENTION_BACKEND",
)
#: The values vLLM's ``envs.py`` accepts for the two variables that are not switches (every
#: other one is read as ``bool(int(value))``, so "true" or "yes" stops the server):
#: ``VLLM_FLASHINFER_MOE_BACKEND`` (``env_with_choices``) and ``VLLM_ATTENTION_BACKEND``, a
#: member name of the attention backend enum (``vllm/v1/attention/backends/registry.py``
#: ``AttentionBackendEnum``, v0.11+; ``vllm/platforms/interface.py`` ``_Backend`` before, whose
#: V1 names end in _VLLM_V1), looked up by exact name.
VLLM_ENV_CHOICES: dict[str, tuple[str, ...]] = {
    "VLLM_FLASHINFER_MOE_BACKEND": ("throughput", "latency", "masked_gemm"),
    "VLLM_ATTENTION_BACKEND": (
        "FLASH_ATTN",
        "FLASH_ATTN_DIFFKV",
        "TRITON_ATTN",
        "FLASHINFER",
        "FLASHINFER_MLA",
        "FLASHINFER_MLA_SPARSE",
        "TRITON_MLA",
        "CUTLASS_MLA",
        "FLASHMLA",
        "FLASHMLA_SPARSE",
        "FLASH_ATTN_MLA",
        "FLEX_ATTENTION",
        "TREE_ATTN",
        "TORCH_SDPA",
        "XFORMERS",
        "NO_ATTENTION",
        "CPU_ATTN",
        "ROCM_ATTN",
        "ROCM_AITER_FA",
        "ROCM_AITER_MLA",
        "ROCM_AITER_TRITON_MLA",
        "ROCM_AITER_MLA_SPARSE",
        "ROCM_AITER_UNIFIED_ATTN",
        "FLASH_ATTN_VLLM_V1",
        "TRITON_ATTN_VLLM_V1",
        "FLASHINFER_VLLM_V1",
        "FLASHMLA_VLLM_V1",
        "TRITON_MLA_VLLM_V1",
        "TORCH_SDPA_VLLM_V1",
        "ROCM_AITER_MLA_VLLM_V1",
    ),
}


def check_env_value(name: str, value: Any) -> None:
    """``value`` as vLLM's ``envs.py`` reads ``name`` (``VLLM_ENV_CHOICES``; else an integer
    string, non-zero for on), or a ValueError naming both."""
    choices = VLLM_ENV_CHOICES.get(name)
    if choices is not None:
        if str(value) not in choices:
            raise ValueError(f"{name}={value!r}: expected one of {', '.join(choices)} (as vLLM reads it)")
        return
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name}={value!r}: expected '1' or '0' (vLLM reads it as bool(int(value)))")
    try:
        int(value)
    except ValueError:
        raise ValueError(
            f"{name}={value!r}: expected '1' or '0' (vLLM reads it as bool(int(value)) and would not start)"
        ) from None


def env_pairs(v: Any) -> tuple[tuple[str, str], ...]:
    """``engine.vllm_env`` as written (a mapping, or its pairs) as sorted pairs, so the config
    stays hashable, with the values as the server's environment holds them (strings); a
    ValueError for a variable not modelled or a value vLLM would not read."""
    if isinstance(v, dict):
        pairs = list(v.items())
    elif isinstance(v, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in v):
        pairs = [tuple(p) for p in v]
    else:
        raise ValueError("expected a mapping of vLLM environment variable names to values")
    bad = sorted({str(k) for k, _ in pairs} - set(VLLM_ENV_VARS))
    if bad:
        raise ValueError(f"{', '.join(bad)} not modelled; expected some of {', '.join(VLLM_ENV_VARS)}")
    for k, val in pairs:
        check_env_value(str(k), val)
    return tuple(sorted((str(k), str(val)) for k, val in pairs))
