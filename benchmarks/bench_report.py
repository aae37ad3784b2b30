"""Benchmark: ``servesim report`` of a million-request run (records built here, not simulated).

1M requests and 1M steps over an hour on four replicas, written as a run folder beside a real
short simulation's summary; prints how long ``write_report`` takes and the page's size. The
goal is a page in seconds (exit status 1 past ``--bound-s``, default 30 s); the page's size is
a test (tests/test_report.py), its build time only this benchmark, as a loaded machine misses it.

    python benchmarks/bench_report.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SYNTHETIC = (
    "workload={type: synthetic, num_requests: 400, seed: 3, arrival: {process: poisson, rate: 12}, "
    "prompt_len: {kind: lognormal, mean: 900, std: 600, max: 6000}, "
    "output_len: {kind: lognormal, mean: 160, std: 120, max: 1000}}"
)


def big_run(
    small: Path, big: Path, n: int = 1_000_000, n_steps: int = 1_000_000, span: float = 3600.0
) -> None:
    """Write a run folder of ``n`` requests and ``n_steps`` steps, the summary ``small``'s."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, span, n))
    ttft = rng.lognormal(np.log(0.2), 0.8, n)
    n_out = rng.integers(1, 800, n)
    tpot = rng.lognormal(np.log(0.02), 0.3, n)
    req = {
        "arrival_s": arrival,
        "first_scheduled_s": arrival + ttft / 2,
        "first_token_s": arrival + ttft,
        "finished_s": arrival + ttft + tpot * (n_out - 1),
        "num_prompt_tokens": rng.integers(10, 4000, n),
        "num_output_tokens": n_out,
        "num_cached_tokens": np.zeros(n, np.int64),
        "num_preemptions": np.zeros(n, np.int64),
        "replica": rng.integers(0, 4, n),
        "status": np.zeros(n, np.int8),
    }
    replica = np.repeat(np.arange(4), n_steps // 4)
    start = np.tile(np.sort(rng.uniform(0, span, n_steps // 4)), 4)
    steps = {
        "replica": replica,
        "start_s": start,
        "duration_s": np.full(n_steps, 0.0018),
        "num_prefill_tokens": rng.integers(0, 8192, n_steps),
        "num_decode_reqs": rng.integers(0, 256, n_steps),
        "num_running": rng.integers(0, 256, n_steps),
        "num_waiting": rng.integers(0, 50, n_steps),
        "kv_blocks_used": rng.integers(0, 28000, n_steps),
        "num_preempted": np.zeros(n_steps, np.int64),
    }
    big.mkdir()
    pq.write_table(pa.table(req), big / "requests.parquet")
    pq.write_table(pa.table(steps), big / "steps.parquet")
    summary = json.loads((small / "summary.json").read_text())
    summary["counts"] = {**summary["counts"], "num_requests": n, "num_finished": n, "end_s": span}
    summary["utilization"]["replicas"] = summary["utilization"]["replicas"] * 4
    (big / "summary.json").write_text(json.dumps(summary))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bound-s", type=float, default=30.0, help="the most write_report may take")
    a = ap.parse_args()
    from servesim.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "servesim",
                "simulate",
                "--set",
                SYNTHETIC,
                "--no-progress",
                "-q",
                "-o",
                str(small),
            ],
            check=True,
        )
        big_run(small, Path(tmp) / "big")
        t0 = time.perf_counter()
        path = write_report(Path(tmp) / "big", Path(tmp) / "big.html")[0]  # plotly.js beside it
        elapsed = time.perf_counter() - t0
        print(
            f"write_report of 1M requests and 1M steps: {elapsed:.1f} s (bound {a.bound_s:g} s), "
            f"page {path.stat().st_size / 1e3:.0f} kB"
        )
    if elapsed > a.bound_s:
        sys.exit(1)


if __name__ == "__main__":
    main()
