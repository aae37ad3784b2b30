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
"""

from __future__ import annotations

from typing import Protocol

from servesim.config import MigrationConfig
from servesim.engine.events import EventLoop
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request


class MigrationHost(Protocol):
    """What the migrator uses of the cluster it serves (``servesim.cluster.Cluster``)."""

    loop: EventLoop
    replicas: list[Replica]
    outstanding: list[int]  # requests routed to each replica and not finished

    def send_kv(self, src: int, dst: int, req: Request, num_tokens: int) -> None: ...


def virtual_usage(rep: Replica) -> float:
    """Llumnix's load: blocks in use plus blocks the waiting requests need, over all blocks."""
    kv = rep.kv
    bs = kv.block_size
    need = sum(-(-(r.num_prompt_tokens + r.num_output_tokens) // bs) for r in rep.scheduler.waiting)
    return (kv.num_used_blocks + need) / (kv.num_gpu_blocks - 1)


class Migrator:
    def __init__(self, cluster: MigrationHost, cfg: MigrationConfig, groups: list[list[int]]) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.groups = groups  # replica ids of each pool with migration
        self.pending: dict[int, int] = {}  # sender -> receiver, done at the sender's next step end
        self.num_migrations = 0
        for g in groups:
            for i in g:
                cluster.replicas[i].on_step_end = self.on_step_end

    def start(self) -> None:
        if self.groups:
            self.cluster.loop.at(self.cfg.interval_s, self.on_tick)

    def on_tick(self, _: object = None) -> None:
        reps = self.cluster.replicas
        for g in self.groups:
            # Llumnix's pairing (global_scheduler/migration_policy.py, Defrag): the i-th most
            # loaded with the i-th least loaded, for every pair whose gap passes the threshold.
            load = {i: virtual_usage(reps[i]) for i in g}
            desc = sorted(g, key=lambda i: (-load[i], i))
            asc = sorted(g, key=lambda i: (load[i], i))
            for src, dst in zip(desc[: len(g) // 2], asc[: len(g) // 2], strict=True):
                if load[src] - load[dst] > self.cfg.threshold and reps[src].busy:
                    self.pending[src] = dst
        loop = self.cluster.loop
        if len(loop):  # more to come: keep watching
            loop.at(loop.now + self.cfg.interval_s, self.on_tick)

    def on_step_end(self, rep: Replica) -> None:
        dst = self.pending.pop(rep.id, None)
        if dst is None:
            return
        req = self._pick(rep, self.cluster.replicas[dst])
        if req is None:
            return
        sched = rep.scheduler
        sched.running.remove(req)
        rep.kv.free(req)
        req.status = ReqStatus.WAITING
        req.prev_blocks = None
        c = self.cluster
        c.outstanding[rep.id] -= 1
        c.outstanding[dst] += 1
        rep.totals.num_migrations_out += 1
        c.replicas[dst].totals.num_routed += 1
        self.num_migrations += 1
        c.send_kv(rep.id, dst, req, req.num_computed_tokens)

    def _pick(self, src: Replica, dst: Replica) -> Request | None:
        """The sender's running decode with the fewest tokens that fits the receiver's free blocks."""
        best: Request | None = None
        for r in src.scheduler.running:
            n = r.num_prompt_tokens + r.num_output_tokens
            if r.status != ReqStatus.RUNNING or r.num_output_tokens < 1 or r.num_computed_tokens != n - 1:
                continue
            if best is None or n < best.num_prompt_tokens + best.num_output_tokens:
                best = r
        if best is None:
            return None
        blocks = -(-(best.num_prompt_tokens + best.num_output_tokens) // dst.kv.block_size)
        return best if blocks <= dst.kv.num_free_blocks else None
