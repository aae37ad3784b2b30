"""Trace formats: Azure 2023/2024, Mooncake and generic records (CSV, JSONL or Parquet, the
format found from the header or keys by :func:`parse_records`), BurstGPT CSV,
``vllm bench serve --save-result`` JSON and ShareGPT JSON.

Each parser fills the reader's columns (``trace_values._Rows``) from ``(where, record)`` pairs,
so every bad value names the file, the line (or the list index in a JSON document) and
the field. Formats, as published:

* **BurstGPT** (``BurstGPT_*.csv``): ``Timestamp`` (seconds from the start of the trace),
  ``Model``, ``Request tokens``, ``Response tokens``, ``Total tokens``, ``Log Type``. A
  failed request is recorded with ``Response tokens`` 0: ``failed: keep`` (the default)
  keeps it as the dataset records it (its prompt is served, the 0-token response becomes
  the engine's minimum of 1 and is counted in the notices); ``failed: drop`` leaves it out.
* **vllm bench result** (one JSON object): per-request ``input_lens`` and ``output_lens``
  (what each request generated; a failed one has 0 and a non-empty ``errors`` entry) and
  the run's ``request_rate``, ``burstiness`` and ``max_concurrency``. The result holds no
  send times, so they are drawn as ``vllm bench`` draws them (``benchmark.due_times``,
  seed 0) and the concurrency limit closes the loop, as the benchmark ran.
* **ShareGPT** (a JSON list of ``{"id", "conversations": [{"from", "value"}, ...]}``):
  as vLLM's ``ShareGPTDataset``, the first turn is the prompt and the second the output;
  conversations with fewer than two turns are skipped. Lengths come from the tiktoken
  ``cl100k_base`` encoding where tiktoken is installed, else from an estimate of 4
  characters a token (the notices say which). A ShareGPT file has no arrival times: it is
  a lengths source for a synthetic workload (``kind: trace``), like a lengths-only file.

The Azure 2024 traces have the 2023 columns and timestamps with six fractional digits and
a UTC offset (``2024-05-10 00:00:00.009930+00:00``); the Azure reader takes both.
"""

from __future__ import annotations

import json
from typing import Any

from servesim.errors import WorkloadError
from servesim.workload.containers import Records, open_text
from servesim.workload.notices import notice
from servesim.workload.trace_values import (
    _adapter,
    _add_lengths,
    _azure_ns,
    _bad,
    _group,
    _hash_ids,
    _int,
    _model,
    _need,
    _number,
    _prefix_len,
    _priority,
    _require,
    _Rows,
    _tenant,
)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
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
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
BURSTGPT_ALL = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
KNOWN_COLUMNS = {
    "azure": AZURE_COLUMNS,
    "mooncake": (*MOONCAKE_KEYS, "hash_ids"),
    "generic": (GENERIC_ARRIVAL, *GENERIC_PROMPT, *GENERIC_OUTPUT, *GENERIC_OPTIONAL),
    "burstgpt": BURSTGPT_ALL,
}
VLLM_BENCH_KEYS = ("input_lens", "output_lens")
CHARS_PER_TOKEN = 4.0  # the usual English rule of thumb for GPT-style BPE vocabularies


def read_json_document(name: str) -> Any | None:
    """A whole-document JSON file (``.json``), or None when it is JSON Lines instead."""
    with open_text(name) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("[") or "\n" not in text.strip():
            raise WorkloadError(f"{name}:{err.lineno}: bad JSON ({err.msg} at column {err.colno})") from None
        return None  # several lines of JSON: JSON Lines


def document_format(doc: Any) -> str | None:
    """'vllm_bench' or 'sharegpt' by the document's keys, else None."""
    if isinstance(doc, dict) and all(k in doc for k in VLLM_BENCH_KEYS):
        return "vllm_bench"
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "conversations" in doc[0]:
        return "sharegpt"
    return None


# --------------------------------------------------------------------------- Azure, Mooncake, generic


def parse_records(
    rows: _Rows, format: str, columns: tuple[str, ...] | None, head: str, records: Records
) -> None:
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
        "azure": parse_azure,
        "mooncake": parse_mooncake,
        "generic": parse_generic,
        "burstgpt": parse_burstgpt,
    }[format]
    parser(rows, columns, head, records)
    if not rows.prompt:
        raise WorkloadError(f"{rows.name}: no requests (the file has a header but no rows)")


def _chain(first: tuple[str, dict[str, Any]], rest: Records) -> Records:
    yield first
    yield from rest


