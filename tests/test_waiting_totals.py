"""The replicas' waiting seconds are accumulated as their steps run (``ReplicaTotals.waiting_s``):
the same figure, to rounding (the series sums its columns in another order), as summing
``num_waiting x duration_s`` over the step series (``StepSeries.waiting_s_by_replica``), for a
lone replica's runs of decode steps and a cluster's replicas alike."""

from __future__ import annotations

import pytest

import servesim
from servesim.config.scenario import load_scenario


def _check(overrides: list[str], num_replicas: int) -> None:
    res = servesim.simulate(load_scenario(None, overrides))
    reps = res.replicas
    assert len(reps) == num_replicas and any(r.num_run_steps for r in reps)  # runs of decode steps too
    from_series = res.steps.waiting_s_by_replica(len(reps)).tolist()
    assert [r.waiting_s for r in reps] == pytest.approx(from_series, rel=1e-12)
    assert any(w > 0 for w in from_series)  # a queue formed, so the figure says something


def test_lone_replica_runs_of_decode_steps() -> None:
    # past the replica's capacity: requests queue during its runs of decode steps
    _check(["workload.rate_scale=6", "workload.limit=3000"], 1)


def test_cluster_replicas() -> None:
    _check(["workload.rate_scale=12", "workload.limit=3000", "parallel.data_parallel_size=2"], 2)
