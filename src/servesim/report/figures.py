"""The plots of a report as plain data (``Plot``), drawn by either renderer: plotly.js in the
HTML page (``report.html``) or matplotlib for PNG/SVG files (``report.static``).

Every plot is built from summaries and sampled points (``report.sampling``), never one point
per request.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from servesim.report import sampling
from servesim.report.rundir import Columns, RunDir

#: The latency CDFs of a run: (metric, title), in milliseconds.
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))


@dataclass
class Trace:
    """One line, set of markers or set of bars of a plot."""

    name: str
    x: list[float] | list[str]
    y: list[float]
    kind: Literal["line", "markers", "bar"] = "line"
    text: list[str] | None = None  # hover text per point
    dash: bool = False


@dataclass
class Plot:
    """One figure: an id (its file name for PNG/SVG), axes and traces."""

    id: str
    title: str
    xlabel: str
    ylabel: str
    traces: list[Trace] = field(default_factory=list)
    log_x: bool = False
    log_y: bool = False


def _floats(a: np.ndarray) -> list[float]:
    """Plain floats at 6 significant digits (NaN -> None: a gap in the line)."""
    return [None if not np.isfinite(x) else float(f"{x:.6g}") for x in np.asarray(a, np.float64)]  # type: ignore[misc]


# --------------------------------------------------------------------------- latency CDFs


def latency_values(run: RunDir, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A latency's samples in seconds (and weights, for ITL), from the run's records."""
    req = run.tables["requests"]
    ok = np.asarray(req["status"]) == 0 if "status" in req else slice(None)
    arrival, first, finish = (
        np.asarray(req[c], np.float64)[ok] for c in ("arrival_s", "first_token_s", "finished_s")
    )
    n_out = np.asarray(req["num_output_tokens"], np.float64)[ok]
    if metric == "ttft":
        return first - arrival, None
    if metric == "e2e":
        return finish - arrival, None
    if metric == "tpot":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n_out > 1, (finish - first) / (n_out - 1), np.nan), None
    if "steps" not in run.tables:
        return np.empty(0), None
    return sampling.itl_from_steps(run.tables["steps"])


def cdf_plot(metric: str, title: str, runs: list[RunDir]) -> Plot:
    """One latency's CDF, one line per run (overlaid for a comparison)."""
    plot = Plot(
        f"cdf_{metric}",
        f"{title} CDF",
        f"{title} (ms)",
        "fraction of " + ("tokens" if metric == "itl" else "requests"),
        log_x=True,
    )
    for run in runs:
        values, weights = latency_values(run, metric)
        x, p = sampling.cdf(values * 1e3, weights)
        if x.size:
            plot.traces.append(Trace(run.label, _floats(x), _floats(p)))
    return plot


# --------------------------------------------------------------------------- time series


def replica_pools(summary: dict) -> list[str]:
    """The pool of each replica, in replica order ('' for a single-replica run)."""
    pools = summary.get("pools") or []
    names = [p["name"] for p in pools for _ in range(int(p.get("num_replicas", 0)))]
    n = len((summary.get("utilization") or {}).get("replicas") or [])
    return names if len(names) == n and names else [""] * max(n, 1)


def _blocks_per_pool(summary: dict) -> dict[str, float]:
    return {
        str(m.get("pool", "")): float(m["num_gpu_blocks"])
        for m in summary.get("memory") or []
        if m.get("num_gpu_blocks")
    }


