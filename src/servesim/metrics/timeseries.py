"""Per-pool time series of a cluster with operations: one row per pool and control interval.

Columns (``timeseries.<fmt>`` beside the other outputs; reports plot exactly these)::

    t_s             start of the interval (s)
    pool            the pool's name
    arrivals        requests routed to the pool in the interval (hand-offs and retries too)
    queue_len       requests waiting at the interval's end (in its replicas' queues, and
                    for the first stage those waiting for a serving replica)
    running         requests running at the interval's end
    batch_tokens    mean tokens per step over the interval (prefill chunks + decodes)
    kv_util         fraction of KV blocks in use, averaged over the interval and the pool's
                    serving replicas
    replicas        replicas provisioned at the end (starting, serving or draining)
    power_w         mean GPU power of the pool over the interval (servesim.perf.power)
    slo_attainment  fraction of the requests finished in the pool in the interval that met
                    every SLO (NaN: none finished)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COLUMNS = (
    "t_s",
    "pool",
    "arrivals",
    "queue_len",
    "running",
    "batch_tokens",
    "kv_util",
    "replicas",
    "power_w",
    "slo_attainment",
)


@dataclass(slots=True)
class TimeSeries:
    """The rows, column by column (see the module docstring for each column)."""

    t_s: list[float] = field(default_factory=list)
    pool: list[str] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    queue_len: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    batch_tokens: list[float] = field(default_factory=list)
    kv_util: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    slo_attainment: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t_s)

    def add(
        self,
        t_s: float,
        pool: str,
        arrivals: int,
        queue_len: int,
        running: int,
        batch_tokens: float,
        kv_util: float,
        replicas: int,
        power_w: float,
        slo_attainment: float,
    ) -> None:
        self.t_s.append(t_s)
        self.pool.append(pool)
        self.arrivals.append(arrivals)
        self.queue_len.append(queue_len)
        self.running.append(running)
        self.batch_tokens.append(batch_tokens)
        self.kv_util.append(kv_util)
        self.replicas.append(replicas)
        self.power_w.append(power_w)
        self.slo_attainment.append(slo_attainment)

    def columns(self) -> dict[str, np.ndarray]:
        ints = ("arrivals", "queue_len", "running", "replicas")
        return {
            name: np.asarray(self.pool, dtype=object)
            if name == "pool"
            else np.asarray(getattr(self, name), dtype=np.int64 if name in ints else np.float64)
            for name in COLUMNS
        }

    def of_pool(self, pool: str) -> dict[str, np.ndarray]:
        """The columns of one pool's rows."""
        cols = self.columns()
        keep = cols["pool"] == pool
        return {name: col[keep] for name, col in cols.items()}
