"""The step series streamed to a file in row groups (``metrics.step_stream``): the same rows
as the series kept in memory, a run's rows written only once final, and the summary's
queueing from the sums kept as rows were written."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import servesim
import servesim.cluster.cluster as cluster_mod
import servesim.sim as sim_mod
from servesim.engine.decode_runs import Run
from servesim.engine.run_rows import RunRows
from servesim.metrics.output import write_outputs
from servesim.metrics.records import StepSeries
from servesim.metrics.step_stream import StreamedStepSeries


def _run() -> Run:
    """Steps with a pool of 3, then 2 (as test_step_rows.py's): 1.0, 1.5, 1.75, 2.0, 2.125."""
    run = Run(end_s=1.0)
    run.durations = [0.5, 0.25, 0.25, 0.125, 0.125]
    run.segments = [(3, 3, 30), (2, 2, 20)]
    run.seg_rows = [3, 3, 5, 10, 2, 2, 8, 12]
    run.phases = [bytes([1, 0, 2, 0]), bytes([1, 0, 0, 1])]
    return run


def _event(s: StepSeries, start_s: float, replica: int = 0, waiting: int = 0) -> None:
    s.add_step(replica, start_s, 0.5, 16, 1, 2, waiting, 9, 0)


def test_an_open_run_is_held_until_its_replica_steps_again(tmp_path) -> None:
    s = StreamedStepSeries(tmp_path / "steps.parquet", row_group_rows=1)
    _event(s, 0.0, waiting=3)
    _event(s, 0.5, waiting=3)  # the step that starts the run
    assert s._num_written == 1  # the first row; the last is held (a run may follow it)
    rows = RunRows(0, _run(), 0, 4)
    s.add_rows(rows)
    _event(s, 1.2, replica=1)  # another replica's step: the run is still open
    assert s._num_written == 1 and len(s) == 8
    rows.add_waiting([1.6], [1.2])  # queued at 1.6 (waits from 1.75 on); staged at 1.2
    _event(s, 2.25)  # replica 0 steps again: its run's rows are final, written but the last
    assert s._num_written == 8 and len(s) == 9
    s.finish()
    t = pq.read_table(s.path)
    assert t.num_rows == 9 and pq.ParquetFile(s.path).metadata.num_row_groups == 3
    assert t.column("num_waiting").to_pylist() == [3, 3, 0, 0, 2, 2, 2, 0, 0]
    assert t.column("replica").to_pylist() == [0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert t.column("start_s").to_pylist() == [0.0, 0.5, 1.0, 1.5, 1.75, 2.0, 2.125, 1.2, 2.25]
    # waiting x duration by replica: 3 x 0.5 twice, then 2 x (0.25 + 0.125 + 0.125)
    assert s.waiting_s_by_replica(2).tolist() == [4.0, 0.0]
    assert s.columns()["kv_blocks_used"].tolist() == [9, 9, 10, 12, 12, 13, 14, 9, 9]


def test_csv_and_an_empty_series(tmp_path) -> None:
    s = StreamedStepSeries(tmp_path / "steps.csv", format="csv", row_group_rows=2)
    _event(s, 0.5)
    _event(s, 1.0, waiting=1)
    _event(s, 1.5)
    s.finish()
    lines = (tmp_path / "steps.csv").read_text().splitlines()
    assert lines[0].split(",")[:3] == ["replica", "start_s", "duration_s"]
    assert [ln.split(",")[1] for ln in lines[1:]] == ["0.5", "1.0", "1.5"]
    assert s.waiting_s_by_replica(1).tolist() == [0.5]
    e = StreamedStepSeries(tmp_path / "empty.parquet")
    assert e.finish().exists() and pq.read_table(e.path).num_rows == 0
    with pytest.raises(ValueError, match="'parquet' or 'csv'"):
        StreamedStepSeries(tmp_path / "x", format="json")


def _streamed(monkeypatch, tmp_path, row_group_rows: int) -> None:
    made: list[int] = []

    def factory() -> StepSeries:
        made.append(1)
        return StreamedStepSeries(tmp_path / f"steps{len(made)}.parquet", row_group_rows=row_group_rows)

    monkeypatch.setattr(sim_mod, "StepSeries", factory)
    monkeypatch.setattr(cluster_mod, "StepSeries", factory)


LOADED = {  # bursts of long prompts: requests wait, also while runs of decode steps go on
    "prompt_len": {"kind": "constant", "value": 1500},
    "output_len": {"kind": "uniform", "low": 20, "high": 300},
}
SCENARIOS = {
    "one replica": {
        "workload": {
            "type": "synthetic",
            "num_requests": 600,
            "arrival": {"process": "gamma", "rate": 60, "cv": 4},
            **LOADED,
        },
    },
    "pool of 3, async scheduling": {
        "workload": {
            "type": "synthetic",
            "num_requests": 900,
            "arrival": {"process": "gamma", "rate": 150, "cv": 4},
            **LOADED,
        },
        "engine": {"async_scheduling": True},
        "cluster": {"pools": [{"name": "p", "num_replicas": 3}], "router": "least_outstanding"},
    },
    # Runs of two KV block sizes in one group of rows (each segment's phases its own width).
    "pools of block sizes 16 and 32": {
        "workload": {
            "type": "synthetic",
            "num_requests": 900,
            "arrival": {"process": "gamma", "rate": 100, "cv": 4},
            **LOADED,
        },
        "cluster": {
            "pools": [{"name": "a"}, {"name": "b", "engine": {"block_size": 32}}],
            "router": "least_outstanding",
        },
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_streamed_rows_and_summary_are_the_kept_series(name, monkeypatch, tmp_path) -> None:
    kept = servesim.simulate(SCENARIOS[name])
    _streamed(monkeypatch, tmp_path, row_group_rows=37)
    streamed = servesim.simulate(SCENARIOS[name])
    assert isinstance(streamed.steps, StreamedStepSeries)
    want, got = kept.steps.columns(), streamed.steps.columns()
    assert len(want["start_s"]) > 500 and pq.ParquetFile(streamed.steps.path).metadata.num_row_groups >= 5
    for col in want:
        assert np.array_equal(want[col], got[col]), col
    n = len(kept.replicas)
    assert streamed.steps.waiting_s_by_replica(n) == pytest.approx(
        kept.steps.waiting_s_by_replica(n), rel=1e-12
    )
    assert all(kept.steps.waiting_s_by_replica(n) > 0) and any(r.num_run_steps for r in kept.replicas)
    if n > 1:
        for a, b in zip(kept.summary["pools"], streamed.summary["pools"]):
            assert b["mean_num_waiting"] == pytest.approx(a["mean_num_waiting"], rel=1e-12)
    out = write_outputs(streamed, tmp_path / "out")
    assert tmp_path / "out" / "steps.parquet" in out
    assert pq.read_table(tmp_path / "out" / "steps.parquet").num_rows == len(want["start_s"])
    assert not streamed.steps.path.with_name("steps1.parquet").exists()


def test_simulate_output_streams_a_long_run_into_place(monkeypatch, tmp_path) -> None:
    """``servesim simulate --output DIR``: a run at or past ``STREAM_STEPS_FROM_REQUESTS``
    (lowered here) streams its steps beside DIR and moves the file in, rows equal to the
    in-memory series; nothing temporary is left behind."""
    import yaml
    from typer.testing import CliRunner

    import servesim.cluster.pools as pools_mod
    from servesim.cli import app

    name = "one replica"
    kept = servesim.simulate(SCENARIOS[name])
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIOS[name]))
    seen: list[StepSeries] = []
    real = pools_mod.simulate_cluster

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(result.steps)
        return result

    monkeypatch.setattr(pools_mod, "STREAM_STEPS_FROM_REQUESTS", 0)
    monkeypatch.setattr(pools_mod, "simulate_cluster", spy)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["simulate", str(path), "--output", str(out), "--quiet", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert isinstance(seen[0], StreamedStepSeries)
    got = pq.read_table(out / "steps.parquet").to_pydict()
    want = kept.steps.columns()
    for col in want:
        assert np.array_equal(np.asarray(got[col]), want[col]), col
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "scenario.yaml"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
