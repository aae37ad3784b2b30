"""The replicas of a cluster over time: cold starts, serving, draining, failures, retries.

A replica's life (``ReplicaPhase``)::

    STARTING --(weights loaded: startup_s + shard / load_gb_per_s)--> SERVING
    SERVING --scale in--> DRAINING --(last request done, or drain_timeout_s)--> STOPPED
    SERVING | DRAINING --failure--> FAILED   (a replacement may start later: STARTING)

Only SERVING replicas are routing candidates (``Cluster.serving`` / ``refresh_routes``);
a DRAINING one finishes what it has. The configured ``num_replicas`` of each pool serve
from t = 0 (a warm fleet). GPU time is counted from a replica's start to its stop or
failure (``ReplicaTotals.provisioned_s``): a cold start's loading is paid for.

A failed replica's requests (queued, running, or with their KV on a link towards it) are
**retried** from the first stage on another replica (``on_failure: retry``): their KV is
recomputed from the prompt and their tokens generated again, as when a gateway resends a
request whose stream broke (TTFT still counts from the original arrival); past
``max_retries``, or with ``on_failure: fail``, a request is recorded as failed with the
reason. Requests that arrive while no replica of their stage serves wait in the cluster
(``park``) and go out when one is ready. Closed-loop clients (benchmark clients, sessions,
agent tasks) see the same: a retried request keeps its client's slot until its retry
finishes (the client waits, as for a resent request), and a failed one frees it.
Simplification: a retried request gets no prefix-cache hits (its block hashes are recomputed
for the new replica only).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Protocol

from servesim.cluster.spec import PoolSpec
from servesim.engine.events import EventLoop
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request
from servesim.metrics.writer import RecordWriter


class ClusterHost(Protocol):
    """What the fleet and the operations (``cluster.operations``) read and call on the cluster
    they change: ``cluster.cluster.Cluster`` has it all. A protocol, not that class, since
    the cluster module imports this one (and the operations) to run them."""

    loop: EventLoop
    replicas: list[Replica]
    pool_of: list[PoolSpec]  # replica index -> its pool
    serving: list[bool]  # the replicas the routers pick among
    front: list[int]  # the first stage's serving replicas (refresh_routes)
    outstanding: list[int]  # requests routed to each replica and not finished
    live: dict[int, Request]  # arrived and not finished, by request index
    handoff: dict[int, tuple[int, int]]  # request index -> (prompt, max_tokens) in prefill
    in_transit: set[int]  # request indexes whose KV is on a link
    writer: RecordWriter  # the run's one record writer (a failed request's record)
    num_done: int
    on_done: Callable[[Request], None] | None  # closed-loop clients' hook

    def add_replica(self, pool: PoolSpec) -> int:
        """A new replica of ``pool``, not yet serving; its index."""
        ...

    def refresh_routes(self) -> None:
        """Recompute the routers' candidates from ``serving``."""
        ...

    def on_arrival(self, req: Request) -> None:
        """Route a request (arrived, or sent again after a failure)."""
        ...

    def headroom_of(self, i: int) -> dict[int, int]:
        """Replica ``i``'s priority headroom in its KV blocks (``cluster.freeness``)."""
        ...


class ReplicaPhase(IntEnum):
    STARTING = 0
    SERVING = 1
    DRAINING = 2
    STOPPED = 3
    FAILED = 4


