"""The CLI: options, error messages and exit codes, and the files it writes.

Runs are faked by monkeypatching ``servesim.sim.simulate`` with the hand-made Result of
test_summary, except for one end-to-end run of the real engine on 20 requests.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from test_summary import make_result  # tests/ is on sys.path (rootdir-relative, no __init__)
from typer.testing import CliRunner

from servesim import sim
from servesim.cli import app
from servesim.errors import WorkloadError

runner = CliRunner()


@pytest.fixture
def fake_sim(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replace the engine with the hand-made Result; records each call's arguments."""
    calls: list[dict[str, Any]] = []

    def fake(scenario: Any, *, progress: bool = False, **_: Any) -> Any:
        calls.append({"scenario": scenario, "progress": progress})
        res = make_result()
        res.scenario = scenario
        return res

    monkeypatch.setattr(sim, "simulate", fake)
    return calls


def test_help_lists_commands_and_options() -> None:
    out = runner.invoke(app, ["--help"])
    assert out.exit_code == 0
    for cmd in ("simulate", "catalog", "version"):
        assert cmd in out.stdout
    out = runner.invoke(app, ["simulate", "--help"], terminal_width=200)
    assert out.exit_code == 0
    for opt in ("--set", "--output", "--records-format", "--json", "--quiet", "--no-progress"):
        assert opt in out.stdout
    assert "Llama-3.1-8B" in out.stdout and "Azure" in out.stdout


def test_version() -> None:
    from servesim import __version__

    out = runner.invoke(app, ["version"])
    assert out.exit_code == 0
    assert out.stdout.strip().startswith(f"servesim {__version__} (")


