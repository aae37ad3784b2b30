"""The saturation verdict: did the queue grow for the whole run (arrivals outpacing service)?

Computed from the request records alone (so it holds with ``run.record_steps: false`` and
for a cluster alike). Over the arrival window ``[first arrival, last arrival]``, at
``NUM_SAMPLES`` evenly spaced instants::

    in_system(t) = arrived by t - finished by t        (queued or being served)
    waiting(t)   = arrived by t - first scheduled by t (not yet admitted)

A run is **saturated** when both hold:

1. the number in the system grows through the window: at the end of the arrival window it
   exceeds its level at the end of the first quarter by at least ``GROWTH_SHARE`` of the
   requests that arrived (and by 10 requests), and its median over the second half of the
   window exceeds the first half's by half that much;
2. the served rate (finishes per second over the second half of the window) is below
   ``RATE_SHARE`` of the arrival rate over that half.

A stable queue, even one busy near its capacity, fluctuates around a level; it does not
climb by a twentieth of the whole workload quarter after quarter while service lags
arrivals. A saturated run's latency percentiles grow with the run's length: they measure
the queue, not the deployment.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NUM_SAMPLES = 12
GROWTH_SHARE = 0.05
RATE_SHARE = 0.95


def _count_by(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of ``times`` (NaN = never) are <= each instant of ``at``: one pass per
    instant, not a sort (ten million requests take a second to sort, and a copy)."""
    return np.array([np.count_nonzero(times <= x) for x in at], np.int64)


def saturation(arrival_s: np.ndarray, first_scheduled_s: np.ndarray, finished_s: np.ndarray,
               capacity_rps: float | None = None) -> dict[str, Any]:
    """The verdict and its evidence (see the module docstring); ``capacity_rps`` (the
    headroom's sustainable request rate, when known) goes into the hint."""
    arr = np.asarray(arrival_s, np.float64)
    arr = arr[~np.isnan(arr)]
    if arr.size < 8 or float(arr.max() - arr.min()) <= 0:
        return {"saturated": False, "evidence": None, "hint": "too few requests to judge"}
    a0, a1 = float(arr.min()), float(arr.max())
    at = a0 + (a1 - a0) * np.arange(1, NUM_SAMPLES + 1) / NUM_SAMPLES
    arrived = _count_by(arr, at)
    in_system = arrived - _count_by(np.asarray(finished_s, np.float64), at)
    waiting = arrived - _count_by(np.asarray(first_scheduled_s, np.float64), at)
    q, h = NUM_SAMPLES // 4, NUM_SAMPLES // 2
    start, end = int(in_system[q - 1]), int(in_system[-1])
    growth = end - start
    need = max(10, GROWTH_SHARE * arr.size)
    rise = float(np.median(in_system[h:]) - np.median(in_system[:h]))
    half = np.array([(a0 + a1) / 2, a1])
    arrived_h = _count_by(arr, half)
    finished_h = _count_by(np.asarray(finished_s, np.float64), half)
    span = (a1 - a0) / 2
    arrival_rps = float(arrived_h[1] - arrived_h[0]) / span
    served_rps = float(finished_h[1] - finished_h[0]) / span
    grows = growth >= need and rise >= need / 2
    lags = served_rps < RATE_SHARE * arrival_rps
    saturated = grows and lags
    evidence = {
        "sample_s": [float(x) for x in at],
        "num_waiting": [int(x) for x in waiting],
        "num_in_system": [int(x) for x in in_system],
        "in_system_growth": growth,
        "arrival_rate_rps": arrival_rps,
        "served_rate_rps": served_rps,
        "window_s": [a0, a1],
    }
    if saturated:
        cap = f"; this deployment sustains about {capacity_rps:.3g} req/s" if capacity_rps else ""
        hint = (f"arrivals ({arrival_rps:.3g} req/s) outpace service ({served_rps:.3g} req/s): requests in "
                "the "
                f"system grew from {start} to {end} during arrivals{cap}; latency "
                "figures measure the queue and grow with the run's length. Lower the rate "
                "(workload.rate_scale) or add replicas or GPUs")
    else:
        hint = "the queue stays bounded: service keeps up with arrivals"
    return {"saturated": saturated, "latency_is_queue_artefact": saturated, "evidence": evidence,
            "hint": hint}
