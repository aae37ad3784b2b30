"""Pipeline parallelism: the stages of a step (``stage_times``, ``pipeline_stages``, which the
engine's batch queue uses, ``engine/batch_queue.py``), and GPipe micro-batches inside a step
(``PipelinedPerfModel``, built by ``roofline.build_perf_model`` with ``num_microbatches`` > 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class LastStageHead(Protocol):
    def last_stage_s(self, stats: BatchStats) -> float:
        """Seconds of ``batch_time`` that only the last pipeline stage spends: the LM head,
        the logits gather and sampling. The rest (the layers, their all-reduces and the
        sends between stages) is split evenly over the stages."""
        ...


def stage_head_s(perf: object, stats: BatchStats) -> float:
    """``perf.last_stage_s(stats)`` where the model offers it, else 0 (equal stages)."""
    return perf.last_stage_s(stats) if isinstance(perf, LastStageHead) else 0.0


def stage_times(perf: object, stats: BatchStats, gpu_s: float, pp: int) -> tuple[float, float]:
    """(seconds on each of the first pp - 1 stages, seconds on the last stage) of a batch whose
    whole forward takes ``gpu_s`` (``batch_time`` plus what the step waits for) on ``pp`` stages:
    ``(pp - 1) x first + last = gpu_s``.

    The stages are not equal: vLLM splits the decoder layers evenly over the stages
    (``get_pp_indices``) and runs the LM head and sampling on the last one only, so where the
    model offers ``last_stage_s`` (the roofline and the measured-kernel model do) the last
    stage takes that on top of its share. Simplifications: the layers' share is ``1 / pp``
    even where pp does not divide the layer count; the pp - 1 sends between stages (which
    the models price in ``batch_time``) are spread over all stages; the embedding is counted
    with the layers; a model without ``last_stage_s`` has equal stages."""
    head = stage_head_s(perf, stats)
    if head > gpu_s:
        head = gpu_s
    share = (gpu_s - head) / pp
    return share, share + head


def pipeline_stages(perf: object) -> int:
    """The pipeline stages the engine pipelines batches over: the model's ``pp``, looked up
    through the wrappers that add costs to a step (``base``: policy costs, LoRA, power
    capping); 1 for a ``PipelinedPerfModel``, whose GPipe step keeps the whole step on the
    pipeline (its micro-batches fill and drain it inside the step) and for models without
    stages."""
    seen: object | None = perf
    for _ in range(8):
        if seen is None or isinstance(seen, PipelinedPerfModel):
            return 1
        pp = getattr(seen, "pp", None)
        if isinstance(pp, int):
            return pp
        seen = getattr(seen, "base", None)
    return 1


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