class Fleet:
    """Starts, drains, stops and fails the replicas of ``cluster`` on its event loop."""

    def __init__(
        self,
        cluster: ClusterHost,
        pools: list[PoolSpec],
        load_gb_per_s: float = 2.0,
        startup_s: float = 30.0,
        drain_timeout_s: float = 600.0,
        on_failure: str = "retry",
        max_retries: int = 3,
    ) -> None:
        self.cluster = cluster
        self.loop = cluster.loop
        self.pools = {p.name: p for p in pools}
        self.load_bw = load_gb_per_s * 1e9
        self.startup_s = startup_s
        self.drain_timeout_s = drain_timeout_s
        self.on_failure = on_failure
        self.max_retries = max_retries
        n = len(cluster.replicas)
        self.phase = [ReplicaPhase.SERVING] * n
        self.started_at = [0.0] * n
        self.ready_at = [0.0] * n
        self.ended_at = [-1.0] * n
        self.members: dict[str, list[int]] = {p.name: [] for p in pools}  # in start order
        for i, p in enumerate(cluster.pool_of):
            self.members[p.name].append(i)
        self.parked: deque[Request] = deque()
        self.parked_set: set[int] = set()
        self.retries: dict[int, int] = {}
        self.num_retried = 0
        self.num_failed_requests = 0
        self.num_failures = 0
        self.num_started = 0
        self.num_stopped = 0

    # ----------------------------------------------------------------- counts

    def count(self, pool: str, *phases: ReplicaPhase) -> int:
        return sum(1 for i in self.members[pool] if self.phase[i] in phases)

    def provisioned(self, pool: str) -> int:
        """Replicas whose GPUs are held: starting, serving or draining."""
        return self.count(pool, ReplicaPhase.STARTING, ReplicaPhase.SERVING, ReplicaPhase.DRAINING)

    def serving_ids(self, pool: str) -> list[int]:
        return [i for i in self.members[pool] if self.phase[i] == ReplicaPhase.SERVING]

    def cold_start_s(self, pool: PoolSpec) -> float:
        """Engine start plus loading this replica's weight shard (each GPU loads its own)."""
        return self.startup_s + pool.weights_bytes_per_gpu / self.load_bw

    # ----------------------------------------------------------------- scaling

    def start(self, pool_name: str) -> int:
        """Scale out by one: reuse a draining replica (no cold start) or start a new one."""
        for i in reversed(self.members[pool_name]):
            if self.phase[i] == ReplicaPhase.DRAINING:
                self._set(i, ReplicaPhase.SERVING)
                return i
        pool = self.pools[pool_name]
        i = self.cluster.add_replica(pool)
        now = self.loop.now
        self.phase.append(ReplicaPhase.STARTING)
        self.started_at.append(now)
        self.ready_at.append(now + self.cold_start_s(pool))
        self.ended_at.append(-1.0)
        self.members[pool_name].append(i)
        self.num_started += 1
        self.loop.at(self.ready_at[i], self._on_ready, i)
        return i

    def _on_ready(self, i: int) -> None:
        if self.phase[i] == ReplicaPhase.STARTING:
            self._set(i, ReplicaPhase.SERVING)
            self._unpark()

    def drain(self, pool_name: str) -> int | None:
        """Scale in by one: a starting replica is cancelled, else the serving replica with the
        fewest outstanding requests (the newest of equals) drains."""
        out = self.cluster.outstanding
        starting = [i for i in self.members[pool_name] if self.phase[i] == ReplicaPhase.STARTING]
        if starting:
            self._end(starting[-1], ReplicaPhase.STOPPED)
            return starting[-1]
        serving = self.serving_ids(pool_name)
        if not serving:
            return None
        i = min(reversed(serving), key=lambda j: out[j])
        self._set(i, ReplicaPhase.DRAINING)
        if out[i] == 0:
            self._end(i, ReplicaPhase.STOPPED)
        else:
            self.loop.at(self.loop.now + self.drain_timeout_s, self._on_drain_timeout, i)
        return i

    def on_idle_check(self, i: int) -> None:
        """After a request left replica ``i``: a draining replica with nothing left stops."""
        if self.phase[i] == ReplicaPhase.DRAINING and self.cluster.outstanding[i] == 0:
            self._end(i, ReplicaPhase.STOPPED)

    def _on_drain_timeout(self, i: int) -> None:
        if self.phase[i] == ReplicaPhase.DRAINING:
            self._evacuate(i, ReplicaPhase.STOPPED, "its replica stopped draining")

    # ----------------------------------------------------------------- failures

    def fail(self, i: int, recover_after_s: float | None) -> None:
        """Replica ``i`` fails now; a replacement of its pool starts ``recover_after_s`` later."""
        if self.phase[i] in (ReplicaPhase.STOPPED, ReplicaPhase.FAILED):
            return
        self.num_failures += 1
        self._evacuate(i, ReplicaPhase.FAILED, "its replica failed")
        if recover_after_s is not None:
            self.loop.at(self.loop.now + recover_after_s, self._on_recover, self.cluster.pool_of[i].name)

    def _on_recover(self, pool_name: str) -> None:
        self.start(pool_name)

    def _evacuate(self, i: int, phase: ReplicaPhase, why: str) -> None:
        c = self.cluster
        rep = c.replicas[i]
        victims = [
            r
            for r in c.live.values()
            if r.replica == i
            and r.idx not in c.in_transit
            and r.idx not in self.parked_set
            and r.status < ReqStatus.FINISHED
        ]
        rep.settle()  # the outputs of the steps that ended before: streamed, their gaps counted
        rep.failed = True  # its pending events do nothing from now on
        c.outstanding[i] = 0
        self._end(i, phase)
        for r in victims:
            self.on_lost(r, i, why)

    def on_lost(self, req: Request, i: int, why: str = "its replica failed") -> None:
        """``req`` lost its replica ``i``: sent again from the first stage, or failed."""
        c = self.cluster
        saved = c.handoff.pop(req.idx, None)
        if saved is not None:
            req.num_prompt_tokens, req.max_tokens = saved
        n = self.retries.get(req.idx, 0)
        if self.on_failure == "fail" or n >= self.max_retries:
            self.num_failed_requests += 1
            c.live.pop(req.idx, None)
            req.status = ReqStatus.WAITING
            c.writer.add(req, f"failed: {why} (pool {c.pool_of[i].name}, replica {i}, after {n} retries)")
            c.num_done += 1
            if c.on_done is not None:  # a closed-loop client's request is over: it sends its next
                c.on_done(req)
            return
        self.retries[req.idx] = n + 1
        self.num_retried += 1
        _reset(req)
        c.on_arrival(req)

    # ----------------------------------------------------------------- waiting for a replica

    def park(self, req: Request) -> None:
        self.parked.append(req)
        self.parked_set.add(req.idx)

    def parked_ids(self) -> set[int]:
        return self.parked_set

    def _unpark(self) -> None:
        c = self.cluster
        for _ in range(len(self.parked) if c.front else 0):  # each once: it may park again
            req = self.parked.popleft()
            self.parked_set.discard(req.idx)
            c.on_arrival(req)

    # ----------------------------------------------------------------- bookkeeping

    def _set(self, i: int, phase: ReplicaPhase) -> None:
        self.phase[i] = phase
        self.cluster.serving[i] = phase == ReplicaPhase.SERVING
        self.cluster.refresh_routes()

    def _end(self, i: int, phase: ReplicaPhase) -> None:
        self._set(i, phase)
        self.ended_at[i] = self.loop.now
        self.num_stopped += phase == ReplicaPhase.STOPPED

    def finish(self, end_s: float) -> None:
        """At the end of the run: each replica's provisioned seconds."""
        for i, rep in enumerate(self.cluster.replicas):
            end = min(self.ended_at[i], end_s) if self.ended_at[i] >= 0 else end_s
            rep.totals.provisioned_s = max(end - self.started_at[i], 0.0)
            rep.totals.provisioned_from_s = self.started_at[i]

    def counts(self) -> dict[str, Any]:
        return {
            "num_replicas_started": self.num_started,
            "num_replicas_stopped": self.num_stopped,
            "num_failures": self.num_failures,
            "num_retried": self.num_retried,
            "num_failed_requests": self.num_failed_requests,
        }


def _reset(req: Request) -> None:
    """``req`` as if it had just arrived (its KV is gone: everything is recomputed)."""
    req.status = ReqStatus.WAITING
    req.num_computed_tokens = 0
    req.num_output_tokens = 0
    req.num_cached_tokens = -1
    req.first_token_s = req.last_token_s = req.finished_s = -1.0
    req.block_hashes = []
    req.prev_blocks = None
    req.lazy_it = -1
    req.epoch += 1
