"""``servesim reproduce``: every paper of the literature is listed with its published figure
and setup, and the quick runs whose figures land in the paper's range are held to that range
(the paper's bounds, never servesim's earlier output)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.papers import PAPERS, get_paper

#: The systems of the literature the project reproduces, by their papers.
SYSTEMS = (
    "Sarathi-Serve",
    "POLCA",
    "Block",
    "MicroServing",
    "Orca",
    "vLLM",
    "vLLM-offload",
    "DistServe",
    "Splitwise",
    "Llumnix",
    "HeteroScale",
    "APEX",
    "Dynasor",
    "BurstGPT",
    "MC-SF",
    "VTC",
    "Speculative decoding",
)

#: The papers docs/policies.md cites for the policies it models, each by the words it cites
#: it with, and the paper's key here.
POLICY_PAGE_PAPERS = {
    "MC-SF": "mc-sf",
    "BurstGPT": "burstgpt",
    "Sarathi-Serve": "sarathi-serve",
    "Orca: A Distributed Serving System": "orca",
    "Kwon et al., SOSP'23": "vllm",
    "Llumnix": "llumnix-priority",
    "Fairness in Serving Large Language Models": "vtc",
    "Leviathan et al. 2023": "speculative-decoding",
}


def test_list_names_every_paper():
    res = CliRunner().invoke(app, ["reproduce", "--list"], env={"COLUMNS": "400"})  # rows unwrapped
    assert res.exit_code == 0, res.output
    for name in SYSTEMS:
        assert name in res.output
    for key in PAPERS:
        assert f" {key} " in res.output, key
    assert {p.name for p in PAPERS.values()} == set(SYSTEMS)
    # Llumnix's three claims: tail latency, priorities, cost.
    assert {"llumnix", "llumnix-priority", "llumnix-cost"} <= set(PAPERS)


def test_list_names_every_paper_the_policy_page_cites():
    text = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text(encoding="utf-8")
    for words, key in POLICY_PAGE_PAPERS.items():
        assert words in " ".join(text.split()), words
        assert key in PAPERS, key


def test_every_paper_states_its_setup_and_figures():
    for p in PAPERS.values():
        assert set(p.setup) == {"model", "gpus", "workload", "slo", "baseline", "metric"}, p.key
        assert p.citation and p.headline
        for f in p.figures:
            assert f.lo < f.hi and f.published
        if p.figures == ():
            assert not p.runnable and p.note  # a characterization: says why there is nothing to run
        if not p.runnable:
            assert p.note, p.key


def test_names_resolve_and_unknown_ones_are_refused():
    assert get_paper("Sarathi-Serve") is get_paper("sarathi-serve") is PAPERS["sarathi-serve"]
    assert get_paper("MC_SF") is PAPERS["mc-sf"]
    res = CliRunner().invoke(app, ["reproduce", "no-such-paper"])
    assert res.exit_code == 2 and "unknown paper" in res.output
    res = CliRunner().invoke(app, ["reproduce", "burstgpt"])
    assert res.exit_code == 2 and "published figure and setup only" in res.output


#: docs/papers.md: its Results table quotes each run's figures.
PAPERS_MD = Path(__file__).resolve().parents[1] / "docs" / "papers.md"


def doc_cell(name: str) -> str:
    """The "servesim quick / full" cell of the paper's row in docs/papers.md's Results table
    (the row that names ``servesim reproduce NAME --quick``)."""
    for line in PAPERS_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and f"`servesim reproduce {name} --quick`" in line:
            return line.split(" | ")[3]
    raise AssertionError(f"docs/papers.md has no Results row for servesim reproduce {name} --quick")


def quoted_forms(value: float, unit: str) -> list[str]:
    """How the Results table writes a figure: a ratio to 2 or 1 decimals ("2.75x", "31.9x"), a percentage or
    points to 1 ("37.7%", "+0.0%", "-22.6"), a fraction to 3 or 4 ("0.998")."""
    if unit == "x":
        return [f"{value:.2f}x", f"{value:.1f}x"]
    if unit == "%":
        return [f"{value:.1f}%", f"{value:+.1f}%"]
    if unit == "":
        return [f"{value:.3f}", f"{value:.4f}"]
    return [f"{value:.1f}", f"{value:+.1f}"]


def assert_docs_quote(name: str, figures: dict) -> None:
    """Every figure this run produced is written in the paper's Results row (docs/papers.md
    quotes the code as it is: a run that moves a figure fails here until the row says so)."""
    cell = doc_cell(name)
    units = {f.key: f.unit for f in get_paper(name).figures}
    for key, f in figures.items():
        if f["servesim"] is None:
            continue
        forms = quoted_forms(f["servesim"], units[key])
        assert any(re.search(rf"(?<![\d.]){re.escape(q)}(?!\d)", cell) for q in forms), (
            f"docs/papers.md, {name}: {key} = {forms[0]} is not in the row's figures: {cell!r}"
        )


def test_quoted_forms_match_the_rows_writing():
    cell = "Mistral-7B 2.75x / 2.69x; +0.0% / +1.1%; 0.998 / 0.999; -22.6 / -25.6 points; 37.7%"
    for value, unit in ((2.7499, "x"), (0.01, "%"), (0.9979, ""), (-22.61, " pts"), (37.71, "%")):
        assert any(q in cell for q in quoted_forms(value, unit)), (value, unit)
    assert not re.search(rf"(?<![\d.]){re.escape('2.75x')}(?!\d)", "12.75x")


def _quick(name: str, tmp_path) -> dict:  # noqa: ANN001
    res = CliRunner().invoke(app, ["reproduce", name, "--quick", "--strict", "--output", str(tmp_path)])
    assert res.exit_code in (0, 1), res.output
    out = json.loads((tmp_path / "reproduce.json").read_text())
    assert (tmp_path / "rows.csv").exists() and (tmp_path / "figures.csv").exists()
    assert res.exit_code == (0 if all(f["in_range"] in (True, None) for f in out["figures"]) else 1)
    figs = {f["figure"]: f for f in out["figures"]}
    assert_docs_quote(name, figs)
    return figs


def test_vllm_against_orca_lands_in_the_papers_ranges(tmp_path):
    """vLLM, Sec. 6.2 and Fig. 12: 1.7-2.7x the rate of Orca (Oracle), 2.7-8x Orca (Max), in
    the paper's setup (Table 1's KV cache, the artifact's loop and buddy-allocated Orca)."""
    figs = _quick("vllm", tmp_path)
    assert 1.7 <= figs["vs_orca_oracle"]["servesim"] <= 2.7
    assert 2.7 <= figs["vs_orca_max"]["servesim"] <= 8.0


