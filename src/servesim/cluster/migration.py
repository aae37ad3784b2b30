"""Live migration of running requests between replicas of a pool, after Llumnix (OSDI'24).

Llumnix's global scheduler periodically pairs the instances with the highest and lowest
load ("virtual usage": KV blocks in use plus the blocks the queued requests need) and
migrates running requests from the first to the second; it prefers requests whose KV is
small (cheap to copy). Its migration copies the KV cache in stages while the request keeps
decoding, then stops it for the last, small stage (downtime of tens of ms, nearly constant
in the sequence length).

Modelled here: every ``interval_s`` each pool's replicas are paired as Llumnix pairs them
(llumnix/global_scheduler/migration_policy.py, ``Defrag``: the i-th most loaded with the i-th
least loaded); where a pair's load fraction differs by more than ``threshold`` and the receiver
has the blocks, the sender's running decode with the fewest tokens leaves it between two steps
(no batch in flight), its KV (``num_computed_tokens`` tokens) crosses the cluster's link,
and it joins the receiver's queue with those tokens computed. Simplification: the request
does not decode during the copy, so the whole copy time is charged to it (an upper bound
of Llumnix's downtime). Removing a running request is a scheduler operation the lazy
engine does not offer, so pools with migration run the reference scheduler.

With ``load: freeness`` the pairing is the artifact's ``Balanced`` check (llumnix at 37d8e5ea,
``global_scheduler/migration_scheduler.py``) on Llumnix's freeness (``cluster.freeness``):
replicas below ``freeness_threshold`` send, the others receive, the least free sender paired
with the freest receiver; a pair migrates while the receiver stays above the threshold with
the request and the gap narrows. A draining replica (scale-in) is infinitely loaded: it sends
until it is empty, and never receives (the paper's Sec. 4.4.2, "terminating" instances).
With priority headrooms the request that leaves is the least urgent one (largest priority
value), the fewest tokens among those: the normal requests move off a high-priority
request's instance (the paper's Sec. 4.4.2; the artifact has no priorities).
The pairing is recomputed over the pool's current replicas at every poll, so replicas that
autoscaling starts or drains take part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from servesim.cluster.freeness import freeness
from servesim.cluster.spec import PoolSpec
from servesim.config import MigrationConfig
from servesim.engine.events import EventLoop
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request


class MigrationHost(Protocol):
    """What the migrator uses of the cluster it serves (``servesim.cluster.Cluster``)."""

    loop: EventLoop
    replicas: list[Replica]
    pool_of: list[PoolSpec]  # replica index -> its pool
    serving: list[bool]  # the replicas the routers pick among
    outstanding: list[int]  # requests routed to each replica and not finished

    def send_kv(self, src: int, dst: int, req: Request, num_tokens: int) -> None: ...

    def draining(self, i: int) -> bool:
        """Whether replica ``i`` is being scaled in."""
        ...

    def headroom_of(self, i: int) -> dict[int, int]:
        """Replica ``i``'s headroom per priority, in its KV blocks."""
        ...

    def on_left(self, i: int) -> None:
        """A request left replica ``i`` other than by finishing (a draining one may stop)."""
        ...


