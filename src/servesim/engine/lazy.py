"""The fast engine: vLLM V1 decisions with lazy decode accounting and skip-ahead.

``LazyScheduler`` makes exactly the scheduling decisions of the reference ``Scheduler``
(same batches, same block allocations in the same order, same preemptions), but a step
does not touch every running request:

* **Decode pool.** A running request whose prompt is computed and whose last token came
  out of the previous step joins the pool. A pooled request is scheduled for one token
  every step, so its counts are derived, not stored: at step ``it`` it has
  ``stored + (it - lazy_it)`` computed and output tokens. The pool keeps only its size
  and the sum of ``computed - lazy_it`` (so the sum of decode contexts at any step is
  O(1)).
* **Crossings and finishes.** A pooled request's new token starts a KV block every
  ``block_size`` steps, at a phase fixed when it joins: the pool keeps a count per phase
  (``phase``), so a step's boundary crossings are one lookup, and their blocks are taken
  in bulk from a ``CountingKVCache`` (blocks are anonymous there; which request holds
  which block changes no decision). Each pooled request registers the step whose output
  finishes it (``_finishes``). A step touches only finishing requests, the unfinished
  prefills, and new admissions.
* **Preempting steps.** When the free blocks do not cover a step's needs, the reference's
  running pass runs over only the requests that allocate (crossing pooled decodes and
  individual requests), preempting from the tail as it does; the rest of the pool is not
  touched (``_preempting_step``).
* **Exact fallback.** When the token budget is short for requests in running order, the
  pool is materialized and the reference algorithm runs that step.
* **Runs** (``decode_runs.py``). A step in which only pooled decodes run is extended into
  a run of steps timed in one go while nothing can change the schedule: no admissible
  waiting request, no arrival that could be admitted before a step starts, enough free
  blocks for every boundary crossing; a lone replica's run also goes on through finishes
  when nobody waits. Per-request state is not touched.

The KV cache is a ``CountingKVCache``: the blocks the pool takes are counted, not named.
Requests leave the pool by finishing, by preemption or by materialization (a fallback
step); stale bucket entries are recognised by the request's ``epoch``.
"""

from __future__ import annotations

from servesim.engine.decode_runs import DecodePool, LazyOutput
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput


