"""KV offload tiers (engine/kv_offload.py): hand-computed bytes and times, LRU order, a request
waiting for its load while another runs, block conservation across tiers."""

from __future__ import annotations

import pytest
from conftest import req
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig, KVOffloadConfig
from servesim.engine.events import EventLoop
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_offload import OffloadScheduler
from servesim.engine.kv_tiers import INF, ARCTier, LRUTier
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import SchedulerConfig
from servesim.metrics.records import OffloadTotals

# Llama-3.1-8B: 32 layers x 8 KV heads x head dim 128 x (K and V) x 2 bytes (bf16)
LLAMA8B_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # 131,072 = 128 KiB
BLOCK_BYTES = 16 * LLAMA8B_KV_BYTES_PER_TOKEN  # 2 MiB a 16-token block
GIB = 1 << 30


def test_kv_bytes_per_token_from_the_model_config():
    model = load_model("meta-llama/Llama-3.1-8B")
    assert model.kv_bytes_per_token(1, 2, 1) == LLAMA8B_KV_BYTES_PER_TOKEN
    assert model.kv_bytes_per_token(2, 2, 1) == LLAMA8B_KV_BYTES_PER_TOKEN / 2  # a TP=2 shard


def test_catalog_host_links():
    assert get_gpu("A100-80GB").host_bw == 25e9  # PCIe Gen4 x16 class
    assert get_gpu("H100-SXM").host_bw == 55.6e9  # PCIe Gen5 x16, NVbandwidth's H2D figure
    assert get_gpu("GB200").host_bw == 225e9  # NVLink-C2C 450 GB/s a direction, two GPUs


def offload_sched(
    backend: str = "native",
    cpu_gib: float = 1.0,
    num_gpu_blocks: int = 64,
    num_gpus: int = 1,
    block_bytes: float = BLOCK_BYTES,
    host_gb_per_s: float = 25.0,
    disk_gib: float = 0.0,
    max_num_batched_tokens: int = 8192,
    eviction_policy: str = "lru",
) -> tuple[OffloadScheduler, EventLoop]:
    off = KVOffloadConfig(
        backend=backend,
        cpu_size_gib=cpu_gib,
        host_gb_per_s=host_gb_per_s,
        disk_size_gib=disk_gib,
        eviction_policy=eviction_policy,
    )
    kv = KVCacheManager(num_gpu_blocks, 16, True, max_model_len=4096)
    loop = EventLoop()
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=max_num_batched_tokens, max_model_len=4096)
    return OffloadScheduler(cfg, kv, off, loop, block_bytes, num_gpus, OffloadTotals()), loop


def test_cpu_tier_size_from_kv_offloading_size():
    # 1 GiB / 2 MiB = 512 blocks; with TP=2 each GPU holds 1 MiB of a block: 1 GiB / (1 MiB x 2)
    assert offload_sched(cpu_gib=1.0)[0].cpu.num_blocks == 512
    assert offload_sched(cpu_gib=1.0, num_gpus=2, block_bytes=BLOCK_BYTES / 2)[0].cpu.num_blocks == 512
    # LMCache's 256-token chunk is 16 GPU blocks: 32 MiB, 32 of them in 1 GiB
    lm, _ = offload_sched("lmcache", cpu_gib=1.0)
    assert (lm.block_size, lm.factor, lm.block_bytes, lm.cpu.num_blocks) == (256, 16, 32 * (1 << 20), 32)


# --------------------------------------------------------------------------- LRU tier


def test_lru_tier_evicts_least_recent_ready_unreferenced():
    t = LRUTier("cpu", 3)
    assert t.prepare_store([1, 2, 3], now=0.0) == [1, 2, 3]
    assert t.prepare_store([4], now=0.0) is None  # none ready yet: nothing can go
    t.mark_ready([1, 2, 3], 1.0)
    assert t.lookup([1, 2, 3], now=0.5) == 0 and t.lookup([1, 2, 3], now=1.0) == 3
    t.touch([1, 2], now=1.0)  # a chain's first block becomes the most recent: LRU order 3, 2, 1
    assert list(t.blocks) == [3, 2, 1]
    assert t.prepare_store([1, 4], now=1.0) == [4]  # 1 is stored already; 3 goes
    assert list(t.blocks) == [2, 1, 4] and t.num_evictions == 1
    t.mark_ready([4], 1.0)
    t.add_ref([2], 1)  # a load reads 2: 1 goes instead
    assert t.prepare_store([5], now=1.0) == [5]
    assert list(t.blocks) == [2, 4, 5]
    assert t.lookup([2, 4, 5], now=2.0) == 2  # 5's store is not complete


