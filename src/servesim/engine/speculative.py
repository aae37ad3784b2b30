"""Speculative decoding: k draft tokens proposed, k + 1 verified, the accepted run emitted.

Modelled on vLLM V1's spec decode (``num_speculative_tokens``; the scheduler treats drafts
as extra tokens of the request: ``num_tokens_with_spec``) and the draft-model method of
Leviathan et al. 2023 / Chen et al. 2023:

* Each step a decoding request is scheduled for ``1 + k`` tokens (its newest token plus k
  drafts; k is cut so no draft lies past ``max_tokens``), under the same token budget and
  KV allocation as any other tokens (so drafts take KV slots and budget).
* The target verifies the k + 1 positions in one forward pass: charged as a prefill-like
  chunk of k + 1 tokens on the request's context (``BatchStats`` prefill fields).
* The draft model runs k decode steps for these requests first: charged as
  ``draft_cost_ratio`` x the target's decode step for the same batch, k times
  (``perf.policy_costs.PolicyCostModel``).
* Acceptance: each draft token is accepted with probability alpha (i.i.d.), the leading
  run of accepted drafts is kept and one more token (the target's correction or bonus
  token) is emitted: 1 + A tokens, A ~ min(Geometric, k), E[1 + A] = (1 - a^(k+1)) / (1 - a).
  Rejected drafts' KV is discarded (``num_computed_tokens -= k - A``), as vLLM does.
  alpha is one number or, per request, a Beta draw around it (``acceptance_rate_std``).

Simplified: the draft model's own KV cache is not modelled (vLLM shares or sizes it
separately), the LM head of a verification step is charged once per request, not per
position, and the step's ITL samples count one gap per request per step.
"""

from __future__ import annotations

import numpy as np

from servesim.config import SpeculativeConfig
from servesim.engine.request import Request


class SpecDecoder:
    __slots__ = ("k", "rate", "std", "rng", "rates")

    def __init__(self, cfg: SpeculativeConfig) -> None:
        self.k = cfg.num_speculative_tokens
        self.rate = cfg.acceptance_rate
        self.std = cfg.acceptance_rate_std
        self.rng = np.random.default_rng(cfg.seed)
        self.rates: dict[int, float] = {}  # request idx -> its acceptance rate

    def num_drafts(self, req: Request) -> int:
        """Draft tokens for a decoding request this step (none past its last output)."""
        left = req.max_tokens - req.num_output_tokens - 1
        return self.k if self.k < left else max(left, 0)

    def rate_of(self, req: Request) -> float:
        a = self.rates.get(req.idx)
        if a is None:
            a = self.rate
            if self.std > 0 and 0 < a < 1:
                # Beta with mean a and std s: a(1-a)/s^2 - 1 = alpha + beta.
                total = a * (1 - a) / self.std**2 - 1
                if total > 0:
                    a = float(self.rng.beta(a * total, (1 - a) * total))
            self.rates[req.idx] = a
        return a

    def num_accepted(self, req: Request, k: int) -> int:
        """Leading accepted drafts out of ``k``."""
        a = self.rate_of(req)
        if a >= 1.0:
            return k
        if a <= 0.0:
            return 0
        return min(int(self.rng.geometric(1.0 - a)) - 1, k)


def expected_tokens_per_step(rate: float, k: int) -> float:
    """E[1 + A] = (1 - a^(k+1)) / (1 - a): tokens a verification step emits on average."""
    return float(k + 1) if rate >= 1 else (1 - rate ** (k + 1)) / (1 - rate)
