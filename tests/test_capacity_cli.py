"""``servesim capacity``: its report, JSON, files, and the answer "no rate meets"."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli import app

SMALL = [
    "--set",
    "workload.type=synthetic",
    "--set",
    "workload.num_requests=60",
    "--set",
    "workload.arrival.rate=2",
    "--set",
    "workload.prompt_len.value=256",
    "--set",
    "workload.output_len.value=16",
    "--no-progress",
]


def test_json_and_files_agree(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["capacity", *SMALL, "--json", "--max-rate", "16", "--output", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc == json.loads((tmp_path / "capacity.json").read_text())
    result, probes = doc["result"], doc["probes"]
    assert [p["rate_rps"] for p in probes] == [2.0, 4.0, 8.0, 16.0]  # doubling to --max-rate
    assert result["limited_by_max_rate"] and result["capacity_rps"] == 16.0
    assert result["bracket_rps"] == [16.0, None] and result["knob"] == "workload.arrival.rate"
    assert all(p["meets"] and p["verdict"]["checks"][0]["metric"] == "all" for p in probes)
    rows = list(csv.DictReader((tmp_path / "probes.csv").open()))
    assert [float(r["rate_rps"]) for r in rows] == [2.0, 4.0, 8.0, 16.0]
    assert doc["scenario"]["slo"]["ttft_s"] == 2.0  # the default scenario's SLO


def test_report_names_the_bracket_and_the_precision() -> None:
    res = CliRunner().invoke(app, ["capacity", *SMALL, "--set", "slo.ttft_s=0.05", "--precision", "0.2"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if x.startswith("capacity: "))
    assert "bracket [" in line and "(precision 20%)" in line
    assert "good requests per $" in res.stdout
    assert "Probes (rate set through workload.arrival.rate" in res.stdout


def test_no_rate_meets_exits_1_with_the_closest_probe() -> None:
    res = CliRunner().invoke(app, ["capacity", *SMALL, "--set", "slo.ttft_s=0.0001", "--min-rate", "0.5"])
    assert res.exit_code == 1
    err = res.stderr.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: capacity: the SLO targets are missed even at 0.5 req/s")
    assert "closest probe: " in err[0] and "all attainment 0 < 0.9" in err[0]
    assert "misses" in res.stdout  # the probes were shown
    assert "Traceback" not in res.output


def test_the_progress_bar_counts_probes_against_the_bisection_left(monkeypatch) -> None:
    import io
    import sys

    from servesim.planner.capacity_report import probe_progress, probes_left
    from servesim.planner.probe import Probe
    from servesim.planner.targets import TargetCheck, Verdict

    # From [10, 20] to 5%: halving log(2) down to log(1.05) takes ceil(log2(14.2)) = 4 steps.
    assert probes_left(10.0, 20.0, 0.05) == 4 and probes_left(10.0, 10.4, 0.05) == 0
    assert probes_left(None, 20.0, 0.05) == 0

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    check = TargetCheck("attainment", "all", 0.9, 0.5, False, -0.4)
    probe = Probe(20.0, 20.0, Verdict(False, -0.4, (check,), 10, 10), None, 10, {})
    with probe_progress(True, 0.05) as report:
        assert report is not None
        report(probe, 10.0, 20.0)
    shown = sys.stderr.getvalue()
    assert "capacity probes" in shown and "1/5" in shown and "bracket [10, 20] req/s" in shown
    with probe_progress(False, 0.05) as report:
        assert report is None


def test_the_answer_at_other_seeds_is_reported_in_console_and_json(tmp_path: Path) -> None:
    """--seeds 4: the capacity.json's uncertainty holds each seed's answer and the t-based
    95% prediction interval computed from them; the console prints the same interval."""
    import math

    args = ["capacity", *SMALL, "--set", "slo.ttft_s=0.05", "--precision", "0.1", "--seeds", "4"]
    res = CliRunner().invoke(app, [*args, "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    unc = json.loads((tmp_path / "capacity.json").read_text())["uncertainty"]
    answers = unc["answers"]
    assert unc["seeds"] == [0, 1, 2, 3] and unc["seed_varies_workload"] and len(answers) == 4
    mean = sum(answers) / 4
    std = math.sqrt(sum((a - mean) ** 2 for a in answers) / 3)
    half = 3.182 * std * math.sqrt(1.25)  # t(0.975, 3)
    assert unc["interval"] == [max(0.0, mean - half), mean + half]
    line = next(x for x in res.stdout.splitlines() if "uncertainty:" in x)
    assert f"lies in [{max(0.0, mean - half):.4g}, {mean + half:.4g}] req/s" in line


def test_stable_and_seeds_are_checked() -> None:
    for extra, message in (
        (["--seeds", "0"], "--seeds: expected 1 to 31 seeds, found 0"),
        (["--stable", "0.02", "--precision", "0.05"], "--stable 0.02 is below --precision 0.05"),
        (["--max-requests", "100"], "--max-requests caps --stable's growth of the run; give --stable too"),
        (["--stable", "0.2", "--seeds", "1"], "--stable needs at least 2 seeds"),
    ):
        res = CliRunner().invoke(app, ["capacity", *SMALL, *extra])
        assert res.exit_code == 2, res.output
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], res.stderr


def test_a_trace_says_its_answer_does_not_move_with_the_seed() -> None:
    res = CliRunner().invoke(
        app,
        ["capacity", "--set", "workload.limit=200", "--precision", "0.3", "--max-rate", "8", "--no-progress"],
    )
    assert res.exit_code == 0, res.output
    assert "uncertainty: the workload is the same at every seed (a trace), so is the answer" in res.stdout


def _doc_block_lines(command: list[str]) -> list[str]:
    res = CliRunner().invoke(app, command, env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("capacity: "))
    return [x for x in lines[start:] if x.strip()]


def test_the_figures_docs_planning_quotes() -> None:
    """docs/planning.md's capacity and sessions blocks are what the commands print."""
    doc = (Path(__file__).parents[1] / "docs" / "planning.md").read_text()
    for line in _doc_block_lines(
        ["capacity", "examples/capacity_slo.yaml", "--precision", "0.1", "--no-progress"]
    ):
        assert line in doc, line
    sessions = ["capacity", "examples/chat_sessions.yaml", "--set", "workload.num_sessions=60"]
    lines = _doc_block_lines([*sessions, "--precision", "0.2", "--seeds", "1", "--no-progress"])
    assert lines[0] in doc and lines[1] in doc


@pytest.mark.slow
def test_the_stable_run_docs_planning_quotes() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "planning.md").read_text()
    lines = _doc_block_lines(["capacity", "examples/capacity_slo.yaml", "--stable", "0.1", "--no-progress"])
    assert lines[0] in doc and lines[-2] in doc and lines[-1] in doc
