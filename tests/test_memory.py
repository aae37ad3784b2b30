"""Memory plan: hand-computed KV block counts and the does-not-fit errors."""

from __future__ import annotations

import math

import pytest

from servesim.catalog import get_gpu, load_model
from servesim.config import EngineConfig, ParallelConfig
from servesim.deployment import resolved_engine
from servesim.errors import ConfigError, DoesNotFitError
from servesim.perf.memory import (
    NON_TORCH_RESERVE_BYTES,
    fp32_router_extra_bytes,
    plan_memory,
    weights_bytes_per_gpu,
)

GIB = 2**30


def test_llama31_8b_on_h100_by_hand() -> None:
    plan = plan_memory(
        load_model("Llama-3.1-8B"),
        get_gpu("H100-SXM"),
        resolved_engine(EngineConfig(), load_model("Llama-3.1-8B"), get_gpu("H100-SXM"), ParallelConfig()),
        ParallelConfig(),
    )
    # Parameters: 32 layers x (QKV+O 4096*(4096+2*1024) + 4096*4096, MLP 3*4096*14336)
    # + embedding and LM head 2 * 128256*4096 + norms (2*32+1)*4096 = 8,030,261,248; bf16.
    weights = (32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) + 2 * 128256 * 4096 + 65 * 4096) * 2
    assert weights == 16_060_522_496
    assert plan.weights_bytes == weights
    # vLLM 0.32 `serve` defaults on an H100: 8192 batched tokens, 1024 sequences.
    # Profile run, 8192 tokens x 2 bytes x (4*4096 hidden + 6144 QKV + 2*14336 gate/up + 14336 act) = 1 GiB;
    # the sampler pass (8192*4096*2 + 1024 rows * 128256 * 14 bytes = 1.9 GB) is larger and sets the peak.
    assert 8192 * 2 * (4 * 4096 + 6144 + 3 * 14336) == GIB
    activation = 8192 * 4096 * 2 + 1024 * 128256 * 14
    assert plan.activation_bytes == activation
    assert plan.kv_bytes_per_token == 131072 and plan.kv_bytes_per_block == 2 * 2**20
    usable = 0.9 * 79.19 * GIB  # vLLM 0.19's default gpu_memory_utilization (the default version)
    blocks = math.floor((usable - weights - activation - NON_TORCH_RESERVE_BYTES) / (2 * 2**20))
    assert plan.num_gpu_blocks == blocks
    assert 27_000 < blocks < 30_000  # ~443k tokens, as vLLM reports for this model on an H100
    assert plan.max_model_len == 131072 and plan.block_size == 16
    assert "blocks" in plan.describe()


def test_gpu_memory_utilization_default_follows_the_version() -> None:
    """0.9 before vLLM 0.21, 0.92 from it (vllm-project/vllm#38284); a set value is kept."""
    m, g = load_model("Llama-3.1-8B"), get_gpu("H100-SXM")
    old = plan_memory(
        m, g, resolved_engine(EngineConfig(version="0.20.2"), m, g, ParallelConfig()), ParallelConfig()
    )
    new = plan_memory(
        m, g, resolved_engine(EngineConfig(version="0.21.0"), m, g, ParallelConfig()), ParallelConfig()
    )
    assert old.usable_bytes == pytest.approx(0.9 * g.mem_bytes)
    assert new.usable_bytes == pytest.approx(0.92 * g.mem_bytes)
    # The 0.02 of an H100 go to the KV cache whole (the rest of the plan is the same).
    rest = old.weights_bytes + old.activation_bytes + old.reserve_bytes
    assert (new.weights_bytes, new.activation_bytes, new.reserve_bytes) == (
        old.weights_bytes,
        old.activation_bytes,
        old.reserve_bytes,
    )
    assert old.num_gpu_blocks == math.floor((0.9 * g.mem_bytes - rest) / old.kv_bytes_per_block)
    assert new.num_gpu_blocks == math.floor((0.92 * g.mem_bytes - rest) / new.kv_bytes_per_block)
    kept = plan_memory(
        m,
        g,
        resolved_engine(EngineConfig(version="0.21.0", gpu_memory_utilization=0.8), m, g, ParallelConfig()),
        ParallelConfig(),
    )
    assert kept.usable_bytes == pytest.approx(0.8 * g.mem_bytes)


