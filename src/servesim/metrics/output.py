"""Write a run's files: summary.json, requests.{parquet,csv}, steps.{parquet,csv}.

Writing is all-or-nothing: every file goes to a temporary name in the output directory
first and is renamed into place (``os.replace``, atomic on one filesystem) only after all
of them were written; on failure the temporaries are removed and earlier files with the
same names are left untouched.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servesim.metrics.records import Result
from servesim.metrics.table_files import arrow_table, csv_cell
from servesim.metrics.timeseries import StreamedTimeSeries, TimeSeries

RecordsFormat = Literal["parquet", "csv"]


def _scenario_json(scenario: Any) -> Any:
    if hasattr(scenario, "model_dump"):
        return scenario.model_dump(mode="json")
    return scenario if isinstance(scenario, dict | None) else str(scenario)


def summary_document(result: Result) -> dict[str, Any]:
    """The content of summary.json: the summary, then the scenario that produced it."""
    from servesim.metrics.summary import summarize

    summary = result.summary or summarize(result)
    return {**summary, "scenario": _scenario_json(result.scenario)}


def request_columns(result: Result) -> dict[str, np.ndarray]:
    """RequestRecords.columns() plus ``reason`` (why a request was rejected or left unfinished)."""
    cols = dict(result.records.columns())
    reasons = result.records.reasons
    cols["reason"] = np.array([reasons.get(i, "") for i in range(len(result.records))], dtype=object)
    return cols


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
        f.write("\n")


def _write_parquet(path: Path, cols: dict[str, np.ndarray]) -> None:
    import pyarrow.parquet as pq

    pq.write_table(arrow_table(cols), path)


def _write_csv(path: Path, cols: dict[str, np.ndarray]) -> None:
    names = list(cols)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(names)
        # tolist() gives Python ints/floats, whose str() is the shortest exact repr.
        for row in zip(*(cols[n].tolist() for n in names), strict=True):
            w.writerow([csv_cell(x) for x in row])


def write_outputs(
    result: Result, out_dir: Path | str, records_format: RecordsFormat = "parquet"
) -> list[Path]:
    """Write summary.json, requests.<fmt>, steps.<fmt> (and timeseries.<fmt> for a cluster
    with operations) into ``out_dir`` (created if needed).

    Returns the final paths. If anything fails no new file is left behind.
    """
    if records_format not in ("parquet", "csv"):
        raise ValueError(f"records_format must be 'parquet' or 'csv', not {records_format!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_table = _write_parquet if records_format == "parquet" else _write_csv
    jobs: list[tuple[str, Callable[[Path], None]]] = [
        ("summary.json", lambda p: _write_json(p, summary_document(result))),
        (f"requests.{records_format}", lambda p: write_table(p, request_columns(result))),
        (f"steps.{records_format}", lambda p: _write_steps(p, result, records_format, write_table)),
    ]
    ts = result.timeseries  # a cluster with operations: per pool and interval
    if ts is not None and len(ts):
        jobs.append(
            (f"timeseries.{records_format}", lambda p: _write_timeseries(p, ts, records_format, write_table))
        )
    return write_files(out_dir, jobs)


def _write_steps(
    path: Path,
    result: Result,
    records_format: str,
    write_table: Callable[[Path, dict[str, np.ndarray]], None],
) -> None:
    """steps.<fmt>: a series streamed to a file as the run went is moved there, else written."""
    from servesim.metrics.step_stream import StreamedStepSeries

    steps = result.steps
    if isinstance(steps, StreamedStepSeries) and steps.format == records_format:
        steps.move_to(path)
    else:
        write_table(path, steps.columns())


def _write_timeseries(
    path: Path,
    ts: TimeSeries,
    records_format: str,
    write_table: Callable[[Path, dict[str, np.ndarray]], None],
) -> None:
    """timeseries.<fmt>: a series streamed to a file as the run went is moved there, else written."""
    if isinstance(ts, StreamedTimeSeries) and ts.format == records_format:
        ts.move_to(path)
    else:
        write_table(path, ts.columns())


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented JSON (no NaN or infinity), for ``write_files``."""
    _write_json(path, doc)


def write_csv(path: Path, cols: dict[str, np.ndarray]) -> None:
    """Columns as CSV (NaN as an empty cell), for ``write_files``."""
    _write_csv(path, cols)


def write_files(out_dir: Path, jobs: list[tuple[str, Callable[[Path], None]]]) -> list[Path]:
    """Each ``(name, write)`` of ``jobs`` writes its file at a temporary path in ``out_dir``;
    all are renamed into place once every one was written (see the module docstring)."""
    temps: list[tuple[Path, Path]] = []
    try:
        for name, write in jobs:
            # Not mkstemp: its 0600 mode would survive the rename.
            tmp = out_dir / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            temps.append((tmp, out_dir / name))
            write(tmp)
        for tmp, final in temps:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    return [final for _, final in temps]
