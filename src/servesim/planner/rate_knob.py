"""The rate knob of a capacity search (``planner.capacity``): which workload field sets the
arrival rate and what rate it gives (a trace's ``rate_scale``, a synthetic process's
``arrival.rate``, a benchmark's ``request_rate``, a mixture's every client's rate by one
factor, the rate sessions, agent tasks or reasoning questions start), and a scenario cut
to the first share of its requests (the search's early screening).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servesim.config import BenchmarkWorkload, Scenario, SyntheticWorkload, TraceWorkload
from servesim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RateKnob:
    """The workload field that sets the arrival rate, and the rate it gives (requests/s)."""

    field: str  # dotted, as --set names it
    rps_per_unit: float  # rate (in ``unit``) for a field value of 1
    base_rps: float  # the scenario's own rate (in ``unit``)
    unit: str = "req/s"  # sessions/s, tasks/s or questions/s where the knob starts them
    requests_per_start: float | None = None  # requests a session, task or question sends

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
        elif wl.type in STARTS:  # the start rate, and as many starts as keep their window's length
            count = STARTS[wl.type][0]
            update: dict[str, Any] = {"arrival": wl.arrival.model_copy(update={"rate": value})}
            if getattr(wl, count) is not None:
                update[count] = max(1, round(getattr(wl, count) * value / wl.arrival.rate))
            new = wl.model_copy(update=update)
        else:  # synthetic
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
    if wl.type in STARTS and wl.arrival.process == "burst":
        raise ConfigError(
            f"workload.arrival.process: burst starts every {STARTS[wl.type][1]} at t=0, "
            "there is no rate to search; use poisson, gamma or constant"
        )
    generated = load_workload(wl, scenario.run.seed)
    if wl.type in STARTS:  # the rate sessions, tasks or questions start; each brings its traffic
        count, what = STARTS[wl.type]
        n = getattr(wl, count)
        return RateKnob(
            "workload.arrival.rate",
            1.0,
            wl.arrival.rate,
            unit=f"{what}s/s",
            requests_per_start=len(generated) / n if n else None,
        )
    if generated.is_closed_loop:
        raise ConfigError(
            f"capacity: workload.type {wl.type}: its requests wait for others to finish, so the "
            "request rate follows the service; capacity searches the rate of a trace, synthetic, "
            "mixture, benchmark, inference-perf or guidellm workload, or the rate sessions, agent "
            "tasks or reasoning questions start (run simulate at the rates to compare instead)"
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


#: Workloads read from a load generator's own config file: their rates scale by ``rate_scale``.
_RATE_SCALED = ("inference-perf", "guidellm")
#: Workloads whose arrival process starts groups of requests: (count field, what starts).
STARTS = {
    "sessions": ("num_sessions", "session"),
    "agents": ("num_tasks", "task"),
    "reasoning": ("num_questions", "question"),
}


def prefix_scenario(scenario: Scenario, fraction: float, num_requests: int) -> Scenario:
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
        count = STARTS[wl.type][0] if wl.type in STARTS else "num_requests"
        n = getattr(wl, count)
        if n is not None:
            new = wl.model_copy(update={count: max(1, math.ceil(n * fraction))})
        else:
            new = wl.model_copy(update={"duration_s": wl.duration_s * fraction})
    return scenario.model_copy(update={"workload": new})
