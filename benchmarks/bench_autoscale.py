"""Benchmark: a diurnal day on Llama-3.1-70B (TP 4, A100), autoscaled vs a static fleet
sized for the peak. Prints, for each fleet, SLO attainment, TTFT/TPOT p99, GPU-hours held,
energy per output token, replicas started and held at most and on average, and the saving
of an ideal fleet that follows the rate curve in whole replicas; the autoscaled fleet
should hold attainment while cutting GPU-hours.

The workload: a gamma process (CV 2: bursty within the hour) whose rate follows a
diurnal cosine (trough 0.3 of the peak at 02:00, peak at 14:00) over ``--day-s``, with
lognormal prompt and output lengths. The default is a real day (86,400 s, about 900,000
requests at a peak of 16 req/s) with real control times: a 60 s interval, 10 minutes of
scale-in grace, a cold start of 60 s plus the 35 GB weight shard per GPU at 2 GB/s.
``--compressed`` runs the older compressed day instead (480 s stand for 24 h, the control
times compressed with it, request lifetimes not, which is harder on the autoscaler).

    python benchmarks/bench_autoscale.py                  # the real day (minutes)
    python benchmarks/bench_autoscale.py --compressed     # 480 s for 24 h
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np

SLO = {"ttft_s": 2.0, "tpot_s": 0.1}


REAL_DAY = {
    "day_s": 86400.0,
    "interval_s": 60.0,
    "grace_s": 600.0,
    "target_running": 24.0,
    "load_gb_per_s": 2.0,
    "startup_s": 60.0,
}
COMPRESSED_DAY = {
    "day_s": 480.0,
    "interval_s": 2.0,
    "grace_s": 10.0,
    "target_running": 32.0,
    "load_gb_per_s": 20.0,
    "startup_s": 0.0,
}
TROUGH = 0.3  # of the peak


def scenario(
    num_replicas: int,
    autoscale: bool,
    *,
    day_s: float = 86400.0,
    peak_rate: float = 16.0,
    interval_s: float = 60.0,
    grace_s: float = 600.0,
    target_running: float = 24.0,
    load_gb_per_s: float = 2.0,
    startup_s: float = 60.0,
    seed: int = 1,
) -> dict[str, Any]:
    """The day's scenario: a static fleet of ``num_replicas``, or autoscaled between 1 and it."""
    ops: dict[str, Any] = {"interval_s": interval_s}
    if autoscale:
        ops["autoscaling"] = {
            "pools": [
                {
                    "pool": "c",
                    "metric": "running",
                    "target": target_running,
                    "min_replicas": 1,
                    "max_replicas": num_replicas,
                    "scale_in_grace_s": grace_s,
                }
            ],
            "startup_s": startup_s,
            "load_gb_per_s": load_gb_per_s,
        }
    return {
        "name": f"diurnal-{'autoscaled' if autoscale else 'static'}-{num_replicas}",
        "model": {"name": "Llama-3.1-70B"},
        "hardware": {"gpu": "A100-80GB"},
        "parallel": {"tensor_parallel_size": 4},
        "workload": {
            "type": "synthetic",
            "seed": seed,
            "num_requests": int(peak_rate * 0.65 * day_s),  # the mean rate of the cosine is 0.65 x peak
            "arrival": {
                "process": "gamma",
                "cv": 2.0,
                "rate": peak_rate,
                "rate_profile": {
                    "shape": "diurnal",
                    "period_s": day_s,
                    "peak": 1.0,
                    "trough": TROUGH,
                    "peak_at_s": day_s * 14 / 24,
                },
            },
            "prompt_len": {"kind": "lognormal", "mean": 1000, "std": 800, "max": 6000},
            "output_len": {"kind": "lognormal", "mean": 200, "std": 150, "max": 1500},
        },
        "slo": SLO,
        "run": {"record_steps": False},
        "cluster": {
            "router": "least_outstanding",
            "pools": [{"name": "c", "num_replicas": 2 if autoscale else num_replicas}],
            "operations": ops,
        },
    }


def measure(sc: dict[str, Any], progress: bool = False) -> dict[str, Any]:
    import servesim

    t0 = time.perf_counter()
    s = servesim.simulate(sc, progress=progress).summary
    return {
        "name": sc["name"],
        "slo_attainment": s["slo"]["attainment"]["all"],
        "ttft_p99_s": s["latency"]["ttft_s"]["p99"],
        "tpot_p99_s": s["latency"]["tpot_s"]["p99"],
        "gpu_hours": s["operations"]["gpu_hours"],
        "j_per_output_token": s["energy"]["j_per_output_token"],
        "replicas_started": s["operations"]["num_replicas_started"],
        "peak_replicas": sum(s["operations"]["peak_replicas"].values()),
        "mean_replicas": sum(s["operations"]["mean_replicas"].values()),
        "wall_s": time.perf_counter() - t0,
    }


def ideal_follower_saving(num_replicas: int, trough: float = TROUGH, samples: int = 86400) -> float:
    """GPU-hours saved by a fleet that follows the cosine in whole replicas, ceil(N m(t)),
    against N all day (no cold starts, no grace, no bursts): 1 - mean(ceil(N m)) / N."""
    t = (np.arange(samples) + 0.5) / samples
    m = (1 + trough) / 2 + (1 - trough) / 2 * np.cos(2 * math.pi * t)
    return float(1 - np.ceil(num_replicas * m - 1e-9).mean() / num_replicas)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compressed", action="store_true", help="480 s for 24 h, control times compressed")
    ap.add_argument("--day-s", type=float, default=None)
    ap.add_argument("--peak-rate", type=float, default=16.0, help="requests/s at the daily peak")
    ap.add_argument("--static-replicas", type=int, default=6, help="the static fleet (sized for the peak)")
    for name in ("interval-s", "grace-s", "target-running", "load-gb-per-s", "startup-s"):
        ap.add_argument(f"--{name}", type=float, default=None)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    a = ap.parse_args()
    kw: dict[str, Any] = dict(COMPRESSED_DAY if a.compressed else REAL_DAY)
    for key in kw:
        if getattr(a, key) is not None:
            kw[key] = getattr(a, key)
    kw["peak_rate"] = a.peak_rate
    rows = [
        measure(scenario(a.static_replicas, False, **kw), not a.no_progress),
        measure(scenario(a.static_replicas, True, **kw), not a.no_progress),
    ]
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'fleet':<24}{'SLO att.':>9}{'TTFT p99':>10}{'TPOT p99':>10}{'GPU-h':>8}{'J/tok':>7}"
        f"{'started':>8}{'peak':>5}{'mean':>6}{'wall s':>8}"
    )
    for r in rows:
        print(
            f"{r['name']:<24}{r['slo_attainment']:>9.3f}{r['ttft_p99_s']:>10.2f}{r['tpot_p99_s']:>10.3f}"
            f"{r['gpu_hours']:>8.3f}{r['j_per_output_token']:>7.2f}{r['replicas_started']:>8}"
            f"{r['peak_replicas']:>5}{r['mean_replicas']:>6.2f}{r['wall_s']:>8.1f}"
        )
    print(
        f"GPU-hours saved by autoscaling: {1 - rows[1]['gpu_hours'] / rows[0]['gpu_hours']:.1%}; "
        f"by an ideal whole-replica follower: {ideal_follower_saving(a.static_replicas):.1%}"
    )


if __name__ == "__main__":
    main()
