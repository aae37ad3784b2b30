"""What a step model may offer beyond ``PerfModel`` (``perf.base``), as protocols.

Every step model times a batch (``batch_time``) and counts its work (``batch_flops``,
``batch_bytes``). Some offer more, and the engine and the reports use it where offered:

==================  ===================================================================
``AffineDecode``    a pure-decode step in closed form (the lazy engine's decode runs)
``DecodeTerms``     a pure-decode step as a constant plus one kernel-table row
``VectorDecode``    many pure-decode steps at once (numpy), equal to ``batch_time``
``BatchWork``       FLOPs and bytes in one call
``CountsWork``      the roofline's compiled work counter, called directly
``PipelineStages``  pipeline stages (``pp``) and the idle share of a step (bubbles)
``SelfDescribing``  a description of where its times come from
``RooflineFallbacks``  the operators it times by the roofline for want of tables
``Clocked``         the SM clock it runs at (the power capper sets it)
==================  ===================================================================

They are ``runtime_checkable``: callers test ``isinstance(perf, AffineDecode)``, which
checks that the members exist (not their signatures), once when they set up, not per step.
This module is plain Python (not compiled): the compiled engine modules import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from servesim.perf.base import BatchStats, PerfModel

if TYPE_CHECKING:
    from servesim.perf.kernel_step import Row
    from servesim.perf.work_step import WorkCounter


@runtime_checkable
class AffineDecode(Protocol):
    def decode_affine(self, num_decode_reqs: int) -> tuple[float, float, float, float] | None:
        """(rest, a, b, c) with ``batch_time = rest + max(a * s, b * s + c)`` for a pure-decode
        batch of ``num_decode_reqs`` requests and context sum ``s``; None where not of that form."""
        ...


@runtime_checkable
class DecodeTerms(Protocol):
    def decode_terms(self, num_decode_reqs: int) -> tuple[float, Row] | None:
        """(rest, row) with ``batch_time = rest + row_time(row, log(s / n))`` for a pure-decode
        batch of ``n`` requests and context sum ``s``; None where not of that form."""
        ...


@runtime_checkable
class VectorDecode(Protocol):
    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        """``batch_time`` of pure-decode batches of ``num_decode_reqs`` requests, one per
        context sum (equal to ``batch_time`` up to rounding)."""
        ...


@runtime_checkable
class BatchWork(Protocol):
    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, HBM bytes) of the batch on one GPU: ``batch_flops`` and ``batch_bytes``."""
        ...


@runtime_checkable
class CountsWork(Protocol):
    @property
    def work_counter(self) -> WorkCounter:
        """The counter of FLOPs and bytes that ``batch_work`` uses (a compiled class)."""
        ...


@runtime_checkable
class PipelineStages(Protocol):
    @property
    def pp(self) -> int:
        """Pipeline stages (1: none)."""
        ...

    def bubble_fraction(self, stats: BatchStats) -> float:
        """The share of the step each GPU idles in pipeline bubbles."""
        ...


@runtime_checkable
class SelfDescribing(Protocol):
    def describe(self) -> Any:
        """Where the model's times come from: text, or a dict of the run's ``perf_model``
        entry (``perf.describe``)."""
        ...


@runtime_checkable
class RooflineFallbacks(Protocol):
    @property
    def fallbacks(self) -> tuple[str, ...]:
        """Operators timed by the roofline (no table for the GPU, dtype or shape)."""
        ...


@runtime_checkable
class Clocked(Protocol):
    clock: float
    """The SM clock as a fraction of its maximum (1.0: unthrottled); the power capper sets it
    (``cluster.operations``)."""


def decode_step_times(perf: PerfModel, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
    """``batch_time`` of pure-decode steps of ``num_decode_reqs`` requests, one per context sum.

    Uses the model's vectorized ``decode_step_times`` where it has one (the same terms as
    its ``batch_time``, summed in another order: equal to rounding), else a scalar loop.
    """
    if isinstance(perf, VectorDecode):
        return perf.decode_step_times(num_decode_reqs, sum_decode_context)
    st = BatchStats(num_decode_reqs=num_decode_reqs)
    out = np.empty(len(sum_decode_context))
    for i, s in enumerate(sum_decode_context.tolist()):
        st.sum_decode_context = s
        out[i] = perf.batch_time(st)
    return out
