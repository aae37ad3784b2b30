"""Trace readers: exact parsing of tiny fixtures, exact error text, the real traces, selection."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

from servesim.config import LengthDist, SyntheticWorkload, TraceWorkload
from servesim.errors import WorkloadError
from servesim.workload import load_workload, read_lengths, read_trace, select

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def fx(name: str) -> str:
    return str(FIXTURES / name)


def shared(rel: str) -> str:
    """One of the full public traces (tests marked shared_data)."""
    return str(shared_data(f"traces/{rel}"))


# --------------------------------------------------------------------------- good fixtures


def test_generic_csv_exact():
    wl = read_trace(fx("generic.csv"))
    wl.validate()
    # Row 3 (0.25 s) arrives before row 2 (0.5 s): rows are stably re-sorted.
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 0.25, 0.5, 1.5])
    np.testing.assert_array_equal(wl.num_prompt_tokens, [10, 30, 20, 40])
    np.testing.assert_array_equal(wl.num_output_tokens, [5, 7, 1, 8])  # 0 clamped to 1
    assert wl.hash_ids == [(1, 2), (1, 3), (), ()]
    np.testing.assert_array_equal(wl.prefix_group, [0, 1, -1, 0])  # sys -> 0, user -> 1, '' -> -1
    assert wl.prefix_len == 128
    np.testing.assert_array_equal(wl.priority, [0, -1, 1, 2])
    assert wl.meta["clamped"] == 1 and wl.meta["reordered"] is True
    assert wl.meta["prefix_groups"] == {"sys": 0, "user": 1}
    assert wl.arrival_s.dtype == np.float64 and wl.num_prompt_tokens.dtype == np.int64


def test_generic_jsonl_exact():
    wl = read_trace(fx("generic.jsonl"))
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 1.0, 2.5])
    np.testing.assert_array_equal(wl.num_prompt_tokens, [10, 20, 30])  # 30.0 accepted
    np.testing.assert_array_equal(wl.prefix_group, [0, -1, 0])
    assert wl.prefix_len == 256  # no prefix_len column: the recorder's default
    assert wl.hash_ids == [(1, 2), (), (1, 3)]
    assert wl.priority is None and wl.meta["reordered"] is False


def test_generic_parquet_matches_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "arrived_at_s": [0.0, 0.5, 0.25],
            "num_prompt_tokens": [10, 20, 30],
            "num_output_tokens": [5, 6, 7],
            "hash_ids": [[1, 2], [], [1, 3]],
            "prefix_group": ["a", None, "b"],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    wl = read_trace(path)
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 0.25, 0.5])
    np.testing.assert_array_equal(wl.num_prompt_tokens, [10, 30, 20])
    assert wl.hash_ids == [(1, 2), (1, 3), ()]
    np.testing.assert_array_equal(wl.prefix_group, [0, 1, -1])


def test_parquet_bad_value_names_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"arrived_at_s": [0.0, 1.0], "num_prompt_tokens": [10, -2], "num_output_tokens": [5, 6]}),
        path,
    )
    with pytest.raises(WorkloadError) as e:
        read_trace(path)
    assert str(e.value) == f"{path}: row 2: num_prompt_tokens: expected a positive integer, found -2"


def test_azure_fixture_exact():
    wl = read_trace(fx("azure.csv"))
    # Sorted; 7th fractional digit keeps .0000000 before .0000001; midnight crossing handled;
    # arrivals are seconds since the earliest row.
    np.testing.assert_allclose(wl.arrival_s, [0.0, 0.5, 0.5000001, 1.75], rtol=0, atol=1e-12)
    assert wl.arrival_s[1] < wl.arrival_s[2]
    np.testing.assert_array_equal(wl.num_prompt_tokens, [200, 300, 100, 400])
    np.testing.assert_array_equal(wl.num_output_tokens, [1, 30, 10, 40])
    notices = wl.meta.pop("notices")
    assert wl.meta == {"format": "azure", "num_rows": 4, "clamped": 1, "reordered": True}
    assert [(n["code"], n["count"]) for n in notices] == [("zero_length_raised", 1), ("reordered", 1)]
    assert wl.hash_ids is None and wl.prefix_group is None


def test_mooncake_fixture_exact():
    wl = read_trace(fx("mooncake.jsonl"), hash_block_tokens=512)
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 0.25, 1.5])  # ms -> s
    np.testing.assert_array_equal(wl.num_prompt_tokens, [1000, 600, 512])
    assert wl.hash_ids == [(0, 1), (0, 2), (3,)] and wl.hash_block_tokens == 512
    assert wl.meta["format"] == "mooncake"


def test_explicit_format_overrides_detection():
    with pytest.raises(WorkloadError) as e:
        read_trace(fx("generic.csv"), format="azure")
    assert str(e.value).startswith(f"{fx('generic.csv')}:1: missing column 'TIMESTAMP' (Azure traces need")


def test_builtin_traces_load():
    wl = read_trace("builtin:azure_conv")
    assert len(wl) == 19_366 and wl.source == "builtin:azure_conv"
    assert len(read_trace("builtin:azure_code")) == 8_819
    with pytest.raises(WorkloadError, match=r"builtin:nope: unknown built-in trace \(known: builtin:azure_"):
        read_trace("builtin:nope")


@pytest.mark.parametrize("name", ["conv", "code"])
def test_builtin_is_unmodified_copy(name):
    """The bundled traces are the published files: the SHA-256 that ATTRIBUTION.md states."""
    import gzip
    from importlib import resources

    data = resources.files("servesim").joinpath("data")
    packed = data.joinpath(f"azure_{name}_2023.csv.gz").read_bytes()
    digest = hashlib.sha256(gzip.decompress(packed)).hexdigest()
    assert f"{digest}  AzureLLMInferenceTrace_{name}.csv" in data.joinpath("ATTRIBUTION.md").read_text()


# --------------------------------------------------------------------------- errors

BAD = [
    ("bad_int.csv", "bad_int.csv:3: num_prompt_tokens: expected a positive integer, found 'abc'"),
    ("bad_negative.csv", "bad_negative.csv:4: num_output_tokens: expected a positive integer, found '-3'"),
    (
        "bad_arrival.csv",
        "bad_arrival.csv:2: arrived_at_s: expected a non-negative number of seconds, found 'soon'",
    ),
    (
        "bad_fields.csv",
        "bad_fields.csv:3: expected 3 comma-separated fields "
        "(arrived_at_s, num_prompt_tokens, num_output_tokens), found 2",
    ),
    (
        "missing_column.csv",
        "missing_column.csv:1: missing column 'num_output_tokens' (generic traces need "
        "arrived_at_s, num_prompt_tokens, num_output_tokens; "
        "found arrived_at_s, num_prompt_tokens)",
    ),
    (
        "bad_timestamp.csv",
        "bad_timestamp.csv:3: TIMESTAMP: expected a timestamp like "
        "'2023-11-16 18:15:46.6805900', found '2023-11-16 25:15:46.6805900'",
    ),
    (
        "bad_json.jsonl",
        "bad_json.jsonl:2: expected one JSON object per line, found bad JSON "
        "(Expecting ',' delimiter at column 80)",
    ),
    ("bad_hash.jsonl", "bad_hash.jsonl:2: hash_ids: expected a list of integers, found [0, 'x']"),
    ("missing_key.jsonl", "missing_key.jsonl:2: missing key 'output_length'"),
    ("header_only.csv", "header_only.csv: no requests (the file has a header but no rows)"),
    ("empty.csv", "empty.csv: empty file, expected a header line"),
    ("does_not_exist.csv", "does_not_exist.csv: no such file"),
]


@pytest.mark.parametrize(("name", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_exact_message(name, message):
    with pytest.raises(WorkloadError) as e:
        read_trace(fx(name))
    assert str(e.value) == f"{FIXTURES}/{message}"


def test_lengths_only_file_is_not_a_trace_workload():
    with pytest.raises(WorkloadError) as e:
        read_trace(fx("lengths_only.csv"))
    msg = str(e.value)
    assert msg.startswith(f"{fx('lengths_only.csv')}: has no 'arrived_at_s' column")
    assert "kind: trace" in msg and "column: prompt" in msg


def test_read_lengths_lengths_only_and_traces():
    np.testing.assert_array_equal(read_lengths(fx("lengths_only.csv"), "prompt"), [100, 200, 300])
    np.testing.assert_array_equal(read_lengths(fx("lengths_only.csv"), "output"), [10, 20, 30])
    np.testing.assert_array_equal(read_lengths(fx("mooncake.jsonl"), "output"), [10, 20, 30])
    np.testing.assert_array_equal(read_lengths(fx("azure.csv"), "prompt"), [100, 200, 300, 400])  # file order


# --------------------------------------------------------------------------- selection


def test_select_window_rezeroes_to_start():
    wl = read_trace(fx("generic.csv"))  # arrivals 0, 0.25, 0.5, 1.5
    out = select(wl, start_s=0.2, end_s=1.5)
    np.testing.assert_allclose(out.arrival_s, [0.05, 0.3])
    np.testing.assert_array_equal(out.num_prompt_tokens, [30, 20])
    assert out.hash_ids == [(1, 3), ()]
    np.testing.assert_array_equal(wl.arrival_s, [0.0, 0.25, 0.5, 1.5])  # input untouched


def test_select_rate_scale_and_limit():
    wl = read_trace(fx("generic.csv"))
    out = select(wl, rate_scale=2.0, start_s=0.25, limit=2)
    np.testing.assert_allclose(out.arrival_s, [0.0, 0.125])
    np.testing.assert_array_equal(out.num_prompt_tokens, [30, 20])
    np.testing.assert_allclose(select(wl, rate_scale=0.5).arrival_s, [0.0, 0.5, 1.0, 3.0])


def test_load_workload_trace_config():
    cfg = TraceWorkload(path=fx("mooncake.jsonl"), end_s=1.0, rate_scale=4.0)
    wl = load_workload(cfg, seed=123)
    np.testing.assert_allclose(wl.arrival_s, [0.0, 0.0625])
    assert wl.meta["selection"]["num_rows"] == 2


def test_empty_selection_is_an_error():
    wl = read_trace(fx("generic.csv"))
    with pytest.raises(WorkloadError) as e:
        select(wl, start_s=5.0)
    assert str(e.value) == (
        f"{fx('generic.csv')}: no requests left after selection (start_s=5.0, "
        "end_s=None, limit=None); the trace spans 0.000-1.500 s"
    )


# --------------------------------------------------------------------------- real traces

REAL = [
    ("azure2023/AzureLLMInferenceTrace_conv.csv", 19_366, "azure"),
    ("azure2023/AzureLLMInferenceTrace_code.csv", 8_819, "azure"),
    ("mooncake/conversation_trace.jsonl", 12_031, "mooncake"),
    ("mooncake/synthetic_trace.jsonl", 3_993, "mooncake"),
]


@pytest.mark.shared_data
@pytest.mark.parametrize(("rel", "rows", "fmt"), REAL, ids=[r[0].split("/")[1] for r in REAL])
def test_real_traces_row_counts(rel, rows, fmt):
    wl = read_trace(shared(rel))
    wl.validate()
    assert len(wl) == rows and wl.meta["format"] == fmt and wl.meta["clamped"] == 0
    assert wl.arrival_s[0] == 0.0
    if fmt == "mooncake":
        # One hash id per started 512-token block.
        assert all(len(h) == -(-p // 512) for h, p in zip(wl.hash_ids, wl.num_prompt_tokens, strict=True))


def test_azure_conv_statistics():
    wl = read_trace("builtin:azure_conv")  # the published file, compressed
    assert wl.num_prompt_tokens.mean() == pytest.approx(1154.7, abs=0.1)
    assert np.median(wl.num_prompt_tokens) == 1020
    assert wl.num_output_tokens.mean() == pytest.approx(211.13, abs=0.01)
    assert wl.arrival_s[-1] == pytest.approx(3501.721937, abs=1e-6)  # 18:15:46.68059 -> 19:14:08.40253
    assert wl.meta["reordered"] is False


@pytest.mark.shared_data
def test_arxiv_lengths_as_length_source():
    path = shared("arxiv_summarization/arxiv_summarization_lengths.csv")
    prompts = read_lengths(path, "prompt")
    assert len(prompts) == 28_257
    with pytest.raises(WorkloadError, match="lengths-only file"):
        load_workload(TraceWorkload(path=path))
    cfg = SyntheticWorkload(
        num_requests=2000,
        prompt_len=LengthDist(kind="trace", trace=path),
        output_len=LengthDist(kind="trace", trace=path, column="output"),
    )
    wl = load_workload(cfg)
    assert set(wl.num_prompt_tokens.tolist()) <= set(prompts.tolist())
    assert wl.num_prompt_tokens.mean() == pytest.approx(prompts.mean(), rel=0.1)


def test_a_trace_read_again_is_a_fresh_copy(tmp_path: Path) -> None:
    """read_trace keeps the last traces read (a plan reads one per candidate): a second read
    is equal and shares nothing; a file changed since is read again."""
    path = tmp_path / "t.csv"
    path.write_text((FIXTURES / "generic.csv").read_text())
    a = read_trace(str(path))
    a.arrival_s[:] = -1.0
    a.meta["format"] = "changed"
    a.hash_ids.append(("x",))
    b = read_trace(str(path))
    np.testing.assert_array_equal(b.arrival_s, [0.0, 0.25, 0.5, 1.5])
    assert b.meta["format"] == "generic" and len(b.hash_ids) == 4
    text = path.read_text().splitlines()
    path.write_text("\n".join(text[:-1]) + "\n")
    time.sleep(0.01)
    assert len(read_trace(str(path))) == 3
