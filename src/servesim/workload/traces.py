"""Trace readers: Azure 2023/2024 CSV, Mooncake JSONL, BurstGPT CSV, vllm bench result JSON,
ShareGPT JSON, and a generic CSV / JSONL / Parquet format.

Every reader returns a :class:`Workload` sorted by arrival. A file is read in two layers:

* a *container* (CSV, JSONL or Parquet; ``servesim.workload.containers``) yields
  ``(where, record)`` pairs, ``where`` being ``file:line`` (CSV counts the header as
  line 1) or ``file: row N`` for Parquet;
* a *format* (``trace_formats``: azure, mooncake, generic, burstgpt, vllm_bench, sharegpt)
  turns records into columns, checking each value (``trace_values``);

and the columns become a :class:`Workload` in ``trace_workload``. This module picks the
container and format, keeps the last few traces read, and windows a trace (:func:`select`).

Every bad value raises :class:`WorkloadError` naming the file, the line, the column, what
was expected and what was found. Lengths of 0 are raised to 1 and counted in
``meta["clamped"]`` (rows touched); negative lengths are errors. Every change to the input
(lengths raised, a trace re-sorted, a column or key the reader does not use, hash ids
beyond the prompt) is also a notice in ``meta["notices"]`` (``workload.notices``).

Files that carry lengths but no arrival times (``num_prefill_tokens,num_decode_tokens``,
as the arxiv-summarization lengths file) are *lengths-only*: :func:`read_lengths` accepts
them as a source for a synthetic ``kind: trace`` length distribution, :func:`read_trace`
refuses them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from servesim.config import TraceWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Workload
from servesim.workload.containers import (
    container_kind,
    csv_records,
    jsonl_records,
    open_binary,
    open_text,
    parquet_records,
)
from servesim.workload.fast_csv import read_azure_csv, read_azure_numpy
from servesim.workload.tenants import assign_shares
from servesim.workload.trace_formats import (
    AZURE_COLUMNS,
    GENERIC_ARRIVAL,
    document_format,
    parse_records,
    parse_sharegpt,
    parse_vllm_bench,
    read_json_document,
)
from servesim.workload.trace_values import _Rows
from servesim.workload.trace_workload import to_workload

FAST_CSV_BYTES = 4 << 20  # larger Azure CSV files are read with pyarrow, smaller with numpy (fast_csv.py)
FORMATS = ("auto", "azure", "mooncake", "generic", "burstgpt", "vllm_bench", "sharegpt")

# --------------------------------------------------------------------------- public API


def read_trace(
    path: str | Path, format: str = "auto", hash_block_tokens: int = 512, failed: str = "keep"
) -> Workload:
    """Read a whole trace file (or ``builtin:azure_conv`` / ``builtin:azure_code``).

    ``format`` is ``auto`` (by extension, then header or keys) or one of ``FORMATS``.
    Arrivals: Azure, Mooncake (``timestamp`` ms / 1000) and BurstGPT (``Timestamp``) in
    seconds since the file's earliest row, generic ``arrived_at_s`` as written, vllm bench drawn as the
    benchmark sends them. ``failed``: ``keep`` or ``drop`` the failed requests a BurstGPT or
    vllm bench file records.
    """
    key = _cache_key(str(path), format, hash_block_tokens, failed)
    if key is not None and key in _READ_CACHE:
        return _copy(_READ_CACHE[key])
    rows = _read(str(path), format, failed)
    if rows.lengths_only:
        name = rows.name
        raise WorkloadError(
            f"{name}: has no '{GENERIC_ARRIVAL}' column (found {', '.join(rows.columns)}): it is a "
            f"lengths-only file and cannot be a trace workload; use it as a length source of a "
            f"synthetic workload: prompt_len: {{kind: trace, trace: {name}, column: prompt}} "
            f"(and output_len with column: output)"
        )
    wl = to_workload(rows, hash_block_tokens)
    if key is not None:
        while len(_READ_CACHE) >= _READ_CACHE_SIZE:
            _READ_CACHE.pop(next(iter(_READ_CACHE)))
        _READ_CACHE[key] = _copy(wl)
    return wl


# The last few traces read, by name and (for a file) size and modification time: a plan
# simulates one scenario's trace once per candidate, in the same worker process.
_READ_CACHE: dict[tuple[Any, ...], Workload] = {}
_READ_CACHE_SIZE = 4
_READ_CACHE_MAX_BYTES = 64 << 20  # larger files are read each time (a copy would double them)


def _cache_key(name: str, format: str, hash_block_tokens: int, failed: str) -> tuple[Any, ...] | None:
    if name.startswith("builtin:"):
        return (name, format, hash_block_tokens, failed)
    try:
        st = Path(name).stat()
    except OSError:
        return None  # the reader says what is wrong
    if st.st_size > _READ_CACHE_MAX_BYTES:
        return None
    return (str(Path(name).resolve()), st.st_size, st.st_mtime_ns, format, hash_block_tokens, failed)


def _copy(wl: Workload) -> Workload:
    """A copy of ``wl`` that shares nothing a caller may change (columns, lists, ``meta``):
    every field, so a column added to ``Workload`` is copied too."""
    import copy
    import dataclasses

    def c(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.copy()
        if isinstance(v, list):
            return list(v)
        if isinstance(v, dict):
            return copy.deepcopy(v)
        return v  # numbers, strings, and the closed-loop structures, which no caller changes

    return dataclasses.replace(
        wl, **{f.name: c(getattr(wl, f.name)) for f in dataclasses.fields(wl) if f.init}
    )


def read_lengths(
    path: str | Path, column: str = "prompt", format: str = "auto", failed: str = "keep"
) -> np.ndarray:
    """The prompt or output lengths (int64, >= 1) of any file :func:`read_trace` reads, in
    file order, plus lengths-only files (no arrival column)."""
    if column not in ("prompt", "output"):
        raise WorkloadError(f"{path}: column: expected 'prompt' or 'output', found {column!r}")
    rows = _read(str(path), format, failed)
    return np.asarray(rows.prompt if column == "prompt" else rows.output, dtype=np.int64)


def select(
    wl: Workload,
    rate_scale: float = 1.0,
    start_s: float | None = None,
    end_s: float | None = None,
    limit: int | None = None,
) -> Workload:
    """Window, limit and speed up a trace.

    The window ``[start_s, end_s)`` applies to the original timeline; kept arrivals are then
    shifted by ``-start_s`` (the first kept request keeps its offset from ``start_s``) and
    divided by ``rate_scale``. ``limit`` takes the first N requests after windowing.
    """
    t = wl.arrival_s
    lo = 0 if start_s is None else int(np.searchsorted(t, start_s, side="left"))
    hi = len(wl) if end_s is None else int(np.searchsorted(t, end_s, side="left"))
    if limit is not None:
        hi = min(hi, lo + limit)
    if hi <= lo:
        span = f"{t[0]:.3f}-{t[-1]:.3f} s" if len(wl) else "nothing"
        raise WorkloadError(
            f"{wl.source}: no requests left after selection (start_s={start_s}, end_s={end_s}, "
            f"limit={limit}); the trace spans {span}"
        )
    out = wl.subset(slice(lo, hi))
    out.arrival_s = (out.arrival_s - (start_s or 0.0)) / rate_scale
    out.meta["selection"] = {
        "rate_scale": rate_scale,
        "start_s": start_s,
        "end_s": end_s,
        "limit": limit,
        "first_row": lo,
        "num_rows": hi - lo,
    }
    return out


def load_trace(cfg: TraceWorkload) -> Workload:
    """Read ``cfg.path`` and apply the selection options of ``cfg``."""
    wl = read_trace(cfg.path, cfg.format, cfg.hash_block_tokens, cfg.failed)
    if cfg.tenant_shares:
        if wl.tenant is not None:
            raise WorkloadError(
                f"{cfg.path}: tenant_shares: the trace has a tenant column already; leave tenant_shares out"
            )
        assign_shares(wl, cfg.tenant_shares, cfg.tenant_seed)
    if cfg.rate_scale == 1.0 and cfg.start_s is None and cfg.end_s is None and cfg.limit is None:
        return wl
    return select(wl, cfg.rate_scale, cfg.start_s, cfg.end_s, cfg.limit)


def _read(name: str, format: str, failed: str = "keep") -> _Rows:
    if format not in FORMATS:
        raise WorkloadError(f"{name}: format: expected one of {', '.join(FORMATS)}, found {format!r}")
    if failed not in ("keep", "drop"):
        raise WorkloadError(f"{name}: failed: expected keep or drop, found {failed!r}")
    kind = container_kind(name)
    rows = _Rows(name, drop_failed=failed == "drop")
    if kind == "jsonl" and _read_document(rows, format):
        return rows
    if kind == "csv" and format in ("auto", "azure"):
        with open_binary(name) as binary:
            try:
                head = binary.peek(4096)[:4096] if hasattr(binary, "peek") else b""
            except (OSError, EOFError):  # a bad gzip file: the row parser says so
                head = b""
            fast = None
            if all(c.encode() in head for c in AZURE_COLUMNS):
                fast = read_azure_csv(binary) if _worth_pyarrow(name) else read_azure_numpy(binary)
        if fast is not None:
            rows.arrival_s, rows.prompt, rows.output, rows.clamped, rows.columns = fast  # type: ignore[assignment]
            rows.format = "azure"
            return rows
    if kind == "parquet":
        columns, records = parquet_records(name)
        parse_records(rows, format, columns, name, records)
        return rows
    with open_text(name) as f:
        if kind == "csv":
            header, lines = csv_records(f, name)
            if header is None:
                raise WorkloadError(f"{name}: empty file, expected a header line")
            parse_records(rows, format, header, f"{name}:1", lines)
        else:
            parse_records(rows, format, None, "", jsonl_records(f, name))
    return rows


def _read_document(rows: _Rows, format: str) -> bool:
    """A whole-document ``.json`` file (vllm bench result, ShareGPT) into ``rows``; False
    when the file is JSON Lines."""
    name = rows.name
    if not name.lower().removesuffix(".gz").endswith(".json") and format not in ("vllm_bench", "sharegpt"):
        return False
    doc = read_json_document(name)
    if doc is None and format not in ("vllm_bench", "sharegpt"):
        return False
    found = document_format(doc)
    if format in ("vllm_bench", "sharegpt") and found != format:
        want = (
            "an object with input_lens and output_lens"
            if format == "vllm_bench"
            else ("a list of objects with 'conversations'")
        )
        raise WorkloadError(f"{name}: format {format}: expected {want}")
    if found is None:
        if isinstance(doc, dict):
            return False  # one JSON object on one line: a one-record JSON Lines file
        raise WorkloadError(
            f"{name}: expected a vllm bench result (input_lens, output_lens), a "
            "ShareGPT list (conversations) or one JSON object per line"
        )
    rows.format = found
    if found == "vllm_bench" and isinstance(doc, dict):  # document_format checked the types
        rows.bench = parse_vllm_bench(rows, doc)
    elif isinstance(doc, list):
        rows.counted = parse_sharegpt(rows, doc)
    if not rows.prompt:
        raise WorkloadError(f"{name}: no requests")
    return True


def _worth_pyarrow(name: str) -> bool:
    """pyarrow parses a CSV ~10x faster than the row parser but takes ~0.3 s to import:
    use it for files over a few MB, or when it is loaded already (the CLI writes Parquet)."""
    if "pyarrow.csv" in sys.modules:
        return True
    try:
        return not name.startswith("builtin:") and Path(name).expanduser().stat().st_size > FAST_CSV_BYTES
    except OSError:
        return False


# --------------------------------------------------------------------------- formats
