"""DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): parameters, KV bytes and step-time terms
hand-computed from the configs in tests/fixtures/hf_configs, and an end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

import servesim
from servesim.catalog import get_gpu, load_model
from servesim.catalog.hf_config import from_hf_config
from servesim.catalog.models import ModelSpec
from servesim.config import EngineConfig, HardwareConfig, ParallelConfig
from servesim.deployment import resolved_engine
from servesim.errors import CatalogError
from servesim.perf.base import BatchStats
from servesim.perf.factory import build_step_model
from servesim.perf.memory import plan_memory
from servesim.perf.sparse_attention import (
    SparseAttentionPerfModel,
    padded_heads,
    served_kv_bytes_per_token,
    sparse_attention_perf_model,
    sparse_attention_work,
    sparse_backend,
    sparse_prefill_pairs,
)

CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"


def _model(name: str) -> ModelSpec:
    return load_model(str(CONFIGS / name))


def _cfg(name: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((CONFIGS / name / "config.json").read_text())
    return cfg


# ---------------------------------------------------------------------- parameters


def test_deepseek_v32_is_deepseek_v3_plus_one_indexer_per_layer() -> None:
    """Each of the 61 layers adds an indexer: wq_b 1536 x 64*128, wk 7168 x 128,
    weights_proj 7168 x 64 and k_norm's weight and bias (2 x 128); the rest is DeepSeek-V3."""
    v3, v32 = _model("DeepSeek-V3"), _model("DeepSeek-V3.2")
    indexer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert indexer == 13_959_424
    assert v32.num_params() - v3.num_params() == 61 * indexer
    assert v32.num_active_params() - v3.num_active_params() == 61 * indexer
    # DeepSeek publishes 671B total, 37B activated (671B + the 14B MTP module = 685B on the hub)
    assert v32.num_params() == pytest.approx(671e9, rel=0.005)
    assert v32.num_active_params() == pytest.approx(37e9, rel=0.05)
    assert (v32.index_topk, v32.index_n_heads, v32.index_head_dim) == (2048, 64, 128)


def test_glm5_parameters_match_the_published_744b_40b() -> None:
    """GLM-5: 78 layers, hidden 6144, MLA (q_lora 2048, kv_lora 512, 64 heads of 192 + 64,
    v 256), 256 experts of 2048 (8 active) and one shared, 3 dense layers of 12288, an
    indexer of 32 x 128 per layer; Z.ai publishes 744B parameters, 40B active."""
    m = _model("GLM-5")
    h, layers, vocab = 6144, 78, 154880
    mla = h * 2048 + 2048 * 64 * 256 + h * (512 + 64) + 512 * 64 * (192 + 256) + 64 * 256 * h
    indexer = 2048 * 32 * 128 + h * 128 + h * 32 + 2 * 128
    assert indexer == 9_371_904
    expert, dense = 3 * h * 2048, 3 * h * 12288
    moe_layer = 256 * expert + expert + h * 256
    total = layers * (mla + indexer + 2 * h) + 75 * moe_layer + 3 * dense + 2 * vocab * h + h
    assert m.num_params() == total
    assert round(total / 1e9) == 744
    active = m.num_active_params() - 2 * vocab * h  # without the embedding and LM head
    assert round(active / 1e9) == 40


def test_fp8_and_nvfp4_checkpoints_count_the_same_parameters() -> None:
    assert _model("GLM-5-FP8").num_params() == _model("GLM-5").num_params()
    assert _model("DeepSeek-V3.2-NVFP4").num_params() == _model("DeepSeek-V3.2").num_params()


def test_glm51_nvfp4_quantizes_the_experts_only() -> None:
    """nvidia/GLM-5.1-NVFP4's config.json names its ModelOpt NVFP4 block itself and leaves
    all of layers 0 and 1 and every layer's attention and shared experts unquantized: the
    routed experts take 4.5 bits a weight, the rest bf16."""
    m = _model("GLM-5.1-NVFP4")
    assert (m.dtype, m.dtype_bytes, m.expert_dtype_bytes) == ("bfloat16", 2.0, 4.5 / 8)
    assert m.num_params() == _model("GLM-5").num_params()


