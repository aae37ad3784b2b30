"""The fast paths for Azure CSV traces (numpy, and pyarrow for large files) read exactly
what the row parser reads, and hand every file they cannot take whole back to the row
parser (whose errors name lines)."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from datetime import date
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

import servesim.workload.traces as traces
from servesim.errors import WorkloadError
from servesim.workload.fast_csv import read_azure_csv, read_azure_numpy

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
AZURE_SHARED = ["AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"]
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def row_parsed(name: str, monkeypatch: pytest.MonkeyPatch):
    """read_trace with both fast paths off: the row parser alone."""
    with monkeypatch.context() as m:
        m.setattr(traces, "_READ_CACHE", {})  # read the file, not a copy of an earlier read
        m.setattr(traces, "read_azure_numpy", lambda _binary: None)
        m.setattr(traces, "read_azure_csv", lambda _binary: None)
        return traces.read_trace(name)


def numpy_parsed(name: str, monkeypatch: pytest.MonkeyPatch):
    """read_trace, checking that the numpy path (not pyarrow, not the row parser) read it."""
    taken = []
    with monkeypatch.context() as m:
        m.setattr(traces, "_READ_CACHE", {})  # read the file, not a copy of an earlier read
        m.delitem(sys.modules, "pyarrow.csv", raising=False)  # as in a fresh process: no pyarrow yet
        m.setattr(traces, "read_azure_numpy", lambda b: taken.append(read_azure_numpy(b)) or taken[-1])
        m.setattr(traces, "read_azure_csv", lambda _binary: pytest.fail("pyarrow path taken"))
        wl = traces.read_trace(name)
    assert taken and taken[0] is not None, "the numpy path did not take the file"
    return wl


def assert_same(fast, slow) -> None:
    np.testing.assert_array_equal(fast.arrival_s, slow.arrival_s)  # bit for bit: integer ns, then / 1e9
    assert fast.arrival_s.dtype == slow.arrival_s.dtype == np.float64
    np.testing.assert_array_equal(fast.num_prompt_tokens, slow.num_prompt_tokens)
    np.testing.assert_array_equal(fast.num_output_tokens, slow.num_output_tokens)
    assert fast.num_prompt_tokens.dtype == fast.num_output_tokens.dtype == np.int64

    def codes(meta: dict) -> dict:  # notices name their file: compare what they say of it
        return {**meta, "notices": [(n["code"], n["count"]) for n in meta.get("notices", [])]}

    assert codes(fast.meta) == codes(slow.meta)  # format, num_rows, clamped, reordered, notices


def write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def bundled(file: str) -> bytes:
    return gzip.decompress(resources.files("servesim").joinpath("data", file).read_bytes())


# --------------------------------------------------------------------------- the real traces


@pytest.mark.parametrize("file", ["azure_conv_2023.csv.gz", "azure_code_2023.csv.gz"])
def test_numpy_path_equals_the_row_parser_on_the_bundled_traces(file, monkeypatch):
    name = "builtin:" + file.removesuffix("_2023.csv.gz")
    assert_same(numpy_parsed(name, monkeypatch), row_parsed(name, monkeypatch))
    arrival, prompt, output, clamped, columns = read_azure_numpy(io.BytesIO(bundled(file)))
    slow = row_parsed(name, monkeypatch)
    np.testing.assert_array_equal(arrival, slow.arrival_s)  # already in order: no re-sort hides a difference
    np.testing.assert_array_equal(prompt, slow.num_prompt_tokens)
    np.testing.assert_array_equal(output, slow.num_output_tokens)
    assert clamped == slow.meta["clamped"] and columns == ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@pytest.mark.shared_data
@pytest.mark.parametrize("file", AZURE_SHARED)
def test_numpy_path_equals_the_row_parser_on_the_shared_traces(file, monkeypatch):
    path = shared_data(f"traces/azure2023/{file}")
    assert_same(numpy_parsed(str(path), monkeypatch), row_parsed(str(path), monkeypatch))


def test_the_default_trace_loads_without_pyarrow():
    code = (
        "import sys, servesim.workload.traces as t; wl = t.read_trace('builtin:azure_conv'); "
        "print(len(wl), 'pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["19366", "False"]


@pytest.mark.parametrize("file", ["azure_conv_2023.csv.gz", "azure_code_2023.csv.gz"])
def test_pyarrow_path_equals_the_row_parser_on_the_bundled_traces(file, monkeypatch):
    fast = read_azure_csv(io.BytesIO(bundled(file)))
    assert fast is not None
    slow = row_parsed("builtin:" + file.removesuffix("_2023.csv.gz"), monkeypatch)
    arrival, prompt, output, clamped, _ = fast
    np.testing.assert_array_equal(arrival, slow.arrival_s)  # integer ns, then the same division
    np.testing.assert_array_equal(prompt, slow.num_prompt_tokens)
    np.testing.assert_array_equal(output, slow.num_output_tokens)
    assert clamped == slow.meta["clamped"]


def test_large_files_take_the_pyarrow_path_with_the_same_result(tmp_path, monkeypatch):
    data = bundled("azure_conv_2023.csv.gz")
    path = write(tmp_path, data.rstrip(b"\r\n") + b"\n2023-11-16 19:30:00.0000001,0,7\n", "big.csv")
    monkeypatch.setattr(traces, "FAST_CSV_BYTES", 1000)
    calls = []
    real = traces.read_azure_csv
    monkeypatch.setattr(traces, "read_azure_csv", lambda b: calls.append(1) or real(b))
    monkeypatch.setattr(traces, "read_azure_numpy", lambda _b: pytest.fail("numpy path taken"))
    fast = traces.read_trace(path)
    monkeypatch.undo()
    assert calls and fast.meta["clamped"] == 1  # a zero length is clamped to 1, as the row parser does
    assert_same(fast, row_parsed(path, monkeypatch))


# --------------------------------------------------------------------------- what the numpy path takes


A, B = "2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,396,109"
C = "2023-11-16 18:15:48,7,8"
TAKEN = {
    "crlf": f"{HEADER}\r\n{A}\r\n{B}\r\n",
    "lf, no final newline": f"{HEADER}\n{A}\n{B}",
    "cr": f"{HEADER}\r{A}\r{B}\r",
    "mixed line ends": f"{HEADER}\r\n{A}\n{B}\r{C}",
    "blank lines": f"{HEADER}\n\n\r\n{A}\n\n\n{B}\r\r\n\n{C}\n\n",
    "bom": f"\ufeff{HEADER}\r\n{A}\r\n",
    "spaces around header names": f" TIMESTAMP , ContextTokens,GeneratedTokens\t\n{A}\n",
    "columns reordered, extra columns": (
        "GeneratedTokens,note,ContextTokens,TIMESTAMP,\n"
        "4,caf\u00e9 \u2028 x,3,2023-11-16 18:15:46.68,\n"
        "6,,5,2023-11-16 18:15:45.1,extra\n"
    ),
    "T separator": f"{HEADER}\n2023-11-16T18:15:46.6805900,374,44\n2023-11-16 18:15:46.6805901,1,2\n",
    "every fraction width": HEADER
    + "\n"
    + "".join(
        f"2023-11-16 18:15:{40 + w:02d}{'.' + '123456789'[:w] if w else ''},{w + 1},{w + 2}\n"
        for w in range(10)
    ),
    "unsorted (reordered)": f"{HEADER}\n2023-11-16 18:15:47.5,1,2\n2023-11-16 18:15:46.25,3,4\n"
    f"2023-11-16 18:15:47.5,5,6\n2023-11-16 18:15:46,7,8\n",
    "zero lengths (clamped)": f"{HEADER}\n2023-11-16 18:15:46,0,4\n2023-11-16 18:15:47,3,0\n"
    f"2023-11-16 18:15:48,0,0\n2023-11-16 18:15:49,000,012\n",
    "18-digit count": f"{HEADER}\n2023-11-16 18:15:46,999999999999999999,1\n",
    "leap day, leap second, new year": f"{HEADER}\n2024-02-29 23:59:59.9,1,2\n2024-03-01 00:00:00,3,4\n"
    f"2016-12-31 23:59:60.5,5,6\n2017-01-01 00:00:00.25,7,8\n",
    "two centuries apart": f"{HEADER}\n1900-02-28 12:00:00.000000001,1,2\n2100-03-01 00:00:00,3,4\n"
    f"2000-02-29 00:00:00,5,6\n",
    "one row": f"{HEADER}\n2023-11-16 18:15:46.6805900,374,44\n",
}


@pytest.mark.parametrize("text", TAKEN.values(), ids=TAKEN.keys())
def test_numpy_path_equals_the_row_parser(text, tmp_path, monkeypatch):
    path = write(tmp_path, text)
    assert_same(numpy_parsed(path, monkeypatch), row_parsed(path, monkeypatch))
    gz = write(tmp_path, gzip.compress(text.encode()), "t.csv.gz")
    assert_same(numpy_parsed(gz, monkeypatch), row_parsed(path, monkeypatch))


@pytest.mark.parametrize("year", [1, 1600, 1700, 1899, 1900, 1970, 2000, 2023, 2024, 2100, 2400, 9999])
def test_numpy_path_knows_the_calendar(year, tmp_path, monkeypatch):
    """Every real day of a year is read as the row parser reads it; every other one
    (day 0, 29-31 where the month is shorter, month 0 or 13) goes back to it."""
    real, unreal = [], []
    for month in range(0, 14):
        for day in range(0, 32):
            try:
                date(year, month, day)
                real.append(f"{year:04d}-{month:02d}-{day:02d}")
            except ValueError:
                unreal.append(f"{year:04d}-{month:02d}-{day:02d}")
    rows = [f"{d} {i % 24:02d}:{i % 60:02d}:{i % 61:02d}.{i:07d},{i},{i + 1}\n" for i, d in enumerate(real)]
    path = write(tmp_path, HEADER + "\n" + "".join(rows))
    assert_same(numpy_parsed(path, monkeypatch), row_parsed(path, monkeypatch))
    for d in unreal:
        text = f"{HEADER}\n{real[0]} 00:00:00,1,1\n{d} 00:00:00,1,1\n"
        assert read_azure_numpy(io.BytesIO(text.encode())) is None, d


def test_numpy_path_equals_the_row_parser_on_random_times(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    n = 3000
    day = rng.integers(0, 36500, n) + date(1950, 1, 1).toordinal()
    secs = rng.integers(0, 86401, n)  # 86400: the leap second 23:59:60
    widths = rng.integers(0, 10, n)
    lines = []
    for d, s, w in zip(day, secs, widths, strict=True):
        h, mi, sec = (23, 59, 60) if s == 86400 else (s // 3600, s // 60 % 60, s % 60)
        frac = "." + "".join(map(str, rng.integers(0, 10, w))) if w else ""
        sep = "T" if rng.random() < 0.1 else " "
        lines.append(
            f"{date.fromordinal(int(d))}{sep}{h:02d}:{mi:02d}:{sec:02d}{frac},"
            f"{rng.integers(0, 10**6)},{rng.integers(0, 10**4)}"
        )
    path = write(tmp_path, HEADER + "\r\n" + "\r\n".join(lines) + "\r\n")
    assert_same(numpy_parsed(path, monkeypatch), row_parsed(path, monkeypatch))


# --------------------------------------------------------------------------- what it hands back

ROW = "2023-11-16 18:15:46.68,5,6"

# The row parser reads these (so the result is its own), but not exactly as numpy would.
ROW_PARSER_ONLY = {
    "Z": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47Z,5,6\n",
    "utc offset": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47+01:00,5,6\n",
    "offset without colon": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47.1-0130,5,6\n",
    "spaces around a timestamp": f"{HEADER}\n{ROW}\n 2023-11-16 18:15:47 ,5,6\n",
    "spaces around a count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47, 5,6 \n",
    "signed count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,+5,6\n",
    "float count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,5.0,6\n",
    "exponent count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,5e2,6\n",
    "underscore count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,1_000,6\n",
    "arabic-indic digits": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,\u0665,6\n",
    "19-digit count": f"{HEADER}\n{ROW}\n2023-11-16 18:15:47,1000000000000000000,6\n",
    "quoted fields": f'{HEADER}\n{ROW}\n"2023-11-16 18:15:47","5",6\n',
    "repeated column (the last wins)": f"{HEADER},ContextTokens\n{ROW},7\n",
    "more than 273 years": f"{HEADER}\n1720-01-01 00:00:00,1,2\n2000-01-01 00:00:00,3,4\n",
}


@pytest.mark.parametrize("text", ROW_PARSER_ONLY.values(), ids=ROW_PARSER_ONLY.keys())
def test_what_numpy_cannot_take_exactly_goes_to_the_row_parser(text, tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "pyarrow.csv", raising=False)  # numpy's route, not pyarrow's
    assert read_azure_numpy(io.BytesIO(text.encode())) is None
    wl = traces.read_trace(write(tmp_path, text))
    assert wl.meta["format"] == "azure" and len(wl) == text.count("\n") - 1


# Errors: the numpy path returns None and the row parser names the line and column.
T = "2023-11-16 18:15:47"
FIELDS = r"t.csv:3: expected 3 comma-separated fields"
INT = r"t.csv:3: {}: expected a positive integer"
BAD_TIMESTAMPS = [
    "2023-11-16 25:15:46.68",
    "2023-11-16 24:00:00",
    "2023-11-16 18:60:00",
    "2023-11-16 18:15:61",
    "2023-02-29 00:00:00",
    "2023-11-31 00:00:00",
    "2023-13-01 00:00:00",
    "2023-00-01 00:00:00",
    "2023-11-00 00:00:00",
    "0000-01-01 00:00:00",
    "2023-11-16 18:15:46.",
    "2023-11-16 18:15:46.1234567891",
    "2023-11-16",
    "2023-11-16 18:15",
    "2023",
    "today",
    "NaT",
    "",
    "2023-11-16t18:15:46",
    "2023-11-16_18:15:46",
    "2023/11/16 18:15:46",
    "23-11-16 18:15:46",
    "2023-11-16 8:15:46",
    "2023-11-16 18:15:46.6805900 UTC",
    "\u0662023-11-16 18:15:46",
]
MALFORMED = {
    "too few fields": (f"{HEADER}\n{ROW}\n{T},5\n", FIELDS),
    "too many fields": (f"{HEADER}\n{ROW}\n{T},5,6,7\n{ROW}\n", FIELDS),
    "too many, then too few": (f"{HEADER}\n{ROW},7\n{T},5\n", r"t.csv:2: expected 3 comma-separated fields"),
    "spaces-only line": (f"{HEADER}\n{ROW}\n  \n{ROW}\n", FIELDS),
    "bad int": (f"{HEADER}\n{ROW}\n{T},abc,6\n", INT.format("ContextTokens")),
    "empty int": (f"{HEADER}\n{ROW}\n{T},5,\n", INT.format("GeneratedTokens")),
    "fractional int": (f"{HEADER}\n{ROW}\n{T},5.5,6\n", INT.format("ContextTokens")),
    "negative count": (f"{HEADER}\n{ROW}\n{T},-5,6\n", INT.format("ContextTokens")),
    "negative output": (f"{HEADER}\n{ROW}\n{T},5,-6\n", INT.format("GeneratedTokens")),
    **{
        f"bad timestamp {ts!r}": (f"{HEADER}\n{ROW}\n{ts},5,6\n", r"t.csv:3: TIMESTAMP: expected a timestamp")
        for ts in BAD_TIMESTAMPS
    },
    "header only": (f"{HEADER}\n\n", r"t.csv: no requests \(the file has a header but no rows\)"),
    "empty file": ("", r"t.csv: empty file, expected a header line"),
    "missing column": (
        "TIMESTAMP,ContextTokens,GeneratedTokensX\n2023-11-16 18:15:46,5,6\n",
        r"t.csv:1: missing column 'num_prompt_tokens'",
    ),  # not Azure: read as generic
    "blank first line": (f"\n{HEADER}\n{ROW}\n", r"t.csv:1: missing column .* found none"),  # csv reads []
    "bad utf-8": (f"{HEADER}\n{ROW}\n".encode() + b"2023-11-16 18:15:47,5,6\xff\n", r"t.csv: cannot read"),
}


@pytest.mark.parametrize(("text", "error"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_files_get_the_row_parsers_error(text, error, tmp_path, monkeypatch):
    data = text.encode() if isinstance(text, str) else text
    assert read_azure_numpy(io.BytesIO(data)) is None
    monkeypatch.delitem(sys.modules, "pyarrow.csv", raising=False)  # numpy's route, not pyarrow's
    calls = []
    real = traces.read_azure_numpy
    monkeypatch.setattr(traces, "read_azure_numpy", lambda b: calls.append(1) or real(b))
    with pytest.raises(WorkloadError, match=error):
        traces.read_trace(write(tmp_path, data))
    assert bool(calls) == all(c.encode() in data for c in HEADER.split(","))  # the numpy path was tried


def test_a_field_larger_than_csv_allows_goes_to_the_row_parser():
    text = f"{HEADER},note\n{ROW},{'x' * 200_000}\n"
    assert read_azure_numpy(io.BytesIO(text.encode())) is None


def test_a_bad_gzip_file_gets_the_row_parsers_error(tmp_path):
    with pytest.raises(
        WorkloadError, match=r"t.csv.gz: the name ends in .gz but the file is not gzip-compressed"
    ):
        traces.read_trace(write(tmp_path, b"not a gzip file", "t.csv.gz"))


@pytest.mark.parametrize(
    "text",
    [
        f"{HEADER},ContextTokens\n{ROW},7\n",  # a repeated column (the row parser takes the last)
        f"{HEADER}\n2023-11-16 18:15:46.68Z,5,6\n2023-11-16 18:15:47+01:00,5,6\n",
        f"{HEADER}\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,-5,6\n",
        f"{HEADER}\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,5\n",
        f"{HEADER}\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,,6\n",
        f"{HEADER}\n2023-11-16 25:15:46.68,5,6\n",
    ],
)
def test_files_pyarrow_cannot_take_whole_go_to_the_row_parser(text):
    assert read_azure_csv(io.BytesIO(text.encode())) is None


@pytest.mark.parametrize("fast_bytes", [0, 1 << 30])  # the pyarrow path, the numpy path
def test_row_parser_errors_survive_the_fast_paths(fast_bytes, monkeypatch):
    monkeypatch.setattr(traces, "FAST_CSV_BYTES", fast_bytes)
    monkeypatch.delitem(sys.modules, "pyarrow.csv", raising=False)
    with pytest.raises(WorkloadError, match=r"bad_timestamp.csv:3: TIMESTAMP: expected a timestamp"):
        traces.read_trace(str(FIXTURES / "bad_timestamp.csv"))
