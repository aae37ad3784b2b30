"""Tenants: fair sharing in the scheduler (VTC) and admission control at the front door.

* ``TenantCounters``: the virtual token counters of VTC (Sheng et al., "Fairness in Serving
  Large Language Models", OSDI'24, Algorithm 2). Each tenant u has a counter c_u of the
  service it received, weighted: ``w_p`` per prompt token (charged when the request is
  admitted) and ``w_q`` per output token (charged as it is sampled), divided by the
  tenant's weight (the paper's weighted VTC). A tenant that arrives to an empty queue of
  its own is lifted to the smallest counter of the tenants that have requests waiting (to
  the counter of the last tenant to leave the queue when none has): idle time earns no
  credit. The counters are kept under every scheduling policy, so that FCFS and priority
  runs report the same fairness figures as VTC ones; only ``vtc`` orders by them.
* ``TenantWaiting``: the waiting queue as one FIFO per tenant. Each request carries a key:
  increasing when appended, decreasing when put back at the front (a preempted request),
  so that the queue with the smallest head key is exactly the head of a single deque
  (FCFS). With ``vtc`` the head is the front request of the tenant with the smallest
  counter (ties: the smallest key, i.e. FCFS among equals).
* ``TenantGate``: per-tenant admission control before the engine: a token bucket of
  ``rate_limit_rps`` requests a second holding at most ``burst`` tokens (full at the
  start), and a cap of ``max_queued`` requests that have arrived and were not scheduled
  yet. A refused request is rejected at once, with its reason, and counted per tenant.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from servesim.engine.request import ReqStatus, Request


class TenantCounters:
    """VTC's per-tenant counters of weighted service, and the spread among backlogged tenants."""

    __slots__ = (
        "counters",
        "weights",
        "w_input",
        "w_output",
        "served_input",
        "served_output",
        "max_spread",
        "last_left",
    )

    def __init__(self, weights: list[float], w_input: float, w_output: float) -> None:
        self.weights = list(weights)
        self.counters = [0.0] * len(weights)
        self.w_input = w_input
        self.w_output = w_output
        self.served_input = [0] * len(weights)  # prompt tokens charged (once per request)
        self.served_output = [0] * len(weights)
        self.max_spread = 0.0  # the largest counter difference seen among backlogged tenants
        self.last_left = -1  # the last tenant whose queue emptied (VTC's lift when none waits)

    def charge_input(self, t: int, n: int) -> None:
        self.counters[t] += self.w_input * n / self.weights[t]
        self.served_input[t] += n

    def charge_output(self, t: int, n: int) -> None:
        self.counters[t] += self.w_output * n / self.weights[t]
        self.served_output[t] += n

    def lift(self, t: int, backlogged: list[int]) -> None:
        """Tenant ``t`` arrives to an empty queue of its own: no credit for its idle time."""
        c = self.counters
        if backlogged:
            floor = min(c[u] for u in backlogged)
        elif self.last_left >= 0:
            floor = c[self.last_left]
        else:
            return
        if c[t] < floor:
            c[t] = floor

    def observe(self, backlogged: list[int]) -> None:
        """Record the counter spread among the tenants that have requests waiting."""
        if len(backlogged) < 2:
            return
        c = self.counters
        values = [c[u] for u in backlogged]
        spread = max(values) - min(values)
        if spread > self.max_spread:
            self.max_spread = spread


class TenantWaiting:
    """The waiting queue as one FIFO per tenant; FCFS across them, or VTC's smallest counter.

    Offers the deque operations the schedulers use (``[0]``, ``popleft``, ``append``,
    ``appendleft``, ``remove``), so the token-budget loop runs unchanged on it.
    """

    __slots__ = ("queues", "keys", "counters", "by_counter", "_next", "_front", "_len")

    def __init__(self, counters: TenantCounters, by_counter: bool) -> None:
        n = len(counters.weights)
        self.queues: list[deque[Request]] = [deque() for _ in range(n)]
        self.keys: dict[int, int] = {}  # request idx -> its order key
        self.counters = counters
        self.by_counter = by_counter
        self._next = 0  # the key of the next append
        self._front = -1  # the key of the next appendleft
        self._len = 0

    def backlogged(self) -> list[int]:
        """The tenants with requests waiting."""
        return [t for t, q in enumerate(self.queues) if q]

    def append(self, req: Request) -> None:
        self.keys[req.idx] = self._next
        self._next += 1
        self._put(req, False)

    def appendleft(self, req: Request) -> None:
        self.keys[req.idx] = self._front
        self._front -= 1
        self._put(req, True)

    def _put(self, req: Request, left: bool) -> None:
        q = self.queues[req.tenant]
        if left:
            q.appendleft(req)
        else:
            q.append(req)
        self._len += 1

    def _head_tenant(self) -> int:
        best, best_key = -1, (0.0, 0)
        c = self.counters.counters
        keys = self.keys
        for t, q in enumerate(self.queues):
            if not q:
                continue
            key = (c[t] if self.by_counter else 0.0, keys[q[0].idx])
            if best < 0 or key < best_key:
                best, best_key = t, key
        if best < 0:
            raise IndexError("the waiting queue is empty")
        return best

    def popleft(self) -> Request:
        t = self._head_tenant()
        req = self.queues[t].popleft()
        del self.keys[req.idx]
        self._len -= 1
        if not self.queues[t]:
            self.counters.last_left = t
        return req

    def remove(self, req: Request) -> None:
        self.queues[req.tenant].remove(req)
        del self.keys[req.idx]
        self._len -= 1

    def __getitem__(self, i: int) -> Request:
        if i == 0:
            return self.queues[self._head_tenant()][0]
        return self._ordered()[i]

    def _ordered(self) -> list[Request]:
        """Every waiting request by key (the FCFS order; reports and run rows read it)."""
        keys = self.keys
        return sorted((r for q in self.queues for r in q), key=lambda r: keys[r.idx])

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Request]:
        return iter(self._ordered())


