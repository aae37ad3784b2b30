"""One engine instance: schedule, time the batch, advance, post-process.

A step reads as a sentence::

    out = scheduler.schedule()
    dt = perf.batch_time(out.stats) + cpu_s   # max(gpu, cpu) with async scheduling

where ``cpu_s`` is the engine's host time of the step: ``cpu_overhead_s`` plus
``cpu_per_req_s`` per scheduled request.
    loop.at(now + dt, self.on_batch_done, out)

With async scheduling (vLLM's ``--async-scheduling``, ``engine.async_scheduling``) the CPU's
scheduling and input preparation of the next step run while the GPU runs this one, so a
step lasts the larger of the two, not their sum (``perf.base.step_wall_s``).

The replica is busy from the start of a step to its end; arrivals during a step wait
for the next schedule, as in vLLM's engine-core loop (inputs are drained between steps).
With async scheduling they wait one step more: vLLM V1's ``EngineCore.step_with_batch_queue``
keeps two batches in flight, so step k+1 is scheduled (and submitted) while step k runs,
and the inputs drained when step k ends go into step k+2 (vLLM 0.14-0.19; an idle engine
schedules an arrival at once). Token times are the end of the step that produced them.

**Pipeline parallelism.** With pp > 1 stages (``batches``) up to pp batches are in
flight, as in vLLM V1's batch queue (``_pipeline_step``): a new batch is scheduled while
earlier ones are on later stages, requests in flight are not scheduled again until their
batch's output is back, each stage takes its share of the batch's forward, and the batch's
tokens come out when it leaves the last stage. The replica's GPU time is then the span with
a batch on some stage and its bubbles the part of it each GPU idles. Such a replica steps
one batch at a time (no decode runs: the reference scheduler). Its step-end hook
(``on_step_end``: live migration, the live server's aborts) runs only when no batch is in
flight, so that nothing it takes out of the scheduler has a batch still to come back (vLLM
applies aborts before each output instead: simplified). (Data parallelism with pp > 1, a
lockstep group of such replicas, is refused by the scenario's checks.)

With a front end (``engine.frontend``, ``engine/frontend.py``) an arrival first queues in
vLLM's API-server process and reaches the engine (``queued_s``) when that is done with it.

**Cut runs.** A run of pure-decode steps (``engine/decode_runs.py``) may not start a step
after a request reaches the engine, so it is bounded by the next event that could bring one
(``EventLoop.next_loud_time``). In a cluster every arrival could, and each would end every
replica's run. With ``cut_runs`` (set by the cluster) arrivals are quiet events instead and a
replica's run goes on past them; a request that reaches this replica, or a router that reads
its state, first cuts the run in flight at that instant (``cut_run``): the run is made again
without the steps that start from then on (``DecodePool.cut_run``), its step end moves
earlier, and what it counted is counted again (``StepAccounts.restore``). Until it ends or is
cut, the run's KV blocks stay on the free queue (taken at once when it is cut or ends), so a
cut undoes nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from math import inf
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from servesim.engine.batch_queue import BatchQueue, own_output
from servesim.engine.decode_runs import DecodePool, LazyOutput, Run
from servesim.engine.events import ARRIVAL, BATCH_DONE, WAKE, EventLoop
from servesim.engine.frontend import Frontend
from servesim.engine.request import ReqStatus, Request
from servesim.engine.run_stream import RunStream
from servesim.engine.scheduler import Scheduler, SchedulerOutput
from servesim.engine.step_accounts import StepAccounts
from servesim.metrics.records import ItlSamples, ReplicaTotals, StepSeries
from servesim.perf.base import PerfModel, step_wall_s
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.kernel_step import KernelStepTime

if TYPE_CHECKING:
    from servesim.engine.lockstep import LockstepGroup


def kernel_step_time(perf: PerfModel) -> KernelStepTime | None:
    """The kernel model's compiled step times where ``perf`` is the kernel one (the default): a
    native call a step, where ``perf`` (a protocol) has its method looked up by name and
    ``KernelPerfModel.batch_time`` (interpreted) hands a step's whole counts to ``step``."""
    if type(perf) is KernelPerfModel:
        return perf.step
    return perf if isinstance(perf, KernelStepTime) else None


