"""Parallel sampling: n samples of one prompt share its KV blocks, copy-on-write.

Modelled on vLLM V0's ``SequenceGroup`` with ``n > 1`` (``BlockSpaceManager.fork`` and
``_copy_on_write`` in ``append_slots``): the prompt is computed once; the step that
completes it samples the first token of every sample, and the other n - 1 samples are
forked from it: they reference the same blocks (ref_cnt + 1 each). A block is copied only
when a sample first writes into a block that others still reference: the partial last
prompt block, at the first decode (the first divergent block). Full prompt blocks stay
shared until the last sample frees them. The request finishes when all its samples have
finished (its record's finish time is the last sample's).

::

    prompt of 40 tokens, block_size 16, n = 3
    sample 0: [b1 b2 b3]        b1, b2 full and shared (ref_cnt 3)
    sample 1: [b1 b2 b4]        b3 (8 tokens + this sample's first output) copied to b4, b5
    sample 2: [b1 b2 b5]

Best-of-N with early pruning (a workload option): when the first sample reaches
``prune_at_token`` outputs, only ``num_kept_samples`` samples go on (sample 0 and the
earliest forks); the others are dropped and their blocks freed.

vLLM V1 fans ``n`` out into n independent requests that share full prompt blocks through
prefix caching; the V0 form is modelled because it also shares with caching off. Simplified:
a sample is preempted alone (V0 preempts the whole group) and the records report sample 0's
output count.
"""

from __future__ import annotations

from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.request import ReqStatus, Request


class ParallelSampling:
    __slots__ = ("num_samples", "prune_at", "num_kept", "next_idx", "groups", "parent_of")

    def __init__(
        self, num_samples: dict[int, int], first_free_idx: int, prune_at: int = 0, num_kept: int = 1
    ) -> None:
        self.num_samples = num_samples  # parent idx -> n, for requests not yet forked
        self.prune_at = prune_at
        self.num_kept = num_kept
        self.next_idx = first_free_idx
        self.groups: dict[int, list[Request]] = {}  # parent idx -> live samples (parent first)
        self.parent_of: dict[int, Request] = {}  # sample idx -> parent

    def num_seqs(self, req: Request) -> int:
        """Sequences ``req`` will occupy once running (vLLM V0 counts a group's max running seqs)."""
        return self.num_samples.get(req.idx, 1)

    def fork(self, kv: KVCacheManager, parent: Request) -> list[Request]:
        """After ``parent``'s first token: create its other samples sharing its blocks."""
        n = self.num_samples.pop(parent.idx, 1)
        if n <= 1:
            return []
        held = kv.req_blocks[parent.idx]
        num_prompt_blocks = parent.num_prompt_tokens // kv.block_size
        samples = []
        for _ in range(n - 1):
            c = Request(
                self.next_idx,
                parent.arrival_s,
                parent.num_prompt_tokens,
                parent.max_tokens,
                priority=parent.priority,
                tenant=parent.tenant,
                hash_ids=parent.hash_ids,
                hash_block_tokens=parent.hash_block_tokens,
                prefix_group=parent.prefix_group,
                prefix_len=parent.prefix_len,
            )
            self.next_idx += 1
            c.status = ReqStatus.RUNNING
            c.num_computed_tokens = parent.num_computed_tokens
            c.num_output_tokens = parent.num_output_tokens
            c.num_cached_tokens = parent.num_cached_tokens
            c.first_scheduled_s = parent.first_scheduled_s
            c.first_token_s = c.last_token_s = parent.first_token_s
            c.replica = parent.replica
            c.block_hashes = parent.block_hashes[:num_prompt_blocks]
            for b in held:
                b.ref_cnt += 1
            kv.req_blocks[c.idx] = list(held)
            kv.num_cached_blocks[c.idx] = min(kv.num_cached_blocks[parent.idx], num_prompt_blocks)
            self.parent_of[c.idx] = parent
            samples.append(c)
        self.parent_of[parent.idx] = parent
        self.groups[parent.idx] = [parent, *samples]
        return samples

    @staticmethod
    def copy_on_write(kv: KVCacheManager, req: Request, num_new_tokens: int) -> bool:
        """Give ``req`` its own copy of the shared block it is about to write; False if short.

        Check-then-act together with the allocation that follows: the copy and the
        blocks ``allocate_slots`` will need must both be free.
        """
        held = kv.req_blocks.get(req.idx)
        if not held:
            return True
        i = req.num_computed_tokens // kv.block_size
        if i >= len(held) or held[i].ref_cnt <= 1:
            return True
        need = kv.num_blocks_to_allocate(req, req.num_computed_tokens + num_new_tokens)
        if kv.num_free_blocks < need + 1:
            return False
        held[i].ref_cnt -= 1
        held[i] = kv._get_new_blocks(1)[0]
        return True

    def on_finished(self, req: Request, now: float) -> Request | None:
        """A sample (or a plain request) finished: the request to report, if it is complete.

        A sampled request is complete when its last sample finishes; its finish time is then
        that sample's.
        """
        parent = self.parent_of.get(req.idx)
        if parent is None:
            return req
        group = self.groups.get(parent.idx)
        if group is not None:
            for k, r in enumerate(group):
                if r is req:
                    del group[k]
                    break
            if group:
                return None
            del self.groups[parent.idx]
        if parent.finished_s < now:
            parent.finished_s = now
        return parent

    def to_prune(self, req: Request) -> list[Request]:
        """Samples to drop now that ``req`` (a sample) produced a token, if pruning is due."""
        if not self.prune_at:
            return []
        parent = self.parent_of.get(req.idx)
        if parent is None or req.num_output_tokens < self.prune_at:
            return []
        group = self.groups.pop(parent.idx, None)
        if group is None:
            return []
        self.groups[parent.idx] = group[: self.num_kept]
        return group[self.num_kept :]
