"""The lines of the console report under its latency table (``metrics.console``): one per
metric group (throughput, SLO, utilization, the features a run used, energy and cost,
operations), then what a reader needs to trust the numbers (memory plan, headroom,
saturation, notices)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from servesim.metrics.console_format import duration, gb, num, pct, si


def metric_lines(s: dict[str, Any]) -> Table:
    """One line per metric group of the summary ``s``: two columns, the group's name in bold."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    _load_rows(grid, s)
    _feature_rows(grid, s)
    _energy_rows(grid, s)
    _operations_rows(grid, s.get("operations"))
    return grid


def _load_rows(grid: Table, s: dict[str, Any]) -> None:
    """Throughput, the SLO and goodput, utilization, the scheduler's preemptions and prefix hits."""
    t, slo, u = s["throughput"], s["slo"], s["utilization"]["overall"]
    grid.add_row(
        "Throughput",
        f"{num(t['requests_per_s'])} req/s, "
        f"{num(t['input_tokens_per_s'])} in + {num(t['output_tokens_per_s'])} out "
        f"= {num(t['total_tokens_per_s'])} tok/s",
    )
    limits = {k: v for k, v in slo["limits"].items() if v is not None}
    if limits:
        parts = [
            f"{k[:-2].upper()}<={num(1000 * v)}ms {pct(slo['attainment'][k])}" for k, v in limits.items()
        ]
        per_gpu = slo["goodput_rps_per_gpu"]
        grid.add_row("SLO", f"{', '.join(parts)}; all {pct(slo['attainment']['all'])}")
        grid.add_row("Goodput", f"{num(slo['goodput_rps'])} req/s ({num(per_gpu)} per GPU)")
    else:
        grid.add_row("SLO", "none set")
    kv = f"KV mean {pct(u['kv_mean'])} peak {pct(u['kv_peak'])}"
    pipe = u.get("pipeline_bubble_fraction")
    bubble = f", pipeline bubbles {pct(pipe)}" if pipe else ""
    grid.add_row(
        "Utilization",
        f"busy {pct(u['busy_fraction'])}, MFU {pct(u['mfu'])}, MBU {pct(u['mbu'])}, {kv}{bubble}",
    )
    grid.add_row(
        "Scheduler",
        f"preemptions {u['num_preemptions']:,}, prefix-cache hit rate {pct(u['prefix_hit_rate'])}",
    )


def _feature_rows(grid: Table, s: dict[str, Any]) -> None:
    """A line for each feature the run used: KV offload, LoRA adapters, reasoning."""
    off = s.get("kv_offload")
    if off:  # engine.kv_offload: hits per tier and the KV moved
        h = off["hit_rate"]
        disk = f", disk {pct(h['disk'])}" if off["disk_blocks"] else ""
        grid.add_row(
            "KV offload",
            f"{off['backend']}: prompt tokens found on GPU {pct(h['gpu'])}, CPU {pct(h['cpu'])}{disk}; "
            f"loaded {off['load_bytes'] / 1e9:,.1f} GB in {num(off['load_s'])} s, "
            f"stored {off['store_bytes'] / 1e9:,.1f} GB in {num(off['store_s'])} s (per GPU)",
        )
    lo = s.get("lora")
    if lo:  # engine.lora
        grid.add_row(
            "LoRA",
            f"{lo['num_gpu_loads']:,} adapter loads ({lo['num_disk_loads']:,} from disk), "
            f"{num(lo['load_s'])} s loading; {lo['num_delayed']:,} requests delayed by max_loras "
            f"({pct(lo['delayed_fraction'])}); buffers {gb(lo['buffer_bytes'])} per GPU",
        )
    r = s.get("reasoning")
    if r:  # reasoning workloads: tokens against fixed-length reasoning, question latency
        lat = s.get("tasks", {}).get("latency_s", {}).get("mean")
        grid.add_row(
            "Reasoning",
            f"{r['reasoning_tokens'] + r['probe_tokens']:,} tokens generated "
            f"({r['probe_tokens']:,} in {r['num_probes']:,} probes) against "
            f"{r['fixed_length_tokens']:,} fixed-length, saving {pct(r['saving'])}"
            + (f"; question latency {num(lat)} s mean" if lat is not None else ""),
        )


def _energy_rows(grid: Table, s: dict[str, Any]) -> None:
    """Energy and cost, where the GPU's power is known."""
    e, cost = s["energy"], s["cost"]
    if e["energy_j"] is not None:
        grid.add_row(
            "Energy",
            f"{si(e['energy_j'], 'J')} ({num(e['avg_power_w'])} W avg), "
            f"{num(e['j_per_output_token'])} J/out tok, {num(e['j_per_token'])} J/tok",
        )
        grid.add_row(
            "Cost",
            f"${cost['usd']:.4g}, ${num(cost['usd_per_million_output_tokens'])}/M out tok, "
            f"${num(cost['usd_per_million_tokens'])}/M tok",
        )


