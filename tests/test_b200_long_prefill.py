"""An 8,192-token prefill of Llama-3.1-70B with NVFP4 linear layers and an FP8 KV cache on
B200 (the silicon suite's Llama-3.1-70B fp4 B200 deployment), operator by operator, against
the GPU's physics and the packed vLLM 0.19.0 tables it is read from (docs/fidelity.md,
"B200's 8k prefills, operator by operator"). Every figure is computed here from FLOPs,
bytes, the catalog's peaks and the tables' own entries."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.perf.base import BatchStats
from servesim.perf.cuda_graphs import graph_plan
from servesim.perf.kernel_model import EAGER_HOST_S_PER_LAYER, KernelPerfModel
from servesim.perf.kernels import load_database
from servesim.validate import silicon

T = 8192  # tokens of the prefill (one prompt, the step's whole budget)
L, H, HEADS, KV_HEADS, HEAD_DIM, FFN = 80, 8192, 64, 8, 128, 28672
B200 = get_gpu("B200")
# NVFP4 runs at twice the FP8 tensor rate on Blackwell (B200: 4.5 PFLOP/s FP8 dense, 9 NVFP4)
NVFP4_PEAK = 2 * B200.flops_for("fp8")


@pytest.fixture(scope="module")
def nvfp4_dir() -> Iterator[Path]:
    with silicon.nvfp4_configs({"meta-llama/Llama-3.1-70B"}) as tmp:
        yield tmp / "Llama-3.1-70B-NVFP4"


def _model(nvfp4_dir: Path, tp: int) -> KernelPerfModel:
    m = load_model(str(nvfp4_dir))
    assert (m.dtype, m.num_layers, m.hidden_size, m.intermediate_size) == ("nvfp4", L, H, FFN)
    # the launch script's server: FP8 KV cache, FULL_DECODE_ONLY graphs up to 512 tokens
    graphs = graph_plan("0.19.0", 512, 8192, mode="full_decode_only")
    return KernelPerfModel(m, B200, tp=tp, version="0.19.0", kv_dtype_bytes=1.0, graphs=graphs)


def _prefill(model: KernelPerfModel) -> dict[str, float]:
    return model.breakdown(BatchStats(num_prefill_tokens=T, prefill_attn_work=T * T / 2, num_prefill_reqs=1))


def test_nvfp4_gemm_table_times_the_activation_quantization() -> None:
    """AIConfigurator's collector times ``RowParallelLinear.forward`` of the NVFP4 layer, which
    quantizes its bf16 input (``scaled_fp4_quant``) before the GEMM: its table spends 3.09
    bytes an activation element beyond the bf16 GEMM of the same shape, more than the 2.5625
    the quantization moves (2 read, 0.5 written, one fp8 scale per 16): nothing to add."""
    db = load_database("B200", "0.19.0")
    moved = 2 + 0.5 + 1 / 16
    assert moved == 2.5625
    assert db.activation_quant_bytes("nvfp4", B200.mem_bw) == pytest.approx(3.0874, abs=1e-4)
    assert db.activation_quant_bytes("nvfp4", B200.mem_bw) > moved


@pytest.mark.parametrize(
    "tp, name, n, k, table_us",
    [
        (8, "gemm_gate_up", 2 * FFN // 8, H, 245.5),
        (8, "gemm_down", H, FFN // 8, 115.7),
        (8, "gemm_o_proj", H, HEADS * HEAD_DIM // 8, 57.4),
        (2, "gemm_qkv", (HEADS + 2 * KV_HEADS) * HEAD_DIM // 2, H, 175.0),
        (2, "gemm_o_proj", H, HEADS * HEAD_DIM // 2, 128.6),
        (1, "gemm_qkv", (HEADS + 2 * KV_HEADS) * HEAD_DIM, H, 350.6),
    ],
)
def test_gemms_are_the_tables_points_under_the_nvfp4_peak(
    nvfp4_dir: Path, tp: int, name: str, n: int, k: int, table_us: float
) -> None:
    """Where (8192, n, k) is a measured point, the step's GEMM is 80 x that point, and it runs
    at 0.27-0.50 of the NVFP4 dense peak (quantization included): none is faster than the
    GPU, none slow enough to hide tens of milliseconds."""
    table = load_database("B200", "0.19.0").gemm("nvfp4")
    assert table is not None
    ms, ns, ks, lat = table
    point_s = float(lat[list(ms).index(T), list(ns).index(n), list(ks).index(k)]) * 1e-3
    assert point_s * 1e6 == pytest.approx(table_us, abs=0.05)
    assert _prefill(_model(nvfp4_dir, tp))[name] == pytest.approx(L * point_s, rel=1e-9)
    util = 2.0 * T * n * k / point_s / NVFP4_PEAK
    assert 0.26 < util < 0.51


def test_prefill_attention_is_the_fp8_kv_table_under_the_bf16_peak(nvfp4_dir: Path) -> None:
    """TP 1 (64 query heads over 8 KV heads): the FP8-KV prefill table measures 783.8 us a
    layer at 8,192 tokens (FlashInfer's TRTLLM-gen context kernel, the query already FP8),
    4 x 64 x 128 x 8192^2 / 2 = 1.10 TFLOP: 1.40 PFLOP/s, 0.62 of the bf16 dense peak; the
    step charges 80 of them."""
    cls_table = load_database("B200", "0.19.0").attention_class("ctx", "fp8", HEAD_DIM, HEADS, KV_HEADS)
    assert cls_table is not None
    b, s, lat, cls = cls_table
    assert cls == (HEADS, KV_HEADS)
    layer_s = float(lat[0, list(s).index(T)]) * 1e-3
    assert layer_s * 1e6 == pytest.approx(783.8, abs=0.05)
    flops = 4.0 * HEADS * HEAD_DIM * T * T / 2
    assert flops == pytest.approx(1.0995e12, rel=1e-4)
    assert flops / layer_s / B200.flops_for("bfloat16") == pytest.approx(0.6234, abs=1e-3)
    assert _prefill(_model(nvfp4_dir, 1))["attn_prefill"] == pytest.approx(L * layer_s, rel=1e-6)


def test_the_work_every_rank_repeats_is_milliseconds(nvfp4_dir: Path) -> None:
    """What TP does not divide: the two RMS norms with their residuals (8 hidden rows of 2
    bytes a token and layer) and the NVFP4 quantization of the QKV and gate/up inputs
    (2 x 8192 x 2.5625 bytes). At TP 8 and 8,192 tokens that is 86.0 GB and 27.5 GB: 10.7
    and 3.4 ms at B200's 8 TB/s, where the measured 8k TTFTs keep about 45-60 ms at every
    TP degree. The elementwise term at TP 8 (norms, rotary, activation, embedding) is 12.67
    MB a token at 0.70 of the bandwidth plus 241 memory kernels x 3 us."""
    norms = L * 8 * H * 2 * T
    quant = L * 2 * H * 2.5625 * T
    assert norms / 1e9 == pytest.approx(85.90, abs=0.01)
    assert quant / 1e9 == pytest.approx(27.52, abs=0.01)
    assert norms / B200.mem_bw * 1e3 == pytest.approx(10.74, abs=0.01)
    assert quant / B200.mem_bw * 1e3 == pytest.approx(3.44, abs=0.01)
    q, kv, up, width = HEADS * HEAD_DIM // 8, KV_HEADS * HEAD_DIM // 8, 2 * FFN // 8, FFN // 8
    per_token = L * 2 * (8 * H + 2 * (q + kv) + up + width) + 6 * H * 2
    assert per_token == 12_673_024
    el = _prefill(_model(nvfp4_dir, 8))["elementwise"]
    assert el == pytest.approx(per_token * T / B200.mem_bw / 0.7 + 241 * 3e-6, rel=1e-3)


@pytest.mark.parametrize("tp, gpu_ms", [(1, 377.5), (2, 235.9), (4, 165.7), (8, 136.6)])
def test_the_8k_step_outlasts_the_host_floor(nvfp4_dir: Path, tp: int, gpu_ms: float) -> None:
    """FULL_DECODE_ONLY runs every step with a prefill without CUDA graphs, so the step lasts
    at least 80 x 0.8 ms = 64 ms of host launches; the kernels of an 8,192-token prefill take
    2.1-5.9 times that at every TP degree, so the floor does not bind: a TTFT gap the same at
    every TP degree is not this floor."""
    model = _model(nvfp4_dir, tp)
    assert model.eager_floor == pytest.approx(L * EAGER_HOST_S_PER_LAYER, rel=1e-12)
    assert model.eager_floor == pytest.approx(0.064, rel=1e-12)
    out = _prefill(model)
    assert "eager_host" in out and out["eager_host"] == 0.0
    assert sum(out.values()) * 1e3 == pytest.approx(gpu_ms, abs=0.05)
    assert sum(out.values()) > 2 * model.eager_floor


def test_nothing_grows_with_prompt_length_alone() -> None:
    """The step's per-request terms (LM head, sampling) see one row per request whatever
    the prompt's length (vLLM computes logits at ``logits_indices``, the last token of each
    request): the same seconds for a 1,024- and an 8,192-token prompt."""
    m = load_model("meta-llama/Llama-3.1-70B")
    model = KernelPerfModel(m, B200, tp=8, version="0.19.0", kv_dtype_bytes=1.0)
    short = model.breakdown(
        BatchStats(num_prefill_tokens=1024, prefill_attn_work=1024**2 / 2, num_prefill_reqs=1)
    )
    long = _prefill(model)
    assert long["lm_head"] == short["lm_head"] and long["sampling"] == short["sampling"]
    assert np.isfinite(long["lm_head"]) and long["lm_head"] < 1e-3
