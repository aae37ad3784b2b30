"""The report of a benchmark workload as ``vllm bench serve`` prints it.

vLLM main's ``calculate_metrics`` (vllm/benchmarks/serve.py), over the requests of the
measured run that succeeded (the ready check's and warm-ups' requests are left out):

* TTFT: first token - sent; E2EL: last token - sent (its ``latency``);
* TPOT per request with more than one output token: (E2EL - TTFT) / (output - 1);
* ITL: every gap between two consecutive tokens of every request, pooled;
* mean, median, std (numpy's, ddof 0) and percentiles by ``np.percentile``'s default
  linear interpolation, in milliseconds (servesim's own summary uses the inverted CDF);
* duration: from the start of the measured run (after the warm-ups) until its last
  request is done; request, output and total token throughput are over it;
* goodput (``--goodput``, from the scenario's SLOs): requests meeting every limit (a
  value equal to the limit meets it; TPOT is 0 for a single output token) per second;
* peak concurrency: the most requests in flight, over half-open [sent, done) intervals.

Total input tokens are the prompts as vllm bench counts them, without the special tokens
the server adds (``num_special_tokens``). Not reported: ``max_output_tokens_per_s``
(per-second buckets of token times, which servesim's records do not keep).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from servesim.config import BenchmarkWorkload
from servesim.metrics.records import ItlSamples, RequestRecords, RequestStatus, Result

PERCENTILES = (90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


def is_benchmark(result: Result) -> bool:
    return result.scenario.workload.type == "benchmark"


def num_before(result: Result) -> int:
    """Rows of a benchmark workload sent before the measured run (ready check, warm-ups)."""
    wl = result.scenario.workload
    if not isinstance(wl, BenchmarkWorkload):
        return 0
    return int(wl.ready_check) + int(wl.num_warmups)


def measured_run(result: Result) -> Result:
    """``result`` without the requests sent before the measured run (itself if none were)."""
    k = num_before(result)
    if not k:
        return result
    rec = result.records
    cols = {name: col[k:] for name, col in rec.columns().items()}
    records = RequestRecords(**cols, reasons={i - k: v for i, v in rec.reasons.items() if i >= k})
    if not result.itl.is_exact:  # a sketch cannot drop the warm-ups' few pairs: kept
        return replace(result, records=records)
    i = result.itl.measured_from
    itl = ItlSamples(gap_s=list(result.itl.gap_s[i:]), count=list(result.itl.count[i:]))
    return replace(result, records=records, itl=itl)


def weighted_stats(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float | None]:
    """mean, median, std and PERCENTILES of the samples, each repeated ``weights`` times, as
    numpy computes them on the repeated array (linear interpolation), without repeating."""
    v = np.asarray(values, np.float64)
    w = np.ones(v.shape, np.int64) if weights is None else np.asarray(weights, np.int64)
    keep = ~np.isnan(v) & (w > 0)
    v, w = v[keep], w[keep]
    names = ["mean", "median", "std", *(f"p{p}" for p in PERCENTILES)]
    if not v.size:
        return dict.fromkeys(names)
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    n = int(cum[-1])
    mean = float(np.dot(v, w) / n)
    std = math.sqrt(float(np.dot(w, (v - mean) ** 2) / n))

    def at(j: np.ndarray) -> np.ndarray:  # the j-th value of the repeated, sorted array
        return v[np.searchsorted(cum, j, side="right")]

    ps = np.array([50.0, *PERCENTILES])
    h = (n - 1) * ps / 100.0
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    q = at(lo) + (h - lo) * (at(hi) - at(lo))
    return dict(zip(names, [mean, float(q[0]), std, *(float(x) for x in q[1:])]))


def sketch_stats(sk: Any) -> dict[str, float | None]:
    """``weighted_stats`` from a ``metrics.sketch.Sketch`` (a run past the exact limit): the
    mean and standard deviation exact up to rounding, the percentiles the sketch's inverted
    CDF (within its relative accuracy of the exact ones), the median its p50."""
    names = ["mean", "median", "std", *(f"p{p}" for p in PERCENTILES)]
    if sk.count <= 0:
        return dict.fromkeys(names)
    mean = sk.sum / sk.count
    std = math.sqrt(max(sk.sum_sq / sk.count - mean * mean, 0.0))
    q = sk.percentiles((50.0, *PERCENTILES))
    return dict(zip(names, [mean, q[0], std, *q[1:]]))


def _peak_concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals [start, end) open at once (an end before a start at the same time)."""
    if not start.size:
        return 0
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones(start.size, np.int64), -np.ones(end.size, np.int64)])
    order = np.lexsort((d, t))
    return int(np.cumsum(d[order]).max())


