"""The fast (lazy) engine against the step-by-step reference engine.

The lazy scheduler must make exactly the reference's decisions: identical first-scheduled,
first-token and finish times (up to float rounding of summed step times), identical
preemptions and prefix-cache hits, on Poisson and bursty traffic, short and long prompts,
prefix caching on and off, KV pressure with preemption, and slices of the real traces;
then on small cases hypothesis generates (workload and engine knobs together).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig
from servesim.engine.tenants import TenantLimits, TenantSetup
from servesim.perf.base import ConstantPerfModel
from servesim.perf.roofline import RooflinePerfModel
from servesim.sim import run_engine
from servesim.workload.base import Workload

MOONCAKE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_1000.jsonl.gz"


def synthetic(
    seed: int,
    n: int,
    rate: float,
    prompt_max: int = 1024,
    out_max: int = 256,
    groups: int = 0,
    cv: float = 1.0,
) -> Workload:
    rng = np.random.default_rng(seed)
    shape = 1 / cv**2
    gaps = rng.gamma(shape, 1 / (rate * shape), n)
    group = rng.integers(-1, groups, n) if groups else None
    return Workload(
        np.cumsum(gaps),
        rng.integers(1, prompt_max, n),
        rng.integers(1, out_max, n),
        prefix_group=group,
        prefix_len=256,
    )


def assert_same(
    wl: Workload,
    engine: EngineConfig,
    blocks: int,
    perf=None,
    max_model_len: int = 4096,
    ref_wl: Workload | None = None,
    ref_engine: EngineConfig | None = None,
    ref_tenants: TenantSetup | None = None,
):
    """The fast engine on (wl, engine) against the reference on (ref_wl, ref_engine,
    ref_tenants), by default the same: a VTC or tenant run that must decide as plain FCFS
    gives its own."""
    perf = perf or ConstantPerfModel(0.01, 2e-5)
    ref = run_engine(
        ref_wl or wl, ref_engine or engine, perf, blocks, max_model_len, reference=True, tenants=ref_tenants
    )
    fast = run_engine(wl, engine, perf, blocks, max_model_len, reference=False)
    a, b = ref.records, fast.records
    for col in ("first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(getattr(b, col), getattr(a, col), rtol=1e-9, atol=1e-9, err_msg=col)
    for col in ("num_preemptions", "num_cached_tokens", "num_output_tokens", "status", "finished_length"):
        np.testing.assert_array_equal(getattr(b, col), getattr(a, col), err_msg=col)
    assert len(fast.steps) == len(ref.steps)
    fast_steps, ref_steps = fast.steps.columns(), ref.steps.columns()
    for col in (
        "kv_blocks_used",
        "num_waiting",
        "num_running",
        "num_prefill_tokens",
        "num_decode_reqs",
        "num_preempted",
    ):
        np.testing.assert_array_equal(fast_steps[col], ref_steps[col], err_msg=col)
    np.testing.assert_allclose(fast_steps["start_s"], ref_steps["start_s"], rtol=1e-9, atol=1e-9)
    assert fast.totals.num_prefix_hit_tokens == ref.totals.num_prefix_hit_tokens
    for col in ("busy_s", "gpu_s", "flops", "bytes", "kv_block_s"):  # runs are accounted in bulk
        np.testing.assert_allclose(
            getattr(fast.totals, col), getattr(ref.totals, col), rtol=1e-9, err_msg=col
        )
    assert (fast.totals.num_steps, fast.totals.peak_kv_blocks, fast.totals.num_preemptions) == (
        ref.totals.num_steps,
        ref.totals.peak_kv_blocks,
        ref.totals.num_preemptions,
    )
    assert sum(fast.itl.count) == sum(ref.itl.count)
    return ref


def test_poisson_no_pressure():
    assert_same(synthetic(0, 400, 10), EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024), 4000)


def test_bursty_with_preemption():
    ref = assert_same(
        synthetic(1, 500, 20, cv=3), EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024), 500
    )
    assert ref.records.num_preemptions.sum() > 0  # the case really exercises preemption


def test_prefix_caching_with_pressure():
    ref = assert_same(
        synthetic(2, 500, 20, groups=5),
        EngineConfig(max_num_seqs=64, max_num_batched_tokens=512, block_size=16),
        600,
    )
    assert ref.totals.num_prefix_hit_tokens > 0 and ref.records.num_preemptions.sum() > 0


def test_chunked_prefill_off_and_long_prefill_threshold():
    assert_same(
        synthetic(3, 400, 20),
        EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048, enable_chunked_prefill=False),
        600,
    )
    assert_same(
        synthetic(4, 400, 15, prompt_max=3000),
        EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024, long_prefill_token_threshold=256),
        3000,
    )


@pytest.mark.parametrize("block_size", [1, 32, 128])
def test_block_sizes(block_size):
    blocks = 20000 // block_size + 2
    assert_same(
        synthetic(5, 200, 20),
        EngineConfig(block_size=block_size, max_num_seqs=16, max_num_batched_tokens=512),
        blocks,
    )


def test_roofline_timed_low_load():
    """Long idle-free decode runs at low load: the skip-ahead path dominates."""
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    assert_same(
        synthetic(6, 300, 2, out_max=600),
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192),
        20000,
        perf=perf,
    )


def test_kernel_timed_low_load():
    """The default step model (measured kernels): decode runs time their steps from the
    model's per-pool-size terms (``decode_terms``), equal to its ``batch_time``."""
    from servesim.perf.kernel_model import KernelPerfModel

    perf = KernelPerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM"))
    assert_same(
        synthetic(6, 300, 2, out_max=600),
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192),
        20000,
        perf=perf,
    )


