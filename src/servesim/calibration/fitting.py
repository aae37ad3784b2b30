"""Bounded least-squares fitting of the roofline's efficiencies (``servesim calibrate``).

The fit minimises the log error of predicted against measured times over the chosen
parameters, within physical bounds; GEMM tiles are a discrete choice tried in turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesim.errors import ServesimError
from servesim.perf.roofline import Efficiencies
from servesim.perf.work_terms import Terms, predict

#: Bounds of every fittable parameter: efficiencies in (0, 1], overheads >= 0 (seconds).
BOUNDS: dict[str, tuple[float, float]] = {
    **{
        f.name: (0.01, 1.0)
        for f in dataclasses.fields(Efficiencies)
        if not f.name.endswith("_s") and not f.name.startswith("gemm_tile_")
    },
    "allreduce_latency_s": (0.0, 1e-3),
    "launch_overhead_s": (0.0, 0.1),
    "kernel_overhead_s": (0.0, 1e-3),
    "gemm_kernel_overhead_s": (0.0, 1e-3),
    "roof_blend": (0.0, 1.0),
    "row_pass_s": (0.0, 1e-5),
    "allreduce_hop_s": (0.0, 1e-4),
    "cpu_overhead_s": (0.0, 1.0),
}


#: Output tiles (tokens x outputs) of cuBLAS/CUTLASS GEMM kernels that operator fits try for
#: wave quantisation; (0, 0) is none (the ideal FLOPs).
GEMM_TILES: tuple[tuple[int, int], ...] = (
    (0, 0),
    (64, 64),
    (64, 128),
    (128, 64),
    (128, 128),
    (128, 256),
    (256, 128),
)


#: A GEMM tile is adopted only if it lowers the squared log error of the fit without one by at
#: least this fraction: a smaller gain is within what the continuous parameters absorb, and
#: does not carry over (Vidur's A100 operators: 64x64 tiles gain 3%, MAPE 5.5% instead of 5.7%,
#: but predict DistServe's OPT times 1-3 points worse).
MIN_TILE_GAIN = 0.05


class CalibrationError(ServesimError):
    """The measurements cannot be fitted (too few rows, nothing to fit, scipy missing)."""


# --------------------------------------------------------------------------- fitting


#: A fitted efficiency whose halving moves no prediction by more than this (%) is reported as
#: weakly constrained by the measurements.
WEAK_PCT = 2.0

#: ``fit_warnings``' rules. A fitted parameter within this fraction of its bounds' range of
#: a bound sits at the bound (a bounded fit that runs into one ends on it; a looser rule would
#: flag real sub-microsecond overheads, whose range is 0-1 ms): the fit wanted it beyond what
#: is physical (or than the bound allows), so another parameter absorbs the rest and the
#: profile extrapolates poorly.
AT_BOUND_FRAC = 1e-6
#: A fit whose R^2 (on seconds) is below this explains little of the measurements' spread.
MIN_R2 = 0.9
#: Fewer usable measurements than this many per fitted parameter are few: each parameter
#: rests on a handful of points, and a point's noise moves it.
MIN_POINTS_PER_PARAM = 5


@dataclass(slots=True)
class FitResult:
    """Fitted parameters and how well they explain the measurements."""

    eff: Efficiencies
    cpu_overhead_s: float
    params: dict[str, float]  # the fitted ones only
    measured_s: np.ndarray
    predicted_s: np.ndarray
    labels: list[str]
    #: Other discrete choices tried (e.g. GEMM tiles "128x64", "none") -> their MAPE %.
    alternatives: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Fitted efficiency -> the largest change (%) of any prediction when it is halved: how
    #: much these measurements constrain it (near 0: they say almost nothing about it).
    sensitivity_pct: dict[str, float] = dataclasses.field(default_factory=dict)

    def at_bounds(self) -> list[str]:
        """Fitted parameters at (within ``AT_BOUND_FRAC`` of the range of) a bound of ``BOUNDS``."""
        out = []
        for n, v in self.params.items():
            lo, hi = BOUNDS[n]
            tol = AT_BOUND_FRAC * (hi - lo)
            if v <= lo + tol or v >= hi - tol:
                out.append(n)
        return out

    def warnings(self) -> list[str]:
        """``fit_warnings`` of this fit."""
        return fit_warnings(self)

    def weakly_constrained(self, threshold_pct: float = WEAK_PCT) -> list[str]:
        """Fitted efficiencies whose halving moves no prediction by more than threshold_pct:
        the fit says little about them, so a profile should not be trusted where they matter
        (other shapes, longer contexts)."""
        return [n for n, v in self.sensitivity_pct.items() if v < threshold_pct]

    @property
    def rel_err(self) -> np.ndarray:
        return self.predicted_s / self.measured_s - 1.0

    def quality(self) -> dict[str, float]:
        return fit_quality(self.measured_s, self.predicted_s)

    def worst(self, k: int = 5) -> list[tuple[str, float, float, float]]:
        """(label, measured s, predicted s, relative error) of the k largest errors."""
        idx = np.argsort(-np.abs(self.rel_err))[:k]
        return [
            (self.labels[i], float(self.measured_s[i]), float(self.predicted_s[i]), float(self.rel_err[i]))
            for i in idx
        ]


def fit_warnings(res: FitResult) -> list[str]:
    """What a user should know before trusting the fit, one sentence each (empty: nothing):

    - a fitted parameter at a bound (``FitResult.at_bounds``);
    - R^2 (on seconds) below ``MIN_R2``: the fit explains little of the measurements;
    - fewer than ``MIN_POINTS_PER_PARAM`` usable measurements per fitted parameter.
    """
    out = []
    for n in res.at_bounds():
        lo, hi = BOUNDS[n]
        v = res.params[n]
        side = "lower" if v - lo <= hi - v else "upper"
        out.append(
            f"{n} = {v:.4g} sits at its {side} bound ({lo:g}..{hi:g}): the measurements push it "
            "past what the bounds allow, so other parameters absorb the rest and the profile "
            "extrapolates poorly where it matters"
        )
    r2 = res.quality()["r2"]
    if not r2 >= MIN_R2:  # (nan: the measurements have no spread to explain)
        out.append(f"R2 {r2:.3f} is below {MIN_R2:g}: the fit explains little of the measured times")
    n_ok, k = int(np.sum(res.measured_s > 0)), len(res.params)
    if n_ok < MIN_POINTS_PER_PARAM * k:
        out.append(
            f"{n_ok} measurements for {k} fitted parameters (fewer than {MIN_POINTS_PER_PARAM} "
            "per parameter): each parameter rests on few points, and their noise moves it"
        )
    return out


def fit_cost(res: FitResult) -> float:
    """The least-squares objective of a fit: sum of log(predicted / measured)^2."""
    ok = res.measured_s > 0
    return float(np.sum(np.log(np.maximum(res.predicted_s[ok], 1e-15) / res.measured_s[ok]) ** 2))


def fit_quality(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """R^2 (on seconds), MAPE, median and max absolute percentage error, P90 error, n."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    ape = np.abs(predicted / measured - 1.0) * 100
    ss_res = float(np.sum((measured - predicted) ** 2))
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    return {
        "n": float(len(measured)),
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        "mape_pct": float(ape.mean()),
        "median_ape_pct": float(np.median(ape)),
        "p90_ape_pct": float(np.percentile(ape, 90)),
        "max_ape_pct": float(ape.max()),
    }


