"""Calibrated 80% prediction intervals of a run's latencies (docs/metrics.md, "Intervals").

Every prediction servesim makes stands in a **regime**, decided from what the step-time
model reports (``summary["step_time_model"]``, ``perf.describe``) and from the workload:

- ``kernel_grid``: the kernel database of the GPU, the run's vLLM version (major.minor),
  every operator from a table at a measured shape;
- ``other_shape``: a MoE or attention operator carried from the nearest measured class or
  outside the table's axis (``roofline-scaled``);
- ``other_version``: tables of another vLLM version than the run's (``engine.version``);
- ``other_gpu``: an operator read from another GPU's tables (H200 prefill on H100's, B300 on
  B200's served-MoE and MLA tables);
- ``roofline_fallback``: operators without a table, timed by the roofline;
- ``roofline``: no kernel tables at all (the roofline, a profile);

the first that applies in the order ``roofline``, ``roofline_fallback``, ``other_gpu``,
``other_shape``, ``other_version``, ``kernel_grid``. A workload that is not a closed loop of
benchmark clients is ``open_loop`` on top of its step-time regime.

Per regime the table ``data/prediction_intervals.json`` (``tools/fit_intervals.py``) holds the
10% and 90% quantiles of log(measured / predicted) of mean TTFT and mean TPOT over the
silicon suite's held-out predictions (``servesim validate --suite silicon --cross-group``:
each (model, GPU) group predicted with everything learned from the measured runs derived
again without it). A prediction ``p`` gets ``[p * exp(q10), p * exp(q90)]``, widened to hold
``p``. TTFT's quantiles bound every TTFT statistic (mean, P50, P90, P99), TPOT's bound TPOT and
ITL; E2E mixes them by the share of its mean that is TTFT; throughputs take the E2E bounds
inverted. The measured runs
report means only: the percentiles' intervals are the means' (an assumption, stated in the
docs). A regime with too few held-out runs (``MIN_RUNS``), and ``roofline``, which the
suite does not measure, takes the widest measured regime's quantiles; ``open_loop`` adds the
vLLM CPU engine's open-loop held-out quantiles (Poisson arrivals, its cross-fit) to its
step-time regime's.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from servesim.config import BenchmarkWorkload, Scenario, SessionWorkload

LEVEL = 0.8
QUANTILES = (0.1, 0.9)
TABLE_FILE = "prediction_intervals.json"
#: Regimes with fewer held-out runs than this take the widest measured regime's quantiles.
MIN_RUNS = 20
ORDER = ("roofline", "roofline_fallback", "other_gpu", "other_shape", "other_version", "kernel_grid")
GPU_NAMES = ("A100-80GB", "H100-SXM", "H200", "B200", "B300", "GB200", "L40S")
#: Operators whose carried shape or GPU sets the regime (the router GEMM and LM head are one
#: small GEMM each, carried in most runs: they do not).
_MAJOR = ("gemm_", "attn_", "moe", "mla")
_MINOR = ("gemm_router",)


def _minor(v: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except ValueError:
        return None


def step_regime(step: dict[str, Any], run_version: str | None) -> str:
    """The regime of one step-time model description (``perf.describe``) for a run of vLLM
    ``run_version`` (None: unspecified, the tables' own)."""
    warned = " ".join(step.get("warnings") or ())
    if step.get("kind") != "kernel_db" or "no kernel tables" in warned:
        return "roofline"
    if step.get("roofline_operators"):
        return "roofline_fallback"
    gpu = step.get("gpu", "")
    lines = [ln.strip() for ln in str(step.get("detail", "")).splitlines()[1:]]
    major = [ln for ln in lines if ln.startswith(_MAJOR) and not ln.startswith(_MINOR)]
    if any(name != gpu and (f"of {name}" in ln or f"on {name}" in ln) for ln in major for name in GPU_NAMES):
        return "other_gpu"
    sm100 = [ln for ln in major if ln.startswith(("moe", "attn_prefill"))]
    if gpu in ("B300", "GB200") and any("B200" in ln for ln in sm100):
        return "other_gpu"
    if any("roofline-scaled" in ln for ln in major):
        return "other_shape"
    table = _minor(step.get("engine_version"))
    if run_version is not None and (_minor(run_version) is None or _minor(run_version) != table):
        return "other_version"
    if any(" of vLLM " in ln for ln in major):
        return "other_version"
    return "kernel_grid"


def is_closed_loop(scenario: Scenario) -> bool:
    """A closed loop of benchmark clients (``type: benchmark`` with ``max_concurrency`` and
    every request due at once), or sessions whose turns wait for the last: what the measured
    runs are."""
    wl = scenario.workload
    if isinstance(wl, BenchmarkWorkload):
        return wl.max_concurrency is not None and math.isinf(wl.request_rate)
    return isinstance(wl, SessionWorkload) and wl.loop == "closed"


def regime_of(summary: dict[str, Any], scenario: Scenario) -> tuple[str, str]:
    """(regime, step-time regime) of a run: the widest of its pools' step-time regimes, and
    ``open_loop`` for a workload other than a closed loop of clients."""
    version = scenario.engine.version
    steps = summary.get("step_time_model") or [{}]
    found = [step_regime(s, version) for s in steps]
    base = min(found, key=ORDER.index)
    return ("open_loop" if not is_closed_loop(scenario) else base), base


@cache
def load_table() -> dict[str, Any]:
    """The bundled residual table (``tools/fit_intervals.py``)."""
    return json.loads(resources.files("servesim").joinpath("data", TABLE_FILE).read_text())


def _widest(regimes: dict[str, Any]) -> dict[str, Any]:
    measured = [r for r in regimes.values() if r.get("n", 0) >= MIN_RUNS]
    return max(measured, key=lambda r: (r["ttft"][1] - r["ttft"][0]) + (r["tpot"][1] - r["tpot"][0]))


def quantiles(regime: str, base: str, table: dict[str, Any] | None = None) -> dict[str, list[float]]:
    """log(measured / predicted) 10% and 90% quantiles of TTFT and TPOT for a regime."""
    t = table or load_table()
    regs = t["regimes"]
    r = regs.get(base)
    if base == "roofline" and (r is None or r.get("n", 0) < MIN_RUNS):
        r = _widest(regs)  # not measured by the suite: the widest measured regime's
    elif r is None or r.get("n", 0) < MIN_RUNS:
        r = regs["all"]
    out = {"ttft": list(r["ttft"]), "tpot": list(r["tpot"])}
    if regime == "open_loop" and "open_loop" in t:
        for m in ("ttft", "tpot"):
            add = t["open_loop"][m]
            out[m] = [out[m][0] + min(add[0], 0.0), out[m][1] + max(add[1], 0.0)]
    return out


def _bounds(value: float | None, q: list[float]) -> list[float] | None:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    lo, hi = value * math.exp(q[0]), value * math.exp(q[1])
    return [min(lo, value), max(hi, value)]


def _metric_q(q: dict[str, list[float]], metric: str, ttft_share: float | None = None) -> list[float]:
    """The log quantiles of a metric: TTFT's, TPOT's (TPOT, ITL), or for E2E the mix of the
    two by the share of the mean E2E that is TTFT (None: the wider of the two)."""
    if metric.startswith("ttft"):
        return q["ttft"]
    if metric.startswith(("tpot", "itl")):
        return q["tpot"]
    if ttft_share is None or not 0.0 <= ttft_share <= 1.0:
        return [min(q["ttft"][0], q["tpot"][0]), max(q["ttft"][1], q["tpot"][1])]
    f = ttft_share
    return [math.log(f * math.exp(q["ttft"][i]) + (1 - f) * math.exp(q["tpot"][i])) for i in (0, 1)]


def _share(ttft: Any, e2e: Any) -> float | None:
    ok = all(isinstance(x, (int, float)) and math.isfinite(x) for x in (ttft, e2e))
    return min(1.0, ttft / e2e) if ok and e2e > 0 else None


def interval_sections(summary: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """``intervals`` (and ``benchmark_intervals`` for a benchmark workload) of a summary."""
    regime, base = regime_of(summary, scenario)
    try:
        q = quantiles(regime, base)
    except FileNotFoundError:  # a source tree before tools/fit_intervals.py has written the table
        return {
            "intervals": {"level": LEVEL, "regime": regime, "step_regime": base, "unavailable": TABLE_FILE}
        }
    lat = summary.get("latency", {})
    out: dict[str, Any] = {"level": LEVEL, "regime": regime, "step_regime": base, "log_ratio_quantiles": q}
    share = _share((lat.get("ttft_s") or {}).get("mean"), (lat.get("e2e_s") or {}).get("mean"))
    for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        d = lat.get(metric) or {}
        qm = _metric_q(q, metric, share)
        out[metric] = {k: _bounds(d.get(k), qm) for k in ("mean", "p50", "p90", "p99") if k in d}
    sections = {"intervals": out}
    bench = summary.get("benchmark")
    if isinstance(bench, dict):
        b: dict[str, Any] = {}
        bshare = _share(bench.get("mean_ttft_ms"), bench.get("mean_e2el_ms"))
        for key, v in bench.items():
            if not key.endswith("_ms") or key.startswith("std_"):
                continue
            name = key.split("_")[1]
            b[key] = _bounds(v, _metric_q(q, {"e2el": "e2e"}.get(name, name), bshare))
        e2e = _metric_q(q, "e2e", bshare)
        for key in ("request_throughput", "output_throughput", "total_token_throughput"):
            v = bench.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                b[key] = [v / math.exp(max(e2e[1], 0.0)), v / math.exp(min(e2e[0], 0.0))]
        sections["benchmark_intervals"] = {"level": LEVEL, "regime": regime, **b}
    return sections


def upper_factors(summary: dict[str, Any]) -> dict[str, float]:
    """metric -> the factor (>= 1) taking a predicted latency to its interval's high end
    (``slo.confidence``): TTFT's for ttft_s and queue_s, TPOT's for tpot_s and itl_s, the
    wider for e2e_s. A summary without intervals (stored before them) takes the widest
    measured regime's."""
    ints = summary.get("intervals") or {}
    q = ints.get("log_ratio_quantiles")
    if q is None:
        r = _widest(load_table()["regimes"])
        q = {"ttft": r["ttft"], "tpot": r["tpot"]}
    out = {m: math.exp(max(_metric_q(q, m)[1], 0.0)) for m in ("ttft_s", "tpot_s", "itl_s", "e2e_s")}
    out["queue_s"] = out["ttft_s"]
    return out


# --------------------------------------------------------------------------- the table


def log_quantiles(x: np.ndarray) -> list[float]:
    """The 10% and 90% quantiles of finite log ratios (4 decimals)."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return [round(float(np.quantile(x, p)), 4) for p in QUANTILES]


def quantile_table(residuals: dict[str, dict[str, dict[str, list[float]]]]) -> dict[str, Any]:
    """``{"regimes": {regime: {"n", "ttft": [q10, q90], "tpot": [...]}}}`` from residuals
    (group -> regime -> {"ttft": [...], "tpot": [...]}: log measured / predicted), with
    ``all`` over every run. A regime's quantiles are never inside all runs' (the envelope of
    the two): which regime a run is in goes with its group, and the few groups of a regime
    say less about a new group than all of them."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for regs in residuals.values():
        for reg, r in regs.items():
            for key in (reg, "all"):
                p = pooled.setdefault(key, {"ttft": [], "tpot": []})
                p["ttft"] += r["ttft"]
                p["tpot"] += r["tpot"]
    own = {k: {m: log_quantiles(np.array(p[m])) for m in ("ttft", "tpot")} for k, p in sorted(pooled.items())}
    whole = own["all"]
    out: dict[str, Any] = {}
    for k, r in own.items():
        out[k] = {
            "n": len(pooled[k]["ttft"]),
            **{m: [min(r[m][0], whole[m][0]), max(r[m][1], whole[m][1])] for m in ("ttft", "tpot")},
        }
    return {"regimes": out}


def held_out_coverage(residuals: dict[str, dict[str, dict[str, list[float]]]]) -> dict[str, Any]:
    """Coverage of the intervals on held-out groups: for each group, the table
    (``quantile_table``) of the *other* groups' residuals, and the share of the group's own
    residuals inside its regime's quantiles; ``residuals``: group -> regime -> {"ttft": [...],
    "tpot": [...]} (log measured / predicted)."""
    hits = {"ttft": [0, 0], "tpot": [0, 0]}
    per_group = {}
    for g, regs in residuals.items():
        others = quantile_table({h: r for h, r in residuals.items() if h != g})
        gh = {"ttft": [0, 0], "tpot": [0, 0]}
        for reg, r in regs.items():
            q = quantiles(reg, reg, others)
            for m in ("ttft", "tpot"):
                x = np.asarray(r[m], float)
                gh[m][0] += int(np.sum((x >= q[m][0]) & (x <= q[m][1])))
                gh[m][1] += len(x)
        for m in ("ttft", "tpot"):
            hits[m][0] += gh[m][0]
            hits[m][1] += gh[m][1]
        per_group[g] = {m: round(gh[m][0] / gh[m][1], 3) if gh[m][1] else None for m in gh}
    share = {m: hits[m][0] / max(hits[m][1], 1) for m in hits}
    return {**share, "n": hits["ttft"][1], "groups": per_group}
