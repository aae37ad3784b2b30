"""The link a KV cache crosses between two replicas, shared by the transfers on it.

A link has a bandwidth (bytes/s) and a latency (s). Transfers on one link share the
bandwidth equally (processor sharing, the fluid model of TCP/RDMA flows on one
bottleneck): with n transfers in flight each moves at bandwidth / n, so a transfer that
starts while another is in flight slows it down. A transfer is delivered ``latency_s``
after its last byte leaves. Which transfers share a link is the cluster's choice (one link
per receiving replica by default: its NICs are the bottleneck when many prefill replicas
feed one decode replica).

Events: one pending "next completion" event per link; starting or finishing a transfer
reschedules it, and a version number makes the superseded event a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servesim.engine.events import EventLoop

_DONE_BYTES = 1.0  # a transfer with less than one byte left has finished (float round-off)


class Link:
    __slots__ = ("loop", "bw", "latency_s", "active", "last_s", "version", "num_transfers", "bytes_sent")

    def __init__(self, loop: EventLoop, bw: float, latency_s: float) -> None:
        if bw <= 0:
            raise ValueError(f"link bandwidth must be positive, got {bw}")
        self.loop = loop
        self.bw = bw  # bytes/s
        self.latency_s = latency_s
        self.active: list[list[Any]] = []  # [bytes left, on_done, arg], in start order
        self.last_s = 0.0
        self.version = 0
        self.num_transfers = 0
        self.bytes_sent = 0.0

    def send(self, num_bytes: float, on_done: Callable[[Any], None], arg: Any) -> None:
        """Start moving ``num_bytes``; ``on_done(arg)`` runs when they have arrived."""
        self._advance()
        self.active.append([float(num_bytes), on_done, arg])
        self.num_transfers += 1
        self.bytes_sent += num_bytes
        self._reschedule()

    def _advance(self) -> None:
        now = self.loop.now
        n = len(self.active)
        if n:
            moved = (now - self.last_s) * self.bw / n
            for t in self.active:
                t[0] -= moved
        self.last_s = now

    def _reschedule(self) -> None:
        self.version += 1
        if self.active:
            left = min(t[0] for t in self.active)
            dt = max(left, 0.0) * len(self.active) / self.bw
            self.loop.at(self.loop.now + dt, self._on_tick, self.version)

    def _on_tick(self, version: int) -> None:
        if version != self.version:
            return  # superseded by a later start or completion
        self._advance()
        # Done: under a byte left, or so little that its time would vanish in ``now``'s
        # float resolution (which would otherwise reschedule this tick at the same instant).
        eps = max(_DONE_BYTES, 1e-12 * max(self.loop.now, 1.0) * self.bw / len(self.active))
        done = [t for t in self.active if t[0] < eps]
        self.active = [t for t in self.active if t[0] >= eps]
        arrive = self.loop.now + self.latency_s
        for _, on_done, arg in done:
            self.loop.at(arrive, on_done, arg)
        self._reschedule()
