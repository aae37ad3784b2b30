"""The workloads of requests drawn one by one: token-length distributions, synthetic
traffic, trace files and vllm bench serve's random dataset (the kinds built of these, such
as sessions and mixtures, are in ``workload_kinds``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_serializer, model_validator
from pydantic.json_schema import JsonDict

from servesim.config._base import _Strict
from servesim.config.arrival import ArrivalConfig, Seconds

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