def test_arc_tier_promotes_on_a_second_touch_and_adapts_its_target():
    t = ARCTier("cpu", 3)
    t.prepare_store([1, 2, 3], now=0.0)
    t.touch([1], now=0.0)  # not ready: a store's own touch, not a second use
    assert list(t.t1) == [2, 3, 1] and not t.t2
    t.mark_ready([1, 2, 3], 0.0)
    t.touch([2], now=1.0)  # ready and touched again: frequent
    assert list(t.t1) == [3, 1] and list(t.t2) == [2]
    # T1 holds 2 >= target 0: its oldest, 3, goes to the ghost list B1
    assert t.prepare_store([4], now=1.0) == [4]
    assert list(t.t1) == [1, 4] and list(t.b1) == [3] and t.num_evictions == 1
    t.touch([3], now=1.0)  # a B1 ghost: recency pays, T1's target grows by max(1, |B2|/|B1|)
    assert t.target_t1 == 1
    t.mark_ready([4], 1.0)
    t.add_ref([1], 1)  # a load reads 1: T1's next evictable is 4
    assert t.prepare_store([5], now=1.0) == [5]
    assert list(t.t1) == [1, 5] and list(t.b1) == [3, 4] and list(t.t2) == [2]
    assert set(t.blocks) == {1, 2, 5}


# --------------------------------------------------------------------------- native: async load


def chain(idx: int, prompt: int, ids: tuple[int, ...], max_tokens: int = 1) -> Request:
    return req(idx, prompt, max_tokens, hash_ids=ids, hash_block_tokens=16)


def step(s: OffloadScheduler, loop: EventLoop, at_s: float, end_s: float):
    loop.now = at_s
    out = s.schedule()
    loop.now = end_s
    s.update_from_output(out, end_s)
    return out


def test_stored_blocks_then_loaded_while_another_request_runs():
    s, loop = offload_sched(host_gb_per_s=25.0)
    a = chain(0, 64, (1, 2, 3, 4))  # 4 full blocks, one output token
    s.add_request(a)
    out = step(s, loop, 0.0, 0.010)
    assert out.reqs == [a] and a.status == ReqStatus.FINISHED
    block_s = BLOCK_BYTES / 25e9  # 83.886 us a block over 25 GB/s
    keys = a.block_hashes[:4]
    # stored as computed, the copy started at the step's end, ready when it is done
    assert [s.cpu.blocks[k].ready_s for k in keys] == [pytest.approx(0.010 + 4 * block_s)] * 4
    assert s.totals.num_stored_blocks == 4 and s.totals.store_bytes == 4 * BLOCK_BYTES
    s.gpu_kv.reset_prefix_cache()  # the GPU's copies are gone (evicted)

    b = chain(1, 80, (1, 2, 3, 4, 5))  # its first 64 tokens are A's prompt
    c = chain(2, 32, (9, 9))
    s.add_request(b)
    s.add_request(c)
    out = step(s, loop, 0.020, 0.0201)
    # B found 64 tokens in the CPU tier: its load starts, it is skipped, C runs
    assert out.reqs == [c] and list(s.waiting) == [b]
    load = s.loads[b.idx]
    assert load.done_s == pytest.approx(0.020 + 4 * block_s)  # 335.5 us after the step's start
    assert len(s.gpu_kv.req_blocks[b.idx]) == 4  # it holds the GPU blocks it loads into
    assert b.num_cached_tokens == 64 and s.totals.num_cpu_hit_tokens == 64
    assert s.totals.load_bytes == 4 * BLOCK_BYTES and s.totals.load_s == pytest.approx(4 * block_s)

    out = step(s, loop, 0.0201, 0.0202)  # the load is not done (0.0203355): B still waits
    assert b not in out.reqs and list(s.waiting) == [b]
    out = step(s, loop, 0.0204, 0.0205)  # done: B runs its last 16 tokens
    assert out.reqs == [b] and out.num_tokens == [16]
    assert b.num_computed_tokens == 80 and not s.loads
    s.check_invariants()


