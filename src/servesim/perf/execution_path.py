"""What vLLM runs by default: the kernels a version picks for a model on a GPU.

``execution_path`` answers, for a vLLM ``engine.version``, the GPU's SM (compute capability
x 10), the routed experts' weight format, the layout (TP/EP) and the server's environment
variables (``engine.vllm_env``), which fused-MoE kernel vLLM selects, which attention
backend, and the async-scheduling and CUDA-graph defaults; each choice carries a short
reason naming vLLM's file and the version range the rule holds for.
``engine.moe_backend: auto`` resolves through it (``moe_backend_for``): the step-time model
times the chosen kernel (``kernel_moe``), the memory plan pads MXFP4 experts for it.

Every rule below was read in the source distributions of the release tags v0.10.1, v0.10.2,
v0.11.0, v0.11.2, v0.12.0, v0.13.0, v0.14.0, v0.16.0, v0.17.0, v0.18.0 and v0.19.0 (v0.11.1
and the v0.15 releases have none: they take the rules of the release before them):

- the routed experts' fused-MoE kernel (MXFP4, FP8, int4, NVFP4 and 16-bit experts), and how
  DeepGEMM's runs: ``perf.moe_backend``;
- Attention (``vllm/platforms/cuda.py``; ``get_attn_backend_cls`` through v0.11.0,
  ``_get_backend_priorities`` from v0.11.2): SM100 FlashInfer (10.0 exactly in v0.11.0),
  else FlashAttention (FA3 on SM90, FA2 below), Triton's attention for models with attention
  sinks (gpt-oss) off SM90/SM100. MLA: SM100 CUTLASS MLA through v0.14.x, FlashInfer MLA from
  v0.16.0; elsewhere FlashMLA in v0.11.0, FlashAttention MLA first from v0.11.2 (both SM90
  only), Triton MLA below SM90. ``VLLM_ATTENTION_BACKEND`` overrides.
- Async scheduling and CUDA graphs: ``config.engine_defaults.async_default`` and
  ``perf.cuda_graphs.graph_plan`` (``vllm/config/vllm.py``), reported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config.engine import EngineConfig
from servesim.config.engine_defaults import async_default
from servesim.config.vllm_version import version_tuple
from servesim.perf.moe_backend import moe_choice
from servesim.perf.sparse_attention import sparse_backend
from servesim.perf.vllm_rules import V0_11_0, V0_16_0, Choice, sm_of

#: Catalog models whose attention has sinks (one learned logit per head): FlashAttention 2
#: has no sink support, so vLLM runs Triton's attention for them below SM90.
SINK_MODELS = ("gpt-oss",)

#: vLLM's kernel -> ``engine.moe_backend`` (the kernel ``kernel_moe`` times).
SERVESIM_BACKEND = {
    "triton_kernels_matmul_ogs": "triton",
    "triton_fused_experts": "triton",
    "marlin": "marlin",
    "flashinfer_trtllm": "flashinfer_trtllm",
    "flashinfer_trtllm_mxfp8": "flashinfer_mxfp4_mxfp8",
    "flashinfer_cutlass": "flashinfer_cutlass",
    "deep_gemm": "deep_gemm",
    "vllm_cutlass_block_grouped_gemm": "triton",
}


@dataclass(frozen=True)
class ExecutionPath:
    """What a vLLM version runs for one deployment (``execution_path``)."""

    version: str
    sm: int | None
    weight_format: str
    moe: Choice | None
    attention: Choice
    async_scheduling: Choice
    cuda_graphs: Choice
    env: dict[str, str]

    @property
    def moe_backend(self) -> str:
        """``engine.moe_backend`` of the chosen MoE kernel ('auto' without MoE layers)."""
        return SERVESIM_BACKEND.get(self.moe.value, "auto") if self.moe else "auto"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vllm_version": self.version,
            "sm": self.sm,
            "weight_format": self.weight_format,
            "env": dict(self.env),
            "attention": self.attention.as_dict(),
            "async_scheduling": self.async_scheduling.as_dict(),
            "cuda_graphs": self.cuda_graphs.as_dict(),
        }
        if self.moe is not None:
            out["moe"] = {**self.moe.as_dict(), "moe_backend": self.moe_backend}
        return out


def weight_format(model: ModelSpec) -> str:
    """The routed experts' format as vLLM's MoE selection sees it: 'mxfp4', 'int4',
    'nvfp4', 'fp8_block', 'fp8' (per-tensor) or 'bf16'."""
    method = model.quant_method.lower()
    if model.expert_dtype_bytes:
        if "mxfp4" in method:
            return "mxfp4"
        if "int4" in method or "w4a16" in method or "awq" in method or "gptq" in method:
            return "int4"
        if "nvfp4" in method:
            return "nvfp4"
    if model.dtype == "fp8":
        return "fp8_block" if "block" in method else "fp8"
    if model.dtype == "nvfp4":
        return "nvfp4"
    return "bf16"


def _attention(v: tuple[int, ...], sm: int | None, model: ModelSpec, env: dict[str, str]) -> Choice:
    src = "vllm/platforms/cuda.py " + ("_get_backend_priorities" if v > V0_11_0 else "get_attn_backend_cls")
    forced = env.get("VLLM_ATTENTION_BACKEND")
    if forced:
        return Choice(forced.lower(), f"{src}: VLLM_ATTENTION_BACKEND={forced}")
    if sm is None:
        return Choice("flash_attn", "not an NVIDIA GPU of the catalog: FlashAttention assumed")
    sm100 = 100 <= sm < 110 if v > V0_11_0 else sm == 100
    if model.is_mla:
        if sm100:
            if v >= V0_16_0:
                return Choice("flashinfer_mla", f"{src}, v0.16.0+: SM100 MLA -> FLASHINFER_MLA first")
            return Choice("cutlass_mla", f"{src}, v0.11.0-v0.14.x: SM100 MLA -> CUTLASS_MLA first")
        if sm < 90:
            return Choice(
                "triton_mla", f"{src}: FlashMLA and FlashAttention MLA need SM90 -> TRITON_MLA on SM{sm}"
            )
        if v > V0_11_0:
            return Choice("flash_attn_mla", f"{src}, v0.11.2+: SM{sm} MLA -> FLASH_ATTN_MLA first")
        return Choice("flashmla", f"{src}, v0.11.0: SM{sm} MLA -> FlashMLA")
    if sm100:
        return Choice("flashinfer", f"{src}: SM100 -> FLASHINFER first (its TRTLLM-gen kernels on SM100)")
    if sm != 90 and any(n in model.name.lower() for n in SINK_MODELS):
        return Choice(
            "triton_attn", f"{src}: attention sinks need FlashAttention 3 (SM90) -> TRITON_ATTN on SM{sm}"
        )
    fa = "3" if sm == 90 else "2"
    return Choice(f"flash_attn{fa}", f"{src}: SM{sm} -> FLASH_ATTN first (FA{fa} on SM{sm})")


def _graphs(engine: EngineConfig) -> Choice:
    src = "vllm/config/vllm.py"
    if engine.enforce_eager:
        return Choice("none", "--enforce-eager: no graphs")
    v = version_tuple(engine.version)
    mode = engine.cudagraph_mode or ("full_and_piecewise" if v >= (0, 11) else "piecewise")
    why = (
        "set"
        if engine.cudagraph_mode
        else ("v0.11.0+ default (O2)" if v >= (0, 11) else "default before v0.11.0")
    )
    size = engine.max_cudagraph_capture_size
    cap = f"capture up to {size} tokens (set)" if size else "capture up to min(2 x max_num_seqs, 512) tokens"
    return Choice(mode, f"{src}: cudagraph_mode {mode} ({why}); {cap} (_set_cudagraph_sizes)")


def _sparse(model: ModelSpec, sm: int | None, engine: EngineConfig, tp: int) -> Choice:
    """DeepSeek sparse attention's backend, at the checkpoint's KV-cache dtype."""
    backend = sparse_backend(model, sm, engine.version, tp, model.default_kv_dtype_bytes)
    return Choice(backend.name, backend.why)


def execution_path(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: EngineConfig,
    tp: int = 1,
    ep: int = 1,
    pipeline_parallel_size: int = 1,
) -> ExecutionPath:
    """What ``engine.version`` runs for ``model`` on ``gpu`` at this layout with
    ``engine.vllm_env`` set (see the module doc). ``engine.moe_backend`` other than 'auto'
    and ``engine.async_scheduling`` / ``cudagraph_mode`` set by the user are reported as set."""
    v, sm, env = version_tuple(engine.version), sm_of(gpu), dict(engine.vllm_env)
    fmt = weight_format(model)
    moe: Choice | None = None
    if model.is_moe:
        if engine.moe_backend != "auto":
            moe = Choice(engine.moe_backend, "engine.moe_backend set")
        elif sm is None:
            moe = Choice(
                "triton_fused_experts", "not an NVIDIA GPU of the catalog: Triton fused_experts assumed"
            )
        else:
            moe = moe_choice(v, sm, fmt, env, tp if ep == 1 else 1, ep, model)
    if engine.async_scheduling is None:
        on = async_default(engine, True, pipeline_parallel_size)
        why = "vllm/config/vllm.py: on from v0.14.0 for V1 on a GPU (off before v0.15.0 with PP or drafts)"
    else:
        on = engine.async_scheduling
        default = async_default(engine, True, pipeline_parallel_size)
        why = "the version's default (vllm/config/vllm.py)" if on == default else "set (--async-scheduling)"
    value = "on" if on else "off"
    if on and pipeline_parallel_size > 1:  # engine.batch_queue: the synchronous queue
        value = "on in vLLM, not modelled with pipeline parallelism (run synchronously)"
        why += "; servesim runs a pipeline's batch queue without it (engine/batch_queue.py)"
    return ExecutionPath(
        version=engine.version,
        sm=sm,
        weight_format=fmt,
        moe=moe,
        attention=_attention(v, sm, model, env) if not model.index_topk else _sparse(model, sm, engine, tp),
        async_scheduling=Choice(value, why),
        cuda_graphs=_graphs(engine),
        env=env,
    )


def moe_backend_for(
    model: ModelSpec, gpu: GpuSpec, engine: EngineConfig | None, tp: int = 1, ep: int = 1
) -> str:
    """``engine.moe_backend`` with 'auto' resolved to the kernel vLLM picks (``execution_path``)."""
    if engine is None:
        return "auto"
    if engine.moe_backend != "auto" or not model.is_moe:
        return engine.moe_backend
    return execution_path(model, gpu, engine, tp, ep).moe_backend
