"""Notices: every change the readers and generators make to the input, with counts.

A notice is a plain dict, JSON-ready, kept in ``Workload.meta["notices"]`` and carried to
``summary["notices"]`` and the console (one line each) by one replica and a cluster alike::

    {"code": "zero_length_raised", "source": "trace.csv", "count": 3,
     "message": "3 rows had a prompt or output length of 0, raised to 1"}

Codes: ``zero_length_raised``, ``reordered`` (a trace not sorted by arrival was sorted),
``unknown_column`` (a column or key the reader does not use: ignored, which a misspelt
optional column would otherwise do silently), ``hash_ids_beyond_prompt`` (more prefix hash
ids than the prompt has blocks: the extra ones are never used), ``length_clipped`` (synthetic
lengths clipped to the distribution's [min, max]).
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np


def notice(code: str, message: str, count: int | None = None, source: str = "") -> dict[str, Any]:
    return {"code": code, "source": source, "count": count, "message": message}


def add_notice(meta: dict[str, Any], item: dict[str, Any] | None) -> None:
    """Append ``item`` (None: nothing to report) to ``meta["notices"]``."""
    if item is not None:
        meta.setdefault("notices", []).append(item)


def zero_lengths(count: int, source: str) -> dict[str, Any] | None:
    if not count:
        return None
    return notice(
        "zero_length_raised",
        f"{source}: {count:,} rows had a prompt or output length of 0, raised to 1",
        count,
        source,
    )


def reordered(arrival_s: np.ndarray, source: str) -> dict[str, Any] | None:
    """The trace's arrivals out of order (``arrival_s`` in file order), or None if sorted."""
    back = int(np.sum(np.diff(arrival_s) < 0)) if len(arrival_s) > 1 else 0
    if not back:
        return None
    return notice(
        "reordered",
        f"{source}: not sorted by arrival time ({back:,} rows arrive before the row "
        "above them); sorted by arrival, ties kept in file order",
        back,
        source,
    )


def unknown_columns(
    columns: tuple[str, ...], known: tuple[str, ...], source: str, what: str = "column"
) -> list[dict[str, Any]]:
    """One notice per column the reader does not use, naming the closest known one."""
    out = []
    for c in columns:
        if c in known:
            continue
        close = difflib.get_close_matches(c, known, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
        out.append(
            notice(
                "unknown_column",
                f"{source}: {what} '{c}' is not one this reader uses, ignored{hint}",
                None,
                source,
            )
        )
    return out


def hash_ids_beyond_prompt(
    hash_ids: list[tuple[int, ...]] | None, prompt: np.ndarray, block_tokens: int, source: str
) -> dict[str, Any] | None:
    """Requests with more hash ids than ``ceil(prompt / block_tokens)`` (the rest are unused)."""
    if hash_ids is None or not len(prompt):
        return None
    n_ids = np.fromiter((len(h) for h in hash_ids), dtype=np.int64, count=len(hash_ids))
    over = int(np.sum(n_ids > -(-prompt // block_tokens)))
    if not over:
        return None
    return notice(
        "hash_ids_beyond_prompt",
        f"{source}: {over:,} requests carry more hash ids than their "
        f"prompt has blocks of {block_tokens} tokens; the extra ids are ignored",
        over,
        source,
    )


def clipped(raw: np.ndarray, lo: int, hi: int, name: str) -> dict[str, Any] | None:
    """Synthetic lengths outside [lo, hi] before clipping."""
    n = int(np.sum((raw < lo) | (raw > hi)))
    if not n:
        return None
    return notice(
        "length_clipped",
        f"{name}: {n:,} of {len(raw):,} sampled lengths fell outside [{lo}, {hi}] and were clipped to it",
        n,
        name,
    )
