"""Exact-state tests of the policies on a tiny KV cache (11 blocks of 16 tokens, 10 usable)."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from conftest import make_workload, req
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.config import EngineConfig, resolve_engine, scenario_from_dict
from servesim.engine.admission import MemoryAwareAdmission
from servesim.engine.buddy import BuddyAllocator
from servesim.engine.build import make_scheduler
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.lazy import LazyScheduler
from servesim.engine.policies import SCHEDULERS, OrcaScheduler, SarathiScheduler, V0Scheduler
from servesim.engine.policy_base import PolicyOptions, PolicyScheduler
from servesim.engine.request import ReqStatus
from servesim.engine.scheduler import Scheduler, SchedulerConfig
from servesim.engine.static import StaticScheduler
from servesim.errors import ConfigError
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine


def sched(
    cls=PolicyScheduler, blocks: int = 11, max_model_len: int = 4096, opts: PolicyOptions | None = None, **cfg
):
    kv = KVCacheManager(blocks, 16, False, max_model_len)
    return cls(SchedulerConfig(max_model_len=max_model_len, **cfg), kv, opts or PolicyOptions())


def step(s, now: float = 0.0):
    out = s.schedule()
    produced, finished = s.update_from_output(out, now)
    return out, produced, finished


def ids(reqs) -> list[int]:
    return [r.idx for r in reqs]


def blocks_of(s, r) -> list[int]:
    return [b.block_id for b in s.kv.req_blocks[r.idx]]


# --------------------------------------------------------------------------- registry and config


def test_schedulers_match_the_policy_literal():
    names = typing.get_args(EngineConfig.model_fields["policy"].annotation)
    assert set(SCHEDULERS) == set(names)


def test_policy_defaults_resolve_in_one_place():
    e = resolve_engine(EngineConfig(policy="sarathi"), 80 * 2**30, "A100", 4096)
    assert (
        e.max_num_seqs,
        e.max_num_batched_tokens,
        e.watermark,
        e.enable_chunked_prefill,
        e.enable_prefix_caching,
    ) == (128, 512, 0.01, True, False)
    e = resolve_engine(EngineConfig(policy="vllm_v0"), 80 * 2**30, "A100", 4096)
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.watermark, e.enable_chunked_prefill) == (
        256,
        4096,
        0.01,
        False,
    )
    e = resolve_engine(
        EngineConfig(policy="vllm_v0", max_num_seqs=8, enable_prefix_caching=True), max_model_len=1024
    )
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.enable_prefix_caching) == (8, 2048, True)
    e = resolve_engine(
        EngineConfig(policy="orca", max_num_seqs=4, enable_prefix_caching=True), max_model_len=1024
    )
    assert (e.max_num_batched_tokens, e.enable_prefix_caching) == (16384, False)
    assert resolve_engine(EngineConfig(), 80 * 2**30, "H100", 4096).watermark == 0.0
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        resolve_engine(EngineConfig(policy="vllm_v0", max_num_batched_tokens=512), max_model_len=4096)


def test_only_plain_v1_uses_the_lazy_engine():
    wl = make_workload([0.0], 8, 2)
    kv = KVCacheManager(11, 16, False, 4096)
    cfg = SchedulerConfig()
    counting = CountingKVCache(11, 16, False, 4096)
    assert type(make_scheduler(EngineConfig(), cfg, counting, wl)) is LazyScheduler
    assert type(make_scheduler(EngineConfig(), cfg, kv, wl, reference=True)) is Scheduler
    for kw, cls in (
        (dict(scheduling_policy="priority"), PolicyScheduler),
        (dict(memory_aware_admission=True), PolicyScheduler),
        (dict(policy="vllm_v0"), V0Scheduler),
        (dict(policy="static"), StaticScheduler),
    ):
        assert (
            type(make_scheduler(resolve_engine(EngineConfig(**kw), max_model_len=4096), cfg, kv, wl)) is cls
        )
    with pytest.raises(ValueError, match="kv_bytes_per_block"):
        make_scheduler(EngineConfig(preemption_mode="swap"), cfg, kv, wl)


def test_policy_scheduler_without_options_is_the_reference():
    rng = np.random.default_rng(0)
    n = 150
    wl = make_workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(1, 600, n), rng.integers(1, 200, n))
    perf = ConstantPerfModel(0.01, 2e-5)
    engine = EngineConfig(max_num_seqs=32, max_num_batched_tokens=512)
    ref = run_engine(wl, engine, perf, 300, 2048, reference=True)
    pol = run_engine(
        wl, engine.model_copy(update={"watermark": 1e-9}), perf, 300, 2048
    )  # forces PolicyScheduler
    assert ref.records.num_preemptions.sum() > 0
    for col in ("first_token_s", "finished_s", "num_preemptions"):
        np.testing.assert_array_equal(getattr(pol.records, col), getattr(ref.records, col))


@pytest.mark.parametrize("policy", ["vllm_v1", "vllm_v0", "sarathi", "orca", "static"])
def test_every_policy_drains_a_workload_with_invariants(policy):
    rng = np.random.default_rng(1)
    n = 60
    wl = make_workload(np.cumsum(rng.exponential(0.02, n)), rng.integers(1, 300, n), rng.integers(1, 100, n))
    engine = EngineConfig(
        policy=policy, max_num_seqs=16, scheduling_policy="priority" if policy == "vllm_v1" else "fcfs"
    )
    run = run_engine(wl, engine, ConstantPerfModel(0.01, 2e-5), 120, 512, check_invariants=True)
    assert (run.records.status == 0).all()
    np.testing.assert_array_equal(run.records.num_output_tokens, wl.num_output_tokens)


# --------------------------------------------------------------------------- vLLM V0


def test_v0_prefill_only_step_stalls_decodes():
    s = sched(V0Scheduler, max_num_batched_tokens=256)
    a, b = req(0, 20, 5), req(1, 30, 5)
    s.add_request(a)
    out, _, _ = step(s)
    assert ids(out.reqs) == [0] and out.num_tokens == [20]
    out, _, _ = step(s)
    assert ids(out.reqs) == [0] and out.num_tokens == [1]  # a decodes
    s.add_request(b)
    out, produced, _ = step(s)
    assert ids(out.reqs) == [1] and out.num_tokens == [30] and produced == [b]  # prefill only: a waits
    assert out.stats.num_decode_reqs == 0
    out, _, _ = step(s)
    assert ids(out.reqs) == [0, 1] and out.num_tokens == [1, 1]


def test_v0_watermark_keeps_blocks_free_at_admission():
    s = sched(V0Scheduler, opts=PolicyOptions(watermark=0.1), max_num_batched_tokens=256)  # 1 block of 11
    a, b = req(0, 100, 5), req(1, 64, 5)  # a: 7 blocks; b: 4 blocks would leave -1 < 1 free
    s.add_request(a)
    s.add_request(b)
    out, _, _ = step(s)
    assert ids(out.reqs) == [0] and list(s.waiting) == [b] and s.kv.num_free_blocks == 3
    s2 = sched(V0Scheduler, opts=PolicyOptions(watermark=0.1), max_num_batched_tokens=256)
    c, d = req(0, 100, 5), req(1, 32, 5)  # d: 2 blocks leaves 1 free = the watermark
    s2.add_request(c)
    s2.add_request(d)
    out, _, _ = step(s2)
    assert ids(out.reqs) == [0, 1] and s2.kv.num_free_blocks == 1


# --------------------------------------------------------------------------- Sarathi-Serve


def test_sarathi_decodes_first_then_prefill_chunks_then_new_requests():
    s = sched(SarathiScheduler, max_num_batched_tokens=32)
    a, b, c = req(0, 16, 5), req(1, 40, 5), req(2, 20, 5)
    s.add_request(a)
    s.add_request(b)
    out, _, _ = step(s)
    assert ids(out.reqs) == [0, 1] and out.num_tokens == [16, 16]
    assert blocks_of(s, b) == [2, 3, 4]  # b's whole prompt (40 tokens) allocated at admission
    s.add_request(c)
    out, _, _ = step(s)
    # a's decode first, then b's next chunk (budget 31 left -> 24 needed), then c gets 7.
    assert ids(out.reqs) == [0, 1, 2] and out.num_tokens == [1, 24, 7]
    assert blocks_of(s, a) == [1, 5] and blocks_of(s, c) == [6, 7]  # a crossed into block 5
    out, produced, _ = step(s)
    assert ids(out.reqs) == [0, 1, 2] and out.num_tokens == [1, 1, 13] and ids(produced) == [0, 1, 2]


# --------------------------------------------------------------------------- Orca and static


def test_orca_reserves_the_maximum_length_and_never_preempts():
    s = sched(OrcaScheduler, max_model_len=64, max_num_batched_tokens=4096)
    rs = [req(i, 20, 40) for i in range(3)]
    for r in rs:
        s.add_request(r)
    out, _, _ = step(s)
    assert ids(out.reqs) == [0, 1] and out.num_tokens == [20, 20]  # 4 blocks each: the third waits
    assert blocks_of(s, rs[0]) == [1, 2, 3, 4] and s.kv.num_free_blocks == 2
    k = 1
    while s.has_work():
        out, _, _ = step(s)
        assert not out.preempted
        k += 1
    assert all(r.status == ReqStatus.FINISHED and r.num_output_tokens == 40 for r in rs)
    assert k == 40 + 40  # the third starts only when the first two are done


def test_orca_oracle_and_pow2_reservations():
    for kind, want in (("oracle", [1, 2]), ("pow2", [1, 2, 3, 4])):
        s = sched(
            OrcaScheduler,
            opts=PolicyOptions(orca_reservation=kind),
            max_model_len=4096,
            max_num_batched_tokens=4096,
        )
        r = req(0, 20, 9)  # oracle: 29 tokens = 2 blocks; pow2: 20 + 16 = 36 = 3 blocks -> a chunk of 4
        s.add_request(r)
        step(s)
        assert blocks_of(s, r) == want


def test_buddy_allocator_carves_rounds_and_merges_as_the_vllm_papers_orca():
    """The vLLM paper's Orca artifact (``BuddyAllocator``): chunks carved left to right, a
    reservation rounded up to a power of two, buddies merged when both are free."""
    b = BuddyAllocator(981, 128)  # OPT-13B's 15.7K KV slots (Table 1) in blocks of 16
    assert {s: v for s, v in b.free_starts.items() if v} == {
        128: [0, 128, 256, 384, 512, 640, 768],
        64: [896],
        16: [960],
        4: [976],
        1: [980],
    }
    assert [b.allocate(128) for _ in range(8)] == [768, 640, 512, 384, 256, 128, 0, None]
    assert b.num_free_blocks == 85 and not b.can_allocate(65) and b.can_allocate(64)
    b.free(384)
    assert b.allocate(20) == 896  # 32 blocks: the smallest larger chunk (64 at 896) is split
    assert b.free_starts[32] == [928] and b.chunk_size[896] == 32

    # External fragmentation: 4 blocks free, but in two chunks of 2 that are not buddies.
    b = BuddyAllocator(8, 8)
    assert [b.allocate(2) for _ in range(4)] == [0, 2, 4, 6]
    b.free(0)
    b.free(4)
    assert b.num_free_blocks == 4 and b.allocate(3) is None and b.allocate(4) is None
    b.free(2)  # 0 and 2 merge into a chunk of 4
    assert b.free_starts[4] == [0] and b.allocate(4) == 0
    with pytest.raises(ValueError, match="power of two"):
        BuddyAllocator(10, 6)


@settings(max_examples=60, deadline=None)
@given(
    num_blocks=st.integers(1, 300),
    ops=st.lists(st.tuples(st.booleans(), st.integers(1, 64), st.integers(0, 1000)), max_size=60),
)
def test_buddy_allocator_keeps_its_chunks_disjoint_aligned_and_counted(num_blocks, ops):
    """Whatever the order of reservations and frees: held chunks never overlap and are aligned
    to their size, the free count is the free lists', and freeing everything restores the
    carve."""
    b = BuddyAllocator(num_blocks, 64)
    carve = {s: sorted(v) for s, v in b.free_starts.items() if v}
    held: dict[int, int] = {}
    for is_alloc, n, k in ops:
        if is_alloc:
            start = b.allocate(n)
            if start is None:  # no free chunk of that size or larger
                assert all(not v for size, v in b.free_starts.items() if size >= BuddyAllocator.chunk_for(n))
            else:
                size = BuddyAllocator.chunk_for(n)
                assert start % size == 0 and start + size <= num_blocks
                assert all(start + size <= s or s + z <= start for s, z in held.items())
                held[start] = size
        elif held:
            start = sorted(held)[k % len(held)]
            b.free(start)
            del held[start]
        free = sum(size * len(v) for size, v in b.free_starts.items())
        assert b.num_free_blocks == free == num_blocks - sum(held.values())
    for start in list(held):
        b.free(start)
    assert {s: sorted(v) for s, v in b.free_starts.items() if v} == carve


def test_orca_max_batches_seven_requests_on_opt_13b():
    """vLLM paper, Fig. 13a: Orca (Max) batches 7.00 requests on OPT-13B (15.7K slots, Table
    1): seven 2,048-token chunks of 128 blocks fit the 981 blocks, the eighth request waits."""
    s = sched(OrcaScheduler, blocks=982, max_model_len=2048, max_num_batched_tokens=2560)
    for i in range(9):
        s.add_request(req(i, 10, 100))
    out, _, _ = step(s)
    assert ids(out.reqs) == list(range(7)) and s.buddy.num_free_blocks == 85
    assert all(len(s.kv.req_blocks[i]) == 128 for i in range(7))


def test_static_batch_runs_to_its_longest_request():
    s = sched(StaticScheduler, max_model_len=64, max_num_seqs=2, max_num_batched_tokens=4096)
    a, b, c = req(0, 10, 2), req(1, 10, 4), req(2, 10, 1)
    for r in (a, b, c):
        s.add_request(r)
    history = []
    for t in range(1, 8):
        out, produced, finished = step(s, float(t))
        history.append((ids(out.reqs), out.stats.num_decode_reqs, ids(finished)))
        if not s.has_work():
            break
    assert history == [
        ([0, 1], 0, []),  # the batch's prompts
        ([0, 1], 2, []),  # a's 2nd (last) token; a keeps its slot
        ([1], 2, []),  # b decodes; a is a padded decode
        ([1], 2, [0, 1]),  # b's 4th token ends the batch: both return now
        ([2], 0, [2]),  # the next batch
    ]
    assert a.finished_s == b.finished_s == 4.0 and c.finished_s == 5.0


# --------------------------------------------------------------------------- priority


def test_priority_orders_waiting_by_priority_then_arrival():
    s = sched(opts=PolicyOptions(scheduling_policy="priority"), max_num_batched_tokens=256)
    rs = [
        req(0, 8, 2, priority=1),
        req(1, 8, 2, priority=0),
        req(2, 8, 2, priority=2),
        req(3, 8, 2, priority=0),
    ]
    for r in rs:
        s.add_request(r)
    assert ids(s.waiting) == [1, 3, 0, 2]
    out, _, _ = step(s)
    assert ids(out.reqs) == [1, 3, 0, 2]


def test_priority_preempts_the_least_urgent_and_returns_its_tokens():
    s = sched(opts=PolicyOptions(scheduling_policy="priority"), max_num_batched_tokens=256)
    a, b = req(0, 64, 30, priority=2), req(1, 80, 30, priority=0)
    s.add_request(a)
    step(s)  # a: blocks 1-4
    s.add_request(b)
    out, _, _ = step(s)  # a's 65th token takes block 5, b's prompt blocks 6-10
    assert ids(s.running) == [0, 1] and s.kv.num_free_blocks == 0
    out, _, _ = step(s)
    # b's 81st token needs a block: the victim is a (largest priority), not the newest (b);
    # a was already scheduled in this step, so its token goes back to the budget.
    assert out.preempted == [a] and ids(out.reqs) == [1] and out.num_tokens == [1]
    assert out.total_tokens == 1 and a.num_computed_tokens == 0 and ids(s.waiting) == [0]
    assert blocks_of(s, b) == [6, 7, 8, 9, 10, 5]


def test_a_step_emptied_by_a_self_preemption_is_scheduled_again():
    """Under the priority policy the oldest running request can be its own victim (it has
    the largest priority value): vLLM breaks the running loop there and skips the waiting
    one, so that step schedules nothing, and its engine loop schedules again at once. The
    replica must do the same rather than go idle with requests running (it stalled here)."""
    wl = make_workload(
        [0.145, 0.1937, 0.2067, 0.2558, 0.3575], [279, 118, 328, 148, 215], [59, 39, 17, 53, 53]
    )
    wl.priority = np.array([2, 1, 2, 0, 2], dtype=np.int64)
    eng = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=256, block_size=16, scheduling_policy="priority"
    )
    run = run_engine(wl, eng, ConstantPerfModel(0.01, 1e-5), 40, 1024)
    assert (run.records.status == 0).all()  # every request finished
    assert run.totals.num_preemptions >= 1  # the self-preemption happened


# --------------------------------------------------------------------------- swap


def test_swap_preemption_keeps_computed_tokens_and_charges_the_copies():
    opts = PolicyOptions(preemption_mode="swap", num_host_blocks=100, kv_bytes_per_block=1000.0)
    s = sched(opts=opts, max_num_batched_tokens=256)
    a, b = req(0, 64, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    for _ in range(17):
        step(s)
    out, _, _ = step(s)  # as in test_scheduler: b is the victim at step 18
    assert out.preempted == [b] and b.status == ReqStatus.PREEMPTED
    assert b.num_computed_tokens == 80 and b.num_output_tokens == 17  # 80 = 64 + 16 computed
    assert s.swap.held == {1: 5} and out.stats.swap_bytes == 5000.0
    while a.status != ReqStatus.FINISHED:
        out, _, _ = step(s)
    out, produced, _ = step(s)  # b swapped back in: a decode, no recompute
    assert ids(out.reqs) == [1] and out.num_tokens == [1] and produced == [b]
    assert out.stats.swap_bytes == 5000.0 and out.stats.num_prefill_tokens == 0
    assert s.swap.held == {} and s.swap.num_used == 0 and len(blocks_of(s, b)) == 6


def test_swap_falls_back_to_recompute_when_host_space_is_full():
    opts = PolicyOptions(preemption_mode="swap", num_host_blocks=4, kv_bytes_per_block=1000.0)
    s = sched(opts=opts, max_num_batched_tokens=256)
    a, b = req(0, 64, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    for _ in range(18):
        out, _, _ = step(s)
    assert out.preempted == [b] and b.num_computed_tokens == 0 and out.stats.swap_bytes == 0


def test_swap_space_is_in_gib_and_the_old_name_is_refused():
    """``swap_space_gib`` is GiB (2^30 bytes), as vLLM's --swap-space: 1 GiB of 1 MiB blocks
    is 1024 host blocks (1e9 bytes would be 953). The old name is refused, naming the new one."""
    wl = make_workload([0.0], 8, 2)
    kv = KVCacheManager(11, 16, False, 4096)
    s = make_scheduler(
        EngineConfig(preemption_mode="swap", swap_space_gib=1.0),
        SchedulerConfig(),
        kv,
        wl,
        kv_bytes_per_block=float(1 << 20),
    )
    assert isinstance(s, PolicyScheduler) and s.swap is not None and s.swap.num_host_blocks == 1024
    with pytest.raises(ConfigError, match=r"engine.swap_space_gb: was renamed to swap_space_gib \(GiB"):
        scenario_from_dict({"engine": {"swap_space_gb": 4}}, "s.yaml")


# --------------------------------------------------------------------------- memory-aware admission


def test_memory_aware_projection():
    adm = MemoryAwareAdmission(capacity_blocks=10, block_size=16, sigma=0.0)
    running = [req(0, 32, 64)]  # 32 tokens now, 64 more: peaks at 96 tokens = 6 blocks
    running[0].num_output_tokens = 0
    assert adm.can_admit(running, req(1, 32, 32))  # at t=32: 4 + 4 = 8 blocks; t=64: 6 blocks
    assert not adm.can_admit(running, req(2, 32, 64))  # at t=64: 6 + 6 = 12 > 10
    assert adm.can_admit([], req(3, 100, 60))  # 160 tokens = 10 blocks
    noisy = MemoryAwareAdmission(10, 16, sigma=0.5, seed=0)
    r = req(4, 10, 100)
    assert noisy.predict(r) == noisy.predict(r) != 100  # drawn once per request


def test_shortest_predicted_first_orders_waiting_by_predicted_output():
    """MC-SF's order: waiting by predicted output length (true length at sigma 0), and the
    option is refused where it means nothing (no memory-aware admission, or with priority)."""
    s = sched(opts=PolicyOptions(memory_aware_admission=True, admission_order="shortest_predicted_first"))
    for i, out_len in enumerate((50, 10, 30, 10)):
        s.add_request(req(i, 16, out_len))
    assert ids(s.waiting) == [1, 3, 2, 0]  # ties by arrival, then id
    out, _, _ = step(s)
    assert ids(out.reqs)[0] == 1
    with pytest.raises(ValueError, match="needs memory_aware_admission"):
        EngineConfig(admission_order="shortest_predicted_first")
    with pytest.raises(ValueError, match="replaces the priority order"):
        EngineConfig(
            memory_aware_admission=True,
            admission_order="shortest_predicted_first",
            scheduling_policy="priority",
        )
