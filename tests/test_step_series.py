"""The step series kept in memory in compact groups (``metrics.step_series``): past
``row_group_rows`` held rows the final ones become numpy columns (``metrics.step_arrays``)
and are packed; the series reads back the same rows as one that kept them all as runs, and
its queueing sums are the replicas' own, to the last bit."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from test_step_stream import SCENARIOS  # tests/ is on sys.path (rootdir-relative, no __init__)

import servesim
import servesim.cluster.cluster as cluster_mod
from servesim.engine.decode_runs import Run
from servesim.engine.run_rows import RunRows
from servesim.metrics.flat_runs import FlatRuns
from servesim.metrics.records import STEP_COLUMNS, StepSeries
from servesim.metrics.step_arrays import PackedGroup, _array


def _run() -> Run:
    """As test_step_rows.py's: steps 5-7 with a pool of 3, then 8-9 with 2 (block size 4)."""
    run = Run(end_s=1.0)
    run.durations = [0.5, 0.25, 0.25, 0.125, 0.125]
    run.segments = [(3, 3, 30), (2, 2, 20)]
    run.seg_rows = [3, 3, 5, 10, 2, 2, 8, 12]
    run.phases = [bytes([1, 0, 2, 0]), bytes([1, 0, 0, 1])]
    return run


def _event(s: StepSeries, start_s: float, replica: int = 0, waiting: int = 0) -> None:
    s.add_step(replica, start_s, 0.5, 16, 1, 2, waiting, 9, 0)


def test_groups_hold_the_final_rows_only() -> None:
    s = StepSeries(row_group_rows=1)
    _event(s, 0.0, waiting=3)
    _event(s, 0.5, waiting=3)  # the step that starts the run: held (a run may follow)
    rows = RunRows(0, _run(), 0, 4)
    s.add_rows(rows)
    _event(s, 1.2, replica=1)  # another replica's step: the run is still open
    assert [g.num_rows for g in s._groups] == [1] and len(s) == 9 - 1
    rows.add_waiting([1.6], [1.2])  # queued at 1.6 (waits from 1.75 on); staged at 1.2
    _event(s, 2.25)  # replica 0 steps again: its run's rows are final
    assert [g.num_rows for g in s._groups] == [1, 7] and len(s) == 9
    c = s.columns()
    assert c["num_waiting"].tolist() == [3, 3, 0, 0, 2, 2, 2, 0, 0]
    assert c["start_s"].tolist() == [0.0, 0.5, 1.0, 1.5, 1.75, 2.0, 2.125, 1.2, 2.25]
    assert c["kv_blocks_used"].tolist() == [9, 9, 10, 12, 12, 13, 14, 9, 9]
    assert c["num_decode_reqs"].tolist() == [1, 1, 3, 3, 3, 2, 2, 1, 1]
    assert c["replica"].tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 0]
    # waiting x duration: replica 0's event rows 3 x 0.5 twice, then its run's 2 x 0.5
    assert s.waiting_s_by_replica(2).tolist() == [4.0, 0.0]
    assert s.num_waiting == c["num_waiting"].tolist()  # the lists, read back from the groups


def test_a_packed_group_keeps_every_value() -> None:
    cols = {name: [1, 1, 2, 7, (1 << 40) if name == "kv_blocks_used" else 0] for name in STEP_COLUMNS}
    cols["start_s"] = cols["duration_s"] = [0.1, 0.2, 0.3, 0.4, 0.5]
    group = PackedGroup(cols, [], FlatRuns())
    assert group.events["num_waiting"].dtype == np.int32  # small counts: 4 bytes
    assert group.events["kv_blocks_used"].dtype == np.int64  # 2**40 does not fit int32
    got = group.columns()
    for name in STEP_COLUMNS:
        assert got[name].tolist() == cols[name], name
        assert got[name].dtype == (np.float64 if name in ("start_s", "duration_s") else np.int64), name


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_grouped_rows_are_the_runs_written_out(name, monkeypatch) -> None:
    kept = servesim.simulate(SCENARIOS[name])
    monkeypatch.setattr(cluster_mod, "StepSeries", lambda: StepSeries(row_group_rows=37))
    grouped = servesim.simulate(SCENARIOS[name])
    assert len(grouped.steps._groups) >= 5
    want, got = kept.steps.columns(), grouped.steps.columns()  # columns() builds them with numpy
    assert len(want["start_s"]) > 500 and len(grouped.steps) == len(want["start_s"])
    for col in STEP_COLUMNS:
        assert np.array_equal(want[col], got[col]) and got[col].dtype == want[col].dtype, col
        # the lists RunRows.write writes one value at a time, the same rows
        assert getattr(kept.steps, col) == want[col].tolist(), col
    n = len(grouped.replicas)
    assert grouped.steps.waiting_s_by_replica(n).tolist() == pytest.approx(
        [r.waiting_s for r in grouped.replicas], rel=1e-12
    )
    assert [r.waiting_s for r in grouped.replicas] == [r.waiting_s for r in kept.replicas]
    drop = {"wall_s"}  # the run's own wall time
    assert {k: v for k, v in grouped.summary.items() if k not in drop} == {
        k: v for k, v in kept.summary.items() if k not in drop
    }


def test_run_step_times_go_in_as_the_same_doubles() -> None:
    """``FlatRuns.add_durations`` packs a run's step times with ``struct``: the doubles
    ``array.fromlist`` adds, for runs of none, one, a few and more steps than it keeps a
    packer for (4096), one after another."""
    flat = FlatRuns()
    want = array("d")
    rng = np.random.default_rng(7)
    for n in (0, 1, 3, 3, 5000, 2, 4096, 4097):
        durs = [float(x) for x in rng.exponential(0.02, n)]
        if n:
            durs[0] = 1e-300 if n % 2 else 0.1 + 0.2  # a tiny value, a rounded sum
        flat.add_durations(durs)
        want.fromlist(durs)
    assert len(flat.durations) == len(want) == 1 + 3 + 3 + 5000 + 2 + 4096 + 4097
    assert flat.durations.tobytes() == want.tobytes()


def test_lists_become_the_arrays_fromiter_makes() -> None:
    """``step_arrays._array`` packs a list with ``struct``: the values and dtypes
    ``np.fromiter`` gives, a writable array; a list ``struct`` refuses (a float among
    integers) goes through numpy as before."""
    rng = np.random.default_rng(3)
    floats = [float(x) for x in rng.exponential(0.02, 1000)] + [0.1 + 0.2, 1e-300, -0.0, 7]
    ints = [int(x) for x in rng.integers(-(1 << 62), 1 << 62, 1000)] + [0, -1, True, 1 << 40]
    for values, dtype in ((floats, np.float64), (ints, np.int64), ([], np.int64), ([2.5], np.float64)):
        got = _array(values, dtype)
        want = np.fromiter(values, dtype, len(values))
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        assert got.flags.writeable
    mixed = [1, 2, 3.0]  # struct's "q" takes no float: numpy's conversion, the same values
    assert _array(mixed, np.int64).tolist() == [1, 2, 3]
    assert _array(array("q", [4, 5]), np.int64).tolist() == [4, 5]
