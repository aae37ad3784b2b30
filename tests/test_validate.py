"""`servesim validate` on the bundled measurement copies and CPU recordings: every predicted
row meets its goal or is a known miss with its reason, no known-miss mark is stale, and the
command's exit status follows the goals (or --threshold)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.validate import (
    CPU_LIMITS,
    DISTSERVE_LIMITS,
    OPERATOR_GOALS,
    SPLITWISE_LIMITS,
    Check,
    Goal,
    validate_all,
)

FIXTURES = Path(__file__).parent / "fixtures"
DATA = FIXTURES / "measurements"
RECORDINGS = FIXTURES / "vllm_timing"


@pytest.fixture(scope="module")
def checks() -> list[Check]:
    out, skipped = validate_all(DATA, RECORDINGS)
    assert not skipped
    return out


def test_every_check_meets_its_goal_or_is_a_known_miss(checks: list[Check]) -> None:
    failed = [
        (c.suite, c.case, c.metric, round(c.mape_pct, 1), c.limit_pct) for c in checks if not c.passed()
    ]
    assert not failed
    # Every row but the engine's own run-to-run references is held to a goal.
    assert all(c.limit_pct is not None for c in checks if "(noise)" not in c.case)
    assert all(c.limit_pct is None for c in checks if "(noise)" in c.case)


def test_goals_have_reasons_and_no_known_miss_is_stale(checks: list[Check]) -> None:
    """A goal says why; a known-miss mark must be needed by at least one of its rows, so
    that a model that gets better also gets checked harder (remove the mark then)."""
    goals: list[Goal] = [
        *OPERATOR_GOALS.values(),
        *SPLITWISE_LIMITS.values(),
        *DISTSERVE_LIMITS.values(),
        *CPU_LIMITS.values(),
    ]
    assert all(len(g.why) > 20 for g in goals)
    used = {c.known_bad for c in checks if c.status() == "known bad"}
    marks = {g.known_bad for g in goals if g.known_bad}
    assert marks == used, marks - used
    # The figures docs/fidelity.md names: the worst known misses, as measured.
    worst = {}
    for c in checks:
        if c.known_bad:
            worst[c.suite, c.metric] = max(worst.get((c.suite, c.metric), 0.0), c.mape_pct)
    assert worst["distserve", "decode step time"] == pytest.approx(190, abs=1)
    assert worst["splitwise", "per-token time"] == pytest.approx(31, abs=1)


def test_suites_and_cases_present(checks: list[Check]) -> None:
    suites = {c.suite for c in checks}
    assert suites == {"operators", "splitwise", "distserve", "vllm-cpu"}
    cpu = [c for c in checks if c.suite == "vllm-cpu" and "held out" in c.case]
    assert {c.metric for c in cpu} >= {
        "mean_ttft_s",
        "p90_ttft_s",
        "mean_tpot_s",
        "p90_tpot_s",
        "mean_e2e_s",
        "p90_e2e_s",
        "step time (recorded batches)",
        "number of steps",
    }


def test_cpu_predictions_of_unseen_recordings(checks: list[Check]) -> None:
    """Calibrated on rate1.json, servesim predicts the recordings made in the same session
    (docs/fidelity.md §4): mean and P90 TTFT, TPOT and E2E within 10% (the fidelity target) at
    every load, and within 7% below 80% busy; the session was screened for run-to-run machine
    speed, so no recording's replayed step times are off by more than 2%."""
    rows = {
        (c.case.split(" ")[0], c.metric): c for c in checks if c.suite == "vllm-cpu" and "noise" not in c.case
    }
    metrics = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")
    predicted = ("rate0.5", "rate0.75", "rate0.75_repeat", "rate1.25", "rate1.5", "rate1.5_repeat", "rate2.5")
    light = ("rate0.5", "rate0.75", "rate0.75_repeat", "rate1.25")  # busy 31-72%
    for name in predicted:
        for metric in metrics:
            assert rows[name, metric].mape_pct < (7 if name in light else 10), (name, metric)
    for name in light:
        assert "heavy" not in rows[name, "mean_ttft_s"].case
    for name in ("rate1.5", "rate1.5_repeat", "rate2.5"):  # busy >= 80%
        assert "heavy" in rows[name, "mean_ttft_s"].case
    # Same machine speed as the calibration run: the replayed step times are unbiased.
    for name in (*predicted, "rate1"):
        assert abs(rows[name, "step time (recorded batches)"].bias_pct) < 2, name
    # Heavier load -> longer TPOT and E2E, measured and predicted alike.
    for src in ("measured", "predicted"):
        for metric in ("mean_tpot_s", "mean_e2e_s"):
            v = [getattr(rows[f"rate{r}", metric], src) for r in ("0.5", "0.75", "1", "1.25", "1.5", "2.5")]
            assert v == sorted(v), (src, metric)
    # Step by step: with vLLM's own step times servesim's scheduler makes the same steps,
    # every one of them (~23,000 steps in all).
    for name in (*predicted, "rate1"):
        assert rows[name, "schedule with vLLM's step times: % of steps differing"].mape_pct == 0, name
    # The engine's run-to-run noise on the same workload (same session, quiet machine).
    noise = [c for c in checks if c.suite == "vllm-cpu" and "noise" in c.case]
    repeats = {c.case.split(" ")[0] for c in noise}
    assert repeats == {"rate0.75_repeat", "rate1.5_repeat", "session2/rate1_repeat"}
    assert all(c.mape_pct < 8 for c in noise)
    assert any(c.mape_pct > 1 for c in noise)  # the same workload does not replay exactly


