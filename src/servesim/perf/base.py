"""The interface between the engine and every performance model.

``PerfModel.batch_time(stats)`` takes only aggregate statistics of one iteration's batch
and is O(1): nothing per request crosses this interface, which keeps the hot path fast
and lets the decode fast path sum many iterations in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(slots=True)
class BatchStats:
    """Aggregate statistics of one engine iteration.

    A request is a *prefill* in a step if it computes prompt tokens in it (a chunk of
    ``c`` tokens on top of ``p`` already computed), and a *decode* otherwise (one token
    on top of its context).

    prefill_attn_work = sum over prefill chunks of c * (p + c / 2): the number of
        (query, key) pairs the chunk's causal attention touches, in token units.
    sum_decode_context = sum over decodes of the context each one attends to (tokens
        already in its KV cache plus the new one).
    """

    num_prefill_tokens: int = 0
    prefill_attn_work: float = 0.0
    num_prefill_reqs: int = 0
    num_decode_reqs: int = 0
    sum_decode_context: int = 0
    # KV tokens the prefill chunks read from earlier steps / the prefix cache (sum of p).
    sum_prefill_context: int = 0
    # Policy extras (0 unless the policy uses them; perf.policy_costs.PolicyCostModel charges
    # them on top of the wrapped model): KV bytes copied over PCIe by swap preemption, and
    # speculative decoding's draft work (requests drafting, their contexts, draft steps k).
    swap_bytes: float = 0.0
    num_spec_reqs: int = 0
    sum_spec_context: int = 0
    num_draft_steps: int = 0

    def add_decode(self, context_before: int) -> None:
        """One decode: a single new token on top of ``context_before`` cached tokens."""
        self.num_decode_reqs += 1
        self.sum_decode_context += context_before + 1

    def add_chunk(self, n: int, context_before: int) -> None:
        """A prefill chunk of ``n`` tokens on top of ``context_before`` computed tokens."""
        self.num_prefill_reqs += 1
        self.num_prefill_tokens += n
        self.prefill_attn_work += n * (context_before + n / 2)
        self.sum_prefill_context += context_before

    @property
    def num_reqs(self) -> int:
        return self.num_prefill_reqs + self.num_decode_reqs

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_reqs


class PerfModel(Protocol):
    """Time and work of one iteration from aggregate batch statistics."""

    def batch_time(self, stats: BatchStats) -> float:
        """Seconds the GPU(s) spend on this batch (forward pass, sampling, communication)."""
        ...

    def batch_flops(self, stats: BatchStats) -> float:
        """FLOPs of the batch on one GPU (for MFU)."""
        ...

    def batch_bytes(self, stats: BatchStats) -> float:
        """HBM bytes moved by the batch on one GPU (for MBU)."""
        ...


def decode_step_times(perf: PerfModel, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
    """``batch_time`` of pure-decode steps of ``num_decode_reqs`` requests, one per context sum.

    Uses the model's vectorized ``decode_step_times`` where it has one (the same terms as
    its ``batch_time``, summed in another order: equal to rounding), else a scalar loop.
    """
    fast = getattr(perf, "decode_step_times", None)
    if fast is not None:
        return fast(num_decode_reqs, sum_decode_context)
    st = BatchStats(num_decode_reqs=num_decode_reqs)
    out = np.empty(len(sum_decode_context))
    for i, s in enumerate(sum_decode_context.tolist()):
        st.sum_decode_context = s
        out[i] = perf.batch_time(st)
    return out


@dataclass(slots=True)
class ConstantPerfModel:
    """Every iteration takes ``step_s`` seconds: the constant service time of queueing theory.

    With ``max_num_seqs=1`` and a workload whose requests need exactly one iteration, a
    replica is an M/D/1 queue; tests use that to check the engine against theory.
    """

    step_s: float = 0.01
    per_token_s: float = 0.0

    def batch_time(self, stats: BatchStats) -> float:
        return self.step_s + self.per_token_s * (stats.num_prefill_tokens + stats.num_decode_reqs)

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        return np.full(len(sum_decode_context), self.step_s + self.per_token_s * num_decode_reqs)

    def batch_flops(self, stats: BatchStats) -> float:
        return 0.0

    def batch_bytes(self, stats: BatchStats) -> float:
        return 0.0
