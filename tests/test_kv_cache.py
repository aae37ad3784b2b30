"""Exact-state tests of the paged KV cache on tiny fixtures (11 blocks of 16 tokens)."""

from __future__ import annotations

import pytest
from conftest import req

from servesim.engine.kv_cache import FreeBlockQueue, KVBlock, KVCacheManager


def kv11(caching: bool = True, block_size: int = 16, num_gpu_blocks: int = 11) -> KVCacheManager:
    return KVCacheManager(num_gpu_blocks, block_size, caching, max_model_len=4096)


def ids(blocks: list[KVBlock] | None) -> list[int]:
    assert blocks is not None
    return [b.block_id for b in blocks]


def held(kv: KVCacheManager, r) -> list[int]:
    return ids(kv.req_blocks[r.idx])


def snapshot(kv: KVCacheManager) -> tuple:
    """Everything observable about the cache, for before/after comparisons."""
    return (
        kv.free_queue.block_ids(),
        kv.free_queue.num_free_blocks,
        [(b.block_id, b.ref_cnt, b.block_hash) for b in kv.blocks],
        {h: sorted(e) for h, e in kv.cached.items()},
        {i: ids(bs) for i, bs in kv.req_blocks.items()},
        dict(kv.num_cached_blocks),
    )


# --------------------------------------------------------------------------- free queue