def step_series_plots(run: RunDir) -> list[Plot]:
    """Arrivals and completions, queue, batch and KV use over time (binned), per pool."""
    req = run.tables["requests"]
    end = float((run.summary.get("counts") or {}).get("end_s") or np.nanmax(req["finished_s"]))
    edges = sampling.bin_edges(end)
    t = _floats(sampling.centers(edges))
    width = float(edges[1] - edges[0])
    flow = Plot("arrivals", f"Arrivals and completions ({width:g} s bins)", "time (s)", "requests/s")
    flow.traces = [
        Trace("arrivals", t, _floats(sampling.rate(req["arrival_s"], edges))),
        Trace("completions", t, _floats(sampling.rate(req["finished_s"], edges))),
    ]
    plots = [flow]
    steps = run.tables.get("steps")
    if not steps or not len(steps["start_s"]):
        return plots
    pools = np.array(replica_pools(run.summary), dtype=object)
    rep = np.asarray(steps["replica"], np.int64)
    blocks = _blocks_per_pool(run.summary)
    specs = [
        ("queue", "Waiting requests (sum over replicas)", "requests", "num_waiting", "sum"),
        ("batch", "Running requests per step (sum over replicas)", "requests", "num_running", "sum"),
        ("batch_tokens", "Tokens per step (mean over replicas)", "tokens", "tokens", "mean"),
        ("kv_use", "KV cache in use (mean over replicas)", "fraction of blocks", "kv", "mean"),
    ]
    for pid, title, ylabel, col, how in specs:
        plot = Plot(pid, f"{title}, {width:g} s bins", "time (s)", ylabel)
        for pool in dict.fromkeys(pools):
            per_rep = []
            for r in np.flatnonzero(pools == pool):
                m = rep == r
                if col == "tokens":
                    v = steps["num_prefill_tokens"][m] + steps["num_decode_reqs"][m]
                elif col == "kv":
                    if pool not in blocks:
                        continue
                    v = steps["kv_blocks_used"][m] / blocks[pool]
                else:
                    v = steps[col][m]
                per_rep.append(sampling.time_mean(steps["start_s"][m], steps["duration_s"][m], v, edges))
            if not per_rep:
                continue
            stack = np.vstack(per_rep)
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a bin no replica stepped in
                y = np.nansum(stack, axis=0) if how == "sum" else np.nanmean(stack, axis=0)
            plot.traces.append(Trace(pool or "replica", t, _floats(y)))
        if plot.traces:
            plots.append(plot)
    return plots


def timeseries_plots(ts: Columns) -> list[Plot]:
    """One plot per column of ``timeseries.*`` (t_s, pool, metrics...), one line per pool."""
    if "t_s" not in ts:
        return []
    t = np.asarray(ts["t_s"], np.float64)
    pool = np.asarray(ts["pool"], dtype=object) if "pool" in ts else np.full(t.shape, "", dtype=object)
    edges = sampling.bin_edges(float(np.nanmax(t)) if t.size else 1.0, float(np.nanmin(t)) if t.size else 0)
    plots = []
    for col, values in ts.items():
        if col in ("t_s", "pool") or np.asarray(values).dtype.kind not in "iufb":
            continue
        plot = Plot(f"ts_{col}", f"{col} (timeseries)", "time (s)", col)
        for name in dict.fromkeys(pool.tolist()):
            m = pool == name
            if m.sum() > sampling.MAX_BINS:
                x, y = sampling.centers(edges), sampling.bin_mean(t[m], values[m], edges)
            else:
                x, y = t[m], np.asarray(values[m], np.float64)
            plot.traces.append(Trace(str(name) or "all", _floats(x), _floats(y)))
        plots.append(plot)
    return plots


def utilization_plot(run: RunDir) -> Plot | None:
    """Busy fraction, MFU, MBU and mean KV use of each replica (cluster runs)."""
    reps = (run.summary.get("utilization") or {}).get("replicas") or []
    if len(reps) < 2:
        return None
    pools = replica_pools(run.summary)
    names = [f"{p or 'replica'} {i}" for i, p in enumerate(pools)]
    plot = Plot("utilization", "Utilization per replica", "replica", "fraction")
    for key, label in (("busy_fraction", "busy"), ("mfu", "MFU"), ("mbu", "MBU"), ("kv_mean", "KV mean")):
        y = [np.nan if r.get(key) is None else r[key] for r in reps]
        plot.traces.append(Trace(label, names, _floats(np.array(y, np.float64)), kind="bar"))
    return plot


