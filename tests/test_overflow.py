"""The mixed pool (``cluster.disaggregation.overflow``, Splitwise's ``MixedPoolScheduler``):
exact placements and timings on tiny split clusters where a threshold is crossed and where it
is not, the config's checks, and a property test that no request is lost or duplicated.

Every replica steps in 0.01 s (``ConstantPerfModel``) with a 256-token budget, and KV crosses
the link at 1e6 B/s (1000 B a token: 100 tokens in 0.1 s), as in tests/test_disagg.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from test_disagg import BW_GBPS, KV_BYTES, pool
from typer.testing import CliRunner

from servesim.cli import app
from servesim.cluster.run import run_cluster
from servesim.config import (
    ClusterConfig,
    DisaggConfig,
    KvLinkConfig,
    OverflowConfig,
    PoolConfig,
)
from servesim.config.operations import OperationsConfig
from servesim.metrics.records import RequestStatus


def cfg(
    n_p: int = 1,
    n_d: int = 1,
    queue: int = 8192,
    capacity: int | None = None,
    frac: float = 0.0,
    below: int = 0,
    **kw: object,
) -> ClusterConfig:
    kw.setdefault("link", KvLinkConfig(bandwidth_gb_per_s=BW_GBPS, latency_us=0.0))
    kw.setdefault("router", "least_work")
    over = OverflowConfig(enabled=True, prefill_queue_tokens=queue, decode_capacity_tokens=capacity)
    return ClusterConfig.model_validate(
        {
            "pools": [
                PoolConfig(name="p", role="prefill", num_replicas=n_p),
                PoolConfig(name="d", role="decode", num_replicas=n_d),
            ],
            "disaggregation": DisaggConfig(
                decode_prefill_fraction=frac, colocate_below_tokens=below, overflow=over
            ),
            **kw,
        }
    )


def counts(
    lent: int = 0, borrowed: int = 0, returned: int = 0, whole: int = 0, rerouted: int = 0
) -> dict[str, int]:
    return {
        "num_lent": lent,
        "num_borrowed": borrowed,
        "num_returned": returned,
        "num_whole": whole,
        "num_rerouted": rerouted,
        "num_mixed_at_end": lent + borrowed - returned,
    }


def test_below_the_prefill_threshold_nothing_is_lent() -> None:
    # Two prompts of 100 at t=0: when the second arrives the prefill replica has the first
    # waiting, 100 pending tokens; 100 + 100 = 200 <= 250, so it queues there too. One step
    # computes both (0.01), each KV crosses in 0.1 s (one at a time would be 0.1; two share
    # the receiver's link: 0.2 s), then 2 decode steps.
    wl = make_workload([0.0, 0.0], 100, 3)
    run = run_cluster(wl, [pool("p", "prefill"), pool("d", "decode")], cfg(queue=250), check_invariants=True)
    r = run.records
    assert r.replica.tolist() == [1, 1]
    np.testing.assert_allclose(r.first_token_s, [0.01, 0.01])
    np.testing.assert_allclose(r.finished_s, [0.01 + 0.2 + 0.02] * 2)
    assert run.overflow == counts()
    assert run.num_handoffs == 2


def test_past_the_prefill_threshold_a_decode_replica_runs_the_prompt_whole() -> None:
    # Threshold 150: 100 pending + 100 > 150, and the prefill pool has no other replica, the
    # mixed pool none: the decode replica (the least pending, and the decode router's pick)
    # is lent and runs the second request whole: prompt step 0-0.01, 2 decode steps, 0.03. The
    # first request's prompt done at 0.01, its decode replica is the mixed one (its own pool is
    # empty now): KV in 0.1 s, decodes at 0.11-0.13. The lent replica returns when both are done.
    wl = make_workload([0.0, 0.0], 100, 3)
    run = run_cluster(wl, [pool("p", "prefill"), pool("d", "decode")], cfg(queue=150), check_invariants=True)
    r = run.records
    assert r.replica.tolist() == [1, 1]
    np.testing.assert_allclose(r.first_token_s, [0.01, 0.01])
    np.testing.assert_allclose(r.finished_s, [0.13, 0.03])
    assert run.overflow == counts(lent=1, returned=1, whole=1)
    pre, dec = run.totals
    assert (pre.num_routed, dec.num_routed, dec.num_kv_transfers) == (1, 2, 1)
    assert dec.kv_transfer_bytes == 100 * KV_BYTES


def test_an_overloaded_pick_passes_the_prompt_to_a_less_loaded_prefill_replica() -> None:
    # Round robin sends r0 (100 tokens) to replica 0 and r1 (10) to replica 1; its next pick
    # for r2, replica 0, has 100 waiting (100 + 100 > 150), replica 1 only 10 (10 + 100 <= 150):
    # r2 joins r1's step there, and nothing is lent. One output token each: no hand-off.
    wl = make_workload([0.0, 0.0, 0.0], [100, 10, 100], 1)
    run = run_cluster(
        wl, [pool("p", "prefill", 2), pool("d", "decode")], cfg(2, 1, queue=150, router="round_robin")
    )
    assert run.records.replica.tolist() == [0, 1, 1]
    np.testing.assert_allclose(run.records.finished_s, [0.01] * 3)
    assert run.overflow == counts(rerouted=1)


def test_the_prompt_in_flight_counts_as_pending() -> None:
    # r0's 200-token prompt runs 0-0.01 (one output token: no hand-off). At 0.005 r1 queues
    # behind it; r2 then finds r1's 100 waiting, r0's 200 in flight and one running request:
    # 301 + 100 > 250 (without the step in flight, 101 + 100 would pass), so the decode
    # replica is lent and runs r2 whole (0.005-0.025). r1's prompt runs 0.01-0.02 and
    # decodes on the mixed replica after 0.1 s of KV transfer: 0.13.
    wl = make_workload([0.0, 0.005, 0.005], [200, 100, 100], [1, 2, 2])
    run = run_cluster(wl, [pool("p", "prefill"), pool("d", "decode")], cfg(queue=250), check_invariants=True)
    r = run.records
    assert r.replica.tolist() == [0, 1, 1]
    np.testing.assert_allclose(r.first_token_s, [0.01, 0.02, 0.015])
    np.testing.assert_allclose(r.finished_s, [0.01, 0.13, 0.025])
    assert run.overflow == counts(lent=1, returned=1, whole=1)


def test_a_lent_prompt_moves_on_when_its_replica_is_not_the_decode_pick() -> None:
    # Decode router round robin over replicas 1 and 2. r0 (t=0) decodes on 1 until 0.40; r1
    # (t=0.05) on 2, done at 0.18. At t=0.2 r2 takes the idle prefill replica and r3 finds it
    # with 100 pending (100 + 100 > 150): the least pending decode replica, 2, is lent, but
    # the decode router's pick is 1 (its cursor at 2), so r3's prompt runs on 2 (0.2-0.21) and
    # its KV goes on. At 0.21 replica 2 is mixed: r2 and r3 both decode on 1, their KV sharing
    # its link (0.2 s), then 2 steps after r0 has left: 0.43. Replica 2 returns at 0.21.
    wl = make_workload([0.0, 0.05, 0.2, 0.2], 100, [30, 3, 3, 3])
    run = run_cluster(
        wl,
        [pool("p", "prefill"), pool("d", "decode", 2)],
        cfg(1, 2, queue=150, decode_router="round_robin"),
        check_invariants=True,
    )
    r = run.records
    assert r.replica.tolist() == [1, 2, 1, 1]
    np.testing.assert_allclose(r.first_token_s, [0.01, 0.06, 0.21, 0.21])
    np.testing.assert_allclose(r.finished_s, [0.40, 0.18, 0.43, 0.43])
    assert run.overflow == counts(lent=1, returned=1)
    assert [t.num_kv_transfers for t in run.totals] == [0, 3, 1]
    assert [t.num_routed for t in run.totals] == [3, 3, 2]


def test_a_full_decode_pool_borrows_a_prefill_replica() -> None:
    # Capacity 150 tokens: the first request reserves 100 + 20 = 120 on the decode replica,
    # the second's 120 more would reach 240 >= 150, so the prefill replica with the least
    # reserved (replica 0, the first's prompt gone) is borrowed: the second's KV goes from
    # replica 1 to replica 0. Both KV in 0.1 s on their own links, 19 decode steps: 0.30.
    wl = make_workload([0.0, 0.0], 100, 20)
    run = run_cluster(
        wl,
        [pool("p", "prefill", 2), pool("d", "decode")],
        cfg(2, 1, capacity=150),
        check_invariants=True,
    )
    r = run.records
    assert r.replica.tolist() == [2, 0]
    np.testing.assert_allclose(r.finished_s, [0.30, 0.30])
    assert run.overflow == counts(borrowed=1, returned=1)
    assert [t.num_kv_transfers for t in run.totals] == [1, 0, 1]


def test_below_the_decode_capacity_nothing_is_borrowed() -> None:
    # Capacity 241: 120 + 120 = 240 < 241, so both decode on the decode replica, their KV
    # sharing its link (0.2 s): 0.21 + 19 steps.
    wl = make_workload([0.0, 0.0], 100, 20)
    run = run_cluster(wl, [pool("p", "prefill", 2), pool("d", "decode")], cfg(2, 1, capacity=241))
    assert run.records.replica.tolist() == [2, 2]
    np.testing.assert_allclose(run.records.finished_s, [0.40, 0.40])
    assert run.overflow == counts()


def test_a_request_borrowed_by_its_own_prefill_replica_stays_there() -> None:
    # One prefill replica computes both prompts in one step (0-0.01). The first reserves 120
    # on the decode replica; the second finds it full (240 >= 150) and the only prefill
    # replica to borrow is its own: it decodes there with no transfer, 19 steps: 0.20. The
    # first's KV crosses in 0.1 s: 0.30.
    wl = make_workload([0.0, 0.0], 100, 20)
    run = run_cluster(
        wl, [pool("p", "prefill"), pool("d", "decode")], cfg(capacity=150), check_invariants=True
    )
    r = run.records
    assert r.replica.tolist() == [1, 0]
    np.testing.assert_allclose(r.finished_s, [0.30, 0.20])
    assert run.overflow == counts(borrowed=1, returned=1, whole=1)
    assert [t.num_kv_transfers for t in run.totals] == [0, 1]
    assert run.num_handoffs == 2


# ----------------------------------------------------------------- the config


def test_overflow_needs_split_pools() -> None:
    with pytest.raises(ValidationError, match="overflow.enabled needs a prefill and a decode pool"):
        ClusterConfig(
            pools=[PoolConfig(name="a")],
            disaggregation=DisaggConfig(overflow=OverflowConfig(enabled=True)),
        )


def test_overflow_refuses_operations_and_migration() -> None:
    with pytest.raises(ValidationError, match="does not combine with operations"):
        cfg(operations=OperationsConfig())
    with pytest.raises(ValidationError, match="does not combine with migration"):
        cfg(migration={"enabled": True})
    with pytest.raises(ValidationError, match="prefill_queue_tokens"):
        OverflowConfig(prefill_queue_tokens=0)


def test_overflow_on_colocated_pools_is_a_one_line_cli_error(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("cluster: {pools: [{name: a}], disaggregation: {overflow: {enabled: true}}}\n")
    res = CliRunner().invoke(app, ["simulate", str(f), "--output", str(tmp_path / "out")])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "s.yaml" in lines[0]
    assert "overflow.enabled needs a prefill and a decode pool" in lines[0]
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


# ----------------------------------------------------------------- no request lost


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_p=st.integers(1, 3),
    n_d=st.integers(1, 3),
    router=st.sampled_from(["round_robin", "least_outstanding", "least_kv", "least_work"]),
    decode_router=st.sampled_from(["round_robin", "least_kv", "least_work"]),
    queue=st.integers(1, 400),
    capacity=st.one_of(st.none(), st.integers(20, 800)),
    frac=st.sampled_from([0.0, 0.0, 0.3]),
    below=st.sampled_from([0, 0, 60]),
    blocks=st.integers(12, 40),
    reqs=st.lists(
        st.tuples(st.floats(0, 0.5), st.integers(1, 150), st.integers(1, 30)), min_size=1, max_size=25
    ),
)
def test_no_request_lost_or_duplicated(
    n_p: int,
    n_d: int,
    router: str,
    decode_router: str,
    queue: int,
    capacity: int | None,
    frac: float,
    below: int,
    blocks: int,
    reqs: list[tuple[float, int, int]],
) -> None:
    reqs = sorted(reqs)
    wl = make_workload([a for a, _, _ in reqs], [p for _, p, _ in reqs], [o for _, _, o in reqs])
    c = cfg(
        n_p,
        n_d,
        queue,
        capacity,
        frac,
        below,
        router=router,
        decode_router=decode_router,
        link=KvLinkConfig(bandwidth_gb_per_s=0.01, latency_us=50),
    )
    finishes: list[int] = []
    pools = [pool("p", "prefill", n_p, blocks=blocks), pool("d", "decode", n_d, blocks=blocks)]
    import servesim.cluster.cluster as cl

    orig = cl.Cluster._done

    def spy(self: cl.Cluster, req: object) -> None:
        finishes.append(req.idx)  # type: ignore[attr-defined]
        orig(self, req)  # type: ignore[arg-type]

    import servesim.cluster.overflow as ov

    made: list[ov.MixedPool] = []
    init = ov.MixedPool.__init__

    def keep(self: ov.MixedPool, cluster: ov.OverflowHost, cfg: OverflowConfig) -> None:
        init(self, cluster, cfg)
        made.append(self)

    cl.Cluster._done = spy  # type: ignore[method-assign]
    ov.MixedPool.__init__ = keep  # type: ignore[method-assign]
    try:
        run = run_cluster(wl, pools, c, check_invariants=True)
    finally:
        cl.Cluster._done = orig  # type: ignore[method-assign]
        ov.MixedPool.__init__ = init  # type: ignore[method-assign]
    rec = run.records
    usable = (blocks - 1) * 16
    servable = [p + o <= usable and p < 1024 for _, p, o in reqs]
    assert sorted(finishes) == [i for i, ok in enumerate(servable) if ok]  # each exactly once
    assert (rec.status == np.where(servable, RequestStatus.FINISHED, RequestStatus.REJECTED)).all()
    ok = np.asarray(servable)
    assert (rec.num_output_tokens[ok] == np.asarray([o for _, _, o in reqs])[ok]).all()
    # Every replica lent or borrowed is back in its pool once nothing is left in flight.
    o = run.overflow
    assert o["num_mixed_at_end"] == 0 and o["num_returned"] == o["num_lent"] + o["num_borrowed"]
    # and every reservation is released.
    (mixed,) = made
    assert mixed.held == {} and mixed.reserved == [0] * (n_p + n_d)
    # A hand-off moves KV unless the request decodes where its prompt ran.
    assert sum(t.num_kv_transfers for t in run.totals) <= run.num_handoffs


def test_splitwises_artifact_semantics_run_the_mixed_pool() -> None:
    """The artifact runs ``MixedPoolScheduler`` for its split designs (mixed_pool.yml: 8,192
    pending prompt tokens; full at (8 x 80 GiB - 135e9 B) / (2 x 8,192 x 80 x 2 B) = 210,645.6
    tokens, rounded up), ``TokenJSQScheduler`` for its baselines; servesim's reading runs none."""
    from servesim.papers import splitwise

    perfs = splitwise.perf_models(token_lookup=True)
    over = splitwise.cluster("Splitwise-AA", perfs, splitwise.ARTIFACT)[0].disaggregation.overflow
    assert (over.enabled, over.prefill_queue_tokens, over.decode_capacity_tokens) == (True, 8192, 210_646)
    assert not splitwise.cluster("Baseline-H100", perfs, splitwise.ARTIFACT)[
        0
    ].disaggregation.overflow.enabled
    assert not splitwise.cluster("Splitwise-HA", perfs)[0].disaggregation.overflow.enabled


