"""Cut runs (``engine.replica``'s docstring): a cluster's arrivals are quiet events and each
replica cuts its own run of decode steps when a request reaches it or a router that reads
runs inspects it; round robin over a fixed pool bounds each replica's runs by its own next
arrival (``cluster.turns.known_turns``). Every cluster below runs both ways, the other way being
the loop as it was before (``cluster.CUT_RUNS = False``: every arrival ends every run), and
gives the same records and step rows; only float sums whose terms a run groups differently
(busy seconds, KV block-seconds, the front end's busy seconds, inter-token gaps at a run's
edge) may differ, in their last bits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import make_workload

import servesim.cluster.cluster as cluster_mod
from servesim.cluster.cluster import PoolSpec
from servesim.cluster.run import run_cluster
from servesim.config import ClusterConfig, EngineConfig, FrontendConfig, PoolConfig, resolve_engine
from servesim.config.operations import (
    AutoscalingConfig,
    FailureEvent,
    FailuresConfig,
    OperationsConfig,
    PoolScaling,
)
from servesim.engine.events import EventLoop
from servesim.perf.base import BatchStats


class ContextPerf:
    """A step of 8 ms plus 1 us per decode context token and 20 us per prefill token: decode
    steps lengthen as contexts grow, so a run's end depends on every step it covers."""

    def batch_time(self, stats: BatchStats) -> float:
        return 0.008 + 1e-6 * stats.sum_decode_context + 2e-5 * stats.num_prefill_tokens

    def batch_flops(self, stats: BatchStats) -> float:
        return 1e9 * (stats.num_prefill_tokens + stats.num_decode_reqs)

    def batch_bytes(self, stats: BatchStats) -> float:
        return 1e8 + 1e3 * stats.sum_decode_context


def _engine(frontend: bool, async_scheduling: bool, prefix: bool = False) -> Any:
    return resolve_engine(
        EngineConfig(
            max_num_seqs=64,
            max_num_batched_tokens=2048,
            cpu_overhead_s=0.001,
            async_scheduling=async_scheduling,
            enable_prefix_caching=prefix,
            frontend=FrontendConfig(enabled=frontend, per_output_token_s=3e-5, per_chunk_s=6e-5),
        ),
        max_model_len=4096,
    )


def _pool(name: str, n: int, role: str = "colocated", eng: Any = None) -> PoolSpec:
    return PoolSpec(
        name,
        role,
        n,
        eng if eng is not None else _engine(True, True),
        ContextPerf(),
        num_gpu_blocks=3000,
        max_model_len=4096,
        kv_bytes_per_token=1000.0,
        weights_bytes_per_gpu=2e9,
    )