# --------------------------------------------------------------------------- plans and validation


#: The outcomes of a plan's candidates (planner.search.candidate_metrics), in plot order after
#: the fronts' own metrics.
PLAN_OUTCOMES = (
    "e2e_p90_s",
    "j_per_output_token",
    "ttft_p90_s",
    "tpot_p90_s",
    "attainment",
    "goodput_rps",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "usd_per_million_output_tokens",
)
#: pareto.json's "among": which candidates its fronts were drawn from.
AMONG = {
    "meeting_slo": ", among those meeting the SLOs",
    "simulated": ", among all simulated: none meets the SLOs",
}
#: The keys of a front's row in pareto.json besides its metric.
_FRONT_KEYS = {"id", "label", "usd_per_hour"}


def pareto_fronts(doc: object) -> dict[str, tuple[str | None, list[str]]]:
    """(metric, candidate ids) of each front of pareto.json as ``servesim plan`` writes it:
    ``{"among": ..., "cost_vs_latency": [{"id", "label", "usd_per_hour", "e2e_p90_s"}, ...],
    "cost_vs_energy": [...]}``; a front's metric is the key of its rows besides id, label and
    cost (None for a front of bare ids)."""
    if not isinstance(doc, dict):
        return {}
    out: dict[str, tuple[str | None, list[str]]] = {}
    for name, items in doc.items():
        if not isinstance(items, list):
            continue  # "among": which candidates the fronts were drawn from
        metric = next((k for it in items if isinstance(it, dict) for k in it if k not in _FRONT_KEYS), None)
        out[str(name)] = (metric, [str(it.get("id")) if isinstance(it, dict) else str(it) for it in items])
    return out


def plan_plots(run: RunDir) -> list[Plot]:
    """Each outcome against cost per hour, candidates meeting the SLO apart from those missing
    it (pruned and failed ones have no outcome), each Pareto front on its metric's plot."""
    cols = run.tables.get("candidates") or {}
    if "usd_per_hour" not in cols:
        return []
    cost = np.asarray(cols["usd_per_hour"], np.float64)
    ids = [
        str(int(x)) if isinstance(x, float | np.floating) and np.isfinite(x) else str(x)
        for x in cols.get("id", np.arange(cost.size))
    ]
    desc = [str(x) for x in cols.get("label", ids)]
    meets = np.asarray(cols["meets_slo"], bool) if "meets_slo" in cols else np.ones(cost.size, bool)
    fronts = pareto_fronts(run.documents.get("pareto"))
    row = {c: i for i, c in enumerate(ids)}
    doc = run.documents.get("pareto")
    among = doc.get("among") if isinstance(doc, dict) else None
    front_metrics = [m for m, _ in fronts.values() if m]
    plots = []
    for metric in dict.fromkeys([*front_metrics, *PLAN_OUTCOMES]):
        if metric not in cols or np.asarray(cols[metric]).dtype.kind not in "iuf":
            continue
        y = np.asarray(cols[metric], np.float64)
        has = np.isfinite(cost) & np.isfinite(y)
        if not has.any():
            continue
        plot = Plot(f"pareto_{metric}", f"{metric} against cost", "cost per hour ($)", metric)
        for label, mask in (("meets SLO", meets & has), ("misses SLO", ~meets & has)):
            if mask.any():
                plot.traces.append(
                    Trace(
                        label,
                        _floats(cost[mask]),
                        _floats(y[mask]),
                        kind="markers",
                        text=[f"{i}: {d}" for i, d, m in zip(ids, desc, mask) if m],
                    )
                )
        for name, (fm, front) in fronts.items():
            if fm != metric:
                continue
            k = sorted((row[c] for c in front if c in row), key=lambda i: cost[i])
            if k:
                label = f"Pareto front ({name}{AMONG.get(str(among), '')})"
                plot.traces.append(
                    Trace(
                        label,
                        _floats(cost[k]),
                        _floats(y[k]),
                        text=[f"{ids[i]}: {desc[i]}" for i in k],
                        dash=True,
                    )
                )
        plots.append(plot)
    return plots[:8]


