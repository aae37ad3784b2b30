"""``servesim validate --bench`` on inference-perf's results: stage and summary lifecycle metrics.

The fixture folder (tests/fixtures/inference_perf/results) is hand-made in inference-perf's
layout: a resolved ``config.yaml`` with two constant stages (2/s for 20 s, 5/s for 10 s)
and ``stage_N_lifecycle_metrics.json`` / ``summary_lifecycle_metrics.json`` in seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.errors import ConfigError, WorkloadError
from servesim.validate.ip_bench import measured_figures, predicted_figures, stage_of
from servesim.validate.own_bench import compare

RESULTS = Path(__file__).parent / "fixtures" / "inference_perf" / "results"
SCENARIO = "model: {name: meta-llama/Llama-3.1-8B}\nhardware: {gpu: H100-SXM}\nengine: {version: '0.19.0'}\n"
FIGURES = {f"{s}_{m}_ms" for s in ("mean", "median", "p90", "p99") for m in ("ttft", "tpot", "e2el", "ntpot")}
RATES = {"request_throughput", "output_throughput", "input_throughput", "total_token_throughput"}


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    p = tmp_path / "deploy.yaml"
    p.write_text(SCENARIO)
    return p


def test_measured_figures_are_the_files_in_ms_without_itl():
    doc = json.loads((RESULTS / "stage_0_lifecycle_metrics.json").read_text())
    got = measured_figures(doc)
    assert set(got) == FIGURES | RATES  # inter_token_latency is per streamed chunk: not compared
    lat = doc["successes"]["latency"]
    assert got["mean_ttft_ms"] == pytest.approx(1e3 * lat["time_to_first_token"]["mean"])
    assert got["p90_e2el_ms"] == pytest.approx(1e3 * lat["request_latency"]["p90"])
    assert got["median_tpot_ms"] == pytest.approx(1e3 * lat["time_per_output_token"]["median"])
    assert got["request_throughput"] == doc["successes"]["throughput"]["requests_per_sec"]


def test_predicted_figures_follow_inference_perfs_definitions():
    arrival = np.array([0.0, 1.0, 2.0])
    first = np.array([0.1, 1.2, 2.05])
    finish = np.array([1.1, 2.2, 2.05])
    output = np.array([11.0, 21.0, 1.0])
    prompt = np.array([100.0, 200.0, 300.0])
    got = predicted_figures(arrival, first, finish, prompt, output)
    # TPOT per request with more than one output token: (last - first) / (output - 1)
    assert got["mean_tpot_ms"] == pytest.approx(1e3 * np.mean([1.0 / 10, 1.0 / 20]))
    assert got["mean_ntpot_ms"] == pytest.approx(1e3 * np.mean([1.1 / 11, 1.2 / 21, 0.05 / 1]))
    assert got["median_e2el_ms"] == pytest.approx(1e3 * 1.1)
    # throughputs over the span from the first send to the last finish (2.2 s)
    assert got["request_throughput"] == pytest.approx(3 / 2.2)
    assert got["output_throughput"] == pytest.approx(33 / 2.2)
    assert got["input_throughput"] == pytest.approx(600 / 2.2)


def test_a_stage_file_is_compared_with_that_stages_requests(scenario: Path):
    assert stage_of(RESULTS / "stage_1_lifecycle_metrics.json") == 1
    assert stage_of(RESULTS / "summary_lifecycle_metrics.json") is None
    cache: dict = {}
    s0 = compare(scenario, RESULTS / "stage_0_lifecycle_metrics.json", cache=cache)
    s1 = compare(scenario, RESULTS / "stage_1_lifecycle_metrics.json", cache=cache)
    assert len(cache) == 1  # one simulation of the run for both stage files
    rows0 = {name: (meas, pred) for name, meas, pred, _ in s0.rows}
    rows1 = {name: (meas, pred) for name, meas, pred, _ in s1.rows}
    assert set(rows0) == set(rows1) == FIGURES | RATES
    assert "stage 0" in s0.notes[0] and "inter_token_latency not compared" in s0.notes[0]
    assert not any(n.startswith("requests:") for n in s0.notes + s1.notes)  # int(rate x duration) each
    # 40 requests in 20 s against 50 in 10 s: each stage's own request rate
    assert rows0["request_throughput"][1] == pytest.approx(40 / 20, rel=0.1)
    assert rows1["request_throughput"][1] == pytest.approx(50 / 10, rel=0.1)
    for _, meas, pred, err in s0.rows:
        assert err == pytest.approx(100 * (pred / meas - 1))
    summary = compare(scenario, RESULTS / "summary_lifecycle_metrics.json")
    assert "summary (all stages)" in summary.notes[0]
    mean = {n: p for n, _, p, _ in summary.rows}["mean_ttft_ms"]
    assert mean == pytest.approx((40 * rows0["mean_ttft_ms"][1] + 50 * rows1["mean_ttft_ms"][1]) / 90)


def test_without_config_yaml_or_with_a_stage_too_many(tmp_path: Path, scenario: Path):
    (tmp_path / "r").mkdir()
    shutil.copy(RESULTS / "stage_0_lifecycle_metrics.json", tmp_path / "r")
    with pytest.raises(ConfigError, match="no config.yaml beside it"):
        compare(scenario, tmp_path / "r" / "stage_0_lifecycle_metrics.json")
    shutil.copy(RESULTS / "config.yaml", tmp_path / "r")
    shutil.copy(RESULTS / "stage_0_lifecycle_metrics.json", tmp_path / "r" / "stage_7_lifecycle_metrics.json")
    with pytest.raises(WorkloadError, match="stage 7, but config.yaml has 2 load stages"):
        compare(scenario, tmp_path / "r" / "stage_7_lifecycle_metrics.json")


def test_the_command_reads_stage_files(scenario: Path, tmp_path: Path):
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--bench",
            str(RESULTS / "stage_1_lifecycle_metrics.json"),
            "--scenario",
            str(scenario),
            "-o",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "inference-perf stage 1" in res.output and "mean_tpot_ms" in res.output
    assert "itl" not in (tmp_path / "bench_comparison.csv").read_text()
