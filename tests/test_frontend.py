"""vLLM's API-server front end (``engine.frontend``): a FIFO queue before the scheduler."""

from __future__ import annotations

import numpy as np
import pytest

import servesim
from servesim.config import EngineConfig, FrontendConfig, resolve_engine
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload.base import Workload

A_S, B_S = 0.01, 1e-4  # per request, per prompt token
STEP_S = 0.05


def engine(enabled: bool | None) -> EngineConfig:
    return EngineConfig(
        cpu_overhead_s=0.0,
        max_num_batched_tokens=2048,
        max_num_seqs=8,
        frontend=FrontendConfig(
            enabled=enabled,
            per_request_s=A_S,
            per_prompt_token_s=B_S,
            per_output_token_s=0.0,
            per_chunk_s=0.0,
        ),
    )


@pytest.mark.parametrize("reference", [False, True])
def test_three_simultaneous_arrivals_queue_through_the_front_end(reference: bool) -> None:
    # Prompts of 100, 200, 300 tokens sent at t=0, one output token each, 50 ms steps.
    # Front end (one at a time): done at 0.01+0.01=0.02, 0.02+0.01+0.02=0.05, 0.05+0.01+0.03=0.09.
    # Engine: r0 at 0.02 finds it idle (step 0.02-0.07); r1 (0.05) waits for it (0.07-0.12);
    # r2 (0.09) waits for r1's (0.12-0.17). TTFT counts from the send (t=0).
    wl = Workload(np.zeros(3), np.array([100, 200, 300]), np.ones(3, dtype=np.int64))
    run = run_engine(wl, engine(True), ConstantPerfModel(STEP_S), 1000, 4096, reference=reference)
    rec = run.records
    np.testing.assert_allclose(rec.first_scheduled_s, [0.02, 0.07, 0.12], atol=1e-12)
    np.testing.assert_allclose(rec.first_token_s, [0.07, 0.12, 0.17], atol=1e-12)
    np.testing.assert_allclose(rec.arrival_s, [0.0, 0.0, 0.0])
    # Without it the three share one step: every first token at 0.05.
    off = run_engine(wl, engine(False), ConstantPerfModel(STEP_S), 1000, 4096, reference=reference)
    np.testing.assert_allclose(off.records.first_token_s, [0.05] * 3, atol=1e-12)


def test_off_is_todays_engine_and_the_lazy_engine_matches_the_reference() -> None:
    rng = np.random.default_rng(3)
    n = 300
    wl = Workload(np.cumsum(rng.exponential(1 / 40, n)), rng.integers(1, 1500, n), rng.integers(1, 200, n))
    perf = ConstantPerfModel(0.01, 2e-5)
    base = run_engine(wl, EngineConfig(), perf, 600, 4096)  # no GPU: the front end resolves off
    off = run_engine(wl, EngineConfig(frontend=FrontendConfig(enabled=False)), perf, 600, 4096)
    for col in ("first_scheduled_s", "first_token_s", "finished_s", "num_preemptions"):
        np.testing.assert_array_equal(getattr(off.records, col), getattr(base.records, col), err_msg=col)
    on = EngineConfig(frontend=FrontendConfig(enabled=True))
    fast = run_engine(wl, on, perf, 600, 4096)
    ref = run_engine(wl, on, perf, 600, 4096, reference=True)
    for col in ("first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(
            getattr(fast.records, col), getattr(ref.records, col), rtol=1e-9, atol=1e-9
        )
    np.testing.assert_array_equal(fast.records.num_preemptions, ref.records.num_preemptions)
    assert on.frontend.per_output_token_s > 0 and on.frontend.per_chunk_s > 0  # streaming too
    # Each request waits at least its own service time before the engine sees it.
    fe = on.frontend
    own = fe.per_request_s + fe.per_prompt_token_s * wl.num_prompt_tokens
    assert np.all(fast.records.first_scheduled_s - fast.records.arrival_s >= own - 1e-12)
    assert fast.records.first_token_s.mean() > base.records.first_token_s.mean()


def test_default_is_on_for_vllm_on_a_gpu_only() -> None:
    def enabled(eng: EngineConfig, gpu: str) -> bool | None:
        return resolve_engine(eng, 80 * 2**30, gpu, max_model_len=4096).frontend.enabled

    assert enabled(EngineConfig(), "H100-SXM") is True
    assert enabled(EngineConfig(policy="vllm_v0"), "H100-SXM") is True
    assert enabled(EngineConfig(policy="sarathi"), "H100-SXM") is False
    assert enabled(EngineConfig(), "cpu-2core") is False
    assert enabled(EngineConfig(), "") is False
    assert enabled(EngineConfig(frontend=FrontendConfig(enabled=False)), "H100-SXM") is False


