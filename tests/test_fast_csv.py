"""The pyarrow path for Azure CSV traces reads exactly what the row parser reads, and
hands every file it cannot take whole back to the row parser (whose errors name lines)."""

from __future__ import annotations

import gzip
import io
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import servesim.workload.traces as traces
from servesim.errors import WorkloadError
from servesim.workload.fast_csv import read_azure_csv

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def row_parsed(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(traces, "_worth_pyarrow", lambda _name: False)
    wl = traces.read_trace(name)
    monkeypatch.undo()
    return wl


@pytest.mark.parametrize("file", ["azure_conv_2023.csv.gz", "azure_code_2023.csv.gz"])
def test_pyarrow_path_equals_the_row_parser_on_the_bundled_traces(file, monkeypatch):
    data = gzip.decompress(resources.files("servesim").joinpath("data", file).read_bytes())
    fast = read_azure_csv(io.BytesIO(data))
    assert fast is not None
    slow = row_parsed("builtin:" + file.removesuffix("_2023.csv.gz"), monkeypatch)
    arrival, prompt, output, clamped, _ = fast
    np.testing.assert_array_equal(arrival, slow.arrival_s)  # integer ns, then the same division
    np.testing.assert_array_equal(prompt, slow.num_prompt_tokens)
    np.testing.assert_array_equal(output, slow.num_output_tokens)
    assert clamped == slow.meta["clamped"]


def test_large_files_take_the_pyarrow_path_with_the_same_result(tmp_path, monkeypatch):
    path = tmp_path / "big.csv"
    packed = resources.files("servesim").joinpath("data", "azure_conv_2023.csv.gz").read_bytes()
    data = gzip.decompress(packed)
    path.write_bytes(data.rstrip(b"\r\n") + b"\n2023-11-16 19:30:00.0000001,0,7\n")
    monkeypatch.setattr(traces, "FAST_CSV_BYTES", 1000)
    calls = []
    real = traces.read_azure_csv
    monkeypatch.setattr(traces, "read_azure_csv", lambda b: calls.append(1) or real(b))
    fast = traces.read_trace(str(path))
    assert calls and fast.meta["clamped"] == 1  # a zero length is clamped to 1, as the row parser does
    slow = row_parsed(str(path), monkeypatch)
    np.testing.assert_array_equal(fast.arrival_s, slow.arrival_s)
    np.testing.assert_array_equal(fast.num_prompt_tokens, slow.num_prompt_tokens)
    assert fast.meta == slow.meta


@pytest.mark.parametrize("text", [
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68Z,5,6\n2023-11-16 18:15:47+01:00,5,6\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,-5,6\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,5\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,5,6\n2023-11-16 18:15:47,,6\n",
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 25:15:46.68,5,6\n",
])
def test_files_pyarrow_cannot_take_whole_go_to_the_row_parser(text):
    assert read_azure_csv(io.BytesIO(text.encode())) is None


def test_row_parser_errors_survive_the_fast_path(monkeypatch):
    monkeypatch.setattr(traces, "FAST_CSV_BYTES", 0)
    with pytest.raises(WorkloadError, match=r"bad_timestamp.csv:3: TIMESTAMP: expected a timestamp"):
        traces.read_trace(str(FIXTURES / "bad_timestamp.csv"))