def test_azure_slice_at_high_rate():
    from servesim.workload.traces import read_trace, select

    wl = select(read_trace("builtin:azure_conv"), rate_scale=10.0, start_s=None, end_s=None, limit=800)
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    assert_same(
        wl, EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192), 3000, perf=perf, max_model_len=16384
    )


def test_mooncake_slice_prefix_caching():
    from servesim.workload.traces import read_trace, select

    wl = select(read_trace(MOONCAKE), rate_scale=0.05, start_s=None, end_s=None, limit=150)
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"), tp=1)
    ref = assert_same(
        wl, EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096), 12000, perf=perf, max_model_len=131072
    )
    assert ref.totals.num_prefix_hit_tokens > 0


def test_streaming_mode_keeps_the_results_without_the_step_series():
    """record_steps=False (long runs): same records and totals, no step rows, the same ITL
    distribution."""
    from servesim.metrics.stats import distribution

    wl = synthetic(7, 400, 20, prompt_max=800, out_max=300)
    engine = EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024)
    full = run_engine(wl, engine, ConstantPerfModel(0.01, 2e-5), 1500, 4096)
    lean = run_engine(wl, engine, ConstantPerfModel(0.01, 2e-5), 1500, 4096, record_steps=False)
    assert len(lean.steps) == 0 and len(full.steps) == full.totals.num_steps > 0
    for col in ("first_token_s", "finished_s"):
        np.testing.assert_array_equal(getattr(lean.records, col), getattr(full.records, col))
    assert lean.totals.busy_s == full.totals.busy_s
    assert lean.totals.num_preemptions == full.totals.num_preemptions
    a = distribution(np.asarray(full.itl.gap_s), np.asarray(full.itl.count))
    b = distribution(np.asarray(lean.itl.gap_s, np.float64), np.asarray(lean.itl.count, np.int64))
    assert a["count"] == b["count"]
    for k in ("mean", "p50", "p99", "max"):
        assert b[k] == pytest.approx(a[k], rel=1e-6)


