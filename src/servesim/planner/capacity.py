"""Capacity: the highest arrival rate a deployment sustains while meeting its SLO targets.

The deployment (one replica or a cluster) is the scenario's; only the rate of its workload
changes (the knob, ``rate_knob``): a trace's ``workload.rate_scale`` (its timestamps
divided), a synthetic process's ``workload.arrival.rate``, a benchmark's
``workload.request_rate``, a mixture's every client's rate by one factor (at the requests
per second its generated workload gives per unit). Sessions, agent tasks and closed-loop
reasoning are refused: their requests wait for answers or spread over think times, so no
field sets their request rate. Every probe is one ``servesim.simulate`` call with the same
seed, so the requests are the same and only their arrival times shrink or stretch (the
generators draw gaps of mean 1/rate from one seeded stream): the attainment curve against
the rate is as monotone as the engine makes it.

The search, on the rate in requests/s::

    start at the scenario's own rate r0 (capped at max_rate)
    bracket:  r0 meets -> 2 r0, 4 r0, ... until one misses (or max_rate meets)
              r0 misses -> r0/2, r0/4, ... until one meets (or the rate falls below
              min_rate: CapacityNotFound, naming the closest probe)
    bisect:   the geometric mean of the bracket [lo, hi] until hi / lo - 1 <= precision

A probe **meets** when its run meets every SLO target (``planner.targets``) and is not
saturated (``metrics.saturation``: the queue grew through the whole run while service
lagged arrivals). A finite run can meet its latency targets above the rate the deployment
serves, only because it ends before the queue grows long; such a rate is not sustained.

The answer is ``lo``: a rate that met its targets, with a higher one (``hi``) that did not;
the true threshold of this workload lies in between, so ``precision`` is relative.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servesim.config import BenchmarkWorkload, Scenario, SyntheticWorkload, TraceWorkload
from servesim.errors import ConfigError, ServesimError
from servesim.planner.targets import Verdict, check_result, has_slo

SCREEN_FRACTION = 0.25
SCREEN_RATIO = 1.5
SCREEN_MIN_REQUESTS = 200  # a shorter workload is run whole: its prefix would say little
MAX_PROBES = 60


class CapacityNotFound(ServesimError):
    """Even the lowest rate tried misses the SLO targets (the message names the closest probe)."""

    def __init__(self, message: str, probes: list[Probe]) -> None:
        super().__init__(message)
        self.probes = probes


@dataclass(frozen=True, slots=True)
class RateKnob:
    """The workload field that sets the arrival rate, and the rate it gives (requests/s)."""

    field: str  # dotted, as --set names it
    rps_per_unit: float  # requests/s for a field value of 1
    base_rps: float  # the scenario's own rate

    def value_for(self, rate_rps: float) -> float:
        return rate_rps / self.rps_per_unit

    def at(self, scenario: Scenario, rate_rps: float) -> Scenario:
        """``scenario`` with its workload at ``rate_rps`` requests/s."""
        wl: Any = scenario.workload
        value = self.value_for(rate_rps)
        new: Any
        if isinstance(wl, TraceWorkload) or wl.type in _RATE_SCALED:
            new = wl.model_copy(update={"rate_scale": value})
        elif isinstance(wl, BenchmarkWorkload):
            new = wl.model_copy(update={"request_rate": value})
        elif wl.type == "mixture":  # value: the factor on every client's rate
            clients = [
                c.model_copy(
                    update={"arrival": c.arrival.model_copy(update={"rate": c.arrival.rate * value})}
                )
                for c in wl.clients
            ]
            new = wl.model_copy(update={"clients": clients})
        else:  # synthetic, sessions, agents, reasoning
            new = wl.model_copy(update={"arrival": wl.arrival.model_copy(update={"rate": value})})
        return scenario.model_copy(update={"workload": new})


def rate_knob(scenario: Scenario) -> RateKnob:
    """The rate knob of the scenario's workload (ConfigError where it has no rate to scale)."""
    from servesim.workload import load_workload

    wl: Any = scenario.workload
    if isinstance(wl, SyntheticWorkload):
        if wl.arrival.process == "burst":
            raise ConfigError(
                "workload.arrival.process: burst sends every request at t=0, there is "
                "no rate to search; use poisson, gamma or constant"
            )
        return RateKnob("workload.arrival.rate", 1.0, wl.arrival.rate)
    if isinstance(wl, BenchmarkWorkload):
        if not math.isfinite(wl.request_rate):
            raise ConfigError(
                "workload.request_rate: inf sends every request at once, there is no "
                "rate to search; give a finite request_rate"
            )
        return RateKnob("workload.request_rate", 1.0, wl.request_rate)
    if wl.type in _STARTS and wl.arrival.process == "burst":
        raise ConfigError(
            f"workload.arrival.process: burst starts every {_STARTS[wl.type][1]} at t=0, "
            "there is no rate to search; use poisson, gamma or constant"
        )
    generated = load_workload(wl, scenario.run.seed)
    why = _no_rate_knob(wl.type, generated.is_closed_loop)
    if why:
        raise ConfigError(
            f"capacity: workload.type {wl.type}: {why}; capacity searches the request rate "
            "of a trace, synthetic, mixture, benchmark, inference-perf or guidellm workload "
            "(run simulate at the rates to compare instead)"
        )
    arrivals = generated.arrival_s
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    if span <= 0:
        where = f"workload.path: {wl.path}" if isinstance(wl, TraceWorkload) else f"workload ({wl.type})"
        raise ConfigError(
            f"{where}: its requests all arrive at one instant (or there is only one); "
            "there is no rate to search"
        )
    rps = (len(arrivals) - 1) / span
    if isinstance(wl, TraceWorkload) or wl.type in _RATE_SCALED:
        return RateKnob("workload.rate_scale", rps / wl.rate_scale, rps)
    if wl.type == "mixture":
        return RateKnob("workload.clients[*].arrival.rate (factor)", rps, rps)
    return RateKnob("workload.arrival.rate", rps / wl.arrival.rate, rps)


