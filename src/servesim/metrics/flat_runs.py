"""Runs of step-series rows as flat lists (``FlatRuns``), for building their columns with
numpy (``metrics.step_arrays``). Compiled with the engine (mypyc, ``setup.py``): the loop
over the runs reads each run's fields natively.
"""

from __future__ import annotations

from array import array
from typing import Any, Protocol


class StepRows(Protocol):
    """Rows of the step series kept compactly (a run of the lazy engine's decode steps,
    ``engine.run_rows.RunRows``) until the series is read."""

    num_rows: int
    replica_id: int
    start_s: float  # start of the first row's step
    durations: list[float]  # one a row (empty once sealed)
    sealed: array[float] | None  # one a row, as C doubles, once its run has ended
    segments: list[tuple[int, int, int]]  # (pool size, rows, decode context sum of the first)
    phases: list[tuple[int, int, list[int]]]  # per segment: (first step, blocks used before, phases)
    block_size: int
    num_waiting: int  # waiting at the start (every row's, but for queued_s and staged_s)
    queued_s: list[float]  # requests queued during the run
    staged_s: list[float]  # requests staged during it (async scheduling)

    def write(self, cols: dict[str, list[Any]]) -> None:
        """Append the rows to ``cols`` (the series' columns by name, in ``STEP_COLUMNS``)."""

    def waiting_s(self, prev_start_s: float) -> float:
        """The sum of ``num_waiting x duration_s`` over the rows, without writing them
        (``prev_start_s``: the start of the row before them)."""


class FlatRuns:
    """Runs of rows (``StepRows``) as flat lists, for ``step_arrays.rows_to_arrays`` (which
    reads the same fields as numpy arrays from ``step_arrays.PackedRuns``)."""

    def __init__(self) -> None:
        self.durations: array[float] = array("d")  # every row's
        self.start_s: list[float] = []  # per run: its first row's start
        self.num_rows: list[int] = []
        self.replica: list[int] = []
        self.num_waiting: list[int] = []  # at its start
        self.queued_s: list[float] = []  # requests queued during the runs, run by run
        self.num_queued: list[int] = []  # per run: how many of them
        self.staged_s: list[float] = []  # staged during the runs (async scheduling), run by run
        self.num_staged: list[int] = []
        self.seg_n: list[int] = []  # per segment: pool size
        self.seg_k: list[int] = []  # rows
        self.seg_j0: list[int] = []  # its first step
        self.seg_base: list[int] = []  # KV blocks in use before it
        self.phases: list[int] = []  # its block size's counts: the pool by block phase
        self.seg_bs: list[int] = []  # its block size (its replica's KV cache's)


def flatten_runs(runs: list[StepRows]) -> FlatRuns:
    """What ``step_arrays.rows_to_arrays`` reads of ``runs``, as flat lists."""
    flat = FlatRuns()
    durations = flat.durations
    phases = flat.phases
    for r in runs:
        sealed = r.sealed
        if sealed is not None:
            durations.extend(sealed)
        else:
            durations.fromlist(r.durations)
        flat.start_s.append(r.start_s)
        flat.num_rows.append(r.num_rows)
        flat.replica.append(r.replica_id)
        flat.num_waiting.append(r.num_waiting)
        for n, k, _ in r.segments:
            flat.seg_n.append(n)
            flat.seg_k.append(k)
        for j0, base, ph in r.phases:
            flat.seg_j0.append(j0)
            flat.seg_base.append(base)
            phases.extend(ph)
            flat.seg_bs.append(r.block_size)
        flat.queued_s.extend(r.queued_s)
        flat.num_queued.append(len(r.queued_s))
        flat.staged_s.extend(r.staged_s)
        flat.num_staged.append(len(r.staged_s))
    return flat