def test_idle_engine_wakes_when_a_load_ends():
    s, loop = offload_sched()
    a = chain(0, 32, (1, 2))
    s.add_request(a)
    step(s, loop, 0.0, 0.01)
    s.gpu_kv.reset_prefix_cache()
    woken: list[float] = []
    s.wake = woken.append
    s.add_request(chain(1, 48, (1, 2, 3)))
    loop.now = 0.02
    out = s.schedule()
    assert out.reqs == [] and woken == [pytest.approx(0.02 + 2 * BLOCK_BYTES / 25e9)]


def test_loads_queue_on_the_copy_stream():
    s, loop = offload_sched()
    for i, ids in enumerate([(1, 2), (3, 4)]):
        s.add_request(chain(i, 32, ids))
    step(s, loop, 0.0, 0.01)
    s.gpu_kv.reset_prefix_cache()
    b, c = chain(2, 48, (1, 2, 5)), chain(3, 48, (3, 4, 6))
    s.add_request(b)
    s.add_request(c)
    loop.now = 0.02
    s.schedule()
    two = 2 * BLOCK_BYTES / 25e9
    assert s.loads[b.idx].done_s == pytest.approx(0.02 + two)
    assert s.loads[c.idx].done_s == pytest.approx(0.02 + 2 * two)  # behind B's copy
    assert s.totals.load_wait_s == pytest.approx(two + 2 * two)


# --------------------------------------------------------------------------- lmcache: sync


def test_lmcache_loads_and_stores_inside_the_step():
    s, loop = offload_sched("lmcache", cpu_gib=1.0, host_gb_per_s=50.0)
    chunk_bytes = 256 * LLAMA8B_KV_BYTES_PER_TOKEN  # 32 MiB
    a = req(0, 600, 1, hash_ids=tuple(range(1, 38)), hash_block_tokens=16)  # 2 full chunks of its prompt
    s.add_request(a)
    loop.now = 0.0
    out = s.schedule()
    assert out.transfer_s == pytest.approx(2 * chunk_bytes / 50e9)  # the store waits in the step
    loop.now = 0.1
    s.update_from_output(out, 0.1)
    s.gpu_kv.reset_prefix_cache()
    b = req(1, 800, 1, hash_ids=tuple(range(1, 38)) + tuple(range(90, 103)), hash_block_tokens=16)
    s.add_request(b)
    loop.now = 0.2
    out = s.schedule()
    # 512 tokens loaded in the step (synchronous), 288 computed; the prompt's 3rd chunk (tokens
    # 512-767) stored, the loaded two not again (LMCache skips the tokens it found)
    assert out.reqs == [b] and out.num_tokens == [288] and b.num_cached_tokens == 512
    assert out.transfer_s == pytest.approx((2 * chunk_bytes + chunk_bytes) / 50e9)
    assert s.totals.num_cpu_hit_tokens == 512 and s.totals.load_bytes == 2 * chunk_bytes


def test_lmcache_disk_tier_read_before_the_host_copy():
    # CPU tier of 2 chunks, disk of 8: the first request's chunks are pushed out of the CPU tier
    s, loop = offload_sched("lmcache", cpu_gib=2 * 32 / 1024, disk_gib=8 * 32 / 1024, host_gb_per_s=50.0)
    s.disk_bw = 5e9
    assert (s.cpu.num_blocks, s.disk is not None and s.disk.num_blocks) == (2, 8)
    chunk_bytes = 256 * LLAMA8B_KV_BYTES_PER_TOKEN
    for i, base in enumerate((100, 200)):
        s.add_request(req(i, 512, 1, hash_ids=tuple(range(base, base + 32)), hash_block_tokens=16))
        step(s, loop, 0.1 * i, 0.1 * i + 0.05)
    assert s.totals.num_cpu_evictions == 2
    s.gpu_kv.reset_prefix_cache()
    b = req(5, 600, 1, hash_ids=tuple(range(100, 132)) + (7,) * 6, hash_block_tokens=16)
    s.add_request(b)
    loop.now = 1.0
    out = s.schedule()
    assert s.totals.num_disk_hit_tokens == 512 and s.totals.num_cpu_hit_tokens == 0
    load_s = 2 * chunk_bytes / 5e9 + 2 * chunk_bytes / 50e9  # disk read, then the host copy
    assert out.transfer_s == pytest.approx(load_s)


