"""Qwen3.5's hybrid layers (Gated DeltaNet linear attention and gated full attention) on the
real configs (tests/fixtures/hf_configs): weights, per-token KV and per-request state,
vLLM's enlarged block size, the state traffic of a decode step and the recurrence of a
prefill chunk against hand-computed physics, the memory plan's capacity and a whole run.

Every figure below is worked out from the config's numbers (Qwen3.5-27B: hidden 5120, 64
layers of which 16 ``full_attention``, 24 query heads and 4 KV heads of 256, GDN with 16 key
heads and 48 value heads of 128, conv kernel 4, ``mamba_ssm_dtype`` float32, MLP 17408,
vocabulary 248320, untied) and vLLM 0.19.0's formulas cited in ``catalog.hybrid`` and
``perf.linear_attention``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import servesim
from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import scenario_from_dict
from servesim.deployment import resolve_deployment
from servesim.errors import CatalogError, ConfigError
from servesim.perf.base import BatchStats
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.linear_attention import hybrid_block_size, state_bytes_per_request, state_page_bytes
from servesim.perf.memory import NON_TORCH_RESERVE_BYTES
from servesim.perf.work import work_coefficients

CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"
Q27 = str(CONFIGS / "Qwen--Qwen3.5-27B_config.json")

# Qwen3.5-27B by hand.
H, V, FFN = 5120, 248320, 17408
KEY_DIM, VALUE_DIM = 16 * 128, 48 * 128  # 2048, 6144
CONV_DIM = 2 * KEY_DIM + VALUE_DIM  # 10240
# Gated attention: q and its gate (2 x 24 x 256), k and v (4 x 256 each), o_proj.
ATTN = H * (2 * 6144 + 2 * 1024) + 6144 * H  # 104,857,600
# GDN: in_proj_qkvz, in_proj_ba, out_proj; conv1d, A_log and dt_bias; the gated norm.
GDN_PROJ = H * (2 * KEY_DIM + 2 * VALUE_DIM) + H * 2 * 48 + VALUE_DIM * H  # 115,834,880
GDN = GDN_PROJ + CONV_DIM * 4 + 2 * 48 + 128  # 115,876,064
PARAMS_27B = 16 * ATTN + 48 * GDN + 64 * 3 * H * FFN + 64 * 2 * H + H + 2 * V * H
CONV_STATE = 3 * CONV_DIM * 2  # (kernel - 1) x conv_dim, bf16: 61,440 bytes
SSM_STATE = 48 * 128 * 128 * 4  # value heads x d_v x d_k, fp32: 3,145,728 bytes
KV_PER_LAYER = 2 * 4 * 256 * 2  # K and V of 4 heads of 256, bf16: 4,096 bytes a token
H100 = get_gpu("H100")


def test_qwen35_27b_parameters_by_hand() -> None:
    m = load_model(Q27)
    assert (m.num_layers, m.num_linear_layers, m.num_full_attention_layers) == (64, 48, 16)
    assert m.attn_output_gate and m.attn_params_per_layer() == ATTN
    assert m.linear_attention is not None
    assert m.linear_attention.params_per_layer(H) == GDN
    assert m.num_params() == PARAMS_27B == 26_895_990_272  # published: 27B (with a 0.4B vision encoder)
    assert m.linear_weight_bytes() == 2 * (16 * ATTN + 48 * GDN + 64 * 3 * H * FFN)


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [("Qwen3.5-35B-A3B", 35, 3), ("Qwen3.5-122B-A10B", 122, 10), ("Qwen3.5-397B-A17B", 397, 17)],
)
def test_moe_parameters_match_the_model_names(name: str, total_b: float, active_b: float) -> None:
    """Total parameters within 5% of the size in the name, active ones within half a
    billion (the names round; embeddings count as active, the MTP layer and the vision
    encoder are not counted)."""
    m = load_model(str(CONFIGS / f"Qwen--{name}_config.json"))
    assert m.is_moe and m.num_dense_layers == 0 and m.num_linear_layers == 3 * m.num_full_attention_layers
    assert m.num_params() / 1e9 == pytest.approx(total_b, rel=0.05)
    assert m.num_active_params() / 1e9 == pytest.approx(active_b, abs=0.5)


def test_kv_per_token_and_state_per_request_by_hand() -> None:
    m = load_model(Q27)
    assert m.linear_attention is not None
    assert m.kv_bytes_per_token() == 16 * KV_PER_LAYER == 65_536  # full-attention layers only
    assert m.linear_attention.state_bytes_per_layer(1, 2.0) == CONV_STATE + SSM_STATE == 3_207_168
    # vLLM's block: the least multiple of 16 tokens whose page of one layer holds a state.
    assert hybrid_block_size(m) == 16 * math.ceil(3_207_168 / (16 * KV_PER_LAYER)) == 784
    assert state_page_bytes(m) == 784 * KV_PER_LAYER == 3_211_264
    assert state_bytes_per_request(m) == 48 * 3_211_264  # one padded page per linear layer
    # TP 2: conv channels and value heads halve, so do the KV heads; the block stays 784.
    assert m.linear_attention.state_bytes_per_layer(2, 2.0) == (CONV_STATE + SSM_STATE) // 2
    assert m.kv_bytes_per_token(2) == 16 * KV_PER_LAYER // 2
    assert hybrid_block_size(m, 2) == 784
    # an fp8 KV cache halves the attention page, doubling the tokens a state page spans
    assert hybrid_block_size(m, 1, 1.0) == 16 * math.ceil(3_207_168 / (16 * KV_PER_LAYER / 2)) == 1568


def test_decode_step_reads_and_writes_every_state() -> None:
    """A decode step of B requests moves 2 x 48 x 3,207,168 bytes of state per request:
    bytes / (HBM bandwidth x the decode-attention memory fraction)."""
    m = load_model(Q27)
    per_req = 2 * 48 * (CONV_STATE + SSM_STATE)
    assert work_coefficients(m, 1, 1, 2.0, 2.0)["state_req"] == per_req
    pm = KernelPerfModel(m, H100)
    b = 64
    out = pm.breakdown(BatchStats(num_decode_reqs=b, sum_decode_context=b * 2000))
    expected = b * per_req / (H100.mem_bw * Efficiencies().attn_decode_memory)
    assert out["gdn_state"] == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(8.43e-3, rel=0.01)  # 19.7 GB a step: 8.4 ms on an H100
    # the roofline counts the same bytes in its decode class
    roof = pm.roofline._classes(BatchStats(num_decode_reqs=b, sum_decode_context=b * 2000))
    w = pm.roofline._work
    assert roof["attn_decode"][1] == pytest.approx(w["kv_tok"] * (b * 2000 + b) + (w["qo_tok"] + per_req) * b)


def test_prefill_chunk_recurrence_and_projections() -> None:
    """A 2048-token chunk: the gated delta rule's FLOPs per token and value head, 6 d_k d_v
    (state terms) + 2 C (3 d_k + 2 d_v) (intra-chunk, C = 64), over 48 heads and 48 layers,
    timed max(FLOPs / (bf16 peak x 0.55), bytes / (bandwidth x 0.70)); the projections
    are GEMMs of the config's shapes."""
    m = load_model(Q27)
    flops_tok = 48 * 48 * (6 * 128 * 128 + 2 * 64 * (3 * 128 + 2 * 128))
    bytes_tok = 48 * (3 * CONV_DIM + 2 * 48 + 4 * VALUE_DIM) * 2
    assert flops_tok == 415_236_096
    t = 2048
    pm = KernelPerfModel(m, H100)
    out = pm.breakdown(BatchStats(num_prefill_tokens=t, num_prefill_reqs=1, prefill_attn_work=t * t / 2))
    e = Efficiencies()
    expected = max(
        flops_tok * t / (H100.flops_for("bfloat16") * e.attn_prefill_compute),
        bytes_tok * t / (H100.mem_bw * e.attn_prefill_memory),
    )
    assert out["gdn_recurrence"] == pytest.approx(expected, rel=1e-9)
    ops = {name: mult for name, _, mult in pm._token_ops}
    assert ops["gemm_qkv"] == 16 and ops["gemm_o_proj"] == 16  # the full-attention layers
    assert ops["gemm_gdn_in_proj_qkvz"] == ops["gemm_gdn_out_proj"] == 48
    assert "n=14336 k=5120" in pm.sources["gemm_qkv"]  # q, gate, k, v
    assert "n=16384 k=5120" in pm.sources["gemm_gdn_in_proj_qkvz"]
    assert "n=5120 k=6144" in pm.sources["gemm_gdn_out_proj"]
    # the roofline's projections: every token through all mixer weights, plus the recurrence
    w = work_coefficients(m, 1, 1, 2.0, 2.0)
    assert w["proj_f"] == 2.0 * (16 * ATTN + 48 * GDN) + flops_tok
    assert w["pf_f"] == 4.0 * 24 * 256 * 16  # attention pairs in the 16 full layers only


