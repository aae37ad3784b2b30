"""Exact-state tests of the V1 token-budget scheduler on a tiny KV cache (11 blocks of 16)."""

from __future__ import annotations

import pytest
from conftest import make_scheduler, req

from servesim.engine.request import ReqStatus
from servesim.engine.scheduler import Scheduler, SchedulerOutput


def step(s: Scheduler, now: float = 0.0):
    """One iteration without a replica: schedule, then post-process."""
    out = s.schedule()
    produced, finished = s.update_from_output(out, now)
    return out, produced, finished


def idxs(reqs) -> list[int]:
    return [r.idx for r in reqs]


def block_ids(s: Scheduler, r) -> list[int]:
    return [b.block_id for b in s.kv.req_blocks[r.idx]]


# --------------------------------------------------------------------------- admission


def test_first_step_fills_budget_fcfs_with_chunked_prefill():
    s = make_scheduler(max_num_batched_tokens=64)
    a, b = req(0, 40, 5), req(1, 40, 5)
    s.add_request(a)
    s.add_request(b)
    out = s.schedule()
    assert idxs(out.reqs) == [0, 1] and out.num_tokens == [40, 24]
    assert out.total_tokens == 64 and out.preempted == []
    assert idxs(s.running) == [0, 1] and list(s.waiting) == []
    assert a.status == b.status == ReqStatus.RUNNING
    assert a.num_computed_tokens == 40 and b.num_computed_tokens == 24
    assert a.num_cached_tokens == 0 and b.num_cached_tokens == 0
    assert block_ids(s, a) == [1, 2, 3] and block_ids(s, b) == [4, 5]
    st = out.stats
    assert st.num_prefill_reqs == 2 and st.num_prefill_tokens == 64
    assert st.prefill_attn_work == 40 * (0 + 20) + 24 * (0 + 12)
    assert st.num_decode_reqs == 0 and st.sum_decode_context == 0
    # The step that completes a's prompt samples its first token; b's partial sample is dropped.
    produced, finished = s.update_from_output(out, 1.0)
    assert produced == [a] and finished == []
    assert a.num_output_tokens == 1 and b.num_output_tokens == 0


def test_running_before_waiting_and_mixed_step_stats():
    s = make_scheduler(max_num_batched_tokens=64)
    a, b, c = req(0, 40, 5), req(1, 40, 5), req(2, 8, 5)
    for r in (a, b, c):
        s.add_request(r)
    step(s)
    out, produced, _ = step(s)
    # a decodes (1 token), b finishes its prompt (16 tokens), then c is admitted.
    assert idxs(out.reqs) == [0, 1, 2] and out.num_tokens == [1, 16, 8]
    assert idxs(produced) == [0, 1, 2]
    st = out.stats
    assert st.num_decode_reqs == 1
    assert st.sum_decode_context == 41  # a's 40 computed tokens + the new one
    assert st.num_prefill_reqs == 2 and st.num_prefill_tokens == 24
    assert st.prefill_attn_work == 16 * (24 + 8) + 8 * (0 + 4)
    assert st.sum_prefill_context == 24
    assert st.num_tokens == 25 and st.num_reqs == 3
    assert out.total_tokens == 25


def test_chunked_prefill_off_prompt_waits_for_budget():
    s = make_scheduler(max_num_batched_tokens=64, enable_chunked_prefill=False)
    a, b = req(0, 40, 5), req(1, 40, 5)
    s.add_request(a)
    s.add_request(b)
    out, produced, _ = step(s)
    assert idxs(out.reqs) == [0] and out.num_tokens == [40]
    assert list(s.waiting) == [b] and b.status == ReqStatus.WAITING
    assert produced == [a]
    out, produced, _ = step(s)
    assert idxs(out.reqs) == [0, 1] and out.num_tokens == [1, 40]
    assert produced == [a, b]


