"""Every change made to the input is reported: in ``Workload.meta["notices"]``, in
``summary["notices"]`` and on the console, for one replica and a cluster alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import servesim
from servesim.metrics.console import print_summary
from servesim.workload import read_trace
from servesim.workload.notices import hash_ids_beyond_prompt

GENERIC = (
    "arrived_at_s,num_prompt_tokens,num_output_tokens,prefx_group\n"
    "0.0,100,10,a\n0.5,200,0,a\n0.25,300,5,b\n1.0,50,5,\n"
)


def codes(notices: list[dict]) -> dict[str, int | None]:
    return {n["code"]: n["count"] for n in notices}


def test_generic_trace_zero_length_unsorted_and_a_misspelt_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(GENERIC)
    wl = read_trace(path)
    found = wl.meta["notices"]
    assert codes(found) == {"zero_length_raised": 1, "reordered": 1, "unknown_column": None}
    misspelt = next(n for n in found if n["code"] == "unknown_column")
    assert "'prefx_group'" in misspelt["message"] and "did you mean 'prefix_group'?" in misspelt["message"]
    assert wl.prefix_group is None  # the feature is off: that is what the notice warns of


def test_mooncake_hash_ids_beyond_the_prompt(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 20, "input_length": 100, "output_length": 5, "hash_ids": [7], "chat_id": 3},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    wl = read_trace(path)
    assert codes(wl.meta["notices"]) == {"hash_ids_beyond_prompt": 1}  # keys come from the first record
    assert "more hash ids than their prompt has blocks of 512 tokens" in wl.meta["notices"][0]["message"]


def test_hash_ids_that_cover_the_prompt_exactly_are_no_notice() -> None:
    import numpy as np

    assert hash_ids_beyond_prompt([(1, 2), (3,)], np.array([1024, 1]), 512, "x") is None


def test_sorted_clean_trace_has_no_notices() -> None:
    assert "notices" not in read_trace("builtin:azure_conv").meta


@pytest.mark.parametrize("cluster", [None, {"pools": [{"name": "a", "num_replicas": 2}]}])
def test_notices_reach_the_summary_and_the_console(tmp_path: Path, cluster: dict | None) -> None:
    path = tmp_path / "t.csv"
    path.write_text(GENERIC)
    sc = {
        "model": {"name": "Llama-3.1-8B"},
        "engine": {"max_model_len": 4096},
        "workload": {"type": "trace", "path": str(path)},
    }
    if cluster:
        sc["cluster"] = cluster
    r = servesim.simulate(sc)
    assert codes(r.summary["notices"]) == {"zero_length_raised": 1, "reordered": 1, "unknown_column": None}
    out = io.StringIO()
    print_summary(r, Console(file=out, width=200))
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("Notice")]
    assert len(lines) == 3 and lines[0].rstrip().endswith("raised to 1 (1)")


def test_synthetic_lengths_clipped_are_counted() -> None:
    r = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "engine": {"max_model_len": 4096},
            "workload": {
                "type": "synthetic",
                "num_requests": 200,
                "arrival": {"rate": 5},
                "prompt_len": {"kind": "normal", "mean": 100, "std": 200, "max": 300},
                "output_len": {"kind": "constant", "value": 20},
            },
        }
    )
    (n,) = r.summary["notices"]
    assert n["code"] == "length_clipped" and n["source"] == "workload.prompt_len" and 0 < n["count"] < 200