# --------------------------------------------------------------------------- config


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="cpu_size_gib"):
        KVOffloadConfig(backend="native")
    with pytest.raises(ValidationError, match="only the lmcache backend has a disk tier"):
        KVOffloadConfig(backend="native", cpu_size_gib=4, disk_size_gib=10)
    with pytest.raises(ValidationError, match="multiple of block_size"):
        EngineConfig(kv_offload={"backend": "native", "cpu_size_gib": 4, "block_size": 24})
    with pytest.raises(ValidationError, match="enable_prefix_caching"):
        EngineConfig(enable_prefix_caching=False, kv_offload={"backend": "native", "cpu_size_gib": 4})
    with pytest.raises(ValidationError, match="only the native backend"):
        KVOffloadConfig(backend="lmcache", cpu_size_gib=4, eviction_policy="arc")
    assert KVOffloadConfig(backend="lmcache", cpu_size_gib=1).tier_block_size(16) == 256


# --------------------------------------------------------------------------- conservation


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(1, 40), st.integers(1, 8)),
        min_size=1,
        max_size=14,
    ),
    st.sampled_from(["native", "lmcache", "arc"]),
    st.integers(6, 40),
)
def test_blocks_are_conserved_across_tiers(specs, backend, cpu_blocks):
    """Any mix of shared prefixes on a small GPU cache and CPU tier: GPU blocks free + held =
    all, the CPU tier within its capacity with stored - evicted blocks in it, no load left
    holding a block, and every request done."""
    block_mb = 32 if backend == "lmcache" else 2
    policy = "arc" if backend == "arc" else "lru"
    s, loop = offload_sched(
        "lmcache" if backend == "lmcache" else "native",
        cpu_gib=cpu_blocks * block_mb / 1024,
        num_gpu_blocks=24,
        eviction_policy=policy,
    )
    s.wake = lambda t: None
    reqs = []
    for i, (group, nshared, tail, out_len) in enumerate(specs):
        ids = tuple(range(group * 100, group * 100 + nshared)) + tuple(
            range(10_000 + 10 * i, 10_000 + 10 * i + 2)
        )
        prompt = 16 * nshared + tail
        r = req(i, prompt, out_len, hash_ids=ids, hash_block_tokens=16)
        r.arrival_s = 0.003 * i
        reqs.append(r)
    t, pending = 0.0, list(reqs)
    for _ in range(2000):
        while pending and pending[0].arrival_s <= t:
            s.add_request(pending.pop(0))
        loop.now = t
        out = s.schedule()
        t += 0.002 + out.transfer_s
        loop.now = t
        s.update_from_output(out, t)
        s.check_invariants()
        kv = s.gpu_kv
        held = {b.block_id for bs in kv.req_blocks.values() for b in bs}
        assert kv.num_free_blocks + len(held) == kv.num_gpu_blocks - 1  # the null block aside
        assert len(s.cpu.blocks) == s.totals.num_stored_blocks - s.cpu.num_evictions <= s.cpu.num_blocks
        if not pending and not s.has_work():
            break
    assert all(r.status == ReqStatus.FINISHED for r in reqs)
    assert not s.loads and all(b.ref_cnt == 0 for b in s.cpu.blocks.values())
    assert all(b.ready_s < INF for b in s.cpu.blocks.values())  # every store completed


# --------------------------------------------------------------------------- planner


def test_plan_searches_the_offload_size():
    from servesim.config import scenario_from_dict
    from servesim.planner.output import vllm_serve_lines
    from servesim.planner.search import Evaluated
    from servesim.planner.space import enumerate_candidates, plan_config

    base = scenario_from_dict(
        {
            "model": {"name": "Llama-3.1-8B"},
            "engine": {"max_model_len": 4096, "enable_prefix_caching": True},
            "workload": {"type": "synthetic", "num_requests": 10, "arrival": {"rate": 1.0}},
        }
    )
    plan = plan_config(
        {
            "gpus": ["L40S"],
            "tensor_parallel_sizes": [1],
            "max_total_gpus": 1,
            "kv_offloading_size_gib": [0, 64],
        },
        "test",
    )
    cands = enumerate_candidates(base, plan)
    offload = [c.scenario.engine.kv_offload for c in cands]
    assert [(o.backend, o.cpu_size_gib) for o in offload] == [("none", 0.0), ("native", 64.0)]
    assert "kv_offloading_size_gib" in cands[1].shown
    lines = vllm_serve_lines(Evaluated(cands[1], None, None, 0.0, False))
    assert "--kv-offloading-backend native --kv-offloading-size 64" in lines[-1]


# --------------------------------------------------------------------------- docs


