"""The step-series rows of a run of pure-decode steps, kept as the run until they are final.

A run (``decode_runs.Run``) of k steps would be k rows of the step series, nine values
each; most simulations never read them (the summary needs none on a lone replica). So the
replica hands the series a ``RunRows`` (``metrics.records.StepSeries.add_rows``), which
stands for the same rows, value for value: start times summed step by step from the run's
start, as the engine's clock did; KV blocks in use from the blocks each step's crossings
took, from the pool's block phases at the segment's start; and the waiting counts of the
steps after requests queued during the run (``add_waiting``, when the run ends).

Once the rows are final (the replica has stepped again) the series has the run write itself
into its buffers (``flatten_into``: the step times as C doubles, its other lists copied
whole, a few numbers a run; ``metrics.flat_runs.FlatRuns``) and lets it go: their columns are
built with numpy when read (``metrics.step_arrays``). ``write`` writes the rows one value at a
time, for a series read as lists before the run is written in.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import Any, Final

from servesim.engine.decode_runs import Run
from servesim.metrics.flat_runs import SEG_FIELDS, FlatRuns, StepRows

# A run's ``queued_s`` and ``staged_s`` until ``add_waiting`` gives it some (a run nobody
# queued during keeps it): one empty list shared by every run and never changed, instead of
# two empty lists a run.
_NONE_QUEUED: Final[list[float]] = []


class RunRows(StepRows):
    """The rows of one run's steps (the step that started it has its own row, just before)."""

    replica_id: int
    num_rows: int

    def __init__(self, replica_id: int, run: Run, num_waiting: int, block_size: int) -> None:
        """``num_waiting``: the waiting queue at the run's start (every step's, until
        ``add_waiting`` says who queued during it)."""
        self.replica_id = replica_id
        self.start_s = run.start_s
        self.durations = run.durations
        self.seg_rows = run.seg_rows
        self.phases = run.phases
        self.block_size = block_size
        self.num_waiting = num_waiting
        self.num_rows = len(run.durations)
        self.queued_s = _NONE_QUEUED  # queued during the run (the waiting queue), sorted
        self.staged_s = _NONE_QUEUED  # arrived during the run, staged (async scheduling)
        self._written: dict[str, list[Any]] | None = None
        self._first = 0  # index of the first row in the columns written

    def seal(self, prev_start_s: float) -> float:
        """The run has ended and its rows are final (its replica counted who queued during
        it): ``waiting_s(prev_start_s)``, the replica's share of the waiting seconds."""
        return self.waiting_s(prev_start_s)

    def flatten_into(self, flat: FlatRuns) -> None:
        """Append the rows, as ``step_arrays.rows_to_arrays`` reads them, to ``flat``: the
        run's lists are laid out as its buffers, so each is copied whole."""
        flat.add_durations(self.durations)
        flat.start_s.append(self.start_s)
        flat.num_rows.append(self.num_rows)
        flat.replica.append(self.replica_id)
        flat.num_waiting.append(self.num_waiting)
        flat.block_size.append(self.block_size)
        flat.num_segs.append(len(self.phases))
        flat.segs.extend(self.seg_rows)
        flat.phases.extend(self.phases)
        flat.queued_s.extend(self.queued_s)
        flat.num_queued.append(len(self.queued_s))
        flat.staged_s.extend(self.staged_s)
        flat.num_staged.append(len(self.staged_s))

    def add_waiting(self, queued_s: list[float], staged_s: list[float]) -> None:
        """Requests that queued during the run (``queued_s``, sorted) count as waiting in
        the rows of the steps that started after they arrived; those staged by async
        scheduling (``staged_s``) from the step after that (they join the waiting queue
        at the start of the second step after their arrival)."""
        self.queued_s = self.queued_s + queued_s  # a new list: the first may be _NONE_QUEUED
        self.staged_s = self.staged_s + staged_s
        if self._written is not None:
            self._count_waiting(self._written, queued_s, staged_s)

    def write(self, cols: dict[str, list[Any]]) -> None:
        """Append the run's rows to the series' columns."""
        starts, used = cols["start_s"], cols["kv_blocks_used"]
        decodes, running = cols["num_decode_reqs"], cols["num_running"]
        durations = self.durations
        first = len(starts)
        bs = self.block_size
        t = self.start_s
        i = 0
        seg_rows = self.seg_rows
        for s, phase in enumerate(self.phases):
            f = SEG_FIELDS * s
            n, k, j0, base_used = seg_rows[f], seg_rows[f + 1], seg_rows[f + 2], seg_rows[f + 3]
            popped = 0
            for j in range(j0, j0 + k):
                starts.append(t)
                t += durations[i]
                popped += phase[-j % bs]
                used.append(base_used + popped)
                i += 1
            decodes.extend([n] * k)
            running.extend([n] * k)  # only pooled decodes run in a run
        m = self.num_rows
        cols["duration_s"].extend(durations)
        cols["replica"].extend([self.replica_id] * m)
        cols["num_prefill_tokens"].extend([0] * m)
        cols["num_waiting"].extend([self.num_waiting] * m)
        cols["num_preempted"].extend([0] * m)
        self._written, self._first = cols, first
        self._count_waiting(cols, self.queued_s, self.staged_s)

    def waiting_s(self, prev_start_s: float) -> float:
        """The sum over the run's rows of ``num_waiting x duration_s`` (waiting requests
        integrated over time), from the run itself, without writing the rows out.
        ``prev_start_s``: the start of the row just before them (the step that started the
        run), where a request staged by async scheduling may have arrived before."""
        if not self.num_waiting and not self.queued_s and not self.staged_s:
            return 0.0  # nobody waits in any row (what the sum below gives: 0 x its span)
        durations = self.durations
        n = len(durations)
        span_s = 0.0
        t = last_start = self.start_s
        for d in durations:  # float sums as ``sum`` and ``write`` add them, typed for mypyc
            last_start = t
            span_s += d
            t += d
        total: float = self.num_waiting * span_s
        # Usually every request queued during the run arrived after its last step started
        # (the run stopped at the arrival): it counts in none of its rows.
        queued = [q for q in self.queued_s if q <= last_start]
        staged = [q for q in self.staged_s if q <= last_start]
        if not queued and not staged:
            return total
        starts = list(accumulate(durations[:-1], initial=self.start_s))  # as ``write`` sums them
        suffix = list(accumulate(reversed(durations)))[::-1]  # suffix[r]: the rows from r on
        for q in queued:
            r = bisect_left(starts, q)
            if r < n:
                total += suffix[r]
        for q in staged:
            r = bisect_left(starts, q) + 1 if q > prev_start_s else 0
            if r < n:
                total += suffix[r]
        return total

    def _count_waiting(
        self, cols: dict[str, list[Any]], queued_s: list[float], staged_s: list[float]
    ) -> None:
        starts, col = cols["start_s"], cols["num_waiting"]
        lo, end = self._first, self._first + self.num_rows
        for q in queued_s:  # usually none starts after the arrival: the run stopped before it
            for row in range(bisect_left(starts, q, lo, end), end):
                col[row] += 1
        for q in staged_s:  # from the run's first step (its row is lo - 1): the step after its arrival's
            for row in range(bisect_left(starts, q, lo - 1, end) + 1, end):
                col[row] += 1