@pytest.mark.slow
def test_vllm_against_orca_on_opt_66b_lands_in_the_papers_ranges():
    """The full run's OPT-66B on four A100-40GB (Table 1: 9.7K KV slots, four Orca (Max)
    reservations of 128 blocks), 3,000 requests a run (about 75 s of CPU)."""
    from servesim.papers import vllm

    cap = vllm.capacities("OPT-66B", False, [])
    assert 1.7 <= cap["vllm"] / cap["orca_oracle"] <= 2.7
    assert 2.7 <= cap["vllm"] / cap["orca_max"] <= 8.0


def test_polca_holds_the_slo_with_30_percent_more_servers(tmp_path):
    """POLCA: 30% more servers under the same power budget, SLO attainment ~0.999."""
    figs = _quick("polca", tmp_path)
    assert 0.995 <= figs["slo_attainment"]["servesim"] <= 1.0


def test_dynasor_early_exit_serves_fewer_tokens_for_the_same_answers(tmp_path):
    """Dynasor: up to 50% of the reasoning compute saved. servesim's figure is its workload's
    token accounting, set by the answer-settling model's input (docs/papers.md), so the paper's
    range is not what this holds: the mechanism is. The engine serves exactly the early-exit
    tokens the accounting counts (reasoning segments plus probes), fewer than the same samples
    reasoning to their full length, and every question finishes."""
    figs = _quick("dynasor", tmp_path)
    (row,) = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
    assert row["num_output_tokens"] == row["reasoning_tokens"] + row["probe_tokens"]
    assert row["num_output_tokens"] < row["fixed_length_tokens"]
    assert row["tasks_finished"] == 12
    assert figs["saving"]["servesim"] == pytest.approx(
        100 * (1 - row["num_output_tokens"] / row["fixed_length_tokens"])
    )


def test_apex_energy_optimal_plan_saves_energy_against_the_latency_optimal(tmp_path):
    """APEX: the energy-optimal plan uses up to 45% less energy than the latency-optimal (+-25%)."""
    figs = _quick("apex", tmp_path)
    assert 45 / 1.25 <= figs["energy_cut"]["servesim"] <= 45 * 1.25


