"""Presets of today's open models: weight bytes and KV bytes per token against figures computed
by hand from each public config's numbers; MLA, sliding windows, shared experts, dense layers
and quantized checkpoints as vLLM lays them out; each preset runs on a GPU where it fits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import shared_data  # tests/ is on sys.path (rootdir-relative, no __init__)

import servesim
from servesim.catalog import get_gpu, load_model
from servesim.catalog.hf_config import from_hf_config
from servesim.catalog.models import resolve_kv_dtype_bytes
from servesim.catalog.quantization import MXFP4_BYTES, NVFP4_BYTES, parse_quantization
from servesim.config import EngineConfig, ParallelConfig
from servesim.deployment import resolved_engine
from servesim.errors import CatalogError
from servesim.perf.base import BatchStats
from servesim.perf.memory import plan_memory, served_weights_bytes, weights_bytes_per_gpu
from servesim.perf.roofline import RooflinePerfModel

HF_CONFIGS = "models/hf_configs"  # under the public data sets (conftest.shared_data)
MODELS = Path(servesim.__file__).parent / "data" / "models"  # the presets' bundled config.json


def _embed_and_norms(vocab: int, hidden: int, layers: int, tp: int = 1, tied: bool = False) -> float:
    """Bytes of the (16-bit) embedding, LM head and norms on one TP rank."""
    return ((1 if tied else 2) * vocab * hidden // tp + (2 * layers + 1) * hidden) * 2


# ---------------------------------------------------------------------- DeepSeek-V3 and Kimi-K2.5 (MLA)


def _mla_attn(hidden: int, heads: int, tp: int = 1) -> int:
    """q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128 (both configs)."""
    replicated = hidden * 1536 + hidden * (512 + 64)  # q_a, kv_a
    split = 1536 * heads * (128 + 64) + 512 * heads * (128 + 128) + heads * 128 * hidden
    return replicated + split // tp


def test_deepseek_v3_params_weights_and_kv() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.is_mla and m.num_dense_layers == 3 and m.shared_expert_intermediate_size == 2048
    assert m.dtype == "fp8" and m.quant_method == "fp8 (block 128x128)"
    h, expert = 7168, 3 * 7168 * 2048
    dense, router = 3 * 7168 * 18432, 7168 * 256
    attn = _mla_attn(h, 128)
    assert attn == 187_105_280
    total = 61 * (attn + 2 * h) + 58 * (256 * expert + expert + router) + 3 * dense + 2 * 129280 * h + h
    assert m.num_params() == total
    assert m.num_params() == pytest.approx(671e9, rel=0.002)
    active = 61 * (attn + 2 * h) + 58 * (8 * expert + expert + router) + 3 * dense + 2 * 129280 * h + h
    assert m.num_active_params() == active == pytest.approx(37.5e9, rel=0.01)
    # TP8, fp8 linear layers (1 byte), router and embeddings 16-bit.
    linear = 61 * _mla_attn(h, 128, 8) + 58 * (256 * expert // 8 + expert // 8) + 3 * dense // 8
    want = linear + 58 * router * 2 + _embed_and_norms(129280, h, 61, tp=8)
    assert weights_bytes_per_gpu(m, tp=8) == want
    assert want / 1e9 == pytest.approx(85.1, abs=0.05)
    # One latent of 512 + 64 per token and layer, shared by all heads, whole on every TP rank.
    assert m.kv_bytes_per_token(1) == 61 * (512 + 64) * 2 == 70_272
    for tp in (2, 8, 16):
        assert m.kv_bytes_per_token(tp) == 70_272
    assert m.kv_bytes_per_token(8, kv_dtype_bytes=1) == 35_136
    assert m.kv_bytes_per_token(8, pp=2) == 31 * 576 * 2


def test_kimi_k25_int4_experts() -> None:
    m = load_model("moonshotai/Kimi-K2.5")
    assert m.is_mla and m.num_dense_layers == 1 and m.num_experts == 384
    # compressed-tensors: int4 weights in groups of 32 with a bf16 scale each = 4.5 bits,
    # experts only (attention, shared experts and the dense MLP are in the ignore list).
    assert m.dtype == "bfloat16" and m.expert_dtype_bytes == 4 / 8 + 2 / 32
    assert m.quant_method == "compressed-tensors int4 (groups of 32) experts"
    h, expert = 7168, 3 * 7168 * 2048
    attn, router, dense = _mla_attn(h, 64), 7168 * 384, 3 * 7168 * 18432
    total = 61 * (attn + 2 * h) + 60 * (384 * expert + expert + router) + dense + 2 * 163840 * h + h
    assert m.num_params() == total == pytest.approx(1.026e12, rel=0.001)
    experts_b = 60 * 384 * expert * 0.5625
    rest_b = (61 * attn + 60 * (expert + router) + dense) * 2 + _embed_and_norms(163840, h, 61)
    assert weights_bytes_per_gpu(m) == experts_b + rest_b
    assert (experts_b + rest_b) / 1e9 == pytest.approx(594.2, abs=0.1)
    assert m.kv_bytes_per_token(8) == 61 * 576 * 2


def test_mla_attention_work() -> None:
    """Decode reads the latent once for all heads and scores against it (absorbed weights);
    prefill attends with up-projected 192-wide keys and 128-wide values."""
    m, g = load_model("DeepSeek-V3"), get_gpu("H200")
    pm = RooflinePerfModel(m, g, tp=8)
    assert pm._work["kv_tok"] == 70_272
    assert pm._work["dec_f"] == 61 * 2 * 16 * (512 + 64 + 512)
    assert pm._work["pf_f"] == 61 * 2 * 16 * (128 + 64 + 128)
    s = 64 * 4096
    att = pm._classes(BatchStats(num_decode_reqs=64, sum_decode_context=s))["attn_decode"]
    assert att[1] == 70_272 * (s + 64) + pm._work["qo_tok"] * 64
    # The same KV bytes at TP1: the decode-attention memory time does not shrink with TP.
    one = RooflinePerfModel(m, g, tp=1)
    stats = BatchStats(num_decode_reqs=64, sum_decode_context=s)
    assert one._classes(stats)["attn_decode"][1] > pm._classes(stats)["attn_decode"][1] * 0.99


# ---------------------------------------------------------------------- gpt-oss-120b


def test_gpt_oss_120b_mxfp4_and_sliding_window() -> None:
    m = load_model("openai/gpt-oss-120b")
    assert m.num_sliding_layers == 18 and m.sliding_window == 128 and m.num_full_attention_layers == 18
    assert m.expert_dtype_bytes == MXFP4_BYTES == 4.25 / 8 and m.dtype == "bfloat16"
    h = 2880
    attn = h * (64 * 64 + 2 * 8 * 64) + 64 * 64 * h
    expert, router = 3 * h * 2880, h * 128
    total = 36 * (attn + 128 * expert + router + 2 * h) + 2 * 201088 * h + h
    assert m.num_params() == total == pytest.approx(116.8e9, rel=0.001)
    # OpenAI's 5.1B active parameters count the unembedding, not the embedding lookup.
    assert m.num_active_params() - 201088 * h == pytest.approx(5.1e9, rel=0.01)
    want = 36 * 128 * expert * 4.25 / 8 + 36 * (attn + router) * 2 + _embed_and_norms(201088, h, 36)
    assert weights_bytes_per_gpu(m) == want
    assert want / 2**30 == pytest.approx(60.7, abs=0.05)  # the ~60.8 GiB MXFP4 checkpoint
    # KV per token: the 18 full-attention layers; the 18 sliding ones hold a bounded window.
    assert m.kv_bytes_per_token(1) == 18 * 2 * 8 * 64 * 2 == 36_864
    assert m.kv_bytes_per_token(8) == 18 * 2 * 1 * 64 * 2
    window = m.kv_window_bytes_per_request(1, block_size=16)
    assert window == 18 * 2 * 8 * 64 * 2 * (8 + 1) * 16  # cdiv(127, 16) + 1 blocks of 16 tokens


@pytest.mark.parametrize(
    ("gpu", "backend", "tp", "ep", "hidden", "rank_inter"),
    [
        ("B200", "auto", 8, 1, 3072, 512),  # TRTLLM-gen MoE: both to 256
        ("B200", "flashinfer_mxfp4_mxfp8", 1, 1, 3072, 3072),
        ("B200", "auto", 8, 8, 3072, 3072),  # expert parallel: whole experts
        ("H100-SXM", "marlin", 2, 1, 3072, 1536),  # Marlin: hidden to 256, width to 128
        ("H100-SXM", "auto", 8, 1, 2880, 384),  # Triton matmul_ogs: width to 64
        ("H100-SXM", "auto", 1, 1, 2880, 2880),
    ],
)
def test_gpt_oss_experts_held_padded_as_vllm_pads_them(
    gpu: str, backend: str, tp: int, ep: int, hidden: int, rank_inter: int
) -> None:
    # vLLM's Mxfp4MoEMethod.create_weights pads MXFP4 experts by backend; the memory plan
    # holds the padded experts, the rest of the weights as the checkpoint has them.
    m, g = load_model("openai/gpt-oss-120b"), get_gpu(gpu)
    par = ParallelConfig(tensor_parallel_size=tp, expert_parallel_size=ep)
    eng = EngineConfig(moe_backend=backend)
    experts = 36 * 128 * 3 * 2880 * 2880 // tp * 4.25 / 8
    padded = 36 * (128 // ep) * 3 * hidden * rank_inter * 4.25 / 8
    want = weights_bytes_per_gpu(m, tp) - experts + padded
    assert served_weights_bytes(m, g, eng, par) == pytest.approx(want, rel=1e-12)
    plan = plan_memory(m, g, resolved_engine(eng, m, g, par), par)
    assert plan.weights_bytes == served_weights_bytes(m, g, eng, par)


def test_gpt_oss_sliding_layers_bounded_in_memory_and_time() -> None:
    m, g = load_model("gpt-oss-120b"), get_gpu("H100")
    plan = plan_memory(
        m,
        g,
        resolved_engine(EngineConfig(), m, g, ParallelConfig(tensor_parallel_size=2)),
        ParallelConfig(tensor_parallel_size=2),
    )
    window = m.kv_window_bytes_per_request(2)
    assert plan.kv_bytes_per_token == 18 * 2 * 4 * 64 * 2
    assert plan.reserve_bytes > window  # the windows are set aside beside the non-torch reserve
    pm = RooflinePerfModel(m, g, tp=2)
    per_ctx = 18 * 2 * 4 * 64 * 2
    a = pm._classes(BatchStats(num_decode_reqs=8, sum_decode_context=8 * 1000))["attn_decode"][1]
    b = pm._classes(BatchStats(num_decode_reqs=8, sum_decode_context=8 * 9000))["attn_decode"][1]
    assert b - a == per_ctx * 8 * 8000  # only the full-attention layers grow with the context
    assert pm._work["qo_tok"] == 2 * 32 * 64 * 2 * 36 + 128 * per_ctx  # Q, O and a window per token


# ---------------------------------------------------------------------- Qwen3, MiniMax, Llama FP8


def test_qwen3_235b_a22b() -> None:
    m = load_model("Qwen/Qwen3-235B-A22B")
    h = 4096
    attn = h * (64 * 128 + 2 * 4 * 128) + 64 * 128 * h
    expert, router = 3 * h * 1536, h * 128
    total = 94 * (attn + 128 * expert + router + 2 * h) + 2 * 151936 * h + h
    active = 94 * (attn + 8 * expert + router + 2 * h) + 2 * 151936 * h + h
    assert m.num_params() == total == pytest.approx(235e9, rel=0.001)
    assert m.num_active_params() == active == pytest.approx(22.2e9, rel=0.005)
    assert m.kv_bytes_per_token(1) == 94 * 2 * 4 * 128 * 2 == 192_512
    assert m.kv_bytes_per_token(8) == 94 * 2 * 1 * 128 * 2  # 4 KV heads on 8 ranks: one each
    fp8 = load_model("Qwen3-235B-A22B-FP8")
    want = 94 * (attn + 128 * expert) + 94 * router * 2 + _embed_and_norms(151936, h, 94)
    assert weights_bytes_per_gpu(fp8) == want
    assert weights_bytes_per_gpu(fp8, tp=4) == pytest.approx(want / 4, rel=0.01)


def test_qwen3_32b_head_dim_and_fp8() -> None:
    m = load_model("Qwen/Qwen3-32B")
    assert m.head_dim == 128 != m.hidden_size // m.num_attention_heads
    h = 5120
    attn = h * (64 * 128 + 2 * 8 * 128) + 64 * 128 * h
    mlp = 3 * h * 25600
    assert (
        m.num_params() == 64 * (attn + mlp + 2 * h) + 2 * 151936 * h + h == pytest.approx(32.8e9, rel=0.002)
    )
    assert m.kv_bytes_per_token(1) == 64 * 2 * 8 * 128 * 2 == 262_144
    fp8 = load_model("Qwen3-32B-FP8")
    assert fp8.linear_compute_dtype == "fp8"
    assert weights_bytes_per_gpu(fp8) == 64 * (attn + mlp) + _embed_and_norms(151936, h, 64)


def test_minimax_m25() -> None:
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    assert m.dtype == "fp8" and m.num_experts == 256 and m.moe_intermediate_size == 1536
    assert m.shared_expert_intermediate_size == 0 and m.num_dense_layers == 0
    h = 3072
    attn = h * (48 * 128 + 2 * 8 * 128) + 48 * 128 * h
    expert, router = 3 * h * 1536, h * 256
    assert m.num_params() == 62 * (attn + 256 * expert + router + 2 * h) + 2 * 200064 * h + h
    assert m.num_params() == pytest.approx(228.7e9, rel=0.001)
    assert m.num_active_params() == pytest.approx(11.0e9, rel=0.01)
    assert m.kv_bytes_per_token(1) == 62 * 2 * 8 * 128 * 2 == 253_952
    # the router replicated on every rank, fp32 as vLLM's MiniMaxM2MoE builds it (4 bytes a weight)
    want = 62 * (attn + 256 * expert) // 4 + 62 * router * 4 + _embed_and_norms(200064, h, 62, tp=4)
    assert weights_bytes_per_gpu(m, tp=4) == want


def test_nvidia_nvfp4_checkpoints() -> None:
    """NVIDIA's NVFP4 MiniMax-M2.5 and Kimi-K2.5: routed experts in NVFP4 (4 bits and an fp8
    scale per 16), attention (and Kimi's shared experts and dense MLP, which servesim keeps
    16-bit: see models.md) in bf16, MiniMax's router in fp32 (vLLM's MiniMaxM2MoE), an FP8
    KV cache."""
    mm = load_model("nvidia/MiniMax-M2.5-NVFP4")
    assert mm.dtype == "bfloat16" and mm.expert_dtype_bytes == NVFP4_BYTES == 0.5625
    assert mm.kv_cache_dtype == "fp8" and resolve_kv_dtype_bytes("auto", mm) == 1.0
    assert mm.quant_method == "modelopt NVFP4 experts" and mm.qk_norm_allreduce
    h = 3072
    attn = h * (48 * 128 + 2 * 8 * 128) + 48 * 128 * h
    expert, router = 3 * h * 1536, h * 256
    want = (
        62 * 256 * expert // 4 * 0.5625
        + 62 * attn // 4 * 2
        + 62 * router * 4  # fp32 router (vLLM's MiniMaxM2MoE), whatever the checkpoint
        + _embed_and_norms(200064, h, 62, tp=4)
    )
    assert weights_bytes_per_gpu(mm, tp=4) == want
    assert mm.kv_bytes_per_token(4, kv_dtype_bytes=1.0) == 62 * 2 * 2 * 128 * 1 == 31_744
    kimi = load_model("Kimi-K2.5-NVFP4")
    assert kimi.is_mla and kimi.dtype == "bfloat16" and kimi.expert_dtype_bytes == NVFP4_BYTES
    assert kimi.kv_cache_dtype == "fp8"  # kv_cache_scheme: 8-bit float
    assert kimi.num_params() == load_model("Kimi-K2.5").num_params()
    h, expert = 7168, 3 * 7168 * 2048
    attn, router, dense = _mla_attn(h, 64), 7168 * 384, 3 * 7168 * 18432
    experts_b = 60 * 384 * expert * 0.5625
    rest_b = (61 * attn + 60 * (expert + router) + dense) * 2 + _embed_and_norms(163840, h, 61)
    assert weights_bytes_per_gpu(kimi) == experts_b + rest_b
    assert kimi.kv_bytes_per_token(8, kv_dtype_bytes=1.0) == 61 * 576 * 1


def test_qk_norm_across_heads() -> None:
    """MiniMax-M2's q/k norms span the layer's heads (qk_norm_type per_layer): under TP
    vLLM all-reduces their variances; Qwen3's per-head norms need no communication."""
    assert load_model("MiniMax-M2.5").qk_norm_allreduce
    assert not load_model("Qwen3-32B").qk_norm_allreduce
    assert not load_model("Llama-3.1-70B").qk_norm_allreduce


