"""Reasoning workloads: bimodal lengths, best-of-N tasks, Dynasor early exit (servesim.workload.reasoning)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from servesim.config import EngineConfig, ReasoningWorkload
from servesim.metrics.tasks import task_latencies, task_summary
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload import load_workload
from servesim.workload.reasoning import stop_points

QUICK = {"kind": "lognormal", "mean": 600, "std": 300}
LONG = {"kind": "lognormal", "mean": 4000, "std": 1500}


def reasoning(**kw) -> ReasoningWorkload:
    base = {
        "quick_len": QUICK,
        "long_len": LONG,
        "long_weight": 0.3,
        "prompt_len": {"kind": "constant", "value": 200},
    }
    return ReasoningWorkload.model_validate({**base, **kw})


def test_hand_case_token_accounting():
    """L=1000, k=100, u=0.35, agree=2: the answer settles at 350, first agreeing probe after
    400, the second after 500: 500 reasoning tokens, probes after 100..500."""
    stop, probes = stop_points(np.array([1000]), np.array([0.35]), 100, 2)
    assert (stop[0], probes[0]) == (500, 5)
    # Settling late: capped at L, a probe after every segment that ends before L.
    stop, probes = stop_points(np.array([1000, 950]), np.array([0.95, 0.9]), 100, 2)
    assert stop.tolist() == [1000, 950] and probes.tolist() == [9, 9]
    stop, probes = stop_points(np.array([1000]), np.array([0.0]), 100, 3)  # settled at once
    assert (stop[0], probes[0]) == (300, 3)


def test_requests_of_one_sample_chain_segments_and_probes():
    cfg = reasoning(
        num_questions=1,
        early_exit=True,
        segment_tokens=100,
        probe_tokens=8,
        probe_prompt_tokens=20,
        quick_len={"kind": "constant", "value": 1000},
        long_weight=0.0,
    )
    wl = load_workload(cfg)
    wl.validate()
    stop, probes = int(wl.meta["stop"][0]), int(wl.meta["probes"][0])
    probe = wl.meta["probe"]
    assert probe.sum() == probes and (~probe).sum() == -(-stop // 100)
    assert wl.num_output_tokens[~probe].sum() == stop and (wl.num_output_tokens[probe] == 8).all()
    # Segment j's prompt: the prompt and j segments; probe j's: segment j+1's prompt plus the cue.
    seg = np.flatnonzero(~probe)
    np.testing.assert_array_equal(wl.num_prompt_tokens[seg], 200 + 100 * np.arange(len(seg)))
    np.testing.assert_array_equal(wl.num_prompt_tokens[probe], 200 + 100 * np.arange(1, probes + 1) + 20)
    assert wl.after.num_preds.tolist() == [0] + [1] * (len(wl) - 1)  # one chain, in send order
    np.testing.assert_array_equal(wl.after.succ, np.arange(1, len(wl)))
    # The continuation reuses every full unit of the prompt and the reasoning so far.
    for i in seg[1:]:
        full = wl.num_prompt_tokens[i] // 64
        assert wl.hash_ids[i][:full] == wl.hash_ids[i - 1][:full]
    r = wl.meta["reasoning"]
    assert r["reasoning_tokens"] == stop and r["probe_tokens"] == 8 * probes
    assert r["fixed_length_tokens"] == 1000


def test_bimodal_lengths_match_the_mixture_moments():
    n = 6000
    wl = load_workload(reasoning(num_questions=n, arrival={"rate": 100.0}))
    length, is_long = wl.meta["length"], wl.meta["long"]
    assert len(wl) == n and wl.after.succ.size == 0
    assert abs(is_long.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / n)
    mean = 0.3 * 4000 + 0.7 * 600
    assert abs(length.mean() - mean) < 4 * length.std() / np.sqrt(n)
    for flag, (m, s) in ((True, (4000, 1500)), (False, (600, 300))):
        x = length[is_long == flag]
        assert abs(x.mean() - m) < 4 * s / np.sqrt(len(x))
        assert abs(x.std() - s) < 0.1 * s  # the lognormal's std, within a few of its sampling error


def test_best_of_n_task_finishes_with_its_last_sample():
    """Two questions, four samples each sharing the prompt: a question's latency is its
    slowest sample's finish, and in a free batch the slowest is the longest. The first
    sample to be scheduled prefills the prompt; the other three find its 3 full 64-token
    units (192 tokens) in the prefix cache."""
    cfg = reasoning(
        num_questions=2,
        samples=4,
        arrival={"process": "constant", "rate": 0.01},
        quick_len={"kind": "uniform", "low": 20, "high": 60},
        long_weight=0.0,
    )
    wl = load_workload(cfg)
    assert len(wl) == 8  # 200 prompt tokens: 3 full 64-token units, shared by a question's samples
    assert all(h[:3] == wl.hash_ids[0][:3] for h in wl.hash_ids[:4])
    run = run_engine(
        wl,
        EngineConfig(max_num_seqs=16, max_num_batched_tokens=4096),
        ConstantPerfModel(0.01),
        num_gpu_blocks=4000,
        max_model_len=4096,
    )
    rec, task = run.records, wl.after.task
    lat = task_latencies(rec, task, wl.after.task_start_s)
    for t in range(2):
        rows = task == t
        assert lat[t] == pytest.approx(rec.finished_s[rows].max() - 100.0 * (t + 1))
        assert np.argmax(rec.finished_s[rows]) == np.argmax(wl.num_output_tokens[rows])
        assert sorted(rec.num_cached_tokens[rows].tolist()) == [0, 192, 192, 192]
    assert task_summary(rec, task, wl.after.task_start_s)["num_finished"] == 2


def _expected_saving(cfg: ReasoningWorkload, n: int, seed: int) -> float:
    """The model's saving 1 - (E[S] + probe_tokens E[probes]) / E[L] by a large independent draw."""
    big = load_workload(cfg.model_copy(update={"num_questions": n, "early_exit": False}), seed)
    length, u = big.meta["length"], big.meta["u"]
    stop, probes = stop_points(length, u, cfg.segment_tokens, cfg.agree)
    return 1.0 - (stop.sum() + cfg.probe_tokens * probes.sum()) / length.sum()


