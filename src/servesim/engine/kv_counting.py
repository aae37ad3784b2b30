"""The paged KV cache of ``kv_cache.py``, keeping count of blocks instead of naming them.

``KVCacheManager`` keeps one object per physical block, as vLLM's ``BlockPool`` does, and
moves every block through its free queue one by one: 1.6 million block moves for one hour
of the Azure conversation trace on one replica. Yet no scheduling decision depends on which
physical block a request holds, only on how many blocks are free and on which *cached
content* survives in the free queue for a later prefix hit. This manager makes the same
decisions with work per request instead of per block:

* A block's content is **shareable** when another request can hit it: a full prompt block
  whose chained hash is a real hash (``< UNIQUE_BASE``, see ``Request.ensure_block_hashes``).
  Shareable blocks are a prefix of every request's block chain (once a block is unique,
  all later ones are). Only those are objects here (``CachedBlock``), indexed by hash.
* Every other block is **anonymous**: output blocks, unique prompt blocks, partial blocks,
  everything when prefix caching is off. A request holds its shareable blocks (a list,
  usually empty) plus a *number* of anonymous ones. The free queue (``kv_free_queue.py``)
  is a linked list of nodes in the reference's queue order: a ``CachedBlock``, or a ``Run``
  of ``count`` anonymous blocks. Popping ``n`` blocks from the head consumes runs in O(1)
  and evicts cached blocks one by one, exactly those the reference would evict.
* A request's own unique blocks stay hittable *by itself* after a preemption (the
  reference's ``prev_blocks``). They are freed as a ``Run`` with an ``owner``: the run
  holds chain blocks ``[k0, k0 + count)`` in queue order tail first, so pops from the head
  take the chain's last blocks first and the survivors are always ``[k0, k0 + count)``;
  the owner's resumption hits them as the reference does.

Equivalence with ``KVCacheManager`` (same free counts, same hits, same evictions after any
sequence of operations) is tested operation by operation in tests/test_kv_counting.py and
end to end by the differential tests (tests/test_differential.py), since the lazy engine
runs on this manager and the reference engine on the other.

The number of blocks a request holds is kept in ``held`` for requests the scheduler tracks
one by one. The lazy engine's decode pool does not report each block a pooled request
takes (``pop_anonymous`` takes a step's blocks in bulk); it calls ``sync`` with the
request's materialized token count before the request is touched again here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from servesim.engine.kv_cache import check_num_gpu_blocks
from servesim.engine.kv_free_queue import CachedBlock, FreeRunQueue, Run
from servesim.engine.request import Request


@dataclass(slots=True, eq=False, init=False)
class Hit:
    """A prefix-cache hit: shareable blocks, then ``own`` of the request's own freed blocks."""

    blocks: list[CachedBlock]
    own: int

    def __init__(self, blocks: list[CachedBlock], own: int = 0) -> None:
        self.blocks = blocks
        self.own = own


NO_HIT: Final = Hit([], 0)


def num_shareable_blocks(req: Request, block_size: int) -> int:
    """How many leading full blocks of ``req``'s chain others can share (real hashes)."""
    n_prompt = req.num_prompt_tokens
    if req.hash_ids is not None:
        covered = len(req.hash_ids) * req.hash_block_tokens
        return min(n_prompt, covered) // block_size
    if req.prefix_group >= 0:
        return min(n_prompt, req.prefix_len) // block_size
    return 0


