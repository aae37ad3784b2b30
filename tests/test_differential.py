"""The fast (lazy) engine against the step-by-step reference engine.

The lazy scheduler must make exactly the reference's decisions: identical first-scheduled,
first-token and finish times (up to float rounding of summed step times), identical
preemptions and prefix-cache hits, on Poisson and bursty traffic, short and long prompts,
prefix caching on and off, KV pressure with preemption, and slices of the real traces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig
from servesim.perf.base import ConstantPerfModel
from servesim.perf.roofline import RooflinePerfModel
from servesim.sim import run_engine
from servesim.workload.base import Workload

MOONCAKE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_1000.jsonl.gz"


def synthetic(seed: int, n: int, rate: float, prompt_max: int = 1024, out_max: int = 256,
              groups: int = 0, cv: float = 1.0) -> Workload:
    rng = np.random.default_rng(seed)
    shape = 1 / cv**2
    gaps = rng.gamma(shape, 1 / (rate * shape), n)
    group = rng.integers(-1, groups, n) if groups else None
    return Workload(np.cumsum(gaps), rng.integers(1, prompt_max, n), rng.integers(1, out_max, n),
                    prefix_group=group, prefix_len=256)


def assert_same(wl: Workload, engine: EngineConfig, blocks: int, perf=None, max_model_len: int = 4096):
    perf = perf or ConstantPerfModel(0.01, 2e-5)
    ref = run_engine(wl, engine, perf, blocks, max_model_len, reference=True)
    fast = run_engine(wl, engine, perf, blocks, max_model_len, reference=False)
    a, b = ref.records, fast.records
    for col in ("first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_allclose(getattr(b, col), getattr(a, col), rtol=1e-9, atol=1e-9, err_msg=col)
    for col in ("num_preemptions", "num_cached_tokens", "num_output_tokens", "status"):
        np.testing.assert_array_equal(getattr(b, col), getattr(a, col), err_msg=col)
    assert len(fast.steps) == len(ref.steps)
    fast_steps, ref_steps = fast.steps.columns(), ref.steps.columns()
    for col in ("kv_blocks_used", "num_waiting", "num_running", "num_prefill_tokens", "num_decode_reqs",
                "num_preempted"):
        np.testing.assert_array_equal(fast_steps[col], ref_steps[col], err_msg=col)
    np.testing.assert_allclose(fast_steps["start_s"], ref_steps["start_s"], rtol=1e-9, atol=1e-9)
    assert fast.totals.num_prefix_hit_tokens == ref.totals.num_prefix_hit_tokens
    for col in ("busy_s", "gpu_s", "flops", "bytes", "kv_block_s"):  # runs are accounted in bulk
        np.testing.assert_allclose(getattr(fast.totals, col), getattr(ref.totals, col), rtol=1e-9,
                                   err_msg=col)
    assert (fast.totals.num_steps, fast.totals.peak_kv_blocks, fast.totals.num_preemptions) == (
        ref.totals.num_steps, ref.totals.peak_kv_blocks, ref.totals.num_preemptions)
    assert sum(fast.itl.count) == sum(ref.itl.count)
    return ref


def test_poisson_no_pressure():
    assert_same(synthetic(0, 400, 10), EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024), 4000)


def test_bursty_with_preemption():
    ref = assert_same(synthetic(1, 500, 20, cv=3),
                      EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024), 500)
    assert ref.records.num_preemptions.sum() > 0  # the case really exercises preemption


def test_prefix_caching_with_pressure():
    ref = assert_same(synthetic(2, 500, 20, groups=5),
                      EngineConfig(max_num_seqs=64, max_num_batched_tokens=512, block_size=16), 600)
    assert ref.totals.num_prefix_hit_tokens > 0 and ref.records.num_preemptions.sum() > 0


def test_chunked_prefill_off_and_long_prefill_threshold():
    assert_same(synthetic(3, 400, 20), EngineConfig(max_num_seqs=32, max_num_batched_tokens=2048,
                                                    enable_chunked_prefill=False), 600)
    assert_same(synthetic(4, 400, 15, prompt_max=3000),
                EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024,
                             long_prefill_token_threshold=256), 3000)


@pytest.mark.parametrize("block_size", [1, 32, 128])
def test_block_sizes(block_size):
    blocks = 20000 // block_size + 2
    assert_same(synthetic(5, 200, 20), EngineConfig(block_size=block_size, max_num_seqs=16,
                                                    max_num_batched_tokens=512), blocks)


def test_roofline_timed_low_load():
    """Long idle-free decode runs at low load: the skip-ahead path dominates."""
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    assert_same(synthetic(6, 300, 2, out_max=600),
                EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192),
                20000, perf=perf)


def test_kernel_timed_low_load():
    """The default step model (measured kernels): decode runs time their steps from the
    model's per-pool-size terms (``decode_terms``), equal to its ``batch_time``."""
    from servesim.perf.kernel_model import KernelPerfModel

    perf = KernelPerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM"))
    assert_same(synthetic(6, 300, 2, out_max=600),
                EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192),
                20000, perf=perf)


def test_azure_slice_at_high_rate():
    from servesim.workload.traces import read_trace, select

    wl = select(read_trace("builtin:azure_conv"),
                rate_scale=10.0, start_s=None, end_s=None, limit=800)
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"))
    assert_same(wl, EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192), 3000, perf=perf,
                max_model_len=16384)


def test_mooncake_slice_prefix_caching():
    from servesim.workload.traces import read_trace, select

    wl = select(read_trace(MOONCAKE),
                rate_scale=0.05, start_s=None, end_s=None, limit=150)
    model = load_model("meta-llama/Llama-3.1-8B")
    perf = RooflinePerfModel(model, get_gpu("H100-SXM"), tp=1)
    ref = assert_same(wl, EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096), 12000, perf=perf,
                      max_model_len=131072)
    assert ref.totals.num_prefix_hit_tokens > 0


def test_streaming_mode_keeps_the_results_without_the_step_series():
    """record_steps=False (long runs): same records and totals, no step rows, the same ITL
    distribution."""
    from servesim.metrics.summary import distribution

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

    wl = load_workload(BenchmarkWorkload(num_prompts=300, input_len=600, output_len=120,
                                         random_range_ratio=0.8, max_concurrency=24, num_warmups=3,
                                         request_rate=30.0, burstiness=0.5))
    ref = assert_same(wl, EngineConfig(max_num_seqs=32, max_num_batched_tokens=512), 500)
    assert ref.records.num_preemptions.sum() > 0