def test_simulate_default_prints_report(fake_sim: list[dict[str, Any]]) -> None:
    out = runner.invoke(app, ["simulate", "--set", "engine.max_num_seqs=64"])
    assert out.exit_code == 0, out.output
    sc = fake_sim[0]["scenario"]
    assert sc.engine.max_num_seqs == 64
    assert sc.model.name == "meta-llama/Llama-3.1-8B"  # the default scenario otherwise
    assert fake_sim[0]["progress"] is True
    for word in ("TTFT", "TPOT", "ITL", "E2E", "Queue", "Throughput", "Goodput", "MFU", "Energy", "Cost"):
        assert word in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_simulate_json(fake_sim: list[dict[str, Any]]) -> None:
    out = runner.invoke(app, ["simulate", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["counts"]["num_requests"] == 5
    assert doc["latency"]["ttft_s"]["p50"] == pytest.approx(0.5)
    assert fake_sim[0]["progress"] is False


def test_simulate_writes_outputs(fake_sim: list[dict[str, Any]], tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out = runner.invoke(
        app, ["simulate", "-q", "--no-progress", "--output", str(out_dir), "--records-format", "csv"]
    )
    assert out.exit_code == 0, out.output
    assert out.stdout == ""
    assert sorted(p.name for p in out_dir.iterdir()) == ["requests.csv", "steps.csv", "summary.json"]
    assert json.loads((out_dir / "summary.json").read_text())["scenario"]["name"] == "scenario"


def test_unwritable_output_is_a_user_error(fake_sim: list[dict[str, Any]], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = runner.invoke(app, ["simulate", "-q", "--output", str(blocker / "sub")])
    assert out.exit_code == 2
    # refused before the run: the folder cannot be created under a file
    assert out.stderr == f"error: {blocker / 'sub'}: cannot create it: {blocker} is a file, not a folder\n"
    assert fake_sim == []


def test_scenario_file_and_overrides(fake_sim: list[dict[str, Any]], tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: mine\nengine:\n  max_num_seqs: 8\n")
    out = runner.invoke(app, ["simulate", str(f), "--set", "engine.block_size=32", "--quiet"])
    assert out.exit_code == 0, out.output
    sc = fake_sim[0]["scenario"]
    assert (sc.name, sc.engine.max_num_seqs, sc.engine.block_size) == ("mine", 8, 32)


def _no_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*a: Any, **k: Any) -> Any:
        raise AssertionError("simulate must not run on a bad scenario")

    monkeypatch.setattr(sim, "simulate", fail)


def test_unknown_override_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_sim(monkeypatch)
    out = runner.invoke(app, ["simulate", "--set", "engine.bogus=1"])
    assert out.exit_code == 2
    assert out.stderr.startswith("error: ")
    assert "engine.bogus" in out.stderr
    assert "Traceback" not in out.output


def test_malformed_override(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_sim(monkeypatch)
    out = runner.invoke(app, ["simulate", "--set", "engine.max_num_seqs"])
    assert out.exit_code == 2
    assert "KEY=VALUE" in out.stderr


def test_missing_scenario_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_sim(monkeypatch)
    missing = tmp_path / "nope.yaml"
    out = runner.invoke(app, ["simulate", str(missing)])
    assert out.exit_code == 2
    assert str(missing) in out.stderr
    assert "Traceback" not in out.output


def test_wrong_type_in_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_sim(monkeypatch)
    f = tmp_path / "bad.yaml"
    f.write_text("engine:\n  max_num_seqs: lots\n")
    out = runner.invoke(app, ["simulate", str(f)])
    assert out.exit_code == 2
    assert "engine.max_num_seqs" in out.stderr
    assert str(f) in out.stderr


def test_user_error_during_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*a: Any, **k: Any) -> Any:
        raise WorkloadError("trace.csv:7: expected an integer ContextTokens, found 'x'")

    monkeypatch.setattr(sim, "simulate", fail)
    out = runner.invoke(app, ["simulate"])
    assert out.exit_code == 2
    assert out.stderr == "error: trace.csv:7: expected an integer ContextTokens, found 'x'\n"


def test_keyboard_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim, "simulate", interrupt)
    out = runner.invoke(app, ["simulate"])
    assert out.exit_code == 130
    assert out.output == ""


def test_bugs_keep_their_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*a: Any, **k: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(sim, "simulate", bug)
    out = runner.invoke(app, ["simulate"])
    assert out.exit_code == 1
    assert isinstance(out.exception, RuntimeError)


def test_bad_records_format() -> None:
    out = runner.invoke(app, ["simulate", "--records-format", "xlsx"])
    assert out.exit_code == 2
    assert "xlsx" in out.output


def test_catalog() -> None:
    pytest.importorskip("servesim.catalog.models")
    pytest.importorskip("servesim.catalog.gpus")
    out = runner.invoke(app, ["catalog"])
    assert out.exit_code == 0, out.output
    assert "Llama-3.1-8B" in out.stdout
    assert "H100-SXM" in out.stdout
    out = runner.invoke(app, ["catalog", "gpus"])
    assert out.exit_code == 0
    assert "H100-SXM" in out.stdout and "Llama" not in out.stdout


TINY = (
    "workload={type: synthetic, num_requests: 20, arrival: {rate: 10.0}, "
    "prompt_len: {kind: constant, value: 64}, output_len: {kind: constant, value: 8}}"
)


def test_end_to_end_real_engine(tmp_path: Path) -> None:
    """The real engine on 20 short requests: report, then files that agree with each other."""
    for mod in ("servesim.perf.roofline", "servesim.perf.memory", "servesim.workload"):
        pytest.importorskip(mod)
    out_dir = tmp_path / "run"
    out = runner.invoke(
        app, ["simulate", "--no-progress", "--set", TINY, "-o", str(out_dir), "--records-format", "csv"]
    )
    assert out.exit_code == 0, out.output
    assert "TTFT" in out.stdout
    doc = json.loads((out_dir / "summary.json").read_text())
    assert doc["counts"]["num_requests"] == 20
    assert doc["counts"]["num_finished"] == 20
    assert doc["throughput"]["num_output_tokens"] == 20 * 8
    assert doc["scenario"]["workload"]["num_requests"] == 20
    with open(out_dir / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20
    assert all(r["status"] == "0" and r["num_output_tokens"] == "8" for r in rows)
    assert all(float(r["first_token_s"]) >= float(r["arrival_s"]) for r in rows)
    with open(out_dir / "steps.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) >= 8  # at least one step per output token


def test_chunked_prefill_off_with_a_budget_below_max_model_len_is_refused() -> None:
    """As vLLM refuses to start: a max-length prompt could never be scheduled."""
    from typer.testing import CliRunner

    from servesim.cli import app

    res = CliRunner().invoke(
        app,
        [
            "simulate",
            "--no-progress",
            "--set",
            "engine.enable_chunked_prefill=false",
            "--set",
            "engine.max_num_batched_tokens=2048",
        ],
    )
    assert res.exit_code == 2
    assert "max_num_batched_tokens (2048) must be >= max_model_len (131072)" in res.output


def test_scenario_paths_are_relative_to_the_scenario_file(tmp_path: Path) -> None:
    """A trace and a hardware profile named next to the scenario file are found from any cwd."""
    from servesim.config import load_scenario

    sub = tmp_path / "study"
    sub.mkdir()
    (sub / "h100.json").write_text("{}")
    (sub / "trace.csv").write_text("arrived_at_s,num_prompt_tokens,num_output_tokens\n0.0,10,2\n")
    (sub / "s.yaml").write_text(
        "hardware: {gpu: H100, profile: h100.json}\nworkload: {type: trace, path: trace.csv}\n"
    )
    sc = load_scenario(sub / "s.yaml")
    assert sc.hardware.profile == str(sub / "h100.json")
    assert sc.workload.path == str(sub / "trace.csv")  # type: ignore[union-attr]
