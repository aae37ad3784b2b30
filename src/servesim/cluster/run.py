"""The one driver's run (``run_cluster``): a workload on a cluster of pools, from its records
to the end of the run. It sets up the records, builds the ``cluster.cluster.Cluster``, wires
the arrivals (the open-loop ``engine.arrivals.ArrivalFeeder``, or closed-loop clients,
``_closed_loop``) and the operations over time, runs the event loop in slices (the progress
bar) and gathers the run (``cluster.spec.ClusterRun``). Every scenario runs through it: a
plain one is a cluster of one pool of one replica.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from servesim.cluster import cluster as cluster_mod
from servesim.cluster.cluster import Cluster
from servesim.cluster.spec import ClusterRun, PoolSpec
from servesim.cluster.turns import known_turns
from servesim.config import ClusterConfig, SloConfig
from servesim.engine.arrivals import NO_LIMIT, ArrivalFeeder, ClosedLoopFeeder
from servesim.engine.build import closed_loop_feeder
from servesim.engine.events import EventLoop
from servesim.errors import ConfigError
from servesim.metrics.progress import run_in_slices
from servesim.metrics.records import RequestRecords, RequestStatus, StepSeries
from servesim.workload.base import Workload

if TYPE_CHECKING:  # features a plain run does not use, imported where they run
    from servesim.cluster.operations import Operations
    from servesim.engine.dependencies import DependencyFeeder
    from servesim.engine.tenants import TenantSetup
    from servesim.metrics.timeseries import TimeSeries


def _closed_loop(cluster: Cluster, wl: Workload) -> ClosedLoopFeeder | DependencyFeeder:
    """Closed-loop clients in front of the cluster's router; a request is done when it
    finishes where it ends (after any hand-off) or is rejected."""
    if cluster.cfg.staleness_s > 0:
        raise ConfigError(
            "cluster.staleness_s > 0 needs arrival times known ahead; a benchmark "
            "workload's clients send when requests finish: set staleness_s to 0"
        )

    feeder = closed_loop_feeder(
        wl, cluster.loop, cluster.on_arrival, cluster.reject, cluster.rejection, cluster.itl
    )
    cluster.on_done = feeder.on_request_done
    return feeder


def _new_records(wl: Workload) -> RequestRecords:
    """The run's records, with what the workload knows ahead written in."""
    records = RequestRecords.empty(len(wl))
    if not wl.is_closed_loop:  # else the arrivals are the clients' send times, written as they go
        records.arrival_s = np.asarray(wl.arrival_s, dtype=np.float64).copy()
    records.num_prompt_tokens = np.asarray(wl.num_prompt_tokens, dtype=np.int64).copy()
    return records


def _is_lone(wl: Workload, pools: list[PoolSpec], cfg: ClusterConfig) -> bool:
    """Whether the run is one replica of a fixed fleet under open-loop arrivals. Step ends
    are quiet unless a finish sends a request (closed-loop clients); a lone replica reports
    its finishes at the end of its runs of decode steps."""
    return (
        sum(p.num_replicas for p in pools) == 1
        and cfg.operations is None
        and not cfg.migration.enabled
        and pools[0].role == "colocated"
        and not wl.is_closed_loop
        and wl.model is None  # requests that name a model are checked against the pool's
    )


def _open_loop(cluster: Cluster, wl: Workload, lone: bool) -> ArrivalFeeder:
    """The open-loop arrivals, each handed to where it enters: the tenants' gate, the lone
    replica, the known turns of conversations, or the router."""
    turns = known_turns(cluster, wl)
    return ArrivalFeeder(
        wl,
        cluster.loop,
        cluster.on_gated_arrival
        if cluster.gate is not None
        else cluster.replicas[0].on_arrival
        if cluster.direct
        else turns.on_arrival
        if turns is not None
        else cluster.on_arrival,
        cluster.reject,
        # several models: each request is checked against its model's pools at its arrival
        cluster.max_model_len if cluster.models is None else NO_LIMIT,
        cluster.usable_tokens if cluster.models is None else NO_LIMIT,
        0.0 if lone else cluster.cfg.staleness_s,  # a lone replica's view is never read
        cluster.on_look_ahead,
        quiet=cluster.cut_runs,
    )


