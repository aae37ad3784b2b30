"""Requests created one by one at their arrival (compiled with the engine: see setup.py).

``ArrivalFeeder`` keeps one pending arrival at a time, so a run of millions of requests
never holds them all as objects. Requests that can never be served are handed to
``on_reject`` with the reason instead of being delivered.

``ClosedLoopFeeder`` sends a benchmark workload's requests as ``vllm bench serve``'s
clients do (``Workload.clients``): a request goes out when it is due and fewer than
``max_concurrency`` are in flight, so each finish sends the next one at that instant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from servesim.engine.events import ARRIVAL, EventLoop
from servesim.engine.request import ReqStatus, Request
from servesim.workload.base import Workload


def done_when_seen(loop: EventLoop, done: Callable[[Request], None], r: Request) -> None:
    """Tell a closed-loop client's ``done`` of ``r`` when the client sees its last token:
    at its streamed finish (``finished_s``, after now where the API server streams it,
    ``engine.frontend``), else now."""
    if r.finished_s > loop.now:
        loop.at(r.finished_s, done, r, ARRIVAL)
    else:
        done(r)


def iter_requests(wl: Workload, chunk: int = 1 << 16) -> Iterator[Request]:
    """The workload's requests, created one by one in arrival order. The columns are read
    ``chunk`` rows at a time: as Python lists whole, a run of ten million requests would
    hold about 100 bytes a request for its whole length."""
    n = len(wl)
    hash_ids = wl.hash_ids
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        arrival: list[float] = wl.arrival_s[start:end].tolist()
        prompt: list[int] = wl.num_prompt_tokens[start:end].tolist()
        output: list[int] = wl.num_output_tokens[start:end].tolist()
        prio: list[int] | None = wl.priority[start:end].tolist() if wl.priority is not None else None
        group: list[int] | None = wl.prefix_group[start:end].tolist() if wl.prefix_group is not None else None
        tenant: list[int] | None = wl.tenant[start:end].tolist() if wl.tenant is not None else None
        for j in range(end - start):
            r = Request(start + j, arrival[j], prompt[j], output[j])
            if prio is not None:
                r.priority = prio[j]
            if tenant is not None:
                r.tenant = tenant[j]
            if hash_ids is not None:
                r.hash_ids = hash_ids[start + j]
                r.hash_block_tokens = wl.hash_block_tokens
            if group is not None and group[j] >= 0:
                r.prefix_group = group[j]
                r.prefix_len = wl.prefix_len
            yield r


def rejection_reason(r: Request, max_model_len: int, usable_tokens: int) -> str:
    """Why ``r`` can never be served on a replica ("" if it can)."""
    if r.num_prompt_tokens >= max_model_len:
        return f"prompt of {r.num_prompt_tokens} tokens does not fit max_model_len {max_model_len}"
    need = min(r.num_prompt_tokens + r.max_tokens, max_model_len)
    if need > usable_tokens:
        return f"needs {need} tokens of KV cache, the replica holds {usable_tokens}"
    return ""


class ArrivalFeeder:
    """Creates each request at its arrival and schedules the next one (the feeder of every
    open-loop run, one replica or a cluster).

    With ``look_ahead_s`` > 0 a request is created that much before it arrives and handed
    to ``on_look_ahead`` then (a router that sees replica state ``look_ahead_s`` old takes
    its view at that instant), then delivered at its arrival. Requests that can never be
    served (``rejection_reason`` against the smallest ``max_model_len`` and KV cache of the
    replicas they may visit) go to ``on_reject`` with the reason instead.

    ``quiet``: its events are quiet (``EventLoop.at_quiet``), for a cluster whose replicas
    cut their own runs of decode steps when a request reaches them or a router reads them
    (``Replica.cut_run``), so that an arrival does not end every replica's run.
    """

    def __init__(
        self,
        wl: Workload,
        loop: EventLoop,
        deliver: Callable[[Request], None],
        on_reject: Callable[[Request, str], None],
        max_model_len: int,
        usable_tokens: int,
        look_ahead_s: float = 0.0,
        on_look_ahead: Callable[[Request], None] | None = None,
        quiet: bool = False,
    ) -> None:
        self.loop = loop
        self.quiet = quiet
        self.deliver = deliver
        self.on_reject = on_reject
        self.max_model_len = max_model_len
        self.usable_tokens = usable_tokens
        self.look_ahead_s = look_ahead_s if on_look_ahead is not None else 0.0
        self.on_look_ahead = on_look_ahead
        self.num_rejected = 0
        self._reqs = iter_requests(wl)

    def start(self) -> None:
        self._schedule_next()

    def _schedule_next(self) -> None:
        for r in self._reqs:
            why = rejection_reason(r, self.max_model_len, self.usable_tokens)
            if not why:
                if self.look_ahead_s > 0:
                    self._at(max(r.arrival_s - self.look_ahead_s, self.loop.now), self.on_look, r)
                else:
                    self._at(r.arrival_s, self.on_arrival, r)
                return
            r.status = ReqStatus.REJECTED
            self.num_rejected += 1
            self.on_reject(r, why)

    def on_look(self, r: Request) -> None:
        """``look_ahead_s`` before ``r`` arrives."""
        if self.on_look_ahead is not None:
            self.on_look_ahead(r)
        self._at(r.arrival_s, self.deliver, r)
        self._schedule_next()

    def _at(self, time: float, callback: Callable[[Request], None], r: Request) -> None:
        """``loop.at`` or ``loop.at_quiet`` (compiled, a native call each, where the bound
        method chosen by an expression is an object)."""
        if self.quiet:
            self.loop.at_quiet(time, callback, r, ARRIVAL)
        else:
            self.loop.at(time, callback, r, ARRIVAL)

    def on_arrival(self, r: Request) -> None:
        self.deliver(r)
        self._schedule_next()


NO_LIMIT = 1 << 62


class ClosedLoopFeeder:
    """``vllm bench serve``'s clients (vLLM main, ``benchmark`` in vllm/benchmarks/serve.py).

    Each request is gated by an ``asyncio.Semaphore(max_concurrency)``: it is sent when it
    is due and fewer than ``max_concurrency`` are in flight, in workload order (the
    semaphore's waiters are served first come, first served). A request's recorded
    arrival is the instant it is sent, where vLLM starts its TTFT and E2E clocks. The
    engine calls ``on_request_done`` when a request finishes, at its finish time; a
    rejected request (one the replica can never serve) is done at once, as a failed HTTP
    request releases its slot. The rows before ``clients.num_before`` are sent in phases
    (the ready check, then the warm-ups), each when the one before is done; the measured
    run starts when the last is done (``main_start_s``; ``on_main_start`` is called then)
    and its rows' ``arrival_s`` count from that instant.
    """

    def __init__(
        self,
        wl: Workload,
        loop: EventLoop,
        deliver: Callable[[Request], None],
        on_reject: Callable[[Request, str], None],
        rejection: Callable[[Request], str],
        on_main_start: Callable[[], None] | None = None,
    ) -> None:
        clients = wl.clients
        if clients is None:
            raise ValueError("ClosedLoopFeeder needs a workload with clients (a benchmark workload)")
        self.loop = loop
        self.deliver = deliver
        self.on_reject = on_reject
        self.rejection = rejection
        self.on_main_start = on_main_start
        limit = clients.max_concurrency
        self.max_concurrency: int = limit if limit is not None else NO_LIMIT
        self.phase_starts: list[int] = list(clients.phase_starts)
        self.num_before: int = clients.num_before
        self.phase = 0
        self.phase_end = self.phase_starts[1] if len(self.phase_starts) > 1 else NO_LIMIT
        self.num_in_flight = 0
        self.peak_in_flight = 0
        self.num_done = 0  # sent and finished or rejected
        self.num_rejected = 0
        self.main_start_s = -1.0
        self._reqs = iter_requests(wl)
        self._head: Request | None = None  # the next request to send
        self._timer = False  # an event is pending at the head's due time

    def start(self) -> None:
        if len(self.phase_starts) == 1:
            self._start_main()
        self._pump()

    def on_request_done(self, r: Request) -> None:
        """``r`` finished now: its slot is free."""
        self.num_in_flight -= 1
        self.num_done += 1
        self._pump()

    def on_due(self, _: object) -> None:
        self._timer = False
        self._pump()

    def _start_main(self) -> None:
        self.main_start_s = self.loop.now
        if self.on_main_start is not None:
            self.on_main_start()

    def _pump(self) -> None:
        """Send every request that may go now, in order."""
        now = self.loop.now
        while self.num_in_flight < self.max_concurrency:
            r = self._head
            if r is None:
                r = next(self._reqs, None)
                if r is None:
                    return
                self._head = r
            if r.idx >= self.phase_end:  # the first of the next phase
                if self.num_done < self.phase_end:
                    return  # the phase before it is still running
                self.phase += 1
                starts = self.phase_starts
                self.phase_end = starts[self.phase + 1] if self.phase + 1 < len(starts) else NO_LIMIT
                if self.phase == len(starts) - 1:
                    self._start_main()
            if r.idx >= self.num_before:
                due = self.main_start_s + r.arrival_s
                if due > now:
                    if not self._timer:
                        self._timer = True
                        self.loop.at(due, self.on_due, None, ARRIVAL)
                    return
            self._head = None
            r.arrival_s = now
            why = self.rejection(r)
            if why:
                r.status = ReqStatus.REJECTED
                self.num_rejected += 1
                self.num_done += 1
                self.on_reject(r, why)
                continue
            self.num_in_flight += 1
            if self.num_in_flight > self.peak_in_flight:
                self.peak_in_flight = self.num_in_flight
            self.deliver(r)