class LazyScheduler(DecodePool):
    def __init__(self, cfg: SchedulerConfig, kv: CountingKVCache) -> None:
        if not isinstance(kv, CountingKVCache):
            raise TypeError("the lazy scheduler runs on a CountingKVCache")
        super().__init__(cfg, kv)
        self._next_seq = 0
        self.last_end_s = 0.0

    # ----------------------------------------------------------------- pool state

    def materialize_all(self) -> None:
        """Write every pooled request's derived counts into it (at the end of a run)."""
        self._materialize_all()

    def _materialize_all(self) -> None:
        it = self.it
        for r in self.running:
            if r.lazy_it >= 0:
                self._leave_pool(r, it)
                r.last_token_s = self.last_end_s
                self.ckv.sync(r)  # the blocks it took (and hashed) while pooled
        self.individual = []
        self.pool_max_seq = -1
        self._finishes.clear()
        self._finish_heap.clear()

    def check_invariants(self) -> None:
        """Block accounting, with every pooled request's counts written out first."""
        it = self.it
        for r in self.running:
            if r.lazy_it >= 0:
                self._materialize(r, it)
                self.ckv.sync(r)
        self.ckv.check_invariants(self.running)

    # ----------------------------------------------------------------- schedule

    def schedule(self) -> LazyOutput:
        it = self.it
        out = self._try_fast(it)
        if out is None:
            out = self._exact(it)
        self.it = it + 1
        return out

    def _exact(self, it: int) -> LazyOutput:
        self._materialize_all()
        ref = Scheduler.schedule(self)
        out = LazyOutput(first_it=it, is_exact=True)
        out.reqs, out.num_tokens, out.stats = ref.reqs, ref.num_tokens, ref.stats
        out.preempted, out.total_tokens = ref.preempted, ref.total_tokens
        return out

    def _try_fast(self, it: int) -> LazyOutput | None:
        cfg = self.cfg
        kv = self.ckv
        n_pool = self.num_pool
        budget = cfg.max_num_batched_tokens - n_pool
        if budget < 0:
            return None
        threshold = cfg.long_prefill_token_threshold
        if len(self.running) + len(self.waiting) <= 1:
            threshold = 0
        n_cross = self.phase[-it % kv.block_size] if n_pool else 0
        indiv = self.individual
        # Demands of the individually tracked running requests, in running (seq) order.
        demands: list[int] = []
        need_blocks = n_cross
        room_budget = budget
        bs = kv.block_size
        for r in indiv:
            n = r.num_prompt_tokens + r.num_output_tokens - r.num_computed_tokens
            if 0 < threshold < n:
                n = threshold
            room = cfg.max_model_len - 1 - r.num_computed_tokens
            if n > room:
                n = room
            if r.seq < self.pool_max_seq and n > room_budget:
                return None  # budget order matters: exact step
            if n > room_budget:
                n = room_budget if room_budget > 0 else 0
            room_budget -= n
            demands.append(n)
            if n > 0:
                c = r.num_computed_tokens
                need = -(-(c + n) // bs) - kv.held.get(r.idx, 0)
                if need > 0:
                    need_blocks += need
        if need_blocks > kv.num_free_blocks:
            return self._preempting_step(it, budget, threshold)
        out = LazyOutput(first_it=it, num_pool=n_pool)
        # Every allocation of a running request only pops free blocks, whose owner does
        # not matter (they are anonymous): the pool's crossings are taken in one go.
        if n_cross:
            kv.pop_anonymous(n_cross)
        for r, n in zip(indiv, demands):
            if n > 0:
                kv.allocate_slots(r, n)
                out.reqs.append(r)
                out.num_tokens.append(n)
        n_run = len(self.running)
        budget = self._schedule_waiting(out, room_budget, threshold)
        for r in self.running[n_run:]:
            self._next_seq += 1
            r.seq = self._next_seq
            self.individual.append(r)
        out.total_tokens = cfg.max_num_batched_tokens - budget
        self._finalize(out)
        st = out.stats
        st.num_decode_reqs += n_pool
        st.sum_decode_context += self.pool_off + n_pool * (it + 1)
        return out

    def _preempting_step(self, it: int, budget: int, threshold: int) -> LazyOutput:
        """A step whose allocations do not all fit: the reference's running pass, lazily.

        The shared pass (``Scheduler._schedule_running``) visits only the running requests
        that allocate: crossing pooled decodes (one token, one block at their phase's
        crossing) and individual ones with tokens to run. The others are scheduled whatever
        happens: victims come from the tail, so a request is preempted only after every one
        behind it. ``budget`` is the token budget less the pool's tokens, as ``_try_fast``
        counts it, so individual requests get the tokens ``_try_fast`` found for them.
        Allocations and frees happen in the reference's order, so the free queue evolves
        identically. No waiting request is admitted in a step that preempted (vLLM V1).
        """
        bs = self.ckv.block_size
        out = LazyOutput(first_it=it)
        running = self.running
        actors = (
            [r for r in running if (r.num_computed_tokens - r.lazy_it + it) % bs == 0 or r.lazy_it < 0]
            if self.num_pool
            else list(running)
        )
        self._schedule_running(out, budget, threshold, reqs=actors)
        n_pool = self.num_pool
        out.num_pool = n_pool
        self._finalize(out)
        out.total_tokens = sum(out.num_tokens) + n_pool
        st = out.stats
        st.num_decode_reqs += n_pool
        st.sum_decode_context += self.pool_off + n_pool * (it + 1)
        return out

    # The running pass's hooks (``Scheduler._schedule_running``): a pooled decode runs one
    # token, takes its crossing's block anonymously and is counted with the pool; the
    # others (every request in an exact step, whose pool is materialized) as the reference.

    def _num_running_tokens(self, req: Request, budget: int, threshold: int) -> int:
        if req.lazy_it >= 0:
            return 1
        return Scheduler._num_running_tokens(self, req, budget, threshold)

    def _try_schedule(self, out: SchedulerOutput, req: Request, n: int) -> int | None:
        if req.lazy_it < 0:
            return Scheduler._try_schedule(self, out, req, n)
        kv = self.ckv
        if kv.num_free_blocks < 1:
            return None
        kv.pop_anonymous(1)
        return 0  # its token is in the pool's share of the budget

    def _take_victim(self) -> Request:
        victim = self.running.pop()
        if victim.lazy_it >= 0:
            self._leave_pool(victim, self.it)
            victim.last_token_s = self.last_end_s
            self.ckv.sync(victim)
        elif self.individual:  # empty in an exact step
            self.individual.remove(victim)
        return victim

    # ----------------------------------------------------------------- update

    def update_from_output(self, out: SchedulerOutput, now: float) -> tuple[list[Request], list[Request]]:
        """Post-process a step (or a run of steps); returns (individual producers, finished).

        Pooled decodes produced one token in every step of ``out`` (``out.num_pool`` of
        them); only those finishing are touched. Finished requests free their blocks in
        running order, as the reference does.
        """
        assert isinstance(out, LazyOutput)
        it_end = out.first_it + out.num_steps  # the step after the last one in ``out``
        if out.is_exact:
            produced, finished = Scheduler.update_from_output(self, out, now)
            for r in self.running:  # renumber in running order; all tracked individually
                self._next_seq += 1
                r.seq = self._next_seq
            self.individual = list(self.running)
        else:
            produced, finished = self._update_fast(out, now, it_end)
        if self.individual:
            # Those that produced a token (and go on) decode from the next step: pool them.
            keep = []
            got_token = {r.idx for r in produced}
            for r in self.individual:
                if r.status != ReqStatus.RUNNING:
                    continue
                if r.idx in got_token:
                    self._join_pool(r, it_end)
                else:
                    keep.append(r)
            self.individual = keep
        self.last_end_s = now
        return produced, finished

    def _update_fast(self, out: LazyOutput, now: float, it_end: int) -> tuple[list[Request], list[Request]]:
        early = self._run_finished  # finished (and freed) inside the run, in order
        if early:
            self._run_finished = []
        finished = self._pop_finished(it_end, now)
        produced: list[Request]
        sampled_finished: list[Request]
        if out.first_tokens_done:
            produced, sampled_finished = [], []
        else:
            produced, sampled_finished = self._sample_tokens(out.reqs, now)
        finished.extend(sampled_finished)
        if finished:
            if len(finished) > 1:
                finished.sort(key=lambda r: r.seq)
            kv = self.ckv
            for r in finished:
                kv.sync(r)
                kv.free(r)
            self._remove_running(finished)
        return produced, (early + finished if early else finished)
