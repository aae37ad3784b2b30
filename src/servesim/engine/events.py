"""The event loop: a heap of plain tuples.

``(time, priority, seq, callback, arg)``: ``seq`` comes from a per-loop counter so events
at the same time and priority run in the order they were scheduled, which makes every
run deterministic. Priorities are defined once here (lower runs first at equal time):
an arrival at the same instant as a batch completion is seen by the schedule that the
completion triggers, as in a real engine whose input queue is drained before each step.

**Quiet events.** A replica's run of decode steps (``engine/decode_runs.py``) must end
before the next event that could give it a request. In a cluster most pending events are
other replicas' step ends, which give nobody a request; a replica whose step ends (and
wakes) cannot route a request anywhere schedules them with ``at_quiet``, and runs are
bounded by ``next_loud_time``, the next event that is not quiet (an arrival, a KV
transfer, a control tick, a failure, any other replica's step end). Every event is loud
unless scheduled quiet, so with no quiet events ``next_loud_time`` is ``next_time``.
The loud events are a subset of the heap kept in a second heap of ``(time, priority,
seq)``; both pop in the same order, so the loud heap's top is dropped when the main loop
pops the event with its ``seq``. Until the first quiet event every event is loud and the
second heap is not kept (a lone replica never has one): the first ``at_quiet`` makes it of
the pending events, in the main heap's order, which is a heap's.

**Cancelling.** ``at`` and ``at_quiet`` return the event's ``seq``; ``cancel(seq)`` takes a
pending event out of both heaps (a replica whose run of decode steps was cut short moves
its step end earlier: ``Replica.cut_run``). It scans the heap, which holds a few events
per replica, and the pop order stays that of the (time, priority, seq) keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from math import inf
from typing import Any, Final

ARRIVAL: Final = 0
BATCH_DONE: Final = 1
WAKE: Final = 2

# Final: compiled, a C static (a module's attribute would be looked up by name each call)
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop


class EventLoop:
    """Discrete-event loop owned by one simulation (no global state)."""

    __slots__ = ("now", "_heap", "_seq", "_loud", "_all_loud")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self._loud: list[tuple[float, int, int]] = []  # the events not scheduled quiet
        self._all_loud = True  # no event was ever scheduled quiet: ``_loud`` is not kept

    def at(self, time: float, callback: Callable[[Any], None], arg: Any = None, priority: int = WAKE) -> int:
        """Run ``callback(arg)`` at ``time`` (never earlier than now); returns its ``seq``."""
        if time < self.now:
            raise ValueError(f"event at {time} is before now ({self.now})")
        self._seq += 1
        _heappush(self._heap, (time, priority, self._seq, callback, arg))
        if not self._all_loud:
            _heappush(self._loud, (time, priority, self._seq))
        return self._seq

    def at_quiet(
        self, time: float, callback: Callable[[Any], None], arg: Any = None, priority: int = WAKE
    ) -> int:
        """``at`` for an event that gives no replica a request, now or later (see the module
        docstring): it does not bound ``next_loud_time``."""
        if time < self.now:
            raise ValueError(f"event at {time} is before now ({self.now})")
        if self._all_loud:  # the loud heap from now on: the pending events, a heap already
            self._all_loud = False
            self._loud.extend([(t, p, s) for t, p, s, _, _ in self._heap])
        self._seq += 1
        _heappush(self._heap, (time, priority, self._seq, callback, arg))
        return self._seq

    def cancel(self, seq: int) -> bool:
        """Take the pending event ``seq`` out of the loop; False when none is pending."""
        heap = self._heap
        for i in range(len(heap)):
            if heap[i][2] == seq:
                heap[i] = heap[-1]
                heap.pop()
                heapq.heapify(heap)
                loud = self._loud
                for j in range(len(loud)):
                    if loud[j][2] == seq:
                        loud[j] = loud[-1]
                        loud.pop()
                        heapq.heapify(loud)
                        break
                return True
        return False

    def __len__(self) -> int:
        return len(self._heap)

    def next_time(self) -> float:
        """Time of the next pending event (inf when none)."""
        return self._heap[0][0] if self._heap else inf

    def next_loud_time(self) -> float:
        """Time of the next pending event not scheduled quiet (inf when none)."""
        if self._all_loud:
            return self._heap[0][0] if self._heap else inf
        return self._loud[0][0] if self._loud else inf

    def run(self, until: float = inf) -> float:
        """Process events in order until none are left or the next is past ``until``."""
        heap = self._heap
        loud = self._loud
        pop = _heappop
        while heap:
            if heap[0][0] > until:
                break
            t, _, seq, cb, arg = pop(heap)
            if loud and loud[0][2] == seq:
                pop(loud)
            self.now = t
            cb(arg)
        return self.now
