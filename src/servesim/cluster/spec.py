"""What a cluster run is given and gives back: one pool of replicas, resolved from the
scenario (``PoolSpec``), and the run's records, steps and totals (``ClusterRun``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servesim.cluster.transfer import Link
from servesim.config import ResolvedEngine
from servesim.metrics.records import ItlSamples, ReplicaTotals, RequestRecords, StepSeries
from servesim.perf.base import PerfModel

if TYPE_CHECKING:
    from servesim.engine.tenants import TenantCounters


@dataclass(slots=True)
class PoolSpec:
    """One pool, resolved from the scenario (tests build these directly, no catalog)."""

    name: str
    role: str  # colocated | prefill | decode
    num_replicas: int
    engine: ResolvedEngine  # ``config.resolve_engine``'s (no None batch knobs)
    perf: PerfModel
    num_gpu_blocks: int
    max_model_len: int
    num_gpus: int = 1  # per replica (tp x pp)
    kv_bytes_per_token: float = 0.0  # the whole model's KV per token (all layers and heads)
    net_bw: float = 50e9  # per GPU, bytes/s (KV transfers)
    net_latency_s: float = 8e-6
    gpu: Any = None
    reference: bool = False  # step-by-step scheduler (migration needs it)
    kv_bytes_per_block: float = 0.0  # per GPU, from the memory plan (swap-preemption policies)
    weights_bytes_per_gpu: float = 0.0  # what a cold start loads (cluster.operations)
    # Data-parallel ranks of one server that step in lockstep (an MoE model's; 1: each
    # replica on its own). Consecutive replicas form a server, sharing its API front end.
    dp: int = 1
    # The name requests give to reach this pool (``deployment.served_model``; "": the
    # cluster's one model). A cluster of several routes each request among its model's pools.
    served_model: str = ""


@dataclass(slots=True)
class TenantRun:
    """What a run with tenants measured besides the records: the schedulers' counters over
    all replicas (``engine.tenants.merged_counters``; None where no scheduler keeps them) and the
    gate's rejections by (tenant, reason)."""

    scheduler: TenantCounters | None
    rejected: dict[tuple[int, str], int]


@dataclass(slots=True)
class ClusterRun:
    records: RequestRecords
    steps: StepSeries
    itl: ItlSamples
    totals: list[ReplicaTotals]
    end_s: float
    num_handoffs: int = 0
    num_migrations: int = 0
    links: dict[int, Link] = field(default_factory=dict)
    timeseries: Any = None  # metrics.timeseries.TimeSeries, with operations
    operations: dict[str, Any] = field(default_factory=dict)
    fleet: Any = None  # cluster.fleet.Fleet: each replica's start, ready and end times
    notices: list[dict[str, Any]] = field(default_factory=list)  # operations configured that did not happen
    tenants: TenantRun | None = None  # a run with tenants (``TenantRun``)
    # What the mixed pool did (``cluster.overflow.MixedPool.counts``); empty without it.
    overflow: dict[str, int] = field(default_factory=dict)