def run_cluster(
    wl: Workload,
    pools: list[PoolSpec],
    cfg: ClusterConfig,
    *,
    seed: int = 0,
    check_invariants: bool = False,
    until_s: float = float("inf"),
    record_steps: bool = True,
    progress: Callable[[int], None] | None = None,
    slo: SloConfig | None = None,
    tenants: TenantSetup | None = None,
    step_series: StepSeries | None = None,
    default_model: str = "",
    timeseries: TimeSeries | None = None,
) -> ClusterRun:
    """Run ``wl`` on a cluster of ``pools`` (no catalog needed: tests use this): the one
    driver of every scenario (a plain one is a pool of one replica).

    ``record_steps=False`` drops the per-step series (long runs); ``step_series`` replaces the
    in-memory one (``metrics.step_stream.StreamedStepSeries``), ``timeseries`` the operations'
    (``metrics.timeseries.StreamedTimeSeries``); ``progress(num_done)``
    is called about 200 times over the run when given. With ``cfg.operations`` the fleet
    changes over time (``servesim.cluster.operations``; ``slo`` is what its SLO attainment
    counts). ``tenants``: the weights and admission control of ``wl``'s tenants (None:
    weight 1 each, no limits, and no counters under plain FCFS); requests the gate refuses
    are rejected with the reason, and each replica's scheduler keeps the tenants' counters.
    Pools of several models (``PoolSpec.served_model``) or requests naming one
    (``Workload.model``) route each request among its model's replicas (``cluster.models``);
    ``default_model`` is the name of a request that gives none ("": the first pool's).
    """
    ops_cfg = cfg.operations
    closed = wl.is_closed_loop  # arrivals are the send times of closed-loop clients
    if tenants is not None and tenants.has_limits and closed:
        raise ConfigError(
            "tenants: rate limits and queue caps apply to open-loop arrivals; "
            "this workload's requests are sent as others finish"
        )
    if ops_cfg is not None:  # imported only then: a fixed fleet's run does without it
        from servesim.cluster.operations import Operations
        from servesim.cluster.power_capping import clocked_pools

        pools = clocked_pools(pools, ops_cfg)
    loop = EventLoop()
    records = _new_records(wl)
    lone = _is_lone(wl, pools, cfg)
    cluster = Cluster(
        loop,
        pools,
        cfg,
        records,
        seed,
        check_invariants,
        record_steps,
        wl,
        quiet_steps=not closed,
        tenants=tenants,
        finishes_in_runs=lone,
        step_series=step_series,
        default_model=default_model,
        # Open loop, several replicas (a lone one's arrivals are all its own), to the end (a
        # run in flight at ``until_s`` would end later than its arrivals had ended it), and no
        # migration (it moves requests at step ends).
        cut_runs=cluster_mod.CUT_RUNS
        and not closed
        and not lone
        and until_s == float("inf")
        and not cfg.migration.enabled,
    )
    ops = None
    if ops_cfg is not None:
        ops = cluster.ops = Operations(cluster, pools, ops_cfg, slo, len(wl), seed, timeseries)
        ops.start()
    if closed:
        _closed_loop(cluster, wl).start()
    else:
        _open_loop(cluster, wl, lone).start()
    if cluster.migrator is not None:
        cluster.migrator.start()
    end = _run_to_end(cluster, wl, until_s, progress, ops)
    return _gathered(cluster, records, end, ops)


def _run_to_end(
    cluster: Cluster,
    wl: Workload,
    until_s: float,
    progress: Callable[[int], None] | None,
    ops: Operations | None,
) -> float:
    """Run the event loop in slices to the end (``until_s`` at the latest) and finish the
    run; its end time."""
    horizon = float(wl.arrival_s[-1]) if len(wl) else 0.0
    lone_rep = cluster.replicas[0]
    end = run_in_slices(
        cluster.loop,
        horizon,
        until_s,
        progress,
        (lambda: cluster.num_done + lone_rep.num_finished) if cluster.direct else (lambda: cluster.num_done),
        grows=wl.is_closed_loop,
    )
    if ops is not None and ops.done_at is not None:
        end = ops.done_at
    cluster.finish_run()
    if cluster.direct:  # every request that arrived by the end and was not refused
        records = cluster.records
        arrived = (records.status != RequestStatus.REJECTED) & (records.arrival_s <= until_s)
        lone_rep.totals.num_routed = int(np.count_nonzero(arrived))
    return end


def _gathered(cluster: Cluster, records: RequestRecords, end: float, ops: Operations | None) -> ClusterRun:
    """The run as ``run_cluster`` returns it, at its end ``end``."""
    ops_counts = ops.finish(end) if ops is not None else {}
    return ClusterRun(
        records,
        cluster.steps if cluster.steps is not None else StepSeries(),
        cluster.itl,
        [r.totals for r in cluster.replicas],
        end,
        cluster.num_handoffs,
        cluster.migrator.num_migrations if cluster.migrator is not None else 0,
        cluster.links,
        ops.series if ops is not None else None,
        ops_counts,
        ops.fleet if ops is not None else None,
        ops.notices if ops is not None else [],
        cluster.tenant_run(),
        cluster.overflow.counts() if cluster.overflow is not None else {},
    )
