"""When requests arrive: the arrival process and its rate profile over time."""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from servesim.config._base import _Strict

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([smhd]?)\s*$")


def seconds(value: object) -> object:
    """A duration in seconds: a number, or text with a unit ('90s', '30m', '8h', '1.5d')."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"expected seconds or a duration such as '30m', '8h', '1d', found {value!r}")
        return float(m.group(1)) * _UNITS_S[m.group(2) or "s"]
    return value


#: Seconds, written as a number or with a unit (s, m, h, d).
Seconds = Annotated[float, BeforeValidator(seconds)]


class RateProfileConfig(_Strict):
    """A multiplier of ``arrival.rate`` over time: the intensity at time t is rate x m(t).

    ``points``: ``[[t, m], ...]`` with t in seconds (or '8h'), starting at 0, increasing;
    ``linear`` interpolates between points, ``step`` holds each multiplier until the next
    point. Past the last point the last multiplier holds, or with ``period_s`` the profile
    repeats (linear wraps from the last point back to the first value at t = period_s).
    ``diurnal``: m(t) = mid + amp cos(2 pi (t - peak_at_s) / period_s) with
    mid = (peak + trough) / 2 and amp = (peak - trough) / 2.
    """

    shape: Literal["points", "diurnal"] = Field(
        "points",
        description=(
            "points: piecewise multipliers from 'points'; diurnal: a cosine between trough and peak."
        ),
    )
    points: list[tuple[Seconds, float]] = Field(
        default_factory=lambda: [(0.0, 1.0)],
        description=("points: [[t_s, multiplier], ...], first t 0, t increasing, multipliers >= 0."),
    )
    interpolation: Literal["linear", "step"] = Field(
        "linear",
        description=("points: linear between points, or step (each multiplier holds until the next point)."),
    )
    period_s: Seconds | None = Field(
        None,
        gt=0,
        description=(
            "Repeat the profile with this period (points: None holds the last multiplier; "
            "diurnal: None is one day, 86400 s)."
        ),
    )
    peak: float = Field(1.0, gt=0, description="diurnal: the largest multiplier.")
    trough: float = Field(0.3, ge=0, description="diurnal: the smallest multiplier.")
    peak_at_s: Seconds = Field(14 * 3600.0, ge=0, description="diurnal: when in the period the peak is.")

    @model_validator(mode="after")
    def _check(self) -> RateProfileConfig:
        # A field of the other shape is not read: say so rather than ignore it (compared with
        # its default, so that a whole dump of the config validates again).
        unread = ("points", "interpolation") if self.shape == "diurnal" else ("peak", "trough", "peak_at_s")
        fields = type(self).model_fields
        given = [f for f in unread if getattr(self, f) != fields[f].get_default(call_default_factory=True)]
        if given:
            raise ValueError(
                f"{', '.join(given)}: not read with shape {self.shape} (a field of shape "
                f"{'points' if self.shape == 'diurnal' else 'diurnal'}); remove it or set that shape"
            )
        if self.shape == "diurnal":
            if self.trough > self.peak:
                raise ValueError(f"expected trough <= peak, found trough={self.trough} > peak={self.peak}")
            return self
        times = [t for t, _ in self.points]
        if not times or times[0] != 0.0:
            raise ValueError("points: the first point must be at t=0")
        if any(b <= a for a, b in zip(times, times[1:])):
            raise ValueError(f"points: times must increase strictly, found {times}")
        if any(m < 0 or not math.isfinite(m) for _, m in self.points):
            raise ValueError("points: multipliers must be finite and >= 0")
        if self.period_s is not None and times[-1] >= self.period_s:
            raise ValueError(
                f"points: with period_s={self.period_s:g} every point must be before it, "
                f"found t={times[-1]:g}"
            )
        if all(m == 0 for _, m in self.points):
            raise ValueError("points: every multiplier is 0, no request would ever arrive")
        return self


class ArrivalConfig(_Strict):
    """When requests arrive."""

    process: Literal["poisson", "gamma", "weibull", "constant", "burst"] = Field(
        "poisson",
        description=(
            "poisson; gamma or weibull renewal gaps (with cv); constant spacing; burst = all at t=0."
        ),
    )
    rate: float = Field(
        1.0,
        gt=0,
        description="Mean arrivals per second (times the rate profile).",
        json_schema_extra={"unit": "requests/s"},
    )
    cv: float = Field(
        1.0, gt=0, description="gamma/weibull: coefficient of variation of inter-arrival times."
    )
    rate_profile: RateProfileConfig | None = Field(
        None,
        description=("Multiply the rate over time (docs/workloads.md, Rate profiles); None: constant rate."),
    )

    @model_validator(mode="after")
    def _check(self) -> ArrivalConfig:
        if self.process == "burst" and self.rate_profile is not None:
            raise ValueError("process burst puts every request at t=0: a rate_profile does not apply")
        if self.process == "weibull" and not 0.05 <= self.cv <= 20.0:
            raise ValueError(f"weibull: expected 0.05 <= cv <= 20, found {self.cv}")
        return self


class DelayDist(_Strict):
    """A duration drawn per use: a think time between turns, a tool call's wait."""

    kind: Literal["constant", "exponential", "gamma", "lognormal"] = Field(
        "exponential",
        description=("constant (mean_s); exponential (mean_s); gamma or lognormal (mean_s and cv)."),
    )
    mean_s: Seconds = Field(10.0, ge=0, description="Mean duration, seconds.")
    cv: float = Field(1.0, gt=0, description="gamma/lognormal: coefficient of variation.")
