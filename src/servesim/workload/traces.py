"""Trace readers: Azure 2023/2024 CSV, Mooncake JSONL, BurstGPT CSV, vllm bench result JSON,
ShareGPT JSON (``trace_formats``), and a generic CSV / JSONL / Parquet format.

Every reader returns a :class:`Workload` sorted by arrival. A file is read in two layers:

* a *container* (CSV, JSONL or Parquet; ``servesim.workload.containers``) yields
  ``(where, record)`` pairs, ``where`` being ``file:line`` (CSV counts the header as
  line 1) or ``file: row N`` for Parquet;
* a *format* (azure, mooncake, generic here; burstgpt, vllm_bench, sharegpt in
  ``trace_formats``) turns records into columns, checking each value.

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
from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.benchmark import due_times
from servesim.workload.containers import (
    Records,
    container_kind,
    csv_records,
    jsonl_records,
    open_binary,
    open_text,
    parquet_records,
)
from servesim.workload.fast_csv import read_azure_csv, read_azure_numpy
from servesim.workload.notices import (
    add_notice,
    hash_ids_beyond_prompt,
    notice,
    reordered,
    unknown_columns,
    zero_lengths,
)
from servesim.workload.tenants import assign_shares
from servesim.workload.trace_formats import (
    BURSTGPT_ALL,
    BURSTGPT_COLUMNS,
    document_format,
    format_notices,
    parse_burstgpt,
    parse_sharegpt,
    parse_vllm_bench,
    read_json_document,
)
from servesim.workload.trace_values import (
    _add_lengths,
    _azure_ns,
    _bad,
    _hash_ids,
    _int,
    _need,
    _number,
    _priority,
    _require,
    _Rows,
)

DEFAULT_PREFIX_LEN = 256  # shared tokens per prefix_group: record.py's --prefix-len (tests/fixtures/vllm)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
FAST_CSV_BYTES = 4 << 20  # larger Azure CSV files are read with pyarrow, smaller with numpy (fast_csv.py)
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
GENERIC_ARRIVAL = "arrived_at_s"
GENERIC_PROMPT = ("num_prompt_tokens", "num_prefill_tokens")  # the second: Vidur / arxiv lengths files
GENERIC_OUTPUT = ("num_output_tokens", "num_decode_tokens")
GENERIC_OPTIONAL = (
    "hash_ids",
    "prefix_group",
    "prefix_len",
    "priority",
    "tenant",
    "adapter",
    "lora",
    "model",
)
KNOWN_COLUMNS = {
    "azure": AZURE_COLUMNS,
    "mooncake": (*MOONCAKE_KEYS, "hash_ids"),
    "generic": (GENERIC_ARRIVAL, *GENERIC_PROMPT, *GENERIC_OUTPUT, *GENERIC_OPTIONAL),
    "burstgpt": BURSTGPT_ALL,
}
FORMATS = ("auto", "azure", "mooncake", "generic", "burstgpt", "vllm_bench", "sharegpt")

# --------------------------------------------------------------------------- public API


#: Formats whose timestamps count from an origin of the trace's own (BurstGPT's seconds and
#: Mooncake's milliseconds since the whole trace began): read, like Azure's dates, as time
#: since the file's first arrival, so a file holding a later piece starts at 0.
SHIFTED = ("burstgpt", "mooncake")


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
    wl = _to_workload(rows, hash_block_tokens)
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
        _parse(rows, format, columns, name, records)
        return rows
    with open_text(name) as f:
        if kind == "csv":
            header, lines = csv_records(f, name)
            if header is None:
                raise WorkloadError(f"{name}: empty file, expected a header line")
            _parse(rows, format, header, f"{name}:1", lines)
        else:
            _parse(rows, format, None, "", jsonl_records(f, name))
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


def _parse(rows: _Rows, format: str, columns: tuple[str, ...] | None, head: str, records: Records) -> None:
    """Detect the format from the header (JSONL: the first record's keys), parse every record.

    ``head`` is where a missing column is reported: the CSV header line, the Parquet file,
    or (JSONL) the first record's line.
    """
    if columns is None:
        first = next(records, None)
        if first is None:
            raise WorkloadError(f"{rows.name}: no requests (the file is empty)")
        head, columns = first[0], tuple(first[1])
        records = _chain(first, records)
    if format == "auto":
        if all(c in columns for c in AZURE_COLUMNS):
            format = "azure"
        elif all(c in columns for c in MOONCAKE_KEYS):
            format = "mooncake"
        elif all(c in columns for c in BURSTGPT_COLUMNS):
            format = "burstgpt"
        else:
            format = "generic"
    rows.format, rows.columns = format, columns
    if format in ("vllm_bench", "sharegpt"):
        raise WorkloadError(f"{rows.name}: format {format}: expected a .json document")
    parser = {
        "azure": _parse_azure,
        "mooncake": _parse_mooncake,
        "generic": _parse_generic,
        "burstgpt": parse_burstgpt,
    }[format]
    parser(rows, columns, head, records)
    if not rows.prompt:
        raise WorkloadError(f"{rows.name}: no requests (the file has a header but no rows)")


def _chain(first: tuple[str, dict[str, Any]], rest: Records) -> Records:
    yield first
    yield from rest


def _parse_azure(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
    _require(columns, AZURE_COLUMNS, head, f"Azure traces need {', '.join(AZURE_COLUMNS)}")
    days: dict[str, int] = {}
    for where, rec in records:
        rows.arrival.append(_azure_ns(_need(rec, "TIMESTAMP", where), where, days))
        _add_lengths(
            rows,
            where,
            _need(rec, "ContextTokens", where),
            "ContextTokens",
            _need(rec, "GeneratedTokens", where),
            "GeneratedTokens",
        )


def _parse_mooncake(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
    _require(columns, MOONCAKE_KEYS, head, f"Mooncake traces need {', '.join(MOONCAKE_KEYS)}")
    rows.hash_ids = []
    for where, rec in records:
        rows.arrival.append(
            _number(
                _need(rec, "timestamp", where), where, "timestamp", "a non-negative number of milliseconds"
            )
            / 1000.0
        )
        _add_lengths(
            rows,
            where,
            _need(rec, "input_length", where),
            "input_length",
            _need(rec, "output_length", where),
            "output_length",
        )
        rows.hash_ids.append(_hash_ids(rec.get("hash_ids"), where, "hash_ids"))


def _parse_generic(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
    prompt_col = next((c for c in GENERIC_PROMPT if c in columns), GENERIC_PROMPT[0])
    output_col = next((c for c in GENERIC_OUTPUT if c in columns), GENERIC_OUTPUT[0])
    _require(
        columns,
        (prompt_col, output_col),
        head,
        f"generic traces need {GENERIC_ARRIVAL}, {GENERIC_PROMPT[0]}, {GENERIC_OUTPUT[0]}",
    )
    rows.lengths_only = GENERIC_ARRIVAL not in columns
    has_hash, has_group = "hash_ids" in columns, "prefix_group" in columns
    has_plen, has_prio = "prefix_len" in columns, "priority" in columns
    has_tenant = "tenant" in columns
    rows.hash_ids = [] if has_hash else None
    rows.group = [] if has_group else None
    rows.priority = [] if has_prio else None
    rows.tenant = [] if has_tenant else None
    adapter_col = next((c for c in ("adapter", "lora") if c in columns), None)
    rows.adapter = [] if adapter_col else None
    has_model = "model" in columns
    rows.model = [] if has_model else None
    for where, rec in records:
        if not rows.lengths_only:
            rows.arrival.append(
                _number(
                    _need(rec, GENERIC_ARRIVAL, where),
                    where,
                    GENERIC_ARRIVAL,
                    "a non-negative number of seconds",
                )
            )
        _add_lengths(
            rows, where, _need(rec, prompt_col, where), prompt_col, _need(rec, output_col, where), output_col
        )
        if has_hash:
            rows.hash_ids.append(_hash_ids(rec.get("hash_ids"), where, "hash_ids"))  # type: ignore[union-attr]
        if has_group:
            rows.group.append(_group(rows, rec.get("prefix_group")))  # type: ignore[union-attr]
        if has_plen:
            _prefix_len(rows, rec.get("prefix_len"), where)
        if has_prio:
            rows.priority.append(_priority(rec.get("priority"), where))  # type: ignore[union-attr]
        if has_tenant:
            rows.tenant.append(_tenant(rows, rec.get("tenant"), where))  # type: ignore[union-attr]
        if adapter_col:
            rows.adapter.append(_adapter(rows, rec.get(adapter_col)))  # type: ignore[union-attr]
        if has_model:
            rows.model.append(_model(rows, rec.get("model")))  # type: ignore[union-attr]


# --------------------------------------------------------------------------- values


def _group(rows: _Rows, raw: Any) -> int:
    """Distinct non-empty group values become 0, 1, 2, ... in order of first appearance."""
    if raw is None:
        return -1
    key = str(raw).strip()
    if key in ("", "-1"):
        return -1
    gid = rows.group_ids.get(key)
    if gid is None:
        gid = rows.group_ids[key] = len(rows.group_ids)
    return gid


def _tenant(rows: _Rows, raw: Any, where: str) -> int:
    """Distinct tenant values (names or numbers) become 0, 1, 2, ... in order of first appearance."""
    key = "" if raw is None else str(raw).strip()
    if not key:
        raise _bad(where, "tenant", "a tenant name or number", raw)
    tid = rows.tenant_ids.get(key)
    if tid is None:
        tid = rows.tenant_ids[key] = len(rows.tenant_ids)
    return tid


def _adapter(rows: _Rows, raw: Any) -> int:
    """A LoRA adapter's name: distinct names become 0, 1, 2, ... in order of first appearance;
    an empty cell (or "base") is the base model, -1."""
    key = "" if raw is None else str(raw).strip()
    if key in ("", "base"):
        return -1
    aid = rows.adapter_ids.get(key)
    if aid is None:
        aid = rows.adapter_ids[key] = len(rows.adapter_ids)
    return aid


def _model(rows: _Rows, raw: Any) -> int:
    """The model a request names (the OpenAI API's model field): distinct names become 0, 1, 2,
    ... in order of first appearance; an empty cell is the scenario's model.name, -1."""
    key = "" if raw is None else str(raw).strip()
    if not key:
        return -1
    mid = rows.model_ids.get(key)
    if mid is None:
        mid = rows.model_ids[key] = len(rows.model_ids)
    return mid


def _prefix_len(rows: _Rows, raw: Any, where: str) -> None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return
    x = _int(raw)
    if x is None or x < 0:
        raise _bad(where, "prefix_len", "a non-negative integer", raw)
    if rows.prefix_len is None:
        rows.prefix_len = x
    elif x != rows.prefix_len:
        raise _bad(where, "prefix_len", f"the same value on every row ({rows.prefix_len})", raw)


def _to_workload(rows: _Rows, hash_block_tokens: int) -> Workload:
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
    meta: dict[str, Any] = {
        "format": rows.format,
        "num_rows": len(rows.prompt),
        "clamped": rows.clamped,
        "reordered": False,
    }
    if shift_s:
        meta["shift_s"] = shift_s
    group = None if rows.group is None else np.asarray(rows.group, dtype=np.int64)
    prefix_len = 0 if group is None else (DEFAULT_PREFIX_LEN if rows.prefix_len is None else rows.prefix_len)
    if group is not None:
        meta["prefix_groups"] = {k: v for k, v in rows.group_ids.items()}
    if rows.tenant is not None:
        meta["tenant_names"] = list(rows.tenant_ids)
    if rows.adapter is not None:
        meta["adapter_names"] = list(rows.adapter_ids)
    if rows.model is not None:
        meta["model_names"] = list(rows.model_ids)
    wl = Workload(
        arrival_s=arrival,
        num_prompt_tokens=np.asarray(rows.prompt, dtype=np.int64),
        num_output_tokens=np.asarray(rows.output, dtype=np.int64),
        hash_ids=rows.hash_ids,
        hash_block_tokens=hash_block_tokens,
        prefix_group=group,
        prefix_len=prefix_len,
        priority=None if rows.priority is None else np.asarray(rows.priority, dtype=np.int64),
        tenant=None if rows.tenant is None else np.asarray(rows.tenant, dtype=np.int64),
        adapter=None if rows.adapter is None else np.asarray(rows.adapter, dtype=np.int64),
        model=None if rows.model is None else np.asarray(rows.model, dtype=np.int64),
        clients=None if rows.bench is None else BenchmarkClients(rows.bench["max_concurrency"]),
        source=rows.name,
        meta=meta,
    )
    if rows.bench is not None:
        meta["vllm_bench"] = rows.bench
    if rows.dropped:
        meta["dropped_failed"] = rows.dropped
    _notices(rows, wl, arrival)
    if shift_s:
        why = (
            f"{rows.name}: timestamps start at {shift_s:,.3f} s; shifted so the first request arrives "
            "at 0 (start_s and end_s count from it)"
        )
        add_notice(wl.meta, notice("shifted", why, None, rows.name))
    if len(arrival) > 1 and np.any(np.diff(arrival) < 0):
        wl = wl.subset(np.argsort(arrival, kind="stable"))
        wl.meta["reordered"] = True
    return wl


def _notices(rows: _Rows, wl: Workload, arrival: np.ndarray) -> None:
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