@pytest.mark.slow
def test_splitwise_against_baseline_h100_in_the_iso_power_cluster(tmp_path):
    """Splitwise (+-25% of the paper's figures), read as the paper's figures were made: with
    its simulator's semantics (docs/papers.md). Splitwise-AA's "1.4x at 20% lower cost" lands
    in range (0.02x above its floor); Splitwise-HA's "2.35x at the same cost and power" falls
    below it and is reported, as are servesim's own readings of both (docs/papers.md says why
    each differs). What holds of Splitwise-HA under both readings is the paper's direction: it
    serves more than Baseline-H100 and more than Splitwise-AA (its H100 prompt machines)."""
    figs = _quick("splitwise", tmp_path)
    assert 1.4 / 1.25 <= figs["iso_cost_throughput"]["servesim"] <= 1.4 * 1.25
    for suffix in ("", "_servesim"):
        ha, aa = (
            figs["iso_power_throughput" + suffix]["servesim"],
            figs["iso_cost_throughput" + suffix]["servesim"],
        )
        assert ha > aa > 1.0, suffix


@pytest.mark.slow
def test_mc_sf_full_run_cuts_mean_latency_as_the_paper(tmp_path):
    """MC-SF: 31% lower mean latency than memory-aware FCFS (+-25%). The quick run (200
    requests) ends before the queue builds (10.3%); the full run's 1,000 requests are held to
    the range (docs/papers.md: at 2 req/s this setup is past its capacity)."""
    res = CliRunner().invoke(app, ["reproduce", "mc-sf", "--strict", "--output", str(tmp_path)])
    assert res.exit_code in (0, 1), res.output
    figs = {f["figure"]: f for f in json.loads((tmp_path / "reproduce.json").read_text())["figures"]}
    assert 31 / 1.25 <= figs["mean_latency_cut"]["servesim"] <= 31 * 1.25
    assert_docs_quote("mc-sf", figs)  # the full run's figure, quoted beside the quick one


@pytest.mark.slow
def test_sarathi_serve_capacity_gain_on_mistral_7b(tmp_path):
    """Sarathi-Serve, Fig. 10: 2.6x vLLM's capacity for Mistral-7B on one A100 (+-25%)."""
    figs = _quick("sarathi-serve", tmp_path)
    assert 2.6 / 1.25 <= figs["capacity"]["servesim"] <= 2.6 * 1.25


def test_falcon_180b_is_its_published_architecture():
    """Falcon-180B as the full Sarathi-Serve run reads it (tiiuae/falcon-180B's config.json in
    servesim's keys): 80 layers of QKV (232 + 2 x 8 heads of 64), the output projection and the
    ungated 4 x 14848 MLP, plus the tied 65024-token embedding, is 178,552,307,712 weights
    before the norms; a token's KV is 80 layers x K and V x 8 heads x 64 x 2 bytes, and under
    TP4 x PP2 one GPU holds 40 layers of 2 heads of it."""
    from servesim.catalog.hf_config import from_hf_config
    from servesim.papers.sarathi import FALCON_180B

    m = from_hf_config(FALCON_180B, "tiiuae/falcon-180B")
    h, layers = 14848, 80
    weights = layers * (h * (232 + 2 * 8) * 64 + h * h + 2 * h * 4 * h) + 65024 * h
    assert weights == 178_552_307_712
    assert weights <= m.num_params() <= weights + layers * 4 * h + 2 * h  # layer norms' weights and biases
    assert m.kv_bytes_per_token() == layers * 2 * 8 * 64 * 2
    assert m.kv_bytes_per_token(tp=4, pp=2) == 40 * 2 * 2 * 64 * 2