@dataclass(slots=True)
class TenantLimits:
    """One tenant's admission control (None: no limit)."""

    rate_limit_rps: float | None = None
    burst: float = 1.0  # token-bucket capacity, in requests
    max_queued: int | None = None


@dataclass(slots=True)
class TenantGate:
    """Per-tenant token bucket and queue cap, applied when a request arrives.

    The bucket of a tenant with ``rate_limit_rps`` r and ``burst`` b holds b tokens at
    t = 0 and refills at r tokens a second up to b; an arrival takes one token, or is
    rejected if less than one is left. ``max_queued``: an arrival is rejected when that
    many of its tenant's requests have arrived and were never scheduled (first scheduled
    time not set yet; a request preempted back to the queue does not count).
    """

    limits: list[TenantLimits]
    tokens: list[float] = field(default_factory=list)
    refilled_at: list[float] = field(default_factory=list)
    pending: list[list[Request]] = field(default_factory=list)  # accepted, maybe not yet scheduled
    rejected: dict[tuple[int, str], int] = field(default_factory=dict)  # (tenant, reason kind) -> n
    num_rejected: int = 0

    def __post_init__(self) -> None:
        self.tokens = [lim.burst for lim in self.limits]
        self.refilled_at = [0.0] * len(self.limits)
        self.pending = [[] for _ in self.limits]

    def refusal(self, r: Request, now: float) -> tuple[str, str]:
        """(reason kind, message) when ``r`` is refused at ``now``; ("", "") when admitted
        (its token taken and its place in the queue counted)."""
        t = r.tenant
        if t >= len(self.limits):
            return "", ""
        lim = self.limits[t]
        if lim.max_queued is not None:
            waiting = [
                q for q in self.pending[t] if q.first_scheduled_s < 0 and q.status < ReqStatus.FINISHED
            ]
            self.pending[t] = waiting
            if len(waiting) >= lim.max_queued:
                return "queue_full", (
                    f"tenant queue full: {len(waiting)} requests waiting (max_queued {lim.max_queued})"
                )
        if lim.rate_limit_rps is not None:
            level = min(lim.burst, self.tokens[t] + (now - self.refilled_at[t]) * lim.rate_limit_rps)
            self.refilled_at[t] = now
            if level < 1.0 - 1e-9:
                self.tokens[t] = level
                return "rate_limited", (
                    f"tenant rate limit: {lim.rate_limit_rps:g} requests/s (burst {lim.burst:g}) exceeded"
                )
            self.tokens[t] = level - 1.0
        if lim.max_queued is not None:
            self.pending[t].append(r)
        return "", ""

    def reject(self, r: Request, kind: str) -> None:
        r.status = ReqStatus.REJECTED
        key = (r.tenant, kind)
        self.rejected[key] = self.rejected.get(key, 0) + 1
        self.num_rejected += 1


@dataclass(slots=True)
class TenantSetup:
    """The workload's tenants (by id) with what the scenario configures for them."""

    names: list[str]
    weights: list[float]
    limits: list[TenantLimits]
    slos: list[object | None]  # a SloConfig per tenant, None: the scenario's

    @property
    def has_limits(self) -> bool:
        return any(lim.rate_limit_rps is not None or lim.max_queued is not None for lim in self.limits)


def resolve_tenants(names: list[str], configs: list) -> TenantSetup:
    """Match ``Scenario.tenants`` (``TenantConfig``) to the workload's tenant ``names``; a
    configured name the workload lacks is an error (ValueError) that lists the names it has."""
    by_name = {c.name: c for c in configs}
    unknown = [n for n in by_name if n not in names]
    if unknown:
        have = (
            ", ".join(names)
            if names
            else "none (give the workload a tenant column, clients or tenant_shares)"
        )
        raise ValueError(f"tenants: {', '.join(unknown)} not in the workload; its tenants: {have}")
    weights, limits, slos = [], [], []
    for n in names:
        c = by_name.get(n)
        weights.append(c.weight if c is not None else 1.0)
        limits.append(
            TenantLimits(c.rate_limit_rps, c.bucket, c.max_queued) if c is not None else TenantLimits()
        )
        slos.append(c.slo if c is not None else None)
    return TenantSetup(list(names), weights, limits, slos)


def merged_counters(per_replica: list[TenantCounters]) -> TenantCounters | None:
    """The tenants' counters over all replicas: each replica's VTC counters, served tokens
    summed, and the largest spread any replica saw (a lone replica's are its own).
    Simplified: each replica runs VTC on its own queue, as vLLM replicas behind a router do;
    nothing balances the counters across replicas."""
    if not per_replica:
        return None
    if len(per_replica) == 1:
        return per_replica[0]
    first = per_replica[0]
    out = TenantCounters(first.weights, first.w_input, first.w_output)
    for c in per_replica:
        for t in range(len(out.counters)):
            out.counters[t] += c.counters[t]
            out.served_input[t] += c.served_input[t]
            out.served_output[t] += c.served_output[t]
        out.max_spread = max(out.max_spread, c.max_spread)
    return out