def validation_plots(run: RunDir) -> list[Plot]:
    """Predicted against measured TTFT and TPOT, one marker set per group, and the y = x line."""
    cols = run.tables.get("silicon_runs") or {}
    if not cols:
        return []
    skipped = np.array([bool(str(s).strip()) and str(s) != "None" for s in cols.get("skipped", [])], bool)
    run_rows = ~skipped if skipped.size else np.ones(len(next(iter(cols.values()))), bool)
    groups = np.asarray(cols.get("group", np.full(run_rows.size, "all")), dtype=object)
    plots = []
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT")):
        meas = np.asarray(cols.get(f"measured_{metric}_ms", []), np.float64)
        pred = np.asarray(cols.get(f"predicted_{metric}_ms", []), np.float64)
        if not meas.size:
            continue
        plot = Plot(
            f"validate_{metric}",
            f"{label}: predicted against measured",
            f"measured {label} (ms)",
            f"predicted {label} (ms)",
            log_x=True,
            log_y=True,
        )
        ok = run_rows & np.isfinite(meas) & np.isfinite(pred) & (meas > 0) & (pred > 0)
        for g in dict.fromkeys(groups[ok].tolist()):
            m = ok & (groups == g)
            err = 100 * (pred[m] / meas[m] - 1)
            plot.traces.append(
                Trace(
                    str(g),
                    _floats(meas[m]),
                    _floats(pred[m]),
                    kind="markers",
                    text=[f"{str(g)}: {e:+.1f}%" for e in err],
                )
            )
        if ok.any():
            lo, hi = float(min(meas[ok].min(), pred[ok].min())), float(max(meas[ok].max(), pred[ok].max()))
            plot.traces.append(Trace("predicted = measured", [lo, hi], [lo, hi], dash=True))
        plots.append(plot)
    return plots


def capacity_plots(run: RunDir) -> list[Plot]:
    """SLO attainment and latency of each probed rate, passing and failing probes apart."""
    cols = run.tables.get("probes") or {}
    if "rate_rps" not in cols:
        return []
    rate = np.asarray(cols["rate_rps"], np.float64)
    meets = np.asarray([str(x).lower() == "true" for x in cols.get("meets", [])], bool)
    plots = []
    for metric, title, unit, scale in (
        ("attainment", "SLO attainment", "fraction of requests", 1.0),
        ("ttft_p99_s", "TTFT p99", "ms", 1e3),
        ("tpot_p99_s", "TPOT p99", "ms", 1e3),
    ):
        if metric not in cols:
            continue
        y = np.asarray(cols[metric], np.float64) * scale
        traces = [
            Trace(name, _floats(rate[m]), _floats(y[m]), "markers")
            for name, m in (("meets the SLO", meets), ("misses", ~meets))
            if m.any()
        ]
        plots.append(
            Plot(
                f"capacity_{metric}",
                f"{title} by arrival rate",
                "arrival rate (req/s)",
                unit,
                traces,
                log_x=True,
            )
        )
    return plots


def run_plots(run: RunDir) -> list[Plot]:
    """Every plot of one output folder, by its kind."""
    if run.kind == "plan":
        return plan_plots(run)
    if run.kind == "capacity":
        return capacity_plots(run)
    if run.kind == "validate":
        return validation_plots(run)
    plots = [cdf_plot(m, title, [run]) for m, title in LATENCIES]
    plots = [p for p in plots if p.traces]
    plots += step_series_plots(run)
    if "timeseries" in run.tables:
        plots += timeseries_plots(run.tables["timeseries"])
    util = utilization_plot(run)
    return plots + ([util] if util else [])
