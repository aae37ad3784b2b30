"""Rate profiles: a time-varying multiplier m(t) of an arrival process's rate.

A profile turns a stationary process into a non-stationary one by **time rescaling**:
with Lambda(t) = integral_0^t m(u) du (the "operational time"), a process generated at
the base rate in operational time tau is mapped to real time t = Lambda^-1(tau).

* Poisson: the result is exactly the non-homogeneous Poisson process of intensity
  rate x m(t) (the time-rescaling theorem; Brown et al. 2002). The count in [a, b) is
  Poisson with mean rate x (Lambda(b) - Lambda(a)).
* Gamma / Weibull renewal gaps: the result is the renewal process run on the rescaled
  clock. The count in a window still has mean rate x (Lambda(b) - Lambda(a)) (renewal
  theorem, up to a boundary term of one gap), and the gaps keep their CV wherever m
  changes little over one gap; where m changes within a gap the gap is stretched or
  shrunk along the way, so the CV there is only approximately the configured one.
  Thinning would not keep the CV at all (thinning a renewal process pulls it towards 1).

Piecewise profiles have a closed-form inverse (m linear in each segment, so Lambda is
quadratic there); the diurnal cosine is inverted by bisection within one period,
vectorised, to machine precision. Every function takes and returns numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servesim.config import RateProfileConfig

DAY_S = 86400.0
_BISECTION_STEPS = 60  # halves one period 60 times: far below a float64 second at any period


@dataclass(frozen=True)
class RateProfile:
    """A compiled rate profile (see the module docstring). Build one with ``from_config``.

    Piecewise: segment i starts at ``knots[i]`` with multiplier ``m0[i]`` and slope
    ``slope[i]``; ``cum[i]`` is Lambda at ``knots[i]``. ``period_s`` None: the last segment
    runs forever at slope 0; else the knots end at ``period_s`` and the profile repeats.
    Diurnal: ``mid``, ``amp``, ``peak_at_s``, ``period_s``.
    """

    shape: str
    period_s: float | None
    knots: np.ndarray | None = None
    m0: np.ndarray | None = None
    slope: np.ndarray | None = None
    cum: np.ndarray | None = None
    mid: float = 1.0
    amp: float = 0.0
    peak_at_s: float = 0.0

    @classmethod
    def from_config(cls, cfg: RateProfileConfig) -> RateProfile:
        if cfg.shape == "diurnal":
            return cls(
                "diurnal",
                cfg.period_s or DAY_S,
                mid=(cfg.peak + cfg.trough) / 2.0,
                amp=(cfg.peak - cfg.trough) / 2.0,
                peak_at_s=cfg.peak_at_s,
            )
        t = np.array([p[0] for p in cfg.points], dtype=np.float64)
        m = np.array([p[1] for p in cfg.points], dtype=np.float64)
        if cfg.period_s is not None:  # close the period: linear wraps to m(0), step holds
            t = np.append(t, cfg.period_s)
            m = np.append(m, m[0] if cfg.interpolation == "linear" else m[-1])
        if cfg.interpolation == "step" or len(t) == 1:
            slope = np.zeros(len(t))
        else:
            slope = np.append(np.diff(m) / np.diff(t), 0.0)
        dt = np.diff(t)
        cum = np.concatenate([[0.0], np.cumsum(m[:-1] * dt + 0.5 * slope[:-1] * dt * dt)])
        return cls("points", cfg.period_s, knots=t, m0=m, slope=slope, cum=cum)

    # ------------------------------------------------------------------ one period

    @property
    def period_integral(self) -> float:
        """Lambda over one period (None period: inf)."""
        if self.period_s is None:
            return math.inf
        if self.shape == "diurnal":
            return self.mid * self.period_s
        assert self.cum is not None
        return float(self.cum[-1])

    def _split(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whole periods, time into the period) of ``t``."""
        if self.period_s is None:
            return np.zeros_like(t), t
        k = np.floor(t / self.period_s)
        return k, t - k * self.period_s

    # ------------------------------------------------------------------ public

    def multiplier(self, t: np.ndarray | float) -> np.ndarray:
        """m(t)."""
        t = np.asarray(t, dtype=np.float64)
        if self.shape == "diurnal":
            return self.mid + self.amp * np.cos(2.0 * np.pi * (t - self.peak_at_s) / self._diurnal_period_s())
        assert self.knots is not None and self.m0 is not None and self.slope is not None
        _, r = self._split(t)
        i = self._segment(r)
        return self.m0[i] + self.slope[i] * (r - self.knots[i])

    def cumulative(self, t: np.ndarray | float) -> np.ndarray:
        """Lambda(t) = integral of m from 0 to t (seconds at the base rate)."""
        t = np.asarray(t, dtype=np.float64)
        k, r = self._split(t)
        base = 0.0 if self.period_s is None else k * self.period_integral
        return base + self._within(r)

    def inverse(self, tau: np.ndarray | float) -> np.ndarray:
        """Lambda^-1(tau): the t with Lambda(t) = tau; where Lambda is flat (m = 0), the end
        of the flat stretch (no arrival falls in it); inf past a profile that ends at 0."""
        tau = np.asarray(tau, dtype=np.float64)
        if self.period_s is None:
            k, x = np.zeros_like(tau), tau
        else:
            k = np.floor(tau / self.period_integral)
            x = tau - k * self.period_integral
        r = self._diurnal_inverse(x) if self.shape == "diurnal" else self._points_inverse(x)
        return r if self.period_s is None else k * self.period_s + r

    # ------------------------------------------------------------------ inside a period

    def _diurnal_period_s(self) -> float:
        assert self.period_s is not None  # from_config gives a diurnal profile a period
        return self.period_s

    def _segment(self, r: np.ndarray) -> np.ndarray:
        assert self.knots is not None
        return np.clip(np.searchsorted(self.knots, r, side="right") - 1, 0, len(self.knots) - 1)

    def _within(self, r: np.ndarray) -> np.ndarray:
        """Lambda(r) for 0 <= r < period (or any r >= 0 without a period)."""
        if self.shape == "diurnal":
            w = 2.0 * np.pi / self._diurnal_period_s()
            return self.mid * r + self.amp / w * (
                np.sin(w * (r - self.peak_at_s)) + math.sin(w * self.peak_at_s)
            )
        assert self.knots is not None and self.cum is not None and self.m0 is not None
        assert self.slope is not None
        i = self._segment(r)
        dt = r - self.knots[i]
        return self.cum[i] + self.m0[i] * dt + 0.5 * self.slope[i] * dt * dt

    def _points_inverse(self, x: np.ndarray) -> np.ndarray:
        # side="right": a flat (m = 0) segment is skipped to the next one that rises.
        assert self.cum is not None and self.m0 is not None and self.slope is not None
        assert self.knots is not None
        i = np.clip(np.searchsorted(self.cum, x, side="right") - 1, 0, len(self.cum) - 1)
        if self.period_s is not None:
            i = np.minimum(i, len(self.cum) - 2)  # x < period integral: never the closing knot
        y = x - self.cum[i]
        m0, s = self.m0[i], self.slope[i]
        # m0 dt + s dt^2 / 2 = y, in the form that is stable for s -> 0 and s < 0.
        root = np.sqrt(np.maximum(m0 * m0 + 2.0 * s * y, 0.0))
        den = m0 + root
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = np.where(y <= 0.0, 0.0, np.where(den > 0.0, 2.0 * y / den, np.inf))
        return self.knots[i] + dt

    def _diurnal_inverse(self, x: np.ndarray) -> np.ndarray:
        lo = np.zeros_like(x)
        hi = np.full_like(x, self._diurnal_period_s())
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            below = self._within(mid) < x
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        return 0.5 * (lo + hi)
