"""MLA's prefill attention from the measured MLA attention module (``perf/kernel_mla.py``)."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.perf.base import BatchStats
from servesim.perf.kernel_attention import gqa_roof
from servesim.perf.kernel_layers import MLA_PROJECTIONS
from servesim.perf.kernel_mla import module_series
from servesim.perf.kernel_model import KernelPerfModel


def _prefill(pm: KernelPerfModel, prompts: int, length: int) -> dict[str, float]:
    return pm.breakdown(
        BatchStats(
            num_prefill_tokens=prompts * length,
            prefill_attn_work=prompts * length**2 / 2,
            num_prefill_reqs=prompts,
        )
    )


def _projections(pm: KernelPerfModel, tokens: int) -> float:
    """Seconds of one layer's five MLA projections at ``tokens`` (their own table curves)."""
    t = np.array([float(tokens)])
    return sum(float(c.at_many(t)[0]) for n, c, _ in pm._token_ops if n in MLA_PROJECTIONS)


@pytest.mark.parametrize(
    ("name", "gpu", "tp", "kv", "heads"),
    [
        ("nvidia/Kimi-K2.5-NVFP4", "B200", 4, "fp8", 16),  # its FP8 KV cache; attention in bf16
        ("moonshotai/Kimi-K2.5", "H200", 8, "bfloat16", 8),
    ],
)
def test_the_prefill_attention_is_the_measured_module_less_its_projections(name, gpu, tp, kv, heads):
    m, g = load_model(name), get_gpu(gpu)
    pm = KernelPerfModel(m, g, tp=tp)
    folder = {"B200": "b200_sxm", "H200": "h200_sxm"}[gpu]
    assert pm.sources["attn_prefill"] == (
        f"table mla_context_module {folder} vLLM 0.19.0 {kv} KV bfloat16 heads={heads}, less its projections"
    )
    assert "attn_prefill" not in pm.fallbacks
    s = module_series(m, g, tp, kv, "bfloat16")
    assert s is not None
    for prompts, length in ((1, 1024), (4, 8192), (16, 256)):
        ms = s["latency_ms"][s["batch"].index(prompts)][s["isl"].index(length)]
        want = m.num_layers * (ms * 1e-3 - _projections(pm, prompts * length))
        assert _prefill(pm, prompts, length)["attn_prefill"] == pytest.approx(want, rel=1e-6)
    # a 1k prompt: the module's attention and small kernels are over 10x what the roofline
    # gave the attention alone (0.11-0.12 ms a layer against 0.006-0.007 ms): the norms,
    # rotary, cache write and split of the up-projected keys the GQA tables do not hold
    roof = gqa_roof("ctx", g, pm.eff, pm.kv_dtype_bytes, m.head_dim)
    alone = float(roof(np.array([1.0]), np.array([1024.0]), heads, heads)[0])
    assert _prefill(pm, 1, 1024)["attn_prefill"] / m.num_layers > 10 * alone


def test_the_measured_module_exceeds_its_projections_at_all_but_one_point():
    # DeepSeek-V3's own shape at every packed GPU, KV dtype, GEMM dtype and head count: the
    # module less the projections' own tables leaves positive time at every measured point
    # but one (H200, 128 heads, block-FP8, one token: 0.133 ms against 0.138), which takes
    # the attention's FLOPs at the GPU's peak instead
    raw = json.loads(resources.files("servesim").joinpath("data", "kernels", "mla_context.json").read_text())
    base = load_model("deepseek-ai/DeepSeek-V3")
    gpus = {"b200_sxm": "B200", "h200_sxm": "H200", "h100_sxm": "H100-SXM"}
    points, below = 0, []
    for folder, table in raw["gpus"].items():
        for key, s in table["series"].items():
            kv, gemm, heads = key.split("|")
            dtype = {"bfloat16": "bfloat16", "fp8_block": "fp8", "nvfp4": "nvfp4"}[gemm]
            qm = "fp8_block" if gemm == "fp8_block" else ("nvfp4" if gemm == "nvfp4" else "")
            m = replace(base, dtype=dtype, quant_method=qm, num_attention_heads=int(heads))
            pm = KernelPerfModel(m, get_gpu(gpus[folder]), tp=1, kv_dtype_bytes=1.0 if kv == "fp8" else 2.0)
            assert pm.sources["attn_prefill"].startswith("table mla_context_module"), (folder, key)
            for b, row in zip(s["batch"], s["latency_ms"]):
                for length, ms in zip(s["isl"], row):
                    if ms is not None:
                        points += 1
                        if ms * 1e-3 <= _projections(pm, b * length):
                            below.append((folder, key, b, length))
    # 112 series of up to 9 x 18 (prompts, length) points, none above 131,072 tokens
    assert points == 13627 and below == [("h200_sxm", "bfloat16|fp8_block|128", 1, 1)]


def test_another_mla_shape_or_gpu_keeps_the_roofline():
    kimi = load_model("moonshotai/Kimi-K2.5")
    # no module table on A100; another latent size; heads the collector did not measure
    assert KernelPerfModel(kimi, get_gpu("A100-80GB"), tp=8).sources["attn_prefill"].startswith("roofline")
    other = replace(kimi, kv_lora_rank=256)
    assert module_series(other, get_gpu("B200"), 4, "bfloat16", "bfloat16") is None
    b200 = get_gpu("B200")
    assert module_series(replace(kimi, num_attention_heads=96), b200, 4, "bfloat16", "bfloat16") is None
    # B300 reads B200's tables
    assert (
        KernelPerfModel(kimi, get_gpu("B300"), tp=4)
        .sources["attn_prefill"]
        .startswith("table mla_context_module b200_sxm")
    )
