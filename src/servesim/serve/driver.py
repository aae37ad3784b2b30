"""A live simulation: requests enter a running cluster as they come, paced by the wall clock.

The simulated clock is ``(wall time since start) x speed``. The driver runs the cluster's
ordinary ``EventLoop`` up to "now", sleeps until the next pending event (or until a request
arrives), and repeats; nothing of the scheduler is copied here::

    submit(reqs) --at sim now--> cluster.on_arrival --route--> replica.on_arrival
    loop.run(until=sim now) --> step ends --> each stream gets its new tokens (tick)

A token is released to its client when the simulated time of the end of the step that
produced it is reached, so a client sees the simulated TTFT and inter-token gaps plus the
HTTP path's own latency.

Every scenario runs as a ``Cluster`` (``deployment.as_cluster``, as ``simulate`` runs it): a
scenario without a ``cluster`` section is one colocated pool of one replica (routing to a
single replica adds nothing). Replicas use the
step-by-step V1 scheduler (``run.reference``; the lazy engine's runs of decode steps jump
ahead to the next *known* event, and live arrivals are not known ahead), or the policy's
own class; ``tests/test_differential.py`` holds the two V1 engines to the same decisions.

A client that goes away aborts its request between two steps, as vLLM's engine core does
(``Scheduler.abort_request`` frees its KV blocks); a request on a KV link between a prefill
and a decode replica is aborted when it lands.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servesim.cluster.cluster import Cluster, PoolSpec
from servesim.config import ClusterConfig
from servesim.engine.events import ARRIVAL, EventLoop
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request
from servesim.metrics.records import RequestRecords
from servesim.workload.base import Workload

#: The driver sleeps at most this long (wall seconds) between two looks at the clock.
MAX_SLEEP_S = 0.5
#: The driver's timer is set this much early and the rest slept precisely (see ``LiveSim._sleep``).
TIMER_SLACK_S = 0.0015


@dataclass(slots=True, eq=False)
class Stream:
    """One choice of one API request: its engine request and what its client has had."""

    req: Request
    index: int  # the choice's index in the response
    num_sent: int = 0
    arrival_s: float = 0.0  # simulated
    last_token_s: float = -1.0  # simulated time of the last token released
    done: bool = False


@dataclass(slots=True, eq=False)
class Handle:
    """One API request: its choices and where their tokens go (an asyncio queue)."""

    streams: list[Stream]
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)  # (stream, new tokens, done)
    num_done: int = 0


class LiveCluster(Cluster):
    """A cluster whose finished requests go to a callback instead of record columns."""

    def __init__(
        self,
        loop: EventLoop,
        pools: list[PoolSpec],
        cfg: ClusterConfig,
        seed: int,
        workload: Workload,
        on_done: Callable[[Request], None],
    ) -> None:
        super().__init__(loop, pools, cfg, RequestRecords.empty(0), seed, record_steps=False, wl=workload)
        self.notify_done = on_done
        self.aborting: dict[int, Request] = {}  # idx -> request whose client went away
        for rep in self.replicas:
            rep.on_step_end = self._step_end_hook(rep.on_step_end)

    def _step_end_hook(self, then: Callable[[Replica], None] | None) -> Callable[[Replica], None]:
        def at_step_end(rep: Replica) -> None:
            self.apply_aborts(rep.id)
            if then is not None:
                then(rep)

        return at_step_end

    def _done(self, req: Request) -> None:
        self.live.pop(req.idx, None)
        self.num_done += 1
        self.notify_done(req)

    def on_finish(self, req: Request) -> None:
        if self.aborting.pop(req.idx, None) is not None:  # finished in the step it was aborted in
            self._drop(req)
            return
        super().on_finish(req)

    def abort(self, req: Request) -> None:
        """Abort ``req`` now if its replica is between steps, else at its next step end."""
        if req.idx not in self.live and req.status != ReqStatus.WAITING:
            return  # done already (a request not yet arrived is waiting, and not live)
        self.aborting[req.idx] = req
        rep = self.replicas[req.replica]
        if not rep.busy:
            self.apply_aborts(rep.id)

    def apply_aborts(self, replica_id: int | None = None) -> None:
        """Abort the pending requests held by ``replica_id`` (None: by any idle replica)."""
        for idx, req in list(self.aborting.items()):
            rep = self.replicas[req.replica]
            if (replica_id is None and rep.busy) or (replica_id is not None and rep.id != replica_id):
                continue
            if rep.scheduler.abort_request(req):  # False: on a KV link, or not yet queued
                del self.aborting[idx]
                self._drop(req)

    def _drop(self, req: Request) -> None:
        self.outstanding[req.replica] -= 1
        self.handoff.pop(req.idx, None)
        self.live.pop(req.idx, None)
        self.num_done += 1
        req.status = ReqStatus.REJECTED
        self.notify_done(req)


class LiveSim:
    """The live simulation behind the server: ``submit``, ``abort``, and ``run`` (a task)."""

    def __init__(
        self,
        pools: list[PoolSpec],
        cfg: ClusterConfig,
        *,
        speed: float = 1.0,
        seed: int = 0,
        workload: Workload | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self.loop = EventLoop()
        self.pools = pools
        self.cluster = LiveCluster(self.loop, pools, cfg, seed, workload or _empty_workload(), self._on_done)
        self.max_model_len = min(p.max_model_len for p in pools)
        self.vocab_size: int | None = None  # the model's (token ids are checked against it when set)
        self.handles: dict[int, Handle] = {}  # request idx -> its API request
        self.streams: dict[int, Stream] = {}
        self._next_idx = 0
        self._wall0 = time.perf_counter()
        self._waiter: asyncio.Future | None = None  # the driver's sleep, woken by _poke
        self._closed = False
        # Observers (the Prometheus metrics): per released token batch and per finish.
        self.on_tokens: Callable[[Stream, int, float], None] | None = None
        self.on_finished: Callable[[Stream], None] | None = None
        self.on_aborted: Callable[[Stream], None] | None = None  # per choice its client left unfinished

    # ----------------------------------------------------------------- clock

    def now(self) -> float:
        """Simulated seconds since the server started."""
        return (time.perf_counter() - self._wall0) * self.speed

    # ----------------------------------------------------------------- requests

    def rejection(self, num_prompt_tokens: int, max_tokens: int) -> str:
        """Why such a request can never be served ('' if it can)."""
        r = Request(-1, 0.0, num_prompt_tokens, max_tokens)
        return self.cluster.rejection(r)

    def submit(self, prompts: list[tuple[int, int]], max_tokens: int, n: int = 1) -> Handle:
        """Enter ``n`` samples of each prompt now; a prompt is (its token count, a key of its
        text). Equal keys share their full prompt blocks through prefix caching, which is
        also how vLLM V1 serves ``n``: it fans a request out into ``n`` independent ones.
        (Simplified: prompts share blocks only when they are equal, not by common prefix.)"""
        t = max(self.now(), self.loop.now)
        streams = []
        for p, (num_prompt, key) in enumerate(prompts):
            group = key & ((1 << 62) - 1)
            for i in range(n):
                req = Request(
                    self._next_idx, t, num_prompt, max_tokens, prefix_group=group, prefix_len=num_prompt
                )
                self._next_idx += 1
                streams.append(Stream(req, p * n + i, arrival_s=t))
        handle = Handle(streams)
        for s in streams:
            self.handles[s.req.idx] = handle
            self.streams[s.req.idx] = s
            self.loop.at(t, self.cluster.on_arrival, s.req, ARRIVAL)
        self._poke()
        return handle

    def abort(self, handle: Handle) -> None:
        """The client went away: abort every unfinished choice of ``handle``."""
        for s in handle.streams:
            if not s.done:
                self.cluster.abort(s.req)
                if self.on_aborted is not None:
                    self.on_aborted(s)
        self._forget(handle)
        self._poke()

    def _forget(self, handle: Handle) -> None:
        for s in handle.streams:
            self.handles.pop(s.req.idx, None)
            self.streams.pop(s.req.idx, None)

    def _on_done(self, req: Request) -> None:
        s = self.streams.get(req.idx)
        if s is not None and req.status != ReqStatus.REJECTED:
            self._release(s)
            s.done = True
            handle = self.handles[req.idx]
            handle.num_done += 1
            handle.queue.put_nowait((s, 0, True))
            if self.on_finished is not None:
                self.on_finished(s)
            if handle.num_done == len(handle.streams):
                self._forget(handle)

    def _release(self, s: Stream) -> None:
        """Give ``s`` the tokens its request has produced since the last look."""
        k = s.req.num_output_tokens - s.num_sent
        if k <= 0:
            return
        s.num_sent += k
        now = self.loop.now
        if self.on_tokens is not None:
            self.on_tokens(s, k, now)
        s.last_token_s = now
        self.handles[s.req.idx].queue.put_nowait((s, k, False))

    # ----------------------------------------------------------------- the loop

    def tick(self) -> None:
        """Run every event due by now, releasing tokens step end by step end."""
        loop = self.loop
        until = self.now()
        while loop.next_time() <= until:
            t = loop.next_time()
            loop.run(until=t)
            for s in list(self.streams.values()):
                if not s.done:
                    self._release(s)
        self.cluster.apply_aborts()
        self.cluster.itl.clear()  # the cluster's ITL samples: the server keeps its own

    async def run(self) -> None:
        """Drive the simulation until ``close``: tick, then sleep until the next event is due."""
        while not self._closed:
            self.tick()
            delay = (self.loop.next_time() - self.now()) / self.speed
            await self._sleep(min(delay, MAX_SLEEP_S))

    async def _sleep(self, delay_s: float) -> None:
        """Sleep ``delay_s`` wall seconds, or until ``_poke``.

        A plain future on a loop timer (``asyncio.wait_for`` would create a task per sleep and
        spend one more loop turn cancelling it). The selector waits whole milliseconds, rounded
        up (``selectors.EpollSelector``), which would release every step's tokens up to 1 ms
        late, 0.5 ms on average: so the timer is set ``TIMER_SLACK_S`` early and the rest is
        slept with ``time.sleep`` (precise to tens of microseconds; it holds the server's
        other connections for at most that remainder, which they would otherwise have waited
        for the timer's rounding anyway)."""
        if delay_s <= 0:
            await asyncio.sleep(0)  # let the connections run between two ticks
            return
        loop = asyncio.get_running_loop()
        due = time.perf_counter() + delay_s
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(max(0.0, delay_s - TIMER_SLACK_S), _wake_up, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        rest = due - time.perf_counter()
        if 0 < rest <= TIMER_SLACK_S and waiter.result() is _TIMER:
            time.sleep(rest)

    def close(self) -> None:
        self._closed = True
        self._poke()

    def _poke(self) -> None:
        """Wake the driver now (an arrival, an abort, ``close``)."""
        _wake_up(self._waiter, _POKED)


_TIMER, _POKED = "timer", "poked"


def _wake_up(waiter: asyncio.Future | None, why: str = _TIMER) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(why)


def _empty_workload() -> Workload:
    """No workload rows: the replicas' policy options see a workload of plain requests."""
    import numpy as np

    return Workload(
        arrival_s=np.zeros(0),
        num_prompt_tokens=np.zeros(0, np.int64),
        num_output_tokens=np.zeros(0, np.int64),
        source="live",
    )