def test_cpu_longer_prompts_in_a_second_session(checks: list[Check]) -> None:
    """Session 2 (tests/fixtures/vllm_timing/session2): calibrated on its own rate1 run, a
    workload with prompts up to 1024 tokens (8x the fit run's, contexts it never saw) is
    predicted within 10% on every metric, and its 6,065 steps are scheduled exactly."""
    rows = {(c.case.split(" ")[0], c.metric): c for c in checks if c.suite == "vllm-cpu"}
    metrics = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")
    for name in ("session2/long0.25", "session2/rate1_repeat"):
        for metric in metrics:
            assert rows[name, metric].mape_pct < 10, (name, metric)
        assert rows[name, "schedule with vLLM's step times: % of steps differing"].mape_pct == 0
    assert "longer prompts" in rows["session2/long0.25", "mean_ttft_s"].case
    assert "(fit, in-sample)" in rows["session2/rate1", "mean_ttft_s"].case
    # The decode steps at long contexts cost more than the fit (short contexts only) says:
    # the replayed step times are short on average (docs/fidelity.md §4).
    assert rows["session2/long0.25", "step time (recorded batches)"].bias_pct < -1
    assert rows["session2/long0.25", "number of steps"].measured == 6065


def test_cli_validate_exit_status() -> None:
    runner = CliRunner()
    args = ["validate", "--data-dir", str(DATA), "--recordings", str(RECORDINGS), "--suite", "distserve"]
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "OPT-13B A100 TP1, distserve engine; Vidur operator profile" in ok.output
    assert (
        "known bad: distserve, decode step time: 7 rows at MAPE 121-190% against a goal of 10%" in ok.output
    )
    assert "12 of 56 checks within their goals, 44 known to miss theirs" in ok.output
    bad = runner.invoke(app, [*args, "--threshold", "0.01"])  # an explicit threshold holds for every row
    assert bad.exit_code == 1
    assert "56 of 56 checks over their limit" in bad.output and "known bad:" not in bad.output


def test_cli_validate_unknown_suite_is_a_user_error() -> None:
    res = CliRunner().invoke(app, ["validate", "--data-dir", str(DATA), "--suite", "nope"])
    assert res.exit_code == 2