def test_free_queue_linked_list_operations():
    blocks = [KVBlock(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    assert q.block_ids() == [0, 1, 2, 3, 4]
    assert q.num_free_blocks == 5
    # Remove from the middle, the head and the tail: O(1) unlinking, links cleared.
    q.remove(blocks[2])
    assert q.block_ids() == [0, 1, 3, 4]
    assert blocks[2].prev is None and blocks[2].next is None
    assert blocks[1].next is blocks[3] and blocks[3].prev is blocks[1]
    q.remove(blocks[0])
    q.remove(blocks[4])
    assert q.block_ids() == [1, 3]
    assert q.num_free_blocks == 2
    # Append goes to the tail, popleft takes the head.
    q.append(blocks[2])
    assert q.block_ids() == [1, 3, 2]
    assert q.popleft() is blocks[1]
    assert q.popleft() is blocks[3]
    assert q.popleft() is blocks[2]
    assert q.block_ids() == [] and q.num_free_blocks == 0
    with pytest.raises(ValueError):
        q.popleft()
    # A block that is not in the queue cannot be removed.
    with pytest.raises(AssertionError):
        q.remove(blocks[1])


# --------------------------------------------------------------------------- allocation


def test_initial_state_null_block():
    kv = kv11()
    assert kv.null_block.block_id == 0 and kv.null_block.is_null
    assert kv.free_queue.block_ids() == list(range(1, 11))
    assert kv.num_free_blocks == 10
    assert kv.num_used_blocks == 1  # the null block
    assert kv.usage == 0.0  # the null block is not counted (vLLM's get_usage)
    kv.check_invariants()


def test_too_few_blocks_rejected():
    with pytest.raises(ValueError):
        KVCacheManager(1, 16, False, 4096)


def test_allocation_takes_head_in_order_and_grows_at_block_boundaries():
    kv = kv11(caching=False)
    a, b = req(0, 40), req(1, 16)
    assert ids(kv.allocate_slots(a, 40)) == [1, 2, 3]  # ceil(40/16) = 3
    assert ids(kv.allocate_slots(b, 16)) == [4]
    assert kv.free_queue.block_ids() == [5, 6, 7, 8, 9, 10]
    # a's computed tokens catch up; 8 more tokens fit in block 3 (40 + 8 = 48 = 3 blocks).
    a.num_computed_tokens = 40
    assert kv.allocate_slots(a, 8) == []
    assert held(kv, a) == [1, 2, 3]
    # One more token crosses the boundary: a new block from the head.
    a.num_computed_tokens = 48
    assert ids(kv.allocate_slots(a, 1)) == [5]
    assert held(kv, a) == [1, 2, 3, 5]
    assert kv.num_free_blocks == 5
    assert kv.usage == pytest.approx(1 - 5 / 10)
    kv.check_invariants()
    assert 0 not in held(kv, a) + held(kv, b)


def test_free_without_caching_returns_blocks_to_the_front_tail_first():
    kv = kv11(caching=False)
    a, b = req(0, 48), req(1, 32)
    kv.allocate_slots(a, 48)  # [1, 2, 3]
    kv.allocate_slots(b, 32)  # [4, 5]
    kv.free(a)
    assert kv.free_queue.block_ids() == [3, 2, 1, 6, 7, 8, 9, 10]
    kv.free(b)
    assert kv.free_queue.block_ids() == [5, 4, 3, 2, 1, 6, 7, 8, 9, 10]
    assert kv.req_blocks == {}
    assert all(blk.ref_cnt == 0 for blk in kv.blocks if not blk.is_null)
    kv.free(a)  # freeing twice is a no-op
    assert kv.num_free_blocks == 10
    kv.check_invariants()
    # The next allocation reuses from the head: the most recently freed.
    c = req(2, 80)
    assert ids(kv.allocate_slots(c, 80)) == [5, 4, 3, 2, 1]


def test_free_with_caching_hashed_blocks_to_the_back_tail_first():
    kv = kv11(caching=True)
    a, b = req(0, 40), req(1, 32)
    kv.allocate_slots(a, 40)  # [1, 2, 3]: 1, 2 full and hashed, 3 partial
    kv.allocate_slots(b, 32)  # [4, 5]: both hashed
    assert [kv.blocks[i].block_hash is not None for i in range(1, 6)] == [True, True, False, True, True]
    kv.free(a)
    assert kv.free_queue.block_ids() == [3, 6, 7, 8, 9, 10, 2, 1]
    kv.free(b)
    assert kv.free_queue.block_ids() == [3, 6, 7, 8, 9, 10, 2, 1, 5, 4]
    kv.check_invariants()
    # Unhashed and never-used blocks go first; the cached chains are evicted last.
    c = req(2, 16 * 7)
    assert ids(kv.allocate_slots(c, 16 * 7)) == [3, 6, 7, 8, 9, 10, 2]


def test_allocate_returns_none_and_changes_nothing_when_short():
    kv = kv11(caching=True)
    a = req(0, 16 * 8, prefix_group=0, prefix_len=64)
    assert ids(kv.allocate_slots(a, 16 * 8)) == list(range(1, 9))
    b = req(1, 48)  # needs 3, only 2 free
    before = snapshot(kv)
    q_before = kv.num_query_tokens
    assert kv.allocate_slots(b, 48) is None
    assert snapshot(kv) == before
    assert b.idx not in kv.req_blocks
    assert kv.num_query_tokens == q_before
    # Two blocks do fit.
    assert ids(kv.allocate_slots(b, 32)) == [9, 10]
    assert kv.num_free_blocks == 0 and kv.usage == 1.0
    # A running request short of a block: None, nothing changes.
    a.num_computed_tokens = 128
    before = snapshot(kv)
    assert kv.allocate_slots(a, 1) is None
    assert snapshot(kv) == before


def test_full_sequence_must_fit_gate():
    kv = kv11(caching=False)
    filler = req(0, 16 * 7)
    kv.allocate_slots(filler, 16 * 7)  # 3 blocks left
    big = req(1, 60)  # 4 blocks for the whole prompt
    # The first chunk (32 tokens, 2 blocks) fits, the whole prompt does not.
    before = snapshot(kv)
    assert kv.allocate_slots(big, 32, full_sequence_must_fit=True) is None
    assert snapshot(kv) == before
    assert ids(kv.allocate_slots(big, 32, full_sequence_must_fit=False)) == [8, 9]
    kv.free(big)
    assert kv.free_queue.block_ids() == [9, 8, 10]
    # Prompt plus outputs so far counts (a preempted request being re-admitted).
    resumed = req(2, 30, max_tokens=10)
    resumed.num_output_tokens = 20  # 50 tokens = 4 blocks
    assert kv.allocate_slots(resumed, 16, full_sequence_must_fit=True) is None
    resumed.num_output_tokens = 18  # 48 tokens = 3 blocks
    assert ids(kv.allocate_slots(resumed, 16, full_sequence_must_fit=True)) == [9]


@pytest.mark.parametrize("block_size", [1, 16, 128])
def test_any_block_size(block_size):
    kv = kv11(caching=True, block_size=block_size)
    n = 3 * block_size + 1  # 4 blocks
    a = req(0, n, prefix_group=7, prefix_len=n)
    assert ids(kv.allocate_slots(a, n)) == [1, 2, 3, 4]
    assert kv.num_cached_blocks[0] == n // block_size  # full blocks only
    assert sum(1 for b in kv.blocks if b.block_hash is not None) == n // block_size
    b = req(1, n, prefix_group=7, prefix_len=n)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1, 2, 3] and num_hit == 3 * block_size
    assert ids(kv.allocate_slots(b, n - num_hit, num_hit, hit)) == [5]
    assert held(kv, b) == [1, 2, 3, 5]
    assert [kv.blocks[i].ref_cnt for i in (1, 2, 3, 4, 5)] == [2, 2, 2, 1, 1]
    kv.check_invariants()
    kv.free(a)
    kv.free(b)
    if block_size == 1:  # every block is full, so hashed: all go to the back
        assert kv.free_queue.block_ids() == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    else:  # the partial last blocks (4, then 5) go to the front
        assert kv.free_queue.block_ids() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert kv.usage == 0.0
    kv.check_invariants()


# --------------------------------------------------------------------------- prefix caching


def test_prefix_hit_reuses_running_requests_blocks():
    kv = kv11()
    a = req(0, 40, prefix_group=3, prefix_len=40)
    assert ids(kv.allocate_slots(a, 40)) == [1, 2, 3]
    # Only full blocks are cached: 40 tokens = 2 full blocks.
    assert kv.num_cached_blocks[0] == 2
    assert [kv.blocks[i].block_hash is not None for i in (1, 2, 3)] == [True, True, False]
    b = req(1, 40, prefix_group=3, prefix_len=40)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1, 2] and num_hit == 32
    assert ids(kv.allocate_slots(b, 8, num_hit, hit)) == [4]
    assert held(kv, b) == [1, 2, 4]
    assert [kv.blocks[i].ref_cnt for i in (1, 2, 3, 4)] == [2, 2, 1, 1]
    assert kv.free_queue.block_ids() == [5, 6, 7, 8, 9, 10]
    kv.check_invariants()
    # A request from another group, or with no identity, misses.
    assert kv.get_computed_blocks(req(2, 40, prefix_group=4, prefix_len=40)) == ([], 0)
    assert kv.get_computed_blocks(req(3, 40)) == ([], 0)


