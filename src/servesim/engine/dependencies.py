"""Requests released by the finish of others (``Workload.after``): session turns after the
previous answer and a think time, agent calls after their predecessors and tool waits.

The mechanism is the closed-loop clients' (``arrivals.ClosedLoopFeeder``): the engine calls
``on_request_done`` at each finish; a request is sent (its recorded arrival is that
instant) when its last predecessor is done and the edge's delay has passed. A rejected
request counts as done at once, as a failed call returns to its caller.
"""

from __future__ import annotations

from collections.abc import Callable

from servesim.engine.arrivals import iter_requests
from servesim.engine.events import ARRIVAL, EventLoop
from servesim.engine.request import ReqStatus, Request
from servesim.workload.base import Workload


class DependencyFeeder:
    """Sends roots at their arrival, every other request when its predecessors are done."""

    def __init__(
        self,
        wl: Workload,
        loop: EventLoop,
        deliver: Callable[[Request], None],
        on_reject: Callable[[Request, str], None],
        rejection: Callable[[Request], str],
    ) -> None:
        dep = wl.after
        if dep is None:
            raise ValueError("DependencyFeeder needs a workload with dependencies (Workload.after)")
        self.loop = loop
        self.deliver = deliver
        self.on_reject = on_reject
        self.rejection = rejection
        self.num_rejected = 0
        self.num_in_flight = 0
        self.peak_in_flight = 0
        self._reqs = list(iter_requests(wl))
        self._waiting_on: list[int] = dep.num_preds.tolist()
        self._release_at: list[float] = wl.arrival_s.tolist()
        self._succ_start: list[int] = dep.succ_start.tolist()
        self._succ: list[int] = dep.succ.tolist()
        self._delay: list[float] = dep.delay_s.tolist()

    def start(self) -> None:
        for i, r in enumerate(self._reqs):
            if self._waiting_on[i] == 0:
                self.loop.at(r.arrival_s, self._on_release, r, ARRIVAL)

    def on_request_done(self, r: Request) -> None:
        """``r`` finished (or was rejected) now: release its successors."""
        i = r.idx
        if i >= len(self._reqs):  # a forked sample of a parallel-sampling request
            return
        if r.status != ReqStatus.REJECTED:
            self.num_in_flight -= 1
        now = self.loop.now
        for e in range(self._succ_start[i], self._succ_start[i + 1]):
            j = self._succ[e]
            at = now + self._delay[e]
            if at > self._release_at[j]:
                self._release_at[j] = at
            self._waiting_on[j] -= 1
            if self._waiting_on[j] == 0:
                self.loop.at(self._release_at[j], self._on_release, self._reqs[j], ARRIVAL)

    def _on_release(self, r: Request) -> None:
        r.arrival_s = self.loop.now
        why = self.rejection(r)
        if why:
            r.status = ReqStatus.REJECTED
            self.num_rejected += 1
            self.on_reject(r, why)
            self.on_request_done(r)
            return
        self.num_in_flight += 1
        if self.num_in_flight > self.peak_in_flight:
            self.peak_in_flight = self.num_in_flight
        self.deliver(r)
