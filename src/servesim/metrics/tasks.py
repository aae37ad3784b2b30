"""End-to-end latency of tasks: a session or an agent run is done when its last request is.

A task's latency runs from its start (the session's or the task's arrival) to the finish
of the last of its requests; a task with a request that did not finish (rejected, or
still running at the end) has no latency and is counted as unfinished.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.records import RequestRecords, RequestStatus

PERCENTILES = (50, 90, 99)


def task_latencies(records: RequestRecords, task: np.ndarray, start_s: np.ndarray) -> np.ndarray:
    """Per task: finish of its last request - its start (NaN: not every request finished)."""
    n_tasks = len(start_s)
    end = np.full(n_tasks, -np.inf)
    np.maximum.at(end, task, np.where(records.status == RequestStatus.FINISHED, records.finished_s, np.inf))
    end[~np.isfinite(end)] = np.nan
    has_rows = np.bincount(task, minlength=n_tasks) > 0
    end[~has_rows] = np.nan
    return end - start_s


def task_summary(records: RequestRecords, task: np.ndarray, start_s: np.ndarray) -> dict[str, Any]:
    lat = task_latencies(records, task, start_s)
    done = lat[np.isfinite(lat)]
    out: dict[str, Any] = {
        "num_tasks": int(len(lat)),
        "num_finished": int(len(done)),
        "requests_per_task": float(len(task) / len(lat)) if len(lat) else 0.0,
    }
    if len(done):
        out["latency_s"] = {
            "mean": float(done.mean()),
            "max": float(done.max()),
            **{f"p{q}": float(np.percentile(done, q)) for q in PERCENTILES},
        }
    return out
