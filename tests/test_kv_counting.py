"""CountingKVCache against KVCacheManager: the same decisions after any sequence of operations.

The counting cache keeps block *counts* where the reference keeps block objects; both are
driven here in lockstep by random admissions (with prefix hits), chunked steps, decodes,
preemptions (own-block hits on resumption) and finishes, and must agree after every
operation on: allocation success, hit lengths, free blocks, and the prefix-cache index
(which hashes are cached, how many times). The last is what eviction order decides.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.request import UNIQUE_BASE, Request


def index_counts(kv) -> dict[int, int]:
    return {h: len(e) for h, e in kv.cached.items() if e and h < UNIQUE_BASE}


class Lockstep:
    """Two KV caches and two copies of every request, operated on identically."""

    def __init__(self, blocks: int, bs: int, caching: bool, reqs: list[Request]) -> None:
        self.a = KVCacheManager(blocks, bs, caching, 4096)
        self.b = CountingKVCache(blocks, bs, caching, 4096)
        self.ra = reqs
        self.rb = [
            Request(
                r.idx,
                r.arrival_s,
                r.num_prompt_tokens,
                r.max_tokens,
                priority=r.priority,
                hash_ids=r.hash_ids,
                hash_block_tokens=r.hash_block_tokens,
                prefix_group=r.prefix_group,
                prefix_len=r.prefix_len,
            )
            for r in reqs
        ]
        self.running: list[int] = []
        self.waiting: list[int] = list(range(len(reqs)))
        self.bs = bs

    def check(self) -> None:
        a, b = self.a, self.b
        assert a.num_free_blocks == b.num_free_blocks
        assert index_counts(a) == index_counts(b)
        b.check_invariants([self.rb[i] for i in self.running])
        a.check_invariants()
        for i in self.running:
            assert len(a.req_blocks[i]) == b.num_held(self.rb[i])

    def admit(self, i: int, chunk: int) -> None:
        ra, rb = self.ra[i], self.rb[i]
        ha, na = self.a.get_computed_blocks(ra)
        hb, nb = self.b.get_computed_blocks(rb)
        assert na == nb, (i, na, nb)
        n = min(ra.num_tokens - na, chunk)
        oka = self.a.allocate_slots(ra, n, na, ha, True) is not None
        okb = self.b.allocate_slots(rb, n, nb, hb, True) is not None
        assert oka == okb
        if oka:
            self.waiting.remove(i)
            self.running.append(i)
            for r in (ra, rb):
                r.num_computed_tokens = na + n
            self._sample(i)

    def step(self, i: int, chunk: int) -> None:
        ra, rb = self.ra[i], self.rb[i]
        n = min(ra.num_tokens - ra.num_computed_tokens, chunk)
        if n <= 0:
            return
        oka = self.a.allocate_slots(ra, n) is not None
        okb = self.b.allocate_slots(rb, n) is not None
        assert oka == okb
        if oka:
            for r in (ra, rb):
                r.num_computed_tokens += n
            self._sample(i)

    def _sample(self, i: int) -> None:
        for r in (self.ra[i], self.rb[i]):
            if r.num_computed_tokens == r.num_tokens:
                r.num_output_tokens += 1

    def preempt(self, i: int) -> None:
        self.a.free(self.ra[i], keep_for_resume=True)
        self.b.free(self.rb[i], keep_for_resume=True)
        for r in (self.ra[i], self.rb[i]):
            r.num_computed_tokens = 0
        self.running.remove(i)
        self.waiting.append(i)

    def finish(self, i: int) -> None:
        self.a.free(self.ra[i])
        self.b.free(self.rb[i])
        self.running.remove(i)


ops = st.lists(
    st.tuples(
        st.sampled_from(["admit", "step", "preempt", "finish"]), st.integers(0, 1000), st.integers(1, 300)
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=ops,
    caching=st.booleans(),
    bs=st.sampled_from([4, 16]),
    blocks=st.integers(3, 60),
    seed=st.integers(0, 10**6),
)
def test_counting_cache_makes_the_reference_decisions(ops, caching, bs, blocks, seed):
    import random

    rng = random.Random(seed)
    reqs = []
    for i in range(12):
        r = Request(i, 0.0, rng.randint(1, 200), rng.randint(1, 40))
        kind = rng.random()
        if kind < 0.4:
            r.prefix_group, r.prefix_len = rng.randint(0, 2), rng.choice([16, 64, 128])
        elif kind < 0.7:
            r.hash_ids = tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 4)))
            r.hash_block_tokens = 32
        reqs.append(r)
    w = Lockstep(blocks, bs, caching, reqs)
    for op, k, chunk in ops:
        if op == "admit" and w.waiting:
            w.admit(w.waiting[k % len(w.waiting)], chunk)
        elif op == "step" and w.running:
            w.step(w.running[k % len(w.running)], chunk)
        elif op == "preempt" and w.running:
            w.preempt(w.running[k % len(w.running)])
        elif op == "finish" and w.running:
            w.finish(w.running[k % len(w.running)])
        w.check()


def test_own_blocks_survive_a_preemption_until_reused():
    """A preempted request hits its own freed blocks; pops take the chain's tail first."""
    w = Lockstep(11, 16, True, [Request(0, 0.0, 100, 10), Request(1, 0.0, 120, 10)])
    w.admit(0, 200)  # 7 blocks, 6 full ones hashed (unique content)
    assert w.b.num_held(w.rb[0]) == 7
    w.preempt(0)  # 1 partial block to the front, 6 own blocks to the back
    assert w.b.free_queue_layout() == [("anon", 4), ("own:0", 6)]
    w.admit(1, 48)  # a 48-token chunk: 3 blocks from the front run
    assert w.b.free_queue_layout() == [("anon", 1), ("own:0", 6)]
    w.check()
    hb, nb = w.b.get_computed_blocks(w.rb[0])
    assert (hb.own, nb) == (6, 96)
    w.step(1, 60)  # 4 more blocks for request 1: 1 anonymous, then 3 own
    assert w.b.free_queue_layout() == [("own:0", 3)]
    ha, na = w.a.get_computed_blocks(w.ra[0])
    hb, nb = w.b.get_computed_blocks(w.rb[0])
    assert na == nb == 48  # chain blocks 0-2 survive; 3-5 were reused
    w.check()