def test_decode_one_token_each_until_exactly_max_tokens_then_free():
    s = make_scheduler(max_num_batched_tokens=64)
    a, b = req(0, 20, 3), req(1, 10, 5)
    s.add_request(a)
    s.add_request(b)
    history = []
    for t in range(1, 10):
        out, produced, finished = step(s, float(t))
        history.append((out.num_tokens, idxs(produced), idxs(finished)))
        if not s.has_work():
            break
    assert history == [
        ([20, 10], [0, 1], []),
        ([1, 1], [0, 1], []),
        ([1, 1], [0, 1], [0]),
        ([1], [1], []),
        ([1], [1], [1]),
    ]
    assert a.num_output_tokens == 3 and b.num_output_tokens == 5
    assert a.status == b.status == ReqStatus.FINISHED
    assert a.finished_s == 3.0 and b.finished_s == 5.0
    assert s.running == [] and s.kv.req_blocks == {}
    assert s.kv.num_free_blocks == 10
    s.kv.check_invariants()


def test_single_output_token_finishes_in_prompt_step():
    s = make_scheduler()
    a = req(0, 1, 1)
    s.add_request(a)
    out, produced, finished = step(s, 2.5)
    assert out.num_tokens == [1] and produced == finished == [a]
    assert a.finished_s == 2.5 and a.num_output_tokens == 1
    assert not s.has_work() and s.kv.num_free_blocks == 10
    assert s.schedule().reqs == []


def test_max_num_seqs_respected():
    s = make_scheduler(max_num_seqs=2, max_num_batched_tokens=256)
    rs = [req(i, 16, 2) for i in range(4)]
    for r in rs:
        s.add_request(r)
    out, _, _ = step(s)
    assert idxs(out.reqs) == [0, 1] and idxs(s.waiting) == [2, 3]
    out, _, finished = step(s)
    assert idxs(out.reqs) == [0, 1] and idxs(finished) == [0, 1]
    out, _, _ = step(s)
    assert idxs(out.reqs) == [2, 3]


def test_max_model_len_caps_and_finishes():
    s = make_scheduler(max_model_len=24, max_num_batched_tokens=64)
    a = req(0, 20, 100)
    s.add_request(a)
    outs = []
    while s.has_work():
        out, _, _ = step(s)
        outs.append(out.num_tokens)
    # The sequence stops when it reaches max_model_len tokens (20 prompt + 4 outputs).
    assert outs == [[20], [1], [1], [1]]
    assert a.num_output_tokens == 4 and a.status == ReqStatus.FINISHED


# --------------------------------------------------------------------------- long prefills


def test_long_prefill_threshold_caps_chunks_when_several_eligible():
    s = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    a, b = req(0, 40, 2), req(1, 40, 2)
    s.add_request(a)
    s.add_request(b)
    out, _, _ = step(s)
    assert out.num_tokens == [16, 16]
    out, _, _ = step(s)
    assert out.num_tokens == [16, 16]
    out, produced, _ = step(s)
    assert out.num_tokens == [8, 8] and produced == [a, b]


def test_long_prefill_threshold_ignored_for_a_lone_request():
    s = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    a = req(0, 40, 2)
    s.add_request(a)
    out, _, _ = step(s)
    assert out.num_tokens == [40]


def test_budget_splits_a_long_prompt():
    s = make_scheduler(max_num_batched_tokens=32)
    a = req(0, 100, 2)
    s.add_request(a)
    chunks = []
    while s.has_work():
        out, produced, _ = step(s)
        chunks.append((out.num_tokens, idxs(produced)))
    assert chunks == [([32], []), ([32], []), ([32], []), ([4], [0]), ([1], [0])]


# --------------------------------------------------------------------------- prefix caching


def test_prefix_hit_at_admission_sets_cached_tokens():
    s = make_scheduler(caching=True, max_num_batched_tokens=256)
    a = req(0, 40, 3, prefix_group=0, prefix_len=40)
    s.add_request(a)
    step(s)
    b = req(1, 40, 3, prefix_group=0, prefix_len=40)
    s.add_request(b)
    out, produced, _ = step(s)
    # a decodes; b hits a's 2 full blocks and computes only 8 tokens.
    assert idxs(out.reqs) == [0, 1] and out.num_tokens == [1, 8]
    assert b.num_cached_tokens == 32 and b.num_computed_tokens == 40
    assert s.kv.num_query_tokens == 80 and s.kv.num_hit_tokens == 32  # once per admission
    assert produced == [a, b]
    assert block_ids(s, b)[:2] == block_ids(s, a)[:2] == [1, 2]
    assert out.stats.prefill_attn_work == 8 * (32 + 4)
    assert out.stats.sum_prefill_context == 32