@pytest.mark.slow
def test_kv_offload_doc_figures_are_the_runs():
    """docs/kv_offload.md's tables quote what the code gives today (about a minute)."""
    import re
    from pathlib import Path

    from servesim import simulate
    from servesim.config import load_scenario

    root = Path(__file__).resolve().parents[1]
    doc = re.sub(r"\s+", " ", (root / "docs" / "kv_offload.md").read_text(encoding="utf-8"))

    def run(path: str, *sets: str) -> dict:
        return simulate(load_scenario(root / path, list(sets))).summary

    def row(s: dict, label: str, p50: bool) -> str:
        ttft, hit = s["latency"]["ttft_s"], s.get("kv_offload", {}).get("hit_rate")
        cells = [label, f"{ttft['mean']:.2f} s"] + ([f"{ttft['p50']:.2f} s"] if p50 else [])
        cells += [f"{ttft['p99']:.1f} s", f"{s['slo']['attainment']['all']:.0%}"]
        gpu = f"{s['utilization']['overall']['prefix_hit_rate']:.1%}"
        if p50:
            cells.append(f"{gpu} / {hit['cpu']:.1%}" if hit else f"{gpu} / -")
        else:
            cells.append(f"{hit['cpu']:.1%}" if hit else "-")
        return "| " + " | ".join(cells) + " |"

    ex = "examples/chat_sessions_offload.yaml"
    for b in ("none", "native", "lmcache"):
        s = run(ex, f"engine.kv_offload.backend={b}")
        assert row(s, b, True) in doc
        if b == "native":
            off = s["kv_offload"]
            assert f"(native: {off['load_bytes'] / 1e9:.0f} GB in {off['load_s']:.2f} s of copies" in doc
            assert f"holds {s['memory'][0]['kv_capacity_tokens'] / 1e3:.0f}k tokens" in doc
        if b == "lmcache":
            assert f"add {s['kv_offload']['step_transfer_s']:.1f} s to the steps" in doc
    for rate in (0.25, 0.5, 1.0):
        cells = []
        for b in ("none", "native"):
            slo = run(ex, f"engine.kv_offload.backend={b}", f"workload.arrival.rate={rate}")["slo"]
            cells.append(f"{slo['attainment']['all']:.0%}, {slo['goodput_rps']:.3f} req/s")
        assert f"| {rate:g} | {cells[0]} | {cells[1]} |" in doc
    mc = (
        "examples/mooncake_prefix_cache.yaml",
        f"workload.path={root / 'tests/fixtures/traces/mooncake_conversation_1000.jsonl.gz'}",
    )
    s = run(*mc)
    assert row(s, "none", False) in doc
    assert f"the GPU's {s['memory'][0]['kv_capacity_tokens'] / 1e3:.0f}k tokens find" in doc
    assert f"find {s['utilization']['overall']['prefix_hit_rate']:.1%} of prompt tokens" in doc
    from servesim.planner.capacity import find_capacity

    strict = [*mc[1:], "slo.ttft_s=20", 'slo.attainment={"all": 0.8}']
    caps = []
    for sets in ([], ["engine.kv_offload.backend=native", "engine.kv_offload.cpu_size_gib=1024"]):
        cap = find_capacity(load_scenario(root / mc[0], [*strict, *sets]), precision=0.1)
        caps.append(cap.capacity_rps)
    assert f"rises from {caps[0]:.3f} to {caps[1]:.3f} requests a second" in doc
    for b, gib, label in (
        ("native", 256, "native, 256 GiB"),
        ("native", 1024, "native, 1 TiB"),
        ("lmcache", 1024, "lmcache, 1 TiB"),
    ):
        s = run(*mc, f"engine.kv_offload.backend={b}", f"engine.kv_offload.cpu_size_gib={gib}")
        assert row(s, label, False) in doc


# --------------------------------------------------------------------------- whole runs


def _synthetic(seed: int, n: int, rate: float, groups: int = 0):
    import numpy as np

    from servesim.workload.base import Workload

    rng = np.random.default_rng(seed)
    return Workload(
        np.cumsum(rng.exponential(1 / rate, n)),
        rng.integers(1, 1024, n),
        rng.integers(1, 256, n),
        prefix_group=rng.integers(-1, groups, n) if groups else None,
        prefix_len=512,
    )