def _no_rate_knob(kind: str, closed_loop: bool) -> str:
    """Why ``kind``'s request rate is not set by one field (an empty string: it is)."""
    if kind == "sessions":
        return (
            "a session's turns are sent when the previous answer comes back (loop: closed), or spread "
            "over its think times (loop: open), so the request rate does not scale with "
            "workload.arrival.rate, the rate sessions start"
        )
    follows = "so the request rate follows the service"
    if kind == "agents":
        return f"an agent task sends each call when the calls it waits for finish, {follows}"
    if kind == "reasoning" and closed_loop:
        return f"a reasoning question sends each round when the previous one finishes, {follows}"
    return f"its requests wait for others to finish, {follows}" if closed_loop else ""


#: Workloads read from a load generator's own config file: their rates scale by ``rate_scale``.
_RATE_SCALED = ("inference-perf", "guidellm")
#: Workloads whose arrival process starts groups of requests: (count field, what starts).
_STARTS = {
    "sessions": ("num_sessions", "session"),
    "agents": ("num_tasks", "task"),
    "reasoning": ("num_questions", "question"),
}


def _prefix(scenario: Scenario, fraction: float, num_requests: int) -> Scenario:
    """``scenario`` with only the first ``fraction`` of its requests (the same requests)."""
    wl: Any = scenario.workload
    k = max(1, math.ceil(num_requests * fraction))
    new: Any
    if isinstance(wl, TraceWorkload) or wl.type in _RATE_SCALED:
        new = wl.model_copy(update={"limit": k})
    elif isinstance(wl, SyntheticWorkload):  # k requests (before duration_s): the same draws
        new = wl.model_copy(update={"num_requests": k})
    elif isinstance(wl, BenchmarkWorkload):
        new = wl.model_copy(update={"num_prompts": k})
    else:  # the first fraction of the sessions, tasks, questions or mixture's requests
        count = _STARTS[wl.type][0] if wl.type in _STARTS else "num_requests"
        n = getattr(wl, count)
        if n is not None:
            new = wl.model_copy(update={count: max(1, math.ceil(n * fraction))})
        else:
            new = wl.model_copy(update={"duration_s": wl.duration_s * fraction})
    return scenario.model_copy(update={"workload": new})


# --------------------------------------------------------------------------- probes


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
    """Why a prefix run is a clear miss of the whole run (see the module docstring), or None."""
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
        head = simulate(_prefix(sc, SCREEN_FRACTION, num_full))
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


# --------------------------------------------------------------------------- the search