def benchmark_section(result: Result) -> dict[str, Any] | None:
    """vllm bench's figures of a benchmark workload (None for other workloads)."""
    cfg = result.scenario.workload
    if not isinstance(cfg, BenchmarkWorkload):
        return None
    figures = run_figures(result, num_before(result), cfg.num_special_tokens)
    config = {
        "max_concurrency": cfg.max_concurrency,
        "request_rate": cfg.request_rate,
        "burstiness": cfg.burstiness,
        "num_warmups": cfg.num_warmups,
    }
    head = ("duration", "start_s", "completed", "failed")
    return {**{k: figures[k] for k in head}, **config, **{k: v for k, v in figures.items() if k not in head}}


def run_figures(result: Result, k: int = 0, num_special_tokens: int = 0) -> dict[str, Any]:
    """vllm bench's figures (``calculate_metrics``) of any run: the requests after its first
    ``k`` (sent before the measured run), prompts counted less ``num_special_tokens``."""
    rec = result.records
    finished = rec.status == RequestStatus.FINISHED
    rejected = rec.status == RequestStatus.REJECTED
    done_at = np.where(finished, rec.finished_s, np.where(rejected, rec.arrival_s, np.nan))
    start_s = float(done_at[:k].max()) if k else 0.0  # NaN: a warm-up never ended
    m = measured_run(result) if k else result
    r = m.records
    ok = r.status == RequestStatus.FINISHED
    main_done = done_at[k:]
    end_s = float(main_done.max()) if not np.isnan(main_done).any() else float(result.end_s)
    duration = end_s - start_s if math.isfinite(start_s) and len(r) else math.nan
    ttft = (r.first_token_s - r.arrival_s)[ok]
    e2el = (r.finished_s - r.arrival_s)[ok]
    out = r.num_output_tokens[ok]
    multi = out > 1
    tpot = (e2el[multi] - ttft[multi]) / (out[multi] - 1)
    total_in = int((r.num_prompt_tokens[ok] - num_special_tokens).sum())
    total_out = int(out.sum())
    completed = int(ok.sum())

    def per_s(x: float) -> float | None:
        return x / duration if duration > 0 else None

    section: dict[str, Any] = {
        "duration": duration,
        "start_s": start_s,
        "completed": completed,
        "failed": len(r) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(completed),
        "request_goodput": _goodput(result, ttft, tpot, e2el, out, per_s),
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_concurrent_requests": _peak_concurrency(r.arrival_s[ok], r.finished_s[ok]),
    }
    itl = m.itl
    samples = {
        "ttft": (ttft, None),
        "tpot": (tpot, None),
        "e2el": (e2el, None),
        "itl": (np.asarray(itl.gap_s, np.float64), np.asarray(itl.count, np.int64)),
    }
    for name in METRICS:
        sk = itl.sketched() if name == "itl" else None
        stats = weighted_stats(*samples[name]) if sk is None else sketch_stats(sk)
        for stat, x in stats.items():
            section[f"{stat}_{name}_ms"] = None if x is None else 1000.0 * x
    return section


def _goodput(
    result: Result, ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, out: np.ndarray, per_s: Any
) -> float | None:
    """``--goodput`` from the scenario's SLOs (None when none is set)."""
    slo = result.scenario.slo
    limits = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s}
    if all(v is None for v in limits.values()):
        return None
    all_tpot = np.zeros(out.shape)
    all_tpot[out > 1] = tpot  # vllm bench: TPOT 0 for a single output token
    good = np.ones(out.shape, bool)
    for name, values in (("ttft_s", ttft), ("tpot_s", all_tpot), ("e2e_s", e2el)):
        limit = limits[name]
        if limit is not None:
            good &= values <= limit
    return per_s(int(good.sum()))


# --------------------------------------------------------------------------- console


def benchmark_lines(b: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows in the order and with the names of vllm bench's printout."""

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    rows = [("Successful requests:", str(b["completed"])), ("Failed requests:", str(b["failed"]))]
    if b["max_concurrency"] is not None:
        rows.append(("Maximum request concurrency:", str(b["max_concurrency"])))
    if b["request_rate"] is not None and math.isfinite(b["request_rate"]):
        rows.append(("Request rate configured (RPS):", f(b["request_rate"])))
    rows += [
        ("Benchmark duration (s):", f(b["duration"])),
        ("Total input tokens:", str(b["total_input_tokens"])),
        ("Total generated tokens:", str(b["total_output_tokens"])),
        ("Request throughput (req/s):", f(b["request_throughput"])),
    ]
    if b["request_goodput"] is not None:
        rows.append(("Request goodput (req/s):", f(b["request_goodput"])))
    rows += [
        ("Output token throughput (tok/s):", f(b["output_throughput"])),
        ("Peak concurrent requests:", str(b["max_concurrent_requests"])),
        ("Total token throughput (tok/s):", f(b["total_token_throughput"])),
    ]
    names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
    for key, label in names.items():
        rows += [
            (f"Mean {label} (ms):", f(b[f"mean_{key}_ms"])),
            (f"Median {label} (ms):", f(b[f"median_{key}_ms"])),
            (f"P99 {label} (ms):", f(b[f"p99_{key}_ms"])),
        ]
    return rows
