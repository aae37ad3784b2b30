"""Llumnix's auto-scaling (Sun et al., OSDI'24, Sec. 4.4.2 and the auto-scaling experiment of
Sec. 6): up to 36% cost saving at similar tail latency against INFaaS++, because Llumnix
scales in by migrating a terminating instance's requests away (its virtual usage is
infinite) instead of waiting for them to finish, and its migration keeps the instances
de-fragmented.

Here: LLaMA-7B's shape on A10s (``llumnix.A10``), vLLM V0's engine, power-law lengths
(Pareto, mean 256, at most 1,024 each), Gamma arrivals at 6 req/s with CV 2, 4 and 8 (the
paper varies the CV; --quick: 4 and 8), 8,000 requests (--quick: 4,000). Both systems
dispatch with the ``llumnix`` router and scale a pool of 1-16 instances (4 at the start) on
Llumnix's average freeness every 10 s (``metric: freeness``: out below 10, in above 60 free
blocks per request, the artifact's ``SCALE_UP_THRESHOLD`` -10 and ``SCALE_DOWN_THRESHOLD``
-60, ``SCALING_INTERVAL`` 10; no grace), cold starts as servesim's defaults (30 s plus the
weights at 2 GB/s). INFaaS++ drains a replica scaled in until its requests finish; Llumnix
migrates them away (``migration.load: freeness``: a draining replica is infinitely loaded).

"Similar tail latency": the saving is read at equal P99 TTFT, the way a cost-latency trade
is read: Llumnix runs with a scale-out threshold of 10, 6, 4, 2 and 1 free blocks per
request (scale-in 50 above it), and the cheapest whose P99 TTFT is at most INFaaS++'s (at
10 and 60) gives the saving, 1 - its mean instances / INFaaS++'s; the figure is the largest
over the CVs. (servesim's reading: the paper's text states the saving, not how its
thresholds were set.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.papers.base import Outcome, Paper, around
from servesim.papers.llumnix import A10, LLAMA_7B_LEN

RATE = 6.0
#: Llumnix's scale-out thresholds swept (free blocks per request); scale-in is 50 above.
SCALE_OUT = (10.0, 6.0, 4.0, 2.0, 1.0)
BAND = 50.0


def scenario(cv: float, n: int, llumnix: bool, scale_out: float) -> dict[str, Any]:
    rule = {
        "pool": "c",
        "metric": "freeness",
        "target": scale_out,
        "scale_in_above": scale_out + BAND,
        "min_replicas": 1,
        "max_replicas": 16,
        "scale_in_grace_s": 0.0,
    }
    return {
        "name": f"llumnix-{'scaling' if llumnix else 'infaas++'}",
        "model": {"name": "Llama-2-7B"},
        "hardware": {"gpu": A10},
        "engine": {"policy": "vllm_v0", "max_model_len": LLAMA_7B_LEN},
        "workload": {
            "type": "synthetic",
            "seed": 1,
            "num_requests": n,
            "arrival": {"process": "gamma", "rate": RATE, "cv": cv},
            "prompt_len": {"kind": "pareto", "alpha": 2.0, "scale": 128, "max": 1024},
            "output_len": {"kind": "pareto", "alpha": 2.0, "scale": 128, "max": 1024},
        },
        "cluster": {
            "router": "llumnix",
            "pools": [{"name": "c", "num_replicas": 4}],
            "migration": {"enabled": llumnix, "interval_s": 0.05, "load": "freeness"},
            "operations": {
                "interval_s": 10.0,
                # INFaaS++ waits for a drained replica's requests, however long they run.
                "autoscaling": {"pools": [rule], "drain_timeout_s": 3600.0},
            },
        },
    }


def drain_share(result: Any) -> float:
    """The share of the instance-time that replicas scaled in spent draining, bounded from
    above per replica: one stopped before the run's end drained at most from the last request
    routed to it to its stop (no request moves in by migration under INFaaS++), summed over
    such replicas, over all replicas' provisioned time. A draining replica taken back into
    service at a scale-out (no cold start) is not stopped, and its drain is not counted."""
    rec, reps = result.records, result.replicas
    end = float(np.nanmax(rec.finished_s))
    held = sum(r.provisioned_s for r in reps if r.provisioned_s > 0)
    draining = 0.0
    for i, r in enumerate(reps):
        stop = r.provisioned_from_s + r.provisioned_s
        mine = rec.arrival_s[rec.replica == i]
        if r.provisioned_s > 0 and stop < end and len(mine):
            draining += max(stop - float(mine.max()), 0.0)
    return draining / held if held > 0 else 0.0


def measure(cv: float, n: int, llumnix: bool, scale_out: float) -> dict[str, Any]:
    from servesim.sim import simulate

    res = simulate(scenario(cv, n, llumnix, scale_out))
    s = res.summary
    return {
        "system": "llumnix" if llumnix else "infaas++",
        "cv": cv,
        "scale_out_below": scale_out,
        "mean_instances": s["utilization"]["overall"]["mean_replicas"],
        "ttft_p99_s": s["latency"]["ttft_s"]["p99"],
        "e2e_p99_s": s["latency"]["e2e_s"]["p99"],
        "drain_share": None if llumnix else drain_share(res),
    }


def run(quick: bool) -> Outcome:
    n = 4000 if quick else 8000
    rows: list[dict[str, Any]] = []
    savings, notes = {}, []
    for cv in (4.0, 8.0) if quick else (2.0, 4.0, 8.0):
        base = measure(cv, n, False, SCALE_OUT[0])
        runs = [measure(cv, n, True, up) for up in SCALE_OUT]  # runs[0]: INFaaS++'s thresholds
        rows += [base, *runs]
        fits = [r for r in runs if r["ttft_p99_s"] <= base["ttft_p99_s"]]
        cheapest = min(fits, key=lambda r: r["mean_instances"], default=None)
        savings[cv] = (
            0.0 if cheapest is None else 100 * (1 - cheapest["mean_instances"] / base["mean_instances"])
        )
        found = (
            f"cheapest at most INFaaS++'s P99: scale out below {cheapest['scale_out_below']:g}, "
            f"{cheapest['mean_instances']:.2f} instances ({savings[cv]:.1f}% saved)"
            if cheapest is not None
            else "no threshold reaches INFaaS++'s P99"
        )
        notes.append(
            f"CV {cv:g}: INFaaS++ {base['mean_instances']:.2f} instances, P99 TTFT "
            f"{base['ttft_p99_s']:.1f} s, its stopped replicas draining at most "
            f"{100 * base['drain_share']:.1f}% of its instance-time; Llumnix at the same "
            f"thresholds {runs[0]['mean_instances']:.2f}, "
            f"{runs[0]['ttft_p99_s']:.1f} s; {found}"
        )
    best = max(savings, key=savings.__getitem__)
    return Outcome({"cost_saving": savings[best]}, rows, notes)


#: The paper's headline, setup and figures (``servesim reproduce llumnix-cost``).
PAPER = Paper(
    "llumnix-cost",
    "Llumnix",
    "Sun et al., Llumnix: Dynamic Scheduling for Large Language Model Serving, OSDI'24, Sec. 4.4.2 "
    "(terminating instances) and Sec. 6 (auto-scaling)",
    "up to 36% cost saving at similar tail latency, by scaling in through migration",
    {
        "model": "LLaMA-7B",
        "gpus": "A10 (24 GB) instances, auto-scaled",
        "workload": "generated length distributions, Poisson and Gamma arrivals of varying CV",
        "slo": "similar P99 latency",
        "baseline": "INFaaS++ (the same load-based scaling; scale-in waits for the requests to finish)",
        "metric": "average number of instances, 1 - Llumnix / INFaaS++",
    },
    (
        around(
            "cost_saving",
            "instances saved at no higher P99 TTFT (largest over the CVs)",
            "up to 36%",
            36.0,
            "%",
        ),
    ),
    "Llama-2-7B (2,048 positions) on 1-16 A10s scaled on the average freeness every 10 s (out below 10, "
    "in above 60 free blocks per request, the artifact's thresholds), vLLM V0, Gamma arrivals at 6 "
    "req/s with CV 2, 4, 8 (--quick: 4, 8), Pareto lengths (mean 256), 8,000 requests (--quick: "
    "4,000); the saving at equal P99 TTFT: Llumnix's cheapest scale-out threshold (10, 6, 4, 2, 1) "
    "whose P99 TTFT is at most INFaaS++'s.",
    run,
    "Out of range (13.7% quick, 17.2% full): INFaaS++'s stopped replicas drain for at most the share "
    "of its instance-time printed above (4.3-9.2% quick, 1.7-8.4% full; the drained replica is the one "
    "with the fewest requests, and a request lasts at most about 40 s at LLaMA-7B's 2,048 positions), "
    "so scaling in by migration saves at most that by itself; the saving is Llumnix's lower P99 TTFT "
    "traded for a lower scale-out threshold.",
)