def fit(
    terms: Terms,
    measured_s: np.ndarray,
    names: Sequence[str],
    base: Efficiencies | None = None,
    base_cpu_overhead_s: float = 0.0,
    labels: Sequence[str] | None = None,
) -> FitResult:
    """Least-squares fit of the parameters ``names`` (Efficiencies fields or "cpu_overhead_s").

    Minimizes sum of log(predicted / measured)^2 within ``BOUNDS``; the other parameters
    stay at ``base``. Needs scipy (``pip install servesim[calibrate]``).
    """
    try:
        import scipy.optimize  # noqa: F401 - _solve's least squares
    except ImportError:
        raise CalibrationError("calibration needs scipy: pip install 'servesim[calibrate]'") from None
    base = base or Efficiencies()
    measured_s = np.asarray(measured_s, float)
    ok = _usable(terms, measured_s, names)
    p, cpu, fitted = _solve(terms, measured_s, ok, names, _start(base, names), base_cpu_overhead_s)
    eff = Efficiencies(**p)
    pred = predict(terms, eff, cpu)
    return FitResult(
        eff,
        cpu,
        fitted,
        measured_s,
        pred,
        list(labels) if labels else [str(i) for i in range(len(measured_s))],
        sensitivity_pct=_sensitivity(terms, p, cpu, names, ok, pred),
    )


