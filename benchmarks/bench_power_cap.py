"""Benchmark: POLCA-style power oversubscription. A row's power budget is the nameplate
(TDP) of N servers' GPUs; put M > N servers in it, each with the same load per server,
and cap the clock of the low-priority pool above ``cap_low_at`` of the budget and of
every pool above ``cap_all_at``. Prints mean and peak row power, the control intervals over
budget (share and seconds), the cap changes, and the latency cost against the N-server row.

Servers: Llama-3.1-70B on 4 A100s each (half the servers in a high-priority pool, half
in a low-priority one, routed as one set); a gamma process (CV 2) of lognormal lengths.

    python benchmarks/bench_power_cap.py                  # 4 servers' budget, 5 servers
    python benchmarks/bench_power_cap.py --servers 6      # 50 % more
    python benchmarks/bench_power_cap.py --hysteresis 0.05  # a band narrower than a cap's saving: flips
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from servesim.papers import polca
from servesim.papers.polca import GPUS_PER_SERVER, TDP_A100_W


def scenario(
    num_servers: int,
    budget_w: float | None,
    *,
    rate_per_server: float = 1.8,
    duration_s: float = 300.0,
    seed: int = 2,
    hysteresis: float | None = None,
) -> dict[str, Any]:
    """POLCA's row (``servesim reproduce polca``'s scenario); ``hysteresis``: the capper's
    band (None: the scenario default, 0.1 of the budget)."""
    return polca.scenario(num_servers, budget_w, duration_s, rate_per_server, seed, hysteresis)


def measure(sc: dict[str, Any], budget_w: float, progress: bool = False) -> dict[str, Any]:
    import servesim

    t0 = time.perf_counter()
    r = servesim.simulate(sc, progress=progress)
    s = r.summary
    cols = r.timeseries.columns()
    row_w = np.array([sum(cols["power_w"][cols["t_s"] == t]) for t in np.unique(cols["t_s"])])
    lat = s["latency"]
    over = row_w > budget_w
    # The row's intervals over the budget: how many, and for how long (the last may be short).
    t = np.unique(cols["t_s"])
    dt = np.diff(np.append(t, r.end_s))
    return {
        "name": sc["name"],
        "mean_power_w": float(row_w.mean()),
        "peak_power_w": float(row_w.max()),
        "over_budget": float(over.mean()),
        "num_intervals_over_budget": int(over.sum()),
        "over_budget_s": float(dt[over].sum()),
        "num_cap_changes": s["operations"]["num_cap_changes"],
        "slo_attainment": s["slo"]["attainment"]["all"],
        "ttft_p50_s": lat["ttft_s"]["p50"],
        "ttft_p99_s": lat["ttft_s"]["p99"],
        "tpot_p50_s": lat["tpot_s"]["p50"],
        "tpot_p99_s": lat["tpot_s"]["p99"],
        "capped_s": s["operations"]["capped_s"],
        "wall_s": time.perf_counter() - t0,
    }


def compare(
    budget_servers: int = 4,
    servers: int = 5,
    progress: bool = False,
    hysteresis: float | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """The N-server row, M servers uncapped, M servers capped, under N servers' nameplate."""
    budget = budget_servers * GPUS_PER_SERVER * TDP_A100_W
    return [
        measure(scenario(budget_servers, None, **kw), budget, progress),
        measure(scenario(servers, None, **kw), budget, progress),
        measure(scenario(servers, budget, hysteresis=hysteresis, **kw), budget, progress),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-servers", type=int, default=4, help="the budget: this many servers' GPU TDP")
    ap.add_argument("--servers", type=int, default=5, help="servers put under the budget")
    ap.add_argument("--rate-per-server", type=float, default=1.8)
    ap.add_argument("--duration-s", type=float, default=300.0)
    ap.add_argument(
        "--hysteresis",
        type=float,
        default=None,
        help="the capper's band, fraction of the budget (default: the scenario's, 0.1)",
    )
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args()
    rows = compare(
        a.budget_servers,
        a.servers,
        not a.no_progress,
        hysteresis=a.hysteresis,
        rate_per_server=a.rate_per_server,
        duration_s=a.duration_s,
    )
    budget = a.budget_servers * GPUS_PER_SERVER * TDP_A100_W
    print(
        f"budget {budget:.0f} W ({a.budget_servers} servers' GPU TDP); {a.servers} servers is "
        f"{a.servers / a.budget_servers - 1:.0%} more"
    )
    print(
        f"{'row':<18}{'mean W':>8}{'peak W':>8}{'over':>7}{'over s':>8}{'changes':>8}{'SLO':>7}"
        f"{'TTFT p50':>9}{'p99':>7}{'TPOT p50':>9}{'p99':>7}"
    )
    for r in rows:
        print(
            f"{r['name']:<18}{r['mean_power_w']:>8.0f}{r['peak_power_w']:>8.0f}{r['over_budget']:>7.1%}"
            f"{r['over_budget_s']:>8.0f}{r['num_cap_changes']:>8}"
            f"{r['slo_attainment']:>7.3f}{r['ttft_p50_s']:>9.3f}{r['ttft_p99_s']:>7.2f}"
            f"{r['tpot_p50_s']:>9.4f}{r['tpot_p99_s']:>7.3f}"
        )


if __name__ == "__main__":
    main()