def test_tensor_parallel_shards_weights_and_kv() -> None:
    m, g = load_model("Llama-3.1-70B"), get_gpu("H100")
    eng = EngineConfig(max_model_len=8192)  # 128k tokens do not fit on TP=2 (vLLM refuses too)
    p2 = plan_memory(
        m,
        g,
        resolved_engine(eng, m, g, ParallelConfig(tensor_parallel_size=2)),
        ParallelConfig(tensor_parallel_size=2),
    )
    p4 = plan_memory(
        m,
        g,
        resolved_engine(eng, m, g, ParallelConfig(tensor_parallel_size=4)),
        ParallelConfig(tensor_parallel_size=4),
    )
    assert p2.weights_bytes == pytest.approx(2 * p4.weights_bytes, rel=1e-3)
    assert p2.kv_bytes_per_token == 2 * p4.kv_bytes_per_token
    assert p4.num_gpu_blocks > 2 * p2.num_gpu_blocks


def test_pipeline_parallel_halves_layers() -> None:
    m, g = load_model("Llama-3.1-70B"), get_gpu("H100")
    p = plan_memory(
        m,
        g,
        resolved_engine(
            EngineConfig(max_model_len=8192),
            m,
            g,
            ParallelConfig(tensor_parallel_size=2, pipeline_parallel_size=2),
        ),
        ParallelConfig(tensor_parallel_size=2, pipeline_parallel_size=2),
    )
    assert p.kv_bytes_per_token == m.kv_bytes_per_token(2) / 2
    assert p.weights_bytes < 0.55 * m.num_params() * 2 / 2


def test_llama2_70b_does_not_fit_on_one_l4() -> None:
    with pytest.raises(DoesNotFitError, match=r"weights need 138\.0 GB.*GB short; try tensor_parallel_size="):
        plan_memory(
            load_model("Llama-2-70B"),
            get_gpu("L4"),
            resolved_engine(EngineConfig(), load_model("Llama-2-70B"), get_gpu("L4"), ParallelConfig()),
            ParallelConfig(),
        )


def test_kv_cache_too_small_for_max_model_len() -> None:
    m, l4 = load_model("Llama-3.1-8B"), get_gpu("L4")
    with pytest.raises(DoesNotFitError, match=r"fewer than one max_model_len=131072 .*max_model_len <="):
        plan_memory(m, l4, resolved_engine(EngineConfig(), m, l4, ParallelConfig()), ParallelConfig())
    plan = plan_memory(
        m, l4, resolved_engine(EngineConfig(max_model_len=8192), m, l4, ParallelConfig()), ParallelConfig()
    )
    assert plan.num_gpu_blocks * 16 >= 8192
    forced = plan_memory(
        m,
        l4,
        resolved_engine(
            EngineConfig(num_gpu_blocks_override=100, max_model_len=1024), m, l4, ParallelConfig()
        ),
        ParallelConfig(),
    )
    assert forced.num_gpu_blocks == 100
    # An override must still hold one max_model_len sequence: 1024 / 16 blocks + the null block.
    plan_memory(
        m,
        l4,
        resolved_engine(
            EngineConfig(num_gpu_blocks_override=65, max_model_len=1024), m, l4, ParallelConfig()
        ),
        ParallelConfig(),
    )
    with pytest.raises(ConfigError, match=r"num_gpu_blocks_override \(64\) is below the 65 blocks"):
        plan_memory(
            m,
            l4,
            resolved_engine(
                EngineConfig(num_gpu_blocks_override=64, max_model_len=1024), m, l4, ParallelConfig()
            ),
            ParallelConfig(),
        )