def test_dynasor_saves_tokens_within_the_model_range():
    cfg = reasoning(
        num_questions=400,
        samples=4,
        arrival={"rate": 50.0},
        early_exit=True,
        segment_tokens=128,
        agree=2,
        probe_tokens=16,
        stabilize_alpha=2.0,
        stabilize_beta=3.0,
    )
    dyn, fixed = load_workload(cfg), load_workload(cfg.model_copy(update={"early_exit": False}))
    np.testing.assert_array_equal(dyn.meta["length"], fixed.meta["length"])  # the same draws: equal answers
    length, u, stop, probes = (dyn.meta[k] for k in ("length", "u", "stop", "probes"))
    r = dyn.meta["reasoning"]
    assert r["fixed_length_tokens"] == fixed.num_output_tokens.sum() == length.sum()
    assert r["reasoning_tokens"] + r["probe_tokens"] == dyn.num_output_tokens.sum()
    saving = r["saving"]
    probe_share = 16 * probes.sum() / length.sum()
    k, a = 128, 2
    # Per sample u*L <= S <= min(L, u*L + agree*k): the saving's exact bounds on these draws.
    low = 1 - np.minimum(length, u * length + a * k).sum() / length.sum() - probe_share
    high = 1 - (u * length).sum() / length.sum() - probe_share
    assert low <= saving <= high
    # Against the model's expectation (u independent of L: the upper bound tends to 1 - E[u] = 0.6).
    assert high < 1 - 2.0 / 5.0 + 4 * u.std() / np.sqrt(len(u))
    per = length - stop - 16 * probes  # tokens saved per sample; ratio estimator's standard error
    se = np.std(per - saving * length) / np.sqrt(len(length)) / length.mean()
    expected = _expected_saving(cfg, 20000, seed=7)
    assert abs(saving - expected) < 4 * se
    assert saving > 0.2  # in the paper's direction: a large share of the reasoning is saved


def test_dynasor_run_generates_fewer_tokens_and_finishes_tasks():
    cfg = reasoning(
        num_questions=6,
        samples=2,
        arrival={"rate": 2.0},
        early_exit=True,
        segment_tokens=256,
        quick_len={"kind": "lognormal", "mean": 800, "std": 200},
        long_weight=0.0,
    )
    engine = EngineConfig(max_num_seqs=32, max_num_batched_tokens=4096, enable_prefix_caching=True)
    dyn = load_workload(cfg)
    run = run_engine(dyn, engine, ConstantPerfModel(0.005), num_gpu_blocks=20000, max_model_len=8192)
    assert task_summary(run.records, dyn.after.task, dyn.after.task_start_s)["num_finished"] == 6
    assert (
        run.records.num_output_tokens.sum()
        == dyn.meta["reasoning"]["reasoning_tokens"] + dyn.meta["reasoning"]["probe_tokens"]
    )
    assert run.records.num_cached_tokens.sum() > 0  # continuations and probes reuse the reasoning so far


def test_bad_config():
    with pytest.raises(ValidationError, match="num_questions or duration_s"):
        reasoning(num_questions=None)
    with pytest.raises(ValidationError, match="long_weight"):
        reasoning(long_weight=1.5)


def test_the_example_reports_its_tokens_against_fixed_length():
    """The bundled example, cut to 8 questions, on its model preset: the summary's
    ``reasoning`` section is the workload's accounting and the run generated those tokens."""
    import yaml

    from servesim.sim import simulate

    with open(Path(__file__).parent.parent / "examples" / "reasoning_dynasor.yaml") as f:
        doc = yaml.safe_load(f)
    doc["workload"]["num_questions"] = 8
    s = simulate(doc).summary
    r = s["reasoning"]
    assert r["reasoning_tokens"] + r["probe_tokens"] == s["throughput"]["num_output_tokens"]
    assert 0 < r["saving"] < 1 - 2.0 / 5.0  # below 1 - E[u]
    assert s["tasks"]["num_tasks"] == s["tasks"]["num_finished"] == 8


def test_questions_arrive_open_loop_and_each_sample_is_one_root():
    """Poisson questions at 2/s: mean gap 0.5 s within sampling error; with early exit every
    sample's chain has one root, sent at its question's arrival."""
    n = 2000
    cfg = reasoning(
        num_questions=n,
        samples=3,
        arrival={"process": "poisson", "rate": 2.0},
        early_exit=True,
        quick_len={"kind": "constant", "value": 300},
        long_weight=0.0,
    )
    wl = load_workload(cfg)
    start = wl.after.task_start_s
    gaps = np.diff(start)
    assert abs(gaps.mean() - 0.5) < 4 * 0.5 / np.sqrt(n - 1)
    roots = np.flatnonzero(wl.after.num_preds == 0)
    assert len(roots) == 3 * n
    np.testing.assert_array_equal(wl.arrival_s[roots], np.repeat(start, 3))
    np.testing.assert_array_equal(wl.arrival_s, start[wl.after.task])
