"""The token-budget scheduler of vLLM V1 (the default engine).

Modelled on vLLM V1 (0.32, ``v1/core/sched/scheduler.py``: ``Scheduler.schedule`` and
``update_from_output``), FCFS policy, no speculative decoding, no async scheduling:

    budget = max_num_batched_tokens
    for req in running (in order):                       # decodes and unfinished prefills
        n = num_tokens - num_computed                     # 1 for a decode
        n = min(n, long_prefill_token_threshold, budget, max_model_len - 1 - num_computed)
        if n == 0: skip
        while allocate_slots(req, n) fails:
            victim = running.pop()                        # the newest running request
            free(victim); victim.num_computed = 0; waiting.appendleft(victim)
            if victim is req: stop scheduling running requests
        schedule req for n tokens
    if nothing was preempted this step:
        while waiting and budget and len(running) < max_num_seqs:
            req = waiting[0]
            hit = prefix-cache hit (if num_computed == 0)
            n = num_tokens - hit, capped as above
            if chunked prefill is off and n > budget: stop
            if the whole prompt (+ outputs so far) does not fit the free blocks: stop
                                                          # scheduler_reserve_full_isl
            if allocate_slots(req, n, hit) fails: stop
            move req to running; schedule it for n tokens
    num_computed += n for every scheduled request      # advanced at schedule time

After the forward pass (``update_from_output``) a request whose computed tokens reached
its total samples one token (the step that finishes a prompt samples the first output
token); it finishes when it has ``max_tokens`` outputs or reaches ``max_model_len``, and
its blocks are freed at once.

The scheduler decides; it never advances time (the replica does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from mypy_extensions import mypyc_attr

from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.request import ReqStatus, Request
from servesim.perf.base import BatchStats


class KVCache(Protocol):
    """What the scheduler asks of a KV cache: ``KVCacheManager`` (block objects, the
    reference) and ``CountingKVCache`` (block counts, the lazy engine) both provide it."""

    block_size: int
    num_gpu_blocks: int
    num_query_tokens: int
    num_hit_tokens: int

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def num_used_blocks(self) -> int: ...

    @property
    def usage(self) -> float: ...

    def get_computed_blocks(self, req: Request) -> tuple[Any, int]: ...

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed: Any = (),
        full_sequence_must_fit: bool = False,
    ) -> Any: ...

    def free(self, req: Request, keep_for_resume: bool = False) -> None: ...

    def check_invariants(self) -> None: ...


class WaitingQueue(Protocol):
    """The waiting queue: a ``deque`` (FCFS) or ``preemption.PriorityWaiting``."""

    def append(self, req: Request) -> None: ...

    def appendleft(self, req: Request) -> None: ...

    def popleft(self) -> Request: ...

    def remove(self, req: Request) -> None: ...

    def __getitem__(self, i: int) -> Request: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]: ...


ANY, DECODE, PREFILL = 0, 1, 2  # which running requests a pass of the running loop takes


def is_decode(req: Request) -> bool:
    """``req`` has its prompt computed and decodes its next token (one token short)."""
    return req.num_output_tokens > 0 and (
        req.num_computed_tokens == req.num_prompt_tokens + req.num_output_tokens - 1
    )


@dataclass(slots=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_model_len: int = 8192
    scheduler_reserve_full_isl: bool = True


@dataclass(slots=True, init=False)
class SchedulerOutput:
    """What one step runs: requests and their new-token counts, in schedule order."""

    reqs: list[Request]
    num_tokens: list[int]
    stats: BatchStats
    preempted: list[Request]
    total_tokens: int
    num_pool: int  # decodes scheduled implicitly (lazy engine), not listed in ``reqs``
    # Seconds the step's forward waits for KV copies it makes synchronously (an LMCache
    # connector's loads and stores, ``engine/kv_offload.py``); 0 without offloading.
    transfer_s: float

    def __init__(
        self,
        reqs: list[Request] | None = None,
        num_tokens: list[int] | None = None,
        stats: BatchStats | None = None,
        preempted: list[Request] | None = None,
        total_tokens: int = 0,
        num_pool: int = 0,
    ) -> None:
        # Written out (not generated by dataclass): a compiled build compiles it too.
        self.reqs = [] if reqs is None else reqs
        self.num_tokens = [] if num_tokens is None else num_tokens
        self.stats = BatchStats() if stats is None else stats
        self.preempted = [] if preempted is None else preempted
        self.total_tokens = total_tokens
        self.num_pool = num_pool
        self.transfer_s = 0.0

    def __len__(self) -> int:
        return len(self.reqs)


@mypyc_attr(allow_interpreted_subclasses=True)  # the policies (policy_base) subclass it
class Scheduler:
    def __init__(self, cfg: SchedulerConfig, kv: KVCache) -> None:
        self.cfg = cfg
        self.kv = kv
        # The same cache where it is the counting one (the lazy engine's): compiled, its
        # fields and methods reached natively, where ``kv`` (a protocol) is read by name
        self._ckv = kv if isinstance(kv, CountingKVCache) else None
        self.waiting: WaitingQueue = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add_request(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def abort_request(self, req: Request) -> bool:
        """Take ``req`` out of the queues and free its KV blocks (its client went away).

        vLLM's ``Scheduler.finish_requests(..., FINISHED_ABORTED)``: the engine core applies
        aborts between steps, so call this between steps only (never for a request of the
        batch in flight). Returns False, changing nothing, if ``req`` is in neither queue.
        """
        if req.status == ReqStatus.RUNNING and req in self.running:
            self.running.remove(req)
        elif req.status < ReqStatus.RUNNING and req in self.waiting:
            self.waiting.remove(req)
        else:
            return False
        self.kv.free(req)
        req.prev_blocks = None
        req.status = ReqStatus.FINISHED
        return True

    def check_invariants(self) -> None:
        """The KV cache's block accounting (between steps)."""
        self.kv.check_invariants()

    # ----------------------------------------------------------------- schedule

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        # vLLM applies long_prefill_token_threshold only when more than one request
        # is eligible (running + waiting) at the start of the step.
        threshold = self.cfg.long_prefill_token_threshold
        if len(self.running) + len(self.waiting) <= 1:
            threshold = 0
        budget = self._schedule_running(out, self.cfg.max_num_batched_tokens, threshold)
        if not out.preempted:
            budget = self._schedule_waiting(out, budget, threshold)
        out.total_tokens = self.cfg.max_num_batched_tokens - budget
        self._finalize(out)
        return out

    def _cap(self, req: Request, n: int, budget: int, threshold: int) -> int:
        if 0 < threshold < n:
            n = threshold
        if n > budget:
            n = budget
        room = self.cfg.max_model_len - 1 - req.num_computed_tokens
        return n if n < room else room

    def _schedule_running(
        self,
        out: SchedulerOutput,
        budget: int,
        threshold: int,
        phase: int = ANY,
        reqs: list[Request] | None = None,
    ) -> int:
        """The running pass with preemption, the one every engine runs; returns the budget left.

        Visits ``reqs`` (default: every running request) in order, those of ``phase`` (ANY,
        or DECODE / PREFILL for policies that run decodes first). Each asks for its tokens
        (``_num_running_tokens``); while its blocks do not fit (``_try_schedule``), a victim
        leaves running (``_take_victim``: the newest, in vLLM V1) and is preempted, its
        tokens given back if it was scheduled earlier in this step; a request that preempts
        itself ends the pass. Victims leave ``self.running``, and a visit skips a request
        preempted earlier in the pass, so the visits are those of vLLM's loop over running.
        """
        for req in list(self.running) if reqs is None else reqs:
            if req.status != ReqStatus.RUNNING:
                continue  # preempted earlier in this pass
            if phase and (phase == DECODE) != is_decode(req):
                continue
            n = self._num_running_tokens(req, budget, threshold)
            if n <= 0:
                continue
            charged = self._try_schedule(out, req, n)
            while charged is None:
                victim = self._take_victim()
                budget += unschedule(out, victim)
                self._preempt(victim, out)
                if victim is req:
                    return budget
                charged = self._try_schedule(out, req, n)
            budget -= charged
        return budget

    def _num_running_tokens(self, req: Request, budget: int, threshold: int) -> int:
        """The tokens a running request runs this step: what it lacks, capped (<= 0: none)."""
        return self._cap(
            req, req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens, budget, threshold
        )

    def _try_schedule(self, out: SchedulerOutput, req: Request, n: int) -> int | None:
        """Allocate ``req``'s blocks for ``n`` tokens and list it in ``out``; returns the tokens
        charged to the budget, or None (and no change) when the blocks do not fit."""
        if self.kv.allocate_slots(req, n) is None:
            return None
        out.reqs.append(req)
        out.num_tokens.append(n)
        return n

    def _take_victim(self) -> Request:
        """The request to preempt, taken out of running: the newest (vLLM V1's FCFS)."""
        return self.running.pop()

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.kv.free(victim, keep_for_resume=True)
        victim.status = ReqStatus.PREEMPTED
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)

    def _schedule_waiting(
        self, out: SchedulerOutput, budget: int, threshold: int, swapped: bool | None = None
    ) -> int:
        """The waiting pass, the one every engine runs; returns the budget left.

        Admits waiting requests in queue order while budget and seats remain: each gets its
        prefix-cache hit (``_prefix_hit``) and a chunk, and is admitted if the policy lets
        it (``_may_admit``; ``swapped`` True/False: only requests that are / are not
        swapped out) and its blocks fit (``_admit_allocate``); the first that is not
        admitted ends the pass.
        """
        cfg = self.cfg
        kv = self.kv
        waiting = self.waiting
        running = self.running
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            req = waiting[0]
            hit, num_hit = self._prefix_hit(req) if req.num_computed_tokens == 0 else ([], 0)
            num_computed = req.num_computed_tokens + num_hit
            n = req.num_prompt_tokens + req.num_output_tokens - num_computed
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            if n > budget:
                n = budget
            if not self._may_admit(req, swapped) or not self._admit_allocate(req, n, num_hit, hit):
                break
            waiting.popleft()
            running.append(req)
            req.status = ReqStatus.RUNNING
            req.num_computed_tokens = num_computed
            self._on_admitted(out, req)
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = num_computed
                ckv = self._ckv
                if ckv is not None:
                    ckv.num_query_tokens += req.num_prompt_tokens
                    ckv.num_hit_tokens += num_hit
                else:
                    kv.num_query_tokens += req.num_prompt_tokens
                    kv.num_hit_tokens += num_hit
            out.reqs.append(req)
            out.num_tokens.append(n)
            budget -= n
        return budget

    def _prefix_hit(self, req: Request) -> tuple[Any, int]:
        """The cached blocks a new request finds and their tokens."""
        ckv = self._ckv
        return ckv.get_computed_blocks(req) if ckv is not None else self.kv.get_computed_blocks(req)

    def _may_admit(self, req: Request, swapped: bool | None) -> bool:
        """Whether the policy admits ``req`` now, blocks aside (vLLM V1: always)."""
        return True

    def _admit_allocate(self, req: Request, n: int, num_hit: int, hit: Any) -> bool:
        """Blocks for the first chunk, gated on the whole sequence fitting (vLLM V1's default)."""
        full = self.cfg.scheduler_reserve_full_isl
        ckv = self._ckv
        if ckv is not None:
            return ckv.allocate_slots(req, n, num_hit, hit, full) is not None
        return self.kv.allocate_slots(req, n, num_hit, hit, full) is not None

    def _on_admitted(self, out: SchedulerOutput, req: Request) -> None:
        """``req`` has just moved to running."""

    def _finalize(self, out: SchedulerOutput) -> None:
        """Aggregate batch statistics, then advance computed tokens (vLLM does it here)."""
        st = out.stats
        for req, n in zip(out.reqs, out.num_tokens):
            p = req.num_computed_tokens
            total = req.num_prompt_tokens + req.num_output_tokens
            if n == 1 and req.num_output_tokens > 0 and p == total - 1:
                st.add_decode(p)
            else:
                st.add_chunk(n, p)
            req.num_computed_tokens = p + n

    # ----------------------------------------------------------------- update

    def update_from_output(self, out: SchedulerOutput, now: float) -> tuple[list[Request], list[Request]]:
        """Sample a token for every request whose computed tokens reached its total.

        Returns (requests that produced a token, requests that finished); finished
        requests free their blocks in schedule (= running) order.
        """
        produced, finished = self._sample_tokens(out.reqs, now)
        self._release(finished)
        return produced, finished

    def _release(self, finished: list[Request]) -> None:
        """Free the finished requests' blocks, in order, and drop them from running."""
        for req in finished:
            self.kv.free(req)
        if finished:
            self.running = [r for r in self.running if r.status == ReqStatus.RUNNING]

    def _sample_tokens(self, reqs: list[Request], now: float) -> tuple[list[Request], list[Request]]:
        """Append one output token to each request that completed its tokens; mark finishes.

        A partial prefill's sample is discarded. A request finishes with ``max_tokens``
        outputs or when it reaches ``max_model_len`` (vLLM's ``check_stop``).
        """
        produced: list[Request] = []
        finished: list[Request] = []
        max_len = self.cfg.max_model_len
        for req in reqs:
            total = req.num_prompt_tokens + req.num_output_tokens
            if req.num_computed_tokens < total:
                continue
            req.num_output_tokens += 1
            produced.append(req)
            if req.num_output_tokens >= req.max_tokens or total + 1 >= max_len:
                req.status = ReqStatus.FINISHED
                req.finished_s = now
                req.finished_length = req.num_output_tokens < req.max_tokens
                finished.append(req)
        return produced, finished


def unschedule(out: SchedulerOutput, victim: Request) -> int:
    """Take a victim scheduled earlier in this step out of ``out``; returns its tokens (0 if
    it was not scheduled: always so for the newest running request)."""
    for k, r in enumerate(out.reqs):
        if r is victim:
            out.reqs.pop(k)
            return out.num_tokens.pop(k)
    return 0
