"""The engines of the literature as configurations of the token-budget loop.

One class per policy only where the loop differs; every class reuses the running loop,
admission, preemption and post-processing of ``PolicyScheduler`` (vLLM V1 with options).
``SCHEDULERS`` maps ``EngineConfig.policy`` to the class (a test checks they agree).

=========  ==================================================================================
vllm_v1    ``PolicyScheduler``: running first, then waiting FCFS (or by priority, or VTC) under the
           token budget; chunked prefill; recompute (or swap) preemption of the newest.
vllm_v0    ``V0Scheduler``: prefill-priority steps, watermark, whole prompts.
sarathi    ``SarathiScheduler``: decodes, then running prefill chunks, then new requests.
orca       ``OrcaScheduler``: whole prompts, a contiguous KV reservation (buddy allocator) at admission.
static     ``StaticScheduler`` (``engine/static.py``): one batch runs to completion.
=========  ==================================================================================
"""

from __future__ import annotations

from servesim.engine.buddy import BuddyAllocator
from servesim.engine.kv_cache import KVBlock, KVCacheManager
from servesim.engine.policy_base import PolicyOptions, PolicyScheduler
from servesim.engine.request import Request
from servesim.engine.scheduler import DECODE, PREFILL, SchedulerConfig, SchedulerOutput
from servesim.engine.static import StaticScheduler, reservation_tokens


class V0Scheduler(PolicyScheduler):
    """vLLM V0's default scheduler (``core/scheduler.py:_schedule_default``, vLLM 0.6.x).

    Also the vLLM baseline of the Sarathi-Serve paper: its ``sarathi/core/scheduler/
    vllm_scheduler.py`` (microsoft/sarathi-serve) is this loop without swap, run there
    with batch size 128 and ``max_num_batched_tokens`` = max_seq_len.

    Each step, in this order::

        if no swapped request waits:
            prefills = waiting FCFS while the whole prompt fits the budget, len(running)
                       < max_num_seqs and can_allocate (free - prompt blocks >= watermark)
        if no prefill was scheduled:                       # prefill-only steps take priority
            decodes = running in order, 1 token each; when a block is short the last running
                      request is preempted (recompute: front of waiting; or swap)
            if nothing was preempted: swap in swapped requests (front of waiting)

    Defaults (``resolve_policy``): max_num_seqs 256, budget max(max_model_len, 2048),
    watermark 0.01 of the blocks (``BlockSpaceManager(watermark=0.01)``), no chunked
    prefill (V0's chunked-prefill scheduler is the Sarathi-style ``sarathi`` policy).
    Simplified: V0's block tables allocate the whole prompt at admission, as here, but a
    decode's ``can_append_slots`` asks for one free block per running sequence; here the
    block is asked for only when a decode crosses a block boundary (as V1 does).
    """

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.cfg.max_num_batched_tokens
        head_swapped = self.swap is not None and bool(self.waiting) and self.swap.holds(self.waiting[0])
        if not head_swapped:
            budget = self._schedule_waiting(out, budget, 0, swapped=False)
        if not out.reqs:
            budget = self._schedule_running(out, budget, 0)
            if not out.preempted and head_swapped:
                budget = self._schedule_waiting(out, budget, 0, swapped=True)
        out.total_tokens = self.cfg.max_num_batched_tokens - budget
        self._finalize(out)
        return out


