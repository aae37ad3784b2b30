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

Requests the engine rejected, or lost with a failed replica, never queue for service: the
queue is judged on the others. The verdict is "cannot_judge" when fewer than 8 are left
(every request rejected) or all arrived at one instant (a burst: no rate to keep up with),
and a queue that grew only because nothing finished after replica failures is blamed on
the failures, not called saturation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.records import RequestStatus

NUM_SAMPLES = 12
GROWTH_SHARE = 0.05
RATE_SHARE = 0.95


def _count_by(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of ``times`` (NaN = never) are <= each instant of ``at``: one pass per
    instant, not a sort (ten million requests take a second to sort, and a copy)."""
    return np.array([np.count_nonzero(times <= x) for x in at], np.int64)


def _cannot_judge(why: str, cause: str | None = None) -> dict[str, Any]:
    return {
        "saturated": False,
        "latency_is_queue_artefact": False,
        "verdict": "cannot_judge",
        "cause": cause,
        "evidence": None,
        "hint": f"cannot judge: {why}",
    }


def _first_reason(reasons: dict[int, str] | None, rows: np.ndarray) -> str:
    if not reasons or not rows.size:
        return ""
    why = reasons.get(int(rows[0]), "")
    return f" ({why})" if why else ""


def saturation(
    arrival_s: np.ndarray,
    first_scheduled_s: np.ndarray,
    finished_s: np.ndarray,
    capacity_rps: float | None = None,
    status: np.ndarray | None = None,
    reasons: dict[int, str] | None = None,
    num_replica_failures: int = 0,
) -> dict[str, Any]:
    """The verdict and its evidence (see the module docstring); ``capacity_rps`` (the
    headroom's sustainable request rate, when known) goes into the hint.

    ``status`` (``RequestStatus`` per row) and ``reasons`` (row -> why) set apart the
    requests the engine refused (rejected) and those lost with a failed replica (a reason
    starting "failed:"): they never queue for service, so the queue is judged on the others,
    and a run that is mostly refusals or whose service stopped after replica failures
    (``num_replica_failures``) is said to be so, not saturated. ``verdict`` is
    "saturated", "not_saturated" or "cannot_judge"; ``cause`` names what the hint blames:
    "queue", "rejections", "failures", "burst" or None.
    """
    arr_all = np.asarray(arrival_s, np.float64)
    n = int((~np.isnan(arr_all)).sum())
    rejected = (
        np.asarray(status) == RequestStatus.REJECTED if status is not None else np.zeros(arr_all.shape, bool)
    )
    failed = np.zeros(arr_all.shape, bool)
    for i, why in (reasons or {}).items():
        if why.startswith("failed:") and i < failed.size:
            failed[i] = True
    keep = ~np.isnan(arr_all) & ~rejected & ~failed
    num_rejected, num_failed = int(rejected.sum()), int(failed.sum())
    refused = []
    if num_rejected:
        refused.append(
            f"{num_rejected:,} of {n:,} requests were rejected"
            f"{_first_reason(reasons, np.flatnonzero(rejected))}"
        )
    if num_failed:
        refused.append(f"{num_failed:,} failed with their replica")
    arr = arr_all[keep]
    if arr.size < 8:
        if refused:
            return _cannot_judge(
                "; ".join(refused) + f", leaving {arr.size} to judge a queue on",
                "rejections" if num_rejected >= num_failed else "failures",
            )
        return _cannot_judge("too few requests to judge")
    if float(arr.max() - arr.min()) <= 0:
        return _cannot_judge(
            f"all {arr.size:,} requests arrived at once (t = {arr[0]:.3g} s): there is no "
            "arrival rate for service to keep up with; the latencies measure draining "
            "one burst",
            "burst",
        )
    first = np.asarray(first_scheduled_s, np.float64)[keep]
    done = np.asarray(finished_s, np.float64)[keep]
    a0, a1 = float(arr.min()), float(arr.max())
    at = a0 + (a1 - a0) * np.arange(1, NUM_SAMPLES + 1) / NUM_SAMPLES
    arrived = _count_by(arr, at)
    in_system = arrived - _count_by(done, at)
    waiting = arrived - _count_by(first, at)
    q, h = NUM_SAMPLES // 4, NUM_SAMPLES // 2
    start, end = int(in_system[q - 1]), int(in_system[-1])
    growth = end - start
    need = max(10, GROWTH_SHARE * arr.size)
    rise = float(np.median(in_system[h:]) - np.median(in_system[:h]))
    half = np.array([(a0 + a1) / 2, a1])
    arrived_h = _count_by(arr, half)
    finished_h = _count_by(done, half)
    span = (a1 - a0) / 2
    arrival_rps = float(arrived_h[1] - arrived_h[0]) / span
    served_rps = float(finished_h[1] - finished_h[0]) / span
    grows = growth >= need and rise >= need / 2
    lags = served_rps < RATE_SHARE * arrival_rps
    stopped = served_rps == 0 and (num_replica_failures > 0 or num_failed > 0)
    saturated = grows and lags and not stopped
    evidence = {
        "sample_s": [float(x) for x in at],
        "num_waiting": [int(x) for x in waiting],
        "num_in_system": [int(x) for x in in_system],
        "in_system_growth": growth,
        "arrival_rate_rps": arrival_rps,
        "served_rate_rps": served_rps,
        "window_s": [a0, a1],
        "num_rejected": num_rejected,
        "num_failed": num_failed,
    }
    aside = f" ({'; '.join(refused)}, not counted)" if refused else ""
    if stopped and grows:
        verdict, cause = "not_saturated", "failures"
        hint = (
            f"service stopped, not overloaded: no request finished in the second half of the arrivals "
            f"after {num_replica_failures} replica failure(s); requests in the system grew from "
            f"{start} to {end} waiting for a replica{aside}"
        )
    elif saturated:
        verdict, cause = "saturated", "queue"
        cap = f"; this deployment sustains about {capacity_rps:.3g} req/s" if capacity_rps else ""
        hint = (
            f"arrivals ({arrival_rps:.3g} req/s) outpace service ({served_rps:.3g} req/s): requests in "
            "the "
            f"system grew from {start} to {end} during arrivals{cap}; latency "
            "figures measure the queue and grow with the run's length. Lower the rate "
            f"(workload.rate_scale) or add replicas or GPUs{aside}"
        )
    else:
        verdict, cause = "not_saturated", None
        hint = f"the queue stays bounded: service keeps up with arrivals{aside}"
    return {
        "saturated": saturated,
        "latency_is_queue_artefact": saturated,
        "verdict": verdict,
        "cause": cause,
        "evidence": evidence,
        "hint": hint,
    }
