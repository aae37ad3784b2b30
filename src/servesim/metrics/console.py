"""The console report of one run: a header, a latency table and one line per metric group.

Plain ASCII apart from rich's table rules, fits 80 columns, and reads the same in a
terminal and in a CI log (rich drops colour when the output is not a terminal). The header
and the step-time lines are here; the tables in ``console_tables``, the metric and trust
lines in ``console_lines``, the short numbers in ``console_format``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from servesim.config import Scenario
from servesim.metrics.console_format import duration
from servesim.metrics.console_lines import metric_lines, trust_lines
from servesim.metrics.console_tables import (
    benchmark_block,
    latency_table,
    model_table,
    pool_lines,
    tenant_table,
)
from servesim.metrics.records import Result


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
    console.print(latency_table(s))
    grid = metric_lines(s)
    trust_lines(s, grid)
    console.print(grid)
    pools = s.get("pools") or []
    if len(pools) > 1 or (pools and pools[0]["num_replicas_run"] > 1):  # one replica: the lines above
        console.print()
        console.print(pool_lines(pools))
    if s.get("models"):
        console.print()
        console.print(model_table(s["models"]))
    if s.get("benchmark"):
        console.print()
        console.print(benchmark_block(s["benchmark"]))
    if s.get("tenants"):
        console.print()
        console.print(tenant_table(s["tenants"]))


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
    head.append(f"\nsimulated {duration(c['end_s'])}")
    wall = s.get("wall_s") or result.wall_s
    if wall:
        head.append(f" in {duration(wall)} of wall time ({c['end_s'] / wall:,.0f}x real time)")
    return head


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