def test_llama31_70b_fp8_modelopt() -> None:
    m = load_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert m.dtype == "fp8" and m.quant_method == "modelopt FP8"
    assert m.num_params() == load_model("Llama-3.1-70B").num_params() == pytest.approx(70.55e9, rel=0.001)
    h = 8192
    linear = 80 * (h * (8192 + 2 * 1024) + 8192 * h + 3 * h * 28672)
    want = linear + _embed_and_norms(128256, h, 80)  # lm_head excluded: 16-bit like the embedding
    assert weights_bytes_per_gpu(m) == want
    assert want / 1e9 == pytest.approx(72.66, abs=0.01)  # 70.6B params: 68.4 GB fp8 + 4.2 GB bf16
    # kv_cache_quant_algo FP8: vLLM's kv_cache_dtype 'auto' resolves to an fp8 KV cache.
    assert m.kv_cache_dtype == "fp8" and resolve_kv_dtype_bytes("auto", m) == 1.0
    assert m.kv_bytes_per_token(1) == 2 * 80 * 8 * 128 * 1 == 163_840
    assert m.kv_bytes_per_token(1, kv_dtype_bytes=resolve_kv_dtype_bytes("bfloat16", m)) == 327_680


def test_llama31_8b_preset_unchanged() -> None:
    m = load_model("Llama-3.1-8B")
    assert m.kv_bytes_per_token(1) == 131_072 and m.quant_method == "" and not m.is_mla


