"""The batch queue of pipeline parallelism (pp > 1 stages), as vLLM V1's engine loop runs it.

Modelled on ``EngineCore.step_with_batch_queue`` (``vllm/v1/engine/core.py``, vLLM
0.10.1-0.19.0) with ``batch_queue_size = executor.max_concurrent_batches`` = pp
(``vllm/v1/executor/multiproc_executor.py``, ``ray_distributed_executor.py`` /
``ray_executor.py``): while fewer than pp batches are in flight the loop schedules a
new batch and submits it without waiting, drains its input queue, and schedules
again; when the schedule is empty (every request is in flight or waits for blocks)
or the queue is full, it blocks on the oldest batch, processes its output
(``update_from_output``) and schedules again. Arrivals while it blocks wait for the
output. The scheduler skips a running request with nothing new to compute: a decode
whose token is in flight (``num_new_tokens == 0``, ``vllm/v1/core/sched/scheduler.py``)
and a prompt whose last chunk is; a chunked prefill's next chunk is scheduled while
the previous one is in flight (computed tokens advance at schedule time).

A batch prepared on the host for ``cpu_s`` enters stage 1 when that is free and each
next stage when the batch has left the one before and the stage is free (a flow
shop: batches keep their order), each stage taking its share of the batch's forward
(``perf.pipelined.stage_times``); its tokens come out when it leaves the last stage.
The loop is ready to schedule again after ``cpu_s``.

DistServe's engine runs the same queue (LLMServe/DistServe, ``distserve/
single_stage_engine.py``: ``batches_in_pipeline`` holds up to pp batches, an empty
schedule pushes a placeholder and polls again after 3 ms, a full queue awaits the
oldest), its decoding scheduler keeping each request in one of pp batch groups
(``decoding_stage_scheduler.py``); the 3 ms polls are not modelled. The Sarathi-Serve
artifact (microsoft/sarathi-serve, branch osdi-sarathi-serve,
``sarathi/engine/pipeline_parallel_llm_engine.py``) schedules a micro-batch when the
first stage hands one on, when an output comes back and on a 10 ms timer, and its
schedulers skip a request that is executing, a prompt chunk included
(``chunks`` False for the ``sarathi`` policy: ``BatchQueue.hide_in_flight``; the
``vllm_v0`` loop, the artifact's vLLM baseline, runs whole prompts, which the
scheduler skips in flight by itself).
Its schedulers return nothing while pp micro-batches are in flight (``BaseScheduler.schedule``:
``num_running_batches >= num_pipeline_stages``, the count dropped when an output is processed,
``sarathi/core/scheduler/base_scheduler.py``), so the timer only lets an arrival in while the
queue has room: this queue of pp (``wakes`` below). Async scheduling with pp > 1
is not modelled: with pp > 1 the replica runs the synchronous batch queue. (In vLLM
0.10.1 and 0.11.0 async scheduling sets the queue to 2 whatever pp; 0.13.0's
``vllm/config/vllm.py`` refuses it with pp > 1; 0.16.0-0.19.0 allow it, a queue of pp,
the ``AsyncScheduler`` scheduling a decode again behind its output placeholder.)
Simplification: an output that comes back while the loop prepares a batch is
processed at once, not when the loop is next free.

**Arrivals while the loop waits** (``wakes``, ``engine.pipeline_wakes``). vLLM V1's loop,
its schedule empty and batches in flight, blocks on the oldest batch (``future.result()``):
a request that arrives meanwhile waits for that output. vLLM V0's pipeline (one loop a
virtual engine, ``AsyncLLMEngine.run_engine_loop``, as read in vLLM 0.6) takes new requests from its
tracker only when a virtual engine starts a step, after its previous step is back, so it
waits too. DistServe's loop polls every 3 ms, the Sarathi-Serve artifact's on a 10 ms timer
(for its vLLM baseline too, which runs in the same engine), and Orca's scheduler (its
Algorithm 1) waits only once n_workers batches are in flight: they take the request at once
while their queue has room. Simplification: the polls' delay (at most 3 or 10 ms) is not
charged.

``Replica._pipeline_step`` runs the loop; this module holds the queue's state (the batches in
flight, when each stage is next free, the spans counted so far) and its rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import SchedulerOutput
from servesim.perf.pipelined import stage_times

if TYPE_CHECKING:
    from servesim.engine.scheduler import Scheduler
    from servesim.perf.base import PerfModel


class BatchQueue:
    """Up to ``pp`` batches in flight, oldest first, each with the time it leaves the last
    stage; ``chunks``: whether a prompt's next chunk may be scheduled while its previous one
    is in flight (vLLM V1) or a request in flight is not scheduled at all (the Sarathi-Serve
    artifact's scheduler). ``due``: the engine loop comes back by itself (a schedule is due)
    rather than waiting for the oldest batch. ``wakes``: while it waits with room in the
    queue, an arrival makes the loop schedule again (the module's docstring)."""

    def __init__(self, pp: int, chunks: bool, wakes: bool = False) -> None:
        self.pp = pp
        self.chunks = chunks
        self.wakes = wakes
        self.flight: list[tuple[SchedulerOutput, float]] = []
        self.stage_free = [0.0] * pp  # when each stage is next free
        self.due = False
        self.gpu_end_s = 0.0  # the end of the span with a batch on some stage, so far
        self.busy_end_s = 0.0  # the end of the span with a batch scheduled or in flight

    def submit(
        self, perf: PerfModel, out: SchedulerOutput, gpu_s: float, now: float, cpu_s: float
    ) -> tuple[float, float, float, float]:
        """Put a batch scheduled at ``now`` (host time ``cpu_s``, forward ``gpu_s`` on one
        stage after another) through the stages, a flow shop: it enters stage 1 when that is
        free and each next stage when it has left the one before and the stage is free.
        Returns (when it leaves the last stage, what it adds to the busy span, what it adds to
        the GPU span, the bubbles in that addition: the span less the stage's share)."""
        pp = self.pp
        share, last = stage_times(perf, out.stats, gpu_s, pp)
        free = self.stage_free
        t = now + cpu_s
        first_s = t if t > free[0] else free[0]
        t = first_s
        for j in range(pp):
            if free[j] > t:
                t = free[j]
            t += last if j == pp - 1 else share
            free[j] = t
        end = t
        # Each batch adds to the spans what it extends them by.
        gpu_new = end - (first_s if first_s > self.gpu_end_s else self.gpu_end_s)
        busy_new = end - (now if now > self.busy_end_s else self.busy_end_s)
        self.gpu_end_s = self.busy_end_s = end
        self.flight.append((out, end))
        return end, busy_new, gpu_new, gpu_new - gpu_s / pp

    def hide_in_flight(self, sched: Scheduler) -> tuple[list[Request], set[int], int] | None:
        """Take the running requests in flight out of the scheduler's view for one schedule,
        as the Sarathi-Serve artifact's schedulers skip a request that is executing (``if not
        seq.is_paused()``, ``sarathi/core/scheduler/sarathi_scheduler.py`` and
        ``vllm_scheduler.py``, branch osdi-sarathi-serve), a prompt chunk in flight included:
        (the running list as it was, the ids in flight, how many were taken out). They still
        count against ``max_num_seqs``; simplification: they cannot be preemption victims."""
        in_flight = {id(r) for o, _ in self.flight for r in o.reqs}
        running = sched.running
        shown = [r for r in running if id(r) not in in_flight]
        k = len(running) - len(shown)
        if not k:
            return None
        sched.running = shown
        sched.cfg.max_num_seqs -= k
        return running, in_flight, k

    def unhide(self, sched: Scheduler, running: list[Request], in_flight: set[int], k: int) -> None:
        """Put the requests ``hide_in_flight`` took out back in their places in running."""
        sched.cfg.max_num_seqs += k
        now_running = sched.running
        kept = {id(r) for r in now_running}
        was = {id(r) for r in running}
        merged = [r for r in running if id(r) in in_flight or id(r) in kept]
        merged.extend(r for r in now_running if id(r) not in was)
        sched.running = merged

    def check(self) -> None:
        """At most pp batches in flight, and a request in two of them only with prompt chunks
        (vLLM V1's; never with the Sarathi-Serve artifact's scheduler), its tokens in flight
        computed (advanced at schedule time)."""
        assert len(self.flight) <= self.pp
        tokens: dict[int, list[int]] = {}
        for o, _ in self.flight:
            for r, n in zip(o.reqs, o.num_tokens):
                tokens.setdefault(id(r), []).append(n)
        for o, _ in self.flight:
            for r in o.reqs:
                mine = tokens[id(r)]
                if r.status != ReqStatus.RUNNING or len(mine) == 1 or r.num_preemptions:
                    continue
                assert self.chunks
                assert sum(mine) <= r.num_computed_tokens
                # all but the last are chunks that end short of the request's tokens
                assert r.num_computed_tokens - mine[-1] < r.num_prompt_tokens + r.num_output_tokens


def own_output(out: SchedulerOutput, later: list[tuple[SchedulerOutput, float]]) -> SchedulerOutput:
    """``out`` without the requests also in a ``later`` batch in flight: a prompt chunk whose
    next chunk is in flight samples nothing (vLLM's model runner discards a partial
    prefill's token by the batch's own counts), and a request preempted and scheduled
    again since is the later batch's."""
    ids = {id(r) for o, _ in later for r in o.reqs}
    if not any(id(r) in ids for r in out.reqs):
        return out
    own = SchedulerOutput(stats=out.stats)
    for r, n in zip(out.reqs, out.num_tokens):
        if id(r) not in ids:
            own.reqs.append(r)
            own.num_tokens.append(n)
    return own
