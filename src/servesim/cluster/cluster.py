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

The cluster's arrivals and routing (with the routers' stale views) are
``cluster.routing.ClusterRouting``, its finishes and KV hand-offs (with their
simplifications) ``cluster.handoffs.KvHandoffs``; ``Cluster`` builds the replicas and ends
the run. A run of a workload on the cluster, the one driver, is ``cluster.run.run_cluster``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servesim.cluster.fleet import ReplicaPhase
from servesim.cluster.handoffs import KvHandoffs
from servesim.cluster.router import ROUTERS, RouterState
from servesim.cluster.spec import PoolSpec, TenantRun
from servesim.config import ClusterConfig
from servesim.engine.build import build_replica
from servesim.engine.events import EventLoop
from servesim.engine.frontend import api_servers_per_rank
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import ReqStatus
from servesim.metrics.records import ItlSamples, ReplicaTotals, RequestRecords, StepSeries
from servesim.metrics.writer import RecordWriter
from servesim.workload.base import Workload

if TYPE_CHECKING:  # operations, and features a plain run does not use, imported where they run
    from servesim.cluster.migration import Migrator
    from servesim.cluster.models import ModelRoutes
    from servesim.cluster.operations import Operations
    from servesim.cluster.overflow import MixedPool
    from servesim.engine.tenants import TenantGate, TenantSetup

#: Cut runs (``Replica.cut_run``) where ``run_cluster`` may; False runs every cluster as before
#: them, each arrival ending every replica's run (the reference tests/test_cut_runs.py holds
#: the cut runs to).
CUT_RUNS = True


class Cluster(KvHandoffs):
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
        self._records(records, record_steps, step_series)
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
        self.replicas: list[Replica] = []
        self.pool_of: list[PoolSpec] = []
        migrating = {p.name for p in pools if p.role != "prefill"} if cfg.migration.enabled else set()
        self.migrating = migrating  # pools whose replicas run the reference scheduler for migration
        self._headroom = {}
        self.check_invariants = check_invariants
        # Replicas whose finishes route nothing (all but prefill replicas, unless requests
        # are sent when others finish or migrate) step on quiet events (engine.events).
        self.quiet_steps = quiet_steps and not migrating
        # The smallest model length and KV cache over the replicas' pools (``rejection``),
        # kept as replicas are added.
        self.max_model_len = self.usable_tokens = 1 << 62
        self._first_of: dict[str, Replica] = {}  # each pool's first replica
        self._add_pools(pools, check_invariants)
        self._routes(pools, seed, default_model)
        self._in_flight()
        self.migrator = self._migrator(migrating)
        # Splitwise's mixed pool: the prefill and decode pools lend each other replicas.
        self.overflow = self._mixed_pool()

    def _records(self, records: RequestRecords, record_steps: bool, step_series: StepSeries | None) -> None:
        """Where the run's records go: every request's through the writer (batched;
        ``finish_run`` flushes it); the per-step series in memory, or ``step_series`` (a
        ``StreamedStepSeries`` that writes its rows to a file as the run goes), or none."""
        self.records = records
        self.writer = RecordWriter(records)
        self.steps = (step_series if step_series is not None else StepSeries()) if record_steps else None
        self.itl = ItlSamples()

    def _routes(self, pools: list[PoolSpec], seed: int, default_model: str) -> None:
        """The routers, their states (each its own generator, drawn from ``seed``), the models'
        routes, and the candidates of each stage."""
        self.is_disagg = any(p.role == "prefill" for p in pools)
        cap = self.cfg.prefix_load_cap
        rng = None if self.finishes_in_runs else np.random.default_rng(seed)
        self.front_state, self.back_state = (
            RouterState(None if rng is None else _child(rng), prefix_load_cap=cap) for _ in range(2)
        )
        # Several models (``cluster.models``): each request is routed among its model's replicas.
        self.models = _model_routes(pools, self.wl, default_model, rng, cap)
        # Which replicas the routers pick among (all, unless operations start, drain or fail them).
        self.serving = [True] * len(self.replicas)
        self.front = []
        self.back = []
        self.refresh_routes()
        self.front_router = ROUTERS[self.cfg.router]
        self.back_router = ROUTERS[self.cfg.decode_router or self.cfg.router]

    def _in_flight(self) -> None:
        """Nothing in flight yet: no request routed, in prefill, on a link or done."""
        self.ops: Operations | None = None  # when configured
        self.in_transit = set()
        self.outstanding = [0] * len(self.replicas)
        self.live = {}
        self.handoff = {}
        self.links = {}
        self.stale_views = {}
        self.back_view = None
        self.num_done = 0
        self.on_done = None
        self.num_handoffs = 0

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
