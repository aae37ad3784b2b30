"""The ``plan:`` section of a plan file: the ranges a configuration search sweeps.

A plan file is a scenario file (the base every candidate starts from) with a ``plan:``
section; ``servesim plan FILE`` reads both (``servesim.planner.space``). Each list is one
axis of the search; the candidates are their product, cut by ``max_total_gpus``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from servesim.config._base import _Strict
from servesim.config.cluster import RouterName


class PlanConfig(_Strict):
    """The search space of ``servesim plan`` (docs/planning.md, "Configuration search")."""

    gpus: list[str] | None = Field(
        None, min_length=1, description=("Catalog GPU names to try; None: the scenario's hardware.gpu.")
    )
    max_total_gpus: int = Field(8, ge=1, description="GPUs of a candidate at most (all pools).")
    tensor_parallel_sizes: list[int] = Field(
        [1, 2, 4, 8],
        min_length=1,
        description=(
            "TP sizes of a colocated replica (and of each pool unless the pool lists below are set)."
        ),
        json_schema_extra={"vllm": "--tensor-parallel-size"},
    )
    pipeline_parallel_sizes: list[int] = Field(
        [1],
        min_length=1,
        description="PP sizes to try.",
        json_schema_extra={"vllm": "--pipeline-parallel-size"},
    )
    expert_parallel: list[bool] = Field(
        [False],
        min_length=1,
        description=(
            "MoE: try expert parallelism over the TP ranks (EP = TP, vLLM's --enable-expert-parallel)."
        ),
        json_schema_extra={"vllm": "--enable-expert-parallel"},
    )
    data_parallel_sizes: list[int] = Field(
        [1],
        min_length=1,
        description=(
            "MoE models, colocated mode: data-parallel ranks per server to try (each rank its own "
            "attention and KV cache, the experts over DP x TP GPUs, the ranks in lockstep; with "
            "expert_parallel, EP = DP x TP). A dense model's ranks would be plain replicas: keep 1."
        ),
        json_schema_extra={"vllm": "--data-parallel-size"},
    )
    replicas: list[int] | None = Field(
        None,
        min_length=1,
        description=("Colocated replicas to try; None: 1, 2, 4, ... and the most the GPU budget allows."),
    )
    modes: list[Literal["colocated", "disaggregated"]] = Field(
        ["colocated"],
        min_length=1,
        description=("Colocated replicas, prefill/decode disaggregation, or both."),
    )
    prefill_decode_ratios: list[str] = Field(
        ["1:1", "1:2", "1:3", "2:1"],
        min_length=1,
        description=(
            "disaggregated: prefill:decode replica ratios; each is scaled up while it fits max_total_gpus."
        ),
    )
    prefill_tensor_parallel_sizes: list[int] | None = Field(
        None,
        min_length=1,
        description=("disaggregated: TP sizes of the prefill pool; None: tensor_parallel_sizes."),
    )
    decode_tensor_parallel_sizes: list[int] | None = Field(
        None,
        min_length=1,
        description=("disaggregated: TP sizes of the decode pool; None: tensor_parallel_sizes."),
    )
    max_num_batched_tokens: list[int | None] = Field(
        [None],
        min_length=1,
        description=("Token budgets to try; None: vLLM's default for the GPU."),
        json_schema_extra={"vllm": "--max-num-batched-tokens"},
    )
    max_num_seqs: list[int | None] = Field(
        [None],
        min_length=1,
        description=("Batch sizes to try; None: vLLM's default for the GPU."),
        json_schema_extra={"vllm": "--max-num-seqs"},
    )
    enable_chunked_prefill: list[bool] | None = Field(
        None,
        min_length=1,
        description=("Chunked prefill on/off to try; None: the scenario's."),
        json_schema_extra={"vllm": "--enable-chunked-prefill"},
    )
    enable_prefix_caching: list[bool] | None = Field(
        None,
        min_length=1,
        description=("Prefix caching on/off to try; None: the scenario's."),
        json_schema_extra={"vllm": "--enable-prefix-caching"},
    )
    kv_offloading_size_gib: list[float] | None = Field(
        None,
        min_length=1,
        description=(
            "KV offload host memory per replica to try, GiB (0: no offloading; otherwise "
            "engine.kv_offload's backend, native if it has none); None: the scenario's."
        ),
        json_schema_extra={"vllm": "--kv-offloading-size"},
    )
    max_loras: list[int] | None = Field(
        None,
        min_length=1,
        description=(
            "LoRA GPU slots to try (engine.lora.max_loras; the scenario must enable engine.lora); "
            "None: the scenario's. A candidate's max_cpu_loras is raised to its max_loras where below."
        ),
        json_schema_extra={"vllm": "--max-loras"},
    )
    routers: list[RouterName] | None = Field(
        None,
        min_length=1,
        description=(
            "Routers to try for candidates of more than one replica; None: the scenario's (round_robin)."
        ),
    )
    objective: Literal["cost", "gpus", "energy"] = Field(
        "cost",
        description=("Ranks the candidates meeting the SLOs: $/hour, GPUs, or joules per output token."),
    )

    @field_validator(
        "tensor_parallel_sizes",
        "pipeline_parallel_sizes",
        "data_parallel_sizes",
        "replicas",
        "prefill_tensor_parallel_sizes",
        "decode_tensor_parallel_sizes",
    )
    @classmethod
    def _positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x < 1 for x in v):
            raise ValueError(f"expected sizes of at least 1, found {v}")
        return v

    @field_validator("prefill_decode_ratios")
    @classmethod
    def _ratios(cls, v: list[str]) -> list[str]:
        for text in v:
            parts = text.split(":")
            if len(parts) != 2 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
                raise ValueError(
                    f"{text!r} is not a prefill:decode ratio; expected two whole numbers "
                    "of at least 1, e.g. '1:2'"
                )
        return v

    @model_validator(mode="after")
    def _check(self) -> PlanConfig:
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            if any(x is not None and x < 1 for x in getattr(self, name)):
                raise ValueError(f"{name}: expected values of at least 1 (or null for vLLM's default)")
        if self.kv_offloading_size_gib is not None and any(x < 0 for x in self.kv_offloading_size_gib):
            raise ValueError("kv_offloading_size_gib: expected sizes of at least 0 GiB (0: no offloading)")
        if self.max_loras is not None and any(x < 1 for x in self.max_loras):
            raise ValueError("max_loras: expected slot counts of at least 1 (vLLM's --max-loras)")
        return self

    def ratios(self) -> list[tuple[int, int]]:
        """``prefill_decode_ratios`` as (prefill, decode) pairs."""
        return [(int(a), int(b)) for a, b in (t.split(":") for t in self.prefill_decode_ratios)]