def test_cli_validate_with_nothing_to_validate_is_an_error(tmp_path) -> None:
    res = CliRunner().invoke(app, ["validate", "--data-dir", str(tmp_path), "--recordings", str(tmp_path)])
    assert res.exit_code == 2
    assert "nothing validated" in res.output


def test_engine_arrivals_for_the_replay_with_vllm_step_times() -> None:
    """A request replays where servesim sees it before the first step that started after
    record.py's driver added it: mid-way through the step before when the two ran back to
    back, or at that step's start when the engine was idle before it."""
    from servesim.validate.cpu import engine_arrivals

    steps = [
        {"t_start": 1.0000, "t_end": 1.0100},
        {"t_start": 1.0103, "t_end": 1.0200},  # back to back (0.3 ms gap)
        {"t_start": 1.0201, "t_end": 1.0300},  # back to back
        {"t_start": 5.0008, "t_end": 5.0100},  # after an idle period
    ]
    cycle = [0.0103, 0.0098, 0.0099 + 0.002, 0.0092]  # gaps capped at 2 ms, as compare_recording does
    reqs = [
        {"arrived_at_s": 0.9993, "added_at_s": 0.99998},  # idle -> step 0's start
        {"arrived_at_s": 1.0050, "added_at_s": 1.0101},  # added after step 0 -> mid step 0
        {"arrived_at_s": 1.0101, "added_at_s": 1.0102},  # arrived in the gap, added before step 1
        # arrived in the gap 20 us before step 2 started, but added only after it started:
        # step 2 could not take it, step 3 (after idle) is the first that could
        {"arrived_at_s": 1.02008, "added_at_s": 1.0203},
        {"arrived_at_s": 6.0000, "added_at_s": 6.0004},  # after the last step -> when added
    ]
    got = engine_arrivals(reqs, steps, cycle)
    assert got == pytest.approx([1.0, 1.00515, 1.00515, 5.0008, 6.0004], abs=1e-12)


def test_cpu_sessions_and_scipy_free_validation(monkeypatch) -> None:
    """The recordings folder is the bundled profile's session; subfolders holding a rate1.json
    are more sessions, fitted here, and skipped with a note where scipy is missing."""
    import servesim.validate.cpu as cpu

    assert [p for p, _ in cpu.cpu_sessions(RECORDINGS)] == ["", "session2/"]

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # as if scipy were not installed
    skipped: list[str] = []
    checks = cpu.validate_vllm_cpu(RECORDINGS, skipped=skipped)
    assert skipped and "session2/" in skipped[0] and "scipy" in skipped[0]
    assert checks and not any(c.case.startswith("session2/") for c in checks)


def test_cpu_recordings_of_your_own_are_fitted_on_their_own_rate1(tmp_path) -> None:
    """A recordings folder other than the bundled one is a session of its own: fitted here on
    its rate1.json, on the cpu.yaml beside it; the same recordings give the same checks as in
    session2/ (where they come from)."""
    import shutil

    from servesim.validate.cpu import validate_vllm_cpu

    for f in ("rate1.json", "long0.25.json"):
        shutil.copy(RECORDINGS / "session2" / f, tmp_path / f)
    shutil.copy(RECORDINGS / "cpu.yaml", tmp_path / "cpu.yaml")
    mine = {(c.case, c.metric): c.mape_pct for c in validate_vllm_cpu(tmp_path)}
    ours = {
        (c.case.removeprefix("session2/"), c.metric): c.mape_pct
        for c in validate_vllm_cpu(RECORDINGS)
        if c.case.startswith("session2/") and "repeat" not in c.case
    }
    assert mine.keys() == ours.keys() and ("rate1 (fit, in-sample)", "mean_tpot_s") in mine
    assert all(mine[k] == pytest.approx(v, abs=1e-9) for k, v in ours.items())
    (tmp_path / "cpu.yaml").write_text("name: x\nbf16_tflops: fast\n")
    res = CliRunner().invoke(app, ["validate", "--recordings", str(tmp_path), "--suite", "vllm-cpu"])
    assert res.exit_code == 2 and "cpu.yaml" in res.output and "bf16_tflops" in res.output
    # A folder of recordings without the one to fit on.
    (tmp_path / "rate1.json").unlink()
    res = CliRunner().invoke(app, ["validate", "--recordings", str(tmp_path), "--suite", "vllm-cpu"])
    assert res.exit_code == 2 and "no rate1.json" in res.output