def test_one_client_pays_exactly_its_own_front_end_time_on_a_real_preset() -> None:
    # One closed-loop client: the engine is idle at every send, so the front end shifts each
    # request by exactly per_request_s + per_prompt_token_s x its prompt and the streaming of
    # its first token (a round of its own: one token, one chunk), nothing else.
    def run(enabled: bool) -> servesim.Result:
        return servesim.simulate(
            {
                "model": {"name": "meta-llama/Llama-3.1-8B"},
                "hardware": {"gpu": "H100-SXM"},
                "engine": {"frontend": {"enabled": enabled}},
                "workload": {
                    "type": "benchmark",
                    "input_len": 2048,
                    "output_len": 16,
                    "num_prompts": 12,
                    "max_concurrency": 1,
                    "random_range_ratio": 0.5,
                    "num_warmups": 0,
                    "seed": 1,
                },
                "run": {"record_steps": False},
            }
        )

    on, off = run(True), run(False)
    fe = FrontendConfig()
    prompts = on.records.num_prompt_tokens
    np.testing.assert_array_equal(prompts, off.records.num_prompt_tokens)
    ttft_on = on.records.first_token_s - on.records.arrival_s
    ttft_off = off.records.first_token_s - off.records.arrival_s
    own = fe.per_request_s + fe.per_prompt_token_s * prompts + fe.per_output_token_s + fe.per_chunk_s
    np.testing.assert_allclose(ttft_on - ttft_off, own, rtol=1e-6, atol=1e-9)
    tpot = on.summary["benchmark"]["mean_tpot_ms"], off.summary["benchmark"]["mean_tpot_ms"]
    assert tpot[0] == pytest.approx(tpot[1], rel=1e-9)


# --------------------------------------------------------------------------- streaming

T_TOK, T_CHUNK = 1e-3, 2e-3  # per generated token, per streamed chunk (large, to read off)


def streaming(interval: int = 1) -> EngineConfig:
    return EngineConfig(
        cpu_overhead_s=0.0,
        max_num_batched_tokens=2048,
        max_num_seqs=8,
        stream_interval=interval,
        frontend=FrontendConfig(
            enabled=True,
            per_request_s=A_S,
            per_prompt_token_s=B_S,
            per_output_token_s=T_TOK,
            per_chunk_s=T_CHUNK,
        ),
    )


def test_frontend_streaming_work_by_hand() -> None:
    from servesim.engine.frontend import Frontend

    fe = Frontend(A_S, B_S, T_TOK, T_CHUNK, stream_interval=4)
    # 10 tokens, 2 of them a first or last (always a chunk), the other 8 a chunk every 4th
    assert fe.output_work(10, 2) == pytest.approx(10 * T_TOK + (2 + 8 / 4) * T_CHUNK)
    assert fe.deliver_at(1.0, 10, 2) == pytest.approx(1.0 + fe.output_work(10, 2))
    # an arrival now waits for those outputs: the same one server
    assert fe.admit_at(1.0, 0) == pytest.approx(1.0 + fe.output_work(10, 2) + A_S)
    # 5 steps of 3 tokens from 2.0 (the server free), 0.1 s each: each step's work (3 ms +
    # 1.5 chunks x 2 ms) is done before the next ends: free one step's work after the last
    fe.after_steps(2.0, [0.1] * 5, 0, 5, 3)
    assert fe.free_at_s == pytest.approx(2.5 + fe.output_work(3, 0))
    # a server that cannot even detokenize in time ends the run behind: 5 steps of 200
    # tokens (0.2 s of token work each) in 0.1 s, all but the first step's chunks merged
    fe.after_steps(3.0, [0.02] * 5, 0, 5, 200)
    assert fe.free_at_s == pytest.approx(3.02 + 5 * 200 * T_TOK + 2 * 200 / 4 * T_CHUNK)


