"""Long-context attention at TP 8 against its physics and the kernel tables' own points:
MiniMax-M2.5 (48 query heads, 8 KV heads of 128, 62 layers) on 8 H200s with vLLM 0.19.0's
tables, bf16 KV cache (vLLM's ``kv_cache_dtype='auto'`` for its block-FP8 checkpoint), so
one rank holds 6 query heads and 1 KV head. Every figure is computed here from FLOPs,
bytes, the GPU's catalog peaks and the packed tables' entries."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.perf.base import BatchStats
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_attention import gqa_roof, sibling_decode_ratio
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.kernels import load_database

E = Efficiencies()
H, KV, HD, LAYERS = 6, 1, 128, 62  # one TP-8 rank of MiniMax-M2.5


@pytest.fixture(scope="module")
def minimax() -> KernelPerfModel:
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    assert (m.num_attention_heads, m.num_kv_heads, m.head_dim, m.num_layers) == (48, 8, 128, 62)
    return KernelPerfModel(m, get_gpu("H200"), tp=8, ep=8, version="0.19.0", kv_dtype_bytes=2.0)


def _table(gpu: str, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    c = load_database(gpu, "0.19.0").attention_class(prefix, "bfloat16", HD, H, KV)
    assert c is not None
    return c


def test_what_the_tables_cover_at_tp8_and_32k() -> None:
    """6 query heads are not measured (the nearest class is 8 heads over 1 KV head); prefill
    is measured up to 16,384 tokens (32k is carried by the roofline), decode at 32k only up
    to batch 32 (batch 64 stops at 16k)."""
    b, s, lat, cls = _table("H100-SXM", "ctx")
    assert cls == (8, 1) and s.max() == 16384
    b, s, lat, cls = _table("H100-SXM", "gen")
    assert cls == (8, 1) and 32768 in s
    i32, i64, j32, j16 = list(b).index(32), list(b).index(64), list(s).index(32768), list(s).index(16384)
    assert np.isfinite(lat[i32, j32]) and np.isnan(lat[i64, j32]) and np.isfinite(lat[i64, j16])


def test_long_prefill_attention_roofline_by_hand() -> None:
    # causal 32k prefill, one layer, one rank: 2 x heads x head_dim x s^2 FLOPs
    flops = 2 * H * HD * 32768**2
    assert flops == 1_649_267_441_664
    gpu = get_gpu("H200")
    roof = gqa_roof("ctx", gpu, E, 2.0, HD)(np.array([1.0]), np.array([32768.0]), H, KV)[0]
    assert roof == pytest.approx(flops / (989e12 * E.attn_prefill_compute), rel=1e-12)
    # its bytes (Q, K, V in, O out: 32768 x 128 x (2 x 6 + 4 x 1) x 2 B = 134 MB) take 28 us at
    # 4.8 TB/s against 1.67 ms of FLOPs at the bf16 peak: compute-bound
    assert 32768 * HD * (2 * H + 4 * KV) * 2 / 4.8e12 < 0.02 * flops / 989e12


def test_long_prefill_attention_from_the_table(minimax: KernelPerfModel) -> None:
    """H200's own 0.19.0 prefill table is refused (faster than the peak); H100's (the same
    die and peak) times it: the 8-head class above its fixed time scaled to 6 heads (x 6/8,
    compute-bound), then 16k -> 32k by the roofline (x 4)."""
    b, s, lat, _ = _table("H100-SXM", "ctx")
    floor, t16 = float(np.nanmin(lat)), float(lat[0, list(s).index(16384)])  # ms, batch 1
    assert t16 == pytest.approx(0.8093, rel=1e-3)
    per_layer_16k = (floor + (t16 - floor) * 6 / 8) * 1e-3
    pf = minimax.breakdown(
        BatchStats(num_prefill_tokens=32768, prefill_attn_work=32768**2 / 2, num_prefill_reqs=1)
    )
    assert pf["attn_prefill"] == pytest.approx(LAYERS * 4 * per_layer_16k, rel=1e-6)
    # 62 layers x 1.649 TFLOP: 103 ms at the peak; the table's 151 ms is 68% of it
    at_peak = LAYERS * 2 * H * HD * 32768**2 / 989e12
    assert at_peak == pytest.approx(0.10340, rel=1e-3)
    assert pf["attn_prefill"] / at_peak == pytest.approx(1.462, rel=1e-3)


def test_a_chunk_on_cached_context_is_charged_its_pairs(minimax: KernelPerfModel) -> None:
    """The last 8,192-token chunk of a 32k prompt (vLLM's default budget for an API server on
    a >= 70 GiB GPU) attends to 24,576 cached tokens and itself: 8192 x 24576 + 8192^2 / 2
    (query, key) pairs, 4 x 6 x 128 FLOPs each; between 16k and 32k the grid is the 16k
    point on the quadratic roofline, so the charge is the 16k point's time per pair."""
    pairs = 8192 * 24576 + 8192**2 / 2
    assert pairs == 234_881_024
    st = BatchStats(
        num_prefill_tokens=8192, prefill_attn_work=pairs, num_prefill_reqs=1, sum_prefill_context=24576
    )
    b, s, lat, _ = _table("H100-SXM", "ctx")
    floor, t16 = float(np.nanmin(lat)), float(lat[0, list(s).index(16384)])
    per_pair = (floor + (t16 - floor) * 6 / 8) * 1e-3 / (16384**2 / 2)
    assert minimax.breakdown(st)["attn_prefill"] == pytest.approx(LAYERS * pairs * per_pair, rel=1e-6)
    # 62 x 4 x 6 x 128 FLOPs x pairs = 44.7 TFLOP: 45 ms at the peak, charged 66 ms
    assert LAYERS * 4 * H * HD * pairs / 989e12 == pytest.approx(0.04524, rel=1e-3)


