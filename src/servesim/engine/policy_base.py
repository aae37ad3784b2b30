"""The token-budget loop with every option the fast engine leaves out.

``PolicyScheduler`` is vLLM V1's loop (``engine/scheduler.py``, whose running and waiting
passes it runs, through their hooks: ``_num_running_tokens``, ``_try_schedule``,
``_take_victim``, ``_may_admit``, ``_admit_allocate``, ``_on_admitted``) plus, each off by
default so that with no option it makes exactly the reference ``Scheduler``'s decisions:

* ``scheduling_policy="priority"``: waiting ordered by (priority, arrival)
  (``PriorityWaiting``); the victim is ``max(running, key=(priority, arrival))`` and, if it
  was already scheduled in this step, its tokens go back to the budget (vLLM 0.32
  ``schedule()``, PRIORITY branch);
* ``preemption_mode="swap"``: victims are copied to host memory (``SwapSpace``) and keep
  their computed tokens; swapped requests stay at the front of the waiting queue and are
  copied back when admitted;
* ``watermark``: admission keeps ``watermark x num_gpu_blocks`` blocks free (vLLM V0);
* ``scheduling_policy="vtc"`` and tenants (``engine/tenants.py``): the waiting queue is one
  FIFO per tenant (``TenantWaiting``) and VTC admits from the tenant with the smallest
  virtual token counter; given the tenants' weights (``tenant_weights``), every policy
  keeps the counters (the fairness figures of the summary);
* ``memory_aware_admission`` (``MemoryAwareAdmission``), speculative decoding
  (``SpecDecoder``), parallel sampling (``ParallelSampling``).

The other policies (``engine/policies.py``, ``engine/static.py``) subclass it and change
the order of the phases (``schedule``) or what admission allocates (``_admit_allocate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servesim.config import SpeculativeConfig
from servesim.engine.admission import MemoryAwareAdmission
from servesim.engine.kv_cache import KVBlock, KVCacheManager
from servesim.engine.preemption import PriorityWaiting, SwapSpace
from servesim.engine.request import ReqStatus, Request
from servesim.engine.sampling import ParallelSampling
from servesim.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from servesim.engine.speculative import SpecDecoder
from servesim.engine.tenants import TenantCounters, TenantWaiting


@dataclass(slots=True)
class PolicyOptions:
    """Policy knobs resolved from EngineConfig and the workload (see ``sim.make_scheduler``)."""

    scheduling_policy: str = "fcfs"
    preemption_mode: str = "recompute"
    num_host_blocks: int = 0
    kv_bytes_per_block: float = 0.0
    watermark: float = 0.0
    orca_reservation: str = "max"
    memory_aware_admission: bool = False
    output_len_prediction_error: float = 0.0
    admission_order: str = "fcfs"
    speculative: SpeculativeConfig | None = None
    num_samples: dict[int, int] = field(default_factory=dict)  # request idx -> n (n > 1 only)
    first_free_idx: int = 1 << 40  # ids of forked samples start here
    prune_at_token: int = 0
    num_kept_samples: int = 1
    seed: int = 0
    tenant_weights: list[float] = field(default_factory=list)  # one per tenant (empty: no tenants)
    vtc_input_weight: float = 1.0  # w_p: counter units per prompt token
    vtc_output_weight: float = 2.0  # w_q: counter units per output token


class PolicyScheduler(Scheduler):
    """vLLM V1's loop with priority, swap, watermark, memory-aware admission, spec decode, n > 1."""

    kv: KVCacheManager  # always the block-object cache

    def __init__(self, cfg: SchedulerConfig, kv: KVCacheManager, opts: PolicyOptions | None = None) -> None:
        super().__init__(cfg, kv)
        self.opts = opts = opts or PolicyOptions()
        # MC-SF's order is the priority machinery with priority = predicted output length.
        self.shortest_first = (
            opts.memory_aware_admission and opts.admission_order == "shortest_predicted_first"
        )
        self.is_priority = opts.scheduling_policy == "priority" or self.shortest_first
        if self.is_priority:
            self.waiting = PriorityWaiting()
        self.tenants = (
            TenantCounters(opts.tenant_weights, opts.vtc_input_weight, opts.vtc_output_weight)
            if opts.tenant_weights
            else None
        )
        if opts.scheduling_policy == "vtc" and self.tenants is None:
            raise ValueError(
                "scheduling_policy vtc needs the tenants' weights (PolicyOptions.tenant_weights)"
            )
        if self.tenants is not None and not self.is_priority:
            self.waiting = TenantWaiting(self.tenants, opts.scheduling_policy == "vtc")
        self.swap = (
            SwapSpace(opts.num_host_blocks, opts.kv_bytes_per_block)
            if opts.preemption_mode == "swap"
            else None
        )
        spec = opts.speculative
        self.spec = SpecDecoder(spec) if spec is not None and spec.num_speculative_tokens else None
        self.admission = (
            MemoryAwareAdmission(
                kv.num_gpu_blocks - 1, kv.block_size, opts.output_len_prediction_error, opts.seed
            )
            if opts.memory_aware_admission
            else None
        )
        self.sampling = (
            ParallelSampling(
                dict(opts.num_samples), opts.first_free_idx, opts.prune_at_token, opts.num_kept_samples
            )
            if opts.num_samples
            else None
        )
        self.watermark_blocks = int(opts.watermark * kv.num_gpu_blocks)

    def add_request(self, req: Request) -> None:
        if self.shortest_first:
            assert self.admission is not None
            req.priority = self.admission.predict(req)
        if self.tenants is not None:
            backlogged = self._backlogged()
            if req.tenant not in backlogged:
                self.tenants.lift(req.tenant, backlogged)
        super().add_request(req)

    def _backlogged(self) -> list[int]:
        """The tenants with requests waiting."""
        if isinstance(self.waiting, TenantWaiting):
            return self.waiting.backlogged()
        return sorted({r.tenant for r in self.waiting})

    # ----------------------------------------------------------------- running

    def _num_running_tokens(self, req: Request, budget: int, threshold: int) -> int:
        n = req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens
        if n == 1 and self.spec is not None and req.num_output_tokens > 0:
            n += self.spec.num_drafts(req)
        return self._cap(req, n, budget, threshold)

    def _try_schedule(self, out: SchedulerOutput, req: Request, n: int) -> int | None:
        if self.sampling is not None and not ParallelSampling.copy_on_write(self.kv, req, n):
            return None
        return Scheduler._try_schedule(self, out, req, n)

    def _take_victim(self) -> Request:
        running = self.running
        if not self.is_priority:
            return running.pop()
        victim = max(running, key=lambda r: (r.priority, r.arrival_s))
        running.pop(next(k for k, r in enumerate(running) if r is victim))
        return victim

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        swap = self.swap
        if swap is not None:
            num_blocks = -(-victim.num_computed_tokens // self.kv.block_size)
            if num_blocks and swap.can_swap_out(num_blocks):
                self.kv.free(victim)
                out.stats.swap_bytes += swap.swap_out(victim, num_blocks)
                victim.status = ReqStatus.PREEMPTED
                victim.num_preemptions += 1
                self.num_preemptions += 1
                self.waiting.appendleft(victim)
                out.preempted.append(victim)
                return
        Scheduler._preempt(self, victim, out)

    # ----------------------------------------------------------------- waiting

    def _may_admit(self, req: Request, swapped: bool | None) -> bool:
        if swapped is not None and (self.swap is not None and self.swap.holds(req)) != swapped:
            return False
        if (
            self.sampling is not None
            and len(self.running) + self.sampling.num_seqs(req) > self.cfg.max_num_seqs
        ):
            return False
        return self.admission is None or self.admission.can_admit(self.running, req)

    def _on_admitted(self, out: SchedulerOutput, req: Request) -> None:
        if self.swap is not None and self.swap.holds(req):
            out.stats.swap_bytes += self.swap.swap_in(req)
        if self.tenants is not None and req.num_cached_tokens < 0:  # first admission only
            self.tenants.charge_input(req.tenant, req.num_prompt_tokens)

    def _watermark_ok(self, req: Request, num_tokens: int, hit: list[KVBlock]) -> bool:
        if not self.watermark_blocks:
            return True
        need = self.kv.num_blocks_to_allocate(req, num_tokens, hit)
        return self.kv.num_free_blocks - need >= self.watermark_blocks

    def _admit_allocate(self, req: Request, n: int, num_hit: int, hit: list[KVBlock]) -> bool:
        """V1: blocks for this chunk, gated on the whole sequence fitting (and the watermark)."""
        full = req.num_prompt_tokens + req.num_output_tokens
        if not self._watermark_ok(req, full if self.cfg.scheduler_reserve_full_isl else num_hit + n, hit):
            return False
        return self.kv.allocate_slots(req, n, num_hit, hit, self.cfg.scheduler_reserve_full_isl) is not None

    # ----------------------------------------------------------------- stats

    def _finalize(self, out: SchedulerOutput) -> None:
        """As the reference, plus speculative verification steps (k + 1 tokens on a decode)."""
        st = out.stats
        for req, n in zip(out.reqs, out.num_tokens):
            p = req.num_computed_tokens
            is_decode = req.num_output_tokens > 0 and p == req.num_prompt_tokens + req.num_output_tokens - 1
            if n == 1 and is_decode:
                st.add_decode(p)
            else:
                st.add_chunk(n, p)
                if is_decode:  # a verification of n - 1 drafts
                    st.num_spec_reqs += 1
                    st.sum_spec_context += p + 1
                    if n - 1 > st.num_draft_steps:
                        st.num_draft_steps = n - 1
            req.num_computed_tokens = p + n
        if self.tenants is not None:
            self.tenants.observe(self._backlogged())

    # ----------------------------------------------------------------- update

    def update_from_output(self, out: SchedulerOutput, now: float) -> tuple[list[Request], list[Request]]:
        """Sample (1 + accepted drafts tokens), fork samples, prune, free the finished."""
        tenants = self.tenants
        before = [r.num_output_tokens for r in out.reqs] if tenants is not None else []
        produced, finished = self._emit_tokens(out.reqs, now)
        if tenants is not None:
            for r, n in zip(out.reqs, before):
                if r.num_output_tokens > n:
                    tenants.charge_output(r.tenant, r.num_output_tokens - n)
            tenants.observe(self._backlogged())
        reported = finished
        if self.sampling is not None:
            finished, reported = self._fork_and_prune(produced, finished, now)
        self._release(finished)
        return produced, reported

    def _emit_tokens(self, reqs: list[Request], now: float) -> tuple[list[Request], list[Request]]:
        if self.spec is None:
            return self._sample_tokens(reqs, now)
        produced: list[Request] = []
        finished: list[Request] = []
        max_len = self.cfg.max_model_len
        for req in reqs:
            total = req.num_prompt_tokens + req.num_output_tokens
            c = req.num_computed_tokens
            if c < total:
                continue
            emitted = 1
            if c > total:
                k = c - total
                a = self.spec.num_accepted(req, k)
                req.num_computed_tokens = c - (k - a)
                emitted += a
            req.num_output_tokens += emitted
            produced.append(req)
            if req.num_output_tokens >= req.max_tokens or total + emitted >= max_len:
                req.status = ReqStatus.FINISHED
                req.finished_s = now
                req.finished_length = req.num_output_tokens < req.max_tokens
                finished.append(req)
        return produced, finished

    def _fork_and_prune(
        self, produced: list[Request], finished: list[Request], now: float
    ) -> tuple[list[Request], list[Request]]:
        """Returns (samples to free, workload requests now complete)."""
        sampling = self.sampling
        assert sampling is not None
        for req in produced:
            if req.idx in sampling.num_samples and req.num_output_tokens >= 1:
                for c in sampling.fork(self.kv, req):
                    if c.num_output_tokens >= c.max_tokens:
                        c.status = ReqStatus.FINISHED
                        c.finished_s = now
                        finished.append(c)
                    else:
                        self.running.append(c)
            for d in sampling.to_prune(req):
                if d.status >= ReqStatus.FINISHED:
                    continue
                if d.status != ReqStatus.RUNNING:  # waiting after a preemption
                    self.waiting.remove(d)
                    if self.swap is not None and self.swap.holds(d):
                        self.swap.swap_in(d)
                d.status = ReqStatus.FINISHED
                d.finished_s = now
                finished.append(d)
        reported = []
        for req in finished:
            done = sampling.on_finished(req, now)
            if done is not None:
                reported.append(done)
        return finished, reported