# ---------------------------------------------------------------------- quantization configs


def test_quantization_schemes() -> None:
    assert parse_quantization({}, None, "bfloat16", "x") is None
    ct = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
                    "input_activations": None,
                }
            },
            "ignore": ["lm_head"],
        }
    }
    q = parse_quantization(ct, None, "bfloat16", "x")
    assert (
        q is not None and q.dtype == "int4" and q.dtype_bytes == 0.5 + 2 / 128 and q.expert_dtype_bytes == 0
    )
    w8a8 = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                    "input_activations": {"num_bits": 8, "type": "float"},
                }
            },
        }
    }
    q = parse_quantization(w8a8, None, "bfloat16", "x")
    assert q is not None and q.dtype == "fp8" and q.dtype_bytes == 1.0
    nvfp4 = {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}
    q = parse_quantization({}, nvfp4, "bfloat16", "x")
    assert q is not None and q.dtype == "nvfp4" and q.dtype_bytes == NVFP4_BYTES == 4.5 / 8
    experts_only = {
        "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}
    }
    q = parse_quantization({}, experts_only, "bfloat16", "x")
    assert q is not None and q.dtype == "bfloat16" and q.expert_dtype_bytes == NVFP4_BYTES
    # A config.json's own ModelOpt block (nvidia/Kimi-K2.5-NVFP4): ``ignore`` patterns with
    # the text model's language_model. prefix, an 8-bit float kv_cache_scheme.
    own = {
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "ignore": ["language_model.lm_head", "language_model.model.layers.1.self_attn*"],
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
        }
    }
    q = parse_quantization(own, None, "bfloat16", "x")
    assert q is not None and q.dtype == "bfloat16" and q.expert_dtype_bytes == NVFP4_BYTES
    assert q.kv_cache_dtype == "fp8"
    with pytest.raises(CatalogError, match="awq"):
        parse_quantization({"quantization_config": {"quant_method": "awq"}}, None, "bfloat16", "cfg.json")


