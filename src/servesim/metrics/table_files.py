"""Columns as the output files hold them (``metrics.output``, and the streamed time series of
``metrics.timeseries``): a ``pyarrow`` table, and a CSV cell (NaN empty)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def arrow_table(cols: dict[str, np.ndarray]) -> Any:
    """Columns as a ``pyarrow.Table`` (object columns, such as names, as lists)."""
    import pyarrow as pa

    return pa.table(
        {name: pa.array(col.tolist() if col.dtype == object else col) for name, col in cols.items()}
    )


def csv_cell(x: Any) -> Any:
    """A value as ``timeseries``/``requests`` CSV cells hold it (NaN: empty)."""
    if isinstance(x, float) and math.isnan(x):
        return ""
    return x
