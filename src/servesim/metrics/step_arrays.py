"""The step series' rows as numpy columns, built for many rows at once (``StepSeries``).

A run of a fleet's day has tens of millions of steps. Its rows were once written one value
at a time into Python lists (nine objects a row) and converted to arrays from there; here
the rows of every run held by the series are built in a few numpy operations over all of
them together, value for value what ``engine.run_rows.RunRows.write`` writes:

- ``start_s``: each run's clock summed step by step from its start, as the engine's clock
  does. A cumulative sum is sequential in numpy (``np.add.accumulate``), so the runs, padded
  with zeros into rows of a power-of-two width, are summed row by row, exactly.
- ``kv_blocks_used``: blocks in use before each segment plus the crossings of its steps (at
  step j those of the pool in block phase ``-j mod block_size``), an integer cumulative sum.
- ``num_waiting``: the run's waiting queue at its start, plus the requests queued during it
  in the rows of the steps that started after they arrived (staged ones by async
  scheduling from the step after that).

``PackedGroup`` keeps a group of final rows in memory compactly: the event rows as columns,
the runs as their step times and a few numbers a run and a segment (``PackedRuns``), their
columns built when read.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import chain
from struct import Struct
from struct import error as struct_error
from typing import Any

import numpy as np

from servesim.metrics.flat_runs import SEG_FIELDS, FlatRuns, StepRows  # noqa: F401 (StepRows: re-exported)

STEP_COLUMNS = (
    "replica",
    "start_s",
    "duration_s",
    "num_prefill_tokens",
    "num_decode_reqs",
    "num_running",
    "num_waiting",
    "kv_blocks_used",
    "num_preempted",
)
FLOAT_COLUMNS = ("start_s", "duration_s")


def _dtype(name: str) -> type:
    return np.float64 if name in FLOAT_COLUMNS else np.int64


def event_arrays(cols: dict[str, Any]) -> dict[str, np.ndarray]:
    """Rows held as lists or arrays (event steps), as float64 and int64 columns."""
    return {name: _array(cols[name], _dtype(name)) for name in STEP_COLUMNS}


# The ``struct`` codes of the dtypes ``_array`` packs lists into (native order, standard sizes)
_CODES: dict[type, str] = {np.float64: "d", np.int64: "q"}


def _array(values: list[Any] | np.ndarray | array[Any], dtype: type) -> np.ndarray:
    """``values`` as an array of ``dtype``: a list packed by ``struct`` into the array's
    buffer (about 100 instructions a value, where ``np.fromiter`` takes about 200 in numpy's
    generic ``PyArray_Pack`` and ``np.array`` nearly 300 with its type discovery; the same
    doubles and integers), an ``array.array`` through its buffer."""
    if isinstance(values, np.ndarray):
        return values.astype(dtype, copy=False)
    if isinstance(values, array):
        return np.frombuffer(values, np.dtype(values.typecode)).astype(dtype)  # a copy
    n = len(values)
    code = _CODES.get(dtype)
    if n == 0 or code is None:
        return np.fromiter(values, dtype, n)
    out: np.ndarray = np.empty(n, dtype)
    try:
        Struct(f"={n}{code}").pack_into(out.data, 0, *values)
    except struct_error:  # a value ``struct`` does not take (a float among integers): numpy's
        return np.fromiter(values, dtype, n)
    return out


def rows_to_arrays(
    cols: dict[str, Any], at: list[int] | np.ndarray, flat: FlatRuns | PackedRuns
) -> dict[str, np.ndarray]:
    """The rows of ``cols`` (event rows) with the runs of ``flat`` (``flat_runs.flatten_runs``,
    or packed) in their places (run i after the first ``at[i]`` rows of ``cols``, in order),
    as numpy columns."""
    ev = event_arrays(cols)
    n_runs = len(at)
    if not n_runs:
        return ev
    lens = _array(flat.num_rows, np.int64)
    run_off = np.zeros(n_runs, np.int64)  # each run's first row among the runs' rows
    np.cumsum(lens[:-1], out=run_off[1:])
    n_run = int(run_off[-1] + lens[-1])
    n_ev = len(ev["start_s"])
    first = _array(at, np.int64) + run_off  # each run's first row in the output
    run_id = np.repeat(np.arange(n_runs), lens)  # of each of the runs' rows
    where = first[run_id] + (np.arange(n_run) - run_off[run_id])  # its row in the output
    is_ev = np.ones(n_ev + n_run, np.bool_)
    is_ev[where] = False
    out: dict[str, np.ndarray] = {}
    for name in STEP_COLUMNS:
        col: np.ndarray = np.empty(n_ev + n_run, _dtype(name))
        col[is_ev] = ev[name]
        out[name] = col

    d = _array(flat.durations, np.float64)
    starts = _run_starts(_array(flat.start_s, np.float64), d, lens, run_off)
    out["start_s"][where] = starts
    out["duration_s"][where] = d
    out["replica"][where] = np.repeat(_array(flat.replica, np.int64), lens)
    out["num_prefill_tokens"][where] = 0
    out["num_preempted"][where] = 0

    # Segments: pool size n for k rows; KV blocks from the phases at the segment's start.
    segs = _array(flat.segs, np.int64).reshape(-1, SEG_FIELDS)
    seg_k = segs[:, 1]
    n_segs = len(seg_k)
    decodes = np.repeat(segs[:, 0], seg_k)
    out["num_decode_reqs"][where] = decodes
    out["num_running"][where] = decodes  # only pooled decodes run in a run
    seg_bs = np.repeat(_array(flat.block_size, np.int64), _array(flat.num_segs, np.int64))  # pools may differ
    seg_j0 = segs[:, 2]
    table = _phase_table(_phase_counts(flat).astype(np.int64), seg_bs)
    seg_off = np.zeros(n_segs, np.int64)
    np.cumsum(seg_k[:-1], out=seg_off[1:])
    seg_id = np.repeat(np.arange(n_segs), seg_k)
    step = seg_j0[seg_id] + (np.arange(n_run) - seg_off[seg_id])
    crossings = np.cumsum(table[seg_id, (-step) % seg_bs[seg_id]])
    before = crossings[seg_off] - table[np.arange(n_segs), (-seg_j0) % seg_bs]  # up to each segment
    out["kv_blocks_used"][where] = segs[:, 3][seg_id] + crossings - before[seg_id]

    waiting = np.repeat(_array(flat.num_waiting, np.int64), lens)
    _count_waiting(waiting, flat, starts, lens, run_off, out["start_s"], first)
    out["num_waiting"][where] = waiting
    return out


def _phase_counts(flat: FlatRuns | PackedRuns) -> np.ndarray:
    """The segments' phase counts one after another: bytes (uint8), or ints where a count
    reached 256 (a segment's counts are then a list)."""
    if isinstance(flat, PackedRuns):
        return flat.phases
    try:
        return np.frombuffer(b"".join(flat.phases), np.uint8)  # type: ignore[arg-type]  # lists: below
    except TypeError:  # a list among them
        return np.fromiter(chain.from_iterable(flat.phases), np.int64)


def _phase_table(phases: np.ndarray, seg_bs: np.ndarray) -> np.ndarray:
    """The segments' phase counts as a table, one row a segment (``seg_bs[i]`` counts in row
    i, zeros after them where block sizes differ)."""
    n_segs = len(seg_bs)
    width = int(seg_bs.max()) if n_segs else 1
    if n_segs == 0 or int(seg_bs.min()) == width:
        return phases.reshape(n_segs, width)
    table = np.zeros((n_segs, width), np.int64)
    off = np.zeros(n_segs, np.int64)
    np.cumsum(seg_bs[:-1], out=off[1:])
    seg_of = np.repeat(np.arange(n_segs), seg_bs)
    table[seg_of, np.arange(len(phases)) - off[seg_of]] = phases
    return table


def _run_starts(start: np.ndarray, d: np.ndarray, lens: np.ndarray, run_off: np.ndarray) -> np.ndarray:
    """Each row's start: its run's ``start`` plus the durations before it, summed one by one
    in order (``t += d``, as ``RunRows.write`` and the engine's clock sum them).

    Runs are laid out in rows of a power-of-two width (zeros after a run's rows change no
    sum): column 0 the run's start, column i the duration of its row i - 1; the cumulative
    sum along each row is then sequential, the same float additions in the same order."""
    out = np.empty(len(d))
    width = np.left_shift(1, np.ceil(np.log2(np.maximum(lens, 1))).astype(np.int64))
    for w in np.unique(width).tolist():
        sel = np.flatnonzero(width == w)
        ln = lens[sel]
        m = len(sel)
        off = np.zeros(m, np.int64)
        np.cumsum(ln[:-1], out=off[1:])
        n = int(off[-1] + ln[-1])
        row = np.repeat(np.arange(m), ln)
        pos = np.arange(n) - off[row]
        src = run_off[sel][row] + pos  # the row's index in d
        grid = np.zeros((m, w))
        grid[:, 0] = start[sel]
        later = pos > 0
        grid[row[later], pos[later]] = d[src[later] - 1]
        np.cumsum(grid, axis=1, out=grid)
        out[src] = grid[row, pos]
    return out


def _count_waiting(
    waiting: np.ndarray,
    flat: FlatRuns | PackedRuns,
    starts: np.ndarray,
    lens: np.ndarray,
    run_off: np.ndarray,
    all_starts: np.ndarray,
    first: np.ndarray,
) -> None:
    """Add to the runs' ``waiting`` the requests queued during each (in the rows that start at
    or after their arrival: ``RunRows.add_waiting``) and staged during it (from the row after
    the first that starts at or after their arrival; the row before the run, the step that
    started it, counts as that first when it does)."""
    last_start = starts[run_off + lens - 1]
    # Usually each arrived after the run's last step started (the run stopped at it): those
    # count in none of its rows.
    for times, counts, staged in (
        (flat.queued_s, flat.num_queued, False),
        (flat.staged_s, flat.num_staged, True),
    ):
        q_s = np.asarray(times, np.float64)
        run_of = np.repeat(np.arange(len(lens)), np.asarray(counts, np.int64))
        for k in np.flatnonzero(q_s <= last_start[run_of]).tolist():
            q, i = float(q_s[k]), int(run_of[k])
            lo, n = int(run_off[i]), int(lens[i])
            own = starts[lo : lo + n].tolist()
            r0 = bisect_left(own, q)
            if staged:
                prev_s = float(all_starts[first[i] - 1]) if first[i] > 0 else float("-inf")
                r0 = r0 + 1 if q > prev_s else 0
            waiting[lo + r0 : lo + n] += 1


# ----------------------------------------------------------------- compact groups in memory


class PackedRuns:
    """``FlatRuns`` as numpy arrays: a group's runs kept in memory (about 8 bytes a row, their
    step times, and a few numbers a run and a segment), their columns built when read."""

    def __init__(self, flat: FlatRuns) -> None:
        self.durations = _array(flat.durations, np.float64)
        self.start_s = _array(flat.start_s, np.float64)
        self.num_rows = _narrow(_array(flat.num_rows, np.int64))
        self.replica = _narrow(_array(flat.replica, np.int64))
        self.num_waiting = _narrow(_array(flat.num_waiting, np.int64))
        self.block_size = _narrow(_array(flat.block_size, np.int64))
        self.num_segs = _narrow(_array(flat.num_segs, np.int64))
        self.queued_s = _array(flat.queued_s, np.float64)
        self.num_queued = _narrow(_array(flat.num_queued, np.int64))
        self.staged_s = _array(flat.staged_s, np.float64)
        self.num_staged = _narrow(_array(flat.num_staged, np.int64))
        self.segs = _narrow(_array(flat.segs, np.int64))  # SEG_FIELDS a segment
        counts = _phase_counts(flat)  # bytes (joined: a new buffer), or ints as narrow as they fit
        self.phases = counts if counts.dtype == np.uint8 else _narrow(counts)


class PackedGroup:
    """Final rows kept in memory (``StepSeries``): the event rows as numpy columns (counts as
    int32 where they fit), the runs as ``PackedRuns``, each after its ``at`` event rows."""

    def __init__(self, cols: dict[str, list[Any]], at: list[int], flat: FlatRuns) -> None:
        self.events = {
            name: _array(cols[name], np.float64)
            if name in FLOAT_COLUMNS
            else _narrow(_array(cols[name], np.int64))
            for name in STEP_COLUMNS
        }
        self.at = _array(at, np.int64)
        self.runs = PackedRuns(flat)
        self.num_rows = len(cols["start_s"]) + len(flat.durations)

    def columns(self) -> dict[str, np.ndarray]:
        return rows_to_arrays(self.events, self.at, self.runs)


def _narrow(col: np.ndarray) -> np.ndarray:
    """``col`` (int64) as int32 where every value fits."""
    if len(col) == 0 or (int(col.min()) >= -(1 << 31) and int(col.max()) < 1 << 31):
        return col.astype(np.int32)
    return col
