"""Multi-LoRA serving (engine.lora): kernel work, buffer memory and loads hand-computed for
Llama-3.1-8B, the max_loras limit on a tiny fixture, LRU slots, and the limit as a property."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig, LoraConfig, ParallelConfig
from servesim.deployment import resolved_engine
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.lora import AdapterSlots, LoraScheduler, assign_adapters
from servesim.engine.policy_base import PolicyOptions
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import SchedulerConfig
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats, ConstantPerfModel
from servesim.perf.lora import LoraCostModel, lora_costs, module_dims
from servesim.perf.memory import plan_memory
from servesim.workload.base import Workload

LLAMA = load_model("meta-llama/Llama-3.1-8B")  # hidden 4096, 32 q / 8 kv heads of 128, MLP 14336, 32 layers
H100 = get_gpu("H100-SXM")
# Per layer and rank, sum of (d_in + d_out) over q, k, v, o, gate, up, down (TP 1):
# (4096+4096) + 2 * (4096+1024) + (4096+4096) + 2 * (4096+14336) + (14336+4096) = 81,920
PER_LAYER = 81_920
PER_RANK = 32 * PER_LAYER  # 2,621,440 values per unit of rank


def lora(**kw: object) -> LoraConfig:
    return LoraConfig(enabled=True, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- shapes and work


def test_module_dims_of_llama_8b_and_their_tensor_parallel_shards():
    assert module_dims(LLAMA) == {
        "q_proj": (4096, 4096),
        "k_proj": (4096, 1024),
        "v_proj": (4096, 1024),
        "o_proj": (4096, 4096),
        "gate_proj": (4096, 14336),
        "up_proj": (4096, 14336),
        "down_proj": (14336, 4096),
    }
    # TP 2: column-parallel layers shard d_out, row-parallel ones (o, down) d_in.
    d2 = module_dims(LLAMA, tp=2)
    assert d2["q_proj"] == (4096, 2048) and d2["k_proj"] == (4096, 512) and d2["o_proj"] == (2048, 4096)
    assert d2["gate_proj"] == (4096, 7168) and d2["down_proj"] == (7168, 4096)
    assert lora_costs(lora(num_adapters=1), LLAMA, H100, tp=2).elems_per_rank == 32 * 55_296


def test_step_flops_and_bytes_by_hand():
    c = lora_costs(lora(max_loras=4, max_lora_rank=16, num_adapters=8), LLAMA, H100)
    assert c.elems_per_rank == PER_RANK
    # FLOPs: 2 x 100 tokens x rank 16 x 2,621,440
    assert c.flops(100) == 8_388_608_000
    # Bytes of a step with 3 adapters and 100 adapter tokens:
    #   weights 3 x 16 x 2,621,440 x 2 B                             =   251,658,240
    #   activations 100 x 32 x 124,928 x 2 B (sum of d_in + 2 d_out)  =   799,539,200
    #   fp32 intermediate 2 x 100 x 16 x (32 x 7 slices) x 4 B        =     2,867,200
    assert c.bytes(100, 3) == 251_658_240 + 799_539_200 + 2_867_200
    assert c.bytes(0, 3) == 0.0 and c.flops(0) == 0.0
    # The kernels' time: 256 kernels (2 per wrapped layer, 4 per layer) x 2 us plus the longer
    # roof: memory, 1.054 GB at 0.6 x 3.35 TB/s, against 8.39 GFLOP at 0.5 x 989 TFLOP/s.
    memory_s = 1_054_064_640 / (0.6 * 3.35e12)
    assert 8_388_608_000 / (0.5 * 989e12) < memory_s
    assert c.kernel_s(100, 3) == pytest.approx(256 * 2e-6 + memory_s, rel=1e-12)
    assert c.kernel_s(0, 3) == 0.0


def test_cost_model_adds_kernels_and_loads_to_the_base_step():
    c = lora_costs(lora(max_loras=4, num_adapters=8), LLAMA, H100)
    perf = LoraCostModel(ConstantPerfModel(step_s=0.01), c)
    st = BatchStats(
        num_decode_reqs=100, sum_decode_context=5000, num_lora_tokens=100, num_loras=3, lora_load_s=0.02
    )
    assert perf.batch_time(st) == pytest.approx(0.01 + c.kernel_s(100, 3) + 0.02, rel=1e-12)
    assert perf.batch_flops(st) == c.flops(100) and perf.batch_bytes(st) == c.bytes(100, 3)
    assert perf.batch_time(BatchStats(num_decode_reqs=100)) == 0.01  # no adapter tokens: nothing added


def test_buffer_memory_comes_out_of_the_kv_cache():
    cfg = lora(max_loras=4, max_lora_rank=16, num_adapters=32)
    # 4 slots x rank 16 x 2,621,440 x 2 B = 335,544,320 B = 160 KV blocks of 16 x 128 KiB
    assert lora_costs(cfg, LLAMA, H100).buffer_bytes == 335_544_320
    par = ParallelConfig()
    off = plan_memory(LLAMA, H100, resolved_engine(EngineConfig(max_model_len=8192), LLAMA, H100, par), par)
    on = plan_memory(
        LLAMA, H100, resolved_engine(EngineConfig(max_model_len=8192, lora=cfg), LLAMA, H100, par), par
    )
    assert off.lora_bytes == 0.0 and on.lora_bytes == 335_544_320
    assert off.kv_bytes_per_block == 2 * 1024 * 1024
    assert off.num_gpu_blocks - on.num_gpu_blocks == 160


def test_load_time_is_bytes_over_bandwidth():
    cfg = lora(
        max_lora_rank=16,
        adapters=[
            {"name": "sql", "rank": 8, "target_modules": ["q_proj", "v_proj"]},
            {"name": "chat", "rank": 16},
        ],
        disk_gb_per_s=2.0,
    )
    c = lora_costs(cfg, LLAMA, H100, pcie_gb_per_s=25.0)
    # sql: rank 8 x 32 layers x (q 4096+4096 + v 4096+1024) x 2 B = 6,815,744 B, on disk and to the GPU
    assert c.adapter_bytes[1] == (6_815_744, 6_815_744)
    assert c.load_s(1, from_disk=True) == pytest.approx(6_815_744 / 2e9 + 6_815_744 / 25e9, rel=1e-12)
    assert c.load_s(1, from_disk=False) == pytest.approx(6_815_744 / 25e9, rel=1e-12)
    # chat: rank 16, every module: 16 x 2,621,440 x 2 B = 83,886,080 B
    assert c.adapter_bytes[2] == (83_886_080, 83_886_080)
    # TP 2: the disk read is the whole checkpoint, the copy this GPU's shard (16 x 32 x 55,296 x 2 B)
    c2 = lora_costs(cfg, LLAMA, H100, tp=2)
    assert c2.adapter_bytes[2] == (83_886_080, 56_623_104)


# --------------------------------------------------------------------------- slots


def test_lru_slots_evict_the_least_recently_used():
    s = AdapterSlots(num_gpu_slots=2, num_cpu_slots=3)
    seen = [(a, s.activate(a)) for a in (1, 2, 3, 1, 2, 4, 3)]
    assert seen == [
        (1, (True, True)),
        (2, (True, True)),
        (3, (True, True)),  # GPU evicts 1
        (1, (False, True)),  # in host memory: copied back, GPU evicts 2
        (2, (False, True)),  # GPU evicts 3
        (4, (True, True)),  # host memory evicts 3, GPU evicts 1
        (3, (True, True)),  # read from disk again
    ]
    assert list(s.gpu) == [4, 3] and list(s.cpu) == [2, 4, 3]


def test_host_eviction_frees_the_gpu_slot_too():
    s = AdapterSlots(num_gpu_slots=2, num_cpu_slots=2)
    s.activate(1)
    s.activate(2)
    s.activate(1)  # 2 is now the least recently used in both
    assert s.activate(3) == (True, True)
    assert list(s.cpu) == [1, 3] and list(s.gpu) == [1, 3]


# --------------------------------------------------------------------------- scheduler


def make_lora_scheduler(adapter_of: list[int], num_gpu_blocks: int = 11, **kw: object) -> LoraScheduler:
    cfg = lora(
        adapters=[
            {"name": "a", "rank": 8, "target_modules": ["q_proj", "v_proj"]},
            {"name": "b", "rank": 16},
            {"name": "c", "rank": 16},
            {"name": "d", "rank": 16},
        ],
        **kw,
    )
    kv = KVCacheManager(num_gpu_blocks, 16, False, 4096)
    return LoraScheduler(
        SchedulerConfig(max_model_len=4096),
        kv,
        PolicyOptions(),
        cfg,
        lora_costs(cfg, LLAMA, H100),
        np.asarray(adapter_of, np.int64),
    )


def test_max_loras_skips_a_request_and_admits_the_ones_behind_it():
    #          r0 r1 r2 r3 r4: adapters a, b, a, c, base model; two slots
    s = make_lora_scheduler([1, 2, 1, 3, 0], max_loras=2)
    reqs = [Request(i, 0.0, 16, 2) for i in range(5)]
    for r in reqs:
        s.add_request(r)
    c = s.costs
    # Step 1: r3 (adapter c, a third one) is skipped; r4 behind it is admitted; r3 keeps its place.
    out = s.schedule()
    assert [r.idx for r in out.reqs] == [0, 1, 2, 4] and out.num_tokens == [16, 16, 16, 16]
    assert [r.idx for r in s.waiting] == [3]
    assert out.stats.num_lora_tokens == 48 and out.stats.num_loras == 2
    assert out.stats.lora_load_s == pytest.approx(c.load_s(1, True) + c.load_s(2, True), rel=1e-12)
    s.update_from_output(out, 1.0)
    # Step 2: the running requests decode with a and b: r3 is skipped again; all finish.
    out = s.schedule()
    assert [r.idx for r in out.reqs] == [0, 1, 2, 4] and out.stats.lora_load_s == 0.0
    assert out.stats.num_lora_tokens == 3
    _, finished = s.update_from_output(out, 2.0)
    assert [r.idx for r in finished] == [0, 1, 2, 4]
    # Step 3: r3 runs; c takes the least recently used slot (a) and host slot (a).
    out = s.schedule()
    assert [r.idx for r in out.reqs] == [3] and reqs[3].status == ReqStatus.RUNNING
    assert out.stats.lora_load_s == pytest.approx(c.load_s(3, True), rel=1e-12)
    assert list(s.slots.gpu) == [2, 3] and list(s.slots.cpu) == [2, 3]
    t = s.totals
    assert (t.num_delayed, t.num_skips, t.num_gpu_loads, t.num_disk_loads) == (1, 2, 3, 3)
    assert t.load_s == pytest.approx(c.load_s(1, True) + c.load_s(2, True) + c.load_s(3, True), rel=1e-12)


def test_a_base_model_step_touches_no_slot():
    s = make_lora_scheduler([0, 0], max_loras=1)
    for i in range(2):
        s.add_request(Request(i, 0.0, 16, 1))
    out = s.schedule()
    assert [r.idx for r in out.reqs] == [0, 1]
    assert out.stats.num_lora_tokens == 0 and out.stats.lora_load_s == 0.0 and not s.slots.gpu


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.integers(0, 4), st.integers(1, 40), st.integers(1, 6), st.integers(0, 5)),
        min_size=1,
        max_size=14,
    ),
    max_loras=st.integers(1, 3),
    num_gpu_blocks=st.integers(5, 30),
    budget=st.sampled_from([16, 48, 8192]),
)
def test_never_more_than_max_loras_adapters_in_a_step_and_no_request_lost(
    data: list[tuple[int, int, int, int]], max_loras: int, num_gpu_blocks: int, budget: int
):
    s = make_lora_scheduler([a for a, _, _, _ in data], num_gpu_blocks, max_loras=max_loras)
    s.cfg.max_num_batched_tokens = budget
    reqs = [Request(i, float(at), p, o) for i, (_, p, o, at) in enumerate(data)]
    finished: list[int] = []
    for step in range(2000):
        for r in reqs:
            if r.arrival_s == step:  # requests arrive at steps 0..5
                s.add_request(r)
        out = s.schedule()
        loras = {s.adapter(r) for r in out.reqs} - {0}
        assert len(loras) <= max_loras
        assert out.stats.num_loras == len(loras)
        _, done = s.update_from_output(out, float(step))
        finished += [r.idx for r in done]
        if step >= 5 and not s.has_work():
            break
    assert sorted(finished) == list(range(len(reqs)))
    assert s.totals.max_loras_in_step <= max_loras


# --------------------------------------------------------------------------- adapters of requests


def _workload(n: int) -> Workload:
    return Workload(
        arrival_s=np.zeros(n), num_prompt_tokens=np.ones(n, np.int64), num_output_tokens=np.ones(n, np.int64)
    )


def test_zipf_popularity_and_base_fraction():
    n = 200_000
    ids = assign_adapters(lora(num_adapters=4, popularity="zipf", zipf_exponent=1.0, seed=3), _workload(n))
    # Zipf s=1 over 4: weights 1, 1/2, 1/3, 1/4 -> 12/25, 6/25, 4/25, 3/25
    share = np.bincount(ids, minlength=5)[1:] / n
    assert share == pytest.approx([0.48, 0.24, 0.16, 0.12], abs=0.005)
    ids = assign_adapters(lora(num_adapters=4, base_fraction=0.25, seed=3), _workload(n))
    share = np.bincount(ids, minlength=5) / n
    assert share == pytest.approx([0.25, 0.1875, 0.1875, 0.1875, 0.1875], abs=0.005)


def test_adapter_column_of_a_generic_trace(tmp_path):
    from servesim.workload.traces import read_trace

    path = tmp_path / "t.csv"
    path.write_text(
        "arrived_at_s,num_prompt_tokens,num_output_tokens,adapter\n0,10,5,sql\n1,10,5,\n2,10,5,chat\n3,10,5,sql\n"
    )
    wl = read_trace(path)
    assert wl.meta["adapter_names"] == ["sql", "chat"] and wl.adapter.tolist() == [0, -1, 1, 0]
    cfg = lora(adapters=[{"name": "chat", "rank": 8}, {"name": "sql", "rank": 16}])
    assert assign_adapters(cfg, wl).tolist() == [2, 0, 1, 2]
    # a name this engine does not serve: never routed here (a name no pool serves is refused
    # at start-up, cluster.models.check_adapters; tests/test_user_inputs.py)
    assert assign_adapters(lora(adapters=[{"name": "chat", "rank": 8}]), wl).tolist() == [0, 0, 1, 0]


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_loras": 4, "max_cpu_loras": 2, "num_adapters": 4}, "max_cpu_loras"),
        ({"max_lora_rank": 12, "num_adapters": 4}, "max_lora_rank 12"),
        ({"max_lora_rank": 8, "adapters": [{"name": "x", "rank": 16}]}, "above max_lora_rank"),
        ({}, "num_adapters"),
    ],
)
def test_bad_lora_config(fields: dict, message: str):
    with pytest.raises(ValueError, match=message):
        lora(**fields)


def test_lora_needs_the_v1_policy_and_refuses_what_vllm_refuses():
    with pytest.raises(ValueError, match="policy sarathi"):
        EngineConfig(policy="sarathi", lora=lora(num_adapters=2))
    cfg = lora(num_adapters=2)
    with pytest.raises(ConfigError, match="MLA attention"):
        lora_costs(cfg, load_model("deepseek-ai/DeepSeek-V3"), H100, version="0.19.0")
    # Experts: FusedMoEWithLoRA first appears in vLLM 0.11.1 (absent from 0.11.0), and asserts
    # expert parallelism off.
    with pytest.raises(
        ConfigError, match=r"vLLM 0.11.0 has no LoRA for them .* first appears in vLLM 0.11.1"
    ):
        lora_costs(cfg, MIXTRAL, H100, version="0.11.0")
    with pytest.raises(ConfigError, match="expert_parallel_size"):
        lora_costs(cfg, MIXTRAL, H100, tp=2, version="0.11.1", ep=2)
    assert lora_costs(cfg, MIXTRAL, H100, version="0.11.1").num_moe_layers == 32


# --------------------------------------------------------------------------- experts (vLLM 0.11.1+)

MIXTRAL = load_model(
    "mistralai/Mixtral-8x7B-v0.1"
)  # hidden 4096, 32 q / 8 kv heads, 8 experts of 14336, top-2
# Attention per layer and rank (TP 1): q 4096+4096, k and v 4096+1024, o 4096+4096 = 26,624.
# One expert's w1, w3 (A r x 4096, B 14336 x r) and w2 (A r x 14336, B 4096 x r): 3 x (4096 + 14336) = 55,296.
MIXTRAL_DENSE = 32 * 26_624  # 851,968
MIXTRAL_EXPERT = 55_296


def test_expert_buffers_are_vllms_stacked_w1_w2_w3():
    c = lora_costs(lora(max_loras=4, max_lora_rank=16, num_adapters=2), MIXTRAL, H100)
    assert (c.elems_per_rank, c.expert_elems_per_rank, c.num_experts, c.top_k) == (
        MIXTRAL_DENSE,
        55_296,
        8,
        2,
    )
    # vLLM 0.11.1's create_lora_weights per MoE layer: w1_a and w3_a (4, 8, 16, 4096), w1_b and
    # w3_b (4, 8, 14336, 16), w2_a (4, 8, 16, 14336), w2_b (4, 8, 4096, 16), all bf16:
    per_moe_layer = 4 * 8 * 16 * (3 * 4096 + 3 * 14336) * 2
    attention = 4 * 16 * MIXTRAL_DENSE * 2
    assert c.buffer_bytes == 32 * per_moe_layer + attention == 1_920_991_232
    # TP 2: the experts' width is sharded (14336 / 2), hidden is not; attention as a dense model's.
    c2 = lora_costs(lora(max_loras=4, max_lora_rank=16, num_adapters=2), MIXTRAL, H100, tp=2)
    assert c2.expert_elems_per_rank == 3 * (4096 + 7168)
    assert c2.buffer_bytes == 4 * 16 * 2 * (32 * 21_504 + 32 * 8 * 33_792) == 1_195_376_640


def test_expert_step_flops_and_bytes_by_hand():
    c = lora_costs(lora(max_loras=4, max_lora_rank=16, num_adapters=2), MIXTRAL, H100)
    # FLOPs a token: 2 x 16 x (attention 851,968 + 32 MoE layers x top-2 x 55,296): the shrink
    # and expand of gate/up and down on each chosen expert.
    assert c.flops(100) == 100 * 2 * 16 * (851_968 + 32 * 2 * 55_296) == 14_050_918_400
    # 4 adapter tokens of 2 adapters: 2 tokens each, each choosing 2 of 8 experts uniformly,
    # touch 8 x (1 - (6/8)^2) = 3.5 experts an adapter: 7 (adapter, expert) pairs a layer.
    assert c.experts_touched(4, 2) == pytest.approx(7.0, rel=1e-12)
    weights = 2 * 16 * MIXTRAL_DENSE * 2 + 7 * 32 * 16 * 55_296 * 2  # 54,525,952 + 396,361,728
    # Activations: attention (q 4096 + 2 x 4096, k and v 4096 + 2 x 1024, o 4096 + 2 x 4096 =
    # 36,864 a layer) per token; gate and up 4096 + 2 x 14336, down 14336 + 2 x 4096 = 88,064
    # per (token, expert) pair: 4 x 2 x 32 = 256 pairs.
    acts = 4 * 32 * 36_864 * 2 + 256 * 88_064 * 2
    # Intermediates: fp32 on attention (32 x 4 slices), bf16 on the experts (3 slices a pair).
    inter = 2 * 4 * 16 * 128 * 4 + 2 * 256 * 16 * 3 * 2
    assert c.bytes(4, 2) == weights + acts + inter == 505_528_320
    # Kernels: a shrink and an expand per wrapped qkv and o (128), and per MoE layer the align
    # kernel with two shrink/expand pairs (5 x 32 = 160).
    memory_s = 505_528_320 / (0.6 * 3.35e12)
    assert c.kernel_s(4, 2) == pytest.approx(288 * 2e-6 + memory_s, rel=1e-12)


def test_a_shared_expert_is_wrapped_as_a_dense_mlp():
    from servesim.catalog.models import ModelSpec

    # Qwen1.5-MoE-A2.7B's shape (its config.json): 24 layers, hidden 2048, 16 heads of 128,
    # 60 experts of 1408, top-4, a shared expert of 5632.
    qwen = ModelSpec(
        name="Qwen1.5-MoE-A2.7B",
        num_layers=24,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=5632,
        vocab_size=151_936,
        num_experts=60,
        num_experts_per_tok=4,
        moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632,
    )
    c = lora_costs(lora(max_loras=1, max_lora_rank=8, num_adapters=1), qwen, H100)
    # Dense path a layer: attention 4 x 4096 + shared gate, up, down 3 x (2048 + 5632) = 39,424.
    assert c.elems_per_rank == 24 * 39_424
    assert c.expert_elems_per_rank == 3 * (2048 + 1408)
    assert c.buffer_bytes == 8 * (24 * 39_424 + 24 * 60 * 10_368) * 2
    assert c.flops(1) == 2 * 8 * (24 * 39_424 + 24 * 4 * 10_368)
    # qkv, o, gate_up, down wrapped a layer (2 kernels each) and 5 expert kernels: 312.
    assert c.kernel_s(1, 1) == pytest.approx(312 * 2e-6 + c.bytes(1, 1) / (0.6 * 3.35e12), rel=1e-12)
    # An adapter of the attention only holds no expert weights; one of every module holds the
    # shared expert's and all 60 experts' of each layer.
    att = lora(max_lora_rank=8, adapters=[{"name": "a", "rank": 8, "target_modules": ["q_proj", "v_proj"]}])
    assert lora_costs(att, qwen, H100).adapter_bytes[1] == (8 * 24 * 8192 * 2,) * 2
    assert c.adapter_bytes[1][0] == 8 * (24 * 39_424 + 24 * 60 * 10_368) * 2


def test_expert_buffers_come_out_of_the_kv_cache_of_a_run():
    import servesim
    from servesim.config import scenario_from_dict

    sc = {
        "model": {"name": "mistralai/Mixtral-8x7B-v0.1"},
        "hardware": {"gpu": "H100-SXM"},
        "parallel": {"tensor_parallel_size": 2},
        "engine": {"max_model_len": 4096, "lora": {"enabled": True, "max_loras": 4, "num_adapters": 4}},
        "workload": {
            "type": "synthetic",
            "num_requests": 40,
            "prompt_len": {"value": 256},
            "output_len": {"value": 8},
        },
    }
    res = servesim.simulate(scenario_from_dict(sc))
    assert res.summary["memory"][0]["lora_bytes"] == 1_195_376_640
    assert res.summary["lora"]["num_lora_tokens"] > 0
    with pytest.raises(ConfigError, match="first appears in vLLM 0.11.1"):
        servesim.simulate(scenario_from_dict({**sc, "engine": {**sc["engine"], "version": "0.11.0"}}))


# --------------------------------------------------------------------------- a whole run


def test_whole_run_reports_its_adapters_and_lora_off_reports_none():
    import servesim
    from servesim.config import scenario_from_dict

    base = {
        "model": {"name": "meta-llama/Llama-3.1-8B"},
        "hardware": {"gpu": "H100-SXM"},
        "engine": {"max_model_len": 4096},
        "workload": {
            "type": "synthetic",
            "arrival": {"process": "poisson", "rate": 20.0},
            "prompt_len": {"kind": "constant", "value": 256},
            "output_len": {"kind": "constant", "value": 16},
            "num_requests": 120,
            "seed": 2,
        },
    }
    lora_on = {"enabled": True, "max_loras": 2, "max_cpu_loras": 3, "num_adapters": 6}
    s = servesim.simulate(
        scenario_from_dict({**base, "engine": {"max_model_len": 4096, "lora": lora_on}})
    ).summary
    lo = s["lora"]
    assert s["counts"]["num_finished"] == 120
    assert lo["max_loras_in_step"] == 2  # six adapters in flight, two slots
    assert lo["num_delayed"] > 0 and lo["num_gpu_loads"] >= 6 and lo["num_disk_loads"] >= 6
    assert lo["buffer_bytes"] == 2 * 16 * PER_RANK * 2 == s["memory"][0]["lora_bytes"]
    assert lo["num_lora_tokens"] == 120 * (256 + 15)  # every prompt token and every decode
    off = servesim.simulate(scenario_from_dict(base)).summary
    assert "lora" not in off and off["memory"][0]["lora_bytes"] == 0.0


def test_a_trace_naming_adapters_without_lora_gets_a_notice(tmp_path) -> None:
    """The adapter column of a scenario without engine.lora was ignored without a word: the
    requests ran on the base model, where vLLM without --enable-lora answers 404 to them."""
    from servesim.sim import simulate

    (tmp_path / "t.csv").write_text(
        "arrived_at_s,num_prompt_tokens,num_output_tokens,adapter\n0,10,5,a\n1,10,5,b\n2,10,5,\n"
    )
    res = simulate({"workload": {"type": "trace", "path": str(tmp_path / "t.csv")}})
    (note,) = [n for n in res.summary["notices"] if n["code"] == "adapters_without_lora"]
    assert note["count"] == 2  # the empty cell names the base model
    assert note["message"].startswith("2 of 3 requests name a LoRA adapter ('a', 'b') but engine.lora is off")