def _solve(
    terms: Terms,
    measured_s: np.ndarray,
    ok: np.ndarray,
    names: Sequence[str],
    start: dict[str, Any],
    base_cpu_overhead_s: float,
) -> tuple[dict[str, Any], float, dict[str, float]]:
    """Bounded least squares on log(predicted / measured) of the usable rows ``ok``, from
    ``start``: (Efficiencies' fields at the fit, the CPU time per step, the fitted values
    by name)."""
    from scipy.optimize import least_squares

    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    # Overheads are fitted in microseconds so every parameter has a similar scale.
    scale = np.array([1e-6 if n.endswith("_s") else 1.0 for n in names])
    x0 = np.array([base_cpu_overhead_s if n == "cpu_overhead_s" else start[n] for n in names], float)
    x0 = np.clip(x0, lo + 1e-9, hi) / scale
    log_meas = np.log(measured_s[ok])

    def unpack(x: np.ndarray) -> tuple[dict[str, Any], float]:
        """(Efficiencies' fields by name: floats, tile sizes, None for unset overrides; the
        CPU time per step) at the point ``x``."""
        p = dict(start)
        cpu = base_cpu_overhead_s
        for n, v in zip(names, x * scale):
            if n == "cpu_overhead_s":
                cpu = float(v)
            else:
                p[n] = float(v)
        return p, cpu

    def residuals(x: np.ndarray) -> np.ndarray:
        p, cpu = unpack(x)
        pred = predict(terms, p, cpu)[ok]
        return np.log(np.maximum(pred, 1e-15)) - log_meas

    res = least_squares(
        residuals,
        x0,
        bounds=(lo / scale, hi / scale),
        x_scale=1.0,
        method="trf",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=2000,
    )
    p, cpu = unpack(res.x)
    return p, cpu, {n: float(v) for n, v in zip(names, res.x * scale)}


def _usable(terms: Terms, measured_s: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """The measurements a fit can use (> 0), refused where they cannot determine ``names``."""
    if len(measured_s) != len(terms):
        raise CalibrationError(f"{len(terms)} work rows but {len(measured_s)} measurements")
    ok = measured_s > 0
    if ok.sum() < len(names) + 1:
        raise CalibrationError(
            f"{int(ok.sum())} usable measurements cannot determine {len(names)} parameters"
        )
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise CalibrationError(f"unknown parameters {unknown}; fittable: {sorted(BOUNDS)}")
    return ok


def _start(base: Efficiencies, names: Sequence[str]) -> dict[str, Any]:
    """The fit's starting point: ``base``, with the unset overrides being fitted started at
    what they override (a per-GEMM efficiency at the linear one, the GEMM launch overhead at
    the kernel one) and a fitted roof blend started off its maximum."""
    start = dataclasses.asdict(base)
    for k in list(start):
        if k.startswith(("proj_", "mlp_", "lm_head_")) and start[k] is None and k in names:
            start[k] = start["linear_" + k.rsplit("_", 1)[1]]
    if start["gemm_kernel_overhead_s"] is None and "gemm_kernel_overhead_s" in names:
        start["gemm_kernel_overhead_s"] = start["kernel_overhead_s"]
    if not start["roof_blend"] and "roof_blend" in names:
        start["roof_blend"] = 0.2  # from the max itself the gradient is zero
    return start


def _sensitivity(
    terms: Terms,
    p: dict[str, Any],
    cpu: float,
    names: Sequence[str],
    ok: np.ndarray,
    pred: np.ndarray,
) -> dict[str, float]:
    """Per fitted efficiency (not the overheads): the largest change, in %, of a usable
    prediction when it is halved."""
    sensitivity = {}
    for n in names:
        if n.endswith("_s"):
            continue
        halved = predict(terms, {**p, n: p[n] / 2}, cpu)
        sensitivity[n] = float(np.max(np.abs(halved[ok] / pred[ok] - 1.0)) * 100)
    return sensitivity


def fit_tiles(
    terms: Terms,
    measured_s: np.ndarray,
    names: Sequence[str],
    tiles: Sequence[tuple[int, int]] = GEMM_TILES,
    base: Efficiencies | None = None,
    labels: Sequence[str] | None = None,
) -> FitResult:
    """``fit`` once per GEMM tile of wave quantisation ((0, 0): none); the fit with the least
    squared log error wins (a tile must beat none by ``MIN_TILE_GAIN``), and its
    ``alternatives`` give every tile's MAPE."""
    best, best_cost, tried, none = None, np.inf, {}, None
    for tm, tn in tiles:
        b = dataclasses.replace(base or Efficiencies(), gemm_tile_m=tm, gemm_tile_n=tn)
        res = fit(terms, measured_s, names, base=b, labels=labels)
        cost = fit_cost(res)
        tried[f"{tm}x{tn}" if tm else "none"] = round(res.quality()["mape_pct"], 3)
        if not tm:
            none = (res, cost)
        if cost < best_cost:
            best, best_cost = res, cost
    if best is None:
        raise CalibrationError("no GEMM tiles to try")
    if none is not None and best_cost > (1.0 - MIN_TILE_GAIN) * none[1]:
        best = none[0]
    if len(tried) > 1:
        best.alternatives = tried
    return best
