"""The lazy engine's decode pool and its runs (``DecodePool``, ``LazyScheduler``'s base,
and ``LazyOutput``, what its steps return).

The pool (see ``lazy.py``) holds the running requests that decode one token every step,
with their counts derived from the step they joined at. A step that ran only pooled
decodes and admitted nobody is extended into a *run*: the steps that would follow it while
nothing can change the schedule are timed in one go, and no request is touched. See
``extend_run`` for the rules that make a run exact; the scheduling itself is in ``lazy.py``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass
from math import exp, inf, log
from types import FunctionType
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.capabilities import AffineDecode, DecodeTerms, decode_step_times
from servesim.perf.kernel_step import Row

if TYPE_CHECKING:
    from servesim.engine.kv_counting import CountingKVCache
    from servesim.engine.scheduler import SchedulerConfig


def _probe() -> None:
    """A module function: a plain Python function unless this module is compiled."""


COMPILED: Final = not isinstance(_probe, FunctionType)
# Run steps timed one by one before switching to numpy chunks. Compiled, a step costs tens
# of ns and numpy's per-call overhead never pays; in Python (~0.5 us a step) chunks pay only
# on long runs (measured on the Azure hour: 32 was 7% slower than 1024 and than no chunks,
# as most chunks are cut short by the next arrival). Compiled, 2**50: past any run, and
# ``j + SCALAR_STEPS`` stays a C integer (from 2**62 on, mypyc boxes an int).
SCALAR_STEPS = 1 << 50 if COMPILED else 1024
# Final: compiled, C statics (a module's attribute or global would be looked up by name)
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop
_bisect_right: Final = bisect_right


@dataclass(slots=True, init=False)
class LazyOutput(SchedulerOutput):
    """A step (or a run of ``num_steps`` pure-decode steps) of the lazy scheduler."""

    is_exact: bool  # ran the reference algorithm (pool materialized)
    first_it: int  # index of the (first) step
    num_steps: int
    first_tokens_done: bool  # extend_run produced its prompts' first tokens at its end

    def __init__(self, first_it: int = 0, num_pool: int = 0, is_exact: bool = False) -> None:
        SchedulerOutput.__init__(self, num_pool=num_pool)
        self.is_exact = is_exact
        self.first_it = first_it
        self.num_steps = 1
        self.first_tokens_done = False


@dataclass(slots=True, init=False)
class Run:
    """Steps added to a pure-decode step by ``LazyScheduler.extend_run``."""

    durations: list[float]
    start_s: float  # start of the first step
    segments: list[tuple[int, int, int]]  # (pool size, steps, decode context sum of the first)
    # For the step series (``run_rows.RunRows``; empty when steps are not recorded), laid out
    # as its buffers keep them (``metrics.flat_runs.FlatRuns``), which copy each list whole:
    # per segment ``SEG_FIELDS`` ints (pool size, steps, first step, KV blocks in use before it)
    # and the pool's counts by block phase (bytes, or a list where a count reaches 256).
    seg_rows: list[int]
    phases: list[bytes | list[int]]
    segment_gpu_s: list[float]  # per segment: the GPU's part of its steps (no CPU time)
    end_s: float  # end of the last step
    finished: list[Request]  # left at a step's end, in order
    total_s: float  # sum of the durations, in step order
    kv_block_s: float  # sum of used * duration, in step order
    peak_used: int  # most KV blocks in use in a step
    keep_steps: bool  # the step series is recorded (``phases`` kept)
    bound_s: float  # no step starts at or after it (inf: the run was not bound by time)
    deferred: bool  # its KV blocks are taken when it is committed (``DecodePool.commit_run``)
    pending_pops: int  # the blocks its steps took, not yet taken off the free queue

    def __init__(self, end_s: float, keep_steps: bool = True, deferred: bool = False) -> None:
        self.durations = []
        self.start_s = end_s
        self.keep_steps = keep_steps
        self.segments = []
        self.seg_rows = []
        self.phases = []
        self.segment_gpu_s = []
        self.end_s = end_s
        self.finished = []
        self.total_s = 0.0
        self.kv_block_s = 0.0
        self.peak_used = 0
        self.bound_s = inf  # math.inf: compiled, a constant (float("inf") parses a string)
        self.deferred = deferred
        self.pending_pops = 0

    def become(self, other: Run | None) -> None:
        """Take ``other``'s steps (None: none), keeping this run's lists, which the replica's
        step rows and stream hold (``DecodePool.cut_run``)."""
        if other is None:
            other = Run(self.start_s, self.keep_steps, self.deferred)
        self.durations[:] = other.durations
        self.segments[:] = other.segments
        self.seg_rows[:] = other.seg_rows
        self.phases[:] = other.phases
        self.segment_gpu_s[:] = other.segment_gpu_s
        self.finished[:] = other.finished
        self.end_s = other.end_s
        self.total_s = other.total_s
        self.kv_block_s = other.kv_block_s
        self.peak_used = other.peak_used
        self.bound_s = other.bound_s
        self.pending_pops = other.pending_pops


def _bisect_floats(xs: list[float], x: float) -> int:
    """``bisect_right(xs, x)`` for floats, compiled natively (the same comparisons; the
    ``bisect`` call is a call by vector with the floats compared through the interpreter)."""
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _row_piece(
    xs: list[float], ys: list[float], i: int
) -> tuple[float, bool, float, float, float, float, float]:
    """The piece of the row (xs, ys) at ``i = bisect_right(xs, x)``, for ``row_time_at``'s
    value there with the same operations: (the x where the next piece starts, inside the row,
    y0, dy, x0, dx, the edge's time). Inside, ``row_time_at`` is
    ``exp(y0 + dy * (x - x0) / dx)``; outside it is ``edge``, ``exp`` of the end value."""
    if i <= 0:
        return (xs[0] if xs else inf), False, 0.0, 0.0, 0.0, 0.0, exp(ys[0])
    if i >= len(xs):
        return inf, False, 0.0, 0.0, 0.0, 0.0, exp(ys[-1])
    return xs[i], True, ys[i - 1], ys[i] - ys[i - 1], xs[i - 1], xs[i] - xs[i - 1], 0.0


class DecodePool(Scheduler):
    """The decode pool of ``LazyScheduler`` (its base class) and the pool's runs.

    A pooled request decodes one token every step from ``lazy_it`` on; the pool keeps its
    size, the sum of its ``num_computed_tokens - lazy_it``, a count per block phase and a
    finish step per request (see ``lazy.py``). Single inheritance keeps it compilable.
    """

    def __init__(self, cfg: SchedulerConfig, kv: CountingKVCache) -> None:
        super().__init__(cfg, kv)
        self.ckv = kv  # = self.kv, typed as the counting cache (a subclass may not narrow kv)
        self.it = 0  # index of the next step
        self.num_pool = 0
        self.cpu_per_req_s = 0.0  # the engine's host time per scheduled request and step
        self.pool_off = 0  # sum over the pool of (num_computed_tokens - lazy_it)
        self.pool_max_seq = -1  # an upper bound of the pool's largest seq
        self.individual: list[Request] = []  # running requests not in the pool, by seq
        # Pooled requests by (num_computed_tokens - lazy_it) mod block_size: at step j the
        # new token of those in phase (-j) mod block_size starts a new KV block.
        self.phase = [0] * kv.block_size
        self._finishes: dict[int, list[tuple[Request, int]]] = {}
        self._finish_heap: list[int] = []
        self._run_finished: list[Request] = []  # finished inside a run, not reported yet
        # pool size -> (perf.decode_affine(pool size), else perf.decode_terms(pool size))
        self._terms: dict[int, tuple[tuple[float, float, float, float] | None, tuple[float, Row] | None]] = {}
        self._terms_perf: Any = None

    # ----------------------------------------------------------------- pool bookkeeping

    def _join_pool(self, r: Request, it: int) -> None:
        """``r`` produced a token in step it-1 and will decode every step from ``it``."""
        bs = self.ckv.block_size
        c = r.num_computed_tokens  # = num_tokens - 1
        r.lazy_it = it
        self.num_pool += 1
        self.pool_off += c - it
        if r.seq > self.pool_max_seq:
            self.pool_max_seq = r.seq
        ep = r.epoch
        self.phase[(c - it) % bs] += 1
        remaining = min(
            r.max_tokens - r.num_output_tokens,
            self.cfg.max_model_len - (r.num_prompt_tokens + r.num_output_tokens),
        )
        fin = it + remaining - 1
        bucket = self._finishes.get(fin)
        if bucket is None:
            self._finishes[fin] = [(r, ep)]
            _heappush(self._finish_heap, fin)
        else:
            bucket.append((r, ep))

    def _materialize(self, r: Request, it: int) -> None:
        """Write ``r``'s derived counts at step ``it`` into it (it stays in the pool)."""
        d = it - r.lazy_it
        if d:
            r.num_computed_tokens += d
            r.num_output_tokens += d
            r.lazy_it = it

    def _leave_pool(self, r: Request, it: int) -> None:
        self.phase[(r.num_computed_tokens - r.lazy_it) % self.ckv.block_size] -= 1
        self._materialize(r, it)
        self.num_pool -= 1
        self.pool_off -= r.num_computed_tokens - it
        r.lazy_it = -1
        r.epoch += 1

    def _valid(self, entries: list[tuple[Request, int]] | None) -> list[Request]:
        if not entries:
            return []
        return [r for r, ep in entries if ep == r.epoch and r.lazy_it >= 0]

    def _pop_finished(self, it_end: int, now: float) -> list[Request]:
        """Pooled requests whose last token came out of a step before ``it_end``."""
        heap = self._finish_heap
        done: list[Request] = []
        while heap and heap[0] < it_end:
            for r in self._valid(self._finishes.pop(_heappop(heap), None)):
                self._leave_pool(r, it_end)
                r.status = ReqStatus.FINISHED
                r.finished_s = now
                r.finished_length = r.num_output_tokens < r.max_tokens  # stopped at max_model_len
                done.append(r)
        return done

    def _remove_running(self, finished: list[Request]) -> None:
        running = self.running
        if len(finished) * 16 < len(running):
            for r in finished:
                running.remove(r)  # a C scan by identity: cheaper than a Python pass
        else:
            self.running = [r for r in running if r.status == ReqStatus.RUNNING]

    # ----------------------------------------------------------------- runs

    def extend_run(
        self,
        out: LazyOutput,
        start_s: float,
        first_step_s: float,
        next_event_s: float,
        perf: PerfModel,
        overhead_s: float,
        through_finishes: bool = False,
        keep_steps: bool = True,
        overlap: bool = False,
        defer_pops: bool = False,
    ) -> Run | None:
        """Extend a pure-decode step ``out`` into a run of steps that nothing can interrupt.

        ``out`` (just scheduled, lasting ``first_step_s``) ran only pooled decodes and
        admitted nobody. Steps are added while every one of them would schedule exactly
        the pool again: the free blocks cover each step's boundary crossings (else the
        reference would preempt), and, when an arrival could be admitted (nobody waiting
        and room in running), the step starts before the next event. Waiting requests that
        could not be admitted stay blocked: free blocks only shrink and the batch does not
        change. A pooled request's finish ends the run, unless ``through_finishes`` (a
        single replica: nobody observes a finish before the run's end) and nobody waits:
        then the finished requests leave at their step's end, in running order, exactly as
        the reference's next schedule would see it, and the run goes on with a smaller pool
        (in ``Run.segments``). They are reported by the ``update_from_output`` of ``out``,
        their times already set.

        Steps are timed one by one for the first ``SCALAR_STEPS`` of a segment (all of them
        when compiled), then in vectorized chunks (``decode_step_times``): only the decode
        context grows, by the pool size each step, and crossings repeat with period
        ``block_size``. The run's end is summed step by step, as the reference's clock does.
        A step lasts its GPU time plus its host time (``overhead_s`` plus ``cpu_per_req_s``
        per pooled request), or with ``overlap`` (async scheduling) the larger of the two, as
        ``Replica.step`` times it.

        ``defer_pops`` (not with ``through_finishes``): the blocks the run's steps take stay on
        the free queue until ``commit_run``, so that ``cut_run`` can end the run earlier.
        """
        if out.is_exact or out.preempted:
            # A step that preempted admitted nobody by rule (vLLM V1), not for want of blocks:
            # its victims, waiting now, may be admitted at the next step.
            return None
        if out.reqs:
            if not self._first_tokens_now(out, through_finishes):
                return None
        elif self.individual or not out.num_pool:
            return None
        heap = self._finish_heap
        j = out.first_it + 1  # the next step
        time_bound = not self.waiting and len(self.running) < self.cfg.max_num_seqs
        if time_bound and start_s + first_step_s >= next_event_s and not (heap and heap[0] < j):
            return None  # the loop's first test, before a Run is made (most steps end here)
        run = Run(start_s + first_step_s, keep_steps, defer_pops and not through_finishes)
        if time_bound:
            run.bound_s = next_event_s
        while True:
            if heap and heap[0] < j:  # the last step finished pooled requests
                if not (through_finishes and not self.waiting):
                    break
                self._finish_in_run(j, run)
                if not self.num_pool:
                    break
                time_bound = len(self.running) < self.cfg.max_num_seqs
            if time_bound and run.end_s >= next_event_s:
                break
            last = heap[0] if heap else j + (1 << 40)
            k = self._run_segment(j, last, time_bound, next_event_s, perf, overhead_s, run, overlap)
            if not k:
                break
            j += k
            if j <= last:  # stopped before the finish: by time or by blocks
                break
        self._run_finished.extend(run.finished)  # reported by update_from_output(out)
        if not run.durations:
            return None
        out.num_steps = 1 + len(run.durations)
        self.it = j
        return run

    def _first_tokens_now(self, out: LazyOutput, through_finishes: bool) -> bool:
        """Let a step that completes prompts start a run: its new requests' first tokens.

        When every individually tracked request ran in ``out`` and completes its prompt there
        (a first token, not its last), nobody waits and the pool, grown by them, fits the
        token budget, the next steps are pure decodes as surely as after a pool-only step.
        The tokens are then produced now (they come out at the step's end), and the requests
        join the pool for the next step, as ``update_from_output`` would do at that time;
        ``out.first_tokens_done`` tells it not to sample them again, and tells the replica
        (which keeps the clock) that their first tokens came out at the step's end. Only for
        a lone replica (``through_finishes``): nobody else reads these requests before the
        step ends.
        """
        if not through_finishes or self.waiting or len(out.reqs) != len(self.individual):
            return False
        max_len = self.cfg.max_model_len
        for r in out.reqs:
            if r.num_output_tokens or r.num_computed_tokens != r.num_prompt_tokens:
                return False  # a chunk, a decode or a resumed request
            if r.max_tokens <= 1 or r.num_prompt_tokens + 1 >= max_len:
                return False  # its first token is its last
        if self.num_pool + len(out.reqs) > self.cfg.max_num_batched_tokens:
            return False
        it_end = out.first_it + 1
        for r in out.reqs:
            r.num_output_tokens = 1
            self._join_pool(r, it_end)
        self.individual = []
        out.first_tokens_done = True
        return True

    def _run_segment(
        self,
        j: int,
        last: int,
        time_bound: bool,
        next_event_s: float,
        perf: PerfModel,
        overhead_s: float,
        run: Run,
        overlap: bool = False,
    ) -> int:
        """Add steps j..last (at most) with the pool as it is; returns how many were added."""
        kv = self.ckv
        n = self.num_pool
        overhead_s += self.cpu_per_req_s * n  # as Replica.step's host time of n requests
        bs = kv.block_size
        phase = self.phase
        free = kv.num_free_blocks - run.pending_pops
        base_used = kv.num_gpu_blocks - free
        pool_off = self.pool_off
        durations = run.durations
        k0 = len(durations)
        t = run.end_s
        coef, rc = self._decode_terms(perf, n)
        rest = a = b = c = 0.0
        row: Row | None = None
        xs: list[float] = []
        ys: list[float] = []
        i_row = 0  # bisect_right(xs, log length): only grows, as the context does
        # The attention row's piece at i_row, as row_time_at reads it: the step's log time
        # is y0 + dy * (x - x0) / dx inside the row, the constant edge outside (lin False).
        x_next = y0 = dy = x0 = dx = edge = 0.0
        lin = False
        if coef is not None:
            rest, a, b, c = coef
        elif rc is not None:
            rest, row = rc
            xs, ys = row
            lx = log((pool_off + n * (j + 1)) / n)
            i_row = _bisect_floats(xs, lx) if COMPILED else _bisect_right(xs, lx)
            x_next, lin, y0, dy, x0, dx, edge = _row_piece(xs, ys, i_row)
        stats = BatchStats(num_decode_reqs=n) if coef is None and row is None else None
        done = False
        tot = kv_s = gpu_tot = 0.0  # this segment's sums, in step order
        if not time_bound:
            next_event_s = inf
        popped = 0
        stop = min(last, j + SCALAR_STEPS - 1)
        while j <= stop:
            if t >= next_event_s:
                done = True
                break
            crossing = phase[-j % bs]
            if crossing:
                if popped + crossing > free:
                    done = True
                    break
                popped += crossing
            s = pool_off + n * (j + 1)
            if coef is not None:  # batch_time's terms, the decode attention's written out
                x, y = a * s, b * s + c
                g = rest + (x if x > y else y)
            elif row is not None:  # batch_time's terms, row_time_at's sums
                x = log(s / n)
                if x >= x_next:  # past the piece's end: the next piece (the context only grows)
                    while i_row < len(xs) and xs[i_row] <= x:
                        i_row += 1
                    x_next, lin, y0, dy, x0, dx, edge = _row_piece(xs, ys, i_row)
                if lin:
                    g = rest + exp(y0 + dy * (x - x0) / dx)
                else:
                    g = rest + edge
            else:
                assert stats is not None
                stats.sum_decode_context = s
                g = perf.batch_time(stats)
            if overlap:  # as perf.base.step_wall_s
                d = g if g > overhead_s else overhead_s
            else:
                d = g + overhead_s
            gpu_tot += g
            u = base_used + popped
            durations.append(d)  # compiled: a list append (a bound method's alias is a call)
            tot += d
            kv_s += u * d
            t += d
            j += 1
        if not done and j <= last:
            j, t, popped, tot, kv_s, gpu_tot = self._extend_vectorized(
                j,
                last,
                t,
                popped,
                free,
                time_bound,
                next_event_s,
                perf,
                overhead_s,
                run,
                base_used,
                tot,
                kv_s,
                gpu_tot,
                overlap,
            )
        k = len(durations) - k0
        if k:
            self._record_segment(run, n, k, j, base_used, popped, t, tot, kv_s, gpu_tot)
        if popped:
            if run.deferred:
                run.pending_pops += popped
            else:
                kv.pop_anonymous(popped)
        return k

    def commit_run(self, run: Run) -> None:
        """Take a deferred run's blocks off the free queue (``extend_run``'s ``defer_pops``):
        at its end, or when something reads the replica before."""
        if run.pending_pops:
            self.ckv.pop_anonymous(run.pending_pops)
            run.pending_pops = 0
        run.deferred = False

    def cut_run(
        self,
        out: LazyOutput,
        run: Run,
        cut_s: float,
        perf: PerfModel,
        overhead_s: float,
        keep_steps: bool,
        overlap: bool,
    ) -> Run | None:
        """``run``, the deferred run ``extend_run`` made of ``out``, made again with no step
        starting at or after ``cut_s``: the run the replica would have made had it known of
        ``cut_s`` (an arrival) when it scheduled ``out``. Exact because nothing has changed
        the scheduler since (the run's blocks are still free, and its steps are where it
        would have stopped: ``extend_run``'s time bound)."""
        assert run.deferred and not run.finished
        self.it = out.first_it + 1
        out.num_steps = 1
        bound = cut_s if cut_s < run.bound_s else run.bound_s
        return self.extend_run(
            out, run.start_s, 0.0, bound, perf, overhead_s, False, keep_steps, overlap, True
        )

    def _record_segment(
        self,
        run: Run,
        n: int,
        k: int,
        j: int,
        base_used: int,
        popped: int,
        end_s: float,
        total_s: float,
        kv_block_s: float,
        gpu_s: float,
    ) -> None:
        """Add ``_run_segment``'s k steps of n requests, ending before step j, to ``run``
        (``base_used`` blocks in use before them, ``popped`` more by their end)."""
        run.segments.append((n, k, self.pool_off + n * (j - k + 1)))
        if run.keep_steps:
            rows = run.seg_rows  # ``metrics.flat_runs.SEG_FIELDS`` values
            rows.append(n)
            rows.append(k)
            rows.append(j - k)
            rows.append(base_used)
            phase = self.phase
            try:
                counts: bytes | list[int] = bytes(phase)
            except ValueError:  # a count of 256 or more
                counts = list(phase)
            run.phases.append(counts)
        run.segment_gpu_s.append(gpu_s)
        run.end_s = end_s
        run.total_s += total_s
        run.kv_block_s += kv_block_s
        used = base_used + popped  # blocks in use only grow within a segment: its last step's
        if used > run.peak_used:
            run.peak_used = used

    def share_decode_terms(self, other: DecodePool, perf: PerfModel) -> None:
        """Keep ``_decode_terms``' cache of ``perf`` in ``other``'s (replicas of one pool, on
        one perf model: each would compute the same terms for each pool size)."""
        other._terms_perf = self._terms_perf = perf
        self._terms = other._terms

    def _decode_terms(
        self, perf: PerfModel, n: int
    ) -> tuple[tuple[float, float, float, float] | None, tuple[float, Row] | None]:
        """The perf model's pure-decode step of ``n`` requests in closed form, cached per
        pool size (one lookup): ``decode_affine(n)`` where offered (else None), and where not,
        ``decode_terms(n)`` (else None: ``batch_time`` every step)."""
        if perf is not self._terms_perf:
            self._terms_perf = perf
            self._terms.clear()
        terms = self._terms.get(n)
        if terms is None:
            coef = perf.decode_affine(n) if isinstance(perf, AffineDecode) else None
            rc = None
            if coef is None and isinstance(perf, DecodeTerms):
                rc = perf.decode_terms(n)
            terms = self._terms[n] = (coef, rc)
        return terms

    def _extend_vectorized(
        self,
        j: int,
        last: int,
        t: float,
        popped: int,
        free: int,
        time_bound: bool,
        next_event_s: float,
        perf: PerfModel,
        overhead_s: float,
        run: Run,
        base_used: int,
        tot: float,
        kv_s: float,
        gpu_tot: float,
        overlap: bool,
    ) -> tuple[int, float, int, float, float, float]:
        """Go on with ``_run_segment`` from step ``j`` in chunks of growing size (same rules);
        returns the new (j, clock, blocks popped, sum of durations, sum of used * duration,
        sum of GPU times)."""
        n = self.num_pool
        bs = self.ckv.block_size
        phase = np.asarray(self.phase, np.int64)
        chunk = 64
        while j <= last:
            m = min(chunk, last - j + 1)
            js = np.arange(j, j + m, dtype=np.int64)
            cum = np.cumsum(phase[(-js) % bs]) + popped
            k = int(np.searchsorted(cum, free, side="right"))  # steps whose crossings fit
            g = decode_step_times(perf, n, self.pool_off + n * (js + 1))
            d = np.maximum(g, overhead_s) if overlap else g + overhead_s
            clock = np.cumsum(np.concatenate(([t], d)))  # clock[i]: start of the chunk's i-th step
            if time_bound:
                k = min(k, int(np.searchsorted(clock[:m], next_event_s, side="left")))
            if k:
                dk, uk = d[:k], cum[:k] + base_used
                run.durations.extend(dk.tolist())
                tot += float(dk.sum())
                gpu_tot += float(g[:k].sum())
                kv_s += float(uk @ dk)
                popped = int(cum[k - 1])
                t = float(clock[k])
                j += k
            if k < m:
                break
            chunk *= 4
        return j, t, popped, tot, kv_s, gpu_tot

    def _finish_in_run(self, j: int, run: Run) -> None:
        """Pooled requests whose last token came out of step j - 1 (ending at ``end_s``)
        finish: they leave running and free their blocks in running order."""
        done = self._pop_finished(j, run.end_s)
        if not done:
            return
        if len(done) > 1:
            done.sort(key=lambda r: r.seq)
        kv = self.ckv
        for r in done:
            r.last_token_s = run.end_s
            kv.sync(r)
            kv.free(r)
        self._remove_running(done)
        run.finished.extend(done)
