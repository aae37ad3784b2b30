"""Capacity: the highest arrival rate a deployment sustains while meeting its SLO targets.

The deployment (one replica or a cluster) is the scenario's; only the rate of its workload
changes (the knob, ``rate_knob``): a trace's ``workload.rate_scale`` (its timestamps
divided), a synthetic process's ``workload.arrival.rate``, a benchmark's
``workload.request_rate``, a mixture's every client's rate by one factor (at the requests
per second its generated workload gives per unit). Sessions, agent tasks and reasoning
questions are searched on the rate they *start* (``workload.arrival.rate``, in sessions,
tasks or questions per second): each one brings its whole traffic (turns, calls, rounds,
think and tool times unchanged), so the request rate scales with it while the requests
inside a session still wait for their answers. The window the starts span
(``num_sessions / arrival.rate``, or ``duration_s``) is held: twice the rate starts twice
as many sessions. (Holding the count instead would squeeze a fixed set of sessions, each
minutes long with its think times, into an ever shorter window: their concurrency is
bounded by their number, and a high enough rate would seem to meet the targets.) Every
probe is one ``servesim.simulate`` call with the same seed, so the requests are the same and
only their arrival times shrink or stretch (the generators draw gaps of mean 1/rate from
one seeded stream): the attainment curve against the rate is as monotone as the engine
makes it.

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

**Early stop.** A probe well above the highest rate known to meet is first run on a
prefix of its requests and cut short as a clear miss (``planner.probe`` says when).

**Uncertainty** (``seed_spread``). The answer is that of one sample of the workload (its
seed's lengths and arrival gaps); another seed gives another answer. The search is run
again at ``k - 1`` more seeds (each starting at the first answer, bracketing by
``1 + 4 precision``), and the ``k`` answers give a 95% prediction interval for the answer
at a new seed: ``mean +- t(0.975, k-1) s sqrt(1 + 1/k)`` (Student's t; s the answers'
sample standard deviation). Its half-width over the mean is the answer's relative
uncertainty; it includes the search's own step (each answer lies within ``precision``
below its seed's threshold). ``stabilize`` doubles the workload's request count until that
half-width is within a stated share (or a cap is reached, saying so). A workload that the
seed does not change (a trace) has no such spread, and the result says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servesim.config import Scenario
from servesim.errors import ConfigError, ServesimError
from servesim.planner.probe import (  # noqa: F401 (re-exported: their old home)
    SCREEN_FRACTION,
    SCREEN_RATIO,
    Probe,
    probe_metrics,
    run_probe,
)
from servesim.planner.rate_knob import STARTS, RateKnob, rate_knob
from servesim.planner.spread import MAX_SEEDS, SeedSpread
from servesim.planner.targets import has_slo

MAX_PROBES = 60


class CapacityNotFound(ServesimError):
    """Even the lowest rate tried misses the SLO targets (the message names the closest probe)."""

    def __init__(self, message: str, probes: list[Probe], unit: str = "req/s") -> None:
        super().__init__(message)
        self.probes = probes
        self.unit = unit  # the search's rate unit (sessions/s, ... for workloads that start them)


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
    spread: SeedSpread | None = None  # the answer at other seeds (seed_spread), if measured
    rounds: list[SeedSpread] = field(default_factory=list)  # stabilize's runs, smallest first
    stable_width: float | None = None  # stabilize's target relative half-width

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
            "rate_unit": self.knob.unit,
            "requests_per_start": self.knob.requests_per_start,
            "requests_per_s": self.lo.metrics["requests_per_s"],
        }

    def uncertainty(self) -> dict[str, Any] | None:
        """The answer's spread over seeds and, with ``stabilize``, each request count tried."""
        if self.spread is None:
            return None
        out = self.spread.to_dict()
        if self.rounds:
            out["stable_width"] = self.stable_width
            out["stable"] = self.spread.is_within(self.stable_width)
            out["rounds"] = [r.to_dict() for r in self.rounds]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_name": self.scenario.name,
            "result": self.figures(),
            "uncertainty": self.uncertainty(),
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
    start_rate: float | None = None,
    step: float = 2.0,
) -> Capacity:
    """Search the capacity of ``scenario``'s deployment (the module docstring says how).

    ``on_probe(probe, lo_rps, hi_rps)`` is called after each probe with the bracket so far.
    ``min_rate`` defaults to the start rate / 1024. ``start_rate`` (default: the scenario's
    own rate) and ``step`` (the bracket's factor, default 2) let a search start near a
    known answer.
    """
    _check_search(scenario, precision, max_rate, min_rate)
    knob = rate_knob(scenario)
    start = knob.base_rps if start_rate is None else start_rate
    start = start if max_rate is None else min(start, max_rate)
    if min_rate is not None:
        start = max(start, min_rate)
    search = _Search(scenario, knob, early_stop, on_probe)
    search.start(start)
    search.halve_until_one_meets(step, start / 1024 if min_rate is None else min_rate)
    search.double_until_one_misses(step, max_rate)
    search.bisect(precision)
    assert search.lo is not None  # halve_until_one_meets found one
    return Capacity(scenario, knob, precision, search.probes, search.lo, search.hi)


