"""The step series keeps a run's rows as the run (``engine.run_rows.RunRows``) until read.

Exact-state checks on a hand-built run of two segments (block size 4): the rows it writes,
their place between event steps, and waiting counts added before or after the rows are
written. The lazy engine's rows against the reference engine's are in test_differential.py.
"""

from __future__ import annotations

from servesim.engine.decode_runs import Run
from servesim.engine.run_rows import RunRows
from servesim.metrics.records import StepSeries


def _run() -> Run:
    """Steps 5, 6, 7 with a pool of 3, then steps 8, 9 with 2 (one finished at step 7's end)."""
    run = Run(end_s=1.0)  # its first step starts at 1.0
    run.durations = [0.5, 0.25, 0.25, 0.125, 0.125]
    run.segments = [(3, 3, 30), (2, 2, 20)]
    # Per segment (pool size, steps, first step, blocks in use before it), and the requests
    # by block phase: at step j those in phase (-j) % 4 cross a block boundary.
    run.seg_rows = [3, 3, 5, 10, 2, 2, 8, 12]
    run.phases = [bytes([1, 0, 2, 0]), bytes([1, 0, 0, 1])]
    return run


def _event(s: StepSeries, start_s: float, waiting: int = 0) -> None:
    s.add_step(0, start_s, 0.5, 16, 1, 2, waiting, 9, 0)


def test_run_rows_are_written_in_place_when_read() -> None:
    s = StepSeries()
    _event(s, 0.5)
    s.add_rows(RunRows(0, _run(), 1, 4))
    _event(s, 2.25)
    assert len(s) == 7  # counted without writing the rows
    assert s.start_s == [0.5, 1.0, 1.5, 1.75, 2.0, 2.125, 2.25]
    assert s.duration_s == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.5]
    # step 5: phase 3 (none), 6: phase 2 (2 blocks), 7: phase 1 (none); step 8: phase 0 (1), 9: phase 3 (1)
    assert s.kv_blocks_used == [9, 10, 12, 12, 13, 14, 9]
    assert s.num_decode_reqs == [1, 3, 3, 3, 2, 2, 1]
    assert s.num_running == [2, 3, 3, 3, 2, 2, 2]
    assert s.num_prefill_tokens == [16, 0, 0, 0, 0, 0, 16]
    assert s.num_waiting == [0, 1, 1, 1, 1, 1, 0]
    assert list(s.columns()["kv_blocks_used"]) == s.kv_blocks_used


def test_waiting_added_after_the_rows_were_read_still_counts() -> None:
    s, rows = StepSeries(), RunRows(0, _run(), 0, 4)
    _event(s, 0.5)
    s.add_rows(rows)
    assert s.num_waiting == [0, 0, 0, 0, 0, 0]  # read while the run is in flight
    # Queued at 1.6: waits in the steps starting at 1.75 and later. Staged at 1.2 (async
    # scheduling): joins the queue at the start of the second step after its arrival.
    rows.add_waiting([1.6], [1.2])
    assert s.num_waiting == [0, 0, 0, 2, 2, 2]
    before = StepSeries()
    _event(before, 0.5)
    late = RunRows(0, _run(), 0, 4)
    before.add_rows(late)
    late.add_waiting([1.6], [1.2])  # the same, recorded before the rows are written
    assert before.num_waiting == s.num_waiting


def test_columns_given_at_construction() -> None:
    s = StepSeries(start_s=[0.0, 1.0], duration_s=[1.0, 1.0])
    assert len(s) == 2 and s.replica == []


def test_a_final_run_written_into_the_buffers_gives_the_same_rows() -> None:
    """Once its replica steps again, a run's rows are final: the series writes them into its
    typed buffers (``RunRows.flatten_into``) and lets the run go. The rows read back, and the
    waiting sum of its seal, are those of the run read while in flight."""
    open_s, final = StepSeries(), StepSeries()
    rows = []
    for s in (open_s, final):
        r = RunRows(0, _run(), 1, 4)
        r.add_waiting([1.6], [1.2])
        _event(s, 0.5)
        s.add_rows(r)
        rows.append(r)
    # 1 waiting in each of the five rows (1.25 s of steps); 1 queued at 1.6 in the rows from 1.75
    # on (0.5 s); 1 staged at 1.2 from the row after the first to start after it (1.5): 0.5 s
    assert rows[1].seal(0.5) == rows[0].waiting_s(0.5) == 1.25 + 0.5 + 0.5
    want = open_s.columns()  # the run still held, flattened for the read
    _event(final, 2.25)
    assert final._pending == [] and final._flat.num_rows == [5] and len(final) == 7  # written, let go
    got = final.columns()
    for name in want:
        assert want[name].tolist() == got[name][:6].tolist(), name
    assert final.duration_s == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125, 0.5]  # read back from the buffers
    assert final.num_waiting == [0, 1, 1, 3, 3, 3, 0]
    assert final.kv_blocks_used == [9, 10, 12, 12, 13, 14, 9]


def test_phase_counts_past_a_byte_are_kept_as_ints() -> None:
    """A segment's phase counts are bytes while every count is under 256; a pool of 300
    requests in one phase keeps that segment's as a list of ints, and the buffers read the
    counts of every segment as ints then: the rows are the same."""
    big = Run(end_s=3.0)  # steps 5, 6, 7 of a pool of 301, 300 of them crossing at step 6
    big.durations = [0.5, 0.25, 0.25]
    big.segments = [(301, 3, 3000)]
    big.seg_rows = [301, 3, 5, 10]
    big.phases = [[1, 0, 300, 0]]
    want = [9, 10, 12, 12, 13, 14, 9, 10, 310, 310, 9]
    for group_rows in (1 << 20, 1):  # held in the buffers, or packed a row at a time
        s = StepSeries(row_group_rows=group_rows)
        _event(s, 0.5)
        s.add_rows(RunRows(0, _run(), 1, 4))
        _event(s, 2.25)
        s.add_rows(RunRows(0, big, 0, 4))
        _event(s, 4.0)
        if group_rows > 1:
            assert s._flat.phases == [bytes([1, 0, 2, 0]), bytes([1, 0, 0, 1]), [1, 0, 300, 0]]
        assert s.columns()["kv_blocks_used"].tolist() == want
        assert s.kv_blocks_used == want
        assert s.num_decode_reqs == [1, 3, 3, 3, 2, 2, 1, 301, 301, 301, 1]
