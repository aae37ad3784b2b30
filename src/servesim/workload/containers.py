"""Trace containers: a CSV, JSONL or Parquet file (or a bundled trace) as ``(where, record)`` pairs.

The lower of the two layers a trace is read in (``servesim.workload.traces`` turns the
records into columns, by format). ``where`` is ``file:line`` (CSV counts the header as
line 1) or ``file: row N`` for Parquet, so every later error names its place. Files may
be gzip-compressed (``.gz``); ``builtin:<name>`` opens a trace bundled in the package.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from servesim.errors import WorkloadError

BUILTIN_TRACES = {"azure_conv": "azure_conv_2023.csv.gz", "azure_code": "azure_code_2023.csv.gz"}

Records = Iterator[tuple[str, dict[str, Any]]]


def container_kind(name: str) -> str:
    """'csv', 'jsonl' or 'parquet' from the file name, else sniffed from the first character."""
    if name.startswith("builtin:"):
        return "csv"
    low = name.lower().removesuffix(".gz")
    for ext, kind in (
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".jsonl", "jsonl"),
        (".ndjson", "jsonl"),
        (".json", "jsonl"),
        (".csv", "csv"),
    ):
        if low.endswith(ext):
            return kind
    with open_text(name) as f:
        for line in f:
            if line.strip():
                return "jsonl" if line.lstrip().startswith("{") else "csv"
    return "csv"


@contextmanager
def open_text(name: str) -> Iterator[TextIO]:
    with open_binary(name) as binary:
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")
        try:
            yield text
        except gzip.BadGzipFile:
            raise WorkloadError(
                f"{name}: the name ends in .gz but the file is not gzip-compressed; "
                "rename it without .gz, or compress it"
            ) from None
        except EOFError:
            raise WorkloadError(f"{name}: the gzip stream ends early (a truncated .gz file)") from None
        except (UnicodeDecodeError, OSError) as err:
            raise WorkloadError(f"{name}: cannot read: {err}") from None


def _not_a_file(p: Path) -> str:
    """Why ``p`` cannot be read as a trace: a directory is not a missing file."""
    return "is a directory, expected a trace file" if p.is_dir() else "no such file"


@contextmanager
def open_binary(name: str) -> Iterator[BinaryIO]:
    if name.startswith("builtin:"):
        key = name.removeprefix("builtin:")
        if key not in BUILTIN_TRACES:
            known = ", ".join(f"builtin:{k}" for k in BUILTIN_TRACES)
            raise WorkloadError(f"{name}: unknown built-in trace (known: {known})")
        file_name = BUILTIN_TRACES[key]
        raw = resources.files("servesim").joinpath("data", file_name).open("rb")
    else:
        p = Path(name).expanduser()
        if not p.is_file():
            raise WorkloadError(f"{name}: {_not_a_file(p)}")
        file_name = p.name
        raw = p.open("rb")
    with raw:
        yield gzip.GzipFile(fileobj=raw) if file_name.endswith(".gz") else raw  # type: ignore[misc]


def csv_records(f: TextIO, name: str) -> tuple[tuple[str, ...] | None, Records]:
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
        return None, iter(())
    columns = tuple(h.strip() for h in header)

    def records() -> Records:
        for row in reader:
            if not row:
                continue
            where = f"{name}:{reader.line_num}"
            if len(row) != len(columns):
                raise WorkloadError(
                    f"{where}: expected {len(columns)} comma-separated fields "
                    f"({', '.join(columns)}), found {len(row)}"
                )
            yield where, dict(zip(columns, row, strict=True))

    return columns, records()


def jsonl_records(f: TextIO, name: str) -> Records:
    for i, line in enumerate(f, start=1):
        if not line.strip():
            continue
        where = f"{name}:{i}"
        try:
            rec = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as err:
            raise WorkloadError(
                f"{where}: expected one JSON object per line, found bad JSON "
                f"({err.msg} at column {err.colno})"
            ) from None
        if not isinstance(rec, dict):
            raise WorkloadError(f"{where}: expected a JSON object, found {type(rec).__name__}")
        yield where, rec


def parquet_records(name: str) -> tuple[tuple[str, ...], Records]:
    import pyarrow.parquet as pq

    if not Path(name).expanduser().is_file():
        raise WorkloadError(f"{name}: {_not_a_file(Path(name).expanduser())}")
    try:
        table = pq.read_table(Path(name).expanduser())
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise WorkloadError(f"{name}: cannot read Parquet: {err}") from None
    columns = tuple(table.column_names)
    data = [table.column(c).to_pylist() for c in columns]

    def records() -> Records:
        for i, values in enumerate(zip(*data, strict=True), start=1):
            yield f"{name}: row {i}", dict(zip(columns, values, strict=True))

    return columns, records()
