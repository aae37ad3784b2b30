"""The event loop: a heap of plain tuples.

``(time, priority, seq, callback, arg)``: ``seq`` comes from a per-loop counter so events
at the same time and priority run in the order they were scheduled, which makes every
run deterministic. Priorities are defined once here (lower runs first at equal time):
an arrival at the same instant as a batch completion is seen by the schedule that the
completion triggers, as in a real engine whose input queue is drained before each step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

ARRIVAL = 0
BATCH_DONE = 1
WAKE = 2


class EventLoop:
    """Discrete-event loop owned by one simulation (no global state)."""

    __slots__ = ("now", "_heap", "_seq")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, int, Callable[[Any], None], Any]] = []
        self._seq = 0

    def at(self, time: float, callback: Callable[[Any], None], arg: Any = None, priority: int = WAKE) -> None:
        """Run ``callback(arg)`` at ``time`` (never earlier than now)."""
        if time < self.now:
            raise ValueError(f"event at {time} is before now ({self.now})")
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, self._seq, callback, arg))

    def __len__(self) -> int:
        return len(self._heap)

    def next_time(self) -> float:
        """Time of the next pending event (inf when none)."""
        return self._heap[0][0] if self._heap else float("inf")

    def run(self, until: float = float("inf")) -> float:
        """Process events in order until none are left or the next is past ``until``."""
        heap = self._heap
        pop = heapq.heappop
        while heap:
            if heap[0][0] > until:
                break
            t, _, _, cb, arg = pop(heap)
            self.now = t
            cb(arg)
        return self.now
