"""Llumnix's load metric and what reads it (servesim.cluster.freeness): the freeness of a
replica on tiny KV caches, the llumnix router, the priority headroom in dispatch and
migration, migration that drains a replica scaled in, autoscaling on the average freeness,
and synthetic priorities."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from conftest import make_scheduler, make_workload, req

from servesim.cluster.cluster import PoolSpec
from servesim.cluster.freeness import freeness, headroom_blocks, virtual_blocks
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState
from servesim.cluster.run import run_cluster
from servesim.config import (
    ArrivalConfig,
    ClusterConfig,
    EngineConfig,
    LengthDist,
    MigrationConfig,
    PoolConfig,
    SyntheticWorkload,
    resolve_engine,
)
from servesim.config.operations import AutoscalingConfig, OperationsConfig, PoolScaling
from servesim.engine.replica import Replica
from servesim.perf.base import ConstantPerfModel
from servesim.workload.synthetic import generate_synthetic


def replica_of(sched: Any) -> Replica:
    """What freeness reads of a replica: its scheduler and KV cache."""
    return cast(Replica, SimpleNamespace(scheduler=sched, kv=sched.kv))


def two_running_two_waiting() -> Any:
    """11 blocks of 16 tokens (10 usable): A (priority 0, 40 tokens: 3 blocks) and B
    (priority 1, 20 tokens: 2 blocks) running; C (33 tokens: 3 blocks) then D waiting."""
    s = make_scheduler(max_num_seqs=2)
    s.add_request(req(0, 40, 8, priority=0))
    s.add_request(req(1, 20, 8, priority=1))
    s.schedule()
    s.add_request(req(2, 33, 8, priority=1))
    s.add_request(req(3, 100, 8, priority=1))
    assert [r.idx for r in s.running] == [0, 1] and [r.idx for r in s.waiting] == [2, 3]
    assert s.kv.num_free_blocks == 10 - 3 - 2
    return s


def test_freeness_counts_the_head_of_the_line_and_each_running_priority_headroom_once() -> None:
    rep = replica_of(two_running_two_waiting())
    # No headroom: 5 free blocks less C's 3 (D, behind it, counts 0), over 2 running + 1 queued.
    assert virtual_blocks(rep, {}) == 3
    assert freeness(rep, {}) == (5 - 3) / 3
    # Priority 0 runs here (A): its headroom of 2 blocks counts; priority 1's counts once for B.
    assert virtual_blocks(rep, {0: 2}) == 5
    assert freeness(rep, {0: 2}) == 0.0
    assert freeness(rep, {0: 2, 1: 1}) == (5 - 3 - 2 - 1) / 3
    # A priority nobody here has adds nothing, unless a request of it is arriving.
    assert freeness(rep, {7: 4}) == (5 - 3) / 3
    assert freeness(rep, {7: 4}, arriving=7) == (5 - 3 - 4) / 3
    assert freeness(rep, {0: 2}, arriving=0) == freeness(rep, {0: 2})  # already here: shared
    assert freeness(rep, {}, terminating=True) == -math.inf


def test_freeness_of_an_empty_replica() -> None:
    rep = replica_of(make_scheduler())
    assert freeness(rep, {0: 4}) == math.inf
    assert freeness(rep, {0: 4}, arriving=0) == 10 - 4  # its free blocks less the headroom
    assert headroom_blocks({0: 33, 1: 0}, 16) == {0: 3}  # whole blocks, rounded up; 0 is none


def test_llumnix_router_picks_the_freest_then_the_least_outstanding() -> None:
    st = RouterState(np.random.default_rng(0))
    x = [ReplicaLoad(num_outstanding=o, freeness=f) for o, f in [(1, 2.0), (5, 9.5), (0, -math.inf)]]
    assert ROUTERS["llumnix"](req(0, 10), x, st) == 1
    x = [ReplicaLoad(num_outstanding=o, freeness=f) for o, f in [(3, math.inf), (2, math.inf)]]
    assert ROUTERS["llumnix"](req(0, 10), x, st) == 1


ENG = resolve_engine(
    EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, cpu_overhead_s=0.0), max_model_len=1024
)


def pool(n: int, blocks: int = 41, perf_s: float = 0.01) -> PoolSpec:
    return PoolSpec(
        "c",
        "colocated",
        n,
        ENG,
        ConstantPerfModel(perf_s),
        num_gpu_blocks=blocks,
        max_model_len=1024,
        kv_bytes_per_token=1000.0,
    )


def test_headroom_keeps_normal_requests_off_the_high_priority_replica() -> None:
    # Two replicas of 40 usable blocks whose steps take 1 s, so that nothing finishes a step
    # during the arrivals: a high-priority request (priority 0) at t = 0, then five normal
    # ones (priority 1) every 50 ms, 32-token prompts (2 blocks each). A request that arrives
    # during a step waits; the head of the line counts its 2 blocks and one more request.
    wl = make_workload([0.0, 0.05, 0.1, 0.15, 0.2, 0.25], 32, 400)
    wl.priority = np.array([0, 1, 1, 1, 1, 1], np.int64)

    def replicas(headroom: dict[int, int]) -> list[int]:
        cfg = ClusterConfig(
            pools=[PoolConfig(name="c", num_replicas=2)], router="llumnix", priority_headroom_tokens=headroom
        )
        return run_cluster(wl, [pool(2, perf_s=1.0)], cfg, check_invariants=True).records.replica.tolist()

    # Without headroom: r0 -> 0 (both empty, lowest index); r1 -> 1 (38 vs inf); r2 -> 0
    # (38 vs 38, 1 outstanding each); r3 -> 1 (replica 0: (38 - 2) / 2 = 18 vs 38); r4 -> 0
    # (18 vs 18, 2 outstanding each; the second in line counts nothing); r5 -> 1 (3 vs 2).
    assert replicas({}) == [0, 1, 0, 1, 0, 1]
    # A headroom of 480 tokens (30 blocks) for priority 0: r0 -> 0 (40 - 30 both: a tie);
    # then replica 0 reads (38 - 30) / 1 = 8 and replica 1 inf, then 38, then (38 - 2) / 2 =
    # 18: every normal request goes to replica 1.
    assert replicas({0: 480}) == [0, 1, 1, 1, 1, 1]


def test_migration_by_freeness_moves_normal_requests_off_the_high_priority_replica() -> None:
    # Round robin puts the high-priority request (priority 0) and two normal ones on replica
    # 0, three normal ones on replica 1 (200 usable blocks each; 32-token prompts, 100
    # outputs). With a headroom of 190 blocks (3,040 tokens) replica 0 reads about
    # (194 - 190) / 3 = 1.3 free blocks per request, at or below the threshold of 3: it sends,
    # the least urgent first, to replica 1 (about 194 / 3 = 65), until only the high-priority
    # request, which its headroom keeps, is left. Without it both read about 65: no migration.
    wl = make_workload([0.0, 0.01, 0.02, 0.03, 0.04, 0.05], 32, 100)
    wl.priority = np.array([0, 1, 1, 1, 1, 1], np.int64)

    def run(headroom: dict[int, int]) -> Any:
        cfg = ClusterConfig(
            pools=[PoolConfig(name="c", num_replicas=2)],
            router="round_robin",
            priority_headroom_tokens=headroom,
            migration=MigrationConfig(enabled=True, interval_s=0.05, load="freeness"),
        )
        return run_cluster(wl, [pool(2, blocks=201)], cfg, check_invariants=True)

    off, on = run({}), run({0: 3040})
    assert off.records.replica.tolist() == [0, 1, 0, 1, 0, 1] and off.num_migrations == 0
    assert on.records.replica.tolist() == [0, 1, 1, 1, 1, 1]
    assert [t.num_migrations_out for t in on.totals] == [2, 0]


def test_migration_by_freeness_drains_a_replica_scaled_in_at_once() -> None:
    # Two replicas, 8 long requests spread over them; at the first operations tick (t = 1 s)
    # the average freeness is far above scale_in_above, so one replica drains. With
    # migration its requests move at its next step end; without, it waits for them to finish.
    wl = make_workload([0.01 * i for i in range(8)], 32, 300)

    def run(migrate: bool) -> Any:
        rule = PoolScaling(
            pool="c", metric="freeness", target=1, scale_in_above=2, min_replicas=1, scale_in_grace_s=0
        )
        ops = OperationsConfig(interval_s=1.0, autoscaling=AutoscalingConfig(pools=[rule]))
        cfg = ClusterConfig(
            pools=[PoolConfig(name="c", num_replicas=2)],
            router="llumnix",
            migration=MigrationConfig(enabled=migrate, interval_s=0.05, load="freeness"),
            operations=ops,
        )
        return run_cluster(wl, [pool(2, blocks=400)], cfg, check_invariants=True)

    off, on = run(False), run(True)
    assert (on.records.status == 0).all() and (off.records.status == 0).all()
    held_off = sorted(t.provisioned_s for t in off.totals)
    held_on = sorted(t.provisioned_s for t in on.totals)
    # Without migration the drained replica holds its GPU until its last request ends
    # (300 steps of 10 ms after t = 0.04 s); with it, its 4 requests leave one a poll
    # (50 ms; one migration at a time, as Llumnix's MAX_MIGRATION_CONCURRENCY 1), each at
    # the end of the 10 ms step in flight, and it stops with the last.
    assert held_off[0] > 3.0
    assert 1.0 <= held_on[0] <= 1.0 + 4 * 0.05 + 0.01 + 1e-9
    assert on.num_migrations == 4 and off.num_migrations == 0


def test_freeness_autoscaling_scales_out_below_the_target() -> None:
    # One replica of 40 usable blocks; 12 requests of 64-token prompts (4 blocks) at once:
    # 10 usable blocks per request at most, below a target of 20, so a second replica starts.
    wl = make_workload([0.0] * 12, 64, 200)
    rule = PoolScaling(pool="c", metric="freeness", target=20, scale_in_above=30, max_replicas=2)
    ops = OperationsConfig(interval_s=0.5, autoscaling=AutoscalingConfig(pools=[rule], startup_s=0.0))
    cfg = ClusterConfig(pools=[PoolConfig(name="c", num_replicas=1)], router="llumnix", operations=ops)
    run = run_cluster(wl, [pool(1)], cfg, check_invariants=True)
    assert len(run.totals) == 2 and run.totals[1].provisioned_from_s == 0.5


def test_synthetic_priorities_follow_their_shares_and_leave_the_other_draws_alone() -> None:
    base = dict(
        num_requests=4000,
        arrival=ArrivalConfig(process="poisson", rate=10.0),
        prompt_len=LengthDist(kind="uniform", low=10, high=500),
    )
    plain = generate_synthetic(SyntheticWorkload(**base))  # type: ignore[arg-type]
    wl = generate_synthetic(SyntheticWorkload(**base, priority_shares={0: 1, 1: 9}))  # type: ignore[arg-type]
    assert plain.priority is None and wl.priority is not None
    assert set(wl.priority.tolist()) == {0, 1}
    assert abs(float((wl.priority == 0).mean()) - 0.1) < 0.015  # 4,000 draws: sd 0.0047
    assert np.array_equal(plain.arrival_s, wl.arrival_s)
    assert np.array_equal(plain.num_prompt_tokens, wl.num_prompt_tokens)
    again = generate_synthetic(SyntheticWorkload(**base, priority_shares={0: 1, 1: 9}))  # type: ignore[arg-type]
    assert np.array_equal(again.priority, wl.priority)


def test_the_head_of_the_line_counts_its_tokens_not_its_unknown_output() -> None:
    # 11 blocks of 16 tokens; A (40 tokens) runs; E waits with a 20-token prompt (2 blocks)
    # and up to 100 tokens to generate, which no router knows: its demand is its 2 blocks.
    s = make_scheduler(max_num_seqs=1)
    s.add_request(req(0, 40, 8, priority=0))
    s.schedule()
    s.add_request(req(4, 20, 100, priority=1))
    assert [r.idx for r in s.waiting] == [4]
    assert virtual_blocks(replica_of(s), {}) == 2
