"""Llumnix's load metric: an instance's *freeness* over the *virtual usage* of its requests.

Sun et al., "Llumnix: Dynamic Scheduling for Large Language Model Serving" (OSDI'24),
Sec. 4.4.2 and Algorithm 1: every request has a virtual usage, and an instance's
freeness is what its memory leaves per request of its batch::

    freeness = (M - sum of virtual usages) / B       M: KV blocks, B: batch size

    virtual usage of a request =
        queued, at the head of the line:  its demand (the blocks of its tokens so far)
        queued, behind it:                0
        on a terminating instance:        infinite     (scale-in: the instance drains)
        running:                          its blocks + headroom(priority) / #running of that priority

The headroom of a priority is a fixed amount of memory kept free beside that priority's
requests on their instance (split among them, so it counts once per instance): an instance
holding a high-priority request looks that much fuller, so dispatch sends new normal
requests elsewhere and migration moves its normal requests to freer instances, which keeps
its batch small and its decodes fast. Dispatch picks the freest instance; migration pairs
the least free with the freest; auto-scaling compares the average freeness with a band.

The artifact (AlibabaPAI/llumnix at 37d8e5ea, its first public commit, ``llumnix/instance_info.py``:
the ``consumed_speed`` load, ``-(available blocks / requests)``) computes the same quotient
in blocks per request, counting the queued request's blocks in the numerator and one more
request in B (``enable_prefill_migrate``); that is what ``freeness`` does, with the paper's
headroom added (the artifact has none). Units: KV blocks per request, the unit of the
artifact's thresholds (migrate out below 3, scale out below 10, in above 60:
``llumnix/config/default.py`` at 24220fb8).

Simplified: the usable blocks are all but vLLM's null block (the artifact also subtracts
vLLM V0's 1% watermark); an empty instance is infinitely free (the artifact's load of
``-inf``), so ties among empty instances go to the lowest index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from servesim.engine.replica import Replica


def headroom_blocks(headroom_tokens: Mapping[int, int], block_size: int) -> dict[int, int]:
    """Each priority's headroom in KV blocks (whole blocks, rounded up)."""
    return {p: -(-t // block_size) for p, t in headroom_tokens.items() if t > 0}


def virtual_blocks(rep: Replica, headroom: Mapping[int, int], arriving: int | None = None) -> int:
    """The virtual usage of ``rep``'s requests beyond the blocks they hold (not terminating),
    in blocks: the head-of-line demand and each running priority's headroom, once
    (``arriving``: the priority of a request about to join, whose headroom counts too)."""
    sched = rep.scheduler
    total = 0
    if sched.waiting:
        head = sched.waiting[0]
        total += -(-(head.num_prompt_tokens + head.num_output_tokens) // rep.kv.block_size)
    if headroom:
        present = {r.priority for r in sched.running}
        if arriving is not None:
            present.add(arriving)
        total += sum(h for p, h in headroom.items() if p in present)
    return total


def freeness(
    rep: Replica, headroom: Mapping[int, int], terminating: bool = False, arriving: int | None = None
) -> float:
    """``rep``'s freeness, in KV blocks per request of its batch (``headroom``: blocks per
    priority, ``headroom_blocks``): M minus the blocks in use is the free blocks. A
    terminating instance is ``-inf``; an empty one ``inf`` (without ``arriving``'s headroom).

    ``arriving``: the freeness as a request of that priority would find it on joining, its
    priority's headroom counted whether or not the instance holds that priority yet. Since a
    priority's headroom is split among its requests (Algorithm 1), a high-priority request
    adds no headroom to an instance that already holds high-priority ones and the whole
    headroom to one that holds none: dispatch by this freeness gathers the high-priority
    requests on few instances, which the headroom keeps lightly loaded. (servesim's reading
    of the paper's dispatch "to the freest instance"; for a priority without headroom it is
    the plain freeness.)"""
    if terminating:
        return -math.inf
    sched = rep.scheduler
    batch = len(sched.running) + (1 if sched.waiting else 0)
    if batch == 0:
        if arriving is None or arriving not in headroom:
            return math.inf
        return float(rep.kv.num_free_blocks - headroom[arriving])
    return (rep.kv.num_free_blocks - virtual_blocks(rep, headroom, arriving)) / batch
