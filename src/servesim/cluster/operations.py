"""Operations over time on the cluster's event loop: autoscaling, failures, power capping,
and the per-pool time series. One periodic event (every ``operations.interval_s``) reads
each pool's state, prices the interval's energy, writes the series rows, then decides
scaling and capping; failures at given times are events of their own. No second loop.

**Autoscaling** (Kubernetes HPA's rule, HeteroScale's coordinated prefill:decode scaling,
SLO attainment, Llumnix's freeness): ``cluster.autoscaling.Autoscaling``, whose decisions
each tick acts on.

**Power capping** (POLCA, Patel et al., ASPLOS'24): the row's GPU power over the last interval
against ``budget_w``, the low-priority pools capped first: ``cluster.power_capping``; the
intervals over the budget are counted (``num_intervals_over_budget``, ``over_budget_s``).

**Failures**: ``Fleet.fail`` at the configured times (a notice when the replica named is
gone by then, was never started, or the run ended first), and with ``rate_per_hour`` each
serving replica fails in an interval with probability 1 - exp(-rate x interval), at a
uniform instant within it (seeded: the run stays a pure function of its seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesim.cluster.autoscaling import Autoscaling
from servesim.cluster.fleet import ClusterHost, Fleet, ReplicaPhase
from servesim.cluster.power_capping import check_power_budget, interval_energy, next_cap_level
from servesim.cluster.spec import PoolSpec
from servesim.config import SloConfig
from servesim.config.operations import OperationsConfig
from servesim.engine.request import Request
from servesim.metrics.timeseries import TimeSeries
from servesim.perf.capabilities import Clocked
from servesim.perf.power import bundled_coefficients


@dataclass(slots=True)
class _PoolInterval:
    """One pool's sums over the replicas during one sampling interval."""

    num_arrivals: int = 0  # requests routed to the pool's replicas
    queue_len: int = 0  # waiting requests at the interval's end
    num_running: int = 0  # running requests at the interval's end
    num_steps: int = 0
    kv_util: float = 0.0  # sum over serving replicas of the blocks in use, averaged in time
    num_kv: int = 0  # replicas in kv_util
    num_tokens: int = 0  # batched tokens
    gpu_util: float = 0.0  # sum over serving replicas of the fraction of the interval their GPUs were busy
    num_util: int = 0  # replicas in gpu_util