@pytest.mark.parametrize("scalar_steps", [1, 5])
def test_numpy_chunks_of_long_runs(monkeypatch: pytest.MonkeyPatch, scalar_steps: int) -> None:
    """Runs switch from one-by-one timing to numpy chunks after ``SCALAR_STEPS`` steps
    (1024 in Python, never when compiled): forced early, the chunks must give the same times,
    block counts and preemptions (KV pressure cuts chunks short; long outputs make long runs)."""
    from servesim.engine import decode_runs

    monkeypatch.setattr(decode_runs, "SCALAR_STEPS", scalar_steps)
    wl = synthetic(7, 300, 4, prompt_max=512, out_max=1500)
    rm = RooflinePerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM"))
    ref = assert_same(wl, EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024), 600, perf=rm)
    assert ref.records.num_preemptions.sum() > 0


def test_closed_loop_benchmark_clients():
    # vllm bench's clients send at finishes: a finish inside a lazy run must be reported at
    # its own step's end (not the run's), so the next request arrives when it would.
    from servesim.config import BenchmarkWorkload
    from servesim.workload import load_workload

    wl = load_workload(
        BenchmarkWorkload(
            num_prompts=300,
            input_len=600,
            output_len=120,
            random_range_ratio=0.8,
            max_concurrency=24,
            num_warmups=3,
            request_rate=30.0,
            burstiness=0.5,
        )
    )
    ref = assert_same(wl, EngineConfig(max_num_seqs=32, max_num_batched_tokens=512), 500)
    assert ref.records.num_preemptions.sum() > 0


def test_a_preempting_step_starts_no_run():
    """Found by the generated cases: a step that preempts admits nobody by rule, so the lazy
    engine must not extend it into a run of decode steps (which assumes the waiting requests
    cannot be admitted): the victim here is re-admitted at the very next step."""
    n = 20
    wl = Workload(np.zeros(n), np.array([1] * 19 + [17]), np.array([1] * 18 + [3, 1]))
    engine = EngineConfig(
        block_size=1,
        max_num_seqs=2,
        max_num_batched_tokens=16,
        enable_prefix_caching=False,
        cpu_overhead_s=0.0,
        scheduler_reserve_full_isl=False,
    )
    ref = assert_same(wl, engine, 19, max_model_len=1024)
    assert ref.records.num_preemptions[19] == 1


# ------------------------------------------------------------------ tenants


def with_tenants(wl: Workload, tenant: np.ndarray, k: int) -> Workload:
    out = wl.subset(slice(None))
    out.tenant = tenant.astype(np.int64)
    out.meta["tenant_names"] = [f"t{i}" for i in range(k)]
    return out


def counted(k: int) -> TenantSetup:
    """k tenants of weight 1, no limits: the run keeps their counters (steps one by one)."""
    return TenantSetup([f"t{i}" for i in range(k)], [1.0] * k, [TenantLimits()] * k, [None] * k)


def test_vtc_with_one_tenant_is_fcfs():
    """VTC with a single tenant admits its FIFO in order: the lazy FCFS engine's decisions."""
    wl = synthetic(1, 500, 20, cv=3)
    engine = EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024)
    ref = assert_same(wl, engine, 500, ref_engine=engine.model_copy(update={"scheduling_policy": "vtc"}))
    assert ref.records.num_preemptions.sum() > 0


def test_fcfs_with_tenants_is_fcfs():
    """With tenants the FCFS waiting queue is one FIFO per tenant (``TenantWaiting``) and the
    run steps one by one to keep the counters: the decisions stay those of one deque."""
    wl = synthetic(2, 500, 20, groups=5)
    tenants = with_tenants(wl, np.random.default_rng(0).integers(0, 3, len(wl)), 3)
    engine = EngineConfig(max_num_seqs=64, max_num_batched_tokens=512, block_size=16)
    ref = assert_same(wl, engine, 600, ref_wl=tenants, ref_tenants=counted(3))
    assert ref.records.num_preemptions.sum() > 0 and ref.tenants.scheduler.max_spread > 0


