"""Memory-aware admission: admit only what the KV cache can hold until it completes.

Modelled on the memory-constrained scheduling of Jaillet et al. 2025 ("Online Scheduling for
LLM Inference with KV Cache Constraints", MC-SF = memory-constrained shortest-first) and
its kin: a request's KV grows by one token per step until it completes, so a batch that
fits now can overflow later, and vLLM then preempts and recomputes. Before admitting a
waiting request the scheduler projects the KV use of the running requests plus the
candidate forward in time, each with its *predicted* output length, and admits only if the
peak stays within the cache::

    usage(t) = sum over i with remaining_i >= t of blocks(tokens_i + t)

The peak of this piecewise-increasing function is reached just before a completion, so it
is checked at t = remaining_i of every request (an m x m array: m is at most max_num_seqs).

What is modelled: the projection check (MC-SF's feasibility test, arXiv 2502.07115), with
the true output length or a noisy one (predicted = true x exp(sigma z)). The candidates
are taken in the engine's waiting order and admission stops at the first that does not
fit: FCFS by default; MC-SF's shortest-first order with ``admission_order:
shortest_predicted_first`` (``PolicyScheduler.add_request`` sets each request's priority
to its prediction). Simplified: shared prefix blocks are counted once per
request, and a request that outlives its prediction is projected to need one more token.
"""

from __future__ import annotations

import numpy as np

from servesim.engine.request import Request


class MemoryAwareAdmission:
    __slots__ = ("capacity_blocks", "block_size", "sigma", "rng", "predicted")

    def __init__(self, capacity_blocks: int, block_size: int, sigma: float, seed: int = 0) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.sigma = sigma
        self.rng = np.random.default_rng(seed)
        self.predicted: dict[int, int] = {}  # request idx -> predicted output tokens

    def predict(self, req: Request) -> int:
        """The predicted output length of ``req``, drawn once (true length when sigma = 0)."""
        p = self.predicted.get(req.idx)
        if p is None:
            p = req.max_tokens
            if self.sigma > 0:
                p = max(1, round(p * float(np.exp(self.sigma * self.rng.standard_normal()))))
            self.predicted[req.idx] = p
        return p

    def can_admit(self, running: list[Request], req: Request) -> bool:
        """Does the projected KV use of ``running`` + ``req`` stay within the cache?"""
        m = len(running) + 1
        tokens = np.empty(m, np.float64)
        remaining = np.empty(m, np.float64)
        for i, r in enumerate(running):
            tokens[i] = r.num_prompt_tokens + r.num_output_tokens
            remaining[i] = max(self.predict(r) - r.num_output_tokens, 1)
        tokens[-1] = req.num_prompt_tokens + req.num_output_tokens
        remaining[-1] = max(self.predict(req) - req.num_output_tokens, 1)
        # At t = remaining_j, the requests with remaining >= t hold ceil((tokens + t) / bs) blocks.
        t = remaining[:, None]
        blocks = np.where(remaining[None, :] >= t, np.ceil((tokens[None, :] + t) / self.block_size), 0.0)
        peak = blocks.sum(axis=1).max()
        return bool(peak <= self.capacity_blocks)
