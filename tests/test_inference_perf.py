"""inference-perf's request stream from its own config files, and the open-loop replay.

What inference-perf sends (kubernetes-sigs/inference-perf, ``loadgen/load_timer.py`` and
``datagen/synthetic/shared_prefix_datagen.py``): every stage sends int(rate x duration)
requests within its duration, stages ``interval`` seconds apart; request i sends prompt
i mod N of the num_groups x num_prompts_per_group prompts, the group's system prompt first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

import servesim
from servesim.errors import ConfigError, ServesimError
from servesim.workload.inference_perf import HASH_BLOCK_TOKENS, generate_inference_perf, prompt_hash_ids

FIX = Path(__file__).parent / "fixtures" / "inference_perf"


def test_shared_prefix_stream_counts_stages_and_lengths():
    wl = generate_inference_perf(FIX / "shared_prefix.yaml", seed=3)
    stage = wl.meta["stage"]
    # int(2 x 30) + int(5 x 20) requests, each stage's within its own window
    assert len(wl) == 160 and int(np.sum(stage == 0)) == 60 and int(np.sum(stage == 1)) == 100
    first, second = wl.arrival_s[stage == 0], wl.arrival_s[stage == 1]
    assert 0 < first.min() and first.max() == pytest.approx(30.0)  # gaps normalised to the duration
    assert second.min() > 31.0 and second.max() == pytest.approx(51.0)  # 30 s + 1 s interval + 20 s
    assert np.all(np.diff(wl.arrival_s) >= 0)
    # every prompt is BOS + 100 system + 60 question tokens; ignore_eos: exactly output_len
    assert set(wl.num_prompt_tokens.tolist()) == {161} and set(wl.num_output_tokens.tolist()) == {32}


def test_prompts_recur_every_n_requests_and_groups_share_their_system_prompt():
    wl = generate_inference_perf(FIX / "shared_prefix.yaml", seed=0)
    n = 4 * 3
    ids = wl.hash_ids
    assert all(ids[i] == ids[i + n] for i in range(len(ids) - n))
    assert len({ids[i] for i in range(n)}) == n  # N distinct prompts
    shared = (100 + 1) // HASH_BLOCK_TOKENS  # units wholly inside BOS + system prompt
    heads = {ids[i][:shared] for i in range(n)}
    assert len(heads) == 4  # one system prompt per group
    for i in range(n):
        same_group = [j for j in range(n) if ids[j][:shared] == ids[i][:shared]]
        assert len(same_group) == 3
        # nothing past the system prompt is shared with another prompt
        assert all(ids[j][shared] != ids[i][shared] for j in same_group if j != i)


def test_profile_aliases_poisson_and_eos_notice():
    wl = generate_inference_perf(FIX / "profile_aliases.yaml", seed=1)
    assert len({wl.hash_ids[i] for i in range(10)}) == 10  # 2 system prompts x 5 users
    q = wl.num_prompt_tokens[:10] - 64 - 1
    assert q.min() >= 20 and q.max() <= 80
    # Poisson(4) per second for 60 s: 240 expected, sd 15.5
    assert 180 < len(wl) < 300
    assert [n["code"] for n in wl.meta["notices"]] == ["eos_unknown"]


def test_random_data_distributions():
    wl = generate_inference_perf(FIX / "random.yaml", seed=2)
    assert len(wl) == 300
    p = wl.num_prompt_tokens - 1
    assert p.min() >= 100 and p.max() <= 900 and abs(p.mean() - 400) < 30
    assert wl.num_output_tokens.min() >= 10 and wl.num_output_tokens.max() <= 200
    assert abs(wl.num_output_tokens.mean() - 105) < 10  # uniform on [10, 200]
    assert wl.hash_ids is None


@pytest.mark.parametrize("name, field", [("sweep.yaml", "load.sweep"), ("sharegpt.yaml", "data.type")])
def test_what_is_not_modelled_is_refused_naming_the_field(name, field):
    with pytest.raises(ConfigError, match=field):
        generate_inference_perf(FIX / name)


def test_prefix_cache_hits_at_the_rate_the_group_structure_implies():
    """At 2 req/s with 32-token answers no two requests overlap, so request i hits the
    whole earlier copy of its prompt (all full blocks but the last token's), else its
    group's system prompt if the group was seen, else nothing."""
    res = servesim.simulate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B"},
            "hardware": {"gpu": "H100-SXM"},
            "engine": {"enable_prefix_caching": True},
            "workload": {"type": "inference-perf", "config": str(FIX / "shared_prefix.yaml")},
        }
    )
    cols = res.records.columns()
    order = np.argsort(cols["arrival_s"], kind="stable")
    cached = cols["num_cached_tokens"][order][:60]  # the first stage
    wl = generate_inference_perf(FIX / "shared_prefix.yaml", seed=0)
    seen_prompt, seen_group, want = set(), set(), []
    shared = (100 + 1) // 16
    for i in range(60):
        ids = wl.hash_ids[i]
        full = (161 - 1) // 16 * 16
        want.append(full if ids in seen_prompt else shared * 16 if ids[:shared] in seen_group else 0)
        seen_prompt.add(ids)
        seen_group.add(ids[:shared])
    assert cached.tolist() == want


