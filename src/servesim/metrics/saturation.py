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

from dataclasses import dataclass
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
    judged = _judged(arr_all, status, reasons)
    arr = arr_all[judged.keep]
    if (why_not := _cannot_judge_queue(arr, judged)) is not None:
        return why_not
    first = np.asarray(first_scheduled_s, np.float64)[judged.keep]
    done = np.asarray(finished_s, np.float64)[judged.keep]
    q = _queue(arr, first, done)
    grows = q.growth >= q.need and q.rise >= q.need / 2
    lags = q.served_rps < RATE_SHARE * q.arrival_rps
    stopped = q.served_rps == 0 and (num_replica_failures > 0 or judged.num_failed > 0)
    saturated = grows and lags and not stopped
    evidence = {
        "sample_s": [float(x) for x in q.at],
        "num_waiting": [int(x) for x in q.waiting],
        "num_in_system": [int(x) for x in q.in_system],
        "in_system_growth": q.growth,
        "arrival_rate_rps": q.arrival_rps,
        "served_rate_rps": q.served_rps,
        "window_s": [q.a0, q.a1],
        "num_rejected": judged.num_rejected,
        "num_failed": judged.num_failed,
    }
    verdict, cause, hint = _verdict(q, judged, grows, saturated, stopped, capacity_rps, num_replica_failures)
    return {
        "saturated": saturated,
        "latency_is_queue_artefact": saturated,
        "verdict": verdict,
        "cause": cause,
        "evidence": evidence,
        "hint": hint,
    }


def _verdict(
    q: _Queue,
    judged: _Judged,
    grows: bool,
    saturated: bool,
    stopped: bool,
    capacity_rps: float | None,
    num_replica_failures: int,
) -> tuple[str, str | None, str]:
    """The verdict, its cause and the hint that explains it."""
    aside = f" ({'; '.join(judged.refused)}, not counted)" if judged.refused else ""
    if stopped and grows:
        verdict, cause = "not_saturated", "failures"
        hint = (
            f"service stopped, not overloaded: no request finished in the second half of the arrivals "
            f"after {num_replica_failures} replica failure(s); requests in the system grew from "
            f"{q.start} to {q.end} waiting for a replica{aside}"
        )
    elif saturated:
        verdict, cause = "saturated", "queue"
        cap = f"; this deployment sustains about {capacity_rps:.3g} req/s" if capacity_rps else ""
        hint = (
            f"arrivals ({q.arrival_rps:.3g} req/s) outpace service ({q.served_rps:.3g} req/s): requests in "
            "the "
            f"system grew from {q.start} to {q.end} during arrivals{cap}; latency "
            "figures measure the queue and grow with the run's length. Lower the rate "
            f"(workload.rate_scale) or add replicas or GPUs{aside}"
        )
    else:
        verdict, cause = "not_saturated", None
        hint = f"the queue stays bounded: service keeps up with arrivals{aside}"
    return verdict, cause, hint


@dataclass(slots=True)
class _Judged:
    """Which requests the queue is judged on (``keep``), and those set apart: rejected by the
    engine, or lost with a failed replica (``refused``: what the hint says of them)."""

    keep: np.ndarray  # bool per row
    num_rejected: int
    num_failed: int
    refused: list[str]


def _judged(arr_all: np.ndarray, status: np.ndarray | None, reasons: dict[int, str] | None) -> _Judged:
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
    return _Judged(keep, num_rejected, num_failed, refused)


def _cannot_judge_queue(arr: np.ndarray, judged: _Judged) -> dict[str, Any] | None:
    """The "cannot_judge" verdict where the judged arrivals (``arr``) are too few or all at
    one instant; None where a queue can be judged on them."""
    if arr.size < 8:
        if judged.refused:
            return _cannot_judge(
                "; ".join(judged.refused) + f", leaving {arr.size} to judge a queue on",
                "rejections" if judged.num_rejected >= judged.num_failed else "failures",
            )
        return _cannot_judge("too few requests to judge")
    if float(arr.max() - arr.min()) <= 0:
        return _cannot_judge(
            f"all {arr.size:,} requests arrived at once (t = {arr[0]:.3g} s): there is no "
            "arrival rate for service to keep up with; the latencies measure draining "
            "one burst",
            "burst",
        )
    return None


@dataclass(slots=True)
class _Queue:
    """The queue over the arrival window ``[a0, a1]``: in the system and waiting at each
    sample instant ``at``, its growth from the end of the first quarter (``start``) to the
    end (``end``), the growth that counts (``need``), the rise of its median from the first
    half to the second, and the arrival and served rates over the second half."""

    a0: float
    a1: float
    at: np.ndarray
    waiting: np.ndarray
    in_system: np.ndarray
    start: int
    end: int
    growth: int
    need: float
    rise: float
    arrival_rps: float
    served_rps: float


def _queue(arr: np.ndarray, first: np.ndarray, done: np.ndarray) -> _Queue:
    a0, a1 = float(arr.min()), float(arr.max())
    at = a0 + (a1 - a0) * np.arange(1, NUM_SAMPLES + 1) / NUM_SAMPLES
    arrived = _count_by(arr, at)
    in_system = arrived - _count_by(done, at)
    waiting = arrived - _count_by(first, at)
    q, h = NUM_SAMPLES // 4, NUM_SAMPLES // 2
    start, end = int(in_system[q - 1]), int(in_system[-1])
    need = max(10, GROWTH_SHARE * arr.size)
    rise = float(np.median(in_system[h:]) - np.median(in_system[:h]))
    half = np.array([(a0 + a1) / 2, a1])
    arrived_h = _count_by(arr, half)
    finished_h = _count_by(done, half)
    span = (a1 - a0) / 2
    arrival_rps = float(arrived_h[1] - arrived_h[0]) / span
    served_rps = float(finished_h[1] - finished_h[0]) / span
    return _Queue(
        a0, a1, at, waiting, in_system, start, end, end - start, need, rise, arrival_rps, served_rps
    )
