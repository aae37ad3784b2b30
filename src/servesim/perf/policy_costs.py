"""Costs some policies add to a step on top of the forward pass.

``PolicyCostModel`` wraps any ``PerfModel`` (roofline, profiled) and adds, from the extra
``BatchStats`` fields a policy fills:

* swap preemption: ``swap_bytes / pcie_bw`` (the copies run on the step that makes them;
  vLLM V0 issues them on a separate stream but waits for them before the forward pass);
* speculative decoding: ``num_draft_steps`` decode steps of the draft model over the
  ``num_spec_reqs`` drafting requests, each ``draft_cost_ratio`` x the wrapped model's
  decode step for that batch (at the mean context of the k steps).

FLOPs and bytes are the wrapped model's (the draft model's and the copies' work is not
added to MFU/MBU).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.pipelined import stage_head_s


@dataclass(slots=True)
class PolicyCostModel:
    base: PerfModel
    pcie_bytes_per_s: float = 25e9
    draft_cost_ratio: float = 0.0

    def batch_time(self, stats: BatchStats) -> float:
        t = self.base.batch_time(stats)
        if stats.swap_bytes:
            t += stats.swap_bytes / self.pcie_bytes_per_s
        k = stats.num_draft_steps
        if k and self.draft_cost_ratio:
            n = stats.num_spec_reqs
            mean_context = stats.sum_spec_context + n * (k - 1) // 2  # over the k draft steps
            draft = BatchStats(num_decode_reqs=n, sum_decode_context=mean_context)
            t += self.draft_cost_ratio * k * self.base.batch_time(draft)
        return t

    def last_stage_s(self, stats: BatchStats) -> float:
        """The wrapped model's last-stage share (``perf.pipelined.stage_times``)."""
        return stage_head_s(self.base, stats)

    def batch_flops(self, stats: BatchStats) -> float:
        return self.base.batch_flops(stats)

    def batch_bytes(self, stats: BatchStats) -> float:
        return self.base.batch_bytes(stats)
