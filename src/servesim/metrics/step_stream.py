"""The step series written to a file in row groups as the run goes (``StreamedStepSeries``).

A run of a fleet's day has hundreds of millions of steps: kept in memory, their rows (nine
values each, held compactly as runs until read: ``StepSeries``) take gigabytes. Where the
run has an output directory, the series goes to ``steps.parquet`` (or ``.csv``) instead:
once ``row_group_rows`` rows are held, those whose values are final are written out as one
row group and dropped. What the summary reads of the steps, the waiting requests' seconds
by replica (``waiting_s_by_replica``), is summed as rows are written.

A row is final once written as a row (an event step) or, for the rows of a run of decode
steps (``engine.run_rows.RunRows``), once its replica has added a row after them: the run's
waiting counts are completed when its last step ends (``RunRows.add_waiting``), before the
replica's next step. So the rows held between row groups are at most ``row_group_rows``
plus one open run per replica, and the file holds the same rows, in the same order, as
``StepSeries.columns()`` would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from servesim.metrics.records import STEP_COLUMNS, StepRows, StepSeries

ROW_GROUP_ROWS = 1 << 18


class StreamedStepSeries(StepSeries):
    """A ``StepSeries`` that writes its rows to ``path`` (Parquet or CSV) in row groups.

    ``finish()`` writes the rest and closes the file; ``columns()`` (and the column
    properties) read it back whole, for a caller that wants them in memory after all.
    """

    __slots__ = (
        "path",
        "format",
        "row_group_rows",
        "_open",
        "_writer",
        "_csv",
        "_num_written",
        "_waiting_s",
        "_finished",
    )

    def __init__(
        self, path: str | Path, format: str = "parquet", row_group_rows: int = ROW_GROUP_ROWS
    ) -> None:
        if format not in ("parquet", "csv"):
            raise ValueError(f"steps format must be 'parquet' or 'csv', not {format!r}")
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be at least 1, not {row_group_rows}")
        super().__init__()
        self.path = Path(path)
        self.format = format
        self.row_group_rows = row_group_rows
        self._open: dict[int, int] = {}  # replica -> its open run's index in _pending
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter once a group was written
        self._csv: Any = None  # the CSV file once a group was written
        self._num_written = 0
        self._waiting_s: dict[int, float] = {}
        self._finished = False

    def add_step(
        self,
        replica: int,
        start_s: float,
        duration_s: float,
        num_prefill_tokens: int,
        num_decode_reqs: int,
        num_running: int,
        num_waiting: int,
        kv_blocks_used: int,
        num_preempted: int,
    ) -> None:
        StepSeries.add_step(
            self,
            replica,
            start_s,
            duration_s,
            num_prefill_tokens,
            num_decode_reqs,
            num_running,
            num_waiting,
            kv_blocks_used,
            num_preempted,
        )
        if self._open:
            self._open.pop(replica, None)
        if len(self._cols["start_s"]) + self._num_pending_rows >= self.row_group_rows:
            self._write_final()

    def add_rows(self, rows: StepRows) -> None:
        rid: int = getattr(rows, "replica_id", -1)
        self._open[rid] = len(self._pending)  # the replica's run before it, if open, is final now
        StepSeries.add_rows(self, rows)
        if len(self._cols["start_s"]) + self._num_pending_rows >= self.row_group_rows:
            self._write_final()

    def _write_final(self, everything: bool = False) -> None:
        """Write the final rows (all of them with ``everything``)."""
        if self._finished:
            raise RuntimeError(f"{self.path}: the step series was finished; no rows can be added")
        n_cols = len(self._cols["start_s"])
        if everything:
            at, cut = n_cols, len(self._pending)
        else:
            # Held back: the first open run, and the row before it (the step that started the
            # run: its start bounds the run's staged arrivals, ``RunRows._count_waiting``), or
            # without one the last row (a run may follow it).
            first_open = min(self._open.values()) if self._open else len(self._pending)
            at = max((self._pending[first_open][0] if self._open else n_cols) - 1, 0)
            cut = 0
            while cut < first_open and self._pending[cut][0] <= at:
                cut += 1
        keep_pending = self._pending[cut:]
        keep_rows = sum(r.num_rows for _, r in keep_pending)
        cols = self._cols
        self._pending = self._pending[:cut]
        self._cols = {name: col[:at] for name, col in cols.items()}
        self._num_pending_rows -= keep_rows
        part = _arrays(StepSeries._materialized(self))  # the final rows, as StepSeries writes them
        self._cols = {name: col[at:] for name, col in cols.items()}
        self._pending = [(a - at, r) for a, r in keep_pending]
        self._num_pending_rows = keep_rows
        self._open = {rid: i - cut for rid, i in self._open.items()}
        if len(part["start_s"]):
            self._write_group(part)

    def _write_group(self, part: dict[str, np.ndarray]) -> None:
        rep = part["replica"]
        waiting = np.bincount(rep, weights=part["num_waiting"] * part["duration_s"])
        for r in np.flatnonzero(np.bincount(rep)).tolist():
            self._waiting_s[r] = self._waiting_s.get(r, 0.0) + float(waiting[r])
        self._num_written += len(rep)
        if self.format == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.table(part)
            if self._writer is None:
                # Dictionaries for the count columns only: the times are nearly all distinct,
                # and encoding them so took three quarters of the write.
                counts = [n for n in STEP_COLUMNS if n not in ("start_s", "duration_s")]
                self._writer = pq.ParquetWriter(self.path, table.schema, use_dictionary=counts)
            self._writer.write_table(table)
        else:
            import csv

            if self._csv is None:
                self._csv = open(self.path, "w", newline="", encoding="utf-8")
                csv.writer(self._csv).writerow(STEP_COLUMNS)
            csv.writer(self._csv).writerows(zip(*(part[n].tolist() for n in STEP_COLUMNS), strict=True))

    def finish(self) -> Path:
        """Write the rows still held and close the file (an empty series: its header only)."""
        if not self._finished:
            self._write_final(everything=True)
            if self._writer is None and self._csv is None:
                self._write_empty()
            if self._writer is not None:
                self._writer.close()
            if self._csv is not None:
                self._csv.close()
            self._finished = True
        return self.path

    def _write_empty(self) -> None:
        empty = StepSeries().columns()
        if self.format == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table(empty), self.path)
        else:
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(",".join(STEP_COLUMNS) + "\n")

    def move_to(self, dest: str | Path) -> Path:
        """``finish()`` and move the file to ``dest`` (same filesystem: an output directory's
        temporary name, renamed into place with the other outputs)."""
        self.finish()
        os.replace(self.path, dest)
        self.path = Path(dest)
        return self.path

    def discard(self) -> None:
        """Close and remove the file (a run that failed leaves none behind)."""
        for f in (self._writer, self._csv):
            if f is not None:
                f.close()
        self._writer = self._csv = None
        self._finished = True
        self.path.unlink(missing_ok=True)

    def waiting_s_by_replica(self, num_replicas: int) -> np.ndarray:
        """As ``StepSeries``'s, from the sums kept as rows were written (``finish``es the file:
        the summary reads it once the run is over)."""
        self.finish()
        out = np.zeros(max(num_replicas, max(self._waiting_s, default=-1) + 1))
        for r, w in self._waiting_s.items():
            out[r] = w
        return out

    def _materialized(self) -> dict[str, list[Any]]:
        """The whole series read back from the file (after ``finish``)."""
        self.finish()
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(self.path)
            return {name: table.column(name).to_pylist() for name in STEP_COLUMNS}
        import csv

        with open(self.path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))[1:]
        return {
            name: [(float if name in ("start_s", "duration_s") else int)(row[i]) for row in rows]
            for i, name in enumerate(STEP_COLUMNS)
        }

    def columns(self) -> dict[str, np.ndarray]:
        return _arrays(self._materialized())

    def __len__(self) -> int:
        return self._num_written + StepSeries.__len__(self)


def _arrays(cols: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(cols[name], np.float64 if name in ("start_s", "duration_s") else np.int64)
        for name in STEP_COLUMNS
    }