def _operations_rows(grid: Table, ops: dict[str, Any] | None) -> None:
    """cluster.operations: autoscaling, failures, power capping, and a power budget."""
    if not ops:
        return
    capped = sum(ops["capped_s"].values())
    peak, mean = sum(ops["peak_replicas"].values()), sum(ops["mean_replicas"].values())
    grid.add_row(
        "Operations",
        f"{num(ops['gpu_hours'])} GPU-h held ({peak} replicas / "
        f"{ops['peak_gpus']} GPUs at peak, {num(mean)} replicas on average), "
        f"{ops['num_replicas_started']} started, "
        f"{ops['num_replicas_stopped']} stopped, {ops['num_failures']} failed "
        f"({ops['num_retried']} requests retried, {ops['num_failed_requests']} failed), "
        f"capped {duration(capped) if capped else 'never'}",
    )
    if "budget_w" in ops:
        over = ops["num_intervals_over_budget"]
        took = duration(ops["over_budget_s"]) if over else "0 s"
        grid.add_row(
            "Power budget",
            f"{num(ops['budget_w'])} W: {over:,} of {ops['num_intervals']:,} "
            f"intervals over it ({took}), "
            f"peak interval {num(ops['max_interval_power_w'])} W, "
            f"{ops['num_cap_changes']:,} cap changes",
        )


def trust_lines(s: dict[str, Any], grid: Table) -> None:
    """Memory plan, headroom, saturation and notices (what a user needs to trust the numbers),
    as rows of ``grid``."""
    _memory_rows(grid, s.get("memory", []))
    _headroom_row(grid, s.get("headroom"), s.get("saturation"))
    _saturation_row(grid, s.get("saturation"))
    for n in s.get("notices", []):
        count = n.get("count")
        grid.add_row(Text("Notice", style="yellow"), f"{n['message']}" + (f" ({count:,})" if count else ""))


def _memory_rows(grid: Table, plans: list[dict[str, Any]]) -> None:
    """Each pool's memory plan per GPU: weights, activations, the KV cache and what fits in it."""
    for m in plans:
        fit = m["num_mean_requests_fit"]
        fits = (
            f"; {fit:,} requests of mean length {m['mean_request_tokens']:,.0f} fit at once"
            if fit is not None
            else ""
        )
        grid.add_row(
            "Memory"
            + (f" {m['pool']}" if m["pool"] and len(plans) > 1 else ""),  # one pool: its name says nothing
            f"per GPU: weights {gb(m['weights_bytes_per_gpu'])}, "
            + (f"LoRA {gb(m['lora_bytes'])}, " if m.get("lora_bytes") else "")
            + "activations "
            f"{gb(m['activation_bytes'])}, reserve {gb(m['non_torch_reserve_bytes'])}; KV "
            f"{gb(m['kv_cache_bytes'])}: {m['num_gpu_blocks']:,} blocks of {m['block_size']}, "
            f"{m['kv_capacity_tokens']:,} tokens{fits}",
        )


def _headroom_row(grid: Table, h: dict[str, Any] | None, sat: dict[str, Any] | None = None) -> None:
    """Where the time went (GPU, CPU, idle, API server) and the load against the rate sustained:
    the load served, and in a saturated run the arrivals too (what was served is then capped
    by the deployment, so it alone would read as headroom)."""
    if not (h and h["gpu_fraction"] is not None):
        return
    text = (
        f"GPU model work {pct(h['gpu_fraction'])}, CPU {pct(h['cpu_fraction'])}, "
        f"idle {pct(h['idle_fraction'])}"
    )
    if h.get("api_server_fraction") is not None:
        text += f"; API server {pct(h['api_server_fraction'])} busy"
    if h.get("per_model"):  # several models: each its own capacity (metrics.headroom)
        text += "; load " + ", ".join(
            f"{m['model']} {pct(m['load_fraction'])} of ~{num(m['capacity_requests_per_s'])} req/s"
            if m["load_fraction"] is not None
            else f"{m['model']} -"
            for m in h["per_model"]
        )
        text += " sustainable, each model on its own pools"
    elif h["load_fraction"] is not None:
        limits = sorted({p["limited_by"].replace("_", " ") for p in h["per_replica"]})
        cap = h["capacity_requests_per_s"]
        arrivals = (
            (sat or {}).get("evidence", {}).get("arrival_rate_rps") if (sat or {}).get("saturated") else None
        )
        offered = f"arrivals {pct(arrivals / cap)}, served " if arrivals and cap else ""
        text += (
            f"; {offered or 'load '}{pct(h['load_fraction'])} of ~{num(cap)} req/s "
            f"sustainable ({', '.join(limits)} bound)"
        )
    elif h.get("capacity_note"):
        text += f"; {h['capacity_note']}"
    grid.add_row("Headroom", text)


def _saturation_row(grid: Table, sat: dict[str, Any] | None) -> None:
    """The saturation verdict: SATURATED with its hint, a bounded queue's evidence, or why it
    cannot judge."""
    if sat and sat.get("saturated"):
        grid.add_row(Text("SATURATED", style="bold red"), Text(sat["hint"], style="red"))
    elif sat and sat.get("evidence") and sat.get("cause") is None:
        e = sat["evidence"]
        grid.add_row(
            "Saturation",
            f"no: arrivals {num(e['arrival_rate_rps'])} req/s, served "
            f"{num(e['served_rate_rps'])} req/s, queue bounded",
        )
    elif sat and sat.get("hint"):  # cannot judge, or not a load verdict (rejections, failures)
        grid.add_row(Text("Saturation", style="yellow"), sat["hint"])
