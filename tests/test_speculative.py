"""Speculative decoding: exact token accounting, acceptance statistics, and its cost."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import req

from servesim.config import SpeculativeConfig
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.policy_base import PolicyOptions, PolicyScheduler
from servesim.engine.scheduler import SchedulerConfig
from servesim.engine.speculative import SpecDecoder, expected_tokens_per_step
from servesim.perf.base import BatchStats, ConstantPerfModel
from servesim.perf.policy_costs import PolicyCostModel


def spec_sched(k: int, rate: float, blocks: int = 11) -> PolicyScheduler:
    kv = KVCacheManager(blocks, 16, False, 4096)
    opts = PolicyOptions(speculative=SpeculativeConfig(num_speculative_tokens=k, acceptance_rate=rate))
    return PolicyScheduler(SchedulerConfig(max_num_batched_tokens=256), kv, opts)


def step(s):
    out = s.schedule()
    produced, finished = s.update_from_output(out, 0.0)
    return out, produced, finished


def test_full_acceptance_emits_k_plus_one_tokens_per_step():
    s = spec_sched(k=3, rate=1.0)
    a = req(0, 20, 10)
    s.add_request(a)
    out, _, _ = step(s)  # prompt: first token
    assert out.num_tokens == [20] and a.num_output_tokens == 1
    out, _, _ = step(s)  # newest token + 3 drafts, all accepted: 4 tokens
    assert out.num_tokens == [4] and a.num_output_tokens == 5 and a.num_computed_tokens == 24
    st = out.stats
    assert (st.num_spec_reqs, st.num_draft_steps, st.sum_spec_context) == (1, 3, 21)
    assert (st.num_prefill_tokens, st.prefill_attn_work, st.num_decode_reqs) == (4, 4 * (20 + 2), 0)
    out, _, _ = step(s)
    assert out.num_tokens == [4] and a.num_output_tokens == 9
    out, _, finished = step(s)  # one output left: no drafts
    assert out.num_tokens == [1] and out.stats.num_spec_reqs == 0 and finished == [a]
    assert a.num_output_tokens == 10


def test_zero_acceptance_rolls_back_rejected_drafts():
    s = spec_sched(k=4, rate=0.0)
    a = req(0, 20, 10)
    s.add_request(a)
    step(s)
    out, _, _ = step(s)
    assert out.num_tokens == [5] and a.num_output_tokens == 2
    assert a.num_computed_tokens == a.num_tokens - 1 == 21  # the 4 rejected drafts' KV dropped
    assert len(s.kv.req_blocks[0]) == 2  # their slots stay allocated (24 + 1 tokens)


def test_mean_tokens_per_step_matches_the_geometric_formula():
    dec = SpecDecoder(SpeculativeConfig(num_speculative_tokens=4, acceptance_rate=0.7, seed=1))
    r = req(0, 10, 100)
    draws = np.array([dec.num_accepted(r, 4) + 1 for _ in range(20000)])
    assert draws.min() == 1 and draws.max() == 5
    assert draws.mean() == pytest.approx(expected_tokens_per_step(0.7, 4), rel=0.02)  # 2.77


def test_per_request_acceptance_rates_spread_around_the_mean():
    dec = SpecDecoder(
        SpeculativeConfig(num_speculative_tokens=4, acceptance_rate=0.6, acceptance_rate_std=0.1)
    )
    rates = np.array([dec.rate_of(req(i, 10, 10)) for i in range(2000)])
    assert rates.mean() == pytest.approx(0.6, abs=0.01) and rates.std() == pytest.approx(0.1, abs=0.01)
    assert dec.rate_of(req(5, 10, 10)) == rates[5]  # drawn once per request


def test_cost_model_charges_drafts_and_swaps():
    base = ConstantPerfModel(0.01, 1e-4)
    m = PolicyCostModel(base, pcie_bytes_per_s=25e9, draft_cost_ratio=0.1)
    st = BatchStats(
        num_prefill_tokens=10, num_prefill_reqs=2, num_spec_reqs=2, sum_spec_context=100, num_draft_steps=4
    )
    draft_step = base.batch_time(BatchStats(num_decode_reqs=2, sum_decode_context=103))
    assert m.batch_time(st) == pytest.approx(base.batch_time(st) + 0.1 * 4 * draft_step)
    assert m.batch_time(BatchStats(num_decode_reqs=1, swap_bytes=25e6)) == pytest.approx(0.0101 + 1e-3)
