"""``servesim capacity``: its report, JSON, files, and the answer "no rate meets"."""

from __future__ import annotations

import csv
import json
from pathlib import Path

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

    from servesim.planner.capacity import Probe
    from servesim.planner.capacity_report import probe_progress, probes_left
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
