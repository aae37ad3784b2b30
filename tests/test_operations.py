"""Operations over time (servesim.cluster.operations, fleet): failures and retries, cold
starts, autoscaling, power capping and the per-pool time series."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import make_workload
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.cluster.cluster import PoolSpec, run_cluster
from servesim.config import ClusterConfig, EngineConfig, PoolConfig, resolve_engine
from servesim.config.operations import (
    AutoscalingConfig,
    FailureEvent,
    FailuresConfig,
    OperationsConfig,
    PoolScaling,
)
from servesim.metrics.records import RequestStatus
from servesim.metrics.timeseries import COLUMNS
from servesim.perf.base import ConstantPerfModel

ENG = resolve_engine(EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096, cpu_overhead_s=0.0),
                     max_model_len=2048)


def pool(name: str = "c", n: int = 2, role: str = "colocated", weights: float = 0.0) -> PoolSpec:
    return PoolSpec(name, role, n, ENG, ConstantPerfModel(0.01), num_gpu_blocks=4000, max_model_len=2048,
                    kv_bytes_per_token=1000.0, weights_bytes_per_gpu=weights)


def cluster(ops: OperationsConfig, n: int = 2, router: str = "round_robin") -> ClusterConfig:
    return ClusterConfig(pools=[PoolConfig(name="c", num_replicas=n)], router=router, operations=ops)


def outcome(run) -> tuple[int, int, int]:  # noqa: ANN001
    """(finished, failed, anything else) over the run's records."""
    reasons = run.records.reasons
    fin = int((run.records.status == RequestStatus.FINISHED).sum())
    failed = sum(1 for r in reasons.values() if r.startswith("failed:"))
    return fin, failed, len(run.records) - fin - failed


@pytest.mark.parametrize("policy", ["retry", "fail"])
def test_a_failure_with_100_requests_in_flight_loses_none(policy: str) -> None:
    # 200 requests at once over two replicas (100 each, 200 output tokens: 2 s of decoding);
    # replica 0 fails at 0.5 s with its 100 in flight.
    wl = make_workload([0.0] * 200, 100, 200)
    ops = OperationsConfig(interval_s=0.25, failures=FailuresConfig(
        events=[FailureEvent(pool="c", replica=0, at_s=0.5)], on_failure=policy))
    run = run_cluster(wl, [pool()], cluster(ops), check_invariants=True)
    fin, failed, other = outcome(run)
    assert other == 0 and fin + failed == 200
    assert run.operations["num_failures"] == 1
    lost_on_0 = (run.records.replica == 0).sum()
    if policy == "retry":
        assert run.operations["num_retried"] == 100 and failed == 0
        # The retried ones start again on replica 1 after its first 100 are done decoding.
        assert lost_on_0 == 0
        assert (run.records.num_output_tokens == 200).all()
    else:
        assert failed == 100 and run.operations["num_retried"] == 0
        assert all("replica 0 failed" not in r or "pool c" in r for r in run.records.reasons.values())
