"""MiniMax-M2's fp32 MoE router (``ModelSpec.router_fp32``, ``KernelGemms._router``)."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.perf.kernel_gemms import FP32_ROUTER_SM100, FP32_ROUTER_SM100_K
from servesim.perf.kernel_model import KernelPerfModel


def _router(pm: KernelPerfModel):
    return {n: c for n, c, _ in pm._token_ops}["gemm_router"]


def test_only_minimax_m2_routes_in_fp32():
    assert load_model("MiniMaxAI/MiniMax-M2.5").router_fp32
    assert load_model("nvidia/MiniMax-M2.5-NVFP4").router_fp32
    for name in (
        "Qwen/Qwen3-235B-A22B",
        "openai/gpt-oss-120b",
        "moonshotai/Kimi-K2.5",
        "deepseek-ai/DeepSeek-V3",
        "mistralai/Mixtral-8x7B-v0.1",
    ):
        assert not load_model(name).router_fp32, name


@pytest.mark.parametrize("tokens", [4, 64, 1024])
def test_on_blackwell_the_router_takes_cublas_fp32_time_measured_on_gb200(tokens):
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    H = m.hidden_size
    pm = KernelPerfModel(m, get_gpu("B200"), tp=4)
    cast = tokens * H * 6.0 / (0.8 * pm.gpu.mem_bw)  # the cast's bytes, fused into the norm
    want = FP32_ROUTER_SM100[tokens][0] * 1e-6 * H / FP32_ROUTER_SM100_K + cast
    assert _router(pm).at(float(tokens)) == pytest.approx(want, rel=1e-9)
    tf32 = KernelPerfModel(m, get_gpu("B200"), tp=4, fp32_matmul="high")
    assert _router(tf32).at(float(tokens)) == pytest.approx(
        FP32_ROUTER_SM100[tokens][1] * 1e-6 * H / FP32_ROUTER_SM100_K + cast, rel=1e-9
    )
    assert "fp32 router" in pm.sources["gemm_router"] and "cuBLAS" in pm.sources["gemm_router"]


def test_the_fp32_router_costs_what_the_bf16_one_does_at_least():
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    xs = np.array([1.0, 8.0, 128.0, 4096.0, 65536.0])
    for gpu in ("H200", "B200"):
        pm = KernelPerfModel(m, get_gpu(gpu), tp=4)
        bf16 = pm._gemm("gemm_router_bf16", m.num_experts, m.hidden_size, "bfloat16")
        assert np.all(_router(pm).at_many(xs) >= bf16.at_many(xs))
    # on Hopper, the roofline at the fp32 peak: at 64k tokens the FLOPs at 0.7 of 67 TFLOP/s
    pm = KernelPerfModel(m, get_gpu("H200"), tp=4)
    flops = 2.0 * 65536 * m.num_experts * m.hidden_size
    assert _router(pm).at(65536.0) == pytest.approx(
        flops / (0.7 * 67e12) + 65536 * m.hidden_size * 6.0 / (0.8 * pm.gpu.mem_bw), rel=1e-6
    )


def test_the_measured_fp32_gemm_is_slow_at_small_batches():
    fp32 = [FP32_ROUTER_SM100[k][0] for k in sorted(FP32_ROUTER_SM100)]
    tf32 = [FP32_ROUTER_SM100[k][1] for k in sorted(FP32_ROUTER_SM100)]
    assert fp32[-1] > fp32[0] and tf32[-1] > tf32[0]
    assert all(t < f for t, f in zip(tf32[1:], fp32[1:]))  # TF32 faster from 4 tokens on
    assert FP32_ROUTER_SM100[32][0] > 3 * FP32_ROUTER_SM100[16][1]
