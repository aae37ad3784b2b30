"""The free queue of the counting KV cache (``kv_counting.py``): runs of anonymous blocks
and cached blocks, in the reference's queue order.

``KVCacheManager``'s free queue holds one node per block. Here a node is either a
``CachedBlock`` (a free block whose shareable content another request can still hit) or a
``Run`` of ``count`` anonymous blocks in a row, so that freeing or taking ``n`` anonymous
blocks is O(1) instead of O(n)::

    head -> Run(5) -> Cached#h1 -> Cached#h2 -> Run(3, owner=7, k0=2) -> Run(4) -> tail
            reused first                       request 7's own blocks    evicted last

Blocks are taken from the head; a ``CachedBlock`` taken loses its content (it leaves the
hash index), and an owner's ``Run`` taken whole stops being hittable by its owner. The
queue does not count its blocks: ``CountingKVCache.num_free_blocks`` does, since the
schedulers read it on every step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False, init=False)
class CachedBlock:
    """A block with shareable content (in the hash index while it is cached)."""

    block_id: int
    block_hash: int
    ref_cnt: int
    prev: CachedBlock | Run | None  # free-queue links (None while held)
    next: CachedBlock | Run | None

    def __init__(self, block_id: int, block_hash: int, ref_cnt: int = 0) -> None:
        self.block_id = block_id
        self.block_hash = block_hash
        self.ref_cnt = ref_cnt
        self.prev = self.next = None


@dataclass(slots=True, eq=False, init=False)
class Run:
    """``count`` free anonymous blocks in a row; with ``owner``, that request's chain blocks
    ``[k0, k0 + count)`` (queue order: tail first), which only it can hit."""

    count: int
    owner: int
    k0: int
    prev: CachedBlock | Run | None
    next: CachedBlock | Run | None

    def __init__(self, count: int = 0, owner: int = -1, k0: int = 0) -> None:
        self.count = count
        self.owner = owner
        self.k0 = k0
        self.prev = self.next = None


class FreeRunQueue:
    """A doubly linked list of ``Run`` and ``CachedBlock`` nodes between two sentinels.

    ``cached`` (hash -> {block id: block}) and ``own_runs`` (owner idx -> its run) are the
    counting cache's indexes, which taking blocks off the head updates (evictions).
    """

    def __init__(
        self, num_blocks: int, cached: dict[int, dict[int, CachedBlock]], own_runs: dict[int, Run]
    ) -> None:
        self.head = Run()
        self.tail = Run()
        self.head.next = self.tail
        self.tail.prev = self.head
        self.cached = cached
        self.own_runs = own_runs
        self.link_after(self.head, Run(num_blocks))

    @staticmethod
    def link_after(node: CachedBlock | Run, new: CachedBlock | Run) -> None:
        nxt = node.next
        new.prev = node
        new.next = nxt
        node.next = new
        nxt.prev = new  # type: ignore[union-attr]

    @staticmethod
    def unlink(node: CachedBlock | Run) -> None:
        prev, nxt = node.prev, node.next
        prev.next = nxt  # type: ignore[union-attr]
        nxt.prev = prev  # type: ignore[union-attr]
        node.prev = node.next = None

    def push_front(self, n: int) -> None:
        """``n`` anonymous blocks at the head (reused first), merged into a head run."""
        first = self.head.next
        if type(first) is Run and first.owner < 0 and first is not self.tail:
            first.count += n
        else:
            self.link_after(self.head, Run(n))

    def push_back(self, n: int) -> None:
        """``n`` anonymous blocks at the tail (evicted last), merged into a tail run."""
        last = self.tail.prev
        if type(last) is Run and last.owner < 0 and last is not self.head:
            last.count += n
        else:
            self.link_after(last, Run(n))  # type: ignore[arg-type]

    def append(self, node: CachedBlock | Run) -> None:
        """``node`` (a cached block or an owner's run) at the tail."""
        self.link_after(self.tail.prev, node)  # type: ignore[arg-type]

    def pop(self, n: int) -> None:
        """Take ``n`` blocks off the head, evicting the cached content among them."""
        node = self.head.next
        while n:
            if type(node) is Run:
                if node.count > n:
                    node.count -= n
                    return
                n -= node.count
                nxt = node.next
                self.unlink(node)
                if node.owner >= 0:
                    self.own_runs.pop(node.owner, None)
                node = nxt
            else:
                assert isinstance(node, CachedBlock)
                nxt = node.next
                self.unlink(node)
                self.unindex(node)
                n -= 1
                node = nxt

    def unindex(self, b: CachedBlock) -> None:
        """``b``'s content is gone: take it out of the hash index."""
        entry = self.cached.get(b.block_hash)
        if entry is not None:
            entry.pop(b.block_id, None)
            if not entry:
                del self.cached[b.block_hash]

    # ----------------------------------------------------------------- checks

    def layout(self) -> list[tuple[str, int]]:
        """The queue as (kind, count) pairs: ("anon", n), ("own:<idx>", n), ("hash", 1)."""
        out = []
        node = self.head.next
        while node is not self.tail:
            if type(node) is Run:
                out.append(("anon" if node.owner < 0 else f"own:{node.owner}", node.count))
            else:
                out.append(("hash", 1))
            node = node.next  # type: ignore[union-attr]
        return out

    def num_blocks(self) -> int:
        """The blocks in the queue, counted node by node (checking each node on the way)."""
        free = 0
        node = self.head.next
        while node is not self.tail:
            if type(node) is Run:
                assert node.count > 0
                if node.owner >= 0:
                    assert self.own_runs.get(node.owner) is node
                free += node.count
            else:
                assert node.ref_cnt == 0  # type: ignore[union-attr]
                free += 1
            node = node.next  # type: ignore[union-attr]
        return free
