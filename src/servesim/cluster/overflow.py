"""The mixed pool: a split cluster's prefill and decode pools lend replicas to each other.

Splitwise's ``MixedPoolScheduler`` (Mutinifni/splitwise-sim at 8f99e7d, ``scheduler.py``; its
thresholds in ``configs/orchestrator_repo/schedulers/mixed_pool.yml``, the scheduler of every
Splitwise design in ``scripts/run_throughput_isopower.sh``) keeps three lists of machines:
prompt, token and mixed. For each request (``schedule``):

* **Prompt machine** (``find_best_prompt_instance``): the prompt machine with the fewest
  pending tokens (``sched_pending_tokens``: each routed, unfinished prompt's size plus one per
  token task), unless its queue is long (``is_queue_long``: it has a pending task and its
  pending tokens plus this prompt pass ``prompt_max_pending_batch_tokens``, 8,192); then the
  mixed machine with the fewest, unless long too.
* **Token machine** (``find_best_token_instance``): the token machine with the least memory
  reserved (``sched_memory``: weights plus each routed, unfinished request's KV at prompt + 1 +
  output tokens), unless it is full (``is_memory_loaded``: with this request's it reaches the
  machine's memory); then the mixed machine with the least, unless full too.
* **Lending**: no prompt machine found and some token machine left, the token machine with the
  fewest pending tokens joins the mixed pool and runs the prompt. **Borrowing**: no token
  machine found and some prompt machine left, the prompt machine with the least memory reserved
  joins it and runs the tokens.
* Still none: the request runs whole on the machine with the fewest pending tokens of all;
  the same machine for both phases runs it whole (``prompt_task.chain``: no KV transfer),
  otherwise its KV crosses the link.
* **Return** (``notify_free_instance``, called from ``ORCAInstance.start_iteration`` when a
  machine has nothing to run and nothing pending): a mixed machine goes back to its own list.

A mixed machine runs prompts and tokens in one batch (``SplitwiseInstance.select_batch``).
servesim runs it as its replica's own engine: a decode replica lent a prompt prefills it in
its loop, a prefill replica borrowed for decodes decodes in its own.

``MixedPool`` is this for any split cluster (``cluster.disaggregation.overflow``). A prompt
goes to the front router's pick unless it is overloaded, then to the prefill replica with the
fewest pending tokens (the artifact's own pick) unless that one is too; a decode goes to the
decode router's pick unless it is full, then to the decode replica with the fewest tokens
reserved. Pending tokens are the prompt tokens of the requests whose first token is not out
plus one per running request (``pending_tokens``); a replica has a queue when its scheduler
has a waiting request; a request reserves prompt + ``max_tokens`` tokens (the artifact one
more) against ``decode_capacity_tokens`` (default: the replica's KV cache).

Simplified: servesim picks the decode replica when the prompt is done (the artifact at the
arrival), so a full decode pool borrows then, and a request that nothing can hold stays where
its prompt ran (the artifact runs such a request whole from its arrival); a lent prompt runs
whole on its decode replica when that replica is also the decode router's pick at the arrival
(the artifact's same-machine case), else its KV moves on; requests still in a replica's API
server are not counted in its queue; a request that stays where its prompt ran keeps no blocks
in between (it is admitted again, its KV computed: the blocks are allocated again, nothing
recomputed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from servesim.cluster.router import ReplicaLoad, Router, RouterState
from servesim.cluster.spec import PoolSpec
from servesim.config import OverflowConfig
from servesim.engine.lazy import LazyScheduler
from servesim.engine.replica import Replica
from servesim.engine.request import Request


class OverflowHost(Protocol):
    """What the mixed pool uses of the cluster it serves (``servesim.cluster.Cluster``)."""

    replicas: list[Replica]
    pool_of: list[PoolSpec]  # replica index -> its pool
    outstanding: list[int]  # requests routed to each replica and not finished
    front: list[int]  # the serving prefill replicas
    back: list[int]  # the serving decode replicas
    front_router: Router
    back_router: Router
    front_state: RouterState
    back_state: RouterState

    def loads(self, ids: list[int], req: Request, router: Router) -> list[ReplicaLoad]:
        """Each candidate's load as ``router`` sees it now."""
        ...

    def quiet_of(self, pool: PoolSpec) -> bool:
        """Whether ``pool``'s replicas step on quiet events."""
        ...


