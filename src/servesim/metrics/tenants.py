"""The ``tenants`` section of the summary: per-tenant counts, rejections, served tokens,
latency, SLO attainment and goodput, and fairness figures (docs/metrics.md, Tenants).

Served tokens count what the engine computed for a tenant: the prompt of every request
that was scheduled and every output token sampled (finished or not). A tenant's
*service* is VTC's cost of them, ``(w_p x input + w_q x output) / weight``. Jain's index
is over the tenants' service, ``(sum x)^2 / (k sum x^2)``: 1 when every tenant received
the same weighted service, 1/k when one received it all; it measures fairness as VTC
defines it only when every tenant asks for more than its share (backlogged).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.records import RequestStatus, Result
from servesim.metrics.stats import distribution, meets_limit, ratio


def jain_index(x: list[float]) -> float | None:
    """Jain's fairness index of ``x`` (None when empty or all zero)."""
    a = np.asarray(x, np.float64)
    sq = float((a * a).sum())
    return None if a.size == 0 or sq == 0 else float(a.sum()) ** 2 / (a.size * sq)


def tenant_summary(
    result: Result,
    span_s: float | None,
) -> dict[str, Any]:
    """The section, with the summary's distributions and SLO rule (``metrics.stats``)."""
    t = result.tenants
    assert t is not None
    rec = result.records
    ids = t["tenant"]
    w_in, w_out = t["vtc_weights"]
    scen_slo = result.scenario.slo
    finished = rec.status == RequestStatus.FINISHED
    scheduled = ~np.isnan(rec.first_scheduled_s)
    per: dict[str, Any] = {}
    service: list[float] = []
    for k, name in enumerate(t["names"]):
        mine = ids == k
        n = int(mine.sum())
        done = mine & finished
        num_in = int(rec.num_prompt_tokens[mine & scheduled].sum())
        num_out = int(rec.num_output_tokens[mine].sum())
        weighted = (w_in * num_in + w_out * num_out) / t["weights"][k]
        service.append(weighted)
        slo = t["slos"][k] if t["slos"][k] is not None else scen_slo
        limits = slo.limits() if slo is not None else {}
        good = done.copy()
        for metric, limit in limits.items():
            good &= meets_limit(rec, metric, limit)
        rejected = {kind: c for (tid, kind), c in sorted(t["rejected"].items()) if tid == k}
        other = int((mine & (rec.status == RequestStatus.REJECTED)).sum()) - sum(rejected.values())
        if other:
            rejected["cannot_fit"] = other  # refused by the engine: too long for the replica
        lim = t["limits"][k]
        per[name] = {
            "weight": t["weights"][k],
            "rate_limit_rps": lim.rate_limit_rps,
            "max_queued": lim.max_queued,
            "num_requests": n,
            "num_finished": int(done.sum()),
            "num_rejected": int((mine & (rec.status == RequestStatus.REJECTED)).sum()),
            "rejected": rejected,
            "served_input_tokens": num_in,
            "served_output_tokens": num_out,
            "service": weighted,
            "ttft_s": _brief(distribution(rec.ttft_s[done])),
            "e2e_s": _brief(distribution(rec.e2e_s[done])),
            "slo_limits": limits,
            "slo_attainment": ratio(int(good.sum()), n),
            "goodput_rps": ratio(int(good.sum()), span_s),
            "counter": None if t["counters"] is None else t["counters"][k],
        }
    return {
        "scheduling_policy": t["policy"],
        "vtc_input_weight": w_in,
        "vtc_output_weight": w_out,
        "per_tenant": per,
        "jain_index": jain_index(service),
        "max_counter_spread": t["max_counter_spread"],
    }


def _brief(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in ("count", "mean", "p50", "p99")}