def test_explicit_dtype_replaces_the_checkpoint_quantization() -> None:
    m = load_model("gpt-oss-120b", dtype="bfloat16")
    assert m.expert_weight_bytes == 2.0 and m.quant_method == ""


def test_user_deepseek_config_with_modelopt_file(tmp_path: Path) -> None:
    """A user's DeepSeek-style config.json (no q_lora_rank, like V2-Lite) and a ModelOpt
    hf_quant_config.json beside it."""
    cfg = {
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 102400,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    m = load_model(str(tmp_path))
    assert m.dtype == "fp8" and m.num_dense_layers == 1 and m.shared_expert_intermediate_size == 2 * 1408
    assert m.attn_params_per_layer() == (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048)
    assert m.kv_bytes_per_token(4) == 4 * 576 * 2


# ---------------------------------------------------------------------- the public configs parse

PRESET_SOURCES = {
    "deepseek-ai--DeepSeek-V3": "DeepSeek-V3",
    "moonshotai--Kimi-K2.5": "Kimi-K2.5",
    "openai--gpt-oss-120b": "gpt-oss-120b",
    "MiniMaxAI--MiniMax-M2.5": "MiniMax-M2.5",
    "Qwen--Qwen3-235B-A22B": "Qwen3-235B-A22B",
    "Qwen--Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B-FP8",
    "Qwen--Qwen3-32B": "Qwen3-32B",
    "Qwen--Qwen3-32B-FP8": "Qwen3-32B-FP8",
    "nvidia--Llama-3.1-70B-Instruct-FP8": "Llama-3.1-70B-Instruct-FP8",
    "meta-llama--Meta-Llama-3.1-8B": "Llama-3.1-8B",
    "meta-llama--Meta-Llama-3.1-70B": "Llama-3.1-70B",
    "nvidia--MiniMax-M2.5-NVFP4": "MiniMax-M2.5-NVFP4",
    "nvidia--Kimi-K2.5-NVFP4": "Kimi-K2.5-NVFP4",
}


@pytest.mark.shared_data
@pytest.mark.parametrize("stem", sorted(PRESET_SOURCES))
def test_public_config_parses_like_its_preset(stem: str, tmp_path: Path) -> None:
    """The full public config.json (and hf_quant_config.json) reads as the preset does."""
    configs = shared_data(HF_CONFIGS)
    shutil.copy(configs / f"{stem}_config.json", tmp_path / "config.json")
    quant = configs / f"{stem}_hf_quant_config.json"
    if quant.exists():
        shutil.copy(quant, tmp_path / "hf_quant_config.json")
    user, preset = load_model(str(tmp_path)), load_model(PRESET_SOURCES[stem])
    fields = [f for f in preset.__dataclass_fields__ if f not in ("name", "max_position_embeddings")]
    assert {f: getattr(user, f) for f in fields} == {f: getattr(preset, f) for f in fields}


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "stem",
    [
        "nvidia--Kimi-K2.5-NVFP4",
        "nvidia--MiniMax-M2.5-NVFP4",
        "nvidia--Qwen3-235B-A22B-NVFP4",
        "openai--gpt-oss-20b",
        "Qwen--Qwen3-30B-A3B-FP8",
        "moonshotai--Kimi-K2-Instruct",
    ],
)
def test_related_public_configs_parse(stem: str) -> None:
    configs = shared_data(HF_CONFIGS)
    cfg = json.loads((configs / f"{stem}_config.json").read_text())
    quant = configs / f"{stem}_hf_quant_config.json"
    m = from_hf_config(cfg, stem, hf_quant_config=json.loads(quant.read_text()) if quant.exists() else None)
    assert m.num_params() > 1e9 and m.kv_bytes_per_token() > 0
    if "NVFP4" in stem:
        assert NVFP4_BYTES in (m.dtype_bytes, m.expert_dtype_bytes)


