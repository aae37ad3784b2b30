"""The step-time model of a scenario: ``hardware.perf_model`` chooses between the roofline
(``roofline.build_perf_model``) and the measured-kernel model (``kernel_model``); the
engine's vLLM version and knobs give both its CUDA graphs (``perf.cuda_graphs``) and the
kernel tables' version."""

from __future__ import annotations

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec, resolve_kv_dtype_bytes
from servesim.config import EngineConfig, HardwareConfig, ModelConfig, ParallelConfig
from servesim.perf import execution_path, kernel_model, moe_backend
from servesim.perf.cuda_graphs import GraphPlan, graph_plan, version_tuple
from servesim.perf.kernel_model import KernelPerfModel, kernel_perf_model
from servesim.perf.kernels import kernel_versions
from servesim.perf.pipelined import PipelinedPerfModel
from servesim.perf.roofline import RooflinePerfModel, build_perf_model


def moe_backend_for(model: ModelSpec, gpu: GpuSpec, engine: EngineConfig | None, tp: int, ep: int) -> str:
    """``engine.moe_backend``, 'auto' resolved to vLLM's default kernel (``perf.execution_path``)."""
    return execution_path.moe_backend_for(model, gpu, engine, tp, ep)


def engine_graphs(engine: EngineConfig | None) -> GraphPlan | None:
    """The CUDA graphs of a resolved engine (None without one: eager, as operators are measured)."""
    if engine is None or engine.max_num_seqs is None or engine.max_num_batched_tokens is None:
        return None
    return graph_plan(
        engine.version,
        engine.max_num_seqs,
        engine.max_num_batched_tokens,
        engine.enforce_eager,
        engine.max_cudagraph_capture_size,
        engine.cudagraph_mode,
    )


def kernel_version_for(engine_version: str, gpu_name: str) -> str | None:
    """The kernel tables for vLLM ``engine_version`` on this GPU: the newest measured at or
    below it, else the oldest measured (None: no tables for this GPU)."""
    versions = kernel_versions(gpu_name)
    if not versions:
        return None
    want = version_tuple(engine_version)
    below = [v for v in versions if version_tuple(v) <= want]
    return max(below, key=version_tuple) if below else min(versions, key=version_tuple)


def resolve_perf_model(hardware: HardwareConfig, gpu: GpuSpec) -> str:
    """``hardware.perf_model`` as given, else 'kernels' where the GPU has measured tables and
    no calibrated profile is applied, else 'roofline'."""
    if hardware.perf_model is not None:
        return hardware.perf_model
    if hardware.profile is None and kernel_versions(gpu.name):
        return "kernels"
    return "roofline"


# The step models built last in this process, by their inputs' reprs (every field of each):
# a plan's worker resolves the same model, GPU, parallelism and engine for many candidates,
# and a measured-kernel model takes milliseconds to build (its tables, its attention grids).
# A model is not changed once built (a run wraps it, as ``perf.power.ClockedPerf`` does), so
# candidates share it; the lazily filled tables inside are a pure function of those inputs.
_BUILT: dict[str, RooflinePerfModel | PipelinedPerfModel | KernelPerfModel] = {}
_BUILT_MAX = 64


def build_step_model(
    model: ModelSpec,
    gpu: GpuSpec,
    parallel: ParallelConfig,
    hardware: HardwareConfig,
    model_cfg: ModelConfig | None = None,
    links: LinkSpec | None = None,
    engine: EngineConfig | None = None,
) -> RooflinePerfModel | PipelinedPerfModel | KernelPerfModel:
    """``_build_step_model``'s model, reused when built before in this process from equal inputs.
    The host floor a measured-kernel model reads when it is built
    (``kernel_model.EAGER_HOST_S_PER_LAYER``, which the silicon suite's cross-group check sets
    to each value of its grid) is one of them: a model built at another floor is not reused."""
    key = repr(
        (model, gpu, parallel, hardware, model_cfg, links, engine, kernel_model.EAGER_HOST_S_PER_LAYER)
    )
    perf = _BUILT.get(key)
    if perf is None:
        perf = _build_step_model(model, gpu, parallel, hardware, model_cfg, links, engine)
        while len(_BUILT) >= _BUILT_MAX:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = perf
    return perf


def _build_step_model(
    model: ModelSpec,
    gpu: GpuSpec,
    parallel: ParallelConfig,
    hardware: HardwareConfig,
    model_cfg: ModelConfig | None = None,
    links: LinkSpec | None = None,
    engine: EngineConfig | None = None,
) -> RooflinePerfModel | PipelinedPerfModel | KernelPerfModel:
    """``build_perf_model``'s model, or where ``resolve_perf_model`` says 'kernels' the measured
    kernels of ``hardware.kernel_version`` (default: ``kernel_version_for`` the engine's
    version); pipeline micro-batches wrap either. ``engine`` (resolved) sets the CUDA graphs."""
    graphs = engine_graphs(engine)
    if resolve_perf_model(hardware, gpu) != "kernels":
        return build_perf_model(model, gpu, parallel, model_cfg, links=links, graphs=graphs)
    kv_b = resolve_kv_dtype_bytes(model_cfg.kv_cache_dtype if model_cfg else "auto", model)
    version = hardware.kernel_version
    if version is None and engine is not None:
        version = kernel_version_for(engine.version, gpu.name)
    perf = kernel_perf_model(
        model,
        gpu,
        version,
        tp=parallel.tensor_parallel_size,
        pp=parallel.pipeline_parallel_size,
        kv_dtype_bytes=kv_b,
        links=links,
        ep=parallel.expert_parallel_size,
        expert_imbalance=parallel.expert_imbalance,
        graphs=graphs,
        dp=parallel.data_parallel_size,
        moe_backend=moe_backend_for(
            model,
            gpu,
            engine,
            parallel.tensor_parallel_size * parallel.data_parallel_size,
            parallel.expert_parallel_size,
        ),
        deep_gemm=moe_backend.deep_gemm_run(engine, gpu),
        sustained=hardware.sustained_clocks,
        fp32_matmul=(engine.float32_matmul_precision if engine is not None else "highest"),
    )
    if parallel.pipeline_parallel_size > 1 and parallel.num_microbatches > 1:
        return PipelinedPerfModel(perf, parallel.num_microbatches)
    return perf
