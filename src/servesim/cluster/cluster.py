"""A cluster: pools of replicas on one event loop, a router per stage, KV hand-offs.

    arrival --route--> colocated replica ........................... finish
    arrival --route--> prefill replica -- first token --> KV link --> decode replica -- finish
                                      (route among decode replicas)   (waits for blocks)

Every replica is an ordinary ``Replica`` (lazy scheduler by default) on the cluster's
shared ``EventLoop``; the cluster only decides where requests go and moves them:

* **Colocated pools** serve whole requests; the router picks among all their replicas
  (heterogeneous pools are routed as one set).
* **Disaggregation** (DistServe, OSDI'24; Splitwise, ISCA'24): a prefill replica gets the
  request with ``max_tokens = 1``, so it computes the prompt, samples the first token
  (TTFT is measured there) and frees its blocks as a finished request; the cluster then
  routes it to a decode replica and sends ``prompt tokens x KV bytes per token`` (the
  whole model's KV, from the memory plan) over a shared ``Link``. The decode replica
  receives it as a waiting request with ``num_computed_tokens = prompt`` and admits it
  through its ordinary scheduler only when the whole sequence's blocks are free; until
  then it waits there. TPOT therefore includes the transfer and that wait.
* **Balanced disaggregation** (MicroServing, Jin et al. 2024): the prefill replica
  computes only the first ``(1 - f)`` of the prompt; the decode replica computes the tail
  and the first token (so TTFT is measured at the decode replica).
* **Per-request choice**: prompts shorter than ``colocate_below_tokens`` skip the prefill
  pool and are served whole by a decode replica.
* **Mixed pool** (Splitwise's ``MixedPoolScheduler``, ``disaggregation.overflow``,
  ``cluster.overflow``): an overloaded prefill pool lends a prompt to a decode replica and a
  full decode pool borrows a prefill replica; a request whose two phases land on one replica
  runs there whole, its KV never moving.

Simplifications: the prefill replica frees a request's blocks when its first token comes
out (real systems hold them until the transfer completes); KV transfers start when the
prompt is done (Splitwise overlaps them layer by layer); hand-off CPU costs are not charged.

**Staleness.** With ``staleness_s = d`` the router of the first stage sees replica state as
of ``d`` before the arrival: requests are read ahead by ``d`` and each one's view is
captured at ``arrival - d`` (exact, since arrivals are known). The decode stage, whose
routing instants are not known ahead, uses a view refreshed when it is ``d`` old.

A run of a workload on the cluster, the one driver, is ``cluster.run.run_cluster``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from servesim.cluster.fleet import ReplicaPhase
from servesim.cluster.freeness import headroom_blocks
from servesim.cluster.loads import replica_load
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState
from servesim.cluster.spec import PoolSpec, TenantRun
from servesim.cluster.transfer import Link
from servesim.config import ClusterConfig
from servesim.engine.arrivals import (
    done_when_seen,
    rejection_reason,
)
from servesim.engine.build import build_replica
from servesim.engine.events import ARRIVAL, EventLoop
from servesim.engine.frontend import api_servers_per_rank
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus, Request
from servesim.metrics.records import ItlSamples, ReplicaTotals, RequestRecords, StepSeries
from servesim.metrics.writer import RecordWriter
from servesim.workload.base import Workload

if TYPE_CHECKING:  # operations, and features a plain run does not use, imported where they run
    from servesim.cluster.migration import Migrator
    from servesim.cluster.models import ModelRoutes
    from servesim.cluster.operations import Operations
    from servesim.cluster.overflow import MixedPool
    from servesim.engine.tenants import TenantGate, TenantSetup

# Routers that read nothing of a replica's load but how many candidates there are, or their
# outstanding counts: their view is built without scanning each replica's queues.
_LENGTH_ONLY = frozenset(ROUTERS[n] for n in ("round_robin", "random"))
_OUTSTANDING_ONLY = frozenset(ROUTERS[n] for n in ("least_outstanding", "power_of_two"))
# Routers whose view no run of decode steps changes (outstanding counts, queue lengths, prompt
# tokens still to compute: a run admits and finishes nobody): they read a replica without
# cutting its run in flight (``Replica.cut_run``); the others (KV usage, cached prefixes, the
# step in flight) cut the run of each replica they read.
_RUN_BLIND = _LENGTH_ONLY | _OUTSTANDING_ONLY | frozenset(ROUTERS[n] for n in ("least_work", "vllm_dp"))

#: Cut runs (``Replica.cut_run``) where ``run_cluster`` may; False runs every cluster as before
#: them, each arrival ending every replica's run (the reference tests/test_cut_runs.py holds
#: the cut runs to).
CUT_RUNS = True
_NO_LOAD = ReplicaLoad()  # every entry of a length-only view (the routers do not read it)


class Cluster:
    def __init__(
        self,
        loop: EventLoop,
        pools: list[PoolSpec],
        cfg: ClusterConfig,
        records: RequestRecords,
        seed: int = 0,
        check_invariants: bool = False,
        record_steps: bool = True,
        wl: Workload | None = None,
        quiet_steps: bool = False,
        tenants: TenantSetup | None = None,
        finishes_in_runs: bool = False,
        step_series: StepSeries | None = None,
        default_model: str = "",
        cut_runs: bool = False,
    ) -> None:
        self.loop = loop
        self.wl = wl
        # Arrivals are quiet events and each replica cuts its own run of decode steps when a
        # request reaches it or a router reads it (``engine.replica``'s docstring): a replica's
        # run no longer ends at every arrival of the cluster.
        self.cut_runs = cut_runs
        self.cfg = cfg
        self.records = records
        # Every record is written through it (batched; ``finish_run`` flushes it).
        self.writer = RecordWriter(records)
        # The workload's tenants: their weights in each replica's scheduler and their
        # admission control in front of the router (``on_gated_arrival``).
        self.tenants = tenants
        self.gate = _tenant_gate(tenants)
        # A finish inside a run of decode steps is reported at the run's end: exact only where
        # nothing reacts to finishes (``run_cluster``: a lone replica of a fixed fleet, open loop).
        self.finishes_in_runs = finishes_in_runs
        # A lone replica without a tenants' gate is fed and drained directly (``run_cluster``):
        # the feeder hands it its arrivals and it hands the record writer its finishes, with
        # no frame between; its routed count and unfinished requests are read at the end.
        self.direct = finishes_in_runs and self.gate is None
        # The per-step series: in memory, or ``step_series`` (a ``StreamedStepSeries`` that
        # writes its rows to a file as the run goes), or none.
        self.steps = (step_series if step_series is not None else StepSeries()) if record_steps else None
        self.itl = ItlSamples()
        self.replicas: list[Replica] = []
        self.pool_of: list[PoolSpec] = []
        migrating = {p.name for p in pools if p.role != "prefill"} if cfg.migration.enabled else set()
        self.migrating = migrating  # pools whose replicas run the reference scheduler for migration
        self._headroom: dict[int, dict[int, int]] = {}  # block size -> headroom blocks per priority
        self.check_invariants = check_invariants
        # Replicas whose finishes route nothing (all but prefill replicas, unless requests
        # are sent when others finish or migrate) step on quiet events (engine.events).
        self.quiet_steps = quiet_steps and not migrating
        # The smallest model length and KV cache over the replicas' pools (``rejection``),
        # kept as replicas are added.
        self.max_model_len = self.usable_tokens = 1 << 62
        self._first_of: dict[str, Replica] = {}  # each pool's first replica
        self._add_pools(pools, check_invariants)
        self.is_disagg = any(p.role == "prefill" for p in pools)
        cap = cfg.prefix_load_cap
        rng = None if self.finishes_in_runs else np.random.default_rng(seed)
        self.front_state, self.back_state = (
            RouterState(None if rng is None else _child(rng), prefix_load_cap=cap) for _ in range(2)
        )
        # Several models (``cluster.models``): each request is routed among its model's replicas.
        self.models = _model_routes(pools, wl, default_model, rng, cap)
        # Which replicas the routers pick among (all, unless operations start, drain or fail them).
        self.serving = [True] * len(self.replicas)
        self.front: list[int] = []
        self.back: list[int] = []
        self.refresh_routes()
        self.ops: Operations | None = None  # when configured
        self.in_transit: set[int] = set()  # request ids whose KV is on a link
        self.front_router = ROUTERS[cfg.router]
        self.back_router = ROUTERS[cfg.decode_router or cfg.router]
        self.outstanding = [0] * len(self.replicas)
        self.live: dict[int, Request] = {}  # arrived and not finished
        self.handoff: dict[int, tuple[int, int]] = {}  # idx -> (prompt, max_tokens) while in prefill
        self.links: dict[int, Link] = {}  # by receiver, sender or 0 (link.shared_by)
        self.stale_views: dict[int, list[ReplicaLoad]] = {}  # idx -> first-stage view at arrival - d
        self.back_view: tuple[float, list[ReplicaLoad]] | None = None
        self.num_done = 0
        # Closed-loop clients (benchmark workloads): told when a request is done.
        self.on_done: Callable[[Request], None] | None = None
        self.num_handoffs = 0
        self.migrator = self._migrator(migrating)
        # Splitwise's mixed pool: the prefill and decode pools lend each other replicas.
        self.overflow = self._mixed_pool()

    def _migrator(self, migrating: set[str]) -> Migrator | None:
        """Llumnix's migration between the replicas of the pools ``migrating`` (None: none)."""
        if not migrating:
            return None
        from servesim.cluster.migration import Migrator

        return Migrator(self, self.cfg.migration, sorted(migrating))

    def _mixed_pool(self) -> MixedPool | None:
        """Splitwise's mixed pool where configured on a disaggregated cluster (else None)."""
        if not (self.cfg.disaggregation.overflow.enabled and self.is_disagg):
            return None
        from servesim.cluster.overflow import MixedPool

        return MixedPool(self, self.cfg.disaggregation.overflow)

    def _add_pools(self, pools: list[PoolSpec], check_invariants: bool) -> None:
        """The pools' replicas, in order; a pool with DP ranks grouped by server."""
        for pool in pools:
            first = len(self.replicas)
            for _ in range(pool.num_replicas):
                self._add_replica(pool, check_invariants, pool.reference or pool.name in self.migrating)
            if pool.dp > 1:
                self._group_ranks(self.replicas[first:], pool.dp, api_servers_per_rank(pool.engine.version))

    def _group_ranks(self, replicas: list[Replica], dp: int, own_servers: bool) -> None:
        """Each ``dp`` consecutive replicas are the DP ranks of one server: they step in
        lockstep; with ``own_servers`` each keeps its own API front end, else they share
        the first rank's (``api_servers_per_rank``)."""
        from servesim.engine.lockstep import LockstepGroup

        for k in range(0, len(replicas), dp):
            ranks = replicas[k : k + dp]
            if not own_servers:
                for r in ranks:
                    r.frontend = ranks[0].frontend
            LockstepGroup(self.loop, ranks)

    def refresh_routes(self) -> None:
        """The routers' candidates: the serving replicas of each stage."""
        roles = ("prefill", "decode") if self.is_disagg else ("colocated", "decode")
        ids = {
            role: [i for i, p in enumerate(self.pool_of) if p.role == role and self.serving[i]]
            for role in roles
        }
        self.front, self.back = ids[roles[0]], ids["decode"]
        if self.models is not None:
            self.models.refresh(self.front, self.back, self.pool_of)

    def add_replica(self, pool: PoolSpec) -> int:
        """A new replica of ``pool`` (not yet serving: ``serving`` and ``refresh_routes`` say when)."""
        self._add_replica(pool, self.check_invariants, pool.reference or pool.name in self.migrating)
        self.outstanding.append(0)
        self.serving.append(False)
        i = len(self.replicas) - 1
        if self.migrator is not None and pool.name in self.migrating:
            self.migrator.watch(i)
        return i

    def on_left(self, i: int) -> None:
        """A request migrated off replica ``i``: a draining one with nothing left stops."""
        if self.ops is not None:
            self.ops.on_replica_idle_check(i)

    def draining(self, i: int) -> bool:
        """Whether replica ``i`` is being scaled in (it finishes what it has, takes nothing new)."""
        if self.ops is None:
            return False
        return self.ops.fleet.phase[i] == ReplicaPhase.DRAINING

    def _add_replica(self, pool: PoolSpec, check_invariants: bool, reference: bool) -> None:
        totals = ReplicaTotals(
            num_gpus=pool.num_gpus,
            num_gpu_blocks=pool.num_gpu_blocks,
            pool=pool.name,
            role=pool.role,
            gpu=pool.gpu,
        )
        # V1 (lazy, or the reference with ``reference``) where it applies, else the engine
        # policy's scheduler (for colocated pools: hand-offs and migration assume V1's
        # waiting/running queues).
        rep = build_replica(
            len(self.replicas),
            self.loop,
            pool.engine,
            pool.perf,
            pool.num_gpu_blocks,
            pool.max_model_len,
            self.wl,
            self.steps,
            self.itl,
            totals,
            reference=reference,
            kv_bytes_per_block=pool.kv_bytes_per_block,
            check_invariants=check_invariants,
            on_finish=self.writer.add
            if self.direct
            else self.on_lone_finish
            if self.finishes_in_runs
            else self.on_finish,
            finishes_in_runs=self.finishes_in_runs,
            tenant_weights=None if self.tenants is None else self.tenants.weights,
        )
        rep.quiet = self.quiet_of(pool)
        rep.cut_runs = self.cut_runs
        # Replicas of one pool time their runs on the same perf model: one cache of its terms
        # per pool size (not with operations, whose power caps change a pool's clock).
        first = self._first_of.setdefault(pool.name, rep)
        if first is not rep and first.perf is rep.perf and self.cfg.operations is None:
            rep.share_caches(first)
        self.max_model_len = min(self.max_model_len, pool.max_model_len)
        self.usable_tokens = min(self.usable_tokens, (pool.num_gpu_blocks - 1) * pool.engine.block_size)
        self.replicas.append(rep)
        self.pool_of.append(pool)

    def quiet_of(self, pool: PoolSpec) -> bool:
        """Whether ``pool``'s replicas step on quiet events (their finishes route nothing): not
        a prefill pool's, whose finishes hand requests on (nor a decode replica's while the
        mixed pool has lent it a prompt: ``MixedPool.join``), nor a lone replica's, whose step
        ends cut no other replica's runs (they stay ordinary events)."""
        return self.quiet_steps and pool.role != "prefill" and not self.finishes_in_runs

    # ----------------------------------------------------------------- arrivals

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

    def on_lone_finish(self, req: Request) -> None:
        """``on_finish`` of a lone replica (``finishes_in_runs``): no hand-off, no operations,
        no client to tell (open loop)."""
        self.outstanding[0] -= 1
        self.live.pop(req.idx, None)
        self.writer.add(req)
        self.num_done += 1

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

    # ----------------------------------------------------------------- finishes and hand-offs

    def on_finish(self, req: Request) -> None:
        src = req.replica
        self.outstanding[src] -= 1
        saved = self.handoff.pop(req.idx, None)
        if saved is None or (saved[1] <= 1 and req.num_prompt_tokens == saved[0]):
            self._done(req)
            if self.ops is not None:
                self.ops.on_replica_idle_check(src)
            if self.overflow is not None:
                self.overflow.release(req)
                self.overflow.on_left(src)
            return
        if self.ops is not None and not self.back:  # no decode replica serves: sent again
            req.num_prompt_tokens, req.max_tokens = saved
            self.ops.on_lost(req, src)
            self.ops.on_replica_idle_check(src)
            return
        prompt, max_tokens = saved
        computed = req.num_prompt_tokens
        if computed < prompt:  # balanced: the decode replica computes the tail and the first token
            req.num_output_tokens = 0
            req.first_token_s = req.last_token_s = -1.0
            req.num_prompt_tokens = prompt
        req.max_tokens = max_tokens
        req.status = ReqStatus.WAITING
        req.finished_s = -1.0
        req.num_computed_tokens = computed
        req.block_hashes = []  # recomputed on the decode replica (its own block size)
        req.prev_blocks = None
        self.num_handoffs += 1
        mixed = self.overflow
        dst = self._route_back(req) if mixed is None else mixed.place_decode(req, src, prompt + max_tokens)
        self.outstanding[dst] += 1
        self.replicas[dst].totals.num_routed += 1
        if dst == src:  # (the mixed pool) it decodes where its prompt ran: no KV moves
            self.loop.at(self.loop.now, self.replicas[dst].on_engine_arrival, req, ARRIVAL)
        else:
            self.send_kv(src, dst, req, computed)
        if self.ops is not None:
            self.ops.on_replica_idle_check(src)
        if mixed is not None:
            mixed.on_left(src)

    def _done(self, req: Request) -> None:
        self.live.pop(req.idx, None)
        self.writer.add(req)
        self.num_done += 1
        if self.on_done is not None:
            done_when_seen(self.loop, self.on_done, req)
        if self.ops is not None:
            self.ops.on_done(req)

    def send_kv(self, src: int, dst: int, req: Request, num_tokens: int) -> None:
        """Move ``num_tokens`` of ``req``'s KV from replica ``src`` to ``dst``, then queue it there."""
        num_bytes = num_tokens * self.pool_of[src].kv_bytes_per_token
        self.in_transit.add(req.idx)
        self.link(src, dst).send(num_bytes, self._on_kv_arrived, (req, dst, self.loop.now, num_bytes))

    def _on_kv_arrived(self, arg: tuple[Request, int, float, float]) -> None:
        req, dst, sent_s, num_bytes = arg
        self.in_transit.discard(req.idx)
        if self.replicas[dst].failed:  # the receiver failed while the KV was on the link
            self._operations().on_lost(req, dst)
            return
        t = self.replicas[dst].totals
        t.num_kv_transfers += 1
        t.kv_transfer_bytes += num_bytes
        t.kv_transfer_s += self.loop.now - sent_s
        self.replicas[dst].on_engine_arrival(req)  # the KV is in: no front end again

    def link(self, src: int, dst: int) -> Link:
        """The link a transfer from ``src`` to ``dst`` uses (``link.shared_by`` picks the key)."""
        shared_by = self.cfg.link.shared_by
        key = dst if shared_by == "receiver" else src if shared_by == "sender" else 0
        link = self.links.get(key)
        if link is None:
            cfg, ps, pd = self.cfg.link, self.pool_of[src], self.pool_of[dst]
            if cfg.bandwidth_gb_per_s is not None:
                bw = cfg.bandwidth_gb_per_s * 1e9
            elif shared_by == "receiver":
                bw = pd.net_bw * pd.num_gpus
            elif shared_by == "sender":
                bw = ps.net_bw * ps.num_gpus
            else:
                bw = min(p.net_bw * p.num_gpus for p in self.pool_of)
            latency = (
                cfg.latency_us * 1e-6
                if cfg.latency_us is not None
                else max(ps.net_latency_s, pd.net_latency_s)
            )
            link = self.links[key] = Link(self.loop, bw, latency)
        return link

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

    # ----------------------------------------------------------------- load views

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

    # ----------------------------------------------------------------- the end

    def finish_run(self) -> None:
        """The end of a run: record requests still in flight (running, waiting or in
        transit) as unfinished, and each replica's end-of-run totals."""
        for rep in self.replicas:
            rep.finish_waiting()
        alive = [rep for rep in self.replicas if not rep.failed]  # a failed one's requests moved on
        for rep in alive:
            if isinstance(rep.scheduler, LazyScheduler):
                rep.scheduler.materialize_all()
        if self.direct:  # its requests in flight are in its queues (not forks: rows of their own)
            sched = self.replicas[0].scheduler
            for r in [*sched.running, *sched.waiting]:
                if r.idx < len(self.records):
                    self.live[r.idx] = r
        parked = self.ops.parked_ids() if self.ops is not None else set()
        for idx, r in self.live.items():
            saved = self.handoff.get(idx)
            if saved is not None:
                r.num_prompt_tokens, r.max_tokens = saved
            where = (
                "waiting for a serving replica"
                if idx in parked
                else "in transit"
                if (r.status == ReqStatus.WAITING and not any(r in rep.scheduler.waiting for rep in alive))
                else ("running" if r.status == ReqStatus.RUNNING else "waiting")
            )
            self.writer.add(r, f"still {where} when the run ended")
        self.writer.flush()
        counted: set[int] = set()  # front ends already counted (data-parallel ranks share one)
        for rep in self.replicas:
            rep.totals.num_prefix_query_tokens = rep.kv.num_query_tokens
            rep.totals.num_prefix_hit_tokens = rep.kv.num_hit_tokens
            fe = rep.frontend
            if fe is not None and id(fe) not in counted:
                counted.add(id(fe))
                rep.totals.frontend_busy_s = fe.busy_s

    def tenant_run(self) -> TenantRun | None:
        """What the tenants' gate and the replicas' schedulers counted (None: no tenants)."""
        if self.tenants is None and (self.wl is None or self.wl.tenant is None):
            return None
        from servesim.engine.policy_base import PolicyScheduler
        from servesim.engine.tenants import merged_counters

        counters = [
            c
            for rep in self.replicas
            if isinstance(rep.scheduler, PolicyScheduler) and (c := rep.scheduler.tenants) is not None
        ]
        return TenantRun(
            scheduler=merged_counters(counters),
            rejected=dict(self.gate.rejected) if self.gate is not None else {},
        )


def _tenant_gate(tenants: TenantSetup | None) -> TenantGate | None:
    """The tenants' admission control in front of the router, where they have limits."""
    if tenants is None or not tenants.has_limits:
        return None
    from servesim.engine.tenants import TenantGate

    return TenantGate(tenants.limits)


def _model_routes(
    pools: list[PoolSpec], wl: Workload | None, default_model: str, rng: np.random.Generator | None, cap: int
) -> ModelRoutes | None:
    """Routes by model (``ModelRoutes.build``), each pool added; None where every request goes
    to every replica."""
    from servesim.cluster.models import ModelRoutes

    routes = ModelRoutes.build(pools, wl, default_model, rng, cap)
    if routes is not None:
        for pool in pools:
            routes.add_pool(pool)
    return routes


def _child(rng: np.random.Generator) -> np.random.Generator:
    """A generator of its own, seeded from ``rng``'s next draw."""
    return np.random.default_rng(rng.integers(1 << 63))
