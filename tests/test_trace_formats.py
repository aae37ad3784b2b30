"""BurstGPT, Azure 2024, vllm bench result and ShareGPT files: read against an independent
parse of the fixture (tests/fixtures/traces/make_format_fixtures.py), a BurstGPT replay whose
requests, rate and lengths are the file's, and errors that name the file, line and field."""

from __future__ import annotations

import csv
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from servesim import simulate
from servesim.config import LengthDist, SyntheticWorkload, TraceWorkload
from servesim.errors import WorkloadError
from servesim.workload import load_workload, read_lengths, read_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def fx(name: str) -> str:
    return str(FIXTURES / name)


def burstgpt_rows() -> list[dict[str, str]]:
    with open(fx("burstgpt.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_burstgpt_keeps_failed_requests_by_default():
    rows = burstgpt_rows()
    wl = read_trace(fx("burstgpt.csv"))
    assert wl.meta["format"] == "burstgpt" and len(wl) == len(rows) == 400
    t = np.array([float(r["Timestamp"]) for r in rows])
    np.testing.assert_array_equal(wl.arrival_s, t - t.min())  # from the file's first arrival (1 s)
    assert wl.meta["shift_s"] == 1.0
    np.testing.assert_array_equal(wl.num_prompt_tokens, [int(r["Request tokens"]) for r in rows])
    failed = sum(r["Response tokens"] == "0" for r in rows)
    assert failed > 0
    # A failed request's 0-token response is served as the engine's minimum, 1, and noted.
    np.testing.assert_array_equal(wl.num_output_tokens, [max(int(r["Response tokens"]), 1) for r in rows])
    assert wl.meta["clamped"] == failed
    assert any(n["code"] == "zero_length_raised" for n in wl.meta["notices"])


def test_later_pieces_of_burstgpt_and_mooncake_start_at_their_first_arrival(tmp_path):
    """A file holding a later piece of a trace (day 60 of BurstGPT, a Mooncake window
    ~27 minutes in) starts at 0, as an Azure file does, with a notice of the shift: the run
    does not idle through the hours before it ("simulated 1440 h")."""
    late = tmp_path / "burstgpt_day60.csv"
    rows = burstgpt_rows()[:20]
    day = 60 * 86400
    late.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        + "".join(
            f"{int(r['Timestamp']) + day},{r['Model']},{r['Request tokens']},{r['Response tokens']},"
            f"{r['Total tokens']},{r['Log Type']}\n"
            for r in rows
        )
    )
    moon = tmp_path / "mooncake_late.jsonl"
    moon.write_text(
        '{"timestamp": 1593000, "input_length": 100, "output_length": 5, "hash_ids": [0]}\n'
        '{"timestamp": 1594500, "input_length": 200, "output_length": 5, "hash_ids": [1]}\n'
    )
    for path, first in ((late, day + 1.0), (moon, 1593.0)):
        wl = read_trace(path)
        assert wl.arrival_s[0] == 0.0 and wl.meta["shift_s"] == first
        assert [n for n in wl.meta["notices"] if n["code"] == "shifted"][0]["message"].startswith(
            f"{path}: timestamps start at {first:,.3f} s; shifted so the first request arrives at 0"
        )
    np.testing.assert_allclose(read_trace(moon).arrival_s, [0.0, 1.5])
    res = simulate({"workload": {"type": "trace", "path": str(late)}})
    assert res.summary["counts"]["end_s"] < 3600


def test_burstgpt_drop_failed():
    rows = [r for r in burstgpt_rows() if r["Response tokens"] != "0"]
    wl = load_workload(TraceWorkload(path=fx("burstgpt.csv"), failed="drop"))
    assert len(wl) == len(rows)
    np.testing.assert_array_equal(wl.num_output_tokens, [int(r["Response tokens"]) for r in rows])
    assert [n["code"] for n in wl.meta["notices"]] == ["failed_dropped", "shifted"]
    assert wl.meta["notices"][0]["count"] == 400 - len(rows)


def test_burstgpt_replay_matches_the_file():
    """Replayed on Llama-3.1-8B / H100: every request of the file is served, at the file's
    arrival times, with the file's lengths (rate = (n - 1) / span)."""
    rows = burstgpt_rows()
    t = np.array([float(r["Timestamp"]) for r in rows])
    t -= t.min()  # read from the file's first arrival
    res = simulate({"workload": {"type": "trace", "path": fx("burstgpt.csv")}})
    rec = res.records
    assert res.summary["counts"]["num_requests"] == res.summary["counts"]["num_finished"] == len(rows)
    np.testing.assert_array_equal(rec.arrival_s, t)
    assert (len(rec) - 1) / (rec.arrival_s[-1] - rec.arrival_s[0]) == pytest.approx(
        (len(t) - 1) / (t[-1] - t[0])
    )
    p = np.array([int(r["Request tokens"]) for r in rows])
    o = np.array([max(int(r["Response tokens"]), 1) for r in rows])
    assert rec.num_prompt_tokens.mean() == pytest.approx(p.mean())
    assert rec.num_prompt_tokens.std() == pytest.approx(p.std())
    assert rec.num_output_tokens.sum() == o.sum()  # every request ran to its recorded length
    assert np.all(np.isfinite(rec.finished_s))


def test_azure_2024_timestamps():
    with open(fx("azure_2024.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    t = np.array([datetime.fromisoformat(r["TIMESTAMP"]).timestamp() for r in rows])
    wl = read_trace(fx("azure_2024.csv"))
    assert wl.meta["format"] == "azure" and len(wl) == 300
    np.testing.assert_allclose(wl.arrival_s, t - t.min(), atol=1e-6)
    np.testing.assert_array_equal(wl.num_output_tokens, [int(r["GeneratedTokens"]) for r in rows])


def test_vllm_bench_result():
    doc = json.loads(Path(fx("vllm_bench_result.json")).read_text())
    wl = read_trace(fx("vllm_bench_result.json"))
    assert wl.meta["format"] == "vllm_bench" and len(wl) == doc["num_prompts"]
    np.testing.assert_array_equal(wl.num_prompt_tokens, doc["input_lens"])
    np.testing.assert_array_equal(wl.num_output_tokens, np.maximum(doc["output_lens"], 1))
    assert wl.clients is not None and wl.clients.max_concurrency == doc["max_concurrency"]
    # Due times as vllm bench draws them: the last one at num_prompts / request_rate.
    assert wl.arrival_s[-1] == pytest.approx(doc["num_prompts"] / doc["request_rate"])
    dropped = read_trace(fx("vllm_bench_result.json"), failed="drop")
    assert len(dropped) == sum(not e for e in doc["errors"]) == 198


def test_sharegpt_lengths_first_two_turns():
    doc = json.loads(Path(fx("sharegpt.json")).read_text())
    kept = [c["conversations"] for c in doc if len(c["conversations"]) >= 2]
    prompt = read_lengths(fx("sharegpt.json"), "prompt")
    output = read_lengths(fx("sharegpt.json"), "output")
    assert len(prompt) == len(kept) == 115
    try:
        import tiktoken  # noqa: F401
    except ImportError:  # the estimate: 4 characters a token
        np.testing.assert_array_equal(prompt, [max(round(len(c[0]["value"]) / 4), 1) for c in kept])
        np.testing.assert_array_equal(output, [max(round(len(c[1]["value"]) / 4), 1) for c in kept])
    wl = load_workload(
        SyntheticWorkload(prompt_len=LengthDist(kind="trace", trace=fx("sharegpt.json")), num_requests=50)
    )
    assert set(wl.num_prompt_tokens) <= set(prompt)
    with pytest.raises(WorkloadError, match="lengths-only"):
        read_trace(fx("sharegpt.json"))


@pytest.mark.parametrize(
    "name,format,message",
    [
        (
            "bad_burstgpt.csv",
            "auto",
            "bad_burstgpt.csv:7: Response tokens: expected a positive integer, found 'n/a'",
        ),
        (
            "bad_vllm_bench.json",
            "auto",
            "bad_vllm_bench.json: output_lens: expected one per input_lens entry (200), found 199",
        ),
        (
            "bad_sharegpt.json",
            "auto",
            "bad_sharegpt.json: conversation 1 turn 0: value: expected the turn's text, found 42",
        ),
        ("burstgpt.csv", "vllm_bench", "burstgpt.csv: format vllm_bench: expected a .json document"),
        (
            "sharegpt.json",
            "vllm_bench",
            "sharegpt.json: format vllm_bench: expected an object with input_lens",
        ),
    ],
)
def test_bad_files_name_the_place(name, format, message):
    with pytest.raises(WorkloadError) as err:
        read_trace(fx(name), format)
    assert message in str(err.value)
