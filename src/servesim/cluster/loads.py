"""What a router sees of a replica: its load now, and the TTFT or latency it would give a
request.

``Cluster.loads`` asks ``replica_load`` for each candidate of a routing decision; the
prefix-cache hit, the predicted TTFT, the predicted latency and Llumnix's freeness are
computed only for the routers that read them (``prefix_affinity``, ``predicted_ttft``,
``predicted_latency``, ``llumnix``), since they cost more than the counters.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence

from servesim.cluster.freeness import freeness
from servesim.cluster.router import ReplicaLoad
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler
from servesim.perf.base import BatchStats, step_wall_s


def replica_load(
    rep: Replica,
    num_outstanding: int,
    req: Request,
    with_prefix: bool,
    with_ttft: bool,
    headroom: Mapping[int, int] | None = None,
    with_latency: bool = False,
) -> ReplicaLoad:
    """``rep``'s load for routing ``req`` (``num_outstanding``: routed to it, not finished;
    ``headroom``: blocks per priority, given only for the router that reads the freeness)."""
    sched = rep.scheduler
    kv = rep.kv
    pending = pending_prefill_tokens(sched)
    x = ReplicaLoad(
        num_outstanding=num_outstanding,
        num_running=len(sched.running),
        num_waiting=len(sched.waiting),
        kv_usage=kv.usage,
        pending_tokens=pending + len(sched.running),
        free_kv_blocks=kv.num_free_blocks,
    )
    if headroom is not None:
        x.freeness = freeness(rep, headroom, arriving=req.priority)
    if with_prefix or with_ttft or with_latency:
        x.prefix_hit_tokens = kv.get_computed_blocks(req)[1]
    if with_ttft:
        x.predicted_ttft_s = predict_ttft(rep, req, pending, x.prefix_hit_tokens)
    if with_latency:
        x.predicted_latency_s = predict_latency(rep, req, x.prefix_hit_tokens)
    return x


def pending_prefill_tokens(sched: Scheduler) -> int:
    """Prompt (and recompute) tokens still to be computed by ``sched``'s requests.

    Pooled decodes of the lazy scheduler are past their prompts, so only the waiting
    queue and the individually tracked running requests are scanned.
    """
    n = 0
    for r in sched.waiting:
        n += r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens
    for r in sched.individual if isinstance(sched, LazyScheduler) else sched.running:
        left = r.num_prompt_tokens - r.num_computed_tokens
        if left > 0:
            n += left
    return n


def predict_ttft(rep: Replica, req: Request, pending_tokens: int, hit_tokens: int) -> float:
    """Predicted TTFT of ``req`` at ``rep``: the rest of the batch in flight, then the queued
    prompt tokens and this prompt's uncached part in chunks of the token budget left
    beside the running decodes, each chunk timed by the replica's perf model.

    Ignores KV-cache limits (a request that must wait for blocks is predicted too early)
    and the decodes that join or leave meanwhile.
    """
    now = rep.loop.now
    wait = rep.step_end_s - now if rep.busy and rep.step_end_s > now else 0.0
    sched = rep.scheduler
    n_dec = len(sched.running)
    tokens = pending_tokens + max(req.num_prompt_tokens - hit_tokens, 1)
    budget = max(sched.cfg.max_num_batched_tokens - n_dec, 1)
    chunk = min(tokens, budget)
    st = BatchStats(
        num_prefill_tokens=chunk,
        prefill_attn_work=chunk * (hit_tokens + chunk / 2),
        num_prefill_reqs=1,
        num_decode_reqs=n_dec,
        sum_decode_context=rep.kv.num_used_blocks * rep.kv.block_size,
        sum_prefill_context=hit_tokens,
    )
    return wait + math.ceil(tokens / budget) * step_wall_s(
        rep.perf.batch_time(st), rep.cpu_overhead_s, rep.async_scheduling
    )


#: One step's wall time from its decodes, its prefill chunk, the decodes' summed context and
#: the KV tokens the chunk's request already holds (``predict_latency``'s perf model call).
StepTime = Callable[[int, int, float, int], float]


def predict_latency(rep: Replica, req: Request, hit_tokens: int) -> float:
    """Predicted end-to-end latency of ``req`` at ``rep``: the rest of the step in flight, then
    ``simulate_latency`` of the replica's running and queued requests with ``req`` queued
    last, each step timed by the replica's perf model.

    Block's ``min_new_request_latency`` (vidur_opt_scheduler at e1db3ed,
    ``vidur/prediction/predictor/simulate_predictor.py`` builds a copy of the instance's
    scheduler from the running, waiting and swapped requests with their expected response
    lengths; ``vidur/request_timeline_predictor/base_request_timeline_predictor.py`` maps the
    metric to ``predict_waiting_and_ending_time``, which runs
    ``vidur/scheduler/replica_scheduler/simulate_predict_replica_scheduler.py`` until the new
    request completes and returns ``target_request_end_to_end``: its completion, decode
    included). Response lengths are the requests' own ``max_tokens``, as with the artifact's
    oracle lengths (Block*; Block proper uses a RoBERTa predictor's). The artifact starts
    its simulation at the instance's state without the rest of the step in flight (a TODO
    there); here that rest is added, as ``predict_ttft`` does.
    """
    now = rep.loop.now
    wait = rep.step_end_s - now if rep.busy and rep.step_end_s > now else 0.0
    sched = rep.scheduler
    it = sched.it if isinstance(sched, LazyScheduler) else 0
    decodes: list[tuple[int, int]] = []
    prefills: list[tuple[int, int, int, bool]] = []
    for r in sched.running:
        d = it - r.lazy_it if r.lazy_it >= 0 else 0  # a pooled decode's steps since it joined
        out = r.num_output_tokens + d
        done = r.num_computed_tokens + d
        if out > 0 and done >= r.num_prompt_tokens + out - 1:
            decodes.append((max(r.max_tokens - out, 0), done + 1))
        else:
            left = r.num_prompt_tokens + out - done
            prefills.append((max(left, 1), done, max(r.max_tokens - out - 1, 0), True))
    for r in sched.waiting:
        out = r.num_output_tokens
        left = r.num_prompt_tokens + out - r.num_computed_tokens
        prefills.append((max(left, 1), r.num_computed_tokens, max(r.max_tokens - out - 1, 0), False))
    prefills.append(
        (max(req.num_prompt_tokens - hit_tokens, 1), hit_tokens, max(req.max_tokens - 1, 0), False)
    )
    perf, cpu, overlap = rep.perf, rep.cpu_overhead_s, rep.async_scheduling

    def step_s(n_dec: int, chunk: int, sum_ctx: float, chunk_ctx: int) -> float:
        st = BatchStats(
            num_prefill_tokens=chunk,
            prefill_attn_work=chunk * (chunk_ctx + chunk / 2),
            num_prefill_reqs=1 if chunk else 0,
            num_decode_reqs=n_dec,
            sum_decode_context=int(sum_ctx),
            sum_prefill_context=chunk_ctx if chunk else 0,
        )
        return step_wall_s(perf.batch_time(st), cpu, overlap)

    kv = rep.kv
    return wait + simulate_latency(
        decodes,
        prefills,
        sched.cfg.max_num_batched_tokens,
        sched.cfg.max_num_seqs,
        (kv.num_gpu_blocks - 1) * kv.block_size,
        step_s,
    )


def simulate_latency(
    decodes: Sequence[tuple[int, int]],
    prefills: Sequence[tuple[int, int, int, bool]],
    budget: int,
    max_seqs: int,
    kv_tokens: int,
    step_s: StepTime,
) -> float:
    """Seconds until the last of ``prefills`` emits its last token, stepping a replica forward
    from its current batch: vLLM's chunked-prefill step (each decode one token, the prompts
    in queue order sharing the rest of the ``budget`` tokens), by segments of steps in which
    the batch does not change.

    ``decodes``: (steps left, context) of each running decode; ``prefills``: (prompt tokens
    left, tokens already in the KV cache, decode steps after the prompt, admitted) of each
    request still to prefill, in queue order (running ones first, admitted), the new request
    last. A prompt's last chunk emits its first token; it then decodes its steps left. A
    request not yet admitted starts only when fewer than ``max_seqs`` decode and the decodes'
    contexts, its own KV tokens and its prompt fit in ``kv_tokens`` (or nothing decodes).
    A segment's steps are timed alike, by ``step_s`` at the segment's middle context.

    Simplifications: no arrivals after the new request (as Block's simulation), no
    preemption (KV growth past ``kv_tokens`` is not charged), and a prompt that finishes in a
    step hands that step's leftover budget to the next prompt at no time.
    """
    heap: list[tuple[int, int, bool]] = []  # (step it ends at, context - join step, is the new request)
    off = 0  # the decodes' contexts at step k sum to off + len(heap) * k
    for left, ctx in decodes:
        if left > 0:
            heap.append((left, ctx, False))
            off += ctx
    heapq.heapify(heap)
    last = len(prefills) - 1
    t = 0.0
    k = 0
    j = 0
    rem, in_kv, after, admitted = prefills[0] if prefills else (0, 0, 0, True)
    while True:
        n = len(heap)
        can_start = admitted or n == 0 or (n < max_seqs and off + n * k + in_kv + rem <= kv_tokens)
        if j <= last and can_start:
            admitted = True
            avail = max(budget - n, 1)
            finish = -(-rem // avail)  # ceil: steps to the end of this prompt
            m = min(finish, heap[0][0] - k) if heap else finish
            chunk = min(rem, avail)
            t += m * step_s(n, chunk, off + n * k + n * (m + 1) / 2, in_kv)
            k += m
            if m < finish:
                rem -= m * avail
                in_kv += m * avail
            else:  # the prompt completes at step k, with spare budget carried to the next
                spare = m * avail - rem
                while True:
                    ctx = in_kv + rem + 1
                    if j == last:
                        if after == 0:
                            return t
                        heapq.heappush(heap, (k + after, ctx - k, True))
                        off += ctx - k
                        j += 1
                        break
                    if after > 0:
                        heapq.heappush(heap, (k + after, ctx - k, False))
                        off += ctx - k
                    j += 1
                    rem, in_kv, after, admitted = prefills[j]
                    n = len(heap)
                    if spare <= 0 or not (
                        admitted or (n < max_seqs and off + n * k + in_kv + rem <= kv_tokens)
                    ):
                        break
                    admitted = True
                    if rem > spare:
                        rem -= spare
                        in_kv += spare
                        break
                    spare -= rem
        else:
            m = heap[0][0] - k  # decodes only, to the next finish
            t += m * step_s(n, 0, off + n * k + n * (m + 1) / 2, 0)
            k += m
        while heap and heap[0][0] <= k:
            _, c, mine = heapq.heappop(heap)
            if mine:
                return t
            off -= c