def test_a_server_behind_by_its_chunks_settles_into_rounds_of_b_t_over_t_minus_a() -> None:
    from servesim.engine.frontend import Frontend

    # Steps of T = 10 ms, 4 tokens (A = 4 ms) and 4 chunks at interval 1 (B = 8 ms): A + B > T,
    # so the server falls behind, but each round sends the chunks of all the steps that came
    # in before it started once: rounds of k steps last k A + B, and k = L / T steps arrive
    # in a round of L: L = B T / (T - A) = 13.3 ms on average, a bounded lag.
    fe = Frontend(A_S, B_S, T_TOK, T_CHUNK)
    ends, rounds = [], []
    for i in range(1, 3001):
        ends.append(fe.deliver_at(0.01 * i, 4, 0))
        rounds.append(fe.round_end_s)
    L = 8e-3 * 10e-3 / (10e-3 - 4e-3)
    assert np.diff(np.unique(rounds[1000:])).mean() == pytest.approx(L, rel=0.01)
    assert (np.array(ends) - 0.01 * np.arange(1, 3001)).max() < 2 * L + 4e-3
    # after_steps is the same step by step
    fe2 = Frontend(A_S, B_S, T_TOK, T_CHUNK)
    fe2.after_steps(0.0, [0.01] * 3000, 0, 3000, 4)
    assert fe2.free_at_s == pytest.approx(fe.free_at_s, abs=1e-9)
    # without the merging (every step's chunks sent) the lag would grow by 2 ms a step
    assert fe.free_at_s - 30.0 < 0.05 < 3000 * (4e-3 + 8e-3 - 10e-3)
    # one that keeps up (one token a step, 3 ms) is one step's work behind at the end
    fe.after_steps(1e6, [0.01] * 50, 0, 50, 1)
    assert fe.free_at_s == pytest.approx(1e6 + 0.5 + 3e-3)


def test_outputs_that_arrive_while_the_server_is_busy_merge_into_its_next_round() -> None:
    from servesim.engine.frontend import Frontend

    fe = Frontend(A_S, B_S, T_TOK, T_CHUNK)
    # step 1 (4 tokens, a pool of 4 requests) at t=1: 4 ms of tokens + 8 ms of chunks
    assert fe.deliver_at(1.0, 4, 0) == pytest.approx(1.012)
    # steps 2 and 3 end at 1.005 and 1.010, during that round: one next round sends each
    # request's two tokens in one chunk (vLLM's RequestOutputCollector merges them)
    assert fe.deliver_at(1.005, 4, 0) == pytest.approx(1.012 + 4e-3 + 8e-3)
    assert fe.deliver_at(1.010, 4, 0) == pytest.approx(1.024 + 4e-3)
    # a step with one new request's first token during that next round's service opens
    # another round, which sends all 5 requests' chunks
    assert fe.deliver_at(1.020, 5, 1) == pytest.approx(1.028 + 5e-3 + 5 * 2e-3)
    # a step after the server is free is a round of its own
    assert fe.deliver_at(2.0, 4, 0) == pytest.approx(2.012)


@pytest.mark.parametrize("reference", [False, True])
def test_a_client_sees_a_token_when_its_step_is_streamed(reference: bool) -> None:
    # One request of 100 prompt tokens and 3 output tokens, alone: the front end hands it to
    # the engine at 0.01 + 0.01 = 0.02; steps of 50 ms end at 0.07, 0.12, 0.17. Each step's
    # one token costs T_TOK + T_CHUNK (the first and the last always stream; the middle one
    # too at interval 1): the client sees the first at 0.07 + 0.003, the last at 0.17 + 0.003.
    wl = Workload(np.zeros(1), np.array([100]), np.array([3], dtype=np.int64))
    rec = run_engine(wl, streaming(), ConstantPerfModel(STEP_S), 1000, 4096, reference=reference).records
    np.testing.assert_allclose(rec.first_token_s, [0.07 + T_TOK + T_CHUNK], atol=1e-12)
    np.testing.assert_allclose(rec.finished_s, [0.17 + T_TOK + T_CHUNK], atol=1e-12)
    # without streaming costs (both 0): the engine's times
    off = run_engine(wl, engine(True), ConstantPerfModel(STEP_S), 1000, 4096, reference=reference).records
    np.testing.assert_allclose(off.first_token_s, [0.07], atol=1e-12)
    np.testing.assert_allclose(off.finished_s, [0.17], atol=1e-12)


def _sends_at_streamed_finishes(rec: object) -> None:
    """Each closed-loop client's next request is sent when its last one was streamed."""
    arrival, finished = np.asarray(rec.arrival_s), np.asarray(rec.finished_s)  # type: ignore[attr-defined]
    order = np.argsort(arrival)
    later = arrival[order][1:]
    # one client: every send after the first is some earlier request's streamed finish
    assert np.isin(np.round(later, 12), np.round(finished, 12)).all()


