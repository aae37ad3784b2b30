"""Autoscaling of a cluster's pools, decided at each tick of ``cluster.operations.Operations``
(which is an ``Autoscaling``): Kubernetes HPA's rule, HeteroScale's coordinated prefill:decode
scaling (ByteDance 2025), SLO attainment, and Llumnix's freeness.

Per pool, desired = ceil(current x metric / target) over its serving replicas, kept while
metric / target is within ``tolerance`` of 1 (HPA's default 0.1), within [floor,
max_replicas] where the floor is ``min_replicas`` raised by the time-of-day ``schedule``;
scale out at once (cold start: ``startup_s`` plus the weight shard at ``load_gb_per_s``),
scale in only after ``scale_in_grace_s`` below, by draining. With ``prefill_decode_ratio``
the prefill pool follows the decode pool's count.
"""

from __future__ import annotations

import math

from servesim.cluster.fleet import ClusterHost, Fleet, ReplicaPhase
from servesim.cluster.freeness import virtual_blocks
from servesim.cluster.spec import PoolSpec
from servesim.config.operations import OperationsConfig, PoolScaling
from servesim.metrics.timeseries import TimeSeries


class Autoscaling:
    """The scaling decisions of ``Operations`` (which sets every attribute below)."""

    cluster: ClusterHost
    cfg: OperationsConfig
    fleet: Fleet
    pools: list[PoolSpec]
    series: TimeSeries
    rules: dict[str, PoolScaling]  # pool -> its scaling rule
    below_since: dict[str, float | None]  # pool -> since when it wants fewer replicas
    _interval_done: dict[str, list[int]]  # pool -> the last interval's (finished, met SLO, tokens)
    _gpu_util: dict[str, float]  # pool -> the last interval's GPU utilization

    def _autoscale(self, now: float) -> None:
        a = self.cfg.autoscaling
        assert a is not None
        desired = {name: self._desired(rule, now) for name, rule in self.rules.items()}
        if a.prefill_decode_ratio is not None:
            dec = next((p.name for p in self.pools if p.role == "decode"), None)
            pre = next((p.name for p in self.pools if p.role == "prefill"), None)
            if dec is not None and pre is not None:
                n_dec = desired.get(dec, self.fleet.count(dec, ReplicaPhase.STARTING, ReplicaPhase.SERVING))
                n = max(1, math.ceil(a.prefill_decode_ratio * n_dec))
                rule = self.rules.get(pre)
                desired[pre] = min(max(n, rule.min_replicas), rule.max_replicas) if rule else n
        for name, n in desired.items():
            self._scale_to(name, n, now)

    def _desired(self, rule: PoolScaling, now: float) -> int:
        fleet, name = self.fleet, rule.pool
        current = fleet.count(name, ReplicaPhase.STARTING, ReplicaPhase.SERVING)
        row = [p.name for p in self.pools].index(name) - len(self.pools)  # this tick's, from the end
        serving = max(fleet.count(name, ReplicaPhase.SERVING), 1)
        queue = self.series.queue_len[row]
        if rule.metric == "freeness":
            want = current + self._freeness_step(rule)
        elif rule.metric == "slo_attainment":
            att = self.series.slo_attainment[row]
            if math.isnan(att):
                want = current if queue == 0 else current + 1
            elif att < rule.target:
                want = math.ceil(current * (1 - att) / (1 - rule.target)) if rule.target < 1 else current + 1
            else:
                want = current - 1 if queue == 0 else current
        else:
            value = {
                "queue_len": queue / serving,
                "running": self.series.running[row] / serving,
                "kv_util": 0.0 if math.isnan(self.series.kv_util[row]) else self.series.kv_util[row],
                "decode_tokens_per_s": self._interval_done[name][2] / self.cfg.interval_s / serving,
                "gpu_util": self._gpu_util.get(name, 0.0),
            }[rule.metric]
            ratio = value / rule.target
            # HPA's tolerance: within it the count stays (else a steady load flaps around a boundary).
            if current > 0 and abs(ratio - 1) <= rule.tolerance:
                want = current
            else:
                want = math.ceil(max(current, 1) * ratio - 1e-9)
            if current == 0 and queue > 0:
                want = max(want, 1)
        floor = max(rule.min_replicas, self._scheduled_floor(name, now))
        return min(max(want, floor), rule.max_replicas)

    def _freeness_step(self, rule: PoolScaling) -> int:
        """Llumnix's scaling (the artifact's ``avg_load`` policy, llumnix at 37d8e5ea,
        ``global_scheduler/scale_scheduler.py``, on ``cluster.freeness``): the pool's freeness
        is the free blocks less the virtual usages over all its serving replicas, per request
        of their batches. Below ``target``: one more replica; else, when that freeness with the
        replica that would drain taken away (its blocks gone, its requests kept) stays above
        ``scale_in_above``: one fewer; else none; and none while a replica is starting."""
        c, fleet = self.cluster, self.fleet
        ids = fleet.serving_ids(rule.pool)
        # The artifact decides nothing until every instance reports (``check_scale``): a
        # starting replica holds the decision back.
        if not ids or fleet.count(rule.pool, ReplicaPhase.STARTING):
            return 0
        free = virtual = batch = 0
        for i in ids:
            rep = c.replicas[i]
            free += rep.kv.num_free_blocks
            virtual += virtual_blocks(rep, c.headroom_of(i))
            batch += len(rep.scheduler.running) + (1 if rep.scheduler.waiting else 0)
        if batch == 0:
            return -1 if len(ids) > 1 else 0
        if (free - virtual) / batch < rule.target:
            return 1
        assert rule.scale_in_above is not None
        out = c.outstanding
        victim = min(reversed(ids), key=lambda j: out[j])  # Fleet.drain's choice
        total = c.replicas[victim].kv.num_gpu_blocks - 1
        if len(ids) > 1 and (free - total - virtual) / batch > rule.scale_in_above:
            return -1
        return 0

    def _scheduled_floor(self, name: str, now: float) -> int:
        a = self.cfg.autoscaling
        assert a is not None
        entries = a.schedule.get(name, [])
        t = now % a.day_s
        active = [e for e in entries if e.at_s <= t] or entries[-1:]  # before the first: the day's last
        return max(active, key=lambda e: e.at_s).min_replicas if active else 0

    def _scale_to(self, name: str, n: int, now: float) -> None:
        fleet = self.fleet
        current = fleet.count(name, ReplicaPhase.STARTING, ReplicaPhase.SERVING)
        if n > current:
            self.below_since[name] = None
            for _ in range(n - current):
                fleet.start(name)
        elif n < current:
            since = self.below_since[name]
            rule = self.rules.get(name)
            grace = rule.scale_in_grace_s if rule else 0.0
            if since is None:
                self.below_since[name] = since = now
            if now - since >= grace:
                for _ in range(current - n):
                    fleet.drain(name)
                self.below_since[name] = None
        else:
            self.below_since[name] = None