class SarathiScheduler(PolicyScheduler):
    """Sarathi-Serve (Agrawal et al., OSDI'24; ``sarathi/core/scheduler/sarathi_scheduler.py``).

    Models microsoft/sarathi-serve's ``SarathiScheduler`` with a fixed chunk
    (``enable_dynamic_chunking_schedule`` off), as in the paper's capacity experiments
    (``osdi-experiments/figure-5-6``: chunk 512 for the strict SLO, batch 128).

    Stall-free batching under a chunk budget (``max_num_batched_tokens``, default 512)::

        1. running decodes, in order, 1 token each (preempt the newest running request
           when a block is short)
        2. running prefills, in order: the next chunk min(remaining prompt, budget left)
        3. new requests FCFS while len(running) < max_num_seqs (128), the budget has room
           and can_allocate(whole prompt, watermark 0.01); the prompt's blocks are all
           allocated at admission, its first chunk is scheduled

    Decodes are never stalled by a prefill: a step's prefill work is bounded by the chunk,
    which bounds the time between tokens. Simplified: the dynamic chunk schedule and the
    tile-size rounding of the chunk are not modelled; admission is not gated on the step
    having no preemption (sarathi's scheduler has no such gate).
    """

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.cfg.max_num_batched_tokens
        budget = self._schedule_running(out, budget, 0, phase=DECODE)
        budget = self._schedule_running(out, budget, 0, phase=PREFILL)
        budget = self._schedule_waiting(out, budget, 0)
        out.total_tokens = self.cfg.max_num_batched_tokens - budget
        self._finalize(out)
        return out

    def _admit_allocate(self, req: Request, n: int, num_hit: int, hit: list[KVBlock]) -> bool:
        full = req.num_prompt_tokens + req.num_output_tokens
        if not self._watermark_ok(req, full, hit):
            return False
        return self.kv.allocate_slots(req, full - req.num_computed_tokens - num_hit, num_hit, hit) is not None


class OrcaScheduler(PolicyScheduler):
    """Orca (Yu et al., OSDI'22): iteration-level scheduling with max-length KV reservation.

    Models the Orca baselines of the vLLM paper (Kwon et al., SOSP'23, Sec. 6.1: Orca's
    scheduling re-implemented on the same kernels; its artifact sosp-ae-39/sosp-ae-astra,
    ``orca/cacheflow/master/scheduler.py`` and ``block_manager.py``), not Orca's own
    (unreleased) system.

    The V1 loop without chunking: each iteration runs every running request (whole prompts
    of the newly admitted ones, one token for the others, mixed in one batch by selective
    batching) and admits waiting requests FCFS while ``len(running) < max_num_seqs``, the
    prompt fits what is left of ``max_num_batched_tokens`` after one token per running
    request, and the request's reservation fits (Orca's Algorithm 1: ``n_slots`` reserved
    = max tokens). ``orca_reservation`` picks the vLLM paper's three baselines: ``max``
    (max_model_len), ``pow2`` (prompt + output rounded up to a power of two) and ``oracle``
    (prompt + the true output). The reservation is contiguous: a buddy allocator
    (``engine/buddy.py``, the artifact's ``BuddyAllocator``) rounds it up to a power of two
    of blocks, at most the chunk that holds max_model_len, and a request waits while no
    free chunk is large enough. Nothing is paged, so nothing is ever preempted, and memory
    reserved for tokens not yet (or never) generated is idle. There is no prefix caching.
    """

    def __init__(self, cfg: SchedulerConfig, kv: KVCacheManager, opts: PolicyOptions | None = None) -> None:
        super().__init__(cfg, kv, opts)
        bs, usable = self.kv.block_size, self.kv.num_gpu_blocks - 1
        self.buddy = BuddyAllocator(usable, BuddyAllocator.chunk_for(-(-self.cfg.max_model_len // bs)))
        # The largest chunk carved bounds a reservation (below max_model_len's in a small cache).
        self.max_chunk = self.buddy.largest_free
        self.chunk_start: dict[int, int] = {}  # request idx -> start block of its chunk

    def _prefix_hit(self, req: Request) -> tuple[list[KVBlock], int]:
        return [], 0

    def _admit_allocate(self, req: Request, n: int, num_hit: int, hit: list[KVBlock]) -> bool:
        bs = self.kv.block_size
        want = -(-reservation_tokens(self, req) // bs)
        chunk = min(BuddyAllocator.chunk_for(want), self.max_chunk)
        start = self.buddy.allocate(chunk)
        if start is None:
            return False
        if self.kv.allocate_slots(req, chunk * bs - req.num_computed_tokens) is None:
            self.buddy.free(start)
            return False
        self.chunk_start[req.idx] = start
        return True

    def _release(self, finished: list[Request]) -> None:
        for req in finished:
            self.buddy.free(self.chunk_start.pop(req.idx))
        super()._release(finished)

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.buddy.free(self.chunk_start.pop(victim.idx))
        super()._preempt(victim, out)


SCHEDULERS: dict[str, type[PolicyScheduler]] = {
    "vllm_v1": PolicyScheduler,
    "vllm_v0": V0Scheduler,
    "sarathi": SarathiScheduler,
    "orca": OrcaScheduler,
    "static": StaticScheduler,
}
