"""The step series written to a file in row groups as the run goes (``StreamedStepSeries``).

A run of a fleet's day has hundreds of millions of steps; where the run has an output
directory, its series goes to ``steps.parquet`` (or ``.csv``) instead of memory: each group
of final rows the series emits (``metrics.step_series``: once ``row_group_rows`` rows are
held, those whose values are final, as numpy columns) is written out as one row group and
dropped. What the summary reads of the steps, the waiting requests' seconds by replica
(``waiting_s_by_replica``), is summed as rows are written. The file holds the same rows, in
the same order, as ``StepSeries.columns()`` would. Compiled with the engine (mypyc).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from servesim.metrics.flat_runs import FlatRuns
from servesim.metrics.step_arrays import STEP_COLUMNS, event_arrays, rows_to_arrays
from servesim.metrics.step_series import ROW_GROUP_ROWS, StepSeries


class StreamedStepSeries(StepSeries):
    """A ``StepSeries`` that writes its rows to ``path`` (Parquet or CSV) in row groups.

    ``finish()`` writes the rest and closes the file; ``columns()`` (and the column
    properties) read it back whole, for a caller that wants them in memory after all.
    """

    def __init__(
        self, path: str | Path, format: str = "parquet", row_group_rows: int = ROW_GROUP_ROWS
    ) -> None:
        if format not in ("parquet", "csv"):
            raise ValueError(f"steps format must be 'parquet' or 'csv', not {format!r}")
        super().__init__(row_group_rows)
        self.path = Path(path)
        self.format = format
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter once a group was written
        self._csv: Any = None  # the CSV file once a group was written
        self._waiting_s: dict[int, float] = {}
        self._finished = False

    @property
    def _num_written(self) -> int:
        return self._num_emitted

    def _emit_final(self, everything: bool) -> None:
        if self._finished:
            raise RuntimeError(f"{self.path}: the step series was finished; no rows can be added")
        StepSeries._emit_final(self, everything)

    def _emit(self, cols: dict[str, list[Any]], at: list[int], flat: FlatRuns) -> None:
        part = rows_to_arrays(cols, at, flat)
        rep = part["replica"]
        waiting = np.bincount(rep, weights=part["num_waiting"] * part["duration_s"])
        for r in np.flatnonzero(np.bincount(rep)).tolist():
            self._waiting_s[r] = self._waiting_s.get(r, 0.0) + float(waiting[r])
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
            self._emit_final(everything=True)
            if self._writer is None and self._csv is None:
                self._write_empty()
            if self._writer is not None:
                self._writer.close()
            if self._csv is not None:
                self._csv.close()
            self._finished = True
        return self.path

    def _write_empty(self) -> None:
        empty = event_arrays({name: [] for name in STEP_COLUMNS})
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

    def waiting_s_by_replica(self, num_replicas: int) -> Any:
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

    def columns(self) -> dict[str, Any]:
        return event_arrays(self._materialized())
