"""The tables of a report: a run's key figures (one column per run when comparing), a plan's
ranked candidates, a validation's groups. Rows of strings, rendered by ``report.html``."""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.report.rundir import Columns, RunDir

MAX_CANDIDATE_ROWS = 200


def _get(doc: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _num(x: Any, fmt: str = ",.3g", scale: float = 1.0, unit: str = "") -> str:
    if x is None or isinstance(x, str):
        return "-" if x is None else x
    x = float(x) * scale
    if not np.isfinite(x):
        return "-"
    if fmt == ",.3g" and abs(x) >= 1000:
        fmt = ",.0f"  # 2,140 rather than 2.14e+03
    return f"{x:{fmt}}" + unit


def run_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) of a run's key figures, from its summary.json."""
    return [*_setup_rows(summary), *_latency_rows(summary), *_service_rows(summary), *_verdict_rows(summary)]


def _setup_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """What ran: the model, the hardware, the engine, the requests."""
    sc = summary.get("scenario") or {}
    pools = summary.get("pools") or []
    hardware = ", ".join(f"{p['name']}: {p['num_replicas']} x {p['gpu']}" for p in pools) or str(
        _get(sc, "hardware", "gpu") or "-"
    )
    engine = _get(sc, "engine") or {}
    c = summary.get("counts") or {}
    rows = [
        ("model", str(_get(sc, "model", "name") or "-")),
        ("hardware", hardware),
        ("engine", f"{engine.get('policy', '-')} (vLLM {engine.get('version', '-')})"),
        (
            "requests",
            f"{c.get('num_requests', 0):,} ({c.get('num_finished', 0):,} finished, "
            f"{c.get('num_unfinished', 0):,} unfinished, {c.get('num_rejected', 0):,} rejected)",
        ),
    ]
    return rows


