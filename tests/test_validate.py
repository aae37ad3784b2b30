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
    """Calibrated on rate1.json, servesim predicts the other recordings' mean and P90 TTFT,
    TPOT and E2E with the errors docs/fidelity.md reports (the 10% target is met for rate3
    and for TPOT/P90 E2E of rate2, not for TTFT near saturation, nor for rate2_repeat,
    recorded while the shared machine ran ~16% faster than during the calibration run)."""
    rows = {
        (c.case.split(" ")[0], c.metric): c for c in checks if c.suite == "vllm-cpu" and "noise" not in c.case
    }
    for metric in ("mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s", "p90_ttft_s"):
        assert rows["rate3", metric].mape_pct < 6, metric
    assert rows["rate3", "mean_ttft_s"].mape_pct < 15
    for metric in ("mean_tpot_s", "p90_tpot_s", "p90_e2e_s"):
        assert rows["rate2", metric].mape_pct < 10, metric
    assert rows["rate2", "mean_e2e_s"].mape_pct < 18
    # Errors follow the replayed step-time bias: servesim is slower than the faster runs.
    for name in ("rate2", "rate2_repeat"):
        assert rows[name, "step time (recorded batches)"].bias_pct > 5
        assert rows[name, "mean_e2e_s"].bias_pct > 0
    # Heavier load -> longer TTFT, measured and predicted alike (the direction of the effect).
    for src in ("measured", "predicted"):
        ttft = [getattr(rows[f"rate{r}", "mean_ttft_s"], src) for r in (1, 2, 3)]
        assert ttft == sorted(ttft), src
    # With vLLM's own step times servesim's scheduler makes the same steps (>= 94%).
    for name in ("rate1", "rate2", "rate3", "rate2_repeat"):
        assert rows[name, "schedule with vLLM's step times: % of steps differing"].mape_pct < 6


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