def test_vtc_fast_and_reference_agree():
    """With several tenants VTC runs step by step under both flags: the same decisions."""
    wl = synthetic(3, 400, 30, cv=2)
    tenants = with_tenants(wl, np.random.default_rng(1).integers(0, 2, len(wl)), 2)
    ref = assert_same(
        tenants, EngineConfig(max_num_seqs=32, max_num_batched_tokens=512, scheduling_policy="vtc"), 400
    )
    assert ref.tenants.scheduler.max_spread > 0


# ------------------------------------------------------------------ generated cases


@st.composite
def differential_cases(draw) -> tuple[Workload, EngineConfig, int, int, str]:
    """A small workload and the lazy engine's knobs (plain vLLM V1, FCFS, recompute): arrivals
    in bursts and gaps, prompts up to 600 tokens, outputs up to 300 (long pure-decode runs are
    what the lazy engine skips ahead over), prefix groups, block sizes, chunked prefill on and
    off, long-prefill thresholds, and KV from barely one request's worth (preemption,
    rejection) to plenty."""
    n = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.002, 0.01, 0.03, 0.2, 1.0]), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 600), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    caching = draw(st.booleans())
    groups = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)) if caching else None
    wl = Workload(
        np.cumsum(gaps),
        np.array(prompts, np.int64),
        np.array(outputs, np.int64),
        prefix_group=None if groups is None else np.array(groups, np.int64),
        prefix_len=draw(st.sampled_from([0, 16, 100, 256])),
    )
    max_model_len = draw(st.sampled_from([1024, 1024, 256]))
    block_size = draw(st.sampled_from([1, 16, 32]))
    chunked = draw(st.booleans())
    if chunked:
        budget = draw(st.sampled_from([16, 64, 512, 2048]))
        threshold = draw(st.sampled_from([0, 0, 32, 256]))
    else:  # vLLM requires the budget to hold the longest sequence without chunking
        budget, threshold = draw(st.sampled_from([max_model_len, 4096])), 0
    engine = EngineConfig(
        block_size=block_size,
        max_num_seqs=draw(st.integers(1, 32)),
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=threshold,
        enable_prefix_caching=caching,
        cpu_overhead_s=draw(st.sampled_from([0.0, 0.003])),
        scheduler_reserve_full_isl=draw(st.booleans()),
    )
    longest = max(min(p + o, max_model_len) for p, o in zip(prompts, outputs, strict=True))
    blocks = -(-longest // block_size) + 1 + draw(st.sampled_from([0, 2, 10, 100, 5000]))
    return wl, engine, blocks, max_model_len, draw(st.sampled_from(["constant", "roofline"]))


@settings(max_examples=60, deadline=None)
@given(differential_cases())
def test_generated_cases(case) -> None:
    """The fast engine makes the reference's decisions on generated cases, timed by a constant
    step model or by the roofline (whose decode runs the lazy engine times in closed form)."""
    wl, engine, blocks, max_model_len, timing = case
    perf = roofline() if timing == "roofline" else ConstantPerfModel(0.01, 2e-5)
    assert_same(wl, engine, blocks, perf=perf, max_model_len=max_model_len)


@functools.cache
def roofline() -> RooflinePerfModel:
    return RooflinePerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM"))


@settings(max_examples=30, deadline=None)
@given(differential_cases(), st.integers(1, 3), st.integers(0, 1000))
def test_generated_cases_with_tenants(case, k: int, seed: int) -> None:
    """Generated cases again, the reference given tenants: FCFS over per-tenant FIFOs, and
    VTC over one tenant, both decide as the lazy FCFS engine."""
    wl, engine, blocks, max_model_len, _ = case
    tenants = with_tenants(wl, np.random.default_rng(seed).integers(0, k, len(wl)), k)
    perf = ConstantPerfModel(0.01, 2e-5)
    assert_same(
        wl, engine, blocks, perf=perf, max_model_len=max_model_len, ref_wl=tenants, ref_tenants=counted(k)
    )
    assert_same(
        wl,
        engine,
        blocks,
        perf=perf,
        max_model_len=max_model_len,
        ref_engine=engine.model_copy(update={"scheduling_policy": "vtc"}),
    )
