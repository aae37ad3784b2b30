"""The configuration search: space, bounds, cache, backends, output, the command."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servesim.cli import app
from servesim.config import scenario_from_dict
from servesim.errors import ConfigError
from servesim.planner.bounds import _resolve_pools, decode_capacity, prefill_capacity, prune, workload_demand
from servesim.planner.output import pareto, vllm_serve_lines, write_plan
from servesim.planner.search import run_plan
from servesim.planner.space import enumerate_candidates, plan_config, plan_from_options
from servesim.sim import simulate

SMALL = {
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


def small_plan(**kw):
    base = scenario_from_dict(SMALL)
    return base, plan_config(
        {"gpus": ["H100-SXM", "L40S"], "max_total_gpus": 2, "tensor_parallel_sizes": [1, 2], **kw}, "test"
    )


def test_space_enumerates_in_a_fixed_order_within_the_gpu_budget():
    base, plan = small_plan(modes=["colocated", "disaggregated"], prefill_decode_ratios=["1:1"])
    cands = enumerate_candidates(base, plan)
    # per GPU: tp1 x {1, 2 replicas}, tp2 x 1 replica, and P tp1 + D tp1 (the only 1:1 that fits 2 GPUs)
    assert [c.label() for c in cands[:4]] == [
        "H100-SXM 1x tp1",
        "H100-SXM 2x tp1",
        "H100-SXM 1x tp2",
        "H100-SXM P 1x tp1 + D 1x tp1",
    ]
    assert len(cands) == 8 and [c.id for c in cands] == list(range(8))
    assert all(c.num_gpus <= 2 for c in cands)
    disagg = cands[3].scenario.cluster
    assert [p.role for p in disagg.pools] == ["prefill", "decode"]
    assert enumerate_candidates(base, plan)[5].scenario == cands[5].scenario  # deterministic


def test_bad_plan_sections_name_the_field():
    with pytest.raises(ConfigError, match=r"test: plan\.max_total_gpu"):
        plan_config({"max_total_gpu": 4}, "test")
    with pytest.raises(ConfigError, match="prefill:decode ratio"):
        plan_config({"prefill_decode_ratios": ["2-1"]}, "test")
    with pytest.raises(ConfigError, match="either --isl and --osl"):
        plan_from_options("Llama-3.1-8B", ["H100"], 1, rate=1.0, ttft_s=1.0)


def test_bounds_prune_what_vllm_refuses_and_what_cannot_keep_up():
    base = scenario_from_dict({**SMALL, "model": {"name": "Llama-3.1-70B"}})
    plan = plan_config({"gpus": ["H100-SXM"], "max_total_gpus": 8, "replicas": [1]}, "test")
    p = prune(enumerate_candidates(base, plan), workload_demand(base), base.slo.tpot_s)
    reasons = {c.label(): p.pruned.get(c.id, ("kept",))[0] for c in enumerate_candidates(base, plan)}
    # 70B in BF16 is 141 GB: one 80 GB GPU cannot hold it; two hold it with a 4096-token KV
    # cache, not with the model's own 131072 tokens (vLLM refuses to start then).
    assert reasons == {
        "H100-SXM 1x tp1": "memory",
        "H100-SXM 1x tp2": "kept",
        "H100-SXM 1x tp4": "kept",
        "H100-SXM 1x tp8": "kept",
    }
    long = scenario_from_dict({**SMALL, "model": {"name": "Llama-3.1-70B"}, "engine": {}})
    p = prune(enumerate_candidates(long, plan), workload_demand(long), long.slo.tpot_s)
    assert [r for r, _ in p.pruned.values()] == ["memory", "memory"]
    # Six times the traffic: one TP2 or TP4 replica cannot keep up (its prefill alone takes
    # over 1 s per second at its best), one TP8 replica can.
    busy = scenario_from_dict(
        {
            **SMALL,
            "model": {"name": "Llama-3.1-70B"},
            "workload": {**SMALL["workload"], "arrival": {"rate": 36.0}},
        }
    )
    p = prune(enumerate_candidates(busy, plan), workload_demand(busy), busy.slo.tpot_s)
    assert [p.pruned.get(i, ("kept",))[0] for i in range(4)] == ["memory", "throughput", "throughput", "kept"]


def test_throughput_bound_is_an_upper_bound_of_the_simulated_decode_rate():
    """Overload one replica (all requests at once): the busy time its served requests need by
    the bounds (decode at the decode bound, prompts at the prefill bound) fits in the run."""
    sc = scenario_from_dict(
        {**SMALL, "workload": {**SMALL["workload"], "num_requests": 400, "arrival": {"process": "burst"}}}
    )
    base, plan = sc, plan_config({"gpus": ["L40S"], "max_total_gpus": 1, "tensor_parallel_sizes": [1]}, "t")
    (cand,) = enumerate_candidates(base, plan)
    ((dep, _, _),) = _resolve_pools(cand, {})
    demand = workload_demand(base)
    thr = simulate(cand.scenario).summary["throughput"]
    need_s = max(
        thr["output_tokens_per_s"] / decode_capacity(dep, demand),
        thr["input_tokens_per_s"] / prefill_capacity(dep),
    )  # busy seconds per second, at best
    assert need_s <= 1.0
    assert need_s >= 0.5  # the bound is of the right size, not loose by orders of magnitude


def test_cache_reuses_and_resumes(tmp_path):
    base, plan = small_plan()
    first = run_plan(base, plan, backend="inprocess", cache_dir=tmp_path)
    n = first.counts()["simulated"]
    assert n > 2 and first.counts()["cached"] == 0
    again = run_plan(base, plan, backend="inprocess", cache_dir=tmp_path)
    assert again.counts()["simulated"] == 0 and again.counts()["cached"] == n
    assert [e.summary for e in again.evaluated] == [e.summary for e in first.evaluated]
    # An interrupted sweep: only the H100 half was done; the full plan simulates the rest.
    half = tmp_path / "half"
    run_plan(base, plan.model_copy(update={"gpus": ["H100-SXM"]}), backend="inprocess", cache_dir=half)
    resumed = run_plan(base, plan, backend="inprocess", cache_dir=half)
    h100 = sum(e.candidate.gpu == "H100-SXM" for e in resumed.evaluated)
    assert resumed.counts()["cached"] == h100 and resumed.counts()["simulated"] == n - h100


def test_a_code_change_invalidates_the_cache(tmp_path, monkeypatch):
    """Rows are keyed on the code's fingerprint, not the package version (which stays the same
    over many changes to the step models and the catalog): a plan resumed after a change of
    the code simulates again instead of reusing the old answers."""
    from servesim.planner import cache

    base, plan = small_plan(gpus=["H100-SXM"], max_total_gpus=1, tensor_parallel_sizes=[1])
    first = run_plan(base, plan, backend="inprocess", cache_dir=tmp_path)
    n = first.counts()["simulated"]
    assert n >= 1 and run_plan(base, plan, backend="inprocess", cache_dir=tmp_path).counts()["cached"] == n
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "0" * 64)  # the code changed
    again = run_plan(base, plan, backend="inprocess", cache_dir=tmp_path)
    assert again.counts()["cached"] == 0 and again.counts()["simulated"] == n


def test_code_fingerprint_covers_sources_and_data():
    from servesim.planner import cache

    fp = cache.code_fingerprint()
    assert len(fp) == 64 and cache.code_fingerprint() is fp  # computed once a process
    assert cache.code_version().endswith("+" + fp[:16])
    assert (cache.PACKAGE_DIR / "planner" / "cache.py").is_file() and (cache.PACKAGE_DIR / "data").is_dir()


def test_process_pool_results_equal_in_process():
    base, plan = small_plan()
    a = run_plan(base, plan, backend="inprocess")
    b = run_plan(base, plan, backend="process", workers=2)
    assert [(e.candidate.id, e.summary) for e in a.evaluated] == [
        (e.candidate.id, e.summary) for e in b.evaluated
    ]


@pytest.mark.slow
def test_ray_results_equal_the_process_pool():
    ray = pytest.importorskip("ray")
    base, plan = small_plan(gpus=["H100-SXM"])
    a = run_plan(base, plan, backend="process", workers=2)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        b = run_plan(base, plan, backend="ray")
    finally:
        ray.shutdown()
    assert len(a.evaluated) >= 2
    assert [(e.candidate.id, e.summary) for e in a.evaluated] == [
        (e.candidate.id, e.summary) for e in b.evaluated
    ]


def test_pareto_front():
    pts = [(1.0, 5.0, 0), (2.0, 3.0, 1), (2.0, 4.0, 2), (3.0, 3.0, 3), (4.0, 1.0, 4)]
    assert pareto(pts) == [0, 1, 4]


def test_output_files_and_the_winner_runs(tmp_path):
    base, plan = small_plan()
    result = run_plan(base, plan, backend="inprocess")
    paths = {p.name for p in write_plan(result, tmp_path)}
    assert {"candidates.parquet", "candidates.json", "pareto.json", "best.yaml", "best_vllm.sh"} <= paths
    rows = pq.read_table(tmp_path / "candidates.parquet").to_pylist()
    assert len(rows) == len(result.candidates)
    best = result.ranked()[0]
    assert [r["rank"] for r in rows if r["rank"] == 1][0] == 1
    # cheapest first: nothing meeting the SLOs is cheaper than the winner
    assert all(e.metrics["usd_per_hour"] >= best.metrics["usd_per_hour"] for e in result.ranked())
    from servesim.config import load_scenario

    assert load_scenario(tmp_path / "best.yaml") == best.candidate.scenario
    assert json.loads((tmp_path / "pareto.json").read_text())["cost_vs_latency"][0]["id"] == best.candidate.id
    from dataclasses import replace

    by_energy = replace(result, plan=result.plan.model_copy(update={"objective": "energy"})).ranked()
    joules = [e.metrics["j_per_output_token"] for e in by_energy]
    assert joules == sorted(joules) and len(joules) == len(result.ranked())


def test_vllm_serve_lines_use_vllm_flag_names():
    base, plan = small_plan(modes=["disaggregated"], prefill_decode_ratios=["1:1"], gpus=["H100-SXM"])
    (cand,) = enumerate_candidates(base, plan)
    from servesim.planner.search import Evaluated

    lines = vllm_serve_lines(Evaluated(cand, None, None, 0.0, False))
    cmds = [line for line in lines if line.startswith("vllm serve")]
    assert len(cmds) == 2
    for cmd in cmds:
        for flag in (
            "--tensor-parallel-size 1",
            "--max-num-seqs 1024",
            "--max-num-batched-tokens 8192",
            "--enable-chunked-prefill",
            "--enable-prefix-caching",
            "--gpu-memory-utilization 0.9",
            "--max-model-len 4096",
            "--kv-transfer-config",
        ):
            assert flag in cmd


def test_command_short_form_and_an_impossible_request(tmp_path):
    runner = CliRunner()
    args = [
        "plan",
        "--model",
        "Llama-3.1-8B",
        "--gpus",
        "H100",
        "--total-gpus",
        "2",
        "--isl",
        "256",
        "--osl",
        "32",
        "--rate",
        "4",
        "--num-requests",
        "40",
        "--ttft",
        "1",
        "--tpot",
        "0.05",
        "--backend",
        "inprocess",
        "--no-progress",
        "--objective",
        "energy",
        "-o",
        str(tmp_path / "ok"),
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "best by energy" in res.output and "vllm serve" in res.output
    # piped (not a terminal): the table keeps each row on one line, and every `vllm serve`
    # line is whole, as written to best_vllm.sh, for a shell to take
    table_rows = [line for line in res.output.splitlines() if line.startswith("│")]
    assert table_rows and all(line.rstrip().endswith("│") for line in table_rows)
    assert len(table_rows) == len({line.split("│")[2] for line in table_rows})  # one line a candidate
    script = [ln for ln in (tmp_path / "ok" / "best_vllm.sh").read_text().splitlines() if "vllm serve" in ln]
    printed = [line for line in res.output.splitlines() if line.startswith("vllm serve")]
    assert printed == script
    from servesim.config import load_scenario

    best = load_scenario(tmp_path / "ok" / "best.yaml")
    assert best.hardware.gpu == "H100-SXM" and best.model.name == "Llama-3.1-8B"
    bad = [*args[:-1], str(tmp_path / "bad")]
    bad[bad.index("--tpot") + 1] = "0.0001"  # below any decode step: every candidate pruned or missing
    res = runner.invoke(app, bad)
    assert res.exit_code == 1
    assert "nothing was simulated: every candidate was pruned" in res.output and "> TPOT limit" in res.output


@pytest.mark.parametrize(
    "text, message",
    [
        ("model: {name: Llama-3.1-8B}\n", "no plan: section"),
        ("model: {name: Llama-3.1-8B}\nplan: {gpus: [H100], max_total_gpu: 2}\n", "plan.max_total_gpu"),
        ("model: {name: Llama-3.1-8B}\nplan: {gpus: [H1000]}\n", "H1000"),
        (
            "model: {name: Llama-3.1-8B}\nslo: {ttft_s: null, tpot_s: null}\nplan: {gpus: [H100]}\n",
            "sets no SLO",
        ),
    ],
)
def test_bad_plan_files_get_one_line_errors(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    res = CliRunner().invoke(app, ["plan", str(path), "--backend", "inprocess", "--no-progress"])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_data_parallel_servers_are_searched_for_moe_models_only():
    moe = scenario_from_dict(
        {**SMALL, "model": {"name": "MiniMaxAI/MiniMax-M2.5"}, "hardware": {"gpu": "B200"}}
    )
    plan = plan_config(
        {
            "max_total_gpus": 4,
            "tensor_parallel_sizes": [1, 2],
            "data_parallel_sizes": [1, 2],
            "expert_parallel": [True],
            "replicas": [1],
        },
        "test",
    )
    cands = enumerate_candidates(moe, plan)
    # tp1 and tp2, each with 1 and 2 ranks; EP spans all the server's GPUs (dp x tp)
    assert [(c.label(), c.num_gpus) for c in cands] == [
        ("B200 1x tp1", 1),
        ("B200 1x tp1dp2ep2", 2),
        ("B200 1x tp2ep2", 2),
        ("B200 1x tp2dp2ep4", 4),
    ]
    par = cands[3].scenario.parallel
    assert (par.tensor_parallel_size, par.data_parallel_size, par.expert_parallel_size) == (2, 2, 4)
    assert cands[3].describe()["dp"] == 2
    # the bounds count the capacity of every rank: the one server is two engines
    ((dep, role, engines),) = _resolve_pools(cands[3], {})
    assert role == "colocated" and engines == 2 and dep.parallel.data_parallel_size == 2
    from servesim.planner.search import Evaluated

    lines = vllm_serve_lines(Evaluated(cands[3], None, None, 0.0, False))
    cmd = [ln for ln in lines if ln.startswith("vllm")]
    assert "--tensor-parallel-size 2 --data-parallel-size 2 --enable-expert-parallel" in cmd[0]
    head = [ln for ln in lines if ln.startswith("#")]
    assert head == ["# each replica: 1 x 4 B200"]
    # a dense model's ranks would be replicas: the plan says so instead of searching them
    with pytest.raises(ConfigError, match="dense model.*plan.replicas"):
        enumerate_candidates(scenario_from_dict(SMALL), plan)
    # data-parallel ranks are not tried with pipeline stages
    plan_pp = plan_config(
        {
            "max_total_gpus": 4,
            "tensor_parallel_sizes": [1],
            "pipeline_parallel_sizes": [1, 2],
            "data_parallel_sizes": [2],
            "replicas": [1],
        },
        "test",
    )
    assert [c.label() for c in enumerate_candidates(moe, plan_pp)] == ["B200 1x tp1dp2"]