def _latency_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Mean and percentiles of TTFT, TPOT, ITL, E2E and queueing, in ms."""
    rows: list[tuple[str, str]] = []
    for metric, label in (
        ("ttft_s", "TTFT"),
        ("tpot_s", "TPOT"),
        ("itl_s", "ITL"),
        ("e2e_s", "E2E"),
        ("queue_s", "queue"),
    ):
        d = _get(summary, "latency", metric) or {}
        rows.append(
            (
                f"{label} mean / p50 / p90 / p99 (ms)",
                " / ".join(_num(d.get(k), scale=1e3) for k in ("mean", "p50", "p90", "p99")),
            )
        )
    return rows


def _service_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """What the deployment delivered: throughput, SLO attainment and goodput, utilization,
    KV offload, energy and cost."""
    rows: list[tuple[str, str]] = []
    t = summary.get("throughput") or {}
    rows.append(
        (
            "throughput",
            f"{_num(t.get('requests_per_s'))} req/s, "
            f"{_num(t.get('output_tokens_per_s'), ',.0f')} output tok/s, "
            f"{_num(t.get('total_tokens_per_s'), ',.0f')} tok/s",
        )
    )
    slo = summary.get("slo") or {}
    limits = ", ".join(
        f"{k.removesuffix('_s').upper()} <= {_num(v, scale=1e3)} ms"
        for k, v in (slo.get("limits") or {}).items()
        if v is not None
    )
    rows.append(("SLO attainment", f"{_num(_get(slo, 'attainment', 'all'), '.1%')} ({limits or 'none'})"))
    rows.append(
        ("goodput", f"{_num(slo.get('goodput_rps'))} req/s ({_num(slo.get('goodput_rps_per_gpu'))} per GPU)")
    )
    u = _get(summary, "utilization", "overall") or {}
    rows.append(
        (
            "utilization",
            f"busy {_num(u.get('busy_fraction'), '.1%')}, MFU {_num(u.get('mfu'), '.1%')}, "
            f"MBU {_num(u.get('mbu'), '.1%')}, KV mean {_num(u.get('kv_mean'), '.1%')} "
            f"peak {_num(u.get('kv_peak'), '.1%')}, preemptions "
            f"{_num(u.get('num_preemptions'), ',.0f')}",
        )
    )
    off = summary.get("kv_offload")
    if off:  # engine.kv_offload: prompt tokens found per tier, KV moved (per GPU)
        h = off.get("hit_rate") or {}
        hits = ", ".join(f"{tier} {_num(h.get(tier), '.1%')}" for tier in ("gpu", "cpu", "disk"))
        moved = (
            f"loaded {_num(off.get('load_bytes', 0) / 1e9, ',.1f')} GB in {_num(off.get('load_s'))} s, "
            f"stored {_num(off.get('store_bytes', 0) / 1e9, ',.1f')} GB in {_num(off.get('store_s'))} s"
        )
        rows.append(("KV offload", f"{off.get('backend')}: hits {hits}; {moved}"))
    e, cost = summary.get("energy") or {}, summary.get("cost") or {}
    rows.append(
        (
            "energy",
            f"{_num(e.get('j_per_output_token'))} J/output token, "
            f"{_num(e.get('avg_power_w'), ',.0f')} W mean",
        )
    )
    rows.append(("cost", f"${_num(cost.get('usd_per_million_output_tokens'))} per million output tokens"))
    return rows


def _verdict_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """How to read the figures: the saturation verdict, the step-time model, vLLM's
    execution path per pool."""
    rows: list[tuple[str, str]] = []
    sat = summary.get("saturation") or {}
    if sat:
        if sat.get("verdict") == "cannot_judge":  # the hint says "cannot judge: why"
            rows.append(("saturated", str(sat.get("hint", ""))))
        else:
            rows.append(("saturated", f"{'yes' if sat.get('saturated') else 'no'}: {sat.get('hint', '')}"))
    models = summary.get("step_time_model") or []
    if models:
        rows.append(("step time", "; ".join(dict.fromkeys(str(m.get("label")) for m in models))))
    paths = summary.get("vllm_execution_path") or []
    for p in paths:
        moe = p.get("moe")
        parts = [f"attention {p['attention']['value']}"]
        if moe:
            parts.insert(0, f"MoE {moe['value']} ({moe['reason']})")
        parts += [
            f"async scheduling {p['async_scheduling']['value']}",
            f"CUDA graphs {p['cuda_graphs']['value']}",
        ]
        # One pool (a plain scenario's is one pool of one replica): its name says nothing.
        label = "vLLM path" + (f" {p['pool']}" if p.get("pool") and len(paths) > 1 else "")
        rows.append((label, f"vLLM {p['vllm_version']} on {p['gpu']}: " + "; ".join(parts)))
    return rows


def comparison_rows(runs: list[RunDir]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the side-by-side table: one column per run."""
    per_run = [dict(run_rows(r.summary)) for r in runs]
    labels = list(dict.fromkeys(k for rows in per_run for k in rows))
    return ["", *(r.label for r in runs)], [[k, *(rows.get(k, "-") for rows in per_run)] for k in labels]


def pool_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """Per-pool utilization (None for one pool of one replica: the run's own figures)."""
    pools = summary.get("pools") or []
    if not pools or (len(pools) == 1 and pools[0].get("num_replicas_run", 1) <= 1):
        return None
    keys = [k for k in pools[0] if k not in ("name",)]
    rows = [[str(p.get("name")), *(cell(p.get(k)) for k in keys)] for p in pools]
    return ["pool", *keys], rows


