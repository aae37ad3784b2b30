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
from dataclasses import dataclass, field
from typing import Any, Protocol

from servesim.engine.request import ReqStatus, Request
from servesim.perf.base import BatchStats


class KVCache(Protocol):
    """What the scheduler asks of a KV cache: ``KVCacheManager`` (block objects, the
    reference) and ``CountingKVCache`` (block counts, the lazy engine) both provide it."""

    block_size: int
    num_gpu_blocks: int
    num_free_blocks: int
    num_query_tokens: int
    num_hit_tokens: int

    def get_computed_blocks(self, req: Request) -> tuple[Any, int]: ...

    def allocate_slots(self, req: Request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed: Any = (), full_sequence_must_fit: bool = False) -> Any: ...

    def free(self, req: Request, keep_for_resume: bool = False) -> None: ...

    def check_invariants(self) -> None: ...


@dataclass(slots=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_model_len: int = 8192
    scheduler_reserve_full_isl: bool = True


@dataclass(slots=True)
class SchedulerOutput:
    """What one step runs: requests and their new-token counts, in schedule order."""

    reqs: list[Request] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    preempted: list[Request] = field(default_factory=list)
    total_tokens: int = 0
    num_pool: int = 0  # decodes scheduled implicitly (lazy engine), not listed in ``reqs``

    def __len__(self) -> int:
        return len(self.reqs)


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, kv: KVCache) -> None:
        self.cfg = cfg
        self.kv = kv
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add_request(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

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

    def _schedule_running(self, out: SchedulerOutput, budget: int, threshold: int) -> int:
        running = self.running
        kv = self.kv
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens
            n = self._cap(req, n, budget, threshold)
            if n <= 0:
                i += 1
                continue
            scheduled = True
            while kv.allocate_slots(req, n) is None:
                victim = running.pop()
                self._preempt(victim, out)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            out.reqs.append(req)
            out.num_tokens.append(n)
            budget -= n
            i += 1
        return budget

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.kv.free(victim, keep_for_resume=True)
        victim.status = ReqStatus.PREEMPTED
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        out.preempted.append(victim)

    def _schedule_waiting(self, out: SchedulerOutput, budget: int, threshold: int) -> int:
        cfg = self.cfg
        kv = self.kv
        waiting = self.waiting
        running = self.running
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            req = waiting[0]
            if req.num_computed_tokens == 0:
                hit, num_hit = kv.get_computed_blocks(req)
            else:
                hit, num_hit = [], 0
            num_computed = req.num_computed_tokens + num_hit
            n = req.num_prompt_tokens + req.num_output_tokens - num_computed
            if 0 < threshold < n:
                n = threshold
            if not cfg.enable_chunked_prefill and n > budget:
                break
            if n > budget:
                n = budget
            if kv.allocate_slots(req, n, num_hit, hit, cfg.scheduler_reserve_full_isl) is None:
                break
            waiting.popleft()
            running.append(req)
            req.status = ReqStatus.RUNNING
            req.num_computed_tokens = num_computed
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = num_computed
                kv.num_query_tokens += req.num_prompt_tokens
                kv.num_hit_tokens += num_hit
            out.reqs.append(req)
            out.num_tokens.append(n)
            budget -= n
        return budget

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
        for req in finished:
            self.kv.free(req)
        if finished:
            self.running = [r for r in self.running if r.status == ReqStatus.RUNNING]
        return produced, finished

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
                finished.append(req)
        return produced, finished
