"""The console report of one run: a header, a latency table and one line per metric group.

Plain ASCII apart from rich's table rules, fits 80 columns, and reads the same in a
terminal and in a CI log (rich drops colour when the output is not a terminal).
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from servesim.config import Scenario
from servesim.metrics.benchmark import benchmark_lines
from servesim.metrics.records import Result

_LATENCY_ROWS = (
    ("TTFT", "ttft_s"),
    ("TPOT", "tpot_s"),
    ("ITL", "itl_s"),
    ("E2E", "e2e_s"),
    ("Queue", "queue_s"),
)
_LATENCY_COLS = ("mean", "p50", "p90", "p99")


def _num(x: float | None) -> str:
    """A short number: 3 significant digits below 100, no decimals above."""
    if x is None:
        return "-"
    ax = abs(x)
    if ax >= 100:
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if ax >= 0.01 or ax == 0 else f"{x:.2g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else _num(1000 * x)


def _si(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{_num(x)} {unit}"


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{_num(s)} s"


def _workload_source(scenario: Scenario) -> str:
    wl = scenario.workload
    if wl.type == "trace":
        text = f"trace {wl.path}"
        if wl.rate_scale != 1.0:
            text += f" x{wl.rate_scale:g} rate"
        return text
    if wl.type == "benchmark":
        return (
            f"vllm bench serve, random {wl.input_len}/{wl.output_len} tokens, "
            f"concurrency {wl.max_concurrency}, {wl.request_rate:g} req/s"
        )
    if wl.type == "mixture":
        names = ", ".join(c.name for c in wl.clients)
        rate_rps = sum(c.arrival.rate for c in wl.clients)
        return f"mixture of {len(wl.clients)} clients ({names}), {rate_rps:g} req/s"
    if wl.type == "inference-perf":
        return f"inference-perf {wl.config}"
    if wl.type == "guidellm":
        return f"guidellm {wl.config}"
    arr = wl.arrival
    if wl.type == "agents":
        calls = sum(n.kind == "llm" for n in wl.nodes)
        return f"agents ({calls} llm calls a task), {arr.process} {arr.rate:g} tasks/s"
    if wl.type == "reasoning":
        exit_ = ", Dynasor early exit" if wl.early_exit else ""
        return f"reasoning (best-of-{wl.samples}{exit_}), {arr.process} {arr.rate:g} questions/s"
    if wl.type == "sessions":
        return f"sessions ({wl.loop} loop), {arr.process} {arr.rate:g} sessions/s"
    return f"synthetic {arr.process} {arr.rate:g} req/s"


def _gpu_name(result: Result) -> str:
    if result.gpu is not None and result.gpu.name:
        return result.gpu.name
    gpu = result.scenario.hardware.gpu
    return gpu if isinstance(gpu, str) else gpu.name


def _header(result: Result, s: dict[str, Any]) -> Text:
    sc = result.scenario
    c = s["counts"]
    util = s["utilization"]["overall"]
    model = sc.model.name
    policy = sc.engine.policy
    replicas = f", {util['num_replicas']} replicas" if util["num_replicas"] > 1 else ""
    head = Text()
    head.append(f"{model}", style="bold")
    gpus = f"{_gpu_name(result)} x{util['num_gpus']}"
    if s.get("pools"):  # a cluster: its GPU types, in pool order
        names = list(dict.fromkeys(p["gpu"] for p in s["pools"]))
        gpus = " + ".join(f"{n} x{sum(p['num_gpus'] for p in s['pools'] if p['gpu'] == n)}" for n in names)
    head.append(f" | {gpus}{replicas} | {policy}\n")
    head.append(f"workload: {_workload_source(sc)}\n")
    head.append(f"{c['num_requests']:,} requests: {c['num_finished']:,} finished")
    if c.get("num_finished_length"):
        head.append(f" ({c['num_finished_length']:,} cut short at max_model_len)", style="yellow")
    if c["num_unfinished"]:
        head.append(f", {c['num_unfinished']:,} unfinished", style="yellow")
    if c["num_rejected"]:
        head.append(f", {c['num_rejected']:,} rejected", style="red")
    head.append(f"\nsimulated {_duration(c['end_s'])}")
    wall = s.get("wall_s") or result.wall_s
    if wall:
        head.append(f" in {_duration(wall)} of wall time ({c['end_s'] / wall:,.0f}x real time)")
    return head


def _latency_table(s: dict[str, Any]) -> Table:
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
        cells = [_ms(d[col]) for col in _LATENCY_COLS]
        if "ttft_s" in iv:
            b = (iv.get(key) or {}).get("mean")
            cells.append("" if not b else f"{_ms(b[0])} - {_ms(b[1])}")
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


def _lines(s: dict[str, Any]) -> Table:
    t, slo, u = s["throughput"], s["slo"], s["utilization"]["overall"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row(
        "Throughput",
        f"{_num(t['requests_per_s'])} req/s, "
        f"{_num(t['input_tokens_per_s'])} in + {_num(t['output_tokens_per_s'])} out "
        f"= {_num(t['total_tokens_per_s'])} tok/s",
    )
    limits = {k: v for k, v in slo["limits"].items() if v is not None}
    if limits:
        parts = [
            f"{k[:-2].upper()}<={_num(1000 * v)}ms {_pct(slo['attainment'][k])}" for k, v in limits.items()
        ]
        per_gpu = slo["goodput_rps_per_gpu"]
        grid.add_row("SLO", f"{', '.join(parts)}; all {_pct(slo['attainment']['all'])}")
        grid.add_row("Goodput", f"{_num(slo['goodput_rps'])} req/s ({_num(per_gpu)} per GPU)")
    else:
        grid.add_row("SLO", "none set")
    kv = f"KV mean {_pct(u['kv_mean'])} peak {_pct(u['kv_peak'])}"
    pipe = u.get("pipeline_bubble_fraction")
    bubble = f", pipeline bubbles {_pct(pipe)}" if pipe else ""
    grid.add_row(
        "Utilization",
        f"busy {_pct(u['busy_fraction'])}, MFU {_pct(u['mfu'])}, MBU {_pct(u['mbu'])}, {kv}{bubble}",
    )
    grid.add_row(
        "Scheduler",
        f"preemptions {u['num_preemptions']:,}, prefix-cache hit rate {_pct(u['prefix_hit_rate'])}",
    )
    off = s.get("kv_offload")
    if off:  # engine.kv_offload: hits per tier and the KV moved
        h = off["hit_rate"]
        disk = f", disk {_pct(h['disk'])}" if off["disk_blocks"] else ""
        grid.add_row(
            "KV offload",
            f"{off['backend']}: prompt tokens found on GPU {_pct(h['gpu'])}, CPU {_pct(h['cpu'])}{disk}; "
            f"loaded {off['load_bytes'] / 1e9:,.1f} GB in {_num(off['load_s'])} s, "
            f"stored {off['store_bytes'] / 1e9:,.1f} GB in {_num(off['store_s'])} s (per GPU)",
        )
    lo = s.get("lora")
    if lo:  # engine.lora
        grid.add_row(
            "LoRA",
            f"{lo['num_gpu_loads']:,} adapter loads ({lo['num_disk_loads']:,} from disk), "
            f"{_num(lo['load_s'])} s loading; {lo['num_delayed']:,} requests delayed by max_loras "
            f"({_pct(lo['delayed_fraction'])}); buffers {_gb(lo['buffer_bytes'])} per GPU",
        )
    r = s.get("reasoning")
    if r:  # reasoning workloads: tokens against fixed-length reasoning, question latency
        lat = s.get("tasks", {}).get("latency_s", {}).get("mean")
        grid.add_row(
            "Reasoning",
            f"{r['reasoning_tokens'] + r['probe_tokens']:,} tokens generated "
            f"({r['probe_tokens']:,} in {r['num_probes']:,} probes) against "
            f"{r['fixed_length_tokens']:,} fixed-length, saving {_pct(r['saving'])}"
            + (f"; question latency {_num(lat)} s mean" if lat is not None else ""),
        )
    e, cost = s["energy"], s["cost"]
    if e["energy_j"] is not None:
        grid.add_row(
            "Energy",
            f"{_si(e['energy_j'], 'J')} ({_num(e['avg_power_w'])} W avg), "
            f"{_num(e['j_per_output_token'])} J/out tok, {_num(e['j_per_token'])} J/tok",
        )
        grid.add_row(
            "Cost",
            f"${cost['usd']:.4g}, ${_num(cost['usd_per_million_output_tokens'])}/M out tok, "
            f"${_num(cost['usd_per_million_tokens'])}/M tok",
        )
    ops = s.get("operations")
    if ops:  # cluster.operations: autoscaling, failures, power capping
        capped = sum(ops["capped_s"].values())
        peak, mean = sum(ops["peak_replicas"].values()), sum(ops["mean_replicas"].values())
        grid.add_row(
            "Operations",
            f"{_num(ops['gpu_hours'])} GPU-h held ({peak} replicas / "
            f"{ops['peak_gpus']} GPUs at peak, {_num(mean)} replicas on average), "
            f"{ops['num_replicas_started']} started, "
            f"{ops['num_replicas_stopped']} stopped, {ops['num_failures']} failed "
            f"({ops['num_retried']} requests retried, {ops['num_failed_requests']} failed), "
            f"capped {_duration(capped) if capped else 'never'}",
        )
        if "budget_w" in ops:
            over = ops["num_intervals_over_budget"]
            took = _duration(ops["over_budget_s"]) if over else "0 s"
            grid.add_row(
                "Power budget",
                f"{_num(ops['budget_w'])} W: {over:,} of {ops['num_intervals']:,} "
                f"intervals over it ({took}), "
                f"peak interval {_num(ops['max_interval_power_w'])} W, "
                f"{ops['num_cap_changes']:,} cap changes",
            )
    return grid


def _pool_lines(pools: list[dict[str, Any]]) -> Table:
    """Two lines per cluster pool: GPUs and utilization; queueing and KV transfers in."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for p in pools:
        bubble = p["pipeline_bubble_fraction"]
        held = (
            f" at peak ({p['num_replicas_run']} ran, {_num(p['mean_replicas'])} on average, "
            f"{_num(p['gpu_hours'])} GPU-h)"
            if p["num_replicas_run"] != p["num_replicas"] or (p["mean_replicas"] or 0) < p["num_replicas"]
            else ""
        )
        grid.add_row(
            f"Pool {p['name']}",
            f"{p['role']}, {p['num_replicas']} x {p['num_gpus'] // max(p['num_replicas'], 1)} "
            f"{p['gpu'] or 'GPU'}{held}: "
            f"busy {_pct(p['busy_fraction'])}, MFU {_pct(p['mfu'])}, KV mean {_pct(p['kv_mean'])}"
            + (f", bubbles {_pct(bubble)}" if bubble else ""),
        )
        text = (
            f"{p['num_routed']:,} routed, {_num(p['mean_num_waiting'])} waiting on average "
            f"({_ms(p['mean_wait_s'])} ms wait)"
        )
        if p["num_kv_transfers_in"]:
            size = _si(p["kv_transfer_bytes_in"] / p["num_kv_transfers_in"], "B")
            text += f"; KV in {p['num_kv_transfers_in']:,} x {size}, {_ms(p['mean_kv_transfer_s'])} ms each"
        if p["num_migrations_out"]:
            text += f"; {p['num_migrations_out']:,} migrated out"
        grid.add_row("", text)
    return grid


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def _step_time_lines(s: dict[str, Any]) -> Text:
    """Which step-time model answered (one line per distinct model, naming its pools when
    the pools differ), and its warnings."""
    text = Text()
    models = s.get("step_time_model", [])
    pools: dict[str, list[str]] = {}
    for m in models:
        pools.setdefault(m["label"], []).append(m.get("pool") or "")
    for label, names in pools.items():
        where = f" (pool {', '.join(names)})" if len(pools) > 1 else ""
        text.append(f"step time: {label}{where}\n")
    paths = s.get("vllm_execution_path", [])
    for p in paths:
        where = f" (pool {p['pool']})" if len(paths) > 1 and p.get("pool") else ""
        moe = f"MoE {p['moe']['value']}, " if p.get("moe") else ""
        text.append(
            f"vLLM {p['vllm_version']} path on {p['gpu']}{where}: {moe}attention {p['attention']['value']}, "
            f"async scheduling {p['async_scheduling']['value']}, CUDA graphs {p['cuda_graphs']['value']}\n"
        )
        if p.get("moe"):
            text.append(f"  MoE: {p['moe']['reason']}\n", style="dim")
    for w in dict.fromkeys(w for m in models for w in m.get("warnings", [])):
        text.append(f"warning: {w}\n", style="yellow")
    return text


