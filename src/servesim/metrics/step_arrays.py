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

``pack``/``unpack`` keep a finished group of rows in memory compactly: the two time columns
and the KV column as they are, the others (constant over a run's rows) as runs of equal
values.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np

from servesim.metrics.flat_runs import FlatRuns, StepRows  # noqa: F401 (StepRows: re-exported)

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


def event_arrays(cols: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """Rows held as lists (event steps), as float64 and int64 columns."""
    return {name: np.asarray(cols[name], _dtype(name)) for name in STEP_COLUMNS}


def rows_to_arrays(cols: dict[str, list[Any]], at: list[int], flat: FlatRuns) -> dict[str, np.ndarray]:
    """The rows of ``cols`` with the runs of ``flat`` (``step_series.flatten_runs``) in their
    places (run i after the first ``at[i]`` rows of ``cols``, in order), as numpy columns."""
    ev = event_arrays(cols)
    if not at:
        return ev
    n_runs = len(at)
    lens = np.array(flat.num_rows, np.int64)
    run_off = np.zeros(n_runs, np.int64)  # each run's first row among the runs' rows
    np.cumsum(lens[:-1], out=run_off[1:])
    n_run = int(run_off[-1] + lens[-1])
    n_ev = len(ev["start_s"])
    first = np.array(at, np.int64) + run_off  # each run's first row in the output
    run_id = np.repeat(np.arange(n_runs), lens)  # of each of the runs' rows
    where = first[run_id] + (np.arange(n_run) - run_off[run_id])  # its row in the output
    is_ev = np.ones(n_ev + n_run, np.bool_)
    is_ev[where] = False
    out: dict[str, np.ndarray] = {}
    for name in STEP_COLUMNS:
        col: np.ndarray = np.empty(n_ev + n_run, _dtype(name))
        col[is_ev] = ev[name]
        out[name] = col

    d = np.array(flat.durations, np.float64)
    starts = _run_starts(np.array(flat.start_s, np.float64), d, lens, run_off)
    out["start_s"][where] = starts
    out["duration_s"][where] = d
    out["replica"][where] = np.repeat(np.array(flat.replica, np.int64), lens)
    out["num_prefill_tokens"][where] = 0
    out["num_preempted"][where] = 0

    # Segments: pool size n for k rows; KV blocks from the phases at the segment's start.
    seg_k = np.array(flat.seg_k, np.int64)
    n_segs = len(seg_k)
    decodes = np.repeat(np.array(flat.seg_n, np.int64), seg_k)
    out["num_decode_reqs"][where] = decodes
    out["num_running"][where] = decodes  # only pooled decodes run in a run
    bs = flat.block_size
    seg_j0 = np.array(flat.seg_j0, np.int64)
    table = np.array(flat.phases, np.int64).reshape(n_segs, bs)
    seg_off = np.zeros(n_segs, np.int64)
    np.cumsum(seg_k[:-1], out=seg_off[1:])
    seg_id = np.repeat(np.arange(n_segs), seg_k)
    step = seg_j0[seg_id] + (np.arange(n_run) - seg_off[seg_id])
    crossings = np.cumsum(table[seg_id, (-step) % bs])
    before = crossings[seg_off] - table[np.arange(n_segs), (-seg_j0) % bs]  # up to each segment
    out["kv_blocks_used"][where] = np.array(flat.seg_base, np.int64)[seg_id] + crossings - before[seg_id]

    waiting = np.repeat(np.array(flat.num_waiting, np.int64), lens)
    _count_waiting(waiting, flat, starts, lens, run_off, out["start_s"], first)
    out["num_waiting"][where] = waiting
    return out


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
    flat: FlatRuns,
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
    for i, (queued_s, staged_s) in enumerate(zip(flat.queued_s, flat.staged_s)):
        if not (queued_s or staged_s):
            continue
        lo, n, last = int(run_off[i]), int(lens[i]), float(last_start[i])
        # usually each arrived after the run's last step started (the run stopped at it)
        queued = [q for q in queued_s if q <= last]
        staged = [q for q in staged_s if q <= last]
        if not queued and not staged:
            continue
        own = starts[lo : lo + n].tolist()
        prev_s = float(all_starts[first[i] - 1]) if first[i] > 0 else float("-inf")
        for q in queued:
            waiting[lo + bisect_left(own, q) : lo + n] += 1
        for q in staged:
            r0 = bisect_left(own, q) + 1 if q > prev_s else 0
            waiting[lo + r0 : lo + n] += 1


# ----------------------------------------------------------------- compact groups in memory

PACKED_RUNS = (
    "replica",
    "num_prefill_tokens",
    "num_decode_reqs",
    "num_running",
    "num_waiting",
    "num_preempted",
)


def pack(part: dict[str, np.ndarray]) -> dict[str, Any]:
    """A group of rows kept in memory: the times as they are, the KV column as int32 where it
    fits, the other counts as (values, lengths) of their runs of equal values."""
    packed: dict[str, Any] = {"start_s": part["start_s"], "duration_s": part["duration_s"]}
    packed["kv_blocks_used"] = _narrow(part["kv_blocks_used"])
    for name in PACKED_RUNS:
        col = part[name]
        cut = np.flatnonzero(col[1:] != col[:-1]) + 1
        edges = np.concatenate(([0], cut, [len(col)])) if len(col) else np.zeros(1, np.int64)
        packed[name] = (_narrow(col[edges[:-1]]), np.diff(edges).astype(np.int32))
    return packed


def _narrow(col: np.ndarray) -> np.ndarray:
    """``col`` (int64) as int32 where every value fits."""
    if len(col) == 0 or (int(col.min()) >= -(1 << 31) and int(col.max()) < 1 << 31):
        return col.astype(np.int32)
    return col


def unpack(packed: dict[str, Any]) -> dict[str, np.ndarray]:
    """The columns of a group kept by ``pack``, as float64 and int64 arrays."""
    out: dict[str, np.ndarray] = {}
    for name in STEP_COLUMNS:
        v = packed[name]
        col: np.ndarray = np.repeat(v[0], v[1]) if name in PACKED_RUNS else v
        out[name] = col.astype(_dtype(name), copy=False)
    return out
