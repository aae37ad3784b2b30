"""The engine section (``EngineConfig``), named as vLLM names its options, with vLLM's start-up
checks on it; its sub-sections live in ``speculative``, ``frontend``, ``kv_offload`` and
``lora``, the resolution of its defaults in ``engine_defaults``, the vLLM versions
(``engine.version``) in ``vllm_version`` and the server's environment variables
(``engine.vllm_env``) in ``vllm_env``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from servesim.config._base import _Strict
from servesim.config.frontend import FrontendConfig
from servesim.config.kv_offload import KVOffloadConfig
from servesim.config.lora import LoraConfig
from servesim.config.speculative import SpeculativeConfig
from servesim.config.vllm_env import VLLM_ENV_VARS, env_pairs
from servesim.config.vllm_version import (  # noqa: F401 (re-exported: their old home)
    VLLM_DEFAULT_VERSION,
    VLLM_NEWEST_KNOWN,
    VLLM_OLDEST_KNOWN,
    check_version,
    version_notice,
    version_tuple,
)

#: KV block sizes vLLM accepts (``vllm/config/cache.py``: ``BlockSize``).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: Scheduler families (docs/policies.md), the values of ``EngineConfig.policy``.
Policy = Literal["vllm_v1", "vllm_v0", "sarathi", "orca", "static"]
#: What orca reserves at admission, the values of ``EngineConfig.orca_reservation``.
OrcaReservation = Literal["max", "pow2", "oracle"]


class EngineConfig(_Strict):
    """Knobs of the serving engine, named as vLLM names them.

    Defaults follow vLLM V1 (0.32, the version bundled with the CPU ground-truth tool)
    for the OpenAI-compatible server (`vllm serve`); ``None`` means "vLLM's default for
    this GPU" and is resolved by ``resolve_engine`` (through ``servesim.deployment.resolved_engine``).

    The GPU execution follows ``version`` (docs/perf_model.md, "vLLM's GPU execution"):
    async scheduling (``async_scheduling``, default on from vLLM 0.14 on GPUs: the CPU's
    ``cpu_overhead_s`` of the next step overlaps the GPU's current one) and CUDA graphs
    (``enforce_eager``; capture sizes and modes of ``perf.cuda_graphs``).
    """

    policy: Policy = Field(
        "vllm_v1",
        description=(
            "Scheduler family (docs/policies.md): vllm_v1 (default), vllm_v0 (prefill-priority steps), "
            "sarathi (Sarathi-Serve: chunk budget, decodes first), orca (iteration-level batching, KV "
            "reserved for the maximum length at admission), static (FasterTransformer-style batches)."
        ),
    )
    block_size: int = Field(
        16,
        ge=1,
        description="Tokens per KV block (16 on GPUs, 128 on vLLM's CPU build); one of "
        "vLLM's sizes: 1, 8, 16, 32, 64, 128, 256.",
        json_schema_extra={"unit": "tokens", "vllm": "--block-size"},
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description=(
            "Most requests in one batch. Default as `vllm serve` 0.32: 1024 on GPUs with >= 70 GiB "
            "(not A100), else 256."
        ),
        json_schema_extra={"unit": "requests", "vllm": "--max-num-seqs"},
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "Token budget of one iteration. Default as `vllm serve`: 16384 on >= 160 GiB GPUs from "
            "vLLM 0.28 (engine.version), 8192 on >= 70 GiB (not A100), else 2048; raised to "
            "max_model_len when chunked prefill is off."
        ),
        json_schema_extra={"unit": "tokens", "vllm": "--max-num-batched-tokens"},
    )
    enable_chunked_prefill: bool = Field(
        True,
        description="Split prompts across iterations under the budget.",
        json_schema_extra={"vllm": "--enable-chunked-prefill"},
    )
    long_prefill_token_threshold: int = Field(
        0,
        ge=0,
        description="Cap on one request's prefill chunk per step (0 = no cap).",
        json_schema_extra={"unit": "tokens", "vllm": "--long-prefill-token-threshold"},
    )
    enable_prefix_caching: bool = Field(
        True,
        description="Reuse KV blocks of identical prompt prefixes.",
        json_schema_extra={"vllm": "--enable-prefix-caching"},
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1.0,
        description=(
            "Fraction of device memory vLLM may use. None: the version's default, 0.9 before "
            "vLLM 0.21 and 0.92 from it."
        ),
        json_schema_extra={"unit": "fraction", "vllm": "--gpu-memory-utilization"},
    )
    num_gpu_blocks_override: int | None = Field(
        None,
        ge=1,
        description=(
            "Force the number of KV blocks (at least one max_model_len sequence's, plus the null block)."
        ),
        json_schema_extra={"unit": "blocks", "vllm": "--num-gpu-blocks-override"},
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="Longest sequence; default the model's own.",
        json_schema_extra={"unit": "tokens", "vllm": "--max-model-len"},
    )
    cpu_overhead_s: float = Field(
        0.003,
        ge=0,
        description=(
            "Host (CPU) time per iteration: scheduling, input preparation, output handling. Added "
            "to the GPU's time in sync mode; with async scheduling the step lasts the larger of the "
            "two (the host work of the next step hides behind the GPU's current one)."
        ),
        json_schema_extra={"unit": "s"},
    )
    cpu_overhead_per_req_s: float | None = Field(
        None,
        ge=0,
        description=(
            "Host time per request scheduled in a step, on top of cpu_overhead_s: vLLM's scheduler "
            "(schedule, update_from_output) and the model runner's bookkeeping, each a loop over the "
            "batch's requests. None: CPU_PER_REQ_S (measured on vLLM's engine) for vLLM's policies on "
            "a GPU, else 0 (a profile's fitted cpu_overhead_s holds it)."
        ),
        json_schema_extra={"unit": "s"},
    )
    version: str = Field(
        VLLM_DEFAULT_VERSION,
        description=(
            "The vLLM version whose GPU execution is modelled: the async-scheduling default, the "
            "CUDA-graph capture sizes and modes, and the kernel tables (hardware.kernel_version "
            "defaults to the newest measured at or below it). Written as vLLM numbers its releases "
            "(MAJOR.MINOR[.PATCH], quoted in YAML); one outside 0.10.1-0.32, the versions whose "
            "rules servesim read, runs with the nearer end's rules and a notice. See docs/perf_model.md."
        ),
    )
    async_scheduling: bool | None = Field(
        None,
        description=(
            "Overlap the CPU's scheduling of step n+1 with the GPU's step n (vLLM V1's "
            "--async-scheduling). None: the version's default, on from vLLM 0.14 for vllm_v1 on a GPU "
            "(off before 0.15 with pipeline parallelism or speculative decoding; off for other "
            "policies, on the CPU backend and without hardware)."
        ),
        json_schema_extra={"vllm": "--async-scheduling"},
    )
    pipeline_wakes: bool | None = Field(
        None,
        description=(
            "With pipeline parallelism: whether a request that arrives while the engine loop waits "
            "for a batch in flight, with room in its queue, is scheduled at once (true: DistServe's "
            "and the Sarathi-Serve artifact's polling loops, Orca's scheduler) or waits for the oldest "
            "batch's output (false: vLLM V1's batch queue and vLLM V0's virtual engines). None: true "
            "for orca, else false. See engine/batch_queue.py."
        ),
    )
    enforce_eager: bool = Field(
        False,
        description=("No CUDA graphs: every kernel pays its launch, no padding, eager all-reduce."),
        json_schema_extra={"vllm": "--enforce-eager"},
    )
    max_cudagraph_capture_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Largest step, in tokens, captured in a CUDA graph (vLLM 0.11+; None: min(2 x "
            "max_num_seqs, 512)); never above max_num_batched_tokens. Larger steps run eager."
        ),
        json_schema_extra={"unit": "tokens", "vllm": "--max-cudagraph-capture-size"},
    )
    cudagraph_mode: Literal["full_and_piecewise", "piecewise", "full_decode_only", "none"] | None = Field(
        None,
        description=(
            "vLLM's compilation_config.cudagraph_mode: full_and_piecewise (full graphs for "
            "uniform decode steps, piecewise graphs for the rest: the default from vLLM 0.11), "
            "piecewise (every step piecewise: the default before), full_decode_only (full graphs "
            "for uniform decode steps, every other step eager), none (no graphs). None: the "
            "version's default."
        ),
        json_schema_extra={"vllm": "--compilation-config '{\"cudagraph_mode\": ...}'"},
    )
    moe_backend: Literal[
        "auto",
        "marlin",
        "flashinfer_mxfp4_mxfp8",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "deep_gemm",
        "triton",
    ] = Field(
        "auto",
        description=(
            "The fused-MoE kernel of the routed experts. auto: what engine.version picks for the "
            "experts' format on this GPU with engine.vllm_env set (perf/execution_path.py, from vLLM's "
            "get_mxfp4_backend and FP8 MoE selection; docs/perf_model.md, \"vLLM's default execution "
            "path\"): e.g. MXFP4 on Hopper Triton's matmul_ogs, on Blackwell FlashInfer's TRTLLM-gen MoE; "
            "block-FP8 DeepGEMM before vLLM 0.14, then FlashInfer TRTLLM-gen on Blackwell and Triton "
            "on Hopper (FlashInfer CUTLASS with EP); int4 Marlin. Or force one: marlin "
            "(VLLM_MXFP4_USE_MARLIN=1 for MXFP4), flashinfer_mxfp4_mxfp8 (Blackwell MXFP4 with MXFP8 "
            "activations, VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1), flashinfer_trtllm, flashinfer_cutlass "
            "(timed from the Triton or TRTLLM-gen table of the same bytes and FLOPs: no table of its own), "
            "deep_gemm (block-FP8: the dense block-FP8 GEMM table of DeepGEMM's kernel at the rows the "
            "version computes, at every step with E8M0 scales, from vLLM 0.11.1 on Hopper) or triton "
            "(Triton's fused_experts / matmul_ogs, the packed tables). A kernel "
            "forced where vLLM has none is refused: TRTLLM-gen off Blackwell, MXFP8 activations for "
            "other than MXFP4 experts, DeepGEMM for other than block-FP8 on SM 9.0/10.0, FlashInfer "
            "CUTLASS below SM 9.0 (deployment.check_moe_backend)."
        ),
        json_schema_extra={
            "vllm": "VLLM_MXFP4_USE_MARLIN=1, VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1, "
            "VLLM_USE_FLASHINFER_MOE_FP8, VLLM_USE_DEEP_GEMM (env); --moe-backend in later versions"
        },
    )
    vllm_env: tuple[tuple[str, str], ...] = Field(
        (),
        description=(
            "Environment variables of the server that change vLLM's default kernels, as set on the "
            'server ("1"/"0"): ' + ", ".join(VLLM_ENV_VARS) + ". They steer engine.moe_backend: "
            "auto and the attention backend reported (perf/execution_path.py)."
        ),
        json_schema_extra={"vllm": "environment"},
    )
    float32_matmul_precision: Literal["highest", "high", "medium"] = Field(
        "highest",
        description=(
            "vLLM's VLLM_FLOAT32_MATMUL_PRECISION (torch.set_float32_matmul_precision; vLLM sets "
            "'highest' by default): the precision of the fp32 GEMMs a model runs (MiniMax-M2's MoE "
            "router). highest: fp32 on the CUDA cores; high or medium: TF32 on the tensor cores. "
            "See docs/perf_model.md."
        ),
        json_schema_extra={"vllm": "VLLM_FLOAT32_MATMUL_PRECISION (env)"},
    )
    preemption_mode: Literal["recompute", "swap"] = Field(
        "recompute",
        description=(
            "recompute: a victim's KV is dropped and recomputed; swap: copied to host memory over PCIe "
            "(vLLM V0's swap; falls back to recompute when swap_space_gib is full)."
        ),
    )
    swap_space_gib: float = Field(
        4.0,
        ge=0,
        description="Host memory for swapped-out KV per GPU, in GiB "
        "(2^30 bytes, as vLLM's --swap-space, default 4).",
    )
    pcie_gb_per_s: float = Field(
        25.0,
        gt=0,
        description="Effective host<->GPU copy bandwidth for swapping "
        "(PCIe Gen4 x16: 32 GB/s peak, ~25 effective).",
    )
    scheduling_policy: Literal["fcfs", "priority", "vtc"] = Field(
        "fcfs",
        description=(
            "Waiting order and victim choice: fcfs, or priority (workload priority, lower = more urgent; "
            "waiting ordered by (priority, arrival), the running request with the largest (priority, "
            "arrival) is preempted), as vLLM's --scheduling-policy; or vtc: fair sharing between the "
            "workload's tenants (the Virtual Token Counter of Sheng et al., OSDI'24: the waiting request "
            "of the tenant with the smallest weighted count of served tokens goes first; docs/policies.md)."
        ),
        json_schema_extra={"vllm": "--scheduling-policy"},
    )
    vtc_input_weight: float = Field(
        1.0, gt=0, description=("vtc: counter units per prompt token served (the paper's w_p).")
    )
    vtc_output_weight: float = Field(
        2.0,
        gt=0,
        description=(
            "vtc: counter units per output token served (the paper's w_q; 2 as in its experiments)."
        ),
    )
    watermark: float | None = Field(
        None,
        ge=0,
        lt=1,
        json_schema_extra={"unit": "fraction"},
        description=(
            "Fraction of KV blocks kept free when admitting (None: the policy's default, 0.01 for vllm_v0 "
            "and sarathi as in vLLM V0's BlockSpaceManager, else 0)."
        ),
    )
    orca_reservation: OrcaReservation = Field(
        "max",
        description=(
            "orca: KV reserved at admission: max_model_len (max), prompt + next power of 2 of the output "
            "(pow2), or prompt + the true output (oracle), the three Orca baselines of the vLLM paper; the "
            "reservation is contiguous, rounded up to a power of two of blocks by a buddy allocator."
        ),
    )
    memory_aware_admission: bool = Field(
        False,
        description=(
            "vllm_v1: admit a waiting request only if the projected KV use of the running batch plus it "
            "stays within the cache until their predicted completions (MC-SF-style)."
        ),
    )
    output_len_prediction_error: float = Field(
        0.0,
        ge=0,
        description=(
            "memory_aware_admission: predicted output length = true x exp(sigma z), z ~ N(0, 1); "
            "this is sigma."
        ),
    )
    admission_order: Literal["fcfs", "shortest_predicted_first"] = Field(
        "fcfs",
        description=(
            "memory_aware_admission: waiting requests by arrival (fcfs), or by predicted output length, "
            "shortest first, with the longest predicted preempted first (MC-SF's order)."
        ),
    )
    speculative: SpeculativeConfig = Field(
        default_factory=lambda: SpeculativeConfig(), description="Speculative decoding (off by default)."
    )
    scheduler_reserve_full_isl: bool = Field(
        True,
        description="Admit a waiting request only if its whole prompt fits the free KV blocks "
        "(vLLM's default admission gate), not just its first chunk.",
    )
    frontend: FrontendConfig = Field(
        default_factory=lambda: FrontendConfig(),
        description=(
            "vLLM's API-server front end: a per-request queue before the scheduler (on by default on GPUs)."
        ),
    )
    lora: LoraConfig = Field(
        default_factory=lambda: LoraConfig(),
        description=(
            "Multi-LoRA serving: adapter slots, ranks, the adapters and their popularity (off by default)."
        ),
    )
    stream_interval: int = Field(
        1,
        ge=1,
        description=(
            "Tokens between two streamed chunks of a request (its first and last always go out); "
            "with engine.frontend, the API server's work per token."
        ),
        json_schema_extra={"vllm": "--stream-interval"},
    )
    kv_offload: KVOffloadConfig = Field(
        default_factory=lambda: KVOffloadConfig(),
        description="KV offload tiers below the GPU's prefix cache (off by default; docs/kv_offload.md).",
    )

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            # YAML reads 0.10 as the number 0.1: a version is only safe as a string
            raise ValueError(
                f'got the number {v!r}: write the version in quotes, e.g. "0.19.0" (YAML reads 0.10 '
                "as the number 0.1)"
            )
        return check_version(v) if isinstance(v, str) else v

    @field_validator("vllm_env", mode="before")
    @classmethod
    def _vllm_env(cls, v: Any) -> tuple[tuple[str, str], ...]:
        """A mapping (as written in a scenario) or its pairs, as sorted pairs (``env_pairs``)."""
        return env_pairs(v)

    @field_validator("block_size")
    @classmethod
    def _vllm_block_size(cls, v: int) -> int:
        if v not in VLLM_BLOCK_SIZES:
            raise ValueError(f"{v} is not a block size vLLM offers ({', '.join(map(str, VLLM_BLOCK_SIZES))})")
        return v

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        why = budget_refusal(self.enable_chunked_prefill, self.max_num_batched_tokens, self.max_model_len)
        if why:
            raise ValueError(why)
        if self.admission_order != "fcfs" and not self.memory_aware_admission:
            raise ValueError(
                "admission_order orders memory-aware admission: it needs memory_aware_admission: true"
            )
        if self.admission_order != "fcfs" and self.scheduling_policy != "fcfs":
            raise ValueError(
                f"admission_order: shortest_predicted_first replaces the "
                f"{self.scheduling_policy} order; use one of scheduling_policy: "
                f"{self.scheduling_policy} and admission_order"
            )
        if self.scheduling_policy == "vtc" and self.policy == "static":
            raise ValueError(
                "scheduling_policy vtc orders admission into a running batch; "
                "policy static runs one batch to completion: use another policy"
            )
        self._check_offload()
        if self.lora.enabled and self.policy != "vllm_v1":
            raise ValueError(
                f"lora: multi-LoRA serving is modelled on vLLM V1's scheduler; policy {self.policy} "
                "takes none (use policy vllm_v1 or lora.enabled false)"
            )
        return self

    def _check_offload(self) -> None:
        off = self.kv_offload
        if not off.enabled:
            return
        if off.tier_block_size(self.block_size) % self.block_size:
            raise ValueError(
                f"kv_offload.block_size ({off.tier_block_size(self.block_size)}) must be a multiple of "
                f"block_size ({self.block_size}), as vLLM's offloaded blocks are whole GPU blocks"
            )
        others = {
            "policy": (self.policy, "vllm_v1"),
            "scheduling_policy": (self.scheduling_policy, "fcfs"),
            "preemption_mode": (self.preemption_mode, "recompute"),
        }
        for name, (value, wanted) in others.items():
            if value != wanted:
                raise ValueError(f"kv_offload is modelled for {name}: {wanted} only, found {value}")
        if not self.enable_prefix_caching:
            raise ValueError(
                "kv_offload needs enable_prefix_caching: true (offloaded blocks are found by hash)"
            )
        if self.memory_aware_admission or self.speculative.num_speculative_tokens:
            raise ValueError("kv_offload is not modelled with memory_aware_admission or speculative decoding")
        if self.lora.enabled:
            raise ValueError("kv_offload is not modelled with engine.lora (LoRA adapters)")


def budget_refusal(
    enable_chunked_prefill: bool, max_num_batched_tokens: int | None, max_model_len: int | None
) -> str:
    """Why vLLM refuses to start with this token budget ("" if it starts): with chunked
    prefill off, one step must hold a max-length prompt, else such a prompt would block the
    FCFS queue for ever (vLLM's ``SchedulerConfig`` check; the one place the rule is
    written: the config's validator, ``resolve_policy`` and the deployment's check use it)."""
    if (
        enable_chunked_prefill
        or max_num_batched_tokens is None
        or not max_model_len
        or max_num_batched_tokens >= max_model_len
    ):
        return ""
    return (
        f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= max_model_len "
        f"({max_model_len}) when chunked prefill is off, as vLLM requires"
    )