def _trust_lines(s: dict[str, Any], grid: Table) -> None:
    """Memory plan, headroom, saturation and notices (what a user needs to trust the numbers),
    as rows of ``grid``."""
    plans = s.get("memory", [])
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
            f"per GPU: weights {_gb(m['weights_bytes_per_gpu'])}, "
            + (f"LoRA {_gb(m['lora_bytes'])}, " if m.get("lora_bytes") else "")
            + "activations "
            f"{_gb(m['activation_bytes'])}, reserve {_gb(m['non_torch_reserve_bytes'])}; KV "
            f"{_gb(m['kv_cache_bytes'])}: {m['num_gpu_blocks']:,} blocks of {m['block_size']}, "
            f"{m['kv_capacity_tokens']:,} tokens{fits}",
        )
    h = s.get("headroom")
    if h and h["gpu_fraction"] is not None:
        text = (
            f"GPU model work {_pct(h['gpu_fraction'])}, CPU {_pct(h['cpu_fraction'])}, "
            f"idle {_pct(h['idle_fraction'])}"
        )
        if h.get("api_server_fraction") is not None:
            text += f"; API server {_pct(h['api_server_fraction'])} busy"
        if h.get("per_model"):  # several models: each its own capacity (metrics.headroom)
            text += "; load " + ", ".join(
                f"{m['model']} {_pct(m['load_fraction'])} of ~{_num(m['capacity_requests_per_s'])} req/s"
                if m["load_fraction"] is not None
                else f"{m['model']} -"
                for m in h["per_model"]
            )
            text += " sustainable, each model on its own pools"
        elif h["load_fraction"] is not None:
            limits = sorted({p["limited_by"].replace("_", " ") for p in h["per_replica"]})
            text += (
                f"; load {_pct(h['load_fraction'])} of ~{_num(h['capacity_requests_per_s'])} req/s "
                f"sustainable ({', '.join(limits)} bound)"
            )
        elif h.get("capacity_note"):
            text += f"; {h['capacity_note']}"
        grid.add_row("Headroom", text)
    sat = s.get("saturation")
    if sat and sat.get("saturated"):
        grid.add_row(Text("SATURATED", style="bold red"), Text(sat["hint"], style="red"))
    elif sat and sat.get("evidence") and sat.get("cause") is None:
        e = sat["evidence"]
        grid.add_row(
            "Saturation",
            f"no: arrivals {_num(e['arrival_rate_rps'])} req/s, served "
            f"{_num(e['served_rate_rps'])} req/s, queue bounded",
        )
    elif sat and sat.get("hint"):  # cannot judge, or not a load verdict (rejections, failures)
        grid.add_row(Text("Saturation", style="yellow"), sat["hint"])
    for n in s.get("notices", []):
        count = n.get("count")
        grid.add_row(Text("Notice", style="yellow"), f"{n['message']}" + (f" ({count:,})" if count else ""))


