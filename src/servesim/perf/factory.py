"""The step-time model of a scenario: ``hardware.perf_model`` chooses between the roofline
(``roofline.build_perf_model``) and the measured-kernel model (``kernel_model``)."""

from __future__ import annotations

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec, resolve_kv_dtype_bytes
from servesim.config import HardwareConfig, ModelConfig, ParallelConfig
from servesim.perf.kernel_model import KernelPerfModel, kernel_perf_model
from servesim.perf.pipelined import PipelinedPerfModel
from servesim.perf.roofline import RooflinePerfModel, build_perf_model


def build_step_model(model: ModelSpec, gpu: GpuSpec, parallel: ParallelConfig, hardware: HardwareConfig,
                     model_cfg: ModelConfig | None = None, links: LinkSpec | None = None
                     ) -> RooflinePerfModel | PipelinedPerfModel | KernelPerfModel:
    """``build_perf_model``'s model, or with ``hardware.perf_model: kernels`` the measured
    kernels of ``hardware.kernel_version`` (pipeline micro-batches wrap either)."""
    if hardware.perf_model != "kernels":
        return build_perf_model(model, gpu, parallel, model_cfg, links=links)
    kv_b = resolve_kv_dtype_bytes(model_cfg.kv_cache_dtype if model_cfg else "auto", model)
    perf = kernel_perf_model(model, gpu, hardware.kernel_version, tp=parallel.tensor_parallel_size,
                             pp=parallel.pipeline_parallel_size, kv_dtype_bytes=kv_b, links=links,
                             ep=parallel.expert_parallel_size, expert_imbalance=parallel.expert_imbalance)
    if parallel.pipeline_parallel_size > 1 and parallel.num_microbatches > 1:
        return PipelinedPerfModel(perf, parallel.num_microbatches)  # type: ignore[arg-type]
    return perf