def test_distserve_slo_scale_is_the_90_percent_crossing():
    """DistServe's SLO scale (the artifact's _plot.py, draw_slo_scale_plot): the smallest factor
    on both limits at which 90% of the requests meet them. Ten requests against (0.25 s, 0.1 s):
    the ninth smallest need, where each request needs max(TTFT / 0.25, TPOT / 0.1)."""
    import numpy as np

    from servesim.papers.distserve import scale_at_attainment

    ttft = np.array([0.05, 0.1, 0.125, 0.2, 0.25, 0.3, 0.5, 0.05, 1.0, 0.05])
    tpot = np.array([0.01, 0.02, 0.05, 0.01, 0.02, 0.03, 0.01, 0.3, 0.02, float("nan")])
    # needs: 0.2, 0.4, 0.5, 0.8, 1.0, 1.2, 2.0, 3.0, 4.0, 0.2 -> sorted, the 9th is 3.0
    assert scale_at_attainment(ttft, tpot, (0.25, 0.1)) == pytest.approx(3.0)
    assert scale_at_attainment(ttft, tpot, (0.25, 0.1), target=0.5) == pytest.approx(0.8)
    assert scale_at_attainment(ttft, tpot, (0.25, 0.1), target=1.0) == pytest.approx(4.0)


@pytest.mark.slow
def test_block_routes_no_worse_than_the_artifacts_heuristics(tmp_path):
    """Block, out of the paper's range (docs/papers.md: at the artifact's 3 s P99 TTFT the knee
    moves about 1%, as in the artifact's own summaries), holds the paper's direction: Block's
    predicted-latency routing (Block*, oracle lengths) has at least the capacity of each of the
    artifact's heuristics, above round robin's and random's, and at every load both probed a
    P99 TTFT no higher than the best heuristic's (about 170 s of CPU: 10,000 requests a probe)."""
    figs = _quick("block", tmp_path)
    assert figs["capacity_gain"]["servesim"] >= 0
    rows = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
    cap = {r["router"]: r["capacity_qps"] for r in rows if r.get("capacity_qps") is not None}
    assert cap["predicted_latency"] >= max(cap["llumnix"], cap["infaas"])
    assert cap["predicted_latency"] > max(cap["round_robin"], cap["random"])
    best = max(("llumnix", "infaas"), key=cap.__getitem__)
    p99 = {(r["router"], r["qps"]): r["p99_ttft_s"] for r in rows if r.get("p99_ttft_s") is not None}
    shared = [q for (router, q) in p99 if router == best and ("predicted_latency", q) in p99]
    assert shared
    for q in shared:
        assert p99["predicted_latency", q] <= p99[best, q], q


@pytest.mark.slow
def test_llumnix_cost_migration_buys_latency_while_drains_hold_little(tmp_path):
    """Llumnix's auto-scaling, out of the paper's range (docs/papers.md), for the reason the run
    measures: at the same scaling thresholds migration lowers the P99 TTFT below INFaaS++'s (the
    paper's mechanism), while INFaaS++'s stopped replicas spend too little of its instance-time
    draining for migration's scale-in to save the paper's 36% by itself (the bound the run
    computes stays below the range's floor). 12 autoscaled runs, about 30 s of CPU."""
    figs = _quick("llumnix-cost", tmp_path)
    assert figs["cost_saving"]["servesim"] >= 0
    rows = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
    base = {r["cv"]: r for r in rows if r["system"] == "infaas++"}
    same = {r["cv"]: r for r in rows if r["system"] == "llumnix" and r["scale_out_below"] == 10}
    assert set(base) == set(same) == {4.0, 8.0}
    for cv in base:
        assert same[cv]["ttft_p99_s"] < base[cv]["ttft_p99_s"], cv
        assert 100 * base[cv]["drain_share"] < 36 / 1.25, cv


def test_orca_lands_in_the_papers_range(tmp_path):
    """Orca, Sec. 6.3: 36.9x FasterTransformer's throughput at equal latency (+-25%), GPT-3 175B's
    shape on 16 A100-40GB at TP8 x PP2, Orca's batches two in flight (about 110 s of CPU)."""
    figs = _quick("orca", tmp_path)
    assert 36.9 / 1.25 <= figs["throughput"]["servesim"] <= 36.9 * 1.25


@pytest.mark.slow
def test_llumnix_migration_cuts_the_tail_by_an_order_of_magnitude(tmp_path):
    """Llumnix: P99 latency an order of magnitude below INFaaS++'s (10x +-25%), 16 instances."""
    figs = _quick("llumnix", tmp_path)
    assert 10 / 1.25 <= figs["p99_ratio"]["servesim"] <= 10 * 1.25


@pytest.mark.slow
def test_llumnix_priority_headroom_speeds_up_high_priority_requests(tmp_path):
    """Llumnix: high-priority requests up to 1.5x faster than under Llumnix-base (+-25%), 16
    A10 instances (6 runs, about 12 s of CPU)."""
    figs = _quick("llumnix-priority", tmp_path)
    assert 1.5 / 1.25 <= figs["high_priority_speedup"]["servesim"] <= 1.5 * 1.25