class Replica:
    """One engine instance on ``loop`` (the module's docstring).

    A cluster sets these after building it:

    - ``quiet``: its step ends give no replica a request (its finishes route nothing), so
      they are quiet events and do not cut other replicas' runs (``engine.events``);
    - ``cut_runs``: arrivals are quiet events, and a request that reaches this replica, or a
      router that reads it, cuts its run in flight (``cut_run``);
    - ``own_arrival_s``: where the cluster knows when this replica's requests come (round
      robin over a fixed set), the arrival times of those routed to it, in order: no request
      reaches it before ``own_arrival_s[totals.num_routed]`` and its runs stop there rather
      than at the cluster's next arrival;
    - ``failed``: the cluster's operations failed it; its pending events do nothing (its
      requests were moved on by the cluster);
    - ``on_step_end``: a hook at the instant between two steps, when no batch is in flight
      (live migration takes running requests out of the scheduler there);
    - ``group``: the data-parallel ranks it steps in lockstep with (``engine.lockstep``).

    ``batches``: pipeline parallelism's batch queue (pp > 1 stages; the module's docstring),
    None for one stage. A finish inside a run is only seen at the run's end
    (``finishes_in_runs``; ``on_finish`` is called then): right for a lone replica, not where a
    router watches the finishes.
    """

    def __init__(
        self,
        replica_id: int,
        loop: EventLoop,
        scheduler: Scheduler,
        perf: PerfModel,
        cpu_overhead_s: float,
        steps: StepSeries | None,
        itl: ItlSamples,
        totals: ReplicaTotals,
        check_invariants: bool = False,
        on_finish: Callable[[Request], None] | None = None,
        finishes_in_runs: bool = False,
        async_scheduling: bool = False,
        frontend: Frontend | None = None,
        cpu_per_req_s: float = 0.0,
        batches: BatchQueue | None = None,
    ) -> None:
        self.id = replica_id
        self.frontend = frontend  # vLLM's API server before the scheduler (None: arrivals go straight in)
        # CPU work overlaps the GPU's (step_wall_s); not with the synchronous batch queue
        self.async_scheduling = async_scheduling and batches is None
        self.loop = loop
        self.scheduler = scheduler
        self.kv = scheduler.kv
        self.perf = perf
        self._kst = kernel_step_time(perf)
        self.cpu_overhead_s = cpu_overhead_s
        self.cpu_per_req_s = cpu_per_req_s  # host time per scheduled request and step
        if isinstance(scheduler, DecodePool):  # the lazy engine's decode runs add it per step
            scheduler.cpu_per_req_s = cpu_per_req_s
        self.steps = steps  # None: no per-step series (streaming runs)
        self.accounts = StepAccounts(replica_id, scheduler, perf, steps, totals)  # totals, series
        self.on_finish = on_finish  # called once per finished request (its record is final)
        self.itl = itl
        self.totals = totals
        self.check_invariants = check_invariants
        self.skip_ahead = isinstance(scheduler, DecodePool) and not check_invariants  # decode runs
        self.finishes_in_runs = finishes_in_runs
        # The run of pure-decode steps in flight, if any: the step that started it (while its
        # blocks are deferred), that step's start, the event of its end (EventLoop.cancel), the
        # end of its first step, the waiting queue's length then, its streaming by the API server
        self.run: Run | None = None
        self._run_out: LazyOutput | None = None
        self._run_prev_start_s = 0.0
        self._run_done_seq = 0
        self.run_first_end_s = 0.0
        self.run_waiting0 = 0
        self._run_stream: RunStream | None = None
        self.quiet = False  # set by the cluster (the class's docstring), as the five below
        self.cut_runs = False
        self.own_arrival_s: npt.NDArray[np.float64] | None = None
        self.failed = False
        self.on_step_end: Callable[[Replica], None] | None = None
        self.group: LockstepGroup | None = None
        # With ``cut_runs``: when the requests the front end holds reach the engine (in order).
        self._to_engine_s: list[float] = []
        self.busy = False
        self.wake_pending = False
        self.last_step_end_s = -1.0
        self.step_end_s = 0.0  # end of the batch in flight (routers predict with it)
        self.num_finished = 0
        # Async scheduling: arrivals not yet seen by the scheduler, in arrival order; a step
        # admits those that arrived before the step before it started (the module's docstring).
        self._staged: list[Request] = []
        self._prev_start_s = 0.0  # start of the last step scheduled
        self.batches = batches
        self.pp = 1 if batches is None else batches.pp
        # The batches in flight, oldest first (the queue's own list; always empty when pp = 1).
        self._flight: list[tuple[SchedulerOutput, float]] = [] if batches is None else batches.flight

    # ----------------------------------------------------------------- events

    def on_arrival(self, req: Request) -> None:
        req.replica = self.id
        fe = self.frontend
        if fe is not None:
            if self._run_out is not None:  # as the run would have stopped at this arrival
                self.cut_run()
            stream = self._run_stream
            if self.run is not None and stream is not None:  # outputs before this arrival
                stream.upto(self.loop.now, None)
            at = fe.admit_at(self.loop.now, req.num_prompt_tokens)
            if self.cut_runs:
                self._to_engine_s.append(at)
                self.loop.at_quiet(at, self.on_engine_arrival, req, ARRIVAL)
            else:
                self.loop.at(at, self.on_engine_arrival, req, ARRIVAL)
            return
        self.on_engine_arrival(req)

    def settle(self) -> None:
        """This replica fails or stops now, a run perhaps in flight: its end, which would
        stream the run's outputs and count its inter-token gaps, never comes. The steps that
        ended by now are streamed by the API server and their gaps counted, as each step's
        end would have."""
        if self._run_out is not None:
            self.cut_run()
        run = self.run
        if run is None:
            return
        now = self.loop.now
        stream = self._run_stream
        if stream is not None:
            stream.upto(now, None)
        if self.run_first_end_s > now or not run.segments:
            return
        n = run.segments[0][0]
        self.itl.add(self.run_first_end_s - self.last_step_end_s, n)
        t = self.run_first_end_s
        ended: list[float] = []
        for d in run.durations:
            if t + d > now:
                break
            t += d
            ended.append(d)
        if ended:
            self.itl.extend(ended, n)

    def on_engine_arrival(self, req: Request) -> None:
        """``req`` reaches the engine core's input queue."""
        if self._run_out is not None:
            self.cut_run()
        if self._to_engine_s and self._to_engine_s[0] <= self.loop.now:
            del self._to_engine_s[0]
        req.replica = self.id
        req.queued_s = self.loop.now
        if self.busy and self.async_scheduling:
            self._staged.append(req)  # the next step is already scheduled
            return
        self.scheduler.add_request(req)
        q = self.batches
        if q is not None and q.wakes and self.busy and not q.due and len(q.flight) < q.pp:
            # The loop waits for a batch with room in its queue: an engine that takes new work
            # while it waits (``BatchQueue.wakes``) schedules again once this instant's
            # arrivals are queued.
            if not self.wake_pending:
                self.wake_pending = True
                self._at(self.loop.now, self._on_poll, None, WAKE)
            return
        if not self.busy and not self.wake_pending:
            # Start the step after every arrival of this instant is queued (WAKE runs
            # after ARRIVAL at equal times), as the engine drains its input queue first.
            self.wake_pending = True
            self._at(self.loop.now, self.on_wake, None, WAKE)

    def on_wake(self, _: object) -> None:
        self.wake_pending = False
        if not self.busy and not self.failed:
            self.step()

    def step(self) -> None:
        if self.group is not None:
            self.group.wake()
            return
        if self.pp > 1:
            self._pipeline_step()
            return
        plan = self.plan_step()
        if plan is None:
            self.busy = False
            return
        out, gpu_s, dt = plan  # unpacked: compiled, a native call (``*plan`` is a generic one)
        self.launch_step(out, gpu_s, dt)

    def plan_step(self) -> tuple[SchedulerOutput, float, float] | None:
        """Schedule the next step: (its output, GPU seconds, wall seconds), None when there
        is nothing to run."""
        now = self.loop.now
        sched = self.scheduler
        if self._staged:
            self._admit_staged(self._prev_start_s)
        out = sched.schedule()
        if not out.reqs and not out.num_pool and self._staged:
            self._admit_staged(inf)  # an idle engine schedules what it has at once
            out = sched.schedule()
        # A step whose only decision was a preemption (under the priority policy the victim
        # can be the request that asked, ahead of others in running: vLLM breaks the running
        # loop and skips the waiting one, ``Scheduler.schedule``) schedules nothing; vLLM's
        # engine loop runs that empty step (no model call) and schedules again at once, as here.
        # Each retry follows a preemption, which empties running, so the retries are bounded.
        retries = 0
        while not out.reqs and not out.num_pool and out.preempted and retries <= len(sched.running):
            preempted = out.preempted
            out = sched.schedule()
            out.preempted[:0] = preempted
            retries += 1
        if not out.reqs and not out.num_pool:
            return None
        for req in out.reqs:
            if req.first_scheduled_s < 0:
                req.first_scheduled_s = now
        kst = self._kst
        gpu_s = kst.batch_time(out.stats) if kst is not None else self.perf.batch_time(out.stats)
        if out.transfer_s:  # KV copies the forward waits for (engine/kv_offload.py)
            gpu_s += out.transfer_s
        st = out.stats
        cpu_s = self.cpu_overhead_s + self.cpu_per_req_s * (st.num_decode_reqs + st.num_prefill_reqs)
        return out, gpu_s, step_wall_s(gpu_s, cpu_s, self.async_scheduling)

    def launch_step(self, out: SchedulerOutput, gpu_s: float, dt: float) -> None:
        """Run the scheduled step for ``dt`` seconds (longer than its own in a lockstep
        group, whose slowest rank sets the pace)."""
        now = self.loop.now
        sched = self.scheduler
        self._prev_start_s = now
        self.busy = True
        acc = self.accounts
        acc.step(out, now, dt, gpu_s)
        self.run = None
        acc.run_rows = None
        self._run_out = None
        self._run_prev_start_s = now
        end = now + dt
        if (
            self.skip_ahead  # set for a DecodePool only, whose schedule() returns LazyOutput
            and isinstance(sched, DecodePool)
            and isinstance(out, LazyOutput)
            and (out.num_pool or out.reqs)
        ):
            end = self._launch_run(sched, out, now, dt)
        self.step_end_s = end
        self._run_done_seq = self._at(end, self.on_batch_done, out, BATCH_DONE)

    def _launch_run(self, sched: DecodePool, out: LazyOutput, now: float, dt: float) -> float:
        """Go on from the step just launched with pure-decode steps while nothing can change
        the schedule (``DecodePool.extend_run``, up to ``_run_bound_s``): the end of
        the run's last step, or the step's own where there is no run."""
        end = now + dt
        run = sched.extend_run(
            out,
            now,
            dt,
            self._run_bound_s(),
            self.perf,
            self.cpu_overhead_s,
            self.finishes_in_runs,
            self.steps is not None,
            self.async_scheduling,
            self.cut_runs,
        )
        if out.first_tokens_done:
            for req in out.reqs:  # the run produced their first tokens, at this step's end
                req.first_token_s = end
        if run is None:
            return end
        self.run = run
        self.run_first_end_s = end
        if self.frontend is not None and self.frontend.streams:
            self._run_stream = RunStream(self.frontend, out, run, end)
        self.run_waiting0 = len(sched.waiting)
        acc = self.accounts
        if run.deferred:
            self._run_out = out
            acc.save()
        acc.run(run)
        end = run.end_s  # summed step by step, as the reference engine's clock does
        self._prev_start_s = end - run.durations[-1]
        return end

    def _run_bound_s(self) -> float:
        """The instant from which a run starting now may start no step: the next event that
        could bring a request (now, with requests staged: no run), this replica's own next
        arrival where the cluster knows it (``own_arrival_s``), the next request its front end
        hands on."""
        bound_s = self.loop.now if self._staged else self.loop.next_loud_time()
        own = self.own_arrival_s
        if own is not None:
            k = self.totals.num_routed
            if k < len(own):
                own_s = float(own[k])
                if own_s < bound_s:
                    bound_s = own_s
        if self._to_engine_s and self._to_engine_s[0] < bound_s:
            bound_s = self._to_engine_s[0]
        return bound_s

    def _at(self, time: float, callback: Callable[[Any], None], arg: Any, priority: int) -> int:
        """``loop.at``, or ``loop.at_quiet`` for a replica whose events are quiet (compiled,
        a native call each, where the bound method chosen by an expression is an object)."""
        if self.quiet:
            return self.loop.at_quiet(time, callback, arg, priority)
        return self.loop.at(time, callback, arg, priority)

    def cut_run(self) -> None:
        """Bring the run in flight up to now (``cut_runs``, the module's docstring): drop its
        steps that start from now on, as it would have stopped had it known of this instant,
        and take its KV blocks off the free queue. Called before anything reads this replica
        or gives it a request."""
        run, out = self.run, self._run_out
        if run is None or out is None:
            return
        sched = self.scheduler
        assert isinstance(sched, DecodePool) and isinstance(out, LazyOutput)
        self._run_out = None
        now = self.loop.now
        durations = run.durations
        k = len(durations)
        i = 0
        if now < run.bound_s:  # else every step starts before a bound it met
            start = run.start_s  # the steps' starts, summed as the run's clock did
            while i < k and start < now:
                start += durations[i]
                i += 1
        if i == k or now >= run.bound_s:
            sched.commit_run(run)
            return
        new = sched.cut_run(
            out, run, now, self.perf, self.cpu_overhead_s, self.steps is not None, self.async_scheduling
        )
        run.become(new)
        sched.commit_run(run)
        acc = self.accounts
        acc.restore()
        acc.cut_rows(len(durations), k - len(durations))
        if new is None:  # not one step after the first: no run
            end = self.run_first_end_s
            self.run = None
            acc.run_rows = None
            self._run_stream = None
            self._prev_start_s = self._run_prev_start_s
        else:
            acc.run_totals(run)
            end = run.end_s
            self._prev_start_s = end - run.durations[-1]
        self.loop.cancel(self._run_done_seq)
        self.step_end_s = end
        self._run_done_seq = self._at(end, self.on_batch_done, out, BATCH_DONE)

    def idle_step(self, dt: float) -> None:
        """A lockstep group's step in which this rank has no request: it runs vLLM's dummy
        batch, so that the other ranks' collectives complete, for the step's ``dt``."""
        self.busy = True
        self._prev_start_s = self.loop.now
        self.step_end_s = self.loop.now + dt
        self.loop.at(self.step_end_s, self._on_idle_done, None, BATCH_DONE)

    def _on_idle_done(self, _: object) -> None:
        if self.group is not None:
            self.group.rank_done()

    def on_batch_done(self, out: SchedulerOutput) -> None:
        flight = self._flight
        if flight:  # the batch queue: the oldest batch is back (the last stage keeps the order)
            del flight[0]
        if self._run_out is not None:  # a run nothing cut: its blocks are taken now
            self._run_out = None
            run = self.run
            sched = self.scheduler
            assert run is not None and isinstance(sched, DecodePool)
            sched.commit_run(run)
        acc = self.accounts
        if self.failed:  # the rows as the series keeps them: waiting as of the run's start
            acc.close_run_rows(self._run_prev_start_s)
            return
        now = self.loop.now
        produced, finished = self.scheduler.update_from_output(
            own_output(out, flight) if flight else out, now
        )
        if self.run is not None and acc.run_rows is not None:
            acc.count_waiting_during_run(self.run_waiting0, self._staged)
            acc.close_run_rows(self._run_prev_start_s)
        self._token_times(out, produced, now)
        self.last_step_end_s = now
        fe = self.frontend
        if fe is not None and fe.streams:
            self._stream(out, produced, finished, now)
        self.num_finished += len(finished)
        if self.on_finish is not None:
            for r in finished:
                self.on_finish(r)
        if self.on_step_end is not None and not flight:  # no batch in flight
            self.on_step_end(self)
        if self.check_invariants:
            self._check()
        if self.group is not None:
            self.group.rank_done()
        elif self.batches is not None:
            self.step_end_s = flight[0][1] if flight else now
            if not self.batches.due:  # the engine loop was waiting for this batch
                self.step()
        else:
            self.step()

    def _token_times(self, out: SchedulerOutput, produced: list[Request], now: float) -> None:
        """The tokens of the step that ended ``now``: each request's first or last token time,
        and the inter-token gaps in the ITL samples (the pool's and those whose last token
        came with the step before as one count; a run's, one a step for the whole pool)."""
        last = self.last_step_end_s
        n_same = 0
        itl = self.itl
        for req in produced:
            if req.first_token_s < 0:
                req.first_token_s = now
            elif req.last_token_s == last:
                n_same += 1
            else:
                itl.add(now - req.last_token_s, 1)
            req.last_token_s = now
        run = self.run
        if run is None:
            itl.add(now - last, n_same + out.num_pool)
        else:  # a run of pure-decode steps: one gap per step for the whole pool
            itl.add(self.run_first_end_s - last, out.num_pool)
            i = 0
            for n, k, _ in run.segments:
                itl.extend(run.durations[i : i + k] if len(run.segments) > 1 else run.durations, n)
                i += k

    # ----------------------------------------------------------------- pipeline

    def _pipeline_step(self) -> None:
        """The engine loop of pipeline parallelism (pp > 1): schedule a batch, put it through
        the stages and, while the queue has room, come back when the host is ready
        (``engine.batch_queue``, which cites the engines it models)."""
        q = self.batches
        assert q is not None
        hidden = None if q.chunks or not q.flight else q.hide_in_flight(self.scheduler)
        plan = self.plan_step()
        if hidden is not None:
            q.unhide(self.scheduler, *hidden)
        if plan is None:  # wait for the oldest batch, or idle
            self.busy = bool(q.flight)
            return
        out, gpu_s, _ = plan
        now = self.loop.now
        st = out.stats
        cpu_s = self.cpu_overhead_s + self.cpu_per_req_s * (st.num_decode_reqs + st.num_prefill_reqs)
        end, busy_new, gpu_new, bubble_s = q.submit(self.perf, out, gpu_s, now, cpu_s)
        self.accounts.step(out, now, busy_new, gpu_new, bubble_s)
        self.busy = True
        if self.check_invariants:
            q.check()
        self.step_end_s = q.flight[0][1]
        self._at(end, self.on_batch_done, out, BATCH_DONE)
        if len(q.flight) < q.pp:  # room in the queue: the loop schedules again when ready
            q.due = True
            self._at(now + cpu_s, self._on_due, None, WAKE)

    def _on_poll(self, _: object) -> None:
        self.wake_pending = False
        q = self.batches
        assert q is not None
        if not self.failed and not q.due and len(q.flight) < q.pp:
            self.step()

    def _on_due(self, _: object) -> None:
        q = self.batches
        assert q is not None
        q.due = False
        if not self.failed:
            self.step()

    def _stream(
        self, out: SchedulerOutput, produced: list[Request], finished: list[Request], now: float
    ) -> None:
        """The API server streams the step's tokens (``Frontend.deliver_at``): a client sees
        a first or last token when the server has processed its step's outputs (the step's
        first tokens at the end of its batch: vLLM lists the new requests last). A run's
        steps are streamed by ``RunStream``."""
        fe = self.frontend
        assert fe is not None
        if self.run is not None and self._run_stream is not None:
            self._run_stream.upto(inf, finished)
            self._run_stream = None
            return
        new_first = [req for req in out.reqs if req.first_token_s == now]
        n_tok = len(produced) + out.num_pool  # a lazy step's first tokens are not among produced
        for req in new_first:
            if req not in produced:
                n_tok += 1
        d = fe.deliver_at(now, n_tok, len(new_first) + len(finished))
        for req in new_first:
            req.first_token_s = d
        for req in finished:  # seen once the last step's outputs are processed
            req.finished_s = d

    def _admit_staged(self, before_s: float) -> None:
        """Async scheduling: the staged requests that arrived before ``before_s`` (the start
        of the step that just ended) join the scheduler; later ones wait a step more."""
        staged = self._staged
        i = 0
        while i < len(staged) and staged[i].queued_s < before_s:
            self.scheduler.add_request(staged[i])
            i += 1
        if i:
            del staged[:i]

    # ----------------------------------------------------------------- accounting

    def share_caches(self, other: Replica) -> None:
        """Keep the per-pool-size caches (a run's work, the decode step's terms) in
        ``other``'s: a replica of the same pool, on the same perf model."""
        assert self.perf is other.perf
        self.accounts.share(other.accounts)
        sched, theirs = self.scheduler, other.scheduler
        if isinstance(sched, DecodePool) and isinstance(theirs, DecodePool):
            sched.share_decode_terms(theirs, self.perf)

    def finish_waiting(self) -> None:
        """The end of the run: the runs' waiting seconds join the event steps' in
        ``totals.waiting_s`` (``StepAccounts.finish_waiting``)."""
        self.accounts.finish_waiting(self._run_prev_start_s)

    def _check(self) -> None:
        sched = self.scheduler
        cfg = sched.cfg
        assert len(sched.running) <= cfg.max_num_seqs
        sched.check_invariants()
        for r in sched.running:
            assert r.status == ReqStatus.RUNNING
            assert r.num_computed_tokens <= r.num_prompt_tokens + r.num_output_tokens
        for r in sched.waiting:
            assert r.status in (ReqStatus.WAITING, ReqStatus.PREEMPTED)
        if self.batches is not None:
            self.batches.check()
