"""The curves the kernel tables are read through (``perf.kernels`` states the rule): log-log
interpolation one axis at a time (``log_curve``, ``gemm_m_curve``, ``ext_grid``), clamped off
the grid and scaled there by the roofline (``roof_time``); faulty GEMM points dropped
(``without_dips``); and ``LogCurve``, the per-token curve the step-time model reads on the
hot path, on an axis extended far past the measurements (``extended_axis``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from functools import partial
from math import exp, log

import numpy as np

RoofFn = Callable[[np.ndarray], np.ndarray]
Roof2 = Callable[[np.ndarray, np.ndarray], np.ndarray]


#: A measured GEMM this many times slower than the log-log interpolation of its two
#: neighbours along at least two of its axes is taken as a faulty measurement and dropped.
DIP_FACTOR = 2.0


def without_dips(lat: np.ndarray, axes: tuple[np.ndarray, ...], factor: float = DIP_FACTOR) -> np.ndarray:
    """``lat`` (a grid over ``axes``, NaN where not measured) with its dips set to NaN,
    repeatedly, so that a run of faulty points along one axis goes too."""
    limit = log(factor)
    v = np.log(np.where(np.isfinite(lat) & (lat > 0), lat, np.nan).astype(np.float64))
    for _ in range(4):
        slow = np.zeros(v.shape, np.int64)  # axes along which the point is a dip
        for ax, xs in enumerate(axes):
            if len(xs) < 3:
                continue
            lx = np.log(np.asarray(xs, np.float64))
            shape = [1] * v.ndim
            shape[ax] = len(xs) - 2
            w = ((lx[1:-1] - lx[:-2]) / (lx[2:] - lx[:-2])).reshape(shape)
            lo, mid, hi = (np.take(v, range(a, a + len(xs) - 2), axis=ax) for a in (0, 1, 2))
            with np.errstate(invalid="ignore"):
                dip = (mid - ((1 - w) * lo + w * hi)) > limit
            pad = [(0, 0)] * v.ndim
            pad[ax] = (1, 1)
            slow += np.pad(dip, pad)
        bad = slow >= 2
        if not bad.any():
            break
        v[bad] = np.nan
    return np.where(np.isfinite(v), lat, np.nan).astype(lat.dtype)


# --------------------------------------------------------------------------- interpolation


def log_curve(xs: np.ndarray, lat: np.ndarray, query: np.ndarray, roof: RoofFn) -> np.ndarray:
    """Log latency at ``query`` from measurements ``lat`` (NaN: missing) at sorted ``xs``.

    Linear in (log x, log latency) between measured points (a missing point is skipped);
    past both ends it follows the roofline ``roof`` (a vectorized time of the shape at x)
    from the nearest measured point:
    ``log lat(x) = log lat(x0) + log roof(x) - log roof(x0)``. All-NaN input gives NaN.
    """
    xs = np.asarray(xs, np.float64)
    lat = np.asarray(lat, np.float64)
    q = np.asarray(query, np.float64)
    ok = np.isfinite(lat) & (lat > 0)
    if not ok.any():
        return np.full(q.shape, np.nan)
    mx, my = np.log(xs[ok]), np.log(lat[ok])
    lq = np.log(q)
    out = np.interp(lq, mx, my)
    lo, hi = lq < mx[0], lq > mx[-1]
    if lo.any():
        out[lo] = my[0] + np.log(roof(q[lo])) - np.log(roof(np.array([xs[ok][0]])))[0]
    if hi.any():
        out[hi] = my[-1] + np.log(roof(q[hi])) - np.log(roof(np.array([xs[ok][-1]])))[0]
    return out


def log_axis_weights(axis: np.ndarray, x: float) -> tuple[list[tuple[int, float]], float]:
    """Corners and weights of ``x`` on ``axis`` in log space, and the clamped x (off the
    axis' range the edge point with weight 1; the caller scales by the roofline)."""
    xc = min(max(x, float(axis[0])), float(axis[-1]))
    i = int(np.searchsorted(axis, xc, side="right")) - 1
    if i >= len(axis) - 1 or axis[i] == xc:
        return [(min(i, len(axis) - 1), 1.0)], xc
    w = (log(xc) - log(float(axis[i]))) / (log(float(axis[i + 1])) - log(float(axis[i])))
    return [(i, 1.0 - w), (i + 1, w)], xc


def gemm_m_curve(
    table: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    n: int,
    k: int,
    query_m: np.ndarray,
    roof: Callable[[np.ndarray, float, float], np.ndarray],
) -> np.ndarray:
    """Log latency (ms) of an (m x k) @ (k x n) GEMM at every ``query_m``.

    Bilinear in (log n, log k) at each measured m (corners that were not measured drop out
    and the others' weights are renormalized), scaled by the roofline ratio where n or k
    lie outside the table, then ``log_curve`` along m. ``roof(m, n, k)`` is vectorized in m.
    """
    ms, ns, ks, lat = table
    wn, nc = log_axis_weights(ns, float(n))
    wk, kc = log_axis_weights(ks, float(k))
    acc = np.zeros(len(ms))
    wsum = np.zeros(len(ms))
    for i, a in wn:
        for j, b in wk:
            v = lat[:, i, j].astype(np.float64)
            ok = np.isfinite(v) & (v > 0)
            acc[ok] += a * b * np.log(v[ok])
            wsum[ok] += a * b
    with np.errstate(invalid="ignore", divide="ignore"):
        row = np.where(wsum > 0, np.exp(acc / np.where(wsum > 0, wsum, 1.0)), np.nan)
    msf = ms.astype(np.float64)
    if (nc, kc) != (n, k):  # off the table in n or k: scale by the roofline
        row = row * roof(msf, n, k) / roof(msf, nc, kc)
    return log_curve(msf, row, query_m, lambda m: roof(m, n, k))


def ext_grid(
    batch: np.ndarray,
    lens: np.ndarray,
    lat: np.ndarray,
    ext_batch: np.ndarray,
    ext_lens: np.ndarray,
    roof: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """Log latency (ms) of a (batch, length) grid on the extended axes ``ext_batch`` x
    ``ext_lens``: ``log_curve`` along batch in every measured length column, then along
    length in every row. ``roof(batch, length)`` is the roofline time, vectorized (broadcast)."""
    bf, lf = batch.astype(np.float64), lens.astype(np.float64)
    cols = np.empty((len(ext_batch), len(lf)))
    for j, length in enumerate(lf):
        cols[:, j] = log_curve(bf, lat[:, j], ext_batch, partial(_at_length, roof, float(length)))
    out = np.empty((len(ext_batch), len(ext_lens)))
    for i, b in enumerate(ext_batch):
        out[i] = log_curve(lf, np.exp(cols[i]), ext_lens, partial(_at_batch, roof, float(b)))
    return out


def _at_length(roof: Roof2, length: float, b: np.ndarray) -> np.ndarray:
    return roof(b, np.full_like(b, length))


def _at_batch(roof: Roof2, b: float, length: np.ndarray) -> np.ndarray:
    return roof(np.full_like(length, b), length)


def interp_sorted(xs: list[float], ys: list[float], x: float) -> float:
    """``np.interp(x, xs, ys)`` for one float (clamped at the ends), without numpy's overhead."""
    i = bisect_right(xs, x)
    if i <= 0:
        return ys[0]
    if i >= len(xs):
        return ys[-1]
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


class LogCurve:
    """A latency curve on a log grid: ``at(x) = exp(interp(log x))`` in seconds, clamped at
    the ends of ``xs`` (which the builder extends far past any realistic size)."""

    __slots__ = ("lx", "ly", "_lx", "_ly")

    def __init__(self, xs: np.ndarray, log_seconds: np.ndarray) -> None:
        self.lx = np.log(np.asarray(xs, np.float64))
        self.ly = np.asarray(log_seconds, np.float64)
        self._lx: list[float] = self.lx.tolist()
        self._ly: list[float] = self.ly.tolist()

    def at(self, x: float) -> float:
        return exp(interp_sorted(self._lx, self._ly, log(x)))

    def at_many(self, x: np.ndarray) -> np.ndarray:
        return np.exp(np.interp(np.log(x), self.lx, self.ly))


#: The largest token count the kernel model's per-token curves reach (extended_axis's ``hi``).
MAX_TOKENS = float(1 << 21)


def extended_axis(xs: np.ndarray, lo: float = 1.0, hi: float = float(1 << 22)) -> np.ndarray:
    """The measured axis plus powers of two down to ``lo`` and up to ``hi`` (the points where
    ``LogCurve`` holds the roofline-scaled values beyond the measurements)."""
    xs = np.asarray(xs, np.float64)
    first = int(np.ceil(np.log2(xs[0])))
    below = [2.0**e for e in range(int(np.floor(np.log2(lo))), first) if 2.0**e < xs[0]]
    above = [2.0**e for e in range(int(np.floor(np.log2(xs[-1]))) + 1, int(np.log2(hi)) + 1)]
    return np.array([*below, *xs.tolist(), *above])


# --------------------------------------------------------------------------- rooflines for scaling


def roof_time(
    flops: np.ndarray | float,
    nbytes: np.ndarray | float,
    peak: float,
    mem_bw: float,
    compute_eff: float,
    memory_eff: float,
) -> np.ndarray:
    """max(compute, memory) time, seconds, vectorized: the shape rule used off the grid."""
    return np.maximum(
        np.asarray(flops, np.float64) / (peak * compute_eff),
        np.asarray(nbytes, np.float64) / (mem_bw * memory_eff),
    )
