"""Llama 4 (``llama4_text``): its interleaved MoE layers, shared expert and dense MLP width
read from the config as vLLM's ``llama4.py`` builds them, the parameter counts hand-computed,
and a served run (``catalog.llama4``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_data  # tests/ is on sys.path (rootdir-relative, no __init__)

from servesim.catalog import load_model
from servesim.catalog.hf_config import from_hf_config
from servesim.config import load_scenario
from servesim.errors import CatalogError
from servesim.sim import simulate

HF_CONFIGS = "models/hf_configs"

# A Llama 4 text config of Scout's widths with 8 layers, every second one MoE (Maverick's
# layout), written as Llama4ForConditionalGeneration's config nests it.
TINY = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_hidden_layers": 8,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
        "attention_chunk_size": 8192,
        "vocab_size": 202048,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    },
}

H, V = 5120, 202048
ATTN = H * (40 * 128 + 2 * 8 * 128) + 40 * 128 * H  # q, k, v and o projections
EXPERT = 3 * H * 8192  # gate, up, down of one routed (or the shared) expert
DENSE = 3 * H * 16384  # a dense layer's MLP (intermediate_size_mlp)


def test_interleaved_moe_layers_shared_expert_and_dense_width() -> None:
    m = from_hf_config(json.loads(json.dumps(TINY)), "tiny-llama4")
    # layers 1, 3, 5, 7 are MoE ((i + 1) % 2 == 0), the other four a dense MLP
    assert (m.num_moe_layers, m.num_dense_layers) == (4, 4)
    assert (m.moe_intermediate_size, m.shared_expert_intermediate_size, m.intermediate_size) == (
        8192,
        8192,
        16384,
    )
    layers = 8 * (ATTN + 2 * H) + 2 * V * H + H  # + norms, embedding, LM head, final norm
    moe = EXPERT + H * 16  # the shared expert and the router
    assert m.num_params() == layers + 4 * (16 * EXPERT + moe) + 4 * DENSE
    assert m.num_active_params() == layers + 4 * (1 * EXPERT + moe) + 4 * DENSE
    # the chunked local layers are charged as full ones: every layer's KV for every token
    assert m.num_sliding_layers == 0 and m.kv_bytes_per_token(tp=1) == 8 * 2 * 8 * 128 * 2


def test_moe_layers_given_as_a_list_and_a_step_of_0() -> None:
    listed = json.loads(json.dumps(TINY))
    listed["text_config"]["moe_layers"] = [0, 7]
    assert from_hf_config(listed, "t").num_moe_layers == 2
    dense = json.loads(json.dumps(TINY))
    dense["text_config"]["interleave_moe_layer_step"] = 0
    assert from_hf_config(dense, "t").num_moe_layers == 0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("interleave_moe_layer_step", -1, "interleave_moe_layer_step: expected 0 or more, found -1"),
        ("intermediate_size_mlp", None, "intermediate_size_mlp: expected a positive integer, found None"),
    ],
)
def test_a_bad_llama4_field_is_named(key: str, value: object, message: str) -> None:
    bad = json.loads(json.dumps(TINY))
    bad["text_config"][key] = value
    with pytest.raises(CatalogError, match=message):
        from_hf_config(bad, "t", source="c.json")


BASE = 48 * (ATTN + 2 * H) + 2 * V * H + H  # 48 layers' attention and norms, embeddings


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("stem", "experts", "dense_layers"),
    [
        ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 16, 0),
        ("meta-llama--Llama-4-Maverick-17B-128E-Instruct", 128, 24),
    ],
)
def test_the_public_llama4_configs(stem: str, experts: int, dense_layers: int) -> None:
    m = load_model(str(shared_data(HF_CONFIGS) / f"{stem}_config.json"))
    assert m.name == stem.replace("--", "/")
    moe_layers = 48 - dense_layers  # Scout: every layer MoE; Maverick: every second (step 2)
    assert (m.num_dense_layers, m.num_experts, m.num_experts_per_tok) == (dense_layers, experts, 1)
    shared = EXPERT + H * experts  # the shared expert and the router of an MoE layer
    total = BASE + moe_layers * (experts * EXPERT + shared) + dense_layers * DENSE
    active = BASE + moe_layers * (EXPERT + shared) + dense_layers * DENSE
    assert (m.num_params(), m.num_active_params()) == (total, active)
    # the model cards: 109B total (Scout, with its vision encoder, which servesim does not
    # count) and 400B (Maverick), 17B active
    assert total / 1e9 == pytest.approx(108 if experts == 16 else 400, rel=0.01)
    assert active / 1e9 == pytest.approx(17, rel=0.02)


def test_a_llama4_deployment_serves_every_request(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    sc = load_scenario(
        None,
        [
            f"model.name={tmp_path}",
            "engine.max_model_len=16384",
            "workload.type=synthetic",
            "workload.num_requests=40",
            "workload.arrival.rate=4",
        ],
    )
    res = simulate(sc)
    assert res.summary["counts"]["num_finished"] == 40
    # its memory plan holds the experts of the 4 MoE layers and the 4 dense MLPs
    (mem,) = res.summary["memory"]
    weights = 8 * ATTN + 2 * V * H + 4 * (16 * EXPERT + EXPERT) + 4 * DENSE
    assert mem["weights_bytes_per_gpu"] == pytest.approx(2 * weights, rel=1e-3)