@dataclass(slots=True)
class Capacity:
    """The search's outcome: the rate found, its bracket, and every probe in order."""

    scenario: Scenario
    knob: RateKnob
    precision: float
    probes: list[Probe]
    lo: Probe  # the highest rate that met the targets
    hi: Probe | None  # the lowest rate above it that did not (None: max_rate met)

    @property
    def capacity_rps(self) -> float:
        return self.lo.rate_rps

    @property
    def relative_width(self) -> float | None:
        return None if self.hi is None else self.hi.rate_rps / self.lo.rate_rps - 1.0

    def figures(self) -> dict[str, Any]:
        """Capacity in requests/s and tokens/s, goodput per GPU and per dollar, at ``lo``."""
        m = self.lo.metrics
        usd = m["usd_per_hour"]
        return {
            "capacity_rps": self.capacity_rps,
            "capacity_total_tokens_per_s": m["total_tokens_per_s"],
            "capacity_output_tokens_per_s": m["output_tokens_per_s"],
            "goodput_rps": m["goodput_rps"],
            "goodput_rps_per_gpu": m["goodput_rps_per_gpu"],
            "num_gpus": m["num_gpus"],
            "usd_per_hour": usd,
            "good_requests_per_usd": None
            if not usd or m["goodput_rps"] is None
            else m["goodput_rps"] * 3600.0 / usd,
            "knob": self.knob.field,
            "knob_value": self.lo.knob_value,
            "bracket_rps": [self.lo.rate_rps, None if self.hi is None else self.hi.rate_rps],
            "relative_width": self.relative_width,
            "precision": self.precision,
            "limited_by_max_rate": self.hi is None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_name": self.scenario.name,
            "result": self.figures(),
            "probes": [p.to_dict() for p in self.probes],
            "scenario": self.scenario.model_dump(mode="json"),
        }


def _closest(probes: list[Probe]) -> Probe:
    return max(probes, key=lambda p: p.verdict.margin)


def find_capacity(
    scenario: Scenario,
    *,
    precision: float = 0.05,
    max_rate: float | None = None,
    min_rate: float | None = None,
    early_stop: bool = True,
    on_probe: Callable[[Probe, float | None, float | None], None] | None = None,
) -> Capacity:
    """Search the capacity of ``scenario``'s deployment (the module docstring says how).

    ``on_probe(probe, lo_rps, hi_rps)`` is called after each probe with the bracket so far.
    ``min_rate`` defaults to the start rate / 1024.
    """
    if not has_slo(scenario.slo):
        raise ConfigError(
            "slo: the scenario has no SLO to hold the deployment to; set slo.ttft_s, "
            "slo.tpot_s, slo.e2e_s or slo.percentiles"
        )
    if not 0 < precision < 1:
        raise ConfigError(f"--precision: expected a relative width in (0, 1), found {precision:g}")
    for name, rate in (("--max-rate", max_rate), ("--min-rate", min_rate)):
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ConfigError(f"{name}: expected a rate in requests/s > 0, found {rate:g}")
    if max_rate is not None and min_rate is not None and min_rate > max_rate:
        raise ConfigError(f"--min-rate ({min_rate:g}) is above --max-rate ({max_rate:g})")
    knob = rate_knob(scenario)
    start = knob.base_rps if max_rate is None else min(knob.base_rps, max_rate)
    if min_rate is not None:
        start = max(start, min_rate)
    floor = start / 1024 if min_rate is None else min_rate
    probes: list[Probe] = []
    lo: Probe | None = None
    hi: Probe | None = None

    def probe(rate: float) -> Probe:
        if len(probes) >= MAX_PROBES:
            raise ServesimError(
                f"capacity: no answer after {MAX_PROBES} probes (the verdicts do not "
                "settle); give --max-rate or a coarser --precision"
            )
        screen = early_stop and (lo is None or rate >= SCREEN_RATIO * lo.rate_rps)
        p = run_probe(scenario, knob, rate, screen=screen)
        probes.append(p)
        return p

    def report(p: Probe) -> None:
        if on_probe is not None:
            on_probe(p, lo.rate_rps if lo else None, hi.rate_rps if hi else None)

    p = probe(start)
    if p.meets:
        lo = p
    else:
        hi = p
    report(p)
    while lo is None:  # halve until one meets
        assert hi is not None
        if hi.rate_rps / 2 < floor:
            best = _closest(probes)
            raise CapacityNotFound(
                f"capacity: the SLO targets are missed even at {hi.rate_rps:.4g} req/s, the lowest rate "
                f"tried (min rate {floor:.4g} req/s); closest probe: {best.rate_rps:.4g} req/s, "
                f"{best.verdict.describe()}",
                probes,
            )
        p = probe(hi.rate_rps / 2)
        lo, hi = (p, hi) if p.meets else (None, p)
        report(p)
    while hi is None and (max_rate is None or lo.rate_rps < max_rate):  # double until one misses
        p = probe(2 * lo.rate_rps if max_rate is None else min(2 * lo.rate_rps, max_rate))
        lo, hi = (p, None) if p.meets else (lo, p)
        report(p)
    while hi is not None and hi.rate_rps / lo.rate_rps - 1 > precision:  # bisect
        p = probe(math.sqrt(lo.rate_rps * hi.rate_rps))
        lo, hi = (p, hi) if p.meets else (lo, p)
        report(p)
    return Capacity(scenario, knob, precision, probes, lo, hi)
