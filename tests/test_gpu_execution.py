"""vLLM's GPU execution: CUDA-graph capture sizes and padding, launch costs by graph mode,
async scheduling's overlap of host and GPU time, and the version defaults behind them."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig, resolve_engine
from servesim.config.engine_defaults import async_default
from servesim.perf.base import BatchStats, ConstantPerfModel, step_wall_s
from servesim.perf.cuda_graphs import EAGER, EAGER_PLAN, FULL, PIECEWISE, graph_plan
from servesim.perf.factory import kernel_version_for
from servesim.perf.kernel_model import EAGER_HOST_S_PER_LAYER, KernelPerfModel
from servesim.perf.roofline import RooflinePerfModel
from servesim.sim import run_engine
from tests.test_differential import assert_same, synthetic

LLAMA = "meta-llama/Llama-3.1-8B"


# ----------------------------------------------------------------- capture sizes


def test_capture_sizes_as_vllm_computes_them():
    g = graph_plan("0.19.0", max_num_seqs=1024, max_num_batched_tokens=8192)
    want = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert list(g.capture_sizes) == want and g.max_size == 512 and g.full_decode
    # max_cudagraph_capture_size = min(max_num_seqs * 2, 512): 8 sequences capture up to 16.
    assert graph_plan("0.19.0", 8, 8192).capture_sizes == (1, 2, 4, 8, 16)
    assert graph_plan("0.19.0", 1024, 100).max_size == 96  # and never above the token budget
    assert graph_plan("0.19.0", 1024, 8192, enforce_eager=True) is EAGER_PLAN
    old = graph_plan("0.10.1", 1024, 8192)  # PIECEWISE only, every multiple of 8 to 512
    assert not old.full_decode and old.capture_sizes[-2:] == (504, 512)


def test_capture_size_flag_and_graph_modes():
    # --max-cudagraph-capture-size 2048: sizes by 16 from 256 to 2048, capped by the budget.
    g = graph_plan("0.19.0", 4, 8192, max_capture_size=2048)
    assert g.max_size == 2048 and g.capture_sizes[-2:] == (2032, 2048) and 1040 in g.capture_sizes
    assert graph_plan("0.19.0", 4, 1024, max_capture_size=2048).max_size == 1024
    assert graph_plan("0.19.0", 4, 8192).max_size == 8  # without the flag: 2 x max_num_seqs
    # cudagraph_mode: FULL_DECODE_ONLY runs every step with a prefill eager; PIECEWISE has no
    # full graph; NONE captures nothing.
    fdo = graph_plan("0.19.0", 512, 8192, mode="full_decode_only")
    assert fdo.full_decode and not fdo.mixed and fdo.mixed_max_size == 0 and fdo.max_size == 512
    assert fdo.mode(32, True) == FULL and fdo.mode(32, False) == EAGER
    pw = graph_plan("0.19.0", 512, 8192, mode="piecewise")
    assert not pw.full_decode and pw.mixed and pw.mode(32, True) == PIECEWISE
    assert graph_plan("0.19.0", 512, 8192, mode="none") is EAGER_PLAN


def test_full_decode_only_steps_with_a_prefill_are_eager():
    # Llama-3.1-70B fp4 as InferenceMAX served it on B200 (FULL_DECODE_ONLY): a 1k-token
    # prefill step inside the capture range pays the eager launches and the host floor,
    # while under FULL_AND_PIECEWISE with a 2048 capture size it replays piecewise graphs.
    m, g = load_model("meta-llama/Llama-3.1-70B"), get_gpu("B200")
    fdo = KernelPerfModel(m, g, tp=8, graphs=graph_plan("0.19.0", 512, 8192, mode="full_decode_only"))
    fap = KernelPerfModel(m, g, tp=8, graphs=graph_plan("0.19.0", 512, 8192, max_capture_size=2048))
    mixed = BatchStats(
        num_prefill_tokens=1024,
        prefill_attn_work=1024 * 512.0,
        num_prefill_reqs=1,
        num_decode_reqs=3,
        sum_decode_context=3 * 1500,
    )
    assert fdo.batch_time(mixed) == pytest.approx(80 * EAGER_HOST_S_PER_LAYER)  # the floor binds
    assert fdo.breakdown(mixed)["overhead"] == pytest.approx(fdo._c_eager)
    assert fap.breakdown(mixed)["overhead"] == pytest.approx(fap._c_piece)
    assert fap.batch_time(mixed) < 0.6 * fdo.batch_time(mixed) and fap.eager_floor > 0
    # a pure decode step replays the full graph in both
    dec = BatchStats(num_decode_reqs=64, sum_decode_context=64 * 1500)
    assert fdo.batch_time(dec) == pytest.approx(fap.batch_time(dec), rel=1e-12)
    assert fdo.breakdown(dec)["overhead"] == pytest.approx(fdo.eff.launch_overhead_s)


def test_host_floor_scales_with_each_layers_kernels():
    # The floor is per kernel a layer launches eagerly, fitted per dense GQA layer (Llama's):
    # Llama 4 attention + 2 norms + 3 MLP (+2 all-reduces under TP) = 9 / 11; Kimi-K2.5 (MLA,
    # 60 of 61 layers MoE with a shared expert) 10 + 2 + (60 x 10 + 3) / 61 (+2);
    # MiniMax-M2.5 4 + 2 + 2 q/k norms + 7 (+2 + its q/k all-reduce); gpt-oss 4 + 2 + 7 (+2).
    from servesim.perf.cuda_graphs import eager_kernels_per_layer

    cases = {
        "meta-llama/Llama-3.1-70B": (9, 11),
        "moonshotai/Kimi-K2.5": (12 + 603 / 61, 14 + 603 / 61),
        "MiniMaxAI/MiniMax-M2.5": (15, 18),
        "openai/gpt-oss-120b": (13, 15),
    }
    for name, (tp1, tp8) in cases.items():
        m = load_model(name)
        assert eager_kernels_per_layer(m, 1) == pytest.approx(tp1), name
        assert eager_kernels_per_layer(m, 8) == pytest.approx(tp8), name
    # Expert parallelism inside the TP group adds no kernel; four DP ranks gather and scatter
    # their tokens around each MoE layer: 15 + 2.
    assert eager_kernels_per_layer(load_model("MiniMaxAI/MiniMax-M2.5"), 1, dp=4) == pytest.approx(17)
    g = graph_plan("0.19.0", 512, 8192)
    kimi = KernelPerfModel(load_model("moonshotai/Kimi-K2.5"), get_gpu("B200"), tp=8, graphs=g)
    assert kimi.eager_floor == pytest.approx(61 * EAGER_HOST_S_PER_LAYER * (14 + 603 / 61) / 11)


def test_padding_table_and_modes():
    g = graph_plan("0.19.0", 1024, 8192)
    pad = g.padded_sizes()
    assert pad[9] == 16 and pad[16] == 16 and pad[3] == 4 and pad[257] == 272 and len(pad) == 513
    assert all(pad[t] >= t and pad[t] in g.capture_sizes for t in range(1, 513))
    assert g.mode(9, True) == FULL and g.mode(9, False) == PIECEWISE and g.mode(513, True) == EAGER
    assert EAGER_PLAN.padded_sizes() == [] and EAGER_PLAN.mode(1, True) == EAGER


# ----------------------------------------------------------------- the roofline


def _roof(graphs=None, **kw):
    return RooflinePerfModel(load_model(LLAMA), get_gpu("H100-SXM"), graphs=graphs, **kw)


def test_decode_of_9_is_timed_as_16_in_a_graph():
    g = graph_plan("0.19.0", 1024, 8192)
    pm, eager = _roof(g), _roof()
    nine = pm.breakdown(BatchStats(num_decode_reqs=9, sum_decode_context=9 * 500))
    sixteen = eager.breakdown(BatchStats(num_decode_reqs=16, sum_decode_context=9 * 500))
    for k in ("proj", "mlp", "elementwise"):  # the GEMMs and norms run 16 rows
        assert nine[k] == pytest.approx(sixteen[k], rel=1e-12)
    # attention, the LM head and sampling see the 9 real requests
    ref9 = eager.breakdown(BatchStats(num_decode_reqs=9, sum_decode_context=9 * 500))
    for k in ("attn_decode", "lm_head", "sampling"):
        assert nine[k] == pytest.approx(ref9[k], rel=1e-12)
    assert sum(nine.values()) == pytest.approx(
        pm.batch_time(BatchStats(num_decode_reqs=9, sum_decode_context=4500))
    )


def test_launch_costs_by_graph_mode():
    g = graph_plan("0.19.0", 1024, 8192)
    pm, eager = _roof(g), _roof()
    e, L = pm.eff, pm.model.num_layers
    dec = BatchStats(num_decode_reqs=32, sum_decode_context=32 * 1000)
    mixed = BatchStats(
        num_prefill_tokens=100,
        prefill_attn_work=5000.0,
        num_prefill_reqs=1,
        num_decode_reqs=31,
        sum_decode_context=31 * 1000,
    )
    big = BatchStats(num_prefill_tokens=2000, prefill_attn_work=2e6, num_prefill_reqs=1)
    assert pm.breakdown(dec)["overhead"] == pytest.approx(e.launch_overhead_s)  # full graph: one launch
    assert pm.breakdown(mixed)["overhead"] == pytest.approx(e.launch_overhead_s + L * e.kernel_overhead_s)
    assert pm.breakdown(big)["overhead"] == eager.breakdown(big)["overhead"]  # above 512 tokens: eager
    assert eager.breakdown(dec)["overhead"] == pytest.approx(
        e.launch_overhead_s + L * 10 * e.kernel_overhead_s
    )
    saved = eager.batch_time(dec) - pm.batch_time(dec)  # 32 is a capture size: launches only
    assert saved == pytest.approx(L * 10 * e.kernel_overhead_s, rel=1e-9)
    assert pm.batch_time(big) == eager.batch_time(big)
    # the decode fast paths agree with batch_time under graphs
    a, b, c, d = pm.decode_affine(9)
    s = 9 * 700
    assert a + max(b * s, c * s + d) == pytest.approx(
        pm.batch_time(BatchStats(num_decode_reqs=9, sum_decode_context=s))
    )
    got = pm.decode_step_times(9, np.array([float(s)]))[0]
    assert got == pytest.approx(pm.batch_time(BatchStats(num_decode_reqs=9, sum_decode_context=s)))


# ----------------------------------------------------------------- the kernel model


def _kernels(graphs=None, tp=1):
    return KernelPerfModel(load_model(LLAMA), get_gpu("H100-SXM"), tp=tp, graphs=graphs)


def test_kernel_model_pads_gemm_m_and_picks_the_allreduce_backend():
    g = graph_plan("0.19.0", 1024, 8192)
    pm, eager = _kernels(g, tp=2), _kernels(tp=2)
    st9 = BatchStats(num_decode_reqs=9, sum_decode_context=9 * 800)
    st16 = BatchStats(num_decode_reqs=16, sum_decode_context=16 * 800)
    p9, e16, e9 = pm.breakdown(st9), eager.breakdown(st16), eager.breakdown(st9)
    for k in ("gemm_qkv", "gemm_o_proj", "gemm_gate_up", "gemm_down", "allreduce"):
        assert p9[k] == pytest.approx(e16[k], rel=1e-9), k  # GEMM m = 16
    assert p9["attn_decode"] == pytest.approx(e9["attn_decode"], rel=1e-9)
    assert p9["overhead"] == pytest.approx(pm.eff.launch_overhead_s)
    assert sum(p9.values()) == pytest.approx(pm.batch_time(st9), rel=1e-12)
    assert pm.decode_step_times(9, np.array([9 * 800.0]))[0] == pytest.approx(pm.batch_time(st9), rel=1e-9)
    # enforce_eager: every all-reduce from the eager custom all-reduce table
    ea = _kernels(graph_plan("0.19.0", 1024, 8192, enforce_eager=True), tp=2)
    assert ea.breakdown(st16)["allreduce"] != pytest.approx(p9["allreduce"], rel=1e-3)
    assert ea.breakdown(st16)["overhead"] == pytest.approx(
        ea.eff.launch_overhead_s + 32 * 10 * ea.eff.kernel_overhead_s
    )


def test_a_step_without_graphs_lasts_at_least_the_host_launches():
    """Above the largest capture size vLLM runs the layers eagerly: the step lasts the GPU's
    time or the host's L x EAGER_HOST_S_PER_LAYER, whichever is longer; graph steps are
    untouched, and the floor is a lower bound, not an addition."""
    g = graph_plan("0.19.0", 1024, 8192)
    floor, off = (
        _kernels(g),
        KernelPerfModel(load_model(LLAMA), get_gpu("H100-SXM"), graphs=g, eager_host_s_per_layer=0.0),
    )
    assert floor.eager_floor == pytest.approx(32 * EAGER_HOST_S_PER_LAYER)
    small = BatchStats(num_prefill_tokens=400, num_prefill_reqs=1, prefill_attn_work=400 * 200)
    assert floor.batch_time(small) == off.batch_time(small)  # 400 tokens: a piecewise graph
    short = BatchStats(num_prefill_tokens=600, num_prefill_reqs=1, prefill_attn_work=600 * 300)
    assert off.batch_time(short) < floor.eager_floor  # an 8B model's 600 tokens: host-bound
    assert floor.batch_time(short) == floor.eager_floor
    bd = floor.breakdown(short)
    assert bd["eager_host"] == pytest.approx(floor.eager_floor - off.batch_time(short), rel=1e-9)
    assert sum(bd.values()) == pytest.approx(floor.batch_time(short), rel=1e-12)
    long = BatchStats(num_prefill_tokens=8000, num_prefill_reqs=1, prefill_attn_work=8000 * 4000)
    assert off.batch_time(long) > floor.eager_floor  # GPU-bound: unchanged
    assert floor.batch_time(long) == off.batch_time(long)
    # Pure decodes above the capture size (1024 clients): batch_time per step, and the
    # vectorized decode times agree with it.
    n = 600
    assert floor.decode_terms(n) is None and off.decode_terms(n) is not None
    ctx = np.array([n * 10.0, n * 3000.0])
    want = [floor.batch_time(BatchStats(num_decode_reqs=n, sum_decode_context=int(c))) for c in ctx]
    assert floor.decode_step_times(n, ctx) == pytest.approx(want, rel=1e-9)
    assert min(want) >= floor.eager_floor
    # No plan (operators as measured, eager, outside an engine): no floor.
    assert _kernels().eager_floor == 0.0


def test_minimax_qk_norm_allreduce_per_layer():
    """MiniMax-M2.5 under TP: one more all-reduce per layer, of the q and k variances (two
    fp32 per token), from the same custom all-reduce table; none at TP 1."""
    m = load_model("MiniMax-M2.5")
    tp4 = KernelPerfModel(m, get_gpu("H200"), tp=4, graphs=graph_plan("0.19.0", 1024, 8192))
    st = BatchStats(num_decode_reqs=8, sum_decode_context=8 * 1000)
    bd = tp4.breakdown(st)
    ar = tp4._allreduce(4)
    assert bd["allreduce_qk_norm"] == pytest.approx(62 * ar.at(8.0), rel=1e-12)
    assert 0 < bd["allreduce_qk_norm"] < bd["allreduce"]  # 4 elements a token against 3072, half as many
    assert "allreduce_qk_norm" not in KernelPerfModel(m, get_gpu("H200"), tp=1).breakdown(st)


def test_fp8_checkpoints_pick_their_gemm_tables():
    block = KernelPerfModel(load_model("Qwen/Qwen3-32B-FP8"), get_gpu("H100-SXM"))
    assert block.sources["gemm_qkv"].startswith("table gemm fp8_block")
    tensor = KernelPerfModel(load_model("nvidia/Llama-3.1-70B-Instruct-FP8"), get_gpu("H100-SXM"), tp=4)
    assert tensor.sources["gemm_qkv"].startswith("table gemm fp8 ")
    assert tensor.sources["attn_decode"].startswith("table gen fp8 KV")  # the checkpoint's FP8 KV cache


# ----------------------------------------------------------------- async scheduling


def test_step_wall_time_overlaps_with_async_scheduling():
    assert step_wall_s(0.010, 0.003, False) == pytest.approx(0.013)
    assert step_wall_s(0.010, 0.003, True) == 0.010
    assert step_wall_s(0.002, 0.003, True) == 0.003


@pytest.mark.parametrize("cpu", [0.003, 0.02])
def test_async_steps_last_max_of_gpu_and_cpu(cpu):
    wl = synthetic(11, 50, 5, prompt_max=200, out_max=50)
    eng = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, cpu_overhead_s=cpu, async_scheduling=True)
    for reference in (True, False):
        run = run_engine(wl, eng, ConstantPerfModel(0.01), 2000, 4096, reference=reference)
        d = np.asarray(run.steps.columns()["duration_s"])
        np.testing.assert_allclose(d, max(0.01, cpu), rtol=1e-12)
        assert run.totals.gpu_s == pytest.approx(0.01 * run.totals.num_steps, rel=1e-9)


def test_host_time_grows_with_the_requests_of_a_step():
    # cpu_overhead_s + cpu_overhead_per_req_s per scheduled request; with async scheduling a
    # step lasts the larger of that and the GPU's 5 ms. Decode steps: n = num_decode_reqs.
    wl = synthetic(11, 60, 5, prompt_max=200, out_max=80)
    eng = EngineConfig(
        max_num_seqs=8,
        max_num_batched_tokens=512,
        cpu_overhead_s=0.003,
        cpu_overhead_per_req_s=0.0005,
        async_scheduling=True,
    )
    for reference in (True, False):
        run = run_engine(wl, eng, ConstantPerfModel(0.005), 2000, 4096, reference=reference)
        c = run.steps.columns()
        dec = c["num_prefill_tokens"] == 0
        want = np.maximum(0.005, 0.003 + 0.0005 * c["num_decode_reqs"][dec])
        np.testing.assert_allclose(c["duration_s"][dec], want, rtol=1e-12)
        assert (want > 0.005).any() and (want == 0.005).any()  # both regimes occur
    assert_same(wl, eng, 2000)  # the lazy engine's decode runs add it as the reference does


def test_host_time_per_request_defaults():
    gpu = resolve_engine(EngineConfig(), 80 * 2**30, "H100-SXM")
    from servesim.config.engine_defaults import CPU_PER_REQ_S

    assert gpu.cpu_overhead_per_req_s == CPU_PER_REQ_S == pytest.approx(33e-6)
    assert resolve_engine(EngineConfig(), 64 * 2**30, "cpu-epyc").cpu_overhead_per_req_s == 0.0
    assert resolve_engine(EngineConfig(policy="orca"), 80 * 2**30, "H100-SXM").cpu_overhead_per_req_s == 0.0
    assert (
        resolve_engine(
            EngineConfig(cpu_overhead_per_req_s=1e-5), 80 * 2**30, "H100-SXM"
        ).cpu_overhead_per_req_s
        == 1e-5
    )


def test_differential_with_async_scheduling_and_graphs():
    pm = _roof(graph_plan("0.19.0", 64, 1024))
    wl = synthetic(12, 300, 8, out_max=600)
    eng = EngineConfig(
        max_num_seqs=64, max_num_batched_tokens=1024, cpu_overhead_s=0.006, async_scheduling=True
    )
    assert_same(wl, eng, 4000, perf=pm)
    assert_same(wl, eng.model_copy(update={"cpu_overhead_s": 0.02}), 4000)  # the CPU binds


@pytest.mark.parametrize("scalar_steps", [1, 5])
def test_numpy_chunks_with_async_scheduling(monkeypatch: pytest.MonkeyPatch, scalar_steps: int) -> None:
    from servesim.engine import decode_runs

    monkeypatch.setattr(decode_runs, "SCALAR_STEPS", scalar_steps)
    pm = _kernels(graph_plan("0.19.0", 32, 1024))  # not affine: vectorized decode_step_times
    wl = synthetic(7, 200, 4, prompt_max=512, out_max=1200)
    assert_same(
        wl,
        EngineConfig(
            max_num_seqs=32, max_num_batched_tokens=1024, cpu_overhead_s=0.009, async_scheduling=True
        ),
        600,
        perf=pm,
    )


@pytest.mark.parametrize("reference", [True, False])
def test_async_scheduling_admits_an_arrival_one_step_later(reference: bool) -> None:
    """vLLM's step_with_batch_queue schedules step k+1 while step k runs: a request arriving
    during step k is scheduled into step k+2 (sync: k+1); an idle engine takes it at once."""
    from servesim.workload.base import Workload

    # request 0 decodes alone in 10 ms steps; request 1 arrives 15 ms in (inside its second step)
    wl = Workload(np.array([0.0, 0.015]), np.array([16, 16]), np.array([40, 4]))
    firsts = {}
    for mode in (False, True):
        eng = EngineConfig(
            max_num_seqs=8, max_num_batched_tokens=256, cpu_overhead_s=0.0, async_scheduling=mode
        )
        res = run_engine(wl, eng, ConstantPerfModel(0.01, 0.0), 100, 4096, reference=reference)
        starts = np.asarray(res.steps.columns()["start_s"])
        after = starts[starts > 0.015]
        firsts[mode] = res.records.first_scheduled_s[1]
        assert firsts[mode] == pytest.approx(after[1] if mode else after[0])
        assert res.records.first_scheduled_s[0] == 0.0  # the idle engine's first arrival: at once
    assert firsts[True] == pytest.approx(firsts[False] + 0.01)  # one 10 ms step later


# ----------------------------------------------------------------- version defaults


def test_async_default_by_version_policy_and_device():
    on = EngineConfig()
    assert on.version == "0.19.0" and async_default(on, on_gpu=True)
    assert not async_default(EngineConfig(version="0.13.0"), True)
    assert async_default(EngineConfig(version="0.14"), True)
    assert not async_default(EngineConfig(version="0.14.1"), True, pipeline_parallel_size=2)
    assert async_default(EngineConfig(version="0.15.1"), True, pipeline_parallel_size=2)
    assert not async_default(EngineConfig(policy="sarathi"), True)
    assert not async_default(on, on_gpu=False)
    assert resolve_engine(on, 80e9, "H100-SXM").async_scheduling is True
    assert resolve_engine(on, 8e9, "cpu-epyc-1core").async_scheduling is False
    assert resolve_engine(on).async_scheduling is False  # no hardware (run_engine alone)
    assert resolve_engine(EngineConfig(async_scheduling=False), 80e9, "H100-SXM").async_scheduling is False
    with pytest.raises(ValueError):
        EngineConfig(version="latest")


def test_token_budget_default_by_gpu_memory_and_version():
    """vLLM's get_batch_defaults for the API server: 8192 on >= 70 GiB GPUs (not A100); the
    16384 tier for >= 160 GiB arrived in vLLM 0.28 (before it a B200 had 8192 too)."""
    from servesim.catalog.gpus import get_gpu

    def budget(version: str, gpu: str) -> tuple[int | None, int | None]:
        g = get_gpu(gpu)
        e = resolve_engine(EngineConfig(version=version), g.mem_bytes, g.name)
        return e.max_num_batched_tokens, e.max_num_seqs

    assert budget("0.19.0", "B200") == budget("0.27.0", "B300") == budget("0.19.0", "H200") == (8192, 1024)
    assert budget("0.28.0", "B200") == budget("0.28.0", "GB200") == (16384, 1024)
    assert budget("0.28.0", "H200") == (8192, 1024)  # 139.8 GiB: under the 160 GiB tier
    assert budget("0.28.0", "A100-80GB") == budget("0.19.0", "L40S") == (2048, 256)


def test_kernel_tables_nearest_at_or_below_the_version():
    assert kernel_version_for("0.19.0", "H100-SXM") == "0.19.0"
    assert kernel_version_for("0.21", "H100-SXM") == "0.19.0"
    assert kernel_version_for("0.15.1", "H100-SXM") == "0.14.0"
    assert kernel_version_for("0.12.0", "H100-SXM") == "0.14.0"  # none below: the oldest
    assert kernel_version_for("0.19.0", "B200") == "0.19.0"
    assert kernel_version_for("0.19.0", "A100-80GB") == "0.14.0"
    assert kernel_version_for("0.19.0", "MI300X") is None