def test_scenario_file_reads_the_config_relative_to_itself(tmp_path):
    (tmp_path / "ip").mkdir()
    (tmp_path / "ip" / "run.yaml").write_text((FIX / "random.yaml").read_text())
    sc = tmp_path / "scenario.yaml"
    sc.write_text("workload: {type: inference-perf, config: ip/run.yaml}\n")
    res = servesim.simulate(sc)
    assert len(res.records.columns()["arrival_s"]) == 300


def _llama2_7b_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "torch_dtype": "float16",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
    }


def _run_folder(root: Path, n: int = 40) -> Path:
    run = root / "run-llama-2-7b-tp1"
    run.mkdir(parents=True)
    (run / "exp-config.yaml").write_text(
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\n"
        "max_model_len: 4096\nmax_num_batched_tokens: 2048\nmax_num_seqs: 128\n"
    )
    (run / "config.yaml").write_text((FIX / "shared_prefix.yaml").read_text())
    (run / "model_config.json").write_text(json.dumps(_llama2_7b_config()))
    reqs = [
        {"index": i, "arrival_time_us": int(i * 500_000), "input_tokens": 161 + i % 3, "output_tokens": 32}
        for i in range(n)
    ]
    (run / "replay.json").write_text(json.dumps({"requests": reqs}))
    (run / "ground_truth.json").write_text(
        json.dumps(
            [{"index": i, "ttft_s": 0.05, "e2e_s": 0.05 + 31 * 0.01, "has_error": False} for i in range(n)]
        )
    )
    return run


def test_open_loop_replay_compares_each_figure(tmp_path):
    from servesim.validate.openloop import replay_run

    run = replay_run(
        _run_folder(tmp_path), {"hardware": {"gpu": "H100-SXM"}, "engine": {"version": "0.15.1"}}
    )
    assert run.measured["ttft_mean"] == pytest.approx(0.05)
    assert run.measured["itl_p90"] == pytest.approx(0.01)
    for k, v in run.predicted.items():
        assert v > 0
        assert run.error(k) == pytest.approx(100 * (v / run.measured[k] - 1))
    # a lone 161-token request on an H100: tens of ms, not seconds
    assert 0.005 < run.predicted["ttft_p50"] < 0.1 and 0.003 < run.predicted["itl_p50"] < 0.02


def test_open_loop_cli_refuses_a_folder_without_runs(tmp_path):
    from typer.testing import CliRunner

    from servesim.cli import app

    out = CliRunner().invoke(app, ["validate", "--open-loop", str(tmp_path)])
    assert out.exit_code == 2 and "no open-loop run folder" in out.output and "Traceback" not in out.output


def test_prompt_hash_ids_split_at_the_system_prompt():
    ids = prompt_hash_ids(sys_len=40, prompt_len=70, group=1, prompt=7, unit=16)
    assert len(ids) == 5
    assert ids[:2] == prompt_hash_ids(40, 100, 1, 8, 16)[:2]  # same group, other prompt
    assert ids[2] != prompt_hash_ids(40, 100, 1, 8, 16)[2]  # the unit straddling the boundary is own


@pytest.mark.shared_data
@pytest.mark.slow
def test_blis_roleplay_runs_within_the_open_loop_goals():
    """The BLIS project's public H100 runs (vLLM 0.15.1, inference-perf shared-prefix chat at
    6 req/s; inference-sim/training), laid out as docs/fidelity.md says, in
    ``SERVESIM_OPENLOOP_DATA`` or ``measurements/openloop`` of the shared data."""
    from servesim.validate.openloop import GOALS, replay_run, run_folders, summary_rows

    root = (
        Path(os.environ["SERVESIM_OPENLOOP_DATA"])
        if os.environ.get("SERVESIM_OPENLOOP_DATA")
        else shared_data("measurements/openloop")
    )
    if not root.exists():
        pytest.skip(f"no open-loop runs at {root}")
    base = {"hardware": {"gpu": "H100-SXM"}, "engine": {"version": "0.15.1"}}
    runs = [replay_run(f, base) for f in run_folders(root)]
    med = dict(summary_rows(runs))
    for key, goal in GOALS.items():
        assert med[key] <= goal, (key, med[key])
    assert max(abs(r.error("ttft_mean")) for r in runs) < 15.0