def test_vllm_offload_blog_ttft_and_throughput(tmp_path):
    """vLLM's offloading-connector post: TTFT 2-22x shorter loaded from the CPU than recomputed,
    depending on the prompt size, and up to 9x the throughput of 512-token prefills with CPU
    hits (each +-25%). The 512-token TTFT ratio (2x in the post) is reported; at engine.version
    0.14.0 it lands below its range (docs/papers.md says why)."""
    figs = _quick("vllm-offload", tmp_path)
    assert 22 / 1.25 <= figs["ttft_longest"]["servesim"] <= 22 * 1.25
    assert 9 / 1.25 <= figs["throughput_all_hits"]["servesim"] <= 9 * 1.25
    assert figs["ttft_512"]["servesim"] > 1.0 and figs["ttft_512"]["in_range"] is not None
    rows = (tmp_path / "rows.csv").read_text().splitlines()
    assert len(rows) == 1 + 6 + 2  # header, the six prompts, throughput without and with hits


@pytest.mark.slow
def test_heteroscale_holds_the_slo_on_fewer_gpu_hours(tmp_path):
    """HeteroScale: coordinated P/D scaling on decode TPS upholds the SLOs and saves GPU-hours
    against each pool scaled alone on its GPU utilization (the paper: "saving hundreds of
    thousands of GPU-hours daily, all while upholding stringent service level objectives").
    Its +26.6 points of GPU utilization is out of range here (docs/papers.md says why); the
    figure is reported."""
    figs = _quick("heteroscale", tmp_path)
    assert figs["util_points"]["in_range"] is not None
    rows = {r["system"]: r for r in json.loads((tmp_path / "reproduce.json").read_text())["rows"]}
    hs, base = rows["heteroscale-heteroscale"], rows["heteroscale-utilization"]
    assert hs["slo_attainment"] >= 0.99
    assert hs["gpu_hours"] < base["gpu_hours"]


def test_vtc_keeps_backlogged_tenants_within_the_papers_bound(tmp_path):
    """VTC (Sheng et al., OSDI'24, Sec. 4): backlogged tenants' counters stay within U =
    max(w_p L_input, w_q M) of each other (the figure: the largest spread over U, at most 1),
    and FCFS on the same requests has no such bound (its spread passes U). The stand-in is
    docs/policies.md's example (about 4 s of CPU)."""
    figs = _quick("vtc", tmp_path)
    assert 0 < figs["spread_over_u"]["servesim"] <= 1.0
    rows = {r["system"]: r for r in json.loads((tmp_path / "reproduce.json").read_text())["rows"]}
    assert rows["fcfs"]["spread_over_u"] > 1.0
    # U = max(1 x the longest prompt, 2 x the KV cache's tokens), by hand from the row's inputs.
    vtc = rows["vtc"]
    assert vtc["bound_u"] == max(vtc["longest_prompt"], 2 * vtc["kv_capacity_tokens"])


def test_vtc_runs_the_policy_pages_example():
    import yaml

    from servesim.papers.vtc import EXAMPLE

    path = Path(__file__).resolve().parents[1] / "examples" / "tenants_fair_share.yaml"
    assert yaml.safe_load(path.read_text()) == EXAMPLE


