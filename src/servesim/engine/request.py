"""One request's scheduling state (pure state, no behaviour beyond block hashing).

Token accounting follows vLLM V1: ``num_tokens = num_prompt_tokens + num_output_tokens``
and ``num_computed_tokens`` catches up with it; there is no separate prefill phase. A
request is a decode in a step when only its newest token is uncomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

_TAG_HASH_IDS = 1
_TAG_GROUP = 2
UNIQUE_BASE = 1 << 64  # above any hash(): ids of blocks whose content only one request has


class ReqStatus(IntEnum):
    """Ordered so that ``status >= FINISHED`` is one comparison."""

    WAITING = 0
    PREEMPTED = 1
    RUNNING = 2
    FINISHED = 3
    REJECTED = 4


@dataclass(slots=True, eq=False)
class Request:
    idx: int  # row in the workload (also the request id)
    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int  # output tokens to generate (ignore_eos semantics)
    priority: int = 0
    status: ReqStatus = ReqStatus.WAITING
    num_output_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1  # prefix-cache hit at first schedule (-1 = not yet scheduled)
    num_preemptions: int = 0
    queued_s: float = -1.0  # when it last reached a replica's waiting queue
    first_scheduled_s: float = -1.0
    first_token_s: float = -1.0
    last_token_s: float = -1.0
    finished_s: float = -1.0
    replica: int = 0
    # Prompt identity for prefix caching (see Workload): hash ids, or a prefix group.
    hash_ids: tuple[int, ...] | None = None
    hash_block_tokens: int = 512
    prefix_group: int = -1
    prefix_len: int = 0
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of full blocks
    prev_blocks: list | None = None  # blocks freed at its last preemption (own-prefix hits)
    # Lazy decode accounting (LazyScheduler): while ``lazy_it >= 0`` the request is in the
    # decode pool and its true counts at step ``it`` are the stored ones + (it - lazy_it).
    lazy_it: int = -1
    epoch: int = 0  # bumped when the request leaves the pool: stale bucket entries are ignored
    seq: int = 0  # admission order into running (running is sorted by it)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    def ensure_block_hashes(self, num_full_blocks: int, block_size: int) -> list[int]:
        """Extend ``block_hashes`` to cover ``num_full_blocks`` full blocks and return it.

        Each hash chains its parent with a key for the block's token content, like vLLM's
        ``hash_block_tokens(parent_hash, token_ids)``: equal keys at equal positions with
        equal parents mean equal tokens. Content comes from the prompt identity for prompt
        tokens; output tokens (and prompt tokens with no identity) are unique to the request.

        From the first unique block on, every block of the chain is unique too; such a
        block gets the id ``UNIQUE_BASE + (idx << 32) + k`` instead of a chained hash:
        equally distinct, no hashing, and recognisable (>= UNIQUE_BASE), so the KV cache
        need not index blocks that no other request can ever hit.
        """
        hashes = self.block_hashes
        k = len(hashes)
        if k >= num_full_blocks:
            return hashes
        base = UNIQUE_BASE + (self.idx << 32)
        if k and hashes[-1] >= UNIQUE_BASE:
            hashes.extend(range(base + k, base + num_full_blocks))
            return hashes
        parent = hashes[-1] if k else 0
        n_prompt = self.num_prompt_tokens
        while k < num_full_blocks:
            start = k * block_size
            end = start + block_size
            key: tuple | None = None
            if end <= n_prompt and self.hash_ids is not None:
                u = self.hash_block_tokens
                ids = self.hash_ids[start // u: (end - 1) // u + 1]
                if len(ids) == (end - 1) // u - start // u + 1:
                    key = (_TAG_HASH_IDS, start % u, ids)
                # else: the trace names fewer units than the prompt has: the rest is unique
            elif end <= n_prompt and self.prefix_group >= 0 and end <= self.prefix_len:
                key = (_TAG_GROUP, self.prefix_group, k)
            if key is None:
                hashes.extend(range(base + k, base + num_full_blocks))
                return hashes
            parent = hash((parent, key))
            hashes.append(parent)
            k += 1
        return hashes