def virtual_usage(rep: Replica) -> float:
    """Load ``usage``: blocks in use plus blocks the waiting requests need, over all blocks."""
    kv = rep.kv
    bs = kv.block_size
    need = sum(-(-(r.num_prompt_tokens + r.num_output_tokens) // bs) for r in rep.scheduler.waiting)
    return (kv.num_used_blocks + need) / (kv.num_gpu_blocks - 1)


class Migrator:
    def __init__(self, cluster: MigrationHost, cfg: MigrationConfig, pools: list[str]) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.pools = pools  # the names of the pools with migration
        self.pending: dict[int, int] = {}  # sender -> receiver, done at the sender's next step end
        self.num_migrations = 0
        for i, p in enumerate(cluster.pool_of):
            if p.name in pools:
                self.watch(i)

    def watch(self, i: int) -> None:
        """Replica ``i`` (of a pool with migration) may send at its step ends."""
        self.cluster.replicas[i].on_step_end = self.on_step_end

    def start(self) -> None:
        if self.pools:
            self.cluster.loop.at(self.cfg.interval_s, self.on_tick)

    def groups(self) -> list[list[int]]:
        """Each pool's replicas that take part now: serving ones, and draining ones that still
        hold requests (senders only)."""
        c = self.cluster
        out: list[list[int]] = []
        for name in self.pools:
            g = [
                i
                for i, p in enumerate(c.pool_of)
                if p.name == name and (c.serving[i] or (c.outstanding[i] > 0 and c.draining(i)))
            ]
            if len(g) > 1:
                out.append(g)
        return out

    def on_tick(self, _: object = None) -> None:
        for g in self.groups():
            if self.cfg.load == "freeness":
                self._pair_by_freeness(g)
            else:
                self._pair_by_usage(g)
        loop = self.cluster.loop
        if len(loop):  # more to come: keep watching
            loop.at(loop.now + self.cfg.interval_s, self.on_tick)

    def _pair_by_usage(self, g: list[int]) -> None:
        # Llumnix's pairing (global_scheduler/migration_policy.py, Defrag): the i-th most
        # loaded with the i-th least loaded, for every pair whose gap passes the threshold.
        reps = self.cluster.replicas
        load = {i: virtual_usage(reps[i]) for i in g}
        desc = sorted(g, key=lambda i: (-load[i], i))
        asc = sorted(g, key=lambda i: (load[i], i))
        for src, dst in zip(desc[: len(g) // 2], asc[: len(g) // 2], strict=True):
            if load[src] - load[dst] > self.cfg.threshold and reps[src].busy:
                self.pending[src] = dst

    def _pair_by_freeness(self, g: list[int]) -> None:
        # The artifact's Balanced check (37d8e5ea, migration_scheduler.py) on freeness.
        c = self.cluster
        reps = c.replicas
        free = {i: freeness(reps[i], c.headroom_of(i), c.draining(i)) for i in g}
        cut = self.cfg.freeness_threshold
        receivers = sorted((i for i in g if free[i] > cut and not c.draining(i)), key=lambda i: (-free[i], i))
        senders = sorted((i for i in g if free[i] <= cut), key=lambda i: (free[i], i))
        for src, dst in zip(senders, receivers, strict=False):
            rep = reps[dst]
            batch = len(rep.scheduler.running) + (1 if rep.scheduler.waiting else 0)
            # The receiver with one more request of the sender's typical size must stay free
            # enough to receive (the artifact's left_load_after_mig check).
            typical = _blocks(_pick(reps[src], None, c.headroom_of(src)), rep.kv.block_size)
            after = free[dst] if batch == 0 else (free[dst] * batch - typical) / (batch + 1)
            if (after > cut or batch == 0) and reps[src].busy:
                self.pending[src] = dst

    def on_step_end(self, rep: Replica) -> None:
        dst = self.pending.pop(rep.id, None)
        if dst is None:
            return
        c = self.cluster
        req = _pick(rep, c.replicas[dst], c.headroom_of(rep.id))
        if req is None:
            return
        sched = rep.scheduler
        sched.running.remove(req)
        rep.kv.free(req)
        req.status = ReqStatus.WAITING
        req.prev_blocks = None
        c.outstanding[rep.id] -= 1
        c.outstanding[dst] += 1
        rep.totals.num_migrations_out += 1
        c.replicas[dst].totals.num_routed += 1
        self.num_migrations += 1
        c.send_kv(rep.id, dst, req, req.num_computed_tokens)
        c.on_left(rep.id)


def _blocks(req: Request | None, block_size: int) -> int:
    if req is None:
        return 0
    return -(-(req.num_prompt_tokens + req.num_output_tokens) // block_size)


def _pick(src: Replica, dst: Replica | None, keep: Mapping[int, int] | None = None) -> Request | None:
    """The sender's running decode to move: the least urgent (largest priority value), the
    fewest tokens among those, if it fits the receiver's free blocks (``dst``; None: any).
    Requests of a priority with a headroom (``keep``) stay: they are what the headroom
    protects (servesim's simplification: the paper does not say whether they move)."""
    best: Request | None = None
    best_key = (0, 0)
    for r in src.scheduler.running:
        n = r.num_prompt_tokens + r.num_output_tokens
        if r.status != ReqStatus.RUNNING or r.num_output_tokens < 1 or r.num_computed_tokens != n - 1:
            continue
        if keep and r.priority in keep:
            continue
        key = (-r.priority, n)
        if best is None or key < best_key:
            best, best_key = r, key
    if best is None or dst is None:
        return best
    return best if _blocks(best, dst.kv.block_size) <= dst.kv.num_free_blocks else None
