"""Scenario parts: model, hardware, parallelism, workload, SLOs and run options."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict

# --------------------------------------------------------------------------- model / hardware


class ModelConfig(_Strict):
    name: str = Field("meta-llama/Llama-3.1-8B", description=(
        "A built-in preset (see `servesim catalog`) or a path to a Hugging Face config.json "
        "(or a directory holding one)."))
    dtype: Literal["auto", "bfloat16", "float16", "fp8", "float32"] = Field(
        "auto", description="Weight/activation dtype; 'auto' takes torch_dtype from the config.")
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8"] = Field(
        "auto",
        description="KV cache dtype; 'auto' follows the model dtype (as vLLM's --kv-cache-dtype auto).")


class GpuConfig(_Strict):
    """A user-defined accelerator (all fields required except where defaulted)."""

    name: str
    bf16_tflops: float = Field(gt=0, description="Peak dense BF16/FP16 TFLOP/s.")
    fp8_tflops: float | None = Field(None, gt=0, description="Peak dense FP8 TFLOP/s (None: no FP8).")
    mem_gb: float = Field(gt=0, description="Device memory in GB (1e9 bytes).")
    mem_bw_tbps: float = Field(gt=0, description="Memory bandwidth, TB/s.")
    interconnect_gbps: float = Field(450.0, gt=0, description="Unidirectional GPU-GPU bandwidth, GB/s.")
    interconnect_latency_us: float = Field(5.0, ge=0)
    idle_power_w: float = Field(100.0, ge=0)
    max_power_w: float = Field(700.0, gt=0)
    usd_per_hour: float = Field(2.5, ge=0)


class HardwareConfig(_Strict):
    gpu: str | GpuConfig = Field(
        "H100-SXM", description="Catalog name (see `servesim catalog`) or a custom GPU.")
    profile: str | None = Field(None, description="Path of a calibrated hardware profile (JSON) to apply.")
    perf_model: Literal["roofline", "kernels"] = Field("roofline", description=(
        "Step-time model: 'roofline' (spec-sheet peaks x efficiencies, any GPU) or 'kernels' "
        "(measured vLLM kernel latencies where the GPU has tables: A100-80GB, H100-SXM, H200, "
        "B200, L40S; the roofline for every operator without one). See docs/perf_model.md."))
    kernel_version: str | None = Field(None, description=(
        "perf_model 'kernels': the vLLM version whose measured kernels to use "
        "(0.14.0 or 0.19.0 where measured; None: the newest this GPU has)."))

    @model_validator(mode="after")
    def _check(self) -> HardwareConfig:
        if self.profile and self.perf_model == "kernels":
            raise ValueError("hardware.profile calibrates the roofline; it cannot be combined with "
                             "perf_model 'kernels'")
        return self


class ParallelConfig(_Strict):
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    num_microbatches: int = Field(1, ge=1, description=(
        "Pipeline micro-batches per step (GPipe schedule, bubble (pp-1)/(m+pp-1)); 1 = the "
        "batch goes through the stages whole."))
    expert_parallel_size: int = Field(1, ge=1, le=64, description=(
        "MoE only: spread the experts over this many groups of the TP ranks (must divide TP)."))
    expert_imbalance: float = Field(1.0, ge=1.0, description=(
        "Expert parallelism: token-expert pairs of the busiest group / the mean (1 = uniform)."))

    @model_validator(mode="after")
    def _check(self) -> ParallelConfig:
        if self.tensor_parallel_size % self.expert_parallel_size:
            raise ValueError(f"expert_parallel_size ({self.expert_parallel_size}) must divide "
                             f"tensor_parallel_size ({self.tensor_parallel_size})")
        return self


class LinksConfig(_Strict):
    """Overrides of the catalog's links (None: the GPU's catalog figure)."""

    intra_node_gbps: float | None = Field(None, gt=0, description="GPU-GPU in a node (NVLink/PCIe), GB/s.")
    intra_node_latency_us: float | None = Field(None, ge=0)
    inter_node_gbps: float | None = Field(None, gt=0, description="Per-GPU network (IB/RoCE), GB/s.")
    inter_node_latency_us: float | None = Field(None, ge=0)
    gpus_per_node: int | None = Field(None, ge=1)



# --------------------------------------------------------------------------- workload


class LengthDist(_Strict):
    """A token-length distribution. Values are rounded and clipped to [min, max]."""

    kind: Literal["constant", "uniform", "normal", "lognormal", "pareto", "trace"] = "constant"
    value: int = Field(512, ge=1, description="constant: the length.")
    low: int = Field(1, ge=1, description="uniform: inclusive lower bound.")
    high: int = Field(1024, ge=1, description="uniform: inclusive upper bound.")
    mean: float = Field(512.0, gt=0, description="normal/lognormal: mean length.")
    std: float = Field(128.0, ge=0, description="normal: standard deviation; lognormal: std of the length.")
    alpha: float = Field(2.0, gt=0, description="pareto: shape.")
    scale: float = Field(64.0, gt=0, description="pareto: minimum (x_m).")
    trace: str | None = Field(None, description="trace: file to sample lengths from (any supported format).")
    column: Literal["prompt", "output"] = Field("prompt", description="trace: which column to sample.")
    min: int = Field(1, ge=1)
    max: int = Field(1_000_000, ge=1)


class ArrivalConfig(_Strict):
    process: Literal["poisson", "gamma", "constant", "burst"] = Field(
        "poisson", description="poisson; gamma (with cv); constant spacing; burst = all at t=0.")
    rate: float = Field(1.0, gt=0, description="Mean arrivals per second.")
    cv: float = Field(1.0, gt=0, description="gamma: coefficient of variation of inter-arrival times.")


class SyntheticWorkload(_Strict):
    type: Literal["synthetic"] = "synthetic"
    arrival: ArrivalConfig = ArrivalConfig()
    prompt_len: LengthDist = LengthDist(kind="constant", value=512)
    output_len: LengthDist = LengthDist(kind="constant", value=128)
    num_requests: int | None = Field(1000, ge=1, description="How many requests (or use duration_s).")
    duration_s: float | None = Field(None, gt=0, description="Generate arrivals until this time.")
    prefix_groups: int = Field(0, ge=0, description="Requests share one of N prompt prefixes (0 = none).")
    prefix_len: int = Field(0, ge=0, description="Shared prefix length in tokens.")
    n: int = Field(1, ge=1, le=64, description=(
        "Parallel samples per request (vLLM SamplingParams.n); the samples share the prompt's KV blocks."))
    best_of_prune_at: int | None = Field(None, ge=1, description=(
        "Best-of-N with early pruning: after this many output tokens only best_of_keep samples go on."))
    best_of_keep: int = Field(1, ge=1, description="Samples kept at best_of_prune_at.")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> SyntheticWorkload:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        return self


class TraceWorkload(_Strict):
    type: Literal["trace"] = "trace"
    path: str = Field(description="Trace file; 'builtin:azure_conv' names the bundled Azure trace.")
    format: Literal["auto", "azure", "mooncake", "generic"] = Field("auto")
    rate_scale: float = Field(1.0, gt=0, description="Multiply the arrival rate (divide timestamps).")
    limit: int | None = Field(None, ge=1, description="Take the first N requests.")
    start_s: float | None = Field(None, ge=0, description="Keep requests arriving at or after this time.")
    end_s: float | None = Field(None, gt=0, description="Keep requests arriving before this time.")
    hash_block_tokens: int = Field(512, ge=1, description="Tokens per hash id (Mooncake: 512).")


WorkloadConfig = Annotated[SyntheticWorkload | TraceWorkload, Field(discriminator="type")]


# --------------------------------------------------------------------------- SLOs / run


class SloConfig(_Strict):
    ttft_s: float | None = Field(None, gt=0, description="Time-to-first-token limit.")
    tpot_s: float | None = Field(None, gt=0, description="Mean time-per-output-token limit.")
    e2e_s: float | None = Field(None, gt=0, description="End-to-end latency limit.")


class RunConfig(_Strict):
    seed: int = 0
    reference: bool = Field(False, description="Use the step-by-step reference engine (slow oracle).")
    check_invariants: bool = Field(False, description="Assert engine invariants every step (debug).")
    record_steps: bool = Field(True, description=(
        "Keep the per-step series (steps.parquet). Off for very long runs: memory then stays "
        "at about 80 bytes a request plus the requests in flight."))
