from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_summary import make_result  # tests/ is on sys.path (rootdir-relative, no __init__)

from servesim.metrics import output
from servesim.metrics.output import write_outputs
from servesim.metrics.summary import summarize


def test_parquet_outputs(tmp_path: Path) -> None:
    res = make_result()
    out = tmp_path / "a" / "b"  # created
    paths = write_outputs(res, out)
    assert [p.name for p in paths] == ["summary.json", "requests.parquet", "steps.parquet"]
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "steps.parquet", "summary.json"]

    doc = json.loads((out / "summary.json").read_text())
    assert doc["counts"]["num_requests"] == 5
    assert doc["latency"]["ttft_s"]["p50"] == pytest.approx(0.5)
    assert doc["scenario"]["slo"] == {
        "ttft_s": 0.8,
        "tpot_s": 0.4,
        "e2e_s": 0.5,
        "attainment": {},
        "percentiles": [],
        "confidence": None,
    }
    assert doc["scenario"]["engine"]["block_size"] == 16

    req = pq.read_table(out / "requests.parquet").to_pydict()
    assert list(req)[:11] == list(res.records.columns())
    assert req["num_prompt_tokens"] == [100, 200, 50, 300, 9999]
    assert math.isnan(req["finished_s"][3])
    assert req["status"] == [0, 0, 0, 1, 2] and req["finished_length"] == [False] * 5
    assert req["reason"][4] == "prompt longer than max_model_len"
    steps = pq.read_table(out / "steps.parquet").to_pydict()
    assert steps["kv_blocks_used"] == [7, 7, 13]
    assert steps["start_s"] == [0.5, 1.0, 1.0]


def test_csv_outputs(tmp_path: Path) -> None:
    res = make_result()
    paths = write_outputs(res, tmp_path, records_format="csv")
    assert [p.name for p in paths] == ["summary.json", "requests.csv", "steps.csv"]
    with open(tmp_path / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    assert rows[0]["arrival_s"] == "0.0"
    assert rows[2]["first_scheduled_s"] == "2.2"  # shortest exact repr
    assert rows[3]["finished_s"] == ""  # NaN -> empty
    assert rows[4]["num_prompt_tokens"] == "9999"
    assert rows[3]["reason"] == "still running at end"
    with open(tmp_path / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    assert [s["num_preempted"] for s in steps] == ["0", "1", "0"]


def test_summary_json_uses_filled_summary(tmp_path: Path) -> None:
    res = make_result()
    res.summary = summarize(res)
    res.summary["marker"] = 1
    write_outputs(res, tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["marker"] == 1


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_failure_leaves_no_partial_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    # A previous run's summary must survive a failed write untouched.
    (tmp_path / "summary.json").write_text("old")

    def boom(path: Path, cols: object) -> None:
        if "steps" in path.name:
            Path(path).write_text("partial")
            raise OSError("disk full")
        original(path, cols)

    original = output._write_parquet if fmt == "parquet" else output._write_csv
    monkeypatch.setattr(output, "_write_parquet" if fmt == "parquet" else "_write_csv", boom)
    with pytest.raises(OSError, match="disk full"):
        write_outputs(make_result(), tmp_path, records_format=fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert (tmp_path / "summary.json").read_text() == "old"


def test_bad_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="records_format"):
        write_outputs(make_result(), tmp_path, records_format="xlsx")  # type: ignore[arg-type]