def test_prefix_hit_via_hash_ids():
    kv = kv11()
    # hash_block_tokens 32 = 2 blocks of 16 per id.
    a = req(0, 64, hash_ids=(11, 12), hash_block_tokens=32)
    kv.allocate_slots(a, 64)
    b = req(1, 70, hash_ids=(11, 13, 14), hash_block_tokens=32)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1, 2] and num_hit == 32  # the first id's two blocks only


def test_hit_is_at_most_num_tokens_minus_one():
    kv = kv11()
    a = req(0, 32, prefix_group=1, prefix_len=32)
    kv.allocate_slots(a, 32)
    assert kv.num_cached_blocks[0] == 2
    # A prompt of exactly 2 full blocks, fully cached: max_blocks = (32 - 1) // 16 = 1.
    b = req(1, 32, prefix_group=1, prefix_len=32)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1] and num_hit == 16
    # One token more: both blocks hit.
    c = req(2, 33, prefix_group=1, prefix_len=32)
    hit, num_hit = kv.get_computed_blocks(c)
    assert ids(hit) == [1, 2] and num_hit == 32
    # A one-token prompt never hits.
    assert kv.get_computed_blocks(req(3, 1, prefix_group=1, prefix_len=32)) == ([], 0)


def test_hit_on_free_block_removes_it_from_middle_of_free_queue():
    kv = kv11()
    a = req(0, 48, prefix_group=5, prefix_len=48)
    kv.allocate_slots(a, 48)  # [1, 2, 3], all full and cached
    kv.free(a)
    assert kv.free_queue.block_ids() == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]
    b = req(1, 40, prefix_group=5, prefix_len=48)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1, 2] and num_hit == 32
    assert ids(kv.allocate_slots(b, 8, num_hit, hit)) == [4]
    assert held(kv, b) == [1, 2, 4]
    assert kv.free_queue.block_ids() == [5, 6, 7, 8, 9, 10, 3]
    assert kv.blocks[3].block_hash is not None  # still cached while free
    kv.check_invariants()


