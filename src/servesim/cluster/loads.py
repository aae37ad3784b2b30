"""What a router sees of a replica: its load now, and the TTFT it would give a request.

``Cluster.loads`` asks ``replica_load`` for each candidate of a routing decision; the
prefix-cache hit, the predicted TTFT and Llumnix's freeness are computed only for the
routers that read them (``prefix_affinity``, ``predicted_ttft``, ``llumnix``), since they
cost more than the counters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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
    )
    if headroom is not None:
        x.freeness = freeness(rep, headroom, arriving=req.priority)
    if with_prefix or with_ttft:
        x.prefix_hit_tokens = kv.get_computed_blocks(req)[1]
    if with_ttft:
        x.predicted_ttft_s = predict_ttft(rep, req, pending, x.prefix_hit_tokens)
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
