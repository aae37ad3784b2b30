"""Fast paths for Azure-format CSV traces: a numpy reader, and pyarrow for large files.

The row-by-row parser (``trace_formats.parse_azure``) costs about 8 us a row: 0.13 s for the
one-hour conversation trace, a sixth of a fast simulation of it. Two readers take a whole
well-formed Azure trace at once:

* :func:`read_azure_numpy` (str splits and numpy arithmetic on the timestamp bytes, about
  10 ms for that trace) reads the files ``traces`` does not give to pyarrow. It takes a
  file only when every value is in the plain form the row parser reads
  (``2023-11-16 18:15:46.6805900`` or with a ``T``, 0-9 fraction digits, no time zone, no
  surrounding spaces; lengths as ASCII digits), the fields are unquoted and every row has
  the header's field count. numpy's own datetime64 parsing is not used: it accepts more
  (``today``, ``2023``, year 0, leading spaces, time zones, a 10th fraction digit) and
  rejects the leap second ``:60`` that the row parser takes.
* :func:`read_azure_csv` (pyarrow's CSV reader and timestamp cast, about 20 ms, but ~80 ms
  to import pyarrow) reads files over a few MB, or any when pyarrow is loaded already.
  It takes a file when pyarrow accepts it whole (three typed columns, no missing values,
  no time zones, no negative counts).

Anything either cannot take returns None and goes to the row parser, whose errors name the
line and column. All give the same arrivals (integer nanoseconds since the earliest row,
then seconds), the same lengths and the same clamping of zero lengths to 1.
"""

from __future__ import annotations

import codecs
import csv
from typing import BinaryIO

import numpy as np

AZURE_TYPES = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
Parsed = tuple[np.ndarray, np.ndarray, np.ndarray, int, tuple[str, ...]]

_DIGITS_AT = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]  # in YYYY-MM-DD HH:MM:SS
_TEN = 10 ** np.arange(18, dtype=np.int64)
_PAD = 32  # zero bytes either side of the body, so that fixed-width gathers stay inside


