"""Prefix caching on the real Mooncake trace, checked against an independent count.

Mooncake's ``hash_ids`` name each 512-token prompt unit; equal ids at equal positions mean
equal tokens. With a KV cache large enough never to evict and requests spaced so each
prompt is fully computed before the next arrives, vLLM's prefix cache must hit exactly the
leading 16-token blocks of each prompt that some earlier prompt already held in full
(and at most ``num_tokens - 1`` tokens). The count below does that with plain sets,
sharing no code with the engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from servesim.config import EngineConfig
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine

MOONCAKE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_1000.jsonl.gz"  # its head
BLOCK = 16
UNIT = 512


def independent_hits(prompts: list[int], ids: list[tuple[int, ...]]) -> list[int]:
    seen: set[tuple[tuple[int, ...], int]] = set()
    hits = []
    for n, h in zip(prompts, ids):
        keys = []
        for b in range(n // BLOCK):  # the full prompt blocks of this request
            u = b * BLOCK // UNIT
            keys.append((h[: u + 1], b % (UNIT // BLOCK)) if u < len(h) else None)
        k = 0
        while k < (n - 1) // BLOCK and keys[k] is not None and keys[k] in seen:
            k += 1
        hits.append(k * BLOCK)
        seen.update(key for key in keys if key is not None)
    return hits


def test_mooncake_hit_rate_matches_independent_count():
    from servesim.workload.traces import read_trace

    wl = read_trace(MOONCAKE).subset(slice(0, 300))
    wl.arrival_s = np.arange(len(wl)) * 100.0  # one request at a time: no concurrency effects
    wl.num_output_tokens = np.minimum(wl.num_output_tokens, 64)
    run = run_engine(
        wl,
        EngineConfig(block_size=BLOCK, max_num_seqs=64, max_num_batched_tokens=8192),
        ConstantPerfModel(0.01),
        num_gpu_blocks=400_000,
        max_model_len=200_000,
    )
    expected = independent_hits(wl.num_prompt_tokens.tolist(), wl.hash_ids)
    np.testing.assert_array_equal(run.records.num_cached_tokens, expected)
    rate = run.totals.num_prefix_hit_tokens / run.totals.num_prefix_query_tokens
    assert rate == pytest.approx(sum(expected) / wl.num_prompt_tokens.sum())
    assert rate > 0.05  # the first 300 Mooncake conversations already share prefixes (8%)
