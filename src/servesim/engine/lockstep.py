"""vLLM's data-parallel ranks of an MoE model, stepping in lockstep.

With ``--data-parallel-size N`` and an MoE model, vLLM (V1, 0.10-0.19) runs N engine
cores, each with its own scheduler and KV cache, whose expert layers exchange tokens every
layer. Every forward pass is therefore collective: the ranks agree on each step's token
count (``coordinate_batch_across_dp`` pads every rank's batch to the largest), a rank with
no request runs a dummy batch so that the others' collectives complete
(``DPEngineCoreProc``'s ``execute_dummy_batch``), and the next step starts when all have
finished. A ``LockstepGroup`` does that to the replicas of one server: a step starts on
every rank at once, each schedules its own batch, and all last as long as the slowest
rank's step (each timed by a perf model whose expert layers see ``dp`` times the rank's
tokens, ``perf.kernel_model``); an idle rank waits the step out.

Simplifications: the group steps only while some rank has work (vLLM's ranks run dummy
batches until every rank's "wave" has ended, which delays nobody's request); pure-decode
runs are stepped one by one (no skip-ahead), since every rank's step ends with the group's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from servesim.engine.events import WAKE, EventLoop


class Rank(Protocol):
    """What the group needs of a rank (``engine.replica.Replica``)."""

    group: Any
    skip_ahead: bool
    busy: bool
    failed: bool

    def plan_step(self) -> Any: ...

    def launch_step(self, out: Any, gpu_s: float, dt: float) -> None: ...

    def idle_step(self, dt: float) -> None: ...


class LockstepGroup:
    """The DP ranks of one server; each ``Replica`` of it has ``group`` set to this."""

    def __init__(self, loop: EventLoop, ranks: Sequence[Rank]) -> None:
        self.loop = loop
        self.ranks: list[Rank] = list(ranks)
        self.in_flight = 0  # ranks whose part of the current step has not ended
        self.start_pending = False
        for r in ranks:
            r.group = self
            r.skip_ahead = False

    def wake(self) -> None:
        """A rank has work (an arrival): start a step now unless one is in flight."""
        if self.in_flight == 0 and not self.start_pending:
            self.start_pending = True
            self.loop.at(self.loop.now, self._start, None, WAKE)

    def rank_done(self) -> None:
        """One rank's part of the step ended; the last one starts the next step (after the
        arrivals of this instant, as a lone engine does)."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self.wake()

    def _start(self, _: object) -> None:
        self.start_pending = False
        if self.in_flight:
            return
        plans = [None if r.failed else r.plan_step() for r in self.ranks]
        if all(p is None for p in plans):
            for r in self.ranks:
                r.busy = False
            return
        dt = max(p[2] for p in plans if p is not None)
        self.in_flight = len(self.ranks)
        for r, p in zip(self.ranks, plans):
            if p is None:
                r.idle_step(dt)
            else:
                r.launch_step(p[0], p[1], dt)