def read_azure_csv(binary: BinaryIO) -> Parsed | None:
    """(arrival_s, prompt, output, clamped, columns) of an Azure CSV, or None if pyarrow
    cannot take it as one (the caller then parses it row by row)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv

        types = {"TIMESTAMP": pa.string(), "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()}
        table = pcsv.read_csv(binary, convert_options=pcsv.ConvertOptions(column_types=types))
        if table.num_rows == 0 or any(table.column_names.count(c) != 1 for c in AZURE_TYPES):
            return None
        if any(table[c].null_count for c in AZURE_TYPES):
            return None
        ns = pc.cast(table["TIMESTAMP"], pa.timestamp("ns")).cast(pa.int64()).to_numpy()
        prompt = table["ContextTokens"].to_numpy()
        output = table["GeneratedTokens"].to_numpy()
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    if (prompt < 0).any() or (output < 0).any():
        return None
    zero = (prompt == 0) | (output == 0)
    clamped = int(zero.sum())
    if clamped:
        prompt, output = np.maximum(prompt, 1), np.maximum(output, 1)
    arrival = (ns - ns.min()) / 1e9
    return arrival, prompt.astype(np.int64), output.astype(np.int64), clamped, tuple(table.column_names)


def read_azure_numpy(binary: BinaryIO) -> Parsed | None:
    """(arrival_s, prompt, output, clamped, columns) of an Azure CSV, or None if it is not
    one in the plain form (see the module docstring; the caller then parses it row by row).

    Reads the file as ``traces`` does (UTF-8 with an optional BOM; lines end in CR LF, LF or
    CR; empty lines skipped; header names stripped; any column order; extra columns
    ignored) and gives the row parser's results bit for bit.
    """
    try:
        data = binary.read()
        data.decode("utf-8")  # the row parser reports bad UTF-8
    except (UnicodeDecodeError, OSError, EOFError):
        return None
    if b'"' in data or b"\0" in data:  # quoting, or what csv may refuse: the row parser decides
        return None
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    header, _, body = data.removeprefix(codecs.BOM_UTF8).partition(b"\n")
    names = header.decode().split(",")
    columns = tuple(h.strip() for h in names)
    if any(columns.count(c) != 1 for c in AZURE_TYPES):  # missing, or repeated (the last wins)
        return None
    while b"\n\n" in body:
        body = body.replace(b"\n\n", b"\n")
    body = body.strip(b"\n")
    if not body:
        return None
    b = np.frombuffer(body, dtype=np.uint8)
    sep = np.flatnonzero((b == ord(",")) | (b == ord("\n")))
    k = len(columns)
    n = len(sep) // k + 1
    line_ends = np.flatnonzero(b[sep] == ord("\n"))  # which separators end a line
    if len(sep) != n * k - 1 or not np.array_equal(line_ends, np.arange(1, n) * k - 1):
        return None  # a line without k fields
    starts = np.concatenate(([0], sep + 1)).reshape(n, k)
    lens = np.concatenate((sep, [len(b)])).reshape(n, k) - starts
    if max(int(lens.max()), *map(len, names)) > csv.field_size_limit():
        return None  # a field that csv refuses
    padded = np.concatenate((np.zeros(_PAD, np.uint8), b, np.zeros(_PAD, np.uint8)))
    ns = _timestamps_ns(
        padded, starts[:, columns.index("TIMESTAMP")] + _PAD, lens[:, columns.index("TIMESTAMP")]
    )
    prompt, output = (
        _counts(padded, starts[:, columns.index(c)] + _PAD, lens[:, columns.index(c)])
        for c in ("ContextTokens", "GeneratedTokens")
    )
    if ns is None or prompt is None or output is None:
        return None
    zero = (prompt == 0) | (output == 0)
    clamped = int(zero.sum())
    if clamped:
        prompt, output = np.maximum(prompt, 1), np.maximum(output, 1)
    return (ns - ns.min()) / 1e9, prompt, output, clamped, columns


def _counts(b: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """int64 of the fields ``b[starts:starts + lens]`` if each is 1-18 ASCII digits (which
    the row parser reads the same way), else None."""
    if lens.min() < 1 or lens.max() > 18:
        return None
    width = int(lens.max())
    pos = np.arange(-width, 0)  # right-aligned: the field's last byte at -1
    d = b[(starts + lens)[:, None] + pos] - np.uint8(48)
    d[pos < -lens[:, None]] = 0  # bytes before the field
    if (d > 9).any():
        return None
    return d.astype(np.int64) @ _TEN[width - 1 :: -1]


def _timestamps_ns(b: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray | None:
    """int64 nanoseconds (from some day, the same for all) of the ``YYYY-MM-DD HH:MM:SS[.f]``
    fields ``b[starts:starts + lens]`` (a ``T`` may stand for the space; 1-9 fraction
    digits), checked as the row parser checks them: a real date from year 1, hour <= 23,
    minute <= 59, second <= 60. None for anything else."""
    if lens.min() < 19 or lens.max() > 29 or (lens == 20).any():
        return None
    pos = np.arange(int(lens.max()))
    m = b[starts[:, None] + pos]
    d = m[:, _DIGITS_AT] - np.uint8(48)
    if (
        (d > 9).any()
        or (m[:, [4, 7]] != ord("-")).any()
        or (m[:, [13, 16]] != ord(":")).any()
        or ((m[:, 10] != ord(" ")) & (m[:, 10] != ord("T"))).any()
    ):
        return None
    frac = np.zeros(len(m), dtype=np.int64)
    if m.shape[1] > 19:
        if ((m[:, 19] != ord(".")) & (lens > 19)).any():
            return None
        f = m[:, 20:] - np.uint8(48)
        f[pos[20:] >= lens[:, None]] = 0  # after the field: 0 digits, as the row parser pads to 9
        if (f > 9).any():
            return None
        frac = f.astype(np.int64) @ _TEN[8::-1][: f.shape[1]]
    d = d.astype(np.int64)
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
    hour, minute, second = d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11], d[:, 12] * 10 + d[:, 13]
    if (
        (year < 1) | (month < 1) | (month > 12) | (day < 1) | (hour > 23) | (minute > 59) | (second > 60)
    ).any():
        return None
    first = ((year - 1970) * 12 + month - 1).astype("datetime64[M]")
    first_day = first.astype("datetime64[D]").astype(np.int64)
    if (day > (first + 1).astype("datetime64[D]").astype(np.int64) - first_day).any():
        return None  # no such day in that month
    days = first_day + day - 1
    days -= days.min()
    if days.max() > 100_000:  # ~270 years; more would overflow int64 nanoseconds
        return None
    return (days * 86400 + hour * 3600 + minute * 60 + second) * 1_000_000_000 + frac
