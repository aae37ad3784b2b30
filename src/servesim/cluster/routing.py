"""Where a cluster's arrivals go (``cluster.cluster.Cluster`` is a ``ClusterRouting``): the
tenants' gate and the models' routes in front of the router, the first stage's router, the
decode stage's (``_route_back``), and what a router sees of its candidates (``loads``).

**Staleness.** With ``staleness_s = d`` the router of the first stage sees replica state as
of ``d`` before the arrival: requests are read ahead by ``d`` and each one's view is
captured at ``arrival - d`` (``on_look_ahead``; exact, since arrivals are known). The decode
stage, whose routing instants are not known ahead, uses a view refreshed when it is ``d``
old.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from servesim.cluster.freeness import headroom_blocks
from servesim.cluster.loads import replica_load
from servesim.cluster.router import ROUTERS, ReplicaLoad, Router, RouterState
from servesim.cluster.spec import PoolSpec
from servesim.config import ClusterConfig
from servesim.engine.arrivals import rejection_reason
from servesim.engine.events import EventLoop
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request
from servesim.metrics.writer import RecordWriter

if TYPE_CHECKING:  # operations, and features a plain run does not use, imported where they run
    from servesim.cluster.models import ModelRoutes
    from servesim.cluster.operations import Operations
    from servesim.cluster.overflow import MixedPool
    from servesim.engine.tenants import TenantGate

# Routers that read nothing of a replica's load but how many candidates there are, or their
# outstanding counts: their view is built without scanning each replica's queues.
_LENGTH_ONLY = frozenset(ROUTERS[n] for n in ("round_robin", "random"))
_OUTSTANDING_ONLY = frozenset(ROUTERS[n] for n in ("least_outstanding", "power_of_two"))
# Routers whose view no run of decode steps changes (outstanding counts, queue lengths, prompt
# tokens still to compute: a run admits and finishes nobody): they read a replica without
# cutting its run in flight (``Replica.cut_run``); the others (KV usage, cached prefixes, the
# step in flight) cut the run of each replica they read.
_RUN_BLIND = _LENGTH_ONLY | _OUTSTANDING_ONLY | frozenset(ROUTERS[n] for n in ("least_work", "vllm_dp"))
_NO_LOAD = ReplicaLoad()  # every entry of a length-only view (the routers do not read it)


class ClusterRouting:
    """The arrivals and routing of a ``Cluster`` (which sets every attribute below)."""

    loop: EventLoop
    cfg: ClusterConfig
    replicas: list[Replica]
    pool_of: list[PoolSpec]  # replica index -> its pool
    outstanding: list[int]  # requests routed to each replica and not finished
    live: dict[int, Request]  # arrived and not finished
    handoff: dict[int, tuple[int, int]]  # idx -> (prompt, max_tokens) while in prefill
    stale_views: dict[int, list[ReplicaLoad]]  # idx -> first-stage view at arrival - d
    back_view: tuple[float, list[ReplicaLoad]] | None
    front: list[int]  # the routers' candidates of each stage (serving replicas)
    back: list[int]
    front_state: RouterState
    back_state: RouterState
    front_router: Router
    back_router: Router
    is_disagg: bool
    finishes_in_runs: bool
    cut_runs: bool
    max_model_len: int
    usable_tokens: int
    models: ModelRoutes | None
    gate: TenantGate | None
    overflow: MixedPool | None
    ops: Operations | None
    writer: RecordWriter
    num_done: int
    _headroom: dict[int, dict[int, int]]  # block size -> headroom blocks per priority

    def rejection(self, r: Request) -> str:
        """Why ``r`` can never be served on every pool it may visit ('' if it can; several
        models: its model's pools, ``cluster.models``)."""
        if self.models is not None:
            return self.models.refusal(r)
        return rejection_reason(r, self.max_model_len, self.usable_tokens)

    def refused_model(self, r: Request) -> bool:
        """Several models: reject ``r`` if its model is served by no pool or it does not fit
        that model's replicas (the feeder checked nothing: it cannot tell the models apart)."""
        why = self.models.refusal(r) if self.models is not None else ""
        if why:
            r.status = ReqStatus.REJECTED
            self.reject(r, why)
        return bool(why)

    def reject(self, r: Request, why: str) -> None:
        """``r`` is refused for good (it can never be served, or its tenant's gate refused it)."""
        self.writer.add(r, why)
        self.num_done += 1

    def on_gated_arrival(self, req: Request) -> None:
        """An arrival through the tenants' admission control (``engine.tenants.TenantGate``),
        in front of the router: a refused request is rejected with the gate's reason."""
        assert self.gate is not None
        if self.models is not None and self.refused_model(req):
            return
        kind, why = self.gate.refusal(req, self.loop.now)
        if kind:
            self.gate.reject(req, kind)
            self.reject(req, why)
        else:
            self.on_arrival(req)

    def on_look_ahead(self, req: Request) -> None:
        """``staleness_s`` before ``req`` arrives: capture the first stage's view for it."""
        ids = self.front
        if self.models is not None:
            g = int(self.models.group[req.idx])
            if g < 0:
                return  # rejected at its arrival
            ids = self.models.front[g]
        self.stale_views[req.idx] = self.loads(ids, req, self.front_router)

    def on_lone_arrival(self, req: Request) -> None:
        """``on_arrival`` of a lone replica (``finishes_in_runs``): nothing to route."""
        self.live[req.idx] = req
        self.outstanding[0] += 1
        rep = self.replicas[0]
        rep.totals.num_routed += 1
        rep.on_arrival(req)

    def _operations(self) -> Operations:
        """The cluster's operations: only they fail, stop or start replicas, so only with them
        can a stage have none serving."""
        assert self.ops is not None
        return self.ops

    def on_arrival(self, req: Request) -> None:
        if self.finishes_in_runs:
            self.on_lone_arrival(req)
            return
        front, state = self.front, self.front_state
        if self.models is not None:
            if self.refused_model(req):
                return
            g = int(self.models.group[req.idx])
            front, state = self.models.front[g], self.models.states[g]
        self.live[req.idx] = req
        dis = self.cfg.disaggregation
        if self.is_disagg and req.num_prompt_tokens < dis.colocate_below_tokens:
            if not self.back:  # (several models: every model has decode replicas, no operations)
                self._operations().park(req)
                return
            d = self._route_back(req)  # served whole by a decode replica
            if self.overflow is not None:  # its tokens count against the replica's room
                self.overflow.hold(req, d, req.num_prompt_tokens + req.max_tokens)
            self._deliver(d, req)
            return
        if not front:  # every replica of the stage is starting, failed or stopped
            self._operations().park(req)
            return
        view = self.stale_views.pop(req.idx, None) if self.stale_views else None
        if self.overflow is not None:  # reads the replicas as they are now
            i, whole = self.overflow.place_prompt(req, front, self.back)
            if whole:
                self._deliver(i, req)
                return
        else:
            if view is None:
                view = self.loads(front, req, self.front_router)
            i = front[self.front_router(req, view, state)]
        if self.is_disagg:
            p = req.num_prompt_tokens
            self.handoff[req.idx] = (p, req.max_tokens)
            tail = min(int(p * dis.decode_prefill_fraction), p - 1)
            if tail > 0:
                req.num_prompt_tokens = p - tail
                req.block_hashes = []
            req.max_tokens = 1
        self._deliver(i, req)

    def _deliver(self, i: int, req: Request) -> None:
        self.outstanding[i] += 1
        self.replicas[i].totals.num_routed += 1
        self.replicas[i].on_arrival(req)

    def _route_back(self, req: Request) -> int:
        """The decode replica ``req`` goes to (several models: among its model's, with that
        model's router state and stale view, ``cluster.models``)."""
        d = self.cfg.staleness_s
        now = self.loop.now
        if self.models is None:
            back, state, stale = self.back, self.back_state, self.back_view
        else:
            g = int(self.models.group[req.idx])
            back, state, stale = self.models.back[g], self.models.back_states[g], self.models.back_views[g]
        if d > 0 and stale is not None and now - stale[0] < d:
            view = stale[1]
        else:
            view = self.loads(back, req, self.back_router)
            if d > 0:
                if self.models is None:
                    self.back_view = (now, view)
                else:
                    self.models.back_views[g] = (now, view)
        return back[self.back_router(req, view, state)]

    def loads(self, ids: list[int], req: Request, router: Callable) -> list[ReplicaLoad]:
        """Each candidate's load as a router sees it now (prefix hits and predicted TTFT
        are computed only for the routers that use them)."""
        if router in _LENGTH_ONLY:  # they read how many candidates there are, nothing else
            return [_NO_LOAD] * len(ids)
        if router in _OUTSTANDING_ONLY:  # the counter is all they read: no queue scans
            out = self.outstanding
            return [ReplicaLoad(out[i]) for i in ids]
        with_prefix = router is ROUTERS["prefix_affinity"]
        with_ttft = router is ROUTERS["predicted_ttft"]
        with_latency = router is ROUTERS["predicted_latency"]
        reps = self.replicas
        if self.cut_runs and router not in _RUN_BLIND:
            for i in ids:
                reps[i].cut_run()  # the replica as it is now
        if router is ROUTERS["llumnix"]:
            out = self.outstanding
            return [replica_load(reps[i], out[i], req, False, False, self.headroom_of(i)) for i in ids]
        out = self.outstanding
        return [replica_load(reps[i], out[i], req, with_prefix, with_ttft, None, with_latency) for i in ids]

    def headroom_of(self, i: int) -> dict[int, int]:
        """Replica ``i``'s headroom per priority in its KV blocks (``cluster.freeness``)."""
        bs = self.pool_of[i].engine.block_size
        got = self._headroom.get(bs)
        if got is None:
            got = self._headroom[bs] = headroom_blocks(self.cfg.priority_headroom_tokens, bs)
        return got
