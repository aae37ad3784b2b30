"""SLO targets (servesim.planner.targets): exact verdicts on hand-made records, the same
verdict from records and from the summary of a real run, and the config's checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim import simulate
from servesim.config import Scenario, SloConfig, scenario_from_dict
from servesim.errors import ConfigError
from servesim.metrics.records import (
    ItlSamples,
    ReplicaTotals,
    RequestRecords,
    RequestStatus,
    Result,
    StepSeries,
)
from servesim.metrics.summary import summarize
from servesim.planner.targets import (
    DEFAULT_ATTAINMENT,
    attainment_targets,
    check_result,
    check_summary,
    has_slo,
)


def _result(ttft: list[float], tpot: list[float], unfinished: int = 0, out_tokens: int = 11) -> Result:
    """Ten-ish requests arriving at 0 with the given TTFTs and TPOTs; ``unfinished`` more never finish."""
    n = len(ttft) + unfinished
    rec = RequestRecords.empty(n)
    rec.arrival_s[:] = 0.0
    k = len(ttft)
    rec.first_scheduled_s[:k] = 0.0
    rec.first_token_s[:k] = ttft
    rec.num_output_tokens[:k] = out_tokens
    rec.finished_s[:k] = np.asarray(ttft) + np.asarray(tpot) * (out_tokens - 1)
    rec.status[:k] = RequestStatus.FINISHED
    return Result(
        scenario=Scenario(),
        records=rec,
        steps=StepSeries(),
        itl=ItlSamples(gap_s=[0.01], count=[1]),
        replicas=[ReplicaTotals()],
        end_s=10.0,
    )


TEN_TTFT = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.5, 3.0]  # 8 of 10 within 1 s
TEN_TPOT = [0.01] * 9 + [0.2]  # 9 of 10 within 0.1 s; the one over is also a TTFT miss


def test_attainment_per_metric_and_jointly() -> None:
    slo = SloConfig(ttft_s=1.0, tpot_s=0.1, attainment={"ttft_s": 0.8, "tpot_s": 0.95, "all": 0.8})
    v = check_result(slo, _result(TEN_TTFT, TEN_TPOT))
    by = {c.metric: c for c in v.checks}
    assert (by["ttft_s"].num_met, by["ttft_s"].value, by["ttft_s"].meets) == (8, 0.8, True)
    assert by["ttft_s"].margin == pytest.approx(0.0)
    assert (by["tpot_s"].num_met, by["tpot_s"].meets) == (9, False)
    assert by["tpot_s"].margin == pytest.approx((0.9 - 0.95) / 0.95)
    assert (by["all"].num_met, by["all"].meets) == (8, True)  # the TPOT miss is a TTFT miss too
    assert not v.meets and v.margin == pytest.approx(by["tpot_s"].margin)
    assert "tpot_s attainment 0.9 < 0.95" in v.describe()


def test_unfinished_requests_miss_every_target() -> None:
    slo = SloConfig(ttft_s=1.0, attainment={"ttft_s": 0.7})
    v = check_result(slo, _result(TEN_TTFT, TEN_TPOT, unfinished=2))
    assert (v.checks[0].num_met, v.checks[0].num_total, v.num_finished) == (8, 12, 10)
    assert v.checks[0].value == pytest.approx(8 / 12) and not v.meets


def test_percentile_is_the_inverted_cdf_with_unfinished_infinitely_late() -> None:
    slo = SloConfig(
        percentiles=[{"metric": "ttft_s", "p": 80, "max_s": 0.8}, {"metric": "ttft_s", "p": 90, "max_s": 2.0}]
    )
    v = check_result(slo, _result(TEN_TTFT, TEN_TPOT))
    p80, p90 = v.checks
    assert (p80.value, p80.meets, p80.margin) == (0.8, True, 0.0)  # 8th of 10 sorted
    assert (p90.value, p90.meets) == (1.5, True)
    assert p90.margin == pytest.approx((2.0 - 1.5) / 2.0)
    # Two unfinished of 12: P90 needs 10.8 -> the 11th value, which is infinite.
    v = check_result(slo, _result(TEN_TTFT, TEN_TPOT, unfinished=2))
    assert math.isinf(v.checks[1].value) and v.checks[1].margin == -1.0 and not v.meets
    assert v.checks[1].to_dict()["value"] is None  # JSON has no infinity


def test_limits_without_a_target_default_to_ninety_percent_jointly() -> None:
    slo = SloConfig(ttft_s=1.0, tpot_s=0.1)
    assert attainment_targets(slo) == {"all": DEFAULT_ATTAINMENT}
    v = check_result(slo, _result(TEN_TTFT, TEN_TPOT))
    assert [c.metric for c in v.checks] == ["all"] and v.checks[0].value == 0.8 and not v.meets
    assert not has_slo(SloConfig()) and has_slo(SloConfig(percentiles=[{"metric": "e2e_s", "max_s": 9}]))
    with pytest.raises(ValueError, match="no SLO target"):
        check_result(SloConfig(), _result(TEN_TTFT, TEN_TPOT))


def test_config_refuses_targets_it_cannot_judge() -> None:
    with pytest.raises(ConfigError, match="attainment.tpot_s: needs the limit slo.tpot_s"):
        scenario_from_dict({"slo": {"ttft_s": 1, "attainment": {"tpot_s": 0.9}}})
    with pytest.raises(ConfigError, match=r"expected a fraction in \(0, 1\]"):
        scenario_from_dict({"slo": {"ttft_s": 1, "attainment": {"ttft_s": 1.5}}})
    with pytest.raises(ConfigError, match="attainment.all: no limit is set"):
        scenario_from_dict({"slo": {"attainment": {"all": 0.9}}})
    with pytest.raises(ConfigError, match="slo.percentiles.0.metric"):
        scenario_from_dict({"slo": {"percentiles": [{"metric": "ttft", "max_s": 1}]}})


SMALL = {
    "model": {"name": "Llama-3.1-8B"},
    "workload": {
        "type": "synthetic",
        "num_requests": 300,
        "arrival": {"rate": 40.0},
        "prompt_len": {"kind": "uniform", "low": 64, "high": 2048},
        "output_len": {"kind": "uniform", "low": 1, "high": 200},
    },
    "slo": {
        "ttft_s": 0.25,
        "tpot_s": 0.03,
        "attainment": {"ttft_s": 0.5, "tpot_s": 0.5, "all": 0.5},
        "percentiles": [
            {"metric": m, "p": p, "max_s": 0.2}
            for m in ("ttft_s", "tpot_s", "itl_s", "e2e_s")
            for p in (50, 90, 99)
        ],
    },
}


@pytest.fixture(scope="module")
def small_run() -> Result:
    return simulate(scenario_from_dict(SMALL))


def test_the_summary_gives_the_records_verdict_on_a_real_run(small_run: Result) -> None:
    result = small_run
    slo = result.scenario.slo
    exact, stored = check_result(slo, result), check_summary(slo, summarize(result))
    assert result.summary["counts"]["num_finished"] == 300
    for a, b in zip(exact.checks, stored.checks):
        assert (a.metric, a.kind, a.p, a.meets) == (b.metric, b.kind, b.p, b.meets)
        assert a.value == pytest.approx(b.value, rel=1e-6) and b.exact
    assert 0 < sum(c.meets for c in exact.checks) < len(exact.checks)  # the limits bite both ways


def test_a_summary_percentile_it_does_not_store_is_an_upper_bound(small_run: Result) -> None:
    result = small_run
    slo = SloConfig(percentiles=[{"metric": "ttft_s", "p": p, "max_s": 0.2} for p in (75, 93, 99.5)])
    exact, stored = check_result(slo, result), check_summary(slo, result.summary)
    for a, b in zip(exact.checks, stored.checks):
        assert not b.exact and b.value >= a.value  # the next stored percentile up
        assert a.meets or not b.meets  # so it never reports "meets" wrongly
    with pytest.raises(ValueError, match="SLO limits"):
        check_summary(SloConfig(ttft_s=9.0), result.summary)


def test_overriding_one_objective_of_the_default_slos_keeps_the_others() -> None:
    from servesim.config import load_scenario

    slo = load_scenario(None, ["slo.ttft_s=1", "slo.attainment.ttft_s=0.95"]).slo
    assert (slo.ttft_s, slo.tpot_s, slo.attainment) == (1.0, 0.1, {"ttft_s": 0.95})
