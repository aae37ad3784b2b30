"""Block's router (``predicted_latency``: the new request's predicted end-to-end latency) and
INFaaS++'s dispatch (``infaas``), on tiny states whose answers are worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
from conftest import make_scheduler, req

from servesim.cluster.loads import predict_latency, simulate_latency
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState
from servesim.engine.replica import Replica
from servesim.perf.base import ConstantPerfModel


def per_decode(n_dec: int, chunk: int, sum_ctx: float, chunk_ctx: int) -> float:
    """A step of 1 s plus 1 s per decode in it."""
    return 1.0 + n_dec


def one_second(n_dec: int, chunk: int, sum_ctx: float, chunk_ctx: int) -> float:
    return 1.0


BIG = 10**9


def test_empty_replica_prompt_then_decodes() -> None:
    # One step computes the 100-token prompt and emits the first token, 9 decode steps follow.
    assert simulate_latency([], [(100, 0, 9, False)], 512, 48, BIG, one_second) == 10.0


def test_prompt_chunks_beside_a_decode() -> None:
    # 511 tokens a step beside the decode: the 1,000-token prompt takes steps 1-2; the decode
    # ends at step 3; the new request's 4 decodes end at step 6.
    assert simulate_latency([(3, 50)], [(1000, 0, 4, False)], 512, 48, BIG, one_second) == 6.0


def test_step_time_follows_the_batch() -> None:
    # Four decodes with 100 steps left: the prompt's step holds 4 decodes (5 s), then its 20
    # decode steps hold 5 (6 s each): 125 s.
    busy = [(100, 10)] * 4
    assert simulate_latency(busy, [(10, 0, 20, False)], 512, 48, BIG, per_decode) == 125.0
    # A queued 1,536-token prompt with no decodes after it: 3 steps alone (1 s each), the new
    # prompt's step (1 s), then 20 steps beside nothing else (2 s each): 44 s.
    queued = [(1536, 0, 0, False), (10, 0, 20, False)]
    assert simulate_latency([], queued, 512, 48, BIG, per_decode) == 44.0
    # The shorter latency is the second replica's, whose TTFT (4 s) is also shorter here; the
    # decode phase is what separates them: 120 s against 40 s.
    r = ROUTERS["predicted_latency"]
    loads = [ReplicaLoad(predicted_latency_s=125.0), ReplicaLoad(predicted_latency_s=44.0)]
    assert r(req(0, 10), loads, RouterState(None)) == 1


def test_spare_budget_goes_to_the_next_prompt() -> None:
    # 300 + 300 + 100 tokens, 512 a step: the first prompt and 212 tokens of the second in
    # step 1, its last 88 and the new 100 in step 2, which ends the new request (no decodes).
    prefills = [(300, 0, 0, False), (300, 0, 0, False), (100, 0, 0, False)]
    assert simulate_latency([], prefills, 512, 48, BIG, one_second) == 2.0


def test_kv_and_seq_limits_hold_a_prompt_back() -> None:
    # 900 KV tokens decoding, 1,000 in all: the 200-token prompt waits for the decode's 5
    # steps (2 s each), then runs alone (1 s).
    assert simulate_latency([(5, 900)], [(200, 0, 0, False)], 512, 48, 1000, per_decode) == 11.0
    # An admitted (running) prompt is not held back.
    assert simulate_latency([(5, 900)], [(200, 0, 0, True)], 512, 48, 1000, per_decode) == 2.0
    # One sequence at most: the prompt waits for the running decode, as above.
    assert simulate_latency([(5, 10)], [(200, 0, 0, False)], 512, 1, BIG, per_decode) == 11.0


def replica(sched: Any, step_s: float, per_token_s: float = 0.0, busy_until: float = -1.0) -> Replica:
    """What predict_latency reads of a replica, at time 0."""
    return cast(
        Replica,
        SimpleNamespace(
            scheduler=sched,
            kv=sched.kv,
            loop=SimpleNamespace(now=0.0),
            busy=busy_until > 0,
            step_end_s=busy_until,
            perf=ConstantPerfModel(step_s, per_token_s),
            cpu_overhead_s=0.0,
            async_scheduling=False,
        ),
    )


def test_predict_latency_reads_the_scheduler() -> None:
    # 10 usable blocks of 16 tokens, 2,048 tokens a step. A queued 100-token prompt (5
    # outputs) and the new 50-token one (3 outputs) share the first step; then 2 decode steps.
    sched = make_scheduler(max_num_batched_tokens=2048)
    sched.add_request(req(0, 100, 5))
    rep = replica(sched, 0.02)
    assert predict_latency(rep, req(1, 50, 3), 0) == pytest.approx(0.06)
    # The rest of a step in flight (until 0.5 s) comes first.
    assert predict_latency(replica(sched, 0.02, busy_until=0.5), req(1, 50, 3), 0) == pytest.approx(0.56)


def test_predict_latency_times_steps_by_their_tokens() -> None:
    # Request 0 (20-token prompt, 4 outputs) has run one step: it is a decode with 3 left.
    # A step takes 1 s + 0.1 s a token: the new 10-token prompt's step holds the decode (2.1
    # s), then 2 steps of 2 decodes (1.2 s each): 4.5 s.
    sched = make_scheduler(max_num_batched_tokens=2048)
    sched.add_request(req(0, 20, 4))
    out = sched.schedule()
    sched.update_from_output(out, 1.0)
    assert [r.num_output_tokens for r in sched.running] == [1]
    rep = replica(sched, 1.0, 0.1)
    assert predict_latency(rep, req(1, 10, 3), 0) == pytest.approx(2.1 + 2 * 1.2)


def test_infaas_most_free_blocks_per_running_request() -> None:
    r = ROUTERS["infaas"]
    loads = [
        ReplicaLoad(num_running=4, free_kv_blocks=100),  # 25 a request
        ReplicaLoad(num_running=2, free_kv_blocks=60),  # 30
        ReplicaLoad(num_running=0, free_kv_blocks=20),  # 20 (no running: divided by 1)
    ]
    assert r(req(0, 10), loads, RouterState(None)) == 1
    # Ties go to the fewest outstanding.
    tie = [ReplicaLoad(3, 2, free_kv_blocks=60), ReplicaLoad(1, 1, free_kv_blocks=30)]
    assert r(req(0, 10), tie, RouterState(None)) == 1


@pytest.mark.parametrize("router", ["predicted_latency", "infaas"])
def test_cut_runs_change_no_routing(monkeypatch: pytest.MonkeyPatch, router: str) -> None:
    # Both read the replicas' running requests (the decode pool's derived counts) and KV
    # blocks: the runs each arrival cuts must leave the same state to read as no runs.
    from test_cut_runs import _cfg, _pool, _run

    pools, cfg = [_pool("c", 4)], _cfg([("c", 4, "colocated")], router)
    before = _run(monkeypatch, False, pools, cfg)
    after = _run(monkeypatch, True, pools, cfg)
    for col in ("replica", "ttft_s", "e2e_s"):
        assert np.array_equal(getattr(after.records, col), getattr(before.records, col), equal_nan=True), col
    assert len(set(before.records.replica.tolist())) == 4
