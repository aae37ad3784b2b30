"""One probe of a capacity search (``planner.capacity``): a rate simulated, its verdict
against the SLO targets, and the figures a reader checks it by.

**Early stop.** A probe well above the highest rate known to meet (``SCREEN_RATIO`` times
it, or any probe while none is known) first runs the first ``SCREEN_FRACTION`` of its
requests. It is cut short as a clear miss when

1. those requests alone already miss more than the whole run may (attainment target a over
   N requests allows N - ceil(aN) misses; a P-th percentile limit N - ceil(PN/100)): more
   requests only add load, so they cannot bring them back; or
2. the saturation detector (``metrics.saturation``) finds the queue growing through the
   whole prefix while service lags arrivals, and the prefix misses its targets.

Otherwise the whole run decides. Rule 1 rests on more load never making earlier requests
faster, which holds for the FCFS engines simulated here save for rare preemption orders;
rule 2 on a stationary rate. ``early_stop=False`` runs every probe whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from servesim.config import Scenario
from servesim.planner.rate_knob import RateKnob, prefix_scenario
from servesim.planner.targets import Verdict, check_result

SCREEN_FRACTION = 0.25
SCREEN_RATIO = 1.5
SCREEN_MIN_REQUESTS = 200  # a shorter workload is run whole: its prefix would say little


@dataclass(slots=True)
class Probe:
    """One simulated rate: its verdict and the figures a reader checks it by."""

    rate_rps: float
    knob_value: float
    verdict: Verdict
    cut_short: str | None  # why the run stopped at its prefix (None: run whole)
    num_requests: int  # requests simulated
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def meets(self) -> bool:
        """Run whole, its SLO targets met, and its queue bounded: a rate sustained."""
        return self.verdict.meets and self.cut_short is None and not self.metrics.get("saturated")

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "knob_value": self.knob_value,
            "meets": self.meets,
            "margin": self.verdict.margin,
            "cut_short": self.cut_short,
            "num_requests": self.num_requests,
            "metrics": self.metrics,
            "verdict": self.verdict.to_dict(),
        }


def probe_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The key figures of one probe's summary (``metrics.summary``)."""
    lat, thr, slo, cost = summary["latency"], summary["throughput"], summary["slo"], summary["cost"]
    window = summary["counts"]["window_s"]
    usd_per_hour = cost["usd"] * 3600.0 / window if cost["usd"] is not None and window else None
    return {
        "attainment": slo["attainment"]["all"],
        "ttft_p50_s": lat["ttft_s"]["p50"],
        "ttft_p99_s": lat["ttft_s"]["p99"],
        "tpot_p50_s": lat["tpot_s"]["p50"],
        "tpot_p99_s": lat["tpot_s"]["p99"],
        "requests_per_s": thr["requests_per_s"],
        "total_tokens_per_s": thr["total_tokens_per_s"],
        "output_tokens_per_s": thr["output_tokens_per_s"],
        "goodput_rps": slo["goodput_rps"],
        "goodput_rps_per_gpu": slo["goodput_rps_per_gpu"],
        "num_gpus": summary["utilization"]["overall"]["num_gpus"],
        "usd_per_hour": usd_per_hour,
        "saturated": summary["saturation"]["saturated"],
        "headroom_capacity_rps": summary["headroom"]["capacity_requests_per_s"],
        "wall_s": summary["wall_s"],
    }


def _clear_miss(verdict: Verdict, summary: dict[str, Any], num_full: int) -> str | None:
    """Why a prefix run is a clear miss of the whole run (the module docstring's rules), or None."""
    for c in verdict.checks:
        if c.num_met is None or c.metric == "itl_s":
            continue
        allowed = num_full - math.ceil(c.required_fraction * num_full - 1e-9)
        missed = c.num_total - c.num_met
        if missed > allowed:
            return (
                f"{missed} of the first {c.num_total} requests miss already, more than the {allowed} "
                f"of {num_full} that {c.target_text()} allows"
            )
    if not verdict.meets and summary["saturation"]["saturated"]:
        return "the queue grew through the first requests while service lagged arrivals"
    return None


def run_probe(scenario: Scenario, knob: RateKnob, rate_rps: float, *, screen: bool) -> Probe:
    """Simulate ``scenario`` at ``rate_rps``; with ``screen``, its prefix first (early stop)."""
    from servesim.sim import simulate
    from servesim.workload import load_workload

    sc = knob.at(scenario, rate_rps)
    num_full = len(load_workload(sc.workload, sc.run.seed))
    if screen and num_full >= SCREEN_MIN_REQUESTS:
        head = simulate(prefix_scenario(sc, SCREEN_FRACTION, num_full))
        verdict = check_result(sc.slo, head)
        why = _clear_miss(verdict, head.summary, num_full)
        if why is not None:
            return Probe(
                rate_rps,
                knob.value_for(rate_rps),
                verdict,
                why,
                len(head.records),
                probe_metrics(head.summary),
            )
    result = simulate(sc)
    return Probe(
        rate_rps,
        knob.value_for(rate_rps),
        check_result(sc.slo, result),
        None,
        len(result.records),
        probe_metrics(result.summary),
    )
