"""Quiet events (servesim.engine.events): a replica's step ends that route nothing do not cut
the decode runs of the other replicas of a cluster, and change no result."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_workload

from servesim.cluster.cluster import Cluster, PoolSpec
from servesim.cluster.run import run_cluster
from servesim.config import ClusterConfig, EngineConfig, PoolConfig, resolve_engine
from servesim.config.operations import (
    AutoscalingConfig,
    FailureEvent,
    FailuresConfig,
    OperationsConfig,
    PoolScaling,
)
from servesim.engine.events import EventLoop
from servesim.perf.base import BatchStats

ENG = resolve_engine(
    EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048, cpu_overhead_s=0.001), max_model_len=4096
)


class ContextPerf:
    """A step of 8 ms plus 1 us per decode context token and 20 us per prefill token: decode
    steps lengthen as contexts grow, so a run's end depends on every step it covers."""

    def batch_time(self, stats: BatchStats) -> float:
        return 0.008 + 1e-6 * stats.sum_decode_context + 2e-5 * stats.num_prefill_tokens

    def batch_flops(self, stats: BatchStats) -> float:
        return 1e9 * (stats.num_prefill_tokens + stats.num_decode_reqs)

    def batch_bytes(self, stats: BatchStats) -> float:
        return 1e8 + 1e3 * stats.sum_decode_context


def test_next_loud_time_skips_quiet_events() -> None:
    loop = EventLoop()
    seen: list[str] = []
    loop.at_quiet(1.0, seen.append, "q1")
    loop.at(2.0, seen.append, "loud2")
    loop.at_quiet(1.5, seen.append, "q1.5")
    loop.at(3.0, seen.append, "loud3")
    assert loop.next_time() == 1.0 and loop.next_loud_time() == 2.0
    loop.run(until=1.9)
    assert seen == ["q1", "q1.5"] and loop.next_loud_time() == 2.0
    loop.run(until=2.0)
    assert loop.next_loud_time() == 3.0
    loop.run()
    assert seen == ["q1", "q1.5", "loud2", "loud3"] and loop.next_loud_time() == float("inf")
    with pytest.raises(ValueError, match="before now"):
        loop.at_quiet(1.0, seen.append, "late")


def test_first_quiet_event_after_loud_ones() -> None:
    """Until an event is scheduled quiet the loop keeps no loud heap; the first quiet one
    makes it of the loud events then pending, which still bound ``next_loud_time``."""
    loop = EventLoop()
    seen: list[str] = []
    loop.at(2.0, seen.append, "loud2")
    loop.at(1.0, seen.append, "loud1")
    loop.at(4.0, seen.append, "loud4")
    loop.at(3.0, seen.append, "loud3")
    assert loop.next_loud_time() == 1.0
    loop.run(until=1.0)
    assert seen == ["loud1"] and loop.next_loud_time() == 2.0
    loop.at_quiet(1.5, seen.append, "q1.5")
    loop.at_quiet(2.5, seen.append, "q2.5")
    assert loop.next_time() == 1.5 and loop.next_loud_time() == 2.0
    loop.run(until=2.6)
    assert seen == ["loud1", "q1.5", "loud2", "q2.5"] and loop.next_loud_time() == 3.0
    loop.at(2.8, seen.append, "loud2.8")
    assert loop.next_loud_time() == 2.8
    loop.run()
    assert seen[4:] == ["loud2.8", "loud3", "loud4"] and loop.next_loud_time() == float("inf")


def _runs(monkeypatch: pytest.MonkeyPatch, quiet: bool, pools: list[PoolSpec], cfg: ClusterConfig):  # noqa: ANN202
    rng = np.random.default_rng(7)
    n = 600
    wl = make_workload(
        np.cumsum(rng.exponential(1 / 40, n)).tolist(),
        rng.integers(50, 1500, n).tolist(),
        rng.integers(20, 400, n).tolist(),
    )
    with monkeypatch.context() as m:
        if not quiet:  # every replica's step ends loud: the loop as it was before quiet steps
            # (set on the cluster, which is Python: the compiled replica calls the loop's
            # ``at_quiet`` natively, past any patch of the class)
            m.setattr(Cluster, "quiet_of", lambda self, pool: False)
        return run_cluster(wl, pools, cfg, seed=3)


def _pool(name: str, n: int, role: str = "colocated") -> PoolSpec:
    return PoolSpec(
        name,
        role,
        n,
        ENG,
        ContextPerf(),
        num_gpu_blocks=3000,
        max_model_len=4096,
        kv_bytes_per_token=1000.0,
        weights_bytes_per_gpu=2e9,
    )


OPS = OperationsConfig(
    interval_s=1.0,
    autoscaling=AutoscalingConfig(
        pools=[
            PoolScaling(
                pool="c", metric="running", target=12, min_replicas=1, max_replicas=6, scale_in_grace_s=2.0
            )
        ],
        startup_s=0.5,
        load_gb_per_s=10.0,
    ),
    failures=FailuresConfig(events=[FailureEvent(pool="c", replica=1, at_s=5.0, recover_after_s=2.0)]),
)
CASES = {
    "colocated": (
        [_pool("c", 4)],
        ClusterConfig(pools=[PoolConfig(name="c", num_replicas=4)], router="least_outstanding"),
    ),
    "operations": (
        [_pool("c", 2)],
        ClusterConfig(pools=[PoolConfig(name="c", num_replicas=2)], router="power_of_two", operations=OPS),
    ),
    "disaggregated": (
        [_pool("p", 2, "prefill"), _pool("d", 3, "decode")],
        ClusterConfig(
            pools=[
                PoolConfig(name="p", role="prefill", num_replicas=2),
                PoolConfig(name="d", role="decode", num_replicas=3),
            ],
            router="least_outstanding",
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_quiet_step_ends_change_no_result(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    pools, cfg = CASES[case]
    loud = _runs(monkeypatch, False, pools, cfg)
    quiet = _runs(monkeypatch, True, pools, cfg)
    for col in ("first_scheduled_s", "first_token_s", "finished_s", "replica", "num_output_tokens", "status"):
        np.testing.assert_array_equal(getattr(quiet.records, col), getattr(loud.records, col), err_msg=col)
    assert quiet.end_s == loud.end_s
    assert sum(t.num_steps for t in quiet.totals) == sum(t.num_steps for t in loud.totals)
    if loud.timeseries is not None:
        assert quiet.timeseries.replicas == loud.timeseries.replicas
        assert quiet.timeseries.power_w == loud.timeseries.power_w
    # ...and more of the steps are covered by runs (fewer events), since other replicas'
    # step ends no longer end them.
    assert sum(t.num_run_steps for t in quiet.totals) > 1.2 * sum(t.num_run_steps for t in loud.totals)
