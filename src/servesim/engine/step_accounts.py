"""A replica's bookkeeping: what its steps add to its totals and to the step series.

An event step is counted as it starts (``step``); a run of pure-decode steps
(``engine/decode_runs.py``) segment by segment (``run``), its rows of the series kept as the
run itself (``RunRows``) until they are final. Where a run may be cut (a cluster's quiet
arrivals, ``Replica.cut_run``), the totals as they were before it are saved (``save``) and put
back (``restore``) so that the run, made again shorter, is counted again.

The replica owns one ``StepAccounts``; it is a separate object so that the replica reads as
its steps and this as their sums (compiled, its methods are native calls).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from servesim.engine.decode_runs import Run
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.request import Request
from servesim.engine.run_rows import RunRows
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.metrics.records import ReplicaTotals, StepSeries
from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.capabilities import BatchWork, CountsWork, PipelineStages
from servesim.perf.work_step import WorkCounter

_sum: Final = sum  # compiled, a C static (``sum`` is looked up in the builtins module each call)

# The totals a run changes, as ``save`` keeps them: busy_s, gpu_s, num_steps, num_run_steps,
# num_batched_tokens, kv_block_s, peak_kv_blocks, flops, bytes, bubble_s.
SavedTotals = tuple[float, float, int, int, int, float, int, float, float, float]


class StepAccounts:
    """The steps of replica ``replica_id`` counted in ``totals`` and, where it is kept, the
    step series ``steps`` (None: not recorded)."""

    def __init__(
        self,
        replica_id: int,
        scheduler: Scheduler,
        perf: PerfModel,
        steps: StepSeries | None,
        totals: ReplicaTotals,
    ) -> None:
        self.id = replica_id
        self.scheduler = scheduler
        self.kv = scheduler.kv
        # The same cache where it is the counting one (the lazy engine's): compiled, its
        # fields read natively, where ``kv`` (a protocol) is read by name
        self._ckv = scheduler.kv if isinstance(scheduler.kv, CountingKVCache) else None
        self.steps = steps
        self.totals = totals
        # (FLOPs, bytes) in one call where offered
        self._work: Callable[[BatchStats], tuple[float, float]] = (
            perf.batch_work
            if isinstance(perf, BatchWork)
            else lambda st: (perf.batch_flops(st), perf.batch_bytes(st))
        )
        # The roofline's count itself where the model offers it: a compiled call, no frame.
        counter = perf.work_counter if isinstance(perf, CountsWork) else None
        self._counter: WorkCounter | None = counter if isinstance(counter, WorkCounter) else None
        # Pipeline bubbles, for utilization (only perf models with stages report them).
        self._bubble: Callable[[BatchStats], float] | None = (
            perf.bubble_fraction if isinstance(perf, PipelineStages) and perf.pp > 1 else None
        )
        self._run_work: dict[int, tuple[float, float, float, float]] = {}  # see run_totals
        self.run_rows: RunRows | None = None  # the step-series rows of the run in flight
        # Waiting requests integrated over the recorded steps (``ReplicaTotals.waiting_s``):
        # each finished run's share, in order, until ``finish_waiting`` folds them in after
        # the event steps', as ``StepSeries.waiting_s_by_replica`` sums them.
        self._run_waiting_s: list[float] = []
        self._saved: SavedTotals | None = None  # the totals before the run in flight (``save``)

    def step(self, out: SchedulerOutput, now: float, dt: float, gpu_s: float, bubble_s: float = -1.0) -> None:
        """Count the step in the totals and the step series (``bubble_s`` >= 0: the batch
        queue's own count of pipeline bubbles, else the perf model's share of ``gpu_s``)."""
        st = out.stats
        t = self.totals
        ckv = self._ckv
        used = ckv.num_used_blocks if ckv is not None else self.kv.num_used_blocks
        t.busy_s += dt
        t.gpu_s += gpu_s
        f, b = self._work(st) if self._counter is None else self._counter.batch_work(st)
        t.flops += f
        t.bytes += b
        t.num_steps += 1
        t.num_batched_tokens += st.num_prefill_tokens + st.num_decode_reqs
        t.num_preemptions += len(out.preempted)
        t.kv_block_s += used * dt
        if bubble_s >= 0.0:
            t.bubble_s += bubble_s
        elif self._bubble is not None:
            t.bubble_s += gpu_s * self._bubble(st)
        if used > t.peak_kv_blocks:
            t.peak_kv_blocks = used
        if self.steps is not None:
            num_waiting = len(self.scheduler.waiting)
            t.waiting_s += num_waiting * dt
            self.steps.add_step(
                self.id,
                now,
                dt,
                st.num_prefill_tokens,
                st.num_decode_reqs,
                len(self.scheduler.running),
                num_waiting,
                used,
                len(out.preempted),
            )

    def share(self, other: StepAccounts) -> None:
        """Keep the per-pool-size cache of a run's work in ``other``'s: a replica of the same
        pool, on the same perf model."""
        self._run_work = other._run_work

    def run(self, run: Run) -> None:
        """Count the extra steps of a run of pure-decode steps, segment by segment."""
        self.run_totals(run)
        if self.steps is not None:  # rows written when read; waiting as of the run's start
            ckv = self._ckv
            bs = ckv.block_size if ckv is not None else self.kv.block_size
            self.run_rows = RunRows(self.id, run, len(self.scheduler.waiting), bs)
            self.steps.add_rows(self.run_rows)

    def run_totals(self, run: Run) -> None:
        """``run``'s part in the replica's totals."""
        durations = run.durations
        k_all = len(durations)
        total = run.total_s
        t = self.totals
        t.busy_s += total
        t.gpu_s += _sum(run.segment_gpu_s)
        t.num_steps += k_all
        t.num_run_steps += k_all
        t.kv_block_s += run.kv_block_s
        if run.peak_used > t.peak_kv_blocks:
            t.peak_kv_blocks = run.peak_used
        tokens = 0  # one a pooled request and step (a loop: compiled, a generator is an object)
        for seg, (n, k, s_first) in enumerate(run.segments):
            tokens += n * k
            # FLOPs and bytes are affine in the decode context, which grows by n per step:
            # k steps do k * work(their mean context).
            aff = self._run_work.get(n)
            if aff is None:
                f0, b0 = self._work(BatchStats(num_decode_reqs=n))
                f1, b1 = self._work(BatchStats(num_decode_reqs=n, sum_decode_context=1 << 20))
                aff = self._run_work[n] = (f0, (f1 - f0) / (1 << 20), b0, (b1 - b0) / (1 << 20))
            mean_s = s_first + n * (k - 1) / 2
            t.flops += k * (aff[0] + aff[1] * mean_s)
            t.bytes += k * (aff[2] + aff[3] * mean_s)
            if self._bubble is not None:
                t.bubble_s += run.segment_gpu_s[seg] * self._bubble(BatchStats(num_decode_reqs=n))
        t.num_batched_tokens += tokens

    def save(self) -> None:
        """Keep the totals a run changes, as they are before it (a run that may be cut)."""
        t = self.totals
        self._saved = (
            t.busy_s,
            t.gpu_s,
            t.num_steps,
            t.num_run_steps,
            t.num_batched_tokens,
            t.kv_block_s,
            t.peak_kv_blocks,
            t.flops,
            t.bytes,
            t.bubble_s,
        )

    def restore(self) -> None:
        """Put back the totals ``save`` kept: the run is counted again as cut."""
        t = self.totals
        saved = self._saved
        assert saved is not None
        (
            t.busy_s,
            t.gpu_s,
            t.num_steps,
            t.num_run_steps,
            t.num_batched_tokens,
            t.kv_block_s,
            t.peak_kv_blocks,
            t.flops,
            t.bytes,
            t.bubble_s,
        ) = saved

    def cut_rows(self, num_rows: int, num_cut: int) -> None:
        """The run in flight was cut to its first ``num_rows`` steps, ``num_cut`` fewer: its
        rows too."""
        rows = self.run_rows
        if rows is not None:
            steps = self.steps
            assert steps is not None
            rows.num_rows = num_rows
            steps.rows_cut(num_cut)

    def count_waiting_during_run(self, waiting0: int, staged: list[Request]) -> None:
        """The run's rows hold the waiting queue as of its start (``waiting0`` requests): add
        the requests queued during the run, and with async scheduling those ``staged``
        during it (``RunRows``)."""
        rows = self.run_rows
        if rows is None:
            return
        waiting = self.scheduler.waiting
        if len(waiting) > waiting0 or staged:
            rows.add_waiting(
                sorted(waiting[i].queued_s for i in range(waiting0, len(waiting))),
                [r.queued_s for r in staged],
            )

    def close_run_rows(self, prev_start_s: float) -> None:
        """The run's rows are final: keep their waiting seconds (``finish_waiting``);
        ``prev_start_s``: the start of the step that started the run."""
        if self.run_rows is not None:
            self._run_waiting_s.append(self.run_rows.seal(prev_start_s))
            self.run_rows = None

    def finish_waiting(self, prev_start_s: float) -> None:
        """The end of the run: add the runs' waiting seconds to the event steps' in
        ``totals.waiting_s`` (a run still in flight with the rows it has), in the order
        ``StepSeries.waiting_s_by_replica`` adds them, so that the figure is the same."""
        self.close_run_rows(prev_start_s)
        t = self.totals
        for w in self._run_waiting_s:
            t.waiting_s += w
        self._run_waiting_s = []