def _check_search(
    scenario: Scenario, precision: float, max_rate: float | None, min_rate: float | None
) -> None:
    """The user errors of a search's options: no SLO to search against, a precision or a
    rate bound out of range."""
    if not has_slo(scenario.slo):
        raise ConfigError(
            "slo: the scenario has no SLO to hold the deployment to; set slo.ttft_s, "
            "slo.tpot_s, slo.e2e_s or slo.percentiles"
        )
    if not 0 < precision < 1:
        raise ConfigError(f"--precision: expected a relative width in (0, 1), found {precision:g}")
    for name, rate in (("--max-rate", max_rate), ("--min-rate", min_rate)):
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise ConfigError(f"{name}: expected a finite rate > 0, found {rate:g}")
    if max_rate is not None and min_rate is not None and min_rate > max_rate:
        raise ConfigError(f"--min-rate ({min_rate:g}) is above --max-rate ({max_rate:g})")


@dataclass(slots=True)
class _Search:
    """The bracket of one search as its probes narrow it: ``lo`` the highest rate that met
    the targets, ``hi`` the lowest above it that did not (None: not known yet)."""

    scenario: Scenario
    knob: RateKnob
    early_stop: bool
    on_probe: Callable[[Probe, float | None, float | None], None] | None
    probes: list[Probe] = field(default_factory=list)
    lo: Probe | None = None
    hi: Probe | None = None

    def probe(self, rate: float) -> Probe:
        """Simulate ``rate`` (screened by its prefix when well above ``lo``)."""
        if len(self.probes) >= MAX_PROBES:
            raise ServesimError(
                f"capacity: no answer after {MAX_PROBES} probes (the verdicts do not "
                "settle); give --max-rate or a coarser --precision"
            )
        screen = self.early_stop and (self.lo is None or rate >= SCREEN_RATIO * self.lo.rate_rps)
        p = run_probe(self.scenario, self.knob, rate, screen=screen)
        self.probes.append(p)
        return p

    def settle(self, p: Probe, lo: Probe | None, hi: Probe | None) -> None:
        """The bracket after probe ``p``, told to ``on_probe``."""
        self.lo, self.hi = lo, hi
        if self.on_probe is not None:
            self.on_probe(p, lo.rate_rps if lo else None, hi.rate_rps if hi else None)

    def start(self, rate: float) -> None:
        p = self.probe(rate)
        if p.meets:
            self.settle(p, p, None)
        else:
            self.settle(p, None, p)

    def halve_until_one_meets(self, step: float, floor: float) -> None:
        """Divide the rate by ``step`` until a probe meets; none above ``floor``:
        CapacityNotFound, naming the closest probe."""
        while self.lo is None:
            hi = self.hi
            assert hi is not None
            if hi.rate_rps / step < floor:
                best = _closest(self.probes)
                unit = self.knob.unit
                raise CapacityNotFound(
                    f"capacity: the SLO targets are missed even at {hi.rate_rps:.4g} {unit}, the "
                    f"lowest rate tried (min rate {floor:.4g} {unit}); closest probe: "
                    f"{best.rate_rps:.4g} {unit}, "
                    f"{best.verdict.describe()}",
                    self.probes,
                    unit,
                )
            p = self.probe(hi.rate_rps / step)
            if p.meets:
                self.settle(p, p, hi)
            else:
                self.settle(p, None, p)

    def double_until_one_misses(self, step: float, max_rate: float | None) -> None:
        """Multiply the rate by ``step`` (up to ``max_rate``) until a probe misses."""
        lo = self.lo
        assert lo is not None
        while self.hi is None and (max_rate is None or lo.rate_rps < max_rate):
            if len(self.probes) >= MAX_PROBES:
                raise ConfigError(
                    f"capacity: every rate tried meets the SLO targets, up to {lo.rate_rps:.4g} "
                    f"{self.knob.unit} ({len(self.probes)} probes): a run of {lo.num_requests:,} "
                    "requests does not load the deployment at any rate; give more requests "
                    "(workload.num_requests or duration_s) or --max-rate"
                )
            p = self.probe(step * lo.rate_rps if max_rate is None else min(step * lo.rate_rps, max_rate))
            if p.meets:
                self.settle(p, p, None)
                lo = p
            else:
                self.settle(p, lo, p)

    def bisect(self, precision: float) -> None:
        """Probe the bracket's geometric mean until ``hi / lo - 1 <= precision``."""
        lo, hi = self.lo, self.hi
        assert lo is not None
        while hi is not None and hi.rate_rps / lo.rate_rps - 1 > precision:
            p = self.probe(math.sqrt(lo.rate_rps * hi.rate_rps))
            if p.meets:
                self.settle(p, p, hi)
                lo = p
            else:
                self.settle(p, lo, p)
                hi = p


# --------------------------------------------------------------------------- the answer's uncertainty


def _with_seed(scenario: Scenario, seed: int) -> Scenario:
    return scenario.model_copy(update={"run": scenario.run.model_copy(update={"seed": seed})})


