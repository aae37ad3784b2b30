"""The per-step series of a simulation (``StepSeries``): one row per engine iteration.

Event steps arrive as rows (``add_step``); the steps of a skip-ahead run (most of them, on a
lone replica) arrive as the run (``add_rows``: its step times, pool sizes and KV phases).
Once its rows are final, and every run before it is written, a run is written into typed
buffers (``flat_runs.FlatRuns``: its step times as C doubles, a few numbers a run and a
segment) and let go. Once ``row_group_rows`` rows are held (``KEEP_GROUP_ROWS``; a file's
groups are ``ROW_GROUP_ROWS``), those whose values are final are handed to ``_emit`` as a
group: kept in memory compactly (``step_arrays.PackedGroup``: about 10 bytes a row of a run,
its step time, against the hundred-odd a row its Python objects take), their columns built
with numpy for all of a group's runs at once when read (``step_arrays.rows_to_arrays``), or
built so and written to a file by ``StreamedStepSeries``.

A row is final once added as a row (an event step) or, for the rows of a run, once its
replica has added a row after them: the run's waiting counts are completed when its last
step ends (``RunRows.add_waiting``), before the replica's next step. The row before the
first open run is held too (the step that started it: its start bounds the run's staged
arrivals). So the rows held between groups are at most ``row_group_rows`` plus one open run
per replica.

Compiled with the engine (mypyc, ``setup.py``): the replica adds a row or a run per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.flat_runs import FlatRuns, StepRows, flatten_runs
from servesim.metrics.step_arrays import STEP_COLUMNS, PackedGroup, rows_to_arrays

ROW_GROUP_ROWS = 1 << 18  # a group written to a file (``StreamedStepSeries``)
# A group kept in memory: packing a row costs about as much as keeping its run does, so a
# run up to about a million steps (the Azure hour has 443,278) is kept as it is.
KEEP_GROUP_ROWS = 1 << 20

__all__ = ["ROW_GROUP_ROWS", "STEP_COLUMNS", "StepRows", "StepSeries"]


class StepSeries:
    """One row per engine iteration (per replica), in the order the steps ran.

    Event steps are appended as rows (``add_step``). The steps of a skip-ahead run are kept as
    the run (``add_rows``) until ``row_group_rows`` rows are held; the final ones then become
    compact groups (the module's docstring). A simulation that reads no step column
    never builds them as Python objects. The column properties give lists; ``columns()``
    gives numpy arrays.

    Columns: ``replica``, ``start_s``, ``duration_s`` (GPU time + CPU overhead, or their
    maximum with async scheduling), ``num_prefill_tokens``, ``num_decode_reqs``,
    ``num_running``, ``num_waiting``, ``kv_blocks_used``, ``num_preempted``.
    """

    def __init__(self, row_group_rows: int = KEEP_GROUP_ROWS, **columns: list[Any]) -> None:
        unknown = set(columns) - set(STEP_COLUMNS)
        if unknown:
            raise TypeError(f"StepSeries has no column {sorted(unknown)[0]!r}")
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be at least 1, not {row_group_rows}")
        self.row_group_rows = row_group_rows
        self._set_cols({name: list(columns.get(name, ())) for name in STEP_COLUMNS})
        self._pending: list[tuple[int, StepRows]] = []  # (event rows before them, rows)
        self._num_pending_rows = 0
        self._first_pending = 0  # the number of runs added before _pending[0]
        self._open: dict[int, int] = {}  # replica -> its open run's number (runs added before it)
        self._flat = FlatRuns()  # the runs before _pending, written out
        self._flat_at: list[int] = []  # event rows before each of them
        self._num_flat_rows = 0
        self._groups: list[PackedGroup] = []  # rows emitted, kept in memory
        self._num_emitted = 0

    def _set_cols(self, cols: dict[str, list[Any]]) -> None:
        """The event rows held, one list a column (attributes: the replica adds a row a step)."""
        self._replica: list[int] = cols["replica"]
        self._start_s: list[float] = cols["start_s"]
        self._duration_s: list[float] = cols["duration_s"]
        self._num_prefill_tokens: list[int] = cols["num_prefill_tokens"]
        self._num_decode_reqs: list[int] = cols["num_decode_reqs"]
        self._num_running: list[int] = cols["num_running"]
        self._num_waiting: list[int] = cols["num_waiting"]
        self._kv_blocks_used: list[int] = cols["kv_blocks_used"]
        self._num_preempted: list[int] = cols["num_preempted"]

    @property
    def _cols(self) -> dict[str, list[Any]]:
        return {
            "replica": self._replica,
            "start_s": self._start_s,
            "duration_s": self._duration_s,
            "num_prefill_tokens": self._num_prefill_tokens,
            "num_decode_reqs": self._num_decode_reqs,
            "num_running": self._num_running,
            "num_waiting": self._num_waiting,
            "kv_blocks_used": self._kv_blocks_used,
            "num_preempted": self._num_preempted,
        }

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
        """Append one step's row (after any rows held compactly)."""
        self._replica.append(replica)
        self._start_s.append(start_s)
        self._duration_s.append(duration_s)
        self._num_prefill_tokens.append(num_prefill_tokens)
        self._num_decode_reqs.append(num_decode_reqs)
        self._num_running.append(num_running)
        self._num_waiting.append(num_waiting)
        self._kv_blocks_used.append(kv_blocks_used)
        self._num_preempted.append(num_preempted)
        is_open = self._open
        if is_open:  # the replica's run before this row is final now
            k = is_open.get(replica, -1)  # get and del: compiled, native (``pop`` by name is not)
            if k >= 0:
                del is_open[replica]
                if k == self._first_pending:  # the first run not written
                    self._flush(False)
        if len(self._start_s) + self._num_pending_rows + self._num_flat_rows >= self.row_group_rows:
            self._emit_final(False)

    def add_rows(self, rows: StepRows) -> None:
        """Append rows kept compactly until a column is read (they may still change until
        their replica adds a row: the run's waiting counts are completed when it ends)."""
        self._open[rows.replica_id] = self._first_pending + len(self._pending)
        self._pending.append((len(self._start_s), rows))
        self._num_pending_rows += rows.num_rows
        if len(self._start_s) + self._num_pending_rows + self._num_flat_rows >= self.row_group_rows:
            self._emit_final(False)

    def rows_cut(self, num_rows: int) -> None:
        """Rows held compactly lost their last ``num_rows`` before being emitted (a run of
        decode steps cut short: ``engine.replica.Replica.cut_run``; the run in flight is its
        replica's open run, never emitted before its replica adds a row after it)."""
        self._num_pending_rows -= num_rows

    def _flush(self, everything: bool) -> None:
        """Write the runs before the first open one (all of them with ``everything``) into
        the buffers (``_flat``) and let them go."""
        pending = self._pending
        n = len(pending)
        if everything:
            self._open = {}  # every run written as it is
        elif self._open:
            first, is_open = self._first_pending, self._open
            n = 0
            while n < len(pending) and is_open.get(pending[n][1].replica_id, -1) != first + n:
                n += 1
        if n <= 0:
            return
        flat, flat_at = self._flat, self._flat_at
        rows = 0
        for i in range(n):
            at, r = pending[i]
            flat_at.append(at)
            r.flatten_into(flat)
            rows += r.num_rows
        del pending[:n]
        self._first_pending += n
        self._num_pending_rows -= rows
        self._num_flat_rows += rows

    def _emit_final(self, everything: bool) -> None:
        """Hand the final rows (all of them with ``everything``) to ``_emit`` as columns."""
        self._flush(everything)
        n_cols = len(self._start_s)
        pending = self._pending
        if everything:
            at = n_cols
        else:
            # Held back: the first open run (written runs are before it), and the row before
            # it, or without one the last row (a run may follow it).
            at = (pending[0][0] if pending else n_cols) - 1
            if at < 0:
                at = 0
        if at == 0 and not self._flat_at:
            return
        head = self._cols
        tail: dict[str, list[Any]] = {}
        for name, col in head.items():  # the rows after ``at`` move, the others stay
            tail[name] = col[at:]
            del col[at:]
        at_runs, flat = self._flat_at, self._flat
        num_rows = at + self._num_flat_rows
        self._set_cols(tail)
        self._pending = [(a - at, r) for a, r in pending]
        self._flat, self._flat_at, self._num_flat_rows = FlatRuns(), [], 0
        self._num_emitted += num_rows
        self._emit(head, at_runs, flat)

    def _emit(self, cols: dict[str, list[Any]], at: list[int], flat: FlatRuns) -> None:
        """Final rows (event rows ``cols``, each run of ``flat`` after its ``at`` of them):
        kept in memory, compactly, their columns built when read."""
        self._groups.append(PackedGroup(cols, at, flat))

    def _emitted(self) -> dict[str, Any]:
        """The rows emitted so far, as columns."""
        if not self._groups:
            return rows_to_arrays({name: [] for name in STEP_COLUMNS}, [], flatten_runs([]))
        parts = [g.columns() for g in self._groups]
        return {name: np.concatenate([p[name] for p in parts]) for name in STEP_COLUMNS}

    def _materialized(self) -> dict[str, list[Any]]:
        """Every row as lists (the columns' properties): the groups emitted and the runs held
        written out (a run still open goes on counting its waiting requests into them)."""
        if self._groups or self._flat_at:
            emitted = self._emitted()
            written = rows_to_arrays(self._cols, self._flat_at, self._flat)  # every written run's rows
            n = len(emitted["start_s"]) + self._num_flat_rows  # before every run not written
            self._set_cols({name: emitted[name].tolist() + written[name].tolist() for name in STEP_COLUMNS})
            self._pending = [(a + n, r) for a, r in self._pending]
            self._groups, self._num_emitted = [], 0
            self._flat, self._flat_at, self._num_flat_rows = FlatRuns(), [], 0
        if not self._pending:
            return self._cols
        old = self._cols
        cols: dict[str, list[Any]] = {name: [] for name in STEP_COLUMNS}
        done = 0
        for at, rows in self._pending:
            if at > done:
                for name in STEP_COLUMNS:
                    cols[name].extend(old[name][done:at])
                done = at
            rows.write(cols)
        for name in STEP_COLUMNS:
            cols[name].extend(old[name][done:])
        self._set_cols(cols)
        self._first_pending += len(self._pending)
        self._pending, self._num_pending_rows, self._open = [], 0, {}
        return cols

    # The columns, one value a step (rows of runs written out first).
    @property
    def replica(self) -> list[Any]:
        return self._materialized()["replica"]

    @property
    def start_s(self) -> list[Any]:
        return self._materialized()["start_s"]

    @property
    def duration_s(self) -> list[Any]:
        return self._materialized()["duration_s"]

    @property
    def num_prefill_tokens(self) -> list[Any]:
        return self._materialized()["num_prefill_tokens"]

    @property
    def num_decode_reqs(self) -> list[Any]:
        return self._materialized()["num_decode_reqs"]

    @property
    def num_running(self) -> list[Any]:
        return self._materialized()["num_running"]

    @property
    def num_waiting(self) -> list[Any]:
        return self._materialized()["num_waiting"]

    @property
    def kv_blocks_used(self) -> list[Any]:
        return self._materialized()["kv_blocks_used"]

    @property
    def num_preempted(self) -> list[Any]:
        return self._materialized()["num_preempted"]

    def waiting_s_by_replica(self, num_replicas: int) -> Any:
        """Each replica's waiting requests integrated over its steps (the sum of
        ``num_waiting x duration_s``), as the engine sums ``ReplicaTotals.waiting_s`` (in
        another order: equal to rounding). A check of the engine's figure, from the columns."""
        cols = self.columns()
        rep = cols["replica"]
        return np.bincount(rep, weights=cols["num_waiting"] * cols["duration_s"], minlength=num_replicas)

    def columns(self) -> dict[str, Any]:
        """Every row, as float64 (times) and int64 columns."""
        held = rows_to_arrays(
            self._cols,
            self._flat_at + [a for a, _ in self._pending],
            flatten_runs([r for _, r in self._pending], self._flat.copy()),
        )
        if not self._groups:
            return held
        emitted = self._emitted()
        return {name: np.concatenate((emitted[name], held[name])) for name in STEP_COLUMNS}

    def __len__(self) -> int:
        return self._num_emitted + len(self._start_s) + self._num_flat_rows + self._num_pending_rows
