"""Static batching (FasterTransformer-style): a batch runs until its longest request ends.

The baseline of the Orca paper (Yu et al., OSDI'22, FasterTransformer on Triton): when the
engine is idle it forms a batch of up to ``max_num_seqs`` waiting requests (FCFS, each with
KV reserved for its maximum length, as FasterTransformer allocates ``batch x max_seq_len``),
runs all their prompts in one iteration, then one decode iteration after another until the
last request of the batch has all its tokens. A request that finishes early keeps its slot
(FasterTransformer keeps computing it: charged here as a padded decode on its final context)
and its response is returned only when the batch ends; only then does the next batch form.

Simplified: the prompts of a batch are charged as their true lengths (FasterTransformer
pads them to the longest), and no request is ever preempted.
"""

from __future__ import annotations

from servesim.engine.policy_base import PolicyScheduler
from servesim.engine.request import ReqStatus, Request
from servesim.engine.scheduler import SchedulerOutput


def reservation_tokens(sched: PolicyScheduler, req: Request) -> int:
    """KV tokens reserved for ``req`` at admission (orca and static; ``orca_reservation``).

    max: max_model_len; pow2: prompt + the output rounded up to a power of two; oracle:
    prompt + the true output. Never more than the cache holds.
    """
    kind = sched.opts.orca_reservation
    mml = sched.cfg.max_model_len
    if kind == "max":
        want = mml
    elif kind == "pow2":
        want = req.num_prompt_tokens + (1 << max(req.max_tokens - 1, 0).bit_length())
    else:
        want = req.num_prompt_tokens + req.max_tokens
    usable = (sched.kv.num_gpu_blocks - 1) * sched.kv.block_size
    return min(want, mml, usable)


class StaticScheduler(PolicyScheduler):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batch_done: list[Request] = []  # finished members waiting for the batch to end

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.batch_done)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        if self.running:
            for req in self.running:
                if req.num_computed_tokens >= req.num_prompt_tokens + req.num_output_tokens:
                    continue  # its token is in flight (pipeline stages, engine.replica)
                ok = self.kv.allocate_slots(req, 1)
                assert ok is not None, "static batching reserved the maximum length"
                out.reqs.append(req)
                out.num_tokens.append(1)
            out.total_tokens = len(out.reqs)
        elif not self.batch_done:
            self._form_batch(out)
        self._finalize(out)
        st = out.stats
        for r in self.batch_done:  # padding: finished members are still computed
            st.num_decode_reqs += 1
            st.sum_decode_context += r.num_prompt_tokens + r.num_output_tokens
        return out

    def _form_batch(self, out: SchedulerOutput) -> None:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        waiting = self.waiting
        while waiting and len(self.running) < cfg.max_num_seqs:
            req = waiting[0]
            n = req.num_prompt_tokens + req.num_output_tokens - req.num_computed_tokens
            if n > budget:
                break
            reserve = reservation_tokens(self, req)
            if self.kv.allocate_slots(req, reserve - req.num_computed_tokens) is None:
                break
            waiting.popleft()
            self.running.append(req)
            req.status = ReqStatus.RUNNING
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = 0
            out.reqs.append(req)
            out.num_tokens.append(n)
            budget -= n
        out.total_tokens = cfg.max_num_batched_tokens - budget

    def update_from_output(self, out: SchedulerOutput, now: float) -> tuple[list[Request], list[Request]]:
        """Members that finish wait for the batch; the batch ends when the last one finishes."""
        produced, finished = self._emit_tokens(out.reqs, now)
        if finished:
            self.batch_done.extend(finished)
            self.running = [r for r in self.running if r.status == ReqStatus.RUNNING]
        if self.running or not self.batch_done:
            return produced, []
        done, self.batch_done = self.batch_done, []
        for r in done:
            r.finished_s = now
            self.kv.free(r)
        return produced, done