@pytest.mark.shared_data
@pytest.mark.parametrize("stem", sorted(PRESET_SOURCES))
def test_a_copied_config_reads_with_its_own_quant_file_under_its_repository_id(stem: str) -> None:
    """A config copied as ``<org>--<name>_config.json`` (this layout's and the hub cache's
    spelling) reads its ``<org>--<name>_hf_quant_config.json`` and is named ``org/name``, the
    id `vllm serve` takes, not the path its ``_name_or_path`` recorded on another machine."""
    configs = shared_data(HF_CONFIGS)
    user, preset = load_model(str(configs / f"{stem}_config.json")), load_model(PRESET_SOURCES[stem])
    assert user.name == stem.replace("--", "/")
    fields = [f for f in preset.__dataclass_fields__ if f not in ("name", "max_position_embeddings")]
    assert {f: getattr(user, f) for f in fields} == {f: getattr(preset, f) for f in fields}


def test_a_config_s_name_is_a_repository_id_never_a_saved_path(tmp_path: Path) -> None:
    cfg = json.loads((MODELS / "Llama-3.1-8B.json").read_text())
    folder = tmp_path / "Llama-3.1-8B-Instruct"
    folder.mkdir()
    for saved, name in (
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("/opt/ckpts/Llama-3.1-8B-Instruct/", "Llama-3.1-8B-Instruct"),
        ("", "Llama-3.1-8B-Instruct"),
    ):
        # a fine-tune saved under a preset's name is read from its own config, not the preset's
        (folder / "config.json").write_text(
            json.dumps({**cfg, "_name_or_path": saved, "num_hidden_layers": 2})
        )
        assert load_model(str(folder)).name == name
        assert load_model(str(folder / "config.json")).name == name
        assert load_model(str(folder)).num_layers == 2
    assert load_model("Llama-3.1-8B-Instruct").num_layers == cfg["num_hidden_layers"]  # no such folder here