def test_long_decode_attention_roofline_by_hand() -> None:
    # 64 requests of 32k tokens, one layer of one rank: K and V of its 1 KV head in bf16
    kv_bytes = 64 * 32768 * 2 * KV * HD * 2
    assert kv_bytes == 1_073_741_824
    nbytes = kv_bytes + 64 * 4 * H * HD  # + each request's query and output
    roof = gqa_roof("gen", get_gpu("H200"), E, 2.0, HD)(np.array([64.0]), np.array([32768.0]), H, KV)[0]
    assert roof == pytest.approx(nbytes / (4.8e12 * E.attn_decode_memory), rel=1e-12)
    assert nbytes / 4.8e12 == pytest.approx(223.7e-6, rel=1e-3)  # at the full HBM bandwidth


def test_sibling_ratio_is_the_tables_own() -> None:
    """H200 over H100 decode time above the fixed time, where neither kernel splits: about the
    bandwidth ratio with a bf16 cache, much less gain with an FP8 one."""
    bf16 = sibling_decode_ratio("H200", "H100-SXM", "0.19.0", "bfloat16", 128)
    fp8 = sibling_decode_ratio("H200", "H100-SXM", "0.19.0", "fp8", 128)
    assert bf16 is not None and fp8 is not None
    assert bf16 == pytest.approx(3.35 / 4.8, rel=0.02) and bf16 == pytest.approx(0.7064, rel=1e-3)
    assert fp8 == pytest.approx(0.8717, rel=1e-3)
    # one of its points by hand: 8 heads over 8 KV heads, batch 16 at 8k (16 x 8 >= 105.6 SMs)
    a, b = _class8("H200"), _class8("H100-SXM")
    i, j = list(a[0]).index(16), list(a[1]).index(8192)
    one = (a[2][i, j] - np.nanmin(a[2])) / (b[2][i, j] - np.nanmin(b[2]))
    assert 0.65 < one < 0.76


def _class8(gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    c = load_database(gpu, "0.19.0").attention_class("gen", "bfloat16", 128, 8, 8)
    assert c is not None and c[3] == (8, 8)
    return c


def test_long_decode_attention_from_the_tables(minimax: KernelPerfModel) -> None:
    """H200's 0.19.0 decode table did not split the KV (292 us at batch 32 and 32k, 19% of
    its bandwidth); H100's, which did, bounds it once carried to H200 by the tables' own
    ratio. Batch 64 at 32k is not measured: batch 32's point doubled (the memory roofline is
    linear in the batch). The 6 query heads over the measured 8 change the bytes by 1e-4."""
    h200 = _table("H200", "gen")
    b, s, lat, _ = _table("H100-SXM", "gen")
    i32, j32 = list(b).index(32), list(s).index(32768)
    assert h200[2][i32, j32] == pytest.approx(0.2925, rel=1e-3)
    assert lat[i32, j32] == pytest.approx(0.1904, rel=1e-3)
    ratio = sibling_decode_ratio("H200", "H100-SXM", "0.19.0", "bfloat16", 128)
    assert ratio is not None
    floor = float(np.nanmin(lat))
    carried = (floor + (float(lat[i32, j32]) - floor) * ratio) * 1e-3  # s, one layer, batch 32
    dec = minimax.breakdown(BatchStats(num_decode_reqs=64, sum_decode_context=64 * 32768))["attn_decode"]
    assert dec == pytest.approx(LAYERS * 2 * carried, rel=1e-3)
    # 62 layers x 1.074 GB: 13.9 ms at 4.8 TB/s; charged 17.0 ms (82%), where H100's raw
    # time (the bound before it was carried) charged 23.6 ms (59%)
    at_bw = LAYERS * 64 * 32768 * 2 * KV * HD * 2 / 4.8e12
    assert at_bw == pytest.approx(13.87e-3, rel=1e-3)
    assert dec / at_bw == pytest.approx(1.226, rel=0.01)
    assert LAYERS * 2 * lat[i32, j32] * 1e-3 / at_bw > 1.65


def test_h200_decode_gains_the_fp8_ratio_with_an_fp8_cache() -> None:
    """With an FP8 KV cache the carried bound shrinks by the tables' FP8 ratio (0.87), not
    the bandwidth's: Llama-3.1-70B at TP 8 (1 FP8 KV head a rank), batch 8 at 8k."""
    m = load_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    h200 = KernelPerfModel(m, get_gpu("H200"), tp=8, version="0.19.0")
    h100 = KernelPerfModel(m, get_gpu("H100-SXM"), tp=8, version="0.19.0")
    assert h200.kv_dtype_bytes == 1.0
    b, s, lat, cls = load_database("H100-SXM", "0.19.0").attention_class("gen", "fp8", 128, 8, 1)
    assert cls == (8, 1)
    i, j = list(b).index(8), list(s).index(8192)
    ratio = sibling_decode_ratio("H200", "H100-SXM", "0.19.0", "fp8", 128)
    assert ratio is not None
    floor = float(np.nanmin(lat))
    t200 = _decode(h200, 8, 8192) / (m.num_layers * 1e-3)
    t100 = _decode(h100, 8, 8192) / (m.num_layers * 1e-3)
    assert t100 == pytest.approx(float(lat[i, j]), rel=1e-6)  # H100's own point, the class exact
    assert t200 == pytest.approx(floor + (float(lat[i, j]) - floor) * ratio, rel=1e-6)


def _decode(pm: KernelPerfModel, batch: int, ctx: int) -> float:
    return pm.breakdown(BatchStats(num_decode_reqs=batch, sum_decode_context=batch * ctx))["attn_decode"]