class Operations(Autoscaling):
    """The periodic controller of one cluster run (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterHost,
        pools: list[PoolSpec],
        cfg: OperationsConfig,
        slo: SloConfig | None,
        num_requests: int,
        seed: int = 0,
        series: TimeSeries | None = None,
    ) -> None:
        a, f = cfg.autoscaling, cfg.failures
        if cfg.power is not None:
            check_power_budget(cfg.power.budget_w, pools)
        self.cluster, self.cfg, self.slo = cluster, cfg, slo
        self.loop = cluster.loop
        self.num_requests = num_requests
        self.fleet = Fleet(
            cluster,
            pools,
            load_gb_per_s=a.load_gb_per_s if a else 2.0,
            startup_s=a.startup_s if a else 30.0,
            drain_timeout_s=a.drain_timeout_s if a else 600.0,
            on_failure=f.on_failure if f else "retry",
            max_retries=f.max_retries if f else 3,
        )
        self.pools = pools
        self.rng = np.random.default_rng(seed + 0x5EED)
        # The rows (``series``: e.g. a ``StreamedTimeSeries`` that writes them to a file as the
        # run goes and holds the last interval's) and each interval's power over the pools.
        self.series = series if series is not None else TimeSeries()
        self.interval_power_w: list[float] = []
        self.rules = {s.pool: s for s in a.pools} if a else {}
        self.below_since: dict[str, float | None] = {p.name: None for p in pools}
        self.cap_level = 0  # 0 none, 1 low-priority pools capped, 2 every pool
        self.capped_s = {p.name: 0.0 for p in pools}
        self.num_cap_changes = 0
        self.num_over_budget = 0  # intervals whose row power was above the budget
        self.over_budget_s = 0.0
        self.num_intervals = 0
        self.notices: list[dict[str, Any]] = []  # configured operations that did not happen
        self._pending_failures = list(f.events) if f else []
        self.last_t = 0.0
        # When the last request was done: the run's end (drain timeouts and repairs still
        # pending then change nothing that is reported).
        self.done_at: float | None = None
        self.power_w = 0.0
        self.pool_power_w: dict[str, float] = {}  # per pool, the last interval's
        self.uncapped_w: dict[str, float] = {}  # per pool, its last interval's work at the full clock
        self._carry = [(0.0, 0.0, 0.0)]  # per replica: (gpu_s, flops, bytes) not yet priced
        # per replica: the totals read at the last tick (gpu_s, flops, bytes, num_routed,
        # num_steps, num_batched_tokens, kv_block_s)
        self._seen: list[tuple[float, float, float, int, int, int, float]] = []
        self._done: dict[str, list[int]] = {p.name: [0, 0, 0] for p in pools}  # finished, met SLO, tokens
        self._interval_done = self._done
        self._gpu_util: dict[str, float] = {}  # per pool, the last interval's (``_account``)
        for rep in cluster.replicas:
            rep.totals.energy_j = 0.0
        for e in f.events if f else []:  # replica indexes checked by ClusterConfig
            self.loop.at(e.at_s, self._on_failure_event, e)

    def start(self) -> None:
        self.loop.at(self.cfg.interval_s, self._tick)

    # ----------------------------------------------------------------- cluster hooks

    def park(self, req: Request) -> None:
        self.fleet.park(req)

    def parked_ids(self) -> set[int]:
        return self.fleet.parked_ids()

    def on_lost(self, req: Request, i: int) -> None:
        self.fleet.on_lost(req, i)

    def on_replica_idle_check(self, i: int) -> None:
        self.fleet.on_idle_check(i)

    def on_done(self, req: Request) -> None:
        if self.cluster.num_done >= self.num_requests:
            self.done_at = self.loop.now
        d = self._done[self.cluster.pool_of[req.replica].name]
        d[0] += 1
        d[1] += self._meets_slo(req)
        d[2] += req.num_output_tokens

    def _meets_slo(self, r: Request) -> bool:
        slo = self.slo
        if slo is None:
            return True
        ttft = r.first_token_s - r.arrival_s
        e2e = r.finished_s - r.arrival_s
        n_out = r.num_output_tokens
        tpot = (r.finished_s - r.first_token_s) / (n_out - 1) if n_out > 1 else 0.0
        return (
            (slo.ttft_s is None or ttft <= slo.ttft_s)
            and (slo.tpot_s is None or tpot <= slo.tpot_s)
            and (slo.e2e_s is None or e2e <= slo.e2e_s)
        )

    def _on_failure_event(self, e: Any) -> None:
        self._pending_failures.remove(e)
        if self.done_at is not None:  # after the last request: nothing left to report
            self._failure_notice(e, f"the run's last request finished at {self.done_at:,.6g} s")
            return
        fleet = self.fleet
        members = fleet.members[e.pool]
        if e.replica >= len(members):
            self._failure_notice(e, f"the pool had started only {len(members)} replica(s) by then")
            return
        i = members[e.replica]
        if fleet.phase[i] in (ReplicaPhase.STOPPED, ReplicaPhase.FAILED):
            how = "was scaled in" if fleet.phase[i] == ReplicaPhase.STOPPED else "had failed"
            self._failure_notice(e, f"that replica {how} at {fleet.ended_at[i]:,.6g} s")
            return
        fleet.fail(i, e.recover_after_s)

    def _failure_notice(self, e: Any, why: str) -> None:
        """A configured failure that did not happen: said, not skipped silently."""
        from servesim.workload.notices import notice

        self.notices.append(
            notice(
                "failure_not_applied",
                f"the failure of replica {e.replica} of pool {e.pool!r} at {e.at_s:,.6g} s did not happen: "
                f"{why} (replicas are numbered in start order, the ones scaled in or failed included)",
                source="cluster.operations.failures.events",
            )
        )

    # ----------------------------------------------------------------- the tick

    def _tick(self, _: object = None) -> None:
        now = self.loop.now
        self._account(self.last_t, now)
        if self.cfg.autoscaling is not None:
            self._autoscale(now)
        if self.cfg.power is not None:
            self._cap()
        if self.cfg.failures is not None and self.cfg.failures.rate_per_hour > 0:
            self._random_failures(now)
        self.last_t = now
        c = self.cluster
        if c.num_done < self.num_requests and (len(self.loop) or self.cfg.autoscaling is not None):
            self.loop.at(now + self.cfg.interval_s, self._tick)

    def _account(self, t0: float, t1: float) -> None:
        """Price each replica's GPU time of [t0, t1] and write one series row per pool."""
        c, fleet, dt = self.cluster, self.fleet, t1 - t0
        coef = bundled_coefficients()
        while len(self._seen) < len(c.replicas):
            self._seen.append((0.0, 0.0, 0.0, 0, 0, 0, 0.0))
            self._carry.append((0.0, 0.0, 0.0))
        energy = {p.name: 0.0 for p in self.pools}
        uncapped = {p.name: 0.0 for p in self.pools}  # the same work at the full clock
        stats = {p.name: _PoolInterval() for p in self.pools}
        for i, rep in enumerate(c.replicas):
            pool, t = c.pool_of[i], rep.totals
            g, f, b, routed, steps, tokens, kv_s = self._seen[i]
            self._seen[i] = (
                t.gpu_s,
                t.flops,
                t.bytes,
                t.num_routed,
                t.num_steps,
                t.num_batched_tokens,
                t.kv_block_s,
            )
            s = stats[pool.name]
            s.num_arrivals += t.num_routed - routed
            s.num_steps += t.num_steps - steps
            s.num_tokens += t.num_batched_tokens - tokens
            end = fleet.ended_at[i] if fleet.ended_at[i] >= 0 else t1
            held = max(0.0, min(t1, end) - max(t0, fleet.started_at[i]))
            cg, cf, cb = self._carry[i]
            cg, cf, cb = cg + t.gpu_s - g, cf + t.flops - f, cb + t.bytes - b
            # A skip-ahead run is accounted when it starts; its GPU time past this interval
            # is priced in the next ones.
            share = min(1.0, held / cg) if cg > 0 else 0.0
            busy = cg * share
            e, e1 = interval_energy(pool, held, busy, cf * share, cb * share, coef)
            uncapped[pool.name] += e1
            self._carry[i] = (cg - busy, cf * (1 - share), cb * (1 - share))
            t.energy_j += e
            energy[pool.name] += e
            if fleet.phase[i] in (ReplicaPhase.SERVING, ReplicaPhase.DRAINING):
                s.queue_len += len(rep.scheduler.waiting)
                s.num_running += len(rep.scheduler.running)
                # Blocks in use, averaged over the interval (a run's block-seconds are
                # counted when it starts: capped at a full cache).
                s.kv_util += min((t.kv_block_s - kv_s) / (dt * t.num_gpu_blocks), 1.0) if dt > 0 else 0.0
                s.num_kv += 1
                if held > 0:
                    s.gpu_util += busy / held
                    s.num_util += 1
        self.power_w = sum(energy.values()) / dt if dt > 0 else 0.0
        self.pool_power_w = {k: v / dt if dt > 0 else 0.0 for k, v in energy.items()}
        self.uncapped_w = {k: v / dt if dt > 0 else 0.0 for k, v in uncapped.items()}
        if dt > 0:
            self.num_intervals += 1
            if self.cfg.power is not None and self.power_w > self.cfg.power.budget_w:
                self.num_over_budget += 1
                self.over_budget_s += dt
        self._gpu_util = {p.name: stats[p.name].gpu_util / max(stats[p.name].num_util, 1) for p in self.pools}
        self._write_rows(t0, dt, stats, energy)

    def _write_rows(
        self, t0: float, dt: float, stats: dict[str, _PoolInterval], energy: dict[str, float]
    ) -> None:
        """One series row per pool for the interval from ``t0`` (``dt`` long); the interval's
        finishes are kept (``_interval_done``) and counted afresh."""
        c, fleet = self.cluster, self.fleet
        front_pool = c.pool_of[c.front[0]].name if c.front else None
        self.interval_power_w.append(sum(energy[p.name] / dt if dt > 0 else 0.0 for p in self.pools))
        for p in self.pools:
            s, d = stats[p.name], self._done[p.name]
            fronts = p.name == front_pool or (front_pool is None and p.role != "decode")
            parked = len(fleet.parked) if fronts else 0
            self.series.add(
                t0,
                p.name,
                s.num_arrivals,
                s.queue_len + parked,
                s.num_running,
                s.num_tokens / s.num_steps if s.num_steps else 0.0,
                s.kv_util / s.num_kv if s.num_kv else math.nan,
                fleet.provisioned(p.name),
                energy[p.name] / dt if dt > 0 else 0.0,
                d[1] / d[0] if d[0] else math.nan,
            )
        self._interval_done = {k: list(v) for k, v in self._done.items()}
        self._done = {p.name: [0, 0, 0] for p in self.pools}

    # ----------------------------------------------------------------- power capping

    def _cap(self) -> None:
        pw = self.cfg.power
        assert pw is not None
        level = next_cap_level(pw, self.cap_level, self.power_w, self.uncapped_w, self.pool_power_w)
        if level != self.cap_level:
            self.num_cap_changes += 1
            self.cap_level = level
        clock = pw.capped_clock or bundled_coefficients().capped_clock
        low = set(pw.low_priority_pools)
        for p in self.pools:
            capped = level == 2 or (level == 1 and p.name in low)
            assert isinstance(p.perf, Clocked)  # clocked_pools wrapped every pool's model
            p.perf.clock = clock if capped else 1.0
            if capped:
                self.capped_s[p.name] += self.cfg.interval_s

    # ----------------------------------------------------------------- failures at a rate

    def _random_failures(self, now: float) -> None:
        f = self.cfg.failures
        assert f is not None
        p_fail = 1 - math.exp(-f.rate_per_hour * self.cfg.interval_s / 3600)
        for name in self.fleet.members:
            for i in self.fleet.serving_ids(name):
                if self.rng.random() < p_fail:
                    at = now + self.rng.uniform(0, self.cfg.interval_s)
                    self.loop.at(at, lambda i: self.fleet.fail(i, f.repair_s), i)

    # ----------------------------------------------------------------- the end

    def finish(self, end_s: float) -> dict[str, Any]:
        """Close the last interval; the operations' counts for the summary."""
        if end_s > self.last_t:
            self._account(self.last_t, end_s)
            self.last_t = end_s
        self.fleet.finish(end_s)
        for e in self._pending_failures:  # not reached: the loop ended before
            self._failure_notice(e, f"the run ended at {end_s:,.6g} s")
        self._pending_failures = []
        from servesim.metrics.fleet_figures import held_fleet

        held = {
            p.name: held_fleet(
                [self.cluster.replicas[i].totals for i in self.fleet.members[p.name]], None, end_s
            )
            for p in self.pools
        }
        every = held_fleet([r.totals for r in self.cluster.replicas], None, end_s)
        out = {
            **self.fleet.counts(),
            "gpu_hours": every["gpu_hours"],
            # Replicas held at once (starting, serving or draining): at most, and on average over the run.
            "peak_replicas": {k: v["peak_replicas"] for k, v in held.items()},
            "mean_replicas": {k: v["mean_replicas"] for k, v in held.items()},
            "peak_gpus": every["peak_gpus"],
            "mean_gpus": every["mean_gpus"],
            "num_cap_changes": self.num_cap_changes,
            "capped_s": dict(self.capped_s),
            "max_interval_power_w": float(max(self.interval_power_w)) if self.interval_power_w else 0.0,
        }
        if self.cfg.power is not None:
            out.update(
                {
                    "budget_w": self.cfg.power.budget_w,
                    "num_intervals": self.num_intervals,
                    "num_intervals_over_budget": self.num_over_budget,
                    "over_budget_s": self.over_budget_s,
                }
            )
        return out
