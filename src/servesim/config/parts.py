"""Scenario parts: model, hardware, parallelism, workload, SLOs and run options."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_serializer, model_validator
from pydantic.json_schema import JsonDict

from servesim.config._base import _Strict
from servesim.config.arrival import ArrivalConfig, Seconds

# --------------------------------------------------------------------------- model / hardware


class ModelConfig(_Strict):
    """The model served: its architecture comes from a Hugging Face config.json (no weights)."""

    name: str = Field(
        "meta-llama/Llama-3.1-8B",
        min_length=1,
        description=(
            "A built-in preset (see `servesim catalog`) or a path to a Hugging Face config.json "
            "(or a directory holding one)."
        ),
        json_schema_extra={"vllm": "vllm serve MODEL"},
    )
    dtype: Literal["auto", "bfloat16", "float16", "fp8", "float32"] = Field(
        "auto",
        description="Weight/activation dtype; 'auto' takes torch_dtype from the config.",
        json_schema_extra={"vllm": "--dtype"},
    )
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8"] = Field(
        "auto",
        description="KV cache dtype; 'auto' follows the model dtype (as vLLM's --kv-cache-dtype auto).",
        json_schema_extra={"vllm": "--kv-cache-dtype"},
    )


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


# --------------------------------------------------------------------------- workload

_TOKENS: JsonDict = {"unit": "tokens"}  # json_schema_extra: the unit docs/scenario_reference.md shows


class LengthDist(_Strict):
    """A token-length distribution. Values are rounded and clipped to [min, max]."""

    kind: Literal["constant", "uniform", "normal", "lognormal", "pareto", "trace"] = Field(
        "constant", description="The distribution; the fields below say which kind reads them."
    )
    value: int = Field(512, ge=1, description="constant: the length.", json_schema_extra=_TOKENS)
    low: int = Field(1, ge=1, description="uniform: inclusive lower bound.", json_schema_extra=_TOKENS)
    high: int = Field(1024, ge=1, description="uniform: inclusive upper bound.", json_schema_extra=_TOKENS)
    mean: float = Field(512.0, gt=0, description="normal/lognormal: mean length.", json_schema_extra=_TOKENS)
    std: float = Field(
        128.0,
        ge=0,
        description="normal: standard deviation; lognormal: std of the length.",
        json_schema_extra=_TOKENS,
    )
    alpha: float = Field(2.0, gt=0, description="pareto: shape.")
    scale: float = Field(64.0, gt=0, description="pareto: minimum (x_m).", json_schema_extra=_TOKENS)
    trace: str | None = Field(None, description="trace: file to sample lengths from (any supported format).")
    column: Literal["prompt", "output"] = Field("prompt", description="trace: which column to sample.")
    min: int = Field(
        1, ge=1, description="Every length is clipped to at least this.", json_schema_extra=_TOKENS
    )
    max: int = Field(
        1_000_000, ge=1, description="Every length is clipped to at most this.", json_schema_extra=_TOKENS
    )

    @model_validator(mode="after")
    def _check(self) -> LengthDist:
        if self.min > self.max:
            raise ValueError(f"expected min <= max, found min={self.min} > max={self.max}")
        if self.kind == "uniform" and self.low > self.high:
            raise ValueError(f"expected low <= high, found low={self.low} > high={self.high}")
        given = {"constant": ("value", self.value, self.value), "uniform": ("high", self.low, self.high)}
        if self.kind in given:  # a length asked for exactly is not clipped silently
            name, lowest, highest = given[self.kind]
            if highest > self.max:
                raise ValueError(
                    f"{name} ({highest:,}) is above max ({self.max:,}), which every length is "
                    "clipped to; raise max"
                )
            if lowest < self.min:
                which = "value" if self.kind == "constant" else "low"
                raise ValueError(
                    f"{which} ({lowest:,}) is below min ({self.min:,}), which every length is "
                    "raised to; lower min"
                )
        if self.kind == "trace" and not self.trace:
            raise ValueError("kind: trace needs trace: the file to sample lengths from")
        return self


class SyntheticWorkload(_Strict):
    """Requests drawn from distributions (docs/workloads.md)."""

    type: Literal["synthetic"] = Field("synthetic", description="Selects this kind of workload.")
    arrival: ArrivalConfig = Field(ArrivalConfig(), description="Arrival process.")
    prompt_len: LengthDist = Field(LengthDist(kind="constant", value=512), description="Prompt lengths.")
    output_len: LengthDist = Field(
        LengthDist(kind="constant", value=128), description=("Output lengths (tokens generated per request).")
    )
    num_requests: int | None = Field(1000, ge=1, description="How many requests (or use duration_s).")
    duration_s: Seconds | None = Field(
        None, gt=0, description="Generate arrivals until this time (seconds, or '8h')."
    )
    prefix_groups: int = Field(0, ge=0, description="Requests share one of N prompt prefixes (0 = none).")
    prefix_len: int = Field(0, ge=0, description="Shared prefix length in tokens.", json_schema_extra=_TOKENS)
    n: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Parallel samples per request (vLLM SamplingParams.n); the samples share the prompt's KV blocks."
        ),
        json_schema_extra={"vllm": "SamplingParams.n"},
    )
    best_of_prune_at: int | None = Field(
        None,
        ge=1,
        description=(
            "Best-of-N with early pruning: after this many output tokens only best_of_keep samples go on."
        ),
    )
    best_of_keep: int = Field(1, ge=1, description="Samples kept at best_of_prune_at.")
    tenant_shares: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Tenants by name and share, e.g. {heavy: 0.9, light: 0.1}: each request's tenant is drawn "
            "with probability share / sum of shares (empty: no tenants; docs/policies.md, Tenants)."
        ),
    )
    priority_shares: dict[int, float] = Field(
        default_factory=dict,
        description=(
            "Request priorities by value and share, e.g. {0: 0.1, 1: 0.9} (lower = more urgent, vLLM's "
            "convention): each request's priority is drawn with probability share / sum of shares "
            "(empty: every request has priority 0). Read by engine.scheduling_policy priority and "
            "cluster.priority_headroom_tokens (docs/policies.md, Priorities)."
        ),
    )
    seed: int = Field(0, description="Seed of the generator (with run.seed).")

    @model_validator(mode="after")
    def _check(self) -> SyntheticWorkload:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        check_shares(self.tenant_shares)
        for value, share in self.priority_shares.items():
            if not share > 0 or share == float("inf"):
                raise ValueError(f"priority_shares.{value}: expected a positive share, found {share}")
        return self


def check_shares(shares: dict[str, float]) -> None:
    """Tenant shares are positive (a ValueError names the first that is not)."""
    for name, share in shares.items():
        if not name or not share > 0 or share == float("inf"):
            raise ValueError(f"tenant_shares.{name}: expected a positive share, found {share}")


class TraceWorkload(_Strict):
    """Requests read from a trace file (docs/workloads.md)."""

    type: Literal["trace"] = Field("trace", description="Selects this kind of workload.")
    path: str = Field(description="Trace file; 'builtin:azure_conv' names the bundled Azure trace.")
    format: Literal["auto", "azure", "mooncake", "generic", "burstgpt", "vllm_bench", "sharegpt"] = Field(
        "auto",
        description=(
            "The trace's layout; auto decides by extension and header (CSV columns, JSON keys). "
            "azure reads the 2023 and 2024 traces."
        ),
    )
    failed: Literal["keep", "drop"] = Field(
        "keep",
        description=(
            "burstgpt / vllm_bench: keep the failed requests the file records (0 response tokens, "
            "served as a 1-token response) or drop them."
        ),
    )
    rate_scale: float = Field(1.0, gt=0, description="Multiply the arrival rate (divide timestamps).")
    limit: int | None = Field(None, ge=1, description="Take the first N requests.")
    start_s: float | None = Field(None, ge=0, description="Keep requests arriving at or after this time.")
    end_s: float | None = Field(None, gt=0, description="Keep requests arriving before this time.")
    hash_block_tokens: int = Field(512, ge=1, description="Tokens per hash id (Mooncake: 512).")
    tenant_shares: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Tenants for a trace without a tenant column: each request's tenant is drawn with "
            "probability share / sum of shares (numpy default_rng(tenant_seed), in row order)."
        ),
    )
    tenant_seed: int = Field(0, ge=0, description="tenant_shares: the seed of the draw.")

    @model_validator(mode="after")
    def _check_shares(self) -> TraceWorkload:
        check_shares(self.tenant_shares)
        return self


class BenchmarkWorkload(_Strict):
    """``vllm bench serve`` with the random dataset (``--dataset-name random --ignore-eos``),
    as its current main runs it: clients that send each request when a slot of
    ``max_concurrency`` is free, warm-ups first (docs/workloads.md)."""

    type: Literal["benchmark"] = Field("benchmark", description="Selects this kind of workload.")
    num_prompts: int = Field(1000, ge=1, description="--num-prompts: requests in the measured run.")
    input_len: int = Field(
        1024, ge=1, description=("--random-input-len: mean prompt length in tokens, special tokens included.")
    )
    output_len: int = Field(128, ge=1, description="--random-output-len: mean output length in tokens.")
    random_range_ratio: float = Field(
        0.0,
        description=(
            "--random-range-ratio r. vllm_bench: r in [0, 1), lengths uniform integers in "
            "[floor(L(1-r)), ceil(L(1+r))]; benchmark_serving: r in [0, 1], lengths in [int(L r), L] "
            "(output at least 1)."
        ),
    )
    client: Literal["vllm_bench", "benchmark_serving"] = Field(
        "vllm_bench",
        description=(
            "The benchmark client: vllm_bench (`vllm bench serve`, vLLM main) or benchmark_serving "
            "(vLLM's older benchmark_serving.py script and its forks, such as InferenceMAX's "
            "bench_serving: lengths at most L, drawn by numpy's legacy generator; no warm-ups)."
        ),
    )
    num_special_tokens: int = Field(
        0,
        ge=0,
        description=(
            "Special tokens the tokenizer adds to a prompt (tokenizer.num_special_tokens_to_add(), "
            "1 for Llama's BOS): taken off input_len before sampling and added back by the server."
        ),
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description=(
            "--max-concurrency: at most this many requests in flight (None: no limit, as vllm bench)."
        ),
    )
    request_rate: float = Field(
        float("inf"),
        gt=0,
        allow_inf_nan=True,
        description=("--request-rate: requests/s at which requests become due (inf: all at the start)."),
    )
    burstiness: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=True,
        description=("--burstiness: gamma shape of the gaps (1 = Poisson, inf = constant spacing)."),
    )
    num_warmups: int = Field(
        0,
        ge=0,
        description=(
            "--num-warmups: copies of the first request sent before the measured run (same "
            "concurrency limit), excluded from the benchmark metrics."
        ),
    )
    ready_check: bool = Field(
        True,
        description=(
            "vllm bench's initial single-prompt test run (on unless --ready-check-timeout-sec 0): "
            "one copy of the first request, alone, before the warm-ups; excluded from the metrics."
        ),
    )
    seed: int = Field(0, description="--seed: the length and arrival draws (numpy's default_rng).")

    @field_serializer("request_rate", "burstiness", when_used="json")
    def _inf_as_text(self, x: float) -> float | str:
        return x if math.isfinite(x) else "inf"  # JSON has no infinity; "inf" reads back

    @model_validator(mode="after")
    def _check(self) -> BenchmarkWorkload:
        r = self.random_range_ratio
        if self.client == "benchmark_serving":
            if not 0.0 <= r <= 1.0:
                raise ValueError(
                    f"random_range_ratio must be in [0, 1] for client benchmark_serving, found {r}"
                )
            if int(self.input_len * r) < 1:
                raise ValueError(
                    f"input_len {self.input_len} x random_range_ratio {r} < 1: a prompt of "
                    "benchmark_serving may have no token"
                )
            if self.num_warmups:
                raise ValueError(
                    "num_warmups: benchmark_serving has no warm-ups (--num-warmups is "
                    "vllm bench's); expected 0"
                )
            return self
        if not 0.0 <= r < 1.0:
            raise ValueError(f"random_range_ratio must be in [0, 1) (as vllm bench), found {r}")
        if math.floor(max(0, self.input_len - self.num_special_tokens) * (1.0 - r)) < 1:
            raise ValueError(
                f"input_len {self.input_len} is too small: with num_special_tokens "
                f"{self.num_special_tokens} and random_range_ratio {r} a prompt may have "
                "no sampled token (vllm bench refuses it too)"
            )
        return self


# --------------------------------------------------------------------------- SLOs / run


PercentileMetric = Literal["ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"]


class PercentileLimit(_Strict):
    """A percentile limit: the p-th percentile of ``metric`` over all requests is at most
    ``max_s`` (requests that did not finish count as infinitely late)."""

    metric: PercentileMetric = Field(
        description=("The latency: ttft_s, tpot_s, itl_s (per token gap), e2e_s or queue_s.")
    )
    p: float = Field(99.0, gt=0, le=100, description="The percentile, in percent (99 = P99).")
    max_s: float = Field(gt=0, description="The largest value the percentile may take.")


class SloConfig(_Strict):
    """Latency objectives: attainment and goodput count the requests meeting all of them.

    The limits say when one request meets its objective; ``attainment`` and ``percentiles``
    say how many must, the targets that ``servesim capacity`` holds a deployment to
    (docs/planning.md)."""

    ttft_s: float | None = Field(None, gt=0, description="Time-to-first-token limit.")
    tpot_s: float | None = Field(None, gt=0, description="Mean time-per-output-token limit.")
    e2e_s: float | None = Field(None, gt=0, description="End-to-end latency limit.")
    attainment: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Attainment targets: the fraction of all requests (0 to 1) that must meet a metric's "
            "limit above, e.g. {ttft_s: 0.9}; 'all': the fraction meeting every limit at once "
            "(DistServe's SLO attainment). Empty with a limit set: {all: 0.9}."
        ),
    )
    percentiles: list[PercentileLimit] = Field(
        default_factory=list, description=("Percentile limits, e.g. [{metric: ttft_s, p: 99, max_s: 5}].")
    )
    confidence: float | None = Field(
        None,
        description=(
            "Hold every target at the upper end of the prediction's calibrated interval of this "
            "level (0.8, the level servesim's intervals are calibrated at; docs/metrics.md, "
            "'Intervals'): each latency is taken at its interval's high end before it is judged "
            "(plan, capacity). None: at the predicted value."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> SloConfig:
        if self.confidence is not None and abs(self.confidence - 0.8) > 1e-9:
            raise ValueError(
                f"confidence: servesim's intervals are calibrated at 0.8, found {self.confidence}"
            )
        for metric, target in self.attainment.items():
            if metric not in ("ttft_s", "tpot_s", "e2e_s", "all"):
                raise ValueError(
                    f"attainment.{metric}: unknown metric; expected ttft_s, tpot_s, e2e_s or all"
                )
            if not 0.0 < target <= 1.0:
                raise ValueError(f"attainment.{metric}: expected a fraction in (0, 1], found {target}")
            if metric == "all" and not self.limits():
                raise ValueError("attainment.all: no limit is set (give ttft_s, tpot_s or e2e_s)")
            if metric != "all" and getattr(self, metric) is None:
                raise ValueError(f"attainment.{metric}: needs the limit slo.{metric}")
        return self

    def limits(self) -> dict[str, float]:
        """The per-request limits that are set, by metric."""
        return {m: v for m in ("ttft_s", "tpot_s", "e2e_s") if (v := getattr(self, m)) is not None}


class RunConfig(_Strict):
    """Options of the run itself."""

    seed: int = Field(0, description="Seed of every random draw of the run.")
    reference: bool = Field(False, description="Use the step-by-step reference engine (slow oracle).")
    check_invariants: bool = Field(False, description="Assert engine invariants every step (debug).")
    record_steps: bool = Field(
        True,
        description=(
            "Keep the per-step series (steps.parquet). Off for very long runs: memory then stays "
            "at about 80 bytes a request plus the requests in flight."
        ),
    )
