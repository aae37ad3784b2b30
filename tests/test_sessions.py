"""Multi-turn sessions: prompts hold the conversation so far, closed and open loops, and a
session model whose prefix reuse is the Mooncake conversation trace's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

from servesim.config import EngineConfig, SessionWorkload
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload import load_workload, read_trace

BLOCK, UNIT = 16, 512
PER = UNIT // BLOCK
MOONCAKE_HEAD = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_1000.jsonl.gz"

#: Session parameters measured on the Mooncake conversation trace (12,031 requests over
#: 3,537 s), its conversations rebuilt from shared hash-id prefixes: 7,373 sessions
#: (2.08/s); first prompts mean 10,765 tokens (std 16,094); follow-ups add a mean 893 new
#: tokens (std 4,575) after the previous answer; outputs mean 343 (std 250); every prompt
#: starts with the same 512-token unit. Turns per session: P(1) 0.69, P(2) 0.18, mean 1.63;
#: the lognormal below (rounded, at least 1) gives P(1) 0.72, P(2) 0.17, mean 1.50.
MOONCAKE_SESSIONS = dict(
    arrival={"rate": 2.08},
    turns={"kind": "lognormal", "mean": 1.3, "std": 1.2},
    first_prompt_len={"kind": "lognormal", "mean": 10765, "std": 16094},
    system_prompt_len=512,
    user_len={"kind": "lognormal", "mean": 893, "std": 4575},
    output_len={"kind": "lognormal", "mean": 343, "std": 250},
    think_time={"kind": "exponential", "mean_s": 190},
)


def hit_rate(prompts: list[int], ids: list[tuple[int, ...]]) -> float:
    """Prefix-cache hit rate with a cache that never evicts, each prompt after the ones
    before it: the leading 16-token blocks some earlier prompt held in full (at most
    ``n - 1`` tokens), counted with a dict of the blocks seen per hash-id prefix; no
    engine code."""
    seen: dict[int, int] = {}
    hit = 0
    for n, h in zip(prompts, ids, strict=True):
        nb, c, k, going = n // BLOCK, 0, 0, True
        for u, x in enumerate(h):
            c = hash((c, x))
            need = min(PER, nb - u * PER)
            if need <= 0:
                break
            if going:
                s = seen.get(c, 0)
                k += min(s, need)
                going = s >= need
            seen[c] = max(seen.get(c, 0), need)
        hit += min(k, (n - 1) // BLOCK) * BLOCK
    return hit / sum(prompts)


def sessions(**kw) -> SessionWorkload:
    return SessionWorkload.model_validate(kw)


def test_prompts_hold_the_conversation():
    cfg = sessions(
        num_sessions=3,
        turns={"value": 4},
        first_prompt_len={"value": 1000},
        user_len={"value": 50},
        output_len={"value": 100},
        system_prompt_len=600,
        think_time={"kind": "constant", "mean_s": 30},
        arrival={"process": "constant", "rate": 1.0},
    )
    wl = load_workload(cfg)
    wl.validate()
    s = wl.meta["session"]
    for sid in range(3):
        rows = np.flatnonzero(s == sid)
        np.testing.assert_array_equal(wl.num_prompt_tokens[rows], [1000, 1150, 1300, 1450])
        # Turn k's prompt starts with turn k-1's full units; the partial last unit is its own.
        for a, b in zip(rows[:-1], rows[1:]):
            full = wl.num_prompt_tokens[a] // UNIT
            assert wl.hash_ids[b][:full] == wl.hash_ids[a][:full]
            assert wl.hash_ids[b][full] != wl.hash_ids[a][full]
        np.testing.assert_allclose(wl.arrival_s[rows], sid + 1 + 30.0 * np.arange(4))
    # The 600-token system prompt: one full unit shared by every session.
    assert len({h[0] for h in wl.hash_ids}) == 1 and len({h[1] for h in wl.hash_ids}) > 3


def test_closed_loop_waits_for_the_answer():
    """Closed loop: turn k is sent think time after turn k-1 finished (exactly, with a
    constant step time); open loop: 30 s after turn k-1 was sent."""
    base = dict(
        num_sessions=2,
        turns={"value": 3},
        first_prompt_len={"value": 200},
        user_len={"value": 20},
        output_len={"value": 50},
        think_time={"kind": "constant", "mean_s": 30},
        arrival={"process": "constant", "rate": 1.0},
    )
    eng = EngineConfig(max_num_seqs=8, max_num_batched_tokens=4096)
    for loop in ("closed", "open"):
        wl = load_workload(sessions(loop=loop, **base))
        rec = run_engine(wl, eng, ConstantPerfModel(0.01), num_gpu_blocks=2000, max_model_len=4096).records
        s = wl.meta["session"]
        for sid in range(2):
            rows = np.flatnonzero(s == sid)
            sent, done = rec.arrival_s[rows], rec.finished_s[rows]
            gap = sent[1:] - (done[:-1] if loop == "closed" else sent[:-1])
            np.testing.assert_allclose(gap, 30.0, atol=1e-9)
        assert np.all(np.isfinite(rec.finished_s))


def test_turns_reuse_the_previous_prompt_in_the_engine():
    """The engine's prefix cache hits what the independent count says, sessions sent in a
    closed loop (send order = the records' arrival order)."""
    wl = load_workload(
        sessions(num_sessions=120, **{**MOONCAKE_SESSIONS, "arrival": {"rate": 0.2}}, max_prompt_len=60_000)
    )
    run = run_engine(
        wl,
        EngineConfig(block_size=BLOCK, max_num_seqs=64, max_num_batched_tokens=8192),
        ConstantPerfModel(0.002),
        num_gpu_blocks=400_000,
        max_model_len=65_536,
    )
    order = np.argsort(run.records.arrival_s, kind="stable")
    expected = hit_rate(wl.num_prompt_tokens[order].tolist(), [wl.hash_ids[i] for i in order])
    got = run.totals.num_prefix_hit_tokens / run.totals.num_prefix_query_tokens
    assert got == pytest.approx(expected, abs=0.005)
    assert got > 0.2


def test_the_count_is_the_engines_on_the_mooncake_head():
    """The count below is the engine's on the real trace (its first 300 requests, one at a
    time, as tests/test_prefix_cache_mooncake.py runs them)."""
    wl = read_trace(MOONCAKE_HEAD).subset(slice(0, 300))
    wl.arrival_s = np.arange(len(wl)) * 100.0
    wl.num_output_tokens = np.minimum(wl.num_output_tokens, 64)
    run = run_engine(
        wl,
        EngineConfig(block_size=BLOCK, max_num_seqs=64, max_num_batched_tokens=8192),
        ConstantPerfModel(0.01),
        num_gpu_blocks=400_000,
        max_model_len=200_000,
    )
    got = run.totals.num_prefix_hit_tokens / run.totals.num_prefix_query_tokens
    assert got == pytest.approx(hit_rate(wl.num_prompt_tokens.tolist(), wl.hash_ids), abs=1e-12)


@pytest.mark.shared_data
def test_session_model_reproduces_mooncake_prefix_reuse():
    """The whole trace reuses 37.4% of its prompt tokens; the session model with the
    trace's measured parameters, 7,373 sessions, within 3 points of it (36.8% at seed 0)."""
    wl = read_trace(shared_data("traces/mooncake/conversation_trace.jsonl"))
    trace = hit_rate(wl.num_prompt_tokens.tolist(), wl.hash_ids)
    assert trace == pytest.approx(0.3736, abs=0.0005)
    model = load_workload(sessions(num_sessions=7373, **MOONCAKE_SESSIONS))
    got = hit_rate(model.num_prompt_tokens.tolist(), model.hash_ids)
    assert got == pytest.approx(trace, abs=0.03)
    assert len(model) / 7373 == pytest.approx(1.50, abs=0.05)  # turns per session, as fitted