def parse_azure(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
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


def parse_mooncake(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
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


def parse_generic(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
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


# --------------------------------------------------------------------------- BurstGPT


def parse_burstgpt(rows: _Rows, columns: tuple[str, ...], head: str, records: Records) -> None:
    _require(columns, BURSTGPT_COLUMNS, head, f"BurstGPT traces need {', '.join(BURSTGPT_COLUMNS)}")
    for where, rec in records:
        response = _need(rec, "Response tokens", where)
        if rows.drop_failed and _int(response) == 0:
            rows.dropped += 1
            continue
        rows.arrival.append(
            _number(_need(rec, "Timestamp", where), where, "Timestamp", "a non-negative number of seconds")
        )
        _add_lengths(
            rows, where, _need(rec, "Request tokens", where), "Request tokens", response, "Response tokens"
        )


# --------------------------------------------------------------------------- vllm bench


def parse_vllm_bench(rows: _Rows, doc: dict[str, Any]) -> dict[str, Any]:
    """Lengths into ``rows``; returns the run's settings (request_rate, burstiness, max_concurrency)."""
    name = rows.name
    lens = {}
    for key in VLLM_BENCH_KEYS:
        value = doc[key]
        if not isinstance(value, list):
            raise WorkloadError(
                f"{name}: {key}: expected a list of token counts, found {type(value).__name__}"
            )
        lens[key] = value
    if len(lens["input_lens"]) != len(lens["output_lens"]):
        raise WorkloadError(
            f"{name}: output_lens: expected one per input_lens entry "
            f"({len(lens['input_lens'])}), found {len(lens['output_lens'])}"
        )
    errors = doc.get("errors") or [""] * len(lens["input_lens"])
    for i, (p, o) in enumerate(zip(lens["input_lens"], lens["output_lens"], strict=True)):
        if rows.drop_failed and i < len(errors) and errors[i]:
            rows.dropped += 1
            continue
        _add_lengths(rows, f"{name}: request {i}", p, "input_lens", o, "output_lens")
    rate = doc.get("request_rate", "inf")
    settings = {
        "request_rate": _rate(rate, name),
        "burstiness": float(doc.get("burstiness") or 1.0),
        "max_concurrency": doc.get("max_concurrency"),
    }
    mc = settings["max_concurrency"]
    num = _int(mc)
    if mc is not None and (num is None or num < 1):
        raise _bad(name, "max_concurrency", "a positive integer or null", mc)
    return settings


def _rate(raw: Any, name: str) -> float:
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise _bad(name, "request_rate", "a number of requests/s or 'inf'", raw) from None
    if not x > 0:
        raise _bad(name, "request_rate", "a number of requests/s > 0 or 'inf'", raw)
    return x


# --------------------------------------------------------------------------- ShareGPT


def parse_sharegpt(rows: _Rows, doc: list[Any]) -> str:
    """First-turn / second-turn lengths into ``rows`` (lengths-only); returns how they were counted."""
    count, how = _token_counter()
    rows.lengths_only = True
    for i, conv in enumerate(doc):
        where = f"{rows.name}: conversation {i}"
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise _bad(where, "conversations", "a list of turns", turns if isinstance(conv, dict) else conv)
        if len(turns) < 2:
            continue
        texts = []
        for k in (0, 1):
            value = turns[k].get("value") if isinstance(turns[k], dict) else None
            if not isinstance(value, str):
                raise _bad(f"{where} turn {k}", "value", "the turn's text", value)
            texts.append(value)
        rows.prompt.append(max(count(texts[0]), 1))
        rows.output.append(max(count(texts[1]), 1))
    return how


def _token_counter():
    try:
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base")
        return (lambda text: len(enc.encode(text, disallowed_special=()))), "tiktoken cl100k_base"
    except Exception:  # noqa: BLE001 - not installed, or its vocabulary file cannot be fetched
        return (lambda text: round(len(text) / CHARS_PER_TOKEN)), (
            f"estimated at {CHARS_PER_TOKEN:g} characters a token (tiktoken is not installed)"
        )


def format_notices(rows: _Rows) -> list[dict[str, Any]]:
    """What these formats left out (failed requests dropped)."""
    if not rows.dropped:
        return []
    return [
        notice(
            "failed_dropped",
            f"{rows.name}: {rows.dropped:,} failed requests (0 response "
            "tokens or an error) left out (failed: drop)",
            rows.dropped,
            rows.name,
        )
    ]