def test_free_cached_hits_count_against_free_blocks():
    kv = kv11()
    a = req(0, 48, prefix_group=5, prefix_len=48)
    kv.allocate_slots(a, 48)
    kv.free(a)  # 10 free, of which 3 cached
    filler = req(1, 16 * 6)
    kv.allocate_slots(filler, 16 * 6)  # takes [4..9]; free: [10, 3, 2, 1]
    assert kv.free_queue.block_ids() == [10, 3, 2, 1]
    b = req(2, 16 * 5 + 1, prefix_group=5, prefix_len=48)  # 6 blocks, 3 hit
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1, 2, 3]
    assert kv.num_blocks_to_allocate(b, b.num_prompt_tokens, hit) == 6
    before = snapshot(kv)
    assert kv.allocate_slots(b, b.num_prompt_tokens - num_hit, num_hit, hit) is None
    assert snapshot(kv) == before


def test_lru_eviction_from_head_drops_hash():
    kv = kv11()
    a = req(0, 32, prefix_group=1, prefix_len=32)
    kv.allocate_slots(a, 32)  # [1, 2], both cached
    h1, h2 = kv.blocks[1].block_hash, kv.blocks[2].block_hash
    assert h1 is not None and h2 is not None and h1 != h2
    kv.free(a)
    assert kv.free_queue.block_ids() == [3, 4, 5, 6, 7, 8, 9, 10, 2, 1]
    # Nine blocks: 3..10 then block 2, the tail of a's chain, is evicted first.
    c = req(1, 16 * 9)
    assert ids(kv.allocate_slots(c, 16 * 9)) == [3, 4, 5, 6, 7, 8, 9, 10, 2]
    assert h2 not in kv.cached
    assert h1 in kv.cached
    assert kv.free_queue.block_ids() == [1]
    kv.check_invariants()
    # A later lookup of the chain hits only the surviving first block.
    b = req(2, 48, prefix_group=1, prefix_len=32)
    hit, num_hit = kv.get_computed_blocks(b)
    assert ids(hit) == [1] and num_hit == 16


def test_evicted_block_rehashed_by_new_owner():
    kv = kv11()
    a = req(0, 17, prefix_group=1, prefix_len=16)  # one full cached block plus one token
    kv.allocate_slots(a, 17)  # [1, 2]
    kv.free(a)
    assert kv.free_queue.block_ids() == [2, 3, 4, 5, 6, 7, 8, 9, 10, 1]
    c = req(1, 16 * 10, prefix_group=2, prefix_len=160)
    assert ids(kv.allocate_slots(c, 160)) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 1]
    # Block 1 now carries c's hash, not a's; the index stays consistent.
    assert kv.blocks[1].block_hash == c.block_hashes[9]
    assert len(kv.cached) == 10
    kv.check_invariants()


def test_caching_off_keeps_no_hashes():
    kv = kv11(caching=False)
    a = req(0, 48, prefix_group=1, prefix_len=48)
    kv.allocate_slots(a, 48)
    assert kv.cached == {}
    assert all(b.block_hash is None for b in kv.blocks)
    assert kv.get_computed_blocks(req(1, 48, prefix_group=1, prefix_len=48)) == ([], 0)


def test_reset_prefix_cache():
    kv = kv11()
    a = req(0, 48, prefix_group=1, prefix_len=48)
    kv.allocate_slots(a, 48)
    kv.free(a)
    kv.reset_prefix_cache()
    assert kv.cached == {}
    assert kv.get_computed_blocks(req(1, 48, prefix_group=1, prefix_len=48)) == ([], 0)
    assert kv.free_queue.block_ids() == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]