def test_nothing_found_below_the_gpu_changes_nothing():
    """Unique prompts, no pressure: stores run on their own stream and no load is made, so
    offloading's run is vLLM V1's step by step, timestamp for timestamp."""
    import numpy as np

    from servesim.perf.base import ConstantPerfModel
    from servesim.sim import run_engine

    wl = _synthetic(0, 300, 10)
    perf = ConstantPerfModel(0.01, 2e-5)
    base = EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024)
    off = base.model_copy(
        update={"kv_offload": KVOffloadConfig(backend="native", cpu_size_gib=4, host_gb_per_s=25)}
    )
    ref = run_engine(wl, base, perf, 4000, 4096, reference=True)
    run = run_engine(wl, off, perf, 4000, 4096, kv_bytes_per_block=BLOCK_BYTES, check_invariants=True)
    for col in ("first_scheduled_s", "first_token_s", "finished_s"):
        np.testing.assert_array_equal(getattr(run.records, col), getattr(ref.records, col), err_msg=col)
    t = run.totals.offload
    assert t is not None and t.num_loads == 0 and t.num_stored_blocks > 0


def test_offload_under_pressure_loads_whole_blocks():
    """Shared 512-token prefixes on a cache too small to keep them (preempting): the CPU tier
    gives them back, every load is whole 2 MiB blocks, and the invariants hold at every step."""
    from servesim.perf.base import ConstantPerfModel
    from servesim.sim import run_engine

    wl = _synthetic(3, 300, 20, groups=6)
    perf = ConstantPerfModel(0.01, 2e-5)
    eng = EngineConfig(
        max_num_seqs=64,
        max_num_batched_tokens=1024,
        kv_offload={"backend": "native", "cpu_size_gib": 1, "host_gb_per_s": 25},
    )
    plain = run_engine(wl, eng.model_copy(update={"kv_offload": KVOffloadConfig()}), perf, 300, 4096)
    run = run_engine(wl, eng, perf, 300, 4096, kv_bytes_per_block=BLOCK_BYTES, check_invariants=True)
    t = run.totals.offload
    assert t is not None and t.num_cpu_hit_tokens > 0 and t.num_cpu_hit_tokens % 16 == 0
    # hits are counted at a request's first lookup; a preempted request may load again
    assert t.load_bytes % BLOCK_BYTES == 0 and t.load_bytes >= t.num_cpu_hit_tokens // 16 * BLOCK_BYTES
    assert run.totals.num_preemptions > 0
    assert t.load_s == pytest.approx(t.load_bytes / 25e9)
    found = t.num_gpu_hit_tokens + t.num_cpu_hit_tokens
    assert found > plain.totals.num_prefix_hit_tokens
    assert (run.records.status == run.records.status[0]).all()  # all finished


def test_a_size_without_a_backend_offloads_natively_as_vllm() -> None:
    """vLLM's CacheConfig.kv_offloading_backend defaults to "native" and offloading is on once
    --kv-offloading-size is set; `kv_offload: {cpu_size_gib: 16}` ran without a tier."""
    assert KVOffloadConfig(cpu_size_gib=16).backend == "native"
    assert KVOffloadConfig(backend="none", cpu_size_gib=16).backend == "none"  # written out: off
    assert KVOffloadConfig().backend == "none"
    from servesim.sim import simulate

    wl = {"type": "synthetic", "num_requests": 4, "prompt_len": {"value": 64}, "output_len": {"value": 8}}
    res = simulate({"engine": {"kv_offload": {"cpu_size_gib": 16}}, "workload": wl})
    off = res.summary["kv_offload"]
    # 16 GiB of Llama-3.1-8B's 128 KiB per token (32 layers x 8 KV heads x 128 x 2 x 2 bytes),
    # in blocks of 16 tokens (2 MiB): 8,192 blocks.
    assert (off["backend"], off["cpu_blocks"]) == ("native", 16 * 1024 // 2)


def test_an_offload_tier_smaller_than_one_block_is_refused() -> None:
    from servesim.errors import ConfigError
    from servesim.sim import simulate

    wl = {"type": "synthetic", "num_requests": 4, "prompt_len": {"value": 64}, "output_len": {"value": 8}}
    kv = {"backend": "native", "cpu_size_gib": 0.25, "block_size": 4096}  # a block: 512 MiB
    with pytest.raises(
        ConfigError, match=r"engine.kv_offload.cpu_size_gib: 0.25 GiB holds no offloaded block"
    ):
        simulate({"engine": {"kv_offload": kv}, "workload": wl})
    simulate({"engine": {"kv_offload": {**kv, "cpu_size_gib": 0.5}}, "workload": wl})  # one block: runs
