"""Parsing of single trace values (numbers, hash-id lists, Azure timestamps) with errors
that name the file, line and column: ``trace.csv:17: num_prompt_tokens: expected ...``,
and the columns the format parsers fill (``_Rows``)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np

from servesim.errors import WorkloadError


def _bad(where: str, column: str, expected: str, found: Any) -> WorkloadError:
    return WorkloadError(f"{where}: {column}: expected {expected}, found {found!r}")


def _int(value: Any) -> int | None:
    """An integer from an int, an integral float or a numeric string; None if it is not one."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _number(raw: Any, where: str, column: str, expected: str) -> float:
    if isinstance(raw, bool):
        raise _bad(where, column, expected, raw)
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise _bad(where, column, expected, raw) from None
    if not math.isfinite(x) or x < 0:
        raise _bad(where, column, expected, raw)
    return x


def _hash_ids(raw: Any, where: str, column: str) -> tuple[int, ...]:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ()
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise _bad(where, column, "a JSON list of integers", raw) from None
    if isinstance(value, list | tuple) and all(type(h) is int for h in value):
        return tuple(value)
    raise _bad(where, column, "a list of integers", raw)


def _priority(raw: Any, where: str) -> int:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return 0
    x = _int(raw)
    if x is None:
        raise _bad(where, "priority", "an integer", raw)
    return x


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")
_TIMESTAMP_EXPECTED = "a timestamp like '2023-11-16 18:15:46.6805900'"


def _azure_ns(raw: Any, where: str, days: dict[str, int]) -> int:
    """Nanoseconds since 0001-01-01, parsed by hand: Azure has 7 fractional digits, more than
    ``datetime`` keeps, and ordering must survive."""
    m = _TIMESTAMP.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise _bad(where, "TIMESTAMP", _TIMESTAMP_EXPECTED, raw)
    day_text, hh, mm, ss, frac, tz = m.groups()
    day = days.get(day_text)
    if day is None:
        try:
            day = days[day_text] = date.fromisoformat(day_text).toordinal()
        except ValueError:
            raise _bad(where, "TIMESTAMP", _TIMESTAMP_EXPECTED, raw) from None
    h, mi, s = int(hh), int(mm), int(ss)
    if h > 23 or mi > 59 or s > 60:
        raise _bad(where, "TIMESTAMP", _TIMESTAMP_EXPECTED, raw)
    secs = day * 86400 + h * 3600 + mi * 60 + s
    if tz and tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        secs -= sign * (int(tz[1:3]) * 3600 + int(tz[-2:]) * 60)
    return secs * 1_000_000_000 + (int(frac.ljust(9, "0")) if frac else 0)


# --------------------------------------------------------------------------- columns


@dataclass(slots=True)
class _Rows:
    """Columns parsed so far, as Python lists (appending beats growing numpy arrays)."""

    name: str
    format: str = ""
    arrival: list[Any] = field(default_factory=list)  # seconds (float) or, for azure, ns (int)
    prompt: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    hash_ids: list[tuple[int, ...]] | None = None
    group: list[int] | None = None
    group_ids: dict[str, int] = field(default_factory=dict)
    prefix_len: int | None = None
    priority: list[int] | None = None
    tenant: list[int] | None = None
    tenant_ids: dict[str, int] = field(default_factory=dict)
    adapter: list[int] | None = None  # LoRA adapter names' ids (-1: the base model)
    adapter_ids: dict[str, int] = field(default_factory=dict)
    model: list[int] | None = None  # the models' names' ids (-1: the scenario's model.name)
    model_ids: dict[str, int] = field(default_factory=dict)
    clamped: int = 0
    lengths_only: bool = False
    columns: tuple[str, ...] = ()
    arrival_s: np.ndarray | None = None  # relative arrivals, when fast_csv parsed the file
    drop_failed: bool = False  # burstgpt / vllm_bench: leave out failed requests
    dropped: int = 0
    bench: dict[str, Any] | None = None  # vllm_bench: the run's rate, burstiness, concurrency
    counted: str = ""  # sharegpt: how the lengths were counted


def _require(columns: tuple[str, ...], wanted: tuple[str, ...], where: str, need: str) -> None:
    for c in wanted:
        if c not in columns:
            raise WorkloadError(
                f"{where}: missing column '{c}' ({need}; found {', '.join(columns) or 'none'})"
            )


def _need(rec: dict[str, Any], key: str, where: str) -> Any:
    try:
        return rec[key]
    except KeyError:
        raise WorkloadError(f"{where}: missing key '{key}'") from None


#: The longest prompt or output a trace may give, in tokens: what int64 holds (such a request
#: is rejected at max_model_len).
MAX_TRACE_TOKENS = 2**63 - 1


def _add_lengths(rows: _Rows, where: str, p_raw: Any, p_col: str, o_raw: Any, o_col: str) -> None:
    p, o = _int(p_raw), _int(o_raw)
    if p is None or p < 0:
        raise _bad(where, p_col, "a positive integer", p_raw)
    if o is None or o < 0:
        raise _bad(where, o_col, "a positive integer", o_raw)
    for value, raw, col in ((p, p_raw, p_col), (o, o_raw, o_col)):
        if value > MAX_TRACE_TOKENS:
            raise _bad(where, col, "a token count that fits in 64 bits (at most 2**63 - 1)", raw)
    if p == 0 or o == 0:
        rows.clamped += 1
        p, o = max(p, 1), max(o, 1)
    rows.prompt.append(p)
    rows.output.append(o)


# --------------------------------------------------------------------------- ids and shared values


def _group(rows: _Rows, raw: Any) -> int:
    """Distinct non-empty group values become 0, 1, 2, ... in order of first appearance."""
    if raw is None:
        return -1
    key = str(raw).strip()
    if key in ("", "-1"):
        return -1
    return rows.group_ids.setdefault(key, len(rows.group_ids))


def _tenant(rows: _Rows, raw: Any, where: str) -> int:
    """Distinct tenant values (names or numbers) become 0, 1, 2, ... in order of first appearance."""
    key = "" if raw is None else str(raw).strip()
    if not key:
        raise _bad(where, "tenant", "a tenant name or number", raw)
    return rows.tenant_ids.setdefault(key, len(rows.tenant_ids))


def _adapter(rows: _Rows, raw: Any) -> int:
    """A LoRA adapter's name: distinct names become 0, 1, 2, ... in order of first appearance;
    an empty cell (or "base") is the base model, -1."""
    key = "" if raw is None else str(raw).strip()
    if key in ("", "base"):
        return -1
    return rows.adapter_ids.setdefault(key, len(rows.adapter_ids))


def _model(rows: _Rows, raw: Any) -> int:
    """The model a request names (the OpenAI API's model field): distinct names become 0, 1, 2,
    ... in order of first appearance; an empty cell is the scenario's model.name, -1."""
    key = "" if raw is None else str(raw).strip()
    if not key:
        return -1
    return rows.model_ids.setdefault(key, len(rows.model_ids))


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