def _cfg(pools: list[tuple[str, int, str]], router: str, **kw: Any) -> ClusterConfig:
    return ClusterConfig(
        pools=[PoolConfig(name=n, num_replicas=k, role=role) for n, k, role in pools], router=router, **kw
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
# Scaled on GPU utilization (the busy seconds of the runs in flight at each tick).
OPS_UTIL = OPS.model_copy(
    update={
        "autoscaling": OPS.autoscaling.model_copy(
            update={
                "pools": [
                    PoolScaling(
                        pool="c",
                        metric="gpu_util",
                        target=0.6,
                        min_replicas=1,
                        max_replicas=6,
                        scale_in_grace_s=2.0,
                    )
                ]
            }
        )
    }
)
SYNC = _engine(True, False)
PLAIN = _engine(False, False)
PREFIX = _engine(True, True, prefix=True)
CASES: dict[str, tuple[list[PoolSpec], ClusterConfig]] = {
    "round_robin": ([_pool("c", 4)], _cfg([("c", 4, "colocated")], "round_robin")),
    "round_robin_sync": ([_pool("c", 4, eng=SYNC)], _cfg([("c", 4, "colocated")], "round_robin")),
    "round_robin_plain": ([_pool("c", 3, eng=PLAIN)], _cfg([("c", 3, "colocated")], "round_robin")),
    "random": ([_pool("c", 4)], _cfg([("c", 4, "colocated")], "random")),
    "least_outstanding": ([_pool("c", 4)], _cfg([("c", 4, "colocated")], "least_outstanding")),
    "power_of_two": ([_pool("c", 4, eng=SYNC)], _cfg([("c", 4, "colocated")], "power_of_two")),
    "least_kv": ([_pool("c", 4)], _cfg([("c", 4, "colocated")], "least_kv")),
    "predicted_ttft": ([_pool("c", 3, eng=PLAIN)], _cfg([("c", 3, "colocated")], "predicted_ttft")),
    "prefix_affinity": ([_pool("c", 4, eng=PREFIX)], _cfg([("c", 4, "colocated")], "prefix_affinity")),
    "stale_least_kv": ([_pool("c", 4)], _cfg([("c", 4, "colocated")], "least_kv", staleness_s=0.05)),
    "ops_round_robin": ([_pool("c", 2)], _cfg([("c", 2, "colocated")], "round_robin", operations=OPS)),
    "ops_power_of_two": ([_pool("c", 2)], _cfg([("c", 2, "colocated")], "power_of_two", operations=OPS)),
    "ops_gpu_util": (
        [_pool("c", 2)],
        _cfg([("c", 2, "colocated")], "least_outstanding", operations=OPS_UTIL),
    ),
    "ops_least_kv": ([_pool("c", 2)], _cfg([("c", 2, "colocated")], "least_kv", operations=OPS)),
    "disaggregated": (
        [_pool("p", 2, "prefill"), _pool("d", 3, "decode")],
        _cfg([("p", 2, "prefill"), ("d", 3, "decode")], "least_outstanding"),
    ),
}


def _run(monkeypatch: pytest.MonkeyPatch, cut: bool, pools: list[PoolSpec], cfg: ClusterConfig) -> Any:
    rng = np.random.default_rng(7)
    n = 700
    wl = make_workload(
        np.cumsum(rng.exponential(1 / 40, n)).tolist(),
        rng.integers(50, 1500, n).tolist(),
        rng.integers(20, 400, n).tolist(),
        prefix_group=rng.integers(0, 6, n).tolist(),
        prefix_len=512,
    )
    with monkeypatch.context() as m:
        m.setattr(cluster_mod, "CUT_RUNS", cut)
        return run_cluster(wl, pools, cfg, seed=3)


def _rows(steps: Any) -> dict[str, np.ndarray]:
    """The step rows by replica, then start (the rows' order across replicas follows the
    order the events ran in, which the runs change)."""
    cols = steps.columns()
    order = np.lexsort((cols["start_s"], cols["replica"]))
    return {k: np.asarray(v)[order] for k, v in cols.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cut_runs_change_no_result(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    pools, cfg = CASES[case]
    before = _run(monkeypatch, False, pools, cfg)
    after = _run(monkeypatch, True, pools, cfg)
    for col in before.records.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(after.records, col), getattr(before.records, col), err_msg=col)
    rows_before, rows_after = _rows(before.steps), _rows(after.steps)
    for col, values in rows_before.items():
        np.testing.assert_array_equal(rows_after[col], values, err_msg=f"steps.{col}")
    assert after.end_s == before.end_s
    assert after.num_handoffs == before.num_handoffs
    for tb, ta in zip(before.totals, after.totals, strict=True):
        for name in tb.__dataclass_fields__:
            x, y = getattr(tb, name), getattr(ta, name)
            if name == "num_run_steps":  # more steps inside runs: that is the point
                continue
            if isinstance(x, float):
                assert y == pytest.approx(x, rel=1e-12, abs=1e-12), name
            else:
                assert y == x, name
    # the same inter-token gaps, each to the last bits of the clock (a gap across a run's edge
    # is a difference of two step ends, inside a run a step's duration)
    gaps_before = np.sort(np.repeat(before.itl.gap_s, before.itl.count))
    gaps_after = np.sort(np.repeat(after.itl.gap_s, after.itl.count))
    np.testing.assert_allclose(gaps_after, gaps_before, rtol=0, atol=1e-12)
    if before.timeseries is not None:
        assert after.timeseries.replicas == before.timeseries.replicas
        np.testing.assert_allclose(after.timeseries.power_w, before.timeseries.power_w, rtol=1e-12)
    # ...with fewer events: a replica's run no longer ends at every arrival of the cluster
    # (where the router reads every replica's runs, each arrival still ends them all).
    events_before = sum(t.num_steps - t.num_run_steps for t in before.totals)
    events_after = sum(t.num_steps - t.num_run_steps for t in after.totals)
    if cfg.router in ("least_kv", "prefix_affinity", "predicted_ttft"):
        assert events_after <= events_before
    else:
        assert events_after < events_before


def test_cancel_takes_an_event_out() -> None:
    loop = EventLoop()
    seen: list[str] = []
    a = loop.at(1.0, seen.append, "a")
    b = loop.at_quiet(2.0, seen.append, "b")
    c = loop.at(3.0, seen.append, "c")
    assert loop.next_loud_time() == 1.0
    assert loop.cancel(a) and loop.next_time() == 2.0 and loop.next_loud_time() == 3.0
    assert loop.cancel(b) and not loop.cancel(b)
    d = loop.at(2.5, seen.append, "d")
    assert d > c
    loop.run()
    assert seen == ["d", "c"] and len(loop) == 0 and loop.next_loud_time() == float("inf")


@pytest.mark.parametrize("router", ["round_robin", "random"])
def test_each_replica_knows_its_own_arrivals(monkeypatch: pytest.MonkeyPatch, router: str) -> None:
    """Round robin and random routing over a fixed pool: each replica is told, before the
    run, the arrival times of the requests it will be given (random's draws made up front,
    the router's own calls in arrival order), and those are the requests it served."""
    import servesim.cluster.run as run_mod

    seen: list[Any] = []
    known = run_mod.known_turns

    def spy(cluster: Any, wl: Any) -> Any:
        seen.append(cluster)
        return known(cluster, wl)

    monkeypatch.setattr(run_mod, "known_turns", spy)
    pools, cfg = CASES[router]
    res = _run(monkeypatch, True, pools, cfg)
    (cluster,) = seen
    assert all(cluster.replicas[i].finishes_in_runs for i in cluster.front)
    rec = res.records
    counts = []
    for i, rep in enumerate(cluster.replicas):
        mine = np.sort(rec.arrival_s[rec.replica == i])
        np.testing.assert_array_equal(rep.own_arrival_s, mine)
        counts.append(len(mine))
    assert sum(counts) == len(rec.arrival_s) == 700
    if router == "random":  # not in turn: the counts differ
        assert len(set(counts)) > 1
