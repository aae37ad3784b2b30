"""The ``models`` section of the summary: per model a cluster serves (``cluster.models``),
its requests, rejections, TTFT/TPOT/E2E percentiles, SLO attainment, goodput and GPUs;
a name no pool serves gets a row too (all its requests rejected, no GPUs).

SLO attainment is over all of the model's requests, as the run's (``summary._slo``):
unfinished and rejected ones miss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.records import RequestStatus, Result
from servesim.metrics.stats import distribution, meets_limit, ratio


def model_summary(
    result: Result,
    span_s: float | None,
) -> dict[str, Any]:
    """The section, with the summary's distributions and SLO rule (``metrics.stats``)."""
    m = result.models
    assert m is not None
    rec = result.records
    ids = np.asarray(m["name_id"], np.int64)
    ids = ids[len(ids) - len(rec) :]  # a benchmark's measured run: its last rows
    names: list[str] = m["names"]
    limits = result.scenario.slo.limits()
    finished = rec.status == RequestStatus.FINISHED
    rejected = rec.status == RequestStatus.REJECTED
    # The names requests gave, grouped: the default name's id (-1) with the same name's.
    by_name: dict[str, np.ndarray] = {}
    for k, name in enumerate(names):
        mine = ids == (k if k < len(names) - 1 else -1)
        if name in by_name:
            by_name[name] = by_name[name] | mine
        else:
            by_name[name] = mine
    per: dict[str, Any] = {}
    for name in [*m["served"], *(n for n in by_name if n not in m["served"])]:
        mine = by_name.get(name, np.zeros(len(rec), bool))
        n = int(mine.sum())
        if n == 0 and name not in m["served"]:
            continue
        done = mine & finished
        good = done.copy()
        for metric, limit in limits.items():
            good &= meets_limit(rec, metric, limit)
        pools = m["pools"].get(name, [])
        per[name] = {
            "model": m["model"].get(name),
            "pools": [p["name"] for p in pools],
            "num_replicas": sum(p["num_replicas"] for p in pools),
            "num_gpus": sum(p["num_gpus"] for p in pools),
            "num_requests": n,
            "num_finished": int(done.sum()),
            "num_rejected": int((mine & rejected).sum()),
            "num_output_tokens": int(rec.num_output_tokens[done].sum()),
            "ttft_s": _brief(distribution(rec.ttft_s[done])),
            "tpot_s": _brief(distribution(rec.tpot_s[done])),
            "e2e_s": _brief(distribution(rec.e2e_s[done])),
            "slo_limits": limits,
            "slo_attainment": ratio(int(good.sum()), n),
            "goodput_rps": ratio(int(good.sum()), span_s),
        }
    return {"per_model": per}


def _brief(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in ("count", "mean", "p50", "p99")}
