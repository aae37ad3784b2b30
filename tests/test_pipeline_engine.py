"""Pipeline parallelism as the engines run it: up to pp batches in flight (``engine/batch_queue.py``,
vLLM V1's batch queue), each stage taking its share of the batch, hand-computed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import make_workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.catalog import get_gpu, load_model
from servesim.config import EngineConfig
from servesim.metrics.records import RequestStatus
from servesim.perf.base import BatchStats, ConstantPerfModel
from servesim.perf.pipelined import pipeline_stages, stage_times
from servesim.perf.policy_costs import PolicyCostModel
from servesim.perf.roofline import PipelinedPerfModel, RooflinePerfModel
from servesim.sim import run_engine


@dataclass
class StagedConstant(ConstantPerfModel):
    """``ConstantPerfModel`` on ``pp`` equal stages: a batch's forward takes ``step_s +
    per_token_s x tokens``, each stage ``1 / pp`` of it (no ``last_stage_s``)."""

    pp: int = 2


def engine(budget: int, **kw: object) -> EngineConfig:
    return EngineConfig(
        max_num_seqs=8,
        max_num_batched_tokens=budget,
        cpu_overhead_s=0.0,
        enable_prefix_caching=False,
        **kw,  # type: ignore[arg-type]
    )


def test_two_requests_arriving_together():
    # Prompts of 4 tokens, a 4-token budget: each prefill fills a batch. A batch takes 1 s
    # through two stages of 0.5 s.
    #   A  r0 prefill  scheduled 0.0  stage 1 [0.0, 0.5]  stage 2 [0.5, 1.0]
    #   B  r1 prefill  scheduled 0.0  stage 1 [0.5, 1.0]  stage 2 [1.0, 1.5]  (r0 in flight: skipped)
    #   A back at 1.0: r0's first token; the queue has room, r1 is in flight:
    #   C  r0 decode   scheduled 1.0  [1.0, 1.5] [1.5, 2.0]
    #   B back at 1.5: r1's first token;  D  r1 decode  [1.5, 2.0] [2.0, 2.5]
    #   C at 2.0: r0's 2nd token; E r0 [2.0, 3.0];  D at 2.5: r1's 2nd; F r1 [2.5, 3.5]
    #   E at 3.0: r0's 3rd (done); nothing to schedule (r1 in flight);  F at 3.5: r1 done.
    wl = make_workload([0.0, 0.0], 4, 3)
    run = run_engine(wl, engine(4), StagedConstant(step_s=1.0), 16, 64, check_invariants=True)
    rec = run.records
    assert np.all(rec.status == RequestStatus.FINISHED)
    np.testing.assert_array_equal(rec.first_scheduled_s, [0.0, 0.0])
    np.testing.assert_array_equal(rec.first_token_s, [1.0, 1.5])
    np.testing.assert_array_equal(rec.finished_s, [3.0, 3.5])
    np.testing.assert_array_equal(run.steps.start_s, [0.0, 0.0, 1.0, 1.5, 2.0, 2.5])
    np.testing.assert_array_equal(run.steps.num_prefill_tokens, [4, 4, 0, 0, 0, 0])
    np.testing.assert_array_equal(run.steps.num_decode_reqs, [0, 0, 1, 1, 1, 1])
    # Each request's tokens 1 s apart (its batch's way through both stages): 2 gaps each.
    gaps = [g for g, c in zip(run.itl.gap_s, run.itl.count) for _ in range(c)]
    assert gaps == [1.0] * 4
    t = run.totals
    assert t.num_steps == 6
    # A batch on some stage from 0 to 3.5; each GPU busy 6 x 0.5 = 3 s of it.
    assert t.gpu_s == pytest.approx(3.5)
    assert t.bubble_s == pytest.approx(0.5)
    assert t.busy_s == pytest.approx(3.5)


def test_pp1_steps_the_same_requests_one_after_the_other():
    # The same run on one stage (the check that pp = 2 above is the pipeline's doing), 1 s
    # steps: r0's prefill [0, 1]; r0's decode and 3 of r1's prompt tokens [1, 2]; r0's decode
    # and r1's last prompt token [2, 3] (r0 done, r1's first token); r1's decodes [3, 5].
    wl = make_workload([0.0, 0.0], 4, 3)
    run = run_engine(wl, engine(4), StagedConstant(step_s=1.0, pp=1), 16, 64)
    np.testing.assert_array_equal(run.records.first_token_s, [1.0, 3.0])
    np.testing.assert_array_equal(run.records.finished_s, [3.0, 5.0])
    assert run.totals.bubble_s == 0.0


def test_chunked_prefill_pipelines_its_chunks():
    # A 12-token prompt, a 4-token budget: three chunks. vLLM V1 advances computed tokens at
    # schedule time, so the next chunk goes into the next batch while the last is in flight:
    #   A chunk 0-4   [0.0, 0.5] [0.5, 1.0]
    #   B chunk 4-8   [0.5, 1.0] [1.0, 1.5]   (scheduled at 0.0)
    #   A back at 1.0 (no token: a partial prompt);  C chunk 8-12  [1.0, 1.5] [1.5, 2.0]
    #   B back at 1.5: no token (C holds the prompt's end), nothing to schedule
    #   C back at 2.0: the first token;  D decode [2.0, 2.5] [2.5, 3.0]: done at 3.0
    # (one stage: 3.0 and 4.0).
    wl = make_workload([0.0], 12, 2)
    run = run_engine(wl, engine(4), StagedConstant(step_s=1.0), 16, 64, check_invariants=True)
    np.testing.assert_array_equal(run.records.first_token_s, [2.0])
    np.testing.assert_array_equal(run.records.finished_s, [3.0])
    np.testing.assert_array_equal(run.steps.start_s, [0.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(run.steps.num_prefill_tokens, [4, 4, 4, 0])
    # Each GPU busy 4 x 0.5 = 2 s of the 3 s span.
    assert run.totals.bubble_s == pytest.approx(1.0)


def test_sarathi_artifact_does_not_pipeline_a_prompts_chunks():
    # The Sarathi-Serve artifact's schedulers skip a request in flight, a prompt chunk
    # included: each chunk waits for the one before to come back (1 s apart), then the decode.
    wl = make_workload([0.0], 12, 2)
    run = run_engine(
        wl, engine(4, policy="sarathi"), StagedConstant(step_s=1.0), 16, 64, check_invariants=True
    )
    np.testing.assert_array_equal(run.steps.start_s, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(run.records.first_token_s, [3.0])
    np.testing.assert_array_equal(run.records.finished_s, [4.0])


@pytest.mark.parametrize("k", [5, 50])
def test_saturated_decode_doubles_the_one_stage_rate(k):
    # Four 1-token prompts, a 2-token budget: r0, r1 fill batch A, r2, r3 batch B (scheduled
    # while A is on stage 1), and from then on the two pairs alternate, each batch
    # 0.2 + 0.1 x 2 = 0.4 s, 0.2 s a stage. Pair A's tokens come at 0.4 j, pair B's at
    # 0.4 j + 0.2 (j = 1..k): 4 k tokens by 0.4 k + 0.2, a batch of 2 leaving every 0.2 s
    # (10 tokens/s). One stage runs one pair at a time (the budget), 2 tokens every 0.4 s:
    # the first pair is done at 0.4 k, the second at 0.8 k.
    wl = make_workload([0.0] * 4, 1, k)
    perf = StagedConstant(step_s=0.2, per_token_s=0.1)
    run = run_engine(wl, engine(2), perf, 64, 256, check_invariants=True)
    np.testing.assert_allclose(run.records.finished_s, [0.4 * k] * 2 + [0.4 * k + 0.2] * 2)
    assert 4 * k / run.end_s == pytest.approx(4 * k / (0.4 * k + 0.2))
    one = run_engine(wl, engine(2), StagedConstant(step_s=0.2, per_token_s=0.1, pp=1), 64, 256)
    np.testing.assert_allclose(one.records.finished_s, [0.4 * k] * 2 + [0.8 * k] * 2)
    # The steady state: a pair's token every 0.4 s on both, the pairs at once on two stages.
    assert run.totals.gpu_s == pytest.approx(0.4 * k + 0.2)
    assert run.totals.bubble_s == pytest.approx(0.4 * k + 0.2 - 2 * k * 0.4 / 2)


def test_stage_times_split_the_roofline_step():
    # vLLM runs the LM head, logits gather and sampling on the last stage only; the rest is
    # split evenly over the stages.
    gpu = get_gpu("A100-80GB")
    perf = RooflinePerfModel(load_model("Llama-3.1-8B"), gpu, tp=2, pp=4)
    stats = BatchStats(num_decode_reqs=32, sum_decode_context=32 * 1000)
    total = perf.batch_time(stats)
    first, last = stage_times(perf, stats, total, 4)
    assert 3 * first + last == pytest.approx(total)
    b = perf.breakdown(stats)
    gather = (2 - 1) / 2 * perf.model.vocab_size * perf.model.activation_dtype_bytes * 32
    gather /= gpu.interconnect_bw * perf.eff.comm
    assert last - first == pytest.approx(b["lm_head"] + b["sampling"] + gather)
    # Through a wrapper that adds policy costs, and equal stages for a model without a head.
    assert stage_times(PolicyCostModel(perf), stats, total, 4) == (first, last)
    assert stage_times(StagedConstant(step_s=1.0, pp=4), stats, 2.0, 4) == (0.5, 0.5)
    assert pipeline_stages(PolicyCostModel(perf)) == 4
    assert pipeline_stages(PipelinedPerfModel(perf, 4)) == 1  # GPipe micro-batches: a step whole


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pp=st.integers(2, 4),
    policy=st.sampled_from(["vllm_v1", "sarathi", "vllm_v0", "orca", "static"]),
    chunked=st.booleans(),
    seed=st.integers(0, 10_000),
    blocks=st.integers(12, 60),
    wakes=st.booleans(),
)
def test_batch_queue_properties(pp, policy, chunked, seed, blocks, wakes):
    # No lost requests, the KV blocks all back, and (``BatchQueue.check`` at every
    # launch and output) at most pp batches in flight, a request in two only as vLLM V1's
    # prompt chunks.
    rng = np.random.default_rng(seed)
    n = 25
    arrivals = np.sort(rng.uniform(0.0, 3.0, n))
    prompts = rng.integers(1, 90, n)
    outputs = rng.integers(1, 20, n)
    chunks = policy == "sarathi" or (policy == "vllm_v1" and chunked)  # the others: whole prompts
    eng = EngineConfig(
        policy=policy,
        max_num_seqs=6,
        max_num_batched_tokens=32 if chunks else 128,
        cpu_overhead_s=0.001,
        enable_prefix_caching=False,
        pipeline_wakes=wakes,
        **({"enable_chunked_prefill": chunked} if policy == "vllm_v1" else {}),  # type: ignore[arg-type]
    )
    perf = StagedConstant(step_s=0.02, per_token_s=0.001, pp=pp)
    run = run_engine(make_workload(arrivals, prompts, outputs), eng, perf, blocks, 128, check_invariants=True)
    rec = run.records
    assert np.all(rec.status == RequestStatus.FINISHED)
    assert run.totals.peak_kv_blocks <= blocks
    np.testing.assert_array_equal(rec.num_output_tokens, outputs)
    assert run.totals.bubble_s >= 0.0
    assert run.totals.bubble_s <= run.totals.gpu_s


@pytest.mark.parametrize("wakes", [False, True])
def test_an_arrival_while_the_loop_waits(wakes: bool) -> None:
    # Two stages of 0.5 s; r0 arrives at 0, r1 at 0.25 while r0's prefill is on stage 1, the
    # queue (of 2) has room and the loop, its schedule empty (r0 in flight), waits.
    # vLLM V1 (wakes False) blocks on the oldest batch: r1 waits for r0's batch, back at 1.0,
    # and rides with r0's decode ([1.0, 1.5] [1.5, 2.0]); its first token at 2.0, its second
    # ([2.0, 2.5] [2.5, 3.0]) at 3.0.
    # DistServe's, the Sarathi-Serve artifact's and Orca's loops (wakes True) take r1 at 0.25:
    # it enters stage 1 when r0 leaves it ([0.5, 1.0] [1.0, 1.5]), first token 1.5; its decode
    # goes in when its prefill is back ([1.5, 2.0] [2.0, 2.5]), second token 2.5.
    wl = make_workload([0.0, 0.25], 4, 2)
    run = run_engine(
        wl, engine(8, pipeline_wakes=wakes), StagedConstant(step_s=1.0), 16, 64, check_invariants=True
    )
    rec = run.records
    assert np.all(rec.status == RequestStatus.FINISHED)
    if wakes:
        np.testing.assert_array_equal(rec.first_token_s, [1.0, 1.5])
        np.testing.assert_array_equal(rec.finished_s, [2.0, 2.5])
        np.testing.assert_array_equal(run.steps.start_s, [0.0, 0.25, 1.0, 1.5])
    else:
        np.testing.assert_array_equal(rec.first_token_s, [1.0, 2.0])
        np.testing.assert_array_equal(rec.finished_s, [2.0, 3.0])
        np.testing.assert_array_equal(run.steps.start_s, [0.0, 1.0, 2.0])
        np.testing.assert_array_equal(run.steps.num_prefill_tokens, [4, 4, 0])


def test_kernel_models_last_stage_is_its_per_request_operators():
    # The measured-kernel model's last stage runs the LM head, logits gather and sampling: the
    # per-request operators, read from the step's own table as batch_time reads it; the table
    # agrees with the curves it is built from, and a batch without requests has none.
    from servesim.perf.kernel_model import KernelPerfModel

    perf = KernelPerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM"), tp=1, pp=2)
    for n in (1, 24, 700):
        got = perf.last_stage_s(BatchStats(num_decode_reqs=n, sum_decode_context=n * 500))
        assert got == perf.step.req[n] and got > 0.0
        assert got == pytest.approx(float(perf._request_seconds(np.array([float(n)]))[0]), rel=1e-12)
    assert perf.last_stage_s(BatchStats(num_prefill_tokens=0)) == 0.0
