"""A buddy allocator of KV blocks: the contiguous memory of the vLLM paper's Orca baselines.

The vLLM paper (Kwon et al., SOSP'23, Sec. 6.1) re-implements Orca with "the buddy
allocation algorithm to determine the memory address to store KV cache"; its artifact
(sosp-ae-39/sosp-ae-astra, ``orca/cacheflow/master/block_manager.py``: ``BuddyAllocator``
and ``BuddyBlockSpaceManager``) is what this models, operation for operation:

* the cache's blocks are carved at start, left to right, into free chunks of the largest
  power of two that fits, halving when the next one does not (981 blocks with chunks of at
  most 128: 7 x 128, 64, 16, 4, 1);
* a request's reservation is rounded up to a power of two of blocks (internal
  fragmentation) and takes the most recently freed chunk of that size, else splits the
  smallest larger one (its upper halves go to the free lists);
* a freed chunk merges with its buddy (``start ^ size``) while the buddy is free and of
  the same size, up to the largest chunk.

A reservation fails when no free chunk is large enough, however many blocks are free in
smaller chunks (external fragmentation).

    blocks  0 ........ 127 128 ....... 255  ...  896 ... 959 960 .. 975 976 979 980
    chunks  [    128      ][     128     ]  ...  [   64    ][  16    ][ 4 ][1]
"""

from __future__ import annotations


class BuddyAllocator:
    """Power-of-two chunks of ``num_blocks`` blocks, none larger than ``max_chunk`` blocks."""

    __slots__ = ("max_chunk", "free_starts", "chunk_size", "num_free_blocks")

    def __init__(self, num_blocks: int, max_chunk: int) -> None:
        if max_chunk < 1 or max_chunk & (max_chunk - 1):
            raise ValueError(f"max_chunk must be a power of two, got {max_chunk}")
        self.max_chunk = max_chunk
        #: size -> starts of the free chunks of that size (the last is taken first).
        self.free_starts: dict[int, list[int]] = {}
        #: start -> size of every chunk, free or held.
        self.chunk_size: dict[int, int] = {}
        start, size = 0, max_chunk
        while size >= 1:
            starts = self.free_starts.setdefault(size, [])
            while start + size <= num_blocks:
                starts.append(start)
                self.chunk_size[start] = size
                start += size
            size //= 2
        self.num_free_blocks = start

    @property
    def largest_free(self) -> int:
        """The size of the largest free chunk (0 if none)."""
        return max((s for s, starts in self.free_starts.items() if starts), default=0)

    @staticmethod
    def chunk_for(num_blocks: int) -> int:
        """The chunk a reservation of ``num_blocks`` blocks takes: the next power of two."""
        return 1 << max(num_blocks - 1, 0).bit_length()

    def can_allocate(self, num_blocks: int) -> bool:
        size = self.chunk_for(num_blocks)
        return size <= self.max_chunk and any(self.free_starts.get(s) for s in self._sizes_from(size))

    def allocate(self, num_blocks: int) -> int | None:
        """Take a chunk for ``num_blocks`` blocks; its start block, or None (and no change)."""
        size = self.chunk_for(num_blocks)
        if size > self.max_chunk:
            return None
        for s in self._sizes_from(size):
            starts = self.free_starts.get(s)
            if starts:
                start = starts.pop()
                while s > size:  # split: the upper half stays free
                    s //= 2
                    self.free_starts[s].append(start + s)
                    self.chunk_size[start + s] = s
                self.chunk_size[start] = size
                self.num_free_blocks -= size
                return start
        return None

    def free(self, start: int) -> None:
        """Return the chunk at ``start``, merged with its free buddies."""
        size = self.chunk_size.pop(start)
        self.num_free_blocks += size
        while size < self.max_chunk:
            buddy = start ^ size
            starts = self.free_starts[size]
            if self.chunk_size.get(buddy) != size or buddy not in starts:
                break
            starts.remove(buddy)
            del self.chunk_size[buddy]
            size *= 2
            start = min(start, buddy)
        self.free_starts[size].append(start)
        self.chunk_size[start] = size

    def _sizes_from(self, size: int) -> list[int]:
        """``size``, 2 x size, ... up to the largest chunk."""
        return [1 << e for e in range(size.bit_length() - 1, self.max_chunk.bit_length())]
