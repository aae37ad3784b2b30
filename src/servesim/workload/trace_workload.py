"""The columns a trace format parsed (``trace_values._Rows``) into a sorted :class:`Workload`,
with what reading changed noted in ``meta["notices"]``."""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.benchmark import due_times
from servesim.workload.containers import container_kind
from servesim.workload.notices import (
    add_notice,
    hash_ids_beyond_prompt,
    notice,
    reordered,
    unknown_columns,
    zero_lengths,
)
from servesim.workload.trace_formats import KNOWN_COLUMNS, format_notices
from servesim.workload.trace_values import _Rows

DEFAULT_PREFIX_LEN = 256  # shared tokens per prefix_group: record.py's --prefix-len (tests/fixtures/vllm)

#: Formats whose timestamps count from an origin of the trace's own (BurstGPT's seconds and
#: Mooncake's milliseconds since the whole trace began): read, like Azure's dates, as time
#: since the file's first arrival, so a file holding a later piece starts at 0.
SHIFTED = ("burstgpt", "mooncake")


def to_workload(rows: _Rows, hash_block_tokens: int) -> Workload:
    """The parsed columns as a :class:`Workload` sorted by arrival; ``meta`` says what reading changed."""
    arrival, shift_s = _arrivals(rows)
    group = None if rows.group is None else np.asarray(rows.group, dtype=np.int64)
    prefix_len = 0 if group is None else (DEFAULT_PREFIX_LEN if rows.prefix_len is None else rows.prefix_len)
    wl = Workload(
        arrival_s=arrival,
        num_prompt_tokens=np.asarray(rows.prompt, dtype=np.int64),
        num_output_tokens=np.asarray(rows.output, dtype=np.int64),
        hash_ids=rows.hash_ids,
        hash_block_tokens=hash_block_tokens,
        prefix_group=group,
        prefix_len=prefix_len,
        priority=_ids(rows.priority),
        tenant=_ids(rows.tenant),
        adapter=_ids(rows.adapter),
        model=_ids(rows.model),
        clients=None if rows.bench is None else BenchmarkClients(rows.bench["max_concurrency"]),
        source=rows.name,
        meta=_meta(rows, shift_s),
    )
    _notices(rows, wl, arrival, shift_s)
    if len(arrival) > 1 and np.any(np.diff(arrival) < 0):
        wl = wl.subset(np.argsort(arrival, kind="stable"))
        wl.meta["reordered"] = True
    return wl


def _arrivals(rows: _Rows) -> tuple[np.ndarray, float]:
    """Arrival times in seconds as the format counts them, and the shift taken off a trace
    whose clock starts before its first row (``SHIFTED``; 0.0 if none)."""
    if rows.arrival_s is not None:  # the fast Azure path (fast_csv.py)
        arrival = rows.arrival_s
    elif rows.format == "azure":
        t0 = min(rows.arrival)
        arrival = np.array([t - t0 for t in rows.arrival], dtype=np.int64) / 1e9
    elif rows.bench is not None:
        arrival = due_times(
            len(rows.prompt), rows.bench["request_rate"], rows.bench["burstiness"], np.random.default_rng(0)
        )
    else:
        arrival = np.asarray(rows.arrival, dtype=np.float64)
    shift_s = 0.0
    if rows.format in SHIFTED and len(arrival) and float(arrival.min()) != 0.0:
        shift_s = float(arrival.min())  # a later piece of the trace: time from its first arrival
        arrival = arrival - shift_s
    return arrival, shift_s


def _ids(column: list[int] | None) -> np.ndarray | None:
    return None if column is None else np.asarray(column, dtype=np.int64)


def _meta(rows: _Rows, shift_s: float) -> dict[str, Any]:
    """The workload's ``meta``: the format, counts, and the names behind the id columns."""
    meta: dict[str, Any] = {
        "format": rows.format,
        "num_rows": len(rows.prompt),
        "clamped": rows.clamped,
        "reordered": False,
    }
    if shift_s:
        meta["shift_s"] = shift_s
    if rows.group is not None:
        meta["prefix_groups"] = {k: v for k, v in rows.group_ids.items()}
    if rows.tenant is not None:
        meta["tenant_names"] = list(rows.tenant_ids)
    if rows.adapter is not None:
        meta["adapter_names"] = list(rows.adapter_ids)
    if rows.model is not None:
        meta["model_names"] = list(rows.model_ids)
    if rows.bench is not None:
        meta["vllm_bench"] = rows.bench
    if rows.dropped:
        meta["dropped_failed"] = rows.dropped
    return meta


def _notices(rows: _Rows, wl: Workload, arrival: np.ndarray, shift_s: float) -> None:
    """What reading changed or left out, into ``wl.meta["notices"]`` (``workload.notices``)."""
    name = rows.name
    add_notice(wl.meta, zero_lengths(rows.clamped, name))
    add_notice(wl.meta, reordered(arrival, name))
    what = "key" if container_kind(name) == "jsonl" else "column"
    for n in unknown_columns(rows.columns, KNOWN_COLUMNS.get(rows.format, ()), name, what):
        add_notice(wl.meta, n)
    for n in format_notices(rows):
        add_notice(wl.meta, n)
    add_notice(wl.meta, hash_ids_beyond_prompt(wl.hash_ids, wl.num_prompt_tokens, wl.hash_block_tokens, name))
    if shift_s:
        why = (
            f"{rows.name}: timestamps start at {shift_s:,.3f} s; shifted so the first request arrives "
            "at 0 (start_s and end_s count from it)"
        )
        add_notice(wl.meta, notice("shifted", why, None, rows.name))
