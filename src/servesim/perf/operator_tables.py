"""Measured operator times, the tables a profiled perf model interpolates in.

``servesim.calibration.measurements`` reads them from Vidur-format profiles (and
``servesim profile`` writes that format); ``ProfiledPerfModel`` (``servesim.perf.profiled``)
times a step with them, and calibration fits the roofline to them. Times are seconds per
layer, sizes bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servesim.catalog.models import ModelSpec
from servesim.perf.base import BatchStats

#: Kernels per layer in each operator class of a profile (for the per-kernel overhead):
#: the QKV and output projections, the MLP's up and down GEMMs, and five elementwise
#: kernels (two RMSNorms, rotary embedding, activation, residual add).
OPERATOR_KERNELS = {"proj": 2, "mlp": 2, "elementwise": 5}


@dataclass(slots=True)
class OperatorTable:
    """Per-layer time of each operator class of one model on one GPU at one TP degree.

    ``shape`` is a one-layer ModelSpec built from the profile's own columns (heads, widths,
    vocabulary), so the roofline of the same operators needs no preset.
    """

    gpu: str
    model: str
    tp: int
    shape: ModelSpec
    num_tokens: np.ndarray  # sorted, unique
    times_s: dict[str, np.ndarray] = field(default_factory=dict)  # class -> seconds per layer
    source: str = ""
    attention: AttentionTable | None = None  # from attention.csv beside mlp.csv, when present


@dataclass(slots=True)
class AttentionTable:
    """Per-layer attention times (``servesim profile``'s attention.csv, median ms -> s).

    ``is_prefill``: a causal chunk of ``num_tokens`` on top of ``context_len`` earlier tokens;
    otherwise ``batch_size`` decodes, each over ``context_len`` tokens.
    """

    is_prefill: np.ndarray
    num_tokens: np.ndarray
    context_len: np.ndarray
    batch_size: np.ndarray
    time_s: np.ndarray

    def stats(self) -> list[BatchStats]:
        out = []
        for pf, t, c, b in zip(
            self.is_prefill.tolist(),
            self.num_tokens.tolist(),
            self.context_len.tolist(),
            self.batch_size.tolist(),
        ):
            out.append(
                BatchStats(
                    num_prefill_tokens=t,
                    prefill_attn_work=t * (c + t / 2),
                    num_prefill_reqs=1,
                    sum_prefill_context=c,
                )
                if pf
                else BatchStats(num_decode_reqs=b, sum_decode_context=b * c)
            )
        return out


@dataclass(slots=True)
class AllReduceTable:
    """Measured all-reduce times: ``num_workers``, message ``size_bytes``, ``time_s`` (medians)."""

    topology: str
    num_workers: np.ndarray
    size_bytes: np.ndarray
    time_s: np.ndarray
