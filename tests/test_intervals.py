"""Calibrated prediction intervals (metrics/intervals.py) and the silicon suite's cross-group
check (validate/silicon_cross.py) they are built from."""

from __future__ import annotations

import math

import pytest

from servesim.metrics import intervals as iv
from servesim.sim import simulate
from servesim.validate import silicon as s
from servesim.validate import silicon_cross as sc


def test_held_out_coverage_of_the_bundled_table_is_near_its_level():
    """Each group's runs against the quantiles of the other groups' held-out residuals
    (computed here from the per-run residuals the table carries, not read from it)."""
    table = iv.load_table()
    cov = iv.held_out_coverage(table["residuals"])
    assert cov["n"] > 900
    for m in ("ttft", "tpot"):
        assert 0.70 <= cov[m] <= 0.90, (m, cov[m])
    assert table["level"] == 0.8


def test_table_quantiles_straddle_zero_and_cover_the_measured_regimes():
    regs = iv.load_table()["regimes"]
    assert "all" in regs and "kernel_grid" in regs
    for name, r in regs.items():
        assert r["ttft"][0] < r["ttft"][1] and r["tpot"][0] < r["tpot"][1], name


def _step(detail: str = "", **kw):
    base = {
        "kind": "kernel_db",
        "gpu": "H200",
        "engine_version": "0.19.0",
        "roofline_operators": [],
        "detail": "measured kernels of vLLM 0.19.0 on H200\n" + detail,
        "warnings": [],
    }
    base.update(kw)
    return base


def test_regime_from_what_the_step_model_reports():
    assert iv.step_regime(_step("  attn_prefill: table ctx fp8 KV heads=64"), "0.19.0") == "kernel_grid"
    assert iv.step_regime(_step(), None) == "kernel_grid"
    assert iv.step_regime(_step(), "0.16.0") == "other_version"
    assert iv.step_regime(_step(roofline_operators=["attn_decode"]), "0.19.0") == "roofline_fallback"
    assert iv.step_regime({"kind": "roofline"}, None) == "roofline"
    h100 = "  attn_prefill: table ctx fp8 KV heads=64 kv=8 head_dim=128 of H100-SXM (...)"
    assert iv.step_regime(_step(h100), "0.19.0") == "other_gpu"
    carried = "  moe: table moe fp8 (roofline-scaled to this shape)"
    assert iv.step_regime(_step(carried), "0.19.0") == "other_shape"
    # the router GEMM and the LM head carried off their grid do not make a run "other shape"
    small = (
        "  gemm_router: fp32 router, cuBLAS as measured on GB200\n"
        "  lm_head: table gemm (n outside 32-65536: roofline-scaled)"
    )
    assert iv.step_regime(_step(small), "0.19.0") == "kernel_grid"


def _scenario(workload):
    return {
        "model": {"name": "meta-llama/Llama-3.1-8B"},
        "hardware": {"gpu": "H100-SXM", "perf_model": "kernels"},
        "workload": workload,
        "slo": {"ttft_s": None, "tpot_s": None},
    }


