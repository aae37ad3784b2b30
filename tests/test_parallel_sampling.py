"""Parallel sampling: shared prompt blocks, copy-on-write, completion of all samples, pruning."""

from __future__ import annotations

import numpy as np
from conftest import make_workload, req

from servesim.config import EngineConfig, SyntheticWorkload
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.policy_base import PolicyOptions, PolicyScheduler
from servesim.engine.request import ReqStatus
from servesim.engine.scheduler import SchedulerConfig
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload.synthetic import generate_synthetic


def sampler(n: int, prune_at: int = 0, keep: int = 1) -> PolicyScheduler:
    kv = KVCacheManager(11, 16, False, 4096)
    opts = PolicyOptions(
        num_samples={0: n}, first_free_idx=100, prune_at_token=prune_at, num_kept_samples=keep
    )
    return PolicyScheduler(SchedulerConfig(max_num_batched_tokens=256), kv, opts)


def step(s, now=0.0):
    out = s.schedule()
    produced, finished = s.update_from_output(out, now)
    return out, produced, finished


def bids(s, idx) -> list[int]:
    return [b.block_id for b in s.kv.req_blocks[idx]]


def test_samples_share_prompt_blocks_and_copy_the_partial_one_on_write():
    s = sampler(3)
    a = req(0, 40, 4)
    s.add_request(a)
    out, produced, _ = step(s)
    assert produced == [a] and [r.idx for r in s.running] == [0, 100, 101]
    assert bids(s, 0) == bids(s, 100) == bids(s, 101) == [1, 2, 3]
    assert [b.ref_cnt for b in s.kv.req_blocks[0]] == [3, 3, 3]
    assert all(r.num_output_tokens == 1 and r.num_computed_tokens == 40 for r in s.running)
    out, produced, _ = step(s)
    # Each sample writes its first output into block 3 (tokens 32-47): the first two copy it.
    assert out.num_tokens == [1, 1, 1] and out.stats.num_decode_reqs == 3
    assert bids(s, 0) == [1, 2, 4] and bids(s, 100) == [1, 2, 5] and bids(s, 101) == [1, 2, 3]
    assert [b.ref_cnt for b in s.kv.req_blocks[101]] == [3, 3, 1]
    s.kv.check_invariants()
    _, _, finished = step(s, 1.0)
    _, _, finished = step(s, 2.0)
    assert finished == [a] and a.finished_s == 2.0  # reported once, when all samples are done
    assert all(r.status == ReqStatus.FINISHED for r in (a,)) and s.running == []
    assert s.kv.num_free_blocks == 10
    s.kv.check_invariants()


def test_best_of_n_prunes_samples_at_the_given_token():
    s = sampler(4, prune_at=2, keep=1)
    a = req(0, 32, 6)
    s.add_request(a)
    step(s)
    assert len(s.running) == 4 and s.kv.num_free_blocks == 8  # 2 shared prompt blocks
    out, _, finished = step(s)  # second token: prune to one sample
    assert finished == [] and [r.idx for r in s.running] == [0]
    assert s.kv.num_free_blocks == 7  # the pruned samples' own blocks are back
    while s.has_work():
        _, _, finished = step(s)
    assert finished == [a] and a.num_output_tokens == 6


def test_shared_prompt_blocks_use_fewer_kv_blocks_than_separate_requests():
    """vLLM (SOSP'23, Sec. 4.4 and Fig. 15): parallel sampling shares the prompt's KV blocks,
    saving memory (6-10% for parallel sampling, more for beam search, on their workloads; the
    saving grows with the prompt's share of the sequence). Here 20 requests of 1,000 prompt
    and 100 output tokens with n = 4, against 80 independent requests (no prefix caching)."""
    perf = ConstantPerfModel(0.01, 2e-5)
    n_req, n = 20, 4
    arrivals = np.arange(n_req) * 0.5
    shared_wl = make_workload(arrivals, 1000, 100)
    shared_wl.num_samples = np.full(n_req, n)
    separate_wl = make_workload(np.repeat(arrivals, n), 1000, 100)
    engine = EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192, enable_prefix_caching=False)
    shared = run_engine(shared_wl, engine, perf, 20000, 4096)
    separate = run_engine(separate_wl, engine, perf, 20000, 4096)
    assert (shared.records.status == 0).all() and (separate.records.status == 0).all()
    used_shared, used_separate = shared.totals.kv_block_s, separate.totals.kv_block_s
    print(
        f"peak blocks {shared.totals.peak_kv_blocks} vs {separate.totals.peak_kv_blocks}; "
        f"block-seconds {used_shared:.0f} vs {used_separate:.0f}"
    )
    assert shared.totals.peak_kv_blocks < 0.5 * separate.totals.peak_kv_blocks
    assert used_shared < 0.5 * used_separate


def test_synthetic_workload_option():
    wl = generate_synthetic(SyntheticWorkload(num_requests=5, n=3, best_of_prune_at=4, best_of_keep=2))
    assert wl.num_samples.tolist() == [3] * 5 and (wl.prune_at_token, wl.num_kept_samples) == (4, 2)
    assert wl.subset(slice(0, 2)).num_samples.tolist() == [3, 3]