@pytest.mark.shared_data
def test_blis_runs_kv_blocks_match_vllm_0_15_1():
    """vLLM's KV blocks as its start-up logged them (replay.json's config) against servesim's
    memory plan for the same deployment: within 1% for all four models."""
    from servesim.config import Scenario
    from servesim.deployment import resolve_deployment

    root = (
        Path(os.environ["SERVESIM_OPENLOOP_DATA"])
        if os.environ.get("SERVESIM_OPENLOOP_DATA")
        else shared_data("measurements/openloop")
    )
    if not root.exists():
        pytest.skip(f"no open-loop runs at {root}")
    from servesim.validate.openloop import run_folders

    for folder in run_folders(root):
        cfg = json.loads((folder / "replay.json").read_text())["config"]
        sc = Scenario.model_validate(
            {
                "model": {"name": str(folder / "model_config.json")},
                "hardware": {"gpu": "H100-SXM"},
                "parallel": {"tensor_parallel_size": cfg["tensor_parallelism"]},
                "engine": {
                    "version": "0.15.1",
                    "max_model_len": 4096,
                    "max_num_batched_tokens": 2048,
                    "max_num_seqs": 128,
                },
                "workload": {"type": "synthetic", "num_requests": 1},
            }
        )
        blocks = resolve_deployment(sc).plan.num_gpu_blocks
        assert abs(blocks / cfg["kv_blocks_total_gpu"] - 1) < 0.01, (folder.name, blocks)


def test_config_errors_exit_cleanly(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(f"workload: {{type: inference-perf, config: {FIX / 'sweep.yaml'}}}\n")
    with pytest.raises(ServesimError, match="load.sweep"):
        servesim.simulate(sc)


def test_rate_scale_and_limit_and_the_capacity_knob():
    """rate_scale multiplies every stage's rate (durations kept: twice the requests), limit takes
    the first N; capacity searches rate_scale like a trace's."""
    from servesim.config import Scenario
    from servesim.planner.rate_knob import rate_knob
    from servesim.workload import load_workload

    cfg = {"type": "inference-perf", "config": str(FIX / "shared_prefix.yaml")}
    one = load_workload(Scenario.model_validate({"workload": cfg}).workload)
    two = load_workload(Scenario.model_validate({"workload": {**cfg, "rate_scale": 2.0}}).workload)
    assert len(one) == 160 and len(two) == 320 and two.arrival_s.max() == pytest.approx(51.0)
    cut = load_workload(Scenario.model_validate({"workload": {**cfg, "limit": 50}}).workload)
    assert len(cut) == 50 and len(cut.meta["stage"]) == 50 and cut.hash_ids == one.hash_ids[:50]
    sc = Scenario.model_validate({"workload": cfg})
    knob = rate_knob(sc)
    span = float(one.arrival_s[-1] - one.arrival_s[0])
    assert knob.field == "workload.rate_scale" and knob.base_rps == pytest.approx(159 / span)
    assert knob.at(sc, 2 * knob.base_rps).workload.rate_scale == pytest.approx(2.0)


def test_headroom_counts_the_prefix_cache_hits_of_the_run():
    """Shared-prefix traffic computes a few tokens of each prompt: the sustainable rate the
    headroom line quotes is the one at the run's hits, above the rate the run served."""
    res = servesim.simulate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B"},
            "hardware": {"gpu": "H100-SXM"},
            "engine": {"enable_prefix_caching": True},
            "workload": {
                "type": "inference-perf",
                "config": str(FIX / "shared_prefix.yaml"),
                "rate_scale": 4.0,
            },
        }
    )
    room = res.summary["headroom"]
    cols = res.records.columns()
    assert cols["num_cached_tokens"].mean() > 100  # most prompts are hits
    served = len(cols["arrival_s"]) / float(cols["arrival_s"].max())
    assert room["capacity_requests_per_s"] > served
    assert 0 < room["load_fraction"] < 1
