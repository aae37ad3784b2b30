"""Speculative decoding in the engine section (``engine.speculative``)."""

from __future__ import annotations

from pydantic import Field

from servesim.config._base import _Strict


class SpeculativeConfig(_Strict):
    """Speculative decoding: a draft model proposes k tokens, the target verifies k + 1."""

    num_speculative_tokens: int = Field(
        0,
        ge=0,
        description="Draft length k (0 = off), as vLLM names it.",
        json_schema_extra={"unit": "tokens", "vllm": "--speculative-config num_speculative_tokens"},
    )
    acceptance_rate: float = Field(
        0.7,
        ge=0,
        le=1,
        json_schema_extra={"unit": "probability"},
        description=(
            "Probability that each draft token is accepted (i.i.d. per token; the run of leading "
            "acceptances is kept)."
        ),
    )
    acceptance_rate_std: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description=(
            "Spread of the per-request acceptance rate (a Beta with this std around acceptance_rate); "
            "0 = every request has acceptance_rate."
        ),
    )
    draft_cost_ratio: float = Field(
        0.05,
        ge=0,
        json_schema_extra={"unit": "ratio"},
        description=("Time of one draft-model decode step as a fraction of the target's decode step."),
    )
    seed: int = Field(0, ge=0, description="Seed of the acceptance draws.")