def test_the_bundled_data_are_the_fixtures_byte_for_byte() -> None:
    """The package ships copies of tests/fixtures/measurements and tests/fixtures/vllm_timing
    (servesim/data/validation.tar.gz) so that an installed servesim validates on its own;
    after a fixture changes, `python tests/fixtures/make_validation_bundle.py` rebuilds it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bundle", FIXTURES / "make_validation_bundle.py")
    assert spec and spec.loader
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)
    from servesim.validate import bundled_data

    with bundled_data() as (data, recordings):
        root = data.parent
        shipped = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert shipped == bundle.members(), "the bundle is stale: run tests/fixtures/make_validation_bundle.py"
    some = {"recordings/rate1.json", "recordings/cpu.yaml", "data/measurements/splitwise/perf_model.csv"}
    assert some <= set(shipped)


def test_validate_runs_on_the_bundled_data_by_default() -> None:
    """No folders given: the bundled subsets, unpacked for the run and removed after it."""
    from servesim.validate import bundled_data

    out, skipped = validate_all(None, None, ("distserve",))
    assert not skipped
    mine, _ = validate_all(DATA, None, ("distserve",))
    assert [(c.case, c.metric, c.mape_pct) for c in out] == [(c.case, c.metric, c.mape_pct) for c in mine]
    with bundled_data() as (data, recordings):
        assert data.is_dir() and recordings.is_dir()
    assert not data.parent.exists()


def test_cross_fit_reports_in_sample_and_held_out_errors_apart() -> None:
    """Fit on one recording, predict the others of its session: a cheap version of
    `servesim validate --cross-fit` (the first session, fitted on its rate1 run only)."""
    pytest.importorskip("scipy")
    import numpy as np

    from servesim.validate import load_bundled_profile
    from servesim.validate.cpu import cross_fit_session

    rows = cross_fit_session(
        RECORDINGS, load_bundled_profile("cpu"), RECORDINGS / "cpu.yaml", fit_files=["rate1.json"]
    )
    assert [c.case for c in rows] == [
        "cross-fit: fit on rate1, in-sample (1 recording)",
        "cross-fit: fit on rate1, held out (7 recordings)",
    ]
    assert [c.n for c in rows] == [6, 42]  # mean and P90 TTFT, TPOT, E2E per recording
    assert all(c.limit_pct is None and "median |error|" in c.note for c in rows)
    held = np.abs(rows[1].errors_pct)
    want = f"median |error| {np.median(held):.1f}%, max {held.max():.1f}% (rate2.5 mean_ttft_s)"
    assert rows[1].note == want
    # The figures docs/fidelity.md states: in-sample up to 7.6% (its own P90 E2E), held out up
    # to 9.5% (rate2.5's mean TTFT), as with the bundled profile fitted on the same run. The
    # fit stops in a flat valley of its weakly constrained parameters, at a point that depends
    # on the machine's BLAS: the held-out max moves by about 0.1 point (9.4% on another
    # machine), so it is held to 0.2 of the stated figure.
    assert rows[0].max_pct == pytest.approx(7.6, abs=0.1)
    assert rows[1].max_pct == pytest.approx(9.5, abs=0.2)
    assert "--cross-fit" in CliRunner().invoke(app, ["validate", "--help"], terminal_width=200).output