def test_cut_runs_give_the_reference_loops_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lent decode replicas step on loud events while they may hand a prompt on: runs of decode
    steps cut at arrivals (``cluster.CUT_RUNS``) give what the loop that ends every run at
    every arrival gives, with many lends, borrows and returns."""
    import servesim.cluster.cluster as cl

    rng = np.random.default_rng(3)
    n = 300
    wl = make_workload(
        np.sort(rng.uniform(0, 3.0, n)).tolist(),
        rng.integers(20, 300, n).tolist(),
        rng.integers(1, 40, n).tolist(),
    )
    pools = [pool("p", "prefill", 2, blocks=60, seqs=16), pool("d", "decode", 3, blocks=60, seqs=16)]
    c = cfg(2, 3, queue=300, capacity=900, decode_router="least_kv")
    runs = []
    for cut in (True, False):
        monkeypatch.setattr(cl, "CUT_RUNS", cut)
        runs.append(run_cluster(wl, pools, c))
    a, b = runs
    assert a.overflow == b.overflow and a.overflow["num_lent"] > 0 and a.overflow["num_borrowed"] > 0
    np.testing.assert_array_equal(a.records.replica, b.records.replica)
    np.testing.assert_allclose(a.records.finished_s, b.records.finished_s)
    np.testing.assert_allclose(a.records.first_token_s, b.records.first_token_s)
