"""The hardware of a scenario: the GPU (a catalog name or a custom one), the step-time model
and profile that time it, how one replica's model is laid out over its GPUs (TP/PP/EP/DP),
and overrides of the links between them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict


class GpuConfig(_Strict):
    """A user-defined accelerator (all fields required except where defaulted)."""

    name: str = Field(description="Name of the accelerator (shown in reports; a profile's fitted_on).")
    bf16_tflops: float = Field(gt=0, description="Peak dense BF16/FP16 TFLOP/s.")
    fp8_tflops: float | None = Field(None, gt=0, description="Peak dense FP8 TFLOP/s (None: no FP8).")
    mem_gb: float = Field(gt=0, description="Device memory in GB (1e9 bytes).")
    mem_bw_tb_per_s: float = Field(gt=0, description="Memory bandwidth, TB/s.")
    interconnect_gb_per_s: float = Field(450.0, gt=0, description="Unidirectional GPU-GPU bandwidth, GB/s.")
    interconnect_latency_us: float = Field(5.0, ge=0, description="GPU-GPU small-message latency.")
    idle_power_w: float = Field(100.0, ge=0, description="Power drawn with nothing to do.")
    max_power_w: float = Field(700.0, gt=0, description="Power drawn at full load (the TDP).")
    usd_per_hour: float = Field(2.5, ge=0, description="Rental price of one GPU.")


class HardwareConfig(_Strict):
    """The accelerator of every replica (unless a pool names its own)."""

    gpu: str | GpuConfig = Field(
        "H100-SXM", description="Catalog name (see `servesim catalog`) or a custom GPU."
    )
    profile: str | None = Field(None, description="Path of a calibrated hardware profile (JSON) to apply.")
    host_mem_gib_per_gpu: float | None = Field(
        None,
        gt=0,
        description=(
            "Host (CPU) memory per GPU, GiB: the node's system memory over its GPUs, the most "
            "engine.kv_offload.cpu_size_gib may take (per GPU of the replica). None: the GPU "
            "catalog's reference node (256 GiB for an 8-GPU DGX H100's 2 TiB; unknown for a "
            "custom GPU: not checked)."
        ),
        json_schema_extra={"unit": "GiB"},
    )
    perf_model: Literal["roofline", "kernels"] | None = Field(
        None,
        description=(
            "Step-time model: 'kernels' (measured vLLM kernel latencies where the GPU has tables: "
            "A100-80GB, H100-SXM, H200, B200, B300, GB200, L40S; the roofline "
            "for every operator without one) or "
            "'roofline' (spec-sheet peaks x efficiencies, any GPU). None: 'kernels' where the GPU has "
            "tables and no hardware.profile is given, else 'roofline'. See docs/perf_model.md."
        ),
    )
    kernel_version: str | None = Field(
        None,
        description=(
            "perf_model 'kernels': the vLLM version whose measured kernels to use "
            "(0.14.0 or 0.19.0 where measured; None: the newest measured at or below engine.version, "
            "else the oldest this GPU has)."
        ),
    )
    sustained_clocks: bool = Field(
        True,
        description=(
            "perf_model 'kernels': time a prefill step's compute-bound work past the GPU's measured "
            "onset (25-55 ms) at the slower clocks it sustains at its power limit (B200, H200, GB200, "
            "from paired burst and sustained GEMM measurements); false: full clocks throughout. "
            "See docs/perf_model.md."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> HardwareConfig:
        if self.profile and self.perf_model == "kernels":
            raise ValueError(
                "hardware.profile calibrates the roofline; it cannot be combined with perf_model 'kernels'"
            )
        return self


class ParallelConfig(_Strict):
    """How one replica's model is split over its GPUs (TP x PP GPUs a replica)."""

    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "GPUs each layer is split over (tensor parallelism). Must divide the model's attention "
            "heads, and divide or be a multiple of its KV heads (vLLM's rule; checked when the model "
            "is loaded)."
        ),
        json_schema_extra={"vllm": "--tensor-parallel-size"},
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Stages the layers are split into (pipeline parallelism); at most the number of layers."
        ),
        json_schema_extra={"vllm": "--pipeline-parallel-size"},
    )
    num_microbatches: int = Field(
        1,
        ge=1,
        description=(
            "Pipeline micro-batches per step (GPipe schedule, bubble (pp-1)/(m+pp-1)); 1 = the "
            "batch goes through the stages whole."
        ),
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Data-parallel ranks of one vLLM server, each with its own scheduler, KV cache and "
            "TP group (a replica of TP x PP GPUs each; the server's API process balances requests "
            "over them). An MoE model's expert layers span all data_parallel_size x "
            "tensor_parallel_size GPUs, the ranks exchanging their tokens each layer ('data-"
            "parallel attention'); a dense model's ranks are independent."
        ),
        json_schema_extra={"vllm": "--data-parallel-size"},
    )
    expert_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "MoE only: spread the experts over this many groups of the data_parallel_size x "
            "tensor_parallel_size GPUs (must divide that product; vLLM's --enable-expert-parallel "
            "is the product itself, and without it 1: every expert split over all the GPUs)."
        ),
        json_schema_extra={"vllm": "--enable-expert-parallel"},
    )
    expert_imbalance: float = Field(
        1.0,
        ge=1.0,
        description=("Expert parallelism: token-expert pairs of the busiest group / the mean (1 = uniform)."),
    )

    @property
    def moe_gpus(self) -> int:
        """GPUs an expert layer spans: the TP group, times the DP ranks that share it."""
        return self.tensor_parallel_size * self.data_parallel_size

    @model_validator(mode="after")
    def _check(self) -> ParallelConfig:
        if self.moe_gpus % self.expert_parallel_size:
            raise ValueError(
                f"expert_parallel_size ({self.expert_parallel_size}) must divide "
                f"data_parallel_size x tensor_parallel_size ({self.moe_gpus})"
            )
        if self.data_parallel_size > 1 and self.pipeline_parallel_size > 1:
            raise ValueError(
                "data_parallel_size > 1 with pipeline_parallel_size > 1 is not modelled; use one of the two"
            )
        return self


class LinksConfig(_Strict):
    """Overrides of the catalog's links (None: the GPU's catalog figure)."""

    intra_node_gb_per_s: float | None = Field(
        None, gt=0, description=("GPU-GPU bandwidth in a node (NVLink/PCIe), one way.")
    )
    intra_node_latency_us: float | None = Field(None, ge=0, description="GPU-GPU latency in a node.")
    inter_node_gb_per_s: float | None = Field(None, gt=0, description="Per-GPU network (IB/RoCE), GB/s.")
    inter_node_latency_us: float | None = Field(None, ge=0, description="Network latency between nodes.")
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        description=("GPUs in one server; groups larger than this span nodes and use the network."),
    )
