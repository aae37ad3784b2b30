"""The operations' time series streamed to a file as the run goes
(``metrics.timeseries.StreamedTimeSeries``): the same rows as kept in memory, the autoscaler's
reads of the interval's rows unchanged, and the file moved into place by ``write_outputs``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_operations import disagg_autoscaled, outcome

from servesim.cluster.run import run_cluster
from servesim.metrics.timeseries import COLUMNS, StreamedTimeSeries, TimeSeries

ROWS = [
    (0.0, "p", 3, 1, 2, 10.5, 0.25, 1, 300.0, math.nan),
    (0.0, "d", 0, 0, 4, 4.0, math.nan, 2, 450.0, 1.0),
    (1.0, "p", 5, 2, 3, 12.0, 0.5, 1, 310.0, 0.5),
    (1.0, "d", 1, 0, 5, 5.0, 0.125, 2, 460.0, math.nan),
    (2.0, "p", 0, 0, 0, 0.0, math.nan, 1, 90.0, math.nan),
    (2.0, "d", 2, 1, 6, 6.0, 0.75, 3, 470.0, 0.75),
    (3.0, "p", 7, 3, 1, 8.0, 0.0, 2, 320.0, 1.0),
]


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b) == list(COLUMNS)
    for name in COLUMNS:
        assert a[name].dtype == b[name].dtype, name
        if a[name].dtype == object:
            assert a[name].tolist() == b[name].tolist(), name
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_rows_written_in_groups_read_back_as_kept(tmp_path, fmt: str) -> None:
    kept = TimeSeries()
    streamed = StreamedTimeSeries(tmp_path / f"ts.{fmt}", format=fmt, group_rows=2, keep=2)
    for i, row in enumerate(ROWS):
        kept.add(*row)
        streamed.add(*row)
        assert len(streamed) == i + 1
        # at most group_rows + keep - 1 rows held; the last two always readable from the end
        assert len(streamed.t_s) <= 3
        assert streamed.t_s[-1] == row[0] and streamed.pool[-1] == row[1]
        if i >= 1:
            assert streamed.queue_len[-2] == ROWS[i - 1][3]
    assert streamed.path.exists()  # groups were written before the end
    same(streamed.columns(), kept.columns())
    with pytest.raises(RuntimeError, match="finished"):
        streamed.add(*ROWS[0])


def test_discard_removes_the_file(tmp_path) -> None:
    ts = StreamedTimeSeries(tmp_path / "ts.parquet", group_rows=1)
    for row in ROWS[:3]:
        ts.add(*row)
    assert ts.path.exists()
    ts.discard()
    assert not ts.path.exists()


def test_an_autoscaled_disaggregated_run_streams_the_same_series(tmp_path) -> None:
    """Two pools, the prefill pool following the decode pool's desired count: the
    autoscaler reads each interval's rows while earlier ones are already on disk."""
    wl, pools, cfg = disagg_autoscaled()

    def run(timeseries: TimeSeries | None):  # noqa: ANN202
        return run_cluster(wl, pools, cfg, timeseries=timeseries)

    base = run(None)
    streamed = StreamedTimeSeries(tmp_path / "ts.parquet", group_rows=3, keep=2)
    again = run(streamed)
    assert again.timeseries is streamed
    assert len(base.timeseries) == len(streamed) > 3 * 3  # several groups written
    same(streamed.columns(), base.timeseries.columns())
    assert again.operations == base.operations
    np.testing.assert_array_equal(again.records.finished_s, base.records.finished_s)
    assert outcome(again) == outcome(base) == (400, 0, 0)


def nan_as_none(cols: dict[str, list]) -> dict[str, list]:
    """NaN (no request finished in the interval) as None, so that equal rows compare equal."""
    return {k: [None if isinstance(x, float) and math.isnan(x) else x for x in v] for k, v in cols.items()}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_long_run_moves_its_streamed_series_into_place(tmp_path, monkeypatch, fmt: str) -> None:
    """Through ``simulate`` with an output directory: the series is streamed (the threshold
    of requests lowered to this run's) and written as ``timeseries.<fmt>`` with the rows the
    in-memory run writes."""
    import servesim
    from servesim.cluster import pools
    from servesim.config import load_scenario
    from servesim.metrics.output import write_outputs

    sets = [
        "workload.type=synthetic",
        "workload.num_requests=300",
        "cluster.pools=[{name: c, num_replicas: 2}]",
        "cluster.operations.interval_s=5",
        "cluster.operations.autoscaling.pools=[{pool: c, metric: queue_len, target: 2, max_replicas: 3}]",
        "cluster.operations.autoscaling.startup_s=2",
    ]
    sc = load_scenario(None, sets)
    mem = servesim.simulate(sc)
    write_outputs(mem, tmp_path / "mem", fmt)
    monkeypatch.setattr(pools, "STREAM_STEPS_FROM_REQUESTS", 0)
    monkeypatch.setattr("servesim.metrics.timeseries.GROUP_ROWS", 4)
    (tmp_path / "str").mkdir()
    res = pools.simulate_cluster(sc, stream_steps_to=tmp_path / "str", steps_format=fmt)
    assert isinstance(res.timeseries, StreamedTimeSeries)
    assert len(res.timeseries) == len(mem.timeseries) > 4
    write_outputs(res, tmp_path / "str", fmt)
    assert not list((tmp_path / "str").glob(".timeseries.*"))  # moved, no temporary left
    a, b = (tmp_path / d / f"timeseries.{fmt}" for d in ("mem", "str"))
    if fmt == "csv":
        assert a.read_bytes() == b.read_bytes()
    else:
        import pyarrow.parquet as pq

        ta, tb = pq.read_table(a), pq.read_table(b)
        assert ta.schema == tb.schema
        # NaN where no request finished: equal as the same missing figure
        key = [
            [None if isinstance(x, float) and math.isnan(x) else x for x in col]
            for col in ta.to_pydict().values()
        ]
        assert key == [
            [None if isinstance(x, float) and math.isnan(x) else x for x in col]
            for col in tb.to_pydict().values()
        ]
    assert res.summary.get("operations") == mem.summary.get("operations")
