"""Short numbers for the console report (``metrics.console``): a dash for a figure that is
not there, three significant digits or none, and the units a reader expects (ms, %, GB)."""

from __future__ import annotations


def num(x: float | None) -> str:
    """A short number: 3 significant digits below 100, no decimals above."""
    if x is None:
        return "-"
    ax = abs(x)
    if ax >= 100:
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if ax >= 0.01 or ax == 0 else f"{x:.2g}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def ms(x: float | None) -> str:
    return "-" if x is None else num(1000 * x)


def si(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{num(x)} {unit}"


def duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{num(s)} s"


def gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"