def _seed_varies(scenario: Scenario) -> bool:
    """Whether another seed draws another workload (a trace is the same at every seed)."""
    from servesim.workload import load_workload

    a = load_workload(scenario.workload, scenario.run.seed)
    b = load_workload(scenario.workload, scenario.run.seed + 1)
    return len(a) != len(b) or not (
        (a.arrival_s == b.arrival_s).all()
        and (a.num_prompt_tokens == b.num_prompt_tokens).all()
        and (a.num_output_tokens == b.num_output_tokens).all()
    )


def seed_spread(
    cap: Capacity,
    seeds: int,
    *,
    max_rate: float | None = None,
    min_rate: float | None = None,
    early_stop: bool = True,
) -> SeedSpread:
    """``cap``'s search again at seeds ``run.seed + 1 .. + seeds - 1``, each started at
    ``cap``'s answer with a bracket step of ``1 + 4 precision``; a seed at which no rate
    meets counts as 0."""
    from servesim.workload import load_workload

    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds: expected 1 to {MAX_SEEDS} seeds, found {seeds}")
    sc = cap.scenario
    base = sc.run.seed
    num = len(load_workload(sc.workload, base))
    if seeds == 1:
        return SeedSpread(num, [base], [cap.capacity_rps], varies=True)
    if not _seed_varies(sc):
        return SeedSpread(num, [base], [cap.capacity_rps], varies=False)
    answers, probes = [cap.capacity_rps], 0
    for seed in range(base + 1, base + seeds):
        try:
            other = find_capacity(
                _with_seed(sc, seed),
                precision=cap.precision,
                max_rate=max_rate,
                min_rate=min_rate,
                early_stop=early_stop,
                start_rate=cap.capacity_rps,
                step=min(2.0, 1.0 + 4.0 * cap.precision),
            )
        except CapacityNotFound as err:
            answers.append(0.0)
            probes += len(err.probes)
            continue
        answers.append(other.capacity_rps)
        probes += len(other.probes)
    return SeedSpread(num, list(range(base, base + seeds)), answers, varies=True, num_probes=probes)


def _grown(scenario: Scenario, factor: int) -> Scenario:
    """``scenario`` with ``factor`` times as many requests (sessions, tasks, questions), or
    ``factor`` times its duration where it gives none."""
    wl: Any = scenario.workload
    count = {
        "synthetic": "num_requests",
        "benchmark": "num_prompts",
        "mixture": "num_requests",
        **{kind: c for kind, (c, _) in STARTS.items()},
    }.get(wl.type)
    if count is None:
        raise ConfigError(
            f"--stable: workload.type {wl.type}: its requests are fixed by its file, so the run "
            "cannot be made longer; give a longer trace (or drop --stable)"
        )
    n = getattr(wl, count)
    update = {count: n * factor} if n is not None else {"duration_s": wl.duration_s * factor}
    return scenario.model_copy(update={"workload": wl.model_copy(update=update)})


def stabilize(
    scenario: Scenario,
    *,
    width: float,
    seeds: int = 5,
    max_requests: int | None = None,
    precision: float = 0.05,
    max_rate: float | None = None,
    min_rate: float | None = None,
    early_stop: bool = True,
    on_probe: Callable[[Probe, float | None, float | None], None] | None = None,
) -> Capacity:
    """Search, then measure the answer's spread over ``seeds`` seeds; while its relative
    half-width is above ``width``, double the workload's request count and search again,
    up to ``max_requests`` (default 16 times the scenario's). The last round's search is the
    answer; ``Capacity.rounds`` holds every round's spread and ``is_within`` says whether
    the last one is stable."""
    from servesim.workload import load_workload

    if not 0 < width < 1:
        raise ConfigError(f"--stable: expected a relative half-width in (0, 1), found {width:g}")
    if width < precision:
        raise ConfigError(
            f"--stable {width:g} is below --precision {precision:g}: each seed's answer is only "
            "known to within the precision; give a finer --precision"
        )
    if seeds < 2:
        raise ConfigError(f"--stable needs at least 2 seeds to measure a spread, found --seeds {seeds}")
    start = len(load_workload(scenario.workload, scenario.run.seed))
    cap_n = 16 * start if max_requests is None else max_requests
    if cap_n < start:
        raise ConfigError(f"--max-requests ({cap_n:,}) is below the scenario's own {start:,} requests")
    rounds: list[SeedSpread] = []
    sc = scenario
    while True:
        cap = find_capacity(
            sc,
            precision=precision,
            max_rate=max_rate,
            min_rate=min_rate,
            early_stop=early_stop,
            on_probe=on_probe,
        )
        spread = seed_spread(cap, seeds, max_rate=max_rate, min_rate=min_rate, early_stop=early_stop)
        rounds.append(spread)
        if spread.is_within(width) or 2 * spread.num_requests > cap_n:
            break
        sc = _grown(sc, 2)
    cap.spread, cap.rounds, cap.stable_width = spread, rounds, width
    return cap
