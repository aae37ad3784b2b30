"""Scenario parts: the model, SLOs and run options; the hardware (GPU, parallelism, links)
is in ``hardware``, the basic workloads (lengths, synthetic, trace, benchmark) in
``workloads``, both re-exported here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict
from servesim.config.arrival import ArrivalConfig  # noqa: F401 (re-exported: its old home)
from servesim.config.hardware import (  # noqa: F401 (re-exported: their old home)
    GpuConfig,
    HardwareConfig,
    LinksConfig,
    ParallelConfig,
)
from servesim.config.workloads import (  # noqa: F401 (re-exported: their old home)
    BenchmarkWorkload,
    LengthDist,
    SyntheticWorkload,
    TraceWorkload,
    check_shares,
)


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
