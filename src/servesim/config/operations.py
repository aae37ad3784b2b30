"""The cluster's operations over time: autoscaling, failures, power capping, time series.

Everything here acts on pools through the cluster's event loop (``servesim.cluster.operations``);
docs/operations.md explains the models and their sources.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict

ScaleMetric = Literal[
    "queue_len", "running", "kv_util", "decode_tokens_per_s", "gpu_util", "slo_attainment", "freeness"
]


class ScheduleEntry(_Strict):
    """From ``at_s`` (seconds into the day, repeating every ``day_s``) a pool keeps at least
    ``min_replicas`` (a time-of-day floor, as operators pre-scale for known peaks)."""

    at_s: float = Field(
        ge=0, description="Seconds into the day the entry starts.", json_schema_extra={"unit": "s"}
    )
    min_replicas: int = Field(ge=0, description="Floor of the pool's replicas from then on.")


class PoolScaling(_Strict):
    """Metric-driven scaling of one pool (Kubernetes HPA's rule: desired = ceil(replicas x
    metric / target), bounded by min/max)."""

    pool: str = Field(description="The pool scaled (a name in cluster.pools).")
    metric: ScaleMetric = Field(
        "queue_len",
        description=(
            "Per serving replica: waiting requests (queue_len), running requests, KV blocks in use "
            "(kv_util, fraction), output tokens/s (decode_tokens_per_s), the fraction of the "
            "interval its GPUs ran a step (gpu_util: nvidia-smi's and DCGM's GPU utilization); or "
            "the fraction of requests finished in the last interval that met every SLO "
            "(slo_attainment: scale out below the target, in when above it with room); or Llumnix's "
            "average freeness over the serving replicas (freeness, in free KV blocks per request: one "
            "more replica below target, one fewer when the others would stay above scale_in_above)."
        ),
    )
    target: float = Field(
        gt=0, description="The metric's target value per replica (freeness: the scale-out threshold)."
    )
    scale_in_above: float | None = Field(
        None,
        gt=0,
        description=(
            "metric freeness: scale in by one when the average freeness without the replica that would "
            "drain stays above this (Llumnix's SCALE_DOWN_THRESHOLD, 60 as freeness)."
        ),
    )
    min_replicas: int = Field(1, ge=0, description="Never fewer (0: the pool may scale to zero).")
    max_replicas: int = Field(8, ge=1, description="Never more.")
    scale_in_grace_s: float = Field(
        300.0,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=("Scale in only after the desired count has stayed below the current one this long."),
    )
    tolerance: float = Field(
        0.1,
        ge=0,
        lt=1,
        json_schema_extra={"unit": "fraction"},
        description=(
            "Keep the current count while the metric per replica is within this fraction of the "
            "target (|metric / target - 1| <= tolerance), so a steady load near a boundary does "
            "not flap; Kubernetes HPA's default tolerance is 0.1. Not used by slo_attainment."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PoolScaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"expected min_replicas <= max_replicas, found {self.min_replicas} > {self.max_replicas}"
            )
        if self.metric in ("kv_util", "gpu_util", "slo_attainment") and self.target > 1:
            raise ValueError(f"metric {self.metric} is a fraction: expected target <= 1, found {self.target}")
        if self.metric == "freeness":
            if self.scale_in_above is None or self.scale_in_above <= self.target:
                raise ValueError(
                    f"metric freeness scales out below target ({self.target:g}) and in above "
                    f"scale_in_above: expected scale_in_above > target, found {self.scale_in_above}"
                )
        elif self.scale_in_above is not None:
            raise ValueError(f"scale_in_above is read with metric freeness only, not {self.metric}")
        return self


class AutoscalingConfig(_Strict):
    """Autoscaling of pools (HeteroScale, common practice): metrics, cold starts, draining."""

    pools: list[PoolScaling] = Field(default_factory=list, description="The pools scaled and their rules.")
    load_gb_per_s: float = Field(
        2.0,
        gt=0,
        json_schema_extra={"unit": "GB/s"},
        description=(
            "A cold start loads the replica's weights (per GPU, its shard) at this bandwidth "
            "before serving (2 GB/s: a local NVMe; a network store is slower)."
        ),
    )
    startup_s: float = Field(
        30.0,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=("Fixed part of a cold start: container, engine start, CUDA graph capture."),
    )
    drain_timeout_s: float = Field(
        600.0,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=(
            "A replica scaled in stops taking requests and stops when its last one finishes, or "
            "this long after, its requests still there then being retried elsewhere."
        ),
    )
    prefill_decode_ratio: float | None = Field(
        None,
        gt=0,
        description=(
            "Disaggregated clusters: keep prefill replicas = ceil(ratio x decode replicas), the "
            "decode pool scaled by its rule (HeteroScale's coordinated P:D scaling)."
        ),
    )
    day_s: float = Field(
        86400.0,
        gt=0,
        json_schema_extra={"unit": "s"},
        description="Length of the day the schedules repeat over.",
    )
    schedule: dict[str, list[ScheduleEntry]] = Field(
        default_factory=dict, description=("Per pool name, time-of-day floors of its replica count.")
    )


class FailureEvent(_Strict):
    """One failure of one replica at a given time."""

    pool: str = Field(description="The pool of the replica.")
    replica: int = Field(
        0,
        ge=0,
        description=(
            "Which replica of the pool (0-based, in start order, those scaled in or failed included); "
            "one not running at at_s is a notice, the failure does not happen."
        ),
    )
    at_s: float = Field(ge=0, description="When it fails.", json_schema_extra={"unit": "s"})
    recover_after_s: float | None = Field(
        None,
        gt=0,
        json_schema_extra={"unit": "s"},
        description=("A replacement starts this long after (then cold-starts); None: never."),
    )


class FailuresConfig(_Strict):
    """Replica failures: at given times or at a rate; their requests are retried or fail."""

    events: list[FailureEvent] = Field(default_factory=list, description="Failures at given times.")
    rate_per_hour: float = Field(
        0.0,
        ge=0,
        json_schema_extra={"unit": "1/h"},
        description=("Random failures: each serving replica fails at this rate (exponential times)."),
    )
    repair_s: float = Field(
        600.0,
        gt=0,
        json_schema_extra={"unit": "s"},
        description="Random failures: a replacement starts this long after.",
    )
    on_failure: Literal["retry", "fail"] = Field(
        "retry",
        description=(
            "retry: a failed replica's requests are sent again to another (their KV recomputed from "
            "the prompt); fail: they are recorded as failed."
        ),
    )
    max_retries: int = Field(3, ge=0, description="A request retried more often than this fails.")


class PowerCapConfig(_Strict):
    """POLCA-style power capping of a row of servers under one budget (Patel et al., ASPLOS'24)."""

    budget_w: float = Field(
        gt=0,
        json_schema_extra={"unit": "W"},
        description="The row's power budget (GPU power of every provisioned replica).",
    )
    low_priority_pools: list[str] = Field(
        default_factory=list, description=("Pools capped first (above cap_low_at).")
    )
    cap_low_at: float = Field(
        0.8,
        gt=0,
        le=1.5,
        json_schema_extra={"unit": "fraction"},
        description="Above this fraction of the budget the low-priority pools are capped.",
    )
    cap_all_at: float = Field(
        0.9,
        gt=0,
        le=1.5,
        json_schema_extra={"unit": "fraction"},
        description="Above this fraction of the budget every pool is capped.",
    )
    hysteresis: float = Field(
        0.1,
        ge=0,
        lt=1,
        json_schema_extra={"unit": "fraction"},
        description=(
            "The band: a cap is lifted (one level an interval) only when the power the row would "
            "draw with it lifted (the last interval's work at the full clock) is this fraction of "
            "the budget below its threshold (docs/operations.md)."
        ),
    )
    capped_clock: float | None = Field(
        None,
        gt=0,
        le=1,
        json_schema_extra={"unit": "fraction"},
        description=(
            "SM clock of a capped GPU, fraction of max; None: the clock that slows prefill as the "
            "Splitwise power-capped H100 does (0.77)."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PowerCapConfig:
        if self.cap_low_at > self.cap_all_at:
            raise ValueError(
                f"expected cap_low_at <= cap_all_at, found {self.cap_low_at} > {self.cap_all_at}"
            )
        return self


class OperationsConfig(_Strict):
    """How the cluster changes over time (docs/operations.md)."""

    interval_s: float = Field(
        60.0,
        gt=0,
        json_schema_extra={"unit": "s"},
        description=(
            "The control interval: every interval metrics are read, scaling and capping decided, "
            "and one row per pool written to timeseries.<fmt>."
        ),
    )
    autoscaling: AutoscalingConfig | None = Field(None, description="None: fixed pool sizes.")
    failures: FailuresConfig | None = Field(None, description="None: replicas never fail.")
    power: PowerCapConfig | None = Field(None, description="None: no power budget.")