def test_a_closed_loop_client_sends_when_its_last_token_is_streamed_on_an_engine_and_a_cluster() -> None:
    from servesim.cluster.run import run_cluster
    from servesim.cluster.spec import PoolSpec
    from servesim.config import ClusterConfig, PoolConfig
    from servesim.workload import load_workload
    from servesim.workload.benchmark import BenchmarkWorkload

    wl = load_workload(
        BenchmarkWorkload(
            num_prompts=6,
            input_len=100,
            output_len=3,
            max_concurrency=1,
            random_range_ratio=0.0,
            ready_check=False,
        )
    )
    eng = resolve_engine(streaming(), max_model_len=1024)
    one = run_engine(wl, eng, ConstantPerfModel(STEP_S), 1000, 4096).records
    _sends_at_streamed_finishes(one)
    # each request: front end 0.01 + 0.01, three 50 ms steps, the last token streamed 3 ms later
    np.testing.assert_allclose(np.diff(np.sort(one.arrival_s)), 0.02 + 0.15 + T_TOK + T_CHUNK, atol=1e-9)
    pool = PoolSpec(
        "c",
        "colocated",
        2,
        eng,
        ConstantPerfModel(STEP_S),
        num_gpu_blocks=1000,
        max_model_len=1024,
        kv_bytes_per_token=1000.0,
    )
    cfg = ClusterConfig(pools=[PoolConfig(name="c", num_replicas=2)], router="round_robin")
    two = run_cluster(wl, [pool], cfg, check_invariants=True).records
    _sends_at_streamed_finishes(two)
    np.testing.assert_allclose(np.sort(two.arrival_s), np.sort(one.arrival_s), atol=1e-9)


@pytest.mark.parametrize("clients", [3, 40])
def test_the_lazy_engine_streams_as_the_reference_under_closed_loop(clients: int) -> None:
    from servesim.workload import load_workload
    from servesim.workload.benchmark import BenchmarkWorkload

    wl = load_workload(
        BenchmarkWorkload(
            num_prompts=400,
            input_len=300,
            output_len=120,
            max_concurrency=clients,
            random_range_ratio=0.5,
            ready_check=False,
            num_warmups=2,
        )
    )
    eng = EngineConfig(
        max_num_seqs=16, frontend=FrontendConfig(enabled=True, per_output_token_s=2e-4, per_chunk_s=5e-4)
    )  # a slow server
    perf = ConstantPerfModel(0.004, 2e-6)
    fast = run_engine(wl, eng, perf, 2000, 4096).records
    ref = run_engine(wl, eng, perf, 2000, 4096, reference=True).records
    for col in ("arrival_s", "first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(getattr(fast, col), getattr(ref, col), rtol=1e-9, atol=1e-9, err_msg=col)


def test_the_api_servers_busy_share_is_its_work_over_the_window_and_a_busy_one_is_noticed() -> None:
    def run(**fe: float) -> servesim.Result:
        return servesim.simulate(
            {
                "model": {"name": "meta-llama/Llama-3.1-8B"},
                "hardware": {"gpu": "H100-SXM"},
                "engine": {"frontend": {"enabled": True, **fe}},
                "workload": {
                    "type": "benchmark",
                    "input_len": 512,
                    "output_len": 32,
                    "num_prompts": 10,
                    "max_concurrency": 1,
                    "random_range_ratio": 0.5,
                    "num_warmups": 0,
                    "seed": 2,
                },
                "run": {"record_steps": False},
            }
        )

    # One client: the server never falls behind, so its work is each request's handling and
    # tokenization plus, at stream interval 1, one token and one chunk per generated token.
    res = run()
    fe, rec = FrontendConfig(), res.records
    work = (
        len(rec) * fe.per_request_s
        + fe.per_prompt_token_s * rec.num_prompt_tokens.sum()
        + (fe.per_output_token_s + fe.per_chunk_s) * rec.num_output_tokens.sum()
    )
    room = res.summary["headroom"]
    assert room["api_server_fraction"] == pytest.approx(work / res.summary["counts"]["window_s"], rel=1e-9)
    assert not [n for n in res.summary["notices"] if n["code"] == "api_server_busy"]
    # 20 ms a chunk, longer than a decode step: the server works most of the run (merging
    # each request's pending tokens into one chunk keeps it from falling behind for good)
    busy = run(per_chunk_s=2e-2).summary
    assert busy["headroom"]["api_server_fraction"] > 0.8
    assert [n for n in busy["notices"] if n["code"] == "api_server_busy"]
    # without a front end there is no such share
    off = servesim.simulate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B"},
            "hardware": {"gpu": "H100-SXM"},
            "engine": {"frontend": {"enabled": False}},
            "workload": {
                "type": "benchmark",
                "input_len": 512,
                "output_len": 32,
                "num_prompts": 4,
                "max_concurrency": 1,
            },
        }
    )
    assert off.summary["headroom"]["api_server_fraction"] is None