def test_every_summary_carries_intervals_around_its_predictions():
    r = simulate(
        _scenario(
            {"type": "benchmark", "num_prompts": 24, "max_concurrency": 4, "input_len": 512, "output_len": 32}
        )
    )
    s_ = r.summary
    ints = s_["intervals"]
    assert ints["level"] == 0.8 and ints["regime"] == "kernel_grid"
    for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for stat in ("mean", "p50", "p90", "p99"):
            lo, hi = ints[metric][stat]
            assert lo <= s_["latency"][metric][stat] <= hi, (metric, stat)
            assert lo < hi
    b, bi = s_["benchmark"], s_["benchmark_intervals"]
    for key in ("mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "median_e2el_ms", "output_throughput"):
        lo, hi = bi[key]
        assert lo <= b[key] <= hi, key
    assert "std_ttft_ms" not in bi


def test_an_open_loop_run_is_its_own_regime_and_no_narrower():
    closed = simulate(
        _scenario(
            {"type": "benchmark", "num_prompts": 24, "max_concurrency": 4, "input_len": 512, "output_len": 32}
        )
    ).summary["intervals"]
    opened = simulate(
        _scenario(
            {"type": "benchmark", "num_prompts": 24, "request_rate": 4.0, "input_len": 512, "output_len": 32}
        )
    ).summary["intervals"]
    assert opened["regime"] == "open_loop" and opened["step_regime"] == closed["regime"]
    qc, qo = closed["log_ratio_quantiles"], opened["log_ratio_quantiles"]
    for m in ("ttft", "tpot"):
        assert qo[m][0] <= qc[m][0] and qo[m][1] >= qc[m][1]


def test_console_shows_the_intervals_beside_the_latency_table():
    from rich.console import Console

    from servesim.metrics.console import print_summary

    r = simulate(
        _scenario(
            {"type": "benchmark", "num_prompts": 8, "max_concurrency": 2, "input_len": 256, "output_len": 16}
        )
    )
    con = Console(record=True, width=160)
    print_summary(r, con)
    text = con.export_text()
    assert "80% interval" in text and "held-out" in text


# --------------------------------------------------------------------------- cross-group


def test_cross_group_refits_the_floor_without_the_group(monkeypatch):
    """Two groups: each is predicted at the floor that fits the *other* best, whatever fits
    itself; the grid runs only rows whose predictions move with the floor at every value."""
    rows = [r for r in s.read_silicon() if r["mode"] == "agg"]
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(s.group_label(r), []).append(r)
    pick = [r for g in ("Llama-3.1-70B fp8 h200_sxm", "Qwen3-32B bf16 h100_sxm") for r in by[g][:2]]
    monkeypatch.setattr(sc, "FLOOR_GRID_S", (0.5e-3, 1.2e-3))
    cg = sc.cross_group(pick)
    assert set(cg.floors) == {"Llama-3.1-70B fp8 h200_sxm", "Qwen3-32B bf16 h100_sxm"}
    table = sc.cross_table(cg)
    assert table[-1]["group"] == "all runs" and table[-1]["n"] == 4
    for row in table:
        for m in ("ttft", "tpot"):
            assert math.isfinite(row[f"{m}_held_out"]) and row[f"{m}_in_sample"] > 0
    checks = sc.cross_checks(cg)
    ratio = [c for c in checks if "held-out / in-sample" in c.metric]
    assert len(ratio) == 2 and all(c.limit_pct == pytest.approx(25.0) for c in ratio)
    # rows without a version whose workflow image is known run as that vLLM when held out
    llama = [c for c in cg.held_out if c.group.startswith("Llama")]
    assert all(sc.image_version(c.row) == "0.10.2" for c in llama)
    assert all(c.scenario["engine"]["version"] == "0.10.2" for c in llama)
    assert all(
        "engine" not in c.scenario or c.scenario["engine"].get("version") != "0.10.2"
        for c in cg.in_sample
        if c.group.startswith("Llama")
    )
    res = sc.residuals(cg.held_out)
    assert sum(len(r["ttft"]) for regs in res.values() for r in regs.values()) == 4
    # the shipped floor is restored
    from servesim.perf import kernel_model

    assert kernel_model.EAGER_HOST_S_PER_LAYER == pytest.approx(0.8e-3)


def test_fit_loss_is_the_median_log_error_of_both_metrics():
    from servesim.validate.silicon_results import SiliconCase

    def case(pt, pp):
        c = SiliconCase({"silicon_ttft_ms": "100", "silicon_tpot_ms": "10"}, {}, group="g")
        c.predicted_ttft_ms, c.predicted_tpot_ms = pt, pp
        return c

    loss = sc.fit_loss([case(110, 10), case(100, 10), case(100, 12)])
    assert loss == pytest.approx(0.0 + 0.0)
    assert sc.fit_loss([case(200, 20)]) == pytest.approx(2 * math.log(2))


# --------------------------------------------------------------------------- SLO at the interval's high end


def test_a_plan_at_confidence_picks_a_deployment_whose_upper_bound_meets_the_slo():
    from servesim.config import scenario_from_dict
    from servesim.planner.search import run_plan
    from servesim.planner.space import plan_config

    small = {
        "model": {"name": "Llama-3.1-8B"},
        "engine": {"max_model_len": 4096},
        "workload": {
            "type": "synthetic",
            "num_requests": 60,
            "arrival": {"rate": 6.0},
            "prompt_len": {"kind": "constant", "value": 512},
            "output_len": {"kind": "constant", "value": 64},
        },
        "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
        "run": {"record_steps": False},
    }
    plan = plan_config(
        {"gpus": ["H100-SXM", "L40S"], "max_total_gpus": 2, "tensor_parallel_sizes": [1, 2]}, "t"
    )
    plain = run_plan(scenario_from_dict(small), plan, backend="inprocess")
    sure = run_plan(
        scenario_from_dict({**small, "slo": {**small["slo"], "confidence": 0.8}}), plan, backend="inprocess"
    )
    met_plain = {e.candidate.label() for e in plain.ranked()}
    met_sure = {e.candidate.label() for e in sure.ranked()}
    assert met_sure and met_sure <= met_plain
    best = sure.ranked()[0]
    up = iv.upper_factors(best.summary)
    assert all(f > 1.0 for f in up.values())
    # {all: 0.9} over two limits: each metric's P95 at its interval's high end within its limit
    lat = best.summary["latency"]
    assert lat["ttft_s"]["p95"] * up["ttft_s"] <= 1.0 and lat["tpot_s"]["p95"] * up["tpot_s"] <= 0.05


def test_confidence_other_than_the_calibrated_level_is_refused():
    from servesim.config import SloConfig

    with pytest.raises(ValueError, match="0.8"):
        SloConfig(ttft_s=1.0, confidence=0.95)


def test_validate_offers_the_cross_group_check():
    from typer.testing import CliRunner

    from servesim.cli import app

    res = CliRunner().invoke(app, ["validate", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--cross-group" in res.output


def test_capacity_at_confidence_is_no_higher_and_holds_at_the_high_end():
    from servesim.config import scenario_from_dict
    from servesim.planner.capacity import find_capacity

    def sc(**slo):
        return scenario_from_dict(
            {
                "workload": {
                    "type": "synthetic",
                    "num_requests": 400,
                    "arrival": {"rate": 2.0},
                    "prompt_len": {"value": 512},
                    "output_len": {"value": 1},
                },
                "engine": {"max_num_seqs": 1, "frontend": {"enabled": False}},
                "slo": {"ttft_s": 0.06, "attainment": {"ttft_s": 0.9}, **slo},
            }
        )  # about 2x one prefill

    plain = find_capacity(sc(), precision=0.1)
    sure = find_capacity(sc(confidence=0.8), precision=0.1)
    assert sure.lo is not None and plain.lo is not None
    assert sure.lo.rate_rps < plain.lo.rate_rps  # each TTFT held at its high end: less room to queue
    held = [c for c in sure.lo.verdict.checks if c.metric == "ttft_s"][0]
    assert held.meets and held.value >= 0.9


def test_the_plan_short_form_takes_a_confidence():
    from servesim.planner.space import plan_from_options

    base, _ = plan_from_options(
        "Llama-3.1-8B", ["H100-SXM"], 1, rate=1.0, isl=512, osl=64, ttft_s=1.0, confidence=0.8
    )
    assert base.slo.confidence == 0.8
    base, _ = plan_from_options("Llama-3.1-8B", ["H100-SXM"], 1, rate=1.0, isl=512, osl=64, ttft_s=1.0)
    assert base.slo.confidence is None
