"""Llumnix (Sun et al., "Llumnix: Dynamic Scheduling for Large Language Model Serving",
OSDI'24): live migration of running requests between instances (de-fragmenting KV memory,
relieving the loaded instance) cuts tail latencies by an order of magnitude against INFaaS++,
a load-aware dispatcher without migration, over a sweep of request rates with LLaMA-7B on 16
A10 instances.

Here: Llama-2-7B on L4s (24 GB-class like the A10; servesim's catalog has no A10), 16
instances, 200 requests per instance (--quick: 100); Gamma arrivals (CV 2) with long-tailed
lengths (lognormal, prompt mean 512, output mean 400 with std 600, up to 3,000); both dispatch
to the instance with the least KV in use (router least_kv, INFaaS++'s load metric); Llumnix
adds migration (servesim's cluster.migration: Llumnix's virtual-usage gap, its pairing of every
loaded instance with an unloaded one, and its 50 ms polling interval, from AlibabaPAI/llumnix
at 24220fb8). The rate is swept across the baseline's knee and the figure is the largest P99
TTFT ratio (the paper's "up to").
"""

from __future__ import annotations

from typing import Any

from servesim.papers.base import Curve, Outcome, Paper, around

#: NVIDIA A10 (24 GB GDDR6, 600 GB/s, 125 dense BF16 TFLOP/s, 150 W, PCIe Gen4 x16) from its
#: spec sheet: Llumnix's GPU, not in servesim's catalog (the priority and cost runs use it).
A10 = {
    "name": "A10",
    "bf16_tflops": 125.0,
    "mem_gb": 24.0,
    "mem_bw_tb_per_s": 0.6,
    "interconnect_gb_per_s": 32.0,
    "idle_power_w": 30.0,
    "max_power_w": 150.0,
}
#: LLaMA-7B's positions (Llama-2-7B has 4,096): a request's prompt and output fit in it.
LLAMA_7B_LEN = 2048

#: Requests per second per instance swept (the baseline's knee on these lengths is ~0.3).
RATES_PER_INSTANCE = (0.25, 0.3, 0.35, 0.4)


def scenario(instances: int, rate: float, migration: bool, n: int) -> dict[str, Any]:
    return {
        "name": f"llumnix-{'migration' if migration else 'infaas++'}",
        "model": {"name": "Llama-2-7B"},
        "hardware": {"gpu": "L4"},
        "workload": {
            "type": "synthetic",
            "seed": 1,
            "num_requests": n,
            "arrival": {"process": "gamma", "cv": 2.0, "rate": rate},
            "prompt_len": {"kind": "lognormal", "mean": 512, "std": 512, "max": 3000},
            "output_len": {"kind": "lognormal", "mean": 400, "std": 600, "max": 3000},
        },
        "cluster": {
            "router": "least_kv",
            "pools": [{"name": "c", "num_replicas": instances}],
            # Llumnix pairs instances for migration at every poll of its manager, every 50 ms
            # (llumnix/config/default.py: MANAGER.POLLING_INTERVAL 0.05, PAIR_MIGRATION_FREQUENCY 1).
            "migration": {"enabled": migration, "interval_s": 0.05},
        },
    }


def run(quick: bool) -> Outcome:
    from servesim.sim import simulate

    instances = 16
    n = (100 if quick else 200) * instances
    rows, ratios = [], []
    for per in RATES_PER_INSTANCE:
        p99 = {}
        for migration in (False, True):
            s = simulate(scenario(instances, per * instances, migration, n)).summary
            lat = s["latency"]
            system = "llumnix" if migration else "infaas++"
            p99[system] = lat["ttft_s"]["p99"]
            rows.append(
                {
                    "system": system,
                    "rate_req_s": per * instances,
                    "ttft_p99_s": lat["ttft_s"]["p99"],
                    "ttft_p50_s": lat["ttft_s"]["p50"],
                    "e2e_p99_s": lat["e2e_s"]["p99"],
                }
            )
        ratios.append(p99["infaas++"] / p99["llumnix"])
    best = max(range(len(ratios)), key=ratios.__getitem__)
    return Outcome(
        {"p99_ratio": ratios[best]},
        rows,
        [
            "P99 TTFT ratio by rate (req/s per instance): "
            + ", ".join(f"{r:g}: {x:.2f}x" for r, x in zip(RATES_PER_INSTANCE, ratios, strict=True))
        ],
    )


#: The paper's headline, setup and figures (``servesim reproduce llumnix``).
PAPER = Paper(
    "llumnix",
    "Llumnix",
    "Sun et al., Llumnix: Dynamic Scheduling for Large Language Model Serving, OSDI'24",
    "tail latencies an order of magnitude lower than state-of-the-art serving (INFaaS++), by live migration",
    {
        "model": "LLaMA-7B, LLaMA-30B",
        "gpus": "A10 (24 GB) instances",
        "workload": "ShareGPT, BurstGPT, generated length distributions, Poisson / Gamma arrivals",
        "slo": "-",
        "baseline": "INFaaS++ (load-balanced dispatch, no migration)",
        "metric": "P99 latency ratio",
    },
    (
        around(
            "p99_ratio",
            "P99 prefill latency, INFaaS++ / Llumnix (largest over the rates)",
            "an order of magnitude",
            10.0,
        ),
    ),
    "Llama-2-7B on L4s (no A10 in the catalog), 16 instances, 200 requests each (--quick: 100), Gamma "
    "(CV 2) arrivals, long-tailed lengths; least-KV dispatch with and without migration (Llumnix's "
    "pairing of loaded with unloaded instances every 50 ms) over 4 rates around the knee.",
    run,
    "servesim's migration moves the decode with the fewest tokens; this run times L4s, not A10s "
    "(the priority and cost runs, llumnix-priority and llumnix-cost, use an A10 from its spec "
    "sheet). The ratio is steep in the rate: migration helps only past the baseline's knee "
    "(0.35-0.4 req/s per instance).",
    curve=Curve(
        "P99 TTFT against the request rate",
        "rate_req_s",
        "ttft_p99_s",
        ("system",),
        "request rate (req/s)",
        "P99 TTFT (s)",
        log_y=True,
    ),
)
