"""`servesim validate` on the bundled measurement copies and CPU recordings: every row
within its stated limit, and the command's exit status follows the threshold."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.validate import Check, validate_all

FIXTURES = Path(__file__).parent / "fixtures"
DATA = FIXTURES / "measurements"
RECORDINGS = FIXTURES / "vllm_timing"


@pytest.fixture(scope="module")
def checks() -> list[Check]:
    out, skipped = validate_all(DATA, RECORDINGS)
    assert not skipped
    return out


def test_every_check_is_within_its_stated_limit(checks: list[Check]) -> None:
    failed = [
        (c.suite, c.case, c.metric, round(c.mape_pct, 1), c.limit_pct) for c in checks if not c.passed()
    ]
    assert not failed


def test_suites_and_cases_present(checks: list[Check]) -> None:
    suites = {c.suite for c in checks}
    assert suites == {"operators", "splitwise", "distserve", "vllm-cpu"}
    cpu = [c for c in checks if c.suite == "vllm-cpu" and "predicted" in c.case]
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
    (docs/fidelity.md §4): mean and P90 TTFT, TPOT and E2E within 6% at every load except
    rate1.25's P90 TPOT (-10.1%: 80 requests, so P90 rests on a sparse tail of ~8); the
    session was screened for run-to-run machine speed, so no recording's replayed step
    times are off by more than 2%."""
    rows = {
        (c.case.split(" ")[0], c.metric): c for c in checks if c.suite == "vllm-cpu" and "noise" not in c.case
    }
    metrics = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")
    predicted = ("rate0.5", "rate0.75", "rate0.75_repeat", "rate1.25", "rate1.5", "rate1.5_repeat", "rate2.5")
    for name in predicted:
        for metric in metrics:
            bound = 10.5 if (name, metric) == ("rate1.25", "p90_tpot_s") else 6
            assert rows[name, metric].mape_pct < bound, (name, metric)
    for name in ("rate0.5", "rate0.75", "rate0.75_repeat"):  # not saturated
        assert "heavy" not in rows[name, "mean_ttft_s"].case
    for name in ("rate1.25", "rate1.5", "rate1.5_repeat", "rate2.5"):  # busy >= 80%
        assert "heavy" in rows[name, "mean_ttft_s"].case
    # Same machine speed as the calibration run: the replayed step times are unbiased.
    for name in (*predicted, "rate1"):
        assert abs(rows[name, "step time (recorded batches)"].bias_pct) < 2, name
    # Heavier load -> longer TPOT and E2E, measured and predicted alike.
    for src in ("measured", "predicted"):
        for metric in ("mean_tpot_s", "mean_e2e_s"):
            v = [getattr(rows[f"rate{r}", metric], src) for r in ("0.5", "0.75", "1", "1.25", "1.5", "2.5")]
            assert v == sorted(v), (src, metric)
    # Step by step: with vLLM's own step times servesim's scheduler makes the same steps.
    for name in (*predicted, "rate1"):
        assert rows[name, "schedule with vLLM's step times: % of steps differing"].mape_pct < 1
    # The engine's run-to-run noise on the same workload (same session, quiet machine).
    noise = [c for c in checks if c.suite == "vllm-cpu" and "noise" in c.case]
    assert {c.case.split(" ")[0] for c in noise} == {"rate0.75_repeat", "rate1.5_repeat"}
    assert all(c.mape_pct < 4 for c in noise)


def test_cli_validate_exit_status() -> None:
    runner = CliRunner()
    args = ["validate", "--data-dir", str(DATA), "--recordings", str(RECORDINGS), "--suite", "distserve"]
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "DistServe" in ok.output or "OPT-13B" in ok.output
    bad = runner.invoke(app, [*args, "--threshold", "0.01"])
    assert bad.exit_code == 1
    assert "over their limit" in bad.output


def test_cli_validate_unknown_suite_is_a_user_error() -> None:
    res = CliRunner().invoke(app, ["validate", "--data-dir", str(DATA), "--suite", "nope"])
    assert res.exit_code == 2


def test_cli_validate_with_nothing_to_validate_is_an_error(tmp_path) -> None:
    res = CliRunner().invoke(app, ["validate", "--data-dir", str(tmp_path), "--recordings", str(tmp_path)])
    assert res.exit_code == 2
    assert "nothing validated" in res.output
