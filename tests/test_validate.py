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
    (docs/fidelity.md §4): within 10% (mean and P90 TTFT, TPOT, E2E) at light and moderate
    load and for rate1.5 (twice) and rate2.5; rate1.25, recorded while the machine ran ~5%
    slower (its replayed step times are 5% below the measured ones), misses TPOT and mean
    E2E by 13-18%: near saturation queueing amplifies a service-time error."""
    rows = {
        (c.case.split(" ")[0], c.metric): c for c in checks if c.suite == "vllm-cpu" and "noise" not in c.case
    }
    metrics = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")
    within_10 = ("rate0.5", "rate0.75", "rate0.75_repeat", "rate1.5", "rate1.5_repeat", "rate2.5")
    for name in within_10:
        for metric in metrics:
            assert rows[name, metric].mape_pct < 10, (name, metric)
    for name in ("rate0.5", "rate0.75", "rate0.75_repeat"):  # not saturated
        assert "heavy" not in rows[name, "mean_ttft_s"].case
    for name in ("rate1.25", "rate1.5", "rate2.5"):  # busy >= 80%
        assert "heavy" in rows[name, "mean_ttft_s"].case
    # rate1.25: slower machine -> servesim under-predicts, amplified by the load.
    assert rows["rate1.25", "step time (recorded batches)"].bias_pct < -3
    for metric in ("mean_tpot_s", "mean_e2e_s"):
        assert rows["rate1.25", metric].bias_pct < -10
    # Heavier load -> longer TPOT and E2E, measured and predicted alike.
    for src in ("measured", "predicted"):
        for metric in ("mean_tpot_s", "mean_e2e_s"):
            v = [getattr(rows[f"rate{r}", metric], src) for r in ("0.5", "0.75", "1", "1.25", "1.5", "2.5")]
            assert v == sorted(v), (src, metric)
    # Step by step: with vLLM's own step times servesim's scheduler makes the same steps.
    for name in (*within_10, "rate1", "rate1.25"):
        assert rows[name, "schedule with vLLM's step times: % of steps differing"].mape_pct < 1
    # The engine's run-to-run noise on the same workload (same session, quiet machine).
    noise = [c for c in checks if c.suite == "vllm-cpu" and "noise" in c.case]
    assert {c.case.split(" ")[0] for c in noise} == {"rate0.75_repeat", "rate1.5_repeat"}
    assert all(c.mape_pct < 8 for c in noise)


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
