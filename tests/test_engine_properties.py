"""Property tests: engine invariants over random small workloads (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from unittest import mock

import numpy as np
import pytest
from conftest import make_workload
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.config import EngineConfig
from servesim.engine import build
from servesim.engine.request import ReqStatus
from servesim.engine.scheduler import Scheduler
from servesim.metrics.records import RequestStatus
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine


@dataclass
class Case:
    arrivals: list[float]
    prompts: list[int]
    outputs: list[int]
    groups: list[int] | None
    prefix_len: int
    engine: EngineConfig
    num_gpu_blocks: int
    max_model_len: int
    perf: ConstantPerfModel = field(default_factory=ConstantPerfModel)


@st.composite
def cases(draw) -> Case:
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.004, 0.01, 0.03, 0.1]), min_size=n, max_size=n))
    arrivals = np.cumsum(gaps).tolist()
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    caching = draw(st.booleans())
    groups = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)) if caching else None
    prefix_len = draw(st.integers(0, 200))
    block_size = draw(st.sampled_from([1, 8, 16, 32]))
    chunked = draw(st.booleans())
    # Mostly long enough for everything; sometimes short enough to cut or reject requests.
    max_model_len = draw(st.sampled_from([512, 512, 512, 200, 64]))
    if chunked:
        budget = draw(st.sampled_from([8, 32, 100, 512, 2048]))
        threshold = draw(st.sampled_from([0, 0, 16, 64]))
    else:  # vLLM requires the budget to hold the longest sequence without chunking
        budget = draw(st.sampled_from([max_model_len, 1024]))
        threshold = 0
    longest = max(min(p + o, max_model_len) for p, o in zip(prompts, outputs, strict=True))
    min_blocks = -(-longest // block_size) + 1
    num_gpu_blocks = min_blocks + draw(st.sampled_from([0, 1, 3, 10, 100]))
    engine = EngineConfig(
        block_size=block_size,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=threshold,
        enable_prefix_caching=caching,
        cpu_overhead_s=draw(st.sampled_from([0.0, 0.003])),
        scheduler_reserve_full_isl=draw(st.booleans()),
    )
    perf = ConstantPerfModel(step_s=0.01, per_token_s=draw(st.sampled_from([0.0, 1e-5])))
    return Case(arrivals, prompts, outputs, groups, prefix_len, engine, num_gpu_blocks, max_model_len, perf)


@dataclass
class Trace:
    """What the wrapped scheduler saw during one run."""

    scheduler: Scheduler | None = None
    num_finishes: dict[int, int] = field(default_factory=dict)
    num_produced: dict[int, int] = field(default_factory=dict)
    num_steps: int = 0


def run_case(case: Case, trace: Trace | None = None, reference: bool = True, check_invariants: bool = True):
    """Run ``case``; with a ``trace``, check every step of the reference scheduler as it goes.

    The lazy engine skips ahead over pure-decode runs only when ``check_invariants`` is off.
    """
    wl = make_workload(case.arrivals, case.prompts, case.outputs, case.groups, case.prefix_len)
    if trace is None:
        return run_engine(
            wl,
            case.engine,
            case.perf,
            case.num_gpu_blocks,
            case.max_model_len,
            check_invariants=check_invariants,
            reference=reference,
        )
    eng = case.engine

    # A subclass that checks every step (it replaces the reference scheduler through
    # engine.build.make_scheduler; patching Scheduler's methods would not reach a compiled engine).
    class Tracing(Scheduler):
        def schedule(self):
            trace.scheduler = self
            running_before = list(self.running)
            waiting_before = list(self.waiting)
            out = Scheduler.schedule(self)
            trace.num_steps += bool(out.reqs)
            assert out.total_tokens == sum(out.num_tokens) <= eng.max_num_batched_tokens
            assert all(n >= 1 for n in out.num_tokens)
            assert len({id(r) for r in out.reqs}) == len(out.reqs)
            assert len(self.running) <= eng.max_num_seqs
            # Running requests first, in order; then admitted ones FCFS from the head of waiting.
            pos = {id(r): i for i, r in enumerate(running_before)}
            k = sum(1 for r in out.reqs if id(r) in pos)
            order = [pos.get(id(r), -1) for r in out.reqs[:k]]
            assert all(0 <= a < b for a, b in zip(order, order[1:], strict=False))
            admitted = out.reqs[k:]
            assert len(admitted) <= len(waiting_before)
            assert all(a is w for a, w in zip(admitted, waiting_before[: len(admitted)], strict=True))
            if out.preempted:
                assert admitted == []
                assert all(
                    v.status == ReqStatus.PREEMPTED and v.num_computed_tokens == 0 for v in out.preempted
                )
                assert list(self.waiting)[: len(out.preempted)] == out.preempted[::-1]
            for r in out.reqs:
                assert r.num_computed_tokens <= r.num_tokens
                if not eng.enable_chunked_prefill:
                    assert r.num_computed_tokens == r.num_tokens  # whole prompts only
            for n in out.num_tokens:
                if 0 < eng.long_prefill_token_threshold < n:
                    assert len(running_before) + len(waiting_before) <= 1
            # Blocks are conserved: held (shared ones once) + free + the null block = total.
            kv = self.kv
            held = {b.block_id for blocks in kv.req_blocks.values() for b in blocks}
            assert len(held) + kv.num_free_blocks + 1 == kv.num_gpu_blocks
            assert set(kv.req_blocks) == {r.idx for r in self.running}
            return out

        def update_from_output(self, out, now):
            produced, finished = Scheduler.update_from_output(self, out, now)
            for r in produced:
                trace.num_produced[r.idx] = trace.num_produced.get(r.idx, 0) + 1
            for r in finished:
                trace.num_finishes[r.idx] = trace.num_finishes.get(r.idx, 0) + 1
            return produced, finished

    with mock.patch.object(build, "make_scheduler", lambda e, cfg, kv, *a, **k: Tracing(cfg, kv)):
        return run_engine(
            wl,
            case.engine,
            case.perf,
            case.num_gpu_blocks,
            case.max_model_len,
            check_invariants=True,
            reference=True,
        )


PROPS = settings(max_examples=100, deadline=None)


def check_run(case: Case, run, trace: Trace | None = None) -> None:
    """Invariants every run must satisfy, from its records and step series."""
    rec = run.records
    for i in range(len(case.arrivals)):
        p, o = case.prompts[i], case.outputs[i]
        if p >= case.max_model_len:
            assert rec.status[i] == RequestStatus.REJECTED and rec.reasons[i]
            assert np.isnan(rec.first_scheduled_s[i])
            assert trace is None or i not in trace.num_finishes
            continue
        assert rec.status[i] == RequestStatus.FINISHED, rec.reasons.get(i)
        expected = min(o, case.max_model_len - p)  # cut at max_model_len
        assert rec.num_output_tokens[i] == expected
        if trace is not None:
            assert trace.num_produced[i] == expected
            assert trace.num_finishes[i] == 1
    # Timestamps in order for every served request.
    ok = rec.status == RequestStatus.FINISHED
    assert np.all(rec.arrival_s[ok] <= rec.first_scheduled_s[ok])
    assert np.all(rec.first_scheduled_s[ok] < rec.first_token_s[ok])
    assert np.all(rec.first_token_s[ok] <= rec.finished_s[ok])
    assert np.all(rec.num_cached_tokens[ok] < rec.num_prompt_tokens[ok])
    if not case.engine.enable_prefix_caching:
        assert np.all(rec.num_cached_tokens == 0)
    # Steps: within budget and max_num_seqs, time never goes backwards.
    s = run.steps.columns()
    if trace is not None:
        assert len(run.steps) == trace.num_steps
    assert np.all(s["num_prefill_tokens"] + s["num_decode_reqs"] <= case.engine.max_num_batched_tokens)
    assert np.all(s["num_prefill_tokens"] + s["num_decode_reqs"] >= 1)
    assert np.all(s["num_running"] <= case.engine.max_num_seqs)
    assert np.all(s["kv_blocks_used"] <= case.num_gpu_blocks)
    start, dur = s["start_s"], s["duration_s"]
    assert np.all(dur > 0)
    assert np.all(start[1:] >= start[:-1] + dur[:-1] - 1e-12)
    if ok.any():
        assert run.end_s == pytest.approx(np.nanmax(rec.finished_s))
        assert run.end_s == pytest.approx(start[-1] + dur[-1])
    # Every output token after a request's first is one inter-token gap.
    itl_count = np.asarray(run.itl.count)
    assert itl_count.sum() == int(np.sum(rec.num_output_tokens[ok] - 1))
    assert float(np.dot(run.itl.gap_s, itl_count)) == pytest.approx(
        float(np.sum(rec.finished_s[ok] - rec.first_token_s[ok])), rel=1e-9, abs=1e-9
    )
    assert run.totals.num_preemptions == int(s["num_preempted"].sum()) == int(rec.num_preemptions.sum())


@PROPS
@given(cases())
def test_reference_engine_invariants_step_by_step(case: Case):
    trace = Trace()
    run = run_case(case, trace, reference=True)
    check_run(case, run, trace)
    # Everything is free at the end; the cache index is consistent.
    sched = trace.scheduler
    if sched is not None:
        kv = sched.kv
        assert not sched.running and not sched.waiting
        assert kv.req_blocks == {}
        assert kv.num_free_blocks == case.num_gpu_blocks - 1
        kv.check_invariants()


@PROPS
@given(cases(), st.booleans())
def test_lazy_engine_invariants(case: Case, check_invariants: bool):
    check_run(case, run_case(case, reference=False, check_invariants=check_invariants))


@settings(max_examples=30, deadline=None)
@given(cases(), st.booleans())
def test_deterministic(case: Case, reference: bool):
    a = run_case(case, reference=reference, check_invariants=False)
    b = run_case(case, reference=reference, check_invariants=False)
    for name, col in a.records.columns().items():
        np.testing.assert_array_equal(col, b.records.columns()[name], err_msg=name)
    assert a.records.reasons == b.records.reasons
    for name, col in a.steps.columns().items():
        np.testing.assert_array_equal(col, b.steps.columns()[name], err_msg=name)
    assert a.end_s == b.end_s
    assert (a.itl.gap_s, a.itl.count) == (b.itl.gap_s, b.itl.count)


def test_lazy_step_series_counts_arrivals_during_a_skip_ahead_run():
    # Request 0 decodes alone (max_num_seqs 1); request 1 arrives at 0.015, during step 2,
    # and waits until request 0 finishes: steps 3..6 start with one request waiting.
    case = Case(
        [0.0, 0.015],
        [1, 1],
        [6, 1],
        None,
        0,
        EngineConfig(
            max_num_seqs=1, max_num_batched_tokens=64, cpu_overhead_s=0.0, enable_prefix_caching=False
        ),
        11,
        64,
        ConstantPerfModel(step_s=0.01),
    )
    ref = run_case(case, reference=True, check_invariants=False)
    assert ref.steps.num_waiting == [0, 0, 1, 1, 1, 1, 0]
    fast = run_case(case, reference=False, check_invariants=False)
    assert fast.steps.num_waiting == ref.steps.num_waiting


def test_lazy_run_end_time_matches_reference_bit_for_bit():
    # Request 0 decodes 0.12..0.15; request 1 arrives at 0.14, exactly a step boundary.
    case = Case(
        [0.11, 0.14],
        [1, 1],
        [4, 1],
        None,
        0,
        EngineConfig(
            max_num_seqs=2, max_num_batched_tokens=64, cpu_overhead_s=0.0, enable_prefix_caching=False
        ),
        11,
        64,
        ConstantPerfModel(step_s=0.01),
    )
    ref = run_case(case, reference=True, check_invariants=False)
    assert ref.steps.start_s == [0.11, 0.12, 0.13, 0.14]
    assert ref.records.first_scheduled_s[1] == 0.14
    fast = run_case(case, reference=False, check_invariants=False)
    assert fast.steps.start_s == ref.steps.start_s
    np.testing.assert_array_equal(fast.records.first_scheduled_s, ref.records.first_scheduled_s)
