"""Tenants: who sends each request, the admission control each one gets and its SLOs.

A workload names its tenants (a trace's ``tenant`` column, a mixture's clients, a
synthetic or trace workload's ``tenant_shares``); ``Scenario.tenants`` configures them by
name. A tenant the list leaves out has no limit, weight 1 and the scenario's SLOs.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from servesim.config._base import _Strict
from servesim.config.parts import SloConfig


class TenantConfig(_Strict):
    """One tenant: its share of the engine (VTC's weight), admission control and SLOs."""

    name: str = Field(min_length=1, description="The tenant's name, as the workload gives it.")
    weight: float = Field(
        1.0,
        gt=0,
        description=(
            "engine.scheduling_policy vtc: the tenant's share (weighted VTC: its counter grows by the "
            "served tokens / weight, so weight 2 gets twice the service of weight 1 when both are "
            "backlogged)."
        ),
    )
    rate_limit_rps: float | None = Field(
        None,
        gt=0,
        description=(
            "Token-bucket rate limit in requests/s (None: no limit); an arrival that finds the bucket "
            "with less than one token is rejected ('rate_limited')."
        ),
    )
    burst: float | None = Field(
        None,
        ge=1,
        description=(
            "The bucket's capacity in requests, full at the start (None: max(1, rate_limit_rps), one "
            "second's worth)."
        ),
    )
    max_queued: int | None = Field(
        None,
        ge=0,
        description=(
            "Queue cap: an arrival is rejected ('queue_full') when this many of the tenant's requests "
            "have arrived and were not scheduled yet (None: no cap)."
        ),
    )
    slo: SloConfig | None = Field(
        None,
        description=(
            "The tenant's latency objectives (ttft_s, tpot_s, e2e_s) for its attainment and goodput "
            "(None: the scenario's slo)."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> TenantConfig:
        if self.burst is not None and self.rate_limit_rps is None:
            raise ValueError(
                f"tenant {self.name}: burst sizes the rate limit's bucket; it needs rate_limit_rps"
            )
        if self.slo is not None and (self.slo.attainment or self.slo.percentiles):
            raise ValueError(
                f"tenant {self.name}: slo takes the limits (ttft_s, tpot_s, e2e_s) a "
                "request of the tenant must meet; attainment and percentiles are the "
                "scenario's slo targets"
            )
        return self

    @property
    def bucket(self) -> float:
        """The token bucket's capacity in requests."""
        if self.burst is not None:
            return self.burst
        return max(1.0, self.rate_limit_rps or 1.0)

    @property
    def has_limits(self) -> bool:
        return self.rate_limit_rps is not None or self.max_queued is not None


def check_tenants(tenants: list[TenantConfig]) -> None:
    """Names are unique (a ValueError says which is repeated)."""
    seen: set[str] = set()
    for t in tenants:
        if t.name in seen:
            raise ValueError(f"tenants: {t.name!r} is listed twice; expected each tenant once")
        seen.add(t.name)
