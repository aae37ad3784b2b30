"""The lower tiers of KV offload (``engine/kv_offload.py``): offloaded blocks by key, evicted
LRU (vLLM's ``LRUOffloadingManager``, LMCache's CPU and disk backends) or by ARC (vLLM's
``ARCOffloadingManager``), from vLLM 0.11-0.14's ``v1/kv_offload/lru_manager.py`` and
``arc_manager.py``.

A tier only keeps its blocks' state: which are stored, which are ready (hittable and
evictable), which loads read them. When copies start and end is the scheduler's
(``OffloadScheduler``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

INF = float("inf")


@dataclass(slots=True)
class TierBlock:
    """One offloaded block's state (vLLM's ``BlockStatus``): loads reading it, and when it is ready."""

    ref_cnt: int = 0
    ready_s: float = INF  # hittable and evictable from then on (INF: store not complete)


class LRUTier:
    """One lower tier: blocks by key in LRU order (vLLM's ``LRUOffloadingManager``).

    ``blocks`` runs from least to most recently used. A block can be evicted when it is
    ready and no load reads it; ``prepare_store`` evicts from the front.
    """

    __slots__ = ("name", "num_blocks", "blocks", "num_evictions")

    def __init__(self, name: str, num_blocks: int) -> None:
        self.name = name
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[int, TierBlock] = OrderedDict()
        self.num_evictions = 0

    def lookup(self, keys: list[int], now: float) -> int:
        """How many of ``keys``, from the first, are stored and ready."""
        n = 0
        for k in keys:
            b = self.blocks.get(k)
            if b is None or b.ready_s > now:
                break
            n += 1
        return n

    def touch(self, keys: list[int], now: float) -> None:
        """Make ``keys`` the most recent, the first of them most of all."""
        move_to_end = self.blocks.move_to_end  # a store touches the request's whole chain: hot
        for k in reversed(keys):
            try:
                move_to_end(k)
            except KeyError:  # not stored here
                pass

    def prepare_store(self, keys: list[int], now: float) -> list[int] | None:
        """Room for the ``keys`` not yet stored, evicting LRU; the keys to copy, or None
        (nothing changed) when too few blocks can be evicted."""
        blocks = self.blocks
        new = [k for k in keys if k not in blocks]
        num_evict = len(blocks) + len(new) - self.num_blocks
        if num_evict > 0:
            victims = []
            for k, b in blocks.items():
                if b.ref_cnt == 0 and b.ready_s <= now:
                    victims.append(k)
                    if len(victims) == num_evict:
                        break
            else:
                return None
            for k in victims:
                del blocks[k]
            self.num_evictions += len(victims)
        for k in new:
            blocks[k] = TierBlock()
        return new

    def mark_ready(self, keys: list[int], at_s: float) -> None:
        """The stores of ``keys`` complete at ``at_s`` (blocks evicted meanwhile are skipped)."""
        for k in keys:
            b = self.blocks.get(k)
            if b is not None and b.ready_s == INF:
                b.ready_s = at_s

    def add_ref(self, keys: list[int], delta: int) -> None:
        """A load starts (+1) or ends (-1) reading ``keys`` (``prepare_load``/``complete_load``)."""
        for k in keys:
            b = self.blocks.get(k)
            if b is not None:
                b.ref_cnt += delta


class ARCTier(LRUTier):
    """vLLM's ``ARCOffloadingManager`` (``v1/kv_offload/arc_manager.py``, chosen with
    ``eviction_policy: arc`` in the connector's extra config): new blocks enter T1, a ready
    block touched again moves to T2; eviction takes T1's oldest evictable block while T1
    holds at least its adaptive target, else T2's; the evicted keys are remembered in the
    ghost lists B1/B2 (each at most the capacity), and a touch of a ghost moves the target
    toward the list it came from. As in vLLM, a store that runs out of evictable blocks
    midway keeps the evictions it made.

    ``blocks`` holds T1 and T2 together (lookups, loads, readiness); ``t1``/``t2`` keep
    their orders.
    """

    __slots__ = ("t1", "t2", "b1", "b2", "target_t1")

    def __init__(self, name: str, num_blocks: int) -> None:
        LRUTier.__init__(self, name, num_blocks)
        self.t1: OrderedDict[int, TierBlock] = OrderedDict()
        self.t2: OrderedDict[int, TierBlock] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.target_t1 = 0

    def touch(self, keys: list[int], now: float) -> None:
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        for k in reversed(keys):
            if k in t1:
                b = t1.pop(k)
                if b.ready_s > now:  # just offered for storing: not a second use
                    t1[k] = b
                else:
                    t2[k] = b
            elif k in t2:
                t2.move_to_end(k)
            elif k in b1:
                delta = max(1, len(b2) // len(b1))
                self.target_t1 = min(self.target_t1 + delta, self.num_blocks)
            elif k in b2:
                delta = max(1, len(b1) // len(b2))
                self.target_t1 = max(self.target_t1 - delta, 0)

    def prepare_store(self, keys: list[int], now: float) -> list[int] | None:
        blocks = self.blocks
        new = [k for k in keys if k not in blocks]
        if not new:
            return new
        num_evict = len(blocks) + len(new) - self.num_blocks
        while num_evict > 0:
            victim = -1
            tier, ghosts = self.t1, self.b1
            if len(self.t1) >= self.target_t1:
                victim = _oldest_evictable(self.t1, now)
            if victim < 0:
                tier, ghosts = self.t2, self.b2
                victim = _oldest_evictable(self.t2, now)
                if victim < 0:
                    return None
            del tier[victim]
            del blocks[victim]
            ghosts[victim] = None
            self.num_evictions += 1
            num_evict -= 1
        for ghosts in (self.b1, self.b2):
            while len(ghosts) > self.num_blocks:
                ghosts.popitem(last=False)
        for k in new:
            b = blocks[k] = TierBlock()
            self.t1[k] = b
            self.b1.pop(k, None)
            self.b2.pop(k, None)
        return new


def _oldest_evictable(tier: OrderedDict[int, TierBlock], now: float) -> int:
    """The key of ``tier``'s oldest block that is ready and no load reads (-1: none)."""
    for k, b in tier.items():
        if b.ref_cnt == 0 and b.ready_s <= now:
            return k
    return -1


TIERS: dict[str, type[LRUTier]] = {"lru": LRUTier, "arc": ARCTier}