def _scenario(**engine: object) -> servesim.Scenario:
    return scenario_from_dict(
        {
            "model": {"name": Q27},
            "hardware": {"gpu": "H100"},
            "engine": {"max_model_len": 32768, **engine},
            "workload": {
                "type": "synthetic",
                "num_requests": 120,
                "arrival": {"process": "poisson", "rate": 2},
                "prompt_len": {"kind": "uniform", "low": 200, "high": 3000},
                "output_len": {"kind": "uniform", "low": 20, "high": 300},
            },
        }
    )


def test_memory_plan_sets_a_state_aside_for_each_request_it_can_hold() -> None:
    """Block size 784; the states of as many requests as the memory holds with one block of
    tokens each, floor(room / (state + block)), are set aside (room: what weights,
    activations and the fixed reserve leave), and the rest is token blocks."""
    dep = resolve_deployment(_scenario())
    plan, state, block = dep.plan, 48 * 3_211_264, 784 * 65_536
    assert dep.engine.block_size == 784 and not dep.engine.enable_prefix_caching
    assert (plan.block_size, plan.kv_bytes_per_block) == (784, block)
    room = plan.usable_bytes - plan.weights_bytes - plan.activation_bytes - NON_TORCH_RESERVE_BYTES
    n = math.floor(room / (state + block))
    assert plan.reserve_bytes - NON_TORCH_RESERVE_BYTES == n * state
    assert plan.num_gpu_blocks == math.floor((room - n * state) / block)
    assert 60 < n <= plan.num_gpu_blocks < 120  # ~12 GB: 90 requests of <= 784 tokens
    assert dep.engine.max_num_seqs == n  # never more running than states set aside
    assert [x["code"] for x in dep.notices] == ["hybrid_no_prefix_caching"]  # no cap notice


