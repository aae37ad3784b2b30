"""Requests created one by one at their arrival (compiled with the engine: see setup.py).

``ArrivalFeeder`` keeps one pending arrival at a time, so a run of millions of requests
never holds them all as objects. Requests that can never be served are handed to
``on_reject`` with the reason instead of being delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from servesim.engine.events import ARRIVAL, EventLoop
from servesim.engine.request import ReqStatus, Request
from servesim.workload.base import Workload


def iter_requests(wl: Workload) -> Iterator[Request]:
    """The workload's requests, created one by one in arrival order."""
    arrival: list[float] = wl.arrival_s.tolist()
    prompt: list[int] = wl.num_prompt_tokens.tolist()
    output: list[int] = wl.num_output_tokens.tolist()
    prio: list[int] | None = wl.priority.tolist() if wl.priority is not None else None
    group: list[int] | None = wl.prefix_group.tolist() if wl.prefix_group is not None else None
    hash_ids = wl.hash_ids
    for i in range(len(arrival)):
        r = Request(i, arrival[i], prompt[i], output[i])
        if prio is not None:
            r.priority = prio[i]
        if hash_ids is not None:
            r.hash_ids = hash_ids[i]
            r.hash_block_tokens = wl.hash_block_tokens
        if group is not None and group[i] >= 0:
            r.prefix_group = group[i]
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
    """Creates each request at its arrival and schedules the next one."""

    def __init__(self, wl: Workload, loop: EventLoop, deliver: Callable[[Request], None],
                 on_reject: Callable[[Request, str], None], max_model_len: int, usable_tokens: int) -> None:
        self.loop = loop
        self.deliver = deliver
        self.on_reject = on_reject
        self.max_model_len = max_model_len
        self.usable_tokens = usable_tokens
        self.num_rejected = 0
        self._reqs = iter_requests(wl)

    def start(self) -> None:
        self._schedule_next()

    def _schedule_next(self) -> None:
        for r in self._reqs:
            why = rejection_reason(r, self.max_model_len, self.usable_tokens)
            if not why:
                self.loop.at(r.arrival_s, self.on_arrival, r, ARRIVAL)
                return
            r.status = ReqStatus.REJECTED
            self.num_rejected += 1
            self.on_reject(r, why)

    def on_arrival(self, r: Request) -> None:
        self.deliver(r)
        self._schedule_next()