class CountingKVCache:
    """``KVCacheManager``'s decisions, with per-request instead of per-block work."""

    def __init__(
        self, num_gpu_blocks: int, block_size: int, enable_caching: bool, max_model_len: int
    ) -> None:
        check_num_gpu_blocks(num_gpu_blocks)
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.max_model_len = max_model_len
        self.num_free_blocks = num_gpu_blocks - 1  # block 0 is the null block
        self.cached: dict[int, dict[int, CachedBlock]] = {}
        self.held: dict[int, int] = {}  # request idx -> blocks held (tracked requests)
        self.hashed: dict[int, int] = {}  # request idx -> full blocks hashed so far
        self.shared: dict[int, list[CachedBlock]] = {}  # request idx -> its shareable blocks
        self.own_runs: dict[int, Run] = {}  # preempted request idx -> its free own blocks
        self.free_queue = FreeRunQueue(num_gpu_blocks - 1, self.cached, self.own_runs)
        self._next_id = num_gpu_blocks
        self.num_query_tokens = 0
        self.num_hit_tokens = 0

    # ----------------------------------------------------------------- queries

    @property
    def num_used_blocks(self) -> int:
        return self.num_gpu_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / (self.num_gpu_blocks - 1)

    def num_held(self, req: Request) -> int:
        return self.held.get(req.idx, 0)

    def get_computed_blocks(self, req: Request) -> tuple[Hit, int]:
        """Longest run of cached full blocks of ``req``'s tokens (at most num_tokens - 1)."""
        if not self.enable_caching:
            return NO_HIT, 0
        bs = self.block_size
        max_blocks = (req.num_prompt_tokens + req.num_output_tokens - 1) // bs
        shareable = min(num_shareable_blocks(req, bs), max_blocks)
        hit: list[CachedBlock] = []
        if shareable:
            hashes = req.ensure_block_hashes(shareable, bs)
            cached = self.cached
            for i in range(shareable):
                entry = cached.get(hashes[i])
                if not entry:
                    return (Hit(hit), len(hit) * bs) if hit else (NO_HIT, 0)
                hit.append(next(iter(entry.values())))
        own = 0
        run = self.own_runs.get(req.idx)
        if run is not None and run.k0 == len(hit) and len(hit) < max_blocks:
            own = min(run.count, max_blocks - run.k0)
        if not hit and not own:
            return NO_HIT, 0
        return Hit(hit, own), (len(hit) + own) * bs

    # ----------------------------------------------------------------- actions

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed: Hit | list | tuple = (),
        full_sequence_must_fit: bool = False,
    ) -> bool | None:
        """As ``KVCacheManager.allocate_slots``: True, or None (and no change) if short."""
        bs = self.block_size
        idx = req.idx
        num_computed = req.num_computed_tokens + num_new_computed_tokens
        hit = new_computed if isinstance(new_computed, Hit) else None
        held = self.held.get(idx, 0)
        free = self.num_free_blocks
        if hit is not None:
            num_hit = len(hit.blocks) + hit.own
            evictable = hit.own
            for b in hit.blocks:
                if b.ref_cnt == 0:
                    evictable += 1
        else:
            num_hit = evictable = 0
        num_have = held + num_hit
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
        if hit is not None and num_hit:
            self._take_hit(req, hit)
        if idx not in self.held:
            self.hashed[idx] = num_hit
        self.held[idx] = num_have + num_new
        if num_new:
            self.pop_anonymous(num_new)
        if self.enable_caching:
            self._hash_up_to(
                req, min(num_computed + num_new_tokens, req.num_prompt_tokens + req.num_output_tokens) // bs
            )
        return True

    def sync(self, req: Request) -> None:
        """Set a pooled request's held and hashed blocks from its (materialized) counts."""
        c = req.num_computed_tokens
        if c > self.max_model_len:
            c = self.max_model_len
        self.held[req.idx] = -(-c // self.block_size)
        if self.enable_caching:
            self._hash_up_to(req, req.num_computed_tokens // self.block_size)

    def free(self, req: Request, keep_for_resume: bool = False) -> None:
        """Return ``req``'s blocks in the reference's eviction order (see ``KVCacheManager.free``)."""
        idx = req.idx
        held = self.held.pop(idx, 0)
        hashed = self.hashed.pop(idx, 0)
        shared = self.shared.pop(idx, None)
        run = self.own_runs.pop(idx, None)
        if run is not None:
            run.owner = -1  # a new preemption replaces the old own blocks (reference: prev_blocks)
        if not held:
            return
        t = len(shared) if shared else 0
        if not self.enable_caching:
            hashed = 0
        hashed = max(hashed, t)
        if hashed > held:
            hashed = held
        unhashed = held - hashed
        queue = self.free_queue
        if unhashed:
            queue.push_front(unhashed)
            self.num_free_blocks += unhashed
        unique = hashed - t
        if unique:
            if keep_for_resume:
                node = Run(unique, idx, t)
                self.own_runs[idx] = node
                queue.append(node)
            else:
                queue.push_back(unique)
            self.num_free_blocks += unique
        if shared:
            for b in reversed(shared):
                b.ref_cnt -= 1
                if b.ref_cnt == 0:
                    queue.append(b)
                    self.num_free_blocks += 1

    def pop_anonymous(self, n: int) -> None:
        """Take ``n`` blocks off the head of the free queue (evicting cached content)."""
        if n > self.num_free_blocks:
            raise ValueError(f"need {n} blocks, {self.num_free_blocks} free")
        self.num_free_blocks -= n
        self.free_queue.pop(n)

    # ----------------------------------------------------------------- internals

    def _take_hit(self, req: Request, hit: Hit) -> None:
        for b in hit.blocks:
            if b.ref_cnt == 0:
                self.free_queue.unlink(b)
                self.num_free_blocks -= 1
            b.ref_cnt += 1
        if hit.blocks:
            self.shared[req.idx] = list(hit.blocks)
        if hit.own:
            run = self.own_runs.pop(req.idx)
            run.count -= hit.own  # the hit takes the chain's first blocks: the run's back end
            run.k0 += hit.own
            self.num_free_blocks -= hit.own
            run.owner = -1
            if run.count == 0:
                self.free_queue.unlink(run)

    def _hash_up_to(self, req: Request, num_full: int) -> None:
        """Hash ``req``'s first ``num_full`` held blocks; shareable ones become CachedBlocks."""
        idx = req.idx
        done = self.hashed[idx]
        if done >= num_full:
            return
        self.hashed[idx] = num_full
        stop = min(num_full, num_shareable_blocks(req, self.block_size))
        if done >= stop:
            return
        hashes = req.ensure_block_hashes(stop, self.block_size)
        shared = self.shared.get(idx)
        if shared is None:
            shared = self.shared[idx] = []
        cached = self.cached
        for i in range(done, stop):
            h = hashes[i]
            b = CachedBlock(self._next_id, h, 1)
            self._next_id += 1
            shared.append(b)
            entry = cached.get(h)
            if entry is None:
                cached[h] = {b.block_id: b}
            else:
                entry[b.block_id] = b

    # ----------------------------------------------------------------- checks

    def free_queue_layout(self) -> list[tuple[str, int]]:
        """The free queue as (kind, count) pairs: ("anon", n), ("own:<idx>", n), ("hash", 1)."""
        return self.free_queue.layout()

    def check_invariants(self, requests: list[Request] | None = None) -> None:
        """Free + held blocks = all usable blocks; index and references consistent."""
        free = self.free_queue.num_blocks()
        refs: dict[int, int] = {}
        assert free == self.num_free_blocks, (free, self.num_free_blocks)
        distinct: set[int] = set()
        anon = 0
        for idx, n in self.held.items():
            blocks = self.shared.get(idx, [])
            assert len(blocks) <= n, (idx, len(blocks), n)
            anon += n - len(blocks)
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
                distinct.add(b.block_id)
                assert b.prev is None and b.next is None
        for idx, blocks in self.shared.items():
            assert idx in self.held
            for b in blocks:
                assert b.ref_cnt == refs[b.block_id]
        assert free + anon + len(distinct) == self.num_gpu_blocks - 1, (free, anon, len(distinct))
        for h, entry in self.cached.items():
            for b in entry.values():
                assert b.block_hash == h
        if requests is not None:
            bs = self.block_size
            for r in requests:
                c = min(r.num_computed_tokens, self.max_model_len)
                assert self.held.get(r.idx, 0) == -(-c // bs), r.idx