def tenant_rows(summary: dict[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
    """A run with tenants: the fairness line and one row per tenant (None without tenants)."""
    t = summary.get("tenants")
    if not t:
        return None
    line = (
        f"Scheduling policy {t['scheduling_policy']}; Jain's index of the tenants' weighted "
        f"service {cell(t['jain_index'])}; largest counter spread among backlogged tenants "
        f"{cell(t['max_counter_spread'])}."
    )
    header = [
        "tenant",
        "weight",
        "requests",
        "finished",
        "rejected",
        "served input tokens",
        "served output tokens",
        "TTFT p50 (s)",
        "TTFT p99 (s)",
        "SLO attainment",
        "goodput (req/s)",
    ]
    rows = []
    for name, d in t["per_tenant"].items():
        why = ", ".join(f"{k} {v}" for k, v in d["rejected"].items())
        rows.append(
            [
                name,
                cell(d["weight"]),
                cell(d["num_requests"]),
                cell(d["num_finished"]),
                cell(d["num_rejected"]) + (f" ({why})" if why else ""),
                cell(d["served_input_tokens"]),
                cell(d["served_output_tokens"]),
                cell(d["ttft_s"]["p50"]),
                cell(d["ttft_s"]["p99"]),
                cell(d["slo_attainment"]),
                cell(d["goodput_rps"]),
            ]
        )
    return line, header, rows


def model_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """A run of several models: one row per model from ``models.per_model`` (None otherwise):
    its requests, latency percentiles of its finished requests, SLO attainment over all its
    requests, goodput, and the pools, replicas and GPUs that serve it."""
    per = _get(summary, "models", "per_model")
    if not per:
        return None
    header = [
        "model",
        "base model",
        "pools",
        "replicas",
        "GPUs",
        "requests",
        "finished",
        "rejected",
        "TTFT p50 (s)",
        "TTFT p99 (s)",
        "TPOT p50 (s)",
        "TPOT p99 (s)",
        "E2E p50 (s)",
        "E2E p99 (s)",
        "SLO attainment",
        "goodput (req/s)",
    ]
    rows = []
    for name, d in per.items():
        rows.append(
            [
                name,
                cell(d.get("model")),
                ", ".join(d.get("pools") or []) or "-",
                cell(d.get("num_replicas")),
                cell(d.get("num_gpus")),
                cell(d.get("num_requests")),
                cell(d.get("num_finished")),
                cell(d.get("num_rejected")),
                *(cell(_get(d, m, q)) for m in ("ttft_s", "tpot_s", "e2e_s") for q in ("p50", "p99")),
                cell(d.get("slo_attainment")),
                cell(d.get("goodput_rps")),
            ]
        )
    return header, rows


def cell(x: Any) -> str:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return "-" if x is None else str(x)
    if isinstance(x, float | int | np.integer | np.floating):
        return _num(x, ",.4g")
    return str(x)


def ranked_order(cols: Columns) -> np.ndarray:
    """Row order of a plan's candidates table (``servesim plan``'s columns): ranked ones by
    ``rank``, then the unranked (missing the SLOs, pruned, failed) by ``margin``, nearest first."""
    n = len(next(iter(cols.values()))) if cols else 0
    rank = np.asarray(cols["rank"], np.float64) if "rank" in cols else np.full(n, np.nan)
    margin = np.asarray(cols["margin"], np.float64) if "margin" in cols else np.zeros(n)
    return np.lexsort((-np.nan_to_num(margin, nan=-np.inf), np.nan_to_num(rank, nan=np.inf)))


#: The columns a candidates table shows first (the rest follow in the file's order).
_FIRST = ("rank", "id", "label", "status", "meets_slo", "usd_per_hour")


def candidate_rows(cols: Columns) -> tuple[list[str], list[list[str]], int]:
    """Header, the first rows of the ranked candidates, and how many candidates there are."""
    header = [c for c in _FIRST if c in cols] + [c for c in cols if c not in _FIRST]
    order = ranked_order(cols)

    def value(c: str, i: int) -> str:
        v = cols[c][i]
        v = v.item() if hasattr(v, "item") else v
        if c in ("rank", "id") and isinstance(v, float) and v.is_integer():
            v = int(v)
        return cell(v)

    rows = [[value(c, i) for c in header] for i in order[:MAX_CANDIDATE_ROWS]]
    return header, rows, len(order)


def group_rows(doc: Any) -> tuple[list[str], list[list[str]]] | None:
    """The group table of ``silicon_groups.json`` (errors of each group of measured runs)."""
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups or not isinstance(groups[0], dict):
        return None
    header = list(groups[0])
    return header, [[cell(g.get(k)) for k in header] for g in groups]