def test_distserve_vllm_cannot_meet_the_ttft_of_the_long_stand_in_prompts(tmp_path):
    """DistServe's OPT-13B chatbot (TTFT <= 0.25 s, TPOT <= 0.1 s), out of the paper's range
    for a measured reason (docs/papers.md): under DistServe's own A100 fit of vLLM, a lone
    TP1 prefill of a prompt past about 1,490 tokens already takes more than 0.25 s (a + b p +
    c p^2 ms: 0.257 s at 1,536), while DistServe's TP2 prefill of 1,536 tokens takes 0.126 s.
    So no vLLM run can attain more than the share of its requests below that length, whatever
    the rate, and its goodput at 90% hangs on how many long prompts a run draws. Asserted: the
    fit's times, that bound on every vLLM probe of the quick run, and the paper's direction
    (DistServe ahead on both metrics)."""
    from servesim.papers.distserve import _traffic, fits

    fit = fits()

    def prefill_s(engine: str, tp: int, p: np.ndarray | int) -> np.ndarray:
        a, b, c = fit[engine, "facebook/opt-13b", tp].prefill
        return (a + b * np.asarray(p) + c * np.asarray(p) ** 2) * 1e-3

    assert prefill_s("vllm", 1, 1400) < 0.25 < prefill_s("vllm", 1, 1536)
    assert prefill_s("distserve", 2, 1536) < 0.25
    unit, prompt, _ = _traffic()
    too_long = prefill_s("vllm", 1, prompt) > 0.25
    figs = _quick("distserve", tmp_path)
    rows = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
    probes = [r for r in rows if r["system"] == "vllm" and "attainment" in r]
    assert probes
    for r in probes:
        k = int(np.searchsorted(unit / r["rate_req_s"], 60.0))  # the quick run's 60 s of traffic
        assert r["attainment"] <= 1 - too_long[:k].mean() + 1e-12, r
    assert figs["goodput"]["servesim"] > 1.0 and figs["slo_scale"]["servesim"] > 1.0


def test_mc_sf_quick_run_shows_the_papers_mechanism(tmp_path):
    """MC-SF's quick run (200 requests) is a transient, below the paper's 31% (the full run is
    held to it, a slow test above). What the paper argues holds on it: admission that projects
    the true output lengths never overflows the KV cache (no preemption) where vLLM V1's greedy
    admission does, and the shortest-first order cuts the mean latency below memory-aware FCFS."""
    figs = _quick("mc-sf", tmp_path)
    rows = {r["system"]: r for r in json.loads((tmp_path / "reproduce.json").read_text())["rows"]}
    assert rows["mc_sf"]["preemptions"] == rows["memory_aware_fcfs"]["preemptions"] == 0
    assert rows["vllm_v1"]["preemptions"] > 0
    assert figs["mean_latency_cut"]["servesim"] > 0


def test_microserving_balanced_pd_cuts_the_tail_more_as_load_grows(tmp_path):
    """MicroServing's stand-in (docs/papers.md: the paper's models, engines and traces are not
    encoded, so its figure is not held to the paper's range): balanced prefill-decode
    disaggregation cuts the P99 job completion time of long-input requests against data
    parallel at every rate swept, the paper's direction, and the cut is larger at the highest
    rate than at the lowest (the decode engine's spare time takes prompt tails off a queue
    that grows with load)."""
    _quick("microserving", tmp_path)
    rows = json.loads((tmp_path / "reproduce.json").read_text())["rows"]
    cuts = {}
    for rate in sorted({r["rate_req_s"] for r in rows}):
        at = {r["system"]: r["jct_p99_s"] for r in rows if r["rate_req_s"] == rate}
        dp = at.pop("data_parallel")
        cuts[rate] = 1 - min(at.values()) / dp
    assert all(c > 0 for c in cuts.values()), cuts
    assert cuts[max(cuts)] > cuts[min(cuts)], cuts


def test_output_writes_the_plot_page_with_the_papers_curve(tmp_path):
    """--output with plotly installed: plot.html (and plotly.js beside it) holds the figures'
    bars (the paper's range, servesim's value) and the paper's curve redrawn from the rows, one
    line per system (MicroServing: P99 JCT against the rate, data parallel and each balanced
    fraction)."""
    pytest.importorskip("plotly")
    _quick("microserving", tmp_path)
    page = (tmp_path / "plot.html").read_text(encoding="utf-8")
    found = re.search(r'<script[^>]*id="figures"[^>]*>(.*?)</script>', page, re.S)
    assert found is not None
    figs = {f["div"]: f for f in json.loads(found.group(1))}
    bars = figs["plot-0-figures"]["data"]
    assert [t["name"] for t in bars] == ["paper's range, low", "paper's range, high", "servesim"]
    assert bars[0]["y"] == [pytest.approx(47 / 1.25)] and bars[1]["y"] == [pytest.approx(47 * 1.25)]
    lines = {t["name"]: t for t in figs["plot-1-curve"]["data"]}
    assert set(lines) == {
        "data_parallel",
        "balanced_pd_0.1",
        "balanced_pd_0.2",
        "balanced_pd_0.3",
        "balanced_pd_0.4",
    }
    assert lines["data_parallel"]["x"] == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert list((tmp_path).glob("plotly-*.min.js"))