def test_max_model_len_above_model_limit_is_rejected() -> None:
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        plan_memory(
            load_model("Llama-2-7B"),
            get_gpu("H100"),
            resolved_engine(
                EngineConfig(max_model_len=8192), load_model("Llama-2-7B"), get_gpu("H100"), ParallelConfig()
            ),
            ParallelConfig(),
        )


def test_fp8_kv_cache_doubles_blocks() -> None:
    m, g = load_model("Llama-3.1-8B"), get_gpu("H100")
    bf16 = plan_memory(m, g, resolved_engine(EngineConfig(), m, g, ParallelConfig()), ParallelConfig())
    fp8 = plan_memory(
        m, g, resolved_engine(EngineConfig(), m, g, ParallelConfig()), ParallelConfig(), kv_dtype_bytes=1
    )
    assert fp8.num_gpu_blocks in (2 * bf16.num_gpu_blocks, 2 * bf16.num_gpu_blocks + 1)


def test_fp8_weights_keep_embeddings_16_bit() -> None:
    m = load_model("Llama-3.1-8B", dtype="fp8")
    plan = plan_memory(
        m,
        get_gpu("H100"),
        resolved_engine(EngineConfig(), m, get_gpu("H100"), ParallelConfig()),
        ParallelConfig(),
    )
    assert (
        plan.weights_bytes
        == 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336) + (2 * 128256 * 4096 + 65 * 4096) * 2
    )


@pytest.mark.parametrize(
    "name, tp", [("Llama-3.1-70B", 1), ("Llama-3.1-70B", 8), ("Llama-2-70B", 1), ("Llama-3.1-8B", 1)]
)
def test_does_not_fit_hint_names_a_layout_that_fits(name: str, tp: int) -> None:
    """Every change a "does not fit" message suggests is accepted when applied."""
    import re

    m, l4 = load_model(name), get_gpu("L4")
    with pytest.raises(DoesNotFitError, match=r"\(checked to fit\)") as err:
        plan_memory(
            m,
            l4,
            resolved_engine(EngineConfig(), m, l4, ParallelConfig(tensor_parallel_size=tp)),
            ParallelConfig(tensor_parallel_size=tp),
        )
    tips = str(err.value).split("; ")[-1].removesuffix(" (checked to fit)").split(" or ")
    for tip in tips:
        fields = dict(re.findall(r"(\w+)\s*<?=\s*(\d+)", tip))
        par = ParallelConfig(
            tensor_parallel_size=int(fields.get("tensor_parallel_size", tp)),
            pipeline_parallel_size=int(fields.get("pipeline_parallel_size", 1)),
        )
        max_len = fields.get("max_model_len")
        plan_memory(
            m,
            l4,
            resolved_engine(EngineConfig(max_model_len=int(max_len) if max_len else None), m, l4, par),
            par,
        )


def test_fp32_router_adds_two_bytes_a_weight_on_every_rank() -> None:
    # MiniMax-M2's gate is fp32 in vLLM (MiniMaxM2MoE, params_dtype=torch.float32) and
    # replicated: 62 MoE layers x 3,072 x 256 x (4 - 2) bytes on each GPU, at any TP or PP 1.
    m = load_model("MiniMaxAI/MiniMax-M2.5")
    extra = 62 * 3072 * 256 * 2
    assert extra == 97_517_568
    assert fp32_router_extra_bytes(m) == fp32_router_extra_bytes(m, 1) == extra
    assert fp32_router_extra_bytes(m, pp=2) == 31 * 3072 * 256 * 2  # the stage's 31 MoE layers
    for tp in (1, 4):
        assert (
            weights_bytes_per_gpu(m, tp)
            == m.linear_weight_bytes(tp)
            + extra
            + (m.embedding_params(tp) + m.lm_head_params(tp) + 125 * 3072) * 2
        )
    # 16-bit routers (Qwen3-MoE, DeepSeek-V3, gpt-oss...) and dense models add nothing
    assert fp32_router_extra_bytes(load_model("Qwen/Qwen3-235B-A22B-FP8")) == 0.0
    assert fp32_router_extra_bytes(load_model("Llama-3.1-8B")) == 0.0
