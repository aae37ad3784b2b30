"""The tables of the console report (``metrics.console``): latencies, one pair of lines per
cluster pool, and one row per model, per tenant, or per line of vllm bench serve's result
block."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from servesim.metrics.benchmark import benchmark_lines
from servesim.metrics.console_format import ms, num, pct, si

_LATENCY_ROWS = (
    ("TTFT", "ttft_s"),
    ("TPOT", "tpot_s"),
    ("ITL", "itl_s"),
    ("E2E", "e2e_s"),
    ("Queue", "queue_s"),
)
_LATENCY_COLS = ("mean", "p50", "p90", "p99")


def latency_table(s: dict[str, Any]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left")
    table.add_column("latency (ms)")
    for col in _LATENCY_COLS:
        table.add_column(col, justify="right")
    iv = s.get("intervals") or {}
    if "ttft_s" in iv:  # calibrated intervals of the means (metrics.intervals), beside them
        table.add_column(f"mean, {iv['level']:.0%} interval", justify="right")
        table.caption = (
            f"{iv['level']:.0%} intervals: held-out measured runs, regime "
            f"{iv['regime'].replace('_', ' ')}"
            + (
                f" (step time: {iv['step_regime'].replace('_', ' ')})"
                if iv["step_regime"] != iv["regime"]
                else ""
            )
        )
        table.caption_justify = "left"
    for label, key in _LATENCY_ROWS:
        d = s["latency"][key]
        cells = [ms(d[col]) for col in _LATENCY_COLS]
        if "ttft_s" in iv:
            b = (iv.get(key) or {}).get("mean")
            cells.append("" if not b else f"{ms(b[0])} - {ms(b[1])}")
        table.add_row(label, *cells)
    method = s["latency"].get("method", "exact")
    if method != "exact":  # a long run: percentiles from a quantile sketch (docs/metrics.md)
        by_metric: dict[str, str] = (
            dict(x.split(": ", 1) for x in method.split("; ")) if ": " in method else {}
        )
        labels = {key: label for label, key in _LATENCY_ROWS}
        names = [labels.get(k, k) for k, v in by_metric.items() if v != "exact"]
        sketch = next((v for v in by_metric.values() if v != "exact"), method)
        table.caption = f"{'/'.join(names) + ' ' if names else ''}percentiles: {sketch}"
        table.caption_justify = "left"
    return table


def pool_lines(pools: list[dict[str, Any]]) -> Table:
    """Two lines per cluster pool: GPUs and utilization; queueing and KV transfers in."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for p in pools:
        bubble = p["pipeline_bubble_fraction"]
        held = (
            f" at peak ({p['num_replicas_run']} ran, {num(p['mean_replicas'])} on average, "
            f"{num(p['gpu_hours'])} GPU-h)"
            if p["num_replicas_run"] != p["num_replicas"] or (p["mean_replicas"] or 0) < p["num_replicas"]
            else ""
        )
        grid.add_row(
            f"Pool {p['name']}",
            f"{p['role']}, {p['num_replicas']} x {p['num_gpus'] // max(p['num_replicas'], 1)} "
            f"{p['gpu'] or 'GPU'}{held}: "
            f"busy {pct(p['busy_fraction'])}, MFU {pct(p['mfu'])}, KV mean {pct(p['kv_mean'])}"
            + (f", bubbles {pct(bubble)}" if bubble else ""),
        )
        text = (
            f"{p['num_routed']:,} routed, {num(p['mean_num_waiting'])} waiting on average "
            f"({ms(p['mean_wait_s'])} ms wait)"
        )
        if p["num_kv_transfers_in"]:
            size = si(p["kv_transfer_bytes_in"] / p["num_kv_transfers_in"], "B")
            text += f"; KV in {p['num_kv_transfers_in']:,} x {size}, {ms(p['mean_kv_transfer_s'])} ms each"
        if p["num_migrations_out"]:
            text += f"; {p['num_migrations_out']:,} migrated out"
        grid.add_row("", text)
    return grid


def model_table(m: dict[str, Any]) -> Table:
    """One row per model the requests name (metrics/models.py)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title="models", title_justify="left")
    for col in ("model", "pools", "GPUs", "requests", "rejected", "TTFT p50", "TPOT p50 (ms)", "SLO"):
        table.add_column(
            col, justify="left" if col in ("model", "pools") else "right", no_wrap=col == "model"
        )
    for name, d in m["per_model"].items():
        table.add_row(
            name,
            ", ".join(d["pools"]) or "-",
            f"{d['num_gpus']:,}",
            f"{d['num_requests']:,}",
            f"{d['num_rejected']:,}",
            ms(d["ttft_s"]["p50"]),
            ms(d["tpot_s"]["p50"]),
            pct(d["slo_attainment"]),
        )
    return table


def tenant_table(t: dict[str, Any]) -> Table:
    """One row per tenant (metrics/tenants.py), the fairness figures in the title."""
    spread = t["max_counter_spread"]
    title = f"tenants ({t['scheduling_policy']}): Jain's index {num(t['jain_index'])}" + (
        f", max counter spread {num(spread)}" if spread is not None else ""
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title=title, title_justify="left")
    for col in ("tenant", "requests", "rejected", "TTFT p50", "p99 (ms)", "SLO", "goodput/s"):
        table.add_column(col, justify="left" if col == "tenant" else "right")
    for name, d in t["per_tenant"].items():
        why = ", ".join(f"{k.split('_')[0]} {v:,}" for k, v in d["rejected"].items())
        table.add_row(
            name,
            f"{d['num_requests']:,}",
            f"{d['num_rejected']:,}" + (f" ({why})" if why else ""),
            ms(d["ttft_s"]["p50"]),
            ms(d["ttft_s"]["p99"]),
            pct(d["slo_attainment"]),
            num(d["goodput_rps"]),
        )
    return table


def benchmark_block(b: dict[str, Any]) -> Table:
    """vllm bench serve's result block, its labels and order (metrics/benchmark.py)."""
    grid = Table.grid(padding=(0, 2))
    grid.title = "vllm bench serve (measured run)"
    grid.title_justify = "left"
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right")
    for label, value in benchmark_lines(b):
        grid.add_row(label, value)
    return grid