def print_summary(result: Result, console: Console) -> None:
    """Print the report of ``result`` (its ``summary``, computed here if still empty)."""
    from servesim.metrics.summary import summarize

    s = result.summary or summarize(result)
    console.print(_header(result, s))
    if s.get("step_time_model") or s.get("vllm_execution_path"):
        console.print(_step_time_lines(s), end="")
    console.print()
    if s.get("saturation", {}).get("latency_is_queue_artefact"):
        console.print(
            Text(
                "The queue grew for the whole run: the latencies below measure the queue (see SATURATED).",
                style="bold red",
            )
        )
    console.print(_latency_table(s))
    grid = _lines(s)
    _trust_lines(s, grid)
    console.print(grid)
    pools = s.get("pools") or []
    if len(pools) > 1 or (pools and pools[0]["num_replicas_run"] > 1):  # one replica: the lines above
        console.print()
        console.print(_pool_lines(pools))
    if s.get("models"):
        console.print()
        console.print(_model_table(s["models"]))
    if s.get("benchmark"):
        console.print()
        console.print(_benchmark_block(s["benchmark"]))
    if s.get("tenants"):
        console.print()
        console.print(_tenant_table(s["tenants"]))


def _model_table(m: dict[str, Any]) -> Table:
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
            _ms(d["ttft_s"]["p50"]),
            _ms(d["tpot_s"]["p50"]),
            _pct(d["slo_attainment"]),
        )
    return table


def _tenant_table(t: dict[str, Any]) -> Table:
    """One row per tenant (metrics/tenants.py), the fairness figures in the title."""
    spread = t["max_counter_spread"]
    title = f"tenants ({t['scheduling_policy']}): Jain's index {_num(t['jain_index'])}" + (
        f", max counter spread {_num(spread)}" if spread is not None else ""
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
            _ms(d["ttft_s"]["p50"]),
            _ms(d["ttft_s"]["p99"]),
            _pct(d["slo_attainment"]),
            _num(d["goodput_rps"]),
        )
    return table


def _benchmark_block(b: dict[str, Any]) -> Table:
    """vllm bench serve's result block, its labels and order (metrics/benchmark.py)."""
    grid = Table.grid(padding=(0, 2))
    grid.title = "vllm bench serve (measured run)"
    grid.title_justify = "left"
    grid.add_column(no_wrap=True)
    grid.add_column(justify="right")
    for label, value in benchmark_lines(b):
        grid.add_row(label, value)
    return grid
