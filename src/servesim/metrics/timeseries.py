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

import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.metrics.table_files import arrow_table, csv_cell

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


#: Rows a streamed time series writes at a time (one Parquet row group).
GROUP_ROWS = 4096


class StreamedTimeSeries(TimeSeries):
    """A ``TimeSeries`` written to ``path`` (Parquet or CSV, as ``timeseries.<fmt>`` is) in
    row groups of ``group_rows`` as the run goes, as ``metrics.step_stream`` writes the step
    series of a long run. It holds the rows not yet written, always the last ``keep`` (the
    interval's rows, one a pool, which the autoscaler reads by negative index); ``len`` counts
    every row; ``columns()`` writes the rest and reads the file back whole. NaN is an empty
    CSV cell, as ``metrics.output`` writes it.
    """

    def __init__(
        self, path: str | Path, format: str = "parquet", group_rows: int | None = None, keep: int = 1
    ) -> None:
        if format not in ("parquet", "csv"):
            raise ValueError(f"time series format must be 'parquet' or 'csv', not {format!r}")
        super().__init__()
        self.path = Path(path)
        self.format = format
        self.group_rows = max(GROUP_ROWS if group_rows is None else group_rows, 1)
        self.keep = max(keep, 1)
        self._num_written = 0
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter, or the CSV file
        self._finished = False

    def __len__(self) -> int:
        return self._num_written + len(self.t_s)

    def add(self, *row: Any) -> None:
        if self._finished:
            raise RuntimeError(f"{self.path}: the time series was finished; no rows can be added")
        TimeSeries.add(self, *row)
        if len(self.t_s) >= self.group_rows + self.keep:
            self._write(len(self.t_s) - self.keep)

    def _write(self, n: int) -> None:
        """Write the first ``n`` rows held and let them go."""
        part = {name: col[:n] for name, col in TimeSeries.columns(self).items()}
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = arrow_table(part)
            if self._writer is None:
                self._writer = pq.ParquetWriter(self.path, table.schema)
            self._writer.write_table(table)
        else:
            if self._writer is None:
                self._writer = open(self.path, "w", newline="", encoding="utf-8")
                csv.writer(self._writer).writerow(COLUMNS)
            rows = zip(*(part[name].tolist() for name in COLUMNS), strict=True)
            csv.writer(self._writer).writerows([csv_cell(x) for x in row] for row in rows)
        for name in COLUMNS:
            del getattr(self, name)[:n]
        self._num_written += n

    def finish(self) -> Path:
        """Write the rows still held and close the file."""
        if not self._finished:
            if self.t_s or self._writer is None:
                self._write(len(self.t_s))
            self._writer.close()
            self._finished = True
        return self.path

    def move_to(self, dest: str | Path) -> Path:
        """``finish()`` and move the file to ``dest`` (renamed into place with the other outputs)."""
        self.finish()
        os.replace(self.path, dest)
        self.path = Path(dest)
        return self.path

    def discard(self) -> None:
        """Close and remove the file (a run that failed leaves none behind)."""
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._finished = True
        self.path.unlink(missing_ok=True)

    def columns(self) -> dict[str, np.ndarray]:
        self.finish()
        ints = ("arrivals", "queue_len", "running", "replicas")
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(self.path)
            raw: dict[str, list[Any]] = {name: table.column(name).to_pylist() for name in COLUMNS}
        else:
            with open(self.path, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))[1:]
            raw = {
                name: [
                    x if name == "pool" else int(x) if name in ints else float(x) if x else math.nan
                    for x in (row[i] for row in rows)
                ]
                for i, name in enumerate(COLUMNS)
            }
        return {
            name: np.asarray(raw[name], dtype=object)
            if name == "pool"
            else np.asarray(raw[name], dtype=np.int64 if name in ints else np.float64)
            for name in COLUMNS
        }