def test_a_long_max_model_len_leaves_room_for_few_states() -> None:
    """At the config's 262,144 positions one request needs 335 blocks (17.2 GB): the states
    set aside are those the rest holds, and the engine runs at most that many requests,
    saying so."""
    dep = resolve_deployment(scenario_from_dict({"model": {"name": Q27}, "hardware": {"gpu": "H100"}}))
    plan, state, block = dep.plan, 48 * 3_211_264, 784 * 65_536
    room = plan.usable_bytes - plan.weights_bytes - plan.activation_bytes - NON_TORCH_RESERVE_BYTES
    n = math.floor((room - math.ceil(262_144 / 784) * block) / state)
    assert plan.reserve_bytes - NON_TORCH_RESERVE_BYTES == n * state
    assert dep.engine.max_num_seqs == n < plan.num_gpu_blocks
    assert [x["code"] for x in dep.notices] == ["hybrid_no_prefix_caching", "hybrid_state_cap"]
    assert f"at most {n} run at once" in dep.notices[1]["message"]
    wl = {"type": "synthetic", "num_requests": 20, "prompt_len": {"kind": "constant", "value": 1000}}
    run = servesim.simulate({"model": {"name": Q27}, "hardware": {"gpu": "H100"}, "workload": wl})
    mem = run.summary["memory"][0]
    assert mem["max_num_seqs"] == mem["num_mean_requests_fit"] == n  # not the 168 the blocks hold
    assert run.summary["counts"]["num_finished"] == 20


def test_prefix_caching_is_off_for_a_hybrid_model_as_in_vllm() -> None:
    dep = resolve_deployment(_scenario(enable_prefix_caching=True))
    assert not dep.engine.enable_prefix_caching
    assert [x["code"] for x in dep.notices] == ["hybrid_no_prefix_caching"]
    assert not resolve_deployment(_scenario(enable_prefix_caching=False)).notices
    with pytest.raises(ConfigError, match="engine.kv_offload"):
        resolve_deployment(_scenario(enable_prefix_caching=True, kv_offload={"cpu_size_gib": 50}))


def test_simulate_finishes_every_request() -> None:
    r = servesim.simulate(_scenario())
    counts = r.summary["counts"]
    assert counts["num_finished"] == counts["num_requests"] == 120
    assert r.summary["memory"][0]["block_size"] == 784
    # a decode step reads the 53.8 GB of weights at least: >= 16 ms on an H100
    assert r.summary["latency"]["tpot_s"]["p50"] > 53.8e9 / H100.mem_bw


def test_quantized_exports_and_unknown_layer_kinds_are_refused(tmp_path: Path) -> None:
    import json

    cfg = json.loads(Path(Q27).read_text())
    cfg["text_config"]["quantization_config"] = {"quant_method": "fp8"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match="quantized .* linear_attention layers"):
        load_model(str(path))
    cfg = json.loads(Path(Q27).read_text())
    del cfg["text_config"]["linear_num_value_heads"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match="layer_types holds 'linear_attention'"):
        load_model(str(path))


def test_a_tp_size_that_does_not_split_the_linear_heads_is_refused() -> None:
    """vLLM splits the 16 key and 48 value heads of the linear layers evenly: TP 12 divides
    the 24 attention heads and replicates the 4 KV heads, but does not divide 16."""
    sc = scenario_from_dict(
        {"model": {"name": Q27}, "hardware": {"gpu": "H100"}, "parallel": {"tensor_parallel_size": 12}}
    )
    with pytest.raises(ConfigError, match="tensor_parallel_size: 12 does not divide the 16 linear-attention"):
        resolve_deployment(sc)


def test_catalog_lists_the_architectures_modelled_and_refused() -> None:
    from typer.testing import CliRunner

    from servesim.cli import app

    res = CliRunner().invoke(app, ["catalog", "architectures"])
    assert res.exit_code == 0, res.output
    rows = {line.split()[0]: line for line in res.output.splitlines() if line.strip()}
    assert "modelled: Gated DeltaNet" in rows["qwen3_5_text"] and "Qwen3.5-MoE" in rows["qwen3_5_moe_text"]
    assert "refused: hybrid Mamba and attention layers" in rows["nemotron_h"]
