"""Multi-turn sessions: each turn's prompt is the conversation so far.

A session's tokens form one append-only stream: the first prompt (the shared system prompt
first), then each answer and the next user message. Turn k's prompt is the stream up to its
user message, so

    prompt_k = prompt_(k-1) + output_(k-1) + user_k

and its leading tokens are those of every earlier turn. Prompt identity is given as
Mooncake-style ``hash_ids`` over ``hash_block_tokens``-token units of the stream: a unit's
id is the same in every turn that holds it in full, the ``system_prompt_len`` tokens'
units are the same in every session, and a prompt's last, partial unit gets an id of its
own (its content differs from the full unit a later turn holds; the Mooncake trace does
the same: 82% of its follow-up turns share every unit of the previous prompt but the
last). So the engine's prefix cache can reuse the previous turn's prompt blocks; the
previous answer's blocks count as unique, as the engine treats generated tokens.

``loop: closed``: turn k is sent ``think_time`` after turn k-1 finishes (``Workload.after``);
its ``arrival_s`` is the earliest it could be sent (think times only). ``loop: open``:
turn k is sent ``think_time`` after turn k-1 was sent, whatever the answers.
"""

from __future__ import annotations

import numpy as np

from servesim.config import SessionWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Dependencies, Workload
from servesim.workload.notices import notice
from servesim.workload.synthetic import arrival_times, sample_delays, sample_lengths


def _hold_system_prompt(first: np.ndarray, cfg: SessionWorkload, found: list[dict]) -> np.ndarray:
    """First prompts raised to hold the system prompt and one token of the user's; refused
    when no first prompt can (the system prompt is part of the first prompt), a notice when
    some are raised."""
    need = cfg.system_prompt_len + 1
    dist = cfg.first_prompt_len
    top = min(dist.value if dist.kind == "constant" else dist.max, dist.max, cfg.max_prompt_len)
    if cfg.system_prompt_len and top < need:
        raise WorkloadError(
            f"workload.system_prompt_len ({cfg.system_prompt_len}) leaves no room in the "
            f"first prompt (workload.first_prompt_len, at most {top} tokens, the system "
            f"prompt included); give a shorter system prompt or longer first prompts"
        )
    short = int((first < need).sum())
    if short and cfg.system_prompt_len:
        found.append(
            notice(
                "length_raised",
                f"workload.first_prompt_len: {short:,} of {len(first):,} first "
                f"prompts were not longer than workload.system_prompt_len "
                f"({cfg.system_prompt_len}) and were raised to {need}",
                short,
                "workload.first_prompt_len",
            )
        )
    return np.maximum(first, need) if cfg.system_prompt_len else first


def generate_sessions(cfg: SessionWorkload, seed: int = 0) -> Workload:
    """The turns of ``cfg``'s sessions, sorted by (earliest) send time."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(total_seed).spawn(6)]
    start = arrival_times(cfg.arrival, cfg.num_sessions, cfg.duration_s, rngs[0], "num_sessions")
    s = len(start)
    if s == 0:
        raise WorkloadError(f"workload: no session starts before duration_s={cfg.duration_s}")
    found: list[dict] = []
    turns = sample_lengths(cfg.turns, s, rngs[1], "workload.turns", found)
    first = sample_lengths(cfg.first_prompt_len, s, rngs[2], "workload.first_prompt_len", found)
    first = _hold_system_prompt(first, cfg, found)
    n = int(turns.sum())
    session = np.repeat(np.arange(s), turns)
    head = np.concatenate([[0], np.cumsum(turns)[:-1]])  # each session's first row
    k = np.arange(n) - head[session]  # turn index
    user = sample_lengths(cfg.user_len, n, rngs[3], "workload.user_len", found)
    output = sample_lengths(cfg.output_len, n, rngs[4], "workload.output_len", found)
    think = sample_delays(cfg.think_time, n, rngs[5])
    # prompt_k = first + sum_{j<k} output_j + sum_{1<=j<=k} user_j, by per-session cumsums.
    growth = np.where(k > 0, user, 0) + np.where(k > 0, np.roll(output, 1), 0)
    prompt = first[session] + _session_cumsum(growth, head, session)
    keep = prompt <= cfg.max_prompt_len  # prompts grow within a session: a prefix of its turns
    offset = _session_cumsum(np.where(k > 0, think, 0.0), head, session)  # think times so far
    arrival = start[session] + offset
    rows = np.flatnonzero(keep)
    session, k, prompt, output, arrival = session[rows], k[rows], prompt[rows], output[rows], arrival[rows]
    hash_ids = _hash_ids(prompt, session, cfg.system_prompt_len, cfg.hash_block_tokens)
    after = None
    if cfg.loop == "closed":
        follow = np.flatnonzero(k[1:] > 0) + 1  # rows whose previous row is the session's last turn
        after = Dependencies.from_edges(len(rows), follow - 1, follow, think[rows][follow], session, start)
    order = np.argsort(arrival, kind="stable")
    wl = Workload(
        arrival_s=arrival,
        num_prompt_tokens=prompt,
        num_output_tokens=output,
        hash_ids=hash_ids,
        hash_block_tokens=cfg.hash_block_tokens,
        after=after,
        source=f"sessions({cfg.loop} loop, {s} sessions, seed={total_seed})",
        meta={"seed": total_seed, "num_sessions": s, "notices": found, "num_turns_cut": int(n - len(rows))},
    )
    return _sorted(wl, order, session)


def _session_cumsum(x: np.ndarray, head: np.ndarray, session: np.ndarray) -> np.ndarray:
    """Running sum of ``x`` within each session (rows of a session are contiguous)."""
    c = np.cumsum(x)
    before = np.concatenate([[0], c])[head]  # the sum before each session's first row
    return c - before[session]


def _hash_ids(prompt: np.ndarray, session: np.ndarray, system_len: int, unit: int) -> list[tuple[int, ...]]:
    """Per turn: the stream's full units (shared system units first), then a unique id for a
    partial last unit."""
    num_sys = system_len // unit
    stride = int(prompt.max()) // unit + 2  # ids a session may use
    base = num_sys + session.astype(np.int64) * stride
    partial_base = num_sys + (int(session.max()) + 1) * stride  # unique ids of partial units
    out = []
    for i, (p, b) in enumerate(zip(prompt.tolist(), base.tolist())):
        full = p // unit
        ids = (
            list(range(min(full, num_sys))) + list(range(b + num_sys, b + full))
            if full > num_sys
            else list(range(full))
        )
        if p % unit:
            ids.append(partial_base + i)
        out.append(tuple(ids))
    return out


def _sorted(wl: Workload, order: np.ndarray, session: np.ndarray) -> Workload:
    """Rows in send-time order (the graph renumbered with them)."""
    wl.arrival_s = wl.arrival_s[order]
    wl.num_prompt_tokens = wl.num_prompt_tokens[order]
    wl.num_output_tokens = wl.num_output_tokens[order]
    wl.hash_ids = [wl.hash_ids[i] for i in order] if wl.hash_ids is not None else None
    if wl.after is not None:
        wl.after = wl.after.permuted(order)
    wl.meta["session"] = session[order]
    return wl
