"""Pipeline parallelism with micro-batches: a roofline model's step split into micro-batches
that flow through the stages (``PipelinedPerfModel``, built by ``roofline.build_perf_model``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from servesim.perf.base import BatchStats


@dataclass(slots=True)
class MicroBatchShare:
    """One micro-batch's even share of a step's ``BatchStats``: the same fields, fractional
    (``BatchStats`` holds whole counts, and is a compiled class that enforces it)."""

    num_prefill_tokens: float
    prefill_attn_work: float
    num_prefill_reqs: float
    num_decode_reqs: float
    sum_decode_context: float
    sum_prefill_context: float


class StagedPerfModel(Protocol):
    """What ``PipelinedPerfModel`` asks of the model it splits (``RooflinePerfModel``): the
    time and work of a whole step through ``pp`` stages, for whole or fractional batches."""

    pp: int

    def batch_time(self, stats: BatchStats) -> float: ...

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray: ...

    def batch_work(self, stats: BatchStats) -> tuple[float, float]: ...

    def batch_flops(self, stats: BatchStats) -> float: ...

    def batch_bytes(self, stats: BatchStats) -> float: ...


class PipelinedPerfModel:
    """Pipeline parallelism with micro-batches: ``inner`` split into ``m`` micro-batches per step.

    A step's batch is split evenly into ``m' = min(m, requests)`` micro-batches that flow
    through the pp stages in a GPipe schedule (the engine step is synchronous, so every
    step fills and drains the pipeline)::

        stage  1 | a b c . . |        m' = 3 micro-batches, pp = 3:
        stage  2 | . a b c . |        (m' + pp - 1) stage slots per step,
        stage  3 | . . a b c |        of which pp - 1 are bubbles on every GPU

        time   = (m' + pp - 1) x stage time of one micro-batch
               = (m' + pp - 1) / pp x inner.batch_time(stats / m')
        bubble = (pp - 1) / (m' + pp - 1)

    With m' = 1 this is ``inner`` itself (the sum of the stage times). Each micro-batch
    streams the stage's weights again, so bytes are m' x those of one micro-batch.
    Simplification: vLLM also overlaps consecutive steps (its virtual engines), which
    hides more of the bubble than this model does.
    """

    __slots__ = ("inner", "pp", "num_microbatches")

    def __init__(self, inner: StagedPerfModel, num_microbatches: int) -> None:
        self.inner, self.pp, self.num_microbatches = inner, inner.pp, num_microbatches

    def _split(self, stats: BatchStats) -> tuple[int, BatchStats]:
        m = min(self.num_microbatches, stats.num_prefill_reqs + stats.num_decode_reqs)
        if m <= 1:
            return 1, stats
        share = MicroBatchShare(
            stats.num_prefill_tokens / m,
            stats.prefill_attn_work / m,
            stats.num_prefill_reqs / m,
            stats.num_decode_reqs / m,
            stats.sum_decode_context / m,
            stats.sum_prefill_context / m,
        )
        return m, share  # type: ignore[return-value]  # read like a BatchStats, fractional counts

    def batch_time(self, stats: BatchStats) -> float:
        m, part = self._split(stats)
        if m == 1:
            return self.inner.batch_time(stats)
        return (m + self.pp - 1) / self.pp * self.inner.batch_time(part)

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        m = min(self.num_microbatches, num_decode_reqs)
        if m <= 1:
            return self.inner.decode_step_times(num_decode_reqs, sum_decode_context)
        inner = self.inner.decode_step_times(num_decode_reqs / m, np.asarray(sum_decode_context) / m)  # type: ignore[arg-type]
        return (m + self.pp - 1) / self.pp * inner

    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        m, part = self._split(stats)
        f, b = self.inner.batch_work(part)
        return m * f, m * b

    def batch_flops(self, stats: BatchStats) -> float:
        m, part = self._split(stats)
        return m * self.inner.batch_flops(part)

    def batch_bytes(self, stats: BatchStats) -> float:
        m, part = self._split(stats)
        return m * self.inner.batch_bytes(part)

    def bubble_fraction(self, stats: BatchStats) -> float:
        m = min(self.num_microbatches, stats.num_prefill_reqs + stats.num_decode_reqs)
        return (self.pp - 1) / (max(m, 1) + self.pp - 1)