# ---------------------------------------------------------------------- each preset runs

RUNS = [  # GPU x TP as in the measured vLLM runs
    ("Llama-3.1-70B-Instruct-FP8", "H200", 1),
    ("Qwen3-32B", "H100", 2),
    ("Qwen3-32B-FP8", "H100", 1),
    ("Qwen3-235B-A22B", "H200", 8),
    ("Qwen3-235B-A22B-FP8", "H100", 4),
    ("gpt-oss-120b", "H100", 2),
    ("gpt-oss-120b", "B200", 1),
    ("MiniMax-M2.5", "H200", 4),
    ("Kimi-K2.5", "H200", 8),
    ("DeepSeek-V3", "H200", 8),
    ("DeepSeek-V3", "B200", 8),
    ("MiniMax-M2.5-NVFP4", "B200", 2),
    ("Kimi-K2.5-NVFP4", "B200", 4),
]


@pytest.mark.parametrize(("name", "gpu", "tp"), RUNS)
def test_preset_simulates(name: str, gpu: str, tp: int) -> None:
    r = servesim.simulate(
        {
            "model": {"name": name},
            "hardware": {"gpu": gpu},
            "parallel": {"tensor_parallel_size": tp},
            "workload": {
                "type": "synthetic",
                "num_requests": 24,
                "arrival": {"process": "burst"},
                "prompt_len": {"kind": "constant", "value": 1024},
                "output_len": {"kind": "constant", "value": 32},
            },
        }
    )
    lat = r.summary["latency"]
    assert lat["e2e_s"]["count"] == 24
    assert 0 < lat["tpot_s"]["mean"] < 0.2 and 0 < lat["ttft_s"]["mean"] < 10


def test_attention_data_parallel_spreads_only_the_experts() -> None:
    """MiniMax-M2.5 as measured on 16 GPUs: attention TP4 on each of 4 data-parallel ranks,
    experts spread over all 16 (expert parallelism)."""
    m = load_model("MiniMax-M2.5")
    h = 3072
    attn = h * (48 * 128 + 2 * 8 * 128) + 48 * 128 * h
    expert, router = 3 * h * 1536, h * 256
    # the fp32 router (vLLM's MiniMaxM2MoE) replicated on every rank: 4 bytes a weight
    want = 62 * attn // 4 + 62 * 256 * expert // 16 + 62 * router * 4 + _embed_and_norms(200064, h, 62, tp=4)
    assert weights_bytes_per_gpu(m, tp=4, attention_dp=4) == want
    assert weights_bytes_per_gpu(m, tp=4, attention_dp=4) < weights_bytes_per_gpu(m, tp=4) / 3