# --------------------------------------------------------------------------- preemption


def run_until(s: Scheduler, pred, limit: int = 200) -> tuple[int, SchedulerOutput]:
    for k in range(1, limit + 1):
        out, _, _ = step(s, float(k))
        if pred(out):
            return k, out
    raise AssertionError("condition never met")


def test_preemption_evicts_newest_running_and_recomputes():
    s = make_scheduler(max_num_batched_tokens=256)
    a, b = req(0, 64, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    out, _, _ = step(s, 1.0)
    assert block_ids(s, a) == [1, 2, 3, 4] and block_ids(s, b) == [5, 6, 7, 8]
    # Steps 2..17 decode both; the 65th token takes each one more block (9, 10).
    for k in range(2, 18):
        out, _, _ = step(s, float(k))
        assert out.preempted == [] and out.num_tokens == [1, 1]
    assert block_ids(s, a) == [1, 2, 3, 4, 9] and block_ids(s, b) == [5, 6, 7, 8, 10]
    assert s.kv.num_free_blocks == 0
    assert a.num_output_tokens == b.num_output_tokens == 17
    # Step 18: a's 81st token needs a 6th block; b (the newest) is preempted to make room.
    out, produced, _ = step(s, 18.0)
    assert out.preempted == [b] and idxs(out.reqs) == [0] and produced == [a]
    assert b.status == ReqStatus.PREEMPTED and b.num_computed_tokens == 0
    assert b.num_preemptions == 1 and s.num_preemptions == 1
    assert b.num_output_tokens == 17  # outputs are kept, their KV is recomputed
    assert list(s.waiting) == [b] and s.running == [a]
    assert b.idx not in s.kv.req_blocks
    # b's blocks came back tail first; a took the head.
    assert block_ids(s, a) == [1, 2, 3, 4, 9, 10]
    assert s.kv.free_queue.block_ids() == [8, 7, 6, 5]
    s.kv.check_invariants()
    # b (81 tokens = 6 blocks) cannot come back until a finishes (at step 30).
    for k in range(19, 31):
        out, _, finished = step(s, float(k))
        assert idxs(out.reqs) == [0]
    assert finished == [a] and a.num_output_tokens == 30
    # Step 31: b recomputes prompt + 17 outputs in one chunk and samples its 18th token.
    out, produced, _ = step(s, 31.0)
    assert idxs(out.reqs) == [1] and out.num_tokens == [81] and produced == [b]
    assert out.stats.num_prefill_tokens == 81 and out.stats.prefill_attn_work == 81 * 40.5
    assert b.num_output_tokens == 18 and b.status == ReqStatus.RUNNING
    assert b.num_cached_tokens == 0  # set at first admission only
    k, out = run_until(s, lambda o: not s.has_work())
    assert k == 12  # 12 more decodes: outputs 19..30
    assert b.num_output_tokens == 30 and b.status == ReqStatus.FINISHED
    assert b.num_preemptions == 1
    assert s.kv.num_free_blocks == 10
    s.kv.check_invariants()


def test_preempting_the_requester_itself_when_it_is_newest():
    s = make_scheduler(max_num_batched_tokens=256)
    a, b = req(0, 90, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    step(s)  # a: 6 blocks [1..6] (room for 96 tokens), b: 4 blocks [7..10]
    assert s.kv.num_free_blocks == 0
    # a's 91st token fits its blocks; b's 65th needs a 5th block and b is the newest,
    # so b preempts itself and the running loop stops.
    out, produced, _ = step(s)
    assert out.preempted == [b] and idxs(out.reqs) == [0] and produced == [a]
    assert list(s.waiting) == [b] and s.running == [a]
    assert s.kv.free_queue.block_ids() == [10, 9, 8, 7]


def test_no_admission_in_a_step_with_preemption():
    # With the full-sequence gate off and a small chunk cap, the victim could be
    # re-admitted for one chunk at once; vLLM waits a step.
    s = make_scheduler(
        max_num_batched_tokens=256, scheduler_reserve_full_isl=False, long_prefill_token_threshold=16
    )
    a, b = req(0, 64, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    k, out = run_until(s, lambda o: bool(o.preempted))
    assert out.preempted == [b] and idxs(out.reqs) == [0]
    assert s.kv.num_free_blocks >= 1
    out, _, _ = step(s)
    assert idxs(out.reqs) == [0, 1] and out.num_tokens == [1, 16]


@pytest.mark.parametrize("caching", [False, True])
def test_many_requests_drain_with_preemptions(caching):
    s = make_scheduler(caching=caching, max_num_batched_tokens=48, max_num_seqs=6)
    rs = [req(i, 10 + 7 * i, 25, prefix_group=i % 2, prefix_len=16) for i in range(6)]
    for r in rs:
        s.add_request(r)
    n_steps = 0
    while s.has_work():
        out, _, _ = step(s, float(n_steps))
        n_steps += 1
        assert out.total_tokens <= 48 and len(s.running) <= 6
        s.kv.check_invariants()
        assert n_steps < 1000
    assert all(r.status == ReqStatus.FINISHED and r.num_output_tokens == 25 for r in rs)
    assert s.num_preemptions > 0
    assert s.kv.num_free_blocks == 10


def test_preempted_request_resumes_from_its_cached_blocks():
    s = make_scheduler(caching=True, max_num_batched_tokens=256)
    a, b = req(0, 64, 30), req(1, 64, 30)
    s.add_request(a)
    s.add_request(b)
    k, out = run_until(s, lambda o: bool(o.preempted))
    assert k == 18 and out.preempted == [b]
    # b's 5 full blocks were cached; a's new block (the head: b's last block) evicted one.
    assert s.kv.free_queue.block_ids() == [8, 7, 6, 5]
    hits_before = s.kv.num_hit_tokens
    k, out = run_until(s, lambda o: b in o.reqs)
    assert k == 13 and a.status == ReqStatus.FINISHED  # admitted in the step after a finished
    # 4 blocks (64 tokens) hit; b recomputes only 81 - 64 = 17 tokens.
    assert out.num_tokens == [17]
    assert out.stats.prefill_attn_work == 17 * (64 + 17 / 2)
    assert block_ids(s, b) == [5, 6, 7, 8, 10, 9]
    # Statistics and num_cached_tokens count a request's first admission only.
    assert s.kv.num_hit_tokens == hits_before
    assert b.num_cached_tokens == 0
    assert b.num_output_tokens == 18


def test_several_victims_in_one_step_keep_fcfs_order():
    # a's third prompt chunk needs 3 blocks and none are free: c (newest) then b are
    # preempted; each goes to the front of waiting, so b ends up ahead of c.
    s = make_scheduler(
        max_num_batched_tokens=80, long_prefill_token_threshold=48, scheduler_reserve_full_isl=False
    )
    a, b, c = req(0, 144, 5), req(1, 16, 30), req(2, 16, 30)
    for r in (a, b, c):
        s.add_request(r)
    out, _, _ = step(s)
    assert out.num_tokens == [48, 16, 16]
    out, _, _ = step(s)
    assert out.num_tokens == [48, 1, 1]
    assert s.kv.num_free_blocks == 0
    assert block_ids(s, b) == [4, 9] and block_ids(s, c) == [5, 10]
    out, produced, _ = step(s)
    assert out.preempted == [c, b]
    assert idxs(out.reqs) == [0] and out.num_tokens == [48] and produced == [a]
    assert list(s.waiting) == [b, c] and s.running == [a]
    assert b.num_preemptions == c.num_preemptions == 1 and s.num_preemptions == 2
    assert block_ids(s, a) == [1, 2, 3, 6, 7, 8, 9, 4, 10]
    assert s.kv.free_queue.block_ids() == [5]
    s.kv.check_invariants()
