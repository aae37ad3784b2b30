"""Paged KV cache with optional prefix caching, after vLLM V1's block manager.

Modelled on vLLM V1 (0.32; ``v1/core/block_pool.py``, ``kv_cache_manager.py``,
``single_type_kv_cache_manager.py``):

* ``num_gpu_blocks`` blocks of ``block_size`` tokens; block 0 is taken at start-up as
  the *null block* (vLLM's placeholder for skipped blocks), so ``num_gpu_blocks - 1``
  are usable and ``usage = 1 - free / (num_gpu_blocks - 1)``.
* Free blocks sit in a queue popped from the head. A freed request returns its blocks
  *tail first*: hashed blocks to the back (LRU eviction; the last blocks of a chain go
  before its first ones, so the prefix most likely to be shared survives longest), and
  blocks without a hash to the front, to be reused first.
* With prefix caching, a full block keeps its chained hash while free; a new request
  looks up its prompt's full blocks in order and reuses the longest run of hits (at most
  ``num_tokens - 1`` tokens, so at least one token is computed to produce logits).
  A hit on a free block takes it out of the middle of the free queue: that is why the
  queue is an intrusive doubly linked list (O(1) removal), not a deque.
* Allocation is check-then-act: ``allocate_slots`` returns ``None`` when there are not
  enough free blocks and changes nothing; the scheduler decides whom to preempt.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engine.request import UNIQUE_BASE, Request


@dataclass(slots=True, eq=False)
class KVBlock:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    prev: KVBlock | None = None  # free-queue links (None when not in the queue)
    next: KVBlock | None = None
    is_null: bool = False


class FreeBlockQueue:
    """Intrusive doubly linked list of free blocks: popleft, append and remove are O(1).

    Fake head/tail sentinels avoid branches on the ends, as in vLLM's
    ``FreeKVCacheBlockQueue``.
    """

    __slots__ = ("head", "tail", "num_free_blocks")

    def __init__(self, blocks: list[KVBlock]) -> None:
        self.head = KVBlock(-1)
        self.tail = KVBlock(-2)
        self.num_free_blocks = 0
        self.head.next = self.tail
        self.tail.prev = self.head
        for b in blocks:
            self.append(b)

    def popleft(self) -> KVBlock:
        b = self.head.next
        if b is self.tail or b is None:
            raise ValueError("no free blocks")
        self.remove(b)
        return b

    def remove(self, b: KVBlock) -> None:
        prev, nxt = b.prev, b.next
        assert prev is not None and nxt is not None, f"block {b.block_id} is not free"
        prev.next = nxt
        nxt.prev = prev
        b.prev = b.next = None
        self.num_free_blocks -= 1

    def prepend_n(self, blocks: list[KVBlock]) -> None:
        """Put ``blocks`` at the front, keeping their order."""
        first = self.head.next
        assert first is not None
        self._insert_between(self.head, blocks, first)

    def append_n(self, blocks: list[KVBlock]) -> None:
        """Put ``blocks`` at the back, keeping their order."""
        last = self.tail.prev
        assert last is not None
        self._insert_between(last, blocks, self.tail)

    def _insert_between(self, prev: KVBlock, blocks: list[KVBlock], nxt: KVBlock) -> None:
        """Link ``blocks``, in order, between the adjacent ``prev`` and ``nxt``."""
        for b in blocks:
            b.prev = prev
            prev.next = b
            prev = b
        prev.next = nxt
        nxt.prev = prev
        self.num_free_blocks += len(blocks)

    def append(self, b: KVBlock) -> None:
        last = self.tail.prev
        assert last is not None
        last.next = b
        b.prev = last
        b.next = self.tail
        self.tail.prev = b
        self.num_free_blocks += 1

    def block_ids(self) -> list[int]:
        out = []
        b = self.head.next
        while b is not None and b is not self.tail:
            out.append(b.block_id)
            b = b.next
        return out


def check_num_gpu_blocks(num_gpu_blocks: int) -> None:
    """Both KV caches need a usable block beside the null block."""
    if num_gpu_blocks < 2:
        raise ValueError("need at least 2 KV blocks (one is the null block)")


class KVCacheManager:
    """Blocks per request, the free queue and the prefix-cache index."""

    def __init__(
        self, num_gpu_blocks: int, block_size: int, enable_caching: bool, max_model_len: int
    ) -> None:
        check_num_gpu_blocks(num_gpu_blocks)
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.max_model_len = max_model_len
        self.blocks = [KVBlock(i) for i in range(num_gpu_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.null_block = self.free_queue.popleft()
        self.null_block.is_null = True
        self.cached: dict[int, dict[int, KVBlock]] = {}  # hash -> {block_id: block}
        self.req_blocks: dict[int, list[KVBlock]] = {}
        self.num_cached_blocks: dict[int, int] = {}
        # Prefix-cache statistics in tokens, counted by the scheduler once per request at
        # its first admission (retries of a blocked request and resumptions after
        # preemption are not counted, unlike vLLM's per-lookup PrefixCacheStats).
        self.num_query_tokens = 0
        self.num_hit_tokens = 0

    # ----------------------------------------------------------------- queries

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        """Blocks not in the free queue (includes the null block, as vLLM's usage does)."""
        return self.num_gpu_blocks - self.free_queue.num_free_blocks

    @property
    def usage(self) -> float:
        """vLLM's ``BlockPool.get_usage``: the null block is not counted."""
        return 1.0 - self.free_queue.num_free_blocks / (self.num_gpu_blocks - 1)

    def get_computed_blocks(self, req: Request) -> tuple[list[KVBlock], int]:
        """Longest run of cached full blocks of ``req``'s tokens (at most num_tokens - 1)."""
        if not self.enable_caching:
            return [], 0
        bs = self.block_size
        num_tokens = req.num_prompt_tokens + req.num_output_tokens
        max_blocks = (num_tokens - 1) // bs
        hashes = req.ensure_block_hashes(num_tokens // bs, bs)
        hit: list[KVBlock] = []
        cached = self.cached
        for i in range(max_blocks):
            h = hashes[i]
            if h >= UNIQUE_BASE:
                # Content only this request has: the only possible hit is its own block
                # from before a preemption, if nobody has reused it since.
                prev = req.prev_blocks
                if prev is None:
                    break
                for j in range(i, max_blocks):
                    if j >= len(prev) or prev[j].block_hash != hashes[j]:
                        break
                    hit.append(prev[j])
                break
            entry = cached.get(h)
            if not entry:
                break
            hit.append(next(iter(entry.values())))
        return hit, len(hit) * bs

    def num_blocks_to_allocate(
        self, req: Request, num_tokens: int, new_computed: list[KVBlock] | tuple = ()
    ) -> int:
        held = self.req_blocks.get(req.idx)
        num_required = -(-num_tokens // self.block_size)
        num_new = num_required - len(new_computed) - (len(held) if held else 0)
        evictable = sum(1 for b in new_computed if b.ref_cnt == 0)
        return max(num_new, 0) + evictable

    # ----------------------------------------------------------------- actions

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed: list[KVBlock] | tuple = (),
        full_sequence_must_fit: bool = False,
        delay_cache: bool = False,
    ) -> list[KVBlock] | None:
        """Make room for ``num_new_tokens`` more tokens of ``req``; None (and no change) if short.

        ``new_computed`` are prefix-cache hits found for a request being admitted; they
        are taken (touched) and become the request's first blocks. With
        ``full_sequence_must_fit`` (vLLM's ``scheduler_reserve_full_isl`` admission gate)
        the request's whole current sequence (prompt plus outputs so far), not just this
        chunk, must fit in the free blocks. ``delay_cache`` (vLLM's ``delay_cache_blocks``, for
        blocks a KV connector is still loading) leaves the new blocks out of the prefix-cache
        index until ``cache_blocks``.
        """
        bs = self.block_size
        num_computed = req.num_computed_tokens + num_new_computed_tokens
        held = self.req_blocks.get(req.idx)
        num_have = len(new_computed) + (len(held) if held else 0)
        evictable = sum(1 for b in new_computed if b.ref_cnt == 0) if new_computed else 0
        free = self.free_queue.num_free_blocks
        if full_sequence_must_fit:
            full = min(req.num_prompt_tokens + req.num_output_tokens, self.max_model_len)
            if max(-(-full // bs) - num_have, 0) + evictable > free:
                return None
        need = min(num_computed + num_new_tokens, self.max_model_len)
        num_new = -(-need // bs) - num_have
        if num_new < 0:
            num_new = 0
        if num_new + evictable > free:
            return None
        if new_computed:
            self._touch(new_computed)
        if held is None:
            held = self.req_blocks[req.idx] = []
            self.num_cached_blocks[req.idx] = len(new_computed)
        held.extend(new_computed)
        new_blocks = self._get_new_blocks(num_new) if num_new else []
        held.extend(new_blocks)
        if self.enable_caching and not delay_cache:
            num_to_cache = min(num_computed + num_new_tokens, req.num_prompt_tokens + req.num_output_tokens)
            self._cache_full_blocks(req, held, num_to_cache // bs)
        return new_blocks

    def cache_blocks(self, req: Request, num_tokens: int) -> None:
        """Index ``req``'s full blocks up to ``num_tokens`` (vLLM ``KVCacheManager.cache_blocks``)."""
        held = self.req_blocks.get(req.idx)
        if self.enable_caching and held:
            self._cache_full_blocks(req, held, min(num_tokens // self.block_size, len(held)))

    def free(self, req: Request, keep_for_resume: bool = False) -> None:
        """Return ``req``'s blocks in eviction order, tail first (vLLM ``free_blocks``).

        Blocks that carry a hash go to the back of the queue (FIFO reuse: LRU eviction
        of cached prefixes); blocks without one (all of them when caching is off) go to
        the front, in the same order, and are reused first (LIFO, for GPU locality).
        ``keep_for_resume`` (a preemption) remembers the blocks so the request can hit
        its own still-cached blocks when it is admitted again.
        """
        blocks = self.req_blocks.pop(req.idx, None)
        self.num_cached_blocks.pop(req.idx, None)
        if not blocks:
            return
        caching = self.enable_caching
        if keep_for_resume and caching:
            req.prev_blocks = blocks
        first: list[KVBlock] = []
        last: list[KVBlock] = []
        for b in reversed(blocks):
            b.ref_cnt -= 1
            if b.ref_cnt == 0 and not b.is_null:
                if caching and b.block_hash is not None:
                    last.append(b)
                else:
                    first.append(b)
        q = self.free_queue
        if first:
            q.prepend_n(first)
        if last:
            q.append_n(last)

    def reset_prefix_cache(self) -> None:
        for b in self.blocks:
            b.block_hash = None
        self.cached.clear()

    # ----------------------------------------------------------------- internals

    def _touch(self, blocks: list[KVBlock] | tuple) -> None:
        remove = self.free_queue.remove
        for b in blocks:
            if b.ref_cnt == 0 and not b.is_null:
                remove(b)
            b.ref_cnt += 1

    def _get_new_blocks(self, n: int) -> list[KVBlock]:
        """Pop ``n`` blocks off the head of the free queue, evicting their cached hashes."""
        q = self.free_queue
        if n > q.num_free_blocks:
            raise ValueError(f"need {n} blocks, {q.num_free_blocks} free")
        out = []
        caching = self.enable_caching
        b = q.head.next
        for _ in range(n):
            assert b is not None
            if caching:
                h = b.block_hash
                if h is not None:
                    b.block_hash = None
                    if h < UNIQUE_BASE:  # unique blocks are not indexed
                        self._unindex(b, h)
            b.ref_cnt += 1
            out.append(b)
            nxt = b.next
            b.prev = b.next = None
            b = nxt
        assert b is not None
        q.head.next = b
        b.prev = q.head
        q.num_free_blocks -= n
        return out

    def _unindex(self, b: KVBlock, h: int) -> None:
        entry = self.cached.get(h)
        if entry is not None:
            entry.pop(b.block_id, None)
            if not entry:
                del self.cached[h]

    def _cache_full_blocks(self, req: Request, blocks: list[KVBlock], num_full: int) -> None:
        done = self.num_cached_blocks[req.idx]
        if done >= num_full:
            return
        hashes = req.ensure_block_hashes(num_full, self.block_size)
        cached = self.cached
        for i in range(done, num_full):
            b = blocks[i]
            h = hashes[i]
            b.block_hash = h
            if h >= UNIQUE_BASE:
                continue  # only this request can hit it: see get_computed_blocks
            entry = cached.get(h)
            if entry is None:
                cached[h] = {b.block_id: b}
            else:
                entry[b.block_id] = b
        self.num_cached_blocks[req.idx] = num_full

    # ----------------------------------------------------------------- checks

    def check_invariants(self) -> None:
        """Free + referenced blocks = all blocks; cache index consistent."""
        free_ids = set(self.free_queue.block_ids())
        assert len(free_ids) == self.free_queue.num_free_blocks
        for b in self.blocks:
            if b.is_null:
                continue
            assert (b.ref_cnt == 0) == (b.block_id in free_ids), f"block {b.block_id} ref {b.ref_cnt}"
        refs: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        for b in self.blocks:
            if not b.is_null:
                assert refs.get(b.block_id, 0) == b.ref_cnt, f"block {b.block_id} refcount"
        for h, entry in self.cached.items():
            for b in entry.values():
                assert b.block_hash == h