class MixedPool:
    """Which replicas are mixed, what each holds reserved, and the placements of a cluster
    whose pools overflow (the module's docstring)."""

    def __init__(self, cluster: OverflowHost, cfg: OverflowConfig) -> None:
        self.cluster = cluster
        self.queue_tokens = cfg.prefill_queue_tokens
        pools = cluster.pool_of
        self.capacity = [
            cfg.decode_capacity_tokens
            if cfg.decode_capacity_tokens is not None
            else p.num_gpu_blocks * p.engine.block_size
            for p in pools
        ]
        self.reserved = [0] * len(pools)  # tokens held by requests routed and not done
        self.mixed: list[int] = []  # replica ids, in the order they joined
        self.is_mixed = [False] * len(pools)
        self.held: dict[int, tuple[int, int]] = {}  # request idx -> (replica, tokens) of its phase
        self.num_lent = 0  # decode replicas that joined to run a prompt
        self.num_borrowed = 0  # prefill replicas that joined to run decodes
        self.num_returned = 0  # mixed replicas back in their pools
        self.num_whole = 0  # requests run whole on one replica (no KV transfer)
        self.num_rerouted = 0  # prompts the front router's overloaded pick passed to a less loaded one

    # ----------------------------------------------------------------- loads

    def pending_tokens(self, i: int) -> int:
        """Replica ``i``'s pending tokens (the artifact's ``sched_pending_tokens``): the prompt
        tokens of its requests whose first token is not out, the step in flight's included (the
        artifact counts a prompt until its task completes; servesim's schedulers count a chunk
        computed once scheduled), plus one per running request."""
        sched = self.cluster.replicas[i].scheduler
        n = 0
        for r in sched.waiting:
            n += r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens
        for r in sched.individual if isinstance(sched, LazyScheduler) else sched.running:
            if r.num_output_tokens == 0:
                n += r.num_prompt_tokens
        return n + len(sched.running)

    def is_long(self, i: int, prompt: int) -> bool:
        """Whether replica ``i``'s queue is too long for a prompt of ``prompt`` tokens
        (``is_queue_long``: a waiting request, and pending tokens plus the prompt past the
        threshold)."""
        sched = self.cluster.replicas[i].scheduler
        return len(sched.waiting) > 0 and self.pending_tokens(i) + prompt > self.queue_tokens

    def is_full(self, i: int, need: int) -> bool:
        """Whether replica ``i`` cannot reserve ``need`` more tokens (``is_memory_loaded``)."""
        return self.reserved[i] + need >= self.capacity[i]

    def least_pending(self, ids: Sequence[int]) -> int:
        """The first of ``ids`` with the fewest pending tokens."""
        return min(ids, key=self.pending_tokens)

    def least_reserved(self, ids: Sequence[int]) -> int:
        """The first of ``ids`` with the fewest tokens reserved."""
        return min(ids, key=self.reserved.__getitem__)

    # ----------------------------------------------------------------- membership

    def join(self, i: int) -> None:
        """Replica ``i`` leaves its pool for the mixed one. A decode replica's step ends may
        now hand a prompt on, so they are loud events (``engine.events``)."""
        self.mixed.append(i)
        self.is_mixed[i] = True
        self.cluster.replicas[i].quiet = False

    def on_left(self, i: int) -> None:
        """A request left replica ``i``: a mixed one with nothing routed to it returns to its
        pool (``notify_free_instance``)."""
        c = self.cluster
        if self.is_mixed[i] and c.outstanding[i] == 0:
            self.is_mixed[i] = False
            self.mixed.remove(i)
            self.num_returned += 1
            c.replicas[i].quiet = c.quiet_of(c.pool_of[i])

    # ----------------------------------------------------------------- reservations

    def hold(self, req: Request, i: int, tokens: int) -> None:
        """``req``'s phase on replica ``i`` reserves ``tokens`` until ``release``."""
        self.held[req.idx] = (i, tokens)
        self.reserved[i] += tokens

    def release(self, req: Request) -> None:
        got = self.held.pop(req.idx, None)
        if got is not None:
            self.reserved[got[0]] -= got[1]

    # ----------------------------------------------------------------- placements

    def place_prompt(self, req: Request, front: list[int], back: list[int]) -> tuple[int, bool]:
        """The replica that runs ``req``'s prompt and whether it runs the whole request there
        (no hand-off): its own pool's, the mixed pool's, a lent decode replica's, or, all
        overloaded, the least loaded of those left."""
        c = self.cluster
        prompt, need = req.num_prompt_tokens, req.num_prompt_tokens + req.max_tokens
        own = [i for i in front if not self.is_mixed[i]] if self.mixed else front
        if own:
            i = own[c.front_router(req, c.loads(own, req, c.front_router), c.front_state)]
            if not self.is_long(i, prompt):
                return self._prompt_at(req, i, prompt)
            i = self.least_pending(own)
            if not self.is_long(i, prompt):
                self.num_rerouted += 1
                return self._prompt_at(req, i, prompt)
        if self.mixed:
            i = self.least_pending(self.mixed)
            if not self.is_long(i, prompt):
                return self._prompt_at(req, i, prompt)
        spare = [d for d in back if not self.is_mixed[d]]
        if spare:
            i = self.least_pending(spare)
            pick = spare[c.back_router(req, c.loads(spare, req, c.back_router), c.back_state)]
            self.join(i)
            self.num_lent += 1
            if pick == i and not self.is_full(i, need):
                return self._whole_at(req, i, need)
            return self._prompt_at(req, i, prompt)
        return self._whole_at(req, self.least_pending(own + self.mixed), need)

    def _prompt_at(self, req: Request, i: int, prompt: int) -> tuple[int, bool]:
        self.hold(req, i, prompt)
        return i, False

    def _whole_at(self, req: Request, i: int, need: int) -> tuple[int, bool]:
        self.hold(req, i, need)
        self.num_whole += 1
        return i, True

    def place_decode(self, req: Request, src: int, need: int) -> int:
        """The replica that decodes ``req`` (its prompt done on ``src``; ``need``: its tokens
        at their longest): its own pool's, the mixed pool's, a borrowed prefill replica's, or,
        all full, ``src`` itself."""
        c = self.cluster
        self.release(req)
        own = [d for d in c.back if not self.is_mixed[d]] if self.mixed else c.back
        dst = -1
        if own:
            d = own[c.back_router(req, c.loads(own, req, c.back_router), c.back_state)]
            if not self.is_full(d, need):
                dst = d
            else:
                d = self.least_reserved(own)
                dst = d if not self.is_full(d, need) else -1
        if dst < 0 and self.mixed:
            d = self.least_reserved(self.mixed)
            dst = d if not self.is_full(d, need) else -1
        if dst < 0:
            spare = [p for p in c.front if not self.is_mixed[p]]
            if spare:
                dst = self.least_reserved(spare)
                self.join(dst)
                self.num_borrowed += 1
            else:
                dst = src
        if dst == src:
            self.num_whole += 1
        self.hold(req, dst, need)
        return dst

    def counts(self) -> dict[str, int]:
        """What the mixed pool did over the run (``ClusterRun.overflow``)."""
        return {
            "num_lent": self.num_lent,
            "num_borrowed": self.num_borrowed,
            "num_returned": self.num_returned,
            "num_whole": self.num_whole,
            "num_rerouted": self.num_rerouted,
            "num_mixed_at_end": len(self.mixed),
        }
