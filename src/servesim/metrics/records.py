"""What a simulation returns: per-request records and per-step series, as columns.

Records are filled by the engine during the run; every metric is computed afterwards
from them (``servesim.metrics.summary``). Columns are numpy arrays so they convert to
pandas/polars/Arrow without copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from servesim.metrics.itl import ItlSamples
from servesim.metrics.step_series import STEP_COLUMNS, StepRows, StepSeries  # noqa: F401 (re-exported)
from servesim.metrics.totals import OffloadTotals, ReplicaTotals  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from servesim.catalog.gpus import GpuSpec
    from servesim.catalog.models import ModelSpec
    from servesim.config import EngineConfig, ParallelConfig
    from servesim.config.scenario import Scenario
    from servesim.metrics.timeseries import TimeSeries
    from servesim.perf.base import PerfModel
    from servesim.perf.memory import MemoryPlan


class RequestStatus(IntEnum):
    FINISHED = 0
    UNFINISHED = 1  # still queued or running when the run ended
    REJECTED = 2  # can never be served (for example longer than max_model_len)


@dataclass(slots=True)
class RequestRecords:
    """One row per request, in workload (arrival) order. Times are seconds; NaN = never."""

    arrival_s: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finished_s: np.ndarray
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    num_cached_tokens: np.ndarray  # prompt tokens served from the prefix cache at first schedule
    num_preemptions: np.ndarray
    replica: np.ndarray
    status: np.ndarray  # RequestStatus values (int8)
    # Finished at max_model_len before its requested output (vLLM's finish_reason "length").
    finished_length: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))  # bool
    reasons: dict[int, str] = field(default_factory=dict)  # row -> why rejected/unfinished

    def __post_init__(self) -> None:
        if len(self.finished_length) != len(self.arrival_s):  # not given: none did
            self.finished_length = np.zeros(len(self.arrival_s), np.bool_)

    @classmethod
    def empty(cls, n: int) -> RequestRecords:
        nan = np.full(n, np.nan)
        return cls(
            arrival_s=nan.copy(),
            first_scheduled_s=nan.copy(),
            first_token_s=nan.copy(),
            finished_s=nan.copy(),
            num_prompt_tokens=np.zeros(n, np.int64),
            num_output_tokens=np.zeros(n, np.int64),
            num_cached_tokens=np.zeros(n, np.int64),
            num_preemptions=np.zeros(n, np.int64),
            replica=np.zeros(n, np.int64),
            status=np.full(n, RequestStatus.UNFINISHED, np.int8),
            finished_length=np.zeros(n, np.bool_),
        )

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def columns(self) -> dict[str, np.ndarray]:
        """Plain name -> column mapping (for Arrow/pandas/CSV)."""
        return {
            "arrival_s": self.arrival_s,
            "first_scheduled_s": self.first_scheduled_s,
            "first_token_s": self.first_token_s,
            "finished_s": self.finished_s,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_output_tokens": self.num_output_tokens,
            "num_cached_tokens": self.num_cached_tokens,
            "num_preemptions": self.num_preemptions,
            "replica": self.replica,
            "status": self.status,
            "finished_length": self.finished_length,
        }

    # Derived per-request latencies (NaN where undefined).
    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finished_s - self.arrival_s

    @property
    def queue_s(self) -> np.ndarray:
        return self.first_scheduled_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean time per output token after the first: (finish - first token) / (n - 1)."""
        n = self.num_output_tokens.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 1, (self.finished_s - self.first_token_s) / (n - 1), np.nan)


class PoolDeployment(Protocol):
    """What the metrics read of a resolved pool: ``deployment.Deployment``, which the layer
    above builds (a protocol, since metrics cannot import it)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...  # colocated | prefill | decode
    @property
    def num_replicas(self) -> int: ...
    @property
    def model(self) -> ModelSpec: ...
    @property
    def gpu(self) -> GpuSpec: ...
    @property
    def parallel(self) -> ParallelConfig: ...
    @property
    def engine(self) -> EngineConfig: ...  # resolved: no None batch knobs
    @property
    def plan(self) -> MemoryPlan: ...
    @property
    def perf(self) -> PerfModel: ...
    @property
    def kv_dtype_bytes(self) -> float: ...
    @property
    def profile(self) -> Any: ...  # the HardwareProfile applied, if any
    @property
    def num_gpus(self) -> int: ...
    def step_time_model(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class Result:
    """Everything one simulation produced. ``summary`` is filled by ``metrics.summarize``."""

    scenario: Scenario
    records: RequestRecords
    steps: StepSeries
    itl: ItlSamples
    replicas: list[ReplicaTotals]
    end_s: float  # simulated time when the last event happened
    gpu: GpuSpec | None = None  # used (power, price)
    wall_s: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)
    # What a report needs besides the numbers: the resolved deployment of each pool (one
    # for a single replica: ``servesim.deployment.Deployment``) and the changes the
    # readers and the config made to the input (``workload.notices``).
    deployments: Sequence[PoolDeployment] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    workload_stats: dict[str, float] = field(default_factory=dict)  # mean_prompt_tokens, mean_output_tokens
    # Requests grouped into tasks (sessions, agent runs): (task of each row, start of each task).
    tasks: tuple[np.ndarray, np.ndarray] | None = None
    # A cluster with operations (servesim.cluster.operations): the per-pool, per-interval
    # series (metrics.timeseries.TimeSeries) and the operations' counts.
    timeseries: TimeSeries | None = None
    # A run with tenants: their names, each row's tenant, weights, SLOs, rejections and the
    # scheduler's counters (``cluster.pools.tenant_record``; summarized by ``metrics.tenants``).
    tenants: dict[str, Any] | None = None
    operations: dict[str, Any] = field(default_factory=dict)
    # Several models (``cluster.models``): each row's model name id, the names, and each served
    # model's pools (``cluster.pools.model_record``; summarized by ``metrics.models``).
    models: dict[str, Any] | None = None