def test_indexer_weights_are_whole_on_every_tp_rank() -> None:
    """vLLM builds wq_b, wk and weights_proj as ReplicatedLinear: TP does not split them.
    wq_b and wk take the checkpoint's fp8 (1 byte), weights_proj and k_norm stay bf16."""
    v3, v32 = _model("DeepSeek-V3"), _model("DeepSeek-V3.2")
    per_layer = (1536 * 64 * 128 + 7168 * 128) * 1 + (7168 * 64 + 2 * 128) * 2
    for tp in (1, 8):
        assert v32.linear_weight_bytes(tp) - v3.linear_weight_bytes(tp) == 61 * per_layer


# ---------------------------------------------------------------------- KV cache


@pytest.mark.parametrize(
    ("name", "layers", "latent"),
    [
        ("DeepSeek-V3.2", 61, (512 + 64) * 2),  # kv_cache_dtype auto: bf16 latent
        ("GLM-5", 78, (512 + 64) * 2),
        ("GLM-5-FP8", 78, (512 + 64) * 2),  # fp8 weights, bf16 activations and cache
        ("DeepSeek-V3.2-NVFP4", 61, 512 + 4 * 4 + 64 * 2),  # kv_cache_quant_algo FP8: fp8_ds_mla
        ("GLM-5-NVFP4", 78, 512 + 4 * 4 + 64 * 2),
        ("GLM-5.1-NVFP4", 78, 512 + 4 * 4 + 64 * 2),  # its own ModelOpt block: 8-bit float KV
    ],
)
def test_kv_bytes_per_token_are_vllms_pages(name: str, layers: int, latent: int) -> None:
    """Per layer: the latent (bf16 576 x 2, or fp8_ds_mla's 656 bytes) plus the indexer's
    key, 128 fp8 values and one fp32 scale (132 bytes); whole on every TP rank."""
    m = _model(name)
    per_token = layers * (latent + 128 + 4)
    assert m.kv_bytes_per_token() == per_token
    assert m.kv_bytes_per_token(8) == per_token
    assert m.kv_bytes_per_token(1, 1.0) == layers * (656 + 132)  # --kv-cache-dtype fp8
    assert m.kv_bytes_per_token(1, 2.0, pp=2) == -(-layers // 2) * (1152 + 132)


def test_memory_plan_blocks_hold_both_caches() -> None:
    m, gpu, par = _model("DeepSeek-V3.2"), get_gpu("H200-SXM"), ParallelConfig(tensor_parallel_size=8)
    plan = plan_memory(m, gpu, resolved_engine(EngineConfig(), m, gpu, par), par)
    assert plan.kv_bytes_per_token == 61 * 1284 == 78_324
    assert plan.kv_bytes_per_block == 16 * 78_324
    assert plan.num_gpu_blocks == int(plan.kv_cache_bytes // (16 * 78_324))


@pytest.mark.parametrize(
    ("sm", "version", "tp", "kv_b", "name", "latent", "heads"),
    [
        (90, "0.19.0", 8, 1.0, "flashmla_sparse", 656, 64),  # Hopper: fp8_ds_mla, 16 heads padded
        (90, "0.19.0", 1, 2.0, "flashmla_sparse", 1152, 128),
        (100, "0.19.0", 8, 2.0, "flashinfer_mla_sparse", 1152, 16),  # <= 16 heads: FlashInfer
        (100, "0.19.0", 4, 2.0, "flashmla_sparse", 1152, 128),  # bf16, 32 heads: FlashMLA, padded
        (100, "0.19.0", 4, 1.0, "flashinfer_mla_sparse", 576, 32),  # v0.19: fp8 cache -> FlashInfer
        (100, "0.18.0", 4, 1.0, "flashmla_sparse", 656, 128),  # not before v0.19.0
        (100, "0.16.0", 8, 2.0, "flashmla_sparse", 1152, 128),  # no FlashInfer sparse MLA yet
    ],
)
def test_sparse_backend_follows_vllms_priorities(
    sm: int, version: str, tp: int, kv_b: float, name: str, latent: int, heads: int
) -> None:
    """vLLM's cuda.py: on SM 10.x from v0.17.0 FlashInfer's sparse MLA (standard cache
    layout, heads as they are) for 16 heads per rank or fewer and, from v0.19.0, for an fp8
    cache; FlashMLA's sparse kernels (fp8_ds_mla, padded heads) otherwise."""
    m = _model("DeepSeek-V3.2")
    b = sparse_backend(m, sm, version, tp, kv_b)
    assert (b.name, b.latent_bytes, b.heads) == (name, latent, heads)
    assert served_kv_bytes_per_token(m, sm, version, tp, kv_b) == 61 * (latent + 132)


def test_memory_plan_on_blackwell_takes_flashinfers_fp8_layout() -> None:
    """The NVFP4 checkpoint (FP8 KV cache) at TP 4 on a B200 with vLLM 0.19.0: FlashInfer's
    sparse MLA keeps the latent as 576 fp8 values, so 61 x (576 + 132) bytes a token."""
    m, gpu, par = _model("DeepSeek-V3.2-NVFP4"), get_gpu("B200"), ParallelConfig(tensor_parallel_size=4)
    plan = plan_memory(m, gpu, resolved_engine(EngineConfig(version="0.19.0"), m, gpu, par), par)
    assert plan.kv_bytes_per_token == 61 * 708 == 43_188


# ---------------------------------------------------------------------- parsing


def test_missing_indexer_field_is_named() -> None:
    cfg = _cfg("DeepSeek-V3.2")
    del cfg["index_n_heads"]
    with pytest.raises(CatalogError, match="x.json: index_n_heads must be a positive integer"):
        from_hf_config(cfg, "x", source="x.json")


def test_index_topk_needs_mla_with_a_query_latent() -> None:
    cfg = _cfg("DeepSeek-V3.2")
    cfg["q_lora_rank"] = None
    with pytest.raises(CatalogError, match="needs multi-head latent attention with a query latent"):
        from_hf_config(cfg, "x", source="x.json")


def test_shared_indexer_layers_are_refused() -> None:
    """GLM-5.2's ``indexer_types`` lets layers reuse an earlier layer's top-k; vLLM v0.19.0
    does not read it, and servesim does not model it."""
    cfg = {**_cfg("GLM-5"), "indexer_types": ["full", "shared", "shared", "shared"] * 19 + ["full"] * 2}
    with pytest.raises(CatalogError, match="x.json: indexer_types has 57 layers"):
        from_hf_config(cfg, "x", source="x.json")


# ---------------------------------------------------------------------- step time


def test_padded_heads_follow_flashmla_sparse() -> None:
    assert padded_heads(16, 90) == 64  # DeepSeek-V3.2 at TP 8 on Hopper
    assert padded_heads(16, 100) == 128  # Blackwell's bf16 kernel pads to 128
    assert padded_heads(128, 90) == 128
    assert padded_heads(8, None) == 64


def test_work_coefficients_by_hand() -> None:
    """DeepSeek-V3.2, TP 8 on an H200 (SM90), bf16 latent cache: per layer the indexer scores
    2 x 64 x 128 FLOPs per pair, reads 132 key bytes per context token; the sparse attention
    computes 2 x 64 padded heads x (2 x 512 + 64) FLOPs per chosen pair."""
    m = _model("DeepSeek-V3.2")
    backend = sparse_backend(m, 90, "0.19.0", 8, 2.0)
    assert (backend.name, backend.heads, backend.latent_bytes) == ("flashmla_sparse", 64, 1152)
    w = sparse_attention_work(m, backend, tp=8)
    assert w.topk == 2048
    assert w.score_f == 61 * 2 * 64 * 128
    assert w.key_b == 61 * 132
    assert w.attn_f == 61 * 2 * 64 * 1088
    assert w.attn_b == 61 * 1152
    assert w.proj_f == 61 * 2 * (1536 * 8192 + 7168 * 128 + 7168 * 64 + 256)
    assert w.kernels == 61 * 9
    # wq_b and wk in fp8 (1 byte), weights_proj and k_norm in bf16, whole on every rank
    assert w.proj_w == 61 * ((1536 * 8192 + 7168 * 128) + 2 * (7168 * 64 + 256))


def test_indexer_projections_stream_their_weights_at_decode() -> None:
    """At a decode of 32 requests the indexer's projections (2 x 13,959,424 FLOPs per token
    and layer) are memory-bound on an H200: 61 x 14.4 MB of weights read once a step."""
    perf, gpu = _v32("roofline"), get_gpu("H200-SXM")
    st = BatchStats(num_decode_reqs=32, sum_decode_context=32 * 4096)
    weights = 61 * ((1536 * 8192 + 7168 * 128) + 2 * (7168 * 64 + 256))
    queries = 32 * 61 * 6 * 64 * 128  # bf16 written and read, fp8 written and read
    flops = 32 * 61 * 2 * 13_959_424
    assert flops / (gpu.flops_for("fp8") * 0.7) < (weights + queries) / (gpu.mem_bw * 0.8)
    assert perf.terms_s(st)["indexer_proj"] == pytest.approx((weights + queries) / (gpu.mem_bw * 0.8))


def _v32(perf_model: Literal["roofline", "kernels"]) -> SparseAttentionPerfModel:
    m, gpu = _model("DeepSeek-V3.2"), get_gpu("H200-SXM")
    par = ParallelConfig(tensor_parallel_size=8)
    base = build_step_model(m, gpu, par, HardwareConfig(gpu="H200-SXM", perf_model=perf_model))
    perf = sparse_attention_perf_model(m, gpu, base, 90, "0.19.0", 8, 1, 2.0)
    assert isinstance(perf, SparseAttentionPerfModel)
    return perf


@pytest.mark.parametrize("perf_model", ["roofline", "kernels"])
def test_decode_main_attention_stops_at_topk_and_the_indexer_grows(
    perf_model: Literal["roofline", "kernels"],
) -> None:
    """A decode at 4k and at 32k: the main attention reads index_topk (2,048) latents at both,
    so the step grows only by the indexer's scores over the whole context, which are
    memory-bound on an H200: (132 key + 8 logit bytes) x 61 layers per context token."""
    perf, gpu = _v32(perf_model), get_gpu("H200-SXM")
    n = 32
    at = {ctx: BatchStats(num_decode_reqs=n, sum_decode_context=n * ctx) for ctx in (4096, 32768)}
    assert perf.sparse_stats(at[32768]).sum_decode_context == n * 2048
    assert perf.sparse_stats(at[4096]).sum_decode_context == n * 2048

    def indexer_s(ctx: int) -> float:
        flops = n * ctx * 61 * 2 * 64 * 128 / (gpu.flops_for("fp8") * 0.5)
        mem = n * ctx * 61 * (132 + 8) / (gpu.mem_bw * 0.7)
        assert mem > flops  # memory-bound at decode
        return mem

    assert perf.terms_s(at[32768])["indexer_decode"] == pytest.approx(indexer_s(32768))
    grow = perf.batch_time(at[32768]) - perf.batch_time(at[4096])
    assert grow == pytest.approx(indexer_s(32768) - indexer_s(4096))
    # the vectorized decode path agrees with batch_time
    vec = perf.decode_step_times(n, np.array([n * 4096.0, n * 32768.0]))
    assert vec == pytest.approx([perf.batch_time(at[4096]), perf.batch_time(at[32768])])


@pytest.mark.parametrize("ctx", [4096, 32768])
def test_prefill_terms_by_hand(ctx: int) -> None:
    """A whole prompt of ctx tokens: the indexer scores ctx^2 / 2 causal pairs in fp8; the
    sparse attention min(ctx^2 / 2, ctx x 2048) pairs at 64 padded heads in bf16, reading
    the context's latents once; the base model sees one key per prompt token."""
    perf, gpu = _v32("roofline"), get_gpu("H200-SXM")
    st = BatchStats(num_prefill_tokens=ctx, prefill_attn_work=ctx * ctx / 2, num_prefill_reqs=1)
    terms = perf.terms_s(st)
    pairs = ctx * ctx / 2
    # query x attends to min(x, 2048) keys: 2048^2 / 2 for the first 2,048, 2,048 each after
    chosen = 2048 * 2048 / 2 + (ctx - 2048) * 2048
    assert sparse_prefill_pairs(st, 2048) == chosen
    attn = max(
        chosen * 61 * 2 * 64 * 1088 / (gpu.flops_for("bfloat16") * 0.55),
        ctx * 61 * 1152 / (gpu.mem_bw * 0.7),
    )
    assert terms["sparse_prefill"] == pytest.approx(attn)
    scores = max(
        pairs * 61 * 2 * 64 * 128 / (gpu.flops_for("fp8") * 0.55),
        (3 * 61 * 132 * ctx + 61 * 8 * pairs) / (gpu.mem_bw * 0.7),
    )
    assert terms["indexer_prefill"] == pytest.approx(scores)
    assert perf.sparse_stats(st).prefill_attn_work == ctx
    # by hand: 6,291,456 of the 8,388,608 causal pairs at 4k, 65,011,712 of 536,870,912 at 32k
    assert chosen == {4096: 6_291_456, 32768: 65_011_712}[ctx]
    assert pairs == {4096: 8_388_608, 32768: 536_870_912}[ctx]


@pytest.mark.parametrize(
    ("chunk", "before", "pairs"),
    [
        (1000, 0, 1000 * 500),  # within the first 2,048 tokens: causal, c (p + c / 2)
        (1000, 5000, 1000 * 2048),  # past them: K each
        (2048, 1024, (2048**2 - 1024**2) / 2 + 1024 * 2048),  # across: causal, then K
    ],
)
def test_sparse_prefill_pairs_of_a_chunk(chunk: int, before: int, pairs: float) -> None:
    st = BatchStats()
    st.add_chunk(chunk, before)
    assert sparse_prefill_pairs(st, 2048) == pairs
    st.add_chunk(chunk, before)  # two equal chunks: twice the pairs
    assert sparse_prefill_pairs(st, 2048) == 2 * pairs


def test_work_counts_add_the_terms_to_the_base() -> None:
    """MFU/MBU: the base model's FLOPs and bytes at the sparse statistics plus the added
    terms' (for a 4k decode: the indexer's 2 x 64 x 128 FLOPs and 132 + 8 bytes per context
    token and layer, its projections, its queries' quantization)."""
    perf = _v32("roofline")
    st = BatchStats(num_decode_reqs=1, sum_decode_context=4096)
    w = perf.work
    flops, nbytes = perf.batch_work(st)
    assert flops == pytest.approx(perf.base.batch_flops(perf.sparse_stats(st)) + w.proj_f + w.score_f * 4096)
    assert nbytes == pytest.approx(
        perf.base.batch_bytes(perf.sparse_stats(st)) + w.proj_w + w.quant_b + (w.key_b + w.logit_b) * 4096
    )
    assert (perf.batch_flops(st), perf.batch_bytes(st)) == pytest.approx((flops, nbytes))
    assert perf.pp == 1 and perf.bubble_fraction(st) == 0.0


def test_a_dense_model_is_not_wrapped() -> None:
    m, gpu = load_model("Llama-3.1-8B"), get_gpu("H100-SXM")
    base = build_step_model(m, gpu, ParallelConfig(), HardwareConfig(gpu="H100-SXM", perf_model="roofline"))
    assert sparse_attention_perf_model(m, gpu, base, 90, "0.19.0") is base


# ---------------------------------------------------------------------- end to end


def test_deepseek_v32_simulates_every_request_to_the_end() -> None:
    sc = {
        "model": {"name": str(CONFIGS / "DeepSeek-V3.2")},
        "hardware": {"gpu": "H200-SXM"},
        "parallel": {"tensor_parallel_size": 8},
        "workload": {
            "type": "synthetic",
            "num_requests": 40,
            "arrival": {"rate": 2.0},
            "prompt_len": {"value": 6000},
            "output_len": {"value": 64},
        },
    }
    r = servesim.simulate(sc)
    counts = r.summary["counts"]
    assert counts["num_finished"] == counts["num_requests"] == 40
    assert r.summary["memory"][0]["kv_bytes_per_token"] == 78_324
    assert "flashmla_sparse" in json.dumps(r.summary["vllm_execution_path"])
