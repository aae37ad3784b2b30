"""What priority scheduling and swap preemption add to the token-budget loop.

* ``PriorityWaiting``: vLLM V1's ``PriorityRequestQueue`` (``v1/core/sched/request_queue.py``):
  the waiting queue ordered by ``(priority, arrival_time)``, lower first. A preempted
  request goes back to its place in that order, not to the front. It offers the few deque
  operations the schedulers use (``[0]``, ``popleft``, ``append``, ``appendleft``), so the
  FCFS code paths run unchanged on it.
* ``SwapSpace``: vLLM V0's swap preemption (``BlockSpaceManager.swap_out``/``swap_in``,
  ``--swap-space`` GiB of pinned host memory per GPU, default 4). A swapped-out request keeps
  its computed tokens; its KV blocks are copied to the host (freeing the GPU blocks) and
  copied back when it is admitted again. The copies cost ``bytes / pcie bandwidth``, charged
  to the step that makes them (``BatchStats.swap_bytes``). When the host space is full the
  victim is recomputed instead (vLLM V0 aborts with "lack of CPU swap space"; a simulator
  that keeps running is more useful).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from servesim.engine.request import Request


class PriorityWaiting:
    """Waiting requests sorted by (priority, arrival_s, idx); idx breaks ties deterministically."""

    __slots__ = ("_keys", "_reqs")

    def __init__(self) -> None:
        self._keys: list[tuple[int, float, int]] = []
        self._reqs: list[Request] = []

    def append(self, req: Request) -> None:
        key = (req.priority, req.arrival_s, req.idx)
        i = bisect.bisect(self._keys, key)
        self._keys.insert(i, key)
        self._reqs.insert(i, req)

    appendleft = append  # a preempted request returns to its (priority, arrival) place

    def popleft(self) -> Request:
        self._keys.pop(0)
        return self._reqs.pop(0)

    def remove(self, req: Request) -> None:
        i = next(k for k, r in enumerate(self._reqs) if r is req)
        del self._keys[i], self._reqs[i]

    def __getitem__(self, i: int) -> Request:
        return self._reqs[i]

    def __len__(self) -> int:
        return len(self._reqs)

    def __bool__(self) -> bool:
        return bool(self._reqs)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._reqs)


class SwapSpace:
    """Host blocks held by swapped-out requests (counts only: the host has no prefix cache)."""

    __slots__ = ("num_host_blocks", "kv_bytes_per_block", "num_used", "held")

    def __init__(self, num_host_blocks: int, kv_bytes_per_block: float) -> None:
        self.num_host_blocks = num_host_blocks
        self.kv_bytes_per_block = kv_bytes_per_block
        self.num_used = 0
        self.held: dict[int, int] = {}  # request idx -> blocks on the host

    def can_swap_out(self, num_blocks: int) -> bool:
        return self.num_used + num_blocks <= self.num_host_blocks

    def swap_out(self, req: Request, num_blocks: int) -> float:
        """Record ``req``'s blocks on the host; returns the bytes copied."""
        self.held[req.idx] = num_blocks
        self.num_used += num_blocks
        return num_blocks * self.kv_bytes_per_block

    def holds(self, req: Request) -> bool:
        return req.idx in self.held

    def swap_in(self, req: Request) -> float:
        """Release ``req``'s host blocks; returns the bytes copied back."""
        n = self.held.pop(req.idx)
        self.num_used -= n
        return n * self.kv_bytes_per_block
